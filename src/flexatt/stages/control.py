"""Stage ``control@<variant>``: the control of a fine-tuning — the same parent, epochs, learning
rates and data, with β = 0.

Fine-tuning (``finetune@<variant>``, Flexible Attention 2017 eq. 9: J = CE − β·mean g_t) trains
the model further; without a control, whatever it gains could come from the extra epochs alone.
The control starts from the same checkpoint (``<finetune.init_dir>/<variant>/best.ckpt``) and
trains with plain cross-entropy (β = 0) for **exactly as many epochs as the fine-tuning ran, each
at the learning rate the fine-tuning trained it with** (read from its learning curve,
``<finetune.metrics_dir>/<variant>.csv``: under a stopping rule the epochs are fewer than
``finetune.epochs``, and the plateau schedule halves the rate where the fine-tuning's dev BLEU
stalled), with early stopping off and no schedule of its own, so that it gets that budget whatever
its own dev BLEU does. Everything else (batch size and order, seed, precision) is the
fine-tuning's, so the two differ only in β.

Usage::

    python -m flexatt.stages.control finetune.variant=flexible

Writes the model folder ``<finetune.control_out_dir>/<variant>/`` and
``<finetune.control_metrics_dir>/<variant>.json`` (with ``budget``: the epochs, their learning
rates, their source file, and the fine-tuning's β), as ``finetune`` does.
"""

from __future__ import annotations

import csv
from pathlib import Path

from omegaconf import DictConfig

from flexatt import config as C
from flexatt import schema
from flexatt.errors import DataError
from flexatt.io import write_json
from flexatt.trainer import drop_resume_state, train


def budget(curve_file: Path) -> list[float]:
    """The learning rate of every epoch the fine-tuning ran, from its learning curve (the ``lr``
    column of ``<finetune.metrics_dir>/<variant>.csv``, one row per epoch): its length is the
    control's number of epochs.

    Raises:
        DataError: the file is missing (fine-tune first), has no rows, or a row whose epoch or
            rate is not what a learning curve holds (names the line).
    """
    if not curve_file.is_file():
        raise DataError(curve_file, "not found: run the fine-tuning first (dvc repro finetune)")
    with open(curve_file, encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        raise DataError(curve_file, "has no epochs (not a fine-tuning's learning curve)")
    rates = []
    for line, row in enumerate(rows, start=2):
        try:
            epoch, rate = int(row["epoch"]), float(row["lr"])
        except (KeyError, TypeError, ValueError):
            raise DataError(curve_file, f"needs an integer epoch and a learning rate (got {row})", line) from None
        if epoch != line - 1 or not rate > 0:
            raise DataError(curve_file, f"expected epoch {line - 1} with a positive learning rate "
                            f"(got epoch {epoch}, lr {rate})", line)
        rates.append(rate)
    return rates


def control_params(p: schema.Params) -> schema.Params:
    """``p`` with early stopping off: the control trains its whole budget."""
    return p.model_copy(update={"train": p.train.model_copy(update={"early_stopping_patience": None})})


def run(cfg: DictConfig | schema.Params) -> dict:
    p = schema.params(cfg)
    ft, variant = p.finetune, p.flexible_variant("finetune.variant")
    source = Path(ft.metrics_dir) / f"{variant}.csv"
    rates = budget(source)
    metrics_file = Path(ft.control_metrics_dir) / f"{variant}.json"
    metrics, objects = train(control_params(p), variant, out_dir=ft.control_out_dir, epochs=len(rates), lr=rates[0],
                             beta=0.0, init_from=Path(ft.init_dir) / variant / "best.ckpt",
                             metrics_file=metrics_file, job_type="control", lr_epochs=rates)
    if objects["is_global_zero"]:
        drop_resume_state(objects["ckpt_dir"])
        metrics["budget"] = {"epochs": len(rates), "lr": rates, "from": str(source), "finetune_beta": ft.beta}
        write_json(metrics_file, metrics)
        print(f"control@{variant} (beta 0, {len(rates)} epochs at the learning rates of finetune@{variant}): "
              f"dev BLEU {metrics['dev_bleu']}")
    return metrics


def main() -> None:
    C.run_stage(run)


if __name__ == "__main__":
    main()
