"""Slot quadrature kernels with 32-bit shared-memory sums, and paths spread over a warp.

The gathered slot kernel (:func:`distshap.kernels.cuda.quadrature.slot_rows_kernel`) sums a
block's contributions in a shared-memory tile of int64 words. Two things there cost more than
the arithmetic, and this module's kernels change only those (the float32 operations are the
gathered kernel's, in the same order on the same values, so every int64 contribution is the
same and, integer addition being associative, so is every slot, bit for bit):

* **64-bit shared atomics.** The GPU adds 32-bit words in shared memory natively; an int64
  add there is, as far as we know (not checked in SASS here), a compare-and-swap loop, retried
  once for every other lane of the warp that hit the same word. Here (``"split"``,
  ``"spread"``) a slot is two uint32 words, ``lo`` and ``hi``: a contribution ``v = h 2**32 +
  l`` (``h = v >> 32``, ``0 <= l < 2**32``) adds ``l`` to ``lo`` (a native 32-bit atomic
  returning the old word) and ``h + carry`` to ``hi``, where ``carry`` is 1 when that add
  wrapped ``lo`` around. The carries count exactly the wraps of ``lo``, so ``hi 2**32 + lo``
  equals the int64 sum modulo ``2**64`` whatever the order, and since every sum is below
  ``2**61`` in magnitude (:mod:`distshap.kernels.cuda.model`) the flush reads it back
  exactly: ``hi`` as a signed 32-bit number times ``2**32``, plus ``lo``. Same bytes a slot
  (8), same tiles.
* **Lanes that hit the same slot.** A launch's paths are in tree order, so the 32 paths of a
  warp are mostly sibling leaves sharing all but their last feature: at a given element pair
  many lanes add to the same slot (fashion_mnist-med: the largest number of lanes on one slot
  averages 7.4 over a warp's pair steps). ``"spread"`` (and ``"spread64"``, with the int64
  words, to tell the two effects apart) reorders each block's positions so that the lanes of a
  warp take paths ``n / 32`` apart in the block (``n``: its paths; 4.2 lanes on a slot on
  that model). Each block keeps its paths and its tile; only which thread runs a path changes.

The kernel walks flat views of the gathered arrays with 32-bit offsets, which keeps its
integer, index and branch instructions per element and pair down (:func:`split_slot_kernel`);
a launch whose gathered arrays have ``2**32`` elements or more runs the gathered kernel
instead (the same contributions, so the same slots).

Switch with :data:`distshap.kernels.cuda.config.SLOT_QUADRATURE_VARIANT` (one of
:data:`VARIANTS`); :func:`launch_slot_quadrature` runs these and hands every other value to
:func:`~distshap.kernels.cuda.quadrature.launch_quadrature`. The blocks, tiles and gathered
arrays are the gathered kernel's (:func:`~distshap.kernels.cuda.quadrature.slot_layout`).
"""

from __future__ import annotations

import threading
import weakref

import numpy as np
from numba import cuda, types

from distshap.kernels.cuda import config
from distshap.kernels.cuda.device import CAT_OTHER_FLAG, MISSING_FLAG, SIM, follows, read_split
from distshap.kernels.cuda.quadrature import (
    SlotLayout,
    launch_quadrature,
    pair_steps,
    slot_layout,
    slot_rows_kernel,
)  # fmt: skip
from distshap.plan.geometry import gauss_legendre, slot_rows_shape

__all__ = [
    "MODES", "VARIANTS", "add_split", "launch_slot_quadrature", "read_split",
    "slot_kernel_arrays", "spread_layout", "spread_order", "split_slot_kernel",
]  # fmt: skip

#: Values of :data:`config.SLOT_QUADRATURE_VARIANT` this module runs (module docstring).
VARIANTS = ("split", "spread", "spread64")
#: Accumulation modes of :func:`split_slot_kernel`: int64 words, split uint32 words, or the
#: probe (every contribution and tile slot number folded into one register, written once:
#: all the work but the atomics; wrong slots, benchmarks only).
MODES = ("int64", "split", "probe")

_LOW = np.int64(0xFFFFFFFF)
_THREADS = 128  # threads a block (as the gathered kernel)
_PROBE_NEVER = np.int64(-(2**62) + 54321)  # no fold of contributions is expected to equal it


@cuda.jit(device=True)
def add_split(words, i, hi_offset, iv):
    """Adds the int64 ``iv`` to slot ``i`` kept as ``words[i]`` (lo) and ``words[hi_offset +
    i]`` (hi), two uint32 words (module docstring; read back by
    :func:`~distshap.kernels.cuda.device.read_split`)."""
    _add_split32(words, i, hi_offset + i, iv)


@cuda.jit(device=True)
def _add_split32(words, i, hi_i, iv):
    """Adds the int64 ``iv`` to the split sum (:func:`~distshap.kernels.cuda.device.read_split`)
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


def _make_kernel(n_nodes: int, rows: int, cache_x: bool, mode: str):
    """:func:`split_slot_kernel`. The arithmetic is every interaction kernel's
    (:func:`distshap.kernels.cuda.quadrature.pair_steps`, the same calls) and the loops the
    gathered kernel's (:func:`distshap.kernels.cuda.quadrature.slot_rows_kernel`): the same
    float32 operations in the same order on the same values, so the same int64 contributions
    and slots; the adds to the tile differ (``mode``).

    How it keeps the integer, index and branch instructions per (element, row) and per (pair,
    row) down (issue #16; the kernel is issue-bound on integer work; ``benchmarks/kernel_isa.py``
    counts them):

    * the gathered arrays flat (``ef``, ``ei``: ``[(3 e + q) P + j]``, ``ecat``: ``[e P + j]``,
      ``tmap``: ``[u P + j]``; ``P = pk.shape[0]``), walked with 32-bit running offsets
      (``+ 3P`` an element, ``+ P`` an upper-triangle entry: ``u`` is a counter), so an
      address is an add and a shift, not a 64-bit multiply by the row length with
      negative-index checks (the launcher passes flat views; launches with arrays of
      ``2**32`` elements or more run the gathered kernel, :func:`slot_kernel_arrays`);
    * 32-bit element counters, bit masks shifted once an element (no variable shifts), tile
      indices and :func:`add_split`'s carry in 32 bits;
    * ``follows`` of a numeric element without its categorical branch (``cat < 0`` tested
      once; the category bits read only for a categorical element);
    * each row's ``X`` row (or shared-memory row) offset computed once a row;
    * a block's rows two at a time (rows A and B, ``rows >= 2``; a one-row kernel compiles
      without B): an element's bounds, feature and zero fraction, and a pair's zero fraction
      and tile slot are read once for both rows; each row keeps its own node products and
      masks, and its float32 operations are the one-row kernel's. On one H200
      (fashion_mnist-med top pairs, 20k rows) the work without the atomics (``"probe"``) fell
      from 0.399 to 0.355 s; the shared atomics then set the pace, and with one chunk a block
      (:data:`config.SLOT_QUADRATURE_CHUNKS`) the kernel took 0.419 s against 0.512 s.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    weights = gauss_legendre(n_nodes)[1].astype(np.float32)
    forward, diagonal, pair, _ = pair_steps(n_nodes)
    split = mode == "split"
    probe = mode == "probe"
    two = rows >= 2  # rows in pairs (a constant: a one-row block compiles without row B)

    @cuda.jit(device=True)
    def emit(fold, iv, t, words, tile, acc, use_tile, uhi, i, r, path_map, at):
        """Adds a nonzero contribution ``iv`` of row ``r`` to tile slot ``i`` (the row's slot
        ``path_map[at]`` where the block has no tile); the probe folds it and the slot number
        ``t`` into ``fold`` instead. Returns ``fold``."""
        if iv != 0:
            if probe:
                fold += iv + t
            elif not use_tile:
                cuda.atomic.add(acc, (r, path_map[at]), iv)
            elif split:
                _add_split32(words, i, np.uint32(uhi + i), iv)
            else:
                cuda.atomic.add(tile, i, iv)
        return fold

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
        tile = cuda.shared.array(0, types.int64)  # [rr * width + e] (int64 words)
        words = cuda.shared.array(0, types.uint32)  # lo [rr * width + e], hi after them
        hi_offset = rows * tile_capacity  # in uint32 words
        xs = cuda.shared.array(0, types.float32)  # [x0 + rr * F + f]: the rows, after the tile
        x0 = 2 * rows * tile_capacity
        if use_tile:
            for e in range(tid, nr * width, nthreads):
                if split:
                    words[e] = 0
                    words[hi_offset + e] = 0
                else:
                    tile[e] = 0
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
        fold = np.int64(0)  # probe only
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
                            fold = emit(fold, iv, t, words, tile, acc, use_tile, uhi,
                                        np.uint32(rw + t), r, path_map, at)  # fmt: skip
                        if live_b:
                            iv = diagonal(prod_b, usum_b, part_b, zi, di_b, scale32)
                            fold = emit(fold, iv, t, words, tile, acc, use_tile, uhi,
                                        np.uint32(rw_b + t), r_b, path_map, at)  # fmt: skip
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
                                fold = emit(fold, iv, t, words, tile, acc, use_tile, uhi,
                                            np.uint32(rw + t), r, path_map, at)  # fmt: skip
                            dc_b = -zc
                            if bits_b & mc:
                                dc_b = one - zc
                            if live_b and dc_b != 0:
                                iv = pair(part_b, zc, dc_b, scale32)
                                fold = emit(fold, iv, t, words, tile, acc, use_tile, uhi,
                                            np.uint32(rw_b + t), r_b, path_map, at)  # fmt: skip
                            to = np.uint32(to + P)
                            oz = oz + Q3
                            mc = np.uint32(mc << u1)
                            c = np.uint32(c + u1)
                    oa = oa + Q3
                    ma = np.uint32(ma << u1)
                    a = np.uint32(a + u1)
                rw = np.uint32(rw_b + uwidth) if two else rw_b
                xrow = np.uint32(xrow + unf + unf) if two else np.uint32(xrow + unf)
        if probe and fold == _PROBE_NEVER:
            tile[0] = fold  # never taken, but the compiler cannot know: all the work stays
        cuda.syncthreads()
        if use_tile and not probe:
            for e in range(tid, nr * width, nthreads):
                if split:
                    iv = read_split(words, e, hi_offset)
                else:
                    iv = tile[e]
                if iv != 0:
                    q = e // width
                    cuda.atomic.add(acc, (r0 + q, tile_slots[t0 + e - q * width]), iv)

    return kernel


_KERNELS: dict = {}


def split_slot_kernel(n_nodes: int, rows: int, cache_x: bool, mode: str = "split"):
    """The slot quadrature kernel of this module for ``n_nodes`` nodes, ``rows`` rows a block,
    the rows' features in shared memory (``cache_x``) or read from ``X``, adding in ``mode``
    (:data:`MODES`); built on first use, compiled at launch.

    Launch as the gathered kernel: grid ``(blocks, ceil(rows of X / rows))``, 128 threads,
    ``8 rows tile_capacity`` bytes of dynamic shared memory (plus ``4 rows F`` with
    ``cache_x``), on a :class:`~distshap.kernels.cuda.quadrature.SlotLayout`'s arrays as flat
    views (:func:`slot_kernel_arrays`).
    """
    key = (int(n_nodes), int(rows), bool(cache_x), mode)
    kernel = _KERNELS.get(key)
    if kernel is None:
        kernel = _KERNELS[key] = _make_kernel(int(n_nodes), int(rows), bool(cache_x), mode)
    return kernel


def _flat(a):
    return a.reshape(int(np.prod(a.shape)))


def slot_kernel_arrays(lay: SlotLayout) -> tuple | None:
    """``(ef, ei, ecat, tmap)`` of ``lay`` as the flat views :func:`split_slot_kernel` takes
    (no copy), or ``None`` where an array has ``2**32`` elements or more (the kernel's offsets
    are 32-bit: ``tmap`` is ``(k (k + 1) / 2, P)`` for ``P`` paths of at most ``k`` features,
    so ``k = 31`` reaches it at 8.7M paths in one launch). :func:`launch_slot_quadrature` runs
    the gathered kernel (:func:`~distshap.kernels.cuda.quadrature.slot_rows_kernel`, int64
    indices; the same contributions) on such a launch's 2-D arrays.
    """
    arrays = (lay.ef, lay.ei, lay.ecat, lay.tmap)
    if all(int(np.prod(a.shape)) < 2**32 for a in arrays):
        return tuple(_flat(a) for a in arrays)
    return None


def spread_order(n: int, lanes: int = 32) -> np.ndarray:
    """The order of a block's ``n`` positions for ``"spread"``: position ``q`` of the result
    runs the block's original position ``order[q]``; the ``lanes`` consecutive positions of a
    warp take originals ``ceil(n / lanes)`` apart (original ``l G + g``, ``G = ceil(n /
    lanes)``, goes to place ``g lanes + l``, gaps closed). A permutation of ``0..n-1``."""
    n = int(n)
    if n <= 0:
        return np.zeros(0, np.int64)
    G = -(-n // lanes)
    orig = np.arange(n, dtype=np.int64)
    key = (orig % G) * lanes + orig // G
    return np.argsort(key, kind="stable")


class _Spread:
    """A launch's :class:`SlotLayout` with positions reordered within each block, and the
    launch's paths in that order."""

    __slots__ = ("layout", "paths")

    def __init__(self, layout: SlotLayout, paths):
        self.layout, self.paths = layout, paths


_SPREAD: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def _host(a) -> np.ndarray:
    return a.copy_to_host() if hasattr(a, "copy_to_host") else np.asarray(a)


def spread_layout(model, plan, slots, stream, merge: int) -> tuple:
    """The gathered layouts (:func:`~distshap.kernels.cuda.quadrature.slot_layout`) of the
    launches of ``plan``, each block's positions in :func:`spread_order`, with each launch's
    paths in the new order (kept as long as the device model's ``slots``)."""
    base = slot_layout(model, plan, slots, stream, merge)
    with _LOCK:
        per_slots = _SPREAD.setdefault(slots, {})
        hit = per_slots.get(merge)
        if hit is not None:
            return hit
        out = []
        for launch, lay in zip(plan.quadrature, base, strict=True):
            offsets = _host(lay.offsets).astype(np.int64)
            perm = np.arange(int(_host(lay.pk).size), dtype=np.int64)
            for b in range(offsets.size - 1):
                o0, o1 = int(offsets[b]), int(offsets[b + 1])
                perm[o0:o1] = o0 + spread_order(o1 - o0)
            paths = _host(launch.paths)
            new_paths = paths[perm[: paths.size]] if paths.size else paths

            def moved(a, perm=perm):
                h = _host(a)
                return cuda.to_device(np.ascontiguousarray(h[..., perm]), stream=stream)

            new = SlotLayout(
                ef=moved(lay.ef), ei=moved(lay.ei), ecat=moved(lay.ecat), pk=moved(lay.pk),
                pv=moved(lay.pv), tmap=moved(lay.tmap), kmax=lay.kmax, offsets=lay.offsets,
                tile_offsets=lay.tile_offsets, tile_slots=lay.tile_slots,
                n_blocks=lay.n_blocks, most=lay.most,
            )  # fmt: skip
            paths_dev = cuda.to_device(
                np.ascontiguousarray(new_paths if new_paths.size else np.zeros(1, paths.dtype)),
                stream=stream,
            )
            out.append(_Spread(new, paths_dev))
        if not SIM:
            stream.synchronize()  # the layouts serve later calls on any stream
        out = tuple(out)
        per_slots[merge] = out
        return out


def launch_slot_quadrature(model, plan, Xb, acc, scale, F1, stream, slots,
                           probe: bool = False) -> None:  # fmt: skip
    """The quadrature launches of ``plan`` into pair slots (``slots``: the device model's
    :class:`~distshap.kernels.cuda.model.SlotArrays`) on the batch ``Xb``, adding to ``acc``.

    With :data:`config.SLOT_QUADRATURE_VARIANT` in :data:`VARIANTS` this module's kernel runs
    (``"split"``: gathered order, split words; ``"spread"``: spread order, split words;
    ``"spread64"``: spread order, int64 words); any other value goes to
    :func:`~distshap.kernels.cuda.quadrature.launch_quadrature`, which checks it. ``probe``:
    the timing diagnostic (wrong values; this module's variants only). A launch whose gathered
    arrays have ``2**32`` elements or more runs the gathered kernel on them
    (:func:`slot_kernel_arrays`): the same slots.
    """
    variant = config.SLOT_QUADRATURE_VARIANT
    if variant not in VARIANTS:
        if probe:
            raise ValueError(f"probe runs the variants {VARIANTS} only, not {variant!r}")
        launch_quadrature(model, plan, Xb, acc, scale, F1, stream, True, slots=slots)
        return
    merge = config.SLOT_QUADRATURE_CHUNKS
    if variant == "split":
        runs = [(lay, launch.paths) for launch, lay in
                zip(plan.quadrature, slot_layout(model, plan, slots, stream, merge),
                    strict=True)]  # fmt: skip
    else:
        runs = [(s.layout, s.paths) for s in spread_layout(model, plan, slots, stream, merge)]
    mode = "probe" if probe else ("int64" if variant == "spread64" else "split")
    nb, n_features = int(Xb.shape[0]), int(Xb.shape[1])
    for launch, (lay, paths) in zip(plan.quadrature, runs, strict=True):
        rows, cache_x, capacity = slot_rows_shape(n_features, lay.most)
        shared_bytes = 8 * rows * capacity + (4 * rows * n_features if cache_x else 0)
        flat = slot_kernel_arrays(lay)
        if flat is None:  # 32-bit offsets too short: the gathered kernel (int64 words)
            ef, ei, ecat, tmap = lay.ef, lay.ei, lay.ecat, lay.tmap
            run = slot_rows_kernel(launch.n_nodes, rows, cache_x, probe)
        else:
            ef, ei, ecat, tmap = flat
            run = split_slot_kernel(launch.n_nodes, rows, cache_x, mode)
        per_launch = 65535 * rows  # grid.y is at most 65535
        for row0 in range(0, nb, per_launch):
            grid = (lay.n_blocks, -(-min(nb - row0, per_launch) // rows))
            run[grid, _THREADS, stream, shared_bytes](
                ef, ei, ecat, lay.pk, lay.pv, model.cat_words, paths, lay.offsets, tmap,
                slots.map_offsets, slots.path_map, Xb, acc, scale, row0, lay.tile_offsets,
                lay.tile_slots, capacity,
            )  # fmt: skip
