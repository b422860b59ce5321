"""Forced-decoding speed of global and flexible attention (Flexible Attention 2017, Table 3).

    python benchmarks/decode_speed.py                       # subword and char level, 2 threads
    python benchmarks/decode_speed.py --levels subword --sentences 300 --rounds 7
    python benchmarks/decode_speed.py --levels char         # after make char

The reference translations of the first ``--sentences`` test pairs are fed back through the
decoder (``flexatt.decoding.forced_decode``, as the pipeline's evaluate stage calls it: the kernel
backend, ``flexatt.decoding.kernel``, the recurrence in one compiled call per batch and the readout
once over all steps) by the **global** model and by the **fine-tuned flexible** model at its
**selected τ**, so both decode exactly the same steps with the same code and only the attention
differs. The eager path (``backend="eager"``: ``model.decode_step`` once per step, the decoding
code of greedy and beam search) is timed in the same rotation (``--no-eager`` leaves it out). Per
level it prints, for each model: ms per sentence at batch size 1 (the paper's per-sentence
latency) and at batched sizes (default ``--batch-sizes 1 50 200``: 50 is the pipeline's
``decode.batch_size``); the global/flexible ratio
(> 1: flexible is faster); the mean window (positions scored per step, counted in the scoring
path) and the share of the decoding time spent in the attention module.

Side by side: each round decodes every sentence (batch) with both models, back to back, the
order alternating from sentence to sentence and from round to round, so that load from
elsewhere on the machine falls on both; the figures are the median over ``--rounds`` rounds and
the spread (min–max) of the per-round values; the ratio is the median of the per-round ratios.
A warm-up pass precedes the rounds.

Attention share: separate passes per batch size (the kernel; the fastest of three counts) in
which the kernel clocks its own
phases (``flexatt.decoding.kernel.PhaseTimer``: the query products W_q h and W_g h, g_t, the vision span,
scoring, softmax, context and p_t of every step) and ``precompute`` (the key projection U_k h̄,
once per sentence) is wrapped with a ``perf_counter`` timer (``_common.AttentionTimer``, which
also times the eager attention module's ``forward`` where that runs); the share is their time over
the whole ``forced_decode`` call (encoder, LSTM, readout and bookkeeping make up the rest). The
table's share column is batch size 1's; the "time split" lines give every batch size's
milliseconds per sentence of attention and of the rest.
``--profile`` adds a
``torch.profiler`` pass over the eager path with ``record_function`` ranges around the same calls and prints the
ops that take the most self CPU time, as a cross-check.

Subword level: the default pipeline's checkpoints (``artifacts/models/global/best.ckpt``,
``artifacts/models_ft/flexible/best.ckpt``) and ``results/sweep_tau.json`` →
``models.flexible_ft.selected_tau``, on ``artifacts/tok/test.npz``.

Character level: the char profile's models (``conf/profile/char.yaml``: the same corpus, filter
and sizes with a SentencePiece ``char`` vocabulary, trained and fine-tuned as the default
pipeline does), from its pipeline's run (``make char``: ``pipelines/char/``, models in
``artifacts/char/``); τ is the one its sweep_tau stage selected on dev. The timed
sentences are the same test pairs as at subword level.

Targets (the issue): at char level the flexible model at its selected τ is at least 1.3x as
fast as global; at subword level it is never slower. The verdict is printed at the end.
Results are also written to ``--out`` (JSON).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as B  # noqa: E402

from flexatt.config import load_params  # noqa: E402
from flexatt.data.subwords import EncodedSplit  # noqa: E402
from flexatt.checkpoints import load_model  # noqa: E402
from flexatt.decoding import forced_decode  # noqa: E402

MODELS = ("global", "flexible_ft")


def decode(model, batch, tau, kernel=True):
    """Forced decoding of ``batch`` on the kernel (``kernel``) or the eager backend."""
    return forced_decode(model, batch.src, batch.src_len, batch.tgt_in, batch.tgt_out, tau=tau,
                         backend="kernel" if kernel else "eager")


def time_side_by_side(models: dict, taus: dict, batches: list, rounds: int, n_sent: int,
                      paths: tuple[str, ...]) -> dict:
    """Per path ("kernel", "eager") and model: the ms per sentence of every round (every model on
    every path on each batch, back to back, in rotating order)."""
    runs = [(path, name) for path in paths for name in models]
    for path, name in runs:  # warm-up
        for b in batches[: max(1, min(len(batches), 20))]:
            decode(models[name], b, taus[name], path == "kernel")
    ms = {path: {name: [] for name in models} for path in paths}
    clock = time.perf_counter
    for r in range(rounds):
        total = dict.fromkeys(runs, 0.0)
        for i, b in enumerate(batches):
            for path, name in B.rotated(runs, i + r):
                t0 = clock()
                decode(models[name], b, taus[name], path == "kernel")
                total[path, name] += clock() - t0
        for path, name in runs:
            ms[path][name].append(1000.0 * total[path, name] / n_sent)
    return ms


def attention_share(model, tau, batches, passes: int = 3) -> dict:
    """The least disturbed (fastest) of ``passes`` passes over ``batches`` with the attention's
    time clocked (see the module doc)."""
    return min((clocked_pass(model, tau, batches) for _ in range(passes)),
               key=lambda r: r["ms_attention"] + r["ms_rest"])


def clocked_pass(model, tau, batches) -> dict:
    """One pass over ``batches`` with the attention module's calls timed."""
    clock = time.perf_counter
    window_sum = steps = sentences = 0
    with B.AttentionTimer(model) as timer:
        t0 = clock()
        for b in batches:
            res = decode(model, b, tau)
            window_sum += int(res.window_sum.sum())
            steps += int(res.steps.sum())
            sentences += b.src.size(0)
        total = clock() - t0
    attention = timer.attention_s + timer.pre_s
    return {"share_step": timer.attention_s / total, "share_precompute": timer.pre_s / total,
            "share": attention / total,
            "us_per_attention_step": 1e6 * timer.attention_s / max(timer.steps, 1),
            "ms_attention": 1000 * attention / sentences, "ms_rest": 1000 * (total - attention) / sentences,
            "window": window_sum / max(steps, 1), "steps": steps}


def profile(name: str, model, tau, batches, top: int) -> dict:
    """torch.profiler over ``batches``: share of the attention ranges, the top ops by self CPU time."""
    from torch.profiler import ProfilerActivity, record_function
    from torch.profiler import profile as tprofile

    with B.AttentionTimer(model, record=True), tprofile(activities=[ProfilerActivity.CPU]) as prof:
        for b in batches:
            with record_function("forced_decode"):
                decode(model, b, tau, kernel=False)  # op by op: the eager path
    events = {e.key: e for e in prof.key_averages()}
    total = events["forced_decode"].cpu_time_total
    att = sum(events[k].cpu_time_total for k in ("attention.step", "attention.precompute") if k in events)
    print(f"  torch.profiler, {name} (eager path): attention ranges {att / total:.1%} of forced_decode "
          f"(profiler overhead inflates small ops; compare with the timer figure)")
    print("    " + prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=top).replace("\n", "\n    "))
    return {"profiler_share": att / total}


def step_arithmetic(models: dict, windows: dict) -> dict:
    """Multiply-adds (and tanh) per decoding step and sentence, from the models' parameter
    shapes and the measured mean windows, for the concat score: the query projection W_q h, per
    scored position v_aᵀ tanh(q + k_s) (A multiply-adds, A tanh) and the context term a_s h̄_s
    (2H), for flexible also g_t (W_g [h; i], v_g: 2017 eq. 8); the rest of the step is the LSTM
    (W_ih, W_hh), the readout W_o and the output layer W_s. (The keys U_k h̄ are computed once
    per sentence and left out.) A tanh costs far more than a multiply-add inside a matrix
    product, so the two are counted apart."""
    out = {}
    for name, model in models.items():
        dec, att = model.decoder, model.decoder.attention
        per_pos = att.scorer.v_a.weight.numel() + dec.rnn.weight_ih.size(1) - dec.embed.embedding_dim
        strength = att.W_g.weight.numel() + att.v_g.numel() if hasattr(att, "W_g") else 0
        attention = att.scorer.W_q.weight.numel() + strength + windows[name] * per_pos
        tanh = (att.v_g.numel() if strength else 0) + windows[name] * att.scorer.v_a.weight.numel()
        rest = sum(w.numel() for w in (dec.rnn.weight_ih, dec.rnn.weight_hh, dec.W_o.weight, dec.W_s.weight))
        out[name] = {"attention_macs": attention, "g_macs": strength, "attention_tanh": tanh, "rest_macs": rest}
    return out


def run_level(level: str, args, cfg) -> dict:
    if level == "subword":
        tok_dir = Path(cfg.train.data_dir)
        ckpts = B.SUBWORD_CKPTS
        B.check_files(*ckpts.values(), tok_dir / "test.npz")
        tau = args.tau if args.tau is not None else B.read_selected_tau(Path(args.sweep))
        tau_source = "--tau" if args.tau is not None else f"{args.sweep} (models.flexible_ft.selected_tau)"
        note = None
    else:
        setting = B.char_setting()
        tok_dir, ckpts = setting.tok_dir, setting.checkpoints
        tau = args.char_tau if args.char_tau is not None else setting.tau
        tau_source = "--char-tau" if args.char_tau is not None else f"{setting.sweep_file} (selected on dev)"
        note = (f"char profile's models ({B.CHAR_RUN}): best dev BLEU global {setting.dev_bleu.get('global')}, "
                f"flexible fine-tuned {setting.dev_bleu.get('flexible_ft')}; test BLEU "
                f"{setting.test_bleu.get('global')} and {setting.test_bleu.get('flexible_ft_tau')} (at tau)")
    split = EncodedSplit.load(tok_dir / "test.npz")
    models = {name: load_model(ckpts[name]) for name in MODELS}
    taus = {"global": math.inf, "flexible_ft": tau}
    n = min(args.sentences, len(split))
    src_mean = float(split.src_lengths[:n].mean()) + 1
    tgt_mean = float(split.tgt_lengths[:n].mean()) + 1
    print(f"\n== {level} level: first {n} test pairs of {tok_dir} (source {src_mean:.1f} tokens incl. EOS, "
          f"{tgt_mean:.1f} forced steps per sentence); flexible_ft at tau = {B.fmt_tau(tau)} from {tau_source}",
          flush=True)
    if note:
        print(f"   {note}")
    out: dict = {"tau": tau, "tau_source": tau_source, "sentences": n, "src_len_mean": src_mean,
                 "steps_per_sentence": tgt_mean, "batch_sizes": {}, "note": note}

    single = B.first_batches(split, n, 1)
    paths = ("kernel", "eager") if args.eager else ("kernel",)
    for bs in args.batch_sizes:
        batches = single if bs == 1 else B.first_batches(split, n, bs)
        timed = time_side_by_side(models, taus, batches, args.rounds, n, paths)
        for path, ms in timed.items():
            ratios = [g / f for g, f in zip(ms["global"], ms["flexible_ft"])]
            figures = {"ms_per_sentence": ms, "ratio_per_round": ratios,
                       "ms_median": {k: B.med(v) for k, v in ms.items()}, "ratio_median": B.med(ratios)}
            if path == "kernel":
                out["batch_sizes"][bs] = figures
            else:
                out.setdefault("eager", {})[bs] = figures
        print(f"  batch size {bs}: {args.rounds} rounds, side by side ({' and '.join(paths)} paths)", flush=True)
    shares = {name: attention_share(models[name], taus[name], single) for name in MODELS}
    out["attention"] = shares
    out["split"] = {bs: {name: attention_share(models[name], taus[name],
                                               single if bs == 1 else B.first_batches(split, n, bs))
                         for name in MODELS} for bs in args.batch_sizes}
    if args.profile:
        for name in MODELS:
            out["attention"][name].update(profile(name, models[name], taus[name], single[: args.profile], 15))

    out["arithmetic"] = step_arithmetic(models, {k: v["window"] for k, v in shares.items()})
    print_level(out, taus, args)
    return out


def print_level(out: dict, taus: dict, args) -> None:
    """The table of one level's figures (:func:`run_level`'s ``out``): times, windows and
    attention shares per model, the speed-ups, the time split, the eager path and the
    arithmetic per step."""
    shares = out["attention"]
    g_win = shares["global"]["window"]
    print(f"  {'model':12s} {'tau':>6s} {'window':>7s} {'reduct.':>7s}  " +
          "  ".join(f"{'ms/sent bs=' + str(bs):>13s} {'spread':>13s}" for bs in args.batch_sizes) +
          f"  {'attention share':>22s} {'us/att.step':>11s}")
    for name in MODELS:
        s = shares[name]
        cols = "  ".join(f"{out['batch_sizes'][bs]['ms_median'][name]:13.2f} "
                         f"{B.spread(out['batch_sizes'][bs]['ms_per_sentence'][name]):>13s}"
                         for bs in args.batch_sizes)
        print(f"  {name:12s} {B.fmt_tau(taus[name]):>6s} {s['window']:7.2f} {1 - s['window'] / g_win:7.0%}  {cols}"
              f"  {s['share']:6.1%} (step {s['share_step']:5.1%})  {s['us_per_attention_step']:11.1f}")
    for bs in args.batch_sizes:
        r = out["batch_sizes"][bs]["ratio_per_round"]
        print(f"  speed-up global/flexible at batch size {bs}: {B.med(r):.2f}x (rounds {B.spread(r)})")
    print("  time split, ms per sentence (the fastest of three passes per batch size, the kernel's phase clock): attention"
          " (query products, g_t, span, scores, softmax, c_t, p_t; keys U_k h̄) + the rest (encoder, LSTM, readout)")
    for bs in args.batch_sizes:
        sp = out["split"][bs]
        print(f"    batch size {bs:3d}: " + ";  ".join(
            f"{name} {sp[name]['ms_attention']:.3f} + {sp[name]['ms_rest']:.3f}" for name in MODELS))
    if args.eager:
        print("  eager path (backend=eager: decode_step once per step, the decoding code of greedy and beam search):")
        for bs in args.batch_sizes:
            e, f = out["eager"][bs], out["batch_sizes"][bs]
            gain = {k: e["ms_median"][k] / f["ms_median"][k] for k in MODELS}
            print(f"    batch size {bs}: global {e['ms_median']['global']:.2f}, flexible_ft "
                  f"{e['ms_median']['flexible_ft']:.2f} ms/sent, speed-up {e['ratio_median']:.2f}x "
                  f"(rounds {B.spread(e['ratio_per_round'])}); the kernel is {gain['global']:.1f}x / "
                  f"{gain['flexible_ft']:.1f}x as fast")
    arith = out["arithmetic"]
    print("  arithmetic per step and sentence (multiply-adds, concat score):")
    for name in MODELS:
        a = arith[name]
        print(f"    {name:12s} attention {a['attention_macs']:9,.0f} (g_t {a['g_macs']:,}; tanh {a['attention_tanh']:,.0f})"
              f"   rest of the step {a['rest_macs']:9,.0f}")
    g, f = arith["global"], arith["flexible_ft"]
    print(f"    flexible's attention: {f['attention_macs'] / g['attention_macs']:.2f}x global's multiply-adds "
          f"(g_t included), {f['attention_tanh'] / g['attention_tanh']:.2f}x its tanh")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--levels", nargs="+", default=["subword", "char"], choices=["subword", "char"])
    parser.add_argument("--sentences", type=int, default=200, help="the first N test pairs")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 50, 200],
                        help="1 = per-sentence latency; more: length-grouped batches as translate_split")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--sweep", default="results/sweep_tau.json", help="where the subword tau is read")
    parser.add_argument("--tau", type=float, help="subword tau instead of the selected one")
    parser.add_argument("--char-tau", type=float, help="char tau instead of the selected one")
    parser.add_argument("--no-eager", dest="eager", action="store_false",
                        help="time the kernel only (default: the eager path too, side by side)")
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="also run torch.profiler over N sentences per model and print the top ops")
    parser.add_argument("--out", default="benchmarks/results/decode_speed.json")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    B.warn_if_busy(args.threads)
    started = time.perf_counter()
    cfg = load_params(args.params)
    results = {"threads": args.threads, "rounds": args.rounds, "levels": {}}
    for level in args.levels:
        results["levels"][level] = run_level(level, args, cfg)

    print("\ntargets:")
    verdicts = {}
    for level, res in results["levels"].items():
        want = "flexible >= 1.3x as fast as global" if level == "char" else "flexible never slower than global"
        for bs, figures in res["batch_sizes"].items():
            r = figures["ratio_median"]
            ok = r >= 1.3 if level == "char" else r >= 1.0
            verdicts[f"{level}@{bs}"] = ok
            print(f"  {level:7s} {want}: speed-up {r:.2f}x at batch size {bs}"
                  f"{' (per-sentence latency, the paper)' if bs == 1 else ''} -> {'MET' if ok else 'NOT MET'}")
    results["targets_met"] = verdicts
    results["wall_minutes"] = round((time.perf_counter() - started) / 60, 2)
    print(f"decode_speed: {results['wall_minutes']:.1f} min, {args.threads} threads")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2, default=float) + "\n")
    print(f"written {out}")


if __name__ == "__main__":
    main()
