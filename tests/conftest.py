"""Shared fixtures: the repository root, a scratch folder with a composed params.yaml, and the
copy-task training of the tiny decoding-test models.

``$FLEXATT_TEST_PRECISION`` (``bf16-mixed``, ``32-true``, …) sets ``trainer.precision`` in every
params file the tests compose and every profile run they start, so that the training tests run
under a precision of the caller's choice (CI runs them under both that users get); unset, the
tests train with the profile's own value, ``auto``, as a user on this machine would.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


#: the variable that sets ``trainer.precision`` for the tests' training runs
PRECISION_ENV = "FLEXATT_TEST_PRECISION"


def precision_overrides() -> list[str]:
    """``["trainer.precision=<$FLEXATT_TEST_PRECISION>"]`` where the variable is set, else ``[]``."""
    precision = os.environ.get(PRECISION_ENV, "").strip()
    return [f"trainer.precision={precision}"] if precision else []


def compose_params(dest: Path, *overrides: str) -> Path:
    """Write ``dest/params.yaml`` composed from the repository's ``conf/`` with ``overrides``
    (after :func:`precision_overrides`, so that an explicit ``trainer.precision`` wins)."""
    from flexatt.cli import write_params

    dest.mkdir(parents=True, exist_ok=True)
    write_params([*precision_overrides(), *overrides], dest / "params.yaml", ROOT / "conf")
    return dest / "params.yaml"


def run_module(module: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    """Run ``python -m module ARGS`` in ``cwd`` as a user would; output captured as text."""
    env = {**os.environ, "WANDB_MODE": "offline"}
    env.pop("FLEXATT_PARAMS", None)
    return subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, env=env, text=True,
                          capture_output=True, timeout=600)


def tokenized_smoke(path: Path) -> Path:
    """``path`` with the smoke profile's params, filtered and tokenized (stages run for real)."""
    compose_params(path, "profile=smoke")
    for stage in ("filter", "tokenize"):
        result = run_module(f"flexatt.stages.{stage}", cwd=path)
        assert result.returncode == 0, result.stderr
    return path


@pytest.fixture
def smoke_dir(tmp_path: Path) -> Path:
    """A scratch folder holding params.yaml of the smoke profile."""
    compose_params(tmp_path, "profile=smoke")
    return tmp_path


@pytest.fixture
def single_thread():
    """Tiny tensors: intra-op threads only add barrier overhead (and stall badly on a shared
    machine), so the model-level tests run single-threaded."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def train_to_copy(model, batches) -> dict:
    """Adam (lr 0.03) on the copy task, one step per ``(src, src_len)`` of ``batches`` (the
    target is the source, EOS last); returns a detached copy of the trained state dict."""
    from flexatt.data.subwords import BOS_ID, PAD_ID
    from flexatt.model import sequence_nll

    opt = torch.optim.Adam(model.parameters(), lr=0.03)
    for src, src_len in batches:
        tgt_in = torch.cat([torch.full((src.size(0), 1), BOS_ID), src[:, :-1]], 1).masked_fill(src == PAD_ID, PAD_ID)
        logits, _ = model(src, src_len, tgt_in)
        loss = sequence_nll(logits, src, src != PAD_ID)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}
