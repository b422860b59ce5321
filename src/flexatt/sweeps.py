"""Named Hydra sweeps and their summary.

The named sweeps live in ``conf/sweep/`` (a config group outside ``conf/config.yaml``'s
defaults list, so ``params.yaml`` never changes; :mod:`flexatt.config` puts ``conf/`` on Hydra's
search path). Each is run as a multirun of one stage::

    python -m flexatt.stages.sweep_sigma -m +sweep=tau_sigma   # tau x sigma on dev
    python -m flexatt.stages.train -m +sweep=score             # global attention's score functions
    python -m flexatt.stages.train -m +sweep=sact_lambda       # SACT's lambda, 2 to 10
    python -m flexatt.stages.train -m +sweep=temperature       # fixed temperature 0.8 to 1.2
    python -m flexatt.stages.finetune -m +sweep=beta           # fine-tuning's beta

Every job writes its outputs under ``<sweep dir>/<job number>/`` (``multirun/<name>/<date>_<time>``
by default). :class:`SweepSummary`, the Hydra callback every named sweep installs:

* when the sweep starts, names the W&B group of the sweep (``sweep-<name>-<date>_<time>``),
  hands it to every job through ``hydra.job.env_set`` (``FLEXATT_SWEEP_GROUP``, read by
  ``logger.group``), and records the sweep's settings in ``<sweep dir>/sweep.json``;
* when a job ends (in the job's own process: a joblib worker or a SLURM node), records its
  overrides and status in ``<job dir>/job.json``;
* when every job has ended, collects each job's metrics from the JSON file its stage wrote and
  writes ``<sweep dir>/summary.md``, ``summary.csv`` and ``summary.png`` (the main metric against
  the swept keys), then logs one W&B run (job_type ``sweep_summary``, same group) with the
  table, a line plot and the image. A W&B failure only warns. A sweep of replicates
  (``aggregate: true`` in its callback settings: jobs that repeat one setting) also gets every
  metric column's mean ± sample standard deviation over the completed jobs (:func:`aggregate`).

``python -m flexatt.sweeps <sweep dir>`` rebuilds the summary, e.g. after a sweep that stopped
on a failed job (Hydra then skips the end-of-sweep callback).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import sys
import warnings
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, read_write

from flexatt import schema
from flexatt.errors import ConfigError, DataError
from flexatt.io import atomic_path, write_json

GROUP_ENV = "FLEXATT_SWEEP_GROUP"
"""Environment variable carrying the sweep's W&B group into its jobs (``logger.group``)."""

SWEEP_RECORD = "sweep.json"
JOB_RECORD = "job.json"
SUMMARY_FILES = ("summary.md", "summary.csv", "summary.png")
_KEY = "hydra.callbacks.sweep_summary"


def _plain(value: Any) -> Any:
    """``value`` as plain JSON-able Python (configs resolved; anything else as ``str``)."""
    if isinstance(value, DictConfig) or OmegaConf.is_list(value):
        value = OmegaConf.to_container(value, resolve=True)
    return json.loads(json.dumps(value, default=str))


def _stage_module(fallback: str) -> str:
    """The module this process runs (``flexatt.stages.train``), else ``fallback``."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return spec.name if spec is not None and spec.name else fallback


def group_name(name: str, sweep_dir: str | os.PathLike) -> str:
    """``sweep-<name>-<last part of the sweep dir>`` (its timestamp), safe as a W&B group."""
    raw = f"sweep-{name}-{Path(sweep_dir).name}"
    return re.sub(r"[^A-Za-z0-9._-]+", "_", raw)


class SweepSummary(Callback):
    """Hydra callback of the named sweeps (``hydra.callbacks.sweep_summary`` in conf/sweep/).

    Args:
        name: the sweep's name (``conf/sweep/<name>.yaml``).
        metrics_file: the JSON file each job's stage writes, relative to the job dir (a glob
            pattern may match exactly one file).
        metrics: summary column → dotted path into that file (list items by index, e.g.
            ``points.0.dev_bleu_ref``).
        main_metric: the column the plot and the "best" line use; one of ``metrics``.
        mode: ``max`` or ``min``: which value of the main metric is best.
        x: the swept key on the plot's x axis (default: the first swept key).
        plot: the columns drawn, one panel each (default: the main metric).
        aggregate: also summarise every metric column over the completed jobs as mean and sample
            standard deviation (the jobs are replicates of one setting).
    """

    def __init__(self, name: str, metrics_file: str, metrics: dict, main_metric: str,
                 mode: str = "max", x: str | None = None, plot: Sequence[str] | None = None,
                 aggregate: bool = False):
        self.settings = check_settings({
            "name": name, "metrics_file": metrics_file, "metrics": _plain(metrics),
            "main_metric": main_metric, "mode": mode, "x": x,
            "plot": _plain(plot) if plot is not None else None, "aggregate": aggregate,
        })
        self.sweep_dir: str | None = None  # set when the sweep starts; travels to the jobs
        self._saved_env: str | None = None  # the group variable's value before the sweep

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        # Hydra turns a callback's exception into a warning: exit as a stage does on a bad value
        name = self.settings["name"]
        print(f"error: sweep: +sweep={name} is a sweep of many jobs: add --multirun (-m), e.g. "
              f"python -m {_stage_module('flexatt.stages.<stage>')} -m +sweep={name}", file=sys.stderr)
        sys.exit(2)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(str(config.hydra.sweep.dir))  # resolves (and fixes) the timestamp
        self.sweep_dir = str(sweep_dir)
        auto = group_name(self.settings["name"], sweep_dir)
        self._saved_env = os.environ.get(GROUP_ENV)
        os.environ[GROUP_ENV] = auto  # this process: the summary run, an in-process launcher
        with read_write(config.hydra.overrides):  # every job recomposes with these overrides
            config.hydra.overrides.hydra.append(f"++hydra.job.env_set.{GROUP_ENV}='{auto}'")
        group = OmegaConf.select(config, "logger.group") or auto  # logger.group=X wins
        logger = _plain(config.logger)
        logger["group"] = group
        logger["dir"] = os.path.abspath(str(logger.get("dir") or "."))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        write_json(sweep_dir / SWEEP_RECORD, {
            **self.settings,
            "group": group,
            "stage": _stage_module(str(config.hydra.job.name)),
            "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "overrides": _plain(config.hydra.overrides.task),
            "params": _plain(OmegaConf.select(config, "hydra.sweeper.params") or {}),
            "profile": OmegaConf.select(config, "profile"),
            "logger": logger,
        })
        print(f"sweep {self.settings['name']}: {sweep_dir}, W&B group {group}", flush=True)

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        if self.sweep_dir is None:  # not a multirun
            return
        job_dir = Path(str(config.hydra.runtime.output_dir))
        status = getattr(job_return.status, "name", str(job_return.status))
        value = getattr(job_return, "_return_value", None)
        record = {"num": int(config.hydra.job.num), "status": status,
                  "overrides": list(job_return.overrides or config.hydra.overrides.task)}
        if status == "COMPLETED":
            record["return_value"] = _plain(value) if isinstance(value, dict) else None
        else:
            record["error"] = f"{type(value).__name__}: {value}"
        write_json(job_dir / JOB_RECORD, record)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            summary = summarize(self.sweep_dir or str(config.hydra.sweep.dir))
        finally:
            if self._saved_env is None:
                os.environ.pop(GROUP_ENV, None)
            else:
                os.environ[GROUP_ENV] = self._saved_env
        print(f"sweep {self.settings['name']}: {summary['done']} of {len(summary['rows'])} jobs "
              f"completed; summary in {summary['files'][0]}", flush=True)


def check_settings(settings: dict) -> dict:
    """The summary settings checked by :class:`flexatt.schema.SweepSummary` (errors name the key
    under ``hydra.callbacks.sweep_summary``); other entries of a sweep's record are kept as they are."""
    fields = schema.SweepSummary.model_fields
    checked = schema.validate_group(schema.SweepSummary, {k: v for k, v in settings.items() if k in fields}, _KEY)
    return {**settings, **checked.model_dump()}


# --------------------------------------------------------------------------- collecting


def select(data: Any, path: str) -> Any:
    """``data`` at a dotted ``path`` (``a.0.b``); ``None`` where the path does not exist."""
    for part in path.split("."):
        if isinstance(data, dict) and part in data:
            data = data[part]
        elif isinstance(data, list) and part.lstrip("-").isdigit() and -len(data) <= int(part) < len(data):
            data = data[int(part)]
        else:
            return None
    return data


def parse_override(override: str) -> tuple[str, Any] | None:
    """``key=value`` → ``(key, value)`` with YAML typing (``[1.5]`` → ``1.5``); ``None`` for a
    group choice such as ``+sweep=score``."""
    key, sep, raw = override.partition("=")
    key = key.lstrip("+~")
    if not sep or "." not in key:
        return None
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError:
        value = raw
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if isinstance(value, (list, dict)):
        value = json.dumps(value)
    return key, value


def _metrics_of(job_dir: Path, pattern: str, columns: dict[str, str]) -> tuple[dict, str | None]:
    """The job's metric columns from its metrics file, and a note when that file is missing."""
    matches = sorted(p for p in job_dir.glob(pattern) if p.name not in (JOB_RECORD, SWEEP_RECORD))
    if len(matches) != 1:
        note = "no metrics file" if not matches else f"{len(matches)} files match"
        return {c: None for c in columns}, f"{note} {pattern!r} in {job_dir}"
    try:
        data = json.loads(matches[0].read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        return {c: None for c in columns}, f"{matches[0]}: unreadable ({exc})"
    return {c: select(data, path) for c, path in columns.items()}, None


def collect(sweep_dir: str | os.PathLike) -> tuple[dict, list[str], list[dict]]:
    """``(settings, swept keys, rows)`` of the sweep in ``sweep_dir``: one row per job dir."""
    sweep_dir = Path(sweep_dir)
    record = sweep_dir / SWEEP_RECORD
    if not record.is_file():
        raise DataError(record, "not found: not the dir of a named sweep (python -m flexatt.stages."
                        "<stage> -m +sweep=<name>), or it never started")
    settings = check_settings(json.loads(record.read_text(encoding="utf-8")))
    job_dirs = sorted((p for p in sweep_dir.iterdir() if p.is_dir() and p.name.isdigit()),
                      key=lambda p: int(p.name))
    jobs = []
    for job_dir in job_dirs:
        job_file = job_dir / JOB_RECORD
        job = json.loads(job_file.read_text(encoding="utf-8")) if job_file.is_file() else \
            {"num": int(job_dir.name), "status": "NO_RECORD", "overrides": []}
        job["values"] = dict(filter(None, map(parse_override, job.get("overrides", []))))
        job["dir"] = job_dir
        jobs.append(job)

    declared = [k.lstrip("+~") for k in settings.get("params") or {}]
    seen: dict[str, list] = {}
    for job in jobs:
        for key, value in job["values"].items():
            seen.setdefault(key, []).append(value)
    varying = [k for k, v in seen.items() if len({json.dumps(x, sort_keys=True) for x in v}) > 1]
    swept = [k for k in declared if k in seen or not jobs] + [k for k in varying if k not in declared]

    rows = []
    for job in jobs:
        metrics, note = _metrics_of(job["dir"], settings["metrics_file"], settings["metrics"])
        if note and job["status"] == "COMPLETED":
            warnings.warn(f"sweep {settings['name']}: job {job['num']}: {note}", RuntimeWarning, stacklevel=2)
        rows.append({"job": job["num"], "status": job["status"],
                     **{k: job["values"].get(k) for k in swept}, **metrics,
                     "dir": os.path.relpath(job["dir"], sweep_dir)})
    return settings, swept, rows


def best_row(rows: list[dict], metric: str, mode: str) -> dict | None:
    """The row with the best numeric ``metric`` (``None`` when no row has one)."""
    scored = [r for r in rows if _is_number(r.get(metric))]
    if not scored:
        return None
    return (max if mode == "max" else min)(scored, key=lambda r: r[metric])


def aggregate(rows: list[dict], columns: Sequence[str]) -> dict[str, dict[str, float | int | None]]:
    """Per metric column, over the completed jobs with a number there: ``n``, ``mean`` and the
    sample standard deviation ``sd`` (n − 1 in the denominator; ``None`` below two values)."""
    out = {}
    for column in columns:
        values = [r[column] for r in rows if r["status"] == "COMPLETED" and _is_number(r.get(column))]
        n = len(values)
        mean = sum(values) / n if n else None
        sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else None
        out[column] = {"n": n, "mean": mean, "sd": sd}
    return out


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _decimals(values: Sequence[Any]) -> int:
    """Decimals to show a mean ± sd with: as many as the jobs' values carry (2 to 4)."""
    shown = [f"{v:g}" for v in values if _is_number(v)]
    return min(max([2, *(len(t.partition(".")[2]) for t in shown if "e" not in t)]), 4)


def format_stat(stat: dict, decimals: int = 2) -> str:
    """``mean ± sd`` of an :func:`aggregate` entry (the mean alone below two values, ``–`` for none)."""
    if stat["mean"] is None:
        return "–"
    if stat["sd"] is None:
        return f"{stat['mean']:.{decimals}f}"
    return f"{stat['mean']:.{decimals}f} ± {stat['sd']:.{decimals}f}"


# --------------------------------------------------------------------------- writing


def _cell(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def write_markdown(path: Path, settings: dict, swept: list[str], rows: list[dict], best: dict | None,
                   plot: str | None, stats: dict | None = None) -> None:
    columns = ["job", *swept, *settings["metrics"], "status"]
    lines = [f"# Sweep `{settings['name']}`", "",
             f"- command: `python -m {settings.get('stage')} -m {' '.join(settings.get('overrides') or [])}`",
             f"- W&B group: `{settings.get('group')}`",
             f"- swept: {', '.join(f'`{k}`' for k in swept) or '(nothing)'}; main metric: "
             f"`{settings['main_metric']}` ({settings['mode']} is best)",
             f"- jobs: {len(rows)}, completed: {sum(r['status'] == 'COMPLETED' for r in rows)}", ""]
    if best is not None and not stats:  # replicates have no best job, only a mean
        chosen = ", ".join(f"`{k}={_cell(best[k])}`" for k in swept)
        lines += [f"**Best:** job {best['job']} ({chosen}): {settings['main_metric']} = "
                  f"{_cell(best[settings['main_metric']])}", ""]
    lines += ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_cell(r.get(c)) for c in columns) + " |" for r in rows]
    if stats:
        lines += ["", f"Over the completed jobs (mean ± sample standard deviation, n = "
                  f"{max(v['n'] for v in stats.values())}):", "", "| metric | mean ± sd | n |", "|---|---|---|"]
        for column, v in stats.items():
            decimals = _decimals([r.get(column) for r in rows if r["status"] == "COMPLETED"])
            lines.append(f"| {column} | {format_stat(v, decimals)} | {v['n']} |")
    if plot:
        lines += ["", f"![{settings['main_metric']} against the swept keys]({plot})"]
    with atomic_path(path) as tmp:
        Path(tmp).write_text("\n".join(lines) + "\n", encoding="utf-8")


def write_csv(path: Path, settings: dict, swept: list[str], rows: list[dict],
              stats: dict | None = None) -> None:
    """One line per job; with ``stats`` (:func:`aggregate`) two more, job ``mean`` and ``sd``."""
    columns = ["job", "status", *swept, *settings["metrics"], "dir"]
    with atomic_path(path) as tmp, open(tmp, "w", newline="", encoding="utf-8") as out:
        writer = csv.DictWriter(out, fieldnames=columns)
        writer.writeheader()
        writer.writerows({c: r.get(c) for c in columns} for r in rows)
        for name in ("mean", "sd") if stats else ():
            writer.writerow({"job": name, **{c: v[name] for c, v in stats.items()}})


def plot_axes(settings: dict, swept: list[str], rows: list[dict]) -> tuple[str | None, str | None]:
    """``(x, series)``: the swept key on the x axis and the one drawn as separate lines.

    Only keys that take more than one value count: ``settings["x"]`` where it does, else the
    first numeric one, else the first; ``series`` is the other one when exactly two vary.
    """
    varying = [k for k in swept if len({json.dumps(r.get(k)) for r in rows}) > 1] or swept
    if not varying:
        return None, None
    x = settings.get("x") if settings.get("x") in varying else None
    if x is None:
        x = next((k for k in varying if all(_is_number(r[k]) for r in rows if r[k] is not None)), varying[0])
    others = [k for k in varying if k != x]
    return x, (others[0] if len(others) == 1 else None)


def write_plot(path: Path, settings: dict, swept: list[str], rows: list[dict]) -> Path:
    """One panel per plotted column: the column against the x key, one line per series value."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = settings.get("plot") or [settings["main_metric"]]
    x, series = plot_axes(settings, swept, rows)
    fig, axes = plt.subplots(1, len(columns), figsize=(5.2 * len(columns), 3.8), squeeze=False)
    numeric_x = x is not None and all(_is_number(r[x]) for r in rows if r[x] is not None)
    for ax, column in zip(axes[0], columns):
        groups: dict[Any, list[dict]] = {}
        for r in rows:
            if _is_number(r.get(column)):
                key = "" if series is None else f"{series} = {_cell(r[series])}"
                if series is None and x is not None and len(swept) > 1:  # more than two keys vary
                    key = ", ".join(f"{k}={_cell(r[k])}" for k in swept if k != x)
                groups.setdefault(key, []).append(r)
        if x is None:
            values = [r for g in groups.values() for r in g]
            ax.bar([str(r["job"]) for r in values], [r[column] for r in values])
            ax.set_xlabel("job")
        elif numeric_x:
            for label, g in groups.items():
                g = sorted(g, key=lambda r: r[x])
                ax.plot([r[x] for r in g], [r[column] for r in g], marker="o", label=label or None)
            ax.set_xlabel(x)
        else:
            labels = list(dict.fromkeys(str(r[x]) for g in groups.values() for r in g))
            width = 0.8 / max(len(groups), 1)
            for i, (label, g) in enumerate(groups.items()):
                pos = [labels.index(str(r[x])) + i * width for r in g]
                ax.bar(pos, [r[column] for r in g], width=width, label=label or None)
            ax.set_xticks([i + width * (len(groups) - 1) / 2 for i in range(len(labels))], labels,
                          rotation=20)
            ax.set_xlabel(x)
        ax.set_ylabel(column)
        ax.grid(alpha=0.3)
        if any(groups) and len(groups) > 1:
            ax.legend(fontsize=7)
    fig.suptitle(f"sweep {settings['name']}: {', '.join(columns)}")
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def log_wandb(settings: dict, swept: list[str], rows: list[dict], best: dict | None, image: Path,
              stats: dict | None = None) -> None:
    """One W&B run (job_type ``sweep_summary``) in the sweep's group; failures only warn. Its
    summary holds the best job's values, or with ``stats`` (replicates) ``mean/<column>``,
    ``sd/<column>`` and ``n/<column>``."""
    from flexatt.tracking import start_run

    cfg = OmegaConf.create({
        "profile": settings.get("profile"),
        "logger": settings["logger"],
        "sweep": {k: settings.get(k) for k in ("name", "stage", "overrides", "params", "metrics_file",
                                               "metrics", "main_metric", "mode", "group")},
    })
    tracker = start_run(cfg, "sweep_summary", settings["name"],
                        tags=["sweep", settings["name"], settings.get("profile")])
    if not tracker.active:
        return
    columns = ["job", "status", *swept, *settings["metrics"]]
    table = tracker.table("sweep/results", columns, [[_wandb_cell(r.get(c)) for c in columns] for r in rows])
    x, series = plot_axes(settings, swept, rows)
    if x is None or not all(_is_number(r[x]) for r in rows if r[x] is not None):
        x = "job"
    metric = settings["main_metric"]
    if table is not None:
        try:
            import wandb

            plot = wandb.plot.line(table, x, metric, stroke=series,
                                   title=f"{metric} against {x}" + (f" by {series}" if series else ""))
        except Exception as exc:  # noqa: BLE001 - tracking must never stop the summary
            warnings.warn(f"W&B line plot failed ({type(exc).__name__}: {exc}); continuing without it",
                          RuntimeWarning, stacklevel=2)
        else:
            tracker.log({f"sweep/{metric}_plot": plot})
    tracker.image("sweep/plot", image, f"sweep {settings['name']}: {metric} against {x}")
    summary = {"jobs": len(rows), "completed": sum(r["status"] == "COMPLETED" for r in rows)}
    if stats:
        summary.update({f"{name}/{column}": v[name] for column, v in stats.items()
                        for name in ("mean", "sd", "n") if v[name] is not None})
    elif best is not None:
        summary.update({f"best/{k}": _wandb_cell(best[k]) for k in [*swept, *settings["metrics"], "job"]
                        if best[k] is not None})
    tracker.summary(summary)
    tracker.finish()


def _wandb_cell(value: Any) -> Any:
    return value if value is None or isinstance(value, (int, float, str, bool)) else str(value)


def summarize(sweep_dir: str | os.PathLike, wandb: bool = True) -> dict:
    """Collect the sweep in ``sweep_dir``; write ``summary.{md,csv,png}``; log the W&B run.

    With ``aggregate`` in the sweep's settings, ``summary.md`` adds a table of every metric
    column's mean ± sample sd over the completed jobs (and drops the "best" line), ``summary.csv``
    two lines, job ``mean`` and ``sd``.
    Returns ``{"rows", "swept", "best", "stats", "done", "files", "group"}`` (``stats``:
    :func:`aggregate`'s, ``None`` without ``aggregate``).
    """
    sweep_dir = Path(sweep_dir)
    settings, swept, rows = collect(sweep_dir)
    best = best_row(rows, settings["main_metric"], settings["mode"])
    stats = aggregate(rows, list(settings["metrics"])) if settings.get("aggregate") else None
    md, csv_file, png = (sweep_dir / name for name in SUMMARY_FILES)
    write_csv(csv_file, settings, swept, rows, stats)
    plotted = [r for r in rows if _is_number(r.get(settings["main_metric"]))]
    if plotted:
        write_plot(png, settings, swept, plotted)
    write_markdown(md, settings, swept, rows, best, png.name if plotted else None, stats)
    if wandb and plotted:
        log_wandb(settings, swept, rows, best, png, stats)
    return {"rows": rows, "swept": swept, "best": best, "group": settings.get("group"), "stats": stats,
            "done": sum(r["status"] == "COMPLETED" for r in rows),
            "files": [md, csv_file] + ([png] if plotted else [])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m flexatt.sweeps",
                                     description="Rebuild the summary of a named sweep from its dir.")
    parser.add_argument("sweep_dir", type=Path, help="e.g. multirun/score/2026-01-31_12-00-00")
    parser.add_argument("--no-wandb", action="store_true", help="do not log the W&B summary run")
    args = parser.parse_args(argv)
    try:
        summary = summarize(args.sweep_dir, wandb=not args.no_wandb)
    except (ConfigError, DataError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(Path(summary["files"][0]).read_text(encoding="utf-8"), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
