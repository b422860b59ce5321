"""Training seeds of the converged run's headline models: the seeds sweep in its kept copy.

    python scripts/converged_seeds.py --keep RUN_DIR            # = make converged-seeds
    python scripts/converged_seeds.py --keep RUN_DIR --seeds 2 3 --dry-run
    python scripts/converged_seeds.py --keep RUN_DIR --jobs 1    # one seed at a time, every thread

After ``make converged`` (its copy kept in ``RUN_DIR``, its results committed in
``results/converged/``), this runs ``python -m flexatt.stages.replicate -m +sweep=seeds`` in that
copy, so every job trains with the converged profile's settings (the stopping rule, and the β
that ``sweep_beta`` selected, already composed into the copy's ``params.yaml``): Global,
Flexible, its fine-tuning and its control, and the local-m of the run whose test window is
nearest the fine-tuned flexible model's at its selected τ (``seeds_local``; ``--local`` names
another). The sweep's folder is fixed (``multirun/seeds-converged`` in the copy) and each seed
has its own folder in it (``<seed>/``, ``conf/sweep/seeds.yaml``), so a second start after an
interruption, with these seeds or others, resumes each seed's trainings from their last
checkpoints. Where a job fails, the summary of the jobs that completed is rebuilt before it is
copied. The seeds train at once by default
(``--jobs``: the joblib launcher's ``n_jobs``; each job gets the cores divided among the jobs, at
least one thread): on a 2-core CPU three 1-thread trainings at once do 1.4x the work per hour of
one 2-thread training (``benchmarks/train_throughput.py --concurrent 3``). The summary, with the comparisons
paired by seed (``flexatt.seeds``), is copied to ``results/converged/seeds/``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from profile_run import dvc_env, profile_of  # noqa: E402
from reordering_sweep import nearest_local_m  # noqa: E402

from flexatt.sweeps import SWEEP_RECORD  # noqa: E402

SWEEP_DIR = "multirun/seeds-converged"
COPIED = ("summary.md", "summary.csv", "summary.png", "paired.md", "paired.json")


def local_for_seeds(metrics: dict) -> str:
    """The local-m variant nearest the fine-tuned flexible model's window at its selected τ
    (``flexible_ft_tau``; the plain flexible model's where there is none). A row decoded at τ = ∞
    (no τ selected) has the full window: no fixed window matches it, and ``--local`` must name
    the variant."""
    rows = metrics["models"]
    target = next((name for name in ("flexible_ft_tau", "flexible_tau") if name in rows), None)
    if target is None:
        raise SystemExit("error: Table 1 of the converged run has no flexible row at a selected τ")
    if rows[target].get("tau") is None:
        raise SystemExit(f"error: {target} of the converged run is decoded at τ = ∞ (sweep_tau selected no τ): no "
                         "fixed window matches it; name the local variant with --local")
    return nearest_local_m(rows, target)


def command(seeds: list[int], local: str, jobs: int) -> list[str]:
    return [sys.executable, "-m", "flexatt.stages.replicate", "-m", "+sweep=seeds",
            f"train.seed={','.join(str(s) for s in seeds)}", f"seeds_local={local}", f"hydra.sweep.dir={SWEEP_DIR}",
            f"hydra.launcher.n_jobs={jobs}"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", type=Path, required=True, help="the converged run's kept copy (make converged)")
    parser.add_argument("--results", type=Path, default=ROOT / "results" / "converged",
                        help="the converged run's results (default: results/converged)")
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    parser.add_argument("--jobs", type=int, help="seeds trained at once (default: all of them)")
    parser.add_argument("--local", help="the local variant to replicate (default: the local-m nearest the "
                        "fine-tuned flexible model's window at its selected τ)")
    parser.add_argument("--dry-run", action="store_true", help="print the sweep's command, run nothing")
    args = parser.parse_args(argv)
    if args.jobs is not None and args.jobs < 1:
        parser.error(f"--jobs {args.jobs}: give 1 or more")
    if profile_of(args.keep) != "converged":
        sys.exit(f"error: {args.keep} is not a kept copy of the converged profile (make converged)")
    metrics = args.results / "metrics.json"
    if not metrics.is_file():
        sys.exit(f"error: {metrics}: not found (the converged run has not reached its evaluate stage)")
    local = args.local or local_for_seeds(json.loads(metrics.read_text(encoding="utf-8")))
    cmd = command(args.seeds, local, args.jobs or len(args.seeds))
    print(f"in {args.keep}: {' '.join(cmd[1:])}")
    if args.dry_run:
        return 0
    _, env = dvc_env(args.keep)
    code = subprocess.run(cmd, cwd=args.keep, env=env).returncode
    sweep = args.keep / SWEEP_DIR
    if code != 0 and (sweep / SWEEP_RECORD).is_file():
        # a failed job ends the sweep before its callbacks: the summary and the paired comparisons
        # are rebuilt from the jobs that completed, so that no earlier start's files are copied
        print(f"the seeds sweep ended with status {code}: its summary rebuilt from the jobs that completed")
        for extra in (["flexatt.sweeps", "--no-wandb"], ["flexatt.seeds"]):
            subprocess.run([sys.executable, "-m", extra[0], str(sweep), *extra[1:]], cwd=args.keep, env=env)
    dest = args.results / "seeds"
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    for name in COPIED:
        if (sweep / name).is_file():
            shutil.copy2(sweep / name, dest / name)
    print(f"summary copied to {dest}")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
