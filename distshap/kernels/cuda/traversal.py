"""The GPU side of :mod:`distshap.kernels.margin`: the margin traversal and the additivity
check in one launch.

Kernels (a row's margin of group ``g``: ``base_score[g]`` plus the group's leaf values added one
by one in tree order in float64, as the CPU adds them, so every kernel here gives the CPU's
bits):

* :func:`gpu_margin` with up to :func:`block_rows_max` rows: a block of :data:`_THREADS` threads
  per row walks the trees a tile (:data:`_TILE` trees) at a time, one tree a thread, into shared
  memory, where thread ``g`` adds group ``g``'s leaves in tree order while the block walks the
  next tile (two buffers). A thread per row walking every tree would run each row's trees one
  after another, on too few threads to hide the memory latency until the rows fill the GPU.
  More rows: one thread per row walking every tree (a warp's rows start in the same tree).
  The same bits.
* :func:`check_rows` (up to :func:`block_rows_max` rows): the block traversal, then the row's
  values of each group summed by the block in float64 (a fixed reduction tree) and compared
  with its margin with the tolerance of :func:`distshap.additivity.check_additivity` (its
  caller passes half of it); a row that misses
  sets a flag in mapped host memory (:func:`distshap.kernels.cuda.small.model.read_flag`).
* :func:`check_values`: that check against given margins.

The margin arrays go to each GPU once, a form of the packed model's device model
(:func:`device_arrays`: four packed Numba device arrays, sections addressed by a header);
launches go through :mod:`.args`.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np
from numba import cuda

from distshap.kernels.cuda.runtime.model import device_model
from distshap.kernels.treeshap import leaf
from distshap.packed import PackedModel
from distshap.plan.config import get_config

__all__ = ["block_rows_max", "check_rows", "check_values", "gpu_margin"]

_THREADS = 128  # threads of the block traversal; at most this many groups take it
_TILE = 512  # trees a tile (two tiles of leaf values and groups in shared memory: 12 KiB)
_MAX_BLOCKS = 1 << 15  # grid cap of the block traversal (more rows loop; same bits)


# ------------------------------------------------------------------------------------------
# device arrays: four packed arrays, sections addressed by a header at the start of ``longs``
# ------------------------------------------------------------------------------------------

_SECTIONS = (
    ("ints", np.int32, ("left", "right", "feature", "cat_values", "tree_group")),
    ("longs", np.int64, ("cat_offsets", "roots")),
    ("f64s", np.float64, ("threshold", "value", "base_score", "missing")),
    ("bools", np.bool_, ("default_left", "is_categorical")),
)
# header entry of each section's start (its end: the next entry)
(H_LEFT, H_RIGHT, H_FEATURE, H_CAT_VALUES, H_TREE_GROUP, _, H_CAT_OFFSETS, H_ROOTS, _,
 H_THRESHOLD, H_VALUE, H_BASE_SCORE, H_MISSING, _, H_DEFAULT_LEFT, H_IS_CATEGORICAL,
 _) = range(17)  # fmt: skip
_HEADER = 17


def packed_arrays(model: dict) -> dict:
    """The four host arrays of the GPU traversal (``ints``, ``longs``, ``f64s``, ``bools``);
    ``longs`` starts with the header: each section's start, then its array's end."""
    header = np.zeros(_HEADER, np.int64)
    out, pos = {}, 0
    for name, dtype, sections in _SECTIONS:
        parts = [np.asarray(model[s]).reshape(-1).astype(dtype) for s in sections]
        base = _HEADER if name == "longs" else 0
        starts = base + np.concatenate(([0], np.cumsum([p.size for p in parts])))
        header[pos : pos + len(parts) + 1] = starts
        pos += len(parts) + 1
        out[name] = parts
    for name, dtype, _ in _SECTIONS:
        joined = np.concatenate(([header] if name == "longs" else []) + out[name]).astype(dtype)
        out[name] = joined if joined.size else np.zeros(1, dtype)
    return out


def device_arrays(packed: PackedModel, model: Any = None) -> tuple:
    """``(ints, longs, f64s, bools)`` of :func:`packed_arrays` of ``packed.margin`` on the
    current GPU: a form of the packed model's
    :class:`~distshap.kernels.cuda.runtime.model.DeviceModel` (``model``, default
    ``device_model(packed)``), copied on first use."""
    model = device_model(packed) if model is None else model
    return model.form("margin", lambda: _copied(packed.margin))


def _kept_arrays(packed: PackedModel, model: Any = None) -> tuple:
    """:func:`device_arrays` of ``packed`` as read-only hints kept with its device model
    (:meth:`~distshap.kernels.cuda.runtime.model.DeviceModel.read_only`; ``model``: that
    model, else looked up): a launch hands them on as they are."""
    if model is None:
        model = device_model(packed)  # one model: one without a digest is made at each call
    return model.read_only("margin", lambda: device_arrays(packed, model))


def _copied(margin: dict) -> tuple:
    host = packed_arrays(margin)
    return tuple(cuda.to_device(host[name]) for name, _, _ in _SECTIONS)


# ------------------------------------------------------------------------------------------
# GPU kernels (compiled on first use: no CUDA at import time)
# ------------------------------------------------------------------------------------------


def _kernels():
    """The kernels for the block size and tile in force: thread per row, block per row, block
    per row with the additivity check, and the check alone (against given margins)."""
    return _traversal_kernels(_THREADS, _TILE) + _check_kernels(_THREADS, _TILE)


@cache
def _device_functions(threads: int, tile: int):
    """The traversal's device functions: the model's sections, a row's margin by the block."""
    walk = cuda.jit(device=True)(leaf)

    @cuda.jit(device=True)
    def sections(ints, longs, f64s, bools):
        return (
            ints[longs[H_LEFT] : longs[H_LEFT + 1]],
            ints[longs[H_RIGHT] : longs[H_RIGHT + 1]],
            ints[longs[H_FEATURE] : longs[H_FEATURE + 1]],
            f64s[longs[H_THRESHOLD] : longs[H_THRESHOLD + 1]],
            bools[longs[H_DEFAULT_LEFT] : longs[H_DEFAULT_LEFT + 1]],
            bools[longs[H_IS_CATEGORICAL] : longs[H_IS_CATEGORICAL + 1]],
            longs[longs[H_CAT_OFFSETS] : longs[H_CAT_OFFSETS + 1]],
            ints[longs[H_CAT_VALUES] : longs[H_CAT_VALUES + 1]],
            f64s[longs[H_VALUE] : longs[H_VALUE + 1]],
            longs[longs[H_ROOTS] : longs[H_ROOTS + 1]],
            ints[longs[H_TREE_GROUP] : longs[H_TREE_GROUP + 1]],
            f64s[longs[H_BASE_SCORE] : longs[H_BASE_SCORE + 1]],
            np.float32(f64s[longs[H_MISSING]]),
        )

    @cuda.jit(device=True)
    def block_margin(X, r, ints, longs, f64s, bools, leaves, groups):
        """Row ``r``'s margin of group ``threadIdx.x`` (threads ``< G``; 0.0 in the others),
        the block walking the trees a tile at a time (module docstring). Every thread of the
        block calls it (barriers inside)."""
        (
            left,
            right,
            feature,
            threshold,
            default_left,
            is_categorical,
            cat_offsets,
            cat_values,
            value,
            roots,
            tree_group,
            base_score,
            missing,
        ) = sections(ints, longs, f64s, bools)
        tid = cuda.threadIdx.x
        n_trees = roots.shape[0]
        G = base_score.shape[0]
        acc = base_score[tid] if tid < G else 0.0
        n_tiles = (n_trees + tile - 1) // tile
        for k in range(n_tiles + 1):
            if k < n_tiles:  # walk tile k into buffer k % 2
                b = k & 1
                t0 = k * tile
                count = n_trees - t0 if n_trees - t0 < tile else tile
                for j in range(tid, count, threads):
                    t = t0 + j
                    node = walk(X, r, roots[t], left, right, feature, threshold, default_left,
                                is_categorical, cat_offsets, cat_values, missing)  # fmt: skip
                    leaves[b, j] = value[node]
                    groups[b, j] = tree_group[t]
            if k > 0 and tid < G:  # add tile k - 1, in tree order
                b = (k - 1) & 1
                t0 = (k - 1) * tile
                count = n_trees - t0 if n_trees - t0 < tile else tile
                for j in range(count):
                    if groups[b, j] == tid:
                        acc += leaves[b, j]
            cuda.syncthreads()
        return acc

    return walk, sections, block_margin


@cache
def _traversal_kernels(threads: int, tile: int):
    """The margin kernels: a thread per row (every tree in order), a block per row."""
    walk, sections, block_margin = _device_functions(threads, tile)

    @cuda.jit(cache=True)
    def rows_kernel(X, ints, longs, f64s, bools, out):
        """One thread per row, every tree in order (the CPU's loop)."""
        r = cuda.grid(1)
        if r >= X.shape[0]:
            return
        (
            left,
            right,
            feature,
            threshold,
            default_left,
            is_categorical,
            cat_offsets,
            cat_values,
            value,
            roots,
            tree_group,
            base_score,
            missing,
        ) = sections(ints, longs, f64s, bools)
        for g in range(base_score.shape[0]):
            out[r, g] = base_score[g]
        for t in range(roots.shape[0]):
            node = walk(X, r, roots[t], left, right, feature, threshold, default_left,
                        is_categorical, cat_offsets, cat_values, missing)  # fmt: skip
            out[r, tree_group[t]] += value[node]

    @cuda.jit(cache=True)
    def block_kernel(X, ints, longs, f64s, bools, out):
        """A block per row (grid-stride over rows): :func:`block_margin` into ``out``."""
        leaves = cuda.shared.array((2, tile), np.float64)
        groups = cuda.shared.array((2, tile), np.int32)
        tid = cuda.threadIdx.x
        for r in range(cuda.blockIdx.x, X.shape[0], cuda.gridDim.x):
            acc = block_margin(X, r, ints, longs, f64s, bools, leaves, groups)
            if tid < out.shape[1]:
                out[r, tid] = acc

    return rows_kernel, block_kernel


@cache
def _check_kernels(threads: int, tile: int):
    """The additivity check: with the block's margins of the row, or against given margins."""
    _, _, block_margin = _device_functions(threads, tile)

    @cuda.jit(device=True)
    def row_check(values, r, margins, sums, sizes, flag, rtol):
        """Whether row ``r``'s ``values`` of each group sum to ``margins[g]``: the block adds
        them in float64 (fixed reduction tree), ``flag[0] = 1`` where a group misses."""
        tid = cuda.threadIdx.x
        W = values.shape[2]
        for g in range(values.shape[1]):
            total = 0.0
            size = 0.0
            for e in range(tid, W, threads):
                v = np.float64(values[r, g, e])
                total += v
                size += abs(v)
            sums[tid] = total
            sizes[tid] = size
            cuda.syncthreads()
            step = threads // 2
            while step > 0:
                if tid < step:
                    sums[tid] += sums[tid + step]
                    sizes[tid] += sizes[tid + step]
                cuda.syncthreads()
                step //= 2
            if tid == 0:
                m = margins[g]
                bound = sizes[0] + abs(m)
                if not bound >= 1.0:  # the check's max(scale, 1); a NaN stays NaN
                    bound = 1.0 if bound == bound else bound
                if not abs(sums[0] - m) <= rtol * bound:
                    flag[0] = 1  # a NaN fails too
            cuda.syncthreads()

    @cuda.jit(cache=True)
    def check_kernel(values, X, ints, longs, f64s, bools, flag, rtol):
        """A block per row: the row's margins (:func:`block_margin`) and the additivity check
        of its ``values`` ``(n, G, W)`` (float32) against them (:func:`row_check`)."""
        leaves = cuda.shared.array((2, tile), np.float64)
        groups = cuda.shared.array((2, tile), np.int32)
        margins = cuda.shared.array(threads, np.float64)
        sums = cuda.shared.array(threads, np.float64)
        sizes = cuda.shared.array(threads, np.float64)
        for r in range(cuda.blockIdx.x, X.shape[0], cuda.gridDim.x):
            margins[cuda.threadIdx.x] = block_margin(X, r, ints, longs, f64s, bools, leaves,
                                                     groups)  # fmt: skip
            cuda.syncthreads()
            row_check(values, r, margins, sums, sizes, flag, rtol)

    @cuda.jit(cache=True)
    def values_kernel(values, margin, flag, rtol):
        """A block per row: the additivity check of ``values`` ``(n, G, W)`` (float32)
        against the given ``margin`` ``(n, G)`` (float64)."""
        sums = cuda.shared.array(threads, np.float64)
        sizes = cuda.shared.array(threads, np.float64)
        for r in range(cuda.blockIdx.x, values.shape[0], cuda.gridDim.x):
            row_check(values, r, margin[r], sums, sizes, flag, rtol)

    return check_kernel, values_kernel


def block_rows_max(packed: PackedModel | None = None) -> int:
    """Rows of a call the traversal walks a block a row at most: ``margin_block_rows`` of the
    configuration and, for the model ``packed``, ``margin_block_rows_per_tree`` rows a tree
    where that is fewer; more rows, a thread a row."""
    config = get_config()
    most = int(config.margin_block_rows)
    per_tree = int(config.margin_block_rows_per_tree)
    if packed is None or per_tree == 0 or packed.margin is None:
        return most
    return min(most, per_tree * int(packed.margin["roots"].shape[0]))


def _block_grid(n: int) -> int:
    return max(1, min(n, _MAX_BLOCKS))


def gpu_margin(packed: PackedModel, X: Any, out: Any, arrays: tuple | None = None) -> None:
    """The GPU traversal of ``packed.margin`` for the device rows ``X`` (C-contiguous; NumPy
    under the simulator) into ``out`` ``(n, G)`` float64, on CuPy's current stream;
    ``arrays`` as :func:`check_rows` takes them."""
    from distshap.kernels.cuda.runtime import args

    n = int(X.shape[0])
    if n == 0:
        return
    rows_kernel, block_kernel, _, _ = _kernels()
    arrays = _kept_arrays(packed) if arrays is None else arrays
    s = args.current_stream()
    groups = int(packed.margin["base_score"].shape[0])
    if n <= block_rows_max(packed) and groups <= _THREADS:
        args.launch(block_kernel, _block_grid(n), _THREADS, s, 0, (X, *arrays, out))
    else:
        threads = 128
        args.launch(rows_kernel, -(-n // threads), threads, s, 0, (X, *arrays, out))


def check_rows(
    packed: PackedModel,
    X: Any,
    values: Any,
    rtol: float,
    flag: Any = None,
    arrays: tuple | None = None,
):
    """Launch the traversal of ``packed.margin`` for the device rows ``X`` with the additivity
    check of ``values`` (C-contiguous float32 ``(n, G, W)``) against it, on CuPy's current
    stream; returns ``(flag, stream)`` for :func:`distshap.kernels.cuda.small.model.read_flag`
    (set where a row misses by more than ``rtol`` of its scale), or ``None`` where the model
    has more groups than the block has threads, or for more rows than :func:`block_rows_max`
    (the caller then runs :func:`gpu_margin`, thread per row, and :func:`check_values`).
    ``flag``: a mapped int32 array of one to set instead of this thread's
    (:func:`~distshap.kernels.cuda.small.model.check_flag`); ``arrays``: the margin arrays
    as :func:`_kept_arrays` gives them, looked up once by the caller."""
    from distshap.kernels.cuda.runtime import args
    from distshap.kernels.cuda.small.model import check_flag

    groups = int(packed.margin["base_score"].shape[0])
    n = int(X.shape[0])
    if groups > _THREADS or n > block_rows_max(packed):
        return None  # many rows: the thread-per-row traversal, then the check
    check_kernel = _kernels()[2]
    s = args.current_stream()
    flag = check_flag() if flag is None else flag
    if n:
        arrays = _kept_arrays(packed) if arrays is None else arrays
        arguments = (values, X, *arrays, flag, float(rtol))
        args.launch(check_kernel, _block_grid(n), _THREADS, s, 0, arguments)
    return flag, s


def check_values(values: Any, margin: Any, rtol: float, flag: Any = None):
    """Launch the additivity check of ``values`` (C-contiguous float32 ``(n, G, W)``, on the
    device) against ``margin`` (C-contiguous float64 ``(n, G)``) on CuPy's current stream;
    returns ``(flag, stream)`` as :func:`check_rows` does (``flag`` as there)."""
    from distshap.kernels.cuda.runtime import args
    from distshap.kernels.cuda.small.model import check_flag

    values_kernel = _kernels()[3]
    s = args.current_stream()
    flag = check_flag() if flag is None else flag
    n = int(values.shape[0])
    if n:
        arguments = (values, margin, flag, float(rtol))
        args.launch(values_kernel, _block_grid(n), _THREADS, s, 0, arguments)
    return flag, s
