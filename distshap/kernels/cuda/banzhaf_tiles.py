"""Banzhaf (interaction) values on the GPU (Numba CUDA): lanes staged in shared-memory tiles,
two rows a thread; the path-dependent game by the product form, the interventional one by
pattern tables and background masks.

**Path-dependent game: the product form**, O(k) per path and row. With uniform coalition
weights a path's Banzhaf value of its element ``i`` factorises: for the one-fractions ``o_j``
(does the row follow element ``j``) and zero fractions ``z_j``, ``phi_i = v d_i prod_{j != i}
f_j`` with ``f_j = (o_j + z_j) / 2`` and ``d_j = o_j - z_j``. Let ``P = v prod_j f_j``; then
``phi_i = P q_i`` with ``q_i = d_i / f_i``: ``-2`` where the row does not follow element ``i``,
``2 (1 - z_i) / (1 + z_i)`` (computed on the host) where it does. Where ``f_i = 0`` (``o_i =
z_i = 0``) ``d_i`` is 0 too, and ``P = 0`` gives the right 0. So a thread forms ``P`` while it
tests the path's elements (one multiply each) and adds ``P q_i`` to each element's column: no
tables, no prefix arrays, no division. ``P`` and the sums are float64: a contribution is
``k + 2`` roundings from exact (about ``1e-15`` relative; the GPU fuses the last multiply into
the sum's add). Interaction values: ``P q_i q_j`` at ``[i, j]`` and ``[j, i]``, and on the
diagonal ``P q_i - sum_{j != i} P q_i q_j = P q_i (1 - Q + q_i)`` with ``Q = sum_j q_j``.

**Interventional game** (:func:`background_values`): a path's values depend on the row only
through its pattern ``xb`` (the bits of the elements it follows). Paths of at most
:data:`~distshap.kernels.banzhaf_cpu.INTERVENTIONAL_TABLE_BITS` features read the ``k`` values
of row ``xb`` of their table (the CPU's, built on the host for each background and kept for the
last: float32 values computed in float64); longer ones, and interaction values, sum over the
background rows' masks ``rb`` (a background row counts when ``xb | rb`` covers the path; ``m`` =
the bits of ``xb ^ rb``, each adding ``+-v / B 2^(1 - m)``).

**Layout.** Rows ``t`` and ``t + blockDim`` of the block's row tile are thread ``t``'s; ``XT``
is features x rows, so a warp's reads of one feature are coalesced. A block stages the lanes in
tiles of whole paths (at most :data:`TILE_LANES` lanes, :func:`lane_tiles`) into shared memory
with coalesced reads, and every thread then reads them there (a broadcast). A path's bias lane
carries its ``k``, its output column base ``group * C``, its value (``v 2^-k``, or ``v / B``) and,
interventional, its table offset or mask offset. Row sums live in dynamic shared memory
(``[column * 2 blockDim + t]``) where they fit :data:`SHARED_BYTES`, with 128, 64 or 32 threads a
block; else in global memory (``acc[column, row]``, coalesced; a column for each thread's two
rows, those past the last row too); interaction values in global memory (``acc_int[(g C + i) C
+ j, row]``). Where they fit after the sums, each thread copies its two rows' values to shared
memory once (the sums and the tiles leave L1 little room: read from ``XT``, the rows' values
would come from L2 at every element). Each row's sums are added by one thread in packed path
order, so the bits depend neither on the launch, the batch nor the device; the float32 output
is the rounded sum.
"""

from __future__ import annotations

import numpy as np
from numba import cuda, types

from distshap.kernels import treeshap
from distshap.kernels.banzhaf_cpu import interventional_tables
from distshap.kernels.banzhaf_rows import background_masks
from distshap.kernels.cuda.launch import device_rows
from distshap.kernels.cuda.runtime.args import configured, current_stream, view
from distshap.kernels.cuda.runtime.device import SIM, device_id, xp
from distshap.packed import PackedModel, host_form

__all__ = [
    "SHARED_BYTES", "TILE_LANES", "background_values", "kernel_ptx", "lane_tiles",
    "product_values",
]  # fmt: skip

#: Lanes a block stages in shared memory at a time (a path's lanes stay in one tile).
TILE_LANES = 128
#: Most dynamic shared memory a block takes: its row sums (more: global memory), then its
#: rows' values (where they fit: else read from global memory); with the staged tile's 4 KiB
#: (and a few bytes) within the 48 KiB a block gets without opting in.
SHARED_BYTES = 43 * 1024
_THREADS = (128, 64, 32)  # threads a block, the first whose sums fit shared memory
_MISSING, _CATEGORICAL = 1, 2  # bits of a feature lane's meta word
_TWO_M62 = 2.0**-62

_follows = cuda.jit(device=True, inline=True)(treeshap.follows)


@cuda.jit(device=True, inline=True)
def _tests(x_a, x_b, li, e0, s_lower, s_upper, s_meta, cat_offsets, cat_nbits, cat_other,
           cat_words):  # fmt: skip
    """Whether ``x_a`` and ``x_b`` follow staged lane ``li`` (global lane ``e0 + li``)."""
    mt = s_meta[li]
    lo = s_lower[li]
    up = s_upper[li]
    missing = (mt & _MISSING) != 0
    if (mt & _CATEGORICAL) == 0:  # numeric: follows' categorical branch compiled out
        return (_follows(x_a, lo, up, missing, False, -1, 0, cat_words),
                _follows(x_b, lo, up, missing, False, -1, 0, cat_words))  # fmt: skip
    e = e0 + li
    other = cat_other[e]
    co = cat_offsets[e]
    nbits = cat_nbits[e]
    return (_follows(x_a, lo, up, missing, other, co, nbits, cat_words),
            _follows(x_b, lo, up, missing, other, co, nbits, cat_words))  # fmt: skip


@cuda.jit(device=True, inline=True)
def _product_pairs(acc_int, ra, rb, C, base, h, end, pa, pb, bits_a, bits_b, qa_sum, qb_sum,
                   s_q, s_column):  # fmt: skip
    """A path's interaction values in product form, ``P q_i q_j`` (both orders), and its
    diagonal, ``P q_i - sum_{j != i} P q_i q_j = P q_i (1 - Q + q_i)`` with ``Q = sum_j q_j``."""
    bit = np.uint64(1)
    li = np.uint32(h + 1)
    while li < end:
        fi = s_column[li]
        ci = np.uint32((base + fi) * C)
        qa = s_q[li] if bits_a & bit else -2.0
        qb = s_q[li] if bits_b & bit else -2.0
        va = pa * qa
        vb = pb * qb
        acc_int[ci + fi, ra] += va * (1.0 - qa_sum + qa)
        acc_int[ci + fi, rb] += vb * (1.0 - qb_sum + qb)
        bj = bit << np.uint64(1)
        lj = np.uint32(li + 1)
        while lj < end:
            fj = s_column[lj]
            cj = np.uint32((base + fj) * C)
            wa = va * (s_q[lj] if bits_a & bj else -2.0)
            wb = vb * (s_q[lj] if bits_b & bj else -2.0)
            acc_int[ci + fj, ra] += wa
            acc_int[cj + fi, ra] += wa
            acc_int[ci + fj, rb] += wb
            acc_int[cj + fi, rb] += wb
            bj <<= np.uint64(1)
            lj = np.uint32(lj + 1)
        bit <<= np.uint64(1)
        li = np.uint32(li + 1)


@cuda.jit(device=True, inline=True)
def _mask_values(sums, acc, acc_int, shared, pairs, rs, stride, tid, ra, rb, C, masks, moff,
                 n_background, xa, xb, full, w0, s_column, h, base):  # fmt: skip
    """The interventional values (``pairs``: interaction values) of a path for the rows of
    patterns ``xa`` and ``xb``, over the background rows' masks ``masks[moff:moff + B]``: row
    ``r`` adds ``s_i = +-w`` (``w = v / B 2^(1 - m)``) for each element ``i`` of ``xa ^ rb``,
    pairs ``2 s_i s_j / w``, diagonals ``s_i - sum_{j != i} 2 s_i s_j / w``."""
    for r in range(n_background):
        rm = np.uint64(masks[moff + r])
        for rr in range(2):
            x = xa if rr == 0 else xb
            row = ra if rr == 0 else rb
            sym = x ^ rm
            if (x | rm) != full or sym == 0:
                continue
            m = 0
            s = sym
            while s:
                s &= s - np.uint64(1)
                m += 1
            signs = -m  # sum of the signs over sym: 2 |sym & x| - m
            s = sym & x
            while s:
                s &= s - np.uint64(1)
                signs += 2
            w = w0 * (np.float64(np.int64(1) << np.int64(63 - m)) * _TWO_M62)  # w0 2^(1 - m)
            bit = np.uint64(1)
            li = np.uint32(h + 1)
            while sym >= bit:
                if sym & bit:
                    fi = s_column[li]
                    sign = 1 if x & bit else -1
                    v = w * sign
                    if not pairs:
                        c = np.uint32(base + fi)
                        if shared:
                            sums[np.uint32(c * rs + (stride if rr else 0) + tid)] += v
                        else:
                            acc[c, row] += v
                    else:
                        ci = np.uint32((base + fi) * C)
                        acc_int[ci + fi, row] += v * (1 - 2 * (signs - sign))
                        bj = bit << np.uint64(1)
                        lj = np.uint32(li + 1)
                        while sym >= bj:
                            if sym & bj:
                                fj = s_column[lj]
                                val = 2.0 * v if x & bj else -2.0 * v
                                acc_int[ci + fj, row] += val
                                acc_int[np.uint32((base + fj) * C) + fi, row] += val
                            bj <<= np.uint64(1)
                            lj = np.uint32(lj + 1)
                bit <<= np.uint64(1)
                li = np.uint32(li + 1)


def _make_kernel(tile: int, shared: bool, background: bool, pairs: bool, rows: bool):
    """The kernel for tiles of at most ``tile`` lanes: the interventional game
    (``background``) or the path-dependent one; values, row sums in shared memory
    (``shared``) or in global memory, or interaction values (``pairs``, in ``acc_int``); the
    thread's rows copied to shared memory after the sums (``rows``) or read from ``XT``."""
    shared = shared and not pairs

    @cuda.jit(cache=True)
    def kernel(XT, lower, upper, zero, q, column, meta, ref, cat_offsets, cat_nbits, cat_other,
               cat_words, tile_offsets, tables, masks, n_background, init, acc, out,
               acc_int):  # fmt: skip
        u0 = np.uint32(0)
        u1 = np.uint32(1)
        tid = np.uint32(cuda.threadIdx.x)  # 32-bit unsigned indices: no wraparound tests
        stride = np.uint32(cuda.blockDim.x)
        rs = np.uint32(2 * stride)
        n = XT.shape[1]
        C = np.uint32(XT.shape[0] + 1)
        width = np.uint32(init.shape[0])
        ra = cuda.blockIdx.x * 2 * cuda.blockDim.x + cuda.threadIdx.x
        rb = ra + cuda.blockDim.x
        has_a = ra < n
        has_b = rb < n
        xa = XT[:, ra if has_a else n - 1]  # computed, never stored: every thread stages
        xb = XT[:, rb if has_b else n - 1]
        sums = cuda.shared.array(0, types.float64)  # [column * rs + (row b) * stride + tid]
        # the rows' values, [x0 + feature * rs + (row b) * stride + tid]: only the thread reads
        # its own, so no barrier; shared memory holds them next to the lanes (L1 holds little)
        xs = cuda.shared.array(0, types.float32)
        x0 = np.uint32(2 * width * rs) if shared else u0  # after the sums (float32 units)
        for f in range(XT.shape[0] if rows else 0):
            xs[np.uint32(x0 + f * rs + tid)] = xa[f]
            xs[np.uint32(x0 + f * rs + stride + tid)] = xb[f]
        for c in range(width if not pairs else 0):
            if shared:
                sums[np.uint32(c * rs + tid)] = init[c]
                sums[np.uint32(c * rs + stride + tid)] = init[c]
            else:
                acc[c, ra] = init[c]
                acc[c, rb] = init[c]
        s_lower = cuda.shared.array(tile, types.float32)
        s_upper = cuda.shared.array(tile, types.float32)
        s_zero = cuda.shared.array(tile if not background else 1, types.float64)
        s_q = cuda.shared.array(tile, types.float64)
        s_column = cuda.shared.array(tile, types.uint32)
        s_meta = cuda.shared.array(tile, types.uint32)
        s_ref = cuda.shared.array(tile if background else 1, types.int64)
        for t in range(tile_offsets.shape[0] - 1):
            e0 = tile_offsets[t]
            m = np.uint32(tile_offsets[t + 1] - e0)
            cuda.syncthreads()  # the previous tile is done with
            li = tid
            while li < m:
                s_lower[li] = lower[e0 + li]
                s_upper[li] = upper[e0 + li]
                s_q[li] = q[e0 + li]
                s_column[li] = column[e0 + li]
                s_meta[li] = meta[e0 + li]
                if background:
                    s_ref[li] = ref[e0 + li]
                else:
                    s_zero[li] = zero[e0 + li]
                li = np.uint32(li + stride)
            cuda.syncthreads()
            h = u0
            while h < m:  # h: the bias lane of a path
                k = s_meta[h]
                end = np.uint32(h + u1 + k)
                base = s_column[h]
                pa = s_q[h]  # v 2^-k (v / B), then v prod f_j
                pb = pa
                qa_sum = 0.0
                qb_sum = 0.0
                bits_a = np.uint64(0)
                bits_b = np.uint64(0)
                bit = np.uint64(1)
                li = np.uint32(h + u1)
                while li < end:
                    f = s_column[li]
                    if rows:
                        x_a = xs[np.uint32(x0 + f * rs + tid)]
                        x_b = xs[np.uint32(x0 + f * rs + stride + tid)]
                    else:
                        x_a = xa[f]
                        x_b = xb[f]
                    fa, fb = _tests(x_a, x_b, li, e0, s_lower, s_upper, s_meta, cat_offsets,
                                    cat_nbits, cat_other, cat_words)  # fmt: skip
                    if fa:
                        bits_a |= bit
                    if fb:
                        bits_b |= bit
                    if not background:  # the 2^-k of the f_j is in v 2^-k
                        z = s_zero[li]
                        pa *= 1.0 + z if fa else z
                        pb *= 1.0 + z if fb else z
                        if pairs:
                            qa_sum += s_q[li] if fa else -2.0
                            qb_sum += s_q[li] if fb else -2.0
                    bit <<= np.uint64(1)
                    li = np.uint32(li + u1)
                if background and s_ref[h] < 0:  # no table: the background rows' masks
                    full = (np.uint64(1) << np.uint64(k)) - np.uint64(1)
                    _mask_values(sums, acc, acc_int, shared, pairs, rs, stride, tid, ra, rb, C,
                                 masks, -1 - s_ref[h], n_background, bits_a, bits_b, full, pa,
                                 s_column, h, base)  # fmt: skip
                    h = end
                    continue
                if pairs:
                    _product_pairs(acc_int, ra, rb, C, base, h, end, pa, pb, bits_a, bits_b,
                                   qa_sum, qb_sum, s_q, s_column)  # fmt: skip
                    h = end
                    continue
                if background:
                    ta = s_ref[h] + np.int64(bits_a) * np.int64(k) - np.int64(h + u1)
                    tb = s_ref[h] + np.int64(bits_b) * np.int64(k) - np.int64(h + u1)
                bit = np.uint64(1)
                li = np.uint32(h + u1)
                while li < end:
                    c = np.uint32(base + s_column[li])
                    if background:  # row xb of the table: its k values
                        va = np.float64(tables[ta + li])
                        vb = np.float64(tables[tb + li])
                    else:
                        qi = s_q[li]  # one read for both rows
                        va = pa * (qi if bits_a & bit else -2.0)
                        vb = pb * (qi if bits_b & bit else -2.0)
                    if shared:
                        sums[np.uint32(c * rs + tid)] += va
                        sums[np.uint32(c * rs + stride + tid)] += vb
                    else:
                        acc[c, ra] += va
                        acc[c, rb] += vb
                    bit <<= np.uint64(1)
                    li = np.uint32(li + u1)
                h = end
        for c in range(width if not pairs else 0):
            if shared:
                va = sums[np.uint32(c * rs + tid)]
                vb = sums[np.uint32(c * rs + stride + tid)]
            else:
                va = acc[c, ra]
                vb = acc[c, rb]
            if has_a:
                out[ra, c] = np.float32(va)
            if has_b:
                out[rb, c] = np.float32(vb)

    return kernel


_KERNELS: dict = {}


def _kernel(shared: bool, background: bool, pairs: bool, rows: bool, tile: int = TILE_LANES):
    key = (shared and not pairs, background, pairs, rows, tile)
    if key not in _KERNELS:
        _KERNELS[key] = _make_kernel(tile, *key[:4])
    return _KERNELS[key]


_SIGNATURE = (
    "void(float32[:, ::1], float32[::1], float32[::1], float64[::1], float64[::1], uint32[::1], "
    "uint32[::1], int64[::1], int64[::1], int32[::1], boolean[::1], uint32[::1], int64[::1], "
    "float32[::1], int64[::1], int64, float64[::1], float64[:, ::1], float32[:, ::1], "
    "float64[:, ::1])"
)


def kernel_ptx(shared: bool = True, background: bool = False, pairs: bool = False,
               rows: bool = True, cc: tuple[int, int] = (9, 0)) -> str:  # fmt: skip
    """PTX of the kernel (row sums in shared memory or not; the interventional game or the
    path-dependent one; interaction values; rows in shared memory or not) for compute
    capability ``cc`` (needs NVVM, not a GPU)."""
    from distshap.kernels.cuda.runtime.ptx import _device_free_compilation

    with _device_free_compilation(cc):
        kernel = _kernel(shared, background, pairs, rows).py_func
        ptx, _ = cuda.compile_ptx(kernel, _SIGNATURE, cc=cc)
    return ptx


def lane_tiles(path_offsets: np.ndarray, tile: int = TILE_LANES) -> np.ndarray:
    """Lane offsets of tiles of whole paths, each of at most ``tile`` lanes (greedy, packed
    order): int64, from the first path's first lane to the last path's end."""
    starts = np.asarray(path_offsets, np.int64)
    if np.diff(starts).max(initial=0) > tile:
        raise ValueError(f"a path of more than tile={tile} lanes: use a larger tile")
    out = [int(starts[0])]
    end = int(starts[-1])
    while out[-1] < end:  # the last path start at most a tile beyond this tile's start
        out.append(int(starts[np.searchsorted(starts, out[-1] + tile, side="right") - 1]))
    return np.asarray(out, np.int64)


def _model_lanes(packed: PackedModel, tile: int) -> tuple:
    """The lane arrays of ``packed`` both games share: ``(q, column, meta, tile_offsets)``,
    ``q`` the product form's (``v 2^-k`` on bias lanes: exact, and the kernel multiplies by
    ``o_j + z_j`` instead of ``f_j``, the same roundings)."""
    offsets = np.asarray(packed.path_offsets, np.int64)
    heads = offsets[:-1]
    z = np.asarray(packed.zero_fraction, np.float64)
    q = 2.0 * (1.0 - z) / (1.0 + z)
    q[heads] = np.ldexp(np.asarray(packed.path_value, np.float64), -(np.diff(offsets) - 1))
    column = np.asarray(packed.feature, np.int64).copy()
    column[heads] = np.asarray(packed.path_group, np.int64) * (packed.num_features + 1)
    meta = np.where(packed.missing, _MISSING, 0).astype(np.uint32)
    meta |= np.where(np.asarray(packed.cat_offsets) >= 0, _CATEGORICAL, 0).astype(np.uint32)
    meta[heads] = np.diff(offsets) - 1
    return q, column.astype(np.uint32), meta, lane_tiles(offsets, tile)


_DEVICE: dict = {}  # "last" / "game": (key, the last model's / background's device arrays)


def _device_lanes(packed: PackedModel, tile: int) -> tuple:
    """``(lower, upper, zero, q, column, meta, cat_offsets, cat_nbits, cat_other, cat_words,
    tile_offsets)`` on the current device, kept for the last model (views made once: a
    launch converts them cheapest)."""
    key = (packed.digest or id(packed), tile, device_id())
    last = _DEVICE.get("last")
    if last is not None and last[0] == key:
        return last[1]
    q, column, meta, tiles = host_form(
        packed, f"banzhaf-cuda-lanes-{tile}", lambda: _model_lanes(packed, tile), 2
    )
    arrays = (packed.lower, packed.upper, packed.zero_fraction, q, column, meta,
              packed.cat_offsets, packed.cat_nbits, packed.cat_other, packed.cat_words,
              tiles)  # fmt: skip
    arrays = tuple(view(xp().asarray(a)) for a in arrays)
    _DEVICE["last"] = (key, arrays)
    return arrays


def _threads(width: int) -> int:
    """Threads a block whose row sums fit shared memory; 0: none (global memory)."""
    for threads in _THREADS:
        if 2 * width * threads * 8 <= SHARED_BYTES:
            return threads
    return 0


def _unused() -> tuple:
    """One-element arrays for the kernel's unused arguments (never written), kept per device:
    ``(int64 (1,), float32 (1,), float64 (1, 1), float32 (1, 1))``."""
    key = ("unused", device_id())
    hit = _DEVICE.get(key)
    if hit is None:
        hit = (xp().zeros(1, np.int64), xp().zeros(1, np.float32), xp().zeros((1, 1)),
               xp().zeros((1, 1), np.float32))  # fmt: skip
        _DEVICE[key] = hit
    return hit


def _launch(packed: PackedModel, X, bias, tile: int, game: tuple | None, pairs: bool):
    """Run the kernel on the rows of ``X``; ``game``: ``(q, ref, tables, masks, B)`` of the
    interventional game (device arrays), ``None``: the path-dependent game. Values ``(n, G,
    C)``, interaction values (``pairs``) ``(n, G, C, C)``, float32."""
    X = device_rows(X, packed.num_features)
    n, G, C = X.shape[0], packed.num_groups, packed.num_features + 1
    width = G * C
    bias = np.broadcast_to(np.asarray(bias, np.float64).ravel(), (G,))
    init = np.zeros((G, C))
    init[:, C - 1] = bias
    threads = _threads(width) if not pairs else 0
    shared = threads > 0
    threads = threads or _THREADS[0]
    blocks = -(-n // (2 * threads))
    padded = blocks * 2 * threads  # global sums: a column for each thread's two rows
    i64, f32, f64_2d, f32_2d = _unused()
    out = xp().empty((n, width), np.float32) if not pairs else f32_2d
    acc_int = xp().zeros((width * C, padded), np.float64) if pairs else f64_2d
    if n:
        lower, upper, zero, q, column, meta, *cats, tiles = _device_lanes(packed, tile)
        ref, tables, masks, B = i64, f32, i64, 0
        if game is not None:
            q, ref, tables, masks, B = game
        XT = xp().ascontiguousarray(X.T)  # (features, rows): a warp reads 32 rows of a feature
        acc = xp().empty((width, padded), np.float64) if not (shared or pairs) else f64_2d
        sums = 2 * width * threads * 8 if shared else 0
        rows = sums + 2 * threads * 4 * (C - 1) <= SHARED_BYTES  # the rows after the sums
        dynamic = sums + 2 * threads * 4 * (C - 1) if rows else sums
        kernel = _kernel(shared, game is not None, pairs, rows, tile)
        if SIM:  # the simulator's kernel[...] sets the kernel's own dimensions: none kept
            kernel = kernel[blocks, threads, 0, dynamic]
        else:
            kernel = configured(kernel, blocks, threads, current_stream(), dynamic)
        kernel(
            XT, lower, upper, zero, q, column, meta, ref, *cats, tiles, tables, masks,
            np.int64(B), xp().asarray(init.ravel()), acc, out, acc_int,
        )  # fmt: skip
    if not pairs:
        return out.reshape(n, G, C)
    inter = acc_int[:, :n].T.reshape(n, G, C, C)
    inter[:, :, C - 1, C - 1] = xp().asarray(bias)
    return inter.astype(np.float32)


def product_values(packed: PackedModel, X, interactions: bool = False, tile: int = TILE_LANES):
    """Path-dependent Banzhaf values of the rows of ``X`` (NumPy or CuPy), float32 ``(n, G, F +
    1)``, the bias column the model's expected value, or interaction values ``(n, G, F + 1, F +
    1)``; paths of at most 62 features."""
    return _launch(packed, X, packed.expected_value, tile, None, interactions)


def _game(packed: PackedModel, background, interactions: bool, tile: int) -> tuple:
    """The interventional game's device arrays ``(q, ref, tables, masks, B)`` over the rows of
    ``background`` (a :class:`~distshap.kernels.interventional_math.Background`), kept for the
    last background (by its digest: the model's and the rows')."""
    digest = getattr(background, "digest", "")
    key = (digest, packed.digest, tile, interactions, device_id())
    last = _DEVICE.get("game")
    if digest and last is not None and last[0] == key:
        return last[1]
    R = np.ascontiguousarray(background.rows, dtype=np.float32)
    B = R.shape[0]
    if interactions:  # the masks of every path
        offsets, tables = np.full(packed.num_paths, -1, np.int64), np.zeros(1, np.float32)
    else:
        offsets, tables = interventional_tables(packed, R)
    masks, mask_offsets = background_masks(packed, R, offsets < 0)
    heads = np.asarray(packed.path_offsets[:-1], np.int64)
    q, *_ = host_form(packed, f"banzhaf-cuda-lanes-{tile}", lambda: _model_lanes(packed, tile), 2)
    q = q.copy()
    q[heads] = np.asarray(packed.path_value, np.float64) / B
    ref = np.zeros(q.size, np.int64)  # bias lanes: the table's offset, or -1 - the mask offset
    ref[heads] = np.where(offsets >= 0, offsets, -1 - mask_offsets)
    game = tuple(view(xp().asarray(a)) for a in (q, ref, tables, masks)) + (B,)
    _DEVICE["game"] = (key, game)
    return game


def background_values(packed: PackedModel, background, X, bias, interactions: bool = False,
                      tile: int = TILE_LANES):  # fmt: skip
    """Interventional Banzhaf (interaction) values of the rows of ``X`` over the rows of
    ``background`` (a :class:`~distshap.kernels.interventional_math.Background`), laid out as
    :func:`product_values`'s, the bias ``bias`` (per group); paths of at most 62 features.
    Values of paths of at most :data:`~distshap.kernels.banzhaf_cpu.INTERVENTIONAL_TABLE_BITS`
    features read pattern tables; the others, and interaction values, the background masks."""
    return _launch(packed, X, bias, tile, _game(packed, background, interactions, tile),
                   interactions)  # fmt: skip
