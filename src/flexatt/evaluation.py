"""Loading trained models and translating a whole split: the shared core of the sweep,
evaluation and translate commands, with the settings they share (``decode``, the checkpoints of
``evaluate.checkpoints``, lists of τ) and the τ search of the sweeps.

``translate_split`` decodes an encoded split in length-sorted batches (greedy or beam search, on
the backend ``decode.backend`` selects: :func:`flexatt.decoding.select_backend`),
restores the original sentence order, detokenises, and returns the hypotheses with the window
statistics that the attention's scoring path counted (docs/method.md, Window), the decoding time
and what decoded them (backend, SIMD level, torch version).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from omegaconf import DictConfig

from flexatt import config as C
from flexatt import schema
from flexatt.checkpoints import checkpoint_hparams, load_checkpoint_state
from flexatt.data.batching import LengthGroupedBatches, ParallelData, collate
from flexatt.data.subwords import EncodedSplit, Vocab
from flexatt.errors import ConfigError, DataError
from flexatt.decoding import beam_search, greedy, mean_window, provenance, select_backend, step_weighted_window
from flexatt.model import Seq2Seq, build_model


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
    decoded_by: dict = field(default_factory=dict)  # backend, simd, torch (flexatt.decoding.provenance)

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
    def ms_per_sentence(self) -> float:
        return 1000.0 * self.seconds / max(len(self.hypotheses), 1)


@torch.no_grad()
def translate_split(model: Seq2Seq, split: EncodedSplit, vocab: Vocab, *, tau: float | None = None,
                    beam_size: int = 1, alpha: float = 1.0, max_len_ratio: float = 2.0,
                    batch_size: int = 50, trace_indices: set[int] | None = None,
                    backend: str = "auto") -> Translation:
    """Translate every source sentence of ``split``.

    Args:
        tau: flexible attention's threshold (``None`` or ``inf``: score every position).
        beam_size: 1 decodes greedily.
        alpha: length-normalisation exponent of beam search.
        max_len_ratio: at most ``ratio · S + 10`` output tokens.
        trace_indices: sentences whose per-step traces (attention, g_t, windows) to keep.
        backend: ``decode.backend`` (:func:`flexatt.decoding.select_backend`), selected once.
    """
    tau = None if tau is None or math.isinf(tau) else float(tau)
    n = len(split)
    token_rows: list[list[int] | None] = [None] * n
    window_sum = np.zeros(n, dtype=np.int64)
    steps = np.zeros(n, dtype=np.int64)
    traces: dict[int, dict] = {}
    sampler = LengthGroupedBatches(split.src_lengths, split.tgt_lengths, batch_size, shuffle=False)
    data = ParallelData(split)
    stepper = select_backend(model, backend)
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
            window_sum[i] = int(result.window_sum[row])
            steps[i] = int(result.steps[row])
            if want_traces and i in trace_indices:
                traces[i] = result.traces[row]
    seconds = time.perf_counter() - started
    hypotheses = vocab.decode(token_rows)
    return Translation(hypotheses, window_sum, steps, split.src_lengths + 1, seconds, traces, provenance(stepper))


def select_tau(points: list[dict], reference_bleu: float, tolerance: float) -> dict | None:
    """The τ-selection rule (Flexible Attention 2017, §5.2; docs/method.md, τ search).

    Among ``points`` (dicts with ``tau``, ``window`` and ``bleu`` on dev), keep those whose BLEU
    is at least ``reference_bleu − tolerance`` (``reference_bleu``: the same model at τ = ∞) and
    return the one with the smallest mean window; ties go to the higher BLEU, then the larger τ.
    ``None`` when no point qualifies (the model then keeps τ = ∞).
    """
    eligible = [p for p in points if within_tolerance(p["bleu"], reference_bleu, tolerance)]
    if not eligible:
        return None
    return min(eligible, key=lambda p: (p["window"], -p["bleu"], -p["tau"]))


def within_tolerance(bleu: float, reference_bleu: float, tolerance: float) -> bool:
    """Whether ``bleu`` is at most ``tolerance`` below ``reference_bleu``. The difference is
    rounded (6 decimals) before the comparison: scores are kept to 2 decimals, and in binary
    floating point 31.99 ≥ 32.49 − 0.5 is false."""
    return round(reference_bleu - bleu, 6) <= tolerance


def read_lines(path: str | Path) -> list[str]:
    """A text file's lines (UTF-8, ``\\n``-separated), or a :class:`DataError` naming it."""
    path = Path(path)
    if not path.is_file():
        raise DataError(path, "not found (run the tokenize stage)")
    return path.read_text(encoding="utf-8").split("\n")[:-1]


@dataclass
class EvalSet:
    """A split ready for decoding and scoring: ids, references, vocabularies."""

    name: str
    split: EncodedSplit
    references: list[str]
    second_references: list[str] | None
    src_vocab: Vocab
    tgt_vocab: Vocab

    @staticmethod
    def load(tok_dir: str | Path, name: str) -> EvalSet:
        tok_dir = Path(tok_dir)
        split = EncodedSplit.load(tok_dir / f"{name}.npz")
        refs = read_lines(tok_dir / f"{name}.ref")
        ref2 = read_lines(tok_dir / f"{name}.ref2") if (tok_dir / f"{name}.ref2").is_file() else None
        for path, lines in ((f"{name}.ref", refs), (f"{name}.ref2", ref2)):
            if lines is not None and len(lines) != len(split):
                raise DataError(tok_dir / path, f"has {len(lines)} lines for {len(split)} sentences")
        return EvalSet(name, split, refs, ref2, Vocab(tok_dir / "src.model"), Vocab(tok_dir / "tgt.model"))

    @property
    def mean_src_len(self) -> float:
        """S̄: mean source length as the attention sees it (subword tokens + EOS)."""
        return float(np.mean(self.split.src_lengths + 1))


def decode_settings(cfg: DictConfig | schema.Params) -> dict:
    """The ``decode`` group: ``beam_size``, ``alpha``, ``max_len_ratio``, ``batch_size``, ``backend``."""
    return schema.group(cfg, "decode").model_dump()


def checkpoint_of(cfg: DictConfig | schema.Params, name: str, key: str) -> Path:
    """The checkpoint of row ``name`` (``evaluate.checkpoints``), an existing file; ``key`` names
    the list it came from."""
    checkpoints = schema.group(cfg, "evaluate").checkpoints
    if name not in checkpoints:
        raise ConfigError(key, f"must be one of {', '.join(checkpoints)} (got {name!r})")
    return C.require_file(f"evaluate.checkpoints.{name}", checkpoints[name], hint="train that model first")


#: how many times :func:`search_points` halves τ below the grid when its smallest τ passes
BELOW_GRID_STEPS = 6


def search_points(point, grid: list[float], reference_bleu: float, tolerance: float,
                  steps: int) -> list[dict]:
    """Every dev point of one model: the grid, then ``steps`` bisections on log τ.

    ``point(tau) -> {"tau", "window", "bleu", ...}`` decodes dev at ``tau``. A point passes when
    its BLEU is at most ``tolerance`` below ``reference_bleu`` (:func:`within_tolerance`). The
    bracket is the smallest passing τ of the grid and the largest failing τ below it; where the
    grid's smallest τ already passes, τ is halved (up to :data:`BELOW_GRID_STEPS` times, points
    marked ``"source": "below grid"``) until one fails, so the selection is not held at the grid's
    edge. Each step then decodes the geometric mean of the bracket and moves the bound it falls
    on, so the knee of the curve is found with ``steps`` extra decodes. No bisection when no τ
    passes, or when every halving still passes. Returns the points in order of τ, each marked
    ``"source": "grid" | "below grid" | "search"``.
    """
    points = [{**point(tau), "source": "grid"} for tau in grid]

    def passes(p: dict) -> bool:
        return within_tolerance(p["bleu"], reference_bleu, tolerance)

    passing = [p["tau"] for p in points if passes(p)]
    if passing:
        hi = min(passing)
        failing = [p["tau"] for p in points if not passes(p) and 0 < p["tau"] < hi]
        lo = max(failing) if failing else None
        tau = hi
        for _ in range(BELOW_GRID_STEPS if lo is None else 0):
            tau = round(tau / 2, 4)
            if tau <= 0:
                break
            p = {**point(tau), "source": "below grid"}
            points.append(p)
            if not passes(p):
                lo = tau
                break
            hi = tau
        if lo is not None:
            points += bisect_log_tau(point, lo, hi, passes, steps)
    return sorted(points, key=lambda p: p["tau"])


def bisect_log_tau(point, lo: float, hi: float, passes, steps: int) -> list[dict]:
    """``steps`` bisections on log τ between ``lo`` (a τ that fails ``passes``) and ``hi`` (one
    that passes), for a property that holds from some τ on (window and BLEU both grow with τ).

    Each step decodes ``point(mid)`` at the geometric mean of the bracket, rounded to 4 decimals,
    and moves the bound it falls on; it stops early when the rounded mean is no longer strictly
    inside the bracket. Used by :func:`search_points` (``passes``: BLEU within the tolerance) and
    by the compare stage's matched windows (``passes``: the window reaches a target).
    Returns the new points, each marked ``"source": "search"``.
    """
    points = []
    for _ in range(steps):
        mid = round(math.exp(0.5 * (math.log(lo) + math.log(hi))), 4)
        if not lo < mid < hi:
            break
        p = {**point(mid), "source": "search"}
        points.append(p)
        if passes(p):
            hi = mid
        else:
            lo = mid
    return points
