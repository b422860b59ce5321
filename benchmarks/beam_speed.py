"""Beam-search speed of global and flexible attention: sentences per second at beam 5 and 20.

    python benchmarks/beam_speed.py                          # first 200 test pairs, beams 5 and 20
    python benchmarks/beam_speed.py --sentences 300 --beams 5 20 --rounds 5 --batch-size 1
    python benchmarks/beam_speed.py --level char             # the cached char setting of decode_speed.py

Translates the first ``--sentences`` source sentences of the test split with
``flexatt.search.beam_search`` (length normalisation ``decode.alpha``, at most
``decode.max_len_ratio``·S + 10 tokens, as the pipeline decodes) by the **global** model and the
**fine-tuned flexible** model at its **selected τ** (``results/sweep_tau.json`` →
``models.flexible_ft.selected_tau``, or ``--tau``). Sentences are decoded in length-grouped
batches of ``--batch-size`` (default ``decode.batch_size``, as ``translate_split`` does; 1 gives
per-sentence latency).

Side by side: each round decodes every batch with both models back to back, the order
alternating from batch to batch and from round to round, after a warm-up pass; the figures are
the median over ``--rounds`` rounds and the spread (min–max) of the per-round values, the ratio
flexible/global of sentences per second (> 1: flexible is faster) the median of the per-round
ratios. Also printed: the mean window (positions scored per step and live hypothesis) and the
BLEU of the decoded sentences (a sanity check that both models translate, not a result: it is
over a few hundred sentences). Beam search steps are not the same for the two models (they
translate differently), so the time per sentence also reflects the output lengths, which are
printed too.

``--level char`` uses the char-level setting that ``benchmarks/decode_speed.py`` builds and
caches in ``artifacts/bench/char/`` (small-budget models: only the speed comparison means
anything there).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as B  # noqa: E402

from flexatt.config import load_params  # noqa: E402
from flexatt.data.subwords import EncodedSplit, Vocab  # noqa: E402
from flexatt.evaluation import load_model, read_lines  # noqa: E402
from flexatt.metrics import corpus_bleu  # noqa: E402
from flexatt.search import beam_search  # noqa: E402

MODELS = ("global", "flexible_ft")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--level", default="subword", choices=["subword", "char"])
    parser.add_argument("--sentences", type=int, default=200, help="the first N test pairs")
    parser.add_argument("--beams", type=int, nargs="+", default=[5, 20])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, help="default: decode.batch_size")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--sweep", help="sweep_tau JSON to read tau from (default: the level's)")
    parser.add_argument("--tau", type=float, help="tau instead of the selected one")
    parser.add_argument("--out", default="benchmarks/results/beam_speed.json")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    B.warn_if_busy(args.threads)
    cfg = load_params(args.params)
    if args.level == "subword":
        tok_dir, ckpts = Path(cfg.train.data_dir), B.SUBWORD_CKPTS
        sweep = Path(args.sweep or "results/sweep_tau.json")
    else:
        tok_dir = B.CHAR_ROOT / "tok"
        ckpts = {"global": B.CHAR_ROOT / "models/global/best.ckpt",
                 "flexible_ft": B.CHAR_ROOT / "models_ft/flexible/best.ckpt"}
        sweep = Path(args.sweep or B.CHAR_ROOT / "sweep_tau.json")
        if not all(p.is_file() for p in ckpts.values()) or not sweep.is_file():
            raise SystemExit(f"error: the char setting is not in {B.CHAR_ROOT}: run "
                             f"python benchmarks/decode_speed.py --levels char first")
    B.check_files(*ckpts.values(), tok_dir / "test.npz")
    tau = args.tau if args.tau is not None else B.read_selected_tau(sweep)
    taus = {"global": None, "flexible_ft": tau}
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

    def decode(name: str, b, k: int):
        max_len = (b.src_len.float() * ratio).long() + 10
        return beam_search(models[name], b.src, b.src_len, max_len, k, tau=taus[name], alpha=alpha)

    results: dict = {"level": args.level, "tau": tau, "sentences": n, "batch_size": batch_size,
                     "threads": args.threads, "rounds": args.rounds, "beams": {}}
    for k in args.beams:
        stats = {}
        for name in MODELS:  # warm-up, and the outputs for window, length and BLEU
            hyps: dict[int, list[int]] = {}
            wsum = steps = out_len = 0
            for b in batches:
                res = decode(name, b, k)
                wsum += int(res.window_sum.sum())
                steps += int(res.steps.sum())
                out_len += int(res.lengths.sum())
                for i, row in zip(b.index.tolist(), res.tokens.tolist()):
                    hyps[i] = row
            bleu, _ = corpus_bleu(vocab.decode([hyps[i] for i in range(n)]), [refs])
            stats[name] = {"window": wsum / max(steps, 1), "out_len": out_len / n, "bleu": bleu}
        rates: dict[str, list[float]] = {name: [] for name in MODELS}
        for r in range(args.rounds):
            secs = dict.fromkeys(MODELS, 0.0)
            for i, b in enumerate(batches):
                for name in B.rotated(list(MODELS), i + r):
                    t0 = time.perf_counter()
                    decode(name, b, k)
                    secs[name] += time.perf_counter() - t0
            for name in MODELS:
                rates[name].append(n / secs[name])
        ratios = [f / g for f, g in zip(rates["flexible_ft"], rates["global"])]
        results["beams"][k] = {"sentences_per_second": rates, "ratio_per_round": ratios,
                               "ratio_median": B.med(ratios), "stats": stats}
        print(f"\nbeam {k}:")
        print(f"  {'model':12s} {'tau':>6s} {'window':>7s} {'out len':>7s} {'BLEU':>6s} "
              f"{'sent/s':>8s} {'spread':>15s}")
        for name in MODELS:
            s = stats[name]
            print(f"  {name:12s} {B.fmt_tau(taus[name]):>6s} {s['window']:7.2f} {s['out_len']:7.1f} "
                  f"{s['bleu']:6.2f} {B.med(rates[name]):8.2f} {B.spread(rates[name]):>15s}")
        print(f"  flexible/global sentences per second: {B.med(ratios):.2f}x (rounds {B.spread(ratios)})",
              flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nwritten {out}")


if __name__ == "__main__":
    main()
