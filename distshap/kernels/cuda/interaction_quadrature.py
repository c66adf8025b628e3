"""The interaction quadrature kernel: full SHAP interaction matrices of a regular bin's paths.

One thread per path, one block per (chunk of paths, row). With ``r_i`` the element's ratio
``(o_i - z_i) / (z_i + t (o_i - z_i))``, half the interaction of ``i != c`` is ``1/2 integral
P r_i r_c`` and the diagonal ``integral P r_i (1 - (U - r_i) / 2)``, ``U = sum_j r_j``
(``P``: the path's product at node ``t``, as in the SHAP quadrature of :mod:`.quadrature`);
each pair ``i < c`` is evaluated once (elements are sorted by feature) and mirrored when the
block's sums in shared memory are flushed. Every interaction kernel (this one, the pair-slot
kernels of :mod:`.slot_quadrature`) runs the same per-path arithmetic, :func:`pair_steps`, so
a path and a row give the same int64 contributions wherever they are summed.

A kernel is compiled per node count on first use; contributions are truncated to int64 fixed
point and added with integer atomics (order-independent bits).
"""

from __future__ import annotations

import functools

import numpy as np
from numba import cuda, types

from distshap.kernels.cuda.runtime.args import launch as launch_kernel
from distshap.kernels.cuda.runtime.device import (
    LF_VALUE,
    LF_ZERO,
    LI_FEATURE,
    add_quotient,
    fdiv,
    lane_follows,
    read_split,
)  # fmt: skip
from distshap.plan.geometry import gauss_legendre, interaction_tile_fits

__all__ = ["interaction_kernel", "launch_interaction_quadrature", "pair_steps"]


_LOW = np.int64(0xFFFFFFFF)


@cuda.jit(device=True)
def _add_split32(words, i, hi_i, iv):
    """Adds the int64 ``iv`` to the split sum (:func:`~.runtime.device.read_split`)
    with lo word ``words[i]`` and hi word ``words[hi_i]``: ``iv``'s low half to lo (a native
    32-bit atomic returning the old word) and its high half to hi, plus 1 where the lo add
    wrapped around (its 32-bit sum below the low half). This module's own copy (as
    :mod:`.slot_quadrature` keeps its): under the CUDA simulator a device function may use
    ``cuda.*`` only from its kernel's module."""
    lo = np.uint32(iv & _LOW)
    old = cuda.atomic.add(words, i, lo)
    hi = np.uint32(iv >> 32)
    if np.uint32(old + lo) < lo:
        hi = np.uint32(hi + np.uint32(1))
    cuda.atomic.add(words, hi_i, hi)


@functools.cache
def pair_steps(n_nodes: int) -> tuple:
    """The per-path arithmetic of every interaction kernel for ``n_nodes`` nodes, as device
    functions ``(forward, diagonal, pair)``; all the interaction kernels call these, so they
    compute the same float32 values (and the same int64 contributions) for a path and a row.

    * ``forward(prod, usum, z, d)``: an element with zero fraction ``z`` and ``d = o - z``:
      multiplies its factor ``z + t_m d`` into the node products ``prod`` and adds its node
      ratio ``d / (z + t_m d)`` to ``usum`` (``U`` at each node) where ``d`` is not 0.
    * ``diagonal(prod, usum, part, z, d, scale32)``: the int64 diagonal contribution of an
      element (``integral P r (1 - (U - r) / 2)``), leaving ``P r`` at each node in ``part``.
    * ``pair(part, z, d, scale32)``: the int64 contribution of the pair of ``diagonal``'s
      element and this one, half ``integral P r_a r_c``.
    * ``pair2(part, part2, z, d, scale32)``: ``(pair(part, z, d, scale32), pair(part2, z,
      d, scale32))``, the element's ratios formed once for both (register blocking: two
      elements ``a`` against each later ``c``). Each sum takes ``pair``'s float32 operations
      in ``pair``'s order on the same values, so the same two int64 values.

    Each pair divides its second element's ratios out again rather than reading them from
    memory (the slot kernels are bound by instruction issue, not by the divisions; ratios kept
    in local memory would also change the last bits of some entries).
    """
    nodes = gauss_legendre(n_nodes)[0].astype(np.float32)

    @cuda.jit(device=True)
    def forward(prod, usum, z, d):
        for m in range(n_nodes):
            q = z + nodes[m] * d
            prod[m] *= q
            if d != 0:
                usum[m] = add_quotient(usum[m], d, q)

    @cuda.jit(device=True)
    def diagonal(prod, usum, part, z, d, scale32):
        diag = np.float32(0.0)
        for m in range(n_nodes):
            ri = fdiv(d, z + nodes[m] * d)
            part[m] = prod[m] * ri
            diag += part[m] * (np.float32(1.0) - np.float32(0.5) * (usum[m] - ri))
        return np.int64(diag * scale32)

    @cuda.jit(device=True)
    def pair(part, z, d, scale32):
        total = np.float32(0.0)
        for m in range(n_nodes):
            total += part[m] * fdiv(d, z + nodes[m] * d)
        return np.int64(np.float32(0.5) * total * scale32)

    @cuda.jit(device=True)
    def pair2(part, part2, z, d, scale32):
        total = np.float32(0.0)
        total2 = np.float32(0.0)
        for m in range(n_nodes):
            r = fdiv(d, z + nodes[m] * d)
            total += part[m] * r
            total2 += part2[m] * r
        half = np.float32(0.5)
        return np.int64(half * total * scale32), np.int64(half * total2 * scale32)

    return forward, diagonal, pair, pair2


def _make_kernel(n_nodes: int, shared: bool):
    """The interaction kernel: one thread per path, one block per (chunk of paths, row of
    ``X``), ``n_nodes`` nodes; the row's ``(F + 1) ** 2`` sums of the chunk's group in shared
    memory (``shared``: upper triangle, mirrored when flushed) or in global memory. The
    arithmetic is :func:`pair_steps`'s.

    A shared-memory tile keeps each sum as two uint32 words (:func:`_add_split32`): lo words
    ``[0, n)``, hi words ``[n, 2 n)``, ``n = n_cols ** 2``, the 8 bytes of an int64 word. A
    64-bit shared-memory atomic add is a compare-and-swap loop, retried for every lane of the
    warp that hit the same entry (the lanes run sibling paths, which share most features); the
    split words add with native 32-bit atomics. The flush reads back the exact int64 sums
    (:func:`~distshap.kernels.cuda.runtime.device.read_split`): the same bits as int64 words."""
    weights = gauss_legendre(n_nodes)[1].astype(np.float32)
    forward, diagonal, pair, pair2 = pair_steps(n_nodes)

    @cuda.jit(device=True)
    def add(iv, fa, fc, r, acc, words, uhi, un, base, n_cols):
        """Adds a contribution ``iv`` (skipped when 0) of features ``fa <= fc`` of a path to row
        ``r``: to the shared tile's upper triangle (``shared``, mirrored when flushed) or to
        both ``[fa, fc]`` and ``[fc, fa]`` of the row's matrix in ``acc``."""
        if iv != 0:
            if shared:
                i = np.uint32(np.uint32(fa) * un + np.uint32(fc))
                _add_split32(words, i, np.uint32(uhi + i), iv)
            else:
                cuda.atomic.add(acc, (r, base + fa * n_cols + fc), iv)
                if fa != fc:
                    cuda.atomic.add(acc, (r, base + fc * n_cols + fa), iv)

    @cuda.jit(cache=True)
    def kernel(lane_f, lane_i, lane_cat, cat_words, path_offsets, chunk_paths, chunk_offsets,
               chunk_group, X, acc, scale, n_cols, row0):  # fmt: skip
        tid = cuda.threadIdx.x
        ch = cuda.blockIdx.x
        r = row0 + cuda.blockIdx.y
        width = n_cols * n_cols
        base = chunk_group[ch] * width
        scale32 = np.float32(scale)
        one = np.float32(1.0)
        # shared: lo words [slot], hi words [hi_offset + slot]; slot f_i * n_cols + f_c, f_i
        # <= f_c (a dynamic shared array of 0 bytes where the kernel sums in global memory)
        words = cuda.shared.array(0, types.uint32)
        hi_offset = width
        uhi = np.uint32(hi_offset)
        un = np.uint32(n_cols)
        if shared:
            for e in range(tid, width, cuda.blockDim.x):
                words[e] = 0
                words[hi_offset + e] = 0
            cuda.syncthreads()
        prod = cuda.local.array(n_nodes, np.float32)
        usum = cuda.local.array(n_nodes, np.float32)
        part = cuda.local.array(n_nodes, np.float32)  # element a's P r at each node
        part2 = cuda.local.array(n_nodes, np.float32)  # element a + 1's
        for j in range(chunk_offsets[ch] + tid, chunk_offsets[ch + 1], cuda.blockDim.x):
            p = chunk_paths[j]
            s0 = path_offsets[p] + 1
            s1 = path_offsets[p + 1]
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
                forward(prod, usum, z, d)
            # elements two at a time (a = li, a + 1 = l2) against each later element c: c's
            # ratios formed once for both (pair2); a dead element (d = 0: its row and column
            # are 0) gets part 0, so its pairs come out 0 and are skipped
            for li in range(s0, s1, 2):
                l2 = li + 1
                zi = lane_f[li, LF_ZERO]
                di = -zi
                if (bits >> np.uint32(li - s0)) & np.uint32(1):
                    di = one - zi
                fi = lane_i[li, LI_FEATURE]
                live = di != 0
                if live:
                    iv = diagonal(prod, usum, part, zi, di, scale32)
                    add(iv, fi, fi, r, acc, words, uhi, un, base, n_cols)
                else:
                    for m in range(n_nodes):
                        part[m] = 0
                live2 = False
                f2 = fi
                if l2 < s1:
                    z2 = lane_f[l2, LF_ZERO]
                    d2 = -z2
                    if (bits >> np.uint32(l2 - s0)) & np.uint32(1):
                        d2 = one - z2
                    f2 = lane_i[l2, LI_FEATURE]  # > fi: a path's elements sorted by feature
                    live2 = d2 != 0
                    if live2:
                        iv = diagonal(prod, usum, part2, z2, d2, scale32)
                        add(iv, f2, f2, r, acc, words, uhi, un, base, n_cols)
                        if live:
                            iv = pair(part, z2, d2, scale32)
                            add(iv, fi, f2, r, acc, words, uhi, un, base, n_cols)
                    else:
                        for m in range(n_nodes):
                            part2[m] = 0
                if not (live or live2):
                    continue
                for lc in range(li + 2, s1):
                    zc = lane_f[lc, LF_ZERO]
                    dc = -zc
                    if (bits >> np.uint32(lc - s0)) & np.uint32(1):
                        dc = one - zc
                    if dc == 0:
                        continue
                    iv, iv2 = pair2(part, part2, zc, dc, scale32)
                    fc = lane_i[lc, LI_FEATURE]
                    add(iv, fi, fc, r, acc, words, uhi, un, base, n_cols)
                    add(iv2, f2, fc, r, acc, words, uhi, un, base, n_cols)
        if shared:
            cuda.syncthreads()
            for e in range(tid, width, cuda.blockDim.x):
                iv = read_split(words, e, hi_offset)
                if iv != 0:
                    cuda.atomic.add(acc, (r, base + e), iv)
                    a = e // n_cols
                    b = e - a * n_cols
                    if a != b:
                        cuda.atomic.add(acc, (r, base + b * n_cols + a), iv)

    return kernel


@functools.cache
def interaction_kernel(n_nodes: int, shared: bool):
    """The interaction quadrature kernel for ``n_nodes`` nodes, summing a row in a shared tile
    (``shared``) or in global memory; built on first use, compiled at launch.

    Launch: grid ``(chunks, rows)``, 128 threads, ``8 (F + 1)**2`` bytes of dynamic shared
    memory with ``shared`` (else 0).
    """
    return _make_kernel(int(n_nodes), bool(shared))


def launch_interaction_quadrature(model, plan, Xb, acc, scale, F1, stream) -> None:
    """Run the quadrature launches of ``plan`` on the row batch ``Xb``, adding interaction
    values (``F1 = F + 1`` columns a matrix) to ``acc``: a row's matrix in a shared tile where
    it fits (:func:`~distshap.plan.geometry.interaction_tile_fits`), else in global
    memory. Launches go through the driver where they can (:func:`~.runtime.args.launch`);
    the model's and plan's arrays go as read-only hints kept with the model
    (:meth:`~.runtime.model.DeviceModel.read_only`)."""
    nb = int(Xb.shape[0])
    shared = interaction_tile_fits(F1)
    shared_bytes = F1 * F1 * 8 if shared else 0
    for launch in plan.quadrature:
        kernel = interaction_kernel(launch.n_nodes, shared)
        kept = model.read_only(("interaction_quadrature", id(launch)), lambda launch=launch: (
            model.lane_f, model.lane_i, model.lane_cat, model.cat_words, model.path_offsets,
            launch.paths, launch.offsets, launch.group,
        ))  # fmt: skip
        for row0 in range(0, nb, 65535):  # grid.y is at most 65535
            grid = (launch.n_chunks, min(nb - row0, 65535))
            arguments = (*kept, Xb, acc, scale, F1, row0)
            launch_kernel(kernel, grid, 128, stream, shared_bytes, arguments)
