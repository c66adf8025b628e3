"""CUDA kernels (Numba): SHAP and interaction values, deterministic fixed-point output.

Imported lazily by :func:`distshap.kernels.get_backend` (``"cuda"``); importing :mod:`distshap`
never touches CUDA. Same functions as :mod:`distshap.kernels.cpu`:
``shap_values(packed, X)`` -> CuPy float32 ``(n, G, F+1)`` and ``interaction_values(packed, X)``
-> CuPy float32 ``(n, G, F+1, F+1)``; ``X`` is a NumPy or CuPy 2-D array (copied to a
C-contiguous float32 device array when it is not one).

Kernel design
-------------
Each output kind (SHAP, interactions) has a :class:`Plan`: which paths are looked up in a pattern
table and which are computed. What runs by default (measured side by side on H100 and H200,
``benchmarks/dp_kernels.py`` and ``benchmarks/RESULTS.md``):

* **SHAP values: the quadrature kernels, every path** (:func:`_make_quadrature_kernel`). A path's
  SHAP value of element ``i`` is ``v (o_i - z_i) integral_0^1 prod_{j != i} (z_j + t (o_j -
  z_j)) dt`` (the Shapley weights ``s! (k-1-s)! / k!`` are Beta integrals), a polynomial of
  degree ``k - 1``: ``ceil(k / 2)`` Gauss-Legendre nodes give it exactly. One thread per row,
  every path warp-uniform (a block runs a chunk of :data:`QUADRATURE_CHUNK_PATHS` paths of one
  output group on its rows): the thread forms the full product at each node while testing the
  one-fractions, then divides each element's factor out again. No shuffles, no ballots; the
  per-row sums stay in shared memory (:func:`quadrature_warps`) until the chunk is done. All
  terms are positive, so float32 keeps its relative precision at any path length. Against the
  previous kernels (pattern tables + the warp DP) it is 1.2x faster on cal_housing-med, 1.5x
  on fashion_mnist-med and 4-5x on the deep models: the pattern tables no longer pay on the
  GPU for SHAP values (they stay on the host, for the CPU kernel).
* **Interaction values: pattern tables for short paths, the interaction quadrature kernel for
  the others** (:func:`_make_interaction_quadrature_kernel`: one thread per path, one block per
  row and chunk, every pair of a path once, sums of the row in shared memory). Interaction
  tables win by a few per cent where they fit (``2**k * k * k`` values per path).
* The **warp DP** (EXTEND with warp shuffles, paper Alg. 2; each lane its own UNWOUND_SUM,
  Alg. 3) and the **SHAP table kernels** are the previous kernels, kept for comparison:
  :func:`warp_dp_plan` runs a model through them (benchmarks and tests).

The warp kernels (table kernels and warp DP) run over the bins holding at least one path of
their strategy; lanes of the other strategy's paths idle in them.

* **Warps.** One warp runs one bin of the :class:`~distshap.packed.PackedModel`; lane ``l`` holds
  lane ``l`` of the bin (a path's lanes are contiguous, its first lane is the bias lane). Each
  warp loops over a range of rows (``grid = (bins / warps per block, row ranges)``). Loops
  around shuffles are warp-uniform (trip counts are per-bin constants), so full-mask shuffles
  and ballots are executed by all 32 lanes; lanes of shorter paths and unused lanes idle.
* **One-fractions.** Per row, each lane tests its element (``lower <= x < upper``; NaN follows
  when ``missing``; categorical: the bit ``int(x)`` of the category set for ``0 <= x < nbits``,
  ``cat_other`` otherwise); the bias lane always follows. One ``ballot_sync`` gathers the 32
  results, so every lane can read any element's one-fraction of its own path as a bit.
* **Table kernels** (paths with a table): the path's ``k`` ballot bits form the pattern; for SHAP
  lane ``i`` loads ``tables[offset + pattern * k + i - 1]``, for interactions the ``k`` values
  ``[(pattern * k + c) * k + i - 1]`` (one per conditioned element ``c``; ``c = i`` is the
  diagonal) and adds them at ``[feature_c, feature_i]``. The kernel is bound by its atomics
  (an H100 probe without them ran 3.8x faster, ``benchmarks/probe_table_kernel.py``), so a
  block of :data:`TABLE_WARPS_PER_BLOCK` warps (bins) shares a tile of rows: contributions go
  to an int64 tile in shared memory (:data:`SHARED_TILE_VALUES` values: up to
  :data:`TILE_ROWS` rows of the output width) and each tile is flushed with one global atomic
  per non-zero output value. Outputs too wide for :data:`MIN_TILE_ROWS` rows per tile (e.g.
  fashion_mnist's 10 x 785 SHAP values) add to global memory directly (:func:`shared_tile_rows`).
* **SHAP tables** are built on the host with the packed model (:mod:`distshap.tables`) and
  reach the GPU only in :func:`warp_dp_plan`.
  **Interaction tables** (``2**k * k * k`` values per path, 9 KB at ``k = 6``) are filled on the
  device on the first interaction call, one thread per (path, pattern) running the float64 DP
  of :func:`_seq_extend` / :func:`_seq_unwound` for every conditioned element; they are kept
  with the device model. Paths that have a SHAP table and at most
  :data:`INTERACTION_TABLE_MAX_FEATURES` features get one, shortest first, within
  :data:`INTERACTION_TABLE_BUDGET_BYTES` per model and device (a fixed budget, not a share of
  free memory, so the choice and thus the bits do not depend on the device).
* **Warp DP kernels**: EXTEND with warp shuffles (paper Alg. 2; each lane needs the weight of
  its left neighbour and the zero fraction of the element being added), then every lane
  computes its own UNWOUND_SUM (Alg. 3) with one shuffle per step and adds
  ``sum * (o - z) * v``. The DP runs
  in float32 for bins whose DP paths have at most :data:`DP32_MAX_FEATURES` features and in
  float64 above (the UNWOUND_SUM recursion loses accuracy fast in float32: relative error 6e-5
  at 20 features, 5e-3 at 28); reciprocals ``1/i`` come from a constant table and ``1/z`` is
  hoisted out of the row loop.
* **Interactions by DP** (paper §3.5): for every element ``c`` of a path the DP is run on the path
  without ``c`` (``c`` is "swapped to the end": lanes after it shift one position left, it is
  never added); lane ``i`` then adds ``phi_ic = sum_i * (o_i - z_i) * v * (o_c - z_c) / 2`` at
  ``[feature_c, feature_i]``, and the diagonal gets ``phi_i - sum_c phi_ic`` with ``phi_i`` from
  an unconditioned DP (``c = 0``); the ``[F, F]`` entry is the expected value, the rest of the
  bias row and column is zero (XGBoost's convention). Interaction tables hold exactly these
  values per pattern.
* **Oversize paths** (more than 31 features: a bin of more than 32 lanes) run in a simple
  fallback kernel, one thread per (path, row), float64 DP in local memory, up to
  :data:`MAX_FALLBACK_FEATURES` features (a longer path raises :class:`ValueError` naming the
  CPU backend as the fix).

Determinism
-----------
Results are bit-identical run to run and independent of batching: no float atomics. Every
contribution ``c`` is rounded to a 64-bit fixed-point integer (``round(c * 2**s)`` in the DP
kernels, ``trunc(c * 2**s)`` of the float32 value in the table and quadrature kernels: all are
fixed functions of ``c``, which each kernel computes in a fixed order) and added with an
integer ``atomic.add`` (integer addition is associative, so the order of the atomics does not
matter); a final elementwise pass converts ``acc * 2**-s`` to
float32 (in float64) and adds the expected value in the bias column. The shift ``s`` is chosen per
model from a bound ``B`` on every contribution and every output element: a path's SHAP contribution
is at most ``|v|`` (Shapley weights sum to 1 and fractions are <= 1), an interaction entry
(diagonal included) at most ``k |v|``, so ``B = max_g sum_p |v_p|`` (SHAP) or ``max_g sum_p k_p
|v_p|`` (interactions) and ``s = 62 - ceil(log2(B + 1)) - 1`` (clamped to ``[-60, 60]``): no sum
can reach ``2**61`` and the resolution ``2**-s`` is far below float32 precision.

Batching
--------
Rows are processed in batches of ``batch_rows`` so that the int64 accumulator stays bounded:
``batch_rows = max(1, budget // (8 * G * W))`` with ``W = F + 1`` (SHAP) or ``(F + 1) ** 2``
(interactions) and ``budget = min(1 GiB, free device memory / 4)``. (fashion_mnist, 785
columns and 10 classes: 6.2M interaction values = 49 MB per row, 21 rows per batch.) The
float32 output of all rows is allocated at once: chunking larger inputs is the caller's job.

The packed model is copied to the device once per ``(digest, device)`` and cached
(:func:`device_model`, with its interaction tables once filled); :func:`clear_cache` drops the
cache. Device memory per model: the lane arrays, the quadrature chunks (a path index per path)
and, once interactions are asked for, the interaction tables (<= 1 GiB). The quadrature kernels
are compiled per node count on first use (about a second each).
"""

from __future__ import annotations

import math
import os
import threading
import warnings
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

import numpy as np
from numba import cuda, types

from distshap.packed import PackedModel
from distshap.tables import choose_tables

__all__ = [
    "INTERACTION_TABLE_BUDGET_BYTES",
    "INTERACTION_TABLE_MAX_FEATURES",
    "MAX_FALLBACK_FEATURES",
    "QUADRATURE_CHUNK_PATHS",
    "QUADRATURE_NODES",
    "QUADRATURE_SHARED_BYTES",
    "TABLE_WARPS_PER_BLOCK",
    "WARPS_PER_BLOCK",
    "DeviceModel",
    "Plan",
    "clear_cache",
    "compile_check",
    "default_batch_rows",
    "device_model",
    "fixed_point_shift",
    "gauss_legendre",
    "interaction_plan",
    "interaction_values",
    "quadrature_warps",
    "shap_values",
    "shared_tile_rows",
    "strategy_stats",
    "warm_up",
    "warp_dp_plan",
]

#: Warps (bins) per thread block of the warp kernels.
WARPS_PER_BLOCK = 4
#: Longest path (features) the oversize fallback kernel handles.
MAX_FALLBACK_FEATURES = 127
#: Rows per warp of the warp kernels at most (fewer for small inputs, to fill the GPU).
ROWS_PER_WARP = 1024
#: Output accumulator budget per batch at most (bytes); see the module docstring.
BATCH_BUDGET_BYTES = 1 << 30
#: Warps (bins) per thread block of the pattern-table kernels (they share a row tile).
TABLE_WARPS_PER_BLOCK = 8
#: int64 values of the table kernels' shared-memory accumulator (32 KiB per block).
SHARED_TILE_VALUES = 4096
#: Rows of a shared-memory tile at most, and at least (narrower tiles: global atomics).
TILE_ROWS = 128
MIN_TILE_ROWS = 8
#: Interaction tables (``2**k * k * k`` float32 per path, filled on the device): paths of at
#: most this many features, shortest first, within this many bytes per model and device.
INTERACTION_TABLE_MAX_FEATURES = 10
INTERACTION_TABLE_BUDGET_BYTES = 1 << 30

_FULL = 0xFFFFFFFF
_MAXF1 = MAX_FALLBACK_FEATURES + 1
_MAXF2 = MAX_FALLBACK_FEATURES + 2
# Frozen at import: the kernels are compiled with these sizes, so the host side uses them too.
_ITAB_MAXF1 = INTERACTION_TABLE_MAX_FEATURES + 1
_ITAB_MAXF2 = INTERACTION_TABLE_MAX_FEATURES + 2
_TILE_VALUES = SHARED_TILE_VALUES
_TABLE_WARPS = TABLE_WARPS_PER_BLOCK
_SIM = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")
#: Longest path (features) of a bin whose warp DP runs in float32; longer ones use float64
#: (the UNWOUND_SUM recursion loses accuracy quickly with the path length in float32).
DP32_MAX_FEATURES = 10
# 1/i for i = 0..64 (entry 0 is unused and 0)
_RECIP32 = np.array([0.0] + [1.0 / i for i in range(1, 65)], dtype=np.float32)
_RECIP64 = np.array([0.0] + [1.0 / i for i in range(1, 65)], dtype=np.float64)
#: Gauss-Legendre node counts of the SHAP quadrature kernels (one compiled kernel each). A path of
#: ``k`` features needs ``ceil(k / 2)`` nodes and runs in the smallest kernel with enough.
QUADRATURE_NODES = (2, 4, 6, 8, 12, 16)
#: Paths per chunk of the quadrature kernels (one thread block runs one chunk on its rows).
QUADRATURE_CHUNK_PATHS = 256
#: Shared memory of a quadrature kernel's block at most (its per-row accumulators).
QUADRATURE_SHARED_BYTES = 48 * 1024

# --------------------------------------------------------------------------------------------
# Warp primitives. On a GPU these are Numba's intrinsics; the CUDA simulator has none, so there
# they are emulated through block shared memory (every lane of a warp calls them in lockstep).
# --------------------------------------------------------------------------------------------

if _SIM:  # pragma: no cover - only under NUMBA_ENABLE_CUDASIM=1

    def _shfl_f(mask, value, src):
        buf = cuda.shared.array(1024, np.float64)
        t = cuda.threadIdx.x
        buf[t] = value
        cuda.syncthreads()
        r = buf[(t - (t & 31)) + (src & 31)]
        cuda.syncthreads()
        return type(value)(r)

    def _shfl_i32(mask, value, src):
        buf = cuda.shared.array(1024, np.int64)
        t = cuda.threadIdx.x
        buf[t] = value
        cuda.syncthreads()
        r = buf[(t - (t & 31)) + (src & 31)]
        cuda.syncthreads()
        return np.int32(r)

    def _ballot(mask, predicate):
        buf = cuda.shared.array(1024, np.int64)
        t = cuda.threadIdx.x
        buf[t] = 1 if predicate else 0
        cuda.syncthreads()
        w = t - (t & 31)
        bits = 0
        for i in range(32):
            if buf[w + i] != 0:
                bits |= 1 << i
        cuda.syncthreads()
        return np.uint32(bits)

    def _fdiv(a, b):
        return a / b

else:
    from numba.cuda import libdevice

    _shfl_f = cuda.shfl_sync
    _shfl_i32 = cuda.shfl_sync
    _ballot = cuda.ballot_sync
    _fdiv = libdevice.fast_fdividef  # float32 a / b to 2 ulp (every divisor here is > 0)


# --------------------------------------------------------------------------------------------
# Device functions
# --------------------------------------------------------------------------------------------


@cuda.jit(device=True)
def _follows(x, lower, upper, flags, cat_nbits, cat_offset, cat_words):
    """Whether value ``x`` follows a feature element (bit 0 of flags: missing, 1: cat_other)."""
    if math.isnan(x):
        return (flags & 1) != 0
    if cat_offset < 0:
        return lower <= x and (x < upper or upper == math.inf)  # +inf follows open ends
    if x < 0.0 or x >= cat_nbits:
        return (flags & 2) != 0
    c = np.int64(x)
    return ((cat_words[cat_offset + (c >> 5)] >> np.uint32(c & 31)) & np.uint32(1)) != 0


@cuda.jit(device=True)
def _fixed(value, scale):
    """``round(value * scale)`` as int64 (the fixed-point representation), float64 inputs."""
    return np.int64(math.floor(value * scale + 0.5))


@cuda.jit(device=True)
def _warp_unwound(pos, start, kk, c, z, zinv, o, bal, nsteps, recip, one):
    """Warp-cooperative EXTEND of each lane's path without element ``c``, then UNWOUND_SUM.

    Every lane of the warp must call this with the same ``c`` and ``nsteps`` (the largest path
    length taking part). ``pos`` is the lane's position in its path (0 = bias lane), ``start``
    the warp lane of the path's bias lane, ``kk`` the path's number of features (0: the lane
    takes no part), ``c`` the conditioned element (0: none; ``c > kk``: the path takes no
    part). ``o``/``z``/``zinv`` are the lane's one fraction (0/1), zero fraction and ``1/z``
    (0 where ``z == 0``); ``bal`` the ballot of all one fractions. The arithmetic is done in
    the type of ``one`` (float32 or float64; ``z``, ``zinv`` and the reciprocal table ``recip``
    must have that type). Returns the lane's unwound sum (meaningless for the bias lane and
    for lane ``c``).
    """
    shift = 1 if c > 0 else 0
    if c > kk:
        length = -1
    else:
        length = kk - shift
    p = pos
    if c > 0:
        if pos == c:
            p = kk  # conditioned element: swapped to the end, never added
        elif pos > c:
            p = pos - 1
    q = p - 1
    src_left = start + q + (1 if (c > 0 and q >= c) else 0)
    zero = one - one
    w = one if p == 0 else zero
    pf = one * np.float32(p)  # int -> float of the DP's type (exact)
    for e in range(1, nsteps + 1):
        le = start + e + (1 if (c > 0 and e >= c) else 0)
        ze = _shfl_f(_FULL, z, le & 31)
        wl = _shfl_f(_FULL, w, src_left & 31)
        if e <= length:
            re = recip[e + 1]
            nw = w * ze * (one * np.float32(e) - pf) * re
            if (bal >> le) & 1:
                nw += wl * pf * re
            w = nw
    top = start + length + (1 if (c > 0 and length >= c) else 0)
    n = _shfl_f(_FULL, w, top & 31)
    total = zero
    lp1 = one * np.float32(length + 1)
    rl1 = recip[length + 1]
    for j in range(nsteps - 1, -1, -1):
        lj = start + j + (1 if (c > 0 and j >= c) else 0)
        wj = _shfl_f(_FULL, w, lj & 31)
        if j < length:
            if o != 0:
                tmp = n * lp1 * recip[j + 1]
                total += tmp
                n = wj - tmp * z * (one * np.float32(length - j)) * rl1
            else:
                total += wj * lp1 * zinv * recip[length - j]
    return total


@cuda.jit(device=True)
def _seq_extend(w, length, z, o):
    """Sequential EXTEND (float64, local memory) of a path of ``length`` elements."""
    w[length] = 1.0 if length == 0 else 0.0
    scale = 1.0 / (length + 1)
    for i in range(length - 1, -1, -1):
        w[i + 1] += o * w[i] * (i + 1) * scale
        w[i] = z * w[i] * (length - i) * scale


@cuda.jit(device=True)
def _seq_unwound(w, depth, z, o):
    """Sequential UNWOUND_SUM (float64) of an element with fractions ``z``, ``o``."""
    total = 0.0
    if o != 0.0:
        n = w[depth]
        for j in range(depth - 1, -1, -1):
            tmp = n * (depth + 1) / ((j + 1) * o)
            total += tmp
            n = w[j] - tmp * z * (depth - j) / (depth + 1)
    elif z != 0.0:
        for j in range(depth - 1, -1, -1):
            total += w[j] * (depth + 1) / (z * (depth - j))
    return total


@cuda.jit(device=True)
def _seq_extend_without(w, k, c, zero, one):
    """EXTEND over elements ``1..k`` of a path except ``c`` (0: none); returns the depth."""
    _seq_extend(w, 0, 1.0, 1.0)
    depth = 0
    for e in range(1, k + 1):
        if e != c:
            depth += 1
            _seq_extend(w, depth, zero[e], one[e])
    return depth


# --------------------------------------------------------------------------------------------
# Kernels
#
# Lane arrays (built once per model by _lane_arrays):
#   lane_f   float32 (n_lanes, 4): lower, upper, zero_fraction, path value
#   lane_i   int32   (n_lanes, 8): feature, position in path, warp lane of the path's bias
#                                  lane, path features k, group, flags (1 missing,
#                                  2 cat_other), cat_nbits, unused
#   lane_cat int64   (n_lanes,):   cat_offset
#   lane_d   float64 (n_lanes, 2): zero_fraction, path value
# and per output kind (SHAP, interactions) a _Plan: the table offset of each lane's path
# (lane_table, -1: DP), the tables, and for each strategy the bins holding at least one path of
# it with the largest k of those paths per bin.
# --------------------------------------------------------------------------------------------


@cuda.jit(device=True)
def _lane_setup(lane_i, bin_offsets, b, lane):
    """Row-independent constants of this lane of bin ``b`` (unused lanes: no path)."""
    base = bin_offsets[b]
    valid = lane < bin_offsets[b + 1] - base
    li = base + lane if valid else base
    feat = lane_i[li, 0] if valid else -1
    pos = lane_i[li, 1] if valid else 0
    start = lane_i[li, 2] if valid else lane
    k = lane_i[li, 3] if valid else 0
    return li, valid, feat, pos, start, k


@cuda.jit(device=True)
def _row_range(rows_per_block, n_rows):
    """Rows ``[r0, r1)`` of this block's row range (``blockIdx.y``)."""
    r0 = cuda.blockIdx.y * rows_per_block
    r1 = r0 + rows_per_block
    if r1 > n_rows:
        r1 = n_rows
    return r0, r1


@cuda.jit(device=True)
def _dp_lane(lane_f, lane_i, lane_cat, lane_d, lane_table, bin_offsets, b, lane):
    """Row-independent constants of this lane of bin ``b`` for the DP kernels.

    Lanes of table paths (``lane_table >= 0``) and unused lanes take no part (``dp`` false,
    ``kk = 0``); ``is_feat``: a DP path's feature element (not its bias lane).
    """
    li, valid, feat, pos, start, k = _lane_setup(lane_i, bin_offsets, b, lane)
    dp = valid and lane_table[li] < 0
    z32 = lane_f[li, 2]
    z64 = lane_d[li, 0]
    zinv32 = np.float32(1.0) / z32 if z32 > 0 else np.float32(0.0)
    zinv64 = 1.0 / z64 if z64 > 0 else 0.0
    return (li, dp, k if dp else 0, dp and pos >= 1, feat, pos, start, lane_i[li, 4],
            lane_i[li, 5], lane_i[li, 6], lane_f[li, 0], lane_f[li, 1], lane_cat[li], z32,
            zinv32, z64, zinv64, lane_d[li, 1])  # fmt: skip


def _make_table_kernel(interactions: bool, shared: bool):
    """The pattern-table kernel for SHAP or interaction values, accumulating in shared memory
    (``shared``: one global atomic per output value and block per row tile) or directly in
    global memory. ``interactions`` and ``shared`` are compile-time constants."""

    @cuda.jit
    def kernel(lane_f, lane_i, lane_cat, lane_table, cat_words, tables, bin_offsets, bin_maxk,
               bins, X, acc, scale, rows_per_block, tile_rows, n_cols):  # fmt: skip
        tid = cuda.threadIdx.x
        lane = tid & 31
        bi = cuda.blockIdx.x * _TABLE_WARPS + (tid >> 5)
        live = bi < bins.shape[0]
        if not shared and not live:
            return  # warp-uniform; with a shared tile every warp takes part in the barriers
        b = bins[bi] if live else bins[0]
        li, valid, feat, pos, start, k = _lane_setup(lane_i, bin_offsets, b, lane)
        valid = valid and live
        group = lane_i[li, 4]
        flags = lane_i[li, 5]
        nbits = lane_i[li, 6]
        lower = lane_f[li, 0]
        upper = lane_f[li, 1]
        cat_offset = lane_cat[li]
        toff = lane_table[li]
        active = valid and pos >= 1 and toff >= 0
        maxk = bin_maxk[b] if live else 0
        mask_k = (np.int64(1) << k) - 1
        scale32 = np.float32(scale)
        width = acc.shape[1]
        col = group * n_cols + feat
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
                    o = _follows(X[r, feat], lower, upper, flags, nbits, cat_offset, cat_words)
                bal = np.int64(_ballot(_FULL, o))
                pattern = (bal >> (start + 1)) & mask_k
                if interactions:
                    entry = toff + pattern * k * k + pos - 1
                    first = li - pos + 1  # lane of the path's first feature element
                    for c in range(maxk):  # the conditioned element
                        if active and c < k:
                            fc = lane_i[first + c, 0]
                            iv = np.int64(tables[entry + c * k] * scale32)
                            if iv != 0:
                                e = (group * n_cols + fc) * n_cols + feat  # c == i: diagonal
                                if shared:
                                    cuda.atomic.add(tile, (r - t0) * width + e, iv)
                                else:
                                    cuda.atomic.add(acc, (r, e), iv)
                elif active:
                    iv = np.int64(tables[toff + pattern * k + pos - 1] * scale32)
                    if iv != 0:
                        if shared:
                            cuda.atomic.add(tile, (r - t0) * width + col, iv)
                        else:
                            cuda.atomic.add(acc, (r, col), iv)
            if shared:
                cuda.syncthreads()
                for i in range(tid, (t1 - t0) * width, cuda.blockDim.x):
                    v = tile[i]
                    if v != 0:
                        q = i // width
                        cuda.atomic.add(acc, (t0 + q, i - q * width), v)
                cuda.syncthreads()

    return kernel


_shap_table_kernel = _make_table_kernel(interactions=False, shared=False)
_shap_table_shared_kernel = _make_table_kernel(interactions=False, shared=True)
_interaction_table_kernel = _make_table_kernel(interactions=True, shared=False)
_interaction_table_shared_kernel = _make_table_kernel(interactions=True, shared=True)


@cuda.jit
def _shap_dp_kernel(lane_f, lane_i, lane_cat, lane_d, lane_table, cat_words, bin_offsets,
                    bin_maxk, bins, X, acc, scale, rows_per_warp, n_cols):  # fmt: skip
    lane = cuda.threadIdx.x & 31
    bi = cuda.blockIdx.x * WARPS_PER_BLOCK + (cuda.threadIdx.x >> 5)
    if bi >= bins.shape[0]:
        return  # warp-uniform
    b = bins[bi]
    (li, dp, kk, is_feat, feat, pos, start, group, flags, nbits, lower, upper, cat_offset, z32,
     zinv32, z64, zinv64, v64) = _dp_lane(lane_f, lane_i, lane_cat, lane_d, lane_table,
                                          bin_offsets, b, lane)  # fmt: skip
    col = group * n_cols + feat
    maxk = bin_maxk[b]
    r0, r1 = _row_range(rows_per_warp, X.shape[0])
    for r in range(r0, r1):
        o = 0
        if is_feat:
            if _follows(X[r, feat], lower, upper, flags, nbits, cat_offset, cat_words):
                o = 1
        elif dp:
            o = 1
        bal = np.int64(_ballot(_FULL, o != 0))
        if maxk <= DP32_MAX_FEATURES:  # bin-uniform
            total = np.float64(_warp_unwound(pos, start, kk, 0, z32, zinv32, o, bal, maxk,
                                             _RECIP32, np.float32(1.0)))  # fmt: skip
        else:
            total = _warp_unwound(pos, start, kk, 0, z64, zinv64, o, bal, maxk, _RECIP64, 1.0)
        if is_feat:
            ival = _fixed(total * (o - z64) * v64, scale)
            if ival != 0:
                cuda.atomic.add(acc, (r, col), ival)


@cuda.jit
def _interaction_dp_kernel(lane_f, lane_i, lane_cat, lane_d, lane_table, cat_words, bin_offsets,
                           bin_maxk, bins, X, acc, scale, rows_per_warp, n_cols):  # fmt: skip
    lane = cuda.threadIdx.x & 31
    bi = cuda.blockIdx.x * WARPS_PER_BLOCK + (cuda.threadIdx.x >> 5)
    if bi >= bins.shape[0]:
        return  # warp-uniform
    b = bins[bi]
    (li, dp, kk, is_feat, feat, pos, start, group, flags, nbits, lower, upper, cat_offset, z32,
     zinv32, z64, zinv64, v64) = _dp_lane(lane_f, lane_i, lane_cat, lane_d, lane_table,
                                          bin_offsets, b, lane)  # fmt: skip
    row_base = (group * n_cols + feat) * n_cols  # [group, feat, :]
    maxk = bin_maxk[b]
    r0, r1 = _row_range(rows_per_warp, X.shape[0])
    for r in range(r0, r1):
        o = 0
        if is_feat:
            if _follows(X[r, feat], lower, upper, flags, nbits, cat_offset, cat_words):
                o = 1
        elif dp:
            o = 1
        bal = np.int64(_ballot(_FULL, o != 0))
        diag = 0.0
        for c in range(0, maxk + 1):
            if maxk <= DP32_MAX_FEATURES:  # bin-uniform
                total = np.float64(_warp_unwound(pos, start, kk, c, z32, zinv32, o, bal, maxk,
                                                 _RECIP32, np.float32(1.0)))  # fmt: skip
            else:
                total = _warp_unwound(pos, start, kk, c, z64, zinv64, o, bal, maxk, _RECIP64,
                                      1.0)  # fmt: skip
            sc = (start + c) & 31
            zc = _shfl_f(_FULL, z64, sc)
            fc = _shfl_i32(_FULL, feat, sc)
            if is_feat and c <= kk and pos != c:
                phi = total * (o - z64) * v64
                if c == 0:
                    diag += phi
                else:
                    half = phi * (((bal >> (start + c)) & 1) - zc) * 0.5
                    diag -= half
                    ival = _fixed(half, scale)
                    if ival != 0:
                        cuda.atomic.add(acc, (r, (group * n_cols + fc) * n_cols + feat), ival)
        if is_feat:
            ival = _fixed(diag, scale)
            if ival != 0:
                cuda.atomic.add(acc, (r, row_base + feat), ival)


def gauss_legendre(n_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights of the ``n_nodes``-point Gauss-Legendre rule on ``[0, 1]`` (float64).

    Exact for polynomials of degree up to ``2 * n_nodes - 1``.
    """
    x, w = np.polynomial.legendre.leggauss(int(n_nodes))
    return (x + 1.0) / 2.0, w / 2.0


def _make_quadrature_kernel(n_nodes: int, shared: bool):
    """The SHAP kernel of the paths without a table: one thread per row, ``n_nodes`` nodes.

    A path's SHAP value of element ``i`` is ``v (o_i - z_i) * integral_0^1 prod_{j != i}
    (z_j + t (o_j - z_j)) dt`` (the Shapley weights ``s! (k-1-s)! / k!`` are Beta integrals),
    a polynomial of degree ``k - 1`` in ``t``: ``ceil(k / 2)`` Gauss-Legendre nodes give it
    exactly. Per path and row the thread evaluates the ``k`` one-fractions while multiplying
    the full product at every node, then divides element ``i``'s factor out again: all terms
    are positive, so float32 keeps its relative precision at any path length (no cancellation,
    unlike the DP's UNWOUND_SUM). A block runs one chunk of paths (one output group) on
    ``blockDim`` rows; every thread adds to its own row's int64 accumulators in shared memory
    (``shared``; flushed with one global atomic per non-zero value when the chunk is done) or
    directly to global memory. No shuffles and no barriers: every path is warp-uniform.
    """
    nodes, weights = (a.astype(np.float32) for a in gauss_legendre(n_nodes))

    @cuda.jit
    def kernel(lane_f, lane_i, lane_cat, cat_words, path_offsets, chunk_paths, chunk_offsets,
               chunk_group, XT, acc, scale, n_cols, row0):  # fmt: skip
        tid = cuda.threadIdx.x
        r = row0 + cuda.blockIdx.y * cuda.blockDim.x + tid
        if r >= XT.shape[1]:
            return  # nothing below synchronises threads
        ch = cuda.blockIdx.x  # chunks vary fastest: blocks running together share rows (L2)
        base = chunk_group[ch] * n_cols
        stride = cuda.blockDim.x
        scale32 = np.float32(scale)
        one = np.float32(1.0)
        if shared:
            tile = cuda.shared.array(0, types.int64)  # [feature * stride + thread]
            for f in range(n_cols - 1):
                tile[f * stride + tid] = 0
        prod = cuda.local.array(n_nodes, np.float32)
        for j in range(chunk_offsets[ch], chunk_offsets[ch + 1]):
            p = chunk_paths[j]
            s0 = path_offsets[p] + 1  # first feature element (after the bias lane)
            s1 = path_offsets[p + 1]
            value = lane_f[s0 - 1, 3]
            for m in range(n_nodes):
                prod[m] = value * weights[m]
            bits = np.uint32(0)
            for li in range(s0, s1):
                z = lane_f[li, 2]
                d = -z
                if _follows(XT[lane_i[li, 0], r], lane_f[li, 0], lane_f[li, 1], lane_i[li, 5],
                            lane_i[li, 6], lane_cat[li], cat_words):  # fmt: skip
                    d = one - z
                    bits |= np.uint32(1) << np.uint32(li - s0)
                for m in range(n_nodes):
                    prod[m] *= z + nodes[m] * d
            for li in range(s0, s1):
                z = lane_f[li, 2]
                d = -z
                if (bits >> np.uint32(li - s0)) & np.uint32(1):
                    d = one - z
                if d != 0:  # else the element's factor may be 0 and its value is 0
                    total = np.float32(0.0)
                    for m in range(n_nodes):
                        total += _fdiv(prod[m], z + nodes[m] * d)
                    iv = np.int64(total * d * scale32)
                    if iv != 0:
                        col = lane_i[li, 0]
                        if shared:
                            tile[col * stride + tid] += iv
                        else:
                            cuda.atomic.add(acc, (r, base + col), iv)
        if shared:
            for f in range(n_cols - 1):
                iv = tile[f * stride + tid]
                if iv != 0:
                    cuda.atomic.add(acc, (r, base + f), iv)

    return kernel


def _make_interaction_quadrature_kernel(n_nodes: int, shared: bool):
    """The interaction kernel of the paths without a table: one thread per path, one block per
    (chunk of paths, row), ``n_nodes`` Gauss-Legendre nodes.

    With ``r_i(t) = (o_i - z_i) / (z_i + t (o_i - z_i))`` and ``P(t) = v prod_j (z_j + t (o_j -
    z_j))``, half the interaction of elements ``i != c`` is ``1/2 integral_0^1 P r_i r_c dt``
    (degree ``k - 2``: the SHAP kernel's nodes are exact) and the diagonal is the SHAP value
    ``integral P r_i dt`` less the halves, ``integral P r_i (U - r_i) dt / 2`` with ``U = sum_j
    r_j``. Elements are sorted by feature, so each pair ``i < c`` is evaluated once and kept
    at ``[feature_i, feature_c]`` (upper triangle); it is written to both ``[f_i, f_c]`` and
    ``[f_c, f_i]`` when the block's sums are flushed. The block's threads take the chunk's
    paths in turn and add to an int64 copy of the row's ``(F + 1) ** 2`` outputs of the
    chunk's group in shared memory (``shared``; one global atomic per non-zero value at the
    end) or to global memory (both triangles at once).
    """
    nodes, weights = (a.astype(np.float32) for a in gauss_legendre(n_nodes))

    @cuda.jit
    def kernel(lane_f, lane_i, lane_cat, cat_words, path_offsets, chunk_paths, chunk_offsets,
               chunk_group, X, acc, scale, n_cols, row0):  # fmt: skip
        tid = cuda.threadIdx.x
        ch = cuda.blockIdx.x
        r = row0 + cuda.blockIdx.y
        width = n_cols * n_cols
        base = chunk_group[ch] * width
        scale32 = np.float32(scale)
        one = np.float32(1.0)
        half32 = np.float32(0.5)
        if shared:
            tile = cuda.shared.array(0, types.int64)  # [f_i * n_cols + f_c], f_i <= f_c
            for e in range(tid, width, cuda.blockDim.x):
                tile[e] = 0
            cuda.syncthreads()
        prod = cuda.local.array(n_nodes, np.float32)
        usum = cuda.local.array(n_nodes, np.float32)
        part = cuda.local.array(n_nodes, np.float32)
        for j in range(chunk_offsets[ch] + tid, chunk_offsets[ch + 1], cuda.blockDim.x):
            p = chunk_paths[j]
            s0 = path_offsets[p] + 1
            s1 = path_offsets[p + 1]
            value = lane_f[s0 - 1, 3]
            for m in range(n_nodes):
                prod[m] = value * weights[m]
                usum[m] = 0
            bits = np.uint32(0)
            for li in range(s0, s1):
                z = lane_f[li, 2]
                d = -z
                if _follows(X[r, lane_i[li, 0]], lane_f[li, 0], lane_f[li, 1], lane_i[li, 5],
                            lane_i[li, 6], lane_cat[li], cat_words):  # fmt: skip
                    d = one - z
                    bits |= np.uint32(1) << np.uint32(li - s0)
                for m in range(n_nodes):
                    q = z + nodes[m] * d
                    prod[m] *= q
                    if d != 0:
                        usum[m] += _fdiv(d, q)
            for li in range(s0, s1):
                zi = lane_f[li, 2]
                di = -zi
                if (bits >> np.uint32(li - s0)) & np.uint32(1):
                    di = one - zi
                if di == 0:
                    continue  # its row and column are 0
                fi = lane_i[li, 0]
                diag = np.float32(0.0)
                for m in range(n_nodes):
                    ri = _fdiv(di, zi + nodes[m] * di)
                    part[m] = prod[m] * ri
                    diag += part[m] * (one - half32 * (usum[m] - ri))
                iv = np.int64(diag * scale32)
                if iv != 0:
                    if shared:
                        cuda.atomic.add(tile, fi * n_cols + fi, iv)
                    else:
                        cuda.atomic.add(acc, (r, base + fi * n_cols + fi), iv)
                for lc in range(li + 1, s1):
                    zc = lane_f[lc, 2]
                    dc = -zc
                    if (bits >> np.uint32(lc - s0)) & np.uint32(1):
                        dc = one - zc
                    if dc == 0:
                        continue
                    total = np.float32(0.0)
                    for m in range(n_nodes):
                        total += part[m] * _fdiv(dc, zc + nodes[m] * dc)
                    iv = np.int64(half32 * total * scale32)
                    if iv != 0:
                        fc = lane_i[lc, 0]  # > fi: a path's elements are sorted by feature
                        if shared:
                            cuda.atomic.add(tile, fi * n_cols + fc, iv)
                        else:
                            cuda.atomic.add(acc, (r, base + fi * n_cols + fc), iv)
                            cuda.atomic.add(acc, (r, base + fc * n_cols + fi), iv)
        if shared:
            cuda.syncthreads()
            for e in range(tid, width, cuda.blockDim.x):
                iv = tile[e]
                if iv != 0:
                    cuda.atomic.add(acc, (r, base + e), iv)
                    a = e // n_cols
                    b = e - a * n_cols
                    if a != b:
                        cuda.atomic.add(acc, (r, base + b * n_cols + a), iv)

    return kernel


_QUADRATURE_KERNELS: dict = {}


def _quadrature_kernel(n_nodes: int, shared: bool, interactions: bool = False):
    """The quadrature kernel for ``n_nodes`` nodes (built on first use, compiled at launch)."""
    key = (n_nodes, shared, interactions)
    kernel = _QUADRATURE_KERNELS.get(key)
    if kernel is None:
        make = _make_interaction_quadrature_kernel if interactions else _make_quadrature_kernel
        kernel = _QUADRATURE_KERNELS[key] = make(n_nodes, shared)
    return kernel


@cuda.jit
def _fill_interaction_tables_kernel(lane_d, path_offsets, paths, offsets, tables):
    """One thread per (table path, pattern): that pattern's ``k x k`` interaction entries.

    Entry ``[(pattern * k + c) * k + i]`` (``c``, ``i`` 0-based feature elements): for
    ``c != i`` half the interaction of ``i`` and ``c`` (added at ``[feature_c, feature_i]``),
    for ``c == i`` the diagonal ``phi_i - sum_c`` of those halves. Float64, stored float32.
    """
    pattern = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    j = cuda.blockIdx.y
    p = paths[j]
    s0 = path_offsets[p]
    k = path_offsets[p + 1] - s0 - 1
    if pattern >= (1 << k):
        return
    base = offsets[j] + pattern * k * k
    w = cuda.local.array(_ITAB_MAXF2, np.float64)
    one = cuda.local.array(_ITAB_MAXF1, np.float64)
    zero = cuda.local.array(_ITAB_MAXF1, np.float64)
    diag = cuda.local.array(_ITAB_MAXF1, np.float64)
    v = lane_d[s0, 1]
    for i in range(1, k + 1):
        zero[i] = lane_d[s0 + i, 0]
        one[i] = np.float64((pattern >> (i - 1)) & 1)
        diag[i] = 0.0
    depth = 0
    for c in range(0, k + 1):
        scale_c = 1.0 if c == 0 else 0.5 * (one[c] - zero[c])
        if scale_c != 0.0:
            depth = _seq_extend_without(w, k, c, zero, one)
        for i in range(1, k + 1):
            if i == c:
                continue
            phi = 0.0
            if scale_c != 0.0 and one[i] != zero[i]:
                phi = _seq_unwound(w, depth, zero[i], one[i]) * (one[i] - zero[i]) * v * scale_c
            if c == 0:
                diag[i] += phi
            else:
                diag[i] -= phi
                tables[base + (c - 1) * k + i - 1] = np.float32(phi)
    for i in range(1, k + 1):
        tables[base + (i - 1) * k + i - 1] = np.float32(diag[i])


@cuda.jit
def _oversize_kernel(lane_f, lane_i, lane_cat, lane_d, cat_words, path_offsets, paths, X, acc,
                     scale, n_cols, interactions):  # fmt: skip
    """Fallback: one thread per (row, oversize path), float64 DP in local memory."""
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
    v = lane_d[s0, 1]
    group = lane_i[s0, 4]
    for i in range(1, k + 1):
        li = s0 + i
        zero[i] = lane_d[li, 0]
        diag[i] = 0.0
        one[i] = 0.0
        if _follows(X[r, lane_i[li, 0]], lane_f[li, 0], lane_f[li, 1], lane_i[li, 5],
                    lane_i[li, 6], lane_cat[li], cat_words):  # fmt: skip
            one[i] = 1.0
    n_cond = k if interactions else 0
    for c in range(0, n_cond + 1):
        scale_c = 1.0 if c == 0 else 0.5 * (one[c] - zero[c])
        if scale_c == 0.0:
            continue
        depth = _seq_extend_without(w, k, c, zero, one)
        fc = lane_i[s0 + c, 0]
        for i in range(1, k + 1):
            if i == c or one[i] == zero[i]:
                continue
            phi = _seq_unwound(w, depth, zero[i], one[i]) * (one[i] - zero[i]) * v * scale_c
            fi = lane_i[s0 + i, 0]
            if not interactions:
                ival = _fixed(phi, scale)
                if ival != 0:
                    cuda.atomic.add(acc, (r, group * n_cols + fi), ival)
            elif c == 0:
                diag[i] += phi
            else:
                diag[i] -= phi
                ival = _fixed(phi, scale)
                if ival != 0:
                    cuda.atomic.add(acc, (r, (group * n_cols + fc) * n_cols + fi), ival)
    if interactions:
        for i in range(1, k + 1):
            fi = lane_i[s0 + i, 0]
            ival = _fixed(diag[i], scale)
            if ival != 0:
                cuda.atomic.add(acc, (r, (group * n_cols + fi) * n_cols + fi), ival)


@cuda.jit
def _finish_kernel(acc, out, inv_scale, expected_value, group_size, bias_offset):
    """``out = acc * inv_scale`` (+ expected value at the bias entries); resets ``acc`` to 0."""
    start = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    stride = cuda.gridDim.x * cuda.blockDim.x
    width = acc.shape[1]
    n = acc.shape[0] * width
    for t in range(start, n, stride):
        r = t // width
        e = t - r * width
        value = np.float64(acc[r, e]) * inv_scale
        g = e // group_size
        if e - g * group_size == bias_offset:
            value += expected_value[g]
        out[r, e] = np.float32(value)
        acc[r, e] = 0


# --------------------------------------------------------------------------------------------
# Host side
# --------------------------------------------------------------------------------------------


@dataclass(eq=False)
class Plan:
    """Device arrays of one output kind (SHAP or interactions): which path uses which strategy.

    ``lane_table`` (int64, per lane) is the table offset of the lane's path (-1: DP);
    ``table_bins`` / ``dp_bins`` are the regular bins holding at least one path of each
    strategy and ``table_maxk`` / ``dp_maxk`` (per bin) the largest ``k`` of those paths.
    With ``quadrature`` (SHAP values) the DP paths run in the quadrature kernels instead of the
    warp DP: one :class:`QuadratureLaunch` per node count.
    """

    lane_table: object
    tables: object
    table_bins: object
    table_maxk: object
    dp_bins: object
    dp_maxk: object
    n_table_bins: int
    n_dp_bins: int
    table_paths: int
    table_bytes: int
    quadrature: tuple = ()


@dataclass(eq=False)
class QuadratureLaunch:
    """The paths of one quadrature kernel (``n_nodes`` nodes), in chunks of one output group.

    Chunk ``c`` is ``paths[offsets[c]:offsets[c + 1]]``, all of group ``group[c]``.
    """

    n_nodes: int
    paths: object
    offsets: object
    group: object
    n_chunks: int


def _quadrature_launches(packed: PackedModel, selected: np.ndarray) -> list[dict]:
    """Host arrays of the :class:`QuadratureLaunch` es running the ``selected`` paths."""
    k = np.diff(packed.path_offsets) - 1
    nodes = np.asarray(QUADRATURE_NODES)
    kernel_of = np.searchsorted(nodes, (k + 1) // 2)  # smallest node count that is exact
    if selected.any() and int(kernel_of[selected].max()) >= nodes.size:
        raise ValueError(f"paths of more than {2 * nodes[-1]} features need the fallback kernel")
    launches = []
    for q in np.unique(kernel_of[selected]):
        ids = np.flatnonzero(selected & (kernel_of == q))
        ids = ids[np.lexsort((k[ids], packed.path_group[ids]))]  # by group, then length
        group = packed.path_group[ids].astype(np.int64)
        seg_start = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
        seg_of = np.repeat(np.arange(seg_start.size), np.diff(np.r_[seg_start, ids.size]))
        pos = np.arange(ids.size) - seg_start[seg_of]
        starts = np.flatnonzero(pos % QUADRATURE_CHUNK_PATHS == 0)
        launches.append(dict(
            n_nodes=int(nodes[q]),
            paths=ids.astype(np.int32),
            offsets=np.r_[starts, ids.size].astype(np.int64),
            group=group[starts].astype(np.int32),
            n_chunks=int(starts.size),
        ))  # fmt: skip
    return launches


def quadrature_warps(num_features: int) -> int:
    """Warps per block of the quadrature kernels for ``num_features`` columns (0: too wide
    for per-row accumulators in shared memory; such models add to global memory)."""
    return min(4, QUADRATURE_SHARED_BYTES // (8 * 32 * max(num_features, 1)))


@dataclass(eq=False)
class DeviceModel:
    """A packed model's arrays on one device, plus the launch constants derived from it.

    ``shap`` is the SHAP :class:`Plan`; ``interactions`` the interaction plan, built (tables
    filled on the device) on the first interaction call and kept.
    """

    lane_f: object
    lane_i: object
    lane_cat: object
    lane_d: object
    cat_words: object
    bin_offsets: object
    path_offsets: object
    oversize_paths: object  # paths of oversize bins, run by the fallback kernel
    expected_value: object
    n_oversize: int
    num_features: int
    num_groups: int
    shap_shift: int
    interaction_shift: int
    shap: Plan
    interactions: Plan | None = None
    warp_dp: list = field(default_factory=lambda: [None, None])  # see warp_dp_plan


_CACHE: OrderedDict = OrderedDict()
_CACHE_SIZE = 8
_LOCK = threading.Lock()


def fixed_point_shift(bound: float) -> int:
    """Fixed-point fraction bits ``s`` for outputs bounded by ``bound`` (see module docstring)."""
    s = 62 - math.ceil(math.log2(float(bound) + 1.0)) - 1
    return int(min(60, max(-60, s)))


def _path_bounds(packed: PackedModel) -> tuple[float, float]:
    k = np.diff(packed.path_offsets) - 1
    v = np.abs(packed.path_value.astype(np.float64))
    g = packed.path_group.astype(np.int64)
    G = packed.num_groups
    shap = np.bincount(g, weights=v, minlength=G) if g.size else np.zeros(1)
    inter = np.bincount(g, weights=v * np.maximum(k, 1), minlength=G) if g.size else np.zeros(1)
    return float(shap.max(initial=0.0)), float(inter.max(initial=0.0))


def _path_bins(packed: PackedModel) -> tuple[np.ndarray, np.ndarray]:
    """Bin of each path and whether that bin is regular (<= 32 lanes: a warp kernel runs it)."""
    bin_sizes = np.diff(packed.bin_offsets)
    if not packed.num_paths:
        return np.zeros(0, np.int64), np.zeros(0, bool)
    path_bin = np.searchsorted(packed.bin_offsets, packed.path_offsets[:-1], side="right") - 1
    return path_bin, bin_sizes[path_bin] <= 32


def _interaction_table_offsets(packed: PackedModel) -> np.ndarray:
    """Interaction table offset of each path (-1: DP): shortest SHAP-table paths first."""
    k = np.diff(packed.path_offsets) - 1
    eligible = np.where(packed.table_offsets >= 0, k, 0)  # a path too long for a SHAP table
    max_features = min(INTERACTION_TABLE_MAX_FEATURES, _ITAB_MAXF1 - 1)  # the compiled size
    return choose_tables(eligible, INTERACTION_TABLE_BUDGET_BYTES, max_features,
                         values_per_pattern="k*k")  # fmt: skip


def _plan_arrays(packed: PackedModel, path_table: np.ndarray, quadrature: bool) -> dict:
    """Host arrays of a :class:`Plan` for per-path table offsets ``path_table``; with
    ``quadrature`` the paths without a table go to the quadrature kernels, not the warp DP."""
    k = np.diff(packed.path_offsets) - 1
    path_bin, regular = _path_bins(packed)
    n_bins = max(packed.num_bins, 1)
    is_t = (path_table >= 0) & regular
    is_d = (path_table < 0) & regular
    launches = []
    if quadrature:
        launches = _quadrature_launches(packed, is_d)
        is_d = np.zeros_like(is_d)
    table_maxk = np.zeros(n_bins, np.int32)
    dp_maxk = np.zeros(n_bins, np.int32)
    np.maximum.at(table_maxk, path_bin[is_t], k[is_t])
    np.maximum.at(dp_maxk, path_bin[is_d], k[is_d])
    table_bins = np.flatnonzero(table_maxk > 0).astype(np.int32)
    dp_bins = np.flatnonzero(dp_maxk > 0).astype(np.int32)
    lane_table = path_table[packed.lane_path] if packed.num_paths else np.full(1, -1, np.int64)
    return dict(
        lane_table=np.ascontiguousarray(lane_table, np.int64),
        table_bins=_nonempty(table_bins, np.int32),
        table_maxk=table_maxk,
        dp_bins=_nonempty(dp_bins, np.int32),
        dp_maxk=dp_maxk,
        n_table_bins=int(table_bins.size),
        n_dp_bins=int(dp_bins.size),
        table_paths=int(is_t.sum()),
        quadrature=launches,
    )


def _nonempty(a, dtype) -> np.ndarray:
    a = np.ascontiguousarray(a, dtype=dtype)
    return a if a.size else np.zeros(1, dtype)


def _lane_arrays(packed: PackedModel) -> dict:
    """Host arrays of the device model (see the kernel section's comment)."""
    n_lanes = int(packed.feature.shape[0])
    bin_sizes = np.diff(packed.bin_offsets)
    path_len = np.diff(packed.path_offsets)
    k = path_len - 1
    lane_path = packed.lane_path.astype(np.int64)
    bin_of_lane = np.repeat(np.arange(packed.num_bins, dtype=np.int64), bin_sizes)
    pos = np.arange(n_lanes, dtype=np.int64) - packed.path_offsets[lane_path]
    start = packed.path_offsets[lane_path] - packed.bin_offsets[bin_of_lane]
    flags = packed.missing.astype(np.int32) | (packed.cat_other.astype(np.int32) << 1)
    lane_i = np.zeros((n_lanes, 8), np.int32)
    lane_i[:, 0] = packed.feature
    lane_i[:, 1] = pos
    lane_i[:, 2] = start
    lane_i[:, 3] = k[lane_path]
    lane_i[:, 4] = packed.path_group[lane_path]
    lane_i[:, 5] = flags
    lane_i[:, 6] = packed.cat_nbits
    lane_f = np.zeros((n_lanes, 4), np.float32)
    lane_f[:, 0] = packed.lower
    lane_f[:, 1] = packed.upper
    lane_f[:, 2] = packed.zero_fraction
    lane_f[:, 3] = packed.path_value[lane_path]
    lane_d = np.zeros((n_lanes, 2), np.float64)
    lane_d[:, 0] = packed.zero_fraction
    lane_d[:, 1] = packed.path_value[lane_path]
    path_bin, regular = _path_bins(packed)
    oversize_paths = np.flatnonzero(~regular).astype(np.int32)
    if oversize_paths.size and int(k[oversize_paths].max()) > MAX_FALLBACK_FEATURES:
        raise ValueError(
            f"a path has {int(k[oversize_paths].max())} distinct features; the CUDA backend "
            f"handles at most {MAX_FALLBACK_FEATURES}: use backend='cpu' for this model"
        )
    if packed.capacity != 32:
        raise ValueError(
            f"the CUDA kernels need a model packed with capacity=32 (one warp), got "
            f"capacity={packed.capacity}: rebuild it with build_packed_model(paths, capacity=32)"
        )
    shap_bound, inter_bound = _path_bounds(packed)
    return dict(
        lane_f=lane_f if n_lanes else np.zeros((1, 4), np.float32),
        lane_i=lane_i if n_lanes else np.zeros((1, 8), np.int32),
        lane_cat=_nonempty(packed.cat_offsets, np.int64),
        lane_d=lane_d if n_lanes else np.zeros((1, 2), np.float64),
        cat_words=_nonempty(packed.cat_words, np.uint32),
        bin_offsets=np.ascontiguousarray(packed.bin_offsets, np.int64),
        path_offsets=np.ascontiguousarray(packed.path_offsets, np.int64),
        oversize_paths=_nonempty(oversize_paths, np.int32),
        expected_value=np.ascontiguousarray(packed.expected_value, np.float64),
        n_oversize=int(oversize_paths.size),
        shap_shift=fixed_point_shift(shap_bound),
        interaction_shift=fixed_point_shift(inter_bound),
    )


def _to_device(host: dict) -> dict:
    out = {}
    for name, a in host.items():
        if isinstance(a, np.ndarray):
            a = cuda.to_device(a)
        elif name == "quadrature":
            a = tuple(QuadratureLaunch(**_to_device(launch)) for launch in a)
        out[name] = a
    return out


def _device_id() -> int:
    if _SIM:
        return 0
    return int(cuda.get_current_device().id)


def device_model(packed: PackedModel) -> DeviceModel:
    """The device copy of ``packed`` on the current device (built once, then cached).

    The cache is keyed by ``(packed.digest, device id)`` and keeps the last
    ``_CACHE_SIZE`` models; a model without a digest is copied on every call.
    """
    if not isinstance(packed, PackedModel):
        raise TypeError(f"expected a PackedModel, got {type(packed).__name__}")
    key = (packed.digest, _device_id())
    if packed.digest:
        with _LOCK:
            hit = _CACHE.get(key)
            if hit is not None:
                _CACHE.move_to_end(key)
                return hit
    # SHAP values: every regular path in the quadrature kernels (faster than the pattern tables
    # on every model measured, see the module docstring); the SHAP tables stay on the host
    plan = _plan_arrays(packed, np.full(packed.num_paths, -1, np.int64), quadrature=True)
    plan["tables"] = np.zeros(1, np.float32)
    plan["table_bytes"] = 0
    model = DeviceModel(**_to_device(_lane_arrays(packed)), num_features=packed.num_features,
                        num_groups=packed.num_groups, shap=Plan(**_to_device(plan)))  # fmt: skip
    if packed.digest:
        with _LOCK:
            _CACHE[key] = model
            while len(_CACHE) > _CACHE_SIZE:
                _CACHE.popitem(last=False)
    return model


def interaction_plan(packed: PackedModel, model: DeviceModel) -> Plan:
    """The interaction :class:`Plan` of ``model`` (tables filled on the device on first use)."""
    with _LOCK:
        if model.interactions is not None:
            return model.interactions
        offsets = _interaction_table_offsets(packed)
        plan = _plan_arrays(packed, offsets, quadrature=True)
        chosen = np.flatnonzero(offsets >= 0)
        k = (np.diff(packed.path_offsets) - 1)[chosen]
        total = int(((np.int64(1) << k) * k * k).sum())
        tables = _xp().zeros(max(total, 1), dtype=np.float32)
        stream = _stream()
        keep = []  # device temporaries stay alive until the fill kernels are done
        for j0 in range(0, chosen.size, 65535):  # grid.y is at most 65535
            part = chosen[j0 : j0 + 65535]
            keep.append((cuda.to_device(part.astype(np.int32)), cuda.to_device(offsets[part])))
            tpb = 64
            grid = (-(-(1 << int(k[j0 : j0 + 65535].max())) // tpb), int(part.size))
            _fill_interaction_tables_kernel[grid, tpb, stream](
                model.lane_d, model.path_offsets, keep[-1][0], keep[-1][1], tables
            )
        if not _SIM:
            stream.synchronize()  # the tables serve later calls on any stream or thread
        plan["tables"] = tables
        plan["table_bytes"] = 4 * total
        model.interactions = Plan(**_to_device(plan))
        return model.interactions


def warp_dp_plan(packed: PackedModel, model: DeviceModel, interactions: bool) -> Plan:
    """The plan of the previous kernels, for comparisons (benchmarks and tests): every path of
    the model's SHAP tables (interactions: of the interaction plan's tables) in the table
    kernel, the others in the warp DP instead of the quadrature kernels. Built once, kept."""
    if interactions:
        inter = interaction_plan(packed, model)
    with _LOCK:
        if model.warp_dp[interactions] is None:
            if interactions:
                host = _plan_arrays(packed, _interaction_table_offsets(packed), quadrature=False)
                host.update(tables=inter.tables, table_bytes=inter.table_bytes)
            else:
                host = _plan_arrays(packed, packed.table_offsets, quadrature=False)
                host["tables"] = _nonempty(packed.tables, np.float32)
                host["table_bytes"] = int(packed.tables.nbytes)
            model.warp_dp[interactions] = Plan(**_to_device(host))
        return model.warp_dp[interactions]


def clear_cache() -> None:
    """Drop every cached device model."""
    with _LOCK:
        _CACHE.clear()


def _xp():
    """CuPy on a GPU; NumPy under the CUDA simulator (which runs kernels on host arrays)."""
    if _SIM:
        return np
    import cupy

    return cupy


def default_batch_rows(values_per_row: int) -> int:
    """Rows per batch so the int64 accumulator stays within the budget (module docstring)."""
    budget = BATCH_BUDGET_BYTES
    if not _SIM:
        free, _ = cuda.current_context().get_memory_info()
        budget = min(budget, int(free) // 4)
    return max(1, budget // (8 * max(1, values_per_row)))


def _as_device_rows(X, num_features: int):
    xp = _xp()
    if X.ndim != 2 or X.shape[1] != num_features:
        raise ValueError(f"X must have shape (n_rows, {num_features}), got {tuple(X.shape)}")
    if _SIM:
        return np.ascontiguousarray(np.asarray(X), dtype=np.float32)
    if isinstance(X, np.ndarray):
        return xp.asarray(np.ascontiguousarray(X, dtype=np.float32))
    return xp.ascontiguousarray(xp.asarray(X), dtype=xp.float32)


def _stream():
    if _SIM:
        return 0
    import cupy

    ptr = cupy.cuda.get_current_stream().ptr
    return cuda.external_stream(ptr) if ptr else cuda.default_stream()


def _rows_per_warp(n_rows: int, n_bins: int) -> int:
    """Rows per warp: at most ROWS_PER_WARP, fewer when that leaves the GPU short of warps."""
    target_warps = 16384
    per = -(-n_rows * max(n_bins, 1) // target_warps)
    return int(max(16, min(ROWS_PER_WARP, per)))


def _run(packed: PackedModel, X, batch_rows: int | None, interactions: bool, fallback_only=False,
         warp_dp=False):  # fmt: skip
    model = device_model(packed)
    if warp_dp:
        plan = warp_dp_plan(packed, model, interactions)
    else:
        plan = interaction_plan(packed, model) if interactions else model.shap
    if fallback_only:  # debugging aid: every path through the float64 one-thread kernel
        every = np.arange(packed.num_paths, dtype=np.int32)
        plan = replace(plan, n_table_bins=0, n_dp_bins=0, quadrature=())
        model = replace(model, n_oversize=int(every.size))
        model.oversize_paths = cuda.to_device(every) if every.size else model.oversize_paths
    xp = _xp()
    X = _as_device_rows(X, packed.num_features)
    n = int(X.shape[0])
    G = packed.num_groups
    F1 = packed.num_features + 1
    group_size = F1 * F1 if interactions else F1
    width = G * group_size
    bias_offset = (F1 - 1) * F1 + (F1 - 1) if interactions else F1 - 1
    shape = (n, G, F1, F1) if interactions else (n, G, F1)
    out = xp.empty(shape, dtype=xp.float32)
    if n == 0:
        return out
    if batch_rows is None:
        batch_rows = default_batch_rows(width)
    batch_rows = int(batch_rows)
    if batch_rows < 1:
        raise ValueError(f"batch_rows must be >= 1, got {batch_rows}")
    batch_rows = min(batch_rows, n, 1 << 24)  # keeps the row-tile grid within 65535
    shift = model.interaction_shift if interactions else model.shap_shift
    acc_all = xp.zeros((batch_rows, width), dtype=xp.int64)
    stream = _stream()
    with warnings.catch_warnings():  # small inputs give small grids: not worth a warning
        warnings.filterwarnings("ignore", message=".*under-utilization.*")
        _launch_batches(model, plan, X, out.reshape(n, width), acc_all, batch_rows,
                        interactions, stream, 2.0**shift, F1, group_size, bias_offset)  # fmt: skip
    return out


def shared_tile_rows(width: int) -> int:
    """Rows of the table kernels' shared-memory tile for ``width`` outputs per row (0: none)."""
    rows = min(TILE_ROWS, _TILE_VALUES // max(width, 1))
    return rows if rows >= MIN_TILE_ROWS else 0


def _launch_batches(model, plan, X, out2, acc_all, batch_rows, interactions, stream, scale, F1,
                    group_size, bias_offset):  # fmt: skip
    n = int(X.shape[0])
    width = out2.shape[1]
    inv_scale = 1.0 / scale
    tile_rows = shared_tile_rows(width)
    if interactions:
        table_kernel = _interaction_table_shared_kernel if tile_rows else _interaction_table_kernel
        dp_kernel = _interaction_dp_kernel
    else:
        table_kernel = _shap_table_shared_kernel if tile_rows else _shap_table_kernel
        dp_kernel = _shap_dp_kernel
    for r0 in range(0, n, batch_rows):
        r1 = min(n, r0 + batch_rows)
        nb = r1 - r0
        Xb = X[r0:r1]
        acc = acc_all[:nb]
        if plan.n_table_bins:
            rpb = _rows_per_warp(nb, plan.n_table_bins)
            grid = (-(-plan.n_table_bins // _TABLE_WARPS), -(-nb // rpb))
            table_kernel[grid, 32 * _TABLE_WARPS, stream](
                model.lane_f, model.lane_i, model.lane_cat, plan.lane_table, model.cat_words,
                plan.tables, model.bin_offsets, plan.table_maxk, plan.table_bins, Xb, acc, scale,
                rpb, tile_rows or rpb, F1,
            )  # fmt: skip
        if plan.n_dp_bins:
            rpw = _rows_per_warp(nb, plan.n_dp_bins)
            grid = (-(-plan.n_dp_bins // WARPS_PER_BLOCK), -(-nb // rpw))
            dp_kernel[grid, 32 * WARPS_PER_BLOCK, stream](
                model.lane_f, model.lane_i, model.lane_cat, model.lane_d, plan.lane_table,
                model.cat_words, model.bin_offsets, plan.dp_maxk, plan.dp_bins, Xb, acc, scale,
                rpw, F1,
            )  # fmt: skip
        if plan.quadrature:
            _launch_quadrature(model, plan, Xb, acc, scale, F1, stream, interactions)
        for p0 in range(0, model.n_oversize, 65535):  # grid.y is at most 65535
            paths = model.oversize_paths[p0 : min(model.n_oversize, p0 + 65535)]
            tpb = 128
            grid = (-(-nb // tpb), int(paths.shape[0]))
            _oversize_kernel[grid, tpb, stream](
                model.lane_f, model.lane_i, model.lane_cat, model.lane_d, model.cat_words,
                model.path_offsets, paths, Xb, acc, scale, F1, interactions,
            )  # fmt: skip
        total = nb * width
        tpb = 256
        blocks = int(min(-(-total // tpb), 65535))
        _finish_kernel[blocks, tpb, stream](
            acc, out2[r0:r1], inv_scale, model.expected_value, group_size, bias_offset
        )


def _launch_quadrature(model, plan, Xb, acc, scale, F1, stream, interactions):
    """Run the quadrature kernels of ``plan`` on the batch ``Xb`` (adding to ``acc``)."""
    nb = int(Xb.shape[0])
    if interactions:  # one block per (chunk, row)
        shared = F1 * F1 * 8 <= QUADRATURE_SHARED_BYTES
        for launch in plan.quadrature:
            kernel = _quadrature_kernel(launch.n_nodes, shared, interactions=True)
            for row0 in range(0, nb, 65535):  # grid.y is at most 65535
                grid = (launch.n_chunks, min(nb - row0, 65535))
                kernel[grid, 128, stream, F1 * F1 * 8 if shared else 0](
                    model.lane_f, model.lane_i, model.lane_cat, model.cat_words,
                    model.path_offsets, launch.paths, launch.offsets, launch.group, Xb, acc,
                    scale, F1, row0,
                )  # fmt: skip
        return
    XT = _xp().ascontiguousarray(Xb.T)  # (features, rows): a warp reads 32 rows of a feature
    n_features = F1 - 1
    warps = quadrature_warps(n_features)
    shared = warps > 0
    tpb = 32 * (warps or 4)
    shared_bytes = tpb * n_features * 8 if shared else 0
    rows_per_launch = 65535 * tpb  # grid.y (row tiles) is at most 65535
    for launch in plan.quadrature:
        kernel = _quadrature_kernel(launch.n_nodes, shared)
        for row0 in range(0, nb, rows_per_launch):
            grid = (launch.n_chunks, -(-min(nb - row0, rows_per_launch) // tpb))
            kernel[grid, tpb, stream, shared_bytes](
                model.lane_f, model.lane_i, model.lane_cat, model.cat_words, model.path_offsets,
                launch.paths, launch.offsets, launch.group, XT, acc, scale, F1, row0,
            )  # fmt: skip


def shap_values(packed: PackedModel, X, batch_rows: int | None = None):
    """SHAP values of every row of ``X``: CuPy float32 ``(n, G, F + 1)``, bias last.

    Parameters
    ----------
    packed : PackedModel
        Copied to the current device once and cached by digest.
    X : numpy.ndarray or cupy.ndarray (n, F)
        Rows; converted to a C-contiguous float32 device array when needed.
    batch_rows : int, optional
        Rows per kernel batch (default: :func:`default_batch_rows`). Results do not depend
        on it.
    """
    return _run(packed, X, batch_rows, interactions=False)


def interaction_values(packed: PackedModel, X, batch_rows: int | None = None):
    """SHAP interaction values: CuPy float32 ``(n, G, F + 1, F + 1)``, bias last.

    Parameters are those of :func:`shap_values`.
    """
    return _run(packed, X, batch_rows, interactions=True)


def strategy_stats(packed: PackedModel) -> dict:
    """How the CUDA kernels will evaluate ``packed``: paths and lanes per strategy.

    Returns a dict with ``quadrature_paths`` and ``quadrature_lanes`` (SHAP values: every
    path of a regular bin runs in the quadrature kernels),
    ``quadrature_nodes`` (node count -> SHAP paths), ``oversize_paths`` and ``oversize_lanes``
    (fallback kernel), ``interaction_table_paths`` and ``interaction_table_bytes`` (tables of
    interaction values, filled on the device on the first interaction call; the other paths
    run the interaction quadrature kernels), ``shared_tile_rows`` (SHAP, interactions: rows of
    the table kernels' shared-memory tile, 0 = accumulation in global memory),
    ``quadrature_shared`` (SHAP, interactions: whether the quadrature kernels sum in shared
    memory) and ``fixed_point_shift`` (SHAP, interactions).
    """
    lanes = np.diff(packed.path_offsets)
    _, regular = _path_bins(packed)
    quad = regular
    itab = (_interaction_table_offsets(packed) >= 0) & regular
    k = lanes - 1
    shap_bound, inter_bound = _path_bounds(packed)
    F1 = packed.num_features + 1
    G = packed.num_groups
    nodes = np.asarray(QUADRATURE_NODES)
    kernel_of = np.searchsorted(nodes, (k[quad] + 1) // 2)
    return {
        "quadrature_paths": int(quad.sum()),
        "quadrature_lanes": int(lanes[quad].sum()),
        "quadrature_nodes": {
            int(nodes[q]): int((kernel_of == q).sum()) for q in np.unique(kernel_of)
        },
        "oversize_paths": int((~regular).sum()),
        "oversize_lanes": int(lanes[~regular].sum()),
        "interaction_table_paths": int(itab.sum()),
        "interaction_table_bytes": int(4 * ((np.int64(1) << k[itab]) * k[itab] ** 2).sum()),
        "shared_tile_rows": (shared_tile_rows(G * F1), shared_tile_rows(G * F1 * F1)),
        "quadrature_shared": (quadrature_warps(F1 - 1) > 0, F1 * F1 * 8 <= QUADRATURE_SHARED_BYTES),
        "fixed_point_shift": (fixed_point_shift(shap_bound), fixed_point_shift(inter_bound)),
    }


# --------------------------------------------------------------------------------------------
# Compilation checks
# --------------------------------------------------------------------------------------------

_X_ACC = "float32[:, ::1], int64[:, ::1], float64, int64"
_TABLE_SIG = (
    "void(float32[:, ::1], int32[:, ::1], int64[::1], int64[::1], uint32[::1], float32[::1], "
    f"int64[::1], int32[::1], int32[::1], {_X_ACC}, int64, int64)"
)
_DP_SIG = (
    "void(float32[:, ::1], int32[:, ::1], int64[::1], float64[:, ::1], int64[::1], uint32[::1], "
    f"int64[::1], int32[::1], int32[::1], {_X_ACC}, int64)"
)
_QUADRATURE_SIG = (  # the interaction kernel takes X, the SHAP kernel its transpose
    "void(float32[:, ::1], int32[:, ::1], int64[::1], uint32[::1], int64[::1], int32[::1], "
    f"int64[::1], int32[::1], {_X_ACC}, int64)"
)
_SIGNATURES = {
    "_shap_table_kernel": _TABLE_SIG,
    "_shap_table_shared_kernel": _TABLE_SIG,
    "_interaction_table_kernel": _TABLE_SIG,
    "_interaction_table_shared_kernel": _TABLE_SIG,
    "_shap_dp_kernel": _DP_SIG,
    "_interaction_dp_kernel": _DP_SIG,
    "_fill_interaction_tables_kernel": "void(float64[:, ::1], int64[::1], int32[::1], "
    "int64[::1], float32[::1])",
    "_oversize_kernel": "void(float32[:, ::1], int32[:, ::1], int64[::1], float64[:, ::1], "
    f"uint32[::1], int64[::1], int32[::1], {_X_ACC}, boolean)",
    "_finish_kernel": "void(int64[:, ::1], float32[:, ::1], float64, float64[::1], int64, int64)",
}


@contextmanager
def _device_free_compilation(cc: tuple[int, int]):
    """Let Numba compile device functions for ``cc`` where no GPU is visible.

    Both Numba's built-in CUDA target and ``numba-cuda`` ask the *current device* for its
    compute capability when they compile a device function called from a kernel (even inside
    ``compile_ptx``); without a GPU they are told ``cc`` for the duration of the compilation.
    """
    if cuda.is_available():
        yield
        return
    from numba.cuda import dispatcher

    class _Device:
        compute_capability = cc

    saved = dispatcher.get_current_device
    dispatcher.get_current_device = lambda: _Device()
    try:
        yield
    finally:
        dispatcher.get_current_device = saved


def _ptx(cc: tuple[int, int] = (9, 0)) -> dict[str, str]:
    """PTX of every kernel for compute capability ``cc`` (no GPU needed)."""
    if _SIM:
        raise RuntimeError("compile_check cannot run under NUMBA_ENABLE_CUDASIM=1")
    kernels = {name: (globals()[name], sig) for name, sig in _SIGNATURES.items()}
    for n_nodes in QUADRATURE_NODES:
        for shared in (False, True):
            for inter in (False, True):
                name = (f"_{'interaction' if inter else 'shap'}_quadrature_kernel_{n_nodes}"
                        f"{'_shared' if shared else ''}")  # fmt: skip
                kernels[name] = (_quadrature_kernel(n_nodes, shared, inter), _QUADRATURE_SIG)
    out = {}
    with _device_free_compilation(cc):
        for name, (kernel, sig) in kernels.items():
            ptx, _ = cuda.compile_ptx(kernel.py_func, sig, cc=cc)
            out[name] = ptx
    return out


def compile_check() -> None:
    """Compile every kernel to PTX for compute capability 9.0 (needs NVVM, not a GPU)."""
    _ptx((9, 0))


def _chain_model(depth: int, n_features: int, table_budget_bytes: int = 1 << 30) -> PackedModel:
    """A packed single-tree model: a chain of ``depth`` splits on features 0..depth-1."""
    from distshap.models.ensemble import Ensemble
    from distshap.packed import build_packed_model
    from distshap.paths import extract_paths

    n = 2 * depth + 1  # internal node i at 2i, its right leaf at 2i + 1, last leaf at 2 depth
    left = np.full(n, -1, np.int32)
    right = np.full(n, -1, np.int32)
    feature = np.full(n, -1, np.int32)
    threshold = np.zeros(n, np.float32)
    value = np.zeros(n, np.float64)
    cover = np.zeros(n, np.float64)
    for i in range(depth):
        node = 2 * i
        left[node] = node + 2
        right[node] = node + 1
        feature[node] = i % n_features
        threshold[node] = 0.5
        value[node + 1] = (i % 3) - 1.0
        cover[node] = float(depth - i + 1)
        cover[node + 1] = 1.0
    cover[2 * depth] = 1.0
    value[2 * depth] = 2.0
    ens = Ensemble(
        left=left, right=right, feature=feature, threshold=threshold,
        default_left=np.ones(n, bool), is_categorical=np.zeros(n, bool),
        cat_offsets=np.zeros(n + 1, np.int64), cat_values=np.zeros(0, np.int32),
        value=value, cover=cover, tree_offsets=np.array([0, n], np.int64),
        tree_group=np.zeros(1, np.int32), num_features=n_features, num_groups=1,
        base_score=np.zeros(1, np.float64),
    )  # fmt: skip
    return build_packed_model(extract_paths(ens), table_budget_bytes=table_budget_bytes)


def warm_up() -> None:
    """Compile every kernel for the current device by running it on tiny models."""
    for depth in (3, 33):  # the second one has an oversize path (fallback kernel)
        packed = _chain_model(depth, depth)
        X = np.full((2, depth), 0.25, np.float32)
        shap_values(packed, X)
        interaction_values(packed, X)
    if not _SIM:
        cuda.synchronize()
