"""The grouped backend: the model's own attention and LSTM modules on a cache kept once per
*sentence* instead of once per *row* (PyTorch operators; bit-identical to the eager backend).

Beam search runs ``N = n_sentences x k`` rows per step, and
the eager step reads the attention cache (U_k h̄ and h̄, ``N x S x ...``) row by row, so the
search re-gathers the whole cache, k copies of every sentence's keys and states, whenever its
rows' sentence layout changes (beam expansion, and every time a sentence ends): the largest single
cost of an eager beam-search step on this project's models. The grouped step's cache
(:class:`GroupedCache`) keeps the per-sentence
tensors and only the row -> sentence map, so a reorder is an index of N longs, and its step
evaluates the attention on the grid ``n_groups x k`` of rows against ``n_groups x S`` keys:

* the score function sees q ``n x k x 1 x d`` against keys ``n x 1 x S x d`` (broadcast: the same
  elementwise operations and the same ``(N·S) x d`` product as the eager ``N x S x d`` call,
  so the scores are bit-identical);
* windowed scoring (flexible attention at finite τ) gathers its (row, position) pairs from the
  sentence's keys instead of the row's (the same keys, so the same scores);
* the context c_t = Σ_s a_t(s) h̄_s is k ``bmm`` calls (one per hypothesis slot, over the
  groups) of the eager step's ``1 x S`` by ``S x 2H`` products on the groups' h̄ as they are
  (:meth:`GroupedStepper.context`): the same products, so c_t is bit-identical too.

Hence the whole step is the eager step's arithmetic on the same rows in the same order:
logits, weights, p_t, g_t and spans are bit-identical (tests: ``torch.equal``), and so are the
searches' hypotheses, scores and windows.

Every equation is the model's own: g_t, the vision span, the penalty, the logits, the softmax,
p_t (:mod:`flexatt.attention`), the LSTM and the readout (:mod:`flexatt.decoders`) are called,
not restated; only the addressing of the cache is new. The step returns what the eager one
returns (logits ``N x V``, the state, weights ``N x S``, :class:`AttentionStats` with the
window counted from the index list handed to the score function).

The grouped step covers :class:`~flexatt.attention.GlobalAttention`,
:class:`~flexatt.attention.FlexibleAttention` (also with the SACT temperature, ``flexible_sact``)
and :class:`~flexatt.attention.SACTAttention`, any score function, a model in eval mode
(:meth:`GroupedStepper.unsupported`); :func:`flexatt.decoding.backends.select_backend` decodes
the others eagerly.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
from torch import Tensor

from flexatt.attention import (
    NEG_INF,
    AttentionCache,
    ConcatScore,
    AttentionState,
    AttentionStats,
    FlexibleAttention,
    GlobalAttention,
    SACTAttention,
    masked_softmax,
)
from flexatt.decoders import DecoderState, full_precision
from flexatt.decoding.stepper import grid_candidates


def additive_scores(q2: Tensor, keys2: Tensor, v: Tensor) -> Tensor:
    """The concat score v_aᵀ tanh(q + k) (:class:`flexatt.attention.ConcatScore`, 2017 eq. 3) from
    q and k doubled in advance: the forward of :class:`flexatt.attention._AdditiveScore`,
    2 (σ(2(q + k)) · v_a) - Σ v_a, whose first operation, 2 (q + k), equals 2q + 2k exactly in
    floating point (doubling is exact), so the scores are bit-identical to the scorer's and the
    N x S x d tensor is written once less. ``q2`` and ``keys2`` broadcast (... x d) -> ...."""
    return torch.matmul(torch.add(keys2, q2).sigmoid_(), v).mul_(2.0).sub_(v.sum())


class GroupedCache:
    """The attention cache of a batch of sentences (``base``: ``batch x ...``, one row per
    sentence) and the sentence of each decoding row (``rows``: N long). ``index_select`` (the
    searches' reorder of rows) composes the map and copies nothing.

    :meth:`groups` reads the layout once per map: when the rows form consecutive groups of equal
    size k (a sentence's hypotheses side by side: every step of greedy and beam search but a
    sentence with fewer than k live hypotheses), the base rows of the groups' sentences
    (``n x ...``, gathered once per layout, or the base itself), else ``k = 0`` and the
    per-row cache of the eager step. ``doubled``: also keep 2 · keys of the groups
    (:func:`additive_scores`).
    """

    def __init__(self, base: AttentionCache, rows: Tensor, doubled: bool = False):
        self.base, self.rows, self.doubled = base, rows, doubled
        self._groups: Optional[tuple[int, AttentionCache, Tensor, Optional[Tensor]]] = None

    def index_select(self, index: Tensor) -> "GroupedCache":
        return GroupedCache(self.base, self.rows.index_select(0, index), self.doubled)

    def groups(self) -> tuple[int, AttentionCache, Tensor, Optional[Tensor]]:
        """(k, the groups' cache ``n x ...`` or the per-row cache ``N x ...`` when k = 0, the
        source length of each row ``N``, 2 · the groups' keys ``n x S x d`` or ``None``)."""
        if self._groups is None:
            sents, counts = torch.unique_consecutive(self.rows, return_counts=True)
            k = int(counts[0]) if counts.numel() else 0
            if counts.numel() and int(counts.min()) == k == int(counts.max()):
                batch = self.base.lengths.size(0)
                same = sents.numel() == batch and torch.equal(sents, torch.arange(batch, device=sents.device))
                cache = self.base if same else self.base.index_select(sents)
                row_len = cache.lengths.repeat_interleave(k) if k > 1 else cache.lengths
            else:
                k, cache = 0, self.base.index_select(self.rows)
                row_len = cache.lengths
            keys2 = cache.keys.mul(2.0) if self.doubled and k else None
            self._groups = (k, cache, row_len, keys2)
        return self._groups


class GroupedStepper:
    """:class:`~flexatt.decoding.stepper.Stepper` of ``model`` (a :class:`flexatt.model.Seq2Seq`
    in eval mode) with the decoding step of this module: ``encode`` and ``decode_step`` as the
    model's, the cache a :class:`GroupedCache`."""

    name = "grouped"

    @staticmethod
    def unsupported(model) -> Optional[str]:
        """Why ``model`` is not covered (``None``: it is)."""
        att = model.decoder.attention
        if type(att) not in (GlobalAttention, FlexibleAttention, SACTAttention):
            return f"attention {type(att).__name__} (grouped: global, flexible, sact, flexible_sact)"
        if model.training:
            return "the model is in training mode"
        return None

    def __init__(self, model):
        self.model = model
        self.decoder = model.decoder
        self.attention = model.decoder.attention
        self.lstm_weights = model.decoder.lstm_weights()  # split once per search, not per step

    def encode(self, src: Tensor, src_len: Tensor) -> tuple[GroupedCache, DecoderState]:
        """:meth:`flexatt.model.Seq2Seq.encode`; one row per sentence."""
        cache, state = self.model.encode(src, src_len)
        rows = torch.arange(src.size(0), device=src.device)
        return GroupedCache(cache, rows, doubled=type(self.attention.scorer) is ConcatScore), state

    def decode_step(self, prev_tokens: Tensor, state: DecoderState, cache: GroupedCache,
                    tau: Optional[float] = None) -> tuple[Tensor, DecoderState, Tensor, AttentionStats]:
        """:meth:`flexatt.decoders.RecurrentDecoder.step` (eval mode: no dropout) on the grouped
        cache: prev_tokens N -> logits N x V, new state, weights N x S, stats."""
        dec, w = self.decoder, self.lstm_weights
        with full_precision(prev_tokens.device.type):
            i_t = dec.embed(prev_tokens)  # N x E
            k, groups, row_len, keys2 = cache.groups()
            if k == 0:  # rows not in equal groups: the eager attention on the per-row cache
                context, weights, att_state, stats = self.attention(state.hidden, i_t, groups,
                                                                    state.attention, tau)
            else:
                context, weights, att_state, stats = self.attend(state.hidden, i_t, groups, k, row_len, keys2,
                                                                 state.attention, tau)
            h_t, c_t = dec.lstm(dec.input_gates(i_t, w), context, state.hidden, state.cell, w)
        return dec.readout(h_t, context, i_t), DecoderState(h_t, c_t, att_state), weights, stats

    @staticmethod
    def candidates(logits: Tensor, row_score: Tensor, starts: Tensor, counts: Tensor, k: int,
                   n: int) -> tuple[Tensor, Tensor]:
        return grid_candidates(logits, row_score, starts, counts, k, n)

    def forced(self, *args) -> None:
        """No one-call forced decoding: the search steps."""
        return None

    # -- the attention on groups of k rows ---------------------------------------------------
    def attend(self, query: Tensor, feedback: Tensor, groups: AttentionCache, k: int, row_len: Tensor,
               keys2: Optional[Tensor], state: AttentionState,
               tau: Optional[float]) -> tuple[Tensor, Tensor, AttentionState, AttentionStats]:
        """The attention module's ``forward`` for N = n x k rows (row r belongs to group r // k)
        against the groups' cache (``n x S x ...``; ``keys2``: 2 · its keys for the concat score,
        else ``None``): query N x Q (h_{t-1}), feedback N x E (i_t), ``row_len`` N (S of each row).
        Returns context N x 2H, weights N x S, the new state and the stats, as the module does."""
        att = self.attention
        n, src_len = groups.keys.size(0), groups.keys.size(1)
        g = temp = None
        if isinstance(att, FlexibleAttention):
            g = att.strength(query, feedback)  # N (2017 eq. 8)
            if att.sact:
                temp = att.sact_temperature(state.context, query, feedback)
        elif isinstance(att, SACTAttention):
            temp = att.sact_temperature(state.context, query, feedback)  # SACT eqs. 1-2
        q = att.scorer.project_query(query)  # N x d
        windowed = isinstance(att, FlexibleAttention) and tau is not None and not math.isinf(tau)
        if windowed and tau < 0:
            raise ValueError(f"tau must be >= 0, got {tau}")
        if windowed and q.size(0) > 1:
            lo, hi = att.vision_span(state.position, g, tau, row_len)  # 2017 §3.1
            scores, positions, in_window, count = self.score_window(q, groups, k, lo, hi)
            logits = att.flexible_logits(scores, att.penalty(positions, state.position, g), temp)
            slot_weights = masked_softmax(logits, in_window)  # eq. 7 over the span
            weights = self.scatter(slot_weights, positions, src_len)  # N x S
            p_t = att.expected_position(slot_weights, positions)  # eq. 4
        elif windowed:  # one row: the eager step's slice path
            return att(query, feedback, groups, state, tau)
        else:
            if keys2 is not None:  # the concat score, the keys doubled once per layout
                scores = additive_scores(q.view(n, k, 1, -1).mul(2.0), keys2.unsqueeze(1),
                                         att.scorer.v_a.weight.view(-1)).view(n * k, src_len)
            else:
                scores = att.scorer(q.view(n, k, 1, -1), groups.keys.unsqueeze(1),
                                    torch.arange(src_len, device=q.device).unsqueeze(0)).view(n * k, src_len)
            positions = torch.arange(1, src_len + 1, device=q.device).unsqueeze(0)  # 1 x S (1-based)
            if isinstance(att, FlexibleAttention):
                logits = att.flexible_logits(scores, att.penalty(positions, state.position, g), temp)
            elif temp is not None:
                logits = att.sact_temperature.rescale(scores, temp)  # SACT eq. 4
            else:
                logits = att.content_logits(scores)
            weights = masked_softmax(logits.view(n, k, src_len), groups.mask.unsqueeze(1)).view(n * k, src_len)
            p_t = att.expected_position(weights, positions)  # eq. 4 / Σ a_t(s)·s
            count, lo, hi = row_len, torch.ones_like(row_len), row_len
        context = self.context(weights, groups.values, k)  # eq. 1
        new_state = AttentionState(p_t, context, state.step + 1)
        return context, weights, new_state, AttentionStats(count, lo, hi, p_t, g=g, temperature=temp)

    @staticmethod
    def context(weights: Tensor, values: Tensor, k: int) -> Tensor:
        """c_t = Σ_s a_t(s) h̄_s (2017 eq. 1, :meth:`flexatt.attention.Attention.context_dense`) of
        N = n x k rows against their groups' h̄ (``values`` n x S x 2H): one ``bmm`` per hypothesis
        slot j over the n groups (rows j, k + j, 2k + j, ...), each of them the eager step's
        ``1 x S`` by ``S x 2H`` product of a row, on the groups' h̄ as they are (no copy per row),
        so c_t is bit-identical to the eager one (one ``k x S`` product per group would sum in
        another order). weights N x S -> N x 2H."""
        n, src_len = values.size(0), values.size(1)
        slots = weights.view(n, k, 1, src_len)
        if k == 1:
            return torch.bmm(slots[:, 0], values).view(n, -1)
        return torch.stack([torch.bmm(slots[:, j], values) for j in range(k)], 1).view(n * k, -1)

    def score_window(self, q: Tensor, groups: AttentionCache, k: int, lo: Tensor,
                     hi: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """:meth:`flexatt.attention.Attention.score_window` with row r's keys read from its group
        r // k: the scores of positions lo_r..hi_r only (1-based, inclusive). Returns ``scores``
        N x W_max (-inf outside the window), ``positions`` N x W_max (1-based), ``in_window``
        N x W_max, ``count`` N (positions handed to the score function)."""
        batch = q.size(0)
        width = hi - lo + 1  # N
        w_max = int(width.max())
        slot = torch.arange(w_max, device=q.device)  # W_max
        positions = lo.unsqueeze(1) + slot.unsqueeze(0)  # N x W_max (1-based)
        in_window = slot.unsqueeze(0) < width.unsqueeze(1)  # N x W_max
        rows, cols = in_window.nonzero(as_tuple=True)  # the (row, position) pairs of the windows
        index = lo.index_select(0, rows) + cols - 1  # 0-based source index
        keys = groups.keys.flatten(0, 1).index_select(0, torch.div(rows, k, rounding_mode="floor")
                                                      * groups.keys.size(1) + index)
        flat = self.attention.scorer(q.index_select(0, rows), keys, index)
        scores = q.new_full((batch, w_max), NEG_INF).index_put((rows, cols), flat)
        count = torch.bincount(rows, minlength=batch)
        return scores, positions, in_window, count

    @staticmethod
    def scatter(slot_weights: Tensor, positions: Tensor, src_len: int) -> Tensor:
        """The weights of the window slots (N x W_max, exact zeros outside the window) at their
        source positions, N x S (zeros elsewhere), as
        :meth:`flexatt.attention.Attention.window_to_full` places them."""
        index = (positions - 1).clamp(0, src_len - 1)
        return slot_weights.new_zeros(slot_weights.size(0), src_len).scatter_add(1, index, slot_weights)
