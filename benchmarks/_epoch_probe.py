"""Run a training stage with Lightning's SimpleProfiler and write where its time went (JSON).

    python benchmarks/_epoch_probe.py OUT.json flexatt.stages.train train.variant=global ...

Used by ``train_epoch.py`` on any commit of flexatt (it needs only that the stage builds a
``pytorch_lightning.Trainer``): the Trainer is given a profiler that records every hook's
durations, and the process's own wall time is recorded around the stage. Phases:

* ``steps``: Lightning's ``run_training_batch`` (forward, backward, clipping, the optimiser);
* ``data``: fetching training batches (``train_dataloader_next``);
* ``validation``: the validation loop (``run_validation`` hooks: dev loss and greedy dev decoding);
* ``checkpoints``: the checkpoint callbacks' hooks (writing ``best.ckpt`` and ``last.ckpt``);
* ``other``: the rest of the process (imports, data and model set-up, the metrics files).
"""

from __future__ import annotations

import json
import runpy
import sys
import time

STARTED = time.perf_counter()

import pytorch_lightning as pl  # noqa: E402
from pytorch_lightning.profilers import SimpleProfiler  # noqa: E402

_profilers: list[SimpleProfiler] = []
_init = pl.Trainer.__init__


def _profiled_init(self, *args, **kwargs):
    kwargs["profiler"] = profiler = SimpleProfiler()
    _profilers.append(profiler)
    _init(self, *args, **kwargs)


def phases(totals: dict[str, float], wall: float) -> dict[str, float]:
    """The phases of the module doc from the profiler's total seconds per action."""
    def total(*needles: str) -> float:
        return sum(v for k, v in totals.items() if any(n in k for n in needles))

    out = {"steps": total("run_training_batch"), "data": total("train_dataloader_next"),
           "validation": total("validation_step", "val_next", "on_validation_epoch_end]",
                               "TranslationTask.on_validation_epoch_end"),
           "checkpoints": total("ModelCheckpoint")}
    out["other"] = max(0.0, wall - sum(out.values()))
    return {k: round(v, 2) for k, v in out.items()}


def main() -> None:
    out, module, *overrides = sys.argv[1:]
    pl.Trainer.__init__ = _profiled_init
    sys.argv = [module, *overrides]
    try:
        runpy.run_module(module, run_name="__main__")
    except SystemExit as exc:
        if exc.code not in (None, 0):
            raise
    wall = time.perf_counter() - STARTED
    totals: dict[str, float] = {}
    for profiler in _profilers:
        for action, durations in profiler.recorded_durations.items():
            totals[action] = totals.get(action, 0.0) + sum(durations)
    with open(out, "w", encoding="utf-8") as handle:
        json.dump({"wall": round(wall, 2), "phases": phases(totals, wall),
                   "actions": {k: round(v, 3) for k, v in sorted(totals.items())}}, handle, indent=1)


if __name__ == "__main__":
    main()
