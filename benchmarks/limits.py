"""Distance to the limit: each CUDA kernel's work, counted, over its time, against the GPU's peak.

For a benchmark shape (:mod:`benchmarks.shapes`) this reads the plan the library runs (the
device model's :class:`~distshap.kernels.cuda.model.Plan`: which paths run in which
quadrature launch, table kernel or fallback kernel), counts per explained row the work each
kernel does, times each kernel alone on the GPU through the library's own launch helpers
(:mod:`distshap.kernels.cuda.launch`, ``.quadrature``, ``.tables``, ``.fallback``), and
prints achieved rates as fractions of the device's peak, each kernel's time over its floor
(``x floor``: its counted work at the peak of the busiest unit, METHOD's "two numbers"), plus
the whole call's breakdown (seconds and share per kernel). The parts, run in the call's order
into one accumulator, must give the call's output bit for bit (checked; ``parts_match``).

What is counted (per row, from the packed model's arrays and the kernels' source; thread
instructions, so a warp instruction counts 32):

* ``fp32``: FP32-pipe instructions (FADD, FMUL, FFMA, FSETP; a ``follows`` test is 4 FSETP:
  NaN, lower, upper, upper = inf); ``flop``: the same arithmetic with FFMA = 2, compares
  excluded. ``mufu``: reciprocals (``fast_fdividef`` = MUFU.RCP + FMUL). ``conv64``:
  conversions to or from 64-bit types (float32 -> int64 fixed point, int64 -> float64 in the
  finish pass). ``fp64``: FP64 arithmetic (finish pass; fallback DP, rough).
* ``shared``: shared-memory accesses (the SHAP quadrature kernel's per-thread row sums: a load
  and a store per element, no atomics); ``shared_atomics``: int64 shared atomics (table and
  interaction kernels); ``global_atomics``: int64 atomics on the output accumulator. Where a
  block sums in shared memory and flushes non-zero sums, the flush count is the number of
  distinct output entries the block's paths touch (an upper bound: a sum that cancels to 0 is
  not flushed). The SHAP quadrature kernel with chunk-local feature tiles (kind
  ``local-quadrature``, :data:`distshap.kernels.cuda.config.SHAP_QUADRATURE_TILES`) is counted
  over its own chunks (``local_offsets``): its tile has a column per feature of the chunk, so
  its init and flush cost the chunk's features, not the model's.
* ``bytes``: bytes the load and atomic instructions ask for (rows of ``X``, lane data, tables,
  8 per atomic), each warp-uniform load counted once per warp (``bytes_lane`` / 32 per row
  where one thread runs one row); ``dram_min``: the fewest bytes through device memory if
  every input were read once per launch (the rows, the launch's lane data, its tables) and
  every output entry the launch touches read and written once. Achieved bytes/s of
  ``bytes`` over the HBM peak is an upper bound of the DRAM fraction (much of it hits L1/L2);
  of ``dram_min``, a lower bound.
* Not counted: integer, address, branch, predicate and plain load instructions (they share the
  issue slots; the count-based pipe fractions are lower bounds of the issue rate). For those,
  profile one launch (``--ncu`` prints the Nsight Compute command).

Per path of ``k`` features and row (``n`` nodes; ``P = k (k - 1) / 2`` pairs), from the code:

===================  ==================================  ============  =======  ===========
kernel               FP32 instructions                   MUFU          conv.    int64 atomics
===================  ==================================  ============  =======  ===========
SHAP quadrature      ``n + k (9 + 5 n)``                 ``n k``       ``k``    chunk flush
SHAP table           ``5 k`` (4 FSETP, 1 FMUL)           0             ``k``    ``k`` shared
interaction quadr.   ``n + k (8 + 10 n) + P (4 + 3 n)``  ``n (2k+P)``  ``k+P``  ``k+P`` sh.
interaction table    ``4 k + k^2``                       0             ``k^2``  ``k^2``
finish (a value)     FP64 1 (+1 at the bias)             0             2        0
===================  ==================================  ============  =======  ===========

Bytes a row: SHAP quadrature ``4 k`` of ``X`` (transposed: 32 rows a warp, coalesced) and
``(24 + 40 k) / 32`` of lane data (warp-uniform loads); tables ``4 k`` of ``X`` and ``4 k`` (SHAP)
or ``4 k^2`` (interactions) of table entries; finish 8 read and 12 written per output value.

Assumptions: every feature element of a path contributes (``d != 0``, true unless a zero
fraction is 0 or 1: the tool reports how many lanes have one); numeric splits (a categorical
element reads one more 4-byte word); the quadrature SHAP kernel's time is that of its launch
helper less the rows' transpose it starts with (timed alone).

Peaks (dense, no sparsity; boost clock), from NVIDIA's data sheets: *NVIDIA H100 Tensor Core
GPU* data sheet (2023): H100 SXM FP32 67 TFLOPS, FP64 34 TFLOPS, 3.35 TB/s HBM3; H100 PCIe
51 / 26 TFLOPS, 2.0 TB/s; H100 NVL 60 / 30 TFLOPS, 3.9 TB/s. *NVIDIA H200 Tensor Core GPU*
data sheet (2024): H200 SXM FP32 67, FP64 34 TFLOPS, 4.8 TB/s HBM3e; H200 NVL 60 / 30 TFLOPS,
4.8 TB/s. Per-SM rates per clock for compute capability 9.0 from the *CUDA C++ Programming
Guide* (arithmetic instruction throughput table): FP32 add/mul/FMA 128, FP64 64, MUFU
(reciprocal) 16, conversions from/to 64-bit types 16; the clock is the one that turns 128
FP32 FMA lanes per SM into the data sheet's FP32 rate (1.98 GHz on the SXM parts). No data
sheet gives an atomic or L2 rate: the ceilings (measured on a GPU unless ``--no-ceilings``)
are a device copy, FP32 FMA, MUFU, float32 -> int64 conversions, int64 global atomics
(scattered and coalesced) and int64 shared atomics on the machine (METHOD: measure the
ceilings); the JSON gives each rate as a fraction of those too, and the table's ``%atom`` is
against the ceiling of the kernel's pattern (coalesced for a table kernel's tile flush,
scattered otherwise).

Usage::

    python3 -m benchmarks.limits --shapes cal_housing-med,covtype-med --rows 200000
    python3 -m benchmarks.limits --shapes covtype-med --rows 2000 --interactions
    python3 -m benchmarks.limits --shapes covtype-med --rows 200000 --ncu   # print ncu commands
    python3 -m benchmarks.limits --shapes covtype-med --rows 200000 --only quadrature-n4 \\
        --repeats 1 --no-ceilings                       # one kernel only, for a profiler
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import statistics
import time
import traceback
from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "DATASHEET",
    "KernelWork",
    "ceiling_kernels",
    "device_peaks",
    "format_table",
    "measure_ceilings",
    "ncu_command",
    "profile",
    "work_counts",
]

#: Data-sheet peaks (dense): FP32 / FP64 TFLOP/s, HBM TB/s (module docstring for sources).
DATASHEET: dict[str, dict[str, float | str]] = {
    "H100 SXM": {"fp32_tflops": 67.0, "fp64_tflops": 34.0, "hbm_tbs": 3.35,
                 "source": "NVIDIA H100 Tensor Core GPU data sheet"},
    "H100 PCIe": {"fp32_tflops": 51.0, "fp64_tflops": 26.0, "hbm_tbs": 2.0,
                  "source": "NVIDIA H100 Tensor Core GPU data sheet"},
    "H100 NVL": {"fp32_tflops": 60.0, "fp64_tflops": 30.0, "hbm_tbs": 3.9,
                 "source": "NVIDIA H100 Tensor Core GPU data sheet"},
    "H200 SXM": {"fp32_tflops": 67.0, "fp64_tflops": 34.0, "hbm_tbs": 4.8,
                 "source": "NVIDIA H200 Tensor Core GPU data sheet"},
    "H200 NVL": {"fp32_tflops": 60.0, "fp64_tflops": 30.0, "hbm_tbs": 4.8,
                 "source": "NVIDIA H200 Tensor Core GPU data sheet"},
}  # fmt: skip
#: Per-SM results per clock, compute capability 9.0 (CUDA C++ Programming Guide).
PER_SM_CLOCK = {"fp32": 128, "fp64": 64, "mufu": 16, "conv64": 16}
#: The work counters, per row (module docstring).
COUNTERS = (
    "fp32", "flop", "mufu", "conv64", "fp64", "shared", "shared_atomics", "global_atomics",
    "bytes_x", "bytes_lane", "bytes_table", "bytes_atomic", "bytes_out", "dram_min",
)  # fmt: skip
# bytes a lane of the device model holds: lane_f (4 float32), lane_i (8 int32), lane_cat (int64)
_LANE_BYTES = 16 + 32 + 8
# ncu --kernel-name patterns (mangled names hold the Python function's qualified name)
_NCU_PATTERN = {
    "quadrature": "_make_shap_kernel",
    "local-quadrature": "_make_local_shap_kernel",
    "inter-quadrature": "_make_interaction_kernel",
    "tables": "_make_table_kernel",
    "fallback": "_make_oversize_kernel",
    "finish": "finish_kernel",
}


@dataclass
class KernelWork:
    """The work of one kernel kind on one row batch: ``counts`` per row (:data:`COUNTERS`),
    ``launches`` per batch, and what the kernel ran (``paths``, ``n_nodes``...)."""

    name: str
    kind: str
    launches: int = 1
    counts: dict = field(default_factory=dict)
    info: dict = field(default_factory=dict)
    run: object = None  # host closure running the kernel once on (Xb, acc, out2, stream)


def _zero_counts() -> dict:
    return dict.fromkeys(COUNTERS, 0.0)


def _host(a) -> np.ndarray:
    if hasattr(a, "copy_to_host"):
        return a.copy_to_host()
    return a.get() if hasattr(a, "get") else np.asarray(a)


def _lanes_of(path_offsets: np.ndarray, paths: np.ndarray, skip_bias: bool = True):
    """Lane indices of ``paths`` (feature lanes only with ``skip_bias``) and each lane's path
    position in ``paths``."""
    start = path_offsets[paths] + (1 if skip_bias else 0)
    size = path_offsets[paths + 1] - start
    owner = np.repeat(np.arange(paths.size, dtype=np.int64), size)
    lanes = np.repeat(start - np.cumsum(size) + size, size) + np.arange(int(size.sum()))
    return lanes.astype(np.int64), owner


def _distinct(keys: np.ndarray) -> int:
    return int(np.unique(keys).size) if keys.size else 0


# --------------------------------------------------------------------------------------------
# Counts (host arithmetic on the packed model and the plan)
# --------------------------------------------------------------------------------------------
def _quadrature_shap(packed, launch: dict, shared: bool, rows: int, local: bool = False) -> dict:
    """Per-row work of one SHAP quadrature launch (:mod:`distshap.kernels.cuda.quadrature`):
    one thread per row, every path of a chunk in turn, ``n`` Gauss-Legendre nodes; ``local``:
    the kernel with chunk-local feature tiles (its chunks ``local_offsets``, a tile column per
    feature of the chunk, ``local_feature_offsets``), else a column per feature of the model
    (``shared``) or global atomics."""
    po = np.asarray(packed.path_offsets, np.int64)
    paths = np.asarray(launch["paths"], np.int64)
    offsets = np.asarray(launch["local_offsets" if local else "offsets"], np.int64)
    n = int(launch["n_nodes"])
    k = po[paths + 1] - po[paths] - 1
    K = float(k.sum())
    P = float(paths.size)
    F = packed.num_features
    c = _zero_counts()
    # init n FMUL; pass 1 per element: follows (4 FSETP), d (FADD), per node FFMA + FMUL;
    # pass 2 per element: d (FADD), d != 0 (FSETP), per node FFMA + MUFU + FMUL + FADD,
    # then total * d * scale (2 FMUL) and the int64 conversion
    c["fp32"] = P * n + K * (9 + 5 * n)
    c["flop"] = P * n + K * (4 + 7 * n)
    c["mufu"] = K * n
    c["conv64"] = K
    c["bytes_x"] = 4 * K  # XT[feature, row], 32 rows a warp: coalesced
    # per path per warp: chunk_paths, two path_offsets, the value (24 B); per element: pass 1
    # lane_f zero/lower/upper, lane_i feature/flags/nbits, lane_cat (32 B), pass 2 zero and
    # feature (8 B); warp-uniform: once per 32 rows
    c["bytes_lane"] = (24 * P + 40 * K) / 32
    lanes, owner = _lanes_of(po, paths)
    chunk = np.repeat(np.arange(offsets.size - 1, dtype=np.int64), np.diff(offsets))
    feat = np.asarray(packed.feature, np.int64)[lanes]
    group = np.asarray(packed.path_group, np.int64)[paths][owner]
    touched = _distinct(group * (F + 1) + feat)
    n_chunks = offsets.size - 1
    columns = F  # int64 columns of a thread's tile
    if local:  # tile init and flush over each chunk's features (its tile's columns)
        widths = np.diff(np.asarray(launch["local_feature_offsets"], np.int64))
        columns = int(widths.max(initial=0))
        c["shared"] = 2 * K + 2 * float(widths.sum())
        c["global_atomics"] = float(widths.sum())  # a chunk's features: distinct per chunk
    elif shared:
        c["shared"] = 2 * K + 2 * F * n_chunks  # load + store per element; tile init, flush
        c["global_atomics"] = _distinct(chunk[owner] * (F + 1) + feat)
    else:
        columns = 0
        c["global_atomics"] = K
    c["bytes_atomic"] = 8 * c["global_atomics"]
    model_bytes = _LANE_BYTES * float(lanes.size + P) + 4 * P
    c["dram_min"] = 4 * F + 16 * touched + model_bytes / max(rows, 1)
    info = {"paths": int(P), "elements": int(K), "n_nodes": n, "chunks": int(n_chunks),
            "mean_k": K / max(P, 1), "shared": bool(shared or local),
            "tiles": "local" if local else "all", "tile_columns": columns}  # fmt: skip
    return {"counts": c, "info": info}


def _quadrature_interactions(packed, launch: dict, shared: bool, rows: int) -> dict:
    """Per-row work of one interaction quadrature launch: one thread per path, one block per
    (chunk, row), each pair ``i < c`` once."""
    po = np.asarray(packed.path_offsets, np.int64)
    paths = np.asarray(launch["paths"], np.int64)
    offsets = np.asarray(launch["offsets"], np.int64)
    n = int(launch["n_nodes"])
    k = po[paths + 1] - po[paths] - 1
    K = float(k.sum())
    pairs = float((k * (k - 1) // 2).sum())
    P = float(paths.size)
    F1 = packed.num_features + 1
    c = _zero_counts()
    # pass 1 per element: follows 4, d 1, per node FFMA + FMUL (product) + FMUL + FADD (usum,
    # with a MUFU); per element i: d, test, per node FFMA + MUFU + FMUL (r_i) + FMUL (part) +
    # FADD + FFMA + FFMA (diagonal), FMUL (scale), a conversion and an add; per pair: d, test,
    # per node FFMA + MUFU + FMUL + FFMA, 2 FMUL, a conversion and an add
    c["fp32"] = P * n + K * (5 + 4 * n) + K * (3 + 6 * n) + pairs * (4 + 3 * n)
    c["flop"] = P * n + K * (1 + 5 * n) + K * (1 + 9 * n) + pairs * (2 + 5 * n)
    c["mufu"] = 2 * K * n + pairs * n
    c["conv64"] = K + pairs
    c["bytes_x"] = 4 * K  # X[row, feature]: one row a block
    c["bytes_lane"] = 24 * P + 40 * K + 8 * pairs  # one thread per path: no warp reuse
    lanes, owner = _lanes_of(po, paths)
    feat = np.asarray(packed.feature, np.int64)[lanes]
    chunk = np.repeat(np.arange(offsets.size - 1, dtype=np.int64), np.diff(offsets))[owner]
    # entries (f_i, f_c), f_i <= f_c, of each chunk: pairs of lanes of one path
    ends = np.cumsum(k)
    a_idx, b_idx = [], []
    for d in range(int(k.max(initial=0))):  # lane a with the lane d places further on
        b = np.arange(lanes.size) + d
        ok = b < np.repeat(ends, k)
        a_idx.append(np.flatnonzero(ok))
        b_idx.append(b[ok])
    a_idx = np.concatenate(a_idx) if a_idx else np.zeros(0, np.int64)
    b_idx = np.concatenate(b_idx) if b_idx else np.zeros(0, np.int64)
    entry = feat[a_idx] * F1 + feat[b_idx]
    group = np.asarray(packed.path_group, np.int64)[paths][owner][a_idx]
    diag = feat[a_idx] == feat[b_idx]
    if shared:
        c["shared_atomics"] = K + pairs
        c["shared"] = 2 * F1 * F1 * float(offsets.size - 1)  # the tile's zeroing and flush
        keys = np.unique(chunk[a_idx] * F1 * F1 + entry)
        nd = int((keys % (F1 * F1) // F1 == keys % F1).sum())
        c["global_atomics"] = 2 * keys.size - nd  # off-diagonal entries mirrored
    else:
        c["global_atomics"] = K + 2 * pairs
    c["bytes_atomic"] = 8 * c["global_atomics"]
    touched = _distinct(group * F1 * F1 + entry) * 2 - _distinct((group * F1 * F1 + entry)[diag])
    model_bytes = _LANE_BYTES * float(lanes.size + P) + 4 * P
    c["dram_min"] = 4 * (F1 - 1) + 16 * touched + model_bytes / max(rows, 1)
    info = {"paths": int(P), "elements": int(K), "pairs": int(pairs), "n_nodes": n,
            "chunks": int(offsets.size - 1), "shared": bool(shared)}  # fmt: skip
    return {"counts": c, "info": info}


def _tables(packed, plan: dict, tile_rows: int, rows: int, shap: bool) -> dict:
    """Per-row work of the table kernel (:mod:`distshap.kernels.cuda.tables`): one warp per
    table bin, one ballot per row; each element lane adds its SHAP entry (``shap``) or its
    ``k`` interaction entries, to a shared tile of rows (``tile_rows``) or global memory."""
    from distshap.kernels.cuda.tables import _TABLE_WARPS

    po = np.asarray(packed.path_offsets, np.int64)
    lane_table = plan["lane_table"]
    bins = np.asarray(plan["table_bins"], np.int64)[: plan["n_table_bins"]]
    bo = np.asarray(packed.bin_offsets, np.int64)
    n_lanes = int(packed.feature.shape[0])
    lane_bin = np.repeat(np.arange(packed.num_bins, dtype=np.int64), np.diff(bo))
    block_of_bin = np.full(packed.num_bins, -1, np.int64)
    block_of_bin[bins] = np.arange(bins.size) // _TABLE_WARPS
    lane_path = np.asarray(packed.lane_path, np.int64)
    k_lane = (po[lane_path + 1] - po[lane_path] - 1) if n_lanes else np.zeros(0, np.int64)
    pos = np.arange(n_lanes) - po[lane_path]
    active = (pos >= 1) & (lane_table[:n_lanes] >= 0) & (block_of_bin[lane_bin] >= 0)
    A = float(active.sum())
    E = A if shap else float(k_lane[active].sum())  # table entries a row
    F1 = packed.num_features + 1
    G = packed.num_groups
    c = _zero_counts()
    c["fp32"] = 4 * A + E  # follows; the scale multiply per entry
    c["flop"] = E
    c["conv64"] = E
    c["bytes_x"] = 4 * A  # X[row, feature] per active lane
    c["bytes_table"] = 4 * E
    if not shap:
        c["bytes_lane"] = 4 * E  # the conditioned element's feature, a lane_i load an entry
    tpaths = np.unique(lane_path[active])
    lanes, owner = _lanes_of(po, tpaths)
    feat = np.asarray(packed.feature, np.int64)[lanes]
    path_group = np.asarray(packed.path_group, np.int64)[tpaths]
    if shap:  # entry (group, feature) of each element lane
        entry = path_group[owner] * F1 + feat
        blk = block_of_bin[lane_bin[lanes]]
        n_entries = G * F1
    else:  # entry (group, f_c, f_i) for every element pair of a path (c may equal i)
        k = po[tpaths + 1] - po[tpaths] - 1
        rep = np.repeat(k, k)  # each lane pairs with the k lanes of its path
        a = np.repeat(np.arange(lanes.size), rep)
        starts = np.repeat(np.cumsum(k) - k, k)
        b = np.repeat(starts, rep) + (np.arange(a.size) - np.repeat(np.cumsum(rep) - rep, rep))
        entry = (path_group[owner][a] * F1 + feat[b]) * F1 + feat[a]
        blk = block_of_bin[lane_bin[lanes[a]]]
        n_entries = G * F1 * F1
    if tile_rows:
        c["shared_atomics"] = E
        c["global_atomics"] = _distinct(blk * n_entries + entry)  # flushed once a block
    else:
        c["global_atomics"] = E
    c["bytes_atomic"] = 8 * c["global_atomics"]
    table_bytes = float(plan["table_bytes"])
    c["dram_min"] = 4 * (F1 - 1) + 16 * _distinct(entry) + table_bytes / max(rows, 1)
    info = {"bins": int(bins.size), "paths": int(tpaths.size), "entries": int(E),
            "tile_rows": int(tile_rows), "table_mb": table_bytes / 2**20,
            "values": "shap" if shap else "interactions"}  # fmt: skip
    return {"counts": c, "info": info}


def _fallback(packed, oversize: np.ndarray, interactions: bool) -> dict:
    """Rough per-row work of the fallback kernel (float64 DP, one thread per row and path)."""
    po = np.asarray(packed.path_offsets, np.int64)
    k = (po[oversize + 1] - po[oversize] - 1).astype(np.float64)
    c = _zero_counts()
    conds = (k + 1) if interactions else np.ones_like(k)
    # EXTEND ~ 3.5 k^2 FP64 (+ k divisions), UNWOUND_SUM ~ 8 k per element (+ 2 k divisions)
    c["fp64"] = float((conds * 11.5 * k * k).sum())
    c["conv64"] = float((conds * k).sum())
    c["global_atomics"] = float((conds * k).sum())
    c["bytes_atomic"] = 8 * c["global_atomics"]
    c["bytes_x"] = 4 * float(k.sum())
    c["bytes_lane"] = float((40 * k).sum())
    c["dram_min"] = c["bytes_x"] + c["bytes_atomic"] * 2
    return {"counts": c, "info": {"paths": int(oversize.size), "rough": True}}


def _finish(width: int, groups: int) -> dict:
    c = _zero_counts()
    c["fp64"] = width + groups  # value * inv_scale; + expected value on the bias entries
    c["flop"] = 0.0
    c["conv64"] = 2 * width  # int64 -> float64, float64 -> float32
    c["bytes_atomic"] = 0.0
    c["bytes_out"] = 12 * width  # float32 out, zeroed int64 accumulator
    c["bytes_x"] = 8 * width  # the accumulator, read
    c["dram_min"] = 20 * width
    return {"counts": c, "info": {"width": int(width)}}


def _transpose(num_features: int) -> dict:
    c = _zero_counts()
    c["bytes_x"] = 4 * num_features
    c["bytes_out"] = 4 * num_features
    c["dram_min"] = 8 * num_features
    return {"counts": c, "info": {}}


def _plan_host(plan) -> dict:
    """Host copies of a device :class:`~distshap.kernels.cuda.model.Plan`'s arrays."""
    return {
        "lane_table": _host(plan.lane_table).astype(np.int64),
        "table_bins": _host(plan.table_bins).astype(np.int64),
        "n_table_bins": int(plan.n_table_bins),
        "table_bytes": int(plan.table_bytes),
        # plans without the field (before SHAP tables) held interaction tables only
        "per_pattern": getattr(plan, "per_pattern", "k*k"),
        "quadrature": [
            {"n_nodes": int(q.n_nodes), "paths": _host(q.paths), "offsets": _host(q.offsets),
             "n_chunks": int(q.n_chunks), **_local_host(q)}
            for q in plan.quadrature
        ],
    }  # fmt: skip


def _local_host(q) -> dict:
    """A quadrature launch's chunk-local feature tiles on the host (``{}`` without them)."""
    if getattr(q, "local_offsets", None) is None:
        return {}
    return {"local_offsets": _host(q.local_offsets),
            "local_feature_offsets": _host(q.local_feature_offsets),
            "n_local": int(q.n_local), "local_columns": int(q.local_columns)}  # fmt: skip


def work_counts(packed, model, plan, interactions: bool, rows: int) -> list[KernelWork]:
    """Every kernel of one call on ``rows`` rows (one batch), with its per-row work.

    ``model`` / ``plan`` are the device model and the plan the call uses
    (:func:`distshap.kernels.cuda.model.device_model`, ``model.shap`` or
    :func:`~distshap.kernels.cuda.model.interaction_plan`); their arrays are read back to
    the host, so the counts follow whatever the library's policy put where.
    """
    from distshap.kernels.cuda.quadrature import (
        interaction_tile_fits,
        local_tiles,
        quadrature_warps,
    )
    from distshap.kernels.cuda.tables import shared_tile_rows

    host = _plan_host(plan)
    local = not interactions and local_tiles(plan)
    F = packed.num_features
    F1 = F + 1
    G = packed.num_groups
    width = G * F1 * F1 if interactions else G * F1
    out: list[KernelWork] = []
    if host["n_table_bins"]:
        shap = host["per_pattern"] == "k"
        if shap == interactions:  # a plan this module does not know: timed, not counted
            out.append(KernelWork("tables", "tables", 1, {}, {"counted": False}))
        else:
            w = _tables(packed, host, shared_tile_rows(width), rows, shap)
            out.append(KernelWork("tables", "tables", 1, w["counts"], w["info"]))
    if not interactions and host["quadrature"]:
        out.append(KernelWork("transpose", "transpose", 1, **_transpose(F)))
    for i, q in enumerate(host["quadrature"]):
        if interactions:
            shared = interaction_tile_fits(F1)
            w = _quadrature_interactions(packed, q, shared, rows)
            kind = "inter-quadrature"
        else:  # as launch_quadrature: local tiles where they apply and the widest one fits
            tiled = local and quadrature_warps(q.get("local_columns", 0)) > 0
            w = _quadrature_shap(packed, q, quadrature_warps(F) > 0, rows, tiled)
            kind = "local-quadrature" if tiled else "quadrature"
        name = f"quadrature-n{q['n_nodes']}"
        out.append(KernelWork(name, kind, 1, w["counts"], {**w["info"], "launch": i}))
    if model.n_oversize:
        oversize = _host(model.oversize_paths)[: model.n_oversize].astype(np.int64)
        w = _fallback(packed, oversize, interactions)
        out.append(KernelWork("fallback", "fallback", 1, w["counts"], w["info"]))
    out.append(KernelWork("finish", "finish", 1, **_finish(width, G)))
    return out


# --------------------------------------------------------------------------------------------
# Peaks and ceilings
# --------------------------------------------------------------------------------------------
def _sku(name: str) -> str | None:
    u = name.upper()
    for chip in ("H200", "H100"):
        if chip in u:
            if "NVL" in u:
                return f"{chip} NVL"
            if "PCIE" in u:
                return f"{chip} PCIe"
            return f"{chip} SXM"
    return None


def device_peaks(name: str, sm_count: int, clock_hz: float | None = None) -> dict:
    """Peak rates of the device called ``name`` with ``sm_count`` multiprocessors.

    Known parts (:data:`DATASHEET`) take the data sheet's FP32 rate to fix the clock
    (``fp32 / (128 * 2 * SMs)``); others use ``clock_hz`` (the device's maximum clock) and
    have no memory peak. Returns per-second peaks ``fp32`` (instructions), ``flop`` (FP32,
    FMA = 2), ``fp64``, ``mufu``, ``conv64``, ``hbm`` (bytes/s or None), the ``sku`` and its
    ``source``.
    """
    sku = _sku(name)
    sheet = DATASHEET.get(sku) if sku else None
    if sheet is not None:
        clock = float(sheet["fp32_tflops"]) * 1e12 / (2 * PER_SM_CLOCK["fp32"] * sm_count)
    else:
        clock = float(clock_hz or 0.0)
    peaks = {key: per * sm_count * clock for key, per in PER_SM_CLOCK.items()}
    peaks["flop"] = 2 * peaks["fp32"]
    if sheet is not None:
        peaks["fp64"] = float(sheet["fp64_tflops"]) * 1e12 / 2  # FP64 instructions (FMA = 2)
    peaks["hbm"] = float(sheet["hbm_tbs"]) * 1e12 if sheet is not None else None
    peaks["clock_hz"] = clock
    peaks["sku"] = sku or name
    peaks["source"] = str(sheet["source"]) if sheet is not None else "device attributes"
    return peaks


def _timer(sim: bool):
    """``time(fn, repeats, before)``: median seconds of ``fn`` (warm), device events on a GPU."""
    if sim:

        def run(fn, repeats, before=None):
            if before is not None:
                before()
            fn()  # warm-up: compilation
            times = []
            for _ in range(repeats):
                if before is not None:
                    before()
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
            return statistics.median(times)

        return run
    import cupy

    def run(fn, repeats, before=None):
        if before is not None:
            before()
        fn()
        cupy.cuda.Device().synchronize()
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        times = []
        for _ in range(repeats):
            if before is not None:
                before()
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(cupy.cuda.get_elapsed_time(start, end) / 1e3)
        return statistics.median(times)

    return run


_ITERS = 1 << 16  # FMA / MUFU ceiling loop: milliseconds a launch, host costs stay out
_PER = 1024  # atomics a thread in the atomic ceilings (8x that in shared memory)


def ceiling_kernels() -> dict:
    """The ceiling kernels (built on call; no CUDA at import): ``fma`` (8 independent FFMA
    chains), ``rcp`` (4 chains of ``fast_fdividef``), ``conv`` (4 float32 -> int64
    conversions a step, beside 4 FFMA and 4 int64 adds), ``atomic`` (int64 global atomics from
    ``(t * first) & mask`` in steps of ``step``), ``shared_atomic`` (int64, a 4096-entry
    tile)."""
    from numba import cuda, types
    from numba.cuda import libdevice

    iters, per = _ITERS, _PER

    @cuda.jit
    def fma(x, out):
        t = cuda.grid(1)
        a0 = x[t % x.size]
        d = np.float32(0.25)
        a1, a2, a3, a4, a5, a6, a7 = a0 + d, a0 - d, a0 * d, a0 + d + d, a0 - d - d, a0 * a0, -a0
        m = np.float32(0.999)
        c = np.float32(0.001)
        for _ in range(iters):
            a0 = a0 * m + c
            a1 = a1 * m + c
            a2 = a2 * m + c
            a3 = a3 * m + c
            a4 = a4 * m + c
            a5 = a5 * m + c
            a6 = a6 * m + c
            a7 = a7 * m + c
        out[t] = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7

    @cuda.jit
    def rcp(x, out):
        t = cuda.grid(1)
        a0 = x[t % x.size] + np.float32(1.5)
        one = np.float32(1.0)
        a1, a2, a3 = a0 + one, a0 + one + one, a0 * a0
        for _ in range(iters):
            a0 = libdevice.fast_fdividef(one, a0) + one
            a1 = libdevice.fast_fdividef(one, a1) + one
            a2 = libdevice.fast_fdividef(one, a2) + one
            a3 = libdevice.fast_fdividef(one, a3) + one
        out[t] = a0 + a1 + a2 + a3

    @cuda.jit
    def conv(x, out):
        t = cuda.grid(1)
        a0 = x[t % x.size]
        one = np.float32(1.0)
        m = np.float32(0.999)
        a1, a2, a3 = a0 + one, a0 * m, a0 * a0
        i0 = i1 = i2 = i3 = np.int64(0)
        for _ in range(iters):  # float32 -> int64 (F2I.S64), as the kernels' fixed point
            i0 += np.int64(a0 * np.float32(4096.0))
            i1 += np.int64(a1 * np.float32(4096.0))
            i2 += np.int64(a2 * np.float32(4096.0))
            i3 += np.int64(a3 * np.float32(4096.0))
            a0 = a0 * m + one
            a1 = a1 * m + one
            a2 = a2 * m + one
            a3 = a3 * m + one
        out[t] = np.float32(i0 + i1 + i2 + i3)

    @cuda.jit
    def atomic(acc, first, step):
        t = cuda.grid(1)
        mask = acc.size - 1  # a power of two: no integer division in the loop
        i = (t * first) & mask
        for _ in range(per):
            cuda.atomic.add(acc, i, np.int64(1))
            i = (i + step) & mask

    @cuda.jit
    def shared_atomic(out):
        tile = cuda.shared.array(4096, types.int64)
        tid = cuda.threadIdx.x
        for e in range(tid, 4096, cuda.blockDim.x):
            tile[e] = 0
        cuda.syncthreads()
        i = (tid * 33) & 4095
        for _ in range(8 * per):
            cuda.atomic.add(tile, i, np.int64(1))
            i = (i + 97) & 4095
        cuda.syncthreads()
        out[cuda.grid(1)] = tile[tid]

    return {"fma": fma, "rcp": rcp, "conv": conv, "atomic": atomic, "shared_atomic": shared_atomic}


def measure_ceilings(repeats: int = 5) -> dict:
    """Measured ceilings on the current GPU (not under the simulator): device copy bytes/s
    (read + write), FP32 FMA FLOP/s, MUFU reciprocals/s, float32 -> int64 conversions/s
    (``conv64``, a lower bound: the loop adds FFMA and int64 adds), int64 global atomics/s at
    scattered
    addresses on a 1 GiB array (``atomics_dram``) and a 16 MiB one (``atomics_l2``) and
    coalesced on 1 GiB (``atomics_coalesced``), int64 shared-memory atomics/s
    (``atomics_shared``)."""
    import cupy
    from numba import cuda

    run = _timer(False)
    k = ceiling_kernels()
    sms = int(cuda.get_current_device().MULTIPROCESSOR_COUNT)
    out = {}
    n = 1 << 28  # 1 GiB of float32, random (never time on zeros)
    src = cupy.random.random(n, dtype=cupy.float32)
    dst = cupy.empty_like(src)
    out["copy_bytes_s"] = 2 * 4 * n / run(lambda: cupy.copyto(dst, src), repeats)
    src = dst = None  # free 2 GiB
    threads = sms * 2048  # every SM full
    grid = threads // 256
    s = cuda.default_stream()
    x = cupy.random.random(4096, dtype=cupy.float32)
    y = cupy.empty(threads, dtype=cupy.float32)
    out["fma_flop_s"] = (
        2 * 8 * _ITERS * threads / run(lambda: k["fma"][grid, 256, s](x, y), repeats)
    )
    out["mufu_s"] = 4 * _ITERS * threads / run(lambda: k["rcp"][grid, 256, s](x, y), repeats)
    out["conv64_s"] = 4 * _ITERS * threads / run(lambda: k["conv"][grid, 256, s](x, y), repeats)
    # scattered: each thread its own 32-byte sector (the quadrature kernel's flush: a thread
    # a row); coalesced: a warp's 32 atomics on 256 contiguous bytes (the table kernel's flush)
    for label, size, first, step in (
        ("atomics_dram", 1 << 27, 40503, 7919),
        ("atomics_l2", 1 << 21, 40503, 7919),
        ("atomics_coalesced", 1 << 27, 1, threads),
    ):
        acc = cupy.zeros(size, dtype=cupy.int64)
        launch = k["atomic"][grid, 256, s]
        t = run(lambda acc=acc, launch=launch, f=first, st=step: launch(acc, f, st), repeats)
        out[label + "_s"] = _PER * threads / t
        acc = None
    z = cupy.empty(threads, dtype=cupy.int64)
    t = run(lambda: k["shared_atomic"][grid, 256, s](z), repeats)
    out["atomics_shared_s"] = 8 * _PER * threads / t
    out["sms"] = sms
    return out


# --------------------------------------------------------------------------------------------
# Timing
# --------------------------------------------------------------------------------------------
def _runners(works: list[KernelWork], model, plan, scale, F1, interactions, finish_args):
    """A closure ``run(Xb, acc, out2, s)`` per kernel, through the library's launch helpers."""
    from distshap.kernels.cuda.device import xp
    from distshap.kernels.cuda.fallback import launch_fallback
    from distshap.kernels.cuda.launch import finish_kernel, launch_finish
    from distshap.kernels.cuda.quadrature import launch_quadrature
    from distshap.kernels.cuda.tables import launch_tables

    group_size, bias_offset = finish_args
    for w in works:
        if w.name == "tables":
            w.run = lambda Xb, acc, out2, s: launch_tables(model, plan, Xb, acc, scale, F1, s)
        elif w.name == "transpose":
            w.run = lambda Xb, acc, out2, s: xp().ascontiguousarray(Xb.T)
        elif w.name.startswith("quadrature"):
            one = dataclasses.replace(plan, quadrature=(plan.quadrature[w.info["launch"]],))
            w.run = lambda Xb, acc, out2, s, one=one: launch_quadrature(
                model, one, Xb, acc, scale, F1, s, interactions
            )
        elif w.name == "fallback":
            w.run = lambda Xb, acc, out2, s: launch_fallback(
                model, Xb, acc, scale, F1, s, interactions
            )
        elif w.name == "finish":
            w.run = lambda Xb, acc, out2, s: launch_finish(
                finish_kernel, acc, out2, 1.0 / scale, model.expected_value, group_size,
                bias_offset, s,
            )  # fmt: skip


def profile(packed, X, interactions: bool = False, repeats: int = 5, only: str | None = None,
            explainer=None, explainer_rows=None) -> dict:  # fmt: skip
    """Count and time every kernel of one call of ``packed`` on the rows ``X`` (kernel input).

    Returns a dict: ``kernels`` (one record per kernel: ``name``, ``launches``, ``seconds``
    per call, ``counts`` and ``rates``: per row and per second), ``call_s`` (the library's
    whole call, :func:`distshap.kernels.cuda.shap_values` or ``interaction_values``),
    ``explainer_s`` (``explainer``'s public call, additivity check included, on
    ``explainer_rows``, the user's rows of ``X``, when given), ``parts_match`` (the parts, run
    in the call's order, give the call's bits; ``None`` where the call takes the small-model
    route, ``route``), ``rows``, ``batch_rows`` and ``device``.
    ``only``: time that kernel alone (for a profiler; no call, no check).
    """
    from numba import cuda

    from distshap.kernels.cuda import interaction_values, shap_values
    from distshap.kernels.cuda.device import SIM, stream, xp
    from distshap.kernels.cuda.launch import default_batch_rows, device_rows, new_output
    from distshap.kernels.cuda.model import device_model, interaction_plan

    model = device_model(packed)
    plan = interaction_plan(packed, model) if interactions else model.shap
    Xd = device_rows(X, packed.num_features)
    n = int(Xd.shape[0])
    if n == 0:
        raise ValueError("X has no rows: profile at least one row")
    F1 = packed.num_features + 1
    out, out2, group_size, bias_offset = new_output(packed, n, interactions)
    width = out2.shape[1]
    b = min(n, default_batch_rows(width), 1 << 24)
    n_batches = -(-n // b)
    Xb = Xd[:b]
    scale = 2.0 ** (model.interaction_shift if interactions else model.shap_shift)
    works = work_counts(packed, model, plan, interactions, b)
    _runners(works, model, plan, scale, F1, interactions, (group_size, bias_offset))
    names = [w.name for w in works]
    if only is not None and only not in names:
        raise ValueError(f"--only {only!r}: this call runs {', '.join(names)}")
    acc = xp().zeros((b, width), dtype=np.int64)
    ob = out2[:b]
    s = stream()
    timer = _timer(SIM)

    def zero():
        acc.fill(0)

    seconds = {}
    for w in works:
        if only is not None and w.name != only:
            continue
        seconds[w.name] = timer(lambda w=w: w.run(Xb, acc, ob, s), repeats, zero)
    transpose = seconds.get("transpose", 0.0)
    for w in works:  # the quadrature launch helper transposes the rows first
        if w.kind in ("quadrature", "local-quadrature") and w.name in seconds:
            seconds[w.name] = max(seconds[w.name] - transpose, 0.0)
    result = {"rows": n, "batch_rows": b, "batches": n_batches, "paths": packed.num_paths,
              "bins": packed.num_bins, "features": packed.num_features,
              "groups": packed.num_groups, "kernels": []}  # fmt: skip
    if only is None:
        zero()
        for w in works:
            w.run(Xb, acc, ob, s)
        parts = ob.copy()  # on the device: the call reuses nothing of ours
        fn = interaction_values if interactions else shap_values
        ref = None

        def call():
            nonlocal ref
            ref = fn(packed, Xd)

        result["call_s"] = timer(call, max(1, repeats // 2))
        if _small_route(packed, interactions):  # the call is one fused launch, other bits
            result["route"] = "small"
            result["parts_match"] = None
        else:
            result["route"] = "regular"
            same = xp().array_equal(parts, ref.reshape(n, width)[:b])
            result["parts_match"] = bool(same)
        parts = ref = None
        if explainer is not None:
            method = explainer.shap_interaction_values if interactions else explainer.shap_values
            result["explainer_s"] = timer(lambda: method(explainer_rows), max(1, repeats // 2))
    for w in works:
        if w.name not in seconds:
            continue
        rec = {"name": w.name, "kind": w.kind, "launches": w.launches * n_batches, "info": w.info,
               "seconds": seconds[w.name] * n / b, "counts": w.counts}  # fmt: skip
        t = seconds[w.name] / b  # seconds per row
        rec["rates"] = {key: (v / t if t > 0 else None) for key, v in w.counts.items()}
        result["kernels"].append(rec)
    result["device"] = "simulator" if SIM else cuda.get_current_device().name
    if isinstance(result["device"], bytes):
        result["device"] = result["device"].decode()
    return result


def _floor(rec: dict, peaks: dict, rows: int) -> float | None:
    """The kernel's floor (METHOD): the largest of its counted work over each peak (FP32, MUFU,
    64-bit conversions, FP64 instructions; ``dram_min`` bytes over HBM), for ``rows`` rows."""
    c = rec["counts"]
    if not c:
        return None
    terms = [c.get(key, 0.0) / peaks[key] for key in PER_SM_CLOCK if peaks.get(key)]
    if peaks.get("hbm"):
        terms.append(c.get("dram_min", 0.0) / peaks["hbm"])
    return rows * max(terms) if terms else None


def _small_route(packed, interactions: bool) -> bool:
    """Whether the library's call takes the one-launch route for small models (if it has one)."""
    try:
        from distshap.kernels.cuda import small
    except ImportError:
        return False
    return bool(small.fits(packed, interactions))


def _requested(rates: dict) -> float:
    """Bytes/s the loads and atomics ask for (module docstring)."""
    keys = ("bytes_x", "bytes_lane", "bytes_table", "bytes_atomic", "bytes_out")
    return sum(rates.get(k) or 0.0 for k in keys)


def _fractions(rec: dict, peaks: dict, ceilings: dict | None) -> dict:
    r = rec["rates"]
    if not r:
        return {}
    f = {}

    def frac(value, peak):
        return None if value is None or not peak else value / peak

    for key in ("fp32", "flop", "mufu", "conv64", "fp64"):
        f[key] = frac(r.get(key), peaks.get(key))
    requested = _requested(r)
    f["bytes_hbm"] = frac(requested, peaks.get("hbm"))
    f["dram_min_hbm"] = frac(r.get("dram_min"), peaks.get("hbm"))
    if ceilings:
        f["bytes_copy"] = frac(requested, ceilings.get("copy_bytes_s"))
        f["dram_min_copy"] = frac(r.get("dram_min"), ceilings.get("copy_bytes_s"))
        f["flop_measured"] = frac(r.get("flop"), ceilings.get("fma_flop_s"))
        f["mufu_measured"] = frac(r.get("mufu"), ceilings.get("mufu_s"))
        f["conv64_measured"] = frac(r.get("conv64"), ceilings.get("conv64_s"))
        for label in ("atomics_l2", "atomics_dram", "atomics_coalesced"):
            f[label] = frac(r.get("global_atomics"), ceilings.get(label + "_s"))
        f["atomics_shared"] = frac(r.get("shared_atomics"), ceilings.get("atomics_shared_s"))
    return f


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:5.1f}%"


def format_table(shape: str, result: dict, peaks: dict) -> str:
    """The per-kernel table of one shape (rates per second, fractions of the peaks)."""
    whole = result.get("call_s")
    lines = [
        f"{shape} ({result.get('paths', 0):,} paths, {result.get('features', 0)} features, "
        f"{result.get('groups', 0)} groups): {result['rows']:,} rows ({result['batches']} "
        f"batch(es) of {result['batch_rows']:,}) on {result['device']} [{peaks['sku']}]",
        f"{'kernel':16} {'s/call':>9} {'share':>6} {'FP32 Gi/s':>10} {'%fp32':>6} "
        f"{'MUFU G/s':>9} {'%mufu':>6} {'cvt64 %':>7} {'atom G/s':>9} {'%atom':>6} {'%shatom':>7} "
        f"{'req GB/s':>9} {'%HBM':>6} {'minGB/s':>8} {'%HBM':>6} {'x floor':>7}",
    ]  # fmt: skip
    for rec in result["kernels"]:
        r, f = rec["rates"], rec.get("fractions", {})
        share = rec["seconds"] / whole if whole else None

        def g(key, r=r):
            v = r.get(key) if r else None
            return "-" if v is None else f"{v / 1e9:.1f}"

        req = _requested(r) if r else None
        # the global atomics' ceiling of the kernel's pattern: a thread a row (scattered) in
        # the quadrature and fallback kernels, a shared tile's flush (coalesced) in the tables
        tiled = rec["name"] == "tables" and rec["info"].get("tile_rows")
        atom = "atomics_coalesced" if tiled else "atomics_l2"
        floor = rec.get("floor_s")
        gap = f"{rec['seconds'] / floor:.1f}" if floor else "-"
        lines.append(
            f"{rec['name']:16} {rec['seconds']:9.5f} {_pct(share):>6} {g('fp32'):>10} "
            f"{_pct(f.get('fp32')):>6} {g('mufu'):>9} {_pct(f.get('mufu')):>6} "
            f"{_pct(f.get('conv64')):>7} {g('global_atomics'):>9} {_pct(f.get(atom)):>6} "
            f"{_pct(f.get('atomics_shared')):>7} "
            f"{'-' if req is None else f'{req / 1e9:.0f}':>9} {_pct(f.get('bytes_hbm')):>6} "
            f"{g('dram_min'):>8} {_pct(f.get('dram_min_hbm')):>6} {gap:>7}"
        )
    parts = sum(rec["seconds"] for rec in result["kernels"])
    tail = f"sum of kernels {parts:.5f} s"
    if whole:
        tail += f"; library call {whole:.5f} s ({parts / whole:.0%} in these kernels)"
        tail += f", {result['rows'] / whole:,.0f} rows/s"
    if result.get("explainer_s"):
        e = result["explainer_s"]
        tail += f"; explainer call {e:.5f} s ({result['rows'] / e:,.0f} rows/s)"
    if result.get("route") == "small":
        tail += "; the call took the one-launch small-model route: the kernels above are the"
        tail += " regular route's"
    elif "parts_match" in result:
        tail += (
            "; parts give the call's bits"
            if result["parts_match"]
            else ("; WARNING: the parts do not give the call's bits (the plan changed?)")
        )
    lines.append(tail)
    return "\n".join(lines)


def ncu_command(shape: str, rows: int, kernel: str, kind: str, interactions: bool) -> str:
    """The Nsight Compute command profiling one warm launch of ``kernel`` (``--only``)."""
    pattern = _NCU_PATTERN.get(kind)
    target = "--kernel-name-base mangled --kernel-name regex:" + pattern if pattern else ""
    extra = " --interactions" if interactions else ""
    return (
        f"ncu --clock-control none {target} --launch-skip 1 --launch-count 1 "
        "--section SpeedOfLight --section ComputeWorkloadAnalysis --section InstructionStats "
        "--section MemoryWorkloadAnalysis "
        f"python3 -m benchmarks.limits --shapes {shape} --rows {rows}{extra} --only {kernel} "
        "--repeats 1 --no-ceilings"
    )


def _device_info() -> tuple[str, int, float]:
    from numba import cuda

    from distshap.kernels.cuda.device import SIM

    if SIM:
        return "simulator", 132, 0.0
    dev = cuda.get_current_device()
    name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
    return name, int(dev.MULTIPROCESSOR_COUNT), float(dev.CLOCK_RATE) * 1e3


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="per-kernel work against the GPU's peak")
    parser.add_argument("--shapes", default="cal_housing-med,covtype-med")
    parser.add_argument("--rows", type=int, help="rows to explain (default 200000; 2000 with "
                        "--interactions)")  # fmt: skip
    parser.add_argument("--interactions", action="store_true")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--only", help="time only this kernel (for a profiler)")
    parser.add_argument("--ncu", action="store_true", help="print ncu commands, then run")
    parser.add_argument("--no-ceilings", action="store_true", help="skip the measured ceilings")
    parser.add_argument("--no-explainer", action="store_true", help="skip the public call")
    parser.add_argument("--json", help="append the JSON lines to this file too")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats must be >= 1, got {args.repeats}")
    from distshap.kernels.cuda.device import SIM

    rows = args.rows or (2000 if args.interactions else 200_000)
    name, sms, clock = _device_info()
    peaks = device_peaks(name, sms, clock)
    ceilings, failed = None, []
    if not SIM and not args.no_ceilings and args.only is None:
        try:
            ceilings = measure_ceilings()
        except Exception as exc:  # the kernels' numbers do not depend on the ceilings
            traceback.print_exc()
            failed.append(f"ceilings: {exc!r}")
    lines = [{"peaks": peaks, "device": name}]
    if ceilings:
        lines.append({"ceilings": ceilings, "device": name})
    tables = []
    for shape in [s for s in args.shapes.split(",") if s]:
        t0 = time.perf_counter()
        try:
            table, line = _run_shape(shape, rows, args, peaks, ceilings)
        except Exception as exc:  # go on with the other shapes; the exit status says so
            traceback.print_exc()
            failed.append(f"{shape}: {exc!r}")
            continue
        print(f"# {shape}: {time.perf_counter() - t0:.1f} s", flush=True)
        tables.append(table)
        lines.append(line)
    text = [json.dumps(line, default=float) for line in lines]
    for t in text:
        print(t)
    if args.json:
        with open(args.json, "a") as fh:
            fh.write("\n".join(text) + "\n")
    if ceilings:
        print(
            f"ceilings measured: copy {ceilings['copy_bytes_s'] / 1e12:.2f} TB/s, FP32 FMA "
            f"{ceilings['fma_flop_s'] / 1e12:.1f} TFLOP/s, "
            f"MUFU {ceilings['mufu_s'] / 1e12:.2f} T/s, "
            f"float32->int64 {ceilings['conv64_s'] / 1e12:.2f} T/s, "
            f"int64 atomics: scattered {ceilings['atomics_l2_s'] / 1e9:.1f} G/s (16 MiB), "
            f"{ceilings['atomics_dram_s'] / 1e9:.1f} G/s (1 GiB), coalesced "
            f"{ceilings['atomics_coalesced_s'] / 1e9:.1f} G/s, shared "
            f"{ceilings['atomics_shared_s'] / 1e9:.0f} G/s"
        )
    print(
        f"peaks ({peaks['source']}, {peaks['sku']}): FP32 {peaks['fp32'] / 1e12:.1f} T instr/s "
        f"({peaks['flop'] / 1e12:.0f} TFLOP/s), MUFU {peaks['mufu'] / 1e12:.2f} T/s, 64-bit "
        f"conversions {peaks['conv64'] / 1e12:.2f} T/s, HBM "
        + ("-" if peaks["hbm"] is None else f"{peaks['hbm'] / 1e12:.2f} TB/s")
    )
    for t in tables:
        print(t)
    if failed:
        print("FAILED: " + "; ".join(failed))
        raise SystemExit(1)


def _run_shape(shape: str, rows: int, args, peaks: dict, ceilings: dict | None):
    """Profile one shape: ``(table text, JSON record)``."""
    from benchmarks.shapes import make_data, train_model
    from distshap import TreeExplainer
    from distshap.inputs import model_matrix
    from distshap.kernels.cuda.device import SIM

    dname, size = shape.rsplit("-", 1)
    booster = train_model(dname, size)
    explainer = TreeExplainer(booster, backend="cpu" if SIM else "cuda")
    X, _ = make_data(dname, rows, seed=1)
    packed = explainer.packed
    Xk = packed.encoding.apply(model_matrix(X, packed, False))  # as the library's dispatch
    if args.ncu:
        from distshap.kernels.cuda.model import device_model, interaction_plan

        model = device_model(packed)
        plan = interaction_plan(packed, model) if args.interactions else model.shap
        have = shutil.which("ncu")
        print(f"# ncu {'at ' + have if have else 'NOT on the PATH here'}; one launch each:")
        for w in work_counts(packed, model, plan, args.interactions, rows):
            if w.kind != "transpose":
                print(ncu_command(shape, rows, w.name, w.kind, args.interactions))
    explainer_arg = rows_arg = None
    if args.only is None and not args.no_explainer and not SIM:
        import cupy

        explainer_arg, rows_arg = explainer, cupy.asarray(X)
    result = profile(packed, Xk, args.interactions, args.repeats, args.only, explainer_arg,
                     rows_arg)  # fmt: skip
    z = np.asarray(packed.zero_fraction)
    feature_lanes = np.asarray(packed.feature) >= 0
    result["lanes_z_0_or_1"] = int(((z[feature_lanes] == 0) | (z[feature_lanes] == 1)).sum())
    for rec in result["kernels"]:
        rec["fractions"] = _fractions(rec, peaks, ceilings)
        rec["floor_s"] = _floor(rec, peaks, result["rows"])
    table = format_table(shape, result, peaks)
    print(table, flush=True)
    return table, {"shape": shape, "interactions": args.interactions, **result}


if __name__ == "__main__":
    main()
