"""Training with the Lightning Trainer on the smoke data: it learns, saves, refuses, resumes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from conftest import run_module, tokenized_smoke
from flexatt.config import load_params
from flexatt.errors import DataError
from flexatt.search import greedy
from flexatt.train import checkpoint_hparams, load_checkpoint_state, train
from flexatt.training import lr_factor


@pytest.fixture(scope="module")
def tokenized(tmp_path_factory):
    """A scratch folder with the smoke profile's params, filtered and tokenized."""
    path = tmp_path_factory.mktemp("train")
    return tokenized_smoke(path)


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
    assert (in_dir / "m/global/last.ckpt").is_file()
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


def test_finetune_refuses_a_model_without_g(tokenized):
    result = run_module("flexatt.stages.finetune", "finetune.variant=global", cwd=tokenized)
    assert result.returncode == 2 and "finetune.variant: must name a flexible model" in result.stderr


def test_unknown_variant_names_the_key(tokenized):
    result = run_module("flexatt.stages.train", "train.variant=bahdanau", cwd=tokenized)
    assert result.returncode == 2 and "train.variant: must be one of global, local_m" in result.stderr


def test_bad_model_value_names_the_key(tokenized):
    result = run_module("flexatt.stages.train", "train.variant=flexible", "model.sigma=-1", cwd=tokenized)
    assert result.returncode == 2 and "model.sigma" in result.stderr


def _train_cmd(out: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "flexatt.stages.train", "train.variant=flexible",
            f"train.out_dir={out}", f"train.metrics_dir={out}_metrics", "train.epochs=6", *extra]


def test_killed_run_resumes_and_ends_where_an_uninterrupted_one_ends(tokenized):
    env = {**os.environ, "WANDB_MODE": "offline"}
    whole = subprocess.run(_train_cmd("whole"), cwd=tokenized, env=env, capture_output=True, text=True)
    assert whole.returncode == 0, whole.stderr

    proc = subprocess.Popen(_train_cmd("killed"), cwd=tokenized, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    last = tokenized / "killed/flexible/last.ckpt"
    deadline = time.time() + 300
    while not last.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)  # after the first epoch-end checkpoint
    proc.wait()
    assert not (tokenized / "killed_metrics/flexible.json").exists()

    again = subprocess.run(_train_cmd("killed"), cwd=tokenized, env=env, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    a = json.loads((tokenized / "whole_metrics/flexible.json").read_text())
    b = json.loads((tokenized / "killed_metrics/flexible.json").read_text())
    assert 1 <= b["resumed_from_epoch"] < 6
    for key in ("dev_bleu", "best_epoch", "final_train_loss", "epochs"):
        assert a[key] == b[key], key
    wa = load_checkpoint_state(tokenized / "whole/flexible/last.ckpt")
    wb = load_checkpoint_state(tokenized / "killed/flexible/last.ckpt")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_changed_config_does_not_resume_a_stale_checkpoint(tokenized):
    env = {**os.environ, "WANDB_MODE": "offline"}
    cmd = [sys.executable, "-m", "flexatt.stages.train", "train.variant=global", "train.out_dir=stale",
           "train.metrics_dir=stale_metrics", "train.epochs=1"]
    assert subprocess.run(cmd, cwd=tokenized, env=env, capture_output=True).returncode == 0
    again = subprocess.run([*cmd, "train.lr=0.02"], cwd=tokenized, env=env, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert json.loads((tokenized / "stale_metrics/global.json").read_text())["resumed_from_epoch"] is None
