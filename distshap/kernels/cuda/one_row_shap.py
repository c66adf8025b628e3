"""The one-row SHAP quadrature kernels: a thread a row, for models whose two rows' sums do
not fit shared memory where one row's do (:mod:`.shap_quadrature` runs two rows a thread
otherwise). The same float32 operations in the same order as the two-row kernel's, so the same
int64 contributions; sibling units as there (:mod:`.unit_fold`).
"""

from __future__ import annotations

import numpy as np
from numba import cuda, types

from distshap.kernels.cuda.runtime.device import (
    LF_VALUE,
    LF_ZERO,
    LI_FEATURE,
    LI_POSITION,
    add_quotient,
    lane_follows,
)  # fmt: skip
from distshap.kernels.cuda.unit_fold import (
    fold_pair,
    unit_bases,
    unit_entry,
    unit_is_pair,
    unit_moments,
    unit_scale,
    unit_skip,
)
from distshap.plan.geometry import gauss_legendre

__all__ = ["make_local_shap_kernel", "make_shap_kernel"]


def make_shap_kernel(n_nodes: int, shared: bool):
    """The SHAP kernel: one thread per row of ``XT`` (features x rows), ``n_nodes`` nodes;
    row sums of every feature in shared memory (``shared``) or added to global memory
    directly (see :func:`make_local_shap_kernel` for chunk-local tiles)."""
    nodes, weights = (a.astype(np.float32) for a in gauss_legendre(n_nodes))
    basis2, basis3 = unit_bases(n_nodes)

    @cuda.jit(cache=True)
    def kernel(lane_f, lane_i, lane_cat, cat_words, path_offsets, chunk_paths, unit_offsets,
               unit_value, unit_lanes, unit_pair, chunk_offsets, chunk_group, XT, acc, scale,
               n_cols, row0):  # fmt: skip
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
        x = XT[:, r]  # the row's values by feature
        for j in range(chunk_offsets[ch], chunk_offsets[ch + 1]):
            p = chunk_paths[j]
            s0 = path_offsets[p] + 1  # first feature element (after the bias lane)
            s1 = path_offsets[p + 1]
            value = lane_f[s0 - 1, LF_VALUE]
            e0 = unit_offsets[p]  # a sibling unit's entries (plan.units): p is its head
            e1 = unit_offsets[p + 1]
            skip = unit_skip(unit_lanes, lane_i, e0, e1)  # the head's own tail elements
            if e1 > e0:
                value = one  # the leaf values come in with h (unit_fold)
            for m in range(n_nodes):
                prod[m] = value * weights[m]
            bits = np.uint32(0)
            for li in range(s0, s1):
                z = lane_f[li, LF_ZERO]
                d = -z
                if lane_follows(x[lane_i[li, LI_FEATURE]], lane_f, lane_i, lane_cat, cat_words,
                                li):  # fmt: skip
                    d = one - z
                    bits |= np.uint32(1) << np.uint32(li - s0)
                if not (skip >> np.uint32(li - s0)) & np.uint32(1):
                    for m in range(n_nodes):
                        prod[m] *= z + nodes[m] * d
            if e1 > e0 and unit_is_pair(unit_lanes, e0, e1):  # a sibling pair
                lp = unit_lanes[e0, 0]
                q = unit_lanes[e0 + 1, 0]
                iv = fold_pair(prod, nodes, lane_f, lane_i, lane_cat, cat_words, lp, q,
                               (bits >> np.uint32(lane_i[lp, LI_POSITION] - 1)) & np.uint32(1),
                               x[lane_i[q, LI_FEATURE]], scale32)  # fmt: skip
                if iv != 0:
                    col = lane_i[lp, LI_FEATURE]
                    if shared:
                        tile[col * stride + tid] += iv
                    else:
                        cuda.atomic.add(acc, (r, base + col), iv)
            elif e1 > e0:
                m0, m1, m2 = unit_moments(prod, basis2)
                h0 = h1 = h2 = h3 = np.float32(0.0)
                for e in range(e0, e1):
                    c, h = unit_entry(lane_f, lane_i, lane_cat, cat_words, unit_value, unit_lanes,
                                      e, x, m0, m1, m2, scale32)  # fmt: skip
                    h0 += h[0]
                    h1 += h[1]
                    h2 += h[2]
                    h3 += h[3]
                    for i in range(3):
                        if c[i] != 0:  # a real tail slot
                            col = lane_i[unit_lanes[e, i], LI_FEATURE]
                            if shared:
                                tile[col * stride + tid] += c[i]
                            else:
                                cuda.atomic.add(acc, (r, base + col), c[i])
                unit_scale(prod, h0, h1, h2, h3, basis3)
            for li in range(s0, s1):
                if (skip >> np.uint32(li - s0)) & np.uint32(1):
                    continue  # a tail element: added by the unit's entries
                z = lane_f[li, LF_ZERO]
                d = -z
                if (bits >> np.uint32(li - s0)) & np.uint32(1):
                    d = one - z
                iv = np.int64(0)
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


def make_local_shap_kernel(n_nodes: int):
    """The SHAP kernel with chunk-local feature tiles: as :func:`make_shap_kernel` with
    ``shared``, a thread's row sums in shared memory, one int64 column per feature of the
    block's chunk (``features[feature_offsets[ch]:feature_offsets[ch + 1]]``; a lane adds at
    its ``lane_column``); the same float32 operations in the same order, so the same int64
    contributions."""
    nodes, weights = (a.astype(np.float32) for a in gauss_legendre(n_nodes))
    basis2, basis3 = unit_bases(n_nodes)

    @cuda.jit(cache=True)
    def kernel(lane_f, lane_i, lane_cat, cat_words, path_offsets, chunk_paths, unit_offsets,
               unit_value, unit_lanes, unit_pair, chunk_offsets, chunk_group, lane_column,
               features, feature_offsets, XT, acc, scale, n_cols, row0):  # fmt: skip
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
        x = XT[:, r]  # the row's values by feature
        for j in range(chunk_offsets[ch], chunk_offsets[ch + 1]):
            p = chunk_paths[j]
            s0 = path_offsets[p] + 1  # first feature element (after the bias lane)
            s1 = path_offsets[p + 1]
            value = lane_f[s0 - 1, LF_VALUE]
            e0 = unit_offsets[p]  # a sibling unit's entries (plan.units): p is its head
            e1 = unit_offsets[p + 1]
            skip = unit_skip(unit_lanes, lane_i, e0, e1)  # the head's own tail elements
            if e1 > e0:
                value = one  # the leaf values come in with h (unit_fold)
            for m in range(n_nodes):
                prod[m] = value * weights[m]
            bits = np.uint32(0)
            for li in range(s0, s1):
                z = lane_f[li, LF_ZERO]
                d = -z
                if lane_follows(x[lane_i[li, LI_FEATURE]], lane_f, lane_i, lane_cat, cat_words,
                                li):  # fmt: skip
                    d = one - z
                    bits |= np.uint32(1) << np.uint32(li - s0)
                if not (skip >> np.uint32(li - s0)) & np.uint32(1):
                    for m in range(n_nodes):
                        prod[m] *= z + nodes[m] * d
            if e1 > e0 and unit_is_pair(unit_lanes, e0, e1):  # a sibling pair
                lp = unit_lanes[e0, 0]
                q = unit_lanes[e0 + 1, 0]
                iv = fold_pair(prod, nodes, lane_f, lane_i, lane_cat, cat_words, lp, q,
                               (bits >> np.uint32(lane_i[lp, LI_POSITION] - 1)) & np.uint32(1),
                               x[lane_i[q, LI_FEATURE]], scale32)  # fmt: skip
                if iv != 0:
                    tile[np.int32(lane_column[lp]) * stride + tid] += iv
            elif e1 > e0:
                m0, m1, m2 = unit_moments(prod, basis2)
                h0 = h1 = h2 = h3 = np.float32(0.0)
                for e in range(e0, e1):
                    c, h = unit_entry(lane_f, lane_i, lane_cat, cat_words, unit_value, unit_lanes,
                                      e, x, m0, m1, m2, scale32)  # fmt: skip
                    h0 += h[0]
                    h1 += h[1]
                    h2 += h[2]
                    h3 += h[3]
                    for i in range(3):
                        if c[i] != 0:  # a real tail slot
                            tile[np.int32(lane_column[unit_lanes[e, i]]) * stride + tid] += c[i]
                unit_scale(prod, h0, h1, h2, h3, basis3)
            for li in range(s0, s1):
                if (skip >> np.uint32(li - s0)) & np.uint32(1):
                    continue  # a tail element: added by the unit's entries
                z = lane_f[li, LF_ZERO]
                d = -z
                if (bits >> np.uint32(li - s0)) & np.uint32(1):
                    d = one - z
                iv = np.int64(0)
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
