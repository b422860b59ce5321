"""The benchmarks run end to end on real (smoke-sized) models and pipelines:
``benchmarks/beam_speed.py`` decodes Global at τ = ∞ and the fine-tuned flexible model at the τ
its sweep selected; ``benchmarks/pipeline.py --baseline`` times a commit's pipeline from scratch
beside this tree's."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, copy_of, repo_copy, stage_env


@pytest.fixture
def bench_dir(smoke_trained, tmp_path):
    """The smoke model where the benchmarks look for the pipeline's models (one model for both:
    the benchmark tells them apart by τ only), and a sweep_tau result that selects τ = 0.5."""
    work = copy_of(smoke_trained, tmp_path / "w")
    for dest in ("artifacts/models/global/best.ckpt", "artifacts/models_ft/flexible/best.ckpt"):
        (work / dest).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(work / "m" / "flexible" / "best.ckpt", work / dest)
    (work / "results").mkdir(exist_ok=True)
    (work / "results" / "sweep_tau.json").write_text(json.dumps({"models": {"flexible_ft": {"selected_tau": 0.5}}}))
    return work


def test_beam_speed_decodes_global_at_tau_inf_and_flexible_at_its_selected_tau(bench_dir, tmp_path):
    out = tmp_path / "beam_speed.json"
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "beam_speed.py"), "--sentences", "4",
                             "--beams", "1", "3", "--paths", "eager", "--rounds", "1", "--threads", "1",
                             "--out", str(out)], cwd=bench_dir, env=stage_env("1"), text=True,
                            capture_output=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert figures["tau"] == 0.5 and figures["sentences"] == 4
    for beam in ("1", "3"):
        at = figures["beams"][beam]
        inf, tau = at["stats"]["global/eager"], at["stats"]["flexible_ft/eager"]
        assert 0 < tau["window"] <= inf["window"]  # the same weights: τ = 0.5 scores no more than τ = ∞
        assert all(len(v) == 1 and v[0] > 0 for v in at["sentences_per_second"].values())
        assert math.isfinite(at["ratio_medians"]["flexible/global eager"])
    assert "greedy:" in result.stdout and "beam 3:" in result.stdout


@pytest.mark.slow  # two runs of filter and tokenize, each in a repository of its own: about a minute
def test_the_pipeline_benchmark_times_a_baseline_commit_and_this_tree_from_scratch(tmp_path):
    repo = repo_copy(tmp_path / "repo", "profile=smoke")
    out = tmp_path / "pipeline.json"
    bin_dir = str(Path(sys.executable).parent)
    env = {**stage_env(), "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
           "PYTHONPATH": str(repo / "src")}
    result = subprocess.run([sys.executable, "benchmarks/pipeline.py", "--from-scratch", "--baseline", "HEAD",
                             "--noop-runs", "1", "--out", str(out), "tokenize"], cwd=repo, env=env, text=True,
                            capture_output=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    figures = json.loads(out.read_text())
    base = figures["baseline"]
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    assert base["commit"] == head
    assert list(base["stages"]) == list(figures["stages"]) == ["filter", "tokenize"]  # the target and its upstream
    assert figures["ratio_to_baseline"] == pytest.approx(figures["total_minutes"] / base["total_minutes"], abs=1e-3)
    assert not (repo / "artifacts" / "bench" / "pipeline-HEAD").exists()  # the worktree is removed
    worktrees = subprocess.run(["git", "worktree", "list"], cwd=repo, capture_output=True, text=True).stdout
    assert len(worktrees.strip().splitlines()) == 1
    assert "this tree / baseline" in result.stdout
