"""The tau- and beta-selection rules, model loading and whole-split translation."""

from __future__ import annotations


import numpy as np
import math

import pytest
import torch

from flexatt.data.subwords import EncodedSplit
from flexatt.errors import DataError
from flexatt.data.evalset import EvalSet
from flexatt.checkpoints import load_model
from flexatt.tau_search import dev_grid, log_mean_length, select_beta, select_tau
from flexatt.decoding.translate import DecodeOptions, translate_split
from flexatt.model import build_model
from flexatt.decoding import greedy


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


def test_select_beta_takes_the_smallest_window_at_its_own_tau_within_tolerance():
    # β = 10 has the narrowest window at its own τ but costs 0.6 dev BLEU at τ = ∞
    points = [{"beta": 0.1, "bleu": 21.3, "window": 9.1},
              {"beta": 1.0, "bleu": 21.0, "window": 8.7},
              {"beta": 10.0, "bleu": 20.4, "window": 6.7}]
    assert select_beta(points, reference_bleu=21.0, tolerance=0.5)["beta"] == 1.0
    assert select_beta(points, reference_bleu=21.0, tolerance=0.6)["beta"] == 10.0  # 20.4 ≥ 21.0 − 0.6 exactly
    assert select_beta(points, reference_bleu=22.0, tolerance=0.5) is None


def test_select_beta_ties_prefer_higher_bleu_then_the_smaller_beta():
    points = [{"beta": 100.0, "bleu": 21.0, "window": 6.0}, {"beta": 10.0, "bleu": 20.8, "window": 6.0},
              {"beta": 1000.0, "bleu": 21.0, "window": 6.0}]
    assert select_beta(points, 21.0, 0.5)["beta"] == 100.0
    assert select_beta(points[1:2] + [{"beta": 1.0, "bleu": 20.8, "window": 6.0}], 21.0, 0.5)["beta"] == 1.0


def test_the_dev_grid_adds_log_mean_length_in_order_once():
    assert log_mean_length(24.4) == 3.195
    assert dev_grid([0.8, 1.6, 4.0], 24.4, True) == [0.8, 1.6, 3.195, 4.0]
    assert dev_grid([0.8, 1.6], 24.4, False) == [0.8, 1.6]
    assert dev_grid([0.8, 3.195], 24.4, True) == [0.8, 3.195]


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
    out = translate_split(model, split, _Vocab(), DecodeOptions(tau=1.0, batch_size=4, max_len_ratio=1.0))
    for i, ids in enumerate(src):  # each sentence alone gives the same output and window count
        alone = greedy(model, torch.tensor([ids + [3]]), torch.tensor([len(ids) + 1]),
                       int(len(ids) + 1 + 10), tau=1.0)
        assert out.hypotheses[i] == _Vocab().decode(alone.tokens.tolist())[0]
        assert out.window_sum[i] == int(alone.window_sum[0]) and out.steps[i] == int(alone.steps[0])
    dense = translate_split(model, split, _Vocab(), DecodeOptions(batch_size=4, max_len_ratio=1.0))
    assert np.array_equal(dense.window_sum, dense.steps * dense.src_lengths)
    assert out.mean_window < dense.mean_window


def test_window_is_the_mean_over_sentences_of_their_mean_per_step():
    """2017 paper §5: a sentence's window is averaged over its steps, then over sentences, so
    a long sentence with many steps weighs no more than a short one."""
    from flexatt.decoding import mean_window, step_weighted_window

    window_sum, steps = np.array([4 * 10, 30 * 40]), np.array([4, 40])  # windows 10 and 30
    assert mean_window(window_sum, steps) == pytest.approx(20.0)
    assert step_weighted_window(window_sum, steps) == pytest.approx(1240 / 44)


@pytest.mark.parametrize("beam_size", [1, 3])
def test_global_window_equals_mean_source_length_and_flexible_at_inf_equals_global(beam_size):
    """Global attention scores every source position (EOS included), so its window is the mean
    source length, whatever the number of steps per sentence; every model at τ = ∞ matches it."""
    cfg = {"emb_size": 8, "hidden_size": 8, "att_size": 8, "readout_size": 8, "dropout": 0.0}
    rng = np.random.default_rng(3)
    src = [rng.integers(4, 12, rng.integers(1, 15)).tolist() for _ in range(11)]
    split = EncodedSplit.from_lists(src, [[5]] * 11)
    mean_len = float(np.mean([len(s) + 1 for s in src]))
    windows = {}
    for attention in ("global", "flexible", "flexible_sact", "sact"):
        torch.manual_seed(0)
        model = build_model({"attention": attention, **cfg}, 12, 12).eval()
        out = translate_split(model, split, _Vocab(), DecodeOptions(beam_size=beam_size, batch_size=4))
        windows[attention] = out.mean_window
        assert out.mean_window == pytest.approx(mean_len, abs=1e-9), attention
    assert len(set(windows.values())) == 1


def test_load_model_refuses_corrupt_checkpoint(tmp_path):
    bad = tmp_path / "x.ckpt"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(DataError, match="x.ckpt: not a readable checkpoint"):
        load_model(bad)


def test_eval_set_names_missing_files(tmp_path):
    with pytest.raises(DataError, match="test.npz: encoded split not found"):
        EvalSet.load(tmp_path, "test")


def test_tau_search_bisects_between_the_largest_failing_and_smallest_passing_tau():
    """The grid misses the knee (every grid τ but log S̄ fails); four bisections on log τ find a
    τ whose window is smaller than log S̄'s, and the selection takes it."""
    from flexatt.tau_search import search_points

    calls = []

    def point(tau):  # window and BLEU grow with τ; the knee is at τ = 2.2
        calls.append(tau)
        return {"tau": tau, "window": 4.0 * tau, "bleu": 20.0 if tau >= 2.2 else 15.0}

    grid = [0.8, 1.0, 1.6, 3.5]
    points = search_points(point, grid, reference_bleu=20.0, tolerance=0.5, steps=4)
    searched = [p["tau"] for p in points if p["source"] == "search"]
    assert calls[:4] == grid and len(searched) == 4
    assert all(1.6 < t < 3.5 for t in searched)
    assert [p["tau"] for p in points] == sorted(p["tau"] for p in points)
    chosen = select_tau(points, 20.0, 0.5)
    assert 2.2 <= chosen["tau"] <= 2.2 * (3.5 / 1.6) ** (2 ** -4) * 1.001  # the final bracket's width
    assert chosen["tau"] == min(t for t in searched if t >= 2.2)
    # where no τ of the grid passes, τ doubles above it until one does, then the bracket is bisected
    above = search_points(point, [0.8, 1.0], 20.0, 0.5, steps=4)
    assert [p["tau"] for p in above if p["source"] == "above grid"] == [2.0, 4.0]
    assert all(2.0 < p["tau"] < 4.0 for p in above if p["source"] == "search")
    assert 2.2 <= select_tau(above, 20.0, 0.5)["tau"] < 4.0
    # a curve that never passes: at most BELOW_GRID_STEPS doublings, no bisection, no τ selected
    from flexatt.tau_search import BELOW_GRID_STEPS

    never = search_points(lambda tau: {"tau": tau, "window": tau, "bleu": 10.0}, [1.0], 20.0, 0.5, steps=4)
    assert [p["tau"] for p in never] == [round(2.0 ** k, 4) for k in range(BELOW_GRID_STEPS + 1)]
    assert select_tau(never, 20.0, 0.5) is None


def test_tau_search_goes_below_the_grid_when_its_smallest_tau_passes():
    """A grid whose every τ passes would hold the selection at its smallest τ: τ is halved until
    a point fails, then the bracket is bisected, so the knee below the grid is found."""
    from flexatt.tau_search import BELOW_GRID_STEPS, search_points

    def point(tau):  # the knee at τ = 0.3, below the grid
        return {"tau": tau, "window": 4.0 * tau, "bleu": 20.0 if tau >= 0.3 else 15.0}

    points = search_points(point, [0.8, 1.0, 1.6], reference_bleu=20.0, tolerance=0.5, steps=4)
    below = [p["tau"] for p in points if p["source"] == "below grid"]
    assert below == [0.2, 0.4]  # 0.8 / 2 passes, 0.8 / 4 fails
    assert all(0.2 < p["tau"] < 0.4 for p in points if p["source"] == "search")
    assert 0.3 <= select_tau(points, 20.0, 0.5)["tau"] < 0.4
    # a curve that never fails: at most BELOW_GRID_STEPS halvings, no bisection
    flat = search_points(lambda tau: {"tau": tau, "window": tau, "bleu": 20.0}, [1.0], 20.0, 0.5, steps=4)
    assert [p["tau"] for p in flat] == sorted(round(2.0 ** -k, 4) for k in range(BELOW_GRID_STEPS + 1))


@pytest.mark.parametrize("known, upward, expected, decoded", [
    ([0.8, 1.6, 3.2], False, (1.6, 3.2), []),            # the grid brackets the knee
    ([3.2, 6.4], False, (1.6, 3.2), [1.6]),              # halved below the smallest τ until one fails
    ([0.5, 1.0], False, (None, None), []),               # no τ passes and no search upward
    ([0.5, 1.0], True, (1.0, 2.0), [2.0]),               # multiplied until one passes
    ([math.inf, 0.5], True, (1.0, 2.0), [1.0, 2.0]),     # τ = ∞ brackets nothing
])
def test_the_bracket_is_shared_by_the_tau_search_and_the_window_match(known, upward, expected, decoded):
    """:func:`flexatt.tau_search.bracket` for a property that holds from τ = 2 on: the largest
    failing and smallest passing finite τ, widened by the factor where the known points do not
    bracket (×2 here), decoding each new τ once."""
    from flexatt.tau_search import bracket

    points = [{"tau": t} for t in known]
    new = []

    def decode(tau):
        new.append(tau)
        points.append({"tau": tau})
        return points[-1]

    assert bracket(points, lambda p: p["tau"] >= 2.0, decode, factor=2.0, max_expand=6, upward=upward) == expected
    assert new == decoded


@pytest.mark.parametrize("bleu, reference, tolerance, within", [
    (31.99, 32.49, 0.5, True), (31.98, 32.49, 0.5, False), (20.0, 20.0, 0.0, True), (21.0, 20.0, 0.5, True)])
def test_the_tolerance_is_read_on_the_two_decimals_scores_are_kept_to(bleu, reference, tolerance, within):
    """31.99 ≥ 32.49 − 0.5 is false in binary floating point; a BLEU exactly at the tolerance passes."""
    from flexatt.tau_search import within_tolerance

    assert within_tolerance(bleu, reference, tolerance) is within
    assert (select_tau([{"tau": 1.0, "window": 3.0, "bleu": bleu}], reference, tolerance) is not None) is within
