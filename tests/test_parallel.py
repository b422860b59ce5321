"""Trainings side by side (flexatt.parallel) and `flexatt repro` (flexatt.schedule): a model's
weights do not depend on what trains beside it; the scheduler runs the DAG in order."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import copy_of
from flexatt import parallel, schedule
from flexatt.checkpoints import load_checkpoint_state
from flexatt.config import load_params
from flexatt.parallel import run_each
from flexatt.schedule import Plan


def _weights_digest(ckpt: Path) -> str:
    state = load_checkpoint_state(ckpt)
    digest = hashlib.sha256()
    for name in sorted(state):
        digest.update(name.encode())
        digest.update(state[name].contiguous().numpy().tobytes())
    return digest.hexdigest()


def _train_one(job: tuple[str, str, str]) -> tuple[str, dict]:
    """Train ``variant`` for one epoch in ``folder`` (a worker of run_each); its weights' digest
    and metrics."""
    folder, variant, out = job
    from flexatt.trainer import train

    os.chdir(folder)
    cfg = load_params("params.yaml", [f"train.out_dir={out}", f"train.metrics_dir={out}_r", "logger.enabled=false",
                                      "trainer.enable_progress_bar=false"])
    metrics, _ = train(cfg, variant, epochs=1)
    return _weights_digest(Path(folder) / out / variant / "best.ckpt"), metrics


@pytest.fixture(scope="module")
def tokenized(smoke_tokenized, tmp_path_factory):
    return copy_of(smoke_tokenized, tmp_path_factory.mktemp("parallel"))


@pytest.mark.slow  # three trainings, two of them in spawned workers
def test_a_model_trained_beside_another_has_the_weights_it_has_alone(tokenized, monkeypatch):
    monkeypatch.chdir(tokenized)
    threads = torch.get_num_threads()
    alone, alone_metrics = _train_one((str(tokenized), "flexible", "alone"))
    assert torch.get_num_threads() == threads, "train() restores the thread count"
    assert alone_metrics["threads"] == 1 and alone_metrics["side_by_side"] == 1
    # two spawned workers at once, one thread each: flexible beside global
    results = list(run_each(_train_one, [(str(tokenized), "flexible", "beside"),
                                         (str(tokenized), "global", "other")], 2))
    (beside, beside_metrics), (_, other_metrics) = results
    assert beside == alone, "the weights depend on what trained beside the model"
    assert beside_metrics["side_by_side"] == 2 and other_metrics["side_by_side"] == 2
    assert beside_metrics["dev_bleu"] == alone_metrics["dev_bleu"]


def test_the_thread_count_is_part_of_the_arithmetic_and_of_the_resume_fingerprint(tokenized, monkeypatch):
    monkeypatch.chdir(tokenized)
    from flexatt.trainer import train

    cfg = load_params("params.yaml", ["train.out_dir=t2", "train.metrics_dir=t2_r", "logger.enabled=false",
                                      "train.threads=2", "trainer.enable_progress_bar=false"])
    metrics, _ = train(cfg, "flexible", epochs=1)
    assert metrics["threads"] == 2
    run = (tokenized / "t2/flexible/run.json").read_text()
    assert '"threads": 2' in run


def _square(x: int) -> int:
    return x * x


def test_run_each_keeps_the_order_and_stops_when_the_caller_stops():
    assert list(run_each(_square, range(5), 1)) == [0, 1, 4, 9, 16]
    assert list(run_each(_square, range(5), 2)) == [0, 1, 4, 9, 16]
    results = run_each(_square, range(6), 2)
    taken = [next(results), next(results)]
    results.close()
    assert taken == [0, 1]


def test_jobs_comes_from_the_environment_or_the_cores(monkeypatch):
    monkeypatch.delenv(parallel.JOBS_ENV, raising=False)
    assert parallel.jobs(1) == parallel.cores()
    assert parallel.jobs(10_000) == 1
    monkeypatch.setenv(parallel.JOBS_ENV, "3")
    assert parallel.jobs(1) == 3
    monkeypatch.setenv(parallel.JOBS_ENV, "zero")
    with pytest.raises(ValueError, match=r"\$FLEXATT_JOBS: must be a positive integer \(got 'zero'\)"):
        parallel.jobs(1)


def test_a_plan_counts_the_stages_that_wait_on_each():
    plan = Plan(["tok", "a", "b", "c"], {"tok": set(), "a": {"tok"}, "b": {"tok"}, "c": {"a"}})
    assert [plan.downstream(n) for n in plan.order] == [3, 1, 0, 0]


def test_a_stage_log_shows_its_progress_bar_as_it_moves(tmp_path):
    """A stage's Rich progress bar (Lightning's) under flexatt repro's environment writes its
    states into the log as they change, and the line the terminal gets is the latest one."""
    log = tmp_path / "stage.log"
    script = ("import time\n"
              "from rich.progress import Progress\n"
              "with Progress() as progress:\n"
              "    task = progress.add_task('Epoch 1/3', total=40)\n"
              "    for i in range(40):\n"
              "        progress.advance(task)\n"
              "        progress.refresh()\n"
              "    print('epoch done', flush=True)\n"
              "    time.sleep(0.05)\n"
              "    task2 = progress.add_task('Epoch 2/3', total=40)\n"
              "    progress.advance(task2, 7)\n"
              "    progress.refresh()\n"
              "    time.sleep(3)\n")
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TERM")}
    with open(log, "wb") as out:
        process = subprocess.Popen([sys.executable, "-c", script], stdout=out, stderr=subprocess.STDOUT,
                                   env={**env, **schedule.PROGRESS_ENV})
        try:  # while it runs (its last 3 s): the bar's state now, not its start nor a line before it
            line = schedule._last_line(log)
            # 7 of 40 is 18%: the first bar passes it too, so wait for the second bar's line
            while process.poll() is None and not (line.startswith("Epoch 2/3") and "18%" in line):
                time.sleep(0.05)
                line = schedule._last_line(log)
            running = process.poll() is None
        finally:
            process.wait()
    assert running and line.startswith("Epoch 2/3") and "\x1b" not in line, line
    assert len(log.read_bytes()) > 40 * len("Epoch 1/3")  # every refresh reached the file


def test_the_last_line_of_a_log_is_what_a_terminal_shows(tmp_path):
    log = tmp_path / "stage.log"
    log.write_bytes("a warning\n\x1b[?25l\r\x1b[2KEpoch 0/2 ━━ 10/424\r\x1b[2KEpoch 0/2 ━━ 11/424\x1b[1A\x1b[2K"
                    .encode())
    assert schedule._last_line(log) == "Epoch 0/2 ━━ 11/424"
    log.write_bytes(b"done\r\n\n")
    assert schedule._last_line(log) == "done"
    assert schedule._last_line(tmp_path / "missing.log") == ""
