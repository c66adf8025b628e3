"""CPU kernels: Numba ``njit(parallel=True, nogil=True, cache=True)`` over rows.

Each row is processed on its own, paths in packed order, contributions accumulated in float64
and stored as float32: results do not depend on the thread count, the batch or the chunking.
Paths with a pattern table (see :mod:`distshap.tables`) cost an interval test per element and
one table row; the others run the EXTEND / UNWOUND_SUM dynamic program. Interaction values
condition on every feature present in a path (paper §3.5), O(T·L·D³) per row.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from distshap.kernels.dp import path_weights, unwound_sum
from distshap.packed import PackedModel

__all__ = ["shap_values", "interaction_values", "warm_up"]

#: Paths with at most this many features get their 0/1 pattern as one int64 bit mask.
_MAX_PATTERN_BITS = 62


@njit(inline="always", nogil=True, cache=True)
def _follows(x, lower, upper, missing, cat_offset, cat_nbits, cat_other, cat_words):
    """One-fraction of a lane for feature value ``x``: 1.0 if ``x`` follows it, else 0.0."""
    if np.isnan(x):
        return 1.0 if missing else 0.0
    if cat_offset < 0:
        # an unbounded element (upper = +inf) also takes x = +inf
        return 1.0 if (lower <= x and (x < upper or upper == np.inf)) else 0.0
    if x < 0.0 or x >= cat_nbits:
        return 1.0 if cat_other else 0.0
    c = np.int64(x)
    return float((cat_words[cat_offset + (c >> 5)] >> np.uint32(c & 31)) & np.uint32(1))


@njit(inline="always", nogil=True, cache=True)
def _one_fractions(row, m_feature, m_lower, m_upper, m_missing, m_cat_offsets, m_cat_nbits,
                   m_cat_other, cat_words, start, stop, one):  # fmt: skip
    for e in range(start, stop):
        f = m_feature[e]
        if f < 0:
            one[e - start] = 1.0
        else:
            one[e - start] = _follows(row[f], m_lower[e], m_upper[e], m_missing[e],
                                      m_cat_offsets[e], m_cat_nbits[e], m_cat_other[e],
                                      cat_words)  # fmt: skip


@njit(nogil=True, cache=True)
def _max_lanes(path_offsets):
    """Lanes of the longest path (at least 1): the size of per-row scratch arrays."""
    longest = 1
    for p in range(path_offsets.shape[0] - 1):
        longest = max(longest, path_offsets[p + 1] - path_offsets[p])
    return longest


@njit(inline="always", nogil=True, cache=True)
def _path_patterns(XT, n, feature, lower, upper, missing, cat_offsets, cat_nbits, cat_other,
                   cat_words, start, k, pattern):  # fmt: skip
    """Bit ``i`` of ``pattern[r]``: does row ``r`` follow feature element ``i`` of the path."""
    for r in range(n):
        pattern[r] = 0
    for i in range(k):
        e = start + 1 + i
        col = XT[feature[e]]
        if cat_offsets[e] < 0:
            lo = lower[e]
            hi = upper[e]
            miss = missing[e]
            open_above = hi == np.inf  # then x = +inf follows too
            for r in range(n):
                x = col[r]
                bit = ((x >= lo) & ((x < hi) | open_above)) | (miss & (x != x))
                pattern[r] |= np.int64(bit) << i
        else:
            for r in range(n):
                o = _follows(col[r], lower[e], upper[e], missing[e], cat_offsets[e],
                             cat_nbits[e], cat_other[e], cat_words)  # fmt: skip
                pattern[r] |= np.int64(o != 0.0) << i


@njit(parallel=True, nogil=True, cache=True)
def _shap_kernel(X, feature, lower, upper, missing, zero_fraction, cat_offsets, cat_nbits,
                 cat_other, cat_words, path_offsets, path_value, path_group, table_offsets,
                 tables, expected_value, block_rows, out):  # fmt: skip
    n_rows = X.shape[0]
    n_features = X.shape[1]
    n_paths = path_offsets.shape[0] - 1
    n_groups = out.shape[1]
    n_cols = out.shape[2]
    max_len = _max_lanes(path_offsets)
    n_blocks = (n_rows + block_rows - 1) // block_rows
    # Rows in blocks, features-major within a block: each path's lanes are read once per
    # block and each lane's interval test runs over a contiguous column of the block.
    for b in prange(n_blocks):
        r0 = b * block_rows
        n = min(n_rows, r0 + block_rows) - r0
        XT = np.empty((n_features, n), np.float32)
        for r in range(n):
            for f in range(n_features):
                XT[f, r] = X[r0 + r, f]
        acc = np.zeros((n, n_groups, n_cols), np.float64)
        pattern = np.empty(n, np.int64)
        one = np.empty(max_len, np.float64)
        w = np.empty(max_len, np.float64)
        for p in range(n_paths):
            start = path_offsets[p]
            k = path_offsets[p + 1] - start - 1
            g = path_group[p]
            off = table_offsets[p]
            if k <= _MAX_PATTERN_BITS:
                _path_patterns(XT, n, feature, lower, upper, missing, cat_offsets, cat_nbits,
                               cat_other, cat_words, start, k, pattern)  # fmt: skip
            if off >= 0:
                for r in range(n):
                    base = off + pattern[r] * k
                    for i in range(k):
                        acc[r, g, feature[start + 1 + i]] += tables[base + i]
            else:
                v = path_value[p]
                zero = zero_fraction[start : start + k + 1]
                one[0] = 1.0
                for r in range(n):
                    if k <= _MAX_PATTERN_BITS:
                        for i in range(k):
                            one[i + 1] = (pattern[r] >> i) & 1
                    else:  # very long path (deep trees): test its lanes directly
                        _one_fractions(X[r0 + r], feature, lower, upper, missing, cat_offsets,
                                       cat_nbits, cat_other, cat_words, start, start + k + 1,
                                       one)  # fmt: skip
                    depth = path_weights(w, zero, one, 1, k + 1, -1)
                    for i in range(1, k + 1):
                        z = zero[i]
                        o = one[i]
                        if o != z:
                            s = unwound_sum(w, depth, z, o)
                            acc[r, g, feature[start + i]] += s * (o - z) * v
        for r in range(n):
            for g in range(n_groups):
                acc[r, g, n_cols - 1] = expected_value[g]
                for c in range(n_cols):
                    out[r0 + r, g, c] = acc[r, g, c]


@njit(parallel=True, nogil=True, cache=True)
def _interaction_kernel(X, feature, lower, upper, missing, zero_fraction, cat_offsets,
                        cat_nbits, cat_other, cat_words, path_offsets, path_value, path_group,
                        expected_value, out):  # fmt: skip
    n_rows = X.shape[0]
    n_paths = path_offsets.shape[0] - 1
    n_groups = out.shape[1]
    n_cols = out.shape[2]
    max_len = _max_lanes(path_offsets)
    for r in prange(n_rows):
        row = X[r]
        acc = np.zeros((n_groups, n_cols, n_cols), np.float64)
        phi = np.zeros((n_groups, n_cols), np.float64)
        one = np.empty(max_len, np.float64)
        w = np.empty(max_len, np.float64)
        for p in range(n_paths):
            start = path_offsets[p]
            stop = path_offsets[p + 1]
            g = path_group[p]
            k = stop - start - 1
            v = path_value[p]
            zero = zero_fraction[start:stop]
            _one_fractions(row, feature, lower, upper, missing, cat_offsets, cat_nbits,
                           cat_other, cat_words, start, stop, one)  # fmt: skip
            # plain SHAP values of the path (for the diagonal)
            depth = path_weights(w, zero, one, 1, k + 1, -1)
            for i in range(1, k + 1):
                if one[i] != zero[i]:
                    s = unwound_sum(w, depth, zero[i], one[i])
                    phi[g, feature[start + i]] += s * (one[i] - zero[i]) * v
            # condition on each feature j of the path: on minus off, halved
            for j in range(1, k + 1):
                scale = 0.5 * (one[j] - zero[j]) * v
                if scale == 0.0:
                    continue
                fj = feature[start + j]
                depth = path_weights(w, zero, one, 1, k + 1, j)
                for i in range(1, k + 1):
                    if i == j or one[i] == zero[i]:
                        continue
                    s = unwound_sum(w, depth, zero[i], one[i])
                    acc[g, fj, feature[start + i]] += s * (one[i] - zero[i]) * scale
        for g in range(n_groups):
            for i in range(n_cols - 1):
                diag = phi[g, i]
                for j in range(n_cols - 1):
                    if j != i:
                        diag -= acc[g, i, j]
                acc[g, i, i] = diag
            acc[g, n_cols - 1, n_cols - 1] = expected_value[g]
            for i in range(n_cols):
                for j in range(n_cols):
                    out[r, g, i, j] = acc[g, i, j]


def _model_args(packed: PackedModel) -> tuple:
    return (
        packed.feature, packed.lower, packed.upper, packed.missing, packed.zero_fraction,
        packed.cat_offsets, packed.cat_nbits, packed.cat_other, packed.cat_words,
        packed.path_offsets, packed.path_value, packed.path_group,
    )  # fmt: skip


def _as_rows(X: np.ndarray, packed: PackedModel) -> np.ndarray:
    X = np.ascontiguousarray(X, dtype=np.float32)
    if X.ndim != 2 or X.shape[1] != packed.num_features:
        raise ValueError(f"X must have shape (n_rows, {packed.num_features}), got {X.shape}")
    return X


def shap_values(packed: PackedModel, X: np.ndarray) -> np.ndarray:
    """SHAP values of every row of ``X``: float32 array ``(n, G, F + 1)``, bias last.

    Parameters
    ----------
    packed : PackedModel
    X : array (n, F)
        Converted to C-contiguous float32 (XGBoost compares float32 values to its splits).
    """
    X = _as_rows(X, packed)
    n_cols = packed.num_features + 1
    out = np.empty((X.shape[0], packed.num_groups, n_cols), np.float32)
    # a block's float64 accumulator stays around 256 KiB (cache-sized)
    block_rows = int(np.clip((1 << 15) // (packed.num_groups * n_cols), 8, 256))
    _shap_kernel(X, *_model_args(packed), packed.table_offsets, packed.tables,
                 packed.expected_value, block_rows, out)  # fmt: skip
    return out


def interaction_values(packed: PackedModel, X: np.ndarray) -> np.ndarray:
    """SHAP interaction values of every row: float32 ``(n, G, F + 1, F + 1)``, bias last."""
    X = _as_rows(X, packed)
    f1 = packed.num_features + 1
    out = np.empty((X.shape[0], packed.num_groups, f1, f1), np.float32)
    _interaction_kernel(X, *_model_args(packed), packed.expected_value, out)
    return out


def warm_up() -> None:
    """Compile (or load from cache) both kernels before the first real call."""
    from distshap.models.ensemble import Ensemble
    from distshap.packed import build_packed_model
    from distshap.paths import extract_paths

    i32, f32, f64, b = np.int32, np.float32, np.float64, np.bool_
    ens = Ensemble(
        left=np.array([1, -1, -1], i32), right=np.array([2, -1, -1], i32),
        feature=np.array([0, -1, -1], i32), threshold=np.array([0.5, 0, 0], f32),
        default_left=np.array([True, False, False], b), is_categorical=np.zeros(3, b),
        cat_offsets=np.zeros(4, np.int64), cat_values=np.zeros(0, i32),
        value=np.array([0.0, -1.0, 1.0], f64), cover=np.array([2.0, 1.0, 1.0], f64),
        tree_offsets=np.array([0, 3], np.int64), tree_group=np.zeros(1, i32),
        num_features=1, num_groups=1, base_score=np.zeros(1, f64),
    )  # fmt: skip
    packed = build_packed_model(extract_paths(ens))
    X = np.zeros((2, 1), np.float32)
    shap_values(packed, X)
    interaction_values(packed, X)
