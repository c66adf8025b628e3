"""Bounded caches of device models and launch configurations (host side, no CUDA)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from distshap.kernels.cuda import config
from distshap.kernels.cuda.device import device_id

__all__ = ["keep", "per_device"]


def keep(cache: OrderedDict, key: Any, value: Any, limit: int) -> None:
    """Store ``value`` under ``key`` and drop the oldest entries beyond ``limit``.

    The caller holds the cache's lock.
    """
    cache[key] = value
    while len(cache) > limit:
        cache.popitem(last=False)


def per_device(cache: OrderedDict, lock: threading.Lock, packed: Any,
               build: Callable[[Any], Any]) -> Any:  # fmt: skip
    """``build(packed)`` for the current device, built once per ``(packed.digest, device)``
    and the last :data:`~.config.CACHE_SIZE` kept in ``cache`` (a model without a digest:
    built at every call)."""
    key = (packed.digest, device_id())
    if packed.digest:
        with lock:
            hit = cache.get(key)
            if hit is not None:
                cache.move_to_end(key)
                return hit
    value = build(packed)
    if packed.digest:
        with lock:
            keep(cache, key, value, config.CACHE_SIZE)
    return value
