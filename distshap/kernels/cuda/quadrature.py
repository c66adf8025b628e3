"""The quadrature kernels: SHAP and interaction values of every path of a regular bin.

A path's SHAP value of element ``i`` is ``v (o_i - z_i) integral_0^1 prod_{j != i} (z_j + t (o_j
- z_j)) dt`` (the Shapley weights ``s! (k-1-s)! / k!`` are Beta integrals), a polynomial of
degree ``k - 1`` in ``t``: ``ceil(k / 2)`` Gauss-Legendre nodes give it exactly. At each node a
thread forms the full product while it tests the one-fractions, then divides each element's
factor out again. All terms are positive, so float32 keeps its relative precision at any path
length (unlike the DP's UNWOUND_SUM, which cancels).

* SHAP values: one thread per row; a block runs one chunk of paths of one output group on its
  rows, so every path is warp-uniform (no shuffles, no ballots) and each thread's row sums stay
  in shared memory (:func:`quadrature_warps`) until the chunk is done.
* Interaction values: one thread per path, one block per (chunk, row). With ``r_i`` the
  element's ratio ``(o_i - z_i) / (z_i + t (o_i - z_i))``, half the interaction of ``i != c`` is
  ``1/2 integral P r_i r_c`` and the diagonal ``integral P r_i (1 - (U - r_i) / 2)``, ``U = sum_j
  r_j``; each pair ``i < c`` is evaluated once (elements are sorted by feature) and mirrored
  when the block's sums in shared memory are flushed.

A kernel is compiled per node count (:data:`config.QUADRATURE_NODES`) on first use; contributions
are truncated to int64 fixed point and added with integer atomics.
"""

from __future__ import annotations

import numpy as np
from numba import cuda, types

from distshap.kernels.cuda import config
from distshap.kernels.cuda.device import (
    LF_VALUE,
    LF_ZERO,
    LI_FEATURE,
    fdiv,
    lane_follows,
    xp,
)  # fmt: skip

__all__ = ["gauss_legendre", "launch_quadrature", "quadrature_kernel", "quadrature_warps"]


def gauss_legendre(n_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights of the ``n_nodes``-point Gauss-Legendre rule on ``[0, 1]`` (float64).

    Exact for polynomials of degree up to ``2 * n_nodes - 1``.
    """
    x, w = np.polynomial.legendre.leggauss(int(n_nodes))
    return (x + 1.0) / 2.0, w / 2.0


def quadrature_warps(num_features: int) -> int:
    """Warps per block of the SHAP quadrature kernels for ``num_features`` columns (0: too wide
    for per-row accumulators in shared memory; such models add to global memory)."""
    return min(4, config.QUADRATURE_SHARED_BYTES // (8 * 32 * max(num_features, 1)))


def _make_shap_kernel(n_nodes: int, shared: bool):
    """The SHAP kernel: one thread per row of ``XT`` (features x rows), ``n_nodes`` nodes;
    row sums in shared memory (``shared``) or added to global memory directly."""
    nodes, weights = (a.astype(np.float32) for a in gauss_legendre(n_nodes))

    @cuda.jit
    def kernel(lane_f, lane_i, lane_cat, cat_words, path_offsets, chunk_paths, chunk_offsets,
               chunk_group, XT, acc, scale, n_cols, row0):  # fmt: skip
        tid = cuda.threadIdx.x
        r = row0 + cuda.blockIdx.y * cuda.blockDim.x + tid
        if r >= XT.shape[1]:
            return  # nothing below synchronises threads
        ch = cuda.blockIdx.x  # chunks vary fastest: blocks running together share rows (L2)
        base = chunk_group[ch] * n_cols
        stride = cuda.blockDim.x
        scale32 = np.float32(scale)
        one = np.float32(1.0)
        if shared:
            tile = cuda.shared.array(0, types.int64)  # [feature * stride + thread]
            for f in range(n_cols - 1):
                tile[f * stride + tid] = 0
        prod = cuda.local.array(n_nodes, np.float32)
        for j in range(chunk_offsets[ch], chunk_offsets[ch + 1]):
            p = chunk_paths[j]
            s0 = path_offsets[p] + 1  # first feature element (after the bias lane)
            s1 = path_offsets[p + 1]
            value = lane_f[s0 - 1, LF_VALUE]
            for m in range(n_nodes):
                prod[m] = value * weights[m]
            bits = np.uint32(0)
            for li in range(s0, s1):
                z = lane_f[li, LF_ZERO]
                d = -z
                if lane_follows(XT[lane_i[li, LI_FEATURE], r], lane_f, lane_i, lane_cat,
                                cat_words, li):  # fmt: skip
                    d = one - z
                    bits |= np.uint32(1) << np.uint32(li - s0)
                for m in range(n_nodes):
                    prod[m] *= z + nodes[m] * d
            for li in range(s0, s1):
                z = lane_f[li, LF_ZERO]
                d = -z
                if (bits >> np.uint32(li - s0)) & np.uint32(1):
                    d = one - z
                if d != 0:  # else the element's factor may be 0 and its value is 0
                    total = np.float32(0.0)
                    for m in range(n_nodes):
                        total += fdiv(prod[m], z + nodes[m] * d)
                    iv = np.int64(total * d * scale32)
                    if iv != 0:
                        col = lane_i[li, LI_FEATURE]
                        if shared:
                            tile[col * stride + tid] += iv
                        else:
                            cuda.atomic.add(acc, (r, base + col), iv)
        if shared:
            for f in range(n_cols - 1):
                iv = tile[f * stride + tid]
                if iv != 0:
                    cuda.atomic.add(acc, (r, base + f), iv)

    return kernel


def _make_interaction_kernel(n_nodes: int, shared: bool, slots: bool = False):
    """The interaction kernel: one thread per path, one block per (chunk of paths, row of
    ``X``), ``n_nodes`` nodes; the row's ``(F + 1) ** 2`` sums of the chunk's group in shared
    memory (``shared``: upper triangle, mirrored when flushed) or in global memory. ``slots``:
    into the row's pair slots (:mod:`distshap.pair_slots`; the upper triangle only); with
    ``shared``, a block whose chunk touches at most ``tile_capacity`` slots sums in a tile of
    them (:func:`~distshap.kernels.cuda.model.chunk_tiles`) and adds each to the row once."""
    nodes, weights = (a.astype(np.float32) for a in gauss_legendre(n_nodes))

    @cuda.jit(device=True)
    def body(lane_f, lane_i, lane_cat, cat_words, path_offsets, chunk_paths, chunk_offsets,
             chunk_group, X, acc, scale, n_cols, row0, path_map, map_offsets, local_map,
             tile_offsets, tile_slots, tile_capacity):  # fmt: skip
        tid = cuda.threadIdx.x
        ch = cuda.blockIdx.x
        r = row0 + cuda.blockIdx.y
        if slots:  # the chunk's tile: local slot e is the row's slot tile_slots[t0 + e]
            t0 = tile_offsets[ch]
            width = tile_offsets[ch + 1] - t0
            use_tile = width <= tile_capacity  # the same for the whole block
        else:
            width = n_cols * n_cols
            base = chunk_group[ch] * width
            use_tile = True
        scale32 = np.float32(scale)
        one = np.float32(1.0)
        half32 = np.float32(0.5)
        if shared and use_tile:  # (``shared``, a constant, prunes the branch at compile time)
            tile = cuda.shared.array(0, types.int64)  # [f_i * n_cols + f_c], f_i <= f_c
            for e in range(tid, width, cuda.blockDim.x):
                tile[e] = 0
            cuda.syncthreads()
        prod = cuda.local.array(n_nodes, np.float32)
        usum = cuda.local.array(n_nodes, np.float32)
        part = cuda.local.array(n_nodes, np.float32)
        for j in range(chunk_offsets[ch] + tid, chunk_offsets[ch + 1], cuda.blockDim.x):
            p = chunk_paths[j]
            s0 = path_offsets[p] + 1
            s1 = path_offsets[p + 1]
            if slots:  # slot of elements (a, c), a <= c: path_map[m0 + a * k + c] (0-based)
                k = s1 - s0
                m0 = map_offsets[p] - s0 * (k + 1)  # so that lanes index it: m0 + li * k + lc
            value = lane_f[s0 - 1, LF_VALUE]
            for m in range(n_nodes):
                prod[m] = value * weights[m]
                usum[m] = 0
            bits = np.uint32(0)
            for li in range(s0, s1):
                z = lane_f[li, LF_ZERO]
                d = -z
                if lane_follows(X[r, lane_i[li, LI_FEATURE]], lane_f, lane_i, lane_cat,
                                cat_words, li):  # fmt: skip
                    d = one - z
                    bits |= np.uint32(1) << np.uint32(li - s0)
                for m in range(n_nodes):
                    q = z + nodes[m] * d
                    prod[m] *= q
                    if d != 0:
                        usum[m] += fdiv(d, q)
            for li in range(s0, s1):
                zi = lane_f[li, LF_ZERO]
                di = -zi
                if (bits >> np.uint32(li - s0)) & np.uint32(1):
                    di = one - zi
                if di == 0:
                    continue  # its row and column are 0
                fi = lane_i[li, LI_FEATURE]
                diag = np.float32(0.0)
                for m in range(n_nodes):
                    ri = fdiv(di, zi + nodes[m] * di)
                    part[m] = prod[m] * ri
                    diag += part[m] * (one - half32 * (usum[m] - ri))
                iv = np.int64(diag * scale32)
                if iv != 0:
                    if slots:
                        at = m0 + li * k + li
                        if shared and use_tile:
                            cuda.atomic.add(tile, local_map[at], iv)
                        else:
                            cuda.atomic.add(acc, (r, path_map[at]), iv)
                    elif shared:
                        cuda.atomic.add(tile, fi * n_cols + fi, iv)
                    else:
                        cuda.atomic.add(acc, (r, base + fi * n_cols + fi), iv)
                for lc in range(li + 1, s1):
                    zc = lane_f[lc, LF_ZERO]
                    dc = -zc
                    if (bits >> np.uint32(lc - s0)) & np.uint32(1):
                        dc = one - zc
                    if dc == 0:
                        continue
                    total = np.float32(0.0)
                    for m in range(n_nodes):
                        total += part[m] * fdiv(dc, zc + nodes[m] * dc)
                    iv = np.int64(half32 * total * scale32)
                    if iv != 0:
                        fc = lane_i[lc, LI_FEATURE]  # > fi: a path's elements sorted by feature
                        if slots:
                            at = m0 + li * k + lc
                            if shared and use_tile:
                                cuda.atomic.add(tile, local_map[at], iv)
                            else:
                                cuda.atomic.add(acc, (r, path_map[at]), iv)
                        elif shared:
                            cuda.atomic.add(tile, fi * n_cols + fc, iv)
                        else:
                            cuda.atomic.add(acc, (r, base + fi * n_cols + fc), iv)
                            cuda.atomic.add(acc, (r, base + fc * n_cols + fi), iv)
        if shared and use_tile:
            cuda.syncthreads()
            for e in range(tid, width, cuda.blockDim.x):
                iv = tile[e]
                if iv != 0:
                    if slots:
                        cuda.atomic.add(acc, (r, tile_slots[t0 + e]), iv)
                    else:
                        cuda.atomic.add(acc, (r, base + e), iv)
                        a = e // n_cols
                        b = e - a * n_cols
                        if a != b:
                            cuda.atomic.add(acc, (r, base + b * n_cols + a), iv)

    if slots:

        @cuda.jit
        def slot_kernel(lane_f, lane_i, lane_cat, cat_words, path_offsets, chunk_paths,
                        chunk_offsets, chunk_group, X, acc, scale, row0, path_map, map_offsets,
                        local_map, tile_offsets, tile_slots, tile_capacity):  # fmt: skip
            body(lane_f, lane_i, lane_cat, cat_words, path_offsets, chunk_paths, chunk_offsets,
                 chunk_group, X, acc, scale, 0, row0, path_map, map_offsets, local_map,
                 tile_offsets, tile_slots, tile_capacity)  # fmt: skip

        return slot_kernel

    @cuda.jit
    def kernel(lane_f, lane_i, lane_cat, cat_words, path_offsets, chunk_paths, chunk_offsets,
               chunk_group, X, acc, scale, n_cols, row0):  # fmt: skip
        body(lane_f, lane_i, lane_cat, cat_words, path_offsets, chunk_paths, chunk_offsets,
             chunk_group, X, acc, scale, n_cols, row0, chunk_paths, chunk_offsets, chunk_paths,
             chunk_offsets, chunk_offsets, 0)  # fmt: skip

    return kernel


_KERNELS: dict = {}


def quadrature_kernel(n_nodes: int, shared: bool, interactions: bool = False,
                      slots: bool = False):  # fmt: skip
    """The quadrature kernel for ``n_nodes`` nodes (built on first use, compiled at launch);
    ``slots``: the interaction kernel writing pair slots."""
    key = (n_nodes, shared, interactions, slots)
    kernel = _KERNELS.get(key)
    if kernel is None:
        if slots:
            kernel = _make_interaction_kernel(n_nodes, shared, slots=True)
        elif interactions:
            kernel = _make_interaction_kernel(n_nodes, shared)
        else:
            kernel = _make_shap_kernel(n_nodes, shared)
        _KERNELS[key] = kernel
    return kernel


def launch_quadrature(model, plan, Xb, acc, scale, F1, stream, interactions, slots=None):
    """Run the quadrature launches of ``plan`` on the row batch ``Xb`` (adding to ``acc``);
    ``slots`` (:class:`~distshap.kernels.cuda.model.SlotArrays`): interaction values into pair
    slots."""
    nb = int(Xb.shape[0])
    if slots is not None:  # one block per (chunk, row); a chunk's slots in shared memory
        capacity = min(slots.max_tile_slots, config.QUADRATURE_SHARED_BYTES // 8)
        shared = capacity > 0
        for launch, (tile_offsets, tile_slots) in zip(plan.quadrature, slots.tiles, strict=True):
            kernel = quadrature_kernel(launch.n_nodes, shared, interactions=True, slots=True)
            for row0 in range(0, nb, 65535):  # grid.y is at most 65535
                grid = (launch.n_chunks, min(nb - row0, 65535))
                kernel[grid, 128, stream, capacity * 8](
                    model.lane_f, model.lane_i, model.lane_cat, model.cat_words,
                    model.path_offsets, launch.paths, launch.offsets, launch.group, Xb, acc,
                    scale, row0, slots.path_map, slots.map_offsets, slots.local_map,
                    tile_offsets, tile_slots, capacity,
                )  # fmt: skip
        return
    if interactions:  # one block per (chunk, row)
        shared = F1 * F1 * 8 <= config.QUADRATURE_SHARED_BYTES
        for launch in plan.quadrature:
            kernel = quadrature_kernel(launch.n_nodes, shared, interactions=True)
            for row0 in range(0, nb, 65535):  # grid.y is at most 65535
                grid = (launch.n_chunks, min(nb - row0, 65535))
                kernel[grid, 128, stream, F1 * F1 * 8 if shared else 0](
                    model.lane_f, model.lane_i, model.lane_cat, model.cat_words,
                    model.path_offsets, launch.paths, launch.offsets, launch.group, Xb, acc,
                    scale, F1, row0,
                )  # fmt: skip
        return
    XT = xp().ascontiguousarray(Xb.T)  # (features, rows): a warp reads 32 rows of a feature
    n_features = F1 - 1
    warps = quadrature_warps(n_features)
    shared = warps > 0
    tpb = 32 * (warps or 4)
    shared_bytes = tpb * n_features * 8 if shared else 0
    rows_per_launch = 65535 * tpb  # grid.y (row tiles) is at most 65535
    for launch in plan.quadrature:
        kernel = quadrature_kernel(launch.n_nodes, shared)
        for row0 in range(0, nb, rows_per_launch):
            grid = (launch.n_chunks, -(-min(nb - row0, rows_per_launch) // tpb))
            kernel[grid, tpb, stream, shared_bytes](
                model.lane_f, model.lane_i, model.lane_cat, model.cat_words, model.path_offsets,
                launch.paths, launch.offsets, launch.group, XT, acc, scale, F1, row0,
            )  # fmt: skip
