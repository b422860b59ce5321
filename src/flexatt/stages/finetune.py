"""Stage ``finetune@<variant>``: training continued from the trained model with
J = CE − β·mean(g_t), at ``finetune.lr`` for at most ``finetune.epochs`` epochs under the
training's stopping rule (``train.early_stopping_patience``, the plateau schedule).

Flexible Attention (2017) eq. 9: fine-tuning pushes the penalty strength g_t up, so that the
threshold τ cuts smaller windows at test time. Its learning curve (``<variant>.csv``) gives the
control (:mod:`flexatt.stages.control`) its epochs and learning rates.

Usage::

    python -m flexatt.stages.finetune finetune.variant=flexible finetune.beta=0.001

Starts from ``<finetune.init_dir>/<variant>/best.ckpt``; writes
the model folder ``<finetune.out_dir>/<variant>/`` and ``<finetune.metrics_dir>/<variant>.json``.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from flexatt import config as C
from flexatt import schema
from flexatt.trainer import drop_resume_state, train


def run(cfg: DictConfig | schema.Params) -> dict:
    p = schema.params(cfg)
    ft, variant = p.finetune, p.flexible_variant("finetune.variant")
    metrics, objects = train(p, variant, out_dir=ft.out_dir, epochs=ft.epochs, lr=ft.lr, beta=ft.beta,
                             init_from=Path(ft.init_dir) / variant / "best.ckpt",
                             metrics_file=Path(ft.metrics_dir) / f"{variant}.json")
    if objects["is_global_zero"]:  # one report under DDP
        drop_resume_state(objects["ckpt_dir"])
        print(f"finetune@{variant} (beta {ft.beta}): dev BLEU {metrics['dev_bleu']}, "
              f"{metrics['tokens_per_second']} target tokens/s")
    return metrics


def main() -> None:
    C.run_stage(run)


if __name__ == "__main__":
    main()
