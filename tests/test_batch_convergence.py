"""``benchmarks/batch_convergence.py``: epochs and seconds to a dev BLEU from learning curves."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from conftest import ROOT


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_batch_convergence", ROOT / "benchmarks" / "batch_convergence.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def curve(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ["epoch,step,lr,train_loss,val_loss,val_nll_token,val_bleu,train_tokens,train_seconds,tokens_per_second"]
    lines += [f"{e},{step},0.002,1,1,1,{bleu},100,{sec},10" for e, step, bleu, sec in rows]
    path.write_text("\n".join(lines) + "\n")


def test_a_part_epoch_counts_by_its_steps_and_levels_interpolate(bench, tmp_path):
    curve(tmp_path / "c.csv", [(1, 100, 4.0, 10.0), (2, 200, 8.0, 10.0), (3, 250, 10.0, 6.0)])
    points = bench.read_curve(tmp_path / "c.csv")
    assert points == [(1.0, 10.0, 4.0), (2.0, 20.0, 8.0), (2.5, 26.0, 10.0)]
    assert bench.epochs_to(points, 6.0) == pytest.approx((1.5, 15.0))
    assert bench.epochs_to(points, 2.0) == pytest.approx((0.5, 5.0))  # from (0 epochs, BLEU 0)
    assert bench.epochs_to(points, 10.5) is None


def test_the_report_compares_each_config_with_the_variants_smallest_batch(bench, tmp_path):
    curve(tmp_path / "global_b64_lr0.002" / "global.csv", [(1, 100, 4.0, 10.0), (2, 200, 8.0, 10.0)])
    curve(tmp_path / "global_b256_lr0.004" / "global.csv", [(1, 25, 2.0, 2.0), (2, 50, 4.0, 2.0), (3, 75, 8.0, 2.0)])
    report = bench.report(tmp_path, {"global:64": 100.0, "global:256": 125.0})
    v = report["variants"]["global"]
    assert v["reference"] == "global_b64_lr0.002" and [r["dev_bleu"] for r in v["levels"]] == [4.0, 6.0, 8.0]
    at8 = v["levels"][-1]["global_b256_lr0.004"]
    assert at8["epochs"] == pytest.approx(3.0) and at8["epochs_vs_ref"] == pytest.approx(1.5)
    assert at8["seconds_vs_ref"] == pytest.approx(6.0 / 20.0)
    assert at8["cpu_time_vs_ref"] == pytest.approx(1.5 * 100.0 / 125.0)  # more epochs, each 1.25x faster
    assert "not reached" not in bench.show(report)
