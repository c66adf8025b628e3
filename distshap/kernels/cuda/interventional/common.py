"""Device helpers and host constants shared by the interventional kernels."""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from numba import cuda

import distshap.kernels.interventional_math as im
from distshap.kernels.cuda.runtime.device import LI_FEATURE, LI_FEATURES, LI_POSITION, LI_START

__all__ = [
    "WMAX",
    "bin_lane",
    "row_range",
    "block_rows",
    "scaling",
    "shapley_weights",
]

WMAX = 128  # weight tables cover a + b < 128 (longest fallback path: 127 features)


@lru_cache(maxsize=1)
def shapley_weights() -> np.ndarray:
    """float64 ``(3, 128, 128)``: the weights of a path's game, correctly rounded.

    ``[0, a, b] = (a-1)! b! / (a+b)!`` (SHAP value of an element in ``X``; one in ``R`` takes
    ``-[0, b, a]``); ``[1, a, b] = (a-2)! b! / (a+b-1)!`` (interaction of two elements in
    ``X``; two in ``R`` take ``[1, b, a]``); ``[2, a, b] = (a-1)! (b-1)! / (a+b-1)!`` (one in
    ``X``, one in ``R``, taken negative). Entries without a meaning are 0.
    """
    w = np.zeros((3, WMAX, WMAX), np.float64)
    for a in range(WMAX):
        for b in range(WMAX - a):
            if a >= 1:
                w[0, a, b] = 1 / (a * math.comb(a + b, b))  # int / int: correctly rounded
            if a >= 2:
                w[1, a, b] = 1 / ((a - 1) * math.comb(a + b - 1, b))
            if a >= 1 and b >= 1:
                w[2, a, b] = 1 / ((a + b - 1) * math.comb(a + b - 2, a - 1))
    return w


@cuda.jit(device=True)
def bin_lane(lane_i, bin_offsets, b, lane):
    """This lane of bin ``b``: lane index, whether it holds an element, feature, position in
    its path (0: bias lane), the path's first lane in the bin, the path's features ``k``."""
    base = bin_offsets[b]
    valid = lane < bin_offsets[b + 1] - base
    li = base + lane if valid else base
    feat = lane_i[li, LI_FEATURE] if valid else 0
    pos = lane_i[li, LI_POSITION] if valid else 0
    start = lane_i[li, LI_START] if valid else lane
    k = lane_i[li, LI_FEATURES] if valid else 0
    return li, valid, feat, pos, start, k


_rescale = cuda.jit(device=True)(im.rescale)


@cuda.jit(device=True)
def scaling(transform, m_x, y_x, m_r):
    """``s(x, r)``: 1 for ``"raw"`` and where the margins are equal, else the secant slope of
    ``T``, by the CPU backend's cancellation-free arithmetic
    (:func:`distshap.kernels.interventional_math.rescale`; a difference of two rounded ``T``
    loses every digit when the margins are an ulp apart)."""
    if transform == 0:
        return 1.0
    return _rescale(m_x, m_r, y_x, transform)


@cuda.jit(device=True)
def row_range(block_y, rows_per_block, n_rows):
    """The rows ``[r0, r1)`` of the block ``block_y`` (``cuda.blockIdx.y``): ``rows_per_block``
    rows. (The block index is an argument: under the simulator a device function of another
    module than the kernel's must not read ``cuda``.)"""
    r0 = block_y * rows_per_block
    r1 = r0 + rows_per_block
    if r1 > n_rows:
        r1 = n_rows
    return r0, r1


def block_rows(n_rows: int, n_bins: int, at_most: int, target_warps: int = 16384) -> int:
    """Rows a block of a per-row kernel: about ``target_warps`` warps over ``n_bins`` bins, at
    most ``at_most`` (and enough that ``grid.y`` stays within 65535)."""
    per = -(-n_rows * max(n_bins, 1) // target_warps)
    return int(max(1, -(-n_rows // 65535), min(at_most, per)))
