"""Bounded caches of device models and launch configurations (host side, no CUDA)."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

__all__ = ["keep"]


def keep(cache: OrderedDict, key: Any, value: Any, limit: int) -> None:
    """Store ``value`` under ``key`` and drop the oldest entries beyond ``limit``.

    The caller holds the cache's lock.
    """
    cache[key] = value
    while len(cache) > limit:
        cache.popitem(last=False)
