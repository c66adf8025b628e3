"""CPU SHAP interaction values: pattern tables for short paths, Gauss-Legendre quadrature else.

*Quadrature.* On a path of ``k`` features with leaf value ``v``, zero fractions ``z``, one
fractions ``o`` (0 or 1), ``d_j = o_j - z_j`` and factors ``f_j(t) = z_j + t d_j``, the
Shapley interaction weights ``s! (k-2-s)! / (k-1)!`` are Beta integrals, so the interaction
of two elements ``i != c`` is

    phi_ic = v d_i d_c / 2 integral_0^1 prod_{j != i, c} f_j(t) dt,

a polynomial of degree ``k - 2``, and the SHAP value ``phi_i = v d_i integral prod_{j != i}
f_j`` one of degree ``k - 1``: the same ``ceil(k / 2)`` Gauss-Legendre nodes give both
exactly. At each node a block of rows forms prefix products ``prod_{j < i}`` and suffix
products ``prod_{j > c}``; for each ``i`` a running product over ``i < j < c`` completes
every pair, so each pair costs three multiplications and an add per node, no division, and a
factor of 0 needs no special case. Every factor and weight is non-negative and the sums are
float64: nothing cancels. Each pair ``i < c`` is evaluated once (a path's elements are sorted
by feature, so it is the upper entry ``[f_i, f_c]``) and mirrored when the row is written.

*Diagonal.* ``phi_ii = phi_i - sum_{j != i} phi_ij`` (XGBoost's convention), formed after all
paths from the row's SHAP value sums and its off-diagonal sums in increasing ``j``.

*Tables* (:func:`interaction_tables`): a path of ``k`` features has ``2**k`` patterns, and a
table stores, per pattern, the float32 values of its ``k (k + 1) / 2`` upper entries (the
pair values, and ``phi_i`` on the diagonal). Which paths get one follows the model's table
policy (:func:`distshap.plan.tables.choose_tables` with ``k * k`` values per pattern, a
conservative size; the tables are then packed at ``k (k + 1) / 2``). They are filled by this
kernel itself, on a model of such paths alone at the ``2**k`` corner rows (as the SHAP tables
are), and cost an interval test per element and one table row per (path, row). Against the
quadrature they win at every path length (``benchmarks/RESULTS.md``); they take memory
instead.

*Accumulators.* Rows are processed in blocks and output groups one at a time (a path adds to
its own group only), with the group's float64 sums laid out ``acc[entry, row]``: every inner
loop runs over the block's rows. The entries are either the upper triangle of the group's
``(F + 1) x (F + 1)`` matrix (:func:`interaction_values`) or its pair slots
(:func:`interaction_slot_values`, :mod:`distshap.pair_slots`): the same terms are added in the
same order to the same float64 sums, so a slot has the bits of its matrix entry. Each row
sums the paths of a group in packed order, so the result does not depend on the thread count,
the block size or the chunking.

*Compilation.* One serial ``nogil`` function (:func:`_interaction_rows`) does all three jobs
(matrices, slots, table filling) with one specialisation, run over row ranges in threads by
:func:`distshap.parallel.run_ranges`.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import njit

from distshap.compile_cache import announce, read_only
from distshap.kernels.quadrature_cpu import element_ones, pattern_model, pattern_rows
from distshap.kernels.taylor_cpu import gauss_legendre_table, node_count
from distshap.packed import host_form
from distshap.parallel import run_ranges
from distshap.plan.tables import choose_tables, path_features

__all__ = [
    "interaction_slot_values",
    "interaction_tables",
    "interaction_values",
    "table_layout",
]

#: Float64 sums and scratch of one row block: about 8 MiB, 16 to 1,024 rows. Each block reads
#: every path's table once, so larger blocks read them fewer times (``benchmarks/RESULTS.md``).
_ACC_BYTES = 1 << 23
_MAX_BLOCK_ROWS = 1024
_MIN_BLOCK_ROWS = 16
#: :func:`_fill_tables`: corner rows per kernel call, and float32 values of one call's output.
_FILL_ROWS = 1 << 12
_FILL_VALUES = 1 << 23
#: Models whose interaction tables are kept.
TABLE_CACHE_SIZE = 4


@announce("the CPU interaction-values kernel", 3)
@njit(nogil=True, cache=True)
def _interaction_rows(X, feature, lower, upper, missing, zero_fraction, cat_offsets, cat_nbits,
                      cat_other, cat_words, path_offsets, path_value, group_paths,
                      group_offsets, table_offsets, tables, gl_t, gl_w, max_k, block_rows,
                      acc_offsets, n_cols, map_offsets, path_map, diag_offsets, diag_at,
                      entry_offsets, entries, out, out_offsets, row_stride, lo,
                      hi):  # fmt: skip
    """Interaction values of rows ``lo .. hi - 1`` of ``X`` into ``out`` (float32, flat).

    Column ``j`` of group ``g`` of row ``r`` is ``out[out_offsets[g] + r * row_stride + j]``.

    Group ``g`` (paths ``group_paths[group_offsets[g]:group_offsets[g + 1]]``, in that order)
    owns ``acc_offsets[g + 1] - acc_offsets[g]`` sums.

    * *Matrix mode* (``map_offsets`` empty): the sums are the upper triangle ``[a, b]``,
      ``a <= b``, of the group's ``n_cols x n_cols`` matrix, packed row by row; the diagonal
      becomes ``phi_a - sum_{b != a}`` of the row in increasing ``b``, and the matrix (the
      lower triangle mirrored) is written row-major, ``n_cols**2`` columns.
    * *Map mode*: element pair ``(i, c)``, ``i <= c``, of path ``p`` adds to sum
      ``path_map[map_offsets[p] + i * k + c]`` (numbered from ``acc_offsets[0] = 0``); diagonal
      ``diag_at[d]`` (``d`` in ``diag_offsets[g] .. diag_offsets[g + 1] - 1``) then subtracts
      ``entries[entry_offsets[d]:entry_offsets[d + 1]]`` in that order (an entry past the last
      sum is the mirror of ``entry - acc_offsets[-1]``); local sum ``j`` is column ``j``.
    """
    n_features = X.shape[1]
    n_groups = group_offsets.shape[0] - 1
    n_acc = acc_offsets[n_groups]
    matrix = map_offsets.shape[0] == 0
    width = 1
    for g in range(n_groups):
        width = max(width, acc_offsets[g + 1] - acc_offsets[g])
    n_pairs = max_k * (max_k + 1) // 2
    size = min(block_rows, hi - lo)
    XT = np.empty((n_features, size), np.float32)
    acc = np.empty((width, size), np.float64)
    ones = np.empty((max_k, size), np.bool_)  # does row r follow feature element i
    index = np.empty(size, np.int64)  # a table path: the start of each row's table row
    d = np.empty((max_k, size), np.float64)  # o - z
    f = np.empty((max_k, size), np.float64)  # z + t d at the node
    pre = np.empty((max_k, size), np.float64)  # w v prod_{j < i} f_j
    suf = np.empty((max_k, size), np.float64)  # prod_{j > i} f_j
    mid = np.empty(size, np.float64)
    vals = np.empty((n_pairs, size), np.float64)  # a quadrature path's upper entries
    at = np.empty(n_pairs, np.int64)  # the sum each upper entry adds to
    for r0 in range(lo, hi, size):
        n = min(hi, r0 + size) - r0
        for r in range(n):
            for c in range(n_features):
                XT[c, r] = X[r0 + r, c]
        for g in range(n_groups):
            a0 = acc_offsets[g]
            wg = acc_offsets[g + 1] - a0
            for j in range(wg):  # (loops: a slice assignment compiles broadcasting code)
                aj = acc[j]
                for r in range(n):
                    aj[r] = 0.0
            for gp in range(group_offsets[g], group_offsets[g + 1]):
                p = group_paths[gp]
                start = path_offsets[p] + 1  # the first feature element (after the bias lane)
                k = path_offsets[p + 1] - start
                e = 0
                for i in range(k):
                    for c in range(i, k):
                        if matrix:  # upper entry [a, b], a <= b, of the packed triangle
                            fa = feature[start + i]
                            at[e] = fa * n_cols - fa * (fa - 1) // 2 + feature[start + c] - fa
                        else:
                            at[e] = path_map[map_offsets[p] + i * k + c] - a0
                        e += 1
                for i in range(k):
                    el = start + i
                    element_ones(ones[i], XT[feature[el]], n, el, lower, upper, missing,
                                 cat_offsets, cat_nbits, cat_other, cat_words)  # fmt: skip
                off = table_offsets[p]
                if off >= 0:  # k <= 24 (choose_tables): the pattern is an int64 bit mask
                    for r in range(n):
                        index[r] = 0
                    for i in range(k):
                        oi = ones[i]
                        for r in range(n):
                            index[r] |= np.int64(oi[r]) << i
                    for r in range(n):
                        index[r] = off + index[r] * e
                    for j in range(e):
                        a = acc[at[j]]
                        for r in range(n):
                            a[r] += tables[index[r] + j]
                    continue
                # 1-D row views keep the row loops simple (less code for LLVM to vectorise)
                for i in range(k):
                    z = zero_fraction[start + i]
                    oi, di = ones[i], d[i]
                    for r in range(n):
                        di[r] = (1.0 if oi[r] else 0.0) - z
                for j in range(e):
                    vj = vals[j]
                    for r in range(n):
                        vj[r] = 0.0
                m = (k + 1) // 2  # nodes: the rule of m nodes sits at m (m - 1) / 2
                v = path_value[p]
                for q in range(m * (m - 1) // 2, m * (m + 1) // 2):
                    t = gl_t[q]
                    wv = gl_w[q] * v
                    pi = pre[0]
                    for r in range(n):
                        pi[r] = wv
                    for i in range(k):  # f_i = z_i + t d_i; pre[i + 1] = pre[i] f_i
                        z = zero_fraction[start + i]
                        fi, di, pi = f[i], d[i], pre[i]
                        if i + 1 < k:
                            pn = pre[i + 1]
                            for r in range(n):
                                fi[r] = z + t * di[r]
                                pn[r] = pi[r] * fi[r]
                        else:
                            for r in range(n):
                                fi[r] = z + t * di[r]
                    si = suf[k - 1]
                    for r in range(n):
                        si[r] = 1.0
                    for i in range(k - 2, -1, -1):  # suf[i] = prod_{j > i} f_j
                        si, sn, fn = suf[i], suf[i + 1], f[i + 1]
                        for r in range(n):
                            si[r] = sn[r] * fn[r]
                    j = 0
                    for i in range(k):  # the SHAP value's integrand, then every c > i
                        pi, si, vj = pre[i], suf[i], vals[j]
                        for r in range(n):
                            vj[r] += pi[r] * si[r]
                            mid[r] = pi[r]
                        j += 1
                        for c in range(i + 1, k):  # mid = pre[i] prod_{i < j < c} f_j
                            vj, sc, fc = vals[j], suf[c], f[c]
                            for r in range(n):
                                vj[r] += mid[r] * sc[r]
                                mid[r] *= fc[r]
                            j += 1
                j = 0
                for i in range(k):
                    di = d[i]
                    for c in range(i, k):
                        a, vj, dc = acc[at[j]], vals[j], d[c]
                        if c == i:
                            for r in range(n):
                                a[r] += vj[r] * di[r]
                        else:
                            for r in range(n):
                                a[r] += vj[r] * (0.5 * di[r] * dc[r])
                        j += 1
            if matrix:  # row i of the triangle starts at tri[i]; [i, c] is tri[i] + c - i
                for r in range(n):
                    for i in range(n_cols - 1):
                        ti = i * n_cols - i * (i - 1) // 2
                        diag = acc[ti, r]
                        for c in range(n_cols - 1):
                            if c < i:
                                diag -= acc[c * n_cols - c * (c - 1) // 2 + i - c, r]
                            elif c > i:
                                diag -= acc[ti + c - i, r]
                        acc[ti, r] = diag
                    base = out_offsets[g] + (r0 + r) * row_stride
                    for i in range(n_cols):
                        ti = i * n_cols - i * (i - 1) // 2
                        for c in range(n_cols):
                            if c < i:
                                s = acc[c * n_cols - c * (c - 1) // 2 + i - c, r]
                            else:
                                s = acc[ti + c - i, r]
                            out[base + i * n_cols + c] = s
            else:
                for di in range(diag_offsets[g], diag_offsets[g + 1]):
                    t0 = diag_at[di] - a0
                    for r in range(n):
                        mid[r] = acc[t0, r]
                    for x in range(entry_offsets[di], entry_offsets[di + 1]):
                        src = entries[x]
                        if src >= n_acc:
                            src -= n_acc
                        src -= a0
                        for r in range(n):
                            mid[r] -= acc[src, r]
                    for r in range(n):
                        acc[t0, r] = mid[r]
                for r in range(n):
                    base = out_offsets[g] + (r0 + r) * row_stride
                    for t in range(wg):
                        out[base + t] = acc[t, r]


def _block_rows(width: int, max_k: int) -> int:
    """Rows per block: the group's float64 sums and the path scratch stay cache-sized."""
    per_row = 8 * (width + max_k * (max_k + 1) // 2 + 5 * max_k) + max_k
    return int(np.clip(_ACC_BYTES // per_row, _MIN_BLOCK_ROWS, _MAX_BLOCK_ROWS))


_NO_INT32 = np.zeros(0, np.int32)
_NO_INT64 = np.zeros(0, np.int64)


def _run(X, lanes, path_offsets, path_value, path_group, table_offsets, tables, acc_offsets,
         n_cols, map_offsets=_NO_INT64, path_map=_NO_INT32, diag_offsets=None,
         diag_at=_NO_INT64, entry_offsets=_NO_INT64, entries=_NO_INT64, out=None,
         out_offsets=None, row_stride=0):  # fmt: skip
    """:func:`_interaction_rows` over every row of ``X``, in threads."""
    n_groups = acc_offsets.shape[0] - 1
    group = np.asarray(path_group, np.int64)
    group_paths = np.argsort(group, kind="stable").astype(np.int64)  # packed order per group
    group_offsets = np.searchsorted(group[group_paths], np.arange(n_groups + 1)).astype(np.int64)
    if diag_offsets is None:
        diag_offsets = np.zeros(n_groups + 1, np.int64)
    k = path_features(path_offsets)
    max_k = max(int(k.max()), 1) if k.size else 1
    gl_t, gl_w = gauss_legendre_table(node_count(max_k))
    rows = _block_rows(int(np.diff(acc_offsets).max(initial=1)), max_k)
    threads = numba.get_num_threads()  # ranges of whole blocks, a few per thread when many
    pieces = max(threads, min(4 * threads, -(-X.shape[0] // rows)))
    run_ranges(_interaction_rows, X.shape[0], pieces, read_only(X), *lanes, path_offsets,
               path_value, group_paths, group_offsets, table_offsets, tables, gl_t, gl_w, max_k,
               rows, acc_offsets, n_cols, map_offsets, path_map, diag_offsets, diag_at,
               entry_offsets, entries, out, out_offsets, row_stride)  # fmt: skip


def _table_sizes(lengths: np.ndarray) -> np.ndarray:
    """Float32 values of a table of ``k`` features: ``2**k`` patterns of ``k (k + 1) / 2``."""
    return (np.int64(1) << np.minimum(lengths, 62)) * lengths * (lengths + 1) // 2


def table_layout(lengths: np.ndarray, budget_bytes: int, max_features: int) -> np.ndarray:
    """Start of each path's interaction table (-1: none), ``k (k + 1) / 2`` values a pattern.

    The paths are those :func:`distshap.plan.tables.choose_tables` gives ``k * k`` values a
    pattern within ``budget_bytes`` (so the packed tables take at most about half of it).
    Tables are laid out by ``k``, then in path order: the paths of one length are filled
    together into one contiguous range.
    """
    lengths = np.asarray(lengths, np.int64)
    chosen = choose_tables(lengths, budget_bytes, max_features, "k*k") >= 0
    order = np.flatnonzero(chosen)
    order = order[np.argsort(lengths[order], kind="stable")]
    size = _table_sizes(lengths[order])
    offsets = np.full(lengths.shape[0], -1, np.int64)
    offsets[order] = np.cumsum(size) - size
    return offsets


def _fill_tables(path_offsets, zero_fraction, path_value, table_offsets) -> np.ndarray:
    """Every pattern's upper entries of every path with a table: float32.

    Entry ``[table_offsets[p] + pattern * W + e]`` (``W = k (k + 1) / 2``, ``e`` the upper
    pair ``(i, c)`` in row-major order) is the value of element pair ``(i, c)`` (``phi_i`` for
    ``c == i``) when the one fractions are the bits of ``pattern``, computed in float64 by
    quadrature. Paths of ``k`` features are evaluated together, as a model of such paths
    alone, each in its own group: element ``i`` tests feature ``i`` for ``x >= 0.5``, and row
    ``b`` of the input holds the bits of pattern ``b``.
    """
    lengths = path_features(path_offsets)
    with_table = table_offsets >= 0
    ends = table_offsets + np.where(with_table, _table_sizes(lengths), 0)
    tables = np.empty(int(ends.max(initial=0)), np.float32)
    for k in np.unique(lengths[with_table]).tolist():
        ids = np.flatnonzero(with_table & (lengths == k))
        patterns = 1 << k
        W = k * (k + 1) // 2
        n_rows = min(patterns, _FILL_ROWS)
        chunk = max(1, _FILL_VALUES // (n_rows * W))
        ii, cc = np.triu_indices(k)  # row-major upper pairs: e = 0 .. W - 1
        for c0 in range(0, ids.shape[0], chunk):
            part = ids[c0 : c0 + chunk]
            n_paths = part.shape[0]
            model, offsets = pattern_model(path_offsets, zero_fraction, part, k)
            acc_offsets = np.arange(n_paths + 1, dtype=np.int64) * W
            map_offsets = np.arange(n_paths + 1, dtype=np.int64) * (k * k)
            path_map = np.full((n_paths, k, k), -1, np.int32)
            path_map[:, ii, cc] = acc_offsets[:-1, None] + np.arange(W)
            groups = np.arange(n_paths, dtype=np.int64)
            for first in range(0, patterns, n_rows):
                X = pattern_rows(first + np.arange(min(n_rows, patterns - first)), k)
                _run(X, model, offsets, path_value[part], groups,
                     np.full(n_paths, -1, np.int64), tables[:0], acc_offsets, 0, map_offsets,
                     path_map.ravel(), out=tables, out_offsets=table_offsets[part] + first * W,
                     row_stride=W)  # fmt: skip
    return tables


def interaction_tables(packed) -> tuple[np.ndarray, np.ndarray]:
    """The interaction pattern tables of ``packed``: ``(table_offsets, tables)``, built once.

    ``table_offsets`` (int64, per path, -1: no table) is :func:`table_layout` of the model's
    table policy; ``tables`` the float32 values. Kept for the last :data:`TABLE_CACHE_SIZE`
    model digests (a model without a digest: built every call).
    """
    return host_form(packed, "interaction tables", lambda: _tables(packed), TABLE_CACHE_SIZE)


def _tables(packed) -> tuple[np.ndarray, np.ndarray]:
    k = path_features(packed.path_offsets)
    offsets = table_layout(k, packed.table_budget_bytes, packed.max_table_features)
    return offsets, _fill_tables(packed.path_offsets, packed.zero_fraction, packed.path_value,
                                 offsets)  # fmt: skip


def _lanes(packed) -> tuple:
    return (
        packed.feature, packed.lower, packed.upper, packed.missing, packed.zero_fraction,
        packed.cat_offsets, packed.cat_nbits, packed.cat_other, packed.cat_words,
    )  # fmt: skip


def interaction_values(packed, X: np.ndarray) -> np.ndarray:
    """SHAP interaction values of the rows of ``X``: float32 ``(n, G, F + 1, F + 1)``.

    Parameters
    ----------
    packed : PackedModel
        Its interaction tables are filled on the first call (:func:`interaction_tables`).
    X : float32 array (n, F), C-contiguous
        Kernel input (:func:`distshap.inputs.prepare_rows` of the user's rows).
    """
    G, f1 = packed.num_groups, packed.num_features + 1
    out = np.empty((X.shape[0], G, f1, f1), np.float32)
    if X.shape[0]:
        offsets, tables = interaction_tables(packed)
        acc_offsets = np.arange(G + 1, dtype=np.int64) * (f1 * (f1 + 1) // 2)  # triangles
        _run(X, _lanes(packed), packed.path_offsets, packed.path_value, packed.path_group,
             offsets, tables, acc_offsets, f1, out=out.reshape(-1),
             out_offsets=np.arange(G, dtype=np.int64) * (f1 * f1),
             row_stride=G * f1 * f1)  # fmt: skip
        out[:, :, f1 - 1, f1 - 1] = packed.expected_value.astype(np.float64)
    return out


def interaction_slot_values(packed, X: np.ndarray, slots) -> np.ndarray:
    """Interaction values of the rows of ``X`` in slot form: float32 ``(n, S)``.

    ``slots`` is the model's :class:`distshap.pair_slots.PairSlots`; every slot has the bits of
    its entry of :func:`interaction_values`.
    """
    out = np.empty((X.shape[0], slots.num_slots), np.float32)
    if X.shape[0] and slots.num_slots:
        offsets, tables = interaction_tables(packed)
        diag_offsets = np.searchsorted(slots.diag_slots, slots.slot_offsets).astype(np.int64)
        _run(X, _lanes(packed), packed.path_offsets, packed.path_value, packed.path_group,
             offsets, tables, slots.slot_offsets, 0, slots.map_offsets, slots.path_map,
             diag_offsets, slots.diag_slots, slots.row_offsets, slots.row_entries,
             out.reshape(-1), slots.slot_offsets[:-1], slots.num_slots)  # fmt: skip
    return out
