"""Local attention of Luong et al. (2015, §3.2): local-m and local-p, and local-m whose centre
follows the corpus's length ratio."""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor, nn

from flexatt.attention.base import Attention, AttentionState, AttentionStats, masked_softmax
from flexatt.attention.scores import Scorer
from flexatt.tau import INF


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

    ``ratio=True`` (``local_mr``): local-m whose centre follows the length ratio, p_t = t·S/T̂ with
    T̂ = ρ·S, i.e. p_t = t/ρ, clamped to [1, S_i] (``length_ratio`` ρ: the training corpus's
    target/source length ratio, EOS included, set before training by
    :func:`set_length_ratio` and kept with the weights). Where target and source lengths differ
    (a Greek verse against its English translation), p_t = t walks off the diagonal that local-m
    stands for; this window stays on it.
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
        ratio: bool = False,
    ):
        super().__init__(scorer, temperature)
        self.D = D
        self.sigma = D / 2.0
        self.predictive = predictive
        self.gaussian_m = gaussian_m
        self.ratio = ratio
        if ratio:
            self.register_buffer("length_ratio", torch.ones(()))  # ρ = T/S of the training corpus
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

    def forward(self, query, feedback, cache, state, tau=INF):
        lengths = cache.row_lengths  # batch
        if self.predictive:
            p_t = self.predict_position(query, lengths)  # batch
        elif self.ratio:  # p_t = t / ρ, clamped to the sentence
            t = (state.step + 1).to(query.dtype)
            p_t = torch.minimum(torch.clamp_min(t / self.length_ratio.to(query.dtype), 1.0), lengths.to(query.dtype))
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


def set_length_ratio(model, src_lengths, tgt_lengths) -> float | None:
    """Set ρ of a ``local_mr`` model (:class:`LocalAttention` with ``ratio``) from a corpus's
    length arrays (tokens without EOS, as :class:`flexatt.data.subwords.EncodedSplit` keeps
    them): Σ(T + 1) / Σ(S + 1), the steps the decoder takes per source position the attention
    reads. Returns ρ, or ``None`` (and changes nothing) for any other attention. A model with its
    own ``set_length_ratio`` (the Transformer's, every layer) sets it there."""
    rho = (float(sum(tgt_lengths)) + len(tgt_lengths)) / (float(sum(src_lengths)) + len(src_lengths))
    if hasattr(model, "set_length_ratio"):
        return rho if model.set_length_ratio(rho) else None
    att = model.decoder.attention
    if not (isinstance(att, LocalAttention) and att.ratio):
        return None
    att.length_ratio.fill_(rho)
    return rho
