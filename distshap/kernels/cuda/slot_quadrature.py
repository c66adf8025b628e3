"""The pair-slot quadrature kernels: interaction values of regular paths into pair slots.

For top pairs and summaries (:mod:`.pairs`) a row's interaction values go to its pair slots
(:mod:`distshap.pair_slots`) rather than its full matrices. One thread per path of a chunk
(the launch's paths gathered element-major, :mod:`.slot_layout`), one block per (chunk, pair
of rows); a block sums its contributions in a shared-memory tile of the chunk's slots, then
adds each to the rows' slots once (chunks with more slots than a tile holds add to the rows'
slots directly). The float32 operations are every interaction kernel's
(:func:`~distshap.kernels.cuda.interaction_quadrature.pair_steps`), so every int64
contribution equals the full matrices' and, integer addition being associative, so does
every slot, bit for bit.

The tile keeps a slot as two uint32 words, ``lo`` and ``hi`` (a 64-bit shared-memory add is
a compare-and-swap loop, retried for every lane of the warp on the same word): a
contribution ``v = h 2**32 + l`` (``h = v >> 32``, ``0 <= l < 2**32``) adds ``l`` to ``lo``
(a native 32-bit atomic returning the old word) and ``h + carry`` to ``hi``, where
``carry`` is 1 when that add wrapped ``lo`` around. The carries count exactly the wraps of
``lo``, so ``hi 2**32 + lo`` equals the int64 sum modulo ``2**64`` whatever the order, and
since every sum is below ``2**61`` in magnitude the flush reads it back exactly
(:func:`~distshap.kernels.cuda.runtime.device.read_split`).

:func:`split_slot_kernel` walks flat views of the gathered arrays with 32-bit offsets; a
launch whose gathered arrays have ``2**32`` elements or more runs :func:`gathered_slot_kernel`
(int64 indices and int64 tile words; the same contributions, so the same slots).
"""

from __future__ import annotations

import functools
import weakref

import numpy as np
from numba import cuda, types

from distshap.kernels.cuda.interaction_quadrature import pair_steps
from distshap.kernels.cuda.runtime.args import configured
from distshap.kernels.cuda.runtime.device import CAT_OTHER_FLAG, MISSING_FLAG, follows, read_split
from distshap.kernels.cuda.slot_layout import SlotLayout, slot_layout
from distshap.plan.geometry import gauss_legendre, slot_rows_shape

__all__ = [
    "gathered_slot_kernel", "launch_slot_quadrature", "slot_kernel_arrays", "split_slot_kernel",
]  # fmt: skip

_LOW = np.int64(0xFFFFFFFF)
_THREADS = 128  # threads a block


@cuda.jit(device=True)
def _add_split32(words, i, hi_i, iv):
    """Adds the int64 ``iv`` to the split sum (:func:`~.runtime.device.read_split`)
    with lo word ``words[i]`` and hi word ``words[hi_i]``: ``iv``'s low half to lo (a native
    32-bit atomic returning the old word) and its high half to hi, plus 1 where the lo add
    wrapped around (its 32-bit sum below the low half). This module's own copy: under the CUDA
    simulator a device function may use ``cuda.*`` only from its kernel's module."""
    lo = np.uint32(iv & _LOW)
    old = cuda.atomic.add(words, i, lo)
    hi = np.uint32(iv >> 32)
    if np.uint32(old + lo) < lo:
        hi = np.uint32(hi + np.uint32(1))
    cuda.atomic.add(words, hi_i, hi)


def _make_kernel(n_nodes: int, rows: int, cache_x: bool):
    """:func:`split_slot_kernel`. The arithmetic is every interaction kernel's
    (:func:`~distshap.kernels.cuda.interaction_quadrature.pair_steps`, the same calls) and the
    loops the gathered kernel's (:func:`_make_gathered_kernel`): the same float32 operations in
    the same order on the same values, so the same int64 contributions and slots.

    What keeps its integer, index and branch instructions per (element, row) and per (pair,
    row) down (the kernel is bound by instruction issue, mostly integer work):

    * the gathered arrays flat (``ef``, ``ei``: ``[(3 e + q) P + j]``, ``ecat``: ``[e P + j]``,
      ``tmap``: ``[u P + j]``; ``P = pk.shape[0]``), walked with 32-bit running offsets
      (``+ 3P`` an element, ``+ P`` an upper-triangle entry: ``u`` is a counter), so an
      address is an add and a shift, not a 64-bit multiply by the row length with
      negative-index checks (the launcher passes flat views; launches with arrays of
      ``2**32`` elements or more run the gathered kernel, :func:`slot_kernel_arrays`);
    * 32-bit element counters, bit masks shifted once an element (no variable shifts), tile
      indices and the split add's carry in 32 bits;
    * ``follows`` of a numeric element without its categorical branch (``cat < 0`` tested
      once; the category bits read only for a categorical element);
    * each row's ``X`` row (or shared-memory row) offset computed once a row;
    * a block's rows two at a time (rows A and B, ``rows >= 2``; a one-row kernel compiles
      without B): an element's bounds, feature and zero fraction, and a pair's zero fraction
      and tile slot are read once for both rows; each row keeps its own node products and
      masks, and its float32 operations are the one-row kernel's.
    """
    weights = gauss_legendre(n_nodes)[1].astype(np.float32)
    forward, diagonal, pair, _ = pair_steps(n_nodes)
    two = rows >= 2  # rows in pairs (a constant: a one-row block compiles without row B)

    @cuda.jit(device=True)
    def emit(iv, words, acc, use_tile, uhi, i, r, path_map, at):
        """Adds a nonzero contribution ``iv`` of row ``r`` to tile slot ``i`` (the row's slot
        ``path_map[at]`` where the block has no tile)."""
        if iv != 0:
            if not use_tile:
                cuda.atomic.add(acc, (r, path_map[at]), iv)
            else:
                _add_split32(words, i, np.uint32(uhi + i), iv)

    @cuda.jit(cache=True)
    def kernel(ef, ei, ecat, pk, pv, cat_words, chunk_paths, chunk_offsets, tmap, map_offsets,
               path_map, X, acc, scale, row0, tile_offsets, tile_slots, tile_capacity):  # fmt: skip
        tid = cuda.threadIdx.x
        nthreads = cuda.blockDim.x
        ch = cuda.blockIdx.x  # blocks of chunks vary fastest: blocks running together share rows
        r0 = row0 + cuda.blockIdx.y * rows
        nr = X.shape[0] - r0
        if nr > rows:
            nr = rows
        n_features = X.shape[1]
        t0 = tile_offsets[ch]
        width = tile_offsets[ch + 1] - t0
        use_tile = width <= tile_capacity  # the same for the whole block
        words = cuda.shared.array(0, types.uint32)  # lo [rr * width + e], hi after them
        hi_offset = rows * tile_capacity  # in uint32 words
        xs = cuda.shared.array(0, types.float32)  # [x0 + rr * F + f]: the rows, after the tile
        x0 = 2 * rows * tile_capacity
        if use_tile:
            for e in range(tid, nr * width, nthreads):
                words[e] = 0
                words[hi_offset + e] = 0
        if cache_x:
            for e in range(tid, nr * n_features, nthreads):
                q = e // n_features
                xs[x0 + e] = X[r0 + q, e - q * n_features]
        cuda.syncthreads()
        scale32 = np.float32(scale)
        one = np.float32(1.0)
        prod = cuda.local.array(n_nodes, np.float32)  # row A (of a pair of rows)
        usum = cuda.local.array(n_nodes, np.float32)
        part = cuda.local.array(n_nodes, np.float32)
        prod_b = cuda.local.array(n_nodes, np.float32)  # row B
        usum_b = cuda.local.array(n_nodes, np.float32)
        part_b = cuda.local.array(n_nodes, np.float32)
        u1 = np.uint32(1)
        P = np.uint32(pk.shape[0])  # the gathered arrays' row length
        P2 = np.uint32(P + P)
        P3 = np.uint32(P2 + P)
        Q3 = np.uint64(P3)  # (64-bit offsets in the pair loop: fewer instructions there, SASS)
        uwidth = np.uint32(width)
        uhi = np.uint32(hi_offset)
        unf = np.uint32(n_features)
        step = 2 if two else 1
        for j in range(chunk_offsets[ch] + tid, chunk_offsets[ch + 1], nthreads):
            uj = np.uint32(j)
            k = np.uint32(pk[uj])
            value = pv[uj]
            m0 = 0  # without a tile, entry (a, c) of the path adds at path_map[m0 + a * k + c]
            if not use_tile:
                m0 = map_offsets[chunk_paths[uj]]
            rw = np.uint32(0)  # rr * width: row A's tile; row B's is width after it
            xrow = np.uint32(x0)  # x0 + rr * F
            for rr in range(0, nr, step):  # the path's rows two at a time: its data stay in L1
                r = r0 + rr
                has_b = two and rr + 1 < nr  # row B (rr + 1) exists; else it repeats row A
                r_b = r + 1 if has_b else r
                xrow_b = np.uint32(xrow + unf) if has_b else xrow
                xr = X[r]
                xr_b = X[r_b]
                for m in range(n_nodes):
                    prod[m] = value * weights[m]
                    usum[m] = 0
                    if two:
                        prod_b[m] = value * weights[m]
                        usum_b[m] = 0
                bits = np.uint32(0)
                bits_b = np.uint32(0)
                mask = u1
                o = uj  # element e's lower bound at ef[o], upper ef[o + P], zero ef[o + 2P]
                oc = uj  # ecat[oc]
                e = np.uint32(0)
                while e < k:
                    z = ef[np.uint32(o + P2)]
                    f = np.uint32(ei[o])
                    flags = ei[np.uint32(o + P)]
                    cat = ecat[oc]
                    if cache_x:
                        x = xs[np.uint32(xrow + f)]
                        x_b = xs[np.uint32(xrow_b + f)]
                    else:
                        x = xr[f]
                        x_b = xr_b[f]
                    missing = (flags & MISSING_FLAG) != 0
                    other = (flags & CAT_OTHER_FLAG) != 0
                    lower = ef[o]
                    upper = ef[np.uint32(o + P)]
                    if cat < 0:  # numeric: the compiler drops follows' categorical branch here
                        fl = follows(x, lower, upper, missing, other, cat, 0, cat_words)
                        fl_b = follows(x_b, lower, upper, missing, other, cat, 0, cat_words)
                    else:  # (kernel_isa counts the lines marked "categorical" as cold)
                        nbits = ei[np.uint32(o + P2)]  # categorical
                        fl = follows(x, lower, upper, missing, other, cat, nbits,  # categorical
                                     cat_words)  # fmt: skip
                        fl_b = follows(x_b, lower, upper, missing, other, cat,  # categorical
                                       nbits, cat_words)  # fmt: skip
                    d = -z
                    if fl:
                        d = one - z
                        bits = np.uint32(bits | mask)
                    forward(prod, usum, z, d)
                    if two:
                        d_b = -z
                        if fl_b:
                            d_b = one - z
                            bits_b = np.uint32(bits_b | mask)
                        forward(prod_b, usum_b, z, d_b)
                    mask = np.uint32(mask << u1)
                    o = np.uint32(o + P3)
                    oc = np.uint32(oc + P)
                    e = np.uint32(e + u1)
                rw_b = np.uint32(rw + uwidth)
                to = uj  # tmap[to]: entry u of (a, c), u = 0, 1, ... in upper-triangle order
                oa = np.uint64(np.uint32(uj + P2))  # element a's zero fraction
                ma = u1
                a = np.uint32(0)
                while a < k:
                    zi = ef[oa]
                    di = -zi
                    if bits & ma:
                        di = one - zi
                    live = di != 0  # else row A's row and column of a are 0
                    di_b = -zi
                    if bits_b & ma:
                        di_b = one - zi
                    live_b = has_b and di_b != 0
                    if not (live or live_b):
                        to = np.uint32(to + np.uint32(k - a) * P)
                    else:
                        t = np.uint32(tmap[to])
                        at = m0 + np.int64(a * k + a)
                        if live:
                            iv = diagonal(prod, usum, part, zi, di, scale32)
                            emit(iv, words, acc, use_tile, uhi, np.uint32(rw + t), r, path_map,
                                 at)  # fmt: skip
                        if live_b:
                            iv = diagonal(prod_b, usum_b, part_b, zi, di_b, scale32)
                            emit(iv, words, acc, use_tile, uhi, np.uint32(rw_b + t), r_b, path_map,
                                 at)  # fmt: skip
                        to = np.uint32(to + P)
                        oz = oa + Q3
                        mc = np.uint32(ma << u1)
                        c = np.uint32(a + u1)
                        while c < k:
                            zc = ef[oz]
                            t = np.uint32(tmap[to])
                            at = m0 + np.int64(a * k + c)
                            dc = -zc
                            if bits & mc:
                                dc = one - zc
                            if live and dc != 0:
                                iv = pair(part, zc, dc, scale32)
                                emit(iv, words, acc, use_tile, uhi, np.uint32(rw + t), r, path_map,
                                     at)  # fmt: skip
                            dc_b = -zc
                            if bits_b & mc:
                                dc_b = one - zc
                            if live_b and dc_b != 0:
                                iv = pair(part_b, zc, dc_b, scale32)
                                emit(iv, words, acc, use_tile, uhi, np.uint32(rw_b + t), r_b,
                                     path_map, at)  # fmt: skip
                            to = np.uint32(to + P)
                            oz = oz + Q3
                            mc = np.uint32(mc << u1)
                            c = np.uint32(c + u1)
                    oa = oa + Q3
                    ma = np.uint32(ma << u1)
                    a = np.uint32(a + u1)
                rw = np.uint32(rw_b + uwidth) if two else rw_b
                xrow = np.uint32(xrow + unf + unf) if two else np.uint32(xrow + unf)
        cuda.syncthreads()
        if use_tile:
            for e in range(tid, nr * width, nthreads):
                iv = read_split(words, e, hi_offset)
                if iv != 0:
                    q = e // width
                    cuda.atomic.add(acc, (r0 + q, tile_slots[t0 + e - q * width]), iv)

    return kernel


@functools.cache
def split_slot_kernel(n_nodes: int, rows: int, cache_x: bool):
    """The slot quadrature kernel for ``n_nodes`` nodes, ``rows`` rows a block, the rows'
    features in shared memory (``cache_x``) or read from ``X``; built on first use, compiled
    at launch.

    Launch: grid ``(blocks, ceil(rows of X / rows))``, 128 threads, ``8 rows tile_capacity``
    bytes of dynamic shared memory (plus ``4 rows F`` with ``cache_x``), on a
    :class:`~distshap.kernels.cuda.slot_layout.SlotLayout`'s arrays as flat views
    (:func:`slot_kernel_arrays`).
    """
    return _make_kernel(int(n_nodes), int(rows), bool(cache_x))


def _make_gathered_kernel(n_nodes: int, rows: int, cache_x: bool):
    """:func:`gathered_slot_kernel`: one thread per path of the chunk, ``rows`` rows a block,
    each path's rows one after another while its data sit in L1, int64 indices and int64
    shared-memory words; the arithmetic is
    :func:`~distshap.kernels.cuda.interaction_quadrature.pair_steps`'s."""
    weights = gauss_legendre(n_nodes)[1].astype(np.float32)
    forward, diagonal, pair, _ = pair_steps(n_nodes)

    @cuda.jit(cache=True)
    def kernel(ef, ei, ecat, pk, pv, cat_words, chunk_paths, chunk_offsets, tmap, map_offsets,
               path_map, X, acc, scale, row0, tile_offsets, tile_slots, tile_capacity):  # fmt: skip
        tid = cuda.threadIdx.x
        nthreads = cuda.blockDim.x
        ch = cuda.blockIdx.x  # chunks vary fastest: blocks running together share rows (L2)
        r0 = row0 + cuda.blockIdx.y * rows
        nr = X.shape[0] - r0
        if nr > rows:
            nr = rows
        n_features = X.shape[1]
        t0 = tile_offsets[ch]
        width = tile_offsets[ch + 1] - t0
        use_tile = width <= tile_capacity  # the same for the whole block
        tile = cuda.shared.array(0, types.int64)  # [rr * width + e]: the rows' tiles
        xs = cuda.shared.array(0, types.float32)  # [x0 + rr * F + f]: the rows, after them
        x0 = 2 * rows * tile_capacity
        if use_tile:
            for e in range(tid, nr * width, nthreads):
                tile[e] = 0
        if cache_x:
            for e in range(tid, nr * n_features, nthreads):
                q = e // n_features
                xs[x0 + e] = X[r0 + q, e - q * n_features]
        cuda.syncthreads()
        scale32 = np.float32(scale)
        one = np.float32(1.0)
        prod = cuda.local.array(n_nodes, np.float32)
        usum = cuda.local.array(n_nodes, np.float32)
        part = cuda.local.array(n_nodes, np.float32)
        for j in range(chunk_offsets[ch] + tid, chunk_offsets[ch + 1], nthreads):
            k = pk[j]
            value = pv[j]
            m0 = 0  # without a tile, entry (a, c) of the path adds at path_map[m0 + a * k + c]
            if not use_tile:
                m0 = map_offsets[chunk_paths[j]]
            for rr in range(nr):  # the path's rows one after another: its data stay in L1
                r = r0 + rr
                for m in range(n_nodes):
                    prod[m] = value * weights[m]
                    usum[m] = 0
                bits = np.uint32(0)
                for e in range(k):
                    z = ef[3 * e + 2, j]
                    d = -z
                    f = ei[3 * e, j]
                    if cache_x:
                        x = xs[x0 + rr * n_features + f]
                    else:
                        x = X[r, f]
                    flags = ei[3 * e + 1, j]
                    if follows(x, ef[3 * e, j], ef[3 * e + 1, j], (flags & MISSING_FLAG) != 0,
                               (flags & CAT_OTHER_FLAG) != 0, ecat[e, j], ei[3 * e + 2, j],
                               cat_words):  # fmt: skip
                        d = one - z
                        bits |= np.uint32(1) << np.uint32(e)
                    forward(prod, usum, z, d)
                u0 = 0  # entry number of (a, a)
                for a in range(k):
                    zi = ef[3 * a + 2, j]
                    di = -zi
                    if (bits >> np.uint32(a)) & np.uint32(1):
                        di = one - zi
                    if di == 0:
                        u0 += k - a
                        continue  # its row and column are 0
                    iv = diagonal(prod, usum, part, zi, di, scale32)
                    if iv != 0:
                        if use_tile:
                            cuda.atomic.add(tile, rr * width + tmap[u0, j], iv)
                        else:
                            cuda.atomic.add(acc, (r, path_map[m0 + a * k + a]), iv)
                    for c in range(a + 1, k):
                        zc = ef[3 * c + 2, j]
                        dc = -zc
                        if (bits >> np.uint32(c)) & np.uint32(1):
                            dc = one - zc
                        if dc == 0:
                            continue
                        iv = pair(part, zc, dc, scale32)
                        if iv != 0:
                            u = u0 + c - a
                            if use_tile:
                                cuda.atomic.add(tile, rr * width + tmap[u, j], iv)
                            else:
                                cuda.atomic.add(acc, (r, path_map[m0 + a * k + c]), iv)
                    u0 += k - a
        cuda.syncthreads()
        if use_tile:
            for e in range(tid, nr * width, nthreads):
                iv = tile[e]
                if iv != 0:
                    q = e // width
                    cuda.atomic.add(acc, (r0 + q, tile_slots[t0 + e - q * width]), iv)

    return kernel


@functools.cache
def gathered_slot_kernel(n_nodes: int, rows: int, cache_x: bool):
    """The slot quadrature kernel for launches too large for :func:`split_slot_kernel`'s
    32-bit offsets (:func:`slot_kernel_arrays`), on a layout's 2-D arrays; launched as that
    kernel. Built on first use, compiled at launch."""
    return _make_gathered_kernel(int(n_nodes), int(rows), bool(cache_x))


def _flat(a):
    return a.reshape(int(np.prod(a.shape)))


_FLAT: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # layout -> (flat views,)


def slot_kernel_arrays(lay: SlotLayout) -> tuple | None:
    """``(ef, ei, ecat, tmap)`` of ``lay`` as the flat views :func:`split_slot_kernel` takes
    (no copy; made once per layout and kept while it lives), or ``None`` where an array has
    ``2**32`` elements or more (the kernel's offsets are 32-bit: ``tmap`` is
    ``(k (k + 1) / 2, P)`` for ``P`` paths of at most ``k`` features, so ``k = 31`` reaches it
    at 8.7M paths in one launch); such a launch runs :func:`gathered_slot_kernel` on the 2-D
    arrays.
    """
    try:
        hit = _FLAT.get(lay)
    except TypeError:  # an object without weak references: made each time
        hit = None
    if hit is None:
        arrays = (lay.ef, lay.ei, lay.ecat, lay.tmap)
        flat = None
        if all(int(np.prod(a.shape)) < 2**32 for a in arrays):
            flat = tuple(_flat(a) for a in arrays)
        hit = (flat,)
        try:
            _FLAT[lay] = hit
        except TypeError:
            pass
    return hit[0]


def _kept_arrays(model, launch, lay: SlotLayout, slots, flat) -> tuple:
    """The model's, layout's and slots' arrays of a slot quadrature launch as read-only hints
    kept with the model (:meth:`~.runtime.model.DeviceModel.read_only`), with the layout's
    ``flat`` views (:func:`slot_kernel_arrays`) or, for ``None``, its 2-D arrays: those before
    the rows, and the tile arrays after them."""

    def arrays() -> tuple:
        ef, ei, ecat, tmap = (lay.ef, lay.ei, lay.ecat, lay.tmap) if flat is None else flat
        return (ef, ei, ecat, lay.pk, lay.pv, model.cat_words, launch.paths, lay.offsets, tmap,
                slots.map_offsets, slots.path_map, lay.tile_offsets, lay.tile_slots)  # fmt: skip

    kept = model.read_only(("slot_quadrature", id(lay), flat is None), arrays)
    return kept[:11], kept[11:]


def launch_slot_quadrature(model, plan, Xb, acc, scale, stream, slots) -> None:
    """The quadrature launches of ``plan`` (the interaction plan) into pair slots on the batch
    ``Xb``, adding to ``acc``; ``slots`` is the device model's
    :class:`~distshap.kernels.cuda.runtime.model.SlotArrays`. Launch configurations and the
    layouts' flat views are kept."""
    nb, n_features = int(Xb.shape[0]), int(Xb.shape[1])
    layouts = slot_layout(model, plan, slots, stream)
    for launch, lay in zip(plan.quadrature, layouts, strict=True):
        rows, cache_x, capacity = slot_rows_shape(n_features, lay.most)
        shared_bytes = 8 * rows * capacity + (4 * rows * n_features if cache_x else 0)
        flat = slot_kernel_arrays(lay)
        if flat is None:  # 32-bit offsets too short: int64 indices
            run = gathered_slot_kernel(launch.n_nodes, rows, cache_x)
        else:
            run = split_slot_kernel(launch.n_nodes, rows, cache_x)
        kept, tiles = _kept_arrays(model, launch, lay, slots, flat)
        per_launch = 65535 * rows  # grid.y is at most 65535
        for row0 in range(0, nb, per_launch):
            grid = (lay.n_blocks, -(-min(nb - row0, per_launch) // rows))
            configured(run, grid, _THREADS, stream, shared_bytes)(
                *kept, Xb, acc, scale, row0, *tiles, capacity
            )  # fmt: skip
