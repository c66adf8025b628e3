"""Interaction tables into pair slots, summed per block in a shared-memory tile of its slots.

The table kernel (:mod:`.tables`) writing pair slots adds every upper-triangle and diagonal
entry of its paths to the row's slots with one global atomic each when a row's slots are too
many for its shared-memory tile of rows (wide multiclass models: ``S`` slots a row). Here, as
the quadrature kernel's chunk tiles do (:func:`~distshap.kernels.cuda.model.chunk_tiles`), the
host numbers the distinct slots that each block's bins touch (:func:`block_tiles`: the same
feature pairs recur on the paths of one block), the block sums its rows' entries in a tile of
those slots and adds each non-zero sum to the row once. The entries are the table kernel's own
(``int64(table entry * 2**s)``, the same loads and the same float32 product), so the slots hold
the same integers, bit for bit; only their grouping before the integer additions differs.
:data:`config.SLOT_TABLE_VARIANT` picks this kernel (``"tiled"``), the same with each
tile slot kept as two uint32 words (``"split"``: native 32-bit shared atomics instead of the
int64 ones, a compare-and-swap loop; :mod:`.slot_quadrature` says how the words hold the exact
int64 sum), or the table kernel (``"plain"``).
"""

from __future__ import annotations

import threading
import weakref

import numpy as np
from numba import cuda, types

from distshap.kernels.cuda import config
from distshap.kernels.cuda.device import (
    CAT_OTHER_FLAG,
    FULL_MASK,
    LF_LOWER,
    LF_UPPER,
    LI_FLAGS,
    LI_NBITS,
    MISSING_FLAG,
    ballot,
    follows,
    read_split,
)  # fmt: skip
from distshap.kernels.cuda.tables import (
    _TABLE_WARPS,
    _lane_setup,
    _row_range,
    _rows_per_warp,
    launch_tables,
)  # fmt: skip
from distshap.plan.config import get_config

__all__ = [
    "VARIANTS", "BlockTiles", "block_tiles", "launch_slot_tables", "slot_table_kernel",
    "split_slot_table_kernel",
]  # fmt: skip

#: Values of :data:`config.SLOT_TABLE_VARIANT` (module docstring).
VARIANTS = ("tiled", "split", "plain")

#: Shared memory of a block's tile of rows at most (bytes).
_TILE_BYTES = 40 * 1024


class BlockTiles:
    """Block-local slot numbers of a model's table paths (:func:`block_tiles`), on the device.

    ``tmap`` is laid out as ``path_map``: the block-local number of each upper or diagonal
    entry of a table path (-1 elsewhere); block ``b`` (bins ``table_bins[W b : W (b + 1)]``)
    touches the slots ``tile_slots[tile_offsets[b]:tile_offsets[b + 1]]``; ``most`` is the
    largest of those counts.
    """

    __slots__ = ("tmap", "tile_offsets", "tile_slots", "most", "__weakref__")

    def __init__(self, tmap, tile_offsets, tile_slots, most: int):
        self.tmap, self.tile_offsets, self.tile_slots, self.most = (
            tmap, tile_offsets, tile_slots, most,
        )  # fmt: skip


def block_tiles(
    packed, slots, lane_table: np.ndarray, table_bins: np.ndarray, warps: int = _TABLE_WARPS
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Host arrays of :class:`BlockTiles`: ``(tmap, tile_offsets, tile_slots, most)``.

    ``lane_table`` is the interaction plan's table offset of each lane (-1: no table),
    ``table_bins`` its bins holding a table path, ``warps`` bins a block; ``slots`` the host
    :class:`~distshap.pair_slots.PairSlots` of ``packed``.
    """
    bins = np.asarray(table_bins, np.int64)
    n_blocks = -(-bins.size // warps)
    tmap = np.full(max(slots.path_map.size, 1), -1, np.int32)
    bo = np.asarray(packed.bin_offsets, np.int64)
    po = np.asarray(packed.path_offsets, np.int64)
    size = bo[bins + 1] - bo[bins]
    li = np.repeat(bo[bins] - np.cumsum(size) + size, size) + np.arange(int(size.sum()))
    blk = np.repeat(np.arange(bins.size, dtype=np.int64) // warps, size)
    p = np.asarray(packed.lane_path, np.int64)[li]
    pos = li - po[p]  # 0: the bias lane; element i = pos - 1
    keep = (pos >= 1) & (np.asarray(lane_table)[li] >= 0)
    p, pos, blk = p[keep], pos[keep], blk[keep]
    k = po[p + 1] - po[p] - 1
    # entries (c, i) with c <= i = pos - 1: map index map_offsets[p] + c k + i
    c = np.arange(int(pos.sum()), dtype=np.int64) - np.repeat(np.cumsum(pos) - pos, pos)
    at = np.repeat(slots.map_offsets[p] + pos - 1, pos) + np.repeat(k, pos) * c
    of = np.repeat(blk, pos)
    slot = slots.path_map[at].astype(np.int64)
    S = max(slots.num_slots, 1)
    keys = np.unique(of * S + slot)  # per block, its distinct slots in increasing order
    starts = np.searchsorted(keys, np.arange(n_blocks + 1, dtype=np.int64) * S)
    tmap[at] = (np.searchsorted(keys, of * S + slot) - starts[of]).astype(np.int32)
    most = int(np.diff(starts).max(initial=0))
    return tmap, starts.astype(np.int64), (keys % S).astype(np.int64), most


_LOW = np.int64(0xFFFFFFFF)


# :func:`~distshap.kernels.cuda.slot_quadrature.add_split` again: under the CUDA simulator a
# device function may only use ``cuda.*`` from its kernel's own module (the simulator swaps that
# module's ``cuda`` per call, which races between simulated threads). The sums are read back by
# :func:`~distshap.kernels.cuda.device.read_split`, which uses no ``cuda.*``.
@cuda.jit(device=True)
def _add_split(words, i, hi_offset, iv):
    """Adds ``iv`` to slot ``i`` kept as uint32 words ``lo = words[i]``, ``hi = words[hi_offset
    + i]`` (:mod:`.slot_quadrature`)."""
    lo = np.uint32(iv & _LOW)
    old = cuda.atomic.add(words, i, lo)
    carry = (np.int64(old) + np.int64(lo)) >> 32  # 1 where this add wrapped lo around
    cuda.atomic.add(words, hi_offset + i, np.uint32(((iv >> 32) + carry) & _LOW))


def _make_slot_table_kernel(split: bool):
    """:func:`slot_table_kernel` (``split``: the tile's slots as two uint32 words each,
    :func:`~distshap.kernels.cuda.slot_quadrature.add_split`; else int64 words)..

    One warp per table bin, :data:`_TABLE_WARPS` bins a block, ``rows_per_block`` rows in
    tiles of ``tile_rows``; a block whose bins touch at most ``tile_capacity`` slots sums them
    in shared memory (``8 tile_rows tile_capacity`` dynamic bytes), the others add directly;
    with ``cache_x`` the tile's rows of ``X`` sit in shared memory too (``4 tile_rows F`` more
    bytes): a warp's lanes read 32 scattered features of a row."""

    @cuda.jit(cache=True)
    def kernel(lane_f, lane_i, lane_cat, lane_table, cat_words, tables, bin_offsets, bins, X,
               acc, scale, rows_per_block, tile_rows, lane_map, path_map, tmap, tile_offsets,
               tile_slots, tile_capacity, cache_x):  # fmt: skip
        tid = cuda.threadIdx.x
        lane = tid & 31
        bi = cuda.blockIdx.x * _TABLE_WARPS + (tid >> 5)
        live = bi < bins.shape[0]  # dead warps still take part in the barriers
        b = bins[bi] if live else bins[0]
        li, valid, feat, pos, start, k = _lane_setup(lane_i, bin_offsets, b, lane)
        valid = valid and live
        flags = lane_i[li, LI_FLAGS]
        missing = (flags & MISSING_FLAG) != 0
        cat_other = (flags & CAT_OTHER_FLAG) != 0
        nbits = lane_i[li, LI_NBITS]
        lower = lane_f[li, LF_LOWER]
        upper = lane_f[li, LF_UPPER]
        cat_offset = lane_cat[li]
        toff = lane_table[li]
        active = valid and pos >= 1 and toff >= 0
        n_entries = pos if active else 0  # entries (c, pos - 1), c < pos: upper triangle + diagonal
        mask_k = (np.int64(1) << k) - 1
        scale32 = np.float32(scale)
        mbase = lane_map[li] + pos - 1 if active else 0  # entry (c, pos - 1): mbase + c * k
        t0s = tile_offsets[cuda.blockIdx.x]
        width = tile_offsets[cuda.blockIdx.x + 1] - t0s
        use_tile = width <= tile_capacity  # the same for the whole block
        tile = cuda.shared.array(0, types.int64)  # [(r - t0) * width + local slot]
        words = cuda.shared.array(0, types.uint32)  # split: lo [(r - t0) * width + e], then hi
        hi_offset = tile_rows * tile_capacity  # in uint32 words
        xs = cuda.shared.array(0, types.float32)  # [x0 + (r - t0) * F + f], after the tile
        x0 = 2 * tile_rows * tile_capacity
        n_features = X.shape[1]
        r0, r1 = _row_range(rows_per_block, X.shape[0])
        for t0 in range(r0, r1, tile_rows):
            t1 = t0 + tile_rows
            if t1 > r1:
                t1 = r1
            if use_tile:
                for i in range(tid, (t1 - t0) * width, cuda.blockDim.x):
                    if split:
                        words[i] = 0
                        words[hi_offset + i] = 0
                    else:
                        tile[i] = 0
            if cache_x:
                for i in range(tid, (t1 - t0) * n_features, cuda.blockDim.x):
                    q = i // n_features
                    xs[x0 + i] = X[t0 + q, i - q * n_features]
            cuda.syncthreads()
            for r in range(t0, t1):
                o = False
                if active:
                    if cache_x:
                        x = xs[x0 + (r - t0) * n_features + feat]
                    else:
                        x = X[r, feat]
                    o = follows(x, lower, upper, missing, cat_other, cat_offset, nbits, cat_words)
                bal = np.int64(ballot(FULL_MASK, o))
                pattern = (bal >> (start + 1)) & mask_k
                entry = toff + pattern * k * k + pos - 1
                for c in range(n_entries):  # the conditioned element
                    iv = np.int64(tables[entry + c * k] * scale32)
                    if iv != 0:
                        if use_tile and split:
                            _add_split(words, (r - t0) * width + tmap[mbase + c * k], hi_offset,
                                       iv)  # fmt: skip
                        elif use_tile:
                            cuda.atomic.add(tile, (r - t0) * width + tmap[mbase + c * k], iv)
                        else:
                            cuda.atomic.add(acc, (r, path_map[mbase + c * k]), iv)
            cuda.syncthreads()
            if use_tile:
                for i in range(tid, (t1 - t0) * width, cuda.blockDim.x):
                    if split:
                        v = read_split(words, i, hi_offset)
                    else:
                        v = tile[i]
                    if v != 0:
                        q = i // width
                        cuda.atomic.add(acc, (t0 + q, tile_slots[t0s + i - q * width]), v)
            cuda.syncthreads()

    return kernel


#: The tiled table kernel into pair slots (int64 words), and with split uint32 words.
slot_table_kernel = _make_slot_table_kernel(False)
split_slot_table_kernel = _make_slot_table_kernel(True)


_TILES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def _host(a) -> np.ndarray:
    return a.copy_to_host() if hasattr(a, "copy_to_host") else np.asarray(a)


def _device_tiles(packed, slots, plan, dev) -> BlockTiles:
    """:class:`BlockTiles` of the device slots ``dev`` (built on first use, kept with them)."""
    with _LOCK:
        hit = _TILES.get(dev)
        if hit is None:
            bins = _host(plan.table_bins)[: plan.n_table_bins]
            tmap, offsets, tile_slots, most = block_tiles(
                packed, slots, _host(plan.lane_table), bins, _TABLE_WARPS
            )
            hit = _TILES[dev] = BlockTiles(
                cuda.to_device(tmap), cuda.to_device(offsets),
                cuda.to_device(tile_slots if tile_slots.size else np.zeros(1, np.int64)), most,
            )  # fmt: skip
        return hit


def launch_slot_tables(packed, slots, model, plan, Xb, acc, scale, F1, stream, dev) -> None:
    """The table paths of ``plan`` into pair slots on the batch ``Xb``: this module's kernel
    with :data:`config.SLOT_TABLE_VARIANT` ``"tiled"`` (int64 words) or ``"split"`` (split
    uint32 words), the table kernel with ``"plain"``.

    ``slots`` is the host :class:`~distshap.pair_slots.PairSlots`, ``dev`` the device model's
    :class:`~distshap.kernels.cuda.model.SlotArrays`.
    """
    variant = config.SLOT_TABLE_VARIANT
    if variant not in VARIANTS:
        raise ValueError(f"config.SLOT_TABLE_VARIANT must be one of {VARIANTS}, got {variant!r}")
    if variant == "plain":
        launch_tables(model, plan, Xb, acc, scale, F1, stream, slots=dev)
        return
    if not plan.n_table_bins:
        return
    tiles = _device_tiles(packed, slots, plan, dev)
    nb = int(Xb.shape[0])
    n_features = int(Xb.shape[1])
    capacity = min(tiles.most, _TILE_BYTES // 8)
    cache_x = 8 * capacity + 4 * n_features <= _TILE_BYTES and 4 * n_features <= _TILE_BYTES // 2
    per_row = 8 * capacity + (4 * n_features if cache_x else 0)
    tile_rows = max(1, min(get_config().tile_rows, _TILE_BYTES // max(per_row, 1)))
    rpb = _rows_per_warp(nb, plan.n_table_bins)
    grid = (-(-plan.n_table_bins // _TABLE_WARPS), -(-nb // rpb))
    kernel = split_slot_table_kernel if variant == "split" else slot_table_kernel
    kernel[grid, 32 * _TABLE_WARPS, stream, tile_rows * per_row](
        model.lane_f, model.lane_i, model.lane_cat, plan.lane_table, model.cat_words,
        plan.tables, model.bin_offsets, plan.table_bins, Xb, acc, scale, rpb, tile_rows,
        dev.lane_map, dev.path_map, tiles.tmap, tiles.tile_offsets, tiles.tile_slots, capacity,
        cache_x,
    )  # fmt: skip
