"""Pattern tables: every possible SHAP contribution of a short path, precomputed once per model.

A row enters a path only through the 0/1 pattern of its one-fractions (does the row follow each
element?), so a path of ``k`` features has only ``2**k`` possible outcomes (the observation behind
FastTreeSHAP v2). For each chosen path we evaluate the EXTEND / UNWOUND_SUM dynamic program in
float64 for every pattern and store each element's contribution as float32; a kernel then replaces
the DP by an interval test per element and one table load.

Which paths get a table is a cost model with a memory budget (the Tahoe idea of choosing the
inference strategy by a performance model): the DP costs about ``k**2`` operations per row while a
table costs ``2**k * k`` stored values, so the saving per byte ``k / 2**k`` falls with ``k``.
Paths are therefore taken shortest first, up to ``max_table_features`` features, until the budget
is spent; longer paths keep the DP.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from distshap.kernels.dp import path_weights, unwound_sum

__all__ = [
    "DEFAULT_TABLE_BUDGET_BYTES",
    "DEFAULT_MAX_TABLE_FEATURES",
    "choose_tables",
    "fill_tables",
]

DEFAULT_TABLE_BUDGET_BYTES = 1 << 30
DEFAULT_MAX_TABLE_FEATURES = 12


def choose_tables(
    lengths: np.ndarray,
    budget_bytes: int = DEFAULT_TABLE_BUDGET_BYTES,
    max_features: int = DEFAULT_MAX_TABLE_FEATURES,
    values_per_pattern: str = "k",
) -> np.ndarray:
    """Start offset of each path's table (-1 = no table), shortest paths first within budget.

    Parameters
    ----------
    lengths : int array (n_paths,)
        Number of features ``k`` of each path (``k >= 1``).
    budget_bytes : int
        Largest total size of the float32 tables.
    max_features : int
        Paths with more features than this always use the DP.
    values_per_pattern : {"k", "k*k"}
        Float32 values stored per pattern: ``k`` (SHAP values) or ``k * k`` (interaction
        values; the CUDA backend's interaction tables).
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    if max_features > 24:
        raise ValueError(f"max_table_features={max_features} is too large: tables grow as 2**k")
    if values_per_pattern not in ("k", "k*k"):
        raise ValueError(f"values_per_pattern must be 'k' or 'k*k', got {values_per_pattern!r}")
    per = lengths * lengths if values_per_pattern == "k*k" else lengths
    size = np.where(lengths <= max_features, (1 << np.minimum(lengths, 62)) * per, 0)
    eligible = (lengths >= 1) & (lengths <= max_features)
    order = np.argsort(np.where(eligible, lengths, np.iinfo(np.int64).max), kind="stable")
    order = order[: int(eligible.sum())]
    ends = np.cumsum(size[order])
    chosen = order[ends * 4 <= budget_bytes]
    offsets = np.full(lengths.shape[0], -1, dtype=np.int64)
    # tables laid out in path order so that neighbouring paths have neighbouring tables
    chosen = np.sort(chosen)
    starts = np.zeros(chosen.shape[0], dtype=np.int64)
    np.cumsum(size[chosen][:-1], out=starts[1:])
    offsets[chosen] = starts
    return offsets


@njit(parallel=True, cache=True)
def fill_tables(path_offsets, zero_fraction, path_value, table_offsets, total):
    """Evaluate the DP in float64 for every pattern of every path with a table.

    ``path_offsets`` index feature elements (no bias lane) in ``zero_fraction``.
    """
    out = np.empty(total, np.float32)
    n_paths = path_offsets.shape[0] - 1
    for p in prange(n_paths):
        off = table_offsets[p]
        if off < 0:
            continue
        start = path_offsets[p]
        k = path_offsets[p + 1] - start
        zero = zero_fraction[start : start + k]
        one = np.empty(k, np.float64)
        w = np.empty(k + 1, np.float64)
        v = path_value[p]
        for pattern in range(1 << k):
            for i in range(k):
                one[i] = (pattern >> i) & 1
            depth = path_weights(w, zero, one, 0, k, -1)
            for i in range(k):
                s = unwound_sum(w, depth, zero[i], one[i])
                out[off + pattern * k + i] = s * (one[i] - zero[i]) * v
    return out
