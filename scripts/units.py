"""Run a long profile's units, one at a time, in a kept copy; each unit's products go to
``results/<profile>/units/<unit>/`` the moment it finishes (``flexatt.units``).

    python scripts/units.py bible --list              # the plan: done, next (minutes each), waiting
    python scripts/units.py bible                     # = make bible: every pending unit
    python scripts/units.py bible --units 1 --commit  # the next unit, committed when done
    python scripts/units.py bible --only global-s1    # one unit by name
    python scripts/units.py bible grc                 # = make units: both, stage by stage
    python scripts/units.py grc --only global-s1 --set data=nt_grc_en_x3 \
        --results results/grc/probes/x3/units --keep runs/grc-x3   # a probe under an override

The copy (``--keep``, default ``runs/<profile>``, git-ignored) holds this working tree's files
and a ``params.yaml`` composed with ``profile=<profile>``; it is refreshed at every start, so a
unit runs the code of the commit it names (``unit.json``: ``source``). The profile's data are
made there by its own stages (``dvc repro tokenize``), and their digests must equal those the
finished units recorded: a unit is only ever compared with units trained on the same data. A
unit's training checkpoints stay in the copy (``units/<unit>/``): started again after an
interruption, the unit resumes from its last epoch (its minutes then add up its attempts', and
``--list`` says how many) if the code its process runs is unchanged: ``flexatt.units`` and its
imports, the trainer's included (the code digest of the fingerprint :mod:`flexatt.trainer`
checks); after a commit that edits them, it trains from its first epoch. A lost copy costs at
most the unit under way. With ``--commit``, each finished unit's folder is committed to this
working tree's git with the profile's report and the README's figures rewritten from them (nothing
else is staged; a README with uncommitted edits is left alone, said so). A unit's log is
``logs/units/<copy>/<unit>.log`` (the copy's folder name: ``<profile>`` by default).

Every unit records the precision it trained at (``trainer.precision: auto`` resolves per machine:
bf16-mixed only where bf16 products are native). The two sides of a paired comparison (the models
of one seed; a fine-tuning and the control of its run) train at one precision
(:func:`flexatt.products.precision_conflicts`): a unit whose pairs trained at another precision than
this machine's is skipped, said so, ``--only`` refuses it and ``--list`` marks it. Such a unit
may train here all the same at its partners' precision, ``--set trainer.precision=32-true`` (the one
override that needs no folders of its own: it is recorded in each unit, and the pairing rule holds
whatever it is), where that precision is native and not emulated.

Given several profiles, each keeps its own copy and results; the next unit is always from the
earliest stage of their plans (``flexatt.products.phase``: the first seed of every claim, then the
other seeds, then the fine-tuning pairs), so every corpus has each claim's first seed before any
has a second.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from statistics import median

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
from profile_run import dvc_env, make_copy, tree_state  # noqa: E402

from flexatt.schedule import PROGRESS_ENV  # noqa: E402
from flexatt.tau import from_json, label  # noqa: E402
# read with the rest at start: a run of hours writes its reports with the code it started with,
# whatever the working tree holds by then
from flexatt.stages.report import read_references, write_report as write_units_report  # noqa: E402
from flexatt.products import (WEIGHTS, Unit, budget_gain, budget_short, data_difference, data_digests,  # noqa: E402
                              done_units, parse_unit, phase, plan, precision_conflicts, read_plan)

def pending(profile: str, results: Path, root: Path = ROOT) -> tuple[list[Unit], dict[str, dict]]:
    """The profile's units not yet done, in the order they run, and the finished ones' manifests;
    the plan is ``root``'s (a run reads its copy's: the plan of the code it runs, whatever the
    working tree holds meanwhile)."""
    done = done_units(results)
    units = plan(read_plan(root / "conf/units" / f"{profile}.yaml"), done)
    return [u for u in units if u.name not in done], done


def prepare(copy: Path, profile: str, overrides: list[str] = ()) -> dict[str, str]:
    """Refresh the copy (``params.yaml``: the profile with ``overrides``) and make the profile's
    data there; returns their digests."""
    copy.mkdir(parents=True, exist_ok=True)
    make_copy(copy, [f"profile={profile}", *overrides], results=False)
    dvc, env = dvc_env(copy)
    subprocess.run([dvc, "repro", "tokenize"], cwd=copy, env=env, check=True)
    import yaml

    tok_dir = copy / yaml.safe_load((copy / "params.yaml").read_text())["train"]["data_dir"]
    return data_digests(tok_dir)


def check_data(digests: dict[str, str], done: dict[str, dict]) -> None:
    """Refuse data that differ from what the finished units trained on (names the unit and file)."""
    if differ := data_difference(digests, done):
        sys.exit(f"error: the data made here differ from unit {differ[0]}'s ({differ[1]}): its units "
                 f"would not be comparable with the finished ones")


def machine_precision(copy: Path) -> tuple[str, str]:
    """The precision a unit trains at in ``copy`` on this machine, and why: ``trainer.precision``
    of its ``params.yaml`` as training resolves it (:func:`trainer_precision`)."""
    import yaml

    return trainer_precision(yaml.safe_load((copy / "params.yaml").read_text())["trainer"])


def profile_precision(profile: str, root: Path = ROOT, overrides: list[str] = ()) -> tuple[str, str]:
    """:func:`machine_precision` for ``profile`` with ``overrides`` composed from ``root``'s
    ``conf/`` (no copy needed)."""
    from flexatt.config import compose

    return trainer_precision(compose([f"profile={profile}", *overrides], root / "conf")["trainer"])


def trainer_precision(trainer) -> tuple[str, str]:
    """``trainer.precision`` as training resolves it on this machine, and why
    (:func:`flexatt.runtime.resolve_precision`; ``auto``: bf16-mixed only where bf16 products are
    native)."""
    from flexatt.runtime import resolve_precision

    precision, reason = resolve_precision(trainer.get("precision", "32-true"), str(trainer.get("accelerator", "auto")))
    return str(precision), reason


def precision_refusal(unit: Unit, precision: str, reason: str, done: dict[str, dict]) -> str | None:
    """Why ``unit`` may not train here (None: it may): units it is paired with trained at another
    precision (:func:`flexatt.products.precision_conflicts`)."""
    conflicts = precision_conflicts(unit, precision, done)
    if not conflicts:
        return None
    theirs = ", ".join(f"{name} ({p})" for name, p in conflicts.items())
    wanted = sorted(set(conflicts.values()))
    setting = f"--set trainer.precision={wanted[0]}" if len(wanted) == 1 else "--set trainer.precision=<theirs>"
    return (f"{unit.name} would train at {precision} here ({reason}), but the units it is paired with "
            f"trained at another precision: {theirs}; run it where training resolves theirs, or here with "
            f"{setting} where that is native, not emulated and slow")


PRECISION_KEY = "trainer.precision"


def probe_overrides(overrides: list[str]) -> list[str]:
    """The ``--set`` overrides that change what a unit trains, so that its products belong in a
    probe's own ``--results`` and ``--keep``: all but ``trainer.precision``, which every unit
    records and :func:`precision_conflicts` keeps equal within each pair."""
    return [o for o in overrides if o.split("=", 1)[0].lstrip("+~") != PRECISION_KEY]


def targets(unit: Unit, spec, done: dict[str, dict]) -> dict[str, float]:
    """The fixed windows a flexible model's unit is matched to: the finished fixed-window units of
    its seed and their dev windows at τ = ∞ (empty for any other unit)."""
    if unit.variant not in {spec.flexible, *( [spec.finetuning.parent] if spec.finetuning else [])}:
        return {}
    names = [Unit(v, unit.seed).name for v in spec.fixed]
    return {n: done[n]["summary"]["dev"]["inf"]["window"] for n in names if n in done}


def match_args(windows: dict[str, float]) -> list[str]:
    """``--match NAME=WINDOW`` arguments of ``python -m flexatt.units run|match``."""
    return [f"--match={name}={window}" for name, window in windows.items()]


def late_matches(spec, done: dict[str, dict]) -> dict[str, dict[str, float]]:
    """Finished flexible units (with kept weights) of the first budget and the fixed windows of
    their seed that finished after them (name: dev window): matched by decoding
    the kept weights (``python -m flexatt.units match``), so the order units run in leaves no
    pair unmatched."""
    late = {}
    for name, m in sorted(done.items()):
        if m.get("kind", "train") != "train" or m.get("variant") != spec.flexible or m.get("budget", 1.0) != 1.0 \
                or WEIGHTS not in m.get("files", {}):
            continue
        matched = m["summary"].get("matched", {})
        found = {n: w for n, w in targets(Unit(spec.flexible, m["seed"]), spec, done).items() if n not in matched}
        if found:
            late[name] = found
    return late


def match_one(name: str, windows: dict[str, float], copy: Path, folder: Path, source: dict, log: Path) -> int:
    """``python -m flexatt.units match`` in the copy for the finished unit ``name`` (products in
    ``folder``) to the fixed ``windows``, its output to the terminal and ``log``."""
    return _stream([sys.executable, "-m", "flexatt.units", "match", str(folder.resolve()), "--source",
                    json.dumps(source), *match_args(windows)], copy, log)


def _stream(cmd: list[str], copy: Path, log: Path) -> int:
    """Run ``cmd`` in the copy (its DVC environment, Lightning's progress bar as `flexatt repro`
    logs it), its output to the terminal and appended to ``log``; returns its exit code."""
    _, env = dvc_env(copy)
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as f:
        process = subprocess.Popen(cmd, cwd=copy, env={**env, **PROGRESS_ENV}, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT)
        while chunk := process.stdout.read1(1 << 16):
            sys.stdout.buffer.write(chunk)
            sys.stdout.buffer.flush()
            f.write(chunk)
        return process.wait()


def run_one(unit: Unit, copy: Path, out: Path, source: dict, log: Path, match: dict[str, float] | None = None) -> int:
    """``python -m flexatt.units run`` in the copy, its output to the terminal and ``log``; a
    fine-tuning or control starts from its parent's weights beside ``out``; a flexible model is
    matched to the fixed windows ``match`` (name: dev window)."""
    parent = ["--parent", str((out.parent / unit.parent / WEIGHTS).resolve())] if unit.parent else []
    return _stream([sys.executable, "-m", "flexatt.units", "run", unit.name, "--out", str(out.resolve()),
                    "--source", json.dumps(source), *(["--keep-weights"] if unit.keep_weights else []), *parent,
                    *match_args(match or {})], copy, log)


def commit(unit: str, folder: Path, also: list[Path] = ()) -> None:
    """Commit the unit's folder and ``also`` (the run's report from its units and the README, nothing
    else) with its figures in the message."""
    manifest = json.loads((folder / "unit.json").read_text(encoding="utf-8"))
    test = manifest["summary"]["test"]
    figures = f"test BLEU {test['inf']['bleu']} at window {test['inf']['window']} (tau = inf)"
    if "selected" in test:
        figures += (f"; at dev-selected tau {label(from_json(manifest['summary']['dev']['selected_tau']))}: "
                    f"BLEU {test['selected']['bleu']}, window {test['selected']['window']}")
    message = (f"{manifest['profile']} unit {unit} ({_shown(folder)}): {manifest['training']['epochs']} epochs, {figures}; "
               f"{manifest['minutes']['total']} min{cpu_share(manifest['minutes'])} on {manifest['machine']['cpu']}")
    _commit([folder, *also], message)


def refresh_readme(root: Path = ROOT) -> list[Path]:
    """The README's figures rewritten from the results as they now stand
    (``scripts/readme_figures.py``), so that a unit's commit leaves them current (its test checks
    them): ``[README.md]`` to commit with the unit; ``[]``, said so, where README.md holds
    uncommitted edits (never committed on their author's behalf) or the script fails (the unit is
    committed all the same)."""
    readme = root / "README.md"
    if subprocess.run(["git", "diff", "--quiet", "HEAD", "--", readme.name], cwd=root).returncode != 0:
        print(f"units: {readme.name} holds uncommitted edits: its figures are left to python scripts/readme_figures.py")
        return []
    run = subprocess.run([sys.executable, str(root / "scripts/readme_figures.py")], cwd=root,
                         capture_output=True, text=True)
    if run.returncode != 0:
        print(f"units: python scripts/readme_figures.py failed (exit {run.returncode}), {readme.name} left as it was: "
              f"{run.stderr.strip()[-500:]}")
        subprocess.run(["git", "checkout", "HEAD", "--", readme.name], cwd=root, check=True)
        return []
    return [readme]


def _commit(paths: list[Path], message: str) -> None:
    """Commit ``paths`` (only them) with ``message``."""
    names = [str(p) for p in paths]
    subprocess.run(["git", "add", "--", *names], cwd=ROOT, check=True)
    subprocess.run(["git", "commit", "-qm", message, "--", *names], cwd=ROOT, check=True)


def commit_match(name: str, folder: Path, fixed: list[str], also: list[Path] = ()) -> None:
    """Commit a unit's folder after a late match (and ``also``: the run's report)."""
    manifest = json.loads((folder / "unit.json").read_text(encoding="utf-8"))
    amended = manifest["amended"][-1]
    parts = [f"{n} at tau {label(from_json(manifest['summary']['matched'][n]['tau']))} (test BLEU "
             f"{manifest['summary']['matched'][n]['test']['bleu']}, window {manifest['summary']['matched'][n]['test']['window']})"
             for n in fixed]
    message = (f"{manifest['profile']} unit {name} ({_shown(folder)}) matched to the fixed windows that finished after "
               f"it, from its kept weights: {'; '.join(parts)}; {amended['minutes']} min on {amended['machine']['cpu']}")
    _commit([folder, *also], message)


def write_report(profile: str, results: Path, data: Path, quiet: bool = False) -> list[Path]:
    """``<results>/../report.{json,md}`` and ``figures/units.png`` from the finished units (the
    files written; :mod:`flexatt.stages.report`, the pipeline's report stage); the references are
    ``data``'s, refused where their digest differs from the units' record."""
    from flexatt.errors import DataError

    started = time.time()
    done = done_units(results)
    try:
        refs = read_references({"test": data / "test.ref"}, done)
    except DataError as exc:
        sys.exit(f"error: {exc}" + (f" (make the profile's data: scripts/units.py {profile} --units 0)"
                                    if exc.reason == "not found" else ""))
    written, markdown = write_units_report(profile, results, refs, plan_dir=ROOT / "conf/units", shown=_shown(results))
    if not quiet:
        print(markdown)
    print(f"units: report of {len(done)} units in {time.time() - started:.0f} s: "
          f"{_shown(written[1])}, {_shown(written[2])}", flush=True)
    return written


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


def figures(manifest: dict) -> str:
    """A finished unit's headline figures: dev and test BLEU and window at τ = ∞, AER beside the
    diagonal's where the corpus has gold links."""
    summary = manifest.get("summary", {})
    parts = []
    for split in ("dev", "test"):
        s = summary.get(split, {})
        if "inf" in s:
            parts.append(f"{split} BLEU {s['inf']['bleu']:.2f} window {s['inf']['window']:.1f}")
        if "aer" in s:
            parts.append(f"AER {s['aer']['inf']:.3f} (diagonal {s['aer_diagonal']:.3f})")
    return ", ".join(parts)


class ProfileRun:
    """One profile's units in its kept copy: its data made there and checked against the finished
    units' once; then, one call at a time, the pending late matches and the next unit, each
    committed with the run's report when ``commit``."""

    def __init__(self, profile: str, results: Path, copy: Path, overrides: list[str], commit: bool):
        self.profile, self.results, self.copy, self.commit = profile, results, copy, commit
        self.source = {**tree_state(), "overrides": overrides}
        check_data(prepare(copy, profile, overrides), done_units(results))
        self.precision, self.precision_reason = machine_precision(copy)
        self._skipped: set[str] = set()

    def spec(self):
        """The plan of the code the units run: the copy's."""
        return read_plan(self.copy / "conf/units" / f"{self.profile}.yaml")

    def refusal(self, unit: Unit) -> str | None:
        """Why ``unit`` may not train on this machine (:func:`precision_refusal`), or None."""
        return precision_refusal(unit, self.precision, self.precision_reason, done_units(self.results))

    def todo(self) -> list[Unit]:
        """The pending units this machine may train, in order; each one skipped is said once."""
        units = []
        for unit in pending(self.profile, self.results, self.copy)[0]:
            if (why := self.refusal(unit)) is None:
                units.append(unit)
            elif unit.name not in self._skipped:
                self._skipped.add(unit.name)
                print(f"units: {self.profile}: skipped: {why}", flush=True)
        return units

    def log(self, name: str) -> Path:
        return ROOT / "logs/units" / self.copy.name / f"{name}.log"  # the copy's name: a probe has its own

    def report(self) -> list[Path]:
        """The files a unit's commit takes along: the run's report from the units done, and the
        README with its figures rewritten from it (:func:`refresh_readme`)."""
        return [*write_report(self.profile, self.results, self.copy / "artifacts" / "tok", quiet=True), *refresh_readme()]

    def matches(self) -> int:
        """The late matches pending, each committed with the report and README when ``commit``."""
        for name, found in late_matches(self.spec(), done_units(self.results)).items():
            code = match_one(name, found, self.copy, self.results / name, self.source, self.log(name))
            if code != 0:
                print(f"units: matching {name} failed (exit {code}); its log: {self.log(name).relative_to(ROOT)}")
                return code
            if self.commit:
                commit_match(name, self.results / name, list(found), self.report())
        return 0

    def run(self, unit: Unit) -> int:
        """Train and decode ``unit``; committed with the report of every unit done and the README's
        figures (:func:`refresh_readme`) when ``commit``."""
        started, log = time.time(), self.log(unit.name)
        code = run_one(unit, self.copy, self.results / unit.name, self.source, log,
                       targets(unit, self.spec(), done_units(self.results)))
        if code != 0:
            print(f"units: {unit.name} failed (exit {code}); its log: {log.relative_to(ROOT)}")
            return code
        print(f"units: {unit.name} done in {(time.time() - started) / 60:.1f} min", flush=True)
        if self.commit:
            commit(unit.name, self.results / unit.name, self.report())
        return 0


def budget_note(spec, done: dict[str, dict]) -> str | None:
    """A failed budget check: why a profile's plan ends with its first seed, or that the plan keeps
    its budget as final all the same (None where the check passed or is not done)."""
    if not budget_short(spec, done):
        return None
    check = spec.budget_check
    gains = f"{check.variant} trained x{check.factor:g} gains {budget_gain(spec, done):+.2f} dev BLEU"
    if check.final:
        return f"kept     the budget (budget_check.final), although {gains}"
    return f"waiting  the other seeds and the pairs: {gains}, so the budget is short: raise train.epochs first"


def next_unit(runs: list[ProfileRun]) -> tuple[ProfileRun, Unit] | None:
    """The unit to run next over several profiles: the earliest stage of the plan (:func:`phase`)
    among each profile's next unit, the profiles in the order given; ``None`` when all are done.
    The plans are read anew each time: units join once a finished unit decides them."""
    heads = [(phase(r.spec(), todo[0]), i, r, todo[0]) for i, r in enumerate(runs) if (todo := r.todo())]
    return min(heads, key=lambda h: h[:2])[2:] if heads else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("profiles", nargs="+", metavar="profile",
                        help="one profile, or several: each stage of their plans (the first seed of every claim, the "
                             "other seeds, the fine-tuning pairs) finishes on every one before the next")
    parser.add_argument("--keep", type=Path, help="the kept copy (default: runs/<profile>)")
    parser.add_argument("--results", type=Path, help="default: results/<profile>/units")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="an override of the profile (a probe: give it its own --results and --keep), or "
                             "trainer.precision=... to train the units paired with another precision's here")
    parser.add_argument("--list", action="store_true", help="print the plan and stop")
    parser.add_argument("--units", type=int, help="run at most this many units")
    parser.add_argument("--only", help="run this unit (by name) only")
    parser.add_argument("--commit", action="store_true",
                        help="commit each finished unit's folder with the run's report (--report) from the units done "
                             "and the README's figures (scripts/readme_figures.py)")
    parser.add_argument("--report", action="store_true",
                        help="the table, claims and figure from the finished units (no decoding), and stop")
    parser.add_argument("--data", type=Path, help="with --report: the tokenized data whose references the units "
                        "decoded (default: the kept copy's)")
    args = parser.parse_args(argv)
    results = {p: args.results or ROOT / "results" / p / "units" for p in args.profiles}
    if len(args.profiles) > 1:
        given = [f"--{k}" for k in ("keep", "results", "set", "only", "report", "data") if getattr(args, k)]
        if given:
            parser.error(f"{', '.join(given)}: one profile only (got {', '.join(args.profiles)})")
    if args.list:
        list_plans(results, {p: profile_precision(p, overrides=args.set) for p in args.profiles})
        return 0
    if args.report:
        profile = args.profiles[0]
        write_report(profile, results[profile],
                     args.data or (args.keep or ROOT / "runs" / profile) / "artifacts" / "tok")
        return 0
    if (probe := probe_overrides(args.set)) and not (args.results and args.keep):
        sys.exit(f"error: --set {' '.join(probe)} changes what the units train: give the run its own --results and --keep")
    if args.only and args.only not in [u.name for u in pending(args.profiles[0], results[args.profiles[0]])[0]]:
        sys.exit(f"error: {args.only} is not a pending unit of {args.profiles[0]} (--list shows them)")
    runs = [ProfileRun(p, results[p], (args.keep or ROOT / "runs" / p).resolve(), args.set, args.commit)
            for p in args.profiles]
    if args.only and (why := runs[0].refusal(parse_unit(args.only))):
        sys.exit(f"error: {why}")
    ran = 0
    while args.units != 0:  # the late matches pending before each unit and after the last
        for r in runs:
            if (code := r.matches()) != 0:
                return code
        if args.units is not None and ran >= args.units:
            break
        if args.only:
            chosen = (runs[0], next((u for u in runs[0].todo() if u.name == args.only), None)) if not ran else None
        else:
            chosen = next_unit(runs)
        if chosen is None or chosen[1] is None:
            break
        if (code := chosen[0].run(chosen[1])) != 0:
            return code
        ran += 1
    for r in runs:
        if note := budget_note(r.spec(), done_units(r.results)):
            print(f"units: {r.profile}: {note}")
    return 0


def cpu_share(minutes: dict) -> str:
    """`` (cpu 97%)``: the unit's CPU minutes over its wall minutes times its threads, the share of
    its cores it had (lower when other work ran beside it), and ``, 2 attempts`` for a unit whose
    training was interrupted and resumed (its minutes add up the attempts'); empty for units that
    recorded neither."""
    parts = []
    if "cpu" in minutes and minutes["total"]:
        parts.append(f"cpu {100 * minutes['cpu'] / (minutes['total'] * minutes['threads']):.0f}%")
    if minutes.get("attempts", 1) > 1:
        parts.append(f"{minutes['attempts']} attempts")
    return f" ({', '.join(parts)})" if parts else ""


def list_plans(results: dict[str, Path], precisions: dict[str, tuple[str, str]] | None = None) -> None:
    """``--list``: each profile's finished units with their minutes, commit and figures, its late
    matches, then the units pending in the order they run (over several profiles, stage by stage:
    :func:`next_unit`'s order as the plans stand now; each line then led by its profile), each
    with the minutes it would take at the finished units' pace (:func:`estimate`), and their sum.
    Given the precision each profile trains at here (``precisions``), a pending unit this machine
    may not train says so, with the partners that trained otherwise (:func:`not_here`)."""
    width = max(len(p) for p in results) + 2
    queue = []
    for i, (profile, folder) in enumerate(results.items()):
        lead = f"{profile + ':':{width}}" if len(results) > 1 else ""
        todo, done = pending(profile, folder)
        for name, m in done.items():
            print(f"{lead}done     {name:24s} {m['minutes']['total']:6.1f} min{cpu_share(m['minutes'])}  "
                  f"commit {str(m['source'].get('commit'))[:7]}  {figures(m)}")
        spec = read_plan(ROOT / "conf/units" / f"{profile}.yaml")
        for name, found in late_matches(spec, done).items():
            print(f"{lead}pending  {name} matched to {', '.join(found)} (from its kept weights)")
        if note := budget_note(spec, done):
            print(f"{lead}{note}")
        here = (precisions or {}).get(profile)
        for k, u in enumerate(todo):
            mark = not_here(u, here, done) if here else ""
            minutes = None if mark else estimate(u, here[0] if here else None, done)
            queue.append((phase(spec, u), i, k, lead, u.name, mark, minutes))
    for *_, lead, name, mark, minutes in sorted(queue):
        print(f"{lead}pending  {name}{mark}" if minutes is None else f"{lead}pending  {name:24s} ~{minutes:.0f} min")
    for i, profile in enumerate(results):
        if line := pending_total([q[-1] for q in queue if q[1] == i]):
            print(f"{f'{profile}:':{width}}{line}" if len(results) > 1 else line)


def pending_total(minutes: list[float | None]) -> str | None:
    """The ``--list`` line that adds up the pending units' estimates (``None`` for a unit without
    one; the line is ``None`` when no unit has one)."""
    known = [m for m in minutes if m is not None]
    if not known:
        return None
    some = "" if len(known) == len(minutes) else f"; the {len(known)} with an estimate"
    return (f"pending: {len(minutes)} unit{'s' * (len(minutes) > 1)}{some}, about {sum(known) / 60:.1f} h "
            "(at the pace of the finished units of their kind and precision)")


def estimate(unit: Unit, precision: str | None, done: dict[str, dict]) -> float | None:
    """The minutes ``unit`` would take at the pace of the finished units of its kind (a trained
    model, or a fine-tuning or control) that trained at ``precision`` (``None``: at any): their
    median wall minutes per epoch, validation included (of its variant's units where one
    finished), times its epochs (the median of their budgets' epochs, scaled by its budget), plus
    their median decoding minutes. A resumed unit's pace is its last attempt's, over the epochs
    that attempt trained. ``None`` where no such unit trained (a unit that only decoded does not
    count). A planning figure: the finished units' machines may be faster or slower than this one."""
    def pace(manifest: dict) -> float:
        training = manifest["training"]
        return training["wall_minutes"] / (training["epochs_budget"] - (training.get("resumed_from_epoch") or 0))

    trains = unit.kind == "train"
    alike = [m for m in done.values() if (m.get("kind") == "train") == trains and m.get("minutes", {}).get("train")
             and "wall_minutes" in m.get("training", {}) and precision in (None, m["training"].get("precision"))]
    if not alike:
        return None
    own = [m for m in alike if m.get("variant") == unit.variant] or alike
    epochs = median(m["training"]["epochs_budget"] / m["budget"] for m in alike) * unit.budget
    return median(map(pace, own)) * round(epochs) + median(m["minutes"]["decode"] for m in own)


def not_here(unit: Unit, here: tuple[str, str], done: dict[str, dict]) -> str:
    """The ``--list`` mark of a unit that would train at ``here``'s precision while its partners
    trained at another (empty: it may train here)."""
    conflicts = precision_conflicts(unit, here[0], done)
    if not conflicts:
        return ""
    theirs = sorted(set(conflicts.values()))
    return (f"{'':{max(0, 24 - len(unit.name))}} not here: {here[0]} ({here[1]}); "
            f"{', '.join(sorted(conflicts))} trained at {', '.join(theirs)}")


if __name__ == "__main__":
    sys.exit(main())
