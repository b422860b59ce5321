"""Word alignments of a model's attention, and what they are scored against: the gold links of
a split (``<split>.align`` beside the filtered corpus), the model's one-to-one links under forced
decoding of the references, and the length-proportional diagonal (the floor an attention
alignment has to beat). AER itself is :func:`flexatt.metrics.aer`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from flexatt.data.batching import LengthGroupedBatches, ParallelData, collate
from flexatt.data.evalset import EvalSet
from flexatt.decoding.search import forced_decode
from flexatt.errors import DataError
from flexatt.io import read_lines
from flexatt.metrics import attention_alignment, piece_word_ids

Links = set[tuple[int, int]]  # (source word, target word), 0-based


def read_gold(path: Path, n: int) -> list[Links] | None:
    """The gold links of the ``n`` sentences of a split, one line each of ``i-j`` pairs (source
    word i, target word j); ``None`` where the corpus has no such file. A file of another line
    count is refused (the message names it)."""
    if not path.is_file():
        return None
    lines = read_lines(path)
    if len(lines) != n:
        raise DataError(path, f"has {len(lines)} lines for {n} test sentences")
    return [{tuple(map(int, link.split("-"))) for link in line.split()} for line in lines]


@torch.no_grad()
def forced_alignments(model, data: EvalSet, tau: float, batch_size: int,
                      backend: str = "auto") -> tuple[list[Links], np.ndarray | None, np.ndarray | None]:
    """One-to-one word links under forced decoding of every reference (attention summed over each
    word's pieces, the most attended source word per target word: Luong et al. 2015 §5.4,
    :func:`flexatt.metrics.attention_alignment`), and the g_t / temperature values seen on the
    way (for the histograms; ``None`` for a model without them)."""
    sampler = LengthGroupedBatches(data.split.src_lengths, data.split.tgt_lengths, batch_size, shuffle=False)
    items = ParallelData(data.split)
    links: list[Links | None] = [None] * len(data.split)
    g_values, temperatures = [], []
    for indices in sampler:
        batch = collate([items[i] for i in indices])
        result = forced_decode(model, batch.src, batch.src_len, batch.tgt_in, batch.tgt_out, tau,
                               return_traces=True, backend=backend)
        for row, i in enumerate(batch.index.tolist()):
            src_pieces = [data.src_vocab.sp.id_to_piece(int(t)) for t in data.split.src(i)]
            tgt_pieces = [data.tgt_vocab.sp.id_to_piece(int(t)) for t in data.split.tgt(i)]
            trace = result.traces[row]
            links[i] = attention_alignment(trace.attention, src_pieces, tgt_pieces)
            if trace.g is not None:
                g_values.append(trace.g.numpy())
            if trace.temperature is not None:
                temperatures.append(trace.temperature.numpy())
    cat = lambda v: np.concatenate(v) if v else None  # noqa: E731
    return links, cat(g_values), cat(temperatures)


def diagonal_links(n_src: int, n_tgt: int) -> Links:
    """The length-proportional diagonal: target word j linked to source word
    ``floor((j + 0.5) · n_src / n_tgt)``, one link per target word (the same shape as
    :func:`flexatt.metrics.attention_alignment`'s). It reads no words, so its AER is the floor an
    attention alignment has to beat to show that it aligns (no library has it: it is one line)."""
    if n_src == 0 or n_tgt == 0:
        return set()
    return {(min(n_src - 1, int((j + 0.5) * n_src / n_tgt)), j) for j in range(n_tgt)}


def word_count(vocab, ids) -> int:
    """The words of a sentence given as the piece ids of ``vocab`` (a word starts at a piece
    marked as word-initial: :func:`flexatt.metrics.piece_word_ids`)."""
    pieces = [vocab.sp.id_to_piece(int(t)) for t in ids]
    return piece_word_ids(pieces)[-1] + 1 if pieces else 0
