"""Data-parallel training (Lightning DDP, gloo on CPU) converges like a single process.

Two processes with half the batch each see the same effective batch (2 x 16 = the smoke
profile's 32) and every training pair once per epoch (the length-grouped sampler shards the
batches by rank); validation runs the whole dev set on every rank. Only rank 0 writes the
metrics, prints the report and opens a W&B run.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys

import pytest

from conftest import compose_params, tokenized_smoke
from wandb_records import find_runs


@pytest.fixture(scope="module")
def tokenized(tmp_path_factory):
    path = tmp_path_factory.mktemp("ddp")
    return tokenized_smoke(path)


def _train(cwd, name: str, *overrides: str, threads: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "WANDB_MODE": "offline"}
    env.pop("FLEXATT_PARAMS", None)
    if threads:
        env["OMP_NUM_THREADS"] = threads
    cmd = [sys.executable, "-m", "flexatt.stages.train", "train.variant=flexible", f"train.out_dir={name}/models",
           f"train.metrics_dir={name}/results", f"logger.dir={name}", *overrides]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)


def _last_row(path) -> dict:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))[-1]


def test_ddp_converges_like_a_single_process(tokenized):
    single = _train(tokenized, "single", threads="1")  # one thread: as fast as it gets on a shared CPU
    assert single.returncode == 0, single.stderr[-3000:]
    ddp = _train(tokenized, "ddp", "trainer.strategy=ddp", "trainer.devices=2", "train.batch_size=16")
    assert ddp.returncode == 0, ddp.stderr[-3000:]

    one = json.loads((tokenized / "single/results/flexible.json").read_text())
    two = json.loads((tokenized / "ddp/results/flexible.json").read_text())
    assert one["world_size"] == 1 and two["world_size"] == 2
    assert one["epochs"] == two["epochs"] == 10
    # the same task learnt as well: dev loss within 10%, dev BLEU within 6 points (about 30 here)
    loss_one = float(_last_row(tokenized / "single/results/flexible.csv")["val_nll_token"])
    loss_two = float(_last_row(tokenized / "ddp/results/flexible.csv")["val_nll_token"])
    assert loss_two == pytest.approx(loss_one, rel=0.10)
    assert one["dev_bleu"] > 20 and two["dev_bleu"] > 20
    assert abs(one["dev_bleu"] - two["dev_bleu"]) <= 6.0
    # every rank trains on its half of the batches: half the target tokens of an epoch each
    rows = list(csv.DictReader(open(tokenized / "ddp/results/flexible.csv", newline="")))
    single_rows = list(csv.DictReader(open(tokenized / "single/results/flexible.csv", newline="")))
    assert int(rows[0]["train_tokens"]) < int(single_rows[0]["train_tokens"])

    # one report, one W&B run, one set of checkpoints: rank 0's
    assert [line for line in ddp.stdout.splitlines() if line.startswith("train@flexible:")] == [
        line for line in ddp.stdout.splitlines() if "dev BLEU" in line]
    assert sum(line.startswith("train@flexible:") for line in ddp.stdout.splitlines()) == 1
    runs = find_runs(tokenized / "ddp/wandb")
    assert len(runs) == 1
    assert runs[0]["summary"]["final/world_size"] == 2
    assert runs[0]["summary"]["final/dev_bleu"] == pytest.approx(two["dev_bleu"])
    assert sorted(os.listdir(tokenized / "ddp/models/flexible")) == [
        "best.ckpt", "last.ckpt", "run.json", "src.model", "tgt.model"]  # rank 0 wrote each once


def test_gpu_trainer_config_composes(root, tmp_path):
    """`flexatt params trainer=gpu`: bf16 mixed precision, DDP over every visible GPU, one node;
    every value passes the trainer checks; the paper profile uses the same group."""
    import torch
    from omegaconf import OmegaConf

    from flexatt import schema
    from flexatt.errors import ConfigError
    from flexatt.trainer import build_trainer

    out = tmp_path / "params.yaml"
    result = subprocess.run([sys.executable, "-m", "flexatt.cli", "params", "trainer=gpu", "--output", str(out),
                             "--config-dir", str(root / "conf")], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    cfg = OmegaConf.load(out)
    assert OmegaConf.to_container(cfg.trainer) == {
        "accelerator": "gpu", "devices": -1, "num_nodes": 1, "strategy": "ddp", "precision": "bf16-mixed",
        "gradient_clip_val": 3.0, "log_every_n_steps": 50, "enable_progress_bar": True, "deterministic": False}
    assert schema.validate(cfg).trainer.model_dump(exclude_unset=True) == OmegaConf.to_container(cfg.trainer)
    paper = OmegaConf.load(compose_params(tmp_path / "paper", "profile=paper"))
    assert paper.trainer == cfg.trainer
    if not torch.cuda.is_available():  # on a CPU-only machine: one clear error naming the group
        with pytest.raises(ConfigError, match=r"^trainer: .*(GPU|gpu|CUDA|cuda)"):
            build_trainer(cfg, tmp_path / "ckpt", 1, [])
