"""Paths longer than a warp: one thread per (row, element), against every background row.

The path's tests of each background row are redone in local memory (its elements do not fit
the lanes of one warp, so there are no masks); ``s(x, r)`` comes from the factor array
(:mod:`.direct`).
"""

from __future__ import annotations

from functools import cache

import numpy as np
from numba import cuda

from distshap.kernels.cuda.interventional.background import DeviceBackground
from distshap.kernels.cuda.interventional.common import WMAX
from distshap.kernels.cuda.runtime.device import LD_VALUE, LI_FEATURE, LI_GROUP, fixed, lane_follows
from distshap.kernels.cuda.runtime.model import DeviceModel

__all__ = ["launch_oversize", "oversize_kernel"]

_MAXF1 = WMAX  # local arrays: element positions 1..k


@cache
def oversize_kernel(transform: int, interactions: bool):
    """Paths longer than a warp: one thread per (row, element), the path's tests of each
    background row in local memory (SHAP values, or the element's row of the matrix); ``s``
    from ``factors`` (``m_x``, ``y`` and ``m_bg`` are not read: kept in the launch
    signature)."""

    @cuda.jit(cache=True)
    def kernel(lane_f, lane_i, lane_cat, lane_d, cat_words, path_offsets, elem_path, elem_pos,
               weights, X, bg_rows, m_x, y, m_bg, factors, acc, scale_b, n_cols):  # fmt: skip
        r = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        if r >= X.shape[0]:
            return  # nothing below synchronises threads
        p = elem_path[cuda.blockIdx.y]
        i = elem_pos[cuda.blockIdx.y]
        s0 = path_offsets[p]
        k = path_offsets[p + 1] - s0 - 1
        xf = cuda.local.array(_MAXF1, np.int8)
        rf = cuda.local.array(_MAXF1, np.int8)
        part = cuda.local.array(_MAXF1, np.float64)
        for e in range(1, k + 1):
            li = s0 + e
            xf[e] = lane_follows(X[r, lane_i[li, LI_FEATURE]], lane_f, lane_i, lane_cat,
                                 cat_words, li)  # fmt: skip
            part[e] = 0.0
        phi = 0.0
        for q in range(bg_rows.shape[0]):
            ok = True
            a = 0
            nb = 0
            for e in range(1, k + 1):
                li = s0 + e
                f = lane_follows(bg_rows[q, lane_i[li, LI_FEATURE]], lane_f, lane_i, lane_cat,
                                 cat_words, li)  # fmt: skip
                rf[e] = f
                if f:
                    if not xf[e]:
                        nb += 1
                elif xf[e]:
                    a += 1
                else:
                    ok = False
                    break
            if not ok:
                continue
            ix = xf[i] != 0 and rf[i] == 0
            ir = rf[i] != 0 and xf[i] == 0
            if not (ix or ir):
                continue
            s = 1.0
            if transform != 0:
                s = factors[r, q]
            if ix:
                phi += s * weights[0, a, nb]
            else:
                phi -= s * weights[0, nb, a]
            if interactions:
                for e in range(1, k + 1):
                    if e == i:
                        continue
                    ex = xf[e] != 0 and rf[e] == 0
                    er = rf[e] != 0 and xf[e] == 0
                    if ex:
                        part[e] += weights[1, a, nb] if ix else -weights[2, a, nb]
                    elif er:
                        part[e] += -weights[2, a, nb] if ix else weights[1, nb, a]
        v = lane_d[s0, LD_VALUE]
        g = lane_i[s0, LI_GROUP]
        fi = lane_i[s0 + i, LI_FEATURE]
        if not interactions:
            iv = fixed(phi * v, scale_b)
            if iv != 0:
                cuda.atomic.add(acc, (r, g * n_cols + fi), iv)
            return
        diag = phi
        for e in range(1, k + 1):
            if e == i:
                continue
            half = 0.5 * part[e]
            diag -= half
            iv = fixed(half * v, scale_b)
            if iv != 0:
                fe = lane_i[s0 + e, LI_FEATURE]
                cuda.atomic.add(acc, (r, (g * n_cols + fi) * n_cols + fe), iv)
        iv = fixed(diag * v, scale_b)
        if iv != 0:
            cuda.atomic.add(acc, (r, (g * n_cols + fi) * n_cols + fi), iv)

    return kernel


def launch_oversize(model: DeviceModel, bg: DeviceBackground, Xb, rowargs: tuple, acc,
                    scale_b: float, F1: int, s, transform: int,
                    interactions: bool) -> None:  # fmt: skip
    """The oversize kernel on every element of the paths longer than a warp, rows ``Xb``."""
    if not bg.n_elems:
        return
    nb = int(Xb.shape[0])
    tpb = min(64, 32 * -(-nb // 32))
    kernel = oversize_kernel(transform, interactions)
    m_x, y, factors = rowargs
    for e0 in range(0, bg.n_elems, 65535):  # grid.y is at most 65535
        e1 = min(bg.n_elems, e0 + 65535)
        kernel[(-(-nb // tpb), e1 - e0), tpb, s](
            model.lane_f, model.lane_i, model.lane_cat, model.lane_d, model.cat_words,
            model.path_offsets, bg.elem_path[e0:e1], bg.elem_pos[e0:e1], bg.weights, Xb,
            bg.rows, m_x, y, bg.m_bg, factors, acc, scale_b, F1,
        )  # fmt: skip
