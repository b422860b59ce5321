"""Wall time of the whole pipeline (`make repro`: `flexatt repro`), per stage, and of a no-op one.

    python benchmarks/pipeline.py --from-scratch    # removes the stage outputs (not artifacts/bench), then flexatt repro --force
    python benchmarks/pipeline.py                   # times whatever `flexatt repro` has to do now
    python benchmarks/pipeline.py --noop-only       # only the no-op `flexatt repro` (after a full run)
    python benchmarks/pipeline.py --from-scratch --baseline 7a4d46f   # that commit's pipeline first, then this one
    python benchmarks/pipeline.py --from-scratch tokenize   # only these stages and their upstream

``--baseline REV`` (with ``--from-scratch``) runs the pipeline of the commit REV from scratch
first, in a git worktree of it (``--baseline-dir``, default ``artifacts/bench/pipeline-<REV>``,
its own stage outputs and DVC cache; its ``src/`` first on ``PYTHONPATH``, the same Python
environment), then this tree's from scratch, one after the other on the same machine; the
figures of both and the ratio of their totals are printed and written together.

`flexatt repro` (:mod:`flexatt.schedule`) runs independent stages side by side and prints
``<stage>: started`` and ``<stage>: done in`` as each starts and ends; the time of a stage is
the time between the two (stages overlap: their times add up to more than the total). Its
output is passed through and the figures are printed at the end and written to ``--out``
(JSON), with the machine (CPU model, cores, SIMD level, native bf16 or not, torch version and
threads).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine  # noqa: E402

STAGE_LINE = re.compile(r"^\[[0-9:]+\] (\S+): (started|done in)")


def timed_repro(args: list[str], echo: bool = True, cwd: Path | None = None,
                src: Path | None = None) -> tuple[float, list[tuple[str, float]], int]:
    """Run ``flexatt repro <args>`` (in ``cwd``, with ``src`` first on ``PYTHONPATH`` where
    given); return (total seconds, [(stage, seconds)] in the order the stages started, exit
    status)."""
    started = time.perf_counter()
    starts: dict[str, float] = {}
    marks: list[tuple[str, float]] = []
    # this interpreter's environment first on PATH: its dvc, and the `python` of the stages
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(src), os.environ.get("PYTHONPATH")]))
    proc = subprocess.Popen([sys.executable, "-m", "flexatt.cli", "repro", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, bufsize=1, env=env, cwd=cwd)
    assert proc.stdout is not None
    for line in proc.stdout:
        if echo:
            sys.stdout.write(line)
            sys.stdout.flush()
        match = STAGE_LINE.search(line)
        if match and match.group(2) == "started":
            starts[match.group(1)] = time.perf_counter()
        elif match:
            marks.append((match.group(1), time.perf_counter() - starts[match.group(1)]))
    status = proc.wait()
    ended = time.perf_counter()
    order = list(starts)
    return ended - started, sorted(marks, key=lambda m: order.index(m[0])), status


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--from-scratch", action="store_true",
                        help="delete the stage outputs in artifacts/ (not artifacts/bench/) and run every stage (flexatt repro --force)")
    parser.add_argument("--noop-only", action="store_true", help="only time no-op flexatt repro runs")
    parser.add_argument("--noop-runs", type=int, default=3)
    parser.add_argument("stages", nargs="*", help="time only these stages and their upstream (default: all)")
    parser.add_argument("--baseline", metavar="REV",
                        help="with --from-scratch: first run the pipeline of this commit from scratch (a worktree)")
    parser.add_argument("--baseline-dir", help="the baseline's worktree (default: artifacts/bench/pipeline-<REV>)")
    parser.add_argument("--out", default="benchmarks/results/pipeline.json")
    args = parser.parse_args()
    if args.baseline and (not args.from_scratch or args.noop_only):
        parser.error("--baseline times two runs from scratch: give it with --from-scratch (and not --noop-only)")

    result: dict = {"machine": machine()}
    if args.baseline:
        result["baseline"] = baseline_run(args.baseline, Path(args.baseline_dir or f"artifacts/bench/pipeline-{args.baseline}"),
                                          args.stages)
        _write(Path(args.out), result)
    if not args.noop_only:
        if args.from_scratch:  # every stage output; the benchmarks' own cache (artifacts/bench) stays
            for path in Path("artifacts").glob("*"):
                if path.name != "bench":
                    shutil.rmtree(path) if path.is_dir() else path.unlink()
        total, stages, status = timed_repro((["--force"] if args.from_scratch else []) + args.stages)
        if status != 0:
            sys.exit(f"pipeline: dvc repro failed (exit status {status})")
        result.update(from_scratch=args.from_scratch, total_minutes=round(total / 60, 2),
                      stages={name: round(sec / 60, 2) for name, sec in stages})
        if args.baseline:
            result["ratio_to_baseline"] = round(result["total_minutes"] / result["baseline"]["total_minutes"], 3)
        _write(Path(args.out), result)  # now: a failing no-op run below must not lose these figures
    noop = []
    for _ in range(args.noop_runs):
        seconds, stages, status = timed_repro(args.stages, echo=False)
        if status != 0:
            sys.exit(f"pipeline: no-op flexatt repro failed (exit status {status})")
        if stages:
            sys.exit(f"pipeline: the no-op flexatt repro ran stages: {[s for s, _ in stages]}")
        noop.append(seconds)
    result.update(noop_seconds_median=round(statistics.median(noop), 2),
                  noop_seconds=[round(s, 2) for s in noop])

    print("\npipeline:")
    if "baseline" in result:
        base = result["baseline"]
        print(f"  baseline {base['commit'][:12]}:")
        for name, minutes in base["stages"].items():
            print(f"    {name:26s} {minutes:7.2f} min")
        print(f"    {'total flexatt repro':26s} {base['total_minutes']:7.2f} min (from scratch)")
        print("  this tree:")
    if "stages" in result:
        for name, minutes in result["stages"].items():
            print(f"  {name:28s} {minutes:7.2f} min")
        print(f"  {'total flexatt repro':28s} {result['total_minutes']:7.2f} min"
              f"{' (from scratch)' if args.from_scratch else ''}")
    if "ratio_to_baseline" in result:
        print(f"  {'this tree / baseline':28s} {result['ratio_to_baseline']:7.3f}x the minutes")
    print(f"  {'no-op flexatt repro':28s} {result['noop_seconds_median']:7.2f} s (median of {len(noop)}: "
          f"{', '.join(f'{s:.2f}' for s in noop)})")
    out = Path(args.out)
    if out.exists() and args.noop_only:  # keep the stage times of the last full run
        result = {**json.loads(out.read_text()), **result}
    _write(out, result)


def baseline_run(rev: str, where: Path, targets: list[str]) -> dict:
    """The pipeline of commit ``rev`` from scratch in a worktree of it at ``where`` (made fresh:
    an old one is removed first, so none of its outputs is reused), of its stages ``targets``
    and their upstream (all where empty): its commit, stage minutes and total."""
    commit = subprocess.run(["git", "rev-parse", "--verify", f"{rev}^{{commit}}"], capture_output=True,
                            text=True).stdout.strip()
    if not commit:
        sys.exit(f"pipeline: --baseline {rev}: not a commit of this repository")
    if where.exists():
        subprocess.run(["git", "worktree", "remove", "--force", str(where)], check=False)
        shutil.rmtree(where, ignore_errors=True)
    subprocess.run(["git", "worktree", "add", "--detach", str(where), commit], check=True)
    try:
        print(f"pipeline: the baseline {commit[:12]} from scratch in {where}", flush=True)
        total, stages, status = timed_repro(["--force", *targets], cwd=where, src=where.resolve() / "src")
        if status != 0:
            sys.exit(f"pipeline: the baseline's flexatt repro failed (exit status {status}); its tree: {where}")
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(where)], check=False)
    return {"commit": commit, "total_minutes": round(total / 60, 2),
            "stages": {name: round(sec / 60, 2) for name, sec in stages}}


def _write(out: Path, result: dict) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
