"""How a training run ended: epochs run, best epoch, and why it stopped.

Read from the run's model folder (:mod:`flexatt.trainer` writes it): ``run.json`` holds the
number of epochs done (``epochs_done``, written when the run ended) and the cap (``epochs``: the
Trainer's ``max_epochs``), ``best.ckpt`` the epoch of the best dev BLEU. A run that did fewer epochs than its cap was
stopped by early stopping (``train.early_stopping_patience`` epochs without a better dev BLEU);
one that did all of them reached its cap, which a stopping-rule comparison flags: that model
may still have been improving. A run that replayed given learning rates (``lr_epochs`` in
``run.json``: a control, :mod:`flexatt.stages.control`) trains that fixed budget, its
fine-tuning's epochs, with early stopping off: it ends there by design, not at a cap.
"""

from __future__ import annotations

import json
from pathlib import Path

from flexatt.checkpoints import EPOCHS_DONE, read_checkpoint
from flexatt.errors import DataError

#: ``stopped`` values
EARLY_STOPPING = "early stopping"
CAP = "cap"
BUDGET = "budget"


def run_summary(checkpoint: str | Path) -> dict | None:
    """``{"epochs", "best_epoch", "cap", "stopped"}`` of the run whose best checkpoint is
    ``checkpoint`` (1-based epochs; ``stopped``: :data:`EARLY_STOPPING` or :data:`CAP`, and
    :data:`BUDGET` for a run that replayed a fixed budget by design, a control), or
    ``None`` for a checkpoint without the record of an ended run beside it (no ``run.json``
    with ``epochs_done``: copied from elsewhere, or a run still under way).

    Raises:
        DataError: ``run.json`` or a checkpoint is unreadable (names the file).
    """
    folder = Path(checkpoint).parent
    run = folder / "run.json"
    if not run.is_file():
        return None
    try:
        recorded = json.loads(run.read_text(encoding="utf-8"))
        cap = recorded["epochs"]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise DataError(run, f"has no epochs entry ({exc})") from None
    if EPOCHS_DONE not in recorded:
        return None
    fixed_budget = bool(recorded.get("lr_epochs"))
    epochs = int(recorded[EPOCHS_DONE])
    best = int(read_checkpoint(checkpoint)["epoch"]) + 1
    stopped = BUDGET if fixed_budget else CAP if epochs >= cap else EARLY_STOPPING
    return {"epochs": epochs, "best_epoch": best, "cap": cap, "stopped": stopped}
