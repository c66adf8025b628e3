"""Pattern tables: every pattern's SHAP or interaction values of a short path, on the device.

A row enters a path only through the 0/1 pattern of its one-fractions, so a path of ``k``
features has ``2**k`` possible results. The tables hold them all, filled on the device by one
thread per (path, pattern) in float64 and stored as float32; the device model keeps them.

* SHAP tables (the paths of :func:`distshap.kernels.cuda.model._shap_table_offsets`): entry
  ``[pattern * k + i]`` is ``phi_i`` of feature element ``i`` (0-based, after the bias lane)
  when bit ``i`` of ``pattern`` says whether the row follows element ``i``, computed by
  Gauss-Legendre quadrature (``ceil(k / 2)`` nodes, exact) in the order of the CPU backend's
  :func:`distshap.kernels.quadrature_cpu.fill_tables` (:func:`fill_shap_tables`).
* Interaction tables (:func:`distshap.kernels.cuda.model.interaction_table_offsets`): the float64 DP
  (paper §3.5: condition on each element ``c`` of the path, on minus off, halved) stores ``k x
  k`` entries (:func:`fill_interaction_tables`). Entry ``[(pattern * k + c) * k + i]`` is, for
  ``c != i``, half the interaction of ``i`` and ``c`` (added at ``[feature_c, feature_i]``) and,
  for ``c == i``, the diagonal ``phi_i - sum_c`` of those halves.

The table kernel runs the bins that hold a table path: one warp per bin, one lane per path
element; per row each lane tests its element, one ``ballot`` gathers the pattern, and each
element lane adds its entry (SHAP values) or its ``k`` entries (interaction values). For SHAP
values a row's steps (row load, ballot, table load, atomic) depend on each other, so a warp
takes four rows a step (four independent chains in flight).
It is bound by its atomics, so a block of :data:`config.TABLE_WARPS_PER_BLOCK` bins shares a tile of
rows in shared memory, flushed with one global atomic per non-zero value
(:func:`shared_tile_rows`; outputs too wide for a tile add to global memory directly). With
``slots`` (:func:`table_kernel`) it adds a row's upper-triangle and diagonal entries to its pair
slots instead (:mod:`distshap.pair_slots`). Entries are truncated to int64 fixed point and
added with integer atomics, so the bits do not depend on the order or the batching.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from distshap.kernels.cuda import config
from distshap.kernels.cuda.args import configured
from distshap.kernels.cuda.device import (
    CAT_OTHER_FLAG,
    FULL_MASK,
    LD_VALUE,
    LD_ZERO,
    LF_LOWER,
    LF_UPPER,
    LI_FEATURE,
    LI_FEATURES,
    LI_FLAGS,
    LI_GROUP,
    LI_NBITS,
    LI_POSITION,
    LI_START,
    MISSING_FLAG,
    SIM,
    ballot,
    extend_path,
    follows,
    read_split,
    unwound_sum,
    xp,
)  # fmt: skip
from distshap.kernels.taylor_cpu import gauss_legendre_table, node_count
from distshap.plan.config import get_config
from distshap.plan.geometry import SHAP_TABLE_MAX_FEATURES, shared_tile_rows

__all__ = [
    "fill_interaction_tables",
    "fill_kernel",
    "fill_shap_tables",
    "launch_tables",
    "shap_fill_kernel",
    "table_kernel",
    "TILE_WORDS",
]

# Frozen at import: the kernels are compiled with these sizes, so the host side uses them too.
TABLE_MAX_FEATURES = config.INTERACTION_TABLE_MAX_FEATURES
_MAXF1 = TABLE_MAX_FEATURES + 1
_MAXF2 = TABLE_MAX_FEATURES + 2
_TILE_VALUES = config.SHARED_TILE_VALUES
_TILE_WORDS = 2 * _TILE_VALUES  # uint32 words of a split tile (the same bytes)
_TABLE_WARPS = config.TABLE_WARPS_PER_BLOCK
#: Longest path with a SHAP table: :func:`distshap.plan.tables.choose_tables` allows no more, and
#: the SHAP fill kernel's local arrays have this size.
_SHAP_MAXF = SHAP_TABLE_MAX_FEATURES


@cuda.jit(cache=True)
def fill_kernel(lane_d, path_offsets, paths, offsets, tables):
    """One thread per (table path, pattern): that pattern's ``k x k`` interaction entries."""
    pattern = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    j = cuda.blockIdx.y
    p = paths[j]
    s0 = path_offsets[p]
    k = path_offsets[p + 1] - s0 - 1
    if pattern >= (1 << k):
        return
    base = offsets[j] + pattern * k * k
    w = cuda.local.array(_MAXF2, np.float64)
    one = cuda.local.array(_MAXF1, np.float64)
    zero = cuda.local.array(_MAXF1, np.float64)
    diag = cuda.local.array(_MAXF1, np.float64)
    v = lane_d[s0, LD_VALUE]
    for i in range(1, k + 1):
        zero[i] = lane_d[s0 + i, LD_ZERO]
        one[i] = np.float64((pattern >> (i - 1)) & 1)
        diag[i] = 0.0
    depth = 0
    for c in range(0, k + 1):
        scale_c = 1.0 if c == 0 else 0.5 * (one[c] - zero[c])
        if scale_c != 0.0:
            depth = extend_path(w, zero, one, 1, k + 1, c)
        for i in range(1, k + 1):
            if i == c:
                continue
            phi = 0.0
            if scale_c != 0.0 and one[i] != zero[i]:
                phi = unwound_sum(w, depth, zero[i], one[i]) * (one[i] - zero[i]) * v * scale_c
            if c == 0:
                diag[i] += phi
            else:
                diag[i] -= phi
                tables[base + (c - 1) * k + i - 1] = np.float32(phi)
    for i in range(1, k + 1):
        tables[base + (i - 1) * k + i - 1] = np.float32(diag[i])


def fill_interaction_tables(lane_d, path_offsets, lengths: np.ndarray, offsets: np.ndarray,
                            stream):  # fmt: skip
    """Fill the interaction tables of the paths with ``offsets >= 0`` on the device.

    ``lane_d`` and ``path_offsets`` are the device model's arrays; ``lengths`` (features per
    path) and ``offsets`` (:func:`distshap.kernels.cuda.model.interaction_table_offsets`) host
    arrays.
    Returns ``(tables, n_values)``. The stream is synchronized before returning: the tables
    serve later calls on any stream or thread.
    """
    chosen = np.flatnonzero(offsets >= 0)
    k = lengths[chosen]
    total = int(((np.int64(1) << k) * k * k).sum())
    tables = xp().zeros(max(total, 1), dtype=np.float32)
    keep = []  # device temporaries stay alive until the fill kernels are done
    for j0 in range(0, chosen.size, 65535):  # grid.y is at most 65535
        part = chosen[j0 : j0 + 65535]
        keep.append((cuda.to_device(part.astype(np.int32)), cuda.to_device(offsets[part])))
        tpb = 64
        grid = (-(-(1 << int(k[j0 : j0 + 65535].max())) // tpb), int(part.size))
        fill_kernel[grid, tpb, stream](lane_d, path_offsets, keep[-1][0], keep[-1][1], tables)
    if not SIM:
        stream.synchronize()
    return tables, total


@cuda.jit(cache=True)
def shap_fill_kernel(lane_d, path_offsets, paths, offsets, k, gl_t, gl_w, tables):
    """One thread per (table path of ``k`` features, pattern): that pattern's ``k`` SHAP values.

    ``phi_i = v d_i sum_q w_q prod_{j < i} (z_j + t_q d_j) prod_{j > i} (z_j + t_q d_j)`` with
    ``d_j = o_j - z_j``, over the ``ceil(k / 2)``-node rule of ``gl_t`` / ``gl_w``
    (:func:`distshap.kernels.taylor_cpu.gauss_legendre_table`), in float64.
    """
    n_patterns = np.int64(1) << k
    total = paths.shape[0] * n_patterns
    pre = cuda.local.array(_SHAP_MAXF, np.float64)
    phi = cuda.local.array(_SHAP_MAXF, np.float64)
    d = cuda.local.array(_SHAP_MAXF, np.float64)
    m = (k + 1) // 2  # the m-node rule sits at [m (m - 1) / 2, m (m + 1) / 2)
    start = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    for t in range(start, total, cuda.gridDim.x * cuda.blockDim.x):
        j = t >> k
        pattern = t - (j << k)
        s0 = path_offsets[paths[j]] + 1  # the first feature element (after the bias lane)
        v = lane_d[s0 - 1, LD_VALUE]
        for i in range(k):
            d[i] = np.float64((pattern >> i) & 1) - lane_d[s0 + i, LD_ZERO]
            phi[i] = 0.0
        for q in range(m * (m - 1) // 2, m * (m + 1) // 2):
            tq = gl_t[q]
            pre[0] = gl_w[q] * v
            for i in range(1, k):  # pre[i] = w v prod_{j < i} (z_j + t d_j)
                pre[i] = pre[i - 1] * (lane_d[s0 + i - 1, LD_ZERO] + tq * d[i - 1])
            suf = 1.0
            for i in range(k - 1, -1, -1):  # suf = prod_{j > i} (z_j + t d_j)
                phi[i] += pre[i] * suf
                suf *= lane_d[s0 + i, LD_ZERO] + tq * d[i]
        base = offsets[j] + pattern * k
        for i in range(k):
            tables[base + i] = np.float32(phi[i] * d[i])


def fill_shap_tables(lane_d, path_offsets, lengths: np.ndarray, offsets: np.ndarray, stream):
    """Fill the SHAP tables of the paths with ``offsets >= 0`` on the device.

    ``lane_d`` and ``path_offsets`` are the device model's arrays; ``lengths`` (features per
    path) and ``offsets`` (:func:`distshap.plan.tables.choose_tables` with ``"k"`` values a
    pattern) host arrays. Paths of one length run in one launch (a thread per (path, pattern),
    none idle). Returns ``(tables, n_values)``; the stream is synchronized before returning.
    """
    chosen = np.flatnonzero(offsets >= 0)
    k_all = lengths[chosen]
    if k_all.size and int(k_all.max()) > SHAP_TABLE_MAX_FEATURES:
        raise ValueError(
            f"a SHAP table path has {int(k_all.max())} features; the fill kernel handles at "
            f"most {SHAP_TABLE_MAX_FEATURES}: lower max_table_features"
        )
    total = int(((np.int64(1) << k_all) * k_all).sum())
    tables = xp().zeros(max(total, 1), dtype=np.float32)
    if not chosen.size:
        return tables, total
    gl_t, gl_w = (cuda.to_device(np.array(a, np.float64))  # a writable copy of the cached rules
                  for a in gauss_legendre_table(node_count(int(k_all.max()))))  # fmt: skip
    keep = [gl_t, gl_w]  # device temporaries stay alive until the fill kernels are done
    tpb = 128
    for k in np.unique(k_all).tolist():
        part = chosen[k_all == k]
        keep.append((cuda.to_device(part.astype(np.int32)), cuda.to_device(offsets[part])))
        blocks = int(min(-(-(part.size << k) // tpb), 65535))
        shap_fill_kernel[blocks, tpb, stream](lane_d, path_offsets, keep[-1][0], keep[-1][1],
                                              k, gl_t, gl_w, tables)  # fmt: skip
    if not SIM:
        stream.synchronize()
    return tables, total


_LOW = np.int64(0xFFFFFFFF)
#: Values of :data:`config.TABLE_TILE_WORDS` (read at launch time).
TILE_WORDS = ("int64", "split")


@cuda.jit(device=True)
def _add_split(words, i, iv):
    """Adds the int64 ``iv`` to tile entry ``i`` kept as two uint32 words: ``words[i]`` (lo)
    and ``words[_TILE_VALUES + i]`` (hi). The lo add is a native 32-bit shared atomic that
    returns the old word; the hi word takes ``iv``'s high half plus 1 where that add wrapped lo
    around, so ``hi * 2**32 + lo`` is the int64 sum modulo ``2**64`` in any order."""
    lo = np.uint32(iv & _LOW)
    old = cuda.atomic.add(words, i, lo)
    carry = (np.int64(old) + np.int64(lo)) >> 32
    cuda.atomic.add(words, _TILE_VALUES + i, np.uint32(((iv >> 32) + carry) & _LOW))


@cuda.jit(device=True)
def _shfl(value, src):
    """``cuda.shfl_sync`` over the full warp, as a device function (see ``ballot``). Not under
    the simulator, whose warps do not run in step: there the kernels load the same value."""
    return cuda.shfl_sync(FULL_MASK, value, src)


@cuda.jit(device=True)
def _lane_setup(lane_i, bin_offsets, b, lane):
    """Row-independent constants of this lane of bin ``b`` (unused lanes: no path)."""
    base = bin_offsets[b]
    valid = lane < bin_offsets[b + 1] - base
    li = base + lane if valid else base
    feat = lane_i[li, LI_FEATURE] if valid else -1
    pos = lane_i[li, LI_POSITION] if valid else 0
    start = lane_i[li, LI_START] if valid else lane
    k = lane_i[li, LI_FEATURES] if valid else 0
    return li, valid, feat, pos, start, k


@cuda.jit(device=True)
def _row_range(rows_per_block, n_rows):
    """Rows ``[r0, r1)`` of this block's row range (``blockIdx.y``)."""
    r0 = cuda.blockIdx.y * rows_per_block
    r1 = r0 + rows_per_block
    if r1 > n_rows:
        r1 = n_rows
    return r0, r1


def _make_table_kernel(shared: bool, slots: bool = False, shap: bool = False, rows4: bool = False,
                       split: bool = False):  # fmt: skip
    """The table kernel, accumulating in a shared-memory tile of rows (``shared``: one global
    atomic per output value and block per tile) or in global memory directly; ``shap``: SHAP
    values (one entry a lane and row), else interaction values; ``slots``: interaction values
    into a row's pair slots (:mod:`distshap.pair_slots`) instead of its matrices. ``rows4``
    (SHAP values): four rows a step, their row loads, table loads and atomics issued together
    (a row's steps depend on each other's loads: four independent chains hide their latency);
    the same int64 contributions. ``split`` (:data:`config.TABLE_TILE_WORDS` ``"split"``): the
    tile's sums as two uint32 words (:func:`_add_split`), flushed by row and column counters
    instead of an int64 division, and the conditioned element's feature (interaction values)
    shuffled from its lane instead of loaded; the same int64 contributions and sums."""
    split = bool(split and shared)
    shuffle = split and not slots and not SIM  # the conditioned element's feature by shfl

    if split:
        _tile_add = _add_split
    else:

        @cuda.jit(device=True)
        def _tile_add(tile, i, iv):
            cuda.atomic.add(tile, i, iv)

    @cuda.jit(device=True)
    def body(lane_f, lane_i, lane_cat, lane_table, cat_words, tables, bin_offsets, bin_maxk,
             bins, X, acc, scale, rows_per_block, tile_rows, n_cols, path_map,
             lane_map):  # fmt: skip
        tid = cuda.threadIdx.x
        lane = tid & 31
        bi = cuda.blockIdx.x * _TABLE_WARPS + (tid >> 5)
        live = bi < bins.shape[0]
        if not shared and not live:
            return  # warp-uniform; with a shared tile every warp takes part in the barriers
        b = bins[bi] if live else bins[0]
        li, valid, feat, pos, start, k = _lane_setup(lane_i, bin_offsets, b, lane)
        valid = valid and live
        group = lane_i[li, LI_GROUP]
        flags = lane_i[li, LI_FLAGS]
        missing = (flags & MISSING_FLAG) != 0
        cat_other = (flags & CAT_OTHER_FLAG) != 0
        nbits = lane_i[li, LI_NBITS]
        lower = lane_f[li, LF_LOWER]
        upper = lane_f[li, LF_UPPER]
        cat_offset = lane_cat[li]
        toff = lane_table[li]
        active = valid and pos >= 1 and toff >= 0
        maxk = bin_maxk[b] if live else 0
        mask_k = (np.int64(1) << k) - 1
        scale32 = np.float32(scale)
        width = acc.shape[1]
        if slots:  # slot of entry (c, pos - 1) of the lane's path: path_map[mbase + c * k]
            mbase = lane_map[li] + pos - 1 if active else 0
        r0, r1 = _row_range(rows_per_block, X.shape[0])
        if split:  # lo words [0, _TILE_VALUES), hi words after them: the same 32 KiB
            tile = cuda.shared.array(_TILE_WORDS, np.uint32)
        elif shared:
            tile = cuda.shared.array(_TILE_VALUES, np.int64)
        for t0 in range(r0, r1, tile_rows):
            t1 = t0 + tile_rows
            if t1 > r1:
                t1 = r1
            if split:
                for i in range(tid, (t1 - t0) * width, cuda.blockDim.x):
                    tile[i] = 0
                    tile[_TILE_VALUES + i] = 0
                cuda.syncthreads()
            elif shared:
                for i in range(tid, (t1 - t0) * width, cuda.blockDim.x):
                    tile[i] = 0
                cuda.syncthreads()
            if rows4:  # (a constant) SHAP values, rows t0 .. t1 - 1 four at a time
                for r in range(t0, t1, 4):
                    m = t1 - r  # rows left in the tile: the same for the whole block
                    o0 = o1 = o2 = o3 = False
                    if active:
                        o0 = follows(X[r, feat], lower, upper, missing, cat_other, cat_offset,
                                     nbits, cat_words)  # fmt: skip
                        if m > 1:
                            o1 = follows(X[r + 1, feat], lower, upper, missing, cat_other,
                                         cat_offset, nbits, cat_words)  # fmt: skip
                        if m > 2:
                            o2 = follows(X[r + 2, feat], lower, upper, missing, cat_other,
                                         cat_offset, nbits, cat_words)  # fmt: skip
                        if m > 3:
                            o3 = follows(X[r + 3, feat], lower, upper, missing, cat_other,
                                         cat_offset, nbits, cat_words)  # fmt: skip
                    b0 = np.int64(ballot(FULL_MASK, o0))
                    b1 = np.int64(ballot(FULL_MASK, o1))
                    b2 = np.int64(ballot(FULL_MASK, o2))
                    b3 = np.int64(ballot(FULL_MASK, o3))
                    if active:
                        sh = start + 1
                        at = toff + pos - 1
                        zero32 = np.float32(0.0)
                        v0 = tables[at + ((b0 >> sh) & mask_k) * k]
                        v1 = tables[at + ((b1 >> sh) & mask_k) * k] if m > 1 else zero32
                        v2 = tables[at + ((b2 >> sh) & mask_k) * k] if m > 2 else zero32
                        v3 = tables[at + ((b3 >> sh) & mask_k) * k] if m > 3 else zero32
                        i0 = np.int64(v0 * scale32)
                        i1 = np.int64(v1 * scale32)
                        i2 = np.int64(v2 * scale32)
                        i3 = np.int64(v3 * scale32)
                        e = group * n_cols + feat
                        if shared:
                            q = (r - t0) * width + e
                            if i0 != 0:
                                _tile_add(tile, q, i0)
                            if i1 != 0:
                                _tile_add(tile, q + width, i1)
                            if i2 != 0:
                                _tile_add(tile, q + 2 * width, i2)
                            if i3 != 0:
                                _tile_add(tile, q + 3 * width, i3)
                        else:
                            if i0 != 0:
                                cuda.atomic.add(acc, (r, e), i0)
                            if i1 != 0:
                                cuda.atomic.add(acc, (r + 1, e), i1)
                            if i2 != 0:
                                cuda.atomic.add(acc, (r + 2, e), i2)
                            if i3 != 0:
                                cuda.atomic.add(acc, (r + 3, e), i3)
            for r in range(t0, t0 if rows4 else t1):
                o = False
                if active:
                    o = follows(X[r, feat], lower, upper, missing, cat_other, cat_offset, nbits,
                                cat_words)  # fmt: skip
                bal = np.int64(ballot(FULL_MASK, o))
                pattern = (bal >> (start + 1)) & mask_k
                if shap:  # (a constant: the branch not taken is pruned at compile time)
                    if active:
                        iv = np.int64(tables[toff + pattern * k + pos - 1] * scale32)
                        if iv != 0:
                            e = group * n_cols + feat
                            if shared:
                                _tile_add(tile, (r - t0) * width + e, iv)
                            else:
                                cuda.atomic.add(acc, (r, e), iv)
                    continue
                entry = toff + pattern * k * k + pos - 1
                first = li - pos + 1  # lane of the path's first feature element
                for c in range(maxk):  # the conditioned element
                    if shuffle:  # (every lane: maxk is the same for the warp)
                        fc = _shfl(feat, lane - pos + 1 + c if active and c < k else lane)
                    if active and c < k:
                        if not slots and not shuffle:
                            fc = lane_i[first + c, LI_FEATURE]
                        iv = np.int64(tables[entry + c * k] * scale32)
                        if slots:  # the upper triangle (c < pos - 1) and the diagonal only
                            e = path_map[mbase + c * k] if c < pos else -1
                            if e < 0:
                                iv = 0
                        else:
                            e = (group * n_cols + fc) * n_cols + feat  # c == i: diagonal
                        if iv != 0:
                            if shared:
                                _tile_add(tile, (r - t0) * width + e, iv)
                            else:
                                cuda.atomic.add(acc, (r, e), iv)
            if split:
                cuda.syncthreads()
                nthreads = cuda.blockDim.x
                q = tid // width  # entry i = q * width + j, stepped without a division
                j = tid - q * width
                dq = nthreads // width
                dj = nthreads - dq * width
                for i in range(tid, (t1 - t0) * width, nthreads):
                    v = read_split(tile, i, _TILE_VALUES)
                    if v != 0:
                        cuda.atomic.add(acc, (t0 + q, j), v)
                    j += dj
                    q += dq
                    if j >= width:
                        j -= width
                        q += 1
                cuda.syncthreads()
            elif shared:
                cuda.syncthreads()
                for i in range(tid, (t1 - t0) * width, cuda.blockDim.x):
                    v = tile[i]
                    if v != 0:
                        q = i // width
                        cuda.atomic.add(acc, (t0 + q, i - q * width), v)
                cuda.syncthreads()

    if slots:

        @cuda.jit(cache=True)
        def slot_kernel(lane_f, lane_i, lane_cat, lane_table, cat_words, tables, bin_offsets,
                        bin_maxk, bins, X, acc, scale, rows_per_block, tile_rows, path_map,
                        lane_map):  # fmt: skip
            body(lane_f, lane_i, lane_cat, lane_table, cat_words, tables, bin_offsets, bin_maxk,
                 bins, X, acc, scale, rows_per_block, tile_rows, 0, path_map, lane_map)  # fmt: skip

        return slot_kernel

    @cuda.jit(cache=True)
    def kernel(lane_f, lane_i, lane_cat, lane_table, cat_words, tables, bin_offsets, bin_maxk,
               bins, X, acc, scale, rows_per_block, tile_rows, n_cols):  # fmt: skip
        body(lane_f, lane_i, lane_cat, lane_table, cat_words, tables, bin_offsets, bin_maxk,
             bins, X, acc, scale, rows_per_block, tile_rows, n_cols, bins, bins)  # fmt: skip

    return kernel


_table_kernels: dict = {}


def table_kernel(shared: bool, slots: bool = False, shap: bool = False, rows4: bool = False,
                 split: bool = False):  # fmt: skip
    """The table kernel with a shared-memory tile or without: interaction values, or with
    ``shap`` SHAP values (``rows4``: four rows a step); ``slots``: the interaction variant
    writing pair slots; ``split``: the tile as split uint32 words (:func:`_make_table_kernel`;
    no effect without a tile). Built on first use."""
    if shap and slots:
        raise ValueError("pair slots hold interaction values: shap=True takes no slots")
    key = (bool(shared), bool(slots), bool(shap), bool(shap and rows4), bool(split and shared))
    kernel = _table_kernels.get(key)
    if kernel is None:
        kernel = _table_kernels[key] = _make_table_kernel(*key)
    return kernel


def _rows_per_warp(n_rows: int, n_bins: int) -> int:
    """Rows per warp: at most ROWS_PER_WARP, fewer when that leaves the GPU short of warps."""
    target_warps = 16384
    per = -(-n_rows * max(n_bins, 1) // target_warps)
    return int(max(16, min(get_config().rows_per_warp, per)))


def launch_tables(model, plan, Xb, acc, scale, F1, stream, slots=None):
    """Run the table kernel over the table bins of ``plan`` on the batch ``Xb``: SHAP values
    where ``plan.per_pattern == "k"``, else interaction values; ``slots`` (the device model's
    :class:`~distshap.kernels.cuda.model.SlotArrays`): interaction values into pair slots."""
    if not plan.n_table_bins:
        return
    shap = plan.per_pattern == "k"
    nb = int(Xb.shape[0])
    tile_rows = shared_tile_rows(acc.shape[1])
    rpb = _rows_per_warp(nb, plan.n_table_bins)
    grid = (-(-plan.n_table_bins // _TABLE_WARPS), -(-nb // rpb))
    args = (
        model.lane_f, model.lane_i, model.lane_cat, plan.lane_table, model.cat_words,
        plan.tables, model.bin_offsets, plan.table_maxk, plan.table_bins, Xb, acc, scale, rpb,
        tile_rows or rpb,
    )  # fmt: skip
    rows4 = shap  # SHAP values: four rows a step
    words = config.TABLE_TILE_WORDS
    if words not in TILE_WORDS:
        raise ValueError(f"config.TABLE_TILE_WORDS must be one of {TILE_WORDS}, got {words!r}")
    kernel = table_kernel(tile_rows > 0, slots=slots is not None, shap=shap, rows4=rows4,
                          split=words == "split")  # fmt: skip
    launch = configured(kernel, grid, 32 * _TABLE_WARPS, stream)
    if slots is None:
        launch(*args, F1)
    else:
        launch(*args, slots.path_map, slots.lane_map)
