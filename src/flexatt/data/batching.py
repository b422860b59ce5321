"""Batches of sentence pairs, grouped by length, for training and decoding.

As in the papers (docs/method.md, Training and decoding): pairs are sorted by length, cut into
batches of ``batch_size`` pairs, and the order of the batches is shuffled every epoch (seeded, so
a run repeats exactly, and each data-parallel rank takes every ``world_size``-th batch of the same
order).

Tensor layout of a :class:`Batch`::

    src      batch x S   source ids followed by EOS, right-padded with PAD
    src_len  batch       true source lengths (EOS included)
    tgt_in   batch x T   BOS followed by the target ids (the decoder's feedback input)
    tgt_out  batch x T   the target ids followed by EOS (what the decoder predicts)
    index    batch       each pair's position in its split
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import Dataset, Sampler

from flexatt.data.subwords import BOS_ID, EOS_ID, PAD_ID, EncodedSplit


@dataclass
class Batch:
    src: torch.Tensor
    src_len: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor
    index: torch.Tensor

    @property
    def n_tgt_tokens(self) -> int:
        """Target tokens to predict (EOS included, padding excluded)."""
        return int((self.tgt_out != PAD_ID).sum())

    def to(self, device: torch.device | str) -> Batch:
        return Batch(*(t.to(device) for t in (self.src, self.src_len, self.tgt_in, self.tgt_out, self.index)))

    def __len__(self) -> int:
        return self.src.size(0)


class ParallelData(Dataset):
    """An :class:`EncodedSplit` as a dataset of ``(src ids, tgt ids, index)`` items."""

    def __init__(self, split: EncodedSplit):
        self.split = split

    def __len__(self) -> int:
        return len(self.split)

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray, int]:
        return self.split.src(i), self.split.tgt(i), i


def collate(items: Sequence[tuple[np.ndarray, np.ndarray, int]]) -> Batch:
    """Pad a list of items into a :class:`Batch` (EOS appended to the source, BOS/EOS to the target)."""
    n = len(items)
    s_max = max(len(s) for s, _, _ in items) + 1
    t_max = max(len(t) for _, t, _ in items) + 1
    src = torch.full((n, s_max), PAD_ID, dtype=torch.long)
    tgt_in = torch.full((n, t_max), PAD_ID, dtype=torch.long)
    tgt_out = torch.full((n, t_max), PAD_ID, dtype=torch.long)
    src_len = torch.empty(n, dtype=torch.long)
    for row, (s, t, _) in enumerate(items):
        ls, lt = len(s), len(t)
        src[row, :ls] = torch.from_numpy(s.astype(np.int64))
        src[row, ls] = EOS_ID
        src_len[row] = ls + 1
        tgt_in[row, 0] = BOS_ID
        tgt_in[row, 1:lt + 1] = torch.from_numpy(t.astype(np.int64))
        tgt_out[row, :lt] = tgt_in[row, 1:lt + 1]
        tgt_out[row, lt] = EOS_ID
    index = torch.tensor([i for _, _, i in items], dtype=torch.long)
    return Batch(src, src_len, tgt_in, tgt_out, index)


class _EpochSetter:
    """The ``sampler`` attribute of a :class:`LengthGroupedBatches`: forwards ``set_epoch``.

    Lightning sets the epoch of a DataLoader's ``sampler`` and of its
    ``batch_sampler.sampler`` at the start of every training epoch (including the first one
    after a resume), never of the batch sampler itself; a batch sampler given to a DataLoader
    is reached only through this attribute."""

    def __init__(self, owner: LengthGroupedBatches):
        self._owner = owner

    def set_epoch(self, epoch: int) -> None:
        self._owner.set_epoch(epoch)


class LengthGroupedBatches(Sampler[list[int]]):
    """Batches of similar-length pairs; batch order shuffled per epoch (or kept, for decoding).

    Given to a DataLoader as its ``batch_sampler``; under a Lightning Trainer the epoch is set
    through the ``sampler`` attribute (see :class:`_EpochSetter`), with or without
    ``use_distributed_sampler``, so epoch ``e`` sees the order of ``seed + e``.

    Args:
        src_lengths, tgt_lengths: lengths of every pair in the split.
        batch_size: pairs per batch.
        shuffle: shuffle the batch order, with ``seed + epoch`` (see :meth:`set_epoch`).
        world_size, rank: for data-parallel training: rank ``r`` takes batches ``r, r + W, …`` of
            the shuffled order, truncated so that every rank has the same number of batches.
    """

    def __init__(self, src_lengths: np.ndarray, tgt_lengths: np.ndarray, batch_size: int,
                 shuffle: bool = True, seed: int = 0, world_size: int = 1, rank: int = 0):
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        self.order = np.lexsort((np.arange(len(src_lengths)), tgt_lengths, src_lengths))  # stable
        self.batch_size, self.n_batches = batch_size, -(-len(self.order) // batch_size)
        self.shuffle, self.seed, self.epoch = shuffle, seed, 0
        self.world_size, self.rank = world_size, rank
        self.sampler = _EpochSetter(self)

    def set_epoch(self, epoch: int) -> None:
        """The 0-based epoch whose order :meth:`__iter__` gives (Lightning calls it through
        ``self.sampler`` at the start of every training epoch)."""
        self.epoch = epoch

    def __iter__(self) -> Iterator[list[int]]:
        """This rank's batches in the order of the current epoch.

        A generator: the order is drawn when the first batch is requested, not when the
        iterator is made. Lightning makes the training DataLoader's first iterator before it
        sets the epoch of a fit's first epoch (a resumed run's included)."""
        batches = list(range(self.n_batches))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(batches)
        usable = len(batches) - len(batches) % self.world_size if self.world_size > 1 else len(batches)
        for b in batches[self.rank:usable:self.world_size]:
            yield self.batch(b)

    def batch(self, b: int) -> list[int]:
        """The pair indices of batch ``b`` of the length-sorted order (the ``b``-th ``batch_size`` pairs)."""
        return self.order[b * self.batch_size:(b + 1) * self.batch_size].tolist()

    @property
    def batches(self) -> list[list[int]]:
        """Every batch in length-sorted order (as :meth:`__iter__` gives them without shuffling)."""
        return [self.batch(b) for b in range(self.n_batches)]

    def __len__(self) -> int:
        return self.n_batches // self.world_size if self.world_size > 1 else self.n_batches
