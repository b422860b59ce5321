"""Stage ``finetune@<variant>``: one epoch of J = CE − β·mean(g_t) from the trained model.

Flexible Attention (2017) eq. 9: fine-tuning pushes the penalty strength g_t up, so that the
threshold τ cuts smaller windows at test time.

Usage::

    python -m flexatt.stages.finetune finetune.variant=flexible finetune.beta=0.001

Starts from ``<finetune.init_dir>/<variant>/best.ckpt``; writes
``<finetune.out_dir>/<variant>/{best,last}.ckpt`` and ``<finetune.metrics_dir>/<variant>.json``.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from flexatt import config as C
from flexatt.errors import ConfigError
from flexatt.trainer import model_config, train


def run(cfg: DictConfig) -> dict:
    variant = C.check_str(cfg, "finetune.variant")
    if model_config(cfg, variant, "finetune.variant")["attention"] not in ("flexible", "flexible_sact"):
        raise ConfigError("finetune.variant", f"must name a flexible model (flexible, flexible_sact), "
                          f"not {variant!r}: the objective needs g_t")
    beta = C.check_float(cfg, "finetune.beta", ge=0.0)
    init = Path(C.check_str(cfg, "finetune.init_dir")) / variant / "best.ckpt"
    metrics, objects = train(
        cfg, variant,
        out_dir=C.check_str(cfg, "finetune.out_dir"),
        epochs=C.check_int(cfg, "finetune.epochs", minimum=1),
        lr=C.check_float(cfg, "finetune.lr", gt=0.0),
        beta=beta,
        init_from=init,
        metrics_file=Path(C.check_str(cfg, "finetune.metrics_dir")) / f"{variant}.json",
    )
    if objects["is_global_zero"]:  # one report under DDP
        print(f"finetune@{variant} (beta {beta}): dev BLEU {metrics['dev_bleu']}, "
              f"{metrics['tokens_per_second']} target tokens/s")
    return metrics


def main() -> None:
    C.run_stage(run)


if __name__ == "__main__":
    main()
