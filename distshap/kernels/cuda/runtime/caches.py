"""The one bounded cache of device models, and the accumulators kept between launches.

Every form a packed model takes on a device (lane arrays, plans and tables, small-model arrays,
background tables) hangs on its :class:`~.model.DeviceModel`, and the device models live here,
in one cache keyed by ``(packed digest, device id, configuration)`` that keeps the last
:attr:`~distshap.plan.config.Config.cache_size`. :func:`clear_cache` empties it and drops the
kept accumulators. Host side only: nothing here launches a kernel.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

import numpy as np

from distshap.kernels.cuda.runtime import args
from distshap.kernels.cuda.runtime.device import SIM, device_id, xp
from distshap.plan.config import get_config

__all__ = ["KEPT_ACC_BYTES", "cached_model", "clear_cache", "give_back", "kept_accumulator"]

T = TypeVar("T")

_MODELS: OrderedDict = OrderedDict()  # (digest, device, config) -> device model
_MODELS_LOCK = threading.Lock()


def cached_model(key: Hashable, build: Callable[[], T]) -> T:
    """The device model cached under ``key``, else ``build()`` stored there (least recently
    used models beyond the configuration's ``cache_size`` dropped).

    Two threads missing together may both build; the first one stored is kept and returned.
    """
    with _MODELS_LOCK:
        hit = _MODELS.get(key)
        if hit is not None:
            _MODELS.move_to_end(key)
            return hit
    value = build()
    with _MODELS_LOCK:
        value = _MODELS.setdefault(key, value)
        _MODELS.move_to_end(key)
        while len(_MODELS) > max(get_config().cache_size, 1):
            _MODELS.popitem(last=False)
    return value


#: Accumulators up to this many bytes are kept between calls (:func:`kept_accumulator`).
KEPT_ACC_BYTES = 1 << 24
_KEPT_TOTAL_BYTES = 1 << 26  # all kept accumulators together (least recently used dropped)
_KEPT: OrderedDict = OrderedDict()  # (device, stream, rows, width) -> (array, its view)
_KEPT_LOCK = threading.Lock()


def kept_accumulator(rows: int, width: int, s) -> tuple:
    """A zero int64 accumulator ``(rows, width)`` for the stream ``s``, kept between calls.

    Returns ``(key, array, view)``: the array (CuPy, NumPy under the simulator) and the view
    the kernels take (:func:`.args.view`, made once). The caller hands it back with
    :func:`give_back` once its last launch that leaves it zeroed (the finish kernel) is queued
    on ``s``: later calls on that stream run after it, so they find it zero. One call holds it
    at a time (a concurrent call makes its own); a call that fails before giving it back drops
    it.
    """
    key = (device_id(), 0 if SIM else args.stream_key(s), int(rows), int(width))
    with _KEPT_LOCK:
        hit = _KEPT.pop(key, None)
    if hit is not None:
        return (key, *hit)
    a = xp().zeros((rows, width), dtype=np.int64)
    return key, a, args.view(a)


def give_back(key: tuple, a: Any, view: Any) -> None:
    """Keep the accumulator ``a`` (zeroed by the queued finish kernel) for a later call."""
    with _KEPT_LOCK:
        _KEPT[key] = (a, view)
        total = sum(8 * k[2] * k[3] for k in _KEPT)
        while total > _KEPT_TOTAL_BYTES and len(_KEPT) > 1:
            old, _ = _KEPT.popitem(last=False)
            total -= 8 * old[2] * old[3]


def clear_cache() -> None:
    """Drop every cached device model (with all its forms) and the kept accumulators."""
    with _MODELS_LOCK:
        _MODELS.clear()
    with _KEPT_LOCK:
        _KEPT.clear()
