"""The stopping rule and the fine-tuning's control, on the smoke data with the real stages:
a model stops when its dev BLEU stops improving (and one that does every epoch is flagged as
capped), the control gets exactly the epochs its fine-tuning ran, with β = 0 and early stopping
off, and the β sweep records what it measures."""

from __future__ import annotations

import json

import pytest

from conftest import copy_of, run_inprocess
from flexatt.stages.control import budget
from flexatt.errors import DataError
from flexatt.stopping import CAP, EARLY_STOPPING, run_summary

COMMON = ["logger.enabled=false", "train.out_dir=m", "trainer.enable_progress_bar=false"]


def test_training_stops_when_dev_bleu_stops_improving(smoke_tokenized, tmp_path, capsys):
    path = copy_of(smoke_tokenized, tmp_path / "repo")
    # a learning rate too small to change a greedy output: no epoch after the first is better
    code, err = run_inprocess("train", [*COMMON, "train.variant=global", "train.epochs=6", "train.lr=1e-9",
                                        "train.early_stopping_patience=1", "train.metrics_dir=r"], capsys, cwd=path)
    assert code == 0, err
    metrics = json.loads((path / "r/global.json").read_text())
    assert metrics["epochs"] == 2 and metrics["best_epoch"] == 1
    assert run_summary(path / "m/global/best.ckpt") == {"epochs": 2, "best_epoch": 1, "cap": 6,
                                                         "stopped": EARLY_STOPPING}


def test_the_control_gets_exactly_the_finetunings_epochs(smoke_trained, tmp_path, capsys):
    path = copy_of(smoke_trained, tmp_path / "repo")
    ft = ["finetune.init_dir=m", "finetune.out_dir=ft", "finetune.metrics_dir=rf", "finetune.control_out_dir=ctl",
          "finetune.control_metrics_dir=rc", "finetune.lr=0.003"]
    code, err = run_inprocess("finetune", [*COMMON, *ft, "finetune.epochs=2", "finetune.beta=0.5"], capsys, cwd=path)
    assert code == 0, err
    finetuned = json.loads((path / "rf/flexible.json").read_text())
    assert finetuned["epochs"] == 2
    # early stopping on for the pipeline (patience 1, lr too small to improve) must not cut the control short
    code, err = run_inprocess("control", [*COMMON, *ft, "finetune.epochs=9", "train.early_stopping_patience=1"],
                              capsys, cwd=path)
    assert code == 0, err
    control = json.loads((path / "rc/flexible.json").read_text())
    assert control["epochs"] == finetuned["epochs"] == 2
    assert control["budget"] == {"epochs": 2, "from": "rf/flexible.json", "finetune_beta": 0.1}
    run = json.loads((path / "ctl/flexible/run.json").read_text())
    assert run["beta"] == 0.0 and run["epochs"] == 2 and run["lr"] == 0.003
    assert run["init_from"] == json.loads((path / "ft/flexible/run.json").read_text())["init_from"]  # same parent
    assert run_summary(path / "ctl/flexible/best.ckpt")["stopped"] == CAP


def test_a_control_without_its_finetuning_is_refused(tmp_path):
    with pytest.raises(DataError, match="run the fine-tuning first"):
        budget(tmp_path / "flexible.json")
    (tmp_path / "flexible.json").write_text(json.dumps({"epochs": 0}))
    with pytest.raises(DataError, match="epochs: must be a positive integer"):
        budget(tmp_path / "flexible.json")


@pytest.mark.slow
def test_the_beta_sweep_stops_and_selects(smoke_trained, tmp_path, capsys):
    path = copy_of(smoke_trained, tmp_path / "repo")
    code, err = run_inprocess("sweep_beta", [*COMMON, "finetune.init_dir=m", "finetune.epochs=1",
                                             "sweep_beta.grid=[0.1,1000000]", "sweep_beta.tau=1.0",
                                             "sweep_beta.out_dir=b", "sweep_beta.out=rb/beta.json",
                                             "sweep_beta.curve_file=rb/beta.csv", "sweep_beta.figure=rb/beta.png",
                                             "decode.beam_size=2"], capsys, cwd=path)
    assert code == 0, err
    result = json.loads((path / "rb/beta.json").read_text())
    ref, points = result["reference"], result["points"]
    assert ref["beta"] == 0.0 and [p["beta"] for p in points][:1] == [0.1]
    for p in [ref, *points]:
        assert p["epochs"] == 1 and 0 < p["g_mean"] < 1 and p["window"] > 0
    # a huge beta pushes g_t up: the window at the fixed tau narrows
    assert points[-1]["beta"] == 1000000 and points[-1]["g_mean"] > ref["g_mean"]
    assert result["selected_beta"] in (None, 0.1, 1000000)
    assert (path / "rb/beta.png").stat().st_size > 0 and (path / "rb/beta.csv").read_text().startswith("beta,")
