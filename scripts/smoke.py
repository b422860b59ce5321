"""Run the whole pipeline on the tiny synthetic ``smoke`` profile, in a scratch copy of the repo.

    python scripts/smoke.py                 # a temporary copy, removed afterwards
    python scripts/smoke.py --keep /tmp/s   # keep the copy (and its outputs) in /tmp/s

The copy holds the files git tracks (plus uncommitted edits to them), gets a fresh git
repository (DVC needs one), and its ``params.yaml`` is recomposed with ``profile=smoke`` exactly
as ``dvc exp run -S profile=smoke`` would; then ``dvc repro`` runs there. Your working tree, its
params.yaml and its DVC cache are never touched.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def tracked_files(root: Path) -> list[str]:
    """Files git tracks or would track (untracked but not ignored) under ``root``."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         cwd=root, check=True, capture_output=True).stdout
    return [p for p in out.decode().split("\0") if p and (root / p).is_file()]


def make_copy(dest: Path, overrides: list[str]) -> None:
    """Copy the repository's files to ``dest``, init git there, compose ``params.yaml``."""
    for rel in tracked_files(ROOT):
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, target)
    env = {**os.environ, "GIT_AUTHOR_NAME": "smoke", "GIT_AUTHOR_EMAIL": "smoke@example.invalid",
           "GIT_COMMITTER_NAME": "smoke", "GIT_COMMITTER_EMAIL": "smoke@example.invalid"}
    subprocess.run(["git", "init", "-q"], cwd=dest, check=True)
    subprocess.run(["git", "add", "-A"], cwd=dest, check=True)
    subprocess.run(["git", "commit", "-qm", "smoke copy"], cwd=dest, check=True, env=env)
    subprocess.run([sys.executable, "-m", "flexatt.cli", "params", *overrides], cwd=dest, check=True)


def run_dvc(dest: Path, *args: str) -> subprocess.CompletedProcess:
    """Run ``dvc ARGS`` in ``dest`` with this interpreter's environment first on PATH."""
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
           "WANDB_MODE": os.environ.get("WANDB_MODE", "offline")}
    return subprocess.run([os.path.join(bin_dir, "dvc"), *args], cwd=dest, env=env, text=True,
                          capture_output=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", type=Path, help="make the copy here and keep it")
    parser.add_argument("overrides", nargs="*", default=[], help="extra Hydra overrides")
    args = parser.parse_args(argv)
    dest = args.keep or Path(tempfile.mkdtemp(prefix="flexatt-smoke-"))
    if dest.exists() and any(dest.iterdir()):
        sys.exit(f"error: {dest} is not empty")
    try:
        make_copy(dest, ["profile=smoke", *args.overrides])
        result = run_dvc(dest, "repro")
        print(result.stdout, end="")
        print(result.stderr, end="", file=sys.stderr)
        if result.returncode == 0:  # what make repro shows: Table 1 and where the rest is
            print((dest / "results/table1.md").read_text(encoding="utf-8"), end="")
            where = dest if args.keep else "the copy (removed; --keep DIR keeps it)"
            print(f"Figures: {where}/results/figures/; metrics: results/*.json (dvc metrics show); "
                  f"W&B runs: {where}/wandb/")
        return result.returncode
    finally:
        if args.keep is None:
            shutil.rmtree(dest, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
