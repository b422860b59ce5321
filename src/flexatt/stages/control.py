"""Stage ``control@<variant>``: the control of a fine-tuning — the same parent, epochs, learning
rate and data, with β = 0.

Fine-tuning (``finetune@<variant>``, Flexible Attention 2017 eq. 9: J = CE − β·mean g_t) trains
the model further; without a control, whatever it gains could come from the extra epochs alone.
The control starts from the same checkpoint (``<finetune.init_dir>/<variant>/best.ckpt``) and
trains with plain cross-entropy (β = 0) at ``finetune.lr`` for **exactly as many epochs as the
fine-tuning ran** (read from its metrics file, ``<finetune.metrics_dir>/<variant>.json``: under
a stopping rule that is fewer than ``finetune.epochs``), with early stopping off so that it
gets that budget whatever its own dev BLEU does. Everything else (batch size and order, seed,
learning-rate schedule, precision) is the fine-tuning's, so the two differ only in β.

Usage::

    python -m flexatt.stages.control finetune.variant=flexible

Writes ``<finetune.control_out_dir>/<variant>/{best,last}.ckpt`` and
``<finetune.control_metrics_dir>/<variant>.json`` (with ``budget``: the epochs, their source
file, and the fine-tuning's β), as ``finetune`` does.
"""

from __future__ import annotations

import json
from pathlib import Path

from omegaconf import DictConfig

from flexatt import config as C
from flexatt import schema
from flexatt.errors import DataError
from flexatt.io import write_json
from flexatt.trainer import train


def budget(metrics_file: Path) -> int:
    """The number of epochs the fine-tuning ran, from its metrics JSON (``epochs``).

    Raises:
        DataError: the file is missing (fine-tune first), not JSON, or has no positive epochs.
    """
    if not metrics_file.is_file():
        raise DataError(metrics_file, "not found: run the fine-tuning first (dvc repro finetune)")
    try:
        epochs = json.loads(metrics_file.read_text(encoding="utf-8")).get("epochs")
    except (json.JSONDecodeError, AttributeError) as exc:
        raise DataError(metrics_file, f"is not a fine-tuning's metrics JSON ({exc})") from None
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise DataError(metrics_file, f"epochs: must be a positive integer (got {epochs!r})")
    return epochs


def control_params(p: schema.Params) -> schema.Params:
    """``p`` with early stopping off: the control trains its whole budget."""
    return p.model_copy(update={"train": p.train.model_copy(update={"early_stopping_patience": None})})


def run(cfg: DictConfig | schema.Params) -> dict:
    p = schema.params(cfg)
    ft, variant = p.finetune, p.flexible_variant("finetune.variant")
    source = Path(ft.metrics_dir) / f"{variant}.json"
    epochs = budget(source)
    metrics_file = Path(ft.control_metrics_dir) / f"{variant}.json"
    metrics, objects = train(control_params(p), variant, out_dir=ft.control_out_dir, epochs=epochs, lr=ft.lr,
                             beta=0.0, init_from=Path(ft.init_dir) / variant / "best.ckpt",
                             metrics_file=metrics_file, job_type="control")
    if objects["is_global_zero"]:
        metrics["budget"] = {"epochs": epochs, "from": str(source), "finetune_beta": ft.beta}
        write_json(metrics_file, metrics)
        print(f"control@{variant} (beta 0, {epochs} epochs as finetune@{variant}): dev BLEU {metrics['dev_bleu']}")
    return metrics


def main() -> None:
    C.run_stage(run)


if __name__ == "__main__":
    main()
