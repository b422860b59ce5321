"""Beam-search speed of global and flexible attention, the eager step against the compiled one:
sentences per second at beam 5 and 20 (and greedy with ``--beams 1``).

    python benchmarks/beam_speed.py                          # first 200 test pairs, beams 5 and 20
    python benchmarks/beam_speed.py --sentences 2000 --beams 5 --batch-size 150   # the evaluate stage
    python benchmarks/beam_speed.py --sentences 300 --beams 1 5 20 --rounds 5 --batch-size 1
    python benchmarks/beam_speed.py --paths eager             # the eager step only
    python benchmarks/beam_speed.py --level char             # the char profile's models (make char)

Translates the first ``--sentences`` source sentences of the test split with beam search
(length normalisation ``decode.alpha``, at most ``decode.max_len_ratio``·S + 10 tokens, as the
pipeline decodes; beam 1 is greedy search) by the **global** model and the **fine-tuned
flexible** model at its **selected τ** (``results/sweep_tau.json`` →
``models.flexible_ft.selected_tau``, or ``--tau``), each with two implementations of the same
search (``--paths``): **eager**, :func:`flexatt.decoding.beam_search` on the eager backend (the
model's own ``decode_step`` on a per-sentence cache with a row map); and **compiled**, the same on the
kernel backend (the kernel's step and candidate selection: what ``decode.backend=auto`` gives
the pipeline's stages and ``flexatt translate`` for these models). Sentences are decoded in
length-grouped batches of ``--batch-size`` (default ``decode.batch_size``, as
``translate_split`` does; 1 gives per-sentence latency).

Side by side: each round decodes every batch with every (model, path) back to back, the order
rotating from batch to batch and from round to round, after a warm-up pass; the figures are
the median over ``--rounds`` rounds and the spread (min–max) of the per-round values. Ratios
(medians of the per-round ratios): each path over eager per model, flexible/global per path (> 1:
flexible is faster), and the compiled flexible over the eager global. Also printed: the mean window (positions scored per step and live
hypothesis), the output length and the BLEU of the decoded sentences (a sanity check that both
models translate, not a result: it is over a few hundred sentences), and the agreement of the
two paths: the sentences whose best hypothesis differs, with the two paths' scores of both
hypotheses (a float32 tie shows as scores equal to ~1e-6) and whether the windows are equal.
Beam search steps are not the same for the two models (they translate differently), so the time
per sentence also reflects the output lengths, which are printed too.

``--level char`` uses the char profile's models (``conf/profile/char.yaml``), from its run that
``make char`` keeps in ``artifacts/char/``.

Also printed per model and path: the time per decoding step and live hypothesis (µs per row), which
takes the output lengths out of the flexible/global comparison. ``--split`` adds one pass of the
compiled path per model that times the kernel's calls (``_common.KernelCallTimer``): µs per row
of the encoder, the attention + LSTM step, the readout's products, the candidate selection and
the search's own bookkeeping.
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
from flexatt.data.subwords import BOS_ID, EOS_ID, EncodedSplit, Vocab  # noqa: E402
from flexatt.checkpoints import load_model  # noqa: E402
from flexatt.io import read_lines  # noqa: E402
from flexatt.metrics import corpus_bleu  # noqa: E402
from flexatt import decoding  # noqa: E402

MODELS = ("global", "flexible_ft")
#: path -> (greedy, beam search, the decoding backend)
PATHS = {"eager": (decoding.greedy, decoding.beam_search, {"backend": "eager"}),
         "compiled": (decoding.greedy, decoding.beam_search, {"backend": "kernel"})}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--level", default="subword", choices=["subword", "char"])
    parser.add_argument("--sentences", type=int, default=200, help="the first N test pairs")
    parser.add_argument("--beams", type=int, nargs="+", default=[5, 20], help="1: greedy search")
    parser.add_argument("--paths", nargs="+", default=list(PATHS), choices=list(PATHS))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, help="default: decode.batch_size")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--sweep", help="sweep_tau JSON to read tau from (default: the level's)")
    parser.add_argument("--tau", type=float, help="tau instead of the selected one")
    parser.add_argument("--split", action="store_true",
                        help="also one pass of the compiled path timing the kernel's calls (time per row by part)")
    parser.add_argument("--out", default="benchmarks/results/beam_speed.json")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    B.warn_if_busy(args.threads)
    cfg = load_params(args.params)
    if args.level == "subword":
        tok_dir, ckpts = Path(cfg.train.data_dir), B.SUBWORD_CKPTS
        sweep = Path(args.sweep or "results/sweep_tau.json")
    else:
        setting = B.char_setting()
        tok_dir, ckpts = setting.tok_dir, setting.checkpoints
        sweep = Path(args.sweep or setting.sweep_file)
    B.check_files(*ckpts.values(), tok_dir / "test.npz")
    tau = args.tau if args.tau is not None else B.read_selected_tau(sweep)
    taus = {"global": math.inf, "flexible_ft": tau}
    models = {name: load_model(ckpts[name]) for name in MODELS}
    split = EncodedSplit.load(tok_dir / "test.npz")
    n = min(args.sentences, len(split))
    refs = read_lines(tok_dir / "test.ref")[:n]
    vocab = Vocab(tok_dir / "tgt.model")
    batch_size = args.batch_size or int(cfg.decode.batch_size)
    alpha, ratio = float(cfg.decode.alpha), float(cfg.decode.max_len_ratio)
    batches = B.first_batches(split, n, batch_size)
    print(f"beam_speed: {args.level} level, first {n} test pairs of {tok_dir} "
          f"(source {split.src_lengths[:n].mean() + 1:.1f} tokens incl. EOS), batches of {batch_size}, "
          f"{args.rounds} rounds, {args.threads} threads; flexible_ft at tau = {B.fmt_tau(tau)} "
          f"({'--tau' if args.tau is not None else sweep})", flush=True)

    def decode(name: str, path: str, b, k: int):
        max_len = (b.src_len.float() * ratio).long() + 10
        greedy_fn, beam_fn, kw = PATHS[path]
        if k == 1:
            return greedy_fn(models[name], b.src, b.src_len, max_len, taus[name], **kw)
        return beam_fn(models[name], b.src, b.src_len, max_len, k, tau=taus[name], alpha=alpha, **kw)

    results: dict = {"level": args.level, "tau": tau, "sentences": n, "batch_size": batch_size,
                     "threads": args.threads, "rounds": args.rounds, "paths": args.paths,
                     "machine": B.machine(), "beams": {}}
    for k in args.beams:
        outputs, stats = decode_once(decode, k, args.paths, batches, n,
                                     lambda hyps: corpus_bleu(vocab.decode(hyps), [refs])[0])
        fast_paths = [p for p in args.paths if p != "eager"] if "eager" in args.paths else []
        agreement = {f"{name} {path}": compare(models[name], taus[name], k, outputs[(name, "eager")],
                                               outputs[(name, path)], ratio, alpha)
                     for name in MODELS for path in fast_paths}
        rates = time_rounds(decode, k, args.paths, batches, n, args.rounds)
        ratios = path_ratios(rates, args.paths, fast_paths)
        results["beams"][k] = {"sentences_per_second": rates, "ratios_per_round": ratios,
                               "ratio_medians": {key: B.med(v) for key, v in ratios.items()},
                               "stats": stats, "agreement": agreement}
        if args.split and "compiled" in args.paths:
            results["beams"][k]["split_us_per_row"] = {name: time_parts(lambda b: decode(name, "compiled", b, k), batches)
                                                       for name in MODELS}
        print_beam(k, results["beams"][k], taus, args.paths, n)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nwritten {out}")


def decode_once(decode, k: int, paths: list[str], batches, n: int, bleu) -> tuple[dict, dict]:
    """The warm-up pass at beam ``k``: every (model, path) decodes every batch once. Returns the
    outputs ``{(model, path): (hypotheses by sentence, per-sentence (score, window sum, steps,
    batch, row))}`` for :func:`compare`, and the stats ``{"model/path": {window, out_len, bleu,
    rows}}`` (``bleu``: the BLEU of a list of hypotheses in sentence order)."""
    stats: dict = {}
    outputs: dict = {}
    for name, path in [(name, path) for name in MODELS for path in paths]:
        hyps: dict[int, list[int]] = {}
        wsum = steps = out_len = 0
        per_sentence = {}
        for b in batches:
            res = decode(name, path, b, k)
            wsum += int(res.window_sum.sum())
            steps += int(res.steps.sum())
            out_len += int(res.lengths.sum())
            for row, i in enumerate(b.index.tolist()):
                hyps[i] = res.tokens[row, : int(res.lengths[row])].tolist()
                per_sentence[i] = (float(res.scores[row, 0]), int(res.window_sum[row]), int(res.steps[row]), b, row)
        stats[f"{name}/{path}"] = {"window": wsum / max(steps, 1), "out_len": out_len / n,
                                   "bleu": bleu([hyps[i] for i in range(n)]), "rows": steps}
        outputs[(name, path)] = (hyps, per_sentence)
    return outputs, stats


def time_rounds(decode, k: int, paths: list[str], batches, n: int, rounds: int) -> dict[str, list[float]]:
    """Sentences per second of every (model, path) at beam ``k`` in each of ``rounds`` rounds:
    each batch is decoded by every (model, path) back to back, the order rotating from batch to
    batch and from round to round."""
    runs = [(name, path) for name in MODELS for path in paths]
    rates: dict[str, list[float]] = {f"{name}/{path}": [] for name, path in runs}
    for r in range(rounds):
        secs = dict.fromkeys(rates, 0.0)
        for i, b in enumerate(batches):
            for name, path in B.rotated(runs, i + r):
                t0 = time.perf_counter()
                decode(name, path, b, k)
                secs[f"{name}/{path}"] += time.perf_counter() - t0
        for key in rates:
            rates[key].append(n / secs[key])
    return rates


def path_ratios(rates: dict[str, list[float]], paths: list[str], fast_paths: list[str]) -> dict[str, list[float]]:
    """Per-round ratios: flexible/global per path; each fast path over eager per model; the fast
    flexible over the eager global."""
    def ratio(a: str, b: str) -> list[float]:
        return [x / y for x, y in zip(rates[a], rates[b])]

    ratios = {f"flexible/global {path}": ratio(f"flexible_ft/{path}", f"global/{path}") for path in paths}
    for path in fast_paths:
        for name in MODELS:
            ratios[f"{name} {path}/eager"] = ratio(f"{name}/{path}", f"{name}/eager")
        ratios[f"flexible {path}/global eager"] = ratio(f"flexible_ft/{path}", "global/eager")
    return ratios


def print_beam(k: int, result: dict, taus: dict, paths: list[str], n: int) -> None:
    """The table of one beam size (and its ``us_per_row``, added to ``result["stats"]``), its
    ratios, the split by part and the two paths' agreement."""
    rates, ratios, stats = result["sentences_per_second"], result["ratios_per_round"], result["stats"]
    print(f"\n{'greedy' if k == 1 else f'beam {k}'}:")
    print(f"  {'model':12s} {'path':8s} {'tau':>6s} {'window':>7s} {'out len':>7s} {'BLEU':>6s} "
          f"{'sent/s':>8s} {'spread':>15s} {'us/row':>7s}")
    for name, path in [(name, path) for name in MODELS for path in paths]:
        s, r = stats[f"{name}/{path}"], rates[f"{name}/{path}"]
        s["us_per_row"] = 1e6 * n / B.med(r) / max(s["rows"], 1)
        print(f"  {name:12s} {path:8s} {B.fmt_tau(taus[name]):>6s} {s['window']:7.2f} {s['out_len']:7.1f} "
              f"{s['bleu']:6.2f} {B.med(r):8.2f} {B.spread(r):>15s} {s['us_per_row']:7.2f}")
    for key, values in ratios.items():
        print(f"  {key}: {B.med(values):.2f}x (rounds {B.spread(values)})")
    for name, parts in result.get("split_us_per_row", {}).items():
        print(f"  {name} compiled, us per row by part (one pass, the kernel's calls timed): "
              + ", ".join(f"{part} {us:.2f}" for part, us in parts.items()))
    for key, a in result["agreement"].items():
        print(f"  {key}: hypotheses equal to eager {a['same']}/{n}, windows equal {a['same_windows']}/{n}"
              + "".join(f"\n    sentence {d['sentence']}: search scores eager {d['eager_score']:.7f}, fast "
                        f"{d['fast_score']:.7f}; eager reference of the two hypotheses "
                        f"{d['reference_eager_hyp']:.7f} vs {d['reference_fast_hyp']:.7f} (gap {d['gap']:.1e})"
                        for d in a["differing"]),
              flush=True)


def time_parts(decode_batch, batches) -> dict[str, float]:
    """One pass of ``decode_batch`` over ``batches`` under :class:`_common.KernelCallTimer`: µs
    per decoding row of each part of the compiled step, the search's ``bookkeeping`` (the rest
    of the wall time) and the ``total``."""
    with B.KernelCallTimer() as timer:
        t0 = time.perf_counter()
        for b in batches:
            decode_batch(b)
        total = time.perf_counter() - t0
    rows = max(timer.rows, 1)
    parts = {part: 1e6 * sec / rows for part, sec in timer.seconds.items()}
    parts["bookkeeping"] = 1e6 * (total - sum(timer.seconds.values())) / rows
    parts["total"] = 1e6 * total / rows
    return parts


def compare(model, tau, k: int, eager: tuple, fast: tuple, ratio: float, alpha: float) -> dict:
    """Agreement of the two paths on one model: sentences with the same best hypothesis and the
    same windows; for each differing one, both searches' best scores and the eager reference's
    score of both hypotheses (eager forced decoding of each, normalised as the search does): a
    float32 tie shows as a ``gap`` of ~1e-6 between the two."""
    (hyps_e, sent_e), (hyps_f, sent_f) = eager, fast
    same = sum(hyps_e[i] == hyps_f[i] for i in hyps_e)
    same_windows = sum(sent_e[i][1:3] == sent_f[i][1:3] for i in sent_e)
    differing = []
    for i in sorted(i for i in hyps_e if hyps_e[i] != hyps_f[i]):
        b, row = sent_e[i][3], sent_e[i][4]
        src, src_len = b.src[row:row + 1, : int(b.src_len[row])], b.src_len[row:row + 1]
        max_len = int(float(src_len[0]) * ratio) + 10

        def score(tokens: list[int]) -> float:
            out = tokens + ([EOS_ID] if len(tokens) < max_len else [])
            tgt_out, tgt_in = torch.tensor([out]), torch.tensor([[BOS_ID] + out[:-1]])
            lp = float(decoding.forced_decode(model, src, src_len, tgt_in, tgt_out, tau, backend="eager").log_probs[0, 0])
            return lp / (len(out) ** alpha) if k > 1 else lp

        ref_e, ref_f = score(hyps_e[i]), score(hyps_f[i])
        differing.append({"sentence": i, "eager_score": sent_e[i][0], "fast_score": sent_f[i][0],
                          "reference_eager_hyp": ref_e, "reference_fast_hyp": ref_f, "gap": ref_e - ref_f})
    return {"same": same, "same_windows": same_windows, "differing": differing}


if __name__ == "__main__":
    main()
