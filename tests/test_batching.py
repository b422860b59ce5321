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


def test_batch_order_golden():
    """The order is the seeded shuffle of the length-sorted batches: a run's batches, and so its
    results, do not depend on how the sampler stores them."""
    src, tgt = np.array([3, 1, 2, 1, 3, 2, 1]), np.array([1, 1, 1, 2, 1, 1, 1])
    sampler = LengthGroupedBatches(src, tgt, 2, seed=5)
    assert sampler.batches == [[1, 6], [3, 2], [5, 0], [4]]
    assert list(sampler) == [[1, 6], [3, 2], [4], [5, 0]]
    sampler.set_epoch(1)
    assert list(sampler) == [[4], [5, 0], [3, 2], [1, 6]]


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


# ----------------------------------------------------------------------------- with a Lightning Trainer


class _Recorder:
    """A LightningModule (built lazily: Lightning is slow to import) that trains one scalar and
    records the pair indices of every training batch, by epoch."""

    @staticmethod
    def create():
        import pytorch_lightning as pl
        import torch

        class Recorder(pl.LightningModule):
            def __init__(self) -> None:
                super().__init__()
                self.w = torch.nn.Parameter(torch.zeros(()))
                self.seen: dict[int, list[list[int]]] = {}

            def training_step(self, batch, batch_idx):
                self.seen.setdefault(self.current_epoch, []).append(batch.index.tolist())
                return (self.w - batch.src.float().mean()) ** 2

            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.1)

        return Recorder()


def _tiny_tok_dir(path):
    """``train.npz`` (120 pairs of lengths 1..12) and ``dev.npz`` (4 pairs) in ``path``."""
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 13, 120)
    pairs = [[5 + int(i) % 7] * int(n) for i, n in enumerate(lengths)]
    EncodedSplit.from_lists(pairs, pairs).save(path / "train.npz")
    EncodedSplit.from_lists(pairs[:4], pairs[:4]).save(path / "dev.npz")
    return path


def _fit(tok_dir, root, epochs: int, seed: int, ckpt_path=None) -> dict[int, list[list[int]]]:
    """Fit the recorder with the Trainer settings of :func:`flexatt.trainer.build_trainer` that
    concern the data (``use_distributed_sampler=False``, epoch-end checkpoints)."""
    import pytorch_lightning as pl
    from pytorch_lightning.callbacks import ModelCheckpoint

    from flexatt.data.datamodule import TranslationData

    data = TranslationData(tok_dir, batch_size=10, seed=seed)
    module = _Recorder.create()
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_epochs=epochs, logger=False,
                         enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
                         use_distributed_sampler=False, default_root_dir=str(root),
                         callbacks=[ModelCheckpoint(dirpath=root, save_last=True)])
    trainer.fit(module, train_dataloaders=data.train_dataloader(), ckpt_path=ckpt_path)
    return module.seen


def _expected(data_dir, seed: int, epoch: int) -> list[list[int]]:
    split = EncodedSplit.load(data_dir / "train.npz")
    sampler = LengthGroupedBatches(split.src_lengths, split.tgt_lengths, 10, seed=seed)
    sampler.set_epoch(epoch)
    return list(sampler)


def test_trainer_reshuffles_the_batch_order_every_epoch(tmp_path):
    """A real ``Trainer.fit``: every epoch sees all training pairs, in a new batch order, the
    one of ``seed + epoch``; a fit resumed from the epoch-end checkpoint goes on with the
    orders of the epochs it has not done."""
    tok = _tiny_tok_dir(tmp_path)
    seen = _fit(tok, tmp_path / "run", epochs=3, seed=7)
    assert sorted(seen) == [0, 1, 2]
    for epoch, batches in seen.items():
        assert sorted(i for b in batches for i in b) == list(range(120)), epoch
        assert batches == _expected(tok, 7, epoch), epoch
    assert seen[0] != seen[1] and seen[1] != seen[2] and seen[0] != seen[2]

    resumed = _fit(tok, tmp_path / "run", epochs=5, seed=7, ckpt_path=str(tmp_path / "run/last.ckpt"))
    assert sorted(resumed) == [3, 4]
    assert all(resumed[e] == _expected(tok, 7, e) for e in (3, 4))
