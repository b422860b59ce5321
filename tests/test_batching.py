"""Length-grouped batching, padding with BOS/EOS, and the per-epoch seeded order."""

from __future__ import annotations

import numpy as np

from flexatt.data.batching import LengthGroupedBatches, ParallelData, collate
from flexatt.data.subwords import BOS_ID, EOS_ID, PAD_ID, EncodedSplit


def test_collate_adds_eos_to_source_and_bos_eos_to_target():
    items = [(np.array([5, 6, 7]), np.array([8]), 0), (np.array([9]), np.array([10, 11]), 4)]
    batch = collate(items)
    assert batch.src.tolist() == [[5, 6, 7, EOS_ID], [9, EOS_ID, PAD_ID, PAD_ID]]
    assert batch.src_len.tolist() == [4, 2]
    assert batch.tgt_in.tolist() == [[BOS_ID, 8, PAD_ID], [BOS_ID, 10, 11]]
    assert batch.tgt_out.tolist() == [[8, EOS_ID, PAD_ID], [10, 11, EOS_ID]]
    assert batch.index.tolist() == [0, 4] and batch.n_tgt_tokens == 5


def test_batches_cover_every_pair_once_grouped_by_length():
    rng = np.random.default_rng(0)
    src_len, tgt_len = rng.integers(1, 40, 500), rng.integers(1, 40, 500)
    sampler = LengthGroupedBatches(src_len, tgt_len, batch_size=64, seed=1)
    batches = list(sampler)
    assert sorted(i for b in batches for i in b) == list(range(500))
    assert all(len(b) == 64 for b in batches if len(b) != 500 % 64)
    for b in batches:  # within a batch, source lengths span a narrow band
        assert np.all(np.diff(src_len[b]) >= 0)


def test_batch_order_is_seeded_per_epoch():
    lengths = np.arange(300) % 17
    a = LengthGroupedBatches(lengths, lengths, 10, seed=3)
    b = LengthGroupedBatches(lengths, lengths, 10, seed=3)
    first = list(a)
    assert first == list(b)
    a.set_epoch(1)
    assert list(a) != first and sorted(map(tuple, a)) == sorted(map(tuple, first))
    fixed = LengthGroupedBatches(lengths, lengths, 10, shuffle=False)
    assert list(fixed) == fixed.batches


def test_ranks_take_disjoint_equal_shares():
    lengths = np.arange(205)
    ranks = [LengthGroupedBatches(lengths, lengths, 10, seed=0, world_size=2, rank=r) for r in (0, 1)]
    shares = [list(r) for r in ranks]
    assert len(shares[0]) == len(shares[1]) == len(ranks[0]) == 10
    seen = [i for share in shares for b in share for i in b]
    assert len(seen) == len(set(seen))


def test_parallel_data_items():
    split = EncodedSplit.from_lists([[4, 5], [6]], [[7], [8, 9]])
    data = ParallelData(split)
    src, tgt, i = data[1]
    assert src.tolist() == [6] and tgt.tolist() == [8, 9] and i == 1 and len(data) == 2
