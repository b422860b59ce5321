"""The stopping rule and the fine-tuning's control, on the smoke data with the real stages:
a model stops when its dev BLEU stops improving (and one that does every epoch is flagged as
capped), the control gets exactly the epochs and learning rates its fine-tuning ran, with β = 0
and early stopping off, and the β sweep records what it measures (its β = 0 run the control, its run at the
fine-tuning's β the fine-tuning: one epoch of the plain recipe at β = 0 is the control bit for bit)."""

from __future__ import annotations

import csv
import json
import math

import pytest

from conftest import copy_of, run_inprocess
from flexatt.stages.control import budget
from flexatt.errors import DataError
from flexatt.stopping import BUDGET, EARLY_STOPPING, run_summary
from flexatt.tau import from_json
from flexatt.tau_search import select_beta, select_tau

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


def test_the_control_replays_the_finetunings_epochs_and_learning_rates(smoke_trained, tmp_path, capsys):
    path = copy_of(smoke_trained, tmp_path / "repo")
    ft = ["finetune.init_dir=m", "finetune.out_dir=ft", "finetune.metrics_dir=rf", "finetune.control_out_dir=ctl",
          "finetune.control_metrics_dir=rc"]
    # a schedule that halves the rate from the fine-tuning's second epoch: three rates to replay
    code, err = run_inprocess("finetune", [*COMMON, *ft, "finetune.lr=0.003", "finetune.epochs=3", "finetune.beta=0.5",
                                           "train.lr_schedule=fixed", "train.lr_halve_from_epoch=2"], capsys, cwd=path)
    assert code == 0, err
    finetuned = json.loads((path / "rf/flexible.json").read_text())
    rates = _rates(path / "rf/flexible.csv")
    assert finetuned["epochs"] == 3 and rates == [0.003, 0.0015, 0.00075]
    # the pipeline's own schedule, lr and early stopping (patience 1, an lr too small to improve) must
    # change nothing: the control replays the fine-tuning's budget
    code, err = run_inprocess("control", [*COMMON, *ft, "finetune.lr=1e-9", "finetune.epochs=9",
                                          "train.lr_schedule=plateau", "train.early_stopping_patience=1"],
                              capsys, cwd=path)
    assert code == 0, err
    control = json.loads((path / "rc/flexible.json").read_text())
    assert control["epochs"] == 3 and _rates(path / "rc/flexible.csv") == rates
    assert control["budget"] == {"epochs": 3, "lr": rates, "from": "rf/flexible.csv", "finetune_beta": 0.1}
    run = json.loads((path / "ctl/flexible/run.json").read_text())
    assert run["beta"] == 0.0 and run["epochs"] == 3 and run["lr_epochs"] == rates
    assert run["init_from"] == json.loads((path / "ft/flexible/run.json").read_text())["init_from"]  # same parent
    assert run_summary(path / "ctl/flexible/best.ckpt")["stopped"] == BUDGET
    # each stage dropped its runs' resume state once trained; the model folders keep the weights
    assert not (path / ".resume/ft").exists() and not (path / ".resume/ctl").exists()


def _rates(curve) -> list[float]:
    with open(curve, encoding="utf-8", newline="") as f:
        return [float(row["lr"]) for row in csv.DictReader(f)]


def test_a_control_without_its_finetunings_learning_curve_is_refused(tmp_path):
    with pytest.raises(DataError, match="run the fine-tuning first"):
        budget(tmp_path / "flexible.csv")
    (tmp_path / "flexible.csv").write_text("epoch,lr\n")
    with pytest.raises(DataError, match="has no epochs"):
        budget(tmp_path / "flexible.csv")
    (tmp_path / "flexible.csv").write_text("epoch,lr\n1,0.001\n3,0.001\n")
    with pytest.raises(DataError, match=r"flexible\.csv:3: expected epoch 2"):
        budget(tmp_path / "flexible.csv")
    (tmp_path / "flexible.csv").write_text("epoch,lr\n1,fast\n")
    with pytest.raises(DataError, match=r"flexible\.csv:2: needs an integer epoch and a learning rate"):
        budget(tmp_path / "flexible.csv")


@pytest.mark.slow
def test_the_beta_sweep_stops_and_selects(smoke_trained, tmp_path, capsys):
    path = copy_of(smoke_trained, tmp_path / "repo")
    ft = ["finetune.init_dir=m", "finetune.epochs=1", "finetune.out_dir=ft", "finetune.metrics_dir=rf",
          "finetune.control_out_dir=ctl", "finetune.control_metrics_dir=rc"]
    sweep = [*COMMON, *ft, "sweep_beta.grid=[0.1,1000000]", "sweep_beta.tau=1.0", "sweep_beta.out_dir=b",
             "sweep_beta.out=rb/beta.json", "sweep_beta.curve_file=rb/beta.csv", "sweep_beta.figure=rb/beta.png",
             "decode.beam_size=2"]
    # β = 0 is the control's model and β = finetune.beta (0.1) the fine-tuning's: without them the sweep is refused
    code, err = run_inprocess("sweep_beta", sweep, capsys, cwd=path)
    assert code != 0 and "finetune.control_out_dir: file not found: ctl/flexible/best.ckpt" in err
    assert "dvc repro control@flexible" in err
    for stage in ("finetune", "control"):
        code, err = run_inprocess(stage, [*COMMON, *ft], capsys, cwd=path)
        assert code == 0, err
    code, err = run_inprocess("sweep_beta", sweep, capsys, cwd=path)
    assert code == 0, err
    result = from_json(json.loads((path / "rb/beta.json").read_text()))
    ref, points = result["reference"], result["points"]
    assert ref["beta"] == 0.0 and [p["beta"] for p in points][:1] == [0.1]
    # those two are read, not trained again: only β = 1000000 has a folder of the sweep's
    assert sorted(q.name for q in (path / "b").iterdir() if not q.name.startswith(".")) == ["beta1e+06"]
    for point, metrics in [(ref, "rc/flexible.json"), (points[0], "rf/flexible.json")]:
        assert point["epochs"] == json.loads((path / metrics).read_text())["epochs"]
    for p in [ref, *points]:
        assert p["epochs"] == 1 and 0 < p["g_mean"] < 1 and p["window"] > 0
        # each run's own τ, selected on dev by sweep_tau's rule among the points it searched
        searched = p["tau_points"]
        chosen = select_tau(searched, p["dev_bleu"], result["tau_search"]["tolerance"])
        if chosen:
            assert (p["selected_tau"], p["selected_window"], p["selected_bleu"]) == (
                chosen["tau"], chosen["window"], chosen["bleu"])
        else:  # none kept the BLEU: the run keeps τ = ∞
            assert p["selected_tau"] == math.inf and p["selected_bleu"] == p["dev_bleu"]
        assert {q["source"] for q in searched} <= {"grid", "below grid", "above grid", "search"} and len(searched) >= 5
    # a huge beta pushes g_t up: the window at the fixed tau narrows
    assert points[-1]["beta"] == 1000000 and points[-1]["g_mean"] > ref["g_mean"]
    # selected: the smallest window at its own τ among the βs within the tolerance (None: none is)
    expected = select_beta([{"beta": q["beta"], "bleu": q["dev_bleu"], "window": q["selected_window"]} for q in points],
                           ref["dev_bleu"], result["tolerance"])
    assert result["selected_beta"] == (expected["beta"] if expected else None)
    assert "tau_points" not in (path / "rb/beta.csv").read_text().splitlines()[0].split(",")
    assert (path / "rb/beta.png").stat().st_size > 0 and (path / "rb/beta.csv").read_text().startswith("beta,")


def test_the_beta_sweeps_own_runs_at_0_and_the_finetunings_beta_are_the_control_and_the_finetuning(
        smoke_trained, tmp_path, capsys, monkeypatch):
    """Why the sweep reads those two instead of training them: with one fine-tuning epoch, its
    recipe at β = 0 gives the control's weights, and at ``finetune.beta`` the fine-tuning's, bit
    for bit."""
    import torch

    from flexatt.stages import sweep_beta

    path = copy_of(smoke_trained, tmp_path / "repo")
    ft = ["finetune.init_dir=m", "finetune.epochs=1", "finetune.out_dir=ft", "finetune.metrics_dir=rf",
          "finetune.control_out_dir=ctl", "finetune.control_metrics_dir=rc"]
    for stage in ("finetune", "control"):
        code, err = run_inprocess(stage, [*COMMON, *ft], capsys, cwd=path)
        assert code == 0, err
    monkeypatch.setattr(sweep_beta, "trained_by", lambda p, beta: None)  # the sweep trains every β itself
    monkeypatch.setenv("FLEXATT_JOBS", "1")  # in this process, where the stand-in holds
    code, err = run_inprocess("sweep_beta", [*COMMON, *ft, "sweep_beta.grid=[0.1]", "sweep_beta.out_dir=b",
                                             "sweep_beta.out=rb/beta.json", "sweep_beta.curve_file=rb/beta.csv",
                                             "sweep_beta.figure=rb/beta.png", "decode.beam_size=2"], capsys, cwd=path)
    assert code == 0, err

    def weights(ckpt):
        return torch.load(path / ckpt, map_location="cpu", weights_only=False)["state_dict"]

    for own, other in [("b/beta0/flexible/best.ckpt", "ctl/flexible/best.ckpt"),
                       ("b/beta0.1/flexible/best.ckpt", "ft/flexible/best.ckpt")]:
        a, b = weights(own), weights(other)
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), (own, other)
