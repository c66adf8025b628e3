"""Warm-up: compile a backend's kernels before the first real call, on tiny built-in models.

Numba compiles a kernel (or loads it from its cache) on the first call, which can take seconds
(``benchmarks/RESULTS.md`` says how long). :func:`warm_up` runs every kernel of a backend once
on chain-shaped trees (:func:`chain_ensemble`): a short chain, and one longer than a warp,
which takes the CUDA backend's fallback kernel. It sits above the kernels
(it builds models through :mod:`distshap.paths` and :mod:`distshap.packed`), so the kernels
never import the model-building side.
"""

from __future__ import annotations

import numpy as np

from distshap.kernels import get_backend
from distshap.models.ensemble import Ensemble
from distshap.packed import build_packed_model
from distshap.paths import extract_paths

__all__ = ["chain_ensemble", "warm_up"]


def chain_ensemble(depth: int, n_features: int) -> Ensemble:
    """One tree: a chain of ``depth`` splits ``x[i % n_features] < 0.5`` (right: a leaf).

    Its deepest path has ``min(depth, n_features)`` distinct features, so a chain with
    ``depth = n_features > 31`` is longer than a warp of lanes.
    """
    n = 2 * depth + 1  # internal node i at 2i, its right leaf at 2i + 1, last leaf at 2 depth
    left = np.full(n, -1, np.int32)
    right = np.full(n, -1, np.int32)
    feature = np.full(n, -1, np.int32)
    threshold = np.zeros(n, np.float32)
    value = np.zeros(n, np.float64)
    cover = np.zeros(n, np.float64)
    for i in range(depth):
        node = 2 * i
        left[node] = node + 2
        right[node] = node + 1
        feature[node] = i % n_features
        threshold[node] = 0.5
        value[node + 1] = (i % 3) - 1.0
        cover[node] = float(depth - i + 1)
        cover[node + 1] = 1.0
    cover[2 * depth] = 1.0
    value[2 * depth] = 2.0
    return Ensemble(
        left=left, right=right, feature=feature, threshold=threshold,
        default_left=np.ones(n, bool), is_categorical=np.zeros(n, bool),
        cat_offsets=np.zeros(n + 1, np.int64), cat_values=np.zeros(0, np.int32),
        value=value, cover=cover, tree_offsets=np.array([0, n], np.int64),
        tree_group=np.zeros(1, np.int32), num_features=n_features, num_groups=1,
        base_score=np.zeros(1, np.float64),
    )  # fmt: skip


def warm_up(backend: str = "cpu") -> None:
    """Compile (or load from Numba's cache) every kernel of ``backend`` ("cpu" or "cuda")."""
    kernels = get_backend(backend)
    for depth in (3, 33):  # the second has paths longer than a warp (CUDA: fallback kernel)
        packed = build_packed_model(extract_paths(chain_ensemble(depth, depth)))
        X = np.full((2, depth), 0.25, np.float32)
        kernels.shap_values(packed, X)
        kernels.interaction_values(packed, X)
    if backend == "cuda":
        from numba import cuda

        cuda.synchronize()
