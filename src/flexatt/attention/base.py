"""The attention interface: per-sentence cache, recurrent state, per-step traces, the masked
softmax, the :class:`Attention` base class (dense and windowed scoring, context, expected
position) and global attention (Flexible Attention 2017, eqs. 1–4; Luong et al. 2015 "global").

Conventions (1-based positions, the windowed scoring, ``-inf`` masking): :mod:`flexatt.attention`.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch
from torch import Tensor, nn

from flexatt.attention.scores import Scorer
from flexatt.tau import INF

NEG_INF = float("-inf")


# --------------------------------------------------------------------------------------
# Containers
# --------------------------------------------------------------------------------------
class AttentionCache(NamedTuple):
    """Per-sentence encoder-side tensors, computed once by :meth:`Attention.precompute`; one
    row per sentence. A search reads it through :class:`RowMap` (:meth:`by_row`)."""

    keys: Tensor  # batch x src_len x d_key   (score-specific key projection, e.g. U_a h̄)
    values: Tensor  # batch x src_len x 2H    (encoder states h̄, averaged into the context)
    mask: Tensor  # batch x src_len          (bool, True at real positions)
    lengths: Tensor  # batch                 (long, S_i)

    @property
    def src_len(self) -> int:
        """S_max, the padded source length."""
        return self.keys.size(1)

    @property
    def row_lengths(self) -> Tensor:
        """S_i of each row (batch long)."""
        return self.lengths

    def layout(self) -> tuple[int, "AttentionCache"]:
        """``(1, self)``: one row per entry (:meth:`RowMap.layout`)."""
        return 1, self

    def index_select(self, index: Tensor) -> "AttentionCache":
        """Select / repeat / reorder rows (a copy of each row's tensors)."""
        return AttentionCache(*(x.index_select(0, index) for x in self))

    def by_row(self) -> "RowMap":
        """The cache read by one decoding row per sentence, reordered without copies."""
        return RowMap(self, torch.arange(self.lengths.size(0), device=self.lengths.device))


class RowMap:
    """The attention cache of a batch of sentences (``base``, one row per sentence) read by N
    decoding rows (``rows``: N long, the sentence of each row): what a search decodes with. A
    reorder of the rows (beam expansion, pruning, a sentence ending) composes the map, an index of
    N longs, instead of copying every sentence's keys and states once per hypothesis.

    It reads like an :class:`AttentionCache` of N rows: ``keys``, ``values``, ``mask`` and
    ``lengths`` are the rows' own (gathered on first use), so attention code written against a
    per-row cache runs unchanged. :class:`Attention`'s helpers read it through :meth:`layout`
    instead: rows in consecutive groups of equal size k (a sentence's hypotheses side by side:
    every step of greedy and beam search but one where a sentence has fewer than k live
    hypotheses) are computed against the groups' sentences, ``n x ...`` with no copy per row,
    by the same operations, so the numbers are the per-row cache's bit for bit.
    """

    __slots__ = ("base", "rows", "_layout", "_per_row", "_row_lengths")

    def __init__(self, base: AttentionCache, rows: Tensor):
        self.base, self.rows = base, rows
        self._layout: Optional[tuple[int, AttentionCache]] = None
        self._per_row: Optional[AttentionCache] = None
        self._row_lengths: Optional[Tensor] = None

    def index_select(self, index: Tensor) -> "RowMap":
        """The rows ``index`` (long N'), in that order: the map composed, nothing copied."""
        return RowMap(self.base, self.rows.index_select(0, index))

    @property
    def src_len(self) -> int:
        return self.base.keys.size(1)

    def layout(self) -> tuple[int, AttentionCache]:
        """``(k, cache)``: the rows are the rows of ``cache`` (an :class:`AttentionCache`), each
        repeated k times in a row; k = 1 with one gathered copy per row where the rows do not form
        equal consecutive groups. Computed once per map."""
        if self._layout is None:
            sents, counts = torch.unique_consecutive(self.rows, return_counts=True)
            k = int(counts[0]) if counts.numel() else 1
            if counts.numel() and int(counts.min()) == k == int(counts.max()):
                batch = self.base.lengths.size(0)
                same = sents.numel() == batch and torch.equal(sents, torch.arange(batch, device=sents.device))
                self._layout = (k, self.base if same else self.base.index_select(sents))
            else:
                self._layout = (1, self.per_row())
        return self._layout

    def per_row(self) -> AttentionCache:
        """The :class:`AttentionCache` of the N rows (a copy per row, made once)."""
        if self._per_row is None:
            self._per_row = self.base.index_select(self.rows)
        return self._per_row

    @property
    def row_lengths(self) -> Tensor:
        """S_i of each row (N long), without copying the rest of the cache."""
        if self._row_lengths is None:
            k, cache = self.layout()
            self._row_lengths = cache.lengths.repeat_interleave(k) if k > 1 else cache.lengths
        return self._row_lengths

    keys = property(lambda self: self.per_row().keys, doc="N x S x d_key, the rows' keys (a copy)")
    values = property(lambda self: self.per_row().values, doc="N x S x 2H, the rows' h̄ (a copy)")
    mask = property(lambda self: self.per_row().mask, doc="N x S, the rows' masks (a copy)")
    lengths = property(lambda self: self.row_lengths, doc="N, the rows' S_i")


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
    layer_window: Optional[Tensor] = None  # batch x L: ``window`` of each cross-attention layer (a Transformer)


def masked_softmax(logits: Tensor, mask: Tensor) -> Tensor:
    """Softmax over the last dim after setting masked-out slots to ``-inf`` (exact zeros)."""
    return torch.softmax(logits.masked_fill(~mask, NEG_INF), dim=-1)


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
    # Each helper reads the cache through its layout (:meth:`AttentionCache.layout`): rows in
    # groups of k > 1 are scored against their groups' sentences (n = N / k), the same
    # elementwise operations and products as on a copy per row, so the same numbers.
    def score_dense(self, q: Tensor, cache: AttentionCache) -> Tensor:
        """Scores at all S_max slots: ``q`` N x d -> N x S (groups of k: q as n x k x 1 x d
        against the keys n x 1 x S x d, broadcast)."""
        k, c = cache.layout()
        src_len = c.keys.size(1)
        positions = torch.arange(src_len, device=q.device).unsqueeze(0)  # 1 x S (0-based)
        if k == 1:
            return self.scorer(q.unsqueeze(1), c.keys, positions)
        n = c.keys.size(0)
        return self.scorer(q.view(n, k, 1, -1), c.keys.unsqueeze(1), positions).view(n * k, src_len)

    def softmax_source(self, logits: Tensor, cache: AttentionCache) -> Tensor:
        """a_t = softmax over each row's real source positions (padding -> exact zeros):
        logits N x S -> N x S (:func:`masked_softmax` with the cache's mask)."""
        k, c = cache.layout()
        if k == 1:
            return masked_softmax(logits, c.mask)
        n, src_len = c.mask.shape
        return masked_softmax(logits.view(n, k, src_len), c.mask.unsqueeze(1)).view(n * k, src_len)

    def score_window(
        self, q: Tensor, cache: AttentionCache, lo: Tensor, hi: Tensor
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Scores of the positions lo_i..hi_i (1-based, inclusive, 1 <= lo <= hi <= S_i) only.

        :param q: N x d projected query.
        :param lo, hi: N (long) window bounds.
        :return: ``scores`` N x W_max (``-inf`` at slots outside the row's window),
            ``positions`` N x W_max (1-based; slot j of row i is position lo_i + j),
            ``in_window`` N x W_max (bool), ``count`` N (long): number of positions
            scored per row, counted from the index list handed to the score function.
        """
        batch = q.size(0)
        if batch == 1:  # one row (per-sentence decoding): the window is a slice, no index list
            scores, positions, count = self.score_slice(q, cache, int(lo), int(hi))
            return scores, positions, torch.ones_like(scores, dtype=torch.bool), count
        k, c = cache.layout()
        width = hi - lo + 1  # N
        w_max = int(width.max())
        slot = torch.arange(w_max, device=q.device)  # W_max
        positions = lo.unsqueeze(1) + slot.unsqueeze(0)  # N x W_max (1-based)
        in_window = slot.unsqueeze(0) < width.unsqueeze(1)  # N x W_max
        # one batched gather of the (row, position) pairs inside the windows
        rows, cols = in_window.nonzero(as_tuple=True)  # P, P
        index = lo.index_select(0, rows) + cols - 1  # P (0-based source index)
        sentence = rows if k == 1 else torch.div(rows, k, rounding_mode="floor")  # the row's keys
        keys = c.keys.flatten(0, 1).index_select(0, sentence * c.keys.size(1) + index)  # P x d
        flat = self.scorer(q.index_select(0, rows), keys, index)  # P
        scores = q.new_full((batch, w_max), NEG_INF).index_put((rows, cols), flat)
        count = torch.bincount(rows, minlength=batch)  # N
        return scores, positions, in_window, count

    def score_slice(self, q: Tensor, cache: AttentionCache, first: int, last: int) -> tuple[Tensor, Tensor, Tensor]:
        """Scores of positions ``first..last`` (1-based, inclusive) of a batch of one row: the
        window is a slice of the cached keys, no index list.

        :return: ``scores`` 1 x W, ``positions`` 1 x W (1-based), ``count`` (1,) long: the number
            of positions handed to the score function.
        """
        _, c = cache.layout()
        positions = torch.arange(first, last + 1, device=q.device)  # W (1-based)
        flat = self.scorer(q, c.keys[0, first - 1:last], positions - 1)  # W
        count = torch.full((1,), flat.numel(), dtype=torch.long, device=q.device)
        return flat.unsqueeze(0), positions.unsqueeze(0), count

    def content_logits(self, scores: Tensor) -> Tensor:
        """e_t / T for the fixed-temperature baseline (SACT paper, Fig. 1); identity if unset."""
        return scores if self.temperature is None else scores / self.temperature

    # -- outputs ------------------------------------------------------------------------
    @staticmethod
    def expected_position(weights: Tensor, positions: Tensor) -> Tensor:
        """p_t = Σ_s a_t(s) · s (Flexible Attention 2017, eq. 4); ``positions`` 1-based,
        broadcastable to ``weights`` (N x W)."""
        return (weights * positions.to(weights.dtype)).sum(-1)

    @staticmethod
    def context_dense(weights: Tensor, cache: AttentionCache) -> Tensor:
        """c_t = Σ_s a_t(s) h̄_s (2017, eq. 1; SACT eq. 3): weights N x S -> N x 2H, one
        ``1 x S`` by ``S x 2H`` product per row. Rows in groups of k take k ``bmm`` calls, one per
        hypothesis slot j over the groups (rows j, k + j, 2k + j, ...), on the groups' h̄ as they
        are: the same products as one per row (one ``k x S`` product per group would sum in
        another order)."""
        k, c = cache.layout()
        if k == 1:
            return torch.bmm(weights.unsqueeze(1), c.values).squeeze(1)
        n = c.values.size(0)
        slots = weights.view(n, k, 1, -1)
        return torch.stack([torch.bmm(slots[:, j], c.values) for j in range(k)], 1).view(n * k, -1)

    def window_to_full(
        self, slot_weights: Tensor, positions: Tensor, cache: AttentionCache
    ) -> tuple[Tensor, Tensor]:
        """The weights scattered back to the source positions, and the context (eq. 1) from them.

        Only the window was scored; the context is the sum over the window's h̄_s. A single row
        takes its window as a slice of h̄. A batch scatters the slot weights to ``N x S`` (exact
        zeros outside each row's window) and sums with :meth:`context_dense`: at the sizes of this
        project that is faster than gathering each row's window of h̄ first (the gathered rows
        are written and read again; ``benchmarks/decode_speed.py`` measures the whole step).

        :param slot_weights: N x W_max (exact zeros outside the row's window)
        :param positions: N x W_max 1-based positions of the slots
        :return: context N x 2H (eq. 1 over the window), weights N x S
        """
        src_len = cache.src_len
        if slot_weights.size(0) == 1:  # one row: the window is a slice of h̄
            _, c = cache.layout()
            first = int(positions[0, 0]) - 1
            window = slice(first, first + positions.size(1))
            context = torch.mm(slot_weights, c.values[0, window])  # 1 x 2H
            full = slot_weights.new_zeros(1, src_len)
            full[:, window] = slot_weights
            return context, full
        index = (positions - 1).clamp(0, src_len - 1)  # N x W_max (slots outside are 0-weight)
        full = slot_weights.new_zeros(slot_weights.size(0), src_len).scatter_add(1, index, slot_weights)  # N x S
        return self.context_dense(full, cache), full

    def dense_spans(self, cache: AttentionCache) -> tuple[Tensor, Tensor, Tensor]:
        """(window, span_lo, span_hi) of a dense call: every real position, S_i per row."""
        k, c = cache.layout()
        count = c.mask.sum(1) if k == 1 else cache.row_lengths  # the positions the mask lets through
        return count, torch.ones_like(count), count

    def forward(
        self,
        query: Tensor,
        feedback: Tensor,
        cache: AttentionCache,
        state: AttentionState,
        tau: float = INF,
    ) -> tuple[Tensor, Tensor, AttentionState, AttentionStats]:
        """One decoding step.

        :param query: batch x Q, the previous decoder state h_{t-1}.
        :param feedback: batch x E, the feedback embedding i_t.
        :param cache: from :meth:`precompute`.
        :param state: from :meth:`init_state` or the previous call.
        :param tau: Flexible Attention's test-time threshold (ignored by variants without a
            position penalty; :mod:`flexatt.tau`). ``inf``: score every position.
        :return: context batch x 2H, weights batch x S (zeros at padding and outside the
            window), the new state, :class:`AttentionStats`.
        """
        raise NotImplementedError


# --------------------------------------------------------------------------------------
# Global attention
# --------------------------------------------------------------------------------------
class GlobalAttention(Attention):
    """Global attention: a_t(s) = softmax_s(score(h_{t-1}, h̄_s)) over all S positions
    (Flexible Attention 2017, eqs. 1–3; Luong et al. 2015 "global")."""

    def forward(self, query, feedback, cache, state, tau=INF):
        q = self.scorer.project_query(query)  # batch x d
        scores = self.score_dense(q, cache)  # batch x S
        weights = self.softmax_source(self.content_logits(scores), cache)  # batch x S
        context = self.context_dense(weights, cache)  # batch x 2H
        positions = torch.arange(1, cache.src_len + 1, device=query.device)  # S (1-based)
        p_t = self.expected_position(weights, positions)
        count, lo, hi = self.dense_spans(cache)
        new_state = AttentionState(p_t, context, state.step + 1)
        return context, weights, new_state, AttentionStats(count, lo, hi, p_t)
