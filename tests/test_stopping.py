"""How a training run ended (flexatt.stopping): epochs, best epoch, cap or early stopping, read
from a real Lightning run's checkpoint folder."""

from __future__ import annotations

import json
import shutil

import pytest

from flexatt.errors import DataError
from flexatt.stopping import BUDGET, CAP, EARLY_STOPPING, run_summary


def test_a_run_that_did_all_its_epochs_reached_its_cap(smoke_trained, tmp_path):
    folder = smoke_trained / "m" / "flexible"
    summary = run_summary(folder / "best.ckpt")
    cap = json.loads((folder / "run.json").read_text())["epochs"]
    assert summary["cap"] == cap and summary["epochs"] == cap and summary["stopped"] == CAP
    assert 1 <= summary["best_epoch"] <= summary["epochs"]


def test_fewer_epochs_than_the_cap_is_early_stopping(smoke_trained, tmp_path):
    folder = tmp_path / "flexible"
    shutil.copytree(smoke_trained / "m" / "flexible", folder)
    run = json.loads((folder / "run.json").read_text())
    (folder / "run.json").write_text(json.dumps({**run, "epochs": run["epochs"] + 5}))
    assert run_summary(folder / "best.ckpt")["stopped"] == EARLY_STOPPING


def test_a_replayed_budget_is_neither_a_cap_nor_early_stopping(smoke_trained, tmp_path):
    """A control replays its fine-tuning's epochs and rates (``lr_epochs`` in ``run.json``):
    reaching their end is not a cap."""
    folder = tmp_path / "flexible"
    shutil.copytree(smoke_trained / "m" / "flexible", folder)
    run = json.loads((folder / "run.json").read_text())
    assert run["lr_epochs"] is None  # a plain training
    (folder / "run.json").write_text(json.dumps({**run, "lr_epochs": [0.002]}))
    summary = run_summary(folder / "best.ckpt")
    assert summary["stopped"] == BUDGET and summary["epochs"] == summary["cap"]


def test_a_checkpoint_without_its_training_folder_has_no_summary(smoke_trained, tmp_path):
    shutil.copyfile(smoke_trained / "m" / "flexible" / "best.ckpt", tmp_path / "x.ckpt")
    assert run_summary(tmp_path / "x.ckpt") is None
    shutil.copytree(smoke_trained / "m" / "flexible", tmp_path / "bad")
    (tmp_path / "bad" / "run.json").write_text("{}")
    with pytest.raises(DataError, match="run.json"):
        run_summary(tmp_path / "bad" / "best.ckpt")


def test_a_run_still_under_way_has_no_summary(smoke_trained, tmp_path):
    """``run.json`` gets ``epochs_done`` when the run ends: before, there is nothing to summarise."""
    folder = tmp_path / "flexible"
    shutil.copytree(smoke_trained / "m" / "flexible", folder)
    run = json.loads((folder / "run.json").read_text())
    assert run["epochs_done"] == run_summary(folder / "best.ckpt")["epochs"]
    (folder / "run.json").write_text(json.dumps({k: v for k, v in run.items() if k != "epochs_done"}))
    assert run_summary(folder / "best.ckpt") is None
