"""The row map a search decodes with (flexatt.attention.RowMap): the model's own step on a
RowMap, whatever the layout of its rows, equals the step on a copy of the cache per row bit for
bit, for every attention variant; its reorders compose without copying; it reads like a per-row
cache; the score function sees exactly the reported window; whole searches equal the searches on
per-row caches. The kernel against the model's step is the contract suite's
(tests/test_decoding_contract.py).

The models are the half-trained copy models of tests/test_search.py."""

from __future__ import annotations

import math

import pytest
import torch

from flexatt.attention import AttentionCache, RowMap, attention_types
from flexatt.data.subwords import BOS_ID
from flexatt.decoding import beam_search, forced_decode, greedy
from flexatt.decoding.stepper import EagerStepper
from test_search import ScoreCounter, hyps, sources, tiny_model

pytestmark = pytest.mark.usefixtures("single_thread")

#: flexible attention's threshold per variant (the others ignore it)
TAUS = {"flexible": (math.inf, 0.6), "flexible_sact": (math.inf, 0.4)}


def variant_taus():
    return [(a, t) for a in attention_types() for t in TAUS.get(a, (math.inf,))]


@pytest.fixture
def per_row(monkeypatch):
    """Make the eager backend decode on a copy of the cache per row (the searches' reorders then
    gather every row's keys and h̄): the arithmetic a RowMap must reproduce."""
    monkeypatch.setattr(EagerStepper, "encode", lambda self, src, src_len: self.model.encode(src, src_len))


def assert_same_search(ref, out, nbest=False):
    """Same hypotheses (token for token), windows, steps and scores (bit for bit)."""
    assert hyps(out) == hyps(ref)
    if nbest:
        assert hyps(out, nbest=True) == hyps(ref, nbest=True)
    assert out.window_sum.tolist() == ref.window_sum.tolist()
    assert out.steps.tolist() == ref.steps.tolist()
    for name in ("scores", "log_probs", "attention"):
        a, b = getattr(ref, name), getattr(out, name)
        assert (a is None) == (b is None) and (a is None or torch.equal(a, b)), name


def assert_same_traces(ref, out):
    """The per-step traces of the best hypotheses, bit for bit."""
    for e, f in zip(ref.traces, out.traces):
        for name in ("tokens", "window", "span_lo", "span_hi", "attention", "position", "g", "temperature"):
            a, b = getattr(e, name, None), getattr(f, name, None)
            assert (a is None) == (b is None) and (a is None or torch.equal(a, b)), name


@pytest.mark.parametrize("attention,tau", variant_taus())
@pytest.mark.parametrize("rows", [[0, 0, 1, 1, 2, 2], [0, 0, 1, 2, 2, 2], [1, 1, 0, 0], [2], [0, 1, 2], [2, 0]])
def test_one_step_on_any_row_layout_equals_the_step_on_a_copy_per_row(attention, tau, rows):
    """decode_step on rows in equal groups (computed against the groups' sentences) and in
    unequal ones (a copy per row) against the model's step on the gathered cache: logits,
    weights, stats and state bit for bit, over a few steps so that p_{t-1} moves."""
    model = tiny_model(attention, seed=4)
    src, src_len = sources([7, 3, 9], seed=8)
    with torch.no_grad():
        ref_cache, state = model.encode(src, src_len)
        cache = ref_cache.by_row()
        index = torch.tensor(rows)
        ref_state = state = state.index_select(index)
        cache, ref_cache = cache.index_select(index), ref_cache.index_select(index)
        prev = torch.tensor([BOS_ID] + [5 + i for i in range(len(rows) - 1)])
        for _ in range(3):
            out = model.decode_step(prev, state, cache, tau)
            ref = model.decode_step(prev, ref_state, ref_cache, tau)
            assert torch.equal(out[0], ref[0])  # logits
            assert torch.equal(out[2], ref[2])  # weights
            for a, b in zip([*out[3], *out[1].attention, out[1].hidden, out[1].cell],
                            [*ref[3], *ref[1].attention, ref[1].hidden, ref[1].cell]):
                assert (a is None) == (b is None)
                assert a is None or torch.equal(a, b)
            state, ref_state, prev = out[1], ref[1], out[0].argmax(-1)


@pytest.mark.parametrize("attention,tau", variant_taus())
def test_searches_on_a_row_map_equal_the_searches_on_a_copy_per_row(attention, tau, monkeypatch):
    """Greedy, beam (n-best included) and forced decoding with the eager backend, on a RowMap
    and on per-row copies: the same hypotheses, scores, windows and traces, bit for bit."""
    model = tiny_model(attention, seed=2)
    src, src_len = sources()
    runs = {}
    for mode in ("row_map", "per_row"):
        if mode == "per_row":
            monkeypatch.setattr(EagerStepper, "encode", lambda self, s, n: self.model.encode(s, n))
        beam = beam_search(model, src, src_len, 10, 5, tau=tau, n_best=3, return_traces=True, backend="eager")
        g = greedy(model, src, src_len, 10, tau, return_traces=True, backend="eager")
        tgt_out = beam.tokens[:, :6].clone()
        tgt_in = torch.cat([torch.full((src.size(0), 1), BOS_ID), tgt_out[:, :-1]], 1)
        f = forced_decode(model, src, src_len, tgt_in, tgt_out, tau, return_traces=True, backend="eager")
        runs[mode] = (beam, g, f)
    for ref, out in zip(runs["per_row"], runs["row_map"]):
        assert_same_search(ref, out, nbest=out.nbest is not None)
        assert_same_traces(ref, out)


def test_reorders_compose_without_copying():
    base = AttentionCache(torch.randn(3, 4, 2), torch.randn(3, 4, 6), torch.ones(3, 4, dtype=torch.bool),
                          torch.tensor([4, 3, 4]))
    cache = base.by_row()
    expanded = cache.index_select(torch.tensor([0, 0, 1, 1, 2, 2]))
    assert isinstance(expanded, RowMap) and expanded.base is base
    k, groups = expanded.layout()
    assert k == 2 and groups is base and expanded.row_lengths.tolist() == [4, 4, 3, 3, 4, 4]
    k, groups = expanded.index_select(torch.tensor([2, 3, 4, 5])).layout()
    assert k == 2 and torch.equal(groups.keys, base.keys[1:])
    k, groups = expanded.index_select(torch.tensor([0, 1, 2])).layout()  # groups of 2 and 1: per row
    assert k == 1 and torch.equal(groups.keys, base.keys[[0, 0, 1]])


def test_a_row_map_reads_like_a_copy_per_row():
    """Code written against a per-row cache (``cache.keys``, ``mask``, ``lengths``, ``values``)
    sees the rows' own tensors."""
    base = AttentionCache(torch.randn(3, 4, 2), torch.randn(3, 4, 6), torch.rand(3, 4) > 0.3, torch.tensor([4, 2, 3]))
    index = torch.tensor([2, 2, 0, 1])
    mapped, copied = base.by_row().index_select(index), base.index_select(index)
    for name in ("keys", "values", "mask", "lengths"):
        assert torch.equal(getattr(mapped, name), getattr(copied, name)), name
    assert mapped.src_len == copied.src_len == 4


@pytest.mark.parametrize("attention,tau", [("flexible", 0.5), ("flexible_sact", 0.3), ("flexible", 2.0),
                                           ("local_m", math.inf), ("local_p", math.inf)])
def test_the_score_function_sees_exactly_the_reported_window(attention, tau):
    """Windowed scoring: the key rows handed to the score function are window_sum.sum(), in beam
    search and in greedy search. (The dense path scores S_max slots per row against one key row
    per sentence and reports S_i per row.)"""
    model = tiny_model(attention, seed=2)
    src, src_len = sources()
    counter = ScoreCounter(model.decoder.attention.scorer)
    result = beam_search(model, src, src_len, 10, 5, tau=tau, backend="eager")
    assert counter.rows == int(result.window_sum.sum()) > 0
    counter.rows = 0
    g = greedy(model, src, src_len, 10, tau, backend="eager")
    assert counter.rows == int(g.window_sum.sum())


def test_negative_tau_is_refused():
    model = tiny_model("flexible", seed=1)
    src, src_len = sources()
    with pytest.raises(ValueError, match="tau must be >= 0"):
        beam_search(model, src, src_len, 5, 3, tau=-1.0, backend="eager")
