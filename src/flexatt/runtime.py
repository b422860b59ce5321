"""Process-wide runtime settings for flexatt's entry points (stages, CLI, benchmarks).

:func:`tune_allocator` keeps large freed blocks in the C heap for reuse. glibc's ``malloc``
serves every block above its mmap threshold (at most 32 MiB after its own adjustment) with a
fresh ``mmap`` and returns it with ``munmap`` when freed, so each new tensor of that size is
paid again in page faults on first touch. One training step allocates several such tensors
(the output layer's logits and their gradient: batch·T x V floats, 37 MB at 64 x 36 x 4000),
and filling fresh pages costs more than the arithmetic on them: on the 2-core reference
machine ``torch.log_softmax`` of a 2330 x 4000 tensor takes 15 ms with fresh pages and 3–4 ms
with reused ones. ``FLEXATT_ALLOCATOR=default python benchmarks/train_throughput.py`` against a
plain run measures the effect on whole training steps; ``benchmarks/joeynmt_throughput.py``
measures Joey NMT both ways. The settings only change where memory comes from, never a result.

Set ``FLEXATT_ALLOCATOR=default`` to leave the C library's defaults alone.

:func:`resolve_precision` decides ``trainer.precision: auto`` for the machine a run trains on:
bf16 mixed precision where the device multiplies bf16 natively, float32 elsewhere.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math
import os
import sys
import time

import torch

#: mallopt parameters (glibc's <malloc.h>)
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3
#: blocks below this size come from the heap and are reused after free
MMAP_THRESHOLD = 1 << 30
#: free memory at the top of the heap kept for reuse instead of being returned to the system
TRIM_THRESHOLD = 1 << 30
#: extra memory requested whenever the heap grows
TOP_PAD = 64 << 20

ENV = "FLEXATT_ALLOCATOR"
#: the same settings as glibc environment variables, for a child process that is not flexatt
#: (``benchmarks/joeynmt_throughput.py`` gives them to Joey NMT for a like-for-like figure)
GLIBC_ENV = {"MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD),
             "MALLOC_TRIM_THRESHOLD_": str(TRIM_THRESHOLD), "MALLOC_TOP_PAD_": str(TOP_PAD)}
_state: dict[str, bool] = {}


def tune_allocator() -> bool:
    """Raise glibc's mmap and trim thresholds (see the module doc). Idempotent; returns whether
    the settings are in effect (False off glibc/Linux or with ``FLEXATT_ALLOCATOR=default``)."""
    if "tuned" in _state:
        return _state["tuned"]
    tuned = False
    if os.environ.get(ENV, "tuned") != "default" and sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            mallopt = libc.mallopt
        except (OSError, AttributeError):  # not glibc (musl has no mallopt)
            mallopt = None
        if mallopt is not None:
            mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
            tuned = all(mallopt(param, value) == 1 for param, value in (
                (_M_MMAP_THRESHOLD, MMAP_THRESHOLD), (_M_TRIM_THRESHOLD, TRIM_THRESHOLD),
                (_M_TOP_PAD, TOP_PAD)))
    _state["tuned"] = tuned
    return tuned


# --------------------------------------------------------------------------- precision

#: the ``trainer.precision`` value that :func:`resolve_precision` decides per machine
AUTO_PRECISION = "auto"
#: the /proc/cpuinfo flags of native bf16 matrix products (x86: AVX512-BF16, AMX)
BF16_FLAGS = ("avx512_bf16", "amx_bf16")
#: where Linux lists the CPU's features (x86: a ``flags`` line per core)
CPUINFO = "/proc/cpuinfo"
#: the output layer's product timed by the probe: batch·T rows (64 pairs of 32 target tokens)
#: x readout size x vocabulary, the default profile's
PROBE_SHAPE = (2048, 128, 4000)
#: the probe chooses bf16 autocast only when the bf16 product is at least this many times faster
#: (benchmarks/README.md gives what native and emulated bf16 measure)
BF16_MIN_SPEEDUP = 1.5


def cpu_flags(path: str | os.PathLike | None = None) -> set[str] | None:
    """The x86 feature flags of ``/proc/cpuinfo`` (its ``flags`` lines), or ``None`` where there
    are none to read: not Linux, an ARM CPU (whose ``Features`` lines name no x86 flags), a
    file that cannot be read. ``path`` defaults to :data:`CPUINFO`."""
    try:
        with open(path or CPUINFO, encoding="utf-8", errors="replace") as handle:
            lines = [line for line in handle if line.split(":", 1)[0].strip() == "flags"]
    except OSError:
        return None
    if not lines:
        return None
    return {flag for line in lines for flag in line.split(":", 1)[1].split()}


def native_cpu_bf16(path: str | os.PathLike | None = None) -> bool | None:
    """Whether this CPU multiplies bf16 matrices natively (so that bf16 autocast pays).

    ``False`` when oneDNN has no bf16 kernels for it at all; otherwise, on x86, whether the
    flags include AVX512-BF16 or AMX-BF16: oneDNN also reports bf16 support on AVX-512 CPUs
    without them, where it emulates the products and the output layer runs about 2.85x slower
    than in float32. ``None`` when it cannot be told from the flags (ARM, not Linux)."""
    if not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        return False
    flags = cpu_flags(path)
    if flags is None:
        return None
    return any(flag in flags for flag in BF16_FLAGS)


def bf16_speedup(seconds: float = 0.4, shape: tuple[int, int, int] = PROBE_SHAPE) -> float:
    """How many times faster this CPU multiplies the output layer's matrices in bfloat16 than in
    float32: ``rows x inner`` times ``inner x outer`` (:data:`PROBE_SHAPE`), the product that
    bf16 autocast runs with bf16 operands; the best of repeated calls each, alternating, for
    about ``seconds`` in all. Uses its own random generator (the global seed is left alone).

    The operands are cast before the clock starts: the casts are the same memory-bound work on
    any CPU, while the product is what native bf16 speeds up and emulated bf16 slows down (timed
    with the casts, the ratio swings far more from run to run: benchmarks/README.md)."""
    rows, inner, outer = shape
    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(rows, inner, generator=gen), torch.randn(outer, inner, generator=gen)
    operands = {False: (x, w), True: (x.bfloat16(), w.bfloat16())}

    def time_once(bf16: bool) -> float:
        start = time.perf_counter()
        with torch.inference_mode():
            torch.nn.functional.linear(*operands[bf16])
        return time.perf_counter() - start

    time_once(False), time_once(True)  # warm-up: kernel selection, first-touch pages
    best = {False: math.inf, True: math.inf}
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        for bf16 in (False, True):
            best[bf16] = min(best[bf16], time_once(bf16))
    return best[False] / best[True]


def _cuda_bf16() -> bool:
    """Whether the current CUDA device has native bf16 (compute capability 8 or ROCm)."""
    try:
        return bool(torch.cuda.is_bf16_supported(including_emulation=False))
    except TypeError:  # torch < 2.3
        return bool(torch.version.hip) or torch.cuda.get_device_capability()[0] >= 8


def resolve_precision(requested: str | int, accelerator: str) -> tuple[str | int, str]:
    """The Lightning precision to train with, and why: ``(precision, reason)``.

    Any value but ``auto`` is returned unchanged. ``auto`` (``trainer.precision``'s default) is
    decided for the device that ``accelerator`` (``trainer.accelerator``; ``auto`` means CUDA
    when a GPU is visible, else the CPU) trains on:

    * a CUDA GPU: ``bf16-mixed`` when it has native bf16 (Ampere or later), else ``32-true``;
    * a CPU: ``bf16-mixed`` when it has native bf16 matrix products (:func:`native_cpu_bf16`:
      the ``avx512_bf16`` / ``amx_bf16`` flags of ``/proc/cpuinfo``); where the flags cannot
      tell (ARM, not Linux), a timing probe of the output layer's product
      (:func:`bf16_speedup`) chooses ``bf16-mixed`` only when bf16 products are at least
      :data:`BF16_MIN_SPEEDUP` times faster;
    * any other accelerator (``mps``, ``tpu``): ``32-true``.
    """
    if requested != AUTO_PRECISION:
        return requested, "set in trainer.precision"
    if accelerator in ("gpu", "cuda") or (accelerator == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            return "32-true", "auto: no CUDA device visible"
        name = torch.cuda.get_device_name()
        if _cuda_bf16():
            return "bf16-mixed", f"auto: CUDA device {name} has native bf16"
        return "32-true", f"auto: CUDA device {name} has no native bf16"
    if accelerator not in ("cpu", "auto"):
        return "32-true", f"auto: float32 on accelerator {accelerator}"
    native = native_cpu_bf16()
    if native is True:
        return "bf16-mixed", f"auto: CPU flags ({CPUINFO}) list native bf16 ({' or '.join(BF16_FLAGS)})"
    if native is False:
        if not torch.ops.mkldnn._is_mkldnn_bf16_supported():
            return "32-true", "auto: oneDNN has no bf16 support on this CPU"
        return "32-true", (f"auto: CPU flags ({CPUINFO}) list neither {' nor '.join(BF16_FLAGS)}: "
                           "bf16 products are emulated, slower than float32")
    speedup = bf16_speedup()
    shape = "x".join(map(str, PROBE_SHAPE))
    verdict = "bf16-mixed" if speedup >= BF16_MIN_SPEEDUP else "32-true"
    return verdict, (f"auto: timing probe: a {shape} bf16 product ran {speedup:.2f}x as fast as float32 "
                     f"({'>=' if verdict == 'bf16-mixed' else '<'} {BF16_MIN_SPEEDUP})")
