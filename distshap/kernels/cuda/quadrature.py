"""The quadrature kernels: SHAP and interaction values of every path of a regular bin.

A path's SHAP value of element ``i`` is ``v (o_i - z_i) integral_0^1 prod_{j != i} (z_j + t (o_j
- z_j)) dt`` (the Shapley weights ``s! (k-1-s)! / k!`` are Beta integrals), a polynomial of
degree ``k - 1`` in ``t``: ``ceil(k / 2)`` Gauss-Legendre nodes give it exactly. At each node a
thread forms the full product while it tests the one-fractions, then divides each element's
factor out again. All terms are positive, so float32 keeps its relative precision at any path
length (unlike the DP's UNWOUND_SUM, which cancels).

* SHAP values: one thread per row; a block runs one chunk of paths of one output group on its
  rows, so every path is warp-uniform (no shuffles, no ballots) and each thread's row sums stay
  in shared memory (:func:`quadrature_warps`) until the chunk is done. With chunk-local
  feature tiles (:data:`config.SHAP_QUADRATURE_TILES` ``"local"``, models of more than
  :data:`config.QUADRATURE_TILE_FEATURES` features) the chunks are formed so that each touches
  at most that many distinct features (:func:`~distshap.kernels.cuda.model.local_chunks`): a
  thread's sums take that many int64 columns (the lane's ``lane_column``) instead of one per
  feature of the model, so more warps fit an SM, and models too wide for a column per feature
  sum in shared memory instead of adding every contribution to global memory. Column ``c``
  is flushed to the chunk's ``c``-th feature. Every contribution is truncated to int64 on its
  own and integer addition is associative: the same bits as the all-features tile.
* Interaction values: one thread per path, one block per (chunk, row). With ``r_i`` the
  element's ratio ``(o_i - z_i) / (z_i + t (o_i - z_i))``, half the interaction of ``i != c`` is
  ``1/2 integral P r_i r_c`` and the diagonal ``integral P r_i (1 - (U - r_i) / 2)``, ``U = sum_j
  r_j``; each pair ``i < c`` is evaluated once (elements are sorted by feature) and mirrored
  when the block's sums in shared memory are flushed. Every interaction kernel runs the same
  per-path arithmetic (:func:`pair_steps`).

* Interaction values into pair slots (top pairs, summaries): the same kernel with ``slots``
  (one block per (chunk, row), each thread reading its own path's lanes), or, with
  :data:`config.SLOT_QUADRATURE_VARIANT` ``"gathered"``, :func:`slot_rows_kernel`: the launch's
  lanes and slot numbers gathered once per device model into element-major arrays
  (:func:`slot_layout`), so the threads of a warp, one path each, read element ``e`` of their
  paths from consecutive addresses (one cache line a warp instead of one a thread); the rows'
  values of the features in shared memory; several rows per block
  (:data:`config.SLOT_QUADRATURE_ROWS`), each path's rows one after another while its data sit
  in L1. The same float32 operations in the same order on the same values: the same int64
  contributions, so the same slots, bit for bit.

A kernel is compiled per node count (:data:`config.QUADRATURE_NODES`) on first use; contributions
are truncated to int64 fixed point and added with integer atomics.
"""

from __future__ import annotations

import threading
import weakref

import numpy as np
from numba import cuda, types

from distshap.kernels.cuda import config
from distshap.kernels.cuda.device import (
    CAT_OTHER_FLAG,
    LF_LOWER,
    LF_UPPER,
    LF_VALUE,
    LF_ZERO,
    LI_FEATURE,
    LI_FLAGS,
    LI_NBITS,
    MISSING_FLAG,
    SIM,
    add_quotient,
    fdiv,
    follows,
    lane_follows,
    read_split,
    xp,
)  # fmt: skip
from distshap.plan.config import get_config
from distshap.plan.geometry import (
    gauss_legendre,
    interaction_tile_fits,
    local_tiles,
    quadrature_warps,
    slot_rows_shape,
)

__all__ = [
    "SlotLayout", "launch_quadrature", "quadrature_kernel", "shap_rows", "slot_layout",
    "slot_rows_kernel",
]  # fmt: skip


def shap_rows() -> int:
    """Rows a thread of the SHAP quadrature kernels (:data:`config.SHAP_QUADRATURE_ROWS`)."""
    rows = config.SHAP_QUADRATURE_ROWS
    if rows not in (1, 2):
        raise ValueError(f"config.SHAP_QUADRATURE_ROWS must be 1 or 2, got {rows!r}")
    return int(rows)


def _make_shap_kernel(n_nodes: int, shared: bool):
    """The SHAP kernel: one thread per row of ``XT`` (features x rows), ``n_nodes`` nodes;
    row sums of every feature in shared memory (``shared``) or added to global memory
    directly (see :func:`_make_local_shap_kernel` for chunk-local tiles)."""
    nodes, weights = (a.astype(np.float32) for a in gauss_legendre(n_nodes))

    @cuda.jit(cache=True)
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
                        total = add_quotient(total, prod[m], z + nodes[m] * d)
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


def _make_local_shap_kernel(n_nodes: int):
    """The SHAP kernel with chunk-local feature tiles: as :func:`_make_shap_kernel` with
    ``shared``, a thread's row sums in shared memory, one int64 column per feature of the
    block's chunk (``features[feature_offsets[ch]:feature_offsets[ch + 1]]``; a lane adds at
    its ``lane_column``); the same float32 operations in the same order, so the same int64
    contributions."""
    nodes, weights = (a.astype(np.float32) for a in gauss_legendre(n_nodes))

    @cuda.jit(cache=True)
    def kernel(lane_f, lane_i, lane_cat, cat_words, path_offsets, chunk_paths, chunk_offsets,
               chunk_group, lane_column, features, feature_offsets, XT, acc, scale, n_cols,
               row0):  # fmt: skip
        tid = cuda.threadIdx.x
        r = row0 + cuda.blockIdx.y * cuda.blockDim.x + tid
        if r >= XT.shape[1]:
            return  # nothing below synchronises threads
        ch = cuda.blockIdx.x  # chunks vary fastest: blocks running together share rows (L2)
        base = chunk_group[ch] * n_cols
        f0 = feature_offsets[ch]
        width = feature_offsets[ch + 1] - f0
        stride = cuda.blockDim.x
        scale32 = np.float32(scale)
        one = np.float32(1.0)
        tile = cuda.shared.array(0, types.int64)  # [column * stride + thread]
        for c in range(width):
            tile[c * stride + tid] = 0
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
                        total = add_quotient(total, prod[m], z + nodes[m] * d)
                    iv = np.int64(total * d * scale32)
                    if iv != 0:
                        tile[np.int32(lane_column[li]) * stride + tid] += iv
        for c in range(width):
            iv = tile[c * stride + tid]
            if iv != 0:
                cuda.atomic.add(acc, (r, base + features[f0 + c]), iv)

    return kernel


def _make_two_row_shap_kernel(n_nodes: int, mode: str):
    """The SHAP kernel with two rows a thread (:data:`config.SHAP_QUADRATURE_ROWS` 2): thread
    ``t`` of a block runs rows ``t`` and ``t + blockDim`` of its row tile, each path's lane
    data loaded once for both, two independent products in flight. ``mode``: ``"local"``
    (chunk-local tiles, as :func:`_make_local_shap_kernel`), ``"shared"`` (a column per
    feature, as :func:`_make_shap_kernel` with ``shared``) or ``"global"`` (global atomics).
    Each row's contributions are the same float32 operations in the same order as the
    one-row kernels', so the same int64 values; a row sums in its own columns of shared
    memory (``[column * 2 blockDim + t]`` and ``[... + blockDim + t]``).

    How it keeps the integer, index and branch instructions per (path element, row) down
    (issue #15; the SHAP kernels are issue-bound; ``benchmarks/kernel_isa.py`` counts them):

    * unsigned lane indices (``np.uint64``) and 32-bit element counters: no negative-index
      wraparound, no 64-bit compares; the lane arrays' row lengths checked once (4 and
      :data:`~distshap.kernels.cuda.device.LI_COLUMNS`; else the thread returns, which cannot
      happen with a device model), so a lane's address is a shift, not a 64-bit multiply;
    * each row's column of ``XT`` sliced once (``xa[f]``, ``xb[f]``: one product for both);
    * ``follows`` of a numeric element without its categorical branch (``cat < 0`` tested once
      for both rows; the element is the same for the whole warp);
    * the one-fractions' bits set and tested with a shifted 32-bit mask (no variable shifts
      of 64-bit values), the tile index in 32 bits.
    """
    from distshap.kernels.cuda.device import LI_COLUMNS

    nodes, weights = (a.astype(np.float32) for a in gauss_legendre(n_nodes))
    local = mode == "local"
    shared = mode != "global"
    lf_columns = LF_VALUE + 1

    @cuda.jit(cache=True)
    def kernel(lane_f, lane_i, lane_cat, cat_words, path_offsets, chunk_paths, chunk_offsets,
               chunk_group, lane_column, features, feature_offsets, XT, acc, scale, n_cols,
               row0):  # fmt: skip
        tid = cuda.threadIdx.x
        stride = cuda.blockDim.x
        n_rows = XT.shape[1]
        ra = row0 + cuda.blockIdx.y * (2 * stride) + tid
        if ra >= n_rows or lane_f.shape[1] != lf_columns or lane_i.shape[1] != LI_COLUMNS:
            return  # nothing below synchronises threads
        rb = ra + stride
        has_b = rb < n_rows
        if not has_b:
            rb = ra  # computed again, never added
        ch = cuda.blockIdx.x  # chunks vary fastest: blocks running together share rows (L2)
        base = chunk_group[ch] * n_cols
        if local:
            f0 = feature_offsets[ch]
            width = feature_offsets[ch + 1] - f0
        else:
            f0 = 0
            width = n_cols - 1
        rs = 2 * stride
        scale32 = np.float32(scale)
        one = np.float32(1.0)
        if shared:
            tile = cuda.shared.array(0, types.int64)  # [column * rs + (row b) * stride + tid]
            for c in range(width):
                tile[c * rs + tid] = 0
                tile[c * rs + stride + tid] = 0
        pa = cuda.local.array(n_nodes, np.float32)
        pb = cuda.local.array(n_nodes, np.float32)
        xa = XT[:, ra]  # the rows' values: feature f at xa[f], xb[f]
        xb = XT[:, rb]
        ta = np.uint32(tid)
        tb = np.uint32(stride + tid)
        urs = np.uint32(rs)
        u1 = np.uint64(1)
        m1 = np.uint32(1)
        for j in range(chunk_offsets[ch], chunk_offsets[ch + 1]):
            p = chunk_paths[j]
            s0 = np.uint64(path_offsets[p] + 1)  # first feature element (after the bias lane)
            k = np.uint32(path_offsets[p + 1] - path_offsets[p] - 1)
            value = lane_f[s0 - u1, LF_VALUE]
            for m in range(n_nodes):
                pa[m] = value * weights[m]
                pb[m] = value * weights[m]
            bits_a = np.uint32(0)
            bits_b = np.uint32(0)
            mask = m1  # bit e: element e (0-based) of the path
            e = np.uint32(0)
            while e < k:
                li = s0 + np.uint64(e)
                z = lane_f[li, LF_ZERO]
                lower = lane_f[li, LF_LOWER]
                upper = lane_f[li, LF_UPPER]
                f = np.uint64(np.uint32(lane_i[li, LI_FEATURE]))
                flags = lane_i[li, LI_FLAGS]
                nbits = lane_i[li, LI_NBITS]
                cat = lane_cat[li]
                missing = (flags & MISSING_FLAG) != 0
                other = (flags & CAT_OTHER_FLAG) != 0
                da = -z
                db = -z
                x_a = xa[f]
                x_b = xb[f]
                if cat < 0:  # numeric: the compiler drops follows' categorical branch here
                    fa = follows(x_a, lower, upper, missing, other, cat, nbits, cat_words)
                    fb = follows(x_b, lower, upper, missing, other, cat, nbits, cat_words)
                else:  # (kernel_isa counts the lines marked "categorical" as cold)
                    fa = follows(x_a, lower, upper, missing, other, cat,  # categorical
                                 nbits, cat_words)  # fmt: skip
                    fb = follows(x_b, lower, upper, missing, other, cat,  # categorical
                                 nbits, cat_words)  # fmt: skip
                if fa:
                    da = one - z
                    bits_a = np.uint32(bits_a | mask)
                if fb:
                    db = one - z
                    bits_b = np.uint32(bits_b | mask)
                for m in range(n_nodes):
                    pa[m] *= z + nodes[m] * da
                    pb[m] *= z + nodes[m] * db
                mask = np.uint32(mask << m1)
                e = np.uint32(e + m1)
            mask = m1
            e = np.uint32(0)
            while e < k:
                li = s0 + np.uint64(e)
                z = lane_f[li, LF_ZERO]
                if local:
                    col = np.uint32(lane_column[li])
                else:
                    col = np.uint32(lane_i[li, LI_FEATURE])
                da = -z
                if bits_a & mask:
                    da = one - z
                db = -z
                if bits_b & mask:
                    db = one - z
                if da != 0:  # else the element's factor may be 0 and its value is 0
                    total = np.float32(0.0)
                    for m in range(n_nodes):
                        total = add_quotient(total, pa[m], z + nodes[m] * da)
                    iv = np.int64(total * da * scale32)
                    if iv != 0:
                        if shared:
                            tile[np.uint32(col * urs + ta)] += iv
                        else:
                            cuda.atomic.add(acc, (ra, base + col), iv)
                if db != 0:
                    total = np.float32(0.0)
                    for m in range(n_nodes):
                        total = add_quotient(total, pb[m], z + nodes[m] * db)
                    iv = np.int64(total * db * scale32)
                    if iv != 0:
                        if shared:
                            tile[np.uint32(col * urs + tb)] += iv
                        elif has_b:
                            cuda.atomic.add(acc, (rb, base + col), iv)
                mask = np.uint32(mask << m1)
                e = np.uint32(e + m1)
        if shared:
            for c in range(width):
                if local:
                    f = features[f0 + c]
                else:
                    f = c
                iv = tile[c * rs + tid]
                if iv != 0:
                    cuda.atomic.add(acc, (ra, base + f), iv)
                iv = tile[c * rs + stride + tid]
                if iv != 0 and has_b:
                    cuda.atomic.add(acc, (rb, base + f), iv)

    return kernel


_LOW = np.int64(0xFFFFFFFF)


@cuda.jit(device=True)
def _add_split32(words, i, hi_i, iv):
    """Adds the int64 ``iv`` to the split sum (:func:`~distshap.kernels.cuda.device.read_split`)
    with lo word ``words[i]`` and hi word ``words[hi_i]``: ``iv``'s low half to lo (a native
    32-bit atomic returning the old word) and its high half to hi, plus 1 where the lo add
    wrapped around (its 32-bit sum below the low half). This module's own copy (as
    :mod:`.slot_quadrature` and :mod:`.slot_tables` keep theirs): under the CUDA simulator a
    device function may use ``cuda.*`` only from its kernel's module."""
    lo = np.uint32(iv & _LOW)
    old = cuda.atomic.add(words, i, lo)
    hi = np.uint32(iv >> 32)
    if np.uint32(old + lo) < lo:
        hi = np.uint32(hi + np.uint32(1))
    cuda.atomic.add(words, hi_i, hi)


_STEPS: dict = {}


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
    memory: on an H200 (fashion_mnist-med top pairs) ratios kept in a thread's local memory
    made the default slot kernel 7% slower (it is bound by instruction issue, mostly integer
    work, not by the divisions) and changed the last bits of 0.02% of the entries.
    """
    hit = _STEPS.get(n_nodes)
    if hit is not None:
        return hit
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

    _STEPS[n_nodes] = hit = (forward, diagonal, pair, pair2)
    return hit


def _make_interaction_kernel(n_nodes: int, shared: bool, slots: bool = False):
    """The interaction kernel: one thread per path, one block per (chunk of paths, row of
    ``X``), ``n_nodes`` nodes; the row's ``(F + 1) ** 2`` sums of the chunk's group in shared
    memory (``shared``: upper triangle, mirrored when flushed) or in global memory. ``slots``:
    into the row's pair slots (:mod:`distshap.pair_slots`; the upper triangle only); with
    ``shared``, a block whose chunk touches at most ``tile_capacity`` slots sums in a tile of
    them (:func:`~distshap.kernels.cuda.model.chunk_tiles`) and adds each to the row once.
    The arithmetic is :func:`pair_steps`'s.

    A shared-memory tile keeps each sum as two uint32 words
    (:func:`_add_split32`): lo words ``[0, n)``, hi words
    ``[n, 2 n)``, ``n`` the tile's slots (``n_cols ** 2``, or ``tile_capacity`` with
    ``slots``), the 8 bytes a slot of an int64 word. A 64-bit shared-memory atomic add is a
    compare-and-swap loop (``ATOMS.CAST.SPIN.64``), retried for every lane of the warp that
    hit the same slot (the lanes run sibling paths, which share most features); the split
    words add with native 32-bit atomics. The flush reads back the exact int64 sums
    (:func:`~distshap.kernels.cuda.device.read_split`): the same bits as int64 words."""
    weights = gauss_legendre(n_nodes)[1].astype(np.float32)
    forward, diagonal, pair, pair2 = pair_steps(n_nodes)

    @cuda.jit(device=True)
    def add(iv, a, c, fa, fc, r, acc, words, uhi, un, base, n_cols, use_tile, path_map,
            local_map, m0, k):  # fmt: skip
        """Adds a contribution ``iv`` (skipped when 0) of lanes ``a <= c`` (features ``fa <=
        fc``) of a path to row ``r``: to its slot (``slots``; entry ``m0 + a k + c`` of the
        slot maps), the shared tile's upper triangle (``shared``, mirrored when flushed) or
        both ``[fa, fc]`` and ``[fc, fa]`` of the row's matrix in ``acc``."""
        if iv != 0:
            if slots:
                at = m0 + a * k + c
                if shared and use_tile:
                    i = np.uint32(local_map[at])
                    _add_split32(words, i, np.uint32(uhi + i), iv)
                else:
                    cuda.atomic.add(acc, (r, path_map[at]), iv)
            elif shared:
                i = np.uint32(np.uint32(fa) * un + np.uint32(fc))
                _add_split32(words, i, np.uint32(uhi + i), iv)
            else:
                cuda.atomic.add(acc, (r, base + fa * n_cols + fc), iv)
                if fa != fc:
                    cuda.atomic.add(acc, (r, base + fc * n_cols + fa), iv)

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
            base = 0
        else:
            width = n_cols * n_cols
            base = chunk_group[ch] * width
            use_tile = True
        scale32 = np.float32(scale)
        one = np.float32(1.0)
        # shared: lo words [slot], hi words [hi_offset + slot]; slot f_i * n_cols + f_c, f_i
        # <= f_c (a dynamic shared array of 0 bytes where the kernel sums in global memory)
        words = cuda.shared.array(0, types.uint32)
        hi_offset = tile_capacity if slots else width  # the tile's slots
        uhi = np.uint32(hi_offset)
        un = np.uint32(n_cols)
        if shared and use_tile:
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
            k = s1 - s0
            m0 = 0
            if slots:  # slot of elements (a, c), a <= c: path_map[m0 + a * k + c] (0-based)
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
                    add(iv, li, li, fi, fi, r, acc, words, uhi, un, base, n_cols, use_tile,
                        path_map, local_map, m0, k)  # fmt: skip
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
                        add(iv, l2, l2, f2, f2, r, acc, words, uhi, un, base, n_cols,
                            use_tile, path_map, local_map, m0, k)  # fmt: skip
                        if live:
                            iv = pair(part, z2, d2, scale32)
                            add(iv, li, l2, fi, f2, r, acc, words, uhi, un, base, n_cols,
                                use_tile, path_map, local_map, m0, k)  # fmt: skip
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
                    add(iv, li, lc, fi, fc, r, acc, words, uhi, un, base, n_cols, use_tile,
                        path_map, local_map, m0, k)  # fmt: skip
                    add(iv2, l2, lc, f2, fc, r, acc, words, uhi, un, base, n_cols, use_tile,
                        path_map, local_map, m0, k)  # fmt: skip
        if shared and use_tile:
            cuda.syncthreads()
            for e in range(tid, width, cuda.blockDim.x):
                iv = read_split(words, e, hi_offset)
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

        @cuda.jit(cache=True)
        def slot_kernel(lane_f, lane_i, lane_cat, cat_words, path_offsets, chunk_paths,
                        chunk_offsets, chunk_group, X, acc, scale, row0, path_map, map_offsets,
                        local_map, tile_offsets, tile_slots, tile_capacity):  # fmt: skip
            body(lane_f, lane_i, lane_cat, cat_words, path_offsets, chunk_paths, chunk_offsets,
                 chunk_group, X, acc, scale, 0, row0, path_map, map_offsets, local_map,
                 tile_offsets, tile_slots, tile_capacity)  # fmt: skip

        return slot_kernel

    @cuda.jit(cache=True)
    def kernel(lane_f, lane_i, lane_cat, cat_words, path_offsets, chunk_paths, chunk_offsets,
               chunk_group, X, acc, scale, n_cols, row0):  # fmt: skip
        body(lane_f, lane_i, lane_cat, cat_words, path_offsets, chunk_paths, chunk_offsets,
             chunk_group, X, acc, scale, n_cols, row0, chunk_paths, chunk_offsets, chunk_paths,
             chunk_offsets, chunk_offsets, 0)  # fmt: skip

    return kernel


class SlotLayout:
    """A quadrature launch's paths gathered element-major for :func:`slot_rows_kernel`.

    Position ``j`` is the launch's ``j``-th path (``launch.paths[j]``) with ``pk[j]`` features
    and leaf value ``pv[j]``. Element ``e`` (0-based, sorted by feature as in the lanes) is
    ``ef[3 e + 0/1/2, j]`` (lower, upper, zero fraction), ``ei[3 e + 0/1/2, j]`` (feature,
    flags, category bits) and ``ecat[e, j]`` (category set offset). A block runs the positions
    ``offsets[b]:offsets[b + 1]`` (``merge`` consecutive chunks of the launch; ``n_blocks``
    blocks) and sums them in a tile of the slots ``tile_slots[tile_offsets[b]:tile_offsets[b +
    1]]`` (``most``: the largest tile). Upper-triangle entry ``(a, c)``, ``a <= c``, is number
    ``u = a k - a (a - 1) / 2 + c - a``: ``tmap[u, j]`` (int16) its block-local tile slot
    (:func:`~distshap.kernels.cuda.model.chunk_tiles` of the blocks; -1 beyond int16, where the
    block has too many slots for a tile and adds to the row's slots through ``path_map``).
    """

    __slots__ = ("ef", "ei", "ecat", "pk", "pv", "tmap", "kmax", "offsets", "tile_offsets",
                 "tile_slots", "n_blocks", "most", "__weakref__")  # fmt: skip

    def __init__(self, ef, ei, ecat, pk, pv, tmap, kmax: int, offsets=None, tile_offsets=None,
                 tile_slots=None, n_blocks: int = 0, most: int = 0):  # fmt: skip
        self.ef, self.ei, self.ecat, self.pk, self.pv = ef, ei, ecat, pk, pv
        self.tmap, self.kmax, self.offsets = tmap, kmax, offsets
        self.tile_offsets, self.tile_slots = tile_offsets, tile_slots
        self.n_blocks, self.most = n_blocks, most


@cuda.jit(cache=True)
def _gather_kernel(lane_f, lane_i, lane_cat, path_offsets, paths, map_offsets, local_map, ef, ei,
                   ecat, pk, pv, tmap):  # fmt: skip
    """One thread per position of a launch: its path's lanes and slot numbers, element-major."""
    j = cuda.grid(1)
    if j >= paths.shape[0]:
        return
    p = paths[j]
    s0 = path_offsets[p] + 1
    k = path_offsets[p + 1] - s0
    pk[j] = k
    pv[j] = lane_f[s0 - 1, LF_VALUE]
    for e in range(k):
        li = s0 + e
        ef[3 * e, j] = lane_f[li, LF_LOWER]
        ef[3 * e + 1, j] = lane_f[li, LF_UPPER]
        ef[3 * e + 2, j] = lane_f[li, LF_ZERO]
        ei[3 * e, j] = lane_i[li, LI_FEATURE]
        ei[3 * e + 1, j] = lane_i[li, LI_FLAGS]
        ei[3 * e + 2, j] = lane_i[li, LI_NBITS]
        ecat[e, j] = lane_cat[li]
    m = map_offsets[p]
    u = 0
    for a in range(k):
        for c in range(a, k):
            t = local_map[m + a * k + c]
            tmap[u, j] = t if t < 32768 else -1
            u += 1


_LAYOUTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_LAYOUT_LOCK = threading.Lock()


def _host(a) -> np.ndarray:
    return a.copy_to_host() if hasattr(a, "copy_to_host") else np.asarray(a)


def _merged_tiles(model, plan, slots, merge: int):
    """Host ``(offsets, (local_map, tiles, most))`` of the launches' blocks of ``merge``
    consecutive chunks (:func:`~distshap.kernels.cuda.model.chunk_tiles` of those blocks)."""
    from types import SimpleNamespace

    from distshap.kernels.cuda.model import chunk_tiles  # (model imports this module)

    offsets = []
    for launch in plan.quadrature:
        o = _host(launch.offsets).astype(np.int64)
        offsets.append(np.append(o[:-1:merge], o[-1]))
    host = SimpleNamespace(path_map=_host(slots.path_map), map_offsets=_host(slots.map_offsets),
                           num_slots=slots.num_slots)  # fmt: skip
    launches = [(_host(q.paths), o) for q, o in zip(plan.quadrature, offsets, strict=True)]
    return offsets, chunk_tiles(host, launches)


def slot_layout(model, plan, slots, stream, merge: int = 1) -> tuple:
    """The :class:`SlotLayout` of each quadrature launch of ``plan`` for blocks of at most
    ``merge`` chunks (gathered on the device on first use, kept as long as the device model's
    ``slots``). Blocks merge fewer chunks where the largest block's tile of slots would not
    fit in shared memory beside a row of features."""
    with _LAYOUT_LOCK:
        per_slots = _LAYOUTS.setdefault(slots, {})
        hit = per_slots.get(merge)
        if hit is not None:
            return hit
        offsets = _host(model.path_offsets)
        n_features = int(model.num_features)
        m = max(1, int(merge))
        while m > 1:
            merged, (local_map, tiles, most) = _merged_tiles(model, plan, slots, m)
            if 8 * most + 4 * n_features <= get_config().quadrature_shared_bytes:
                local_map = cuda.to_device(local_map, stream=stream)
                tiles = tuple((cuda.to_device(o, stream=stream),
                               cuda.to_device(t if t.size else np.zeros(1, np.int64),
                                              stream=stream)) for o, t in tiles)  # fmt: skip
                blocks = [(cuda.to_device(o, stream=stream), o.size - 1) for o in merged]
                break
            m //= 2
        if m == 1:  # the device model's chunk tiles
            local_map, tiles, most = slots.local_map, slots.tiles, slots.max_tile_slots
            blocks = [(q.offsets, q.n_chunks) for q in plan.quadrature]
        out = []
        for launch, (block_offsets, n_blocks), (tile_offsets, tile_slots) in zip(
            plan.quadrature, blocks, tiles, strict=True
        ):
            paths = _host(launch.paths).astype(np.int64)
            P = max(int(paths.size), 1)
            k = offsets[paths + 1] - offsets[paths] - 1
            kmax = max(int(k.max(initial=0)), 1)
            npairs = kmax * (kmax + 1) // 2
            lay = SlotLayout(
                ef=cuda.to_device(np.zeros((3 * kmax, P), np.float32), stream=stream),
                ei=cuda.to_device(np.zeros((3 * kmax, P), np.int32), stream=stream),
                ecat=cuda.to_device(np.full((kmax, P), -1, np.int64), stream=stream),
                pk=cuda.to_device(np.zeros(P, np.int32), stream=stream),
                pv=cuda.to_device(np.zeros(P, np.float32), stream=stream),
                tmap=cuda.to_device(np.full((npairs, P), -1, np.int16), stream=stream),
                kmax=kmax, offsets=block_offsets, tile_offsets=tile_offsets,
                tile_slots=tile_slots, n_blocks=int(n_blocks), most=int(most),
            )  # fmt: skip
            if paths.size:
                _gather_kernel[-(-P // 128), 128, stream](
                    model.lane_f, model.lane_i, model.lane_cat, model.path_offsets, launch.paths,
                    slots.map_offsets, local_map, lay.ef, lay.ei, lay.ecat, lay.pk, lay.pv,
                    lay.tmap,
                )  # fmt: skip
            out.append(lay)
        if not SIM:
            stream.synchronize()  # the layouts serve later calls on any stream
        out = tuple(out)
        per_slots[merge] = out
        return out


def _make_slot_rows_kernel(n_nodes: int, rows: int, cache_x: bool, probe: bool = False):
    """:func:`slot_rows_kernel`: one thread per path of the chunk, ``rows`` rows a block; the
    arithmetic is :func:`pair_steps`'s. ``probe``: a timing diagnostic without the tile's
    atomics (the values are computed, then dropped: wrong slots; benchmarks only)."""
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
                        if probe:
                            if iv == _PROBE_NEVER:
                                tile[rr * width + tmap[u0, j]] = iv
                        elif use_tile:
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
                            if probe:
                                if iv == _PROBE_NEVER:
                                    tile[rr * width + tmap[u, j]] = iv
                            elif use_tile:
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


_ROWS_KERNELS: dict = {}
_PROBE_NEVER = np.int64(-(2**62) + 12345)  # no contribution equals it (|sums| < 2**61)


def slot_rows_kernel(n_nodes: int, rows: int, cache_x: bool, probe: bool = False):
    """The ``"gathered"`` slot quadrature kernel (module docstring) for ``n_nodes`` nodes,
    ``rows`` rows a block, the rows' features in shared memory (``cache_x``) or read from
    ``X``; built on first use, compiled at launch.

    Launch: grid ``(chunks, ceil(rows of X / rows))``, ``T`` threads, ``8 rows
    tile_capacity`` bytes of dynamic shared memory, plus ``4 rows F`` with ``cache_x``.
    """
    key = (n_nodes, rows, cache_x, probe)
    kernel = _ROWS_KERNELS.get(key)
    if kernel is None:
        kernel = _make_slot_rows_kernel(n_nodes, rows, cache_x, probe)
        _ROWS_KERNELS[key] = kernel
    return kernel


_THREADS = 128  # threads of a slot_rows_kernel block


def _launch_slot_rows(model, plan, Xb, acc, scale, stream, slots, probe: bool = False) -> None:
    """The quadrature launches of ``plan`` into pair slots with :func:`slot_rows_kernel`;
    ``probe``: the timing diagnostic (wrong values)."""
    layouts = slot_layout(model, plan, slots, stream, config.SLOT_QUADRATURE_CHUNKS)
    nb, n_features = int(Xb.shape[0]), int(Xb.shape[1])
    for launch, lay in zip(plan.quadrature, layouts, strict=True):
        rows, cache_x, capacity = slot_rows_shape(n_features, lay.most)
        shared_bytes = 8 * rows * capacity + (4 * rows * n_features if cache_x else 0)
        per_launch = 65535 * rows  # grid.y is at most 65535
        kernel = slot_rows_kernel(launch.n_nodes, rows, cache_x, probe)
        for row0 in range(0, nb, per_launch):
            grid = (lay.n_blocks, -(-min(nb - row0, per_launch) // rows))
            kernel[grid, _THREADS, stream, shared_bytes](
                lay.ef, lay.ei, lay.ecat, lay.pk, lay.pv, model.cat_words, launch.paths,
                lay.offsets, lay.tmap, slots.map_offsets, slots.path_map, Xb, acc, scale, row0,
                lay.tile_offsets, lay.tile_slots, capacity,
            )  # fmt: skip


_KERNELS: dict = {}


def quadrature_kernel(n_nodes: int, shared: bool, interactions: bool = False,
                      slots: bool = False, local: bool = False, rows: int = 1):  # fmt: skip
    """The quadrature kernel for ``n_nodes`` nodes (built on first use, compiled at launch);
    ``slots``: the interaction kernel writing pair slots; ``local``: the SHAP kernel with
    chunk-local feature tiles (``shared`` and ``interactions`` ignored); ``rows`` 2: the SHAP
    kernel with two rows a thread (:func:`_make_two_row_shap_kernel`)."""
    key = (n_nodes, shared, interactions, slots, local, rows)
    kernel = _KERNELS.get(key)
    if kernel is None:
        if rows == 2 and not interactions and not slots:
            mode = "local" if local else ("shared" if shared else "global")
            kernel = _make_two_row_shap_kernel(n_nodes, mode)
        elif local:
            kernel = _make_local_shap_kernel(n_nodes)
        elif slots:
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
    slots. SHAP values: chunk-local feature tiles where :func:`local_tiles` (per launch, where
    its widest tile fits :data:`config.QUADRATURE_SHARED_BYTES`), else a column per feature."""
    nb = int(Xb.shape[0])
    variant = config.SLOT_QUADRATURE_VARIANT
    if slots is not None and variant not in ("gathered", "lanes"):
        raise ValueError(
            f"config.SLOT_QUADRATURE_VARIANT must be 'gathered' or 'lanes', got {variant!r}"
        )
    if slots is not None and variant != "lanes":
        _launch_slot_rows(model, plan, Xb, acc, scale, stream, slots)
        return
    if slots is not None:  # one block per (chunk, row); a chunk's slots in shared memory
        capacity = min(slots.max_tile_slots, get_config().quadrature_shared_bytes // 8)
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
        shared = interaction_tile_fits(F1)
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
    rows = shap_rows()
    if rows == 2 and quadrature_warps(n_features, 2) == 0 < quadrature_warps(n_features):
        rows = 1  # two rows' sums would not fit shared memory where one row's do
    warps = quadrature_warps(n_features, rows)
    shared = warps > 0
    tpb = 32 * (warps or min(4, int(get_config().shap_quadrature_warps)))
    shared_bytes = tpb * n_features * 8 * rows if shared else 0
    rows_per_launch = 65535 * tpb * rows  # grid.y (row tiles) is at most 65535
    local = local_tiles(plan)
    for launch in plan.quadrature:
        if local:
            local_rows = shap_rows()
            local_warps = quadrature_warps(launch.local_columns, local_rows)
            if local_warps == 0 and local_rows == 2:
                local_rows, local_warps = 1, quadrature_warps(launch.local_columns)
            if local_warps > 0:
                _launch_local(model, plan, launch, XT, acc, scale, F1, stream, local_warps,
                              local_rows)  # fmt: skip
                continue
        kernel = quadrature_kernel(launch.n_nodes, shared, rows=rows)
        extra = ()
        if rows == 2:  # the two-row kernel's signature: local-tile arrays unused
            extra = (launch.offsets, launch.offsets, launch.offsets)
        for row0 in range(0, nb, rows_per_launch):
            grid = (launch.n_chunks, -(-min(nb - row0, rows_per_launch) // (tpb * rows)))
            kernel[grid, tpb, stream, shared_bytes](
                model.lane_f, model.lane_i, model.lane_cat, model.cat_words, model.path_offsets,
                launch.paths, launch.offsets, launch.group, *extra, XT, acc, scale, F1, row0,
            )  # fmt: skip


def _launch_local(model, plan, launch, XT, acc, scale, F1, stream, warps: int,
                  rows: int = 1) -> None:  # fmt: skip
    """One SHAP quadrature launch with chunk-local feature tiles (``warps`` warps a block,
    ``rows`` rows a thread)."""
    nb = int(XT.shape[1])
    tpb = 32 * warps
    shared_bytes = tpb * launch.local_columns * 8 * rows
    rows_per_launch = 65535 * tpb * rows  # grid.y (row tiles) is at most 65535
    kernel = quadrature_kernel(launch.n_nodes, True, local=True, rows=rows)
    for row0 in range(0, nb, rows_per_launch):
        grid = (launch.n_local, -(-min(nb - row0, rows_per_launch) // (tpb * rows)))
        kernel[grid, tpb, stream, shared_bytes](
            model.lane_f, model.lane_i, model.lane_cat, model.cat_words, model.path_offsets,
            launch.paths, launch.local_offsets, launch.local_group, plan.lane_column,
            launch.local_features, launch.local_feature_offsets, XT, acc, scale, F1, row0,
        )  # fmt: skip
