"""The SHAP quadrature kernel for calls of few rows: a thread a path.

The row kernels of :mod:`.shap_quadrature` give each thread a row and walk a chunk's paths one
after another, so a call of one row keeps one thread of each block busy for the whole chunk.
Here a block runs one row on one chunk and its threads take the chunk's paths (thread ``t``
paths ``t``, ``t + blockDim``, ...). Each (row, path) contribution is the same float32
operations in the same order as the row kernels' (:func:`~.one_row_shap.make_shap_kernel`),
truncated to int64 on its own; the block sums them in shared memory with integer atomics
(one int64 a column: a feature, or a chunk-local tile's column) and adds the nonzero sums to
the accumulator. Integer addition is associative: the same bits as every other SHAP kernel.
A sibling unit's head folds its members in with :mod:`.unit_fold`, as the row kernels do.

Calls of at most ``path_thread_rows`` rows (:class:`~distshap.plan.config.Config`) take it.
"""

from __future__ import annotations

import numpy as np
from numba import cuda, types

from distshap.kernels.cuda.runtime.args import launch as launch_kernel
from distshap.kernels.cuda.runtime.device import (
    LF_VALUE,
    LF_ZERO,
    LI_FEATURE,
    LI_POSITION,
    add_quotient,
    lane_follows,
)
from distshap.kernels.cuda.unit_fold import (
    fold_pair,
    unit_bases,
    unit_entry,
    unit_is_pair,
    unit_moments,
    unit_scale,
    unit_skip,
)
from distshap.plan.config import get_config
from distshap.plan.geometry import gauss_legendre, local_tiles

__all__ = ["launch_path_threads", "path_thread_kernel"]

_KERNELS: dict = {}


def path_thread_kernel(n_nodes: int, mode: str, general: bool = True):
    """The thread-a-path SHAP kernel of ``n_nodes`` nodes (built on first use, compiled at
    launch); ``mode``: ``"local"`` (sums in the chunk's tile columns), ``"shared"`` (a column
    per feature) or ``"global"`` (integer atomics on the accumulator); without ``general``
    only sibling pairs' fold is compiled in (a launch whose units are all pairs)."""
    key = (n_nodes, mode, general)
    kernel = _KERNELS.get(key)
    if kernel is None:
        kernel = _KERNELS[key] = _make_kernel(n_nodes, mode, general)
    return kernel


def _make_kernel(n_nodes: int, mode: str, general: bool):
    nodes, weights = (a.astype(np.float32) for a in gauss_legendre(n_nodes))
    basis2, basis3 = unit_bases(n_nodes)
    local = mode == "local"
    shared = mode != "global"

    @cuda.jit(cache=True)
    def kernel(lane_f, lane_i, lane_cat, cat_words, path_offsets, chunk_paths, unit_offsets,
               unit_value, unit_lanes, unit_pair, chunk_offsets, chunk_group, lane_column,
               features, feature_offsets, XT, acc, scale, n_cols, row0):  # fmt: skip
        tid = cuda.threadIdx.x
        stride = cuda.blockDim.x
        r = row0 + cuda.blockIdx.y  # the grid has a row of blocks for each row
        ch = cuda.blockIdx.x
        base = chunk_group[ch] * n_cols
        if local:
            f0 = feature_offsets[ch]
            width = feature_offsets[ch + 1] - f0
        else:
            f0 = 0
            width = n_cols - 1
        scale32 = np.float32(scale)
        one = np.float32(1.0)
        if shared:
            tile = cuda.shared.array(0, types.int64)  # [column]
            for c in range(tid, width, stride):
                tile[c] = 0
            cuda.syncthreads()
        prod = cuda.local.array(n_nodes, np.float32)
        x = XT[:, r]  # the row's values by feature
        for j in range(chunk_offsets[ch] + tid, chunk_offsets[ch + 1], stride):
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
                    if local:
                        cuda.atomic.add(tile, np.int32(lane_column[lp]), iv)
                    elif shared:
                        cuda.atomic.add(tile, lane_i[lp, LI_FEATURE], iv)
                    else:
                        cuda.atomic.add(acc, (r, base + lane_i[lp, LI_FEATURE]), iv)
            elif general and e1 > e0:
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
                            lt = unit_lanes[e, i]
                            if local:
                                cuda.atomic.add(tile, np.int32(lane_column[lt]), c[i])
                            elif shared:
                                cuda.atomic.add(tile, lane_i[lt, LI_FEATURE], c[i])
                            else:
                                cuda.atomic.add(acc, (r, base + lane_i[lt, LI_FEATURE]), c[i])
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
                    if local:
                        cuda.atomic.add(tile, np.int32(lane_column[li]), iv)
                    elif shared:
                        cuda.atomic.add(tile, lane_i[li, LI_FEATURE], iv)
                    else:
                        cuda.atomic.add(acc, (r, base + lane_i[li, LI_FEATURE]), iv)
        if shared:
            cuda.syncthreads()
            for c in range(tid, width, stride):
                iv = tile[c]
                if iv != 0:
                    col = features[f0 + c] if local else c
                    cuda.atomic.add(acc, (r, base + col), iv)

    return kernel


def launch_path_threads(model, plan, XT, acc, scale, F1, stream, kept_arrays) -> None:
    """Run the SHAP quadrature launches of ``plan`` on the transposed rows ``XT`` (features x
    rows, at most 65,535 rows) a thread a path, adding to ``acc``. ``kept_arrays(launch,
    local)`` gives a launch's model and plan arrays in the row kernels' order
    (:func:`~.shap_quadrature._kept_arrays` with two rows a thread)."""
    nb = int(XT.shape[1])
    if nb == 0:
        return
    config = get_config()
    limit = int(config.quadrature_shared_bytes)
    local = local_tiles(plan)
    # the plan's chunks: the usual ones, or the few-rows plan's shorter ones
    # (runtime.model.shap_plan_of_rows)
    usual = plan is model.shap
    chunk = config.quadrature_chunk_paths if usual else config.few_rows_chunk_paths
    tpb = min(256, 32 * -(-max(1, int(chunk)) // 32))
    for launch in plan.quadrature:
        columns = launch.local_columns if local else F1 - 1
        mode = ("local" if local else "shared") if 8 * columns <= limit else "global"
        if mode == "global" and local:
            kept = kept_arrays(launch, False)  # a column per feature of the model
            chunks = launch.n_chunks
        else:
            kept = kept_arrays(launch, local)
            chunks = launch.n_local if local else launch.n_chunks
        shared_bytes = 8 * columns if mode != "global" else 0
        kernel = path_thread_kernel(launch.n_nodes, mode, launch.general_units)
        launch_kernel(kernel, (chunks, nb), tpb, stream, shared_bytes,
                      (*kept, XT, acc, scale, F1, 0))  # fmt: skip
