"""Path-dependent Banzhaf values on the GPU by the product form: O(k) per path and row.

With uniform coalition weights a path's Banzhaf value of its element ``i`` factorises: for
the one-fractions ``o_j`` (does the row follow element ``j``) and zero fractions ``z_j``,
``phi_i = v d_i prod_{j != i} f_j`` with ``f_j = (o_j + z_j) / 2`` and ``d_j = o_j - z_j``.
Let ``P = v prod_j f_j``; then ``phi_i = P q_i`` with ``q_i = d_i / f_i``: ``-2`` where the
row does not follow element ``i``, ``2 (1 - z_i) / (1 + z_i)`` (computed on the host) where it
does. Where ``f_i = 0`` (``o_i = z_i = 0``) ``d_i`` is 0 too, and ``P = 0`` gives the right 0.
So a thread forms ``P`` while it tests the path's elements (one multiply each) and adds
``P q_i`` to each element's column: no tables, no prefix arrays, no division.

Numerics: ``P`` and the sums in float64 (``k + 2`` roundings a contribution: float64 to about
``1e-15`` relative), each row's sums in one thread in packed path order, so the bits depend
neither on the launch, the batch nor the device; the float32 output is the rounded sum.

Layout: two rows a thread (rows ``t`` and ``t + blockDim`` of the block's row tile; ``XT`` is
features x rows, so a warp's reads of one feature are coalesced). A block stages the lanes in
tiles of whole paths (at most :data:`TILE_LANES` lanes, the host's :func:`lane_tiles`) into
shared memory with one coalesced read a thread, and every thread then reads the lanes there
(a broadcast). A path's bias lane carries its value ``v`` (in the ``q`` lane array), its
output column base ``group * C`` and its ``k``. Row sums live in dynamic shared memory
(``[column * 2 blockDim + t]``) where they fit :data:`SUMS_BYTES`, with 128, 64 or 32 threads a
block; else in global memory (``acc[column, row]``, coalesced; a column for each thread's two
rows, those past the last row too).
"""

from __future__ import annotations

import numpy as np
from numba import cuda, types

from distshap.kernels import treeshap
from distshap.kernels.cuda.launch import device_rows
from distshap.kernels.cuda.runtime.device import stream, xp
from distshap.packed import PackedModel, host_form

__all__ = ["SUMS_BYTES", "TILE_LANES", "kernel_ptx", "lane_tiles", "product_values"]

#: Lanes a block stages in shared memory at a time (a path's lanes stay in one tile).
TILE_LANES = 256
#: Most dynamic shared memory a block's row sums take (more: global memory).
SUMS_BYTES = 40 * 1024
_THREADS = (128, 64, 32)  # threads a block, the first whose sums fit shared memory
_MISSING, _CATEGORICAL = 1, 2  # bits of a feature lane's meta word

_follows = cuda.jit(device=True, inline=True)(treeshap.follows)


def _make_kernel(tile: int, shared: bool):
    """The kernel for tiles of at most ``tile`` lanes, row sums in shared memory (``shared``)
    or in global memory."""

    @cuda.jit(cache=True)
    def kernel(XT, lower, upper, zero, q, column, meta, cat_offsets, cat_nbits, cat_other,
               cat_words, tile_offsets, init, acc, out):  # fmt: skip
        u0 = np.uint32(0)
        u1 = np.uint32(1)
        tid = np.uint32(cuda.threadIdx.x)  # 32-bit unsigned indices: no wraparound tests
        stride = np.uint32(cuda.blockDim.x)
        rs = np.uint32(2 * stride)
        n = XT.shape[1]
        width = np.uint32(init.shape[0])
        ra = cuda.blockIdx.x * 2 * cuda.blockDim.x + cuda.threadIdx.x
        rb = ra + cuda.blockDim.x
        has_a = ra < n
        has_b = rb < n
        xa = XT[:, ra if has_a else n - 1]  # computed, never stored: every thread stages
        xb = XT[:, rb if has_b else n - 1]
        sums = cuda.shared.array(0, types.float64)  # [column * rs + (row b) * stride + tid]
        for c in range(width):
            if shared:
                sums[np.uint32(c * rs + tid)] = init[c]
                sums[np.uint32(c * rs + stride + tid)] = init[c]
            else:
                acc[c, ra] = init[c]
                acc[c, rb] = init[c]
        s_lower = cuda.shared.array(tile, types.float32)
        s_upper = cuda.shared.array(tile, types.float32)
        s_zero = cuda.shared.array(tile, types.float64)
        s_q = cuda.shared.array(tile, types.float64)
        s_column = cuda.shared.array(tile, types.uint32)
        s_meta = cuda.shared.array(tile, types.uint32)
        for t in range(tile_offsets.shape[0] - 1):
            e0 = tile_offsets[t]
            m = np.uint32(tile_offsets[t + 1] - e0)
            cuda.syncthreads()  # the previous tile is done with
            li = tid
            while li < m:
                s_lower[li] = lower[e0 + li]
                s_upper[li] = upper[e0 + li]
                s_zero[li] = zero[e0 + li]
                s_q[li] = q[e0 + li]
                s_column[li] = column[e0 + li]
                s_meta[li] = meta[e0 + li]
                li = np.uint32(li + stride)
            cuda.syncthreads()
            h = u0
            while h < m:  # h: the bias lane of a path
                end = np.uint32(h + u1 + s_meta[h])  # k lanes follow
                base = s_column[h]
                pa = s_q[h]  # v, then v prod f_j
                pb = pa
                bits_a = np.uint64(0)
                bits_b = np.uint64(0)
                bit = np.uint64(1)
                li = np.uint32(h + u1)
                while li < end:
                    f = s_column[li]
                    mt = s_meta[li]
                    lo = s_lower[li]
                    up = s_upper[li]
                    missing = (mt & _MISSING) != u0
                    if (mt & _CATEGORICAL) == u0:
                        fa = _follows(xa[f], lo, up, missing, False, -1, 0, cat_words)
                        fb = _follows(xb[f], lo, up, missing, False, -1, 0, cat_words)
                    else:
                        e = e0 + li
                        fa = _follows(xa[f], lo, up, missing, cat_other[e], cat_offsets[e],
                                      cat_nbits[e], cat_words)  # fmt: skip
                        fb = _follows(xb[f], lo, up, missing, cat_other[e], cat_offsets[e],
                                      cat_nbits[e], cat_words)  # fmt: skip
                    z = s_zero[li]
                    if fa:
                        pa *= 0.5 * (1.0 + z)
                        bits_a |= bit
                    else:
                        pa *= 0.5 * z
                    if fb:
                        pb *= 0.5 * (1.0 + z)
                        bits_b |= bit
                    else:
                        pb *= 0.5 * z
                    bit <<= np.uint64(1)
                    li = np.uint32(li + u1)
                bit = np.uint64(1)
                li = np.uint32(h + u1)
                while li < end:
                    c = np.uint32(base + s_column[li])
                    qa = s_q[li] if bits_a & bit else -2.0
                    qb = s_q[li] if bits_b & bit else -2.0
                    if shared:
                        sums[np.uint32(c * rs + tid)] += pa * qa
                        sums[np.uint32(c * rs + stride + tid)] += pb * qb
                    else:
                        acc[c, ra] += pa * qa
                        acc[c, rb] += pb * qb
                    bit <<= np.uint64(1)
                    li = np.uint32(li + u1)
                h = end
        for c in range(width):
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


def _kernel(shared: bool, tile: int = TILE_LANES):
    key = (shared, tile)
    if key not in _KERNELS:
        _KERNELS[key] = _make_kernel(tile, shared)
    return _KERNELS[key]


_SIGNATURE = (
    "void(float32[:, ::1], float32[::1], float32[::1], float64[::1], float64[::1], uint32[::1], "
    "uint32[::1], int64[::1], int32[::1], boolean[::1], uint32[::1], int64[::1], float64[::1], "
    "float64[:, ::1], float32[:, ::1])"
)


def kernel_ptx(shared: bool = True, cc: tuple[int, int] = (9, 0)) -> str:
    """PTX of the kernel (row sums in shared memory or not) for compute capability ``cc``
    (needs NVVM, not a GPU)."""
    from distshap.kernels.cuda.runtime.ptx import _device_free_compilation

    with _device_free_compilation(cc):
        ptx, _ = cuda.compile_ptx(_kernel(shared).py_func, _SIGNATURE, cc=cc)
    return ptx


def lane_tiles(path_offsets: np.ndarray, tile: int = TILE_LANES) -> np.ndarray:
    """Lane offsets of tiles of whole paths, each of at most ``tile`` lanes (greedy, packed
    order): int64, first 0... last the lane count."""
    starts = np.asarray(path_offsets, np.int64)
    if np.diff(starts).max(initial=0) > tile:
        raise ValueError(f"a path of more than tile={tile} lanes: use a larger tile")
    out = [int(starts[0])]
    end = int(starts[-1])
    while out[-1] < end:  # the last path start at most a tile beyond this tile's start
        out.append(int(starts[np.searchsorted(starts, out[-1] + tile, side="right") - 1]))
    return np.asarray(out, np.int64)


def _host_lanes(packed: PackedModel, tile: int) -> tuple:
    """The kernel's lane arrays of ``packed``: ``(zero, q, column, meta, tile_offsets)``."""
    offsets = np.asarray(packed.path_offsets, np.int64)
    heads = offsets[:-1]
    k = np.diff(offsets) - 1
    z = np.asarray(packed.zero_fraction, np.float64)
    q = 2.0 * (1.0 - z) / (1.0 + z)
    q[heads] = packed.path_value
    C = packed.num_features + 1
    column = np.asarray(packed.feature, np.int64).copy()
    column[heads] = np.asarray(packed.path_group, np.int64) * C
    column = column.astype(np.uint32)
    meta = np.where(packed.missing, _MISSING, 0).astype(np.uint32)
    meta |= np.where(np.asarray(packed.cat_offsets) >= 0, _CATEGORICAL, 0).astype(np.uint32)
    meta[heads] = k
    return z, q, column, meta, lane_tiles(offsets, tile)


_DEVICE: dict = {}  # the device arrays of the last model


def _device_lanes(packed: PackedModel, tile: int) -> tuple:
    key = (packed.digest or id(packed), tile)
    if _DEVICE.get("key") != key:
        lanes = host_form(packed, f"banzhaf-product-{tile}", lambda: _host_lanes(packed, tile), 2)
        z, q, column, meta, tiles = lanes
        arrays = (packed.lower, packed.upper, z, q, column, meta, packed.cat_offsets,
                  packed.cat_nbits, packed.cat_other, packed.cat_words, tiles)  # fmt: skip
        _DEVICE.clear()
        _DEVICE.update(key=key, arrays=tuple(xp().asarray(a) for a in arrays), packed=packed)
    return _DEVICE["arrays"]


def _threads(width: int) -> int:
    """Threads a block whose row sums fit shared memory; 0: none (global memory)."""
    for threads in _THREADS:
        if 2 * width * threads * 8 <= SUMS_BYTES:
            return threads
    return 0


def product_values(packed: PackedModel, X, tile: int = TILE_LANES):
    """Path-dependent Banzhaf values of the rows of ``X`` (NumPy or CuPy), float32
    ``(n, G, F + 1)``, the bias column the model's expected value; every path has at most 62
    features (the pattern bits)."""
    X = device_rows(X, packed.num_features)
    n, G, C = X.shape[0], packed.num_groups, packed.num_features + 1
    width = G * C
    init = np.zeros((G, C))
    init[:, C - 1] = np.broadcast_to(np.asarray(packed.expected_value, np.float64), (G,))
    out = xp().empty((n, width), np.float32)
    if n:
        lanes = _device_lanes(packed, tile)
        XT = xp().ascontiguousarray(X.T)  # (features, rows): a warp reads 32 rows of a feature
        threads = _threads(width)
        shared = threads > 0
        threads = threads or _THREADS[0]
        blocks = -(-n // (2 * threads))
        acc = xp().empty((width, blocks * 2 * threads) if not shared else (1, 1), np.float64)
        sums = 2 * width * threads * 8 if shared else 0
        kernel = _kernel(shared, tile)
        kernel[blocks, threads, stream(), sums](XT, *lanes, xp().asarray(init.ravel()), acc, out)
    return out.reshape(n, G, C)
