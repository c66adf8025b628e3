"""Interventional SHAP values on the GPU: explained rows against a background data set.

For an explained row ``x`` and a background row ``r``, a merged path of leaf value ``v`` is the
game ``v [X subset of S] [S disjoint from R]``: ``X`` the elements only ``x`` follows (``a`` of
them), ``R`` those only ``r`` follows (``b``); elements both follow are dummies, and an element
neither follows zeroes the path. Element ``i`` in ``X`` gets ``v W(a, b)``, ``j`` in ``R`` gets
``-v W(b, a)``, ``W(a, b) = (a-1)! b! / (a+b)!`` (interaction weights: :func:`shapley_weights`).
The values of ``x`` are the mean over the ``B`` background rows, each pair scaled by ``s(x, r)``
for the probability and log-loss outputs (:mod:`distshap.interventional`).

Built once per (model, background, device) and cached by both digests
(:func:`device_background`):

* **masks**: ``int32 (bins, B)``, bit ``lane`` set where the background row follows that
  lane's element (one warp per bin, one ``ballot`` per background row);
* **background pattern tables** (model output ``"raw"``, where ``s = 1``), on first use: a
  path's result depends on ``x`` only through the pattern ``mx`` of the elements ``x``
  follows, so its background mean is a table over the ``2**k`` patterns. It is filled from a
  histogram of the background's patterns: a thread per (path, ``mx``) sums over the patterns
  that hold every element ``x`` misses (``3**k`` terms per path). A row then costs one ballot
  and one table load per element whatever ``B`` is (``k`` loads for interaction values).

The rest runs *directly*, ``B`` steps per (row, element):

* the direct kernels (regular paths without a table, and every path of the probability and
  log-loss outputs, whose ``s(x, r)`` does not factor): one warp per bin; a ``ballot`` per row
  gives ``mx``; the background goes by 32 rows, each lane loading one row's mask (and its
  ``s``), the warp walking them with shuffles; per row each lane tests
  ``(mx | mr) & path == path``, counts ``a`` and ``b`` with two ``popc`` and adds its weight
  (in shared memory) to a float64 register;
* the oversize kernel (paths longer than a warp): one thread per (row, element), the path's
  tests of each background row redone in local memory.

The factors ``s(x, r)`` of the probability and log-loss outputs are computed once per (row,
background row) pair: a factor kernel writes them, float64 ``(rows, B)``, for a chunk of the
batch's rows (at most :data:`_FACTOR_BUDGET_BYTES`), and the direct and oversize kernels load
them (one coalesced load per 32 background rows, bin and row). Each is
:func:`distshap.kernels.interventional_math.rescale` (three float64 transcendentals), which
would otherwise be evaluated once per bin (or element) and pair.

Fixed point (bits identical across batchings, chunkings and GPU counts): each kernel adds
``round(value * 2**shift / B)`` to int64 accumulators with integer atomics, ``value`` being one
element's (or one table entry's) float64 sum over the background, rounded once. The background
mean of a path's contribution to one output is at most ``|v| max|s|`` (SHAP: the weights of one
side sum to ``a! b! / (a+b)! <= 1``; interactions: ``k |v|``, as for path-dependent values), so
the model's shifts (:func:`.model.fixed_point_shift`: every sum below ``2**61``) are safe for
``"raw"`` and ``"probability"`` (``|s| <= 1/4``). ``"log_loss"`` has ``|s| = |secant slope of
softplus - y| < 1`` for labels in ``[0, 1]`` (others are refused); its shift is one bit lower
for the rounding of ``s``. The finish kernel writes ``acc * 2**-shift`` as float32 and the bias
entries from ``bias``.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
from numba import cuda

from distshap import strategy
from distshap.kernels import interventional_math as im
from distshap.kernels.cuda import config
from distshap.kernels.cuda.caches import keep
from distshap.kernels.cuda.device import (
    CAT_OTHER_FLAG,
    FULL_MASK,
    LD_VALUE,
    LF_LOWER,
    LF_UPPER,
    LI_FEATURE,
    LI_FEATURES,
    LI_FLAGS,
    LI_GROUP,
    LI_NBITS,
    LI_POSITION,
    LI_START,
    MISSING_FLAG,
    SIM,
    ballot,
    device_id,
    fixed,
    follows,
    lane_follows,
    stream,
    xp,
)  # fmt: skip
from distshap.kernels.cuda.model import DeviceModel, device_model
from distshap.packed import PackedModel

__all__ = [
    "DeviceBackground",
    "clear_background_cache",
    "device_background",
    "interventional_values",
    "kernel_ptx",
    "kernels",
    "shapley_weights",
    "table_plan",
]

# Frozen at import: compiled into the kernels (local / shared array sizes), so the host side
# reads these copies, never config's (possibly patched) values.
_SHAP_MAXK = config.INTERVENTIONAL_TABLE_MAX_FEATURES
_INTER_MAXK = config.INTERVENTIONAL_INTERACTION_TABLE_MAX_FEATURES
_INTER_MAXK2 = _INTER_MAXK * _INTER_MAXK
_DIRECT_WARPS = config.INTERVENTIONAL_WARPS_PER_BLOCK
_TABLE_WARPS = config.TABLE_WARPS_PER_BLOCK
_TILE_VALUES = config.SHARED_TILE_VALUES
_WMAX = 128  # weight tables cover a + b < 128 (longest fallback path: 127 features)
_MAXF1 = _WMAX  # oversize kernel's local arrays, element positions 1..k
_SHIFT_LOG_LOSS = 1  # log loss: |s| < 1 for labels in [0, 1]; one bit for rounding
#: Bytes of the per-pair factor array (float64 (rows, B)) of one launch of the per-row kernels:
#: a batch's rows go by chunks of ``_FACTOR_BUDGET_BYTES // (8 B)`` rows (at least 1).
_FACTOR_BUDGET_BYTES = 256 << 20


@lru_cache(maxsize=1)
def shapley_weights() -> np.ndarray:
    """float64 ``(3, 128, 128)``: the weights of a path's game, correctly rounded.

    ``[0, a, b] = (a-1)! b! / (a+b)!`` (SHAP value of an element in ``X``; one in ``R`` takes
    ``-[0, b, a]``); ``[1, a, b] = (a-2)! b! / (a+b-1)!`` (interaction of two elements in
    ``X``; two in ``R`` take ``[1, b, a]``); ``[2, a, b] = (a-1)! (b-1)! / (a+b-1)!`` (one in
    ``X``, one in ``R``, taken negative). Entries without a meaning are 0.
    """
    w = np.zeros((3, _WMAX, _WMAX), np.float64)
    for a in range(_WMAX):
        for b in range(_WMAX - a):
            if a >= 1:
                w[0, a, b] = 1 / (a * math.comb(a + b, b))  # int / int: correctly rounded
            if a >= 2:
                w[1, a, b] = 1 / ((a - 1) * math.comb(a + b - 1, b))
            if a >= 1 and b >= 1:
                w[2, a, b] = 1 / ((a + b - 1) * math.comb(a + b - 2, a - 1))
    return w


# ------------------------------------------------------------------------------------------
# device functions
# ------------------------------------------------------------------------------------------


@cuda.jit(device=True)
def _lane(lane_i, bin_offsets, b, lane):
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
def _scaling(transform, m_x, y_x, m_r):
    """``s(x, r)``: 1 for ``"raw"`` and where the margins are equal, else the secant slope of
    ``T``, by the CPU backend's cancellation-free arithmetic
    (:func:`distshap.kernels.interventional_math.rescale`; a difference of two rounded ``T``
    loses every digit when the margins are an ulp apart)."""
    if transform == 0:
        return 1.0
    return _rescale(m_x, m_r, y_x, transform)


@cuda.jit(cache=True)
def factor_kernel(transform, m_x, y, m_bg, out):
    """``out[i, q] = s(x_i, r_q)`` (:func:`_scaling`) for the rows of ``m_x`` (labels ``y``
    for the log loss) and every background row: once per pair, grid-stride."""
    n_bg = out.shape[1]
    start = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    stride = cuda.gridDim.x * cuda.blockDim.x
    for t in range(start, out.shape[0] * n_bg, stride):
        i = t // n_bg
        q = t - i * n_bg
        yi = y[i] if transform == 2 else 0.0
        out[i, q] = _scaling(transform, m_x[i], yi, m_bg[q])


if SIM:  # pragma: no cover - only under NUMBA_ENABLE_CUDASIM=1 (no warp shuffles there)

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


@cuda.jit(device=True)
def _row_range(rows_per_block, n_rows):
    r0 = cuda.blockIdx.y * rows_per_block
    r1 = r0 + rows_per_block
    if r1 > n_rows:
        r1 = n_rows
    return r0, r1


# ------------------------------------------------------------------------------------------
# setup kernels: masks, pattern counts, tables (once per model, background and device)
# ------------------------------------------------------------------------------------------


@cuda.jit(cache=True)
def mask_kernel(lane_f, lane_i, lane_cat, cat_words, bin_offsets, bins, rows, masks, count_off,
                counts, rows_per_block):  # fmt: skip
    """One warp per (bin, background rows): ``masks[bin, r]`` and the pattern counts of the
    paths with a count offset (their bias lane adds 1 at its pattern)."""
    tid = cuda.threadIdx.x
    lane = tid & 31
    bi = cuda.blockIdx.x * _DIRECT_WARPS + (tid >> 5)
    live = bi < bins.shape[0]
    b = bins[bi] if live else bins[0]
    li, valid, feat, pos, start, k = _lane(lane_i, bin_offsets, b, lane)
    valid = valid and live
    active = valid and pos >= 1
    coff = count_off[li]
    counting = valid and pos == 0 and coff >= 0
    mask_k = (np.int64(1) << k) - 1
    r0, r1 = _row_range(rows_per_block, rows.shape[0])
    for r in range(r0, r1):
        o = False
        if active:
            o = lane_follows(rows[r, feat], lane_f, lane_i, lane_cat, cat_words, li)
        bal = np.int64(ballot(FULL_MASK, o))
        if live and lane == 0:
            masks[b, r] = np.int32(bal - ((bal >> 31) << 32))  # the 32 bits, as int32
        if counting:
            cuda.atomic.add(counts, coff + ((bal >> (start + 1)) & mask_k), 1)


@cuda.jit(cache=True)
def shap_fill_kernel(lane_d, path_offsets, paths, table_off, count_off, counts, weights, tables,
                     scale_b):  # fmt: skip
    """One thread per (table path, pattern ``mx``): the background mean of each element's SHAP
    value, ``v / B * sum_patterns count * weight``, as int64 fixed point."""
    mx = np.int64(cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x)
    j = cuda.blockIdx.y
    p = paths[j]
    s0 = path_offsets[p]
    k = path_offsets[p + 1] - s0 - 1
    if mx >= (np.int64(1) << k):
        return
    full = (np.int64(1) << k) - 1
    notmx = full & ~mx
    nx = cuda.popc(mx)
    b = k - nx  # every element x misses is r's alone (else the path is zero)
    acc = cuda.local.array(_SHAP_MAXK, np.float64)
    for e in range(k):
        acc[e] = 0.0
    rsum = 0.0
    sub = mx  # the elements x follows that r follows too, over every subset of mx
    while True:
        c = counts[count_off[j] + (notmx | sub)]
        if c != 0:
            a = nx - cuda.popc(sub)
            if a > 0:
                w = c * weights[0, a, b]
                only_x = mx & ~sub
                for e in range(k):
                    if (only_x >> e) & 1:
                        acc[e] += w
            if b > 0:
                rsum += c * weights[0, b, a]
        if sub == 0:
            break
        sub = (sub - 1) & mx
    v = lane_d[s0, LD_VALUE]
    base = table_off[j] + mx * k
    for e in range(k):
        value = acc[e] if (mx >> e) & 1 else -rsum
        tables[base + e] = fixed(value * v, scale_b)


@cuda.jit(cache=True)
def interaction_fill_kernel(lane_d, path_offsets, paths, table_off, count_off, counts, weights,
                            tables, scale_b):  # fmt: skip
    """One thread per (table path, pattern ``mx``): entry ``[c, i]`` of the background mean of
    the path's interaction matrix (half the interaction index off the diagonal; the diagonal
    ``phi_i - sum_c``), as int64 fixed point."""
    mx = np.int64(cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x)
    j = cuda.blockIdx.y
    p = paths[j]
    s0 = path_offsets[p]
    k = path_offsets[p + 1] - s0 - 1
    if mx >= (np.int64(1) << k):
        return
    full = (np.int64(1) << k) - 1
    notmx = full & ~mx
    nx = cuda.popc(mx)
    b = k - nx
    pair = cuda.local.array(_INTER_MAXK2, np.float64)
    phi = cuda.local.array(_INTER_MAXK, np.float64)
    for e in range(k * k):
        pair[e] = 0.0
    for e in range(k):
        phi[e] = 0.0
    sub = mx
    while True:
        c = counts[count_off[j] + (notmx | sub)]
        if c != 0:
            a = nx - cuda.popc(sub)
            only_x = mx & ~sub
            for i in range(k):
                ix = (only_x >> i) & 1
                ir = (notmx >> i) & 1
                if ix:
                    phi[i] += c * weights[0, a, b]
                elif ir:
                    phi[i] -= c * weights[0, b, a]
                else:
                    continue
                for e in range(k):
                    if e == i:
                        continue
                    if (only_x >> e) & 1:
                        if ix:
                            pair[i * k + e] += c * weights[1, a, b]
                        else:
                            pair[i * k + e] -= c * weights[2, a, b]
                    elif (notmx >> e) & 1:
                        if ir:
                            pair[i * k + e] += c * weights[1, b, a]
                        else:
                            pair[i * k + e] -= c * weights[2, a, b]
        if sub == 0:
            break
        sub = (sub - 1) & mx
    v = lane_d[s0, LD_VALUE]
    base = table_off[j] + mx * k * k
    for i in range(k):
        diag = phi[i]
        for e in range(k):
            if e != i:
                half = 0.5 * pair[i * k + e]
                diag -= half
                tables[base + e * k + i] = fixed(half * v, scale_b)
        tables[base + i * k + i] = fixed(diag * v, scale_b)


# ------------------------------------------------------------------------------------------
# per-row kernels
# ------------------------------------------------------------------------------------------


def _make_table_kernel(shared: bool, interactions: bool):
    """Rows through background pattern tables: one warp per bin, a ballot per row, one table
    entry (``k`` for interactions) per element; sums in a shared-memory tile of rows
    (``shared``: one global atomic per output value and block) or in global memory."""

    @cuda.jit(cache=True)
    def kernel(lane_f, lane_i, lane_cat, cat_words, lane_toff, tables, bin_offsets, bin_maxk,
               bins, X, acc, rows_per_block, tile_rows, n_cols):  # fmt: skip
        tid = cuda.threadIdx.x
        lane = tid & 31
        bi = cuda.blockIdx.x * _TABLE_WARPS + (tid >> 5)
        live = bi < bins.shape[0]
        if not shared and not live:
            return  # warp-uniform; with a shared tile every warp takes part in the barriers
        b = bins[bi] if live else bins[0]
        li, valid, feat, pos, start, k = _lane(lane_i, bin_offsets, b, lane)
        toff = lane_toff[li]
        active = valid and live and pos >= 1 and toff >= 0
        group = lane_i[li, LI_GROUP]
        flags = lane_i[li, LI_FLAGS]
        missing = (flags & MISSING_FLAG) != 0
        cat_other = (flags & CAT_OTHER_FLAG) != 0
        nbits = lane_i[li, LI_NBITS]
        lower = lane_f[li, LF_LOWER]
        upper = lane_f[li, LF_UPPER]
        cat_offset = lane_cat[li]
        maxk = bin_maxk[b] if live else 0
        mask_k = (np.int64(1) << k) - 1
        first = li - pos + 1  # lane of the path's first feature element
        width = acc.shape[1]
        r0, r1 = _row_range(rows_per_block, X.shape[0])
        if shared:
            tile = cuda.shared.array(_TILE_VALUES, np.int64)
        for t0 in range(r0, r1, tile_rows):
            t1 = t0 + tile_rows
            if t1 > r1:
                t1 = r1
            if shared:
                for i in range(tid, (t1 - t0) * width, cuda.blockDim.x):
                    tile[i] = 0
                cuda.syncthreads()
            for r in range(t0, t1):
                o = False
                if active:
                    o = follows(X[r, feat], lower, upper, missing, cat_other, cat_offset, nbits,
                                cat_words)  # fmt: skip
                bal = np.int64(ballot(FULL_MASK, o))
                pattern = (bal >> (start + 1)) & mask_k
                if interactions:
                    entry = toff + pattern * k * k + pos - 1
                    for c in range(maxk):  # row c of the path's matrix, column pos - 1
                        if active and c < k:
                            iv = tables[entry + c * k]
                            if iv != 0:
                                e = (group * n_cols + lane_i[first + c, LI_FEATURE]) * n_cols
                                e += feat
                                if shared:
                                    cuda.atomic.add(tile, (r - t0) * width + e, iv)
                                else:
                                    cuda.atomic.add(acc, (r, e), iv)
                elif active:
                    iv = tables[toff + pattern * k + pos - 1]
                    if iv != 0:
                        e = group * n_cols + feat
                        if shared:
                            cuda.atomic.add(tile, (r - t0) * width + e, iv)
                        else:
                            cuda.atomic.add(acc, (r, e), iv)
            if shared:
                cuda.syncthreads()
                for i in range(tid, (t1 - t0) * width, cuda.blockDim.x):
                    iv = tile[i]
                    if iv != 0:
                        q = i // width
                        cuda.atomic.add(acc, (t0 + q, i - q * width), iv)
                cuda.syncthreads()

    return kernel


def _make_direct_kernel(transform: int, interactions: bool):
    """Rows against every background row, one warp per bin (lanes with ``lane_on``): SHAP
    values for ``transform`` 0, 1 or 2, or interaction values (transform 0).

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
        bi = cuda.blockIdx.x * _DIRECT_WARPS + (tid >> 5)
        live = bi < bins.shape[0]
        b = bins[bi] if live else bins[0]
        li, valid, feat, pos, start, k = _lane(lane_i, bin_offsets, b, lane)
        on = valid and live and pos >= 1 and lane_on[li] != 0
        group = lane_i[li, LI_GROUP]
        v = lane_d[li, LD_VALUE]
        gm = ((np.int64(1) << k) - 1) << (start + 1)  # the lanes of this lane's path
        bit = np.int64(1) << lane
        maxk = bin_maxk[b] if live else 0
        first = li - pos + 1
        n_bg = masks.shape[1]
        mrow = masks[b]  # int32: bits above 31 (sign extension) are masked off by gm
        r0, r1 = _row_range(rows_per_block, X.shape[0])
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


def _make_oversize_kernel(transform: int, interactions: bool):
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


@cuda.jit(cache=True)
def finish_kernel(acc, out, inv_scale, bias, group_size, bias_offset):
    """``out = acc * inv_scale``, ``bias[row or 0, g]`` at the bias entries; resets ``acc``."""
    start = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    stride = cuda.gridDim.x * cuda.blockDim.x
    width = acc.shape[1]
    per_row = bias.shape[0] > 1
    for t in range(start, acc.shape[0] * width, stride):
        r = t // width
        e = t - r * width
        g = e // group_size
        if e - g * group_size == bias_offset:
            out[r, e] = np.float32(bias[r if per_row else 0, g])
        else:
            out[r, e] = np.float32(np.float64(acc[r, e]) * inv_scale)
        acc[r, e] = 0


_KERNELS: dict = {}


def kernels(kind: str, transform: int = 0, interactions: bool = False, shared: bool = False):
    """The per-row kernel ``kind`` (``"table"``, ``"direct"``, ``"oversize"``), built on first
    use (compiled at launch)."""
    key = (kind, transform, interactions, shared)
    kernel = _KERNELS.get(key)
    if kernel is None:
        if kind == "table":
            kernel = _make_table_kernel(shared, interactions)
        elif kind == "direct":
            kernel = _make_direct_kernel(transform, interactions)
        elif kind == "oversize":
            kernel = _make_oversize_kernel(transform, interactions)
        else:
            raise ValueError(f"unknown kernel kind {kind!r}")
        _KERNELS[key] = kernel
    return kernel


# ------------------------------------------------------------------------------------------
# host side: plans, the device background and its cache
# ------------------------------------------------------------------------------------------


def table_plan(packed: PackedModel) -> dict:
    """Which regular paths get background pattern tables (host arithmetic, no GPU).

    Returns ``shap`` and ``interactions`` (int64 per path: offset of its table in values, -1:
    none; :func:`distshap.strategy.choose_tables` with the budgets and feature limits of
    :mod:`.config`, int64 values count twice a float32's bytes), ``count`` (offset of its
    pattern counts, for the paths with a SHAP table) and ``n_counts``, ``regular`` (bool per
    path) and ``k``.
    """
    k = strategy.path_features(packed.path_offsets)
    _, regular = strategy.regular_paths(packed.bin_offsets, packed.path_offsets, lanes=32)
    shap_max = min(config.INTERVENTIONAL_TABLE_MAX_FEATURES, _SHAP_MAXK)
    inter_max = min(config.INTERVENTIONAL_INTERACTION_TABLE_MAX_FEATURES, _INTER_MAXK)
    shap = strategy.choose_tables(
        np.where(regular, k, 0), config.INTERVENTIONAL_TABLE_BUDGET_BYTES // 2, shap_max
    )
    inter = strategy.choose_tables(
        np.where(shap >= 0, k, 0),
        config.INTERVENTIONAL_INTERACTION_TABLE_BUDGET_BYTES // 2,
        inter_max,
        values_per_pattern="k*k",
    )
    has = shap >= 0
    sizes = np.where(has, np.int64(1) << np.minimum(k, 62), 0)
    count = np.where(has, np.cumsum(sizes) - sizes, -1)
    return dict(shap=shap, interactions=inter, count=count, n_counts=int(sizes.sum()),
                regular=regular, k=k)  # fmt: skip


@dataclass(eq=False)
class TablePlan:
    """Device arrays of one output kind: which bins run the table kernel and which the direct
    kernel (lanes with ``lane_direct``), with the tables themselves."""

    lane_toff: Any
    tables: Any
    table_bins: Any
    table_maxk: Any
    n_table_bins: int
    lane_direct: Any
    direct_bins: Any
    direct_maxk: Any
    n_direct_bins: int
    table_bytes: int


@dataclass(eq=False)
class DeviceBackground:
    """A background data set on one device, against one model: rows, margins, masks, pattern
    counts; the table plans are built on first use (``shap``, ``interactions``)."""

    n_rows: int
    rows: Any
    m_bg: Any  # float64 (B,): margin (group 0; the transforms need one group)
    masks: Any
    counts: Any
    regular_bins: Any
    regular_maxk: Any
    n_regular_bins: int
    lane_all: Any
    elem_path: Any
    elem_pos: Any
    n_elems: int
    weights: Any
    plan: dict
    shap: TablePlan | None = None
    interactions: TablePlan | None = None


_CACHE: OrderedDict = OrderedDict()
_LOCK = threading.RLock()


def clear_background_cache() -> None:
    """Drop every cached device background."""
    with _LOCK:
        _CACHE.clear()


def _nonempty(a, dtype) -> np.ndarray:
    a = np.ascontiguousarray(a, dtype=dtype)
    return a if a.size else np.zeros(1, dtype)


def _bins_maxk(packed: PackedModel, k: np.ndarray, selected: np.ndarray):
    """Bins holding a ``selected`` path, and the largest ``k`` of those per bin."""
    path_bin, _ = strategy.regular_paths(packed.bin_offsets, packed.path_offsets, lanes=32)
    maxk = np.zeros(max(packed.num_bins, 1), np.int32)
    np.maximum.at(maxk, path_bin[selected], k[selected].astype(np.int32))
    bins = np.flatnonzero(maxk > 0).astype(np.int32)
    return _nonempty(bins, np.int32), maxk, int(bins.size)


def _check_background(packed: PackedModel, background: Any) -> tuple[np.ndarray, np.ndarray]:
    """The background's rows (float32) and margins (float64), after
    :func:`distshap.interventional.check_background` (built for this model, shapes)."""
    from distshap.interventional import check_background

    check_background(background, packed)
    rows = np.ascontiguousarray(background.rows, dtype=np.float32)
    return rows, np.ascontiguousarray(background.margin, dtype=np.float64)


def device_background(packed: PackedModel, background: Any,
                      model: DeviceModel | None = None) -> DeviceBackground:  # fmt: skip
    """``background`` on the current device against ``packed``: masks and pattern counts
    computed once, cached by (model digest, background digest, device)."""
    rows, margin = _check_background(packed, background)
    if model is None:
        model = device_model(packed)
    key = (packed.digest, str(background.digest), device_id())
    cache = bool(packed.digest and background.digest)
    with _LOCK:
        if cache:
            hit = _CACHE.get(key)
            if hit is not None:
                _CACHE.move_to_end(key)
                return hit
        B = int(rows.shape[0])
        n_bins = max(packed.num_bins, 1)
        mask_bytes = 4 * n_bins * B
        if mask_bytes > config.INTERVENTIONAL_MASK_BUDGET_BYTES:
            raise ValueError(
                f"a background of {B} rows needs {mask_bytes / 2**20:.0f} MiB of masks for "
                f"this model ({n_bins} bins), over config.INTERVENTIONAL_MASK_BUDGET_BYTES = "
                f"{config.INTERVENTIONAL_MASK_BUDGET_BYTES / 2**20:.0f} MiB: use fewer "
                f"background rows (a sample or k-means summary of a few hundred is typical)"
            )
        plan = table_plan(packed)
        k = plan["k"]
        regular = plan["regular"]
        reg_bins, reg_maxk, n_reg = _bins_maxk(packed, k, regular)
        over = np.flatnonzero(~regular)
        elem_path = np.repeat(over, k[over]).astype(np.int32)
        elem_pos = (np.concatenate([np.arange(1, kk + 1) for kk in k[over]]) if over.size
                    else np.zeros(0)).astype(np.int32)  # fmt: skip
        lane_path = packed.lane_path.astype(np.int64)
        count_off = plan["count"][lane_path] if packed.num_paths else np.full(1, -1)
        m0 = margin[:, 0]
        host = dict(
            rows=rows,
            m_bg=np.ascontiguousarray(m0),
            masks=np.zeros((n_bins, B), np.int32),
            counts=np.zeros(max(plan["n_counts"], 1), np.int32),
            regular_bins=reg_bins,
            regular_maxk=reg_maxk,
            lane_all=np.ones(max(lane_path.size, 1), np.int8),
            elem_path=_nonempty(elem_path, np.int32),
            elem_pos=_nonempty(elem_pos, np.int32),
            weights=shapley_weights(),
        )
        dev = {name: cuda.to_device(a) for name, a in host.items()}
        count_off_d = cuda.to_device(_nonempty(count_off, np.int64))
        s = stream()
        if n_reg:
            rpb = max(1, -(-B // 65535), min(64, -(-B * n_reg // 16384)))
            grid = (-(-n_reg // _DIRECT_WARPS), -(-B // rpb))
            mask_kernel[grid, 32 * _DIRECT_WARPS, s](
                model.lane_f, model.lane_i, model.lane_cat, model.cat_words, model.bin_offsets,
                dev["regular_bins"], dev["rows"], dev["masks"], count_off_d, dev["counts"], rpb,
            )  # fmt: skip
            if not SIM:
                s.synchronize()  # the masks serve later calls on any stream or thread
        out = DeviceBackground(
            n_rows=B, n_regular_bins=n_reg, n_elems=int(elem_path.size),
            plan=plan, **dev,
        )  # fmt: skip
        if cache:
            keep(_CACHE, key, out, config.CACHE_SIZE)
        return out


def _table_plan(packed: PackedModel, model: DeviceModel, bg: DeviceBackground,
                interactions: bool) -> TablePlan:  # fmt: skip
    """The table plan of one output kind (tables filled on the device on first use)."""
    with _LOCK:
        done = bg.interactions if interactions else bg.shap
        if done is not None:
            return done
        plan = bg.plan
        k, regular = plan["k"], plan["regular"]
        toff = plan["interactions" if interactions else "shap"]
        has = toff >= 0
        per = k * k if interactions else k
        total = int(((np.int64(1) << np.minimum(k, 62)) * per)[has].sum())
        tables = xp().zeros(max(total, 1), dtype=np.int64)
        chosen = np.flatnonzero(has)
        keep = []  # device temporaries live until the fill kernels are done
        s = stream()
        if chosen.size:
            shift = model.interaction_shift if interactions else model.shap_shift
            scale_b = 2.0**shift / bg.n_rows
            fill = interaction_fill_kernel if interactions else shap_fill_kernel
            path_offsets_d = model.path_offsets
            for j0 in range(0, chosen.size, 65535):  # grid.y is at most 65535
                part = chosen[j0 : j0 + 65535]
                arrays = (
                    cuda.to_device(part.astype(np.int32)),
                    cuda.to_device(np.ascontiguousarray(toff[part], np.int64)),
                    cuda.to_device(np.ascontiguousarray(plan["count"][part], np.int64)),
                )
                keep.append(arrays)
                tpb = 64
                grid = (-(-(1 << int(k[part].max())) // tpb), int(part.size))
                fill[grid, tpb, s](model.lane_d, path_offsets_d, *arrays, bg.counts, bg.weights,
                                   tables, scale_b)  # fmt: skip
            if not SIM:
                s.synchronize()
        lane_path = packed.lane_path.astype(np.int64)
        lane_toff = toff[lane_path] if lane_path.size else np.full(1, -1, np.int64)
        direct = regular & ~has
        t_bins, t_maxk, n_t = _bins_maxk(packed, k, has)
        d_bins, d_maxk, n_d = _bins_maxk(packed, k, direct)
        lane_direct = direct[lane_path].astype(np.int8) if lane_path.size else np.zeros(1, np.int8)
        host = dict(lane_toff=np.ascontiguousarray(lane_toff, np.int64), table_bins=t_bins,
                    table_maxk=t_maxk, lane_direct=lane_direct, direct_bins=d_bins,
                    direct_maxk=d_maxk)  # fmt: skip
        dev = {name: cuda.to_device(a) for name, a in host.items()}
        out = TablePlan(tables=tables, n_table_bins=n_t, n_direct_bins=n_d,
                        table_bytes=8 * total, **dev)  # fmt: skip
        if interactions:
            bg.interactions = out
        else:
            bg.shap = out
        return out


# ------------------------------------------------------------------------------------------
# launching
# ------------------------------------------------------------------------------------------


def _rows_per_block(n_rows: int, n_bins: int, at_most: int, target_warps: int = 16384) -> int:
    per = -(-n_rows * max(n_bins, 1) // target_warps)
    return int(max(1, -(-n_rows // 65535), min(at_most, per)))


def _tile_rows(width: int) -> int:
    rows = min(config.TILE_ROWS, _TILE_VALUES // max(width, 1))
    return rows if rows >= config.MIN_TILE_ROWS else 0


def _launch_tables(model, tp: TablePlan, Xb, acc, F1, s, interactions):
    if not tp.n_table_bins:
        return
    nb = int(Xb.shape[0])
    tile = _tile_rows(int(acc.shape[1]))
    rpb = max(16, _rows_per_block(nb, tp.n_table_bins, config.ROWS_PER_WARP))
    grid = (-(-tp.n_table_bins // _TABLE_WARPS), -(-nb // rpb))
    kernels("table", interactions=interactions, shared=tile > 0)[grid, 32 * _TABLE_WARPS, s](
        model.lane_f, model.lane_i, model.lane_cat, model.cat_words, tp.lane_toff, tp.tables,
        model.bin_offsets, tp.table_maxk, tp.table_bins, Xb, acc, rpb, tile or rpb, F1,
    )  # fmt: skip


def _launch_direct(model, bg, bins, maxk, n_bins, lane_on, Xb, rowargs, acc, scale_b, F1, s,
                   transform, interactions):  # fmt: skip
    """``rowargs``: ``m_x``, ``y`` (of the rows of ``Xb``) and the factors (rows of ``Xb``)."""
    if not n_bins:
        return
    nb = int(Xb.shape[0])
    rpb = _rows_per_block(nb, n_bins, 64)
    grid = (-(-n_bins // _DIRECT_WARPS), -(-nb // rpb))
    m_x, y, factors = rowargs
    kernels("direct", transform, interactions)[grid, 32 * _DIRECT_WARPS, s](
        model.lane_f, model.lane_i, model.lane_cat, model.lane_d, model.cat_words, lane_on,
        model.bin_offsets, maxk, bins, bg.masks, bg.weights, Xb, m_x, y, bg.m_bg, factors, acc,
        scale_b, rpb, F1,
    )  # fmt: skip


def _launch_oversize(model, bg, Xb, rowargs, acc, scale_b, F1, s, transform, interactions):
    if not bg.n_elems:
        return
    nb = int(Xb.shape[0])
    tpb = min(64, 32 * -(-nb // 32))
    kernel = kernels("oversize", transform, interactions)
    m_x, y, factors = rowargs
    for e0 in range(0, bg.n_elems, 65535):  # grid.y is at most 65535
        e1 = min(bg.n_elems, e0 + 65535)
        kernel[(-(-nb // tpb), e1 - e0), tpb, s](
            model.lane_f, model.lane_i, model.lane_cat, model.lane_d, model.cat_words,
            model.path_offsets, bg.elem_path[e0:e1], bg.elem_pos[e0:e1], bg.weights, Xb,
            bg.rows, m_x, y, bg.m_bg, factors, acc, scale_b, F1,
        )  # fmt: skip


def _launch_factors(transform: int, m_x, y, m_bg, out, s) -> None:
    """``out[i, q] = s(x_i, r_q)`` on the device (:func:`factor_kernel`)."""
    total = int(out.shape[0]) * int(out.shape[1])
    if total == 0:
        return
    tpb = 256
    blocks = min(-(-total // tpb), 65535)
    factor_kernel[blocks, tpb, s](transform, m_x, y, m_bg, out)


def factor_chunk_rows(n_bg: int, budget: int | None = None) -> int:
    """Rows of one factor array (float64 ``(rows, n_bg)``) within ``budget`` bytes (default
    :data:`_FACTOR_BUDGET_BYTES`), at least 1."""
    budget = _FACTOR_BUDGET_BYTES if budget is None else int(budget)
    return max(1, budget // (8 * max(1, int(n_bg))))


def _device_rows(X, num_features: int):
    if X.ndim != 2 or X.shape[1] != num_features:
        raise ValueError(f"X must have shape (n_rows, {num_features}), got {tuple(X.shape)}")
    if SIM:
        return np.ascontiguousarray(np.asarray(X), dtype=np.float32)
    cp = xp()
    return cp.ascontiguousarray(cp.asarray(X), dtype=cp.float32)


def _host_or_device_f64(a, shape_msg: str, shape: tuple):
    arr = xp().asarray(a, dtype=np.float64)
    if tuple(arr.shape) != shape:
        raise ValueError(f"{shape_msg} must have shape {shape}, got {tuple(arr.shape)}")
    return xp().ascontiguousarray(arr)


def _row_inputs(packed, n, transform, x_margin, y, bias):
    """Device float64 arrays: ``m_x``, ``y`` (length >= 1) and the bias."""
    mod = xp()
    G = packed.num_groups
    if transform not in (0, 1, 2):
        raise ValueError(f"transform must be 0 (raw), 1 (probability) or 2 (log_loss), got "
                         f"{transform!r}")  # fmt: skip
    if transform == 0:
        m_x = yv = mod.zeros(1, dtype=np.float64)
    else:
        if G != 1:
            raise ValueError(
                f"model_output 'probability' and 'log_loss' need a binary logistic model (one "
                f"output group), this model has {G}: use model_output='raw'"
            )
        if x_margin is None:
            raise ValueError("transform != 0 needs x_margin, the (n, 1) margins of X")
        m_x = _host_or_device_f64(x_margin, "x_margin", (n, 1))[:, 0].copy()
        if transform == 2:
            if y is None:
                raise ValueError("model_output='log_loss' needs the labels y of the rows")
            yv = _host_or_device_f64(y, "y", (n,))
            bad = ~((yv >= 0.0) & (yv <= 1.0))
            if bool(bad.any()):
                first = int(mod.flatnonzero(bad)[0])
                raise ValueError(
                    f"log_loss labels must lie in [0, 1] (0/1 labels or probabilities), got "
                    f"y[{first}] = {float(yv[first])}: recode them, e.g. y = (labels == "
                    f"positive_class)"
                )
        else:
            yv = mod.zeros(1, dtype=np.float64)
    if bias is None:
        bias = np.zeros((1, G), np.float64)
    bias = mod.asarray(bias, dtype=np.float64)
    if bias.ndim != 2 or bias.shape[1] != G or bias.shape[0] not in (1, n):
        raise ValueError(f"bias must have shape (1, {G}) or ({n}, {G}), got {bias.shape}")
    return m_x, yv, mod.ascontiguousarray(bias)


def interventional_values(
    packed: PackedModel,
    background: Any,
    X: Any,
    *,
    transform: int = 0,
    x_margin: Any = None,
    y: Any = None,
    bias: Any = None,
    interactions: bool = False,
    batch_rows: int | None = None,
) -> Any:
    """Interventional SHAP (or interaction) values of the rows of ``X`` against a background.

    Parameters
    ----------
    packed : PackedModel
        Copied to the current device once (:func:`.model.device_model`).
    background : distshap.interventional.Background
        Background rows (``rows``: float32 ``(B, F)`` as the kernels read them), their
        margins (``margin``: float64 ``(B, G)``) and a ``digest``; its masks, pattern counts
        and tables are built on the device once per model and cached.
    X : numpy.ndarray or cupy.ndarray (n, F)
        :func:`distshap.inputs.prepare_rows` output of the rows to explain.
    transform : {0, 1, 2}
        Model output: 0 raw margin, 1 probability, 2 log loss (1 and 2: one output group).
    x_margin : array (n, 1), optional
        float64 margins of ``X`` (needed for transforms 1 and 2).
    y : array (n,), optional
        Labels (transform 2), in ``[0, 1]``.
    bias : array (n, G) or (1, G), optional
        Written into the bias column (entry ``[F, F]`` of interactions): the mean of
        ``T(m_r, y)`` over the background (:func:`distshap.interventional.bias_values`).
        Default zeros, as on the CPU.
    interactions : bool
        Interaction values (transform 0 only).
    batch_rows : int, optional
        Rows per kernel batch (default :func:`.launch.default_batch_rows`); the bits do not
        depend on it.

    Returns
    -------
    cupy.ndarray
        float32 ``(n, G, F + 1)``, or ``(n, G, F + 1, F + 1)`` with ``interactions`` (NumPy
        under the CUDA simulator).
    """
    from distshap.kernels.cuda.launch import launch_finish, new_output, run_batches

    if not isinstance(packed, PackedModel):
        raise TypeError(f"expected a PackedModel, got {type(packed).__name__}")
    if interactions and transform != 0:
        raise ValueError(
            "interventional interaction values are defined for model_output='raw' only "
            f"(transform 0), got transform={transform!r}"
        )
    X = _device_rows(X, packed.num_features)
    n = int(X.shape[0])
    m_x, yv, bias_d = _row_inputs(packed, n, transform, x_margin, y, bias)
    model = device_model(packed)
    bg = device_background(packed, background, model)
    F1 = packed.num_features + 1
    out, out2, group_size, bias_offset = new_output(packed, n, interactions)
    if n == 0:
        return out
    shift = model.interaction_shift if interactions else model.shap_shift
    if transform == 2:
        shift -= _SHIFT_LOG_LOSS
    scale = 2.0**shift
    scale_b = scale / bg.n_rows
    tp = _table_plan(packed, model, bg, interactions) if transform == 0 else None
    no_factors = bg.weights[0]  # a C-contiguous float64 matrix the kernels do not read
    chunk = n if transform == 0 else factor_chunk_rows(bg.n_rows)
    factors = None  # float64 (rows of a chunk, B), allocated by the first chunk

    def batch(r0, r1, Xb, acc, s):
        nonlocal factors
        if tp is not None:
            _launch_tables(model, tp, Xb, acc, F1, s, interactions)
        for c0 in range(0, r1 - r0, chunk):  # transforms: rows by factor arrays; else one
            c1 = min(r1 - r0, c0 + chunk)
            Xc, acc_c = Xb[c0:c1], acc[c0:c1]
            if transform == 0:
                rowargs = (m_x, yv, no_factors)
            else:
                m_c = m_x[r0 + c0 : r0 + c1]
                y_c = yv[r0 + c0 : r0 + c1] if transform == 2 else yv
                if factors is None:
                    factors = xp().empty((min(chunk, n), bg.n_rows), dtype=np.float64)
                f_c = factors[: c1 - c0]
                _launch_factors(transform, m_c, y_c, bg.m_bg, f_c, s)
                rowargs = (m_c, y_c, f_c)
            if tp is not None:
                _launch_direct(model, bg, tp.direct_bins, tp.direct_maxk, tp.n_direct_bins,
                               tp.lane_direct, Xc, rowargs, acc_c, scale_b, F1, s, transform,
                               interactions)  # fmt: skip
            else:
                _launch_direct(model, bg, bg.regular_bins, bg.regular_maxk, bg.n_regular_bins,
                               bg.lane_all, Xc, rowargs, acc_c, scale_b, F1, s, transform,
                               interactions)  # fmt: skip
            _launch_oversize(model, bg, Xc, rowargs, acc_c, scale_b, F1, s, transform,
                             interactions)  # fmt: skip
        bias_b = bias_d[r0:r1] if bias_d.shape[0] > 1 else bias_d
        launch_finish(finish_kernel, acc, out2[r0:r1], 1.0 / scale, bias_b, group_size,
                      bias_offset, s)  # fmt: skip

    run_batches(X, out2.shape[1], batch_rows, batch)
    return out


# ------------------------------------------------------------------------------------------
# compilation check (no GPU needed)
# ------------------------------------------------------------------------------------------

_LANES = "float32[:, ::1], int32[:, ::1], int64[::1]"  # lane_f, lane_i, lane_cat
_ROW_F64 = "float64[::1], float64[::1], float64[::1], float64[:, ::1]"  # m_x, y, m_bg, factors


def _signatures() -> dict:
    """Name -> (kernel, signature) of every interventional kernel."""
    fill = (
        "void(float64[:, ::1], int64[::1], int32[::1], int64[::1], int64[::1], int32[::1], "
        "float64[:, :, ::1], int64[::1], float64)"
    )
    sigs = {
        "interventional_mask_kernel": (
            mask_kernel,
            f"void({_LANES}, uint32[::1], int64[::1], int32[::1], float32[:, ::1], "
            "int32[:, ::1], int64[::1], int32[::1], int64)",
        ),
        "interventional_shap_fill_kernel": (shap_fill_kernel, fill),
        "interventional_interaction_fill_kernel": (interaction_fill_kernel, fill),
        "interventional_finish_kernel": (
            finish_kernel,
            "void(int64[:, ::1], float32[:, ::1], float64, float64[:, ::1], int64, int64)",
        ),
        "interventional_factor_kernel": (
            factor_kernel,
            "void(int64, float64[::1], float64[::1], float64[::1], float64[:, ::1])",
        ),
    }
    table = (
        f"void({_LANES}, uint32[::1], int64[::1], int64[::1], int64[::1], int32[::1], "
        "int32[::1], float32[:, ::1], int64[:, ::1], int64, int64, int64)"
    )
    direct = (
        f"void({_LANES}, float64[:, ::1], uint32[::1], int8[::1], int64[::1], int32[::1], "
        f"int32[::1], int32[:, ::1], float64[:, :, ::1], float32[:, ::1], {_ROW_F64}, "
        "int64[:, ::1], float64, int64, int64)"
    )
    oversize = (
        f"void({_LANES}, float64[:, ::1], uint32[::1], int64[::1], int32[::1], int32[::1], "
        f"float64[:, :, ::1], float32[:, ::1], float32[:, ::1], {_ROW_F64}, int64[:, ::1], "
        "float64, int64)"
    )
    for inter in (False, True):
        what = "interaction" if inter else "shap"
        for shared in (False, True):
            name = f"interventional_{what}_table_kernel{'_shared' if shared else ''}"
            sigs[name] = (kernels("table", 0, inter, shared), table)
        for transform in (0,) if inter else (0, 1, 2):
            sigs[f"interventional_{what}_direct_kernel_{transform}"] = (
                kernels("direct", transform, inter),
                direct,
            )
            sigs[f"interventional_{what}_oversize_kernel_{transform}"] = (
                kernels("oversize", transform, inter),
                oversize,
            )
    return sigs


def kernel_ptx(cc: tuple[int, int] = (9, 0)) -> dict[str, str]:
    """PTX of every interventional kernel for compute capability ``cc`` (NVVM, no GPU)."""
    from distshap.kernels.cuda.ptx import _device_free_compilation

    if SIM:
        raise RuntimeError("kernel_ptx cannot run under NUMBA_ENABLE_CUDASIM=1")
    out = {}
    with _device_free_compilation(cc):
        for name, (kernel, sig) in _signatures().items():
            out[name], _ = cuda.compile_ptx(kernel.py_func, sig, cc=cc)
    return out
