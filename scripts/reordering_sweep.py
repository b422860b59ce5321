"""Flexible attention's window against how much the data reorders (issue 31, item 4).

    python scripts/reordering_sweep.py                     # = make reordering: run (or resume) every level
    python scripts/reordering_sweep.py --levels 0.5        # run one level (the summary holds what exists)
    python scripts/reordering_sweep.py --collect-only      # summary, plot and figure from the runs kept

The synthetic task (:mod:`flexatt.data.synthetic`) reverses a share ``data.synthetic.reverse`` of
its chunks; at each level (0, 0.25, 0.5, 1 by default) the smoke profile's pipeline runs up to
Table 1 with Global, local-m and flexible attention (the flexible model fine-tuned, with its
control; 30 epochs instead of 10, see ``OVERRIDES``), each level in its own clone kept in
``artifacts/reordering/<level>/``: there ``pipelines/smoke/params.yaml`` is composed with the level
and ``flexatt repro pipelines/smoke/dvc.yaml:evaluate`` runs, so a second run resumes: DVC skips
what is up to date. The clones are of ``artifacts/reordering/_src/``, a clone of the commit
``HEAD`` names (``--from-tree``: a copy of the working tree as it is, uncommitted edits included),
and run that snapshot's code (``PYTHONPATH``; the editable install would run the working tree's):
every level runs the same code whatever is being edited meanwhile.

Per level it collects the share of gold link pairs that cross (the run's ``results/smoke/filter.json``,
``reordering``), the τ selected on dev for the flexible model and the fine-tuned one, their window
and BLEU on test at that τ, and Global's and local-m's (``results/smoke/metrics.json``; of several
local-m rows, ``local_m_d<D>``, the one whose window is nearest flexible's, its D read from the
``dvc.lock`` that trained it). The real
corpora join as points where their results exist: the default profile's (``results/metrics.json``
and ``results/filter.json``: the Bible) and the grc profile's (``results/grc/``: Koine Greek);
a missing one is skipped with a note. Writes ``results/reordering/summary.json`` (with the commit
and whether the working tree was clean), ``results/plots/reordering.csv`` (a DVC plot, declared in
``dvc.yaml``'s top-level ``plots``) and ``results/figures/window_vs_reordering.png``.

Windows and BLEU are not comparable across corpora as they stand (a synthetic sentence has ~8
positions, a Bible verse ~35); the figure therefore shows flexible's window as a share of Global's
(the mean source length) and each model's BLEU minus Global's on the same test set; the CSV and the
summary hold the raw figures.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LEVELS = (0.0, 0.25, 0.5, 1.0)
WORK = ROOT / "artifacts" / "reordering"
SUMMARY = ROOT / "results" / "reordering" / "summary.json"
CSV = ROOT / "results" / "plots" / "reordering.csv"
FIGURE = ROOT / "results" / "figures" / "window_vs_reordering.png"
# the smoke profile with Global, local-m and flexible attention (conf/variants and
# conf/evaluate/checkpoints global_local_flexible, as the grc profile has them), trained for 30
# epochs instead of 10 (the learning rate halved from epoch 25 on, not 8): after the smoke
# profile's 10 epochs, at full reversal Global reached 24 BLEU and local-m 13 on test (dev BLEU
# still rising), too far from learning the task for its window to say anything; 30 epochs take
# about 40 s a model on one thread. The τ grid reaches 6 (the papers' 0.8-1.6 and log S̄ = 2.2 are
# for sentences of ~35 positions: on the monotone task every τ up to 2.2 lost more than the 0.5
# BLEU tolerance, 99.1 -> 96.7, so none was selected and nothing was bisected)
OVERRIDES = ("train.epochs=30", "train.lr_halve_from_epoch=25", "sweep_tau.grid=[0.8,1.0,1.2,1.4,1.6,2.0,2.5,3.0,4.0,6.0]",
             "variants=global_local_flexible", "evaluate/checkpoints=global_local_flexible",
             "finetune.variants=[flexible]", "sweep_tau.models=[flexible,flexible_ft,flexible_ctl]",
             "sweep_tau.curve_model=flexible_ft", "evaluate.tau_rows=[flexible,flexible_ft,flexible_ctl]")
# the real corpora: label -> folder of its results (relative to the repository); local-m's D is
# read from the dvc.lock that made them (results/<profile>/dvc.lock, the pipeline's own for results/,
# a level's copy's for the synthetic task)
CORPORA = {"bible (default profile)": "results", "nt_grc_en (grc profile)": "results/grc"}
COLUMNS = ("source", "level", "crossing_link_pairs", "sentences_with_crossing", "mean_distortion",
           "test_pairs", "local_m_variant", "local_D", "global_window", "global_bleu", "local_m_window", "local_m_bleu",
           "flexible_tau", "flexible_window", "flexible_window_share", "flexible_bleu", "flexible_inf_bleu",
           "flexible_ft_tau", "flexible_ft_window", "flexible_ft_window_share", "flexible_ft_bleu",
           "flexible_ft_inf_bleu")


class SweepError(Exception):
    """A level that could not run or be read: printed as one line."""


def level_name(level: float) -> str:
    return f"{level:g}"


def git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def snapshot(commit: str, dest: Path) -> Path:
    """``dest`` made a clone of this repository checked out at ``commit`` (kept between runs)."""
    if (dest / ".git").is_dir() and git("rev-parse", "--is-shallow-repository", cwd=dest) == "false" \
            and git("config", "--get", "remote.origin.url", cwd=dest) == str(ROOT):
        git("fetch", "-q", str(ROOT), commit, cwd=dest)
    else:
        shutil.rmtree(dest, ignore_errors=True)
        dest.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "clone", "-q", "--no-checkout", str(ROOT), str(dest)], check=True)
    git("checkout", "-q", "--force", "--detach", commit, cwd=dest)
    git("clean", "-q", "-fd", cwd=dest)  # files of an earlier snapshot that the commit lacks
    return dest


def snapshot_tree(dest: Path) -> Path:
    """``dest`` made a copy of the working tree as it is now (what ``git`` tracks or would track,
    uncommitted edits included), committed in a repository of its own."""
    shutil.rmtree(dest, ignore_errors=True)
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            check=True, capture_output=True).stdout.decode().split("\0")
    for rel in listed:
        if rel and (ROOT / rel).is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, dest / rel)
    env = {**os.environ, "GIT_AUTHOR_NAME": "flexatt", "GIT_AUTHOR_EMAIL": "flexatt@example.invalid",
           "GIT_COMMITTER_NAME": "flexatt", "GIT_COMMITTER_EMAIL": "flexatt@example.invalid"}
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "working tree"]):
        subprocess.run(["git", *args], cwd=dest, check=True, env=env, capture_output=True)
    return dest


def level_clone(source: Path, dest: Path) -> Path:
    """``dest`` made (or brought to) a clone of ``source``'s checked-out commit; what a run there
    left (DVC's outputs, its lock, its params file) stays, so that the run resumes."""
    commit = git("rev-parse", "HEAD", cwd=source)
    if not (dest / ".git").is_dir():
        subprocess.run(["git", "clone", "-q", "--no-checkout", str(source), str(dest)], check=True)
    git("fetch", "-q", str(source), commit, cwd=dest)
    git("checkout", "-q", "--force", "--detach", commit, cwd=dest)
    return dest


def run_level(level: float, source: Path, work: Path, threads: int) -> float:
    """Run (or resume) the smoke pipeline at ``level`` in ``work/<level>`` (a clone of ``source``)
    with ``threads`` intra-op threads per stage; its output goes to ``work/<level>.log``. Returns
    the wall seconds."""
    dest, log = level_clone(source, work / level_name(level)), work / f"{level_name(level)}.log"
    overrides = ["profile=smoke", f"data.synthetic.reverse={level}", *OVERRIDES]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(dest / "src"), os.environ.get("PYTHONPATH")]))}
    commands = [[sys.executable, "-m", "flexatt.cli", "params", *overrides, "--output", "pipelines/smoke/params.yaml"],
                [sys.executable, "-m", "flexatt.cli", "repro", "pipelines/smoke/dvc.yaml:evaluate"]]
    print(f"level {level_name(level)}: {' '.join(overrides)} in {dest} (log: {log})", flush=True)
    start = time.monotonic()
    status = 0
    with open(log, "w", encoding="utf-8") as out:
        for command in commands:
            status = status or subprocess.run(command, cwd=dest, env=env, stdout=out,
                                              stderr=subprocess.STDOUT).returncode
    seconds = time.monotonic() - start
    if status:
        tail = log.read_text(encoding="utf-8", errors="replace").splitlines()[-15:]
        raise SweepError(f"{log}: level {level_name(level)} failed (exit status {status}):\n" + "\n".join(tail))
    print(f"level {level_name(level)}: done in {seconds / 60:.1f} min", flush=True)
    return seconds


def _json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SweepError(f"{path}: cannot read: {exc}") from exc


def _local_d_of_lock(lock: Path, variant: str) -> int | None:
    """The D of local-m variant ``variant`` as the ``train@<variant>`` stage of ``lock`` trained it
    (``None``: no such stage)."""
    import yaml

    if not lock.is_file():
        return None
    stage = ((yaml.safe_load(lock.read_text(encoding="utf-8")) or {}).get("stages") or {}).get(f"train@{variant}")
    if not stage:
        return None
    params = next(iter((stage.get("params") or {}).values()), None) or {}  # its one params file
    overrides = params.get(f"variants.{variant}") or {}
    return overrides.get("local_D", (params.get("model") or {}).get("local_D"))


def nearest_local_m(rows: dict, target: str = "flexible_tau") -> str:
    """The local-m row (``local_m``, ``local_m_d<D>``) whose test window is nearest the row
    ``target``'s (a flexible model at its selected τ): the fixed window of about flexible
    attention's size (``local_m`` where there is no such row)."""
    names = [n for n in rows if re.fullmatch(r"local_m(_d\d+)?", n)]
    target = rows.get(target)
    if not target or len(names) < 2:
        return "local_m" if "local_m" in rows else (names or ["local_m"])[0]
    return min(names, key=lambda n: (abs(rows[n]["window"] - target["window"]), n))


def point(source: str, level: float | None, results: Path, lock: Path) -> dict:
    """One row: the reordering of ``results/filter.json``, Table 1's figures of
    ``results/metrics.json``, and local-m's D from the ``lock`` that trained it."""
    filt, metrics = _json(results / "filter.json"), _json(results / "metrics.json")
    reordering, rows = filt.get("reordering"), metrics["models"]
    if not reordering:
        raise SweepError(f"{results / 'filter.json'}: no reordering block (the corpus has no gold alignments)")
    local = nearest_local_m(rows)
    missing = [name for name in ("global", local, "flexible", "flexible_tau") if name not in rows]
    if missing:
        raise SweepError(f"{results / 'metrics.json'}: no row {', '.join(missing)}")
    glob = rows["global"]
    row = {"source": source, "level": level, **{k: reordering[k] for k in
                                                ("crossing_link_pairs", "sentences_with_crossing", "mean_distortion")},
           "test_pairs": filt["splits"][metrics["split"]]["pairs"], "local_m_variant": local,
           "local_D": _local_d_of_lock(lock, local),
           "global_window": glob["window"], "global_bleu": glob["bleu"],
           "local_m_window": rows[local]["window"], "local_m_bleu": rows[local]["bleu"]}
    for name in ("flexible", "flexible_ft"):
        tau_row, inf_row = rows.get(f"{name}_tau"), rows.get(name)
        row.update({f"{name}_tau": tau_row and tau_row["tau"], f"{name}_window": tau_row and tau_row["window"],
                    f"{name}_window_share": tau_row and round(tau_row["window"] / glob["window"], 4),
                    f"{name}_bleu": tau_row and tau_row["bleu"], f"{name}_inf_bleu": inf_row and inf_row["bleu"]})
    return row


def collect(levels: list[float], work: Path, root: Path = ROOT) -> tuple[list[dict], list[str]]:
    """The rows of every level run in ``work`` and of every real corpus with results under
    ``root``; the notes of what was skipped."""
    rows, notes = [], []
    for level in levels:
        dest = work / level_name(level)
        if not (dest / "results" / "smoke" / "metrics.json").is_file():
            notes.append(f"level {level_name(level)}: no results in {dest} (not run yet): skipped")
            continue
        rows.append(point("synthetic", level, dest / "results" / "smoke", dest / "pipelines" / "smoke" / "dvc.lock"))
    for label, folder in CORPORA.items():
        results = root / folder
        if not ((results / "metrics.json").is_file() and (results / "filter.json").is_file()):
            notes.append(f"{label}: no {folder}/metrics.json and filter.json yet: skipped")
            continue
        lock = results / "dvc.lock" if folder != "results" else root / "dvc.lock"
        try:
            rows.append(point(label, None, results, lock))
        except SweepError as exc:
            notes.append(f"{label}: {exc}: skipped")
    return rows, notes


def write_csv(rows: list[dict], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: "" if row.get(k) is None else row[k] for k in COLUMNS})


def write_figure(rows: list[dict], path: Path) -> None:
    """Two panels against the crossing-link share: flexible's window at its selected τ as a share
    of Global's, and BLEU minus Global's BLEU of local-m and of flexible at that window."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    synthetic = sorted((r for r in rows if r["source"] == "synthetic"), key=lambda r: r["crossing_link_pairs"])
    corpora = [r for r in rows if r["source"] != "synthetic"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    series = (("flexible", "flexible", "tab:blue", "o"), ("flexible_ft", "flexible, fine-tuned", "tab:green", "s"))
    for key, label, colour, marker in series:
        pts = [r for r in synthetic if r[f"{key}_window"] is not None]
        left.plot([r["crossing_link_pairs"] for r in pts], [r[f"{key}_window_share"] for r in pts], marker=marker,
                  color=colour, label=f"{label} (synthetic)")
        for r in pts:
            left.annotate(f"{r[f'{key}_window']:.1f}", (r["crossing_link_pairs"], r[f"{key}_window_share"]),
                          textcoords="offset points", xytext=(4, 4), fontsize=7, color=colour)
    local = [r for r in synthetic]
    left.plot([r["crossing_link_pairs"] for r in local], [r["local_m_window"] / r["global_window"] for r in local],
              linestyle="--", color="tab:orange", marker="^", label="local-m (synthetic)")
    for r in corpora:
        for key, _, colour, marker in series:
            if r[f"{key}_window"] is not None:
                left.scatter([r["crossing_link_pairs"]], [r[f"{key}_window_share"]], color=colour, marker=marker,
                             edgecolors="black", s=60, zorder=3)
        left.annotate(r["source"].split(" ")[0], (r["crossing_link_pairs"], r["flexible_window_share"]),
                      textcoords="offset points", xytext=(5, -10), fontsize=8)
    left.set_xlabel("gold link pairs that cross")
    left.set_ylabel("window at the selected τ / Global's window")
    left.set_title("Flexible's window (labels: positions per step)", fontsize=10)
    left.set_ylim(bottom=0)
    left.legend(fontsize=7)
    for key, label, colour, marker in (("local_m", "local-m", "tab:orange", "^"), *series):
        value = (lambda r, k=key: r[f"{k}_bleu"] - r["global_bleu"] if r[f"{k}_bleu"] is not None else None)
        pts = [r for r in synthetic if value(r) is not None]
        right.plot([r["crossing_link_pairs"] for r in pts], [value(r) for r in pts], marker=marker, color=colour,
                   label=label + ("" if key == "local_m" else " at its selected τ"))
        for r in corpora:
            if value(r) is not None:
                right.scatter([r["crossing_link_pairs"]], [value(r)], color=colour, marker=marker,
                              edgecolors="black", s=60, zorder=3)
    for r in corpora:
        right.annotate(r["source"].split(" ")[0], (r["crossing_link_pairs"], r["local_m_bleu"] - r["global_bleu"]),
                       textcoords="offset points", xytext=(5, 5), fontsize=8)
    right.axhline(0, color="grey", linewidth=0.8)
    right.set_xlabel("gold link pairs that cross")
    right.set_ylabel("test BLEU − Global's test BLEU")
    right.set_title("BLEU against Global (lines: synthetic; outlined: corpora)", fontsize=10)
    right.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", type=float, nargs="+", default=list(LEVELS),
                        help=f"reordering levels in [0, 1] (default: {' '.join(map(level_name, LEVELS))})")
    parser.add_argument("--work", type=Path, default=WORK, help=f"the kept copies (default: {WORK.relative_to(ROOT)})")
    parser.add_argument("--collect-only", action="store_true", help="run nothing: summarise the copies kept")
    parser.add_argument("--threads", type=int, default=1,
                        help="intra-op threads per stage (default 1: the smoke models are tiny, and more threads "
                             "than free cores stall them)")
    parser.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)  # the corpora's results (tests)
    parser.add_argument("--summary", type=Path, default=SUMMARY, help=f"default: {SUMMARY.relative_to(ROOT)}")
    parser.add_argument("--csv", type=Path, default=CSV, help=f"default: {CSV.relative_to(ROOT)}")
    parser.add_argument("--figure", type=Path, default=FIGURE, help=f"default: {FIGURE.relative_to(ROOT)}")
    parser.add_argument("--from-tree", action="store_true",
                        help="run the working tree as it is (uncommitted edits included), not the commit HEAD names")
    args = parser.parse_args(argv)
    for level in args.levels:
        if not 0.0 <= level <= 1.0:
            parser.error(f"--levels: {level:g} is not in [0, 1]")
    work = args.work.resolve()
    commit = git("rev-parse", "HEAD")
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout  # not stripped: "XY path" lines
    changed = [line[3:] for line in status.splitlines() if line.strip()]
    seconds: dict[str, float] = {}
    try:
        if not args.collect_only:
            source = snapshot_tree(work / "_src") if args.from_tree else snapshot(commit, work / "_src")
            start = time.monotonic()
            for level in args.levels:
                seconds[level_name(level)] = round(run_level(level, source, work, args.threads), 1)
            seconds["total"] = round(time.monotonic() - start, 1)
        rows, notes = collect(args.levels, work, args.root)
    except SweepError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for note in notes:
        print(f"note: {note}")
    previous = _json(args.summary) if args.summary.is_file() else {}
    summary = {
        "commit": commit if not args.collect_only else previous.get("commit", commit),
        "tree_clean": not changed if not args.collect_only else previous.get("tree_clean", not changed),
        "tree_changes": changed if not args.collect_only else previous.get("tree_changes", changed),
        "ran_from": (previous.get("ran_from") if args.collect_only else
                     "the working tree, uncommitted changes included (--from-tree)" if args.from_tree else
                     "a clone of the commit (artifacts/reordering/_src): uncommitted changes were not run"),
        "levels": [level_name(level) for level in args.levels],
        "profile": "smoke", "overrides": ["data.synthetic.reverse=<level>", *OVERRIDES],
        "threads": args.threads if not args.collect_only else previous.get("threads"),
        "wall_seconds": seconds or previous.get("wall_seconds", {}),
        "skipped": notes,
        "points": rows,
    }
    args.summary.parent.mkdir(parents=True, exist_ok=True)
    args.summary.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    write_csv(rows, args.csv)
    write_figure(rows, args.figure)
    print(f"wrote {args.summary}, {args.csv}, {args.figure} ({len(rows)} points)")
    for r in rows:
        name = r["source"] if r["level"] is None else f"synthetic, reverse {level_name(r['level'])}"
        print(f"  {name}: crossing {r['crossing_link_pairs']:.4f}; flexible τ={r['flexible_tau']} window "
              f"{r['flexible_window']} ({r['flexible_window_share']} of Global's {r['global_window']}) BLEU "
              f"{r['flexible_bleu']}; local-m window {r['local_m_window']} BLEU {r['local_m_bleu']}; "
              f"Global BLEU {r['global_bleu']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
