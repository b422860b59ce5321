"""Stage ``train@<variant>``: train one attention variant with the Lightning Trainer.

Usage::

    python -m flexatt.stages.train train.variant=flexible
    python -m flexatt.stages.train train.variant=global trainer.max_time=00:00:10:00
    python -m flexatt.stages.train -m train.variant=flexible model.sigma=1.5,5 \\
        'train.out_dir=sweeps/sigma${model.sigma}' 'train.metrics_dir=sweeps/sigma${model.sigma}'

Writes the model folder ``<train.out_dir>/<variant>/`` (``best.ckpt``, the vocabularies,
``run.json``) and ``<train.metrics_dir>/<variant>.json`` (dev BLEU, throughput, minutes per epoch)
with its learning curve ``<variant>.csv``. Started again after an interruption, it resumes from
its ``last.ckpt`` in ``.resume/``, which it deletes once trained (see :mod:`flexatt.trainer`).
"""

from __future__ import annotations

from omegaconf import DictConfig

from flexatt import config as C
from flexatt import schema
from flexatt.trainer import drop_resume_state, train


def run(cfg: DictConfig | schema.Params) -> dict:
    p = schema.params(cfg)
    variant = p.train.variant
    metrics, objects = train(p, variant)
    if objects["is_global_zero"]:  # one report under DDP
        drop_resume_state(objects["ckpt_dir"])
        print(f"train@{variant}: dev BLEU {metrics['dev_bleu']} (epoch {metrics['best_epoch']} of "
              f"{metrics['epochs']}), {metrics['tokens_per_second']} target tokens/s, "
              f"{metrics['train_minutes_per_epoch']} min/epoch of training")
    return metrics


def main() -> None:
    C.run_stage(run)


if __name__ == "__main__":
    main()
