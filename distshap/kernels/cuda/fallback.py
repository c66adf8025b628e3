"""The fallback kernel: paths longer than a warp (oversize bins), one thread per (row, path).

A path of more than 31 features does not fit a bin of 32 lanes; the packing gives it a bin of
its own and this kernel runs it with the float64 DP in local memory (EXTEND, then UNWOUND_SUM
per element; for interaction values once more per conditioned element, paper §3.5), up to
``max_fallback_features`` features (the local arrays' size, an argument of the kernel factory;
a longer path is refused when the device model is built, naming the CPU backend as the fix).
Such paths are rare (deep trees on many features), so simplicity wins over speed here. With
``slots`` (:func:`oversize_kernel`) it adds the upper triangle and the diagonal to a row's pair
slots instead (:mod:`distshap.pair_slots`).
"""

from __future__ import annotations

import functools

import numpy as np
from numba import cuda

from distshap.kernels.cuda.runtime import args
from distshap.kernels.cuda.runtime.device import (
    LD_VALUE,
    LD_ZERO,
    LI_FEATURE,
    LI_GROUP,
    extend_path,
    fixed,
    lane_follows,
    unwound_sum,
)  # fmt: skip
from distshap.plan.config import get_config

__all__ = ["launch_fallback", "oversize_kernel"]


def oversize_kernel(slots: bool = False, max_features: int | None = None):
    """The fallback kernel for paths of at most ``max_features`` features (default: the
    configuration's ``max_fallback_features``); ``slots``: interaction values into pair slots
    (upper triangle). Built once per arguments."""
    if max_features is None:
        max_features = get_config().max_fallback_features
    return _oversize_kernel(bool(slots), int(max_features))


@functools.cache
def _oversize_kernel(slots: bool, max_features: int):
    _MAXF1 = max_features + 1  # local array sizes: constants of the kernel
    _MAXF2 = max_features + 2

    @cuda.jit(device=True)
    def body(lane_f, lane_i, lane_cat, lane_d, cat_words, path_offsets, paths, X, acc, scale,
             n_cols, interactions, path_map, map_offsets):  # fmt: skip
        r = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        if r >= X.shape[0]:
            return
        p = paths[cuda.blockIdx.y]
        s0 = path_offsets[p]
        k = path_offsets[p + 1] - s0 - 1
        w = cuda.local.array(_MAXF2, np.float64)
        one = cuda.local.array(_MAXF1, np.float64)
        zero = cuda.local.array(_MAXF1, np.float64)
        diag = cuda.local.array(_MAXF1, np.float64)
        v = lane_d[s0, LD_VALUE]
        group = lane_i[s0, LI_GROUP]
        if slots:  # slot of 1-based elements (c, i), c <= i: path_map[m0 + c * k + i]
            m0 = map_offsets[p] - k - 1
        for i in range(1, k + 1):
            li = s0 + i
            zero[i] = lane_d[li, LD_ZERO]
            diag[i] = 0.0
            one[i] = 0.0
            if lane_follows(X[r, lane_i[li, LI_FEATURE]], lane_f, lane_i, lane_cat, cat_words,
                            li):  # fmt: skip
                one[i] = 1.0
        n_cond = k if interactions else 0
        for c in range(0, n_cond + 1):
            scale_c = 1.0 if c == 0 else 0.5 * (one[c] - zero[c])
            if scale_c == 0.0:
                continue
            depth = extend_path(w, zero, one, 1, k + 1, c)
            fc = lane_i[s0 + c, LI_FEATURE]
            for i in range(1, k + 1):
                if i == c or one[i] == zero[i]:
                    continue
                phi = unwound_sum(w, depth, zero[i], one[i]) * (one[i] - zero[i]) * v * scale_c
                fi = lane_i[s0 + i, LI_FEATURE]
                if not interactions:
                    ival = fixed(phi, scale)
                    if ival != 0:
                        cuda.atomic.add(acc, (r, group * n_cols + fi), ival)
                elif c == 0:
                    diag[i] += phi
                else:
                    diag[i] -= phi
                    ival = fixed(phi, scale)
                    if slots:
                        if ival != 0 and c < i:  # [f_c, f_i]: the upper triangle only
                            cuda.atomic.add(acc, (r, path_map[m0 + c * k + i]), ival)
                    elif ival != 0:
                        cuda.atomic.add(acc, (r, (group * n_cols + fc) * n_cols + fi), ival)
        if interactions:
            for i in range(1, k + 1):
                fi = lane_i[s0 + i, LI_FEATURE]
                ival = fixed(diag[i], scale)
                if ival != 0:
                    if slots:
                        cuda.atomic.add(acc, (r, path_map[m0 + i * k + i]), ival)
                    else:
                        cuda.atomic.add(acc, (r, (group * n_cols + fi) * n_cols + fi), ival)

    if slots:

        @cuda.jit(cache=True)
        def slot_kernel(lane_f, lane_i, lane_cat, lane_d, cat_words, path_offsets, paths, X, acc,
                        scale, path_map, map_offsets):  # fmt: skip
            """One thread per (row, oversize path): interaction values into pair slots."""
            body(lane_f, lane_i, lane_cat, lane_d, cat_words, path_offsets, paths, X, acc, scale,
                 0, True, path_map, map_offsets)  # fmt: skip

        return slot_kernel

    @cuda.jit(cache=True)
    def kernel(lane_f, lane_i, lane_cat, lane_d, cat_words, path_offsets, paths, X, acc, scale,
               n_cols, interactions):  # fmt: skip
        """One thread per (row, oversize path), float64 DP in local memory."""
        body(lane_f, lane_i, lane_cat, lane_d, cat_words, path_offsets, paths, X, acc, scale,
             n_cols, interactions, path_offsets, path_offsets)  # fmt: skip

    return kernel


def launch_fallback(model, Xb, acc, scale, F1, stream, interactions, slots=None):
    """Run the fallback kernel over the model's oversize paths on the batch ``Xb``; ``slots``
    (:class:`~.runtime.model.SlotArrays`): interaction values into pair slots."""
    nb = int(Xb.shape[0])
    kernel = oversize_kernel(slots is not None)
    for p0 in range(0, model.n_oversize, 65535):  # grid.y is at most 65535
        paths = model.oversize_paths[p0 : min(model.n_oversize, p0 + 65535)]
        tpb = 128
        grid = (-(-nb // tpb), int(paths.shape[0]))
        kernel_args = (model.lane_f, model.lane_i, model.lane_cat, model.lane_d,
                       model.cat_words, model.path_offsets, paths, Xb, acc, scale)  # fmt: skip
        if slots is None:
            args.configured(kernel, grid, tpb, stream)(*kernel_args, F1, interactions)
        else:
            args.configured(kernel, grid, tpb, stream)(
                *kernel_args, slots.path_map, slots.map_offsets
            )
