"""Flexible Attention (Shu & Nakayama 2016, 2017), optionally with the SACT temperature."""

from __future__ import annotations

import math
from typing import Optional

import numpy as np
import torch
from torch import Tensor, nn

from flexatt.attention.base import Attention, AttentionState, AttentionStats, masked_softmax
from flexatt.attention.sact import SACTTemperature
from flexatt.attention.scores import Scorer
from flexatt.tau import INF

_F32 = np.float32


def span_radius(sigma: float, g: Tensor, tau: float) -> Tensor:
    """σ√(2τ/g_t) (2017 §3.1): penalty(s) = g_t (s - p)²/(2σ²) < τ  <=>  |s - p| < radius; inf
    when g_t = 0.

    The square root is taken in float64 and rounded once to g's dtype: the correctly rounded
    result, the same for any batch size and in the kernel (``csrc/kernel.cpp``), whereas
    PyTorch's float32 CPU ``sqrt`` of more than a few elements is not always correctly rounded,
    which moved a span bound whenever p ± radius fell next to an integer."""
    arg = 2.0 * tau / g.clamp_min(torch.finfo(g.dtype).tiny)
    return sigma * torch.sqrt(arg.double()).to(g.dtype)


def window_bounds(centre: Tensor, radius: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
    """The positions s with |s - centre| < radius (2017 §3.1: penalty(s) < τ), within [1, S],
    widened to include the position nearest the centre: 1-based inclusive bounds (long) of the
    shape of ``centre`` (``lengths``, S as a float of its dtype, broadcast against it). The one
    rule of the RNN's vision span and the Transformer's windowed cross-attention."""
    lo = torch.floor(centre - radius) + 1  # smallest integer s > p - r
    hi = torch.ceil(centre + radius) - 1  # largest integer s < p + r
    nearest = torch.minimum(torch.round(centre).clamp_min(1.0), lengths)
    lo = torch.minimum(lo.clamp_min(1.0), nearest)
    hi = torch.maximum(torch.minimum(hi, lengths), nearest)
    return lo.long(), hi.long()


class FlexibleAttention(Attention):
    """Flexible Attention (Shu & Nakayama 2016, 2017), optionally with SACT temperature.

    * strength g_t (2017 eq. 8 with the feedback word; 2016 eq. 7 without, ``g_feedback``)
    * penalty(s) = g_t (s - p_{t-1})² / (2σ²) (2017 eqs. 5–6)
    * a_t = softmax_s(score(h_{t-1}, h̄_s) - penalty(s)) (2017 eq. 7)
    * p_t = Σ_s a_t(s) · s (eq. 4), p_0 = 1 (the first source position, tensor index 0).
    * test-time threshold τ (2017 §3.1): only s with penalty(s) < τ are scored, i.e.
      s ∈ (p_{t-1} - σ√(2τ/g_t), p_{t-1} + σ√(2τ/g_t)) ∩ [1, S]; the position nearest
      p_{t-1} is always scored. τ = inf: dense path over all positions (:mod:`flexatt.tau`).

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
        """σ√(2τ/g_t) with this attention's σ (:func:`span_radius`)."""
        return span_radius(self.sigma, g, tau)

    def vision_span(
        self, prev_pos: Tensor, g: Tensor, tau: float, lengths: Tensor
    ) -> tuple[Tensor, Tensor]:
        """Positions with penalty(s) < τ (2017 §3.1):
        s ∈ (p_{t-1} - σ√(2τ/g_t), p_{t-1} + σ√(2τ/g_t)) ∩ [1, S_i], widened to include the
        position nearest p_{t-1} (:func:`window_bounds`). Returns 1-based inclusive bounds
        (batch, long).
        """
        return window_bounds(prev_pos, self.span_radius(g, tau), lengths.to(g.dtype))

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
    def forward(self, query, feedback, cache, state, tau=INF):
        g = self.strength(query, feedback)  # batch
        temp = self.sact_temperature(state.context, query, feedback) if self.sact else None
        q = self.scorer.project_query(query)
        prev_pos = state.position  # p_{t-1}, 1-based
        if math.isinf(tau):
            scores = self.score_dense(q, cache)  # batch x S
            positions = torch.arange(1, cache.src_len + 1, device=query.device).unsqueeze(0)
            logits = self.flexible_logits(scores, self.penalty(positions, prev_pos, g), temp)
            weights = self.softmax_source(logits, cache)  # eq. 7, batch x S
            context = self.context_dense(weights, cache)  # eq. 1
            p_t = self.expected_position(weights, positions)  # eq. 4
            count, lo, hi = self.dense_spans(cache)
        else:
            if query.size(0) == 1:  # one sentence: the span from scalars, the window a slice
                radius = float(self.span_radius(g, tau))
                first, last = self.vision_span_row(float(prev_pos), radius, int(cache.row_lengths))
                scores, positions, count = self.score_slice(q, cache, first, last)
                lo = torch.tensor([first], device=query.device)
                hi = torch.tensor([last], device=query.device)
                in_window = None  # every slot of the slice is in the span
            else:
                lo, hi = self.vision_span(prev_pos, g, tau, cache.row_lengths)
                scores, positions, in_window, count = self.score_window(q, cache, lo, hi)
            logits = self.flexible_logits(scores, self.penalty(positions, prev_pos, g), temp)
            # eq. 7 over the span
            slot_weights = torch.softmax(logits, -1) if in_window is None else masked_softmax(logits, in_window)
            context, weights = self.window_to_full(slot_weights, positions, cache)
            p_t = self.expected_position(slot_weights, positions)  # eq. 4
        new_state = AttentionState(p_t, context, state.step + 1)
        return context, weights, new_state, AttentionStats(count, lo, hi, p_t, g=g, temperature=temp)
