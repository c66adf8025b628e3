"""Calls into Numba ``parallel=True`` functions that are safe from several threads at once.

Numba runs parallel regions on one of three threading layers: TBB, OpenMP or its own
``workqueue`` (chosen when neither TBB nor OpenMP is present, or when asked for with
``NUMBA_THREADING_LAYER=workqueue``). The workqueue layer is not thread safe: two threads
entering parallel regions at the same time abort the process. Every parallel entry point of
distshap therefore goes through :func:`run_parallel`, which holds one process-wide lock around
the call while the layer is workqueue, or not yet known (Numba chooses the layer at the first
parallel call, so the first calls are serialised until then); under TBB and OpenMP calls run
concurrently as before.

:func:`run_ranges` is the other way to run in parallel: a serial ``nogil`` compiled function
over ranges of its work, in Python threads. It needs no parallel region (so no lock under any
layer), and a serial function compiles in about half the time of a ``parallel=True`` one,
whose parfor passes and gufunc wrapper recompile the whole body (the first call in a fresh
environment: ``benchmarks/cold_start.py``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numba
import numpy as np

__all__ = ["run_parallel", "run_ranges"]

_LOCK = threading.Lock()
_layer: str | None = None  # the layer Numba launched, once known


def _serialise() -> bool:
    """Whether parallel calls must take the lock: workqueue, or no layer launched yet."""
    global _layer
    if _layer is None:
        try:
            _layer = str(numba.threading_layer())
        except ValueError:  # no parallel region has run in this process yet
            return True
    return _layer == "workqueue"


def run_parallel(function: Callable[..., Any], *args: Any) -> Any:
    """``function(*args)`` for a Numba ``parallel=True`` function, safe under every layer."""
    if _serialise():
        with _LOCK:
            return function(*args)
    return function(*args)


_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def run_ranges(function: Callable[..., Any], n: int, pieces: int, *args: Any) -> None:
    """``function(*args, lo, hi)`` over ``[0, n)`` cut into about ``pieces`` ranges, in threads.

    ``function`` must be a ``nogil`` compiled function that writes its results for the items
    ``lo .. hi - 1`` in place: its ranges then run in parallel, on up to
    ``numba.get_num_threads()`` threads (the caller's among them, from one shared pool of
    ``NUMBA_NUM_THREADS`` threads), each taking the next range until none is left. Results
    must not depend on the ranges (each item computed on its own); exceptions propagate.
    """
    pieces = max(1, min(int(pieces), int(n)))
    threads = min(numba.get_num_threads(), pieces)
    if threads <= 1:
        function(*args, 0, n)
        return
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(numba.config.NUMBA_NUM_THREADS, "distshap-ranges")
    bounds = np.linspace(0, n, pieces + 1).astype(np.int64).tolist()
    ranges = iter(zip(bounds[:-1], bounds[1:], strict=True))
    lock = threading.Lock()

    def work() -> None:
        while True:
            with lock:
                lo_hi = next(ranges, None)
            if lo_hi is None:
                return
            function(*args, *lo_hi)

    futures = [_POOL.submit(work) for _ in range(threads - 1)]
    try:
        work()
    finally:
        for future in futures:
            future.result()
