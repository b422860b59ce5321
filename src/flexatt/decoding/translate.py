"""Translating a whole split: what the stages and ``flexatt translate`` decode with.

:func:`translate_split` decodes an encoded split in length-sorted batches (greedy or beam search,
on the backend ``decode.backend`` selects: :func:`flexatt.decoding.select_backend`), restores the
original sentence order, detokenises, and returns the hypotheses with the window statistics that
the attention's scoring path counted (docs/method.md, Window), the decoding time and what decoded
them (backend, SIMD level, torch version).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Optional

import numpy as np
import torch

from flexatt.data.batching import LengthGroupedBatches, ParallelData, collate
from flexatt.data.subwords import EncodedSplit, Vocab
from flexatt.decoding.backends import provenance, select_backend
from flexatt.decoding.search import beam_search, greedy, mean_window, step_weighted_window
from flexatt.tau import INF, check


@dataclass(frozen=True)
class DecodeOptions:
    """How a split is decoded: ``beam_size`` (1: greedy), ``alpha`` (beam search's length
    normalisation), ``max_len_ratio`` (at most ratio · S + 10 output tokens), ``batch_size``
    (sentences per length-sorted batch), ``backend`` (``decode.backend``,
    :func:`flexatt.decoding.select_backend`, selected once per split) and ``tau`` (flexible
    attention's threshold, ``inf``: every position). :func:`flexatt.points.decode_options`
    makes them from the ``decode`` group."""

    beam_size: int = 1
    alpha: float = 1.0
    max_len_ratio: float = 2.0
    batch_size: int = 50
    backend: str = "auto"
    tau: float = INF

    def at(self, tau: float) -> "DecodeOptions":
        """The same options at threshold ``tau``."""
        return replace(self, tau=check(tau))


@dataclass
class Translation:
    """The output of decoding one split."""

    hypotheses: list[str]
    window_sum: np.ndarray  # per sentence: positions scored, summed over steps (and hypotheses); float64
    steps: np.ndarray  # per sentence: steps (x live hypotheses) that scored positions
    src_lengths: np.ndarray  # per sentence: S (EOS included), what global attention scores per step
    seconds: float
    traces: dict[int, dict] = field(default_factory=dict)
    decoded_by: dict = field(default_factory=dict)  # backend, simd, torch (flexatt.decoding.provenance)
    layer_window_sum: Optional[np.ndarray] = None  # per sentence x layer: ``window_sum`` of each cross-attention layer (a Transformer)

    @property
    def mean_window(self) -> float:
        """Positions scored per decoding step, per sentence, then the mean over sentences
        (:func:`flexatt.decoding.mean_window`; docs/method.md, Window)."""
        return mean_window(self.window_sum, self.steps)

    @property
    def step_weighted_window(self) -> float:
        """Positions scored per (step, live hypothesis) pair over the whole split
        (:func:`flexatt.decoding.step_weighted_window`)."""
        return step_weighted_window(self.window_sum, self.steps)

    @property
    def layer_windows(self) -> list[float] | None:
        """:attr:`mean_window` of each cross-attention layer (a Transformer; ``None`` otherwise):
        its positions scored per step, per sentence, then the mean over sentences."""
        if self.layer_window_sum is None:
            return None
        return [mean_window(self.layer_window_sum[:, k], self.steps) for k in range(self.layer_window_sum.shape[1])]

    @property
    def ms_per_sentence(self) -> float:
        return 1000.0 * self.seconds / max(len(self.hypotheses), 1)


@torch.no_grad()
def translate_split(model, split: EncodedSplit, vocab: Vocab, options: DecodeOptions = DecodeOptions(), *,
                    trace_indices: set[int] | None = None) -> Translation:
    """Translate every source sentence of ``split`` as ``options`` say (:class:`DecodeOptions`);
    ``trace_indices``: the sentences whose per-step traces (attention, g_t, windows) to keep."""
    beam_size, alpha, max_len_ratio, batch_size, tau = (options.beam_size, options.alpha, options.max_len_ratio,
                                                        options.batch_size, options.tau)
    n = len(split)
    token_rows: list[list[int] | None] = [None] * n
    window_sum = np.zeros(n, dtype=np.float64)
    layer_window_sum: Optional[np.ndarray] = None
    steps = np.zeros(n, dtype=np.int64)
    traces: dict[int, dict] = {}
    sampler = LengthGroupedBatches(split.src_lengths, split.tgt_lengths, batch_size, shuffle=False)
    data = ParallelData(split)
    stepper = select_backend(model, options.backend)
    started = time.perf_counter()
    for indices in sampler:
        batch = collate([data[i] for i in indices])
        max_len = (batch.src_len.float() * max_len_ratio).long() + 10
        want_traces = bool(trace_indices) and any(i in trace_indices for i in indices)
        if beam_size == 1:
            result = greedy(model, batch.src, batch.src_len, max_len, tau, return_traces=want_traces,
                            backend=stepper)
        else:
            result = beam_search(model, batch.src, batch.src_len, max_len, beam_size, tau=tau,
                                 alpha=alpha, return_traces=want_traces, backend=stepper)
        for row, i in enumerate(batch.index.tolist()):
            token_rows[i] = result.tokens[row].tolist()
            window_sum[i] = float(result.window_sum[row])
            if result.layer_window_sum is not None:
                if layer_window_sum is None:
                    layer_window_sum = np.zeros((n, result.layer_window_sum.size(1)), dtype=np.float64)
                layer_window_sum[i] = result.layer_window_sum[row].double().numpy()
            steps[i] = int(result.steps[row])
            if want_traces and i in trace_indices:
                traces[i] = result.traces[row]
    seconds = time.perf_counter() - started
    hypotheses = vocab.decode(token_rows)
    return Translation(hypotheses, window_sum, steps, split.src_lengths + 1, seconds, traces, provenance(stepper),
                       layer_window_sum)
