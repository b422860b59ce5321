"""Tests of the attention variants and score functions (tiny tensors, fixed seeds)."""

from __future__ import annotations

import math

import pytest
import torch

from flexatt import schema
from flexatt.attention import (
    ATTENTION_TYPES,
    SCORE_TYPES,
    AttentionSizes,
    AttentionState,
    ConcatScore,
    FlexibleAttention,
    build_attention,
    masked_softmax,
)

Q, E, K, A = 6, 5, 8, 7  # query (decoder) size, feedback size, key size 2H, att size
LENGTHS = [7, 4, 2, 5]
S_MAX = max(LENGTHS)


pytestmark = pytest.mark.usefixtures("single_thread")


def make(attention, score="concat", seed=0, max_src_len=256, **kw):
    torch.manual_seed(seed)
    model = schema.Model(attention=attention, score=score, att_size=A, max_src_len=max_src_len, **kw)
    return build_attention(model, AttentionSizes(Q, K, E))


def inputs(seed=1, scale=1.0):
    """values batch x S x K (zeros at padding), mask, queries and feedbacks for 4 steps."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor(LENGTHS)
    mask = torch.arange(S_MAX).unsqueeze(0) < lengths.unsqueeze(1)
    values = torch.randn(len(LENGTHS), S_MAX, K, generator=g) * mask.unsqueeze(-1)
    queries = torch.randn(4, len(LENGTHS), Q, generator=g) * scale
    feedbacks = torch.randn(4, len(LENGTHS), E, generator=g)
    return values, mask, queries, feedbacks


def summary(values, mask):
    return values.sum(1) / mask.sum(1, keepdim=True)


def run(att, values, mask, queries, feedbacks, tau=math.inf):
    """Run the attention for len(queries) steps; return per-step outputs."""
    cache = att.precompute(values, mask)
    state = att.init_state(cache, summary(values, mask))
    outs = []
    for q, f in zip(queries, feedbacks):
        context, weights, new_state, stats = att(q, f, cache, state, tau)
        outs.append((context, weights, state, new_state, stats))
        state = new_state
    return outs


class ScoreCounter:
    """Wraps a scorer's forward and records the key rows / positions it received."""

    def __init__(self, scorer):
        self.rows = 0
        self.positions = []
        original = scorer.forward

        def counting(q, keys, positions):
            self.rows += keys.shape[:-1].numel()
            self.positions.append(positions.expand(keys.shape[:-1]).clone())
            return original(q, keys, positions)

        scorer.forward = counting


# --------------------------------------------------------------------------------------
# weights: normalisation, padding, windows
# --------------------------------------------------------------------------------------
VARIANTS = [(a, "concat") for a in ATTENTION_TYPES] + [("global", s) for s in SCORE_TYPES[1:]]


@pytest.mark.parametrize("attention,score", VARIANTS)
def test_weights_sum_to_one_and_zero_on_padding(attention, score):
    att = make(attention, score, local_D=2)
    values, mask, queries, feedbacks = inputs()
    for context, weights, _, _, stats in run(att, values, mask, queries, feedbacks):
        assert weights.shape == mask.shape
        assert torch.all(weights[~mask] == 0), "padding must get exactly 0"
        assert torch.all(weights >= 0)
        if attention == "local_p":  # Luong eq. 10: Gaussian after the softmax, sum < 1
            assert torch.all(weights.sum(-1) <= 1 + 1e-6)
        else:
            torch.testing.assert_close(weights.sum(-1), torch.ones(len(LENGTHS)))
        torch.testing.assert_close(context, torch.einsum("bs,bsk->bk", weights, values))
        assert torch.all(stats.window >= 1)
        assert torch.all(stats.window <= torch.tensor(LENGTHS))


@pytest.mark.parametrize("score", SCORE_TYPES)
@pytest.mark.parametrize("attention", ["flexible", "flexible_sact", "local_m", "local_p"])
def test_all_scores_work_with_windowed_variants(attention, score):
    att = make(attention, score, local_D=1)
    values, mask, queries, feedbacks = inputs()
    for _, weights, _, _, stats in run(att, values, mask, queries, feedbacks, tau=0.7):
        assert torch.all(weights[~mask] == 0)
        assert torch.all(torch.isfinite(weights))


def test_local_m_window_clamps_at_edges():
    D = 2
    att = make("local_m", local_D=D)
    values, mask, queries, feedbacks = inputs()
    queries = torch.cat([queries, queries])  # 8 steps: t runs past every sentence
    feedbacks = torch.cat([feedbacks, feedbacks])
    lengths = torch.tensor(LENGTHS)
    for t, (_, weights, _, _, stats) in enumerate(run(att, values, mask, queries, feedbacks), 1):
        centre = torch.clamp(torch.full_like(lengths, t), max=lengths)  # p_t = t, clamped
        lo = torch.clamp(centre - D, min=1)
        hi = torch.minimum(centre + D, lengths)
        assert torch.equal(stats.span_lo, lo) and torch.equal(stats.span_hi, hi)
        assert torch.equal(stats.window, hi - lo + 1)
        pos = torch.arange(1, S_MAX + 1).unsqueeze(0)
        inside = (pos >= lo.unsqueeze(1)) & (pos <= hi.unsqueeze(1))
        assert torch.all(weights[~inside] == 0)
        assert torch.all(weights[inside] > 0)
        torch.testing.assert_close(weights.sum(-1), torch.ones(len(LENGTHS)))
    assert stats.window.tolist() == [3, 3, 2, 3]  # t = 8 >= S_i: window [S_i - 2, S_i]


@pytest.mark.parametrize("rho", [0.6, 1.0, 2.5])
def test_local_mr_centre_follows_the_length_ratio(rho):
    """local_mr: p_t = t / ρ (ρ the corpus's target/source length ratio), clamped to [1, S_i];
    the window [round(p_t) - D, round(p_t) + D] ∩ [1, S_i], softmax over it as local-m."""
    D = 1
    att = make("local_mr", local_D=D)
    att.length_ratio.fill_(rho)
    values, mask, queries, feedbacks = inputs()
    lengths = torch.tensor(LENGTHS)
    for t, (_, weights, _, _, stats) in enumerate(run(att, values, mask, queries, feedbacks), 1):
        centre = torch.minimum(torch.clamp_min(torch.full((len(LENGTHS),), t / rho), 1.0), lengths.float())
        torch.testing.assert_close(stats.position, centre)
        lo = torch.clamp(torch.round(centre).long() - D, min=1)
        hi = torch.minimum(torch.round(centre).long() + D, lengths)
        assert torch.equal(stats.span_lo, lo) and torch.equal(stats.span_hi, hi)
        pos = torch.arange(1, S_MAX + 1).unsqueeze(0)
        inside = (pos >= lo.unsqueeze(1)) & (pos <= hi.unsqueeze(1))
        assert torch.all(weights[~inside] == 0) and torch.all(weights[inside] > 0)
        torch.testing.assert_close(weights.sum(-1), torch.ones(len(LENGTHS)))


def test_the_length_ratio_comes_from_the_corpus_and_stays_with_the_weights():
    from flexatt.attention import set_length_ratio
    from flexatt.model import build_model

    model = build_model({"attention": "local_mr", "emb_size": 8, "hidden_size": 8, "att_size": 8,
                         "readout_size": 8}, 20, 20)
    assert set_length_ratio(model, [3, 4, 5], [6, 8, 10]) == pytest.approx((24 + 3) / (12 + 3))
    copy = build_model({"attention": "local_mr", "emb_size": 8, "hidden_size": 8, "att_size": 8,
                        "readout_size": 8}, 20, 20)
    copy.load_state_dict(model.state_dict())
    assert float(copy.decoder.attention.length_ratio) == pytest.approx(1.8)
    plain = build_model({"attention": "local_m", "emb_size": 8, "hidden_size": 8, "att_size": 8,
                         "readout_size": 8}, 20, 20)
    assert set_length_ratio(plain, [3], [6]) is None and "decoder.attention.length_ratio" not in plain.state_dict()


@pytest.mark.parametrize("p_fraction", [0.01, 0.5, 0.99])
def test_local_p_window_gaussian_and_edges(p_fraction):
    D = 2
    att = make("local_p", local_D=D)
    values, mask, queries, feedbacks = inputs()
    lengths = torch.tensor(LENGTHS)
    forced = lengths.float() * p_fraction  # p_t in (0, S): near the start, middle, end
    att.predict_position = lambda query, lens: forced
    counter = ScoreCounter(att.scorer)
    (context, weights, _, _, stats), = run(att, values, mask, queries[:1], feedbacks[:1])
    centre = torch.round(forced).long()
    lo, hi = torch.clamp(centre - D, min=1), torch.minimum(centre + D, lengths)
    assert torch.equal(stats.span_lo, lo) and torch.equal(stats.span_hi, hi)
    assert counter.rows == int(stats.window.sum()) == int((hi - lo + 1).sum())
    # naive: softmax of the scores over the window, times the Gaussian (sigma = D/2)
    q = att.scorer.project_query(queries[0])
    keys = att.scorer.precompute(values)
    for b in range(len(LENGTHS)):
        win = list(range(int(lo[b]), int(hi[b]) + 1))
        e = torch.stack([att.scorer(q[b], keys[b, s - 1], torch.tensor(s - 1)) for s in win])
        a = torch.softmax(e, 0) * torch.exp(
            -((torch.tensor(win, dtype=torch.float) - forced[b]) ** 2) / (2 * (D / 2) ** 2)
        )
        expected = torch.zeros(S_MAX)
        expected[torch.tensor(win) - 1] = a
        torch.testing.assert_close(weights[b], expected)


def test_local_p_position_is_predicted_in_range():
    att = make("local_p", local_D=3)
    values, mask, queries, feedbacks = inputs(scale=5.0)
    for _, _, _, _, stats in run(att, values, mask, queries, feedbacks):
        assert torch.all(stats.position > 0)
        assert torch.all(stats.position < torch.tensor(LENGTHS, dtype=torch.float))
        v_p, W_p = att.v_p.weight, att.W_p.weight
    expected = torch.tensor(LENGTHS).float() * torch.sigmoid(
        torch.tanh(queries[-1] @ W_p.T) @ v_p.T
    ).squeeze(-1)
    torch.testing.assert_close(stats.position, expected)


@pytest.mark.parametrize("attention", ["local_m", "local_p", "local_mr"])
def test_local_scores_only_the_window(attention):
    att = make(attention, local_D=1)
    values, mask, queries, feedbacks = inputs()
    counter = ScoreCounter(att.scorer)
    outs = run(att, values, mask, queries, feedbacks)
    assert counter.rows == sum(int(o[4].window.sum()) for o in outs)
    assert counter.rows < 4 * sum(LENGTHS)


# --------------------------------------------------------------------------------------
# score functions
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("score", SCORE_TYPES)
def test_score_functions_match_their_formulas(score):
    att = make("global", score)
    values, mask, queries, _ = inputs()
    h = queries[0]
    sc = att.scorer
    got = att.score_dense(sc.project_query(h), att.precompute(values, mask))  # batch x S
    if score == "concat":
        ref = torch.tanh((h @ sc.W_q.weight.T).unsqueeze(1) + values @ sc.U_k.weight.T) @ sc.v_a.weight.T
        ref = ref.squeeze(-1)
    elif score == "general":
        ref = torch.einsum("bq,qk,bsk->bs", h, sc.W_a.weight, values)
    elif score in ("dot", "scaled_dot"):
        ref = torch.einsum("bd,bsd->bs", h @ sc.W_q.weight.T, values @ sc.W_k.weight.T)
        if score == "scaled_dot":
            ref = ref / math.sqrt(A)
    else:  # location: logits over max length, first S_max positions
        ref = (h @ sc.W_a.T + sc.b_a)[:, :S_MAX]
    torch.testing.assert_close(got, ref)
    # and the attention weights are the masked softmax of these scores
    _, weights, _, _ = att(h, None, att.precompute(values, mask), att.init_state(
        att.precompute(values, mask), summary(values, mask)))
    torch.testing.assert_close(weights, masked_softmax(ref, mask))


@pytest.mark.parametrize("shape", ["dense", "flat"])
def test_concat_score_gradients_match_autograd_of_tanh(shape):
    """The fused concat score (v_a · tanh(x / 2) via 2σ(x) - 1 for x = q + k, hand-written
    backward) against autograd through torch.tanh: values and gradients wrt query, keys and v_a,
    in float64 (gradcheck) and float32 (golden reference)."""
    from flexatt.attention import _AdditiveScore

    g = torch.Generator().manual_seed(3)
    q_shape, k_shape = ((3, 1, 5), (3, 4, 5)) if shape == "dense" else ((7, 5), (7, 5))
    q = torch.randn(q_shape, generator=g, dtype=torch.float64, requires_grad=True)
    k = (2 * torch.randn(k_shape, generator=g, dtype=torch.float64)).requires_grad_()
    v = torch.randn(5, generator=g, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(_AdditiveScore.apply, (q, k, v))
    q32, k32, v32 = (x.detach().float().requires_grad_() for x in (q, k, v))
    out = _AdditiveScore.apply(q32, k32, v32)
    weight = torch.randn(out.shape, generator=g)
    grads = torch.autograd.grad((out * weight).sum(), (q32, k32, v32))
    ref = torch.tanh((q32 + k32) / 2) @ v32
    ref_grads = torch.autograd.grad((ref * weight).sum(), (q32, k32, v32))
    torch.testing.assert_close(out, ref, atol=2e-6, rtol=1e-5)
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got, want, atol=2e-6, rtol=1e-5)


def test_concat_score_gradients_match_autograd_of_the_equation():
    """ConcatScore (halves kept doubled) against autograd of v_aᵀ tanh(W_q h + U_k h̄), eq. 3, in
    float64: the scores and the gradients wrt the query, the encoder states and every weight."""
    sc = ConcatScore(Q, K, A).double()
    g = torch.Generator().manual_seed(5)
    h = torch.randn(3, Q, generator=g, dtype=torch.float64, requires_grad=True)
    values = torch.randn(3, 4, K, generator=g, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(3, 4, generator=g, dtype=torch.float64)
    inputs_ = (h, values, sc.W_q.weight, sc.U_k.weight, sc.v_a.weight)
    got = sc(sc.project_query(h).unsqueeze(1), sc.precompute(values), None)  # 3 x 4
    grads = torch.autograd.grad((got * weight).sum(), inputs_)
    ref = (torch.tanh(sc.W_q(h).unsqueeze(1) + sc.U_k(values)) @ sc.v_a.weight.T).squeeze(-1)
    ref_grads = torch.autograd.grad((ref * weight).sum(), inputs_)
    torch.testing.assert_close(got, ref)
    for have, want in zip(grads, ref_grads):
        torch.testing.assert_close(have, want)


def test_doubled_halves_are_bit_for_bit_the_doubled_sum():
    """Keeping both halves doubled changes no bit: 2k + 2q rounds as 2 (k + q) (scaling by 2 is
    exact in binary floating point), so σ(2k + 2q) is σ(2 (k + q)) exactly, in float32 and bf16."""
    g = torch.Generator().manual_seed(11)
    for dtype in (torch.float32, torch.bfloat16):
        k = (10 * torch.randn(64, 32, generator=g)).to(dtype)
        q = (10 * torch.randn(1, 32, generator=g)).to(dtype)
        assert torch.equal(torch.add(k * 2.0, q * 2.0).sigmoid(), torch.add(k, q).mul(2.0).sigmoid())


def test_location_score_rejects_too_long_sources():
    att = make("global", "location", max_src_len=4)
    values, mask, _, _ = inputs()
    with pytest.raises(ValueError, match="max_src_len"):
        att.precompute(values, mask)


def test_fixed_temperature_equals_softmax_over_T():
    values, mask, queries, feedbacks = inputs()
    base = make("global", seed=3)
    hot = make("global", seed=3, temperature=0.8)
    cache = base.precompute(values, mask)
    state = base.init_state(cache, summary(values, mask))
    scores = base.score_dense(base.scorer.project_query(queries[0]), cache)
    _, weights, _, _ = hot(queries[0], feedbacks[0], cache, state)
    torch.testing.assert_close(weights, masked_softmax(scores / 0.8, mask))


# --------------------------------------------------------------------------------------
# flexible attention
# --------------------------------------------------------------------------------------
@torch.no_grad()
def naive_flexible(att, values, mask, queries, feedbacks, sact=False):
    """Loop re-implementation of 2017 eqs. 4–8 (2016 eq. 7), float64, 1-based positions."""
    sc = att.scorer
    W_q, U_k, v_a = (m.weight.double() for m in (sc.W_q, sc.U_k, sc.v_a))
    W_g, v_g, b_g = att.W_g.weight.double(), att.v_g.double(), att.b_g.double()
    out = []
    for b, S in enumerate(LENGTHS):
        p_prev = 1.0  # p_0 = 1
        ctx_prev = values[b, :S].double().mean(0)
        rows = []
        for t in range(len(queries)):
            h, i = queries[t, b].double(), feedbacks[t, b].double()
            if att.g_feedback:
                g = torch.sigmoid(v_g @ torch.tanh(W_g @ torch.cat([h, i])) + b_g)
            else:
                g = torch.sigmoid(v_g @ torch.tanh(W_g @ h + b_g))
            temp = 1.0
            if sact:
                st = att.sact_temperature
                s_t = torch.cat([h, i]) if st.feedback else h  # SACT eq. 2's s_t (docs/method.md)
                beta = torch.tanh(st.W_c.weight.double() @ ctx_prev + st.U_s.weight.double() @ s_t)
                temp = float(st.lam ** beta)
            logits, pens = [], []
            for s in range(1, S + 1):
                score = v_a @ torch.tanh(W_q @ h + U_k @ values[b, s - 1].double())
                pen = g * (s - p_prev) ** 2 / (2 * att.sigma**2)
                pens.append(float(pen))
                logits.append(float(score) / temp - float(pen))
            a = torch.softmax(torch.tensor(logits, dtype=torch.float64), 0)
            p_t = float(sum(a[s - 1] * s for s in range(1, S + 1)))
            ctx = (a.unsqueeze(1) * values[b, :S].double()).sum(0)
            rows.append(dict(g=float(g), penalty=pens, a=a, p=p_t, p_prev=p_prev, ctx=ctx, temp=temp))
            p_prev, ctx_prev = p_t, ctx
        out.append(rows)
    return out


@pytest.mark.parametrize("g_feedback", [True, False])
@pytest.mark.parametrize("attention", ["flexible", "flexible_sact"])
def test_flexible_matches_naive_recomputation(attention, g_feedback):
    att = make(attention, g_feedback=g_feedback, sigma=1.5)
    values, mask, queries, feedbacks = inputs(scale=2.0)
    outs = run(att, values, mask, queries, feedbacks)
    ref = naive_flexible(att, values, mask, queries, feedbacks, sact=attention == "flexible_sact")
    for t, (context, weights, state, new_state, stats) in enumerate(outs):
        for b, S in enumerate(LENGTHS):
            r = ref[b][t]
            assert stats.g[b].item() == pytest.approx(r["g"], rel=1e-5, abs=1e-6)
            assert state.position[b].item() == pytest.approx(r["p_prev"], rel=1e-5)
            assert stats.position[b].item() == pytest.approx(r["p"], rel=1e-5)
            assert new_state.position[b].item() == pytest.approx(r["p"], rel=1e-5)
            pen = att.penalty(
                torch.arange(1, S + 1).unsqueeze(0), state.position[b : b + 1], stats.g[b : b + 1]
            )
            torch.testing.assert_close(
                pen[0].double(), torch.tensor(r["penalty"], dtype=torch.float64), rtol=1e-5, atol=1e-6
            )
            torch.testing.assert_close(weights[b, :S].double(), r["a"], rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(context[b].double(), r["ctx"], rtol=1e-5, atol=1e-6)
            if attention == "flexible_sact":
                assert stats.temperature[b].item() == pytest.approx(r["temp"], rel=1e-5)
    assert outs[0][2].position.tolist() == [1.0] * len(LENGTHS)  # p_0 = 1


@pytest.mark.parametrize("g_feedback", [True, False])
def test_flexible_with_zero_strength_equals_global(g_feedback, monkeypatch):
    values, mask, queries, feedbacks = inputs()
    glob = make("global", seed=4)
    flex = make("flexible", seed=5, g_feedback=g_feedback)
    flex.scorer.load_state_dict(glob.scorer.state_dict())  # same score parameters
    if g_feedback:
        with torch.no_grad():  # sigmoid(-1e4) == 0 exactly in float32
            flex.b_g.fill_(-1e4)
    else:
        monkeypatch.setattr(flex, "strength", lambda q, f: torch.zeros(q.size(0)))
    for (c1, w1, *_), (c2, w2, _, _, stats) in zip(
        run(glob, values, mask, queries, feedbacks), run(flex, values, mask, queries, feedbacks)
    ):
        assert torch.all(stats.g == 0)
        torch.testing.assert_close(w2, w1)
        torch.testing.assert_close(c2, c1)
    # with g = 0 even a tiny threshold keeps every position (radius = inf)
    for (_, w1, *_), (_, w2, _, _, stats) in zip(
        run(glob, values, mask, queries, feedbacks),
        run(flex, values, mask, queries, feedbacks, tau=1e-3),
    ):
        assert stats.window.tolist() == LENGTHS
        torch.testing.assert_close(w2, w1)


def dense_masked_reference(att, query, feedback, cache, state, tau):
    """Dense computation over all positions, then positions with penalty >= tau (except the
    one nearest p_{t-1}) masked with -inf: what the windowed path must reproduce."""
    g = att.strength(query, feedback)
    temp = att.sact_temperature(state.context, query, feedback) if att.sact else None
    scores = att.score_dense(att.scorer.project_query(query), cache)
    positions = torch.arange(1, cache.mask.size(1) + 1).unsqueeze(0)
    pen = att.penalty(positions, state.position, g)
    logits = att.flexible_logits(scores, pen, temp)
    nearest = torch.minimum(torch.round(state.position).clamp_min(1), cache.lengths.float())
    keep = cache.mask & ((pen < tau) | (positions == nearest.unsqueeze(1)))
    weights = masked_softmax(logits, keep)
    return weights, keep


@pytest.mark.parametrize("tau", [0.05, 0.3, 1.2, 4.0])
@pytest.mark.parametrize("attention", ["flexible", "flexible_sact"])
def test_finite_tau_equals_masked_dense_and_scores_only_window(attention, tau):
    att = make(attention, sigma=1.0)
    with torch.no_grad():
        att.b_g.fill_(1.5)  # strong penalties so that windows are narrow
    values, mask, queries, feedbacks = inputs(scale=2.0)
    cache = att.precompute(values, mask)
    state = att.init_state(cache, summary(values, mask))
    counter = ScoreCounter(att.scorer)
    total = 0
    for q, f in zip(queries, feedbacks):
        with torch.no_grad():
            ref_w, keep = dense_masked_reference(att, q, f, cache, state, tau)
        counter.rows, counter.positions = 0, []
        context, weights, new_state, stats = att(q, f, cache, state, tau)
        # the score function saw exactly the window positions, and stats counts them
        assert counter.rows == int(stats.window.sum()) == int(keep.sum())
        assert torch.equal(stats.window, keep.sum(1))
        seen = torch.cat(counter.positions)  # 0-based indices, row-major
        assert torch.equal(seen, keep.nonzero()[:, 1])
        torch.testing.assert_close(weights, ref_w)
        torch.testing.assert_close(context, torch.einsum("bs,bsk->bk", ref_w, values))
        torch.testing.assert_close(new_state.position, (ref_w * torch.arange(1, S_MAX + 1)).sum(1))
        assert torch.all(weights[~keep] == 0)
        total += int(stats.window.sum())
        state = new_state
    assert total < len(queries) * sum(LENGTHS)  # something was actually skipped


@pytest.mark.parametrize("attention", ["local_m", "local_p", "flexible", "flexible_sact"])
def test_single_row_window_path_equals_the_batched_one(attention):
    """A batch of one (per-sentence decoding) takes its window as a slice of the keys and h̄; each
    sentence decoded alone gives the batched path's weights, context, state and window stats,
    and its score function sees exactly the same positions."""
    att = make(attention, sigma=1.0)
    values, mask, queries, feedbacks = inputs(scale=2.0)
    tau = 0.3
    counter = ScoreCounter(att.scorer)
    batched = run(att, values, mask, queries, feedbacks, tau)
    seen_batched = [p for p in counter.positions]
    for i, length in enumerate(LENGTHS):
        counter.positions = []
        alone = run(att, values[i:i + 1, :length], mask[i:i + 1, :length], queries[:, i:i + 1],
                    feedbacks[:, i:i + 1], tau)
        for t, ((c0, w0, _, n0, s0), (c1, w1, _, n1, s1)) in enumerate(zip(batched, alone)):
            torch.testing.assert_close(c1[0], c0[i])
            torch.testing.assert_close(w1[0], w0[i, :length])
            torch.testing.assert_close(n1.position[0], n0.position[i])
            for name in ("window", "span_lo", "span_hi"):
                assert getattr(s1, name).tolist() == [getattr(s0, name)[i].item()], name
            rows = torch.repeat_interleave(torch.arange(len(LENGTHS)), s0.window)
            assert torch.equal(counter.positions[t].flatten(), seen_batched[t][rows == i])


@pytest.mark.parametrize("attention", ["flexible", "flexible_sact"])
def test_tau_inf_is_dense(attention):
    att = make(attention)
    values, mask, queries, feedbacks = inputs()
    counter = ScoreCounter(att.scorer)
    inf = run(att, values, mask, queries, feedbacks, tau=math.inf)
    assert counter.rows == len(queries) * len(LENGTHS) * S_MAX  # dense kernel, no gather
    huge = run(att, values, mask, queries, feedbacks, tau=1e9)  # windowed path, full window
    for (c1, w1, *_, s1), (c2, w2, *_, s2) in zip(inf, huge):
        assert s1.window.tolist() == s2.window.tolist() == LENGTHS
        torch.testing.assert_close(w2, w1)
        torch.testing.assert_close(c2, c1)


@pytest.mark.parametrize("sigma", [0.5, 1.0, 1.5, 3.0])
def test_single_row_span_is_bit_identical_to_the_batched_span(sigma):
    """vision_span_row (per-sentence decoding, numpy float32 scalars) gives the bounds of
    vision_span (tensors) for random and adversarial p_{t-1}, g_t, τ and S: g_t = 0 and
    denormal (infinite radius), p on and next to half-integers (round half to even), p ± r
    on an integer (the open interval's edge), p outside [1, S], τ = 0."""
    att = make("flexible", sigma=sigma)
    gen = torch.Generator().manual_seed(int(sigma * 10))
    n = 4000
    prev = torch.rand(n, generator=gen) * 60 - 5
    prev[:400] = torch.arange(400) * 0.5 - 5  # half-integers
    prev[400:800] = torch.nextafter(prev[:400], torch.tensor(float("inf")))
    g = torch.rand(n, generator=gen)
    g[800:810] = 0.0
    g[810:820] = torch.finfo(torch.float32).tiny / 4  # denormal
    g[820:830] = 1e-30
    lengths = torch.randint(1, 50, (n,), generator=gen)
    for tau in (0.0, 1e-6, 0.1, 0.8, 3.547, 50.0):
        # p chosen so that p - r is (about) an integer: the edge of the open interval
        radius = sigma * torch.sqrt(2.0 * tau / g[1000:2000].clamp_min(torch.finfo(torch.float32).tiny))
        prev[1000:2000] = torch.round(torch.rand(1000, generator=gen) * 40) + radius
        lo, hi = att.vision_span(prev, g, tau, lengths)
        for i in range(n):
            radius = float(att.span_radius(g[i:i + 1], tau))
            row = att.vision_span_row(float(prev[i]), radius, int(lengths[i]))
            assert row == (int(lo[i]), int(hi[i])), (i, float(prev[i]), float(g[i]), tau, int(lengths[i]))


@pytest.mark.parametrize("tau", [0.0, 1e-9])
def test_nearest_position_always_scored(tau):
    att = make("flexible")
    values, mask, queries, feedbacks = inputs()
    cache = att.precompute(values, mask)
    state = att.init_state(cache, summary(values, mask))
    state = state._replace(position=torch.tensor([3.4, 3.6, 2.0, 0.7]))
    counter = ScoreCounter(att.scorer)
    _, weights, new_state, stats = att(queries[0], feedbacks[0], cache, state, tau)
    assert stats.window.tolist() == [1, 1, 1, 1] and counter.rows == 4
    nearest = [3, 4, 2, 1]
    assert stats.span_lo.tolist() == nearest == stats.span_hi.tolist()
    expected = torch.zeros_like(weights)
    expected[torch.arange(4), torch.tensor(nearest) - 1] = 1.0
    assert torch.equal(weights, expected)
    assert new_state.position.tolist() == [3.0, 4.0, 2.0, 1.0]


def test_vision_span_formula():
    att = FlexibleAttention(make("global").scorer, Q, E, K, A, sigma=1.5)
    p = torch.tensor([4.0, 4.0, 1.0, 2.5])
    g = torch.tensor([1.0, 0.25, 1.0, 1e-30])
    lengths = torch.tensor([9, 9, 9, 3])
    lo, hi = att.vision_span(p, g, 1.0, lengths)
    # radius = 1.5 * sqrt(2 / g): 2.121 -> (1.88, 6.12) -> 2..6 ; 4.243 -> (-0.24, 8.24) -> 1..8
    assert lo.tolist() == [2, 1, 1, 1] and hi.tolist() == [6, 8, 3, 3]
    # exact boundary: penalty(s) == tau is excluded (strict inequality)
    att.sigma = 1.0  # radius = sqrt(2 * 0.5 / 1) = 1 exactly: s = 4, 6 have penalty == tau
    lo, hi = att.vision_span(torch.tensor([5.0]), torch.tensor([1.0]), 0.5, torch.tensor([9]))
    assert (lo.item(), hi.item()) == (5, 5)


# --------------------------------------------------------------------------------------
# SACT
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("attention", ["sact", "flexible_sact"])
def test_sact_temperature_strictly_inside_range(attention):
    lam = 4.0
    att = make(attention, sact_lambda=lam)
    values, mask, queries, feedbacks = inputs(scale=3.0)
    temps = torch.cat([o[4].temperature for o in run(att, values, mask, queries, feedbacks)])
    assert torch.all(temps > 1 / lam) and torch.all(temps < lam)
    assert temps.max() - temps.min() > 0.05  # it does adapt


@pytest.mark.parametrize("sact_feedback", [True, False])
def test_sact_weights_are_softmax_of_scores_over_temperature(sact_feedback):
    att = make("sact", sact_lambda=3.0, sact_feedback=sact_feedback)
    values, mask, queries, feedbacks = inputs()
    cache = att.precompute(values, mask)
    state = att.init_state(cache, summary(values, mask))
    for q, f in zip(queries, feedbacks):
        st = att.sact_temperature
        # SACT eqs. 1-2 with c~_{t-1} = previous context and s_t = [h_{t-1}; i_t] (the word
        # just emitted, the default) or s_t = h_{t-1}
        s_t = torch.cat([q, f], -1) if sact_feedback else q
        beta = torch.tanh(state.context @ st.W_c.weight.T + s_t @ st.U_s.weight.T).squeeze(-1)
        temp = 3.0**beta
        scores = att.score_dense(att.scorer.project_query(q), cache)
        context, weights, new_state, stats = att(q, f, cache, state)
        torch.testing.assert_close(stats.temperature, temp)
        torch.testing.assert_close(weights, masked_softmax(scores / temp.unsqueeze(1), mask))
        assert torch.equal(new_state.context, context)
        state = new_state
    # c~_0 is the mean of h̄ over the real positions
    first = att.init_state(cache, summary(values, mask))
    torch.testing.assert_close(first.context[1], values[1, :4].mean(0))


# --------------------------------------------------------------------------------------
# state
# --------------------------------------------------------------------------------------
def test_cache_and_state_index_select():
    att = make("flexible")
    values, mask, queries, feedbacks = inputs()
    cache = att.precompute(values, mask)
    state = att.init_state(cache, summary(values, mask))
    _, _, state, _ = att(queries[0], feedbacks[0], cache, state)
    index = torch.tensor([2, 2, 0])
    c2, s2 = cache.index_select(index), state.index_select(index)
    assert isinstance(s2, AttentionState)
    ctx_a, w_a, st_a, _ = att(queries[1], feedbacks[1], cache, state)
    ctx_b, w_b, st_b, _ = att(queries[1][index], feedbacks[1][index], c2, s2)
    torch.testing.assert_close(w_b, w_a[index])
    torch.testing.assert_close(ctx_b, ctx_a[index])
    torch.testing.assert_close(st_b.position, st_a.position[index])


@pytest.mark.parametrize(
    "attention,score,tau",
    [("local_p", "concat", math.inf), ("local_m", "location", math.inf), ("flexible", "general", 0.5)],
)
def test_gradients_flow_through_windowed_paths(attention, score, tau):
    att = make(attention, score, local_D=1)
    values, mask, queries, feedbacks = inputs()
    values.requires_grad_(True)
    loss = sum(o[0].pow(2).sum() for o in run(att, values, mask, queries, feedbacks, tau=tau))
    loss.backward()
    for name, param in att.named_parameters():
        assert param.grad is not None and param.grad.abs().sum() > 0, name
    assert values.grad[~mask].abs().sum() == 0  # padding never reaches the context
