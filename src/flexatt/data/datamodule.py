"""The encoded train and dev splits as a LightningDataModule."""

from __future__ import annotations

import os
from pathlib import Path

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader

from flexatt.data.batching import LengthGroupedBatches, ParallelData, collate
from flexatt.data.subwords import EncodedSplit


class TranslationData(pl.LightningDataModule):
    """The encoded train and dev splits, batched by length (rank-aware under DDP).

    Each DataLoader has a generator of its own: a DataLoader draws a seed for its workers
    whenever an iterator over it is made, and with no generator it draws it from torch's global
    one, the stream the model's dropout masks come from. Lightning makes the first epoch's
    iterator before the epoch's reseed (:meth:`flexatt.task.TranslationTask.on_train_epoch_start`)
    and later epochs' after it, so the first epoch of a run resumed from a checkpoint would draw
    every dropout mask one step off the stream an uninterrupted run draws them from."""

    def __init__(self, tok_dir: str | os.PathLike, batch_size: int, seed: int, eval_batch_size: int = 100):
        super().__init__()
        self.tok_dir = Path(tok_dir)
        self.batch_size, self.eval_batch_size, self.seed = batch_size, eval_batch_size, seed
        self.train = EncodedSplit.load(self.tok_dir / "train.npz")
        self.dev = EncodedSplit.load(self.tok_dir / "dev.npz")

    def train_dataloader(self) -> DataLoader:
        world = self.trainer.world_size if self.trainer else 1
        rank = self.trainer.global_rank if self.trainer else 0
        sampler = LengthGroupedBatches(self.train.src_lengths, self.train.tgt_lengths, self.batch_size,
                                       shuffle=True, seed=self.seed, world_size=world, rank=rank)
        return DataLoader(ParallelData(self.train), batch_sampler=sampler, collate_fn=collate,
                          generator=torch.Generator().manual_seed(self.seed))

    def val_dataloader(self) -> DataLoader:
        sampler = LengthGroupedBatches(self.dev.src_lengths, self.dev.tgt_lengths, self.eval_batch_size,
                                       shuffle=False)
        return DataLoader(ParallelData(self.dev), batch_sampler=sampler, collate_fn=collate,
                          generator=torch.Generator().manual_seed(self.seed))
