"""``flexatt dashboard``: the W&B workspace and report built from code (flexatt.dashboard).

* Offline, no runs needed: both objects build and the workspace serialises to the view W&B
  would save, a section per topic with all its panels; the learning curves are a section per
  training stage, without charts per epoch for a stage of one epoch; the check of panel keys
  names a key that no run logs; without an API key the command says so in one line and saves
  nothing.
* Slow: every key a panel reads (metric, logged table and its columns, config entry) is among
  the keys that real runs log, read from the offline W&B run files of the smoke pipeline
  (conftest's ``smoke_copy``: train, finetune, control, sweep_tau, evaluate, sweep_sigma); the
  long profiles' section is checked against its units' runs (tests/test_unit_claims.py,
  tests/test_units.py).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from flexatt import dashboard
from wandb_records import logged_keys, read_run

ENTITY, PROJECT = "flexatt-team", "flexatt"
#: the default profile's epochs: three of training, one of fine-tuning (and so of its control)
EPOCHS = {"train": 3, "finetune": 1, "control": 1}
CURVES = ["Learning curves: training", "Learning curves: fine-tuning", "Learning curves: control (β = 0)"]
READ_EPOCHS = dashboard.curve_epochs  # the module's own, which the fixture below replaces


@pytest.fixture(autouse=True)
def default_epochs(monkeypatch):
    """The sections as the default profile's params.yaml makes them, wherever the tests run."""
    monkeypatch.setattr(dashboard, "curve_epochs", lambda *args: dict(EPOCHS))


def test_workspace_and_report_build_offline():
    import wandb_workspaces.reports.v2 as wr

    sections = dashboard.sections()
    titles = [s.title for s in sections]
    assert titles == ["Table 1 (test set)", "BLEU against window", "τ trade-off per flexible model", *CURVES,
                      "σ sweep", "Equal-budget units (long profiles)", "Attention per step"]
    view = dashboard.workspace(ENTITY, PROJECT)._to_model()  # what save() sends, made without a network
    spec = view.spec.section.panel_bank_config
    assert (view.entity, view.project, view.display_name) == (ENTITY, PROJECT, dashboard.TITLE)
    assert [s.name for s in spec.sections] == titles
    assert [len(s.panels) for s in spec.sections] == [len(s.panels) for s in sections]
    assert view.spec.section.run_sets[0].run_feed.column_order == list(dashboard.RUN_TABLE_COLUMNS)

    report = dashboard.report(ENTITY, PROJECT)
    grids = [b for b in report.blocks if isinstance(b, wr.PanelGrid)]
    assert [b.text for b in report.blocks if isinstance(b, wr.H2)] == titles
    assert [len(g.panels) for g in grids] == [len(s.panels) for s in sections]
    for grid, section in zip(grids, sections):  # each grid on the runs of its stages only
        assert [r.filters for r in grid.runsets] == [f"Metric(\"JobType\") in {list(r.job_types)}"
                                                     for r in section.runs], section.title
        assert all((r.entity, r.project) == (ENTITY, PROJECT) for r in grid.runsets)
    for title, stage, variant in zip(CURVES, ("train", "finetune", "control"),
                                     ("config.train.variant", "config.finetune.variant", "config.finetune.variant")):
        grid = grids[titles.index(title)]  # one stage per chart, a line per variant
        assert [(r.filters, r.groupby) for r in grid.runsets] == [(f"Metric(\"JobType\") in {[stage]}", [variant])]
    units = grids[titles.index("Equal-budget units (long profiles)")]  # the reports, and the units by variant
    assert [(r.filters, r.groupby) for r in units.runsets] == [
        ("Metric(\"JobType\") in ['units-report']", []), ("Metric(\"JobType\") in ['unit-decode']", ["config.variant"])]


def _per_epoch(section) -> list[str]:
    import wandb_workspaces.reports.v2 as wr

    return [p.title for p in section.panels if isinstance(p, wr.LinePlot) and p.x == "epoch"]


def test_a_stage_of_one_epoch_gets_no_chart_per_epoch():
    """A chart per epoch of a one-epoch stage would draw a single point per variant: the training
    stage keeps its dev BLEU and dev loss per epoch, the fine-tuning and its control do not (their
    dev BLEU is a bar per variant); with more epochs they get them too."""
    by_title = {s.title: s for s in dashboard.sections()}
    assert _per_epoch(by_title[CURVES[0]]) == ["dev BLEU, training", "dev loss, training"]
    for title in CURVES[1:]:
        section = by_title[title]
        assert _per_epoch(section) == [] and "final/dev_bleu" in dashboard.keys_read(section)
        assert "val/bleu" not in dashboard.keys_read(section) and "train/loss" in dashboard.keys_read(section)
    longer = {s.title: s for s in dashboard.sections({"train": 3, "finetune": 4, "control": 4})}
    assert [len(_per_epoch(longer[t])) for t in CURVES] == [2, 2, 2]
    unknown = {s.title: s for s in dashboard.sections({})}  # no params.yaml: every chart kept
    assert [len(_per_epoch(unknown[t])) for t in CURVES] == [2, 2, 2]


def test_curve_epochs_reads_params(tmp_path):
    params = tmp_path / "params.yaml"
    params.write_text("train:\n  epochs: 20\nfinetune:\n  epochs: 2\n", encoding="utf-8")
    assert READ_EPOCHS(params) == {"train": 20, "finetune": 2, "control": 2}
    assert READ_EPOCHS(tmp_path / "missing.yaml") == {}


def test_a_key_that_no_run_logs_is_named():
    sections = dashboard.sections()
    everything = set().union(*map(dashboard.keys_read, sections)) | {"final/dev_bleu", "final/tokens_per_second"}
    assert dashboard.unlogged(everything) == {}
    table1 = dashboard.keys_read(sections[0])
    assert {"evaluate/table1", "evaluate/table1[bleu_ci_low]", "evaluate/table1[reduction]"} <= table1
    assert dashboard.unlogged(everything - {"evaluate/table1[bleu_ci_high]"}) == {
        "Table 1 (test set)": ["evaluate/table1[bleu_ci_high]"]}
    assert dashboard.unlogged(everything - {"val/bleu", "final/dev_bleu"}) == {
        CURVES[0]: ["final/dev_bleu", "val/bleu"], CURVES[1]: ["final/dev_bleu"], CURVES[2]: ["final/dev_bleu"],
        "run table": ["final/dev_bleu"]}


def test_without_an_api_key_the_command_says_so_in_one_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(HOME=str(tmp_path), WANDB_CONFIG_DIR=str(tmp_path / "wandb"), WANDB_MODE="offline",
               NETRC=str(tmp_path / "netrc"))
    result = subprocess.run([sys.executable, "-m", "flexatt.cli", "dashboard", "--entity", ENTITY,
                             "--project", PROJECT], env=env, cwd=tmp_path, text=True, capture_output=True,
                            timeout=120)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: flexatt dashboard saves to W&B: it needs an API key"), \
        result.stderr
    assert "Traceback" not in result.stderr and not result.stdout

    dry = subprocess.run([sys.executable, "-m", "flexatt.cli", "dashboard", "--entity", ENTITY, "--project",
                          PROJECT, "--dry-run"], env=env, cwd=tmp_path, text=True, capture_output=True, timeout=120)
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.splitlines()[0].startswith("Table 1 (test set) (evaluate): evaluate/table1, ")


# --------------------------------------------------------------------------- real runs


@pytest.mark.slow  # the smoke pipeline (conftest's smoke_copy, shared with other slow tests)
def test_every_panel_reads_keys_that_runs_log(smoke_copy):
    wandb_dir = smoke_copy[0] / "wandb"
    runs = [read_run(p) for p in wandb_dir.glob("offline-run-*/run-*.wandb")]
    jobs = {run["run"].job_type for run in runs}
    assert {"train", "finetune", "control", "sweep_tau", "evaluate", "sweep_sigma"} <= jobs
    logged = logged_keys(wandb_dir)
    assert "evaluate/table1[bleu_ci_low]" in logged and "val/bleu" in logged and "config.train.variant" in logged
    # the long profiles' section reads the runs of their units and reports (tests/test_unit_claims.py,
    # tests/test_units.py); every other section the runs of this pipeline
    here = [s for s in dashboard.sections() if not dashboard.of_units(s)]
    assert {j for s in here for r in s.runs for j in r.job_types} <= jobs
    assert dashboard.unlogged(logged, here) == {}
    assert not [c for c in dashboard.RUN_TABLE_COLUMNS if c.startswith("summary:") and c.split(":", 1)[1] not in logged]
    # and each section's keys come from the runs its report grid shows
    for section in here:
        shown = [run for run in runs if run["run"].job_type in {j for r in section.runs for j in r.job_types}]
        assert shown, section.title
        for key in dashboard.keys_read(section):
            stem = key.split("[", 1)[0]
            assert any(stem in set(run["summary"]).union(*run["history"]) or f"{stem}/_type" in run["summary"]
                       or key.startswith("config.") for run in shown), (section.title, key)
