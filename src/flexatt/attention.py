"""Attention mechanisms: global, local-m / local-p, flexible, SACT and flexible+SACT.

All variants share one interface (see :class:`Attention`)::

    cache = attention.precompute(values, mask)              # once per sentence
    state = attention.init_state(cache, summary)            # p_0, c~_0, t = 0
    context, weights, state, stats = attention(query, feedback, cache, state, tau)

``query`` is the previous decoder state h_{t-1} (Bahdanau-style decoder; docs/method.md, Model) and
``feedback`` the embedding i_t of the previous output token y_{t-1}.

Positions
---------
The papers number source positions s = 1..S. Tensors are 0-based: slot ``j`` of a
``batch x src_len`` tensor holds position ``s = j + 1``. Every *position value* that enters
an equation (p_t, the penalty distance, the Gaussian of local-p, window bounds ``span_lo`` /
``span_hi`` in :class:`AttentionStats`) is 1-based, exactly as in the papers; only the
indices used to address tensors are 0-based (``index = s - 1``).

Score evaluation and the window metric (docs/method.md, Window)
---------------------------------------------------------------
Variants that restrict the vision span (local-m, local-p, and flexible at a finite
threshold ``tau``) score *only* the positions inside their window: the (row, position)
pairs of the window are packed into one flat list with a single batched index operation,
the score function is evaluated on that list, and the scores are scattered into a
``batch x W_max`` slice padded with ``-inf`` (:meth:`Attention.score_window`). The number of
evaluated positions per row (``stats.window``) is counted from the very index list that is
handed to the score function. A batch of one row (per-sentence decoding) needs no index list:
its window is a slice of the cached keys and of h̄, and its count is the slice's length. Dense
variants score all ``S_max`` slots of the padded batch (one batched kernel) and report the real
length ``S_i`` of each row.

Padding and out-of-window slots are always masked with ``-inf`` before a softmax
(``masked_fill``), never multiplied by 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple, Optional

import numpy as np
import torch
from torch import Tensor, nn

from flexatt.schema import SCORE_TYPES

NEG_INF = float("-inf")
_F32 = np.float32

#: the built-in variants; :func:`attention_types` adds those registered by ``flexatt.variants``
ATTENTION_TYPES = ("global", "local_m", "local_p", "flexible", "sact", "flexible_sact")


# --------------------------------------------------------------------------------------
# Containers
# --------------------------------------------------------------------------------------
class AttentionCache(NamedTuple):
    """Per-sentence encoder-side tensors, computed once by :meth:`Attention.precompute`."""

    keys: Tensor  # batch x src_len x d_key   (score-specific key projection, e.g. U_a h̄)
    values: Tensor  # batch x src_len x 2H    (encoder states h̄, averaged into the context)
    mask: Tensor  # batch x src_len          (bool, True at real positions)
    lengths: Tensor  # batch                 (long, S_i)

    def index_select(self, index: Tensor) -> "AttentionCache":
        """Select / repeat / reorder batch rows (beam expansion, dropping finished rows)."""
        return AttentionCache(*(x.index_select(0, index) for x in self))


class AttentionState(NamedTuple):
    """Recurrent attention state carried from step t-1 to step t.

    ``position`` is p_{t-1} (1-based; used by flexible attention, eq. 5–6; a trace for the
    other variants), ``context`` is the previous context c̃_{t-1} (used by SACT, eq. 2) and
    ``step`` the number of decoding steps already taken (t - 1; local-m uses p_t = t).
    """

    position: Tensor  # batch       (float)
    context: Tensor  # batch x 2H
    step: Tensor  # batch           (long)

    def index_select(self, index: Tensor) -> "AttentionState":
        return AttentionState(*(x.index_select(0, index) for x in self))


class AttentionStats(NamedTuple):
    """Per-step traces of one attention call (all ``batch``-shaped, or ``None``)."""

    window: Tensor  # batch long: positions whose score was evaluated at this step
    span_lo: Tensor  # batch long: first scored position (1-based)
    span_hi: Tensor  # batch long: last scored position (1-based)
    position: Tensor  # batch float: p_t (local: the centre; flexible: eq. 4; else Σ a_t(s)·s)
    g: Optional[Tensor] = None  # batch: penalty strength g_t (flexible variants)
    temperature: Optional[Tensor] = None  # batch: SACT temperature τ_t (SACT variants)


def masked_softmax(logits: Tensor, mask: Tensor) -> Tensor:
    """Softmax over the last dim after setting masked-out slots to ``-inf`` (exact zeros)."""
    return torch.softmax(logits.masked_fill(~mask, NEG_INF), dim=-1)


# --------------------------------------------------------------------------------------
# Score functions
# --------------------------------------------------------------------------------------
class Scorer(nn.Module):
    """A score function score(h_{t-1}, h̄_s), split into a per-sentence key half and a
    per-step query half so that the key half is computed once per sentence.

    ``forward(q, keys, positions)`` broadcasts over leading dimensions: the dense path calls
    it with ``batch x 1 x d`` / ``batch x S x d`` / ``1 x S``, the windowed path with flat
    ``N x d`` / ``N x d`` / ``N`` lists of (row, position) pairs. ``positions`` are 0-based
    tensor indices; only the location score uses them.
    """

    def precompute(self, values: Tensor) -> Tensor:  # batch x S x 2H -> batch x S x d_key
        raise NotImplementedError

    def project_query(self, query: Tensor) -> Tensor:  # batch x Q -> batch x d_query
        raise NotImplementedError

    def forward(self, q: Tensor, keys: Tensor, positions: Tensor) -> Tensor:
        raise NotImplementedError


class _AdditiveScore(torch.autograd.Function):
    """e = v_aᵀ tanh(q + k) over the last dim, forward and backward fused by hand.

    tanh is evaluated through the identity tanh(x) = 2 σ(2x) - 1: PyTorch's CPU tanh is about
    ten times slower than its sigmoid, and this tensor (batch x S x att, every decoding step)
    is the largest one of the recurrence. The forward keeps only s = σ(2(q + k)):

        e = 2 (s · v_a) - Σ v_a,    ∂e/∂(q + k) = v_a · (1 - tanh²) = v_a · 4 s (1 - s).

    Float32 results agree with ``v_a(torch.tanh(q + k))`` to ~1e-6 (tests check both values and
    gradients).
    """

    @staticmethod
    def forward(ctx, q: Tensor, keys: Tensor, v: Tensor) -> Tensor:
        s = torch.add(keys, q).mul_(2.0).sigmoid_()  # ... x att (q broadcasts over keys)
        ctx.save_for_backward(s, v)
        ctx.q_shape, ctx.k_shape = q.shape, keys.shape
        return torch.matmul(s, v).mul_(2.0).sub_(v.sum())  # ...

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: Tensor) -> tuple[Optional[Tensor], Optional[Tensor], Optional[Tensor]]:
        s, v = ctx.saved_tensors
        grad_q = grad_k = grad_v = None
        if ctx.needs_input_grad[2]:  # ∂e/∂v = 2 s - 1, summed over every score
            flat = s.reshape(-1, s.size(-1))
            grad_v = torch.matmul(grad.reshape(1, -1), flat).squeeze(0).mul_(2.0).sub_(grad.sum())
        if ctx.needs_input_grad[0] or ctx.needs_input_grad[1]:
            pre = torch.sub(1.0, s).mul_(s).mul_(grad.unsqueeze(-1) * (4.0 * v))  # ... x att
            if ctx.needs_input_grad[1]:
                grad_k = pre.sum_to_size(ctx.k_shape)
            if ctx.needs_input_grad[0]:
                grad_q = pre.sum_to_size(ctx.q_shape)
                if grad_k is not None and grad_q.data_ptr() == grad_k.data_ptr():
                    grad_q = grad_q.clone()  # never hand autograd one buffer twice
        return grad_q, grad_k, grad_v


class ConcatScore(Scorer):
    """``concat``: v_aᵀ tanh(W_a [h_{t-1}; h̄_s]) = v_aᵀ tanh(W_q h_{t-1} + U_k h̄_s).

    Flexible Attention 2017, eq. 3 (Bahdanau et al.'s additive score written as a
    concatenation, as in Luong et al. 2015). U_k h̄ is cached per sentence; the tanh and the
    product with v_a run in one fused step (:class:`_AdditiveScore`).
    """

    def __init__(self, query_size: int, key_size: int, att_size: int):
        super().__init__()
        self.W_q = nn.Linear(query_size, att_size, bias=False)
        self.U_k = nn.Linear(key_size, att_size, bias=False)
        self.v_a = nn.Linear(att_size, 1, bias=False)

    def precompute(self, values: Tensor) -> Tensor:
        return self.U_k(values)  # batch x S x att

    def project_query(self, query: Tensor) -> Tensor:
        return self.W_q(query)  # batch x att

    def forward(self, q: Tensor, keys: Tensor, positions: Tensor) -> Tensor:
        return _AdditiveScore.apply(q, keys, self.v_a.weight.view(-1))


class GeneralScore(Scorer):
    """``general`` (Luong et al. 2015, §3.1): h_{t-1}ᵀ W_a h̄_s; W_a h̄ is cached per sentence."""

    def __init__(self, query_size: int, key_size: int):
        super().__init__()
        self.W_a = nn.Linear(key_size, query_size, bias=False)

    def precompute(self, values: Tensor) -> Tensor:
        return self.W_a(values)  # batch x S x Q

    def project_query(self, query: Tensor) -> Tensor:
        return query

    def forward(self, q: Tensor, keys: Tensor, positions: Tensor) -> Tensor:
        return (q * keys).sum(-1)


class DotScore(Scorer):
    """``dot`` (Luong et al. 2015, §3.1) with both sides projected to ``att_size`` (the decoder and
    the bidirectional encoder have different sizes): (W_q h_{t-1})ᵀ (W_k h̄_s).
    ``scaled_dot`` divides by √att_size (Vaswani et al. 2017)."""

    def __init__(self, query_size: int, key_size: int, att_size: int, scaled: bool = False):
        super().__init__()
        self.W_q = nn.Linear(query_size, att_size, bias=False)
        self.W_k = nn.Linear(key_size, att_size, bias=False)
        self.scale = 1.0 / math.sqrt(att_size) if scaled else 1.0

    def precompute(self, values: Tensor) -> Tensor:
        return self.W_k(values)  # batch x S x att

    def project_query(self, query: Tensor) -> Tensor:
        return self.W_q(query)  # batch x att

    def forward(self, q: Tensor, keys: Tensor, positions: Tensor) -> Tensor:
        return (q * keys).sum(-1) * self.scale


class LocationScore(Scorer):
    """``location`` (Luong et al. 2015, §3.1): a_t = softmax(W_a h_{t-1}) over positions.

    The logits W_a h_{t-1} + b_a live on ``max_len`` positions; position s uses row s-1 of
    W_a, so a windowed call evaluates only the rows of its window, and the logits of a
    sentence are its first S_i rows (the rest is padding, masked by the caller).
    Keys are not used (``precompute`` returns a ``batch x S x 0`` tensor).
    """

    def __init__(self, query_size: int, max_len: int):
        super().__init__()
        self.max_len = max_len
        self.W_a = nn.Parameter(torch.empty(max_len, query_size))
        self.b_a = nn.Parameter(torch.zeros(max_len))
        nn.init.normal_(self.W_a, std=query_size**-0.5)

    def precompute(self, values: Tensor) -> Tensor:
        if values.size(1) > self.max_len:
            raise ValueError(
                f"location score: source length {values.size(1)} exceeds max_src_len={self.max_len}"
            )
        return values.new_zeros(values.size(0), values.size(1), 0)

    def project_query(self, query: Tensor) -> Tensor:
        return query

    def forward(self, q: Tensor, keys: Tensor, positions: Tensor) -> Tensor:
        return (q * self.W_a[positions]).sum(-1) + self.b_a[positions]


def build_scorer(
    score: str, query_size: int, key_size: int, att_size: int, max_src_len: int = 256
) -> Scorer:
    """Score function by config name (see :data:`SCORE_TYPES`)."""
    if score == "concat":
        return ConcatScore(query_size, key_size, att_size)
    if score == "general":
        return GeneralScore(query_size, key_size)
    if score in ("dot", "scaled_dot"):
        return DotScore(query_size, key_size, att_size, scaled=score == "scaled_dot")
    if score == "location":
        return LocationScore(query_size, max_src_len)
    raise ValueError(f"model.score: {score!r}; allowed: {', '.join(SCORE_TYPES)}")


# --------------------------------------------------------------------------------------
# Base class
# --------------------------------------------------------------------------------------
class Attention(nn.Module):
    """Common machinery: key caching, dense and windowed scoring, context, traces.

    :param scorer: the score function.
    :param temperature: fixed temperature T of the SACT paper's Figure 1 baseline: the
        content scores e_t are replaced by e_t / T. ``None`` = 1.
    """

    def __init__(self, scorer: Scorer, temperature: Optional[float] = None):
        super().__init__()
        self.scorer = scorer
        self.temperature = temperature

    # -- per sentence ------------------------------------------------------------------
    def precompute(self, values: Tensor, mask: Tensor) -> AttentionCache:
        """Cache the key half of the score function: ``values`` batch x S x 2H, ``mask``
        batch x S (bool, True at real positions)."""
        keys = self.scorer.precompute(values)  # batch x S x d_key
        return AttentionCache(keys, values, mask, mask.sum(1))

    def init_state(self, cache: AttentionCache, summary: Tensor) -> AttentionState:
        """p_0 = 1 (the first source position), c̃_0 = ``summary`` (batch x 2H; the model
        passes the mean of h̄ over real positions), t - 1 = 0 steps taken."""
        batch = cache.values.size(0)
        return AttentionState(
            position=cache.values.new_ones(batch),
            context=summary,
            step=torch.zeros(batch, dtype=torch.long, device=summary.device),
        )

    # -- scoring ------------------------------------------------------------------------
    def score_dense(self, q: Tensor, cache: AttentionCache) -> Tensor:
        """Scores at all S_max slots: ``q`` batch x d -> batch x S."""
        src_len = cache.keys.size(1)
        positions = torch.arange(src_len, device=q.device).unsqueeze(0)  # 1 x S (0-based)
        return self.scorer(q.unsqueeze(1), cache.keys, positions)

    def score_window(
        self, q: Tensor, cache: AttentionCache, lo: Tensor, hi: Tensor
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Scores of the positions lo_i..hi_i (1-based, inclusive, 1 <= lo <= hi <= S_i) only.

        :param q: batch x d projected query.
        :param lo, hi: batch (long) window bounds.
        :return: ``scores`` batch x W_max (``-inf`` at slots outside the row's window),
            ``positions`` batch x W_max (1-based; slot j of row i is position lo_i + j),
            ``in_window`` batch x W_max (bool), ``count`` batch (long): number of positions
            scored per row, counted from the index list handed to the score function.
        """
        batch = q.size(0)
        if batch == 1:  # one row (per-sentence decoding): the window is a slice, no index list
            scores, positions, count = self.score_slice(q, cache, int(lo), int(hi))
            return scores, positions, torch.ones_like(scores, dtype=torch.bool), count
        width = hi - lo + 1  # batch
        w_max = int(width.max())
        slot = torch.arange(w_max, device=q.device)  # W_max
        positions = lo.unsqueeze(1) + slot.unsqueeze(0)  # batch x W_max (1-based)
        in_window = slot.unsqueeze(0) < width.unsqueeze(1)  # batch x W_max
        # one batched gather of the (row, position) pairs inside the windows
        rows, cols = in_window.nonzero(as_tuple=True)  # N, N
        index = lo.index_select(0, rows) + cols - 1  # N (0-based source index)
        keys = cache.keys.flatten(0, 1).index_select(0, rows * cache.keys.size(1) + index)  # N x d
        flat = self.scorer(q.index_select(0, rows), keys, index)  # N
        scores = q.new_full((batch, w_max), NEG_INF).index_put((rows, cols), flat)
        count = torch.bincount(rows, minlength=batch)  # batch
        return scores, positions, in_window, count

    def score_slice(self, q: Tensor, cache: AttentionCache, first: int, last: int) -> tuple[Tensor, Tensor, Tensor]:
        """Scores of positions ``first..last`` (1-based, inclusive) of a batch of one row: the
        window is a slice of the cached keys, no index list.

        :return: ``scores`` 1 x W, ``positions`` 1 x W (1-based), ``count`` (1,) long: the number
            of positions handed to the score function.
        """
        positions = torch.arange(first, last + 1, device=q.device)  # W (1-based)
        flat = self.scorer(q, cache.keys[0, first - 1:last], positions - 1)  # W
        count = torch.full((1,), flat.numel(), dtype=torch.long, device=q.device)
        return flat.unsqueeze(0), positions.unsqueeze(0), count

    def content_logits(self, scores: Tensor) -> Tensor:
        """e_t / T for the fixed-temperature baseline (SACT paper, Fig. 1); identity if unset."""
        return scores if self.temperature is None else scores / self.temperature

    # -- outputs ------------------------------------------------------------------------
    @staticmethod
    def expected_position(weights: Tensor, positions: Tensor) -> Tensor:
        """p_t = Σ_s a_t(s) · s (Flexible Attention 2017, eq. 4); ``positions`` 1-based,
        broadcastable to ``weights`` (batch x W)."""
        return (weights * positions.to(weights.dtype)).sum(-1)

    @staticmethod
    def context_dense(weights: Tensor, values: Tensor) -> Tensor:
        """c_t = Σ_s a_t(s) h̄_s (2017, eq. 1; SACT eq. 3): batch x W, batch x W x 2H ->
        batch x 2H (W = S on the dense path, the gathered window slots otherwise)."""
        return torch.bmm(weights.unsqueeze(1), values).squeeze(1)

    @staticmethod
    def window_to_full(
        slot_weights: Tensor, positions: Tensor, cache: AttentionCache
    ) -> tuple[Tensor, Tensor]:
        """The weights scattered back to the source positions, and the context (eq. 1) from them.

        Only the window was scored; the context is the sum over the window's h̄_s. A single row
        takes its window as a slice of h̄. A batch scatters the slot weights to ``batch x S`` (exact
        zeros outside each row's window) and sums with one ``bmm`` over h̄: at the sizes of this
        project that is faster than gathering each row's window of h̄ first (the gathered rows
        are written and read again; ``benchmarks/decode_speed.py`` measures the whole step).

        :param slot_weights: batch x W_max (exact zeros outside the row's window)
        :param positions: batch x W_max 1-based positions of the slots
        :return: context batch x 2H (eq. 1 over the window), weights batch x S
        """
        batch, src_len, _ = cache.values.shape
        if batch == 1:  # one row: the window is a slice of h̄
            first = int(positions[0, 0]) - 1
            window = slice(first, first + positions.size(1))
            context = torch.mm(slot_weights, cache.values[0, window])  # 1 x 2H
            full = slot_weights.new_zeros(1, src_len)
            full[:, window] = slot_weights
            return context, full
        index = (positions - 1).clamp(0, src_len - 1)  # batch x W_max (slots outside are 0-weight)
        full = slot_weights.new_zeros(batch, src_len).scatter_add(1, index, slot_weights)  # batch x S
        return Attention.context_dense(full, cache.values), full

    def dense_spans(self, cache: AttentionCache) -> tuple[Tensor, Tensor, Tensor]:
        """(window, span_lo, span_hi) of a dense call: every real position, S_i per row."""
        count = cache.mask.sum(1)  # the mask applied to the scores of this call
        return count, torch.ones_like(count), count

    def forward(
        self,
        query: Tensor,
        feedback: Tensor,
        cache: AttentionCache,
        state: AttentionState,
        tau: Optional[float] = None,
    ) -> tuple[Tensor, Tensor, AttentionState, AttentionStats]:
        """One decoding step.

        :param query: batch x Q, the previous decoder state h_{t-1}.
        :param feedback: batch x E, the feedback embedding i_t.
        :param cache: from :meth:`precompute`.
        :param state: from :meth:`init_state` or the previous call.
        :param tau: Flexible Attention's test-time threshold (ignored by variants without a
            position penalty). ``None`` or ``inf``: score every position.
        :return: context batch x 2H, weights batch x S (zeros at padding and outside the
            window), the new state, :class:`AttentionStats`.
        """
        raise NotImplementedError


# --------------------------------------------------------------------------------------
# Variants
# --------------------------------------------------------------------------------------
class GlobalAttention(Attention):
    """Global attention: a_t(s) = softmax_s(score(h_{t-1}, h̄_s)) over all S positions
    (Flexible Attention 2017, eqs. 1–3; Luong et al. 2015 "global")."""

    def forward(self, query, feedback, cache, state, tau=None):
        q = self.scorer.project_query(query)  # batch x d
        scores = self.score_dense(q, cache)  # batch x S
        weights = masked_softmax(self.content_logits(scores), cache.mask)  # batch x S
        context = self.context_dense(weights, cache.values)  # batch x 2H
        positions = torch.arange(1, cache.mask.size(1) + 1, device=query.device)  # S (1-based)
        p_t = self.expected_position(weights, positions)
        count, lo, hi = self.dense_spans(cache)
        new_state = AttentionState(p_t, context, state.step + 1)
        return context, weights, new_state, AttentionStats(count, lo, hi, p_t)


class SACTTemperature(nn.Module):
    """SACT attention temperature (Lin et al. 2018, eqs. 1–2):

        τ_t = λ^{β_t},   β_t = tanh(W_c c̃_{t-1} + U_s s_t),

    so τ_t ∈ (1/λ, λ) in exact arithmetic (float32 tanh saturates to ±1 only for
    |W_c c̃ + U_s s| ≳ 9). In SACT's Luong-style decoder s_t is the decoder output that has
    already read the word just emitted, y_{t-1}; the paper's content-word / function-word
    behaviour rests on that. Our Bahdanau-style decoder attends from h_{t-1}, which has not
    read y_{t-1}, so with ``feedback_size`` set (config ``model.sact_feedback``, the default)
    s_t := [h_{t-1}; i_t], the query and the feedback embedding of y_{t-1}, as g_t reads them
    in Flexible Attention's eq. 8; without it s_t := h_{t-1} (docs/method.md, SACT).
    """

    def __init__(self, query_size: int, ctx_size: int, lam: float, feedback_size: Optional[int] = None):
        super().__init__()
        self.lam = lam
        self.feedback = feedback_size is not None
        self.W_c = nn.Linear(ctx_size, 1, bias=False)
        self.U_s = nn.Linear(query_size + (feedback_size or 0), 1, bias=False)

    def forward(self, prev_context: Tensor, query: Tensor, feedback: Optional[Tensor] = None) -> Tensor:
        """batch x 2H (c̃_{t-1}), batch x Q (h_{t-1}), batch x E (i_t) -> batch (τ_t)."""
        s = torch.cat([query, feedback], dim=-1) if self.feedback else query
        beta = torch.tanh(self.W_c(prev_context) + self.U_s(s)).squeeze(-1)
        return torch.pow(torch.as_tensor(self.lam, dtype=beta.dtype, device=beta.device), beta)

    @staticmethod
    def rescale(scores: Tensor, temperature: Tensor) -> Tensor:
        """The logits of SACT eq. 4, e_t / τ_t: batch x W, batch -> batch x W."""
        return scores / temperature.unsqueeze(1)


class SACTAttention(Attention):
    """Self-Adaptive Control of Temperature (Lin et al. 2018).

    τ_t from :class:`SACTTemperature` (SACT eqs. 1–2), ã_t = softmax(e_t / τ_t) (eq. 4),
    c̃_t = Σ ã_t h̄ (eq. 3).

    c̃_0: the paper initialises it "with the initial state of the decoder"; our initial
    decoder state has size H while contexts have size 2H, so c̃_0 is the mean of h̄ over
    real positions, the vector the initial decoder state is computed from (see
    ``encoders.py``; passed as ``summary`` to :meth:`Attention.init_state`).
    """

    def __init__(self, scorer: Scorer, query_size: int, ctx_size: int, lam: float,
                 feedback_size: Optional[int] = None):
        super().__init__(scorer, temperature=None)
        self.sact_temperature = SACTTemperature(query_size, ctx_size, lam, feedback_size)

    def forward(self, query, feedback, cache, state, tau=None):
        temp = self.sact_temperature(state.context, query, feedback)  # batch
        q = self.scorer.project_query(query)
        scores = self.score_dense(q, cache)  # batch x S
        weights = masked_softmax(self.sact_temperature.rescale(scores, temp), cache.mask)  # eq. 4
        context = self.context_dense(weights, cache.values)  # SACT eq. 3
        positions = torch.arange(1, cache.mask.size(1) + 1, device=query.device)
        p_t = self.expected_position(weights, positions)
        count, lo, hi = self.dense_spans(cache)
        new_state = AttentionState(p_t, context, state.step + 1)
        return context, weights, new_state, AttentionStats(count, lo, hi, p_t, temperature=temp)


class LocalAttention(Attention):
    """Local attention of Luong et al. (2015, §3.2), local-m and local-p.

    (The equations of Luong §3.2 are missing from our plain-text copy of the paper; the
    numbering below is the published paper's.)

    Window: positions s with |s - round(p_t)| <= D, clamped to [1, S_i] (2D+1 positions
    inside the sentence, as Luong's fixed-length a_t ∈ R^{2D+1}). Only the window is scored.

    * local-m: p_t = t, clamped to S_i when the target is longer than the source (otherwise
      the window would leave the sentence); a_t = softmax over the window (Luong: "a_t is
      defined according to Eq. (7)", i.e. no Gaussian), so the weights sum to 1.
    * local-p: p_t = S_i · sigmoid(v_pᵀ tanh(W_p h_{t-1})) (Luong eq. 9; Flexible Attention
      2017 eq. 10), and a_t(s) = softmax_window(score)(s) · exp(-(s - p_t)² / (2σ²)),
      σ = D/2 (Luong eq. 10; 2017 eq. 11). The Gaussian is applied *after* the softmax, so
      these weights do NOT sum to 1 (Luong's definition, kept on purpose). Luong's query is
      his current state h_t; our Bahdanau-style decoder attends from h_{t-1}.

    ``gaussian_m=True`` also multiplies local-m by the Gaussian (an alternative reading of
    Luong et al. §3.2; docs/method.md, Choices and differences).
    """

    def __init__(
        self,
        scorer: Scorer,
        query_size: int,
        att_size: int,
        D: int,
        predictive: bool,
        temperature: Optional[float] = None,
        gaussian_m: bool = False,
    ):
        super().__init__(scorer, temperature)
        self.D = D
        self.sigma = D / 2.0
        self.predictive = predictive
        self.gaussian_m = gaussian_m
        if predictive:
            self.W_p = nn.Linear(query_size, att_size, bias=False)
            self.v_p = nn.Linear(att_size, 1, bias=False)

    def predict_position(self, query: Tensor, lengths: Tensor) -> Tensor:
        """p_t = S · sigmoid(v_pᵀ tanh(W_p h_{t-1})) (Luong eq. 9; 2017 eq. 10), in (0, S_i)."""
        return lengths.to(query.dtype) * torch.sigmoid(self.v_p(torch.tanh(self.W_p(query)))).squeeze(-1)

    def gaussian(self, positions: Tensor, p_t: Tensor) -> Tensor:
        """exp(-(s - p_t)² / (2σ²)), σ = D/2 (Luong eq. 10; 2017 eq. 11): batch x W, batch."""
        dist = positions.to(p_t.dtype) - p_t.unsqueeze(1)
        return torch.exp(-dist.pow(2) / (2.0 * self.sigma**2))

    def window(self, p_t: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        """[round(p_t) - D, round(p_t) + D] ∩ [1, S_i] as 1-based inclusive bounds (batch)."""
        centre = torch.round(p_t).long()
        lo = torch.clamp(centre - self.D, min=1)
        hi = torch.minimum(centre + self.D, lengths)
        return lo, hi

    def forward(self, query, feedback, cache, state, tau=None):
        lengths = cache.lengths
        if self.predictive:
            p_t = self.predict_position(query, lengths)  # batch
        else:  # local-m: p_t = t (t = steps taken + 1), clamped to the sentence
            p_t = torch.minimum(state.step + 1, lengths).to(query.dtype)
        lo, hi = self.window(p_t, lengths)
        q = self.scorer.project_query(query)
        scores, positions, in_window, count = self.score_window(q, cache, lo, hi)
        slot_weights = masked_softmax(self.content_logits(scores), in_window)  # batch x W_max
        if self.predictive or self.gaussian_m:
            slot_weights = slot_weights * self.gaussian(positions, p_t)
        context, weights = self.window_to_full(slot_weights, positions, cache)
        new_state = AttentionState(p_t, context, state.step + 1)
        return context, weights, new_state, AttentionStats(count, lo, hi, p_t)


class FlexibleAttention(Attention):
    """Flexible Attention (Shu & Nakayama 2016, 2017), optionally with SACT temperature.

    * strength g_t (2017 eq. 8 with the feedback word; 2016 eq. 7 without, ``g_feedback``)
    * penalty(s) = g_t (s - p_{t-1})² / (2σ²) (2017 eqs. 5–6)
    * a_t = softmax_s(score(h_{t-1}, h̄_s) - penalty(s)) (2017 eq. 7)
    * p_t = Σ_s a_t(s) · s (eq. 4), p_0 = 1 (the first source position, tensor index 0).
    * test-time threshold τ (2017 §3.1): only s with penalty(s) < τ are scored, i.e.
      s ∈ (p_{t-1} - σ√(2τ/g_t), p_{t-1} + σ√(2τ/g_t)) ∩ [1, S]; the position nearest
      p_{t-1} is always scored. τ = None / inf: dense path over all positions.

    ``sact=True`` (config ``flexible_sact``, a combination none of the papers has) uses

        a_t = softmax_s(score(h_{t-1}, h̄_s) / τ_t - penalty(s)),   τ_t from SACT eqs. 1–2,

    i.e. the temperature rescales only the content scores and the penalty stays on the
    logit scale. Why this form and not softmax((score - penalty) / τ_t):
    (1) the threshold test must be "penalty < tau on the logit scale actually used"; here
    that scale is the penalty itself, so the vision span of 2017 §3.1 is unchanged and
    depends only on g_t, σ and τ — with the other form the logit-scale penalty is
    penalty/τ_t and the span would widen by √τ_t (up to 2x at λ = 4) whenever SACT softens;
    (2) g_t, the quantity eq. 9 fine-tunes to shrink the span, keeps sole control of the
    span, so window sizes stay comparable with plain flexible attention;
    (3) SACT's purpose is the softness of the content distribution (function vs content
    words), which is what e_t/τ_t controls. It reduces to SACT when g_t = 0 and to flexible
    attention when τ_t = 1. The fixed-temperature baseline (``temperature``) is applied the
    same way: score/T - penalty.
    """

    def __init__(
        self,
        scorer: Scorer,
        query_size: int,
        feedback_size: int,
        ctx_size: int,
        att_size: int,
        sigma: float,
        g_feedback: bool = True,
        temperature: Optional[float] = None,
        sact_lambda: Optional[float] = None,
        sact_feedback: bool = True,
    ):
        super().__init__(scorer, temperature)
        self.sigma = sigma
        self.g_feedback = g_feedback
        in_size = query_size + feedback_size if g_feedback else query_size
        self.W_g = nn.Linear(in_size, att_size, bias=False)
        self.v_g = nn.Parameter(torch.empty(att_size))
        nn.init.uniform_(self.v_g, -(att_size**-0.5), att_size**-0.5)
        # eq. 8: scalar bias outside the tanh; 2016 eq. 7: vector bias inside the tanh
        self.b_g = nn.Parameter(torch.zeros(()) if g_feedback else torch.zeros(att_size))
        self.sact = sact_lambda is not None
        if self.sact:
            self.sact_temperature = SACTTemperature(query_size, ctx_size, sact_lambda,
                                                    feedback_size if sact_feedback else None)

    # -- equations --------------------------------------------------------------------------
    def strength(self, query: Tensor, feedback: Tensor) -> Tensor:
        """g_t: batch x Q, batch x E -> batch.

        With feedback (2017 eq. 8): g_t = sigmoid(v_gᵀ tanh(W_g [h_{t-1}; i_t]) + b_g).
        Without (2016 eq. 7):       g_t = sigmoid(v_gᵀ tanh(W_g h_{t-1} + b_g)).
        """
        if self.g_feedback:
            hidden = torch.tanh(self.W_g(torch.cat([query, feedback], dim=-1)))
            return torch.sigmoid(hidden @ self.v_g + self.b_g)
        return torch.sigmoid(torch.tanh(self.W_g(query) + self.b_g) @ self.v_g)

    def penalty(self, positions: Tensor, prev_pos: Tensor, g: Tensor) -> Tensor:
        """penalty(s) = g_t · (s - p_{t-1})² / (2σ²) (2017 eqs. 5–6).

        :param positions: 1-based positions, batch x W or 1 x W.
        :param prev_pos: p_{t-1}, batch. :param g: g_t, batch. :return: batch x W.
        """
        dist = (positions.to(g.dtype) - prev_pos.unsqueeze(1)).pow(2) / (2.0 * self.sigma**2)
        return g.unsqueeze(1) * dist

    def span_radius(self, g: Tensor, tau: float) -> Tensor:
        """σ√(2τ/g_t) (2017 §3.1): penalty(s) < τ  <=>  |s - p_{t-1}| < radius; inf when g_t = 0.

        The square root is taken in float64 and rounded once to g's dtype: the correctly rounded
        result, the same for any batch size and in the fused kernel (``csrc/fused_decode.cpp``),
        whereas PyTorch's float32 CPU ``sqrt`` of more than a few elements is not always
        correctly rounded, which moved a span bound whenever p ± radius fell next to an integer."""
        arg = 2.0 * tau / g.clamp_min(torch.finfo(g.dtype).tiny)
        return self.sigma * torch.sqrt(arg.double()).to(g.dtype)

    def vision_span(
        self, prev_pos: Tensor, g: Tensor, tau: float, lengths: Tensor
    ) -> tuple[Tensor, Tensor]:
        """Positions with penalty(s) < τ (2017 §3.1):
        s ∈ (p_{t-1} - σ√(2τ/g_t), p_{t-1} + σ√(2τ/g_t)) ∩ [1, S_i], widened to include the
        position nearest p_{t-1}. Returns 1-based inclusive bounds (batch, long).
        """
        radius = self.span_radius(g, tau)
        length = lengths.to(g.dtype)
        lo = torch.floor(prev_pos - radius) + 1  # smallest integer s > p - r
        hi = torch.ceil(prev_pos + radius) - 1  # largest integer s < p + r
        nearest = torch.minimum(torch.round(prev_pos).clamp_min(1.0), length)
        lo = torch.minimum(lo.clamp_min(1.0), nearest)
        hi = torch.maximum(torch.minimum(hi, length), nearest)
        return lo.long(), hi.long()

    def vision_span_row(self, prev_pos: float, radius: float, length: int) -> tuple[int, int]:
        """:meth:`vision_span` of a single row (per-sentence decoding), from Python scalars:
        p_{t-1}, the radius σ√(2τ/g_t) (:meth:`span_radius`) and S. The same float32 operations
        in the same order on ``numpy.float32`` scalars (``round`` is half-to-even in both), so
        the bounds are bit-identical to the batched ones, without ~16 tensor operations on one
        element.
        """
        p, r, length_f = _F32(prev_pos), _F32(radius), _F32(length)
        lo = np.floor(p - r) + _F32(1.0)  # smallest integer s > p - r
        hi = np.ceil(p + r) - _F32(1.0)  # largest integer s < p + r
        nearest = min(max(np.rint(p), _F32(1.0)), length_f)
        return int(min(max(lo, _F32(1.0)), nearest)), int(max(min(hi, length_f), nearest))

    def flexible_logits(self, scores: Tensor, penalty: Tensor, temp: Optional[Tensor]) -> Tensor:
        """Logits of the softmax of 2017 eq. 7: score - penalty; with a SACT temperature
        score/τ_t - penalty; with the fixed-temperature baseline score/T - penalty."""
        if temp is not None:
            scores = SACTTemperature.rescale(scores, temp)
        else:
            scores = self.content_logits(scores)
        return scores - penalty

    # -- step -----------------------------------------------------------------------------
    def forward(self, query, feedback, cache, state, tau=None):
        g = self.strength(query, feedback)  # batch
        temp = self.sact_temperature(state.context, query, feedback) if self.sact else None
        q = self.scorer.project_query(query)
        prev_pos = state.position  # p_{t-1}, 1-based
        if tau is None or math.isinf(tau):
            scores = self.score_dense(q, cache)  # batch x S
            positions = torch.arange(1, cache.mask.size(1) + 1, device=query.device).unsqueeze(0)
            logits = self.flexible_logits(scores, self.penalty(positions, prev_pos, g), temp)
            weights = masked_softmax(logits, cache.mask)  # eq. 7, batch x S
            context = self.context_dense(weights, cache.values)  # eq. 1
            p_t = self.expected_position(weights, positions)  # eq. 4
            count, lo, hi = self.dense_spans(cache)
        else:
            if tau < 0:
                raise ValueError(f"tau must be >= 0, got {tau}")
            if query.size(0) == 1:  # one sentence: the span from scalars, the window a slice
                radius = float(self.span_radius(g, tau))
                first, last = self.vision_span_row(float(prev_pos), radius, int(cache.lengths))
                scores, positions, count = self.score_slice(q, cache, first, last)
                lo = torch.tensor([first], device=query.device)
                hi = torch.tensor([last], device=query.device)
                in_window = None  # every slot of the slice is in the span
            else:
                lo, hi = self.vision_span(prev_pos, g, tau, cache.lengths)
                scores, positions, in_window, count = self.score_window(q, cache, lo, hi)
            logits = self.flexible_logits(scores, self.penalty(positions, prev_pos, g), temp)
            # eq. 7 over the span
            slot_weights = torch.softmax(logits, -1) if in_window is None else masked_softmax(logits, in_window)
            context, weights = self.window_to_full(slot_weights, positions, cache)
            p_t = self.expected_position(slot_weights, positions)  # eq. 4
        new_state = AttentionState(p_t, context, state.step + 1)
        return context, weights, new_state, AttentionStats(count, lo, hi, p_t, g=g, temperature=temp)


@dataclass(frozen=True)
class AttentionArgs:
    """What a variant's builder gets besides the score function: the sizes of the model and
    the ``model`` config values (:data:`flexatt.model.DEFAULTS`)."""

    query_size: int  # H, the decoder state h_{t-1}
    key_size: int  # 2H, the encoder states h̄_s (also the context size)
    feedback_size: int  # E, the feedback embedding i_t
    att_size: int
    local_D: int = 10
    sigma: float = 1.5
    g_feedback: bool = True
    sact_lambda: float = 4.0
    temperature: Optional[float] = None
    sact_feedback: bool = True


#: ``model.attention`` name -> builder ``(scorer, AttentionArgs) -> Attention``
ATTENTION_VARIANTS: dict[str, Callable[[Scorer, AttentionArgs], Attention]] = {}


def register_attention(name: str):
    """Class (or function) decorator: make ``name`` a value of ``model.attention``.

    A decorated class is built with its ``from_config(scorer, args)`` classmethod; a decorated
    function is the builder itself. A name registered twice is refused.

    Example (``src/flexatt/variants/``; README, "Add an attention variant")::

        @register_attention("my_variant")
        class MyAttention(Attention):
            @classmethod
            def from_config(cls, scorer, args):
                return cls(scorer, args.temperature)

            def forward(self, query, feedback, cache, state, tau=None): ...
    """
    def add(builder):
        if name in ATTENTION_VARIANTS:
            raise ValueError(f"model.attention: the variant {name!r} is registered twice")
        ATTENTION_VARIANTS[name] = builder.from_config if isinstance(builder, type) else builder
        return builder

    return add


register_attention("global")(lambda scorer, a: GlobalAttention(scorer, a.temperature))
register_attention("local_m")(lambda scorer, a: LocalAttention(
    scorer, a.query_size, a.att_size, a.local_D, False, a.temperature))
register_attention("local_p")(lambda scorer, a: LocalAttention(
    scorer, a.query_size, a.att_size, a.local_D, True, a.temperature))
register_attention("flexible")(lambda scorer, a: FlexibleAttention(
    scorer, a.query_size, a.feedback_size, a.key_size, a.att_size, a.sigma, a.g_feedback,
    a.temperature, None, a.sact_feedback))
register_attention("sact")(lambda scorer, a: SACTAttention(
    scorer, a.query_size, a.key_size, a.sact_lambda, a.feedback_size if a.sact_feedback else None))
register_attention("flexible_sact")(lambda scorer, a: FlexibleAttention(
    scorer, a.query_size, a.feedback_size, a.key_size, a.att_size, a.sigma, a.g_feedback,
    a.temperature, a.sact_lambda, a.sact_feedback))


def attention_types() -> tuple[str, ...]:
    """Every value ``model.attention`` accepts: the built-in :data:`ATTENTION_TYPES` and the
    variants registered since (``flexatt.variants``)."""
    return tuple(ATTENTION_VARIANTS)


def build_attention(attention: str, score: str, args: AttentionArgs, max_src_len: int = 256) -> Attention:
    """The attention module registered as ``attention``, on the score function ``score``."""
    if attention not in ATTENTION_VARIANTS:
        raise ValueError(f"model.attention: {attention!r}; allowed: {', '.join(attention_types())}")
    scorer = build_scorer(score, args.query_size, args.key_size, args.att_size, max_src_len)
    return ATTENTION_VARIANTS[attention](scorer, args)
