"""The training logic: a LightningModule around a plain :class:`flexatt.model.Seq2Seq`.

``TranslationTask`` holds only what training needs: the loss (teacher-forced cross-entropy, or
the fine-tuning objective J = CE − β·mean g_t of Flexible Attention eq. 9), Adam with a learning
rate schedule (``train.lr_schedule``: ``fixed`` halves it every epoch from a configured epoch on,
``plateau`` halves it after ``train.lr_plateau_patience`` epochs whose dev BLEU is no better than
the best before), and
validation by greedy decoding of the dev set scored with BLEU. The network lives in
``flexatt.model``; the data in ``flexatt.data.datamodule``; decoding in ``flexatt.decoding``; the
Trainer and its run in ``flexatt.trainer``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytorch_lightning as pl
import torch
from lightning_fabric.plugins import TorchCheckpointIO
from pytorch_lightning.trainer.states import TrainerFn

from flexatt.data.batching import Batch
from flexatt.data.subwords import PAD_ID
from flexatt.io import save_torch
from flexatt.metrics import corpus_bleu
from flexatt.model import build_model, finetune_loss, joint_vocabulary, sequence_loss
from flexatt.decoders import full_precision
from flexatt.decoding import greedy
from flexatt.schema import LR_SCHEDULES


#: ``train.lr_schedule`` values (see :class:`TranslationTask`)


def lr_factor(epoch: int, halve_from: int) -> float:
    """Learning-rate factor for 0-based ``epoch``: 1 until 1-based epoch ``halve_from``,
    then halved at the start of that epoch and of every later one (paper: from epoch 4)."""
    return 0.5 ** max(0, epoch + 2 - halve_from)


class TranslationTask(pl.LightningModule):
    """Training, validation and optimisation of one translation model.

    Args:
        model_cfg: the model config (``conf/model``, merged with the variant's overrides).
        src_vocab, tgt_vocab: vocabulary sizes.
        lr: Adam's initial learning rate.
        halve_from: with ``lr_schedule="fixed"``, see :func:`lr_factor`.
        beta: β of the fine-tuning objective (0 for ordinary training).
        seed: torch is reseeded with ``seed + epoch`` at each epoch start, so a run resumed
            from an epoch-end checkpoint continues exactly as an uninterrupted one.
        max_len_ratio: greedy validation decodes at most ``ratio · S + 10`` tokens.
        lr_schedule: ``fixed`` (:func:`lr_factor`, stepped by Lightning at the end of every
            epoch) or ``plateau``: ``ReduceLROnPlateau(mode="max", factor=0.5)`` on the dev
            BLEU (``val/bleu``), halving after ``lr_plateau_patience`` epochs without a better
            one (counted since the best epoch or the last halving), stepped by :meth:`on_validation_epoch_end` as soon
            as the BLEU of a fitting epoch is known, so that the epoch-end checkpoint holds the
            stepped state (:meth:`on_save_checkpoint`) and a resumed run halves exactly where an
            uninterrupted one does. Lightning's own plateau stepping comes after the checkpoint
            and is skipped on resume; it is not used. Without dev BLEU (no detokenizer) the
            rate stays constant.
        lr_plateau_patience: with ``lr_schedule="plateau"``, how many epochs without a better
            dev BLEU halve the rate (1: every such epoch; 2: a single worse epoch, which dev BLEU's
            epoch-to-epoch noise gives while a model still improves, does not).
        vocab_digests: ``{"src": sha, "tgt": sha}`` of the SentencePiece models, saved with the
            hyperparameters so that a checkpoint refuses another vocabulary of the same size.
        label_smoothing: ε of the training cross-entropy (:func:`flexatt.model.sequence_loss`);
            the logged ``nll_token`` stays the unsmoothed NLL.
        lr_epochs: the learning rate of every epoch, replayed in place of ``lr_schedule``
            (epochs past its end keep its last rate): a control trains with the rates its
            fine-tuning's schedule chose (:mod:`flexatt.stages.control`).
    """

    def __init__(self, model_cfg: dict, src_vocab: int, tgt_vocab: int, lr: float = 1e-3,
                 halve_from: int = 4, beta: float = 0.0, seed: int = 0, max_len_ratio: float = 2.0,
                 lr_schedule: str = "fixed", vocab_digests: dict[str, str] | None = None,
                 lr_plateau_patience: int = 1, lr_epochs: list[float] | None = None, label_smoothing: float = 0.0):
        super().__init__()
        if lr_schedule not in LR_SCHEDULES:
            raise ValueError(f"train.lr_schedule: must be one of {', '.join(LR_SCHEDULES)} (got {lr_schedule!r})")
        if isinstance(lr_plateau_patience, bool) or not isinstance(lr_plateau_patience, int) or lr_plateau_patience < 1:
            raise ValueError(f"train.lr_plateau_patience: must be an integer >= 1 (got {lr_plateau_patience!r})")
        if lr_epochs is not None and (not lr_epochs or any(isinstance(r, bool) or not isinstance(r, (int, float))
                                                           or not r > 0 for r in lr_epochs)):
            raise ValueError(f"lr_epochs: must be a non-empty list of positive rates (got {lr_epochs!r})")
        if isinstance(label_smoothing, bool) or not isinstance(label_smoothing, (int, float)) \
                or not 0 <= label_smoothing < 1:
            raise ValueError(f"train.label_smoothing: must be a number in [0, 1) (got {label_smoothing!r})")
        self.save_hyperparameters()
        self.model = build_model(model_cfg, src_vocab, tgt_vocab, PAD_ID, joint_vocab=joint_vocabulary(vocab_digests))
        self.detokenize: Callable[[list[list[int]]], list[str]] | None = None
        self.dev_references: list[str] | None = None
        self._hyps: dict[int, list[int]] = {}
        self.plateau: torch.optim.lr_scheduler.ReduceLROnPlateau | None = None
        self._plateau_state: dict | None = None  # from a checkpoint, until the scheduler exists

    # ------------------------------------------------------------------ loss
    def loss(self, batch: Batch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The training objective of one batch and the values worth logging."""
        logits, aux = self.model(batch.src, batch.src_len, batch.tgt_in)
        mask = batch.tgt_out != PAD_ID
        smoothing = self.hparams.label_smoothing
        ce, nll = sequence_loss(logits, batch.tgt_out, mask, smoothing)
        token_nll = nll * len(batch) / mask.sum()
        logs = {"nll_token": token_nll}
        if self.hparams.beta > 0:
            if aux["g"] is None:
                raise ValueError(f"fine-tuning with beta > 0 needs a flexible model, not "
                                 f"{self.hparams.model_cfg['attention']}")
            loss = finetune_loss(logits, batch.tgt_out, aux["g"], mask, self.hparams.beta, smoothing)
            logs["g_mean"] = (aux["g"] * mask).sum() / mask.sum()
        else:
            loss = ce
        return loss, logs

    def training_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        loss, logs = self.loss(batch)
        size = len(batch)
        self.log("train/loss", loss, prog_bar=True, batch_size=size)
        for name, value in logs.items():
            self.log(f"train/{name}", value, batch_size=size)
        self.log("train/lr", self.optimizers().param_groups[0]["lr"], batch_size=size)
        return loss

    def on_train_epoch_start(self) -> None:
        torch.manual_seed(self.hparams.seed + self.current_epoch)

    # ------------------------------------------------------------------ validation
    def on_validation_epoch_start(self) -> None:
        self._hyps = {}

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        loss, logs = self.loss(batch)
        self.log("val/loss", loss, batch_size=len(batch))
        self.log("val/nll_token", logs["nll_token"], batch_size=len(batch))
        if self.detokenize is not None:
            max_len = (batch.src_len.float() * self.hparams.max_len_ratio).long() + 10
            # decoded as the evaluation decodes it, in float32 (the autocast of bf16-mixed off), on
            # the reference backend: the dev BLEU steers the learning rate and the best
            # checkpoint, so it must not depend on whether the kernel could be compiled here
            with full_precision(batch.src.device.type):
                result = greedy(self.model, batch.src, batch.src_len, max_len, backend="eager")
            for i, row in zip(batch.index.tolist(), result.tokens.tolist()):
                self._hyps[i] = row

    def on_validation_epoch_end(self) -> None:
        if self.detokenize is None or self.dev_references is None or not self._hyps:
            return
        if len(self._hyps) != len(self.dev_references):  # a sanity check ran on part of dev
            return
        hyps = self.detokenize([self._hyps[i] for i in range(len(self._hyps))])
        bleu, _ = corpus_bleu(hyps, [self.dev_references])
        self.log("val/bleu", bleu, prog_bar=True)
        fitting = self.trainer.state.fn == TrainerFn.FITTING and not self.trainer.sanity_checking
        if self.plateau is not None and fitting:
            self.plateau.step(bleu)

    # ------------------------------------------------------------------ optimisation
    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.Adam(self.model.parameters(), lr=self.hparams.lr)
        rates = self.hparams.get("lr_epochs")
        if rates:
            base = self.hparams.lr
            scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda e: rates[min(e, len(rates) - 1)] / base)
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "epoch"}}
        if self.hparams.get("lr_schedule", "fixed") == "plateau":
            # torch's patience is the number of worse epochs tolerated; ours counts the one that halves
            patience = self.hparams.get("lr_plateau_patience", 1) - 1
            self.plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="max", factor=0.5,
                                                                      patience=patience)
            if self._plateau_state is not None:
                self.plateau.load_state_dict(self._plateau_state)
            return optimizer
        halve_from = self.hparams.halve_from
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda e: lr_factor(e, halve_from))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "epoch"}}

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if self.plateau is not None:
            checkpoint["plateau_scheduler"] = self.plateau.state_dict()

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Keep the plateau scheduler's state: Lightning restores the module before it calls
        :meth:`configure_optimizers`, which loads it into the new scheduler."""
        self._plateau_state = checkpoint.get("plateau_scheduler")
        if self.plateau is not None and self._plateau_state is not None:
            self.plateau.load_state_dict(self._plateau_state)


class AtomicCheckpointIO(TorchCheckpointIO):
    """Write checkpoints under a temporary name and rename them into place
    (:func:`flexatt.io.save_torch`), so a kill during a save never leaves a truncated
    ``last.ckpt`` that a resumed run would trust, and a save that fails (a full disk) ends as
    one :class:`~flexatt.errors.OutputError` naming the checkpoint, the earlier one intact."""

    def save_checkpoint(self, checkpoint: dict, path: str | os.PathLike, storage_options: Any = None) -> None:
        save_torch(checkpoint, path)

