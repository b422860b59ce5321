"""Decoding speed per attention variant: this working tree's ``eager`` backend (the model's own
modules on a :class:`flexatt.attention.RowMap`) against a baseline commit's PyTorch backend for
the same model, in one run on one machine.

    python benchmarks/decode_backends.py --baseline 87b3153              # the default profile's models
    python benchmarks/decode_backends.py --baseline 87b3153 --rounds 5 --out benchmarks/results/decode_backends.json

Each (variant, τ) decodes the first ``--sentences`` test pairs with beam search (``--beam``,
length-grouped batches of ``--batch-size``, as ``translate_split`` batches them) in a
subprocess per run (``_decode_probe.py``: a warm-up pass, then one timed pass), once with the
baseline tree (a git worktree of ``--baseline`` in ``artifacts/bench/decode-<commit>``, its own
``src`` on ``PYTHONPATH``) and its backend (``--baseline-backend``, ``grouped`` where the baseline
had it, else ``eager``), once with this tree's ``eager``; rounds alternate which goes first.
Printed per case: the median seconds of each, their ratio (this tree / baseline, per round; > 1:
slower) with its spread, and whether both decoded the same hypotheses and windows.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, machine, read_selected_tau, spread, worktree  # noqa: E402

PROBE = Path(__file__).resolve().parent / "_decode_probe.py"
#: (variant, the sweep_tau model whose selected τ is decoded too, or None)
CASES = (("global", None), ("flexible", "flexible"), ("sact", None), ("flexible_sact", "flexible_sact"),
         ("local_m", None), ("local_p", None))
#: the baseline's PyTorch backend per variant (before the row map: grouped where it covered the model)
BASELINE_BACKEND = {"global": "grouped", "flexible": "grouped", "sact": "grouped", "flexible_sact": "grouped",
                    "local_m": "eager", "local_p": "eager"}


def probe(tree: Path, ckpt: Path, backend: str, tau: float | None, args) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    cmd = [sys.executable, str(PROBE), str(ckpt), backend, repr(tau), str(args.sentences),
           str(args.beam), str(args.batch_size), str(args.threads)]
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", required=True, help="the commit to compare with")
    parser.add_argument("--models", default="artifacts/models", help="the trained models (<variant>/best.ckpt)")
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=150)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variants", nargs="+", choices=[v for v, _ in CASES], default=[v for v, _ in CASES],
                        help="measure these variants only (more rounds where a median is close to a bound)")
    parser.add_argument("--out", type=Path, help="write the figures as JSON")
    args = parser.parse_args()
    base = worktree(args.baseline, "decode")
    cases = []
    for variant, tau_model in (case for case in CASES if case[0] in args.variants):
        ckpt = ROOT / args.models / variant / "best.ckpt"
        if not ckpt.is_file():
            sys.exit(f"error: {ckpt}: not found (run the pipeline's train@{variant} stage)")
        cases.append((variant, math.inf, ckpt))
        if tau_model is not None:
            cases.append((variant, read_selected_tau(ROOT / "results/sweep_tau.json", tau_model), ckpt))
    rows = []
    for variant, tau, ckpt in cases:
        runs: dict[str, list[dict]] = {"baseline": [], "this": []}
        for r in range(args.rounds):
            order = ("baseline", "this") if r % 2 == 0 else ("this", "baseline")
            for which in order:
                tree, backend = (base, BASELINE_BACKEND[variant]) if which == "baseline" else (ROOT, "eager")
                runs[which].append(probe(tree, ckpt, backend, tau, args))
        ratios = [t["seconds"] / b["seconds"] for t, b in zip(runs["this"], runs["baseline"])]
        same = all(t["hypotheses"] == b["hypotheses"] and t["window_sum"] == b["window_sum"]
                   for t, b in zip(runs["this"], runs["baseline"]))
        row = {"variant": variant, "tau": None if math.isinf(tau) else tau, "baseline_backend": BASELINE_BACKEND[variant],
               "baseline_s": statistics.median(x["seconds"] for x in runs["baseline"]),
               "this_s": statistics.median(x["seconds"] for x in runs["this"]),
               "ratio": statistics.median(ratios), "ratio_spread": [min(ratios), max(ratios)], "same_output": same}
        rows.append(row)
        print(f"{variant:14s} tau={tau:<7g} baseline {row['baseline_backend']:8s} "
              f"{row['baseline_s']:7.2f} s   this eager {row['this_s']:7.2f} s   this/baseline {row['ratio']:.3f} "
              f"({spread(ratios, '{:.3f}')})   same output: {same}", flush=True)
    result = {"machine": machine(), "baseline": args.baseline, "sentences": args.sentences, "beam": args.beam,
              "batch_size": args.batch_size, "threads": args.threads, "rounds": args.rounds, "cases": rows}
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
