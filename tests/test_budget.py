"""scripts/budget.py: an equal budget's figures from recorded learning curves (golden values on
hand-made curves), and curves it refuses."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from conftest import ROOT, load_script

budget = load_script("budget")
COLUMNS = ("epoch", "step", "lr", "val_bleu", "train_seconds")


def _write(folder: Path, name: str, bleus: list[float], halve_at: int | None = None, seconds: float = 60.0):
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f"{name}.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(COLUMNS)
        for epoch, bleu in enumerate(bleus, 1):
            lr = 0.002 if halve_at is None or epoch < halve_at else 0.001
            writer.writerow([epoch, epoch * 10, lr, bleu, seconds])


def test_a_budget_ranks_gaps_and_costs_the_models(tmp_path):
    _write(tmp_path, "a", [1, 5, 9, 10, 10.5], halve_at=4)
    _write(tmp_path, "b", [2, 6, 7, 7.2], seconds=120.0)  # ended at epoch 4
    _write(tmp_path, "c", [3, 5.5, 4.5, 8, 12])
    at2 = budget.at_budget(budget.read_curves(tmp_path), 2)
    # best up to 2: a 5, b 6, c 5.5; over the run: a 10.5, b 7.2, c 12 -> ranks (1,3,2) vs (2,1,3)
    assert (at2["spearman"], at2["kendall"]) == (-0.5, -0.333)
    assert at2["gaps"] == {"a": 5.5, "b": 1.2, "c": 6.5} and at2["median_gap"] == 5.5
    assert (at2["max_gap"], at2["worst"], at2["halved_by_then"], at2["ended_before"]) == (6.5, "c", 0, 0)
    assert at2["train_minutes"] == {"a": 2.0, "b": 4.0, "c": 2.0}
    at5 = budget.at_budget(budget.read_curves(tmp_path), 5)
    assert (at5["spearman"], at5["median_gap"], at5["halved_by_then"], at5["ended_before"]) == (1.0, 0.0, 1, 1)


def test_the_recorded_bible_curves_give_the_figures_quoted_for_them():
    curves = budget.read_curves(ROOT / "results/bible/train")
    assert [budget.at_budget(curves, e)["spearman"] for e in (20, 25)] == [0.817, 0.75]


@pytest.mark.parametrize("content, message", [
    ("epoch,lr,val_bleu\n1,0.002,3.0\n", "missing: train_seconds"),
    ("epoch,lr,val_bleu,train_seconds\n1,0.002,three,60\n", "could not convert string to float: 'three'"),
    ("epoch,lr,val_bleu,train_seconds\n2,0.002,3.0,60\n", "epochs are not 1, 2, 3"),
    ("epoch,lr,val_bleu,train_seconds\n", "not a learning curve (no epochs)"),
])
def test_a_file_that_is_not_a_learning_curve_is_named(tmp_path, capsys, content, message):
    _write(tmp_path, "a", [1, 2])
    _write(tmp_path, "b", [1, 3])
    (tmp_path / "bad.csv").write_text(content, encoding="utf-8")
    assert budget.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'bad.csv'}" in err and message in err


def test_fewer_than_three_models_rank_nothing(tmp_path, capsys):
    _write(tmp_path, "a", [1, 2])
    _write(tmp_path, "b", [1, 3])
    assert budget.main([str(tmp_path)]) == 2
    assert "2 learning curve(s); a ranking needs at least 3" in capsys.readouterr().err
