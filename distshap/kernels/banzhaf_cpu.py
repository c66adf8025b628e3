"""Banzhaf values and Banzhaf interaction values on the CPU: :func:`banzhaf_values`
(path-dependent) and :func:`interventional_banzhaf_values`. Interaction values run the per-row
kernels of :mod:`distshap.kernels.banzhaf_rows`; values run by pattern tables, here.

A path's Banzhaf values depend on the explained row only through its *pattern*, the bit mask
``xb`` of the path's elements the row follows (:mod:`distshap.kernels.banzhaf_rows` gives the
formulas). A path of ``k`` features with a table stores its ``k`` values for each of the
``2**k`` patterns (float32, computed in float64): for the path-dependent game from the cover
fractions (:func:`_fill_path_dependent`, kept per model digest, within the model's table policy
:func:`distshap.plan.tables.choose_tables` as the SHAP tables), for the interventional game from
the superset sums of the background masks (:func:`_fill_interventional`, per call, paths of at
most :data:`INTERVENTIONAL_TABLE_BITS` features). Explaining a row then costs one interval test
and one table read per element, as the SHAP tables do.

Rows run in blocks, features-major (the pattern tests of an element are one loop over the
block's rows, which vectorises), a path's table stays in cache for the whole block, and the
block's float64 sums are kept as ``acc[group * (F + 1) + feature, row]``. Paths without a table
take the direct formulas: the path-dependent one over the block's rows (prefix and suffix
products), the interventional one row by row over the background rows.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from distshap.compile_cache import announce
from distshap.kernels import banzhaf_rows
from distshap.kernels.banzhaf_rows import _long_path, _rows, _run_blocks, _zeta_tables
from distshap.kernels.interventional_math import check_background
from distshap.kernels.interventional_tables_cpu import popcount
from distshap.kernels.quadrature_cpu import block_rows, element_ones
from distshap.packed import PackedModel, host_form
from distshap.parallel import num_threads, run_ranges
from distshap.plan.tables import choose_tables, path_features, table_values

__all__ = [
    "INTERVENTIONAL_TABLE_BITS",
    "TABLE_BLOCK_VALUES",
    "banzhaf_values",
    "interventional_banzhaf_values",
    "interventional_tables",
    "path_dependent_tables",
]

#: Interventional tables for paths of at most this many features.
INTERVENTIONAL_TABLE_BITS = 12
#: Float32 table values of the paths processed at a time (interventional).
TABLE_BLOCK_VALUES = 1 << 24
#: Path-dependent tables kept (model digests).
TABLE_CACHE_SIZE = 4


@njit(nogil=True, cache=True)
def _fill_path_dependent(zero_fraction, path_offsets, path_value, table_offsets, tables, lo, hi):
    """Tables of paths ``lo .. hi - 1``: ``v d_i prod_{j != i} f_j`` for every pattern."""
    for p in range(lo, hi):
        off = table_offsets[p]
        if off < 0:
            continue
        start = path_offsets[p] + 1
        k = path_offsets[p + 1] - start
        v = path_value[p]
        pre = np.empty(k + 1, np.float64)
        f = np.empty(k, np.float64)
        d = np.empty(k, np.float64)
        for b in range(1 << k):
            pre[0] = 1.0
            for i in range(k):
                o = 1.0 if (b >> i) & 1 else 0.0
                z = zero_fraction[start + i]
                d[i] = o - z
                f[i] = 0.5 * (o + z)
                pre[i + 1] = pre[i] * f[i]
            suf = 1.0
            row = off + b * k
            for i in range(k - 1, -1, -1):
                tables[row + i] = v * d[i] * pre[i] * suf
                suf *= f[i]


@njit(nogil=True, cache=True)
def _fill_interventional(zeta, zeta_offsets, path_offsets, path_value, p0, B, table_offsets,
                         tables, lo, hi):  # fmt: skip
    """Tables of block paths ``lo .. hi - 1`` from their superset sums ``zeta``."""
    for q in range(lo, hi):
        off = table_offsets[q]
        if off < 0:
            continue
        start = path_offsets[p0 + q] + 1
        k = path_offsets[p0 + q + 1] - start
        z = zeta[zeta_offsets[q] : zeta_offsets[q] + (1 << k)]
        full = (1 << k) - 1
        for xb in range(1 << k):
            nx = full & ~xb
            count = k - popcount(nx)
            c = path_value[p0 + q] / B * 2.0 ** (count + 1 - 2 * k)
            base = z[nx]
            row = off + xb * k
            for i in range(k):
                if (xb >> i) & 1:
                    tables[row + i] = c * (base - z[nx | (1 << i)])
                else:
                    tables[row + i] = -c * base


@announce("the CPU Banzhaf kernel", 2)
@njit(nogil=True, cache=True)
def _value_rows(X, R, feature, lower, upper, missing, zero_fraction, cat_offsets, cat_nbits,
                cat_other, cat_words, path_offsets, path_value, path_group, p0, p1,
                table_offsets, tables, max_k, size, acc, r0, lo, hi):  # fmt: skip
    """Paths ``p0 .. p1 - 1`` of rows ``r0 + lo .. r0 + hi - 1`` added to ``acc[lo:hi]``,
    ``size`` rows at a time. ``R`` holds the background rows (interventional; none: zero rows,
    the path-dependent game)."""
    n_features = X.shape[1]
    G, C = acc.shape[1], acc.shape[2]
    interventional = R.shape[0] > 0
    size = min(size, hi - lo)
    XT = np.empty((n_features, size), np.float32)
    block = np.empty((G * C, size), np.float64)
    ones = np.empty((max_k, size), np.bool_)
    index = np.empty(size, np.int64)
    pre = np.empty((max_k + 1, size), np.float64)
    suf = np.empty(size, np.float64)
    xf = np.empty(max_k, np.bool_)
    phi = np.empty(max_k, np.float64)
    pairs = np.empty((1, 1), np.float64)
    for b0 in range(lo, hi, size):
        n = min(hi, b0 + size) - b0
        for r in range(n):
            for f in range(n_features):
                XT[f, r] = X[r0 + b0 + r, f]
        block[:, :n] = 0.0
        for q in range(p1 - p0):
            p = p0 + q
            start = path_offsets[p] + 1
            k = path_offsets[p + 1] - start
            base = path_group[p] * C
            for i in range(k):
                e = start + i
                element_ones(ones[i], XT[feature[e]], n, e, lower, upper, missing, cat_offsets,
                             cat_nbits, cat_other, cat_words)  # fmt: skip
            off = table_offsets[q]
            if off >= 0:
                index[:n] = 0
                for i in range(k):
                    oi = ones[i]
                    for r in range(n):
                        index[r] |= np.int64(oi[r]) << i
                for r in range(n):
                    index[r] = off + index[r] * k
                for i in range(k):
                    a = block[base + feature[start + i]]
                    for r in range(n):
                        a[r] += tables[index[r] + i]
            elif interventional:
                for r in range(n):
                    for i in range(k):
                        xf[i] = ones[i, r]
                    _long_path(X[r0 + b0 + r], R, start, k, path_value[p], feature, lower, upper,
                               missing, cat_offsets, cat_nbits, cat_other, cat_words, xf, False,
                               phi, pairs)  # fmt: skip
                    for i in range(k):
                        block[base + feature[start + i], r] += phi[i]
            else:  # phi_i = v d_i prod_{j < i} f_j prod_{j > i} f_j, f = (o + z) / 2, d = o - z
                v = path_value[p]
                pre[0, :n] = v
                for i in range(k):
                    z = zero_fraction[start + i]
                    for r in range(n):
                        pre[i + 1, r] = pre[i, r] * (0.5 * ((1.0 if ones[i, r] else 0.0) + z))
                suf[:n] = 1.0
                for i in range(k - 1, -1, -1):
                    z = zero_fraction[start + i]
                    a = block[base + feature[start + i]]
                    for r in range(n):
                        o = 1.0 if ones[i, r] else 0.0
                        a[r] += pre[i, r] * (o - z) * suf[r]
                        suf[r] *= 0.5 * (o + z)
        for r in range(n):
            for g in range(G):
                for c in range(C):
                    acc[b0 + r, g, c, 0] += block[g * C + c, r]


def _lanes(packed: PackedModel) -> tuple:
    return (packed.feature, packed.lower, packed.upper, packed.missing, packed.zero_fraction,
            packed.cat_offsets, packed.cat_nbits, packed.cat_other, packed.cat_words)  # fmt: skip


def path_dependent_tables(packed: PackedModel) -> tuple[np.ndarray, np.ndarray]:
    """The path-dependent Banzhaf tables of ``packed``, ``(table_offsets, tables)``, built on
    first use and kept per model digest (the SHAP tables' policy picks the paths)."""

    def build() -> tuple[np.ndarray, np.ndarray]:
        k = path_features(packed.path_offsets)
        offsets = choose_tables(k, packed.table_budget_bytes, packed.max_table_features)
        tables = np.empty(table_values(k, offsets), np.float32)
        run_ranges(_fill_path_dependent, k.size, 4 * num_threads(), packed.zero_fraction,
                   packed.path_offsets, packed.path_value, offsets, tables)  # fmt: skip
        return offsets, tables

    return host_form(packed, "banzhaf tables", build, TABLE_CACHE_SIZE)


def _max_k(packed: PackedModel) -> int:
    k = path_features(packed.path_offsets)
    return max(int(k.max()), 1) if k.size else 1


def _path_dependent_values(packed: PackedModel, X: np.ndarray, acc: np.ndarray, r0: int) -> None:
    """Add the path-dependent Banzhaf values of rows ``r0 .. r0 + len(acc) - 1`` of ``X`` to
    ``acc`` (float64 ``(rows, G, F + 1, 1)``)."""
    offsets, tables = path_dependent_tables(packed)
    R = np.zeros((0, packed.num_features), np.float32)
    size = block_rows(packed.num_groups, packed.num_features)
    rows = acc.shape[0]
    pieces = max(1, min(4 * num_threads(), -(-rows // size)))
    run_ranges(_value_rows, rows, pieces, X, R, *_lanes(packed), packed.path_offsets,
               packed.path_value, packed.path_group, 0, packed.num_paths, offsets, tables,
               _max_k(packed), size, acc, r0)  # fmt: skip


def _blocks(
    packed: PackedModel, bits: int
) -> list[tuple[int, int, np.ndarray, np.ndarray, int, int]]:
    """Path blocks ``(p0, p1, table_offsets, zeta_offsets, values, zeta)`` of at most
    :data:`TABLE_BLOCK_VALUES` table values (a longer path alone)."""
    k = path_features(packed.path_offsets)
    zeta = np.where(k <= bits, np.left_shift(1, np.minimum(k, bits)), 0)
    values = zeta * k
    blocks, p0 = [], 0
    while p0 < k.size:
        ends = np.cumsum(values[p0:])
        p1 = p0 + max(1, int(np.searchsorted(ends, TABLE_BLOCK_VALUES, side="right")))
        v, z = values[p0:p1], zeta[p0:p1]
        table = np.where(v > 0, np.cumsum(v) - v, -1).astype(np.int64)
        zoff = np.where(z > 0, np.cumsum(z) - z, -1).astype(np.int64)
        blocks.append((p0, p1, table, zoff, int(v.sum()), int(z.sum())))
        p0 = p1
    return blocks


def _block_tables(packed: PackedModel, R: np.ndarray, block: tuple) -> np.ndarray:
    """The float32 tables of one path block of :func:`_blocks` over the background rows ``R``."""
    lanes = _lanes(packed)
    threads = num_threads()
    p0, p1, offsets, zoff, n_values, n_zeta = block
    zeta = np.empty(n_zeta, np.float64)
    run_ranges(_zeta_tables, p1 - p0, 4 * threads, R, *lanes[:4], *lanes[5:],
               packed.path_offsets, p0, zoff, zeta)  # fmt: skip
    out = np.empty(n_values, np.float32)
    run_ranges(_fill_interventional, p1 - p0, 4 * threads, zeta, zoff, packed.path_offsets,
               packed.path_value, p0, R.shape[0], offsets, out)  # fmt: skip
    return out


def interventional_tables(
    packed: PackedModel, R: np.ndarray, bits: int = INTERVENTIONAL_TABLE_BITS
) -> tuple[np.ndarray, np.ndarray]:
    """Every path's interventional table over the background rows ``R`` (float32, encoded), in
    one array: ``(table_offsets, tables)`` (offset -1: no table)."""
    R = np.ascontiguousarray(R, dtype=np.float32)
    offsets, parts, total = [], [], 0
    for block in _blocks(packed, bits):
        offsets.append(np.where(block[2] >= 0, block[2] + total, -1))
        parts.append(_block_tables(packed, R, block))
        total += block[4]
    if not parts:
        return np.zeros(0, np.int64), np.zeros(1, np.float32)
    return np.concatenate(offsets), np.concatenate(parts + [np.zeros(1, np.float32)])


def _interventional_values(packed: PackedModel, R: np.ndarray, X: np.ndarray, bits: int):
    """``add(acc, r0, pieces)`` for :func:`banzhaf_rows._run_blocks`: the interventional Banzhaf
    values over the background rows ``R`` (float32, encoded), tables built per call (kept
    across row blocks when the paths fit one block)."""
    lanes = _lanes(packed)
    blocks = _blocks(packed, bits)
    size = block_rows(packed.num_groups, packed.num_features)
    built: dict[int, np.ndarray] = {}
    threads = num_threads()

    def tables(b: int) -> np.ndarray:
        if b in built:
            return built[b]
        out = _block_tables(packed, R, blocks[b])
        if len(blocks) == 1:
            built[b] = out
        return out

    def add(acc: np.ndarray, r0: int, pieces: int) -> None:
        rows = acc.shape[0]
        pieces = max(1, min(4 * threads, -(-rows // size)))
        for b, (p0, p1, offsets, *_) in enumerate(blocks):
            run_ranges(_value_rows, rows, pieces, X, R, *lanes, packed.path_offsets,
                       packed.path_value, packed.path_group, p0, p1, offsets, tables(b),
                       _max_k(packed), size, acc, r0)  # fmt: skip

    return add


def banzhaf_values(packed: PackedModel, X: np.ndarray, interactions: bool = False) -> np.ndarray:
    """Path-dependent Banzhaf values of the rows of ``X``: float32 ``(n, G, F + 1)``, bias
    (``packed.expected_value``) last; ``interactions``: Banzhaf interaction values
    ``(n, G, F + 1, F + 1)`` (:func:`distshap.kernels.banzhaf_rows.banzhaf_values`).

    Parameters
    ----------
    packed : PackedModel
        Its Banzhaf tables are filled on the first call (:func:`path_dependent_tables`).
    X : array (n, F)
        Kernel input: the rows through the model's encoding.
    interactions : bool
        Interaction values instead.
    """
    if interactions:
        return banzhaf_rows.banzhaf_values(packed, X, True)
    X = _rows(X, packed)
    bias = np.asarray(packed.expected_value, np.float64).reshape(1, -1)

    def add(acc: np.ndarray, r0: int, pieces: int) -> None:
        _path_dependent_values(packed, X, acc, r0)

    return _run_blocks(X.shape[0], packed, False, bias, add)


def interventional_banzhaf_values(
    packed: PackedModel,
    background,
    X: np.ndarray,
    *,
    bias: np.ndarray | None = None,
    interactions: bool = False,
    table_bits: int = INTERVENTIONAL_TABLE_BITS,
) -> np.ndarray:
    """Interventional Banzhaf values (raw margin) of the rows of ``X`` over ``background``:
    float32 ``(n, G, F + 1)``, or interaction values ``(n, G, F + 1, F + 1)``
    (:func:`distshap.kernels.banzhaf_rows.interventional_banzhaf_values`).

    Parameters
    ----------
    packed : PackedModel
    background : distshap.kernels.interventional_math.Background
        Built for ``packed``.
    X : array (n, F)
        Kernel input: the rows through the model's encoding.
    bias : float64 (1, G) or (n, G), optional
        The bias column (``v(∅)``, the mean background margin); default zeros.
    interactions : bool
        Banzhaf interaction values instead.
    table_bits : int
        Paths with more features test each background row for each explained row (a
        parameter so tests reach that route).
    """
    if interactions:
        return banzhaf_rows.interventional_banzhaf_values(
            packed, background, X, bias=bias, interactions=True, zeta_bits=table_bits
        )
    check_background(background, packed)
    X = _rows(X, packed)
    G = packed.num_groups
    bias = np.zeros((1, G)) if bias is None else np.ascontiguousarray(bias, dtype=np.float64)
    if bias.ndim != 2 or bias.shape[1] != G or bias.shape[0] not in (1, X.shape[0]):
        raise ValueError(f"bias has shape {bias.shape}, expected (1, {G}) or ({X.shape[0]}, {G})")
    R = np.ascontiguousarray(background.rows, dtype=np.float32)
    bits = min(int(table_bits), INTERVENTIONAL_TABLE_BITS)
    return _run_blocks(X.shape[0], packed, False, bias, _interventional_values(packed, R, X, bits))
