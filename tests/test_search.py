"""Tests of greedy search, beam search and forced decoding on the eager backend, the reference
(tiny half-trained models, fixed seeds); the other backends are held to it by
tests/test_decoding_contract.py."""

from __future__ import annotations

import functools
import math

import pytest
import torch

from conftest import train_to_copy
from flexatt.data.subwords import BOS_ID, EOS_ID, PAD_ID
from flexatt.model import Seq2Seq, build_model
from flexatt import decoding

greedy = functools.partial(decoding.greedy, backend="eager")
beam_search = functools.partial(decoding.beam_search, backend="eager")
forced_decode = functools.partial(decoding.forced_decode, backend="eager")

VOCAB = 12
TINY = dict(emb_size=12, hidden_size=12, att_size=12, readout_size=12, dropout=0.0, local_D=2)
LENGTHS = [7, 3, 9, 5]

# (attention, tau): tau only matters for the flexible variants
CASES = [("global", math.inf), ("flexible", math.inf), ("flexible", 0.5), ("flexible_sact", 0.8),
         ("local_p", math.inf)]


pytestmark = pytest.mark.usefixtures("single_thread")


@functools.lru_cache(maxsize=None)
def trained_state(vocab: int) -> dict:
    """A tiny flexible model trained for 50 steps to copy its source: half-trained on purpose,
    so that outputs depend on the source, end at various lengths (EOS, or cut at max_len)
    and beam search often beats greedy search (a random model mostly repeats one token)."""
    torch.manual_seed(0)
    model = build_model({**TINY, "attention": "flexible"}, vocab, vocab, PAD_ID)
    g = torch.Generator().manual_seed(0)
    batches = (sources((torch.randint(2, 9, (32,), generator=g) + 1).tolist(), generator=g, vocab=vocab)
               for _ in range(50))
    return train_to_copy(model, batches)


def tiny_model(attention="global", seed=0, vocab=VOCAB, **kw) -> Seq2Seq:
    """A model of variant ``attention`` with the trained copy model's parameters; those the
    flexible model lacks (local-p's W_p, SACT's temperature) stay as initialised from ``seed``."""
    torch.manual_seed(seed)
    model = build_model({**TINY, "attention": attention, **kw}, vocab, vocab, PAD_ID)
    model.load_state_dict(trained_state(vocab), strict=False)
    return model.eval()


def sources(lengths=LENGTHS, seed=1, vocab=VOCAB, generator=None):
    """Random sources (ids >= 4) of the given lengths, EOS last (the Batch layout)."""
    g = generator or torch.Generator().manual_seed(seed)
    src = torch.full((len(lengths), max(lengths)), PAD_ID, dtype=torch.long)
    for i, n in enumerate(lengths):
        src[i, :n] = torch.randint(4, vocab, (n,), generator=g)
        src[i, n - 1] = EOS_ID
    return src, torch.tensor(lengths)


def hyps(result, nbest=False):
    """Output token lists (EOS excluded), cut by the reported lengths."""
    if nbest:
        return [[row[:n] for row, n in zip(r, ln)] for r, ln in
                zip(result.nbest.tolist(), result.nbest_lengths.tolist())]
    return [row[:n] for row, n in zip(result.tokens.tolist(), result.lengths.tolist())]


def forced(model, src, src_len, token_lists, tau, with_eos):
    """Forced-decode one hypothesis per sentence (``token_lists``: output ids, EOS excluded;
    ``with_eos``: whether to append EOS)."""
    outs = [list(t) + ([EOS_ID] if e else []) for t, e in zip(token_lists, with_eos)]
    T = max(len(o) for o in outs)
    tgt_out = torch.full((len(outs), T), PAD_ID, dtype=torch.long)
    tgt_in = torch.full((len(outs), T), PAD_ID, dtype=torch.long)
    for i, o in enumerate(outs):
        tgt_out[i, : len(o)] = torch.tensor(o, dtype=torch.long)
        tgt_in[i, : len(o)] = torch.tensor([BOS_ID] + o[:-1], dtype=torch.long)
    tgt_len = torch.tensor([len(o) for o in outs])
    return forced_decode(model, src, src_len, tgt_in, tgt_out, tau, tgt_len=tgt_len, return_traces=True)


class ScoreCounter:
    """Wraps a scorer's forward and counts the key rows it receives (as in test_attention)."""

    def __init__(self, scorer):
        self.rows = 0
        original = scorer.forward

        def counting(q, keys, positions):
            self.rows += keys.shape[:-1].numel()
            return original(q, keys, positions)

        scorer.forward = counting


# --------------------------------------------------------------------------------------
# greedy == beam 1; windowed == dense at tau = inf
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("attention,tau", CASES)
@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_beam_one_is_greedy(attention, tau, alpha):
    model = tiny_model(attention)
    src, src_len = sources()
    limit = torch.tensor([9, 4, 12, 7])
    g = greedy(model, src, src_len, limit, tau)
    b = beam_search(model, src, src_len, limit, beam_size=1, tau=tau, alpha=alpha)
    assert hyps(b) == hyps(g)
    assert b.window_sum.tolist() == g.window_sum.tolist()
    assert b.steps.tolist() == g.steps.tolist()
    torch.testing.assert_close(b.log_probs, g.log_probs)
    # greedy's tokens layout is unchanged: EOS excluded, PAD after, max_len columns
    assert g.tokens.shape == (4, 12)
    assert bool((g.lengths <= limit).all())


def test_windowed_at_huge_tau_equals_dense():
    """Flexible attention's windowed path with a window covering every position gives the
    dense path's search exactly (tau = inf takes the dense path)."""
    model = tiny_model("flexible", seed=3)
    src, src_len = sources()
    dense = beam_search(model, src, src_len, 10, beam_size=5, tau=math.inf, n_best=3)
    for tau in (math.inf, 1e6):
        windowed = beam_search(model, src, src_len, 10, beam_size=5, tau=tau, n_best=3)
        assert hyps(windowed, nbest=True) == hyps(dense, nbest=True)
        assert windowed.window_sum.tolist() == dense.window_sum.tolist()
        assert windowed.steps.tolist() == dense.steps.tolist()
        torch.testing.assert_close(windowed.scores, dense.scores)
    # dense: S_i scored per (step, hypothesis)
    assert dense.window_sum.tolist() == (dense.steps * src_len).tolist()


@pytest.mark.parametrize("attention,tau", [("flexible", 0.5), ("flexible_sact", 0.3), ("local_m", math.inf)])
def test_score_evaluations_equal_reported_window(attention, tau):
    """Windowed scoring paths: the score function saw exactly window_sum.sum() key rows."""
    model = tiny_model(attention, seed=2)
    src, src_len = sources()
    counter = ScoreCounter(model.decoder.attention.scorer)
    result = beam_search(model, src, src_len, 10, beam_size=5, tau=tau)
    assert counter.rows == int(result.window_sum.sum()) > 0
    assert result.mean_window < float((result.steps * src_len).sum()) / float(result.steps.sum())
    assert int(result.steps.sum()) > 4 * 5  # more than one live hypothesis per step
    counter.rows = 0
    g = greedy(model, src, src_len, 10, tau)
    assert counter.rows == int(g.window_sum.sum())


# --------------------------------------------------------------------------------------
# scores, n-best, beam width
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_nbest_in_score_order_and_scores_are_exact(alpha):
    model = tiny_model("flexible", seed=4)
    src, src_len = sources()
    result = beam_search(model, src, src_len, 8, beam_size=5, tau=0.8, alpha=alpha, n_best=5)
    assert result.scores.shape == result.log_probs.shape == (4, 5)
    assert result.nbest.shape[:2] == (4, 5)
    assert bool((result.scores[:, :-1] >= result.scores[:, 1:]).all())
    assert torch.equal(result.nbest[:, 0], result.tokens)
    all_hyps = hyps(result, nbest=True)
    for i in range(4):
        # distinct hypotheses (one ended by EOS differs from the same prefix cut at max_len)
        keys = {(tuple(h), n < 8) for h, n in zip(all_hyps[i], result.nbest_lengths[i].tolist())}
        assert len(keys) == 5
    # each hypothesis' reported log p / score equals forced decoding of it; a finished
    # hypothesis either ended by EOS (then it is shorter than max_len) or was cut at max_len
    for j in range(5):
        toks = [all_hyps[i][j] for i in range(4)]
        lengths = result.nbest_lengths[:, j]
        with_eos = lengths < 8
        ref = forced(model, src, src_len, toks, 0.8, with_eos=with_eos.tolist())
        torch.testing.assert_close(ref.log_probs[:, 0], result.log_probs[:, j], atol=1e-4, rtol=1e-4)
        steps = (lengths + with_eos.long()).float()
        torch.testing.assert_close(result.scores[:, j], result.log_probs[:, j] / steps**alpha)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_wider_beam_is_never_worse_than_greedy(seed):
    model = tiny_model("flexible", seed=seed)
    src, src_len = sources(LENGTHS * 2, seed=10 + seed)
    g = greedy(model, src, src_len, 10, tau=0.6)
    for k in (2, 5, 10):
        b = beam_search(model, src, src_len, 10, beam_size=k, tau=0.6, alpha=0.0)
        assert bool((b.scores[:, 0] >= g.log_probs[:, 0] - 1e-5).all()), (k, b.scores[:, 0], g.log_probs[:, 0])


# --------------------------------------------------------------------------------------
# brute-force reference: re-run the model from scratch for every prefix
# --------------------------------------------------------------------------------------
def prefix_log_probs(model, src, src_len, prefix, tau):
    """log p(. | prefix, source) by decoding the whole prefix from scratch (one sentence)."""
    cache, state = model.encode(src, src_len)
    for tok in [BOS_ID] + list(prefix):
        logits, state, _, _ = model.decode_step(torch.tensor([tok]), state, cache, tau)
    return torch.log_softmax(logits.float(), -1)[0].tolist()


@torch.no_grad()
def reference_beam(model, src, src_len, max_len, k, tau, alpha, n_best=1):
    """Plain-Python beam search with the same rules as ``beam_search`` (top 2k candidates;
    EOS / last-step candidates ranked < k finish; the first k others live on; stop at k
    finished, when no live hypothesis can beat the n_best-th finished one, or at max_len)."""
    live = [((), 0.0)]
    finished = []  # (score, log p, tokens incl. the last one)
    for t in range(1, max_len + 1):
        cands = []
        for h, (toks, raw) in enumerate(live):
            for v, lp in enumerate(prefix_log_probs(model, src, src_len, toks, tau)):
                cands.append((raw + lp, h, v))
        cands.sort(key=lambda c: -c[0])
        last = t >= max_len
        new_live = []
        for rank, (score, h, v) in enumerate(cands[: 2 * k]):
            toks = live[h][0] + (v,)
            if rank < k and (v == EOS_ID or last):
                finished.append((score / t**alpha, score, toks))
            elif v != EOS_ID and not last and len(new_live) < k:
                new_live.append((toks, score))
        finished.sort(key=lambda f: -f[0])
        nth = finished[n_best - 1][0] if len(finished) >= n_best else -math.inf
        bound = max((s for _, s in new_live), default=-math.inf) / max_len**alpha
        if last or len(finished) >= k or nth >= bound or not new_live:
            break
        live = new_live
    return finished[:n_best]


@pytest.mark.parametrize(
    "attention,tau,k,vocab,alpha",
    [
        ("global", math.inf, 3, 7, 1.0),
        ("flexible", 0.7, 3, 7, 0.0),
        ("flexible", 0.7, 4, 9, 1.0),
        ("flexible", 0.4, 5, 5, 1.0),  # V=5: fewer than k live hypotheses after step 1
        ("global", math.inf, 5, 5, 0.0),
    ],
)
def test_matches_brute_force_reference(attention, tau, k, vocab, alpha):
    model = tiny_model(attention, seed=5, vocab=vocab)
    src, src_len = sources([6, 3, 5], seed=7, vocab=vocab)
    max_len = 5
    result = beam_search(model, src, src_len, max_len, beam_size=k, tau=tau, alpha=alpha, n_best=2)
    got = hyps(result, nbest=True)
    for i in range(3):
        n = int(src_len[i])
        ref = reference_beam(model, src[i : i + 1, :n], src_len[i : i + 1], max_len, k, tau, alpha, 2)
        for j, (score, logp, toks) in enumerate(ref):
            out = [t for t in toks if t != EOS_ID] if toks[-1] == EOS_ID else list(toks)
            assert got[i][j] == out, (i, j)
            assert math.isclose(float(result.scores[i, j]), score, rel_tol=1e-4, abs_tol=1e-4)
            assert math.isclose(float(result.log_probs[i, j]), logp, rel_tol=1e-4, abs_tol=1e-4)


# --------------------------------------------------------------------------------------
# batching: padding never leaks
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("attention,tau", [("global", math.inf), ("flexible", 0.6), ("flexible_sact", math.inf)])
def test_batch_equals_each_sentence_alone(attention, tau):
    model = tiny_model(attention, seed=6)
    src, src_len = sources()
    limit = torch.tensor([10, 5, 12, 8])
    together = beam_search(model, src, src_len, limit, beam_size=4, tau=tau, n_best=2)
    for i, n in enumerate(LENGTHS):
        alone = beam_search(model, src[i : i + 1, :n], src_len[i : i + 1], limit[i : i + 1],
                            beam_size=4, tau=tau, n_best=2)
        assert hyps(alone, nbest=True)[0] == hyps(together, nbest=True)[i]
        assert alone.window_sum[0] == together.window_sum[i]
        assert alone.steps[0] == together.steps[i]
        torch.testing.assert_close(alone.scores[0], together.scores[i], atol=1e-5, rtol=1e-5)
    assert bool((together.nbest_lengths <= limit.unsqueeze(1)).all())


# --------------------------------------------------------------------------------------
# traces and forced decoding
# --------------------------------------------------------------------------------------
def assert_same_trace(a, b):
    assert a.tokens.tolist() == b.tokens.tolist()
    assert a.window.tolist() == b.window.tolist()
    assert a.span_lo.tolist() == b.span_lo.tolist() and a.span_hi.tolist() == b.span_hi.tolist()
    torch.testing.assert_close(a.attention, b.attention, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(a.position, b.position, atol=1e-5, rtol=1e-5)
    for name in ("g", "temperature"):
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None)
        if x is not None:
            torch.testing.assert_close(x, y, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("attention,tau", [("flexible", 0.5), ("flexible_sact", 0.8), ("global", math.inf)])
def test_traces_follow_the_best_hypothesis(attention, tau):
    model = tiny_model(attention, seed=8)
    src, src_len = sources()
    for search in ("greedy", "beam"):
        if search == "greedy":
            result = greedy(model, src, src_len, 9, tau, return_traces=True)
        else:
            result = beam_search(model, src, src_len, 9, beam_size=5, tau=tau, return_traces=True)
        assert len(result.traces) == 4
        ended = []
        for i, tr in enumerate(result.traces):
            T = len(tr)
            assert tr.attention.shape == (T, LENGTHS[i])
            for name in ("window", "span_lo", "span_hi", "position"):
                assert getattr(tr, name).shape == (T,)
            assert (tr.g is not None) == attention.startswith("flexible")
            assert (tr.temperature is not None) == attention.endswith("sact")
            assert T == int(result.lengths[i]) + int(tr.tokens[-1] == EOS_ID)
            assert tr.tokens[: int(result.lengths[i])].tolist() == hyps(result)[i]
            assert bool((tr.span_lo >= 1).all() and (tr.span_hi <= LENGTHS[i]).all())
            assert bool((tr.window == tr.span_hi - tr.span_lo + 1).all())
            torch.testing.assert_close(tr.attention.sum(1), torch.ones(T))
            ended.append(bool(tr.tokens[-1] == EOS_ID))
            if search == "greedy":
                assert int(tr.window.sum()) == int(result.window_sum[i])
        ref = forced(model, src, src_len, hyps(result), tau, ended)
        for a, b in zip(result.traces, ref.traces):
            assert_same_trace(a, b)
        torch.testing.assert_close(ref.log_probs, result.log_probs[:, :1], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("attention,tau", [("flexible", 0.5), ("global", math.inf), ("local_p", math.inf)])
def test_forced_decode_matches_teacher_forcing(attention, tau):
    model = tiny_model(attention, seed=9)
    src, src_len = sources()
    g = torch.Generator().manual_seed(3)
    tgt_len = torch.tensor([4, 6, 2, 5])
    tgt_out = torch.full((4, 6), PAD_ID, dtype=torch.long)
    for i, n in enumerate(tgt_len.tolist()):
        tgt_out[i, : n - 1] = torch.randint(4, VOCAB, (n - 1,), generator=g)
        tgt_out[i, n - 1] = EOS_ID
    tgt_in = torch.cat([torch.full((4, 1), BOS_ID), tgt_out[:, :-1]], 1).masked_fill(tgt_out == PAD_ID, PAD_ID)
    result = forced_decode(model, src, src_len, tgt_in, tgt_out, tau, return_traces=True)
    with torch.no_grad():
        logits, aux = model(src, src_len, tgt_in, tau)
    mask = tgt_out != PAD_ID
    lp = torch.log_softmax(logits, -1).gather(2, tgt_out.unsqueeze(2)).squeeze(2)
    torch.testing.assert_close(result.log_probs[:, 0], (lp * mask).sum(1), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(result.attention, aux["attention"] * mask.unsqueeze(2))
    assert result.steps.tolist() == tgt_len.tolist()
    assert result.window_sum.tolist() == (aux["window"] * mask).sum(1).tolist()
    assert result.lengths.tolist() == (tgt_len - 1).tolist()
    assert hyps(result) == [row[: n - 1] for row, n in zip(tgt_out.tolist(), tgt_len.tolist())]
    for i, tr in enumerate(result.traces):
        assert tr.attention.shape == (int(tgt_len[i]), LENGTHS[i])


def test_argument_checks():
    model = tiny_model()
    src, src_len = sources()
    with pytest.raises(ValueError):
        beam_search(model, src, src_len, 5, beam_size=0)
    with pytest.raises(ValueError):
        beam_search(model, src, src_len, 5, beam_size=2, n_best=3)
    with pytest.raises(ValueError):
        beam_search(model, src, src_len, 0, beam_size=2)
