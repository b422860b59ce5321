"""Training with the Lightning Trainer on the smoke data: it learns, saves, refuses, resumes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import copy_of, run_inprocess
from flexatt.config import load_params
from flexatt.errors import DataError
from flexatt.decoding import greedy
from flexatt.checkpoints import checkpoint_hparams, load_checkpoint_state
from flexatt.trainer import train
from flexatt.task import lr_factor


@pytest.fixture(scope="module")
def tokenized(smoke_tokenized, tmp_path_factory):
    """A scratch folder with the smoke profile's params, filtered and tokenized."""
    return copy_of(smoke_tokenized, tmp_path_factory.mktemp("train"))


@pytest.fixture
def in_dir(tokenized, monkeypatch):
    monkeypatch.chdir(tokenized)
    return tokenized


def test_lr_is_halved_from_the_configured_epoch():
    assert [lr_factor(e, 4) for e in range(6)] == [1, 1, 1, 0.5, 0.25, 0.125]
    assert [lr_factor(e, 1) for e in range(2)] == [0.5, 0.25]


def test_train_learns_and_writes_checkpoints_and_metrics(in_dir):
    cfg = load_params("params.yaml", ["train.out_dir=m", "train.metrics_dir=r"])
    metrics, objects = train(cfg, "global", epochs=3)
    assert metrics["epochs"] == 3 and metrics["tokens_per_second"] > 0
    curve = (in_dir / "r/global.csv").read_text().splitlines()
    assert curve[0].startswith("epoch,step,lr,train_loss,val_loss") and len(curve) == 4
    losses = [float(line.split(",")[4]) for line in curve[1:]]
    assert losses[-1] < losses[0], "dev loss must fall on the synthetic task"
    assert json.loads((in_dir / "r/global.json").read_text()) == metrics
    ckpt = in_dir / "m/global/best.ckpt"
    # the model folder holds what is shared: weights, vocabularies, the run's record; the resume
    # state (optimiser and all) lies apart, under .resume/, until a stage drops it
    assert sorted(p.name for p in (in_dir / "m/global").iterdir()) == ["best.ckpt", "run.json", "src.model", "tgt.model"]
    assert objects["resume_dir"] == Path(".resume/m/global") and (in_dir / ".resume/m/global/last.ckpt").is_file()
    from flexatt.checkpoints import read_checkpoint

    best = read_checkpoint(ckpt)
    assert "optimizer_states" not in best and "callbacks" not in best and best["epoch"] == metrics["best_epoch"] - 1
    assert "optimizer_states" in read_checkpoint(in_dir / ".resume/m/global/last.ckpt")
    assert json.loads((in_dir / "m/global/run.json").read_text())["epochs_done"] == 3
    # weights load with weights_only=True into a fresh model, and decode as the trained one does
    weights = load_checkpoint_state(ckpt)
    hparams = checkpoint_hparams(ckpt)
    assert hparams["model_cfg"]["attention"] == "global"
    trained = objects["task"].model.eval()
    batch = next(iter(objects["data"].val_dataloader()))
    fresh = type(objects["task"])(**hparams).model.eval()
    fresh.load_state_dict(weights)
    a = greedy(fresh, batch.src, batch.src_len, 20)
    b = greedy(trained, batch.src, batch.src_len, 20)
    if metrics["best_epoch"] == 3:
        assert torch.equal(a.tokens, b.tokens)
    assert a.steps.sum() > 0 and torch.all(a.window_sum == a.steps * batch.src_len)


@pytest.mark.parametrize("where", ["init", "log"])
def test_wandb_failure_warns_and_training_goes_on(in_dir, monkeypatch, where):
    """A W&B failure when the run opens (no network, a bad key) or while Lightning logs into it
    (its service gone, its folder full): one warning each time, and the stage still trains,
    saves and writes its metrics."""
    import warnings

    import wandb
    from wandb.sdk.wandb_run import Run

    def broken(*args, **kwargs):
        raise RuntimeError("W&B is down")

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setattr(wandb, "init", broken) if where == "init" else monkeypatch.setattr(Run, "log", broken)
    cfg = load_params("params.yaml", [f"train.out_dir=w{where}", f"train.metrics_dir=wr{where}",
                                      "logger.enabled=true", "logger.mode=offline"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        metrics, _ = train(cfg, "global", epochs=1)
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    expected = "W&B init failed" if where == "init" else "W&B log_metrics failed"
    assert any(m.startswith(expected) and "RuntimeError: W&B is down" in m for m in messages), messages
    assert metrics["epochs"] == 1
    assert (in_dir / f"w{where}/global/best.ckpt").is_file()
    assert json.loads((in_dir / f"wr{where}/global.json").read_text()) == metrics


def test_corrupt_checkpoint_is_a_clear_error(tmp_path):
    bad = tmp_path / "best.ckpt"
    bad.write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(DataError, match="best.ckpt: not a readable checkpoint"):
        load_checkpoint_state(bad)
    with pytest.raises(DataError, match="checkpoint not found"):
        load_checkpoint_state(tmp_path / "none.ckpt")


def test_finetune_refuses_a_model_without_g(in_dir, capsys):
    code, err = run_inprocess("finetune", ["finetune.variant=global"], capsys)
    assert code == 2 and "finetune.variant: must name a flexible model" in err


def test_unknown_variant_names_the_key(in_dir, capsys):
    code, err = run_inprocess("train", ["train.variant=bahdanau"], capsys)
    assert code == 2 and "train.variant: must be one of global, local_m" in err


def test_bad_model_value_names_the_key(in_dir, capsys):
    code, err = run_inprocess("train", ["train.variant=flexible", "model.sigma=-1"], capsys)
    assert code == 2 and "model.sigma" in err


#: the smoke profile trains without dropout; the resume tests need it, since a resumed run must
#: draw the same dropout masks as an uninterrupted one
DROPOUT = "model.dropout=0.3"


def _train_cmd(out: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "flexatt.stages.train", "train.variant=flexible",
            f"train.out_dir={out}", f"train.metrics_dir={out}_metrics", "train.epochs=6", *extra]


@pytest.mark.slow  # two 6-epoch trainings; the plateau resume test below checks the same in the fast suite
def test_killed_run_resumes_and_ends_where_an_uninterrupted_one_ends(tokenized):
    env = {**os.environ, "WANDB_MODE": "offline"}
    whole = subprocess.run(_train_cmd("whole", DROPOUT), cwd=tokenized, env=env, capture_output=True, text=True)
    assert whole.returncode == 0, whole.stderr

    proc = subprocess.Popen(_train_cmd("killed", DROPOUT), cwd=tokenized, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    last = tokenized / ".resume/killed/flexible/last.ckpt"
    deadline = time.time() + 300
    while not last.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)  # after the first epoch-end checkpoint
    proc.wait()
    assert not (tokenized / "killed_metrics/flexible.json").exists()

    again = subprocess.run(_train_cmd("killed", DROPOUT), cwd=tokenized, env=env, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    a = json.loads((tokenized / "whole_metrics/flexible.json").read_text())
    b = json.loads((tokenized / "killed_metrics/flexible.json").read_text())
    assert 1 <= b["resumed_from_epoch"] < 6
    for key in ("dev_bleu", "best_epoch", "final_train_loss", "epochs"):
        assert a[key] == b[key], key
    wa = load_checkpoint_state(tokenized / "whole/flexible/best.ckpt")
    wb = load_checkpoint_state(tokenized / "killed/flexible/best.ckpt")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert not last.parent.exists()  # the stage dropped its resume state once trained


def test_changed_config_does_not_resume_a_stale_checkpoint(in_dir):
    overrides = ["train.out_dir=stale", "train.metrics_dir=stale_metrics", "logger.enabled=false"]
    first, _ = train(load_params("params.yaml", overrides), "global", epochs=1)
    again, _ = train(load_params("params.yaml", [*overrides, "train.lr=0.02"]), "global", epochs=1)
    assert first["resumed_from_epoch"] is None and again["resumed_from_epoch"] is None
    assert json.loads((in_dir / "stale_metrics/global.json").read_text())["resumed_from_epoch"] is None


# ----------------------------------------------------------------------------- learning-rate schedules


@pytest.fixture
def forced_bleu(monkeypatch):
    """``forced_bleu(values)``: the dev BLEU of 0-based epoch ``e`` is ``values[e]`` (the rest of
    validation runs for real), whichever run (fresh or resumed) the epoch belongs to."""
    import flexatt.task as training

    epoch = {"now": 0}
    start = training.TranslationTask.on_validation_epoch_start

    def on_start(self) -> None:
        epoch["now"] = self.current_epoch
        start(self)

    def make(values: list[float]) -> None:
        monkeypatch.setattr(training.TranslationTask, "on_validation_epoch_start", on_start)
        monkeypatch.setattr(training, "corpus_bleu", lambda hyps, refs: (values[epoch["now"]], "forced"))

    return make


def _curve(path) -> list[dict]:
    import csv

    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.mark.parametrize("schedule,factors", [
    ("plateau", [1, 1, 0.5, 0.5, 0.25]),  # halved after epochs 2 (4 < 5) and 4 (6 is not > 6)
    ("fixed", [1, 0.5, 0.25, 0.125, 0.0625]),  # lr_halve_from_epoch=2
])
def test_lr_schedule_and_the_lr_column(in_dir, forced_bleu, monkeypatch, schedule, factors):
    """The ``lr`` column of the learning curve is the rate each epoch trained with (the rate
    the optimizer steps with, logged as train/lr); plateau halves it after each epoch whose dev
    BLEU is no better than the best before it."""
    import flexatt.trainer as T

    forced_bleu([5.0, 4.0, 6.0, 6.0, 7.0])
    used: dict[int, set[float]] = {}

    batch_start = T.History.on_train_batch_start

    def spy(self, trainer, pl_module, batch, batch_idx) -> None:
        used.setdefault(trainer.current_epoch, set()).add(pl_module.optimizers().param_groups[0]["lr"])
        batch_start(self, trainer, pl_module, batch, batch_idx)

    monkeypatch.setattr(T.History, "on_train_batch_start", spy)
    cfg = load_params("params.yaml", [f"train.out_dir=s_{schedule}", f"train.metrics_dir=sr_{schedule}",
                                      f"train.lr_schedule={schedule}", "train.lr_halve_from_epoch=2"])
    metrics, _ = train(cfg, "global", epochs=5)
    rows = _curve(in_dir / f"sr_{schedule}/global.csv")
    lr = cfg.train.lr
    assert [float(r["lr"]) for r in rows] == pytest.approx([lr * f for f in factors])
    assert [sorted(used[e]) for e in range(5)] == [[pytest.approx(lr * f)] for f in factors]
    assert [float(r["val_bleu"]) for r in rows] == [5.0, 4.0, 6.0, 6.0, 7.0]
    assert metrics["best_epoch"] == 5 and metrics["dev_bleu"] == 7.0
    assert metrics["precision"] in ("bf16-mixed", "32-true") and metrics["precision_reason"]


def test_plateau_patience_2_halves_only_after_two_epochs_without_a_better_dev_bleu(in_dir, forced_bleu):
    """``train.lr_plateau_patience=2``: a single worse epoch (epoch 2) keeps the rate; epochs 4
    and 5, both below epoch 3's best, halve it for epoch 6. The same dev BLEU under patience 1
    halves after epochs 2, 4 and 5."""
    values = [5.0, 4.0, 6.0, 5.0, 5.0, 7.0]
    forced_bleu(values)
    lr = None
    for patience, factors in ((2, [1, 1, 1, 1, 1, 0.5]), (1, [1, 1, 0.5, 0.5, 0.25, 0.125])):
        cfg = load_params("params.yaml", [f"train.out_dir=pp{patience}", f"train.metrics_dir=ppr{patience}",
                                          "train.lr_schedule=plateau", f"train.lr_plateau_patience={patience}"])
        lr = cfg.train.lr
        metrics, _ = train(cfg, "global", epochs=6)
        rows = _curve(in_dir / f"ppr{patience}/global.csv")
        assert [float(r["lr"]) for r in rows] == pytest.approx([lr * f for f in factors]), patience
        assert [float(r["val_bleu"]) for r in rows] == values and metrics["best_epoch"] == 6
        run = json.loads((in_dir / f"pp{patience}/global/run.json").read_text())
        assert run["lr_plateau_patience"] == patience


def test_the_converged_rule_stops_after_two_halvings_without_a_better_dev_bleu(in_dir, forced_bleu):
    """Halve after 2 epochs without a better dev BLEU, stop after 4 (the ``bible`` profile's
    rule): after epoch 3's best, epochs 4-5 halve the rate, epochs 6-7 halve it again and stop
    the run; epoch 8's better BLEU is never reached."""
    forced_bleu([5.0, 4.0, 6.0, 5.0, 5.0, 5.5, 5.9, 9.0])
    cfg = load_params("params.yaml", ["train.out_dir=cr", "train.metrics_dir=crr", "train.lr_schedule=plateau",
                                      "train.lr_plateau_patience=2", "train.early_stopping_patience=4"])
    metrics, _ = train(cfg, "global", epochs=8)
    lr = cfg.train.lr
    rows = _curve(in_dir / "crr/global.csv")
    assert [float(r["lr"]) for r in rows] == pytest.approx([lr, lr, lr, lr, lr, lr / 2, lr / 2])
    assert metrics["epochs"] == 7 and metrics["best_epoch"] == 3 and metrics["dev_bleu"] == 6.0


def test_early_stopping_watches_dev_bleu(in_dir, forced_bleu):
    forced_bleu([5.0, 4.0, 3.0, 8.0, 9.0])
    cfg = load_params("params.yaml", ["train.out_dir=es", "train.metrics_dir=esr", "train.early_stopping_patience=2"])
    metrics, _ = train(cfg, "global", epochs=5)
    assert metrics["epochs"] == 3 and metrics["best_epoch"] == 1 and metrics["dev_bleu"] == 5.0


@pytest.mark.parametrize("how", ["early stopping", "cap"])
def test_a_run_that_had_ended_is_not_trained_further_when_started_again(in_dir, forced_bleu, how):
    """Started again with the same settings (a stage of several trainings cut off after this one
    ended), a run that early stopping or its cap had ended trains no further epoch: its
    checkpoints stay as they were and its metrics are those of the first run."""
    from flexatt.checkpoints import read_checkpoint

    forced_bleu([5.0, 4.0, 3.0, 8.0, 9.0])
    overrides = ["train.out_dir=ended", "train.metrics_dir=endedr"]
    if how == "early stopping":
        overrides.append("train.early_stopping_patience=2")
    cfg = load_params("params.yaml", overrides)
    first, _ = train(cfg, "global", epochs=3 if how == "cap" else 5)
    last = in_dir / ".resume/ended/global/last.ckpt"
    saved = last.read_bytes()
    again, _ = train(cfg, "global", epochs=3 if how == "cap" else 5)
    assert first["epochs"] == 3 and again["resumed_from_epoch"] == 3
    assert last.read_bytes() == saved and read_checkpoint(last)["epoch"] == 2
    for key in ("epochs", "best_epoch", "dev_bleu", "final_train_loss", "tokens_per_second", "train_minutes_per_epoch"):
        assert again[key] == first[key], key
    assert len(_curve(in_dir / "endedr/global.csv")) == 3


def test_plateau_run_resumed_after_a_crash_ends_where_an_uninterrupted_one_ends(in_dir, forced_bleu, monkeypatch):
    """The crash comes at the start of epoch 3, after epoch 2's non-improving BLEU halved the
    rate: the checkpoint of epoch 2 holds the halved rate and the scheduler's state (best BLEU so
    far), so the resumed run halves again after epoch 4 exactly as the uninterrupted one."""
    import flexatt.trainer as T

    class Crash(Exception):
        pass

    epoch_start = T.History.on_train_epoch_start

    def crash_at_epoch_3(self, trainer, pl_module) -> None:
        if trainer.current_epoch == 2:
            raise Crash
        epoch_start(self, trainer, pl_module)

    forced_bleu([5.0, 4.0, 4.5, 4.9, 7.0])
    cfg = {name: load_params("params.yaml", [f"train.out_dir=p_{name}", f"train.metrics_dir=pr_{name}",
                                             "train.lr_schedule=plateau", DROPOUT])
           for name in ("whole", "killed")}
    whole, _ = train(cfg["whole"], "flexible", epochs=5)
    with monkeypatch.context() as patch, pytest.raises(Crash):
        patch.setattr(T.History, "on_train_epoch_start", crash_at_epoch_3)
        train(cfg["killed"], "flexible", epochs=5)
    killed, _ = train(cfg["killed"], "flexible", epochs=5)
    assert killed["resumed_from_epoch"] == 2 and whole["resumed_from_epoch"] is None
    lr = cfg["whole"].train.lr
    for name in ("whole", "killed"):
        rows = _curve(in_dir / f"pr_{name}/flexible.csv")
        assert [float(r["lr"]) for r in rows] == pytest.approx([lr, lr, lr / 2, lr / 4, lr / 8]), name
    for key in ("dev_bleu", "best_epoch", "final_train_loss", "epochs", "precision"):
        assert whole[key] == killed[key], key
    wa = load_checkpoint_state(in_dir / ".resume/p_whole/flexible/last.ckpt")
    wb = load_checkpoint_state(in_dir / ".resume/p_killed/flexible/last.ckpt")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    state = torch.load(in_dir / ".resume/p_killed/flexible/last.ckpt", map_location="cpu", weights_only=True)
    assert state["plateau_scheduler"]["best"] == 7.0


def test_bad_lr_schedule_names_the_key(in_dir, capsys):
    code, err = run_inprocess("train", ["train.lr_schedule=cosine"], capsys)
    assert code == 2
    assert "train.lr_schedule: must be one of fixed, plateau (got 'cosine')" in err


def test_the_learning_curves_train_loss_is_the_epochs_mean_not_its_last_batch():
    """Batches are grouped by length, so the last batch's loss swings with its sentences'
    length: the curve's ``train_loss`` is the epoch's mean per sentence, each batch weighted by
    its sentences."""
    from types import SimpleNamespace

    import flexatt.trainer as T

    class Batch(list):
        n_tgt_tokens = 10

    history = T.History()
    module = SimpleNamespace(optimizers=lambda: SimpleNamespace(param_groups=[{"lr": 0.002}]))
    trainer = SimpleNamespace(current_epoch=0, global_step=3, callback_metrics={"train/loss": torch.tensor(99.0)})
    history.on_train_epoch_start(trainer, module)
    for loss, size in ((20.0, 4), (50.0, 2), (99.0, 1)):  # long sentences in a small last batch
        history.on_train_batch_start(trainer, module, None, 0)
        history.on_train_batch_end(trainer, module, {"loss": torch.tensor(loss)}, Batch([0] * size), 0)
    history.on_train_epoch_end(trainer, module)
    assert history.rows[0]["train_loss"] == pytest.approx((20 * 4 + 50 * 2 + 99) / 7, abs=1e-4)
    assert history.rows[0]["lr"] == 0.002 and history.rows[0]["train_tokens"] == 30
