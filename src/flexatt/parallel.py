"""Trainings side by side: how many, with how many threads each, and a pool that runs them.

A training's small products (the decoder's step loop: a few hundred operators per target
position, most of them on ``batch x hidden`` tensors) keep two intra-op threads waiting on each
other at every operator; two trainings of one thread each, at once, do more work per hour on the
same cores (``python benchmarks/train_throughput.py --concurrent 2`` measures it on the machine
at hand; ``benchmarks/README.md`` has the figures). Since a training's weights depend on its
thread count, the count is a parameter (``train.threads``) and the number of trainings at once
is the launcher's choice alone:

* :func:`jobs`: how many trainings a stage may run at once: ``$FLEXATT_JOBS`` (``flexatt repro``
  sets it for each stage it starts, from the cores it gives the stage), else the machine's cores
  over ``train.threads``; ``FLEXATT_JOBS=1`` trains one model at a time;
* :func:`run_each`: a function over a list of inputs in that many worker processes, results in
  input order (in this process when ``jobs`` is 1);
* :func:`intra_op_threads`: torch's thread count for a block, restored after.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any

import torch

#: how many trainings a stage may run at once (set by ``flexatt repro`` for each stage it starts)
JOBS_ENV = "FLEXATT_JOBS"
#: how many trainings the launcher runs at once, this one included (recorded, not used)
SIDE_BY_SIDE_ENV = "FLEXATT_SIDE_BY_SIDE"


def cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS tells it)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def jobs(threads: int) -> int:
    """How many trainings of ``threads`` threads each to run at once: ``$FLEXATT_JOBS`` if set,
    else as many as the cores hold (at least one).

    Raises:
        ValueError: ``$FLEXATT_JOBS`` is not a positive integer (the message names it).
    """
    value = os.environ.get(JOBS_ENV)
    if value is None or value.strip() == "":
        return max(1, cores() // max(1, threads))
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"${JOBS_ENV}: must be a positive integer (got {value!r})")
    return n


def side_by_side() -> int:
    """How many trainings the launchers of this process run at once, this one included
    (``$FLEXATT_SIDE_BY_SIDE``: ``flexatt repro`` and :func:`run_each` set it; 1 when unset):
    recorded in each model's metrics beside its ``threads``."""
    try:
        return max(1, int(os.environ.get(SIDE_BY_SIDE_ENV, "1")))
    except ValueError:
        return 1


@contextlib.contextmanager
def intra_op_threads(threads: int) -> Iterator[None]:
    """Run the block with ``torch.set_num_threads(threads)``; the previous count is restored."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def run_each(fn: Callable[[Any], Any], items: Iterable[Any], n_jobs: int) -> Iterator[Any]:
    """``fn(item)`` for each item, yielded in the order of ``items``, with at most ``n_jobs``
    running at once in worker processes (spawned: no thread pool or autograd state is inherited);
    ``n_jobs`` 1 runs them one by one in this process. ``fn`` must be importable (a module-level
    function) and its inputs and results picklable.

    The caller may stop iterating at any point: items not yet started are never started, and the
    ones under way finish before the pool closes (a result not taken is dropped). An exception in
    ``fn`` is raised here when its result is due."""
    items = list(items)
    if n_jobs <= 1 or len(items) <= 1:
        for item in items:
            yield fn(item)
        return
    context = multiprocessing.get_context("spawn")
    saved = {key: os.environ.get(key) for key in (JOBS_ENV, SIDE_BY_SIDE_ENV)}
    os.environ[JOBS_ENV] = "1"  # a worker trains one model at a time
    os.environ[SIDE_BY_SIDE_ENV] = str(max(n_jobs, side_by_side()))  # recorded by the workers
    try:
        with ProcessPoolExecutor(max_workers=n_jobs, mp_context=context) as pool:
            pending: list[Future] = []
            queue = iter(items)
            try:
                for item in queue:
                    pending.append(pool.submit(fn, item))
                    if len(pending) >= n_jobs:
                        break
                while pending:
                    result = pending.pop(0).result()
                    nxt = next(queue, _END)
                    if nxt is not _END:
                        pending.append(pool.submit(fn, nxt))
                    yield result
            finally:
                for future in pending:
                    future.cancel()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


_END = object()
