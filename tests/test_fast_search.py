"""The grouped search step (flexatt.fast_search.FastDecoder, ``compiled=False``) against the eager
reference (flexatt.search with the model's own decode_step): the same arithmetic on the same rows, so everything is compared bit for
bit (hypotheses, n-best lists, scores, windows, steps, attention, p_t, g_t, spans) for every
variant the fast step covers; the variants it does not cover fall back to the eager step with
one warning.

The models are the half-trained copy models of tests/test_search.py (vocabulary 12, so beams of
20 see several hypotheses end at every step) and a larger random one with padded batches."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

from flexatt import fast_search
from flexatt.attention import AttentionCache
from flexatt.data.subwords import BOS_ID, PAD_ID
from flexatt.model import build_model
from flexatt.search import beam_search, greedy
from test_search import LENGTHS, ScoreCounter, hyps, sources, tiny_model

pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.fixture(autouse=True)
def fast_path_on(monkeypatch):
    """This module tests the fast path: on even where the environment turns it off (CI runs the
    decoding tests once with ``FLEXATT_FUSED=0``)."""
    monkeypatch.delenv("FLEXATT_FUSED", raising=False)

# (attention, tau) the fast step covers: tau only matters for the flexible variants
COVERED = [("global", None), ("flexible", None), ("flexible", math.inf), ("flexible", 0.3),
           ("flexible", 0.8), ("flexible", 2.0), ("flexible_sact", 0.8), ("flexible_sact", None),
           ("sact", None)]
BATCHES = {"one": [7], "padded": LENGTHS * 2, "two": [9, 2]}


def assert_same_search(eager, fast, nbest=False):
    """Same hypotheses (token for token), windows, steps and scores (bit for bit)."""
    assert hyps(fast) == hyps(eager)
    if nbest:
        assert hyps(fast, nbest=True) == hyps(eager, nbest=True)
    assert fast.window_sum.tolist() == eager.window_sum.tolist()
    assert fast.steps.tolist() == eager.steps.tolist()
    assert torch.equal(fast.scores, eager.scores)
    assert torch.equal(fast.log_probs, eager.log_probs)


def assert_same_traces(eager, fast):
    """The per-step traces of the best hypotheses, bit for bit."""
    for e, f in zip(eager.traces, fast.traces):
        assert torch.equal(f.tokens, e.tokens)
        assert torch.equal(f.window, e.window)
        assert torch.equal(f.span_lo, e.span_lo) and torch.equal(f.span_hi, e.span_hi)
        assert torch.equal(f.attention, e.attention)
        assert torch.equal(f.position, e.position)
        for name in ("g", "temperature"):
            a, b = getattr(e, name), getattr(f, name)
            assert (a is None) == (b is None)
            if a is not None:
                assert torch.equal(b, a)


@pytest.mark.parametrize("attention,tau", COVERED)
@pytest.mark.parametrize("batch", list(BATCHES))
@pytest.mark.parametrize("k", [1, 5, 20])
def test_beam_search_equals_the_eager_search(attention, tau, batch, k):
    model = tiny_model(attention, seed=1)
    src, src_len = sources(BATCHES[batch], seed=5)
    limit = src_len * 2 + 1
    n_best = min(k, 3)
    eager = beam_search(model, src, src_len, limit, k, tau=tau, n_best=n_best, return_traces=True)
    fast = fast_search.beam_search(model, src, src_len, limit, k, tau=tau, n_best=n_best, return_traces=True,
                                   compiled=False)
    assert_same_search(eager, fast, nbest=True)
    assert_same_traces(eager, fast)


@pytest.mark.parametrize("attention,tau", COVERED)
@pytest.mark.parametrize("batch", list(BATCHES))
def test_greedy_equals_the_eager_search(attention, tau, batch):
    model = tiny_model(attention, seed=2)
    src, src_len = sources(BATCHES[batch], seed=6)
    eager = greedy(model, src, src_len, 12, tau, return_traces=True)
    fast = fast_search.greedy(model, src, src_len, 12, tau, return_traces=True, compiled=False)
    assert_same_search(eager, fast)
    assert_same_traces(eager, fast)
    assert fast.tokens.shape == eager.tokens.shape


@pytest.mark.parametrize("attention,tau", [("global", None), ("flexible", 0.5), ("flexible", None)])
@pytest.mark.parametrize("threads", [1, 2])
def test_a_larger_model_with_padding(attention, tau, threads):
    """A random model of 300 words with real sizes (scores in long float32 sums) and a padded
    batch of 12 sentences, beam 5, on one and two threads: the search of the fast step is the
    eager one."""
    torch.set_num_threads(threads)  # the single_thread fixture restores the count
    torch.manual_seed(3)
    sizes = dict(emb_size=32, hidden_size=48, att_size=40, readout_size=36, dropout=0.0)
    model = build_model({**sizes, "attention": attention}, 300, 300, PAD_ID).eval()
    with torch.no_grad():  # peaked outputs, so that the search is not a sea of near-ties
        model.decoder.W_s.weight.mul_(8.0)
    src, src_len = sources([14, 3, 9, 20, 11, 6, 17, 8, 2, 13, 5, 19], seed=7, vocab=300)
    limit = src_len * 2 + 3
    eager = beam_search(model, src, src_len, limit, 5, tau=tau)
    fast = fast_search.beam_search(model, src, src_len, limit, 5, tau=tau, compiled=False)
    assert_same_search(eager, fast)


@pytest.mark.parametrize("attention,tau", [("flexible", 0.5), ("flexible_sact", 0.3), ("flexible", 2.0)])
def test_the_score_function_sees_exactly_the_reported_window(attention, tau):
    """Windowed scoring, as for the eager step (tests/test_search.py): the key rows handed to the
    score function are window_sum.sum(), in beam search and in greedy search. (The dense path
    scores S_max slots per row against one key row per sentence and reports S_i per row.)"""
    model = tiny_model(attention, seed=2)
    src, src_len = sources()
    counter = ScoreCounter(model.decoder.attention.scorer)
    result = fast_search.beam_search(model, src, src_len, 10, 5, tau=tau, compiled=False)
    assert counter.rows == int(result.window_sum.sum()) > 0
    counter.rows = 0
    g = fast_search.greedy(model, src, src_len, 10, tau, compiled=False)
    assert counter.rows == int(g.window_sum.sum())


@pytest.mark.parametrize("attention,tau", [("global", None), ("flexible", 0.6), ("flexible", None), ("sact", None)])
@pytest.mark.parametrize("rows", [[0, 0, 1, 2, 2, 2], [1, 1, 0, 0], [2], [0, 1, 2]])
def test_one_step_on_any_row_layout_equals_the_models_step(attention, tau, rows):
    """decode_step on rows in equal groups (the grouped attention) and in unequal ones (the
    eager attention on the per-row cache) against the model's step on the gathered cache."""
    model = tiny_model(attention, seed=4)
    src, src_len = sources([7, 3, 9], seed=8)
    fast = fast_search.FastDecoder(model)
    with torch.no_grad():
        cache, state = fast.encode(src, src_len)
        ref_cache, ref_state = model.encode(src, src_len)
        index = torch.tensor(rows)
        prev = torch.tensor([BOS_ID] + [5 + i for i in range(len(rows) - 1)])
        for _ in range(3):  # a few steps, so that p_{t-1} moves
            out = fast.decode_step(prev, state.index_select(index), cache.index_select(index), tau)
            ref = model.decode_step(prev, ref_state.index_select(index), ref_cache.index_select(index), tau)
            assert torch.equal(out[0], ref[0])  # logits
            assert torch.equal(out[2], ref[2])  # weights
            for a, b in zip([*out[3], *out[1].attention, out[1].hidden, out[1].cell],
                            [*ref[3], *ref[1].attention, ref[1].hidden, ref[1].cell]):
                assert (a is None) == (b is None)
                assert a is None or torch.equal(a, b)
            state, ref_state = out[1], ref[1]
            index = torch.arange(len(rows))
            cache = fast_search.GroupedCache(cache.base, cache.rows.index_select(0, torch.tensor(rows)))
            ref_cache = ref_cache.index_select(torch.tensor(rows))
            rows = list(range(len(rows)))
            prev = out[0].argmax(-1)


def test_grouped_cache_reorders_compose_without_copying():
    base = AttentionCache(torch.randn(3, 4, 2), torch.randn(3, 4, 6), torch.ones(3, 4, dtype=torch.bool),
                          torch.tensor([4, 4, 4]))
    cache = fast_search.GroupedCache(base, torch.arange(3))
    expanded = cache.index_select(torch.tensor([0, 0, 1, 1, 2, 2]))
    assert expanded.base is base
    k, groups, row_len, keys2 = expanded.groups()
    assert k == 2 and groups.keys is base.keys and row_len.tolist() == [4] * 6 and keys2 is None
    k, groups, _, _ = expanded.index_select(torch.tensor([2, 3, 4, 5])).groups()
    assert k == 2 and torch.equal(groups.keys, base.keys[1:])
    k, groups, _, _ = expanded.index_select(torch.tensor([0, 1, 2])).groups()  # groups 2 and 1: per row
    assert k == 0 and torch.equal(groups.keys, base.keys[[0, 0, 1]])


@pytest.mark.parametrize("shape", [(3, 1, 5, 24), (2, 4, 7, 13)])
def test_the_doubled_concat_score_is_bit_identical_to_the_scorer(shape):
    n, k, s, d = shape
    torch.manual_seed(0)
    scorer = tiny_model("global").decoder.attention.scorer
    scorer = type(scorer)(4, 6, d)
    q, keys = torch.randn(n, k, 1, d) * 3, torch.randn(n, 1, s, d) * 3
    with torch.no_grad():
        ref = scorer(q, keys, torch.arange(s).unsqueeze(0))
        fast = fast_search.additive_scores(q.mul(2.0), keys.mul(2.0), scorer.v_a.weight.view(-1))
    assert torch.equal(fast, ref)


@pytest.mark.parametrize("attention", ["local_m", "local_p"])
def test_other_variants_fall_back_to_the_eager_step_with_one_warning(attention, monkeypatch):
    monkeypatch.setattr(fast_search, "_warned", set())
    model = tiny_model(attention, seed=1)
    src, src_len = sources()
    with pytest.warns(RuntimeWarning, match="eager step"):
        fast = fast_search.beam_search(model, src, src_len, 10, 5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once only
        fast_search.greedy(model, src, src_len, 10)
    assert_same_search(beam_search(model, src, src_len, 10, 5), fast)
    assert fast_search.decoder_for(model) is model


def test_training_mode_and_the_environment_switch_turn_it_off(monkeypatch):
    model = tiny_model("flexible", seed=1)
    assert isinstance(fast_search.decoder_for(model, compiled=False), fast_search.FastDecoder)
    monkeypatch.setenv("FLEXATT_FUSED", "0")
    assert fast_search.decoder_for(model) is model
    calls = []
    monkeypatch.setattr(fast_search.FastDecoder, "decode_step", lambda *a: calls.append(a))
    monkeypatch.setattr(fast_search.KernelDecoder, "decode_step", lambda *a: calls.append(a))
    src, src_len = sources()
    fast_search.beam_search(model, src, src_len, 5, 3)  # the eager step: never a fast one
    assert calls == []
    with pytest.raises(ValueError, match="FLEXATT_FUSED=0"):
        fast_search.beam_search(model, src, src_len, 5, 3, compiled=True)
    monkeypatch.delenv("FLEXATT_FUSED")
    model.train()
    assert fast_search.unsupported(model) == "the model is in training mode"
    monkeypatch.setattr(fast_search, "_warned", set())
    with pytest.warns(RuntimeWarning, match="training mode: greedy and beam search run the eager step"):
        assert fast_search.decoder_for(model) is model
    model.eval()


def test_negative_tau_is_refused():
    model = tiny_model("flexible", seed=1)
    src, src_len = sources()
    with pytest.raises(ValueError, match="tau must be >= 0"):
        fast_search.beam_search(model, src, src_len, 5, 3, tau=-1.0, compiled=False)


@pytest.mark.parametrize("attention,tau,beam", [("flexible", 0.8, 5), ("global", None, 5), ("flexible", 1.2, 1)])
def test_translate_split_gives_the_eager_translation(attention, tau, beam, monkeypatch):
    """The stages' entry point (translate_split: length-grouped batches, the stages' traces) with
    the grouped step (the compiled one is tested in tests/test_compiled_search.py), against the same call with FLEXATT_FUSED=0 (the eager step)."""
    import numpy as np

    from flexatt.data.subwords import EncodedSplit
    from flexatt.evaluation import translate_split

    class Ids:
        def decode(self, rows):
            return [" ".join(str(i) for i in row if i != PAD_ID) for row in rows]

    monkeypatch.setattr(fast_search.fused, "unsupported", lambda *a: "the grouped step is tested here")
    model = tiny_model(attention, seed=3)
    rng = np.random.default_rng(2)
    split = EncodedSplit.from_lists([rng.integers(4, 12, rng.integers(2, 10)).tolist() for _ in range(11)],
                                    [[5]] * 11)
    kwargs = dict(tau=tau, beam_size=beam, batch_size=4, trace_indices={0, 5, 9})
    fast = translate_split(model, split, Ids(), **kwargs)
    monkeypatch.setenv("FLEXATT_FUSED", "0")
    eager = translate_split(model, split, Ids(), **kwargs)
    assert fast.hypotheses == eager.hypotheses
    assert np.array_equal(fast.window_sum, eager.window_sum) and np.array_equal(fast.steps, eager.steps)
    assert sorted(fast.traces) == sorted(eager.traces) == [0, 5, 9]
    for i in eager.traces:
        f, e = fast.traces[i], eager.traces[i]
        assert torch.equal(f.window, e.window) and torch.equal(f.span_lo, e.span_lo)
        assert torch.equal(f.attention, e.attention) and torch.equal(f.position, e.position)
        assert e.g is None or torch.equal(f.g, e.g)
