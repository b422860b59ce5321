"""The tau-selection rule, model loading and whole-split translation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from flexatt.data.subwords import EncodedSplit
from flexatt.errors import DataError
from flexatt.evaluation import EvalSet, load_model, select_tau, translate_split
from flexatt.model import build_model
from flexatt.search import greedy


def test_select_tau_takes_the_smallest_window_within_tolerance():
    points = [{"tau": 0.8, "window": 5.0, "bleu": 19.0},
              {"tau": 1.0, "window": 6.0, "bleu": 19.6},
              {"tau": 1.2, "window": 7.0, "bleu": 20.1},
              {"tau": 1.6, "window": 9.0, "bleu": 20.4}]
    assert select_tau(points, reference_bleu=20.0, tolerance=0.5)["tau"] == 1.0
    assert select_tau(points, reference_bleu=20.0, tolerance=1.0)["tau"] == 0.8
    assert select_tau(points, reference_bleu=20.5, tolerance=0.0) is None
    assert select_tau(points, reference_bleu=20.4, tolerance=0.0)["tau"] == 1.6


def test_select_tau_ties_prefer_higher_bleu():
    points = [{"tau": 1.0, "window": 6.0, "bleu": 19.8}, {"tau": 1.2, "window": 6.0, "bleu": 20.0}]
    assert select_tau(points, 20.0, 0.5)["tau"] == 1.2


class _Vocab:
    """Ids to space-joined strings, for decoding without SentencePiece."""

    def decode(self, rows):
        return [" ".join(str(i) for i in row if i != 0) for row in rows]


def test_translate_split_restores_order_and_counts_windows():
    torch.manual_seed(0)
    model = build_model({"attention": "flexible", "emb_size": 8, "hidden_size": 8, "att_size": 8,
                         "readout_size": 8, "dropout": 0.0}, 12, 12).eval()
    rng = np.random.default_rng(1)
    src = [rng.integers(4, 12, rng.integers(2, 9)).tolist() for _ in range(13)]
    split = EncodedSplit.from_lists(src, [[5]] * 13)
    out = translate_split(model, split, _Vocab(), tau=1.0, batch_size=4, max_len_ratio=1.0)
    for i, ids in enumerate(src):  # each sentence alone gives the same output and window count
        alone = greedy(model, torch.tensor([ids + [3]]), torch.tensor([len(ids) + 1]),
                       int(len(ids) + 1 + 10), tau=1.0)
        assert out.hypotheses[i] == _Vocab().decode(alone.tokens.tolist())[0]
        assert out.window_sum[i] == int(alone.window_sum[0]) and out.steps[i] == int(alone.steps[0])
    dense = translate_split(model, split, _Vocab(), tau=math.inf, batch_size=4, max_len_ratio=1.0)
    assert np.array_equal(dense.window_sum, dense.steps * dense.src_lengths)
    assert out.mean_window < dense.mean_window


def test_load_model_refuses_corrupt_checkpoint(tmp_path):
    bad = tmp_path / "x.ckpt"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(DataError, match="x.ckpt: not a readable checkpoint"):
        load_model(bad)


def test_eval_set_names_missing_files(tmp_path):
    with pytest.raises(DataError, match="test.npz: encoded split not found"):
        EvalSet.load(tmp_path, "test")
