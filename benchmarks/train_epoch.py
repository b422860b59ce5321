"""A from-scratch epoch of train@global and train@flexible, as the stage runs it, at a baseline
commit and at this working tree, in one run on one machine.

    python benchmarks/train_epoch.py --baseline dbbd211            # after `dvc repro tokenize`
    python benchmarks/train_epoch.py --baseline dbbd211 --rounds 2 --out benchmarks/results/train_epoch.json

Each model is trained by its stage (``python -m flexatt.stages.train train.variant=V
train.epochs=1``, the default profile's data and sizes, W&B off, no progress bar), from scratch,
for one epoch with its dev decoding, under ``_epoch_probe.py`` (Lightning's SimpleProfiler: where
the time went, by phase). The baseline is a git worktree of ``--baseline`` in
``artifacts/bench/epoch-<commit>`` (its own params.yaml, this tree's ``artifacts/tok``), run the
way ``make repro`` ran it there: the models one after another, every thread each. This tree runs
them the way ``make repro`` (``flexatt repro``) runs them now: side by side, ``train.threads``
each. The figure is the wall time of the two epochs (the later end minus the start) at each
commit, and their ratio; rounds alternate which commit goes first.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, machine, worktree  # noqa: E402

PROBE = Path(__file__).resolve().parent / "_epoch_probe.py"
PHASES = ("steps", "data", "validation", "checkpoints", "other")


def baseline_tree(commit: str) -> Path:
    """A worktree of ``commit`` under artifacts/bench (made once), with this tree's tokenized data."""
    tree = worktree(commit, "epoch")
    tok = tree / "artifacts/tok"
    if not tok.exists():
        tok.parent.mkdir(parents=True, exist_ok=True)
        tok.symlink_to(ROOT / "artifacts/tok")
    return tree


def start(tree: Path, variant: str, scratch: Path, env_extra: dict[str, str]) -> tuple[subprocess.Popen, Path]:
    """Start the stage of ``variant`` in ``tree`` (its own ``src`` first on the path) under the probe."""
    out = scratch / f"{tree.name}-{variant}.json"
    env = {**os.environ, "PYTHONPATH": str(tree / "src"), "WANDB_MODE": "offline", **env_extra}
    env.pop("OMP_NUM_THREADS", None)
    cmd = [sys.executable, str(PROBE), str(out), "flexatt.stages.train", f"train.variant={variant}",
           "train.epochs=1", f"train.out_dir={scratch}/{tree.name}/m", f"train.metrics_dir={scratch}/{tree.name}/r",
           "logger.enabled=false", "trainer.enable_progress_bar=false"]
    log = open(scratch / f"{tree.name}-{variant}.log", "w")
    return subprocess.Popen(cmd, cwd=tree, env=env, stdout=log, stderr=subprocess.STDOUT), out


def run_commit(tree: Path, variants: list[str], side_by_side: bool) -> dict:
    """Train each variant for one epoch at ``tree``: one after another, or all at once."""
    with tempfile.TemporaryDirectory(prefix="train-epoch-") as tmp:
        scratch = Path(tmp)
        t0 = time.perf_counter()
        results: dict = {}
        if side_by_side:
            env = {"FLEXATT_SIDE_BY_SIDE": str(len(variants))}
            procs = {v: start(tree, v, scratch, env) for v in variants}
            for v, (proc, out) in procs.items():
                if proc.wait() != 0:
                    sys.exit(f"train_epoch: {v} failed at {tree}: see {scratch}/{tree.name}-{v}.log")
                results[v] = json.loads(out.read_text())
        else:
            for v in variants:
                proc, out = start(tree, v, scratch, {})
                if proc.wait() != 0:
                    sys.exit(f"train_epoch: {v} failed at {tree}")
                results[v] = json.loads(out.read_text())
        wall = time.perf_counter() - t0
        for v in variants:
            metrics = json.loads((scratch / tree.name / "r" / f"{v}.json").read_text())
            results[v]["tokens_per_second"] = metrics["tokens_per_second"]
            results[v]["dev_bleu"] = metrics["dev_bleu"]
            results[v]["threads"] = metrics.get("threads")
    return {"wall": round(wall, 2), "models": results}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", required=True, help="the commit to compare with (e.g. dbbd211)")
    parser.add_argument("--variants", nargs="+", default=["global", "flexible"])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--out", default=None, help="write the figures here (JSON)")
    args = parser.parse_args()
    if not (ROOT / "artifacts/tok/train.npz").is_file():
        sys.exit("train_epoch: no artifacts/tok: run `dvc repro tokenize` first")
    base = baseline_tree(args.baseline)
    contenders = {"baseline": (base, False), "result": (ROOT, True)}
    runs: dict[str, list[dict]] = {name: [] for name in contenders}
    for r in range(args.rounds):
        names = list(contenders) if r % 2 == 0 else list(contenders)[::-1]
        for name in names:
            tree, side = contenders[name]
            runs[name].append(run_commit(tree, args.variants, side))
            print(f"round {r + 1}: {name}: {runs[name][-1]['wall']:.1f} s", flush=True)

    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    print(f"\ntrain_epoch: one epoch of {' and '.join(args.variants)} from scratch (dev decoding included), "
          f"{args.rounds} round(s); baseline {base.name[6:]} (one after another), result {head} (side by side)")
    print(f"{'commit':9s} {'model':9s} {'threads':>7s} {'wall s':>7s} " + " ".join(f"{p:>11s}" for p in PHASES)
          + f" {'tokens/s':>9s} {'dev BLEU':>8s}")
    for name, rounds in runs.items():
        for v in args.variants:
            last = rounds[-1]["models"][v]
            print(f"{name:9s} {v:9s} {str(last['threads'] or 'all'):>7s} {last['wall']:7.1f} "
                  + " ".join(f"{last['phases'][p]:11.1f}" for p in PHASES)
                  + f" {last['tokens_per_second']:9.0f} {last['dev_bleu']:8.2f}")
    walls = {name: statistics.median(r["wall"] for r in rounds) for name, rounds in runs.items()}
    ratio = walls["baseline"] / walls["result"]
    print(f"two epochs' wall time: baseline {walls['baseline']:.1f} s, result {walls['result']:.1f} s: "
          f"{ratio:.2f}x (median over rounds; per round: "
          + ", ".join(f"{b['wall'] / n['wall']:.2f}x" for b, n in zip(runs["baseline"], runs["result"])) + ")")
    if args.out:
        Path(args.out).write_text(json.dumps({"machine": machine(), "baseline": args.baseline, "result": head,
                                              "variants": args.variants, "runs": runs, "walls": walls,
                                              "ratio": round(ratio, 3)}, indent=1) + "\n")


if __name__ == "__main__":
    main()
