"""Run the pipeline on a profile (``conf/profile/``) in a scratch copy of the repository.

    python scripts/profile_run.py smoke                       # = make smoke: a temporary copy, removed afterwards
    python scripts/profile_run.py smoke --keep /tmp/s         # keep the copy (and its outputs) in /tmp/s
    python scripts/profile_run.py char --keep artifacts/char --targets evaluate --results results/char

The copy holds the files git tracks (plus uncommitted edits to them), gets a fresh git
repository (DVC needs one; a kept copy of the same profile is refreshed with this tree's files
and committed again, so a second run resumes: DVC skips the stages that are up to date and
training resumes from its last checkpoint), and its ``params.yaml`` is recomposed with
``profile=PROFILE`` exactly as ``dvc exp run -S profile=PROFILE`` would; then ``dvc repro
[TARGETS]`` runs there, its output streamed. Your working tree, its params.yaml and its DVC
cache are never touched; ``--results DIR`` copies the run's results (the outputs under
``results/`` of the stages it ran) and its ``dvc.lock`` (which code, data and params made them)
into ``DIR`` of this working tree.
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


def make_copy(dest: Path, overrides: list[str], results: bool = True) -> None:
    """Copy the repository's files to ``dest``, init git there, compose ``params.yaml``.
    ``results=False`` leaves out ``dvc.lock`` and ``results/``: the products of this working
    tree's run, which another profile's run does not share."""
    for rel in tracked_files(ROOT):
        if not results and (rel == "dvc.lock" or rel.startswith("results/")):
            continue
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, target)
    env = {**os.environ, "GIT_AUTHOR_NAME": "flexatt", "GIT_AUTHOR_EMAIL": "flexatt@example.invalid",
           "GIT_COMMITTER_NAME": "flexatt", "GIT_COMMITTER_EMAIL": "flexatt@example.invalid"}
    subprocess.run(["git", "init", "-q"], cwd=dest, check=True)
    subprocess.run(["git", "add", "-A"], cwd=dest, check=True)
    subprocess.run(["git", "commit", "-qm", "scratch copy", "--allow-empty"], cwd=dest, check=True, env=env)
    subprocess.run([sys.executable, "-m", "flexatt.cli", "params", *overrides], cwd=dest, check=True)


def profile_of(copy: Path) -> str | None:
    """The profile a kept copy was composed with (``None``: not a copy)."""
    import yaml

    params = copy / "params.yaml"
    if not (copy / ".git").is_dir() or not params.is_file():
        return None
    return (yaml.safe_load(params.read_text(encoding="utf-8")) or {}).get("profile")


def dvc_env() -> tuple[str, dict[str, str]]:
    """The ``dvc`` next to this interpreter, and an environment with its bin first on PATH."""
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
           "WANDB_MODE": os.environ.get("WANDB_MODE", "offline")}
    return os.path.join(bin_dir, "dvc"), env


def run_dvc(dest: Path, *args: str) -> subprocess.CompletedProcess:
    """Run ``dvc ARGS`` in ``dest``; its output is captured."""
    dvc, env = dvc_env()
    return subprocess.run([dvc, *args], cwd=dest, env=env, text=True, capture_output=True)


def copy_results(copy: Path, dest: Path) -> list[str]:
    """Replace ``dest`` with the copy's ``dvc.lock`` and the outputs under ``results/`` of the
    stages it lists (what this run made; files of stages it did not run are left out).
    Returns the copied paths, relative to ``results/``."""
    import yaml

    lock = yaml.safe_load((copy / "dvc.lock").read_text(encoding="utf-8"))
    outs = [Path(o["path"]) for stage in lock["stages"].values() for o in stage.get("outs", [])]
    files = sorted({f for out in outs if out.parts[0] == "results"
                    for f in ([copy / out] if (copy / out).is_file() else (copy / out).rglob("*")) if f.is_file()})
    if dest.exists():
        shutil.rmtree(dest)
    copied = []
    for f in files:
        rel = f.relative_to(copy / "results")
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(f, dest / rel)
        copied.append(str(rel))
    shutil.copy2(copy / "dvc.lock", dest / "dvc.lock")
    return copied


def main(argv: list[str] | None = None, profile: str | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    if profile is None:
        parser.add_argument("profile", help="a profile of conf/profile/ (smoke, char, default, paper)")
    parser.add_argument("--keep", type=Path, help="make the copy here and keep it")
    parser.add_argument("--targets", nargs="+", default=[], metavar="STAGE",
                        help="run only these stages and what they need (dvc repro STAGE ...)")
    parser.add_argument("--results", type=Path, help="copy the run's results/ and dvc.lock here")
    parser.add_argument("overrides", nargs="*", default=[], help="extra Hydra overrides")
    args = parser.parse_args(argv)
    profile = profile or args.profile
    if not (ROOT / "conf/profile" / f"{profile}.yaml").is_file():
        sys.exit(f"error: no profile {profile!r} in conf/profile/")
    dest = args.keep or Path(tempfile.mkdtemp(prefix=f"flexatt-{profile}-"))
    if dest.exists() and any(dest.iterdir()) and profile_of(dest) != profile:
        sys.exit(f"error: {dest} is not empty (and not a kept copy of the {profile} profile)")
    try:
        make_copy(dest, [f"profile={profile}", *args.overrides], results=False)
        dvc, env = dvc_env()
        sys.stdout.flush()
        returncode = subprocess.run([dvc, "repro", *args.targets], cwd=dest, env=env).returncode
        if returncode == 0:  # what make repro shows: Table 1 and where the rest is
            print((dest / "results/table1.md").read_text(encoding="utf-8"), end="")
            where = dest if args.keep else "the copy (removed; --keep DIR keeps it)"
            print(f"Figures: {where}/results/figures/; metrics: results/*.json (dvc metrics show); "
                  f"W&B runs: {where}/wandb/")
            if args.results:
                copied = copy_results(dest, args.results)
                print(f"{len(copied)} result files and dvc.lock copied to {args.results}")
        return returncode
    finally:
        if args.keep is None:
            shutil.rmtree(dest, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
