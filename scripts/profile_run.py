"""Run the pipeline on a profile (``conf/profile/``) in a scratch copy of the repository.

    python scripts/profile_run.py smoke                       # = make smoke: a temporary copy, removed afterwards
    python scripts/profile_run.py smoke --keep /tmp/s         # keep the copy (and its outputs) in /tmp/s
    python scripts/profile_run.py char --keep artifacts/char --targets evaluate --results results/char
    python scripts/profile_run.py paper --keep RUN_DIR --cache CACHE_DIR --results results/paper \
        --stepwise --beta-from-sweep                          # a long run, one stage at a time

The copy holds the files git tracks (plus uncommitted edits to them), gets a fresh git
repository (DVC needs one; a kept copy of the same profile is refreshed with this tree's files
and committed again, so a second run resumes: DVC skips the stages that are up to date and
training resumes from its last checkpoint), and its ``params.yaml`` is recomposed with
``profile=PROFILE`` exactly as ``dvc exp run -S profile=PROFILE`` would; then ``flexatt repro
[TARGETS]`` (``dvc repro`` with independent stages side by side, as ``make repro`` runs it) runs
there, its output streamed. Your working tree, its params.yaml and its DVC
cache are never touched; ``--results DIR`` copies the run's results (the outputs under
``results/`` of the stages it ran) and its ``dvc.lock`` (which code, data and params made them)
into ``DIR`` of this working tree, with ``provenance.json`` (the commit of this working tree
that the run's code came from, whether the tree had uncommitted edits, the profile, overrides,
the stages done and, with ``--stepwise``, each stage's wall-clock minutes).

For runs of many hours: ``--cache DIR`` keeps the copy's DVC cache in ``DIR`` (outside the work
tree, e.g. on a volume that outlives the machine), ``--stepwise`` runs the stages one at a time
and copies the results after each one (so that what is done can be committed while the rest
runs), and ``--beta-from-sweep`` runs ``sweep_beta`` first and fine-tunes with the β it selected
on dev (``provenance.json``'s ``finetune_beta`` says whether it did, or kept the profile's β
because the sweep selected none). Started again with the same ``--keep`` and ``--cache``, a run resumes: completed stages
are skipped, a training resumes from its last epoch-end checkpoint.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def tracked_files(root: Path) -> list[str]:
    """Files git tracks or would track (untracked but not ignored) under ``root``."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         cwd=root, check=True, capture_output=True).stdout
    return [p for p in out.decode().split("\0") if p and (root / p).is_file()]


def make_copy(dest: Path, overrides: list[str], results: bool = True, files: bool = True) -> None:
    """Copy the repository's files to ``dest``, init git there, compose ``params.yaml``.
    ``results=False`` leaves out ``dvc.lock`` and ``results/``: the products of this working
    tree's run, which another profile's run does not share. ``files=False`` only recomposes
    ``params.yaml`` with ``overrides``: the copy keeps the code it was made with, whatever the
    working tree holds by then."""
    if files:
        copy_files(dest, results)
    subprocess.run([sys.executable, "-m", "flexatt.cli", "params", *overrides], cwd=dest, check=True,
                   env=dvc_env(dest)[1])


def copy_files(dest: Path, results: bool) -> None:
    """The working tree's files (``results=False``: without ``dvc.lock`` and ``results/``) into
    ``dest``, committed to a git repository there (DVC needs one)."""
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


def profile_of(copy: Path) -> str | None:
    """The profile a kept copy was composed with (``None``: not a copy)."""
    import yaml

    params = copy / "params.yaml"
    if not (copy / ".git").is_dir() or not params.is_file():
        return None
    return (yaml.safe_load(params.read_text(encoding="utf-8")) or {}).get("profile")


def dvc_env(copy: Path) -> tuple[str, dict[str, str]]:
    """The ``dvc`` next to this interpreter, and an environment with its bin first on PATH and the
    copy's ``src`` first on ``PYTHONPATH``: the stages run the copy's snapshot of the code (the
    code its ``dvc.lock`` records), not an editable install of a working tree that may change
    while a long run goes on."""
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(copy).resolve() / "src"),
                                                       os.environ.get("PYTHONPATH")])),
           "WANDB_MODE": os.environ.get("WANDB_MODE", "offline")}
    return os.path.join(bin_dir, "dvc"), env


def run_dvc(dest: Path, *args: str) -> subprocess.CompletedProcess:
    """Run ``dvc ARGS`` in ``dest``; its output is captured."""
    dvc, env = dvc_env(dest)
    return subprocess.run([dvc, *args], cwd=dest, env=env, text=True, capture_output=True)


def tree_state() -> dict:
    """This working tree's commit and whether it has uncommitted edits: what a copy made now holds."""
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                           capture_output=True, text=True).stdout.strip()
    return {"commit": head or None, "uncommitted_edits": bool(dirty)}


def provenance(profile: str, overrides: list[str], stages: list[str], source: dict,
               clock: StageClock | None = None) -> dict:
    """Where a run's code came from (``source``: :func:`tree_state` when the copy was made, not
    when this is written: the tree may have moved on meanwhile); with a stepwise run's
    ``clock``, the minutes each stage took."""
    return {**source, "profile": profile, "overrides": overrides, "stages_done": stages,
            **({**clock.record(), "machine": machine()} if clock else {})}


def machine() -> dict:
    """The machine the stage minutes were measured on (CPU, cores, SIMD level, native bf16, torch),
    as the benchmarks record it."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from _common import machine as describe

    return describe()


class StageClock:
    """Minutes per stage of a stepwise run, counted while the stage runs, kept across resumed runs
    in the results' ``provenance.json``:

    * ``stage_minutes``: stage → minutes it ran; a stage that was already up to date keeps the
      minutes recorded when it ran;
    * ``running``: the stage under way, since when, and its ``minutes`` so far (rewritten every
      :data:`SAVE_EVERY` seconds, so a run cut off without warning leaves what it had done);
    * ``resumed_stages``: stages that an interrupted run left unfinished, and
      ``interrupted_minutes``: what those runs had counted of them, added to the minutes of the run
      that finished them — only where the run that takes the stage up again has the same code
      (commit) and overrides, so that it continues the same work. Otherwise (or where the
      interrupted run recorded no minutes) the stage's minutes are those of the finishing run only.
      A stage that runs again from its start (its code, data or params changed) drops what
      earlier runs recorded of it: it is neither resumed nor given their minutes.

    Minutes measured on another machine (``machine`` differs from the ``provenance.json``'s) are
    not this machine's: the clock then starts empty, as a run on a new kind of machine.

    Time is counted by ticks of at most :data:`TICK` seconds: while the processes are stopped
    (``SIGSTOP``, e.g. to give a CI run the cores) no tick comes, and the gap after it counts as one
    tick, so a held run's wall-clock is not counted as work."""

    TICK = 15.0
    SAVE_EVERY = 60.0

    def __init__(self, results: Path | None, machine: dict | None = None):
        old = {}
        if results is not None and (results / "provenance.json").is_file():
            old = json.loads((results / "provenance.json").read_text(encoding="utf-8"))
        if machine is not None and old.get("machine") not in (None, machine):
            old = {}
        self.minutes: dict[str, float] = dict(old.get("stage_minutes", {}))
        self.resumed: list[str] = list(old.get("resumed_stages", []))
        self.interrupted: dict[str, float] = dict(old.get("interrupted_minutes", {}))
        self.left: dict = old.get("running") or {}
        if self.left.get("stage") and self.left["stage"] not in self.resumed:
            self.resumed.append(self.left["stage"])
        self.running: dict | None = None

    def start(self, stage: str, origin: dict | None = None) -> None:
        """Start counting ``stage``, run by ``origin`` (``{"commit", "overrides"}``); the minutes an
        interrupted run of the same origin had counted of it are carried on."""
        left, origin = self.left, origin or {}
        carried = left.get("stage") == stage and bool(left.get("minutes")) and left.get("origin") == origin
        if carried:
            self.interrupted[stage] = left["minutes"]
        self.running = {"stage": stage, "since": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "origin": origin,
                        "seconds": 60 * left["minutes"] if carried else 0.0, "last": time.monotonic()}

    def tick(self) -> None:
        """Count the time since the last tick (at most two ticks' worth: see the class)."""
        if self.running:
            now = time.monotonic()
            self.running["seconds"] += min(now - self.running["last"], 2 * self.TICK)
            self.running["last"] = now

    def stop(self, ran: bool) -> None:
        self.tick()
        stage = (self.running or {}).get("stage")
        # up to date, yet its minutes never recorded: an interrupted run finished it but was cut
        # off before writing them; what it had counted stands
        if stage and (ran or (stage not in self.minutes and stage in self.interrupted)):
            self.minutes[stage] = round(self.running["seconds"] / 60, 2)
        if stage and ran and stage != self.left.get("stage"):  # ran from its start: earlier runs' record of it is void
            self.interrupted.pop(stage, None)
            self.resumed = [s for s in self.resumed if s != stage]
        self.running = None

    def record(self) -> dict:
        running = ({"stage": self.running["stage"], "since": self.running["since"],
                    "minutes": round(self.running["seconds"] / 60, 2), "origin": self.running["origin"]}
                   if self.running else None)
        return {"stage_minutes": self.minutes, "resumed_stages": self.resumed,
                "interrupted_minutes": self.interrupted, "running": running}


def run_counted(cmd: list[str], cwd: Path, env: dict[str, str], clock: StageClock,
                save: Callable[[], None] | None) -> int:
    """Run ``cmd`` to its end, ticking ``clock`` while it runs and calling ``save`` (the
    provenance with the minutes so far) every :attr:`StageClock.SAVE_EVERY` seconds."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=env)
    saved = time.monotonic()
    while True:
        try:
            return proc.wait(timeout=clock.TICK)
        except subprocess.TimeoutExpired:
            clock.tick()
            if save is not None and time.monotonic() - saved >= clock.SAVE_EVERY:
                save()
                saved = time.monotonic()


def stage_names(copy: Path) -> list[str]:
    """The copy's stages in dvc.yaml order (foreach stages expanded), which is an order that
    runs every stage after the ones it depends on."""
    result = run_dvc(copy, "stage", "list", "--name-only")
    if result.returncode != 0:
        sys.exit(f"error: dvc stage list failed in {copy}: {result.stderr.strip()}")
    return [line.strip() for line in result.stdout.splitlines() if line.strip()]


def selected_beta(copy: Path) -> float | None:
    """The β the copy's ``sweep_beta`` stage selected on dev (``None``: none within tolerance)."""
    import yaml

    out = yaml.safe_load((copy / "params.yaml").read_text(encoding="utf-8"))["sweep_beta"]["out"]
    return json.loads((copy / out).read_text(encoding="utf-8"))["selected_beta"]


def copy_results(copy: Path, dest: Path, stages: list[str] | None = None) -> list[str]:
    """Replace ``dest`` with the copy's ``dvc.lock`` and the outputs under ``results/`` of the
    stages it lists (what this run made; files of stages it did not run are left out).
    ``stages``: only these stages' lock entries and outputs (a stepwise run's stages done: not
    those that a restored lock of an earlier run, on other code or another machine, still lists
    while this run has yet to make them again). Returns the copied paths, relative to
    ``results/``."""
    import yaml

    lock = yaml.safe_load((copy / "dvc.lock").read_text(encoding="utf-8"))
    if stages is not None:
        lock["stages"] = {name: entry for name, entry in lock["stages"].items() if name in stages}
    outs = [Path(o["path"]) for stage in lock["stages"].values() for o in stage.get("outs", [])]
    files = sorted({f for out in outs if out.parts[0] == "results"
                    for f in ([copy / out] if (copy / out).is_file() else (copy / out).rglob("*")) if f.is_file()})
    if dest.exists():
        for entry in dest.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    copied = []
    for f in files:
        rel = f.relative_to(copy / "results")
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(f, dest / rel)
        copied.append(str(rel))
    if stages is None:
        shutil.copy2(copy / "dvc.lock", dest / "dvc.lock")
    else:
        (dest / "dvc.lock").write_text(yaml.safe_dump(lock, sort_keys=False, width=1 << 20), encoding="utf-8")
    return copied


def main(argv: list[str] | None = None, profile: str | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    if profile is None:
        parser.add_argument("profile", help="a profile of conf/profile/ (smoke, char, default, paper)")
    parser.add_argument("--keep", type=Path, help="make the copy here and keep it")
    parser.add_argument("--targets", nargs="+", default=[], metavar="STAGE",
                        help="run only these stages and what they need (dvc repro STAGE ...)")
    parser.add_argument("--results", type=Path, help="copy the run's results/ and dvc.lock here")
    parser.add_argument("--cache", type=Path, help="the copy's DVC cache (default: inside the copy)")
    parser.add_argument("--stepwise", action="store_true",
                        help="run the stages one at a time, copying the results (--results) after each")
    parser.add_argument("--beta-from-sweep", action="store_true",
                        help="run sweep_beta first, then fine-tune with the beta it selected on dev")
    parser.add_argument("overrides", nargs="*", default=[], help="extra Hydra overrides")
    args = parser.parse_args(argv)
    profile = profile or args.profile
    if not (ROOT / "conf/profile" / f"{profile}.yaml").is_file():
        sys.exit(f"error: no profile {profile!r} in conf/profile/")
    dest = args.keep or Path(tempfile.mkdtemp(prefix=f"flexatt-{profile}-"))
    if dest.exists() and any(dest.iterdir()) and profile_of(dest) != profile:
        sys.exit(f"error: {dest} is not empty (and not a kept copy of the {profile} profile)")
    overrides = [f"profile={profile}", *args.overrides]
    try:
        source = tree_state()
        make_copy(dest, overrides, results=False)
        if args.cache:
            args.cache.mkdir(parents=True, exist_ok=True)
            result = run_dvc(dest, "cache", "dir", "--local", str(args.cache.resolve()))
            if result.returncode != 0:
                sys.exit(f"error: dvc cache dir {args.cache}: {result.stderr.strip()}")
        if args.results and not (dest / "dvc.lock").is_file():
            restore(dest, args.results)
        dvc, env = dvc_env(dest)
        done = earlier_stages(args.results, dest, source) if args.results else []
        clock = StageClock(args.results if args.stepwise else None, machine() if args.stepwise else None)

        def repro(targets: list[str]) -> int:
            sys.stdout.flush()
            if not args.stepwise:  # make repro's way: independent stages side by side (flexatt.schedule)
                code = subprocess.run([sys.executable, "-m", "flexatt.cli", "repro", *targets], cwd=dest,
                                      env=env).returncode
                done.extend(t for t in targets or ["all"] if t not in done)
                return code
            needed = needed_stages(dest, targets) if targets else None
            for name in stage_names(dest):
                if needed is not None and name not in needed:
                    continue
                up_to_date = run_dvc(dest, "status", "--quiet", name).returncode == 0
                clock.start(name, {"commit": source["commit"], "overrides": list(overrides)})
                if args.results and not up_to_date and (args.results / "dvc.lock").is_file():
                    write_provenance(args.results, profile, overrides, done, source, clock)  # mark it running
                save = ((lambda: write_provenance(args.results, profile, overrides, done, source, clock))
                        if args.results and not up_to_date else None)
                code = run_counted([dvc, "repro", "--single-item", name], dest, env, clock, save)
                if code != 0:
                    return code
                clock.stop(ran=not up_to_date)
                if name not in done:  # the beta step's pass and the main pass share the stages before it
                    done.append(name)
                if args.results:
                    copy_results(dest, args.results, done)
                    write_provenance(args.results, profile, overrides, done, source, clock)
            return 0

        if args.beta_from_sweep:
            returncode = repro(["sweep_beta"])
            if returncode != 0:
                return returncode
            beta = selected_beta(dest)
            if beta is None:
                print("sweep_beta selected no beta (none within the tolerance of beta = 0): fine-tuning keeps "
                      "finetune.beta of the profile")
                source["finetune_beta"] = "the profile's: sweep_beta selected none within its tolerance"
            else:
                print(f"sweep_beta selected beta = {beta:g}: fine-tuning with it")
                source["finetune_beta"] = "selected by sweep_beta on dev"
                overrides.append(f"finetune.beta={beta!r}")
                make_copy(dest, overrides, results=False, files=False)
        returncode = repro(args.targets)
        if returncode == 0:  # what make repro shows: Table 1 and where the rest is
            table = dest / "results/table1.md"
            if table.is_file():
                print(table.read_text(encoding="utf-8"), end="")
            if args.keep:
                print(f"Figures: {dest}/results/figures/; metrics: {dest}/results/*.json (dvc metrics show "
                      f"there); W&B runs: {dest}/wandb/")
            else:
                print("Figures, metrics and W&B runs are in a scratch copy, removed when this run ends "
                      "(--keep DIR keeps it)")
            if args.results:
                copied = copy_results(dest, args.results, done if args.stepwise else None)
                write_provenance(args.results, profile, overrides, done, source, clock if args.stepwise else None)
                print(f"{len(copied)} result files and dvc.lock copied to {args.results}")
        return returncode
    finally:
        if args.keep is None:
            shutil.rmtree(dest, ignore_errors=True)


def restore(copy: Path, results: Path) -> None:
    """Start a new copy where an earlier run of it stopped: its ``dvc.lock`` and results from
    ``results`` (what :func:`copy_results` saved, e.g. committed), and the outputs of its
    completed stages checked out of the DVC cache (``--cache``). Stages whose outputs the cache
    does not hold run again."""
    lock = results / "dvc.lock"
    if not lock.is_file():
        return
    for f in results.rglob("*"):
        if f.is_file() and f.name not in ("dvc.lock", "provenance.json"):
            target = copy / "results" / f.relative_to(results)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, target)
    shutil.copy2(lock, copy / "dvc.lock")
    checkout = run_dvc(copy, "checkout")
    print(f"resuming from {lock}: dvc checkout {'restored the completed stages' if checkout.returncode == 0 else 'restored what the cache holds'}")


def earlier_stages(results: Path, copy: Path, source: dict) -> list[str]:
    """The stages an earlier run of the same code (commit) recorded as done in ``results``'
    ``provenance.json`` and that the copy's ``dvc.lock`` still holds: a run made of several
    invocations (``--targets A``, then ``--targets B``, then the rest) lists every stage it has
    done, not only the last invocation's."""
    import yaml

    provenance, lock = results / "provenance.json", copy / "dvc.lock"
    if not provenance.is_file() or not lock.is_file():
        return []
    old = json.loads(provenance.read_text(encoding="utf-8"))
    if old.get("commit") != source.get("commit"):
        return []
    locked = (yaml.safe_load(lock.read_text(encoding="utf-8")) or {}).get("stages") or {}
    return [name for name in dict.fromkeys(old.get("stages_done") or []) if name in locked]


def needed_stages(copy: Path, targets: list[str]) -> set[str]:
    """``targets`` and every stage they depend on: the nodes of ``dvc dag --dot TARGET`` for each
    target (``dvc dag`` takes one target at a time)."""
    import re

    needed: set[str] = set()
    for target in targets:
        result = run_dvc(copy, "dag", "--dot", target)
        if result.returncode != 0:
            sys.exit(f"error: dvc dag {target} failed in {copy}: {result.stderr.strip()}")
        needed |= set(re.findall(r'^"([^"]+)";$', result.stdout, flags=re.M))
    return needed


def write_provenance(dest: Path, profile: str, overrides: list[str], stages: list[str], source: dict,
                     clock: StageClock | None = None) -> None:
    """``dest/provenance.json``, replaced in one rename: it is rewritten every minute while a stage
    runs, and whatever reads it meanwhile (a commit of the results, the README's figures) must
    never see half a file."""
    from flexatt.io import atomic_path

    with atomic_path(dest / "provenance.json") as tmp:
        Path(tmp).write_text(json.dumps(provenance(profile, overrides, stages, source, clock), indent=2) + "\n",
                             encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
