"""Decoding: greedy search, beam search and forced decoding, written once
(:mod:`~flexatt.decoding.search`) against one stepper interface
(:class:`~flexatt.decoding.stepper.Stepper`), and the backends that implement it:

* ``eager`` (:class:`~flexatt.decoding.stepper.EagerStepper`) — the model's own modules on a
  :class:`~flexatt.attention.RowMap` of its cache, the reference;
* :mod:`~flexatt.decoding.kernel` — the compiled step (``csrc/kernel.cpp``), guarded by
  digests of the equations it restates (:mod:`~flexatt.decoding.digests`).

:func:`~flexatt.decoding.backends.select_backend` is the one place that decides which backend
decodes a model (``decode.backend: auto | kernel | eager``).
"""

from flexatt.decoding.backends import BACKENDS, CHOICES, provenance, select_backend
from flexatt.decoding.search import (
    SearchResult,
    Trace,
    beam_search,
    forced_decode,
    greedy,
    mean_window,
    step_weighted_window,
)
from flexatt.decoding.stepper import Stepper

__all__ = ["BACKENDS", "CHOICES", "SearchResult", "Stepper", "Trace", "beam_search", "forced_decode", "greedy",
           "mean_window", "provenance", "select_backend", "step_weighted_window"]
