"""The compiled search step (flexatt.fast_search.KernelDecoder: csrc/fused_decode.cpp's
decode_step and beam_candidates) against the eager reference (flexatt.search with the model's
own decode_step).

The kernel computes with its own products and exponentials, so scores, attention weights, p_t and
g_t are compared within float32 rounding; hypotheses, n-best lists, spans, windows and steps must
be the same. The models are the half-trained copy models of tests/test_search.py (peaked
outputs: no near-ties for rounding to flip) and a larger random one with sizes that leave a
remainder in every vector loop. Skipped, with the build error as the reason, where the kernel
cannot be built (tests/test_fused.py's fixture)."""

from __future__ import annotations

import math

import pytest
import torch

from flexatt import fast_search
from flexatt.data.subwords import BOS_ID, PAD_ID
from flexatt.model import build_model
from flexatt.search import beam_search, greedy
from test_fused import kernel_error, needs_the_kernel  # noqa: F401  (fixtures)
from test_search import LENGTHS, hyps, sources, tiny_model

pytestmark = pytest.mark.usefixtures("single_thread")

ATOL = 2e-5  # float32 rounding of sums of a few hundred terms

#: (attention, tau) the compiled step covers
COVERED = [("global", None), ("flexible", None), ("flexible", math.inf), ("flexible", 0.3),
           ("flexible", 0.8), ("flexible", 2.0)]
BATCHES = {"one": [7], "padded": LENGTHS * 2, "two": [9, 2]}


@pytest.fixture(autouse=True)
def fast_path_on(monkeypatch):
    """On even where the environment turns it off (CI runs the decoding tests once with
    ``FLEXATT_FUSED=0``)."""
    monkeypatch.delenv("FLEXATT_FUSED", raising=False)


def close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.allclose(a, b, atol=ATOL, rtol=1e-5)


def assert_agrees(eager, fast, nbest=False):
    """Same hypotheses, windows and steps; scores within float32 rounding. A hypothesis may
    differ only where it ties: its score within rounding of the eager one at that rank (a swap
    of two near-equal candidates; the other sentences must then agree in everything)."""
    if nbest:
        pairs = zip(hyps(eager, nbest=True), hyps(fast, nbest=True), eager.scores.tolist(), fast.scores.tolist())
    else:
        pairs = zip([[h] for h in hyps(eager)], [[h] for h in hyps(fast)], eager.scores.tolist(),
                    fast.scores.tolist())
    same = []
    for e_hyps, f_hyps, e_scores, f_scores in pairs:
        for e_hyp, f_hyp, e_score, f_score in zip(e_hyps, f_hyps, e_scores, f_scores):
            assert e_hyp == f_hyp or abs(e_score - f_score) <= ATOL, (e_hyp, f_hyp, e_score, f_score)
        same.append(e_hyps == f_hyps)
    assert sum(same) >= len(same) - 1  # a tie, not a different search
    rows = torch.tensor(same)
    assert fast.window_sum[rows].tolist() == eager.window_sum[rows].tolist()
    assert fast.steps[rows].tolist() == eager.steps[rows].tolist()
    finite = torch.isfinite(eager.scores)
    assert torch.equal(torch.isfinite(fast.scores), finite)
    assert close(fast.scores[finite], eager.scores[finite])
    assert close(fast.log_probs[finite], eager.log_probs[finite])


def assert_traces_agree(eager, fast):
    """The traces of the best hypotheses (where they are the same hypothesis)."""
    for e, f in zip(eager.traces, fast.traces):
        if not torch.equal(f.tokens, e.tokens):
            continue
        assert torch.equal(f.tokens, e.tokens) and torch.equal(f.window, e.window)
        assert torch.equal(f.span_lo, e.span_lo) and torch.equal(f.span_hi, e.span_hi)
        assert close(f.attention, e.attention) and close(f.position, e.position)
        assert (e.g is None) == (f.g is None) and (e.g is None or close(f.g, e.g))
        assert f.temperature is None and e.temperature is None


@pytest.mark.parametrize("attention,tau", COVERED)
@pytest.mark.parametrize("batch", list(BATCHES))
@pytest.mark.parametrize("k", [1, 5, 20])
def test_beam_search_agrees_with_the_eager_search(attention, tau, batch, k):
    model = tiny_model(attention, seed=1)
    src, src_len = sources(BATCHES[batch], seed=5)
    limit = src_len * 2 + 1
    n_best = min(k, 3)
    eager = beam_search(model, src, src_len, limit, k, tau=tau, n_best=n_best, return_traces=True)
    fast = fast_search.beam_search(model, src, src_len, limit, k, tau=tau, n_best=n_best, return_traces=True,
                                   compiled=True)
    assert_agrees(eager, fast, nbest=True)
    assert_traces_agree(eager, fast)


@pytest.mark.parametrize("attention,tau", COVERED)
@pytest.mark.parametrize("batch", list(BATCHES))
def test_greedy_agrees_with_the_eager_search(attention, tau, batch):
    model = tiny_model(attention, seed=2)
    src, src_len = sources(BATCHES[batch], seed=6)
    eager = greedy(model, src, src_len, 12, tau, return_traces=True)
    fast = fast_search.greedy(model, src, src_len, 12, tau, return_traces=True, compiled=True)
    assert_agrees(eager, fast)
    assert_traces_agree(eager, fast)
    assert fast.tokens.shape == eager.tokens.shape


@pytest.mark.parametrize("attention,tau", [("global", None), ("flexible", 0.5), ("flexible", None)])
@pytest.mark.parametrize("threads", [1, 2])
def test_a_larger_model_with_padding(attention, tau, threads):
    """A random model of 300 words with sizes that are not multiples of a vector (every vector
    loop has a remainder), a padded batch of 12 sentences, beam 5, on one and two threads."""
    torch.set_num_threads(threads)  # the single_thread fixture restores the count
    torch.manual_seed(3)
    sizes = dict(emb_size=20, hidden_size=36, att_size=40, readout_size=28, dropout=0.0)
    model = build_model({**sizes, "attention": attention}, 300, 300, PAD_ID).eval()
    with torch.no_grad():  # peaked outputs, so that the search is not a sea of near-ties
        model.decoder.W_s.weight.mul_(8.0)
    src, src_len = sources([14, 3, 9, 20, 11, 6, 17, 8, 2, 13, 5, 19], seed=7, vocab=300)
    limit = src_len * 2 + 3
    eager = beam_search(model, src, src_len, limit, 5, tau=tau)
    fast = fast_search.beam_search(model, src, src_len, limit, 5, tau=tau, compiled=True)
    assert_agrees(eager, fast)


@pytest.mark.parametrize("attention,tau", [("global", None), ("flexible", 0.6), ("flexible", None)])
@pytest.mark.parametrize("rows", [[0, 0, 1, 2, 2, 2], [1, 1, 0, 0], [2], [0, 1, 2]])
def test_one_step_on_any_row_layout_agrees_with_the_models_step(attention, tau, rows):
    """The compiled decode_step on any row -> sentence map against the model's step on the
    gathered cache: logits, weights, state, window, spans, p_t and g_t."""
    model = tiny_model(attention, seed=4)
    src, src_len = sources([7, 3, 9], seed=8)
    fast = fast_search.KernelDecoder(model)
    with torch.no_grad():
        cache, state = fast.encode(src, src_len)
        ref_cache, ref_state = model.encode(src, src_len)
        index = torch.tensor(rows)
        prev = torch.tensor([BOS_ID] + [5 + i for i in range(len(rows) - 1)])
        for _ in range(3):  # a few steps, so that p_{t-1} moves
            out = fast.decode_step(prev, state.index_select(index), cache.index_select(index), tau)
            ref = model.decode_step(prev, ref_state.index_select(index), ref_cache.index_select(index), tau)
            assert close(out[0], ref[0]) and close(out[2], ref[2])  # logits, weights
            stats, ref_stats = out[3], ref[3]
            for name in ("window", "span_lo", "span_hi"):
                assert torch.equal(getattr(stats, name), getattr(ref_stats, name)), name
            assert close(stats.position, ref_stats.position)
            assert (stats.g is None) == (ref_stats.g is None) and (stats.g is None or close(stats.g, ref_stats.g))
            for a, b in [(out[1].hidden, ref[1].hidden), (out[1].cell, ref[1].cell),
                         (out[1].attention.position, ref[1].attention.position),
                         (out[1].attention.context, ref[1].attention.context)]:
                assert close(a, b)
            assert torch.equal(out[1].attention.step, ref[1].attention.step)
            state, ref_state = out[1], ref[1]
            index = torch.arange(len(rows))
            cache = fast_search.GroupedCache(cache.base, cache.rows.index_select(0, torch.tensor(rows)))
            ref_cache = ref_cache.index_select(torch.tensor(rows))
            rows = list(range(len(rows)))
            prev = ref[0].argmax(-1)


def torch_candidates(logits, score, counts, k, n):
    """flexatt.search.beam_search's own selection: log_softmax + score on an n_act x k x V grid
    (-inf at missing rows), top n."""
    n_act, vocab = counts.numel(), logits.size(1)
    grid = logits.new_full((n_act, k, vocab), -math.inf)
    starts = counts.cumsum(0) - counts
    cand = torch.log_softmax(logits, -1) + score.unsqueeze(1)
    for j in range(n_act):
        grid[j, : int(counts[j])] = cand[int(starts[j]): int(starts[j] + counts[j])]
    return grid.view(n_act, -1).topk(n, dim=1)


@pytest.mark.parametrize("vocab,counts,k", [(4000, [5, 5, 3, 1, 5], 5), (37, [2, 1, 2], 2), (7, [1, 3], 20),
                                            (100, [20, 20, 7], 20)])
def test_beam_candidates_are_the_top_n_of_the_log_softmax_grid(vocab, counts, k):
    """The kernel's selection against log_softmax + topk over the k x V grid: the same candidates
    in the same order, scores within rounding; -inf past a sentence's candidates (V = 7, one row,
    n = 40)."""
    g = torch.Generator().manual_seed(vocab)
    counts_t = torch.tensor(counts)
    logits = torch.randn(int(counts_t.sum()), vocab, generator=g) * 4
    score = -torch.rand(logits.size(0), generator=g) * 10
    n = min(2 * k, k * vocab)
    ref_score, ref_index = torch_candidates(logits, score, counts_t, k, n)
    fast = fast_search.KernelDecoder(tiny_model("global"))
    top_score, top_index = fast.beam_candidates(logits, score, counts_t.cumsum(0) - counts_t, counts_t, n)
    finite = torch.isfinite(ref_score)
    assert torch.equal(torch.isfinite(top_score), finite)
    assert torch.equal(top_index[finite], ref_index[finite])
    assert close(top_score[finite], ref_score[finite])


def test_beam_candidates_break_ties_by_row_then_token():
    logits = torch.zeros(3, 16)  # every candidate of a row ties; rows 0 and 2 tie with each other
    score = torch.tensor([-1.0, -2.0, -1.0])
    fast = fast_search.KernelDecoder(tiny_model("global"))
    top_score, top_index = fast.beam_candidates(logits, score, torch.tensor([0]), torch.tensor([3]), 20)
    assert top_index[0].tolist() == list(range(16)) + [32, 33, 34, 35]
    assert torch.equal(top_score[0], torch.full((20,), -1.0 - math.log(16.0)))


def test_bad_rows_are_refused_by_the_kernel():
    model = tiny_model("global")
    fast = fast_search.KernelDecoder(model)
    src, src_len = sources([7, 3], seed=8)
    cache, state = fast.encode(src, src_len)
    bad = fast_search.GroupedCache(cache.base, torch.tensor([0, 2]))
    with pytest.raises(RuntimeError, match=r"sent\[1\] = 2 is outside \[0, 2\)"):
        fast.decode_step(torch.tensor([BOS_ID, BOS_ID]), state, bad)
    with pytest.raises(RuntimeError, match="sentence 0: rows"):
        fast.beam_candidates(torch.zeros(2, 5), torch.zeros(2), torch.tensor([1]), torch.tensor([2]), 4)


def test_the_stages_decode_with_the_compiled_step():
    """translate_split (every stage's decoding) picks the compiled step for the models it covers
    and the grouped step for the others (SACT)."""
    assert isinstance(fast_search.decoder_for(tiny_model("flexible")), fast_search.KernelDecoder)
    assert isinstance(fast_search.decoder_for(tiny_model("global")), fast_search.KernelDecoder)
    assert isinstance(fast_search.decoder_for(tiny_model("flexible_sact")), fast_search.FastDecoder)
    assert isinstance(fast_search.decoder_for(tiny_model("sact")), fast_search.FastDecoder)
    with pytest.raises(ValueError, match="does not support flexible attention with a SACT temperature"):
        fast_search.decoder_for(tiny_model("flexible_sact"), compiled=True)
