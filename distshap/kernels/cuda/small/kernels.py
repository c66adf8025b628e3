"""The small route's warp-per-row kernels and their launchers: a row's whole output from one warp.

One warp per row (a grid-stride loop); lane ``l`` runs the paths ``l, l + 32, ...`` of each
output group with the float64 DP of the fallback kernel (EXTEND, UNWOUND_SUM; for interaction
values once more per conditioned element, paper §3.5) into its own float64 accumulator (local
memory). A butterfly of warp shuffles sums the 32 accumulators (every lane ends with the same
bits), rounded once to the model's fixed point and written as float32 as the finish kernel
writes them. The additivity check runs in the same pass: each lane walks the trees ``l, l +
32, ...`` (the independent traversal of :mod:`distshap.kernels.margin`, on the raw values) and
a row whose values miss the margin by more than half the tolerance sets the mapped flag.

:func:`merged_kernel` (the DP unrolled for paths of at most :data:`.small_model.UNROLL_MAX`
features, loops beyond) runs models whose gather matrices do not fit shared memory
(:mod:`.small_gather`), :func:`slot_kernel` their pair slots. Local arrays are sized by
:class:`~.small_model.SmallLimits`, factory arguments. A row's bits depend on the row only.
"""

from __future__ import annotations

import functools
import math
import threading
import warnings
from collections import OrderedDict

import numpy as np
from numba import cuda

from distshap.additivity_rule import RTOL
from distshap.kernels.cuda.runtime import rawlaunch
from distshap.kernels.cuda.runtime.device import (
    FULL_MASK,
    SIM,
    extend_path,
    fixed,
    follows,
    unwound_sum,
)
from distshap.kernels.cuda.small.model import (
    H_BASE_SCORE,
    H_CAT_OFFSETS,
    H_CAT_OTHER,
    H_CAT_VALUES,
    H_DEFAULT_LEFT,
    H_EXPECTED,
    H_FEATURE,
    H_GROUP_PATHS,
    H_IS_CATEGORICAL,
    H_LEAF_VALUE,
    H_LEFT,
    H_LOWER,
    H_MISSING,
    H_MISSING_VALUE,
    H_NBITS,
    H_NODE_CAT_OFFSETS,
    H_NODE_FEATURE,
    H_PATH_OFFSETS,
    H_PATHS,
    H_RIGHT,
    H_ROOTS,
    H_SCALES,
    H_THRESHOLD,
    H_TREE_GROUP,
    H_UPPER,
    H_VALUE,
    H_WORDS,
    H_ZERO,
    H_ZEROS,
    MergedModel,
    SmallLimits,
    SmallModel,
    check_flag,
    small_limits,
    small_stream,
)  # fmt: skip
from distshap.kernels.treeshap import leaf

__all__ = ["launch_merged", "launch_warp_slots", "merged_kernel", "slot_kernel"]

_HALF_RTOL = 0.5 * RTOL  # stricter than the host check: every row it fails is flagged
_WARPS = 1 if SIM else 4  # warps a block (the simulator's shuffle syncs one warp's block)
_MAX_BLOCKS = 4096  # grid cap: more rows loop (grid-stride), the bits do not change

_leaf_device = cuda.jit(device=True)(leaf)

if SIM:  # pragma: no cover - only under NUMBA_ENABLE_CUDASIM=1 (no warp intrinsics there)

    def _replay(buf, row):
        """The butterfly of the GPU version over ``buf[row]`` (32 lanes), this lane's result."""
        tree = buf[row].copy()
        offset = 16
        while offset > 0:
            tree = tree + tree[np.arange(32) ^ offset]  # lane i: v_i + v_(i ^ offset)
            offset >>= 1
        return tree[cuda.threadIdx.x & 31]

    @cuda.jit(device=True)  # a device function: the simulator lends it its thread context
    def _warp_sum4(a0, a1, a2, a3):
        """Four warp sums, replayed from shared memory (two barriers for the four)."""
        buf = cuda.shared.array((4, 32), np.float64)
        lane = cuda.threadIdx.x & 31
        buf[0, lane], buf[1, lane], buf[2, lane], buf[3, lane] = a0, a1, a2, a3
        cuda.syncthreads()  # the simulator's block is one warp
        sums = (_replay(buf, 0), _replay(buf, 1), _replay(buf, 2), _replay(buf, 3))
        cuda.syncthreads()
        return sums

    @cuda.jit(device=True)
    def _warp_sum(value):
        return _warp_sum4(value, 0.0, 0.0, 0.0)[0]

else:

    @cuda.jit(device=True)
    def _warp_sum(value):
        """The sum of ``value`` over the warp, the same bits in every lane (butterfly)."""
        offset = 16
        while offset > 0:
            value += cuda.shfl_xor_sync(FULL_MASK, value, offset)
            offset >>= 1
        return value

    @cuda.jit(device=True)
    def _warp_sum4(a0, a1, a2, a3):
        """Four independent warp sums (their shuffles overlap)."""
        return _warp_sum(a0), _warp_sum(a1), _warp_sum(a2), _warp_sum(a3)


@cuda.jit(device=True)
def _add_path(p, X, r, ints, longs, f32s, f64s, bools, words, acc, n_cols, interactions, w,
              zero, one, diag):  # fmt: skip
    """Add path ``p``'s float64 contributions for row ``r`` to this lane's ``acc``."""
    s0 = longs[longs[H_PATH_OFFSETS] + p]
    k = longs[longs[H_PATH_OFFSETS] + p + 1] - s0 - 1
    v = f64s[longs[H_VALUE] + p]
    for i in range(1, k + 1):
        li = s0 + i
        zero[i] = f64s[longs[H_ZERO] + li]
        diag[i] = 0.0
        one[i] = 0.0
        if follows(X[r, ints[longs[H_FEATURE] + li]], f32s[longs[H_LOWER] + li],
                   f32s[longs[H_UPPER] + li], bools[longs[H_MISSING] + li],
                   bools[longs[H_CAT_OTHER] + li], longs[longs[H_CAT_OFFSETS] + li],
                   ints[longs[H_NBITS] + li], words):  # fmt: skip
            one[i] = 1.0
    n_cond = k if interactions else 0
    for c in range(0, n_cond + 1):
        scale_c = 1.0 if c == 0 else 0.5 * (one[c] - zero[c])
        if scale_c == 0.0:
            continue
        depth = extend_path(w, zero, one, 1, k + 1, c)
        fc = ints[longs[H_FEATURE] + s0 + c]
        for i in range(1, k + 1):
            if i == c or one[i] == zero[i]:
                continue
            phi = unwound_sum(w, depth, zero[i], one[i]) * (one[i] - zero[i]) * v * scale_c
            fi = ints[longs[H_FEATURE] + s0 + i]
            if not interactions:
                acc[fi] += phi
            elif c == 0:
                diag[i] += phi
            else:
                diag[i] -= phi
                acc[fc * n_cols + fi] += phi
    if interactions:
        for i in range(1, k + 1):
            fi = ints[longs[H_FEATURE] + s0 + i]
            acc[fi * n_cols + fi] += diag[i]


@cuda.jit(device=True)
def _store_shap(out, r, g, e, n_cols, value):
    out[r, g, e] = value


@cuda.jit(device=True)
def _store_interaction(out, r, g, e, n_cols, value):
    i = e // n_cols
    out[r, g, i, e - i * n_cols] = value


def _make_emit(store, interactions: bool):
    """The device function writing group ``g`` of row ``r`` (float32 values) and checking it."""

    @cuda.jit(device=True)
    def put(out, r, g, e, width, lane, n_cols, summed, scale, inv_scale, expected):
        """Store entry ``e`` (when ``e < width``) of its warp sum; return its float32 value."""
        value = np.float64(fixed(summed, scale)) * inv_scale  # the finish kernel's conversion
        if e == width - 1:
            value += expected  # the bias entry (its sum is 0: no path has feature F)
        value32 = np.float32(value)
        if e < width and (e & 31) == lane:
            store(out, r, g, e, n_cols, value32)
        return np.float64(value32) if e < width else 0.0

    @cuda.jit(device=True)
    def emit(acc, out, flag, r, g, lane, n_cols, scale, f64s, longs, check, margin, slot_i,
             slot_j, group_slots):  # fmt: skip
        width = n_cols * n_cols if interactions else n_cols
        expected = f64s[longs[H_EXPECTED] + g]
        inv_scale = 1.0 / scale
        total = 0.0
        size = 0.0
        # four independent butterflies at a time (latency), the same in every lane (the
        # shuffles stay converged); entries of the bias row and column sum to 0
        for e in range(0, width, 4):
            s0, s1, s2, s3 = _warp_sum4(
                acc[e],
                acc[e + 1] if e + 1 < width else 0.0,
                acc[e + 2] if e + 2 < width else 0.0,
                acc[e + 3] if e + 3 < width else 0.0,
            )
            v = put(out, r, g, e, width, lane, n_cols, s0, scale, inv_scale, expected)
            total += v
            size += abs(v)
            v = put(out, r, g, e + 1, width, lane, n_cols, s1, scale, inv_scale, expected)
            total += v
            size += abs(v)
            v = put(out, r, g, e + 2, width, lane, n_cols, s2, scale, inv_scale, expected)
            total += v
            size += abs(v)
            v = put(out, r, g, e + 3, width, lane, n_cols, s3, scale, inv_scale, expected)
            total += v
            size += abs(v)
        if check:
            m = _warp_sum(margin[0, g])
            bound = size + abs(m)
            if not bound >= 1.0:  # the check's max(scale, 1); a NaN scale stays NaN
                bound = 1.0 if bound == bound else bound
            if lane == 0 and not abs(total - m) <= _HALF_RTOL * bound:
                flag[0] = 1  # a NaN fails too

    return emit


@cuda.jit(device=True)
def _emit_slots(acc, out, flag, r, g, lane, n_cols, scale, f64s, longs, check, margin, slot_i,
                slot_j, group_slots):  # fmt: skip
    """Group ``g``'s upper triangle and diagonal into row ``r``'s pair slots (int64 at the
    fixed point: the integers the values above are made of)."""
    for t in range(group_slots[g], group_slots[g + 1]):
        value = _warp_sum(acc[slot_i[t] * n_cols + slot_j[t]])
        if (t & 31) == lane:
            out[r, t] = fixed(value, scale)


@functools.cache
def slot_kernel(limits: SmallLimits):
    """The warp-per-row pair-slot kernel for the compiled sizes ``limits``: interaction values
    of a row into its pair slots (int64 at the fixed point), for models whose gather matrices
    do not fit a block's shared memory."""
    acc_size = limits.interaction_columns * limits.interaction_columns
    n_el = limits.path_features + 1
    n_w = limits.path_features + 2
    n_groups_max = limits.groups
    interactions = True
    emit = _emit_slots

    @cuda.jit(device=True)
    def body(X, Xraw, out, flag, ints, longs, f32s, f64s, bools, words, check, scale, slot_i,
             slot_j, group_slots):  # fmt: skip
        lane = cuda.threadIdx.x & 31
        warp = (cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x) >> 5
        n_warps = (cuda.gridDim.x * cuda.blockDim.x) >> 5
        n_cols = X.shape[1] + 1
        width = n_cols * n_cols if interactions else n_cols
        acc = cuda.local.array(acc_size, np.float64)
        w = cuda.local.array(n_w, np.float64)
        zero = cuda.local.array(n_el, np.float64)
        one = cuda.local.array(n_el, np.float64)
        diag = cuda.local.array(n_el, np.float64)
        margin = cuda.local.array((1, n_groups_max), np.float64)
        paths = ints[longs[H_PATHS] : longs[H_PATHS + 1]]
        group_paths = ints[longs[H_GROUP_PATHS] : longs[H_GROUP_PATHS + 1]]
        for r in range(warp, X.shape[0], n_warps):  # the same rows in every lane of the warp
            if check:  # this lane's trees, by the independent traversal of the raw values
                roots = longs[longs[H_ROOTS] : longs[H_ROOTS + 1]]
                tree_group = ints[longs[H_TREE_GROUP] : longs[H_TREE_GROUP + 1]]
                leaf_value = f64s[longs[H_LEAF_VALUE] : longs[H_LEAF_VALUE + 1]]
                base = H_BASE_SCORE if lane == 0 else H_ZEROS
                for g in range(group_paths.shape[0] - 1):
                    margin[0, g] = f64s[longs[base] + g]
                missing = f32s[longs[H_MISSING_VALUE]]
                for t in range(lane, roots.shape[0], 32):
                    node = _leaf_device(
                        Xraw, r, roots[t],
                        ints[longs[H_LEFT] : longs[H_LEFT + 1]],
                        ints[longs[H_RIGHT] : longs[H_RIGHT + 1]],
                        ints[longs[H_NODE_FEATURE] : longs[H_NODE_FEATURE + 1]],
                        f64s[longs[H_THRESHOLD] : longs[H_THRESHOLD + 1]],
                        bools[longs[H_DEFAULT_LEFT] : longs[H_DEFAULT_LEFT + 1]],
                        bools[longs[H_IS_CATEGORICAL] : longs[H_IS_CATEGORICAL + 1]],
                        longs[longs[H_NODE_CAT_OFFSETS] : longs[H_NODE_CAT_OFFSETS + 1]],
                        ints[longs[H_CAT_VALUES] : longs[H_CAT_VALUES + 1]],
                        missing,
                    )  # fmt: skip
                    margin[0, tree_group[t]] += leaf_value[node]
            for g in range(group_paths.shape[0] - 1):
                for e in range(width):
                    acc[e] = 0.0
                for j in range(group_paths[g] + lane, group_paths[g + 1], 32):
                    _add_path(paths[j], X, r, ints, longs, f32s, f64s, bools, words, acc,
                              n_cols, interactions, w, zero, one, diag)  # fmt: skip
                emit(acc, out, flag, r, g, lane, n_cols, scale, f64s, longs, check, margin,
                     slot_i, slot_j, group_slots)  # fmt: skip

    @cuda.jit(cache=True)
    def kernel(X, acc, ints, longs, f32s, f64s, bools, words, scale, slot_i, slot_j,
               group_slots):  # fmt: skip
        """One warp per row: interaction values into the row's pair slots (int64)."""
        body(X, X, acc, slot_i, ints, longs, f32s, f64s, bools, words, False, scale, slot_i,
             slot_j, group_slots)  # fmt: skip

    return kernel


# ------------------------------------------------------------------------------------------
# the merged-argument kernels: two constant arrays, the DP unrolled for short paths
# ------------------------------------------------------------------------------------------


def _make_dp(K: int):
    """EXTEND and UNWOUND_SUM for paths of at most ``K`` features, loops of constant trip
    counts (unrolled, the local arrays kept in registers): the operations of
    :func:`~distshap.kernels.treeshap.extend_path` (elements ``1..k`` but ``skip``) and
    :func:`~distshap.kernels.treeshap.unwound_sum`, in their order, on the same values."""

    @cuda.jit(device=True)
    def extend(w, zero, one, k, skip):
        w[0] = 1.0
        for i in range(1, K + 1):  # w[depth] = 0.0 of each step: not written before it
            w[i] = 0.0
        depth = 0
        for e in range(1, K + 1):
            if e <= k and e != skip:
                depth += 1
                zero_fraction = zero[e]
                one_fraction = one[e]
                scale = 1.0 / (depth + 1)
                for i in range(K - 1, -1, -1):
                    if i < depth:
                        w[i + 1] += one_fraction * w[i] * (i + 1) * scale
                        w[i] = zero_fraction * w[i] * (depth - i) * scale
        return depth

    @cuda.jit(device=True)
    def unwound(w, depth, zero_fraction, one_fraction):
        total = 0.0
        if one_fraction != 0.0:
            next_one = w[0]
            for d in range(1, K + 1):
                if d == depth:
                    next_one = w[d]
            for j in range(K - 1, -1, -1):
                if j < depth:
                    tmp = next_one * (depth + 1) / ((j + 1) * one_fraction)
                    total += tmp
                    next_one = w[j] - tmp * zero_fraction * (depth - j) / (depth + 1)
        elif zero_fraction != 0.0:
            for j in range(K - 1, -1, -1):
                if j < depth:
                    total += w[j] * (depth + 1) / (zero_fraction * (depth - j))
        return total

    return extend, unwound


def _make_add_path(K: int, interactions: bool, max_path_features: int):
    """Path ``p``'s float64 contributions for row ``r`` into this lane's ``acc`` (the
    operations of :func:`_add_path`), on the merged arrays; ``K`` > 0: the unrolled DP for
    paths of at most ``K`` features, 0: the loops of :func:`_add_path` (up to
    ``max_path_features``)."""
    N = K if K else max_path_features  # the elements' loop bound
    if K:
        extend, unwound = _make_dp(K)
    else:

        @cuda.jit(device=True)
        def extend(w, zero, one, k, skip):
            return extend_path(w, zero, one, 1, k + 1, skip)

        unwound = unwound_sum

    @cuda.jit(device=True)
    def add_path(p, X, r, I, D, words, acc, n_cols, w, zero, one, diag):  # noqa: E741
        s0 = I[I[H_PATH_OFFSETS] + p]
        k = I[I[H_PATH_OFFSETS] + p + 1] - s0 - 1
        v = D[I[H_VALUE] + p]
        for i in range(1, N + 1):
            if i <= k:
                li = s0 + i
                zero[i] = D[I[H_ZERO] + li]
                diag[i] = 0.0
                one[i] = 0.0
                if follows(X[r, I[I[H_FEATURE] + li]], np.float32(D[I[H_LOWER] + li]),
                           np.float32(D[I[H_UPPER] + li]), I[I[H_MISSING] + li] != 0,
                           I[I[H_CAT_OTHER] + li] != 0, I[I[H_CAT_OFFSETS] + li],
                           I[I[H_NBITS] + li], words):  # fmt: skip
                    one[i] = 1.0
        for c in range(0, (N if interactions else 0) + 1):
            if c <= k:
                scale_c = 1.0 if c == 0 else 0.5 * (one[c] - zero[c])
                if scale_c != 0.0:
                    depth = extend(w, zero, one, k, c)
                    fc = I[I[H_FEATURE] + s0 + c]
                    for i in range(1, N + 1):
                        if i <= k and i != c and one[i] != zero[i]:
                            phi = (unwound(w, depth, zero[i], one[i]) * (one[i] - zero[i]) * v
                                   * scale_c)  # fmt: skip
                            fi = I[I[H_FEATURE] + s0 + i]
                            if not interactions:
                                acc[fi] += phi
                            elif c == 0:
                                diag[i] += phi
                            else:
                                diag[i] -= phi
                                acc[fc * n_cols + fi] += phi
        if interactions:
            for i in range(1, N + 1):
                if i <= k:
                    fi = I[I[H_FEATURE] + s0 + i]
                    acc[fi * n_cols + fi] += diag[i]

    return add_path


@cuda.jit(device=True)
def _leaf_merged(X, r, node, I, D, missing):  # noqa: E741
    """:func:`distshap.kernels.treeshap.leaf` on the merged arrays (the same comparisons)."""
    left = I[I[H_LEFT] : I[H_LEFT + 1]]
    right = I[I[H_RIGHT] : I[H_RIGHT + 1]]
    feature = I[I[H_NODE_FEATURE] : I[H_NODE_FEATURE + 1]]
    default_left = I[I[H_DEFAULT_LEFT] : I[H_DEFAULT_LEFT + 1]]
    is_categorical = I[I[H_IS_CATEGORICAL] : I[H_IS_CATEGORICAL + 1]]
    cat_offsets = I[I[H_NODE_CAT_OFFSETS] : I[H_NODE_CAT_OFFSETS + 1]]
    cat_values = I[I[H_CAT_VALUES] : I[H_CAT_VALUES + 1]]
    threshold = D[I[H_THRESHOLD] : I[H_THRESHOLD + 1]]
    while left[node] >= 0:
        x = X[r, feature[node]]
        if math.isnan(x) or np.float32(x) == missing:
            go_left = default_left[node] != 0
        elif is_categorical[node] != 0:
            go_left = True
            if x >= 0.0:
                code = int(x)
                for i in range(cat_offsets[node], cat_offsets[node + 1]):
                    if cat_values[i] == code:
                        go_left = False
        else:
            go_left = x < threshold[node]
        node = left[node] if go_left else right[node]
    return node


def _make_merged_emit(interactions: bool):
    """:func:`_make_emit`'s ``emit`` reading the expected values from ``D``."""
    emit = _make_emit(_store_interaction if interactions else _store_shap, interactions)

    @cuda.jit(device=True)
    def emit_merged(acc, out, flag, r, g, lane, n_cols, scale, D, I, check, margin):  # noqa: E741
        emit(acc, out, flag, r, g, lane, n_cols, scale, D, I, check, margin, I, I, I)

    return emit_merged


@functools.cache
def merged_kernel(kind: str, K: int, raw: bool, limits: SmallLimits):
    """The warp-per-row small kernel: ``kind`` ``"shap"`` or ``"interactions"``, the DP
    unrolled for paths of at most ``K`` features (0: loops), ``raw``: the check traverses a
    second array of raw values (else the rows themselves); ``limits``: the compiled sizes.
    Made once per arguments."""
    jit = cuda.jit(cache=True)
    interactions = kind != "shap"
    columns = limits.interaction_columns if interactions else limits.shap_columns
    acc_size = columns * columns if interactions else columns
    n_el = (K if K else limits.path_features) + 1  # local array sizes: constants
    n_w = n_el + 1
    n_groups_max = limits.groups
    add_path = _make_add_path(K, interactions, limits.path_features)
    emit = _make_merged_emit(interactions)
    scale_at = 1 if interactions else 0

    @cuda.jit(device=True)
    def body(X, Xraw, out, flag, I, D, check):  # noqa: E741
        lane = cuda.threadIdx.x & 31
        warp = (cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x) >> 5
        n_warps = (cuda.gridDim.x * cuda.blockDim.x) >> 5
        n_cols = X.shape[1] + 1
        width = n_cols * n_cols if interactions else n_cols
        acc = cuda.local.array(acc_size, np.float64)
        w = cuda.local.array(n_w, np.float64)
        zero = cuda.local.array(n_el, np.float64)
        one = cuda.local.array(n_el, np.float64)
        diag = cuda.local.array(n_el, np.float64)
        margin = cuda.local.array((1, n_groups_max), np.float64)
        scale = D[I[H_SCALES] + scale_at]
        words = I[I[H_WORDS] :]
        paths = I[I[H_PATHS] : I[H_PATHS + 1]]
        group_paths = I[I[H_GROUP_PATHS] : I[H_GROUP_PATHS + 1]]
        n_groups = group_paths.shape[0] - 1
        for r in range(warp, X.shape[0], n_warps):  # the same rows in every lane of the warp
            if check:  # this lane's trees, by the independent traversal of the raw values
                roots = I[I[H_ROOTS] : I[H_ROOTS + 1]]
                tree_group = I[I[H_TREE_GROUP] : I[H_TREE_GROUP + 1]]
                leaf_value = D[I[H_LEAF_VALUE] : I[H_LEAF_VALUE + 1]]
                base = H_BASE_SCORE if lane == 0 else H_ZEROS
                for g in range(n_groups):
                    margin[0, g] = D[I[base] + g]
                missing = np.float32(D[I[H_MISSING_VALUE]])
                for t in range(lane, roots.shape[0], 32):
                    node = _leaf_merged(Xraw, r, roots[t], I, D, missing)
                    margin[0, tree_group[t]] += leaf_value[node]
            for g in range(n_groups):
                for e in range(width):
                    acc[e] = 0.0
                for j in range(group_paths[g] + lane, group_paths[g + 1], 32):
                    add_path(paths[j], X, r, I, D, words, acc, n_cols, w, zero, one, diag)
                emit(acc, out, flag, r, g, lane, n_cols, scale, D, I, check, margin)

    if raw:

        @jit
        def kernel(X, Xraw, out, flag, I, D, check):  # noqa: E741
            """One warp per row: the row's values (float32, bias included) and its check of
            the raw values ``Xraw``."""
            body(X, Xraw, out, flag, I, D, check)

    else:

        @jit
        def kernel(X, out, flag, I, D, check):  # noqa: E741
            """One warp per row: the row's values (float32, bias included) and its check
            (the rows are the raw values)."""
            body(X, X, out, flag, I, D, check)

    return kernel


# ------------------------------------------------------------------------------------------
# launching
# ------------------------------------------------------------------------------------------

_LAUNCHERS: OrderedDict = OrderedDict()  # (kernel, grid, stream handle) -> configured kernel
_LOCK = threading.Lock()


def _grid_block(n_rows: int) -> tuple[int, int]:
    """Blocks and threads a block of the warp-per-row kernels for ``n_rows`` rows."""
    return max(1, min(-(-n_rows // _WARPS), _MAX_BLOCKS)), 32 * _WARPS


def _launcher(kernel, n_rows: int, s):
    """``kernel[grid, block, s]``, configured once per grid and stream (configuring costs host
    time and warns about small grids, which small inputs have by nature)."""
    grid, block = _grid_block(n_rows)
    key = (id(kernel), grid, getattr(s, "handle", s) if not SIM else 0)
    hit = _LAUNCHERS.get(key)
    if hit is None:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*under-utilization.*")
            hit = kernel[grid, block, s]
        with _LOCK:
            _LAUNCHERS[key] = hit
            while len(_LAUNCHERS) > 64:
                _LAUNCHERS.popitem(last=False)
    return hit


def launch_merged(mm: MergedModel, X, Xraw, out, interactions: bool, check: bool):
    """Run the warp-per-row kernel on the device rows ``X`` (float32) into ``out`` (``(n, G, F
    + 1)`` / ``(n, G, F + 1, F + 1)`` float32); with ``check``, each row's traversal of
    ``Xraw`` (the model's raw values, float32 or float64; ``None`` or ``X`` itself: the rows
    are the raw values, one argument fewer) too. Returns the flag and the stream for
    :func:`.small_model.read_flag`. Launched through the driver (:mod:`.rawlaunch`) where it
    can be: the same kernel and bits."""
    kind = "interactions" if interactions else "shap"
    raw = Xraw is not None and Xraw is not X
    kernel = merged_kernel(kind, mm.K, raw, small_limits())
    flag = check_flag()
    args = (X, Xraw, out) if raw else (X, out)
    args = (*args, flag, mm.I, mm.D, bool(check))
    if not SIM:
        s = rawlaunch.current_stream()
        grid, block = _grid_block(int(X.shape[0]))
        key = ("merged", kind, mm.K, Xraw.dtype.char if raw else "")
        if rawlaunch.launch(kernel, key, grid, block, 0, args, s):
            return flag, s
    s = small_stream()
    _launcher(kernel, int(X.shape[0]), s)(*args)
    return flag, s


def launch_warp_slots(sm: SmallModel, X, acc, dev, s) -> None:
    """Interaction values of the rows ``X`` into their pair slots ``acc`` (int64 ``(n, S)``,
    zero on entry) by :func:`slot_kernel`; ``dev`` is the model's
    :class:`~distshap.kernels.cuda.runtime.model.SlotArrays`."""
    kernel = slot_kernel(small_limits())
    _launcher(kernel, int(X.shape[0]), s)(X, acc, sm.ints, sm.longs, sm.f32s, sm.f64s, sm.bools,
                                          sm.words, sm.interaction_scale, dev.slot_i,
                                          dev.slot_j, dev.group_slots)  # fmt: skip
