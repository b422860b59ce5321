"""The eager backend: the model's own modules, one ``decode_step`` per step — the reference every
other backend is tested against (``tests/test_decoding_contract.py``).

It covers every model (any attention variant, score function, encoder, device, precision); the
window it reports is counted by the attention module's scoring path itself.
"""

from __future__ import annotations

from typing import Optional

from torch import Tensor

from flexatt.attention import AttentionCache, AttentionStats
from flexatt.decoders import DecoderState
from flexatt.decoding.stepper import grid_candidates


class EagerStepper:
    """:class:`~flexatt.decoding.stepper.Stepper` of ``model`` (a :class:`flexatt.model.Seq2Seq`)
    through its step API: ``model.encode`` and ``model.decode_step``."""

    name = "eager"

    def __init__(self, model):
        self.model = model

    @staticmethod
    def unsupported(model) -> Optional[str]:
        """Every model is covered."""
        return None

    def encode(self, src: Tensor, src_len: Tensor) -> tuple[AttentionCache, DecoderState]:
        return self.model.encode(src, src_len)

    def decode_step(self, prev_tokens: Tensor, state: DecoderState, cache: AttentionCache,
                    tau: Optional[float]) -> tuple[Tensor, DecoderState, Tensor, AttentionStats]:
        return self.model.decode_step(prev_tokens, state, cache, tau)

    @staticmethod
    def candidates(logits: Tensor, row_score: Tensor, starts: Tensor, counts: Tensor, k: int,
                   n: int) -> tuple[Tensor, Tensor]:
        return grid_candidates(logits, row_score, starts, counts, k, n)

    def forced(self, *args) -> None:
        """No one-call forced decoding: the search steps."""
        return None
