"""Loading trained models and translating a whole split: the shared core of the sweep,
evaluation and translate commands.

``translate_split`` decodes an encoded split in length-sorted batches (greedy or beam search),
restores the original sentence order, detokenises, and returns the hypotheses with the window
statistics that the attention's scoring path counted (SPEC §4) and the decoding time.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from flexatt.data.batching import LengthGroupedBatches, ParallelData, collate
from flexatt.data.subwords import EncodedSplit, Vocab
from flexatt.errors import DataError
from flexatt.model import Seq2Seq, build_model
from flexatt.search import beam_search, greedy
from flexatt.train import checkpoint_hparams, load_checkpoint_state


def load_model(checkpoint: str | Path) -> Seq2Seq:
    """A trained :class:`Seq2Seq` from a checkpoint (``weights_only`` loading), in eval mode.

    Raises:
        DataError: a missing, truncated or foreign checkpoint (the message names the file).
    """
    hparams = checkpoint_hparams(checkpoint)
    try:
        model = build_model(hparams["model_cfg"], hparams["src_vocab"], hparams["tgt_vocab"])
        model.load_state_dict(load_checkpoint_state(checkpoint))
    except (KeyError, RuntimeError, ValueError) as exc:
        raise DataError(checkpoint, f"does not hold a flexatt model: {exc}") from exc
    return model.eval()


@dataclass
class Translation:
    """The output of decoding one split."""

    hypotheses: list[str]
    window_sum: np.ndarray  # per sentence: positions scored, summed over steps (and hypotheses)
    steps: np.ndarray  # per sentence: steps (x live hypotheses) that scored positions
    src_lengths: np.ndarray  # per sentence: S (EOS included), what global attention scores per step
    seconds: float
    traces: dict[int, dict] = field(default_factory=dict)

    @property
    def mean_window(self) -> float:
        """Positions scored per decoding step, over every step of every sentence (SPEC §4)."""
        return float(self.window_sum.sum()) / max(int(self.steps.sum()), 1)

    @property
    def ms_per_sentence(self) -> float:
        return 1000.0 * self.seconds / max(len(self.hypotheses), 1)


@torch.no_grad()
def translate_split(model: Seq2Seq, split: EncodedSplit, vocab: Vocab, *, tau: float | None = None,
                    beam_size: int = 1, alpha: float = 1.0, max_len_ratio: float = 2.0,
                    batch_size: int = 50, trace_indices: set[int] | None = None) -> Translation:
    """Translate every source sentence of ``split``.

    Args:
        tau: flexible attention's threshold (``None`` or ``inf``: score every position).
        beam_size: 1 decodes greedily.
        alpha: length-normalisation exponent of beam search.
        max_len_ratio: at most ``ratio · S + 10`` output tokens.
        trace_indices: sentences whose per-step traces (attention, g_t, windows) to keep.
    """
    tau = None if tau is None or math.isinf(tau) else float(tau)
    n = len(split)
    token_rows: list[list[int] | None] = [None] * n
    window_sum = np.zeros(n, dtype=np.int64)
    steps = np.zeros(n, dtype=np.int64)
    traces: dict[int, dict] = {}
    sampler = LengthGroupedBatches(split.src_lengths, split.tgt_lengths, batch_size, shuffle=False)
    data = ParallelData(split)
    started = time.perf_counter()
    for indices in sampler:
        batch = collate([data[i] for i in indices])
        max_len = (batch.src_len.float() * max_len_ratio).long() + 10
        want_traces = bool(trace_indices) and any(i in trace_indices for i in indices)
        if beam_size == 1:
            result = greedy(model, batch.src, batch.src_len, max_len, tau, return_traces=want_traces)
        else:
            result = beam_search(model, batch.src, batch.src_len, max_len, beam_size, tau=tau,
                                 alpha=alpha, return_traces=want_traces)
        for row, i in enumerate(batch.index.tolist()):
            token_rows[i] = result.tokens[row].tolist()
            window_sum[i] = int(result.window_sum[row])
            steps[i] = int(result.steps[row])
            if want_traces and i in trace_indices:
                traces[i] = result.traces[row]
    seconds = time.perf_counter() - started
    hypotheses = vocab.decode(token_rows)
    return Translation(hypotheses, window_sum, steps, split.src_lengths + 1, seconds, traces)
