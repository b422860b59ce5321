"""Which backend decodes a model: :func:`select_backend`, the one place that decides.

Backends, fastest first (``decode.backend``):

* ``kernel`` (:mod:`flexatt.decoding.kernel`): the compiled step and one-call forced decoding;
  global and plain flexible attention with the concat score, float32 on the CPU, eval mode, and
  only while the reference equations it restates are unchanged (a digest per class);
* ``grouped`` (:mod:`flexatt.decoding.grouped`): PyTorch operators on a per-sentence cache,
  bit-identical to eager; global, flexible, SACT and flexible + SACT attention, any score;
* ``eager`` (:mod:`flexatt.decoding.eager`): the model's own modules; every model — the
  reference.

``auto`` takes the first that covers the model. Falling back from the kernel because its
reference changed, or to eager at all, warns once per reason; a named backend that does not
cover the model stops with a :class:`~flexatt.errors.ConfigError` naming ``decode.backend``.
``FLEXATT_FUSED=0`` makes ``auto`` decode eagerly (a switch for comparing against the
reference without editing a config).
"""

from __future__ import annotations

import os
import warnings
from typing import Optional

import torch

from flexatt.decoding import kernel
from flexatt.decoding.eager import EagerStepper
from flexatt.decoding.grouped import GroupedStepper
from flexatt.decoding.stepper import Stepper
from flexatt.errors import ConfigError

#: ``decode.backend`` values: ``auto`` and the backends, fastest first
BACKENDS = ("kernel", "grouped", "eager")
CHOICES = ("auto", *BACKENDS)
STEPPERS = {"kernel": kernel.KernelStepper, "grouped": GroupedStepper, "eager": EagerStepper}
ENV = "FLEXATT_FUSED"
_warned: set[str] = set()


def fast_enabled() -> bool:
    """False when ``FLEXATT_FUSED=0`` (or ``false``/``off``/``no``): ``auto`` then decodes eagerly."""
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "false", "off", "no")


def unsupported(model, backend: str) -> Optional[str]:
    """Why ``backend`` does not cover ``model`` (``None``: it does); the kernel also needs its
    extension built."""
    reason = STEPPERS[backend].unsupported(model)
    if reason is None and backend == "kernel" and kernel.extension() is None:
        reason = "the kernel could not be built"
    return reason


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, RuntimeWarning, stacklevel=4)


def select_backend(model, backend: str = "auto") -> Stepper:
    """The :class:`~flexatt.decoding.stepper.Stepper` that decodes ``model`` (a
    :class:`flexatt.model.Seq2Seq`) with ``backend`` (one of :data:`CHOICES`; see the module doc).

    Raises:
        ConfigError: ``decode.backend`` is not a backend, or the named backend does not cover the
            model (the message says why).
    """
    if backend not in CHOICES:
        raise ConfigError("decode.backend", f"must be one of {', '.join(CHOICES)} (got {backend!r})")
    if backend != "auto":
        reason = unsupported(model, backend)
        if reason is not None:
            raise ConfigError("decode.backend", f"{backend} does not cover this model: {reason}")
        return STEPPERS[backend](model)
    if fast_enabled():
        for name in BACKENDS[:-1]:
            reason = unsupported(model, name)
            if reason is None:
                return STEPPERS[name](model)
            if name == "kernel" and "changed since the kernel was written" in reason:
                _warn_once(f"flexatt.decoding: {reason}: the kernel is not used")
        _warn_once(f"flexatt.decoding: {reason}: decoding runs on the eager backend")
    return EagerStepper(model)


def provenance(stepper: Stepper) -> dict:
    """What decoded a result: the backend, the SIMD level the kernel was compiled for (``None``
    for the PyTorch backends, which dispatch per operator) and the torch version."""
    return {"backend": stepper.name,
            "simd": torch.backends.cpu.get_cpu_capability() if stepper.name == "kernel" else None,
            "torch": torch.__version__}
