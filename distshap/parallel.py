"""Thread helpers of every CPU path: parallel Numba calls, ranges in threads, thread counts.

* :func:`run_parallel` calls a Numba ``parallel=True`` function safely from any thread: Numba's
  ``workqueue`` layer aborts the process when two threads enter parallel regions at once, so
  calls hold one lock while the layer is workqueue or not yet chosen (TBB and OpenMP run
  concurrently).
* :func:`run_ranges` runs a serial ``nogil`` compiled function over ranges of its work in Python
  threads: no parallel region (no lock under any layer) and half the compile time.
* :func:`num_threads` is the count both use: Numba's, or ``DISTSHAP_NUM_THREADS`` applied to the
  calling thread at each call. Dask workers get theirs that way: Numba reads
  ``NUMBA_NUM_THREADS`` once, at import, and fails later compiles when it changed.

Fork safety: a forked child (``multiprocessing`` with ``fork``, preloading servers, prefork task
queues) gets new locks and no range pool (the parent's threads do not come along); when the
parent started GNU's OpenMP runtime, which terminates a forked child entering a parallel
region, the child runs ``parallel=True`` functions compiled serially.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numba
import numpy as np

__all__ = ["THREADS_VARIABLE", "num_threads", "run_parallel", "run_ranges"]

THREADS_VARIABLE = "DISTSHAP_NUM_THREADS"

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


def num_threads() -> int:
    """Threads of this thread's parallel calls: ``DISTSHAP_NUM_THREADS`` when set, else Numba's.

    ``DISTSHAP_NUM_THREADS`` (a positive integer, at most Numba's pool size
    ``NUMBA_NUM_THREADS``, larger values are cut to it) is applied to the calling thread with
    ``numba.set_num_threads``, so Numba's parallel regions and :func:`run_ranges` both use it.
    """
    value = os.environ.get(THREADS_VARIABLE)
    if value is None:
        return numba.get_num_threads()
    try:
        wanted = int(value)
    except ValueError:
        wanted = 0
    if wanted < 1:
        raise ValueError(
            f"{THREADS_VARIABLE}={value!r} must be a positive integer (threads per process), "
            "or unset for Numba's count"
        )
    wanted = min(wanted, numba.config.NUMBA_NUM_THREADS)
    if numba.get_num_threads() != wanted:
        numba.set_num_threads(wanted)
    return wanted


def _gnu_openmp_launched() -> bool:
    """Whether Numba launched its OpenMP layer on GNU's runtime (not usable after a fork)."""
    try:
        layer = numba.threading_layer()
    except ValueError:  # not launched
        return False
    if layer != "omp":
        return False
    from numba.np.ufunc import omppool

    return getattr(omppool, "openmp_vendor", "GNU") == "GNU"


_SERIAL_ONLY = False  # a child forked after GNU OpenMP started: no parallel region can run
_SERIAL: dict[Any, Any] = {}  # parallel function -> the same function compiled serially


def _serial_twin(function: Any) -> Any:
    """``function`` compiled without ``parallel`` (``prange`` as ``range``: the same bits when
    each iteration writes its own outputs, as every distshap parallel kernel does)."""
    twin = _SERIAL.get(function)
    if twin is None:
        options = {k: v for k, v in function.targetoptions.items() if k != "parallel"}
        twin = _SERIAL[function] = numba.jit(**options)(function.py_func)
    return twin


def run_parallel(function: Callable[..., Any], *args: Any) -> Any:
    """``function(*args)`` for a Numba ``parallel=True`` function, safe under every layer.

    In a child forked after the parent ran GNU OpenMP (whose runtime terminates a forked child
    entering a parallel region) the function runs compiled serially instead.
    """
    if _SERIAL_ONLY:
        return _serial_twin(function)(*args)
    num_threads()
    if _serialise():
        with _LOCK:
            return function(*args)
    return function(*args)


_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _reset_after_fork() -> None:
    """In a forked child: new locks and no pool (the parent's threads did not come along)."""
    global _LOCK, _POOL, _POOL_LOCK, _SERIAL_ONLY
    _LOCK = threading.Lock()
    _POOL_LOCK = threading.Lock()
    _POOL = None
    _SERIAL_ONLY = _SERIAL_ONLY or _gnu_openmp_launched()


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_reset_after_fork)


def run_ranges(function: Callable[..., Any], n: int, pieces: int, *args: Any) -> None:
    """``function(*args, lo, hi)`` over ``[0, n)`` cut into about ``pieces`` ranges, in threads.

    ``function`` must be a ``nogil`` compiled function that writes its results for the items
    ``lo .. hi - 1`` in place: its ranges then run in parallel, on up to
    :func:`num_threads` threads (the caller's among them, from one shared pool of
    ``NUMBA_NUM_THREADS`` threads), each taking the next range until none is left. Results
    must not depend on the ranges (each item computed on its own); exceptions propagate.
    """
    pieces = max(1, min(int(pieces), int(n)))
    threads = min(num_threads(), pieces)
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
        for future in futures:  # the ranges are all taken: a helper not started has nothing to do
            if not future.cancel():
                future.result()
