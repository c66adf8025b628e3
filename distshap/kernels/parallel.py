"""Calls into Numba ``parallel=True`` functions that are safe from several threads at once.

Numba runs parallel regions on one of three threading layers: TBB, OpenMP or its own
``workqueue`` (chosen when neither TBB nor OpenMP is present, or when asked for with
``NUMBA_THREADING_LAYER=workqueue``). The workqueue layer is not thread safe: two threads
entering parallel regions at the same time abort the process. Every parallel entry point of
distshap therefore goes through :func:`run_parallel`, which holds one process-wide lock around
the call while the layer is workqueue, or not yet known (Numba chooses the layer at the first
parallel call, so the first calls are serialised until then); under TBB and OpenMP calls run
concurrently as before.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numba

__all__ = ["run_parallel"]

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
