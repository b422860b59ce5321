"""Self-Adaptive Control of Temperature (Lin et al. 2018): the temperature τ_t (eqs. 1–2) and
SACT attention (eqs. 3–4)."""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor, nn

from flexatt.attention.base import Attention, AttentionState, AttentionStats
from flexatt.attention.scores import Scorer
from flexatt.tau import INF


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

    def forward(self, query, feedback, cache, state, tau=INF):
        temp = self.sact_temperature(state.context, query, feedback)  # batch
        q = self.scorer.project_query(query)
        scores = self.score_dense(q, cache)  # batch x S
        weights = self.softmax_source(self.sact_temperature.rescale(scores, temp), cache)  # eq. 4
        context = self.context_dense(weights, cache)  # SACT eq. 3
        positions = torch.arange(1, cache.src_len + 1, device=query.device)
        p_t = self.expected_position(weights, positions)
        count, lo, hi = self.dense_spans(cache)
        new_state = AttentionState(p_t, context, state.step + 1)
        return context, weights, new_state, AttentionStats(count, lo, hi, p_t, temperature=temp)
