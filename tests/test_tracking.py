"""The W&B tracker: with tracking off, nothing touches wandb."""

from __future__ import annotations

import sys

from flexatt.tracking import Tracker


def test_a_tracker_without_a_run_never_imports_wandb(monkeypatch, tmp_path):
    """logger.enabled=false with wandb not installed: every method is a no-op (an import of wandb
    would raise ImportError here)."""
    monkeypatch.setitem(sys.modules, "wandb", None)
    tracker = Tracker()
    assert not tracker.active
    assert tracker.table("t", ["a"], [[1]]) is None
    tracker.line_plot("p", None, "a", "b", "title")
    tracker.image("i", tmp_path / "figure.png")
    tracker.histogram("h", [1.0, 2.0])
    tracker.artifact("model", "model", [tmp_path / "best.ckpt"])
    tracker.log({"x": 1})
    tracker.summary({"x": 1})
    tracker.config({"x": 1})
    tracker.finish()
