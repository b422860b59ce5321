"""One data-parallel training step, for tests/test_ddp.py.

    python ddp_step.py OUT [OVERRIDE ...]

run in a folder holding a filtered and tokenized smoke profile (``params.yaml``), trains the
flexible model for one optimizer step with the project's Lightning Trainer
(:func:`flexatt.trainer.build_trainer`) and data (:class:`flexatt.data.datamodule.TranslationData`)
in float32, with the overrides given (``trainer.strategy=ddp trainer.devices=2`` for two
processes). Every rank writes ``OUT/rank<r>.pt``: the dataset indices of the pairs its batch
held and the gradients of the model's parameters as the optimizer would receive them (after
the backward pass, so averaged over the ranks by DDP; before clipping); rank 0 also writes the
weights the step started from and the task's hyperparameters, from which the test rebuilds the
model and computes the single-process gradient of the same effective batch.

Lightning starts the other ranks by running this script again, so it is a file, not a function.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from omegaconf import open_dict
from pytorch_lightning.callbacks import Callback

from flexatt.config import load_params
from flexatt.data.datamodule import TranslationData
from flexatt.data.subwords import Vocab
from flexatt.task import TranslationTask
from flexatt.trainer import build_trainer, model_config


class CaptureStep(Callback):
    """Saves the first step's batch indices, starting weights and gradients of each rank."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.initial: dict[str, torch.Tensor] = {}
        self.index: torch.Tensor | None = None

    def on_train_start(self, trainer, pl_module) -> None:
        self.initial = {k: v.detach().clone() for k, v in pl_module.model.state_dict().items()}

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.index = batch.index.clone()

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        record = {
            "rank": trainer.global_rank, "world_size": trainer.world_size, "index": self.index,
            "grads": {name: p.grad.detach().clone() for name, p in pl_module.model.named_parameters()
                      if p.grad is not None},
        }
        if trainer.global_rank == 0:
            record.update(initial=self.initial, hparams=dict(pl_module.hparams))
        torch.save(record, self.out / f"rank{trainer.global_rank}.pt")


def main(out: str, *overrides: str) -> None:
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    cfg = load_params("params.yaml", overrides)
    with open_dict(cfg.trainer):  # Trainer arguments of this script's own (params.yaml has none)
        cfg.trainer.max_steps, cfg.trainer.limit_val_batches = 1, 0
    t = cfg.train
    tok_dir = Path(t.data_dir)
    src_vocab, tgt_vocab = Vocab(tok_dir / "src.model"), Vocab(tok_dir / "tgt.model")
    torch.manual_seed(t.seed)
    task = TranslationTask(model_config(cfg, "flexible"), len(src_vocab), len(tgt_vocab), lr=t.lr,
                           seed=t.seed)
    trainer = build_trainer(cfg, out_dir / "checkpoints", 1, [CaptureStep(out_dir)], precision="32-true")
    trainer.fit(task, datamodule=TranslationData(tok_dir, t.batch_size, t.seed))


if __name__ == "__main__":
    main(*sys.argv[1:])
