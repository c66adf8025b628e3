"""Rows against every background row, ``B`` steps per (row, element): the direct kernels.

They run the regular paths without a background table, and every path of the probability and
log-loss outputs, whose ``s(x, r)`` does not factor: one warp per bin; a ``ballot`` per row
gives ``mx``; the background goes by 32 rows, each lane loading one row's mask (and its ``s``),
the warp walking them with shuffles; per row each lane tests ``(mx | mr) & path == path``,
counts ``a`` and ``b`` with two ``popc`` and adds its weight (in shared memory) to a float64
register.

The factors ``s(x, r)`` of the probability and log-loss outputs are computed once per (row,
background row) pair: :func:`factor_kernel` writes them, float64 ``(rows, B)``, for a chunk of
a batch's rows (at most :data:`FACTOR_BUDGET_BYTES`), and the direct and oversize kernels load
them (one coalesced load per 32 background rows, bin and row). Each is
:func:`distshap.kernels.interventional_math.rescale` (three float64 transcendentals), which
would otherwise be evaluated once per bin (or element) and pair.
"""

from __future__ import annotations

from functools import cache

import numpy as np
from numba import cuda

from distshap.kernels.cuda.interventional.background import DeviceBackground
from distshap.kernels.cuda.interventional.common import bin_lane, block_rows, row_range, scaling
from distshap.kernels.cuda.runtime.device import (
    FULL_MASK,
    LD_VALUE,
    LI_FEATURE,
    LI_GROUP,
    SIM,
    ballot,
    fixed,
    lane_follows,
)
from distshap.kernels.cuda.runtime.model import DeviceModel

__all__ = [
    "FACTOR_BUDGET_BYTES",
    "direct_kernel",
    "factor_chunk_rows",
    "factor_kernel",
    "launch_direct",
    "launch_factors",
]

#: Bytes of the per-pair factor array (float64 (rows, B)) of one launch of the per-row kernels:
#: a batch's rows go by chunks of ``FACTOR_BUDGET_BYTES // (8 B)`` rows (at least 1).
FACTOR_BUDGET_BYTES = 256 << 20


if SIM:  # pragma: no cover - only under NUMBA_ENABLE_CUDASIM=1 (no warp shuffles there)
    # (beside the kernel: under the simulator its device functions read its module's cuda)

    @cuda.jit(device=True)
    def shfl_i32(value, src):
        """``value`` of lane ``src`` of this warp (all lanes call in lockstep)."""
        buf = cuda.shared.array(1024, np.int64)
        t = cuda.threadIdx.x
        buf[t] = value
        cuda.syncthreads()
        out = np.int32(buf[t - (t & 31) + src])
        cuda.syncthreads()
        return out

    @cuda.jit(device=True)
    def shfl_f64(value, src):
        """``value`` of lane ``src`` of this warp (all lanes call in lockstep)."""
        buf = cuda.shared.array(1024, np.float64)
        t = cuda.threadIdx.x
        buf[t] = value
        cuda.syncthreads()
        out = buf[t - (t & 31) + src]
        cuda.syncthreads()
        return out

else:

    @cuda.jit(device=True)
    def shfl_i32(value, src):
        return cuda.shfl_sync(FULL_MASK, value, src)

    @cuda.jit(device=True)
    def shfl_f64(value, src):
        return cuda.shfl_sync(FULL_MASK, value, src)


@cuda.jit(cache=True)
def factor_kernel(transform, m_x, y, m_bg, out):
    """``out[i, q] = s(x_i, r_q)`` (:func:`.common.scaling`) for the rows of ``m_x`` (labels
    ``y`` for the log loss) and every background row: once per pair, grid-stride."""
    n_bg = out.shape[1]
    start = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    stride = cuda.gridDim.x * cuda.blockDim.x
    for t in range(start, out.shape[0] * n_bg, stride):
        i = t // n_bg
        q = t - i * n_bg
        yi = y[i] if transform == 2 else 0.0
        out[i, q] = scaling(transform, m_x[i], yi, m_bg[q])


@cache
def direct_kernel(transform: int, interactions: bool, warps: int):
    """Rows against every background row, one warp per bin (lanes with ``lane_on``, ``warps``
    bins a block): SHAP values for ``transform`` 0, 1 or 2, or interaction values (0).

    Background rows go by 32: each lane loads one row's mask (and its ``s(x, r)`` from
    ``factors``, row ``r`` of ``X``), then the warp walks them with shuffles. ``m_x``, ``y``
    and ``m_bg`` are not read (kept in the launch signature)."""
    n_pair = 1024 if interactions else 1

    @cuda.jit(cache=True)
    def kernel(lane_f, lane_i, lane_cat, lane_d, cat_words, lane_on, bin_offsets, bin_maxk, bins,
               masks, weights, X, m_x, y, m_bg, factors, acc, scale_b, rows_per_block,
               n_cols):  # fmt: skip
        tid = cuda.threadIdx.x
        lane = tid & 31
        w0 = cuda.shared.array(1024, np.float64)  # [a * 32 + b]: weights[0, a, b]
        w1 = cuda.shared.array(n_pair, np.float64)  # interactions only
        w2 = cuda.shared.array(n_pair, np.float64)
        for i in range(tid, 1024, cuda.blockDim.x):
            w0[i] = weights[0, i >> 5, i & 31]
            if interactions:
                w1[i] = weights[1, i >> 5, i & 31]
                w2[i] = weights[2, i >> 5, i & 31]
        cuda.syncthreads()
        bi = cuda.blockIdx.x * warps + (tid >> 5)
        live = bi < bins.shape[0]
        b = bins[bi] if live else bins[0]
        li, valid, feat, pos, start, k = bin_lane(lane_i, bin_offsets, b, lane)
        on = valid and live and pos >= 1 and lane_on[li] != 0
        group = lane_i[li, LI_GROUP]
        v = lane_d[li, LD_VALUE]
        gm = ((np.int64(1) << k) - 1) << (start + 1)  # the lanes of this lane's path
        bit = np.int64(1) << lane
        maxk = bin_maxk[b] if live else 0
        first = li - pos + 1
        n_bg = masks.shape[1]
        mrow = masks[b]  # int32: bits above 31 (sign extension) are masked off by gm
        r0, r1 = row_range(cuda.blockIdx.y, rows_per_block, X.shape[0])
        for r in range(r0, r1):
            o = False
            if on:
                o = lane_follows(X[r, feat], lane_f, lane_i, lane_cat, cat_words, li)
            mx = np.int64(ballot(FULL_MASK, o))
            if not interactions:
                total = 0.0
                for q0 in range(0, n_bg, 32):
                    qn = n_bg - q0
                    if qn > 32:
                        qn = 32
                    mr_l = np.int32(0)
                    s_l = 1.0
                    if lane < qn:
                        mr_l = mrow[q0 + lane]
                        if transform != 0:
                            s_l = factors[r, q0 + lane]
                    for j in range(qn):
                        mr = np.int64(shfl_i32(mr_l, j))
                        s = 1.0
                        if transform != 0:
                            s = shfl_f64(s_l, j)
                        if on and ((mx | mr) & gm) == gm:
                            xo = mx & ~mr & gm
                            ro = mr & ~mx & gm
                            if (xo | ro) & bit:
                                a = cuda.popc(xo)
                                nb = cuda.popc(ro)
                                if xo & bit:
                                    total += s * w0[a * 32 + nb]
                                else:
                                    total -= s * w0[nb * 32 + a]
                if on:
                    iv = fixed(total * v, scale_b)
                    if iv != 0:
                        cuda.atomic.add(acc, (r, group * n_cols + feat), iv)
            else:
                diag = 0.0
                for c in range(maxk):  # the path's element c: entry [feat, feature of c]
                    cb = np.int64(1) << (start + 1 + c)
                    use = on and c < k
                    part = 0.0
                    for q0 in range(0, n_bg, 32):
                        qn = n_bg - q0
                        if qn > 32:
                            qn = 32
                        mr_l = np.int32(0)
                        if lane < qn:
                            mr_l = mrow[q0 + lane]
                        for j in range(qn):
                            mr = np.int64(shfl_i32(mr_l, j))
                            if use and ((mx | mr) & gm) == gm:
                                xo = mx & ~mr & gm
                                ro = mr & ~mx & gm
                                if (xo | ro) & bit:
                                    a = cuda.popc(xo)
                                    nb = cuda.popc(ro)
                                    ix = (xo & bit) != 0
                                    if c == pos - 1:
                                        if ix:
                                            part += w0[a * 32 + nb]
                                        else:
                                            part -= w0[nb * 32 + a]
                                    elif xo & cb:
                                        if ix:
                                            part += w1[a * 32 + nb]
                                        else:
                                            part -= w2[a * 32 + nb]
                                    elif ro & cb:
                                        if ix:
                                            part -= w2[a * 32 + nb]
                                        else:
                                            part += w1[nb * 32 + a]
                    if use:
                        if c == pos - 1:
                            diag += part
                        else:
                            half = 0.5 * part
                            diag -= half
                            iv = fixed(half * v, scale_b)
                            if iv != 0:
                                fc = lane_i[first + c, LI_FEATURE]
                                cuda.atomic.add(acc, (r, (group * n_cols + feat) * n_cols + fc),
                                                iv)  # fmt: skip
                if on:
                    iv = fixed(diag * v, scale_b)
                    if iv != 0:
                        cuda.atomic.add(acc, (r, (group * n_cols + feat) * n_cols + feat), iv)

    return kernel


def launch_direct(model: DeviceModel, bg: DeviceBackground, bins, maxk, n_bins: int, lane_on,
                  Xb, rowargs: tuple, acc, scale_b: float, F1: int, s, transform: int,
                  interactions: bool, warps: int) -> None:  # fmt: skip
    """The direct kernel on the bins ``bins`` (lanes with ``lane_on``) for the rows ``Xb``;
    ``rowargs``: ``m_x``, ``y`` and the factors of those rows."""
    if not n_bins:
        return
    nb = int(Xb.shape[0])
    rpb = block_rows(nb, n_bins, 64)
    grid = (-(-n_bins // warps), -(-nb // rpb))
    m_x, y, factors = rowargs
    direct_kernel(transform, interactions, warps)[grid, 32 * warps, s](
        model.lane_f, model.lane_i, model.lane_cat, model.lane_d, model.cat_words, lane_on,
        model.bin_offsets, maxk, bins, bg.masks, bg.weights, Xb, m_x, y, bg.m_bg, factors, acc,
        scale_b, rpb, F1,
    )  # fmt: skip


def launch_factors(transform: int, m_x, y, m_bg, out, s) -> None:
    """``out[i, q] = s(x_i, r_q)`` on the device (:func:`factor_kernel`)."""
    total = int(out.shape[0]) * int(out.shape[1])
    if total == 0:
        return
    tpb = 256
    blocks = min(-(-total // tpb), 65535)
    factor_kernel[blocks, tpb, s](transform, m_x, y, m_bg, out)


def factor_chunk_rows(n_bg: int, budget: int | None = None) -> int:
    """Rows of one factor array (float64 ``(rows, n_bg)``) within ``budget`` bytes (default
    :data:`FACTOR_BUDGET_BYTES`), at least 1."""
    budget = FACTOR_BUDGET_BYTES if budget is None else int(budget)
    return max(1, budget // (8 * max(1, int(n_bg))))
