"""The W&B dashboard of the project's runs, built from code (``flexatt dashboard``).

One list of sections (:func:`sections`) becomes both a saved W&B **workspace** (a view of the
project's runs, one section per topic) and a **report** (a page with a heading, a sentence and a
panel grid per section, each grid on the runs of the stages it shows), with the
``wandb-workspaces`` library. Every panel reads keys the stages log (:mod:`flexatt.tracking`):

* ``train`` / ``finetune`` / ``control`` runs (Lightning): history ``epoch``, ``train/loss``,
  ``val/loss``, ``val/bleu``; summary ``final/dev_bleu``, ``final/tokens_per_second``; config
  ``train.variant`` / ``finetune.variant`` (the control's too);
* ``evaluate``: the table ``evaluate/table1`` (a row per model and τ: ``bleu``, ``bleu_ci_low``,
  ``bleu_ci_high``, ``window``, ``reduction``, …), images ``figures/<name>``;
* ``sweep_tau``: the tables ``sweep_tau/points`` (every τ tried, per flexible model) and
  ``sweep_tau/curve`` (the trade-off curve), the image ``figures/tradeoff``;
* ``sweep_sigma``: the table ``sweep_sigma/points``, summary ``selected_sigma``, ``figures/sigma``;
* the long profiles: ``unit-decode`` (a unit's decoding, :func:`flexatt.units.log_decodes`):
  summary ``<split>/<inf|selected>/<bleu|chrf|ribes|window|aer>``, config ``variant``, ``seed``;
  ``units-report`` (:func:`flexatt.stages.report.log_report`): the tables ``units/claims`` and
  ``units/models`` (a Transformer profile's also ``units/architectures``), the image ``figures/units``.

:func:`keys_read` lists what each panel reads, so that a test can check them against the keys
of real (offline) runs. Building the objects needs no network; only saving them does
(:func:`save`), and without one, or without an API key, :func:`main` says so in one line.

The learning curves are a section per training stage (:data:`CURVE_STAGES`), a line per variant
in each chart; a stage that trains one epoch (the fine-tuning and its control by default, per
``params.yaml``: :func:`curve_epochs`) gets no chart per epoch, whose lines would be single
points: its training loss per step and its dev BLEU as a bar per variant.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: the report's and the workspace's name
TITLE = "flexatt: Flexible Attention results"
#: the columns pinned in the workspace's run table (``run:`` W&B's own, ``summary:`` logged)
RUN_TABLE_COLUMNS = ("run:displayName", "run:jobType", "summary:final/dev_bleu", "summary:final/tokens_per_second")
#: the stages whose runs log learning curves: job type -> (what it is, the config key that names a
#: run's variant, the ``params.yaml`` key of its epochs: the control trains the fine-tuning's)
CURVE_STAGES = {"train": ("training", "config.train.variant", ("train", "epochs")),
                "finetune": ("fine-tuning", "config.finetune.variant", ("finetune", "epochs")),
                "control": ("control (β = 0)", "config.finetune.variant", ("finetune", "epochs"))}


def curve_epochs(params: Path = Path("params.yaml")) -> dict[str, int]:
    """The epochs each stage of :data:`CURVE_STAGES` trains for, read from ``params`` (a stage
    whose key is not there, or no file: left out, and its charts per epoch kept)."""
    import yaml

    if not params.is_file():
        return {}
    values = yaml.safe_load(params.read_text(encoding="utf-8")) or {}
    epochs = {}
    for stage, (_, _, (group, key)) in CURVE_STAGES.items():
        value = (values.get(group) or {}).get(key)
        if isinstance(value, int):
            epochs[stage] = value
    return epochs


@dataclass(frozen=True)
class Runs:
    """The runs a report grid shows: those of the stages ``job_types``, grouped by ``groupby``
    (a ``Runset`` group key such as ``config.train.variant``: one line, bar or value per group,
    aggregated over the runs in it, e.g. the seeds of a variant) when given."""

    job_types: tuple[str, ...]
    groupby: str | None = None


@dataclass
class Section:
    """A topic of the dashboard: a workspace section, and in the report a heading, ``text`` and
    a panel grid over ``runs``. ``columns`` names, per table panel, the columns of the logged
    table that the section shows (a table panel shows every column; these are the ones it is
    there for)."""

    title: str
    text: str
    runs: tuple[Runs, ...]
    panels: list[Any]
    columns: dict[str, tuple[str, ...]] = field(default_factory=dict)


def _chart(preset: str, table: str, fields: dict[str, str], title: str, **layout: int):
    """A custom chart of W&B's ``preset`` (``wandb/line/v0``: x, y, stroke; ``wandb/scatter/v0``:
    x, y; ``wandb/bar/v0``: label, value) over the logged table ``table``."""
    import wandb_workspaces.reports.v2 as wr

    chart = wr.CustomChart.from_table(table, chart_fields=fields, chart_strings={"title": title})
    chart.chart_name = preset
    if layout:
        chart.layout = wr.Layout(**layout)
    return chart


def learning_curves(stage: str, epochs: int | None) -> Section:
    """The learning curves of one stage of :data:`CURVE_STAGES`, a line (or bar) per variant:
    dev BLEU and dev loss per epoch where it trains more than one epoch (``epochs``; None:
    unknown, kept), the training loss per step, the best dev BLEU (and, for training, its speed)."""
    import wandb_workspaces.reports.v2 as wr

    what, variant, _ = CURVE_STAGES[stage]
    per_epoch = epochs is None or epochs > 1
    panels = [wr.LinePlot(x="epoch", y=["val/bleu"], title=f"dev BLEU, {what}"),
              wr.LinePlot(x="epoch", y=["val/loss"], title=f"dev loss, {what}")] if per_epoch else []
    panels += [wr.LinePlot(y=["train/loss"], title=f"training loss (per step), {what}"),
               wr.BarPlot(metrics=["final/dev_bleu"], title=f"best dev BLEU, {what}")]
    if stage == "train":
        panels.append(wr.BarPlot(metrics=["final/tokens_per_second"], title="training tokens per second"))
    text = ("Dev BLEU (greedy, the checkpoint criterion) and the losses per epoch, a line per variant; "
            if per_epoch else f"One epoch ({what}): no curve per epoch; ")
    text += "the training loss per step and each variant's best dev BLEU."
    return Section(f"Learning curves: {what}", text, (Runs((stage,), variant),), panels)


def sections(epochs: Mapping[str, int] | None = None) -> list[Section]:
    """The dashboard's sections, in order: Table 1, BLEU against window, the τ trade-off,
    learning curves (a section per training stage; ``epochs``: what each trains for, default
    :func:`curve_epochs`), the σ sweep, the long profiles' units (their training seeds),
    attention per step. (One long function: the dashboard declared as one list, in the order it
    shows.)"""
    import wandb_workspaces.reports.v2 as wr

    epochs = curve_epochs() if epochs is None else epochs
    wide = {"w": 24, "h": 10}
    return [
        Section(
            "Table 1 (test set)",
            "Every model on the test set, at τ = ∞ and (flexible models) at the τ selected on dev: "
            "BLEU with its 95% bootstrap interval, the window (positions scored per step) and its "
            "reduction against Global, a row per variant and τ (the evaluate stage's table).",
            (Runs(("evaluate",)),),
            [wr.WeavePanelSummaryTable(table_name="evaluate/table1", layout=wr.Layout(**wide)),
             _chart("wandb/bar/v0", "evaluate/table1", {"label": "row", "value": "bleu"}, "BLEU per row"),
             _chart("wandb/bar/v0", "evaluate/table1", {"label": "row", "value": "window"}, "window per row"),
             _chart("wandb/bar/v0", "evaluate/table1", {"label": "row", "value": "reduction"},
                    "window reduction against Global")],
            columns={"evaluate/table1": ("row", "tau", "bleu", "bleu_ci_low", "bleu_ci_high", "window",
                                         "reduction")},
        ),
        Section(
            "BLEU against window",
            "Test BLEU against the mean window for every model and τ of Table 1, and the trade-off "
            "curve (Figure 3): the curve model at every τ of the curve, on dev and test, with Global.",
            (Runs(("evaluate", "sweep_tau")),),
            [_chart("wandb/scatter/v0", "evaluate/table1", {"x": "window", "y": "bleu"},
                    "test BLEU against window, every model and τ"),
             _chart("wandb/line/v0", "sweep_tau/curve", {"x": "window", "y": "bleu", "stroke": "split"},
                    "trade-off curve: BLEU against window (dev, test)"),
             wr.MediaBrowser(media_keys=["figures/tradeoff"], title="Figure 3")],
        ),
        Section(
            "τ trade-off per flexible model",
            "Every τ the dev search tried (the paper's grid, log S̄ and the bisections), per "
            "flexible model: BLEU and window against τ; the selected τ is the smallest window "
            "within the tolerance of τ = ∞.",
            (Runs(("sweep_tau",)),),
            [_chart("wandb/line/v0", "sweep_tau/points", {"x": "window", "y": "bleu", "stroke": "model"},
                    "dev BLEU against window, per flexible model"),
             _chart("wandb/line/v0", "sweep_tau/points", {"x": "tau", "y": "window", "stroke": "model"},
                    "window against τ, per flexible model"),
             _chart("wandb/line/v0", "sweep_tau/points", {"x": "tau", "y": "bleu", "stroke": "model"},
                    "dev BLEU against τ, per flexible model"),
             wr.WeavePanelSummaryTable(table_name="sweep_tau/points", layout=wr.Layout(**wide))],
            columns={"sweep_tau/points": ("model", "tau", "source", "window", "bleu")},
        ),
        *(learning_curves(stage, epochs.get(stage)) for stage in CURVE_STAGES),
        Section(
            "σ sweep",
            "Flexible attention's σ, warm-started from the trained flexible model: dev BLEU at τ = ∞ "
            "and the window at the reference τ, per σ; the selected σ.",
            (Runs(("sweep_sigma",)),),
            [_chart("wandb/line/v0", "sweep_sigma/points", {"x": "sigma", "y": "dev_bleu"}, "dev BLEU against σ"),
             _chart("wandb/line/v0", "sweep_sigma/points", {"x": "sigma", "y": "window"},
                    "window at the reference τ against σ"),
             wr.ScalarChart(metric="selected_sigma", title="selected σ"),
             wr.MediaBrowser(media_keys=["figures/sigma"], title="σ sweep")],
            columns={"sweep_sigma/points": ("sigma", "dev_bleu", "window")},
        ),
        Section(
            "Equal-budget units (long profiles)",
            "The claims decided over training seeds on each long profile (`pipelines/<profile>/`, its "
            "report stage): per comparison its seeds, verdict, mean Δ BLEU with its 95% t-interval and "
            "two-level bootstrap; the models over seeds; per unit (a run of its decoding), test BLEU "
            "and window at τ = ∞ and at the selected τ, a bar per variant, mean ± sd over its seeds; a "
            "Transformer profile's models against the RNN's at equal training minutes.",
            (Runs(("units-report",)), Runs(("unit-decode",), "config.variant")),
            [wr.WeavePanelSummaryTable(table_name="units/claims", layout=wr.Layout(**wide)),
             wr.WeavePanelSummaryTable(table_name="units/models", layout=wr.Layout(**wide)),
             wr.BarPlot(metrics=["test/inf/bleu", "test/selected/bleu"], title="test BLEU per unit, mean ± sd over seeds",
                        groupby_aggfunc="mean", groupby_rangefunc="stddev"),
             wr.BarPlot(metrics=["test/inf/window", "test/selected/window"],
                        title="test window per unit, mean ± sd over seeds", groupby_aggfunc="mean",
                        groupby_rangefunc="stddev"),
             wr.MediaBrowser(media_keys=["figures/units"], title="BLEU against window, every unit"),
             wr.WeavePanelSummaryTable(table_name="units/architectures", layout=wr.Layout(**wide))],
            columns={"units/claims": ("profile", "claim", "comparison", "seeds", "verdict", "delta", "ci_low",
                                      "ci_high"),
                     "units/models": ("profile", "model", "at", "seeds", "bleu", "window"),
                     "units/architectures": ("profile", "against", "model", "seed", "test_bleu", "test_bleu_against",
                                             "equal_minutes", "dev_bleu_at_equal", "dev_bleu_at_equal_against")},
        ),
        Section(
            "Attention per step",
            "The fine-tuned flexible model on test sentences: the span of its window (Figure 4), "
            "g_t (Figure 5) and SACT's temperature per decoding step, attention heatmaps.",
            (Runs(("evaluate",)),),
            [wr.MediaBrowser(media_keys=["figures/vision_span", "figures/g", "figures/temperature",
                                         "figures/attention"],
                             title="per decoding step", layout=wr.Layout(**wide))],
        ),
    ]


#: the job types of the long profiles' runs (a unit's decoding, a report of the units)
UNIT_JOBS = ("unit-decode", "units-report")


def of_units(section: Section) -> bool:
    """Whether ``section`` shows the runs of the long profiles' units (:data:`UNIT_JOBS`)."""
    return any(job in UNIT_JOBS for runs in section.runs for job in runs.job_types)


def keys_read(section: Section) -> set[str]:
    """What the panels of ``section`` read from the runs, as the names a run logs: a metric
    (history or summary) ``key``, a logged table's column ``table[column]``, a config entry
    ``config.<path>``. W&B's built-in axes (``Step``) are left out."""
    import wandb_workspaces.reports.v2 as wr

    keys: set[str] = set()
    for panel in section.panels:
        if isinstance(panel, wr.LinePlot):
            keys.update(panel.y)
            if panel.x not in (None, "Step"):
                keys.add(panel.x)
        elif isinstance(panel, wr.BarPlot):
            keys.update(panel.metrics)
        elif isinstance(panel, wr.ScalarChart):
            keys.add(panel.metric)
        elif isinstance(panel, wr.MediaBrowser):
            keys.update(panel.media_keys)
        elif isinstance(panel, wr.WeavePanelSummaryTable):
            keys.add(panel.table_name)
        elif isinstance(panel, wr.CustomChart):
            table = panel.query["summaryTable"]["tableKey"]
            keys.add(table)
            keys.update(f"{table}[{column}]" for column in panel.chart_fields.values())
        else:
            raise TypeError(f"keys_read: no rule for {type(panel).__name__}")
    for table, columns in section.columns.items():
        keys.update(f"{table}[{column}]" for column in columns)
    keys.update(runs.groupby for runs in section.runs if runs.groupby and runs.groupby.startswith("config."))
    return {str(k) for k in keys}


def unlogged(logged: Iterable[str], where: Iterable[Section] | None = None) -> dict[str, list[str]]:
    """The keys that some panel reads but no run logs (``logged``: names as :func:`keys_read`
    writes them), by section title; empty when every panel has its data."""
    logged = set(logged)
    missing = {}
    for section in sections() if where is None else where:
        absent = sorted(keys_read(section) - logged)
        if absent:
            missing[section.title] = absent
    table = sorted(c.split(":", 1)[1] for c in RUN_TABLE_COLUMNS if c.startswith("summary:")
                   and c.split(":", 1)[1] not in logged)
    if table and where is None:
        missing["run table"] = table
    return missing


def workspace(entity: str, project: str):
    """The W&B workspace: a section per :func:`sections` entry; its run table shows each run's
    name (``<stage>-<variant>``), stage and best dev BLEU (:data:`RUN_TABLE_COLUMNS`)."""
    import wandb_workspaces.workspaces as ws

    return ws.Workspace(
        entity=entity, project=project, name=TITLE,
        sections=[ws.Section(name=s.title, panels=s.panels, is_open=True) for s in sections()],
        settings=ws.WorkspaceSettings(x_axis="Step", max_runs=50),
        runset_settings=ws.RunsetSettings(pinned_columns=list(RUN_TABLE_COLUMNS)),
    )


def report(entity: str, project: str):
    """The W&B report: per section a heading, its text and a panel grid over the runs of its
    stages (filtered by job type, grouped as the section says)."""
    import wandb_workspaces.reports.v2 as wr
    from wandb_workspaces import expr

    blocks: list[Any] = [wr.P(
        "Flexible Attention (Shu & Nakayama) against global, local-m, local-p, SACT and "
        "Flexible+SACT attention: how much attention computation a translation needs. Built by "
        "`flexatt dashboard` from the runs that the pipeline's stages log.")]
    for s in sections():
        runsets = [wr.Runset(entity=entity, project=project, name=" + ".join(runs.job_types),
                             filters=expr.And(expr.Metric("JobType").isin(list(runs.job_types))),
                             groupby=[runs.groupby] if runs.groupby else [])
                   for runs in s.runs]
        blocks += [wr.H2(s.title), wr.P(s.text), wr.PanelGrid(runsets=runsets, panels=s.panels)]
    return wr.Report(entity=entity, project=project, title=TITLE, width="fluid",
                     description="Table 1, BLEU against window, the τ trade-off, the learning curves of "
                                 "each training stage and the σ sweep of the flexatt pipeline, and the "
                                 "seeds of the long profiles' units.",
                     blocks=blocks)


def save(entity: str, project: str) -> tuple[str, str]:
    """Save the workspace and the report to W&B (online): their URLs."""
    saved_workspace = workspace(entity, project).save()
    saved_report = report(entity, project)
    saved_report.save()
    return saved_workspace.url, saved_report.url


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def main(entity: str, project: str, dry_run: bool = False) -> int:
    """``flexatt dashboard``: save the workspace and the report (``dry_run``: build them and
    list every section's keys instead). Without a W&B API key or a network: one line, status 1."""
    if dry_run:
        workspace(entity, project), report(entity, project)  # built and validated, not saved
        for s in sections():
            stages = ", ".join(job for runs in s.runs for job in runs.job_types)
            print(f"{s.title} ({stages}): {', '.join(sorted(keys_read(s)))}")
        return 0
    import wandb

    try:
        wandb.Api()  # raises UsageError without an API key (wandb login, or WANDB_API_KEY)
    except wandb.errors.UsageError:
        print("error: flexatt dashboard saves to W&B: it needs an API key (wandb login, or WANDB_API_KEY) "
              "and a network; nothing was saved", file=sys.stderr)
        return 1
    try:
        urls = save(entity, project)
    except Exception as exc:  # noqa: BLE001 - the library's network and auth errors have no common type
        print(f"error: cannot save the W&B dashboard of {entity}/{project} (it needs a network and a "
              f"valid API key): {_first_line(exc)}", file=sys.stderr)
        return 1
    print(f"workspace: {urls[0]}\nreport: {urls[1]}")
    return 0
