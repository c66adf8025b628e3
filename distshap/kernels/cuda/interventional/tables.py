"""Background pattern tables (model output ``"raw"``, where ``s(x, r) = 1``): fill and use.

A path's result depends on the explained row ``x`` only through the pattern ``mx`` of the
elements ``x`` follows, so its background mean is a table over the ``2**k`` patterns
(:func:`distshap.plan.interventional.table_plan` says which paths get one). It is filled from
the background's pattern counts (:mod:`.background`): a thread per (path, ``mx``) sums over the
patterns that hold every element ``x`` misses (``3**k`` terms per path). A row then costs one
ballot and one table load per element whatever the background's size (``k`` loads for
interaction values): :func:`table_kernel`, one warp per bin.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np
from numba import cuda

from distshap.kernels.cuda.interventional.background import DeviceBackground
from distshap.kernels.cuda.interventional.common import bin_lane, block_rows, row_range
from distshap.kernels.cuda.runtime.device import (
    CAT_OTHER_FLAG,
    FULL_MASK,
    LD_VALUE,
    LF_LOWER,
    LF_UPPER,
    LI_FEATURE,
    LI_FLAGS,
    LI_GROUP,
    LI_NBITS,
    MISSING_FLAG,
    SIM,
    ballot,
    fixed,
    follows,
    stream,
    xp,
)  # fmt: skip
from distshap.kernels.cuda.runtime.model import DeviceModel
from distshap.packed import PackedModel
from distshap.plan.config import Config
from distshap.plan.interventional import bins_maxk

__all__ = [
    "DeviceTables",
    "device_tables",
    "interaction_fill_kernel",
    "launch_tables",
    "shap_fill_kernel",
    "table_kernel",
]


@cache
def shap_fill_kernel(max_k: int):
    """The SHAP fill kernel of paths of at most ``max_k`` features (its local array)."""

    @cuda.jit(cache=True)
    def kernel(lane_d, path_offsets, paths, table_off, count_off, counts, weights, tables,
               scale_b):  # fmt: skip
        """One thread per (table path, pattern ``mx``): the background mean of each element's
        SHAP value, ``v / B * sum_patterns count * weight``, as int64 fixed point."""
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
        acc = cuda.local.array(max_k, np.float64)
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

    return kernel


@cache
def interaction_fill_kernel(max_k: int):
    """The interaction fill kernel of paths of at most ``max_k`` features (local arrays)."""
    max_k2 = max_k * max_k

    @cuda.jit(cache=True)
    def kernel(lane_d, path_offsets, paths, table_off, count_off, counts, weights, tables,
               scale_b):  # fmt: skip
        """One thread per (table path, pattern ``mx``): entry ``[c, i]`` of the background mean
        of the path's interaction matrix (half the interaction index off the diagonal; the
        diagonal ``phi_i - sum_c``), as int64 fixed point."""
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
        pair = cuda.local.array(max_k2, np.float64)
        phi = cuda.local.array(max_k, np.float64)
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

    return kernel


@cache
def table_kernel(shared: bool, interactions: bool, warps: int, tile_values: int):
    """Rows through background pattern tables: one warp per bin (``warps`` a block), a ballot
    per row, one table entry (``k`` for interactions) per element; sums in a shared-memory tile
    of rows (``shared``: ``tile_values`` int64, one global atomic per output value and block)
    or in global memory."""

    @cuda.jit(cache=True)
    def kernel(lane_f, lane_i, lane_cat, cat_words, lane_toff, tables, bin_offsets, bin_maxk,
               bins, X, acc, rows_per_block, tile_rows, n_cols):  # fmt: skip
        tid = cuda.threadIdx.x
        lane = tid & 31
        bi = cuda.blockIdx.x * warps + (tid >> 5)
        live = bi < bins.shape[0]
        if not shared and not live:
            return  # warp-uniform; with a shared tile every warp takes part in the barriers
        b = bins[bi] if live else bins[0]
        li, valid, feat, pos, start, k = bin_lane(lane_i, bin_offsets, b, lane)
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
        r0, r1 = row_range(cuda.blockIdx.y, rows_per_block, X.shape[0])
        if shared:
            tile = cuda.shared.array(tile_values, np.int64)
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


@dataclass(eq=False)
class DeviceTables:
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


def device_tables(packed: PackedModel, model: DeviceModel, bg: DeviceBackground,
                  interactions: bool) -> DeviceTables:  # fmt: skip
    """The tables of one output kind, filled on the device on first use and kept on ``bg``."""
    with bg.lock:
        done = bg.interactions if interactions else bg.shap
        if done is None:
            done = _build_tables(packed, model, bg, interactions)
            if interactions:
                bg.interactions = done
            else:
                bg.shap = done
        return done


def _fill(model: DeviceModel, bg: DeviceBackground, toff: np.ndarray, chosen: np.ndarray,
          tables: Any, interactions: bool) -> None:  # fmt: skip
    """Fill the tables of the ``chosen`` paths (offsets ``toff``) on the device."""
    plan, k = bg.plan, bg.plan.k
    shift = model.interaction_shift if interactions else model.shap_shift
    scale_b = 2.0**shift / bg.n_rows
    if interactions:
        fill = interaction_fill_kernel(plan.interaction_max_features)
    else:
        fill = shap_fill_kernel(plan.shap_max_features)
    keep = []  # device temporaries live until the fill kernels are done
    s = stream()
    for j0 in range(0, chosen.size, 65535):  # grid.y is at most 65535
        part = chosen[j0 : j0 + 65535]
        arrays = (
            cuda.to_device(part.astype(np.int32)),
            cuda.to_device(np.ascontiguousarray(toff[part], np.int64)),
            cuda.to_device(np.ascontiguousarray(plan.count[part], np.int64)),
        )
        keep.append(arrays)
        tpb = 64
        grid = (-(-(1 << int(k[part].max())) // tpb), int(part.size))
        fill[grid, tpb, s](model.lane_d, model.path_offsets, *arrays, bg.counts, bg.weights,
                           tables, scale_b)  # fmt: skip
    if not SIM:
        s.synchronize()


def _build_tables(packed: PackedModel, model: DeviceModel, bg: DeviceBackground,
                  interactions: bool) -> DeviceTables:  # fmt: skip
    plan = bg.plan
    k, regular = plan.k, plan.regular
    toff = plan.interactions if interactions else plan.shap
    has = toff >= 0
    per = k * k if interactions else k
    total = int(((np.int64(1) << np.minimum(k, 62)) * per)[has].sum())
    tables = xp().zeros(max(total, 1), dtype=np.int64)
    chosen = np.flatnonzero(has)
    if chosen.size:
        _fill(model, bg, toff, chosen, tables, interactions)
    lane_path = packed.lane_path.astype(np.int64)
    lane_toff = toff[lane_path] if lane_path.size else np.full(1, -1, np.int64)
    direct = regular & ~has
    t_bins, t_maxk, n_t = bins_maxk(packed, k, has)
    d_bins, d_maxk, n_d = bins_maxk(packed, k, direct)
    lane_direct = direct[lane_path].astype(np.int8) if lane_path.size else np.zeros(1, np.int8)
    host = dict(lane_toff=np.ascontiguousarray(lane_toff, np.int64), table_bins=t_bins,
                table_maxk=t_maxk, lane_direct=lane_direct, direct_bins=d_bins,
                direct_maxk=d_maxk)  # fmt: skip
    dev = {name: cuda.to_device(a) for name, a in host.items()}
    return DeviceTables(tables=tables, n_table_bins=n_t, n_direct_bins=n_d,
                        table_bytes=8 * total, **dev)  # fmt: skip


def _tile_rows(width: int, cfg: Config) -> int:
    rows = min(cfg.tile_rows, cfg.shared_tile_values // max(width, 1))
    return rows if rows >= cfg.min_tile_rows else 0


def launch_tables(model: DeviceModel, tp: DeviceTables, Xb, acc, F1: int, s, interactions: bool,
                  cfg: Config) -> None:  # fmt: skip
    """The rows ``Xb`` through the tables ``tp`` into ``acc`` on stream ``s``."""
    if not tp.n_table_bins:
        return
    nb = int(Xb.shape[0])
    tile = _tile_rows(int(acc.shape[1]), cfg)
    warps = cfg.table_warps_per_block
    rpb = max(16, block_rows(nb, tp.n_table_bins, cfg.rows_per_warp))
    grid = (-(-tp.n_table_bins // warps), -(-nb // rpb))
    kernel = table_kernel(tile > 0, interactions, warps, cfg.shared_tile_values)
    kernel[grid, 32 * warps, s](
        model.lane_f, model.lane_i, model.lane_cat, model.cat_words, tp.lane_toff, tp.tables,
        model.bin_offsets, tp.table_maxk, tp.table_bins, Xb, acc, rpb, tile or rpb, F1,
    )  # fmt: skip
