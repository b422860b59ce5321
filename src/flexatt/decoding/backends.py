"""Which backend decodes a model: :func:`select_backend`, the one place that decides.

Backends (``decode.backend``):

* ``kernel`` (:mod:`flexatt.decoding.kernel`): the compiled step and one-call forced decoding;
  global and plain flexible attention with the concat score, float32 on the CPU, eval mode, and
  only while the reference equations it restates are unchanged (a digest per class);
* ``eager`` (:class:`flexatt.decoding.stepper.EagerStepper`): the model's own modules — every
  model, and whatever a researcher has edited in them; the reference.

``auto`` takes the kernel where it covers the model, else the model's own modules. Falling back
because the kernel's reference changed warns once; a named backend that does not cover the
model stops with a :class:`~flexatt.errors.ConfigError` naming ``decode.backend``.
"""

from __future__ import annotations

import warnings
from typing import Optional

import torch

from flexatt.decoding import kernel
from flexatt.decoding.stepper import EagerStepper, Stepper
from flexatt.errors import ConfigError

#: ``decode.backend`` values: ``auto`` and the backends, fastest first
BACKENDS = ("kernel", "eager")
CHOICES = ("auto", *BACKENDS)
STEPPERS = {"kernel": kernel.KernelStepper, "eager": EagerStepper}
_warned: set[str] = set()


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
    reason = unsupported(model, "kernel")
    if reason is None:
        return STEPPERS["kernel"](model)
    if "changed since the kernel was written" in reason:
        _warn_once(f"flexatt.decoding: {reason}: the model's own modules decode it")
    return EagerStepper(model)


def provenance(stepper: Stepper) -> dict:
    """What decoded a result: the backend, the SIMD level the kernel was compiled for (``None``
    for the eager backend: PyTorch dispatches per operator) and the torch version."""
    return {"backend": stepper.name,
            "simd": torch.backends.cpu.get_cpu_capability() if stepper.name == "kernel" else None,
            "torch": torch.__version__}
