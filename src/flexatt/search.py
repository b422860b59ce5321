"""Decoding: greedy search over a batch of sentences (pure functions, no training state).

Every search returns, per sentence, the number of source positions whose score was evaluated
(summed over its decoding steps, from the attention's own ``stats.window``) and the number of
steps, so the mean window of SPEC §4 is ``window_sum.sum() / steps.sum()``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from flexatt.data.subwords import BOS_ID, EOS_ID, PAD_ID


@dataclass
class SearchResult:
    tokens: Tensor  # batch x L   output ids (EOS excluded), PAD after the end
    window_sum: Tensor  # batch   positions scored, summed over the sentence's steps
    steps: Tensor  # batch        decoding steps taken (the EOS step included)

    @property
    def mean_window(self) -> float:
        return float(self.window_sum.sum()) / max(int(self.steps.sum()), 1)


@torch.no_grad()
def greedy(model, src: Tensor, src_len: Tensor, max_len: Tensor | int, tau: float | None = None) -> SearchResult:
    """Greedy decoding of a batch.

    Args:
        model: a :class:`flexatt.model.Seq2Seq` (in eval mode).
        src: batch x S ids, src_len: batch.
        max_len: the most steps per sentence (an int, or a batch tensor).
        tau: flexible attention's threshold (``None``: score every position).

    Finished sentences leave the batch, so their steps are neither computed nor counted.
    """
    batch = src.size(0)
    limit = torch.as_tensor(max_len).expand(batch) if not isinstance(max_len, Tensor) else max_len
    cache, state = model.encode(src, src_len)
    t_max = int(limit.max())
    tokens = torch.full((batch, t_max), PAD_ID, dtype=torch.long)
    window_sum = torch.zeros(batch, dtype=torch.long)
    steps = torch.zeros(batch, dtype=torch.long)
    active = torch.arange(batch)
    prev = torch.full((batch,), BOS_ID, dtype=torch.long)
    for t in range(t_max):
        logits, state, _, stats = model.decode_step(prev, state, cache, tau)
        prev = logits.argmax(-1)
        window_sum[active] += stats.window.to(window_sum.dtype)
        steps[active] += 1
        ended = (prev == EOS_ID) | (limit[active] <= t + 1)
        tokens[active, t] = prev.masked_fill(prev == EOS_ID, PAD_ID)
        if bool(ended.all()):
            break
        if bool(ended.any()):
            keep = (~ended).nonzero(as_tuple=True)[0]
            active, prev = active[keep], prev[keep]
            state, cache = state.index_select(keep), cache.index_select(keep)
    return SearchResult(tokens, window_sum, steps)
