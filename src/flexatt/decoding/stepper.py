"""The interface every decoding backend implements (:class:`Stepper`), and the ``eager``
backend: the model's own modules (:class:`EagerStepper`, with the candidate selection of beam
search in PyTorch operators, :func:`grid_candidates`).

The searches of :mod:`flexatt.decoding.search` are written once against this protocol; a backend
(:class:`EagerStepper`, :class:`flexatt.decoding.kernel.KernelStepper`) is a class with these
methods and a ``name``. Shapes: ``batch`` sentences of up to ``S`` source
positions; ``N`` decoding rows (one per live hypothesis), grouped by sentence; ``V`` the target
vocabulary; ``n_act`` the sentences with live rows at a step.
"""

from __future__ import annotations

from typing import Optional, Protocol, runtime_checkable

import torch
from torch import Tensor

from flexatt.attention import AttentionStats, RowMap
from flexatt.decoders import DecoderState

NEG_INF = float("-inf")


@runtime_checkable
class Stepper(Protocol):
    """One model's decoding step, as a backend computes it.

    ``cache`` is a :class:`~flexatt.attention.RowMap` (the per-sentence cache and the sentence of
    each row); the searches only call its ``index_select(rows)`` (long ``N'``: the rows of the next
    step, in order), as they do ``state.index_select``.
    """

    #: the backend's name, as ``decode.backend`` spells it
    name: str

    def encode(self, src: Tensor, src_len: Tensor) -> tuple[RowMap, DecoderState]:
        """src batch x S ids, src_len batch -> (cache, the decoder's initial state), one row per
        sentence."""

    def decode_step(self, prev_tokens: Tensor, state: DecoderState, cache: RowMap,
                    tau: float) -> tuple[Tensor, DecoderState, Tensor, AttentionStats]:
        """prev_tokens N (y_{t-1}) -> logits N x V, the new state, a_t N x S, the stats of the
        scoring path (``window`` N: the positions whose score was evaluated per row)."""

    def candidates(self, logits: Tensor, row_score: Tensor, starts: Tensor, counts: Tensor,
                   k: int, n: int) -> tuple[Tensor, Tensor]:
        """Beam search's selection: per sentence (its rows ``starts[i] .. starts[i] + counts[i]``
        of the N rows, ``counts <= k``), the ``n`` best (row, token) candidates scored log p of
        the row (``row_score`` N) + log_softmax(logits) (N x V), best first. Returns ``scores``
        n_act x n and their index into the sentence's ``k x V`` grid (slot · V + token)."""

    def forced(self, src: Tensor, src_len: Tensor, tgt_in: Tensor, tgt_out: Tensor, lengths: Tensor,
               tau: float) -> Optional[dict]:
        """Forced decoding of a whole batch in one call, or ``None`` where the backend has no
        such call (the search then runs :meth:`decode_step` once per step). The dict holds
        ``log_probs`` batch, ``attention`` batch x T x S and per step (batch x T) ``window``,
        ``span_lo``, ``span_hi``, ``position`` and ``g`` (``None`` without g_t)."""


def grid_candidates(logits: Tensor, row_score: Tensor, starts: Tensor, counts: Tensor, k: int,
                    n: int) -> tuple[Tensor, Tensor]:
    """:meth:`Stepper.candidates` with PyTorch operators: the N x V candidate scores, scattered
    into an ``n_act x k x V`` grid (-inf where a sentence has fewer than k live rows), then the
    top ``n`` per sentence."""
    n_rows, vocab = logits.shape
    n_act = counts.numel()
    cand = torch.log_softmax(logits.float(), dim=-1).add_(row_score.unsqueeze(1))  # N x V
    if n_rows == n_act * k:  # every sentence has k live rows: no scatter needed
        grid = cand
    else:  # scatter into n_act x k x V, -inf at the missing rows
        act_of_row = torch.repeat_interleave(torch.arange(n_act, device=logits.device), counts)  # N
        slot_of_row = torch.arange(n_rows, device=logits.device) - starts[act_of_row]  # N (< k)
        grid = cand.new_full((n_act, k, vocab), NEG_INF)
        grid[act_of_row, slot_of_row] = cand
    return grid.view(n_act, k * vocab).topk(n, dim=1)  # best first


class EagerStepper:
    """The ``eager`` backend: :class:`Stepper` of ``model`` (a :class:`flexatt.model.Seq2Seq`)
    through its own step, ``model.encode`` and ``model.decode_step``, on a
    :class:`~flexatt.attention.RowMap` of the encoder's cache, so whatever the model's modules
    compute is what decodes: every attention variant, score function, encoder, device and
    precision, edits included. The window it reports is counted by the attention module's
    scoring path itself."""

    name = "eager"

    def __init__(self, model):
        self.model = model

    @staticmethod
    def unsupported(model) -> Optional[str]:
        """Every model is covered."""
        return None

    def encode(self, src: Tensor, src_len: Tensor) -> tuple[RowMap, DecoderState]:
        cache, state = self.model.encode(src, src_len)
        return cache.by_row(), state

    def decode_step(self, prev_tokens: Tensor, state: DecoderState, cache: RowMap,
                    tau: float) -> tuple[Tensor, DecoderState, Tensor, AttentionStats]:
        return self.model.decode_step(prev_tokens, state, cache, tau)

    @staticmethod
    def candidates(logits: Tensor, row_score: Tensor, starts: Tensor, counts: Tensor, k: int,
                   n: int) -> tuple[Tensor, Tensor]:
        return grid_candidates(logits, row_score, starts, counts, k, n)

    def forced(self, *args) -> None:
        """No one-call forced decoding: the search steps."""
        return None
