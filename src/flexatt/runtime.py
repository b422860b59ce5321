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
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

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
