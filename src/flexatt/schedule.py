"""``flexatt repro``: ``dvc repro`` with independent stages side by side.

DVC runs a pipeline's stages one after another. On a CPU, two trainings of one thread each do
more work per hour than one training of two threads (:mod:`flexatt.parallel`), and the default
pipeline has up to six trainings that depend on nothing but the tokenizer. ``flexatt repro``
runs the same stages, each as ``dvc repro --single-item <stage>`` (DVC releases its repository
lock while a stage's command runs, so two can run at once; each records its own ``dvc.lock``
entry), in the order of the DAG, on as many cores as the machine has:

* a training stage (``train@``, ``finetune@``, ``control@``) takes ``train.threads`` cores, and
  so does a long profile's unit step (``train@``, ``decode@`` of ``pipelines/<profile>/dvc.yaml``:
  its profile's ``train.threads``);
* any other stage takes one core while other stages wait to run beside it, else every free core;
  a stage that trains several models (``sweep_beta``, ``sweep_sigma``) runs as many of them at
  once as its cores hold (``$FLEXATT_JOBS``, :func:`flexatt.parallel.jobs`).

Of the stages ready to start, a long profile's units go by the stage of its plan they belong to
(:func:`unit_phases`: each claim's first seed on every corpus before any second seed), then
those that train several models go first (they are the longest), then those that more stages
wait on.

Every stage's arithmetic is what ``dvc repro`` gives: a training's thread count is its parameter
``train.threads``, never the cores it got, and decoding does not depend on the thread count. A
stage whose dependencies did not change, and none of whose upstream stages runs, is skipped, as
``dvc repro`` skips it; a stage downstream of one that runs is handed to DVC, which decides.
With ``--commit`` (``commit=True``), each stage that succeeds is committed to git at once, its
git-kept outputs and its ``dvc.lock`` and nothing else (:func:`commit_stage`): a long run's
finished units are kept even when the machine is gone before the run ends. A long profile's unit
is frozen first (:func:`flexatt.freeze.freeze`: it moves from ``pending`` to ``finished``), so
that a later edit of the code does not mark it stale.

Each stage's output goes to ``<log_dir>/<stage>.log``; the terminal gets a line when a stage
starts or ends, and every ``progress_every`` seconds the last line of each running stage's log.
The first stage that fails stops the run: nothing more starts, the ones under way finish, and
the exit status is non-zero.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from flexatt.parallel import JOBS_ENV, SIDE_BY_SIDE_ENV, cores

#: stages whose command is one training (their cores: ``train.threads``)
TRAINING_PREFIXES = ("train@", "finetune@", "control@")
#: stages that train several models: long, so they start before stages of one training
WIDE_STAGES = ("sweep_beta", "sweep_sigma")
LOG_DIR = Path("logs")
#: a stage's log shows its progress bar as it moves: output unbuffered, and Rich (Lightning's
#: progress bar) draws into the file as into a terminal of this width, without colours (the
#: cursor codes it writes are stripped where a log line is read, :func:`_last_line`)
PROGRESS_ENV = {"PYTHONUNBUFFERED": "1", "TTY_COMPATIBLE": "1", "TTY_INTERACTIVE": "1", "NO_COLOR": "1",
                "COLUMNS": "160"}
#: a terminal control sequence (CSI: cursor moves, line erasing, showing and hiding the cursor)
_CSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@dataclass
class Plan:
    """The stages to hand to DVC, in the DAG's order, and each one's upstream stages among them."""

    order: list[str]
    upstream: dict[str, set[str]] = field(default_factory=dict)

    def downstream(self, name: str) -> int:
        """How many stages of the plan wait on ``name``, directly or not: stages that more wait
        on start first."""
        found, frontier = set(), {name}
        while frontier:
            frontier = {n for n in self.order if self.upstream[n] & frontier} - found
            found |= frontier
        return len(found)


def plan(targets: list[str] | None = None, force: bool = False, root: str | os.PathLike = ".") -> Plan:
    """The stages of ``targets`` (stage names, or a pipeline's file, ``pipelines/smoke/dvc.yaml``,
    for each of its stages; default: every stage of the root ``dvc.yaml``, the pipeline ``dvc
    repro`` runs without targets, not the profiles' ``pipelines/*/dvc.yaml``) and their upstream
    stages that ``dvc repro`` would run: those that changed (all with ``force``) and every stage
    downstream of one of them."""
    import networkx as nx
    from dvc.repo import Repo

    with Repo(str(root)) as repo:
        graph = repo.index.graph  # an edge a -> b: stage a depends on stage b
        stages = {stage.addressing: stage for stage in graph}
        if targets:
            targets = [name for t in targets for name in _expand(t, stages)]
            unknown = [t for t in targets if t not in stages]
            if unknown:
                raise ValueError(f"no such stage: {', '.join(unknown)} (stages: {', '.join(sorted(stages))})")
            keep = set(targets)
            for t in targets:
                keep |= {s.addressing for s in nx.descendants(graph, stages[t])}
        else:  # DVC addresses a stage of another dvc.yaml as <file>:<name>
            keep = {name for name in stages if ":" not in name}
            for name in list(keep):
                keep |= {s.addressing for s in nx.descendants(graph, stages[name])}
        order = [s.addressing for s in reversed(list(nx.topological_sort(graph))) if s.addressing in keep]
        upstream = {name: {s.addressing for s in graph.successors(stages[name])} & keep for name in order}
        with repo.lock:
            changed = {name for name in order if force or stages[name].changed()}
    run: list[str] = []
    for name in order:
        if name in changed or upstream[name] & set(run):
            run.append(name)
    return Plan(run, {name: upstream[name] & set(run) for name in run})


def _expand(target: str, stages) -> list[str]:
    """A pipeline's file (``pipelines/smoke/dvc.yaml``) as each of its stages; any other target
    (or a file with no stage) as itself."""
    if target.endswith("dvc.yaml"):
        return [name for name in stages if name.startswith(f"{target}:")] or [target]
    return [target]


def training_threads(root: str | os.PathLike = ".") -> int:
    """``train.threads`` of ``params.yaml`` (1 when it has none)."""
    import yaml

    params = yaml.safe_load(Path(root, "params.yaml").read_text(encoding="utf-8")) or {}
    return int((params.get("train") or {}).get("threads") or 1)


def _last_line(path: Path) -> str:
    """The last non-empty line of a log as a terminal would show it (a progress bar's latest
    state: the last text after a carriage return or a cursor move), at most 100 characters."""
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, path.stat().st_size - 4096))
            tail = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    tail = _CSI.sub("\r", tail)  # a cursor move starts the line anew, as \r does
    segments = [[seg.strip() for seg in line.split("\r") if seg.strip()] for line in tail.split("\n")]
    lines = [line[-1] for line in segments if line]
    return lines[-1][:100] if lines else ""


@dataclass
class _Running:
    process: subprocess.Popen
    log: Path
    cores: int
    started: float


#: a profile pipeline's stage: ``pipelines/<profile>/dvc.yaml:<stage>`` (a long profile's units, or a
#: short profile's stages, generated from the root dvc.yaml by :mod:`flexatt.pipeline`)
PROFILE_STAGE = re.compile(r"pipelines/(?P<profile>[\w-]+)/dvc\.yaml:(?P<stage>[\w-]+)(?:@(?P<key>\S+))?")


def unit_phases(names: list[str], root: str | os.PathLike = ".") -> dict[str, int]:
    """The plan's stage (:func:`flexatt.products.phase`: 0 the first seed of every claim, 1 the
    other seeds, 2 the fine-tuning pairs) of each long profile's unit stage among ``names``
    (``pipelines/<profile>/dvc.yaml:train@<unit>`` or ``decode@``): the units of several profiles
    start by it, so every corpus has each claim's first seed before any has a second."""
    from flexatt.products import parse_unit, phase, read_plan

    out, specs = {}, {}
    for name in names:
        found = PROFILE_STAGE.fullmatch(name)
        if not found or found["stage"] not in ("train", "decode"):
            continue
        profile = found["profile"]
        if not (Path(root) / "pipelines" / profile / "units.yaml").is_file():  # a short profile's train@<variant>
            continue
        if profile not in specs:
            specs[profile] = read_plan(Path(root) / "conf" / "units" / f"{profile}.yaml")
        item = _pending(Path(root), profile).get(found["key"])
        if item is not None:
            out[name] = phase(specs[profile], parse_unit(item["unit"]))
    return out


def _pending(root: Path, profile: str) -> dict[str, dict]:
    import yaml

    return yaml.safe_load((root / "pipelines" / profile / "units.yaml").read_text())["pending"]


def commit_stage(name: str, root: str | os.PathLike = ".") -> list[str]:
    """Commit what stage ``name`` just wrote: the outputs that git keeps (``cache: false`` and not
    git-ignored), its ``dvc.lock``; for a long profile's ``decode@<unit>``, the unit frozen first
    (:func:`flexatt.freeze.freeze`) with its ``units.yaml``. Only those paths are staged and
    committed: other edits in the tree stay as they are. Returns the paths committed."""
    from dvc.repo import Repo

    root = Path(root).resolve()
    with Repo(str(root)) as repo:
        stage = next(s for s in repo.index.stages if s.addressing == name)
        paths = [Path(o.fs_path).relative_to(root) for o in stage.outs if not o.use_cache]
        paths.append(Path(stage.path).with_name("dvc.lock").relative_to(root))
    message = f"{name}: done"
    found = PROFILE_STAGE.fullmatch(name)
    if found and found["stage"] == "decode":
        from flexatt.freeze import freeze

        freeze(found["profile"], root, only=[_pending(root, found["profile"])[found["key"]]["unit"]])
        paths.append(Path("pipelines") / found["profile"] / "units.yaml")
        message = f"{found['profile']}: unit {found['key']} finished, frozen (flexatt repro --commit)"
    names = [str(p) for p in paths if (root / p).exists()  # made again in seconds where git ignores it
             and subprocess.run(["git", "check-ignore", "-q", str(p)], cwd=root).returncode != 0]
    subprocess.run(["git", "add", "--", *names], cwd=root, check=True)
    if subprocess.run(["git", "diff", "--cached", "--quiet", "--", *names], cwd=root).returncode != 0:
        subprocess.run(["git", "commit", "-qm", message, "--", *names], cwd=root, check=True)
    return names


def run(the_plan: Plan, force: bool = False, n_cores: int | None = None, threads: int = 1,
        log_dir: Path = LOG_DIR, progress_every: float = 60.0, dvc: str = "dvc", commit: bool = False) -> int:
    """Run the stages of ``the_plan`` (see the module doc); the exit status: 0 when every stage
    succeeded, else the first failure's."""
    n_cores = n_cores or cores()
    log_dir.mkdir(parents=True, exist_ok=True)
    done: set[str] = set()
    waiting = list(the_plan.order)
    running: dict[str, _Running] = {}
    status, last_report, t0 = 0, time.monotonic(), time.monotonic()

    def need(name: str, free: int, others: bool) -> int:
        if name.startswith(TRAINING_PREFIXES):
            return min(threads, n_cores)
        found = PROFILE_STAGE.fullmatch(name)
        if found and found["stage"] in ("train", "decode", "finetune", "control"):  # its profile's train.threads
            return min(training_threads(Path("pipelines") / found["profile"]), n_cores)
        return 1 if others else free

    phases = unit_phases(the_plan.order)
    rank = {name: (phases.get(name, 0), name not in WIDE_STAGES, -the_plan.downstream(name), i)
            for i, name in enumerate(the_plan.order)}
    print(f"flexatt repro: {len(waiting)} stage(s) on {n_cores} core(s), trainings at {threads} thread(s) "
          f"each; logs in {log_dir}/", flush=True)
    while waiting or running:
        ready = sorted((n for n in waiting if the_plan.upstream[n] <= done), key=rank.get) if status == 0 else []
        free = n_cores - sum(r.cores for r in running.values())
        for name in ready:
            others = len(ready) > 1 or bool(running)
            want = need(name, free, others)
            if want < 1 or want > free:
                continue
            log = log_dir / f"{re.sub(r'[@:/]', '_', name)}.log"
            env = {**os.environ, "OMP_NUM_THREADS": str(want), JOBS_ENV: str(max(1, want // threads)),
                   SIDE_BY_SIDE_ENV: str(max(1, n_cores // threads)), **PROGRESS_ENV}
            cmd = [dvc, "--wait-for-lock", "repro", "--single-item", *(["--force"] if force else []), name]
            with open(log, "wb") as out:
                process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
            running[name] = _Running(process, log, want, time.monotonic())
            waiting.remove(name)
            free -= want
            print(f"[{_clock(t0)}] {name}: started ({want} core{'s' if want > 1 else ''})", flush=True)
        time.sleep(0.5)
        for name, r in list(running.items()):
            code = r.process.poll()
            if code is None:
                continue
            del running[name]
            minutes = (time.monotonic() - r.started) / 60
            if code == 0:
                done.add(name)
                print(f"[{_clock(t0)}] {name}: done in {minutes:.1f} min", flush=True)
                if commit:
                    print(f"[{_clock(t0)}] {name}: committed {', '.join(commit_stage(name))}", flush=True)
            else:
                status = status or code
                print(f"[{_clock(t0)}] {name}: FAILED (exit status {code}) after {minutes:.1f} min; "
                      f"its log ({r.log}) ends:", flush=True)
                lines = r.log.read_text(encoding="utf-8", errors="replace").splitlines()
                print("\n".join("    " + line for line in lines[-15:]), flush=True)
        if status and not running:
            break
        if running and time.monotonic() - last_report >= progress_every:
            last_report = time.monotonic()
            for name, r in running.items():
                print(f"[{_clock(t0)}] {name}: {_last_line(r.log)}", flush=True)
    if status == 0:
        print(f"flexatt repro: {len(done)} stage(s) done in {(time.monotonic() - t0) / 60:.1f} min", flush=True)
    else:
        print(f"flexatt repro: stopped after a failure; not started: {', '.join(waiting) or 'none'}", flush=True)
    return status


def _clock(t0: float) -> str:
    seconds = int(time.monotonic() - t0)
    return f"{seconds // 3600:d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def main(targets: list[str], force: bool = False, n_cores: int | None = None, commit: bool = False) -> int:
    """``flexatt repro [STAGE ...] [--force] [--cores N] [--commit]``."""
    try:
        the_plan = plan(targets, force)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not the_plan.order:
        print("flexatt repro: every stage is up to date", flush=True)
        return 0
    return run(the_plan, force=force, n_cores=n_cores, threads=training_threads(), commit=commit)
