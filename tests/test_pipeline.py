"""`flexatt repro pipelines/smoke/dvc.yaml` (`make smoke`), the smoke profile's whole pipeline, in
a scratch copy of the working tree (conftest's ``smoke_copy``): every stage runs, every output is
there, W&B runs are on disk."""

from __future__ import annotations

import json

import pytest
import yaml

from wandb_records import find_runs

#: the smoke profile's whole pipeline (conftest's ``smoke_copy``): minutes
pytestmark = pytest.mark.slow

ROWS = ["global", "local_m", "local_p", "flexible", "flexible_tau", "flexible_ft", "flexible_ft_tau",
        "sact", "flexible_sact"]


def test_every_stage_ran_and_repro_is_then_a_no_op(smoke_copy):
    copy, stdout = smoke_copy
    lock = yaml.safe_load((copy / "pipelines/smoke/dvc.lock").read_text())
    variants = ["global", "local_m", "local_p", "flexible", "sact", "flexible_sact"]
    expected = {"filter", "tokenize", "sweep_tau", "sweep_sigma", "evaluate",
                *(f"train@{v}" for v in variants), "finetune@flexible", "finetune@flexible_sact"}
    assert expected <= set(lock["stages"])
    table = (copy / "results/smoke/table1.md").read_text()
    assert "# Table 1 — test set" in table and "| Global |" in table  # the smoke run's Table 1
    assert max(map(len, table.splitlines())) < 1000  # no table thousands of characters wide
    assert "pipelines/smoke/dvc.yaml:evaluate: done in" in stdout and "stopped after a failure" not in stdout

    from conftest import run_dvc

    again = run_dvc(copy, "repro", "pipelines/smoke/dvc.yaml")
    assert again.returncode == 0 and "Data and pipelines are up to date" in again.stdout


def test_metrics_table_and_figures(smoke_copy):
    copy, _ = smoke_copy
    metrics = json.loads((copy / "results/smoke/metrics.json").read_text())
    assert set(ROWS) <= set(metrics["models"])
    for row in ROWS:
        m = metrics["models"][row]
        for key in ("window", "reduction", "bleu", "bleu_tok", "ribes", "aer", "decode_ms"):
            assert isinstance(m[key], (int, float)), (row, key)
        assert 0 <= m["ribes"] <= 1 and 0 <= m["aer"] <= 1 and m["window"] > 0
    assert metrics["models"]["global"]["reduction"] == 0
    local = metrics["models"]["local_m"]
    assert local["window"] <= 2 * 3 + 1  # D = 3 in the smoke profile
    sweep = json.loads((copy / "results/smoke/sweep_tau.json").read_text())
    assert metrics["selected_tau"]["flexible"] == sweep["models"]["flexible"]["selected_tau"]
    assert metrics["models"]["flexible_tau"]["tau"] == sweep["models"]["flexible"]["selected_tau"]
    table = (copy / "results/smoke/table1.md").read_text()
    for label in ("Global", "Local-m", "Local-p", "Flexible τ=∞", "+ fine-tuning", "SACT"):
        assert label in table
    for png in ("tradeoff.png", "sigma.png", "evaluate/vision_span.png", "evaluate/g_per_step.png",
                "evaluate/temperature_per_step.png", "evaluate/attention.png", "evaluate/bleu_by_length.png"):
        assert (copy / "results/smoke/figures" / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png
    curve = (copy / "results/smoke/plots/tradeoff.csv").read_text().splitlines()
    assert curve[0] == "model,split,tau,window,bleu,ms_per_sentence" and len(curve) > 10


def test_wandb_offline_runs_hold_the_metrics(smoke_copy):
    copy, _ = smoke_copy
    runs = find_runs(copy / "wandb")
    by_job: dict[str, list] = {}
    for run in runs:
        by_job.setdefault(run["run"].job_type, []).append(run)
    assert {"train", "finetune", "sweep_tau", "sweep_sigma", "evaluate"} <= set(by_job)
    assert len({run["run"].run_group for run in runs}) == 1, "one pipeline run, one group"
    assert len(by_job["train"]) == 6
    for run in by_job["train"]:
        keys = set().union(*run["history"])
        assert {"train/loss", "val/loss", "val/bleu", "train/lr"} <= keys
        assert "smoke" in run["run"].tags
        assert run["config"]["train"]["epochs"] == 10  # the full resolved config
        variant = run["run"].display_name.split("-", 1)[1]
        final = json.loads((copy / f"results/smoke/train/{variant}.json").read_text())
        assert run["summary"]["final/dev_bleu"] == pytest.approx(final["dev_bleu"])
    evaluate = by_job["evaluate"][0]
    metrics = json.loads((copy / "results/smoke/metrics.json").read_text())
    assert evaluate["summary"]["global/bleu"] == pytest.approx(metrics["models"]["global"]["bleu"])
    assert any(k.startswith("histograms/flexible/g") for k in evaluate["summary"])
    assert any(k.startswith("figures/vision_span") for k in evaluate["summary"])
    assert any(k.startswith("evaluate/table1") for k in evaluate["summary"])
