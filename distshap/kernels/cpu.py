"""CPU kernels: Numba ``njit(parallel=True, nogil=True, cache=True)`` over rows.

Each row is processed on its own, paths in packed order, contributions accumulated in float64
and stored as float32: results do not depend on the thread count, the batch or the chunking.
SHAP values (:mod:`distshap.kernels.quadrature_cpu`): paths with a SHAP pattern table cost an
interval test per element and one table row; the others are integrated exactly by
Gauss-Legendre quadrature. The tables are this backend's own: which paths get one is the packed
model's policy (:func:`distshap.strategy.choose_tables`), and they are filled in float64 on the
first SHAP call and kept per model digest (:func:`shap_tables`). Interaction values run the
EXTEND / UNWOUND_SUM dynamic program (:mod:`distshap.kernels.treeshap`), conditioned on every
feature present in a path (paper §3.5), O(T·L·D³) per row. Every parallel call goes through
:mod:`distshap.kernels.parallel` (safe from several threads under every layer): ``run_parallel``
for the ``parallel=True`` kernels, ``run_ranges`` for the serial SHAP kernel run in threads.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np
from numba import njit, prange

from distshap.kernels import quadrature_cpu, treeshap
from distshap.kernels.interventional_cpu import interventional_values
from distshap.kernels.parallel import run_parallel
from distshap.packed import PackedModel
from distshap.strategy import choose_tables, path_features, table_values

__all__ = [
    "clear_cache",
    "interaction_slot_values",
    "interaction_values",
    "interventional_values",
    "shap_tables",
    "shap_values",
]

#: Models whose SHAP tables are kept (each up to ``packed.table_budget_bytes``).
TABLE_CACHE_SIZE = 4

_inline = njit(inline="always", nogil=True, cache=True)
_follows = _inline(treeshap.follows)
_extend_path = _inline(treeshap.extend_path)
_unwound_sum = _inline(treeshap.unwound_sum)


@njit(inline="always", nogil=True, cache=True)
def _one_fractions(row, m_feature, m_lower, m_upper, m_missing, m_cat_offsets, m_cat_nbits,
                   m_cat_other, cat_words, start, stop, one):  # fmt: skip
    for e in range(start, stop):
        f = m_feature[e]
        if f < 0:
            one[e - start] = 1.0
        else:
            o = _follows(row[f], m_lower[e], m_upper[e], m_missing[e], m_cat_other[e],
                         m_cat_offsets[e], m_cat_nbits[e], cat_words)  # fmt: skip
            one[e - start] = 1.0 if o else 0.0


@njit(nogil=True, cache=True)
def _max_lanes(path_offsets):
    """Lanes of the longest path (at least 1): the size of per-row scratch arrays."""
    longest = 1
    for p in range(path_offsets.shape[0] - 1):
        longest = max(longest, path_offsets[p + 1] - path_offsets[p])
    return longest


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
            depth = _extend_path(w, zero, one, 1, k + 1, -1)
            for i in range(1, k + 1):
                if one[i] != zero[i]:
                    s = _unwound_sum(w, depth, zero[i], one[i])
                    phi[g, feature[start + i]] += s * (one[i] - zero[i]) * v
            # condition on each feature j of the path: on minus off, halved
            for j in range(1, k + 1):
                scale = 0.5 * (one[j] - zero[j]) * v
                if scale == 0.0:
                    continue
                fj = feature[start + j]
                depth = _extend_path(w, zero, one, 1, k + 1, j)
                for i in range(1, k + 1):
                    if i == j or one[i] == zero[i]:
                        continue
                    s = _unwound_sum(w, depth, zero[i], one[i])
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


@njit(parallel=True, nogil=True, cache=True)
def _interaction_slot_kernel(X, feature, lower, upper, missing, zero_fraction, cat_offsets,
                             cat_nbits, cat_other, cat_words, path_offsets, path_value,
                             path_group, map_offsets, path_map, diag_slots, row_offsets,
                             row_entries, out):  # fmt: skip
    """:func:`_interaction_kernel` writing each row's slots (:mod:`distshap.pair_slots`).

    The same terms are added in the same order to the same float64 sums, so every slot has the
    bits of its matrix entry: ``acc[s]`` holds the upper entry ``[f_c, f_i]`` (c < i) or the
    SHAP value of a diagonal slot, ``acc[S + s]`` the lower entry ``[f_i, f_c]``; a diagonal is
    then ``phi_i - sum_j [i, j]`` over its row's non-zero entries in increasing ``j``.
    """
    n_rows = X.shape[0]
    n_paths = path_offsets.shape[0] - 1
    n_slots = out.shape[1]
    max_len = _max_lanes(path_offsets)
    for r in prange(n_rows):
        row = X[r]
        acc = np.zeros(2 * n_slots, np.float64)
        one = np.empty(max_len, np.float64)
        w = np.empty(max_len, np.float64)
        for p in range(n_paths):
            start = path_offsets[p]
            stop = path_offsets[p + 1]
            k = stop - start - 1
            v = path_value[p]
            m0 = map_offsets[p] - k - 1  # entry (c, i) of 1-based elements: m0 + c * k + i
            zero = zero_fraction[start:stop]
            _one_fractions(row, feature, lower, upper, missing, cat_offsets, cat_nbits,
                           cat_other, cat_words, start, stop, one)  # fmt: skip
            depth = _extend_path(w, zero, one, 1, k + 1, -1)
            for i in range(1, k + 1):
                if one[i] != zero[i]:
                    s = _unwound_sum(w, depth, zero[i], one[i])
                    acc[path_map[m0 + i * k + i]] += s * (one[i] - zero[i]) * v
            for j in range(1, k + 1):
                scale = 0.5 * (one[j] - zero[j]) * v
                if scale == 0.0:
                    continue
                depth = _extend_path(w, zero, one, 1, k + 1, j)
                for i in range(1, k + 1):
                    if i == j or one[i] == zero[i]:
                        continue
                    s = _unwound_sum(w, depth, zero[i], one[i])
                    if j < i:  # [f_j, f_i]: upper triangle
                        at = path_map[m0 + j * k + i]
                    else:  # lower triangle: scratch after the slots
                        at = n_slots + path_map[m0 + i * k + j]
                    acc[at] += s * (one[i] - zero[i]) * scale
        for d in range(diag_slots.shape[0]):
            t = diag_slots[d]
            diag = acc[t]
            for e in range(row_offsets[d], row_offsets[d + 1]):
                diag -= acc[row_entries[e]]
            acc[t] = diag
        for t in range(n_slots):
            out[r, t] = acc[t]


_TABLES: OrderedDict = OrderedDict()
_TABLES_LOCK = threading.Lock()


def shap_tables(packed: PackedModel) -> tuple[np.ndarray, np.ndarray]:
    """The SHAP pattern tables of ``packed``: ``(table_offsets, tables)``, built on first use.

    ``table_offsets`` (int64, per path, -1: no table) follows the model's table policy
    (:func:`distshap.strategy.choose_tables`); ``tables`` holds the float32 values. Kept for the
    last :data:`TABLE_CACHE_SIZE` model digests (a model without a digest: built every call).
    """
    with _TABLES_LOCK:
        hit = _TABLES.get(packed.digest) if packed.digest else None
        if hit is not None:
            _TABLES.move_to_end(packed.digest)
            return hit
        k = path_features(packed.path_offsets)
        offsets = choose_tables(k, packed.table_budget_bytes, packed.max_table_features)
        tables = quadrature_cpu.fill_tables(packed.path_offsets, packed.zero_fraction,
                                            packed.path_value, offsets, table_values(k, offsets))
        if packed.digest:
            _TABLES[packed.digest] = (offsets, tables)
            while len(_TABLES) > TABLE_CACHE_SIZE:
                _TABLES.popitem(last=False)
        return offsets, tables


def clear_cache() -> None:
    """Drop every cached SHAP table."""
    with _TABLES_LOCK:
        _TABLES.clear()


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
        Its SHAP tables are filled on the first call (:func:`shap_tables`).
    X : array (n, F)
        Kernel input: :func:`distshap.inputs.prepare_rows` of the user's rows (it applies the
        model's encoding: raw rows of a float64 model would take other branches).
    """
    X = _as_rows(X, packed)
    table_offsets, tables = shap_tables(packed)  # paths without a table: quadrature
    return quadrature_cpu.shap_values(packed, X, table_offsets, tables)


def interaction_values(packed: PackedModel, X: np.ndarray) -> np.ndarray:
    """SHAP interaction values of every row: float32 ``(n, G, F + 1, F + 1)``, bias last."""
    X = _as_rows(X, packed)
    f1 = packed.num_features + 1
    out = np.empty((X.shape[0], packed.num_groups, f1, f1), np.float32)
    run_parallel(_interaction_kernel, X, *_model_args(packed), packed.expected_value, out)
    return out


def interaction_slot_values(packed: PackedModel, X: np.ndarray, slots) -> np.ndarray:
    """Interaction values of every row in slot form: float32 ``(n, S)``.

    ``slots`` is the model's :class:`distshap.pair_slots.PairSlots`; slot ``s`` holds the bits of
    the matrix entry ``[g, slot_i[s], slot_j[s]]`` that :func:`interaction_values` gives (the
    bias entry ``[F, F]``, the expected value, is not a slot).
    """
    X = _as_rows(X, packed)
    out = np.empty((X.shape[0], slots.num_slots), np.float32)
    run_parallel(_interaction_slot_kernel, X, *_model_args(packed), slots.map_offsets,
                 slots.path_map, slots.diag_slots, slots.row_offsets, slots.row_entries,
                 out)  # fmt: skip
    return out
