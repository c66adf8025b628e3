"""Which route a model's calls take on the GPU, by its shape: the one-launch small-model route.

A small model (few short paths, few columns and groups) is explained in one launch, a warp a
row, the additivity check included; its limits are the small kernels' compiled sizes, read
from the configuration, so the host decision and the kernels always agree.
"""

from __future__ import annotations

import threading

import numpy as np

from distshap.packed import PackedModel
from distshap.plan.config import get_config

__all__ = ["longest_path", "small_fits"]


def small_fits(packed: PackedModel, interactions: bool) -> bool:
    """Whether ``packed`` takes the one-launch small-model route (host arithmetic).

    At most ``small_max_paths`` paths (0 turns the route off), every path of at most
    ``small_max_path_features`` features, ``F + 1`` columns of at most
    ``small_max_shap_columns`` (SHAP values) or ``small_max_interaction_columns``
    (interaction values), at most ``small_max_groups`` output groups, and a margin model,
    when there is one, of as many groups.
    """
    if not isinstance(packed, PackedModel):
        raise TypeError(f"expected a PackedModel, got {type(packed).__name__}")
    config = get_config()
    if packed.num_paths > config.small_max_paths or config.small_max_paths <= 0:
        return False
    columns = (
        config.small_max_interaction_columns if interactions else config.small_max_shap_columns
    )
    if packed.num_features + 1 > columns or not 1 <= packed.num_groups <= config.small_max_groups:
        return False
    if packed.margin is not None and packed.margin["base_score"].shape[0] != packed.num_groups:
        return False
    return longest_path(packed) <= config.small_max_path_features


_LONGEST: dict = {}  # model digest -> its longest path (small_fits runs on every call)
_LONGEST_LOCK = threading.Lock()


def longest_path(packed: PackedModel) -> int:
    """Features of the longest path of ``packed`` (kept per model digest)."""
    with _LONGEST_LOCK:
        k = _LONGEST.get(packed.digest) if packed.digest else None
    if k is None:
        offsets = np.asarray(packed.path_offsets)
        k = int(np.diff(offsets).max()) - 1 if offsets.size > 1 else 0
        if packed.digest:
            with _LONGEST_LOCK:
                if len(_LONGEST) > 256:
                    _LONGEST.clear()
                _LONGEST[packed.digest] = k
    return k
