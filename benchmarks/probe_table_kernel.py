"""Ablation probe of the pattern-table SHAP kernel: which change moves rows/s, side by side.

Every variant runs the table paths of one model over the same CuPy rows in one process; the
library's own ``shap_values`` is the reference. Variants (all table-only kernels):

* ``t64``     table lookup, float64 fixed-point conversion (the library's arithmetic) but no
              DP code compiled into the kernel (fewer registers);
* ``t32``     float32 fixed-point conversion (``int64(c * 2**s)``, truncation);
* ``noatom``  ``t32`` without the per-element atomics (one store per lane at the end): the
              cost of the atomics (its output is not a result);
* ``unroll2`` ``t32`` with two rows per loop iteration;
* ``nobias``  ``t32`` on a packing without the bias lane (table paths need none);
* ``smem``    ``nobias`` accumulating a tile of rows in shared memory, one global atomic per
              (row, column) per block.

Usage (GPU)::

    python3 -m benchmarks.probe_table_kernel --shapes cal_housing-med,adult-med --rows 1000000
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from numba import cuda

from distshap.kernels import cuda as _lib
from distshap.kernels.cuda import _follows, _lane_arrays
from distshap.packing import bin_order, pack

__all__ = ["main", "make_kernel", "nobias_lanes"]

_FULL = 0xFFFFFFFF
# under the CUDA simulator the library's emulated ballot must run as a device function
_ballot = cuda.jit(device=True)(_lib._ballot) if _lib._SIM else _lib._ballot
SMEM_ROWS = 128
SMEM_VALUES = 4096  # int64 values of the shared tile (32 KiB)


def make_kernel(fixed32: bool, atomics: bool, unroll2: bool, smem: bool, wpb: int):
    """A table-only SHAP kernel with the given options (compile-time constants)."""

    @cuda.jit(device=True)
    def lane_row(X, r, feat, lower, upper, flags, nbits, cat_off, cat_words, active):
        o = False
        if active:
            o = _follows(X[r, feat], lower, upper, flags, nbits, cat_off, cat_words)
        return o

    @cuda.jit(device=True)
    def contribution(tables, toff, bal, start, mask_k, k, pos, scale, scale32):
        pattern = (np.int64(bal) >> (start + 1)) & mask_k
        c = tables[toff + pattern * k + pos - 1]
        if fixed32:
            return np.int64(c * scale32)
        return np.int64(np.float64(c) * scale + 0.5)

    @cuda.jit
    def kernel(lane_f, lane_i, lane_l, cat_words, tables, bin_offsets, bins, X, acc, scale,
               rows_per_warp, n_cols):  # fmt: skip
        lane = cuda.threadIdx.x & 31
        warp = cuda.threadIdx.x >> 5
        bi = cuda.blockIdx.x * wpb + warp
        scale32 = np.float32(scale)
        r0 = cuda.blockIdx.y * rows_per_warp
        r1 = r0 + rows_per_warp
        if r1 > X.shape[0]:
            r1 = X.shape[0]
        width = acc.shape[1]
        if smem:
            tile = cuda.shared.array(SMEM_VALUES, np.int64)
        live = bi < bins.shape[0]
        b = bins[bi] if live else 0
        base = bin_offsets[b]
        valid = live and lane < bin_offsets[b + 1] - base
        li = base + lane if valid else base
        feat = lane_i[li, 0]
        pos = lane_i[li, 1]
        start = lane_i[li, 2]
        k = lane_i[li, 3]
        col = lane_i[li, 4] * n_cols + feat
        flags = lane_i[li, 5]
        nbits = lane_i[li, 6]
        lower = lane_f[li, 0]
        upper = lane_f[li, 1]
        cat_off = lane_l[li, 0]
        toff = lane_l[li, 1]
        active = valid and pos >= 1 and toff >= 0
        mask_k = (np.int64(1) << k) - 1
        if smem:
            for t0 in range(r0, r1, SMEM_ROWS):
                t1 = t0 + SMEM_ROWS
                if t1 > r1:
                    t1 = r1
                for i in range(cuda.threadIdx.x, (t1 - t0) * width, cuda.blockDim.x):
                    tile[i] = 0
                cuda.syncthreads()
                for r in range(t0, t1):  # warps without a bin take part (inactive lanes)
                    o = lane_row(X, r, feat, lower, upper, flags, nbits, cat_off, cat_words,
                                 active)  # fmt: skip
                    bal = _ballot(_FULL, o)
                    if active:
                        iv = contribution(tables, toff, bal, start, mask_k, k, pos, scale,
                                          scale32)  # fmt: skip
                        if iv != 0:
                            cuda.atomic.add(tile, (r - t0) * width + col, iv)
                cuda.syncthreads()
                for i in range(cuda.threadIdx.x, (t1 - t0) * width, cuda.blockDim.x):
                    v = tile[i]
                    if v != 0:
                        cuda.atomic.add(acc, (t0 + i // width, i % width), v)
                cuda.syncthreads()
            return
        if not live:
            return
        total = np.int64(0)
        r = r0
        if unroll2:
            while r + 1 < r1:
                oa = lane_row(X, r, feat, lower, upper, flags, nbits, cat_off, cat_words, active)
                ob = lane_row(X, r + 1, feat, lower, upper, flags, nbits, cat_off, cat_words,
                              active)  # fmt: skip
                ba = _ballot(_FULL, oa)
                bb = _ballot(_FULL, ob)
                if active:
                    ia = contribution(tables, toff, ba, start, mask_k, k, pos, scale, scale32)
                    ib = contribution(tables, toff, bb, start, mask_k, k, pos, scale, scale32)
                    if ia != 0:
                        cuda.atomic.add(acc, (r, col), ia)
                    if ib != 0:
                        cuda.atomic.add(acc, (r + 1, col), ib)
                r += 2
        while r < r1:
            o = lane_row(X, r, feat, lower, upper, flags, nbits, cat_off, cat_words, active)
            bal = _ballot(_FULL, o)
            if active:
                iv = contribution(tables, toff, bal, start, mask_k, k, pos, scale, scale32)
                if atomics:
                    if iv != 0:
                        cuda.atomic.add(acc, (r, col), iv)
                else:
                    total += iv
            r += 1
        if not atomics and active:
            cuda.atomic.add(acc, (r0, col), total)

    return kernel


def nobias_lanes(packed, host: dict) -> dict:
    """Lane arrays of the table paths packed without their bias lanes (items of size k)."""
    k = np.diff(packed.path_offsets) - 1
    table = np.flatnonzero(packed.table_offsets >= 0)
    packing = pack(k[table], capacity=32, algorithm="bfd")
    item_order, bin_offsets = bin_order(packing, k[table])
    paths = table[item_order]
    kp = k[paths]
    src = np.repeat(packed.path_offsets[paths] + 1, kp) + (
        np.arange(int(kp.sum())) - np.repeat(np.cumsum(kp) - kp, kp)
    )
    lane_i = host["lane_i"][src].copy()
    lane_f = host["lane_f"][src].copy()
    lane_l = host["lane_l"][src].copy()
    first = np.repeat(np.cumsum(kp) - kp, kp)  # global lane of each path's first element
    nbins = bin_offsets.shape[0] - 1
    bin_of_lane = np.repeat(np.arange(nbins), np.diff(bin_offsets))
    lane_i[:, 2] = first - bin_offsets[bin_of_lane] - 1  # "bias lane" just before the first
    return dict(lane_f=lane_f, lane_i=lane_i, lane_l=lane_l, bin_offsets=bin_offsets,
                bins=np.arange(nbins, dtype=np.int32))  # fmt: skip


def _time(fn, repeats: int) -> float:
    fn()
    cuda.synchronize()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def probe(name: str, size: str, rows: int, repeats: int) -> list[dict]:
    import cupy

    from benchmarks.shapes import make_data, train_model
    from distshap import TreeExplainer
    from distshap.kernels.cuda import shap_values

    booster = train_model(name, size)
    packed = TreeExplainer(booster, backend="cpu").packed
    X, _ = make_data(name, rows, seed=1)
    Xd = cupy.asarray(X, dtype=cupy.float32)
    host = _lane_arrays(packed)
    host["lane_l"] = np.stack(
        [packed.cat_offsets, packed.table_offsets[packed.lane_path]], axis=1
    ).astype(np.int64)
    host["bins"] = np.arange(packed.num_bins, dtype=np.int32)  # no oversize bins here
    host["tables"] = packed.tables
    scale = 2.0 ** host["shap_shift"]
    F1 = packed.num_features + 1
    width = packed.num_groups * F1
    acc = cupy.zeros((rows, width), dtype=cupy.int64)
    results = []
    t = _time(lambda: shap_values(packed, Xd), repeats)
    ref = cupy.asnumpy(shap_values(packed, Xd)).reshape(rows, width)
    nbins = packed.num_bins
    results.append({"variant": "library", "rows_s": rows / t, "bins": nbins})
    print(f"{name}-{size}: library {rows / t:,.0f} rows/s bins={nbins}", flush=True)
    saved = (_lib.ROWS_PER_WARP, _lib.TILE_ROWS)
    for rpw, tile in ((1024, 64), (2048, 128), (4096, 128), (4096, 64)):
        _lib.ROWS_PER_WARP, _lib.TILE_ROWS = rpw, tile
        t = _time(lambda: shap_values(packed, Xd), repeats)
        results.append({"variant": f"library-r{rpw}-t{tile}", "rows_s": rows / t})
        print(f"  library r{rpw} t{tile} {rows / t:>12,.0f} rows/s", flush=True)
    _lib.ROWS_PER_WARP, _lib.TILE_ROWS = saved
    nb = nobias_lanes(packed, host)
    layouts = {
        "bias": {key: host[key] for key in ("lane_f", "lane_i", "lane_l", "bin_offsets", "bins")},
        "nobias": nb,
    }
    dev_layouts = {
        name_: {key: cupy.asarray(a) for key, a in lay.items()} for name_, lay in layouts.items()
    }
    cat_words = cupy.asarray(host["cat_words"])
    tables = cupy.asarray(host["tables"])
    ev = packed.expected_value
    variants = [
        ("t32", "bias", dict(fixed32=True, atomics=True, unroll2=False, smem=False, wpb=4), 1024),
        (
            "noatom",
            "bias",
            dict(fixed32=True, atomics=False, unroll2=False, smem=False, wpb=4),
            1024,
        ),
        (
            "smem-w8-bias",
            "bias",
            dict(fixed32=True, atomics=True, unroll2=False, smem=True, wpb=8),
            1024,
        ),  # fmt: skip
        (
            "smem-w8",
            "nobias",
            dict(fixed32=True, atomics=True, unroll2=False, smem=True, wpb=8),
            1024,
        ),  # fmt: skip
        (
            "smem-w8-r4096",
            "nobias",
            dict(fixed32=True, atomics=True, unroll2=False, smem=True, wpb=8),
            4096,
        ),  # fmt: skip
    ]
    for label, layout, opts, rpw in variants:
        kern = make_kernel(**opts)
        lay = dev_layouts[layout]
        nbins = int(lay["bins"].shape[0])
        wpb = opts["wpb"]
        grid = (-(-nbins // wpb), -(-rows // rpw))

        def run(kern=kern, lay=lay, grid=grid, wpb=wpb, rpw=rpw):
            acc[:] = 0
            kern[grid, 32 * wpb](
                lay["lane_f"], lay["lane_i"], lay["lane_l"], cat_words, tables,
                lay["bin_offsets"], lay["bins"], Xd, acc, scale, rpw, F1,
            )  # fmt: skip

        t = _time(run, repeats)
        got = cupy.asnumpy(acc).astype(np.float64) / scale
        got = got.reshape(rows, packed.num_groups, F1)
        got[:, :, -1] += ev[None, :]
        err = float(np.abs(got.reshape(rows, width) - ref).max()) if label != "noatom" else None
        try:
            regs = kern.get_regs_per_thread()
            regs = max(regs.values()) if isinstance(regs, dict) else int(regs)
        except Exception:  # noqa: BLE001 - informative only
            regs = None
        rec = {"shape": f"{name}-{size}", "variant": label, "rows_s": rows / t, "bins": nbins,
               "regs": regs, "max_abs_diff_vs_library": err}  # fmt: skip
        results.append(rec)
        print(f"  {label:15s} {rows / t:>12,.0f} rows/s  bins={nbins} regs={regs} err={err}",
              flush=True)  # fmt: skip
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="table-kernel ablation probe (GPU)")
    parser.add_argument("--shapes", default="cal_housing-med,adult-med")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    for shape in args.shapes.split(","):
        name, size = shape.rsplit("-", 1)
        probe(name, size, args.rows, args.repeats)


if __name__ == "__main__":
    main()
