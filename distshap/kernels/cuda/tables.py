"""The table kernel: SHAP or interaction values of short paths read from pattern tables.

A row enters a path only through the 0/1 pattern of its one-fractions; the pattern tables
(:mod:`.table_fill`) hold every pattern's values of a short path. The table kernel runs the
bins that hold a table path: one warp per bin, one lane per path element; per row each lane
tests its element, one ``ballot`` gathers the pattern, and each element lane adds its entry
(SHAP values) or its ``k`` entries (interaction values). For SHAP values a row's steps (row
load, ballot, table load, atomic) depend on each other, so a warp takes four rows a step (four
independent chains in flight).

It is bound by its atomics, so a block of ``table_warps_per_block`` bins (the configuration's)
shares a tile of rows in shared memory (``shared_tile_values`` int64 sums, each kept as two
uint32 words added with native 32-bit shared atomics), flushed with one global atomic per
non-zero value (:func:`~distshap.plan.geometry.shared_tile_rows`; outputs too wide for a tile
add to global memory directly). Both sizes are compiled into the kernel. With ``slots``
(:func:`table_kernel`) it adds a row's upper-triangle and diagonal entries to its pair slots
instead (:mod:`distshap.pair_slots`). Entries are truncated to int64 fixed point and added
with integer atomics, so the bits do not depend on the order or the batching.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import cuda

from distshap.kernels.cuda.runtime.args import configured
from distshap.kernels.cuda.runtime.args import launch as launch_kernel
from distshap.kernels.cuda.runtime.device import (
    CAT_OTHER_FLAG,
    FULL_MASK,
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
    follows,
    read_split,
)  # fmt: skip
from distshap.plan.config import get_config
from distshap.plan.geometry import shared_tile_rows

__all__ = ["launch_tables", "table_kernel"]

_LOW = np.int64(0xFFFFFFFF)


def _split_adder(tile_values: int):
    """A device function adding the int64 ``iv`` to tile entry ``i`` kept as two uint32 words:
    ``words[i]`` (lo) and ``words[tile_values + i]`` (hi). The lo add is a native 32-bit shared
    atomic that returns the old word; the hi word takes ``iv``'s high half plus 1 where that
    add wrapped lo around, so ``hi * 2**32 + lo`` is the int64 sum modulo ``2**64`` in any
    order."""

    @cuda.jit(device=True)
    def add_split(words, i, iv):
        lo = np.uint32(iv & _LOW)
        old = cuda.atomic.add(words, i, lo)
        carry = (np.int64(old) + np.int64(lo)) >> 32
        cuda.atomic.add(words, tile_values + i, np.uint32(((iv >> 32) + carry) & _LOW))

    return add_split


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


def _make_table_kernel(shared: bool, slots: bool, shap: bool, rows4: bool, warps: int,
                       tile_values: int):  # fmt: skip
    """The table kernel, accumulating in a shared-memory tile of rows (``shared``: one global
    atomic per output value and block per tile) or in global memory directly; ``shap``: SHAP
    values (one entry a lane and row), else interaction values; ``slots``: interaction values
    into a row's pair slots (:mod:`distshap.pair_slots`) instead of its matrices. ``rows4``
    (SHAP values): four rows a step, their row loads, table loads and atomics issued together
    (a row's steps depend on each other's loads: four independent chains hide their latency);
    the same int64 contributions. A block runs ``warps`` bins; its tile holds ``tile_values``
    sums as two uint32 words each (:func:`_split_adder`), flushed by row and column counters
    instead of an int64 division; the conditioned element's feature (interaction values) is
    shuffled from its lane instead of loaded."""
    split = bool(shared)  # (the tile's words: split uint32 pairs wherever there is a tile)
    shuffle = split and not slots and not SIM  # the conditioned element's feature by shfl
    tile_words = 2 * tile_values  # uint32 words of the tile (its int64 sums' bytes)
    _tile_add = _split_adder(tile_values)

    @cuda.jit(device=True)
    def body(lane_f, lane_i, lane_cat, lane_table, cat_words, tables, bin_offsets, bin_maxk,
             bins, X, acc, scale, rows_per_block, tile_rows, n_cols, path_map,
             lane_map):  # fmt: skip
        tid = cuda.threadIdx.x
        lane = tid & 31
        bi = cuda.blockIdx.x * warps + (tid >> 5)
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
        if split:  # lo words [0, tile_values), hi words after them
            tile = cuda.shared.array(tile_words, np.uint32)
        for t0 in range(r0, r1, tile_rows):
            t1 = t0 + tile_rows
            if t1 > r1:
                t1 = r1
            if split:
                for i in range(tid, (t1 - t0) * width, cuda.blockDim.x):
                    tile[i] = 0
                    tile[tile_values + i] = 0
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
                    v = read_split(tile, i, tile_values)
                    if v != 0:
                        cuda.atomic.add(acc, (t0 + q, j), v)
                    j += dj
                    q += dq
                    if j >= width:
                        j -= width
                        q += 1
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


def table_kernel(shared: bool, slots: bool = False, shap: bool = False, rows4: bool = False,
                 warps: int | None = None, tile_values: int | None = None):  # fmt: skip
    """The table kernel with a shared-memory tile or without: interaction values, or with
    ``shap`` SHAP values (``rows4``: four rows a step); ``slots``: interaction values into pair
    slots. ``warps`` (bins a block) and ``tile_values`` (the tile's int64 sums) are compiled in:
    by default the configuration's ``table_warps_per_block`` and ``shared_tile_values``. Built
    on first use per those values."""
    if shap and slots:
        raise ValueError("pair slots hold interaction values: shap=True takes no slots")
    config = get_config()
    warps = int(config.table_warps_per_block if warps is None else warps)
    tile_values = int(config.shared_tile_values if tile_values is None else tile_values)
    return _table_kernel(bool(shared), bool(slots), bool(shap), bool(shap and rows4), warps,
                         tile_values)  # fmt: skip


@functools.cache
def _table_kernel(shared, slots, shap, rows4, warps, tile_values):
    return _make_table_kernel(shared, slots, shap, rows4, warps, tile_values)


def _rows_per_warp(n_rows: int, n_bins: int) -> int:
    """Rows per warp: at most ``rows_per_warp``, fewer when that leaves the GPU short of warps."""
    target_warps = 16384
    per = -(-n_rows * max(n_bins, 1) // target_warps)
    return int(max(16, min(get_config().rows_per_warp, per)))


def launch_tables(model, plan, Xb, acc, scale, F1, stream, slots=None):
    """Run the table kernel over the table bins of ``plan`` on the batch ``Xb``: SHAP values
    where ``plan.per_pattern == "k"``, else interaction values; ``slots`` (the device model's
    :class:`~.runtime.model.SlotArrays`): interaction values into pair slots. The model's and
    plan's arrays go as read-only hints kept with the model
    (:meth:`~.runtime.model.DeviceModel.read_only`), the launch configuration is kept
    (:func:`~.runtime.args.configured`)."""
    if not plan.n_table_bins:
        return
    shap = plan.per_pattern == "k"
    nb = int(Xb.shape[0])
    tile_rows = shared_tile_rows(acc.shape[1])
    rpb = _rows_per_warp(nb, plan.n_table_bins)
    warps = int(get_config().table_warps_per_block)
    grid = (-(-plan.n_table_bins // warps), -(-nb // rpb))
    kept = model.read_only(("tables", id(plan)), lambda: (
        model.lane_f, model.lane_i, model.lane_cat, plan.lane_table, model.cat_words,
        plan.tables, model.bin_offsets, plan.table_maxk, plan.table_bins,
    ))  # fmt: skip
    rows4 = shap  # SHAP values: four rows a step
    kernel = table_kernel(tile_rows > 0, slots=slots is not None, shap=shap, rows4=rows4,
                          warps=warps)  # fmt: skip
    if slots is None:
        arguments = (*kept, Xb, acc, scale, rpb, tile_rows or rpb, F1)
        launch_kernel(kernel, grid, 32 * warps, stream, 0, arguments)
    else:
        launch = configured(kernel, grid, 32 * warps, stream, 0)
        slot_maps = model.read_only(("table_slots", id(slots)),
                                    lambda: (slots.path_map, slots.lane_map))  # fmt: skip
        launch(*kept, Xb, acc, scale, rpb, tile_rows or rpb, *slot_maps)
