"""What is particular to the grouped backend (flexatt.decoding.grouped): one step on any row
layout equals the model's step bit for bit, the cache's reorders compose without copying, the
doubled concat score is the scorer's, the score function sees exactly the reported window, and
the stages' entry point gives the eager translation. The searches against the eager backend are
the contract suite's (tests/test_decoding_contract.py).

The models are the half-trained copy models of tests/test_search.py."""

from __future__ import annotations


import pytest
import torch

from flexatt.decoding import grouped
from flexatt.attention import AttentionCache
from flexatt.data.subwords import BOS_ID, PAD_ID
from flexatt.decoding import beam_search, greedy
from test_search import ScoreCounter, hyps, sources, tiny_model

pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.fixture(autouse=True)
def fast_path_on(monkeypatch):
    """This module tests the fast path: on even where the environment turns it off (CI runs the
    decoding tests once with ``FLEXATT_FUSED=0``)."""
    monkeypatch.delenv("FLEXATT_FUSED", raising=False)



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


@pytest.mark.parametrize("attention,tau", [("flexible", 0.5), ("flexible_sact", 0.3), ("flexible", 2.0)])
def test_the_score_function_sees_exactly_the_reported_window(attention, tau):
    """Windowed scoring, as for the eager step (tests/test_search.py): the key rows handed to the
    score function are window_sum.sum(), in beam search and in greedy search. (The dense path
    scores S_max slots per row against one key row per sentence and reports S_i per row.)"""
    model = tiny_model(attention, seed=2)
    src, src_len = sources()
    counter = ScoreCounter(model.decoder.attention.scorer)
    result = beam_search(model, src, src_len, 10, 5, tau=tau, backend="grouped")
    assert counter.rows == int(result.window_sum.sum()) > 0
    counter.rows = 0
    g = greedy(model, src, src_len, 10, tau, backend="grouped")
    assert counter.rows == int(g.window_sum.sum())


@pytest.mark.parametrize("attention,tau", [("global", None), ("flexible", 0.6), ("flexible", None), ("sact", None)])
@pytest.mark.parametrize("rows", [[0, 0, 1, 2, 2, 2], [1, 1, 0, 0], [2], [0, 1, 2]])
def test_one_step_on_any_row_layout_equals_the_models_step(attention, tau, rows):
    """decode_step on rows in equal groups (the grouped attention) and in unequal ones (the
    eager attention on the per-row cache) against the model's step on the gathered cache."""
    model = tiny_model(attention, seed=4)
    src, src_len = sources([7, 3, 9], seed=8)
    fast = grouped.GroupedStepper(model)
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
            cache = grouped.GroupedCache(cache.base, cache.rows.index_select(0, torch.tensor(rows)))
            ref_cache = ref_cache.index_select(torch.tensor(rows))
            rows = list(range(len(rows)))
            prev = out[0].argmax(-1)


def test_grouped_cache_reorders_compose_without_copying():
    base = AttentionCache(torch.randn(3, 4, 2), torch.randn(3, 4, 6), torch.ones(3, 4, dtype=torch.bool),
                          torch.tensor([4, 4, 4]))
    cache = grouped.GroupedCache(base, torch.arange(3))
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
        fast = grouped.additive_scores(q.mul(2.0), keys.mul(2.0), scorer.v_a.weight.view(-1))
    assert torch.equal(fast, ref)


def test_negative_tau_is_refused():
    model = tiny_model("flexible", seed=1)
    src, src_len = sources()
    with pytest.raises(ValueError, match="tau must be >= 0"):
        beam_search(model, src, src_len, 5, 3, tau=-1.0, backend="grouped")


@pytest.mark.parametrize("attention,tau,beam", [("flexible", 0.8, 5), ("global", None, 5), ("flexible", 1.2, 1)])
def test_translate_split_gives_the_eager_translation(attention, tau, beam, monkeypatch):
    """The stages' entry point (translate_split: length-grouped batches, the stages' traces) with
    the grouped backend, against the same call on the eager backend."""
    import numpy as np

    from flexatt.data.subwords import EncodedSplit
    from flexatt.evaluation import translate_split

    class Ids:
        def decode(self, rows):
            return [" ".join(str(i) for i in row if i != PAD_ID) for row in rows]

    model = tiny_model(attention, seed=3)
    rng = np.random.default_rng(2)
    split = EncodedSplit.from_lists([rng.integers(4, 12, rng.integers(2, 10)).tolist() for _ in range(11)],
                                    [[5]] * 11)
    kwargs = dict(tau=tau, beam_size=beam, batch_size=4, trace_indices={0, 5, 9})
    fast = translate_split(model, split, Ids(), backend="grouped", **kwargs)
    eager = translate_split(model, split, Ids(), backend="eager", **kwargs)
    assert fast.decoded_by["backend"] == "grouped" and eager.decoded_by["backend"] == "eager"
    assert fast.hypotheses == eager.hypotheses
    assert np.array_equal(fast.window_sum, eager.window_sum) and np.array_equal(fast.steps, eager.steps)
    assert sorted(fast.traces) == sorted(eager.traces) == [0, 5, 9]
    for i in eager.traces:
        f, e = fast.traces[i], eager.traces[i]
        assert torch.equal(f.window, e.window) and torch.equal(f.span_lo, e.span_lo)
        assert torch.equal(f.attention, e.attention) and torch.equal(f.position, e.position)
        assert e.g is None or torch.equal(f.g, e.g)
