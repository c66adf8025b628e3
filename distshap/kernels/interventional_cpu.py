"""Interventional SHAP values on the CPU: serial ``nogil`` Numba functions over blocks of
explained rows, run in threads (:func:`distshap.parallel.run_ranges`).

The game of one merged path for an explained row ``x`` and a background row ``r`` depends only
on which of the path's elements each follows (:mod:`distshap.kernels.interventional_math`): let
``xb`` / ``rb`` be those sets as bit masks. Because ``rb`` does not depend on ``x``, every
path's background masks are computed once per call, sorted and grouped into distinct masks with
their rows (:func:`_background_masks`); the kernel then tests each explained row's ``xb`` once
per path and combines it with each distinct ``rb`` by bit operations. A pair contributes only
when ``rb`` covers every element ``x`` does not follow (``nx = ~xb``): then ``R = nx`` (``b``
elements) for every contributing group, and ``X = xb & ~rb`` (``a`` elements); the weights come
from float64 tables indexed by ``(a, b)``.

With the raw margin, a group of ``c`` background rows weighs ``c / B``; with a transform, the
sum of its rows' rescale factors ``s(x, r)`` over ``B``. Each explained row is one thread's,
accumulated in float64 over paths (packed order) and, per path, over the background groups
(ascending mask, rows ascending within a group), then stored as float32: results depend on
neither the thread count nor the chunking. Paths of more than :data:`MAX_MASK_BITS` features
(deep trees on many features) test each background row's elements directly, in row order.

With the raw margin, paths of a few features
(:func:`distshap.plan.interventional.cpu_table_plan`) skip all of that: their background sums
are tables over ``xb``, filled once per background and kept with it
(:mod:`distshap.kernels.interventional_tables_cpu`), holding the very float64 values the
grouped masks give, so an explained row costs one test and one table entry per element and
the bits are the same. When every path has a table, a task's rows are summed in a transposed
copy (outputs by rows), so a path's element adds to consecutive rows.

Memory: the grouped masks take ``20`` bytes per (path, background row) (``36`` while they are
built); they are built for blocks of paths of at most :data:`BLOCK_ENTRIES` entries, and the
float64 accumulator covers row blocks of at most :data:`ACCUMULATOR_BYTES`.
"""

from __future__ import annotations

import functools
from typing import Any

import numba
import numpy as np
from numba import njit

import distshap.kernels.interventional_math as im
import distshap.kernels.interventional_tables_cpu as tables_cpu
from distshap.compile_cache import announce, read_only
from distshap.packed import PackedModel
from distshap.parallel import num_threads, run_ranges

__all__ = [
    "ACCUMULATOR_BYTES",
    "BLOCK_ENTRIES",
    "MAX_MASK_BITS",
    "LOCAL_BYTES",
    "MEMO_ROWS",
    "TABLE_ROWS",
    "interventional_values",
]

#: Paths with at most this many features are combined by int64 bit masks.
MAX_MASK_BITS = 62
#: (path, background row) entries of grouped background masks built at a time.
BLOCK_ENTRIES = 1 << 22
#: Largest float64 accumulator of a row block.
ACCUMULATOR_BYTES = 1 << 28
#: Most explained rows whose masks share a path's background pass (raw margin).
MEMO_ROWS = 64
#: Most explained rows of a task when every path has a pattern table.
TABLE_ROWS = 256
#: Largest transposed copy of a row block's SHAP sums (and interaction sums, each on its own)
#: on the pattern-table route.
LOCAL_BYTES = 1 << 21

_inline = njit(inline="always", nogil=True, cache=True)
_rescale = _inline(im.rescale)
_popcount = tables_cpu.popcount
_element_follows = tables_cpu.element_follows
_add_pair = tables_cpu.add_pair
_table_rows = tables_cpu.table_rows
_transformed = _inline(im.transformed)


@njit(nogil=True, cache=True)
def _path_masks(R, feature, lower, upper, missing, cat_offsets, cat_nbits, cat_other,
                cat_words, path_offsets, p0, max_bits, table_off, rb, n_masks, lo,
                hi):  # fmt: skip
    """Background masks ``rb[q, r]`` of block paths ``lo .. hi - 1`` (path ``p0 + q``): bit
    ``i`` set when row ``r`` follows the path's element ``i``. ``n_masks[q] = -1`` for a path
    longer than ``max_bits`` (tested row by row in the kernel), -2 for a path with a pattern
    table (``table_off >= 0``: no masks), else 0."""
    B = R.shape[0]
    for q in range(lo, hi):
        p = p0 + q
        start = path_offsets[p]
        k = path_offsets[p + 1] - start - 1
        n_masks[q] = 0
        if table_off[p] >= 0:
            n_masks[q] = -2
            continue
        if k > max_bits:
            n_masks[q] = -1
            continue
        for r in range(B):
            bits = np.int64(0)
            for i in range(k):
                if _element_follows(R[r], start + 1 + i, feature, lower, upper, missing,
                                    cat_offsets, cat_nbits, cat_other, cat_words):  # fmt: skip
                    bits |= np.int64(1) << i
            rb[q, r] = bits


@njit(nogil=True, cache=True)
def _group_masks(rb, order, masks, counts, members, n_masks, lo, hi):
    """Distinct background masks of block paths ``lo .. hi - 1``, ascending, with their rows.

    ``order[q]`` sorts ``rb[q]`` stably (rows ascending within a mask). For block path ``q``:
    ``masks[q, :n_masks[q]]`` the distinct masks, ``counts`` their rows, ``members[q]`` the rows
    grouped by mask. A path with ``n_masks[q] = -1`` is left as it is.
    """
    B = rb.shape[1]
    for q in range(lo, hi):
        if n_masks[q] < 0:
            continue
        u = -1
        for j in range(B):
            r = order[q, j]
            if u < 0 or rb[q, r] != masks[q, u]:
                u += 1
                masks[q, u] = rb[q, r]
                counts[q, u] = 0
            counts[q, u] += 1
            members[q, j] = r
        n_masks[q] = u + 1


@njit(inline="always", nogil=True, cache=True)
def _mask_pairs(q, xb, k, scale_row, B, transform, masks, counts, members, n_masks, weights,
                interactions, loc_phi, loc_int, cxr, totals):  # fmt: skip
    """A path's values for the explained mask ``xb`` over its grouped background masks.

    ``loc_phi[i]`` (element ``i`` in ``X``), ``totals[0]`` (subtracted from every element of
    ``R``), and for interactions ``loc_int`` (pairs in ``X``), ``cxr`` (an ``X`` element with
    every ``R`` one), ``totals[1]`` (pairs in ``R``); all weighted, without the leaf value.
    """
    loc_phi[:k] = 0.0
    cxr[:k] = 0.0
    totals[:] = 0.0
    if interactions:
        loc_int[:k, :k] = 0.0
    nx = ((np.int64(1) << k) - 1) & ~xb
    b = _popcount(nx)
    offset = 0
    for u in range(n_masks[q]):
        rb = masks[q, u]
        c = counts[q, u]
        if (rb & nx) == nx:  # r follows every element x does not: the pair contributes
            xr = xb & ~rb
            a = _popcount(xr)
            if a + b > 0:
                if transform == 0:
                    w = c / B
                else:
                    w = 0.0
                    for j in range(offset, offset + c):
                        w += scale_row[members[q, j]]
                    w /= B
                _add_pair(w, a, b, xr, k, weights, interactions, loc_phi, loc_int, cxr,
                          totals)  # fmt: skip
        offset += c


@njit(nogil=True, cache=True)
def _long_path(x, R, start, k, scale_row, B, transform, feature, lower, upper, missing,
               cat_offsets, cat_nbits, cat_other, cat_words, weights, interactions, xf,
               loc_phi, loc_int, cxr, totals):  # fmt: skip
    """:func:`_mask_pairs` for a path too long for a mask: every background row tested here,
    in row order. Fills ``xf`` (does ``x`` follow element ``i``) too."""
    loc_phi[:k] = 0.0
    cxr[:k] = 0.0
    totals[:] = 0.0
    if interactions:
        loc_int[:k, :k] = 0.0
    b = 0
    for i in range(k):
        xf[i] = _element_follows(x, start + 1 + i, feature, lower, upper, missing, cat_offsets,
                                 cat_nbits, cat_other, cat_words)  # fmt: skip
        b += 0 if xf[i] else 1
    for r in range(B):
        a = 0
        ok = True
        for i in range(k):
            rf = _element_follows(R[r], start + 1 + i, feature, lower, upper, missing,
                                  cat_offsets, cat_nbits, cat_other, cat_words)  # fmt: skip
            if not (xf[i] or rf):
                ok = False
                break
            if xf[i] and not rf:
                a += 1
        if not ok or a + b == 0:
            continue
        w = scale_row[r] / B if transform != 0 else 1.0 / B
        if b > 0:
            totals[0] += w * weights[im.SHAP_R, a, b]
        if interactions and b > 1:
            totals[1] += w * weights[im.IR_RR, a, b]
        wx = w * weights[im.SHAP_X, a, b]
        wxr = w * weights[im.IR_XR, a, b]
        wxx = w * weights[im.IR_XX, a, b]
        for i in range(k):
            if not xf[i] or _element_follows(R[r], start + 1 + i, feature, lower, upper,
                                             missing, cat_offsets, cat_nbits, cat_other,
                                             cat_words):  # fmt: skip
                continue  # i is in R, or a dummy (both follow)
            loc_phi[i] += wx
            if interactions:
                cxr[i] += wxr
                for j in range(k):
                    if (
                        j != i
                        and xf[j]
                        and not _element_follows(
                            R[r],
                            start + 1 + j,
                            feature,
                            lower,
                            upper,
                            missing,
                            cat_offsets,
                            cat_nbits,
                            cat_other,
                            cat_words,
                        )
                    ):
                        loc_int[i, j] += wxx


@njit(inline="always", nogil=True, cache=True)
def _scatter(row, g, v, start, k, xf, feature, interactions, loc_phi, loc_int, cxr, totals,
             acc_phi, acc_int):  # fmt: skip
    """Add a path's values (times its leaf value) to the row's accumulators."""
    for i in range(k):
        acc_phi[row, g, feature[start + 1 + i]] += v * (loc_phi[i] if xf[i] else -totals[0])
    if interactions:
        half = 0.5 * v
        for i in range(k):
            fi = feature[start + 1 + i]
            for j in range(k):
                if j == i:
                    continue
                if xf[i] and xf[j]:
                    val = loc_int[i, j]
                elif xf[i]:
                    val = -cxr[i]
                elif xf[j]:
                    val = -cxr[j]
                else:
                    val = totals[1]
                acc_int[row, g, fi, feature[start + 1 + j]] += half * val


@functools.cache
def _kernel_for(long_paths: bool, interactions: bool, transform: int):  # noqa: ANN202
    """The kernel (a Numba dispatcher) of one kind of call, compiled for it alone.

    ``long_paths``: whether some path is longer than a mask (without, the row-by-row test
    :func:`_long_path` is not compiled); ``interactions``: interaction values; ``transform``:
    0 (raw margin), 1 or 2. Constants of the kernel, so a first call compiles only its code.
    """

    what = "interaction values" if interactions else "SHAP values"
    what += ("", " of the probability", " of the log loss")[transform]
    what += ", paths longer than a mask" if long_paths else ""

    @announce(f"the CPU interventional kernel ({what})", 4 if interactions else 3)
    @njit(nogil=True, cache=True)
    def _kernel(X, x_margin, y, R, r_margin, feature, lower, upper, missing, cat_offsets,
                cat_nbits, cat_other, cat_words, path_offsets, path_value, path_group, p0, p1,
                masks, counts, members, n_masks, table_off, shap_tables, inter_off, inter_tables,
                all_tables, weights, max_len, block_rows, acc_phi, acc_int, lo,
                hi):  # fmt: skip
        """Add paths ``p0..p1-1`` of the rows of row blocks ``lo .. hi - 1`` (``block_rows`` rows
        each) of ``X`` to ``acc_phi`` (and ``acc_int``); paths with ``table_off >= 0`` through
        their pattern tables (:func:`~.interventional_tables_cpu.table_rows`).

        Rows in blocks: with the raw margin a path's values depend on ``x`` only through its
        mask ``xb``, so each distinct mask of a block is combined with the background once
        (a small hash table per path) and every row of the block with that mask adds the same
        float64 values, the bits it would get alone.
        """
        n = X.shape[0]
        B = R.shape[0]
        _, G, C = acc_phi.shape
        memo = transform == 0
        slots = 1
        while slots < 2 * block_rows:
            slots *= 2
        for blk in range(lo, hi):
            r0 = blk * block_rows
            nb = min(n, r0 + block_rows) - r0
            # s(x, r) (one output group: binary models)
            scale = np.ones((nb, B if transform != 0 else 1), np.float64)
            if transform != 0:
                for i in range(nb):
                    for r in range(B):
                        scale[i, r] = _rescale(x_margin[r0 + i, 0], r_margin[r, 0], y[r0 + i],
                                               transform)  # fmt: skip
            n_buf = nb + 1 if memo else 1  # slot nb: scratch of rows not memoised
            buf_phi = np.empty((n_buf, max_len), np.float64)
            buf_cxr = np.empty((n_buf, max_len), np.float64)
            buf_tot = np.empty((n_buf, 2), np.float64)
            buf_int = np.empty((n_buf, max_len, max_len) if interactions else (1, 1, 1), np.float64)
            keys = np.empty(slots, np.int64)
            where = np.empty(slots, np.int64)
            xf = np.empty(max_len, np.bool_)
            Xt = np.empty((X.shape[1], nb), np.float32)  # the block's rows by feature
            for i in range(nb):
                for f in range(X.shape[1]):
                    Xt[f, i] = X[r0 + i, f]
            xbs = np.empty(nb, np.int64)
            # every path through tables: SHAP sums in a transposed copy of the block's rows
            local = all_tables
            acc_t = np.empty((G, C, nb) if local else (1, 1, 1), np.float64)
            if local:
                for i in range(nb):
                    for gg in range(G):
                        for c in range(C):
                            acc_t[gg, c, i] = acc_phi[r0 + i, gg, c]
            local_int = local and interactions and G * C * C * nb <= LOCAL_BYTES // 8
            acc_ti = np.empty((G, C, C, nb) if local_int else (1, 1, 1, 1), np.float64)
            if local_int:
                for i in range(nb):
                    for gg in range(G):
                        for c in range(C):
                            for d in range(C):
                                acc_ti[gg, c, d, i] = acc_int[r0 + i, gg, c, d]
            for q in range(p1 - p0):
                p = p0 + q
                start = path_offsets[p]
                k = path_offsets[p + 1] - start - 1
                g = path_group[p]
                v = path_value[p]
                if table_off[p] >= 0:
                    _table_rows(Xt, r0, nb, start, k, g, feature, lower, upper, missing,
                                cat_offsets, cat_nbits, cat_other, cat_words, table_off[p],
                                shap_tables, inter_off[p], inter_tables, interactions, xbs,
                                local, acc_t, local_int, acc_ti, acc_phi, acc_int)  # fmt: skip
                    continue
                keys[:] = -1
                used = 0
                for i in range(nb):
                    row = r0 + i
                    x = X[row]
                    t = n_buf - 1  # the scratch slot
                    if long_paths and n_masks[q] < 0:
                        _long_path(x, R, start, k, scale[i], B, transform, feature, lower, upper,
                                   missing, cat_offsets, cat_nbits, cat_other, cat_words, weights,
                                   interactions, xf, buf_phi[t], buf_int[t], buf_cxr[t],
                                   buf_tot[t])  # fmt: skip
                    else:
                        xb = np.int64(0)
                        for e in range(k):
                            o = _element_follows(x, start + 1 + e, feature, lower, upper,
                                                 missing, cat_offsets, cat_nbits, cat_other,
                                                 cat_words)  # fmt: skip
                            xf[e] = o
                            if o:
                                xb |= np.int64(1) << e
                        fresh = True
                        if memo:
                            h = (xb * np.int64(0x9E3779B1)) & (slots - 1)
                            while keys[h] != -1 and keys[h] != xb:
                                h = (h + 1) & (slots - 1)
                            if keys[h] == xb:
                                t = where[h]
                                fresh = False
                            else:
                                keys[h] = xb
                                where[h] = used
                                t = used
                                used += 1
                        if fresh:
                            _mask_pairs(q, xb, k, scale[i], B, transform, masks, counts, members,
                                        n_masks, weights, interactions, buf_phi[t], buf_int[t],
                                        buf_cxr[t], buf_tot[t])  # fmt: skip
                    _scatter(row, g, v, start, k, xf, feature, interactions, buf_phi[t],
                             buf_int[t], buf_cxr[t], buf_tot[t], acc_phi, acc_int)  # fmt: skip
            if local:
                for i in range(nb):
                    for gg in range(G):
                        for c in range(C):
                            acc_phi[r0 + i, gg, c] = acc_t[gg, c, i]
            if local_int:
                for i in range(nb):
                    for gg in range(G):
                        for c in range(C):
                            for d in range(C):
                                acc_int[r0 + i, gg, c, d] = acc_ti[gg, c, d, i]

    return _kernel


@njit(nogil=True, cache=True)
def _finish_interactions(acc_phi, acc_int, bias, out, lo, hi):
    """float64 accumulators -> float32 interaction values of rows ``lo .. hi - 1``: diagonal
    and bias entry."""
    _, G, C = acc_phi.shape
    for row in range(lo, hi):
        for g in range(G):
            for i in range(C - 1):
                diag = acc_phi[row, g, i]
                for j in range(C - 1):
                    if j != i:
                        diag -= acc_int[row, g, i, j]
                acc_int[row, g, i, i] = diag
            acc_int[row, g, C - 1, C - 1] = bias[row, g]
            for i in range(C):
                for j in range(C):
                    out[row, g, i, j] = acc_int[row, g, i, j]


def _background_masks(R: np.ndarray, model: tuple, path_offsets: np.ndarray, p0: int, p1: int,
                      max_bits: int, table_off: np.ndarray) -> tuple:  # fmt: skip
    """Grouped background masks of paths ``p0 .. p1 - 1``: ``(masks, counts, members,
    n_masks)`` (:func:`_group_masks`), the masks sorted by NumPy's stable argsort; none for
    paths with a table (``table_off >= 0``)."""
    P, B = p1 - p0, R.shape[0]
    if (table_off[p0:p1] >= 0).all():
        empty = np.zeros((1, 1), np.int64)
        return empty, empty, np.zeros((1, 1), np.int32), np.full(P, -2, np.int64)
    rb = np.zeros((P, B), np.int64)
    n_masks = np.zeros(P, np.int64)
    pieces = 4 * num_threads()
    run_ranges(_path_masks, P, pieces, R, *model, path_offsets, p0, max_bits, table_off, rb,
               n_masks)  # fmt: skip
    order = np.argsort(rb, axis=1, kind="stable")
    tables = (np.zeros((P, B), np.int64), np.zeros((P, B), np.int64),
              np.zeros((P, B), np.int32), n_masks)  # fmt: skip
    run_ranges(_group_masks, P, pieces, rb, order, *tables)
    return tables


def _tables(packed: PackedModel, background: im.Background, transform: int,
            interactions: bool) -> tuple:  # fmt: skip
    """``(table_off, shap_tables, inter_off, inter_tables)`` of a call: the background's
    pattern tables (raw margin; for interaction values the paths with both tables), else
    none (every offset -1). A path of no feature (a tree that is one leaf) adds nothing on
    either route: it counts as one with a table (of no entry)."""
    if transform != 0:
        none = np.full(packed.num_paths, -1, np.int64)
        return none, np.zeros(1), none, np.zeros(1)
    found = tables_cpu.background_tables(packed, background, interactions)
    table_off = found.shap_off
    if interactions:
        table_off = np.where(found.inter_off >= 0, found.shap_off, -1)
    table_off = np.where(np.diff(packed.path_offsets) == 1, 0, table_off)
    return table_off, found.shap, found.inter_off, found.inter


def _model_args(packed: PackedModel) -> tuple:
    return (
        packed.feature, packed.lower, packed.upper, packed.missing, packed.cat_offsets,
        packed.cat_nbits, packed.cat_other, packed.cat_words,
    )  # fmt: skip


def _float64(a: Any, shape: tuple[int, ...], name: str) -> np.ndarray:
    a = np.ascontiguousarray(a, dtype=np.float64)
    if a.shape != shape:
        raise ValueError(f"{name} has shape {a.shape}, expected {shape}")
    return a


def _inputs(packed: PackedModel, background: Any, X: Any, transform: int, x_margin: Any, y: Any,
            bias: Any, interactions: bool) -> tuple:  # fmt: skip
    """The checked rows (float32), margins, labels and bias (float64) of a call."""
    im.check_background(background, packed)
    X = np.ascontiguousarray(X, dtype=np.float32)
    F, G = packed.num_features, packed.num_groups
    if X.ndim != 2 or X.shape[1] != F:
        raise ValueError(f"X must have shape (n_rows, {F}), got {X.shape}")
    if transform not in (0, 1, 2):
        raise ValueError(f"unknown transform {transform}: use 0 (raw), 1 or 2")
    if interactions and transform != 0:
        raise ValueError("interaction values explain the raw margin only (transform 0)")
    n = X.shape[0]
    x_margin = (
        np.zeros((n, G)) if transform == 0 else _float64(x_margin, (n, G), "x_margin")
    )  # fmt: skip
    y = _float64(y, (n,), "y") if transform == 2 else np.zeros(n)
    bias = np.zeros((1, G)) if bias is None else np.ascontiguousarray(bias, dtype=np.float64)
    if bias.ndim != 2 or bias.shape[1] != G or bias.shape[0] not in (1, n):
        raise ValueError(f"bias has shape {bias.shape}, expected (1, {G}) or ({n}, {G})")
    return X, x_margin, y, bias


def interventional_values(
    packed: PackedModel,
    background: Any,
    X: np.ndarray,
    *,
    transform: int = 0,
    x_margin: np.ndarray | None = None,
    y: np.ndarray | None = None,
    bias: np.ndarray | None = None,
    interactions: bool = False,
    max_mask_bits: int = MAX_MASK_BITS,
) -> np.ndarray:
    """Interventional SHAP (or interaction) values of every row of ``X``.

    Parameters
    ----------
    packed : PackedModel
    background : distshap.kernels.interventional_math.Background
        Built for ``packed`` (:func:`distshap.interventional.build_background`).
    X : float32 (n, F)
        :func:`distshap.inputs.prepare_rows` output.
    transform : {0, 1, 2}
        Raw margin, probability, log loss (:func:`distshap.interventional.transform_id`).
    x_margin : float64 (n, G), optional
        Margins of ``X`` (needed when ``transform != 0``).
    y : float64 (n,), optional
        Labels (needed when ``transform == 2``).
    bias : float64 (n, G) or (1, G), optional
        The bias entry (:func:`distshap.interventional.bias_values`); default zeros.
    interactions : bool
        Interaction values (``transform`` 0 only).
    max_mask_bits : int
        Paths with more features are tested row by row (a parameter so tests reach that code).

    Returns
    -------
    ndarray
        float32 ``(n, G, F + 1)`` or ``(n, G, F + 1, F + 1)``, bias last.
    """
    X, x_margin, y, bias = _inputs(packed, background, X, transform, x_margin, y, bias,
                                   interactions)  # fmt: skip
    X = read_only(X)  # one specialisation for read-only and writable rows
    F, G = packed.num_features, packed.num_groups
    n, C = X.shape[0], F + 1
    out = np.empty((n, G, C) + ((C,) if interactions else ()), np.float32)
    if n == 0:
        return out
    R, r_margin = background.rows, background.margin
    B = R.shape[0]
    lengths = np.diff(packed.path_offsets) - 1
    max_len = int(lengths.max()) if lengths.size else 0
    weights = im.weight_tables(max_len)
    n_paths = packed.num_paths
    found = _tables(packed, background, transform, interactions)
    # paths through tables need no masks: one block of every path when all have one
    path_block = max(1, BLOCK_ENTRIES // B) if (found[0] < 0).any() else max(n_paths, 1)
    blocks = [(p0, min(p0 + path_block, n_paths)) for p0 in range(0, n_paths, path_block)]
    if transform != 0 and G != 1:
        raise ValueError(f"transforms explain binary models (one output group), not {G}")
    per_row = 8 * G * C * (C + 1 if interactions else 1)
    row_block = max(1, ACCUMULATOR_BYTES // per_row)
    # rows per parallel task (the bits do not depend on it): a few tasks per thread, and
    # per-task buffers of a mask's values (k, or k * k for interactions) kept small
    width = max(max_len, 1) ** (2 if interactions else 1)
    cap = TABLE_ROWS if bool((found[0] >= 0).all()) else MEMO_ROWS
    block_rows = int(min(cap, max(1, (1 << 19) // width),
                         max(1, -(-n // (4 * numba.get_num_threads())))))  # fmt: skip
    model = _model_args(packed)
    kernel = _kernel_for(bool(max_len > max_mask_bits), bool(interactions), int(transform))
    local = 8 * G * C * block_rows <= LOCAL_BYTES  # a transposed copy of a block's sums
    cached = None
    for r0 in range(0, n, row_block):
        r1 = min(n, r0 + row_block)
        acc_phi = np.zeros((r1 - r0, G, C), np.float64)
        acc_int = np.zeros((r1 - r0, G, C, C) if interactions else (1, 1, 1, 1), np.float64)
        for p0, p1 in blocks:
            if cached is not None:
                tables = cached
            else:
                tables = _background_masks(R, model, packed.path_offsets, p0, p1, max_mask_bits,
                                           found[0])  # fmt: skip
                if len(blocks) == 1:
                    cached = tables
            n_blocks = -(-(r1 - r0) // block_rows)
            run_ranges(kernel, n_blocks, n_blocks, X[r0:r1], x_margin[r0:r1], y[r0:r1], R,
                       r_margin, *model, packed.path_offsets, packed.path_value,
                       packed.path_group, p0, p1, *tables, *found,
                       local and bool((found[0][p0:p1] >= 0).all()), weights, max(max_len, 1),
                       block_rows, acc_phi, acc_int)  # fmt: skip
        row_bias = np.ascontiguousarray(
            np.broadcast_to(bias if bias.shape[0] == 1 else bias[r0:r1], (r1 - r0, G))
        )
        if interactions:
            run_ranges(_finish_interactions, r1 - r0, num_threads(), acc_phi, acc_int, row_bias,
                       out[r0:r1])  # fmt: skip
        else:  # float64 -> float32 SHAP values with the bias column
            acc_phi[:, :, C - 1] = row_bias
            out[r0:r1] = acc_phi
    return out
