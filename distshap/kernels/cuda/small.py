"""Small models: a row's whole output from one warp, in one launch per call.

A model of a few dozen paths (10 trees of depth 3: 80) leaves the GPU idle in the regular
route: per row batch an int64 accumulator is allocated and zeroed, then several kernels add
to it and a finish kernel converts it, and the additivity check runs its own traversal kernel
and reductions, so a call is a dozen launches and allocations of a few microseconds of work
each. For models that :func:`~distshap.plan.routes.small_fits`, one kernel does it all:

* one warp per row (rows in a grid-stride loop); lane ``l`` runs the paths ``l, l + 32, ...``
  of each output group (the paths sorted by group on the host) with the float64 DP of the
  fallback kernel (EXTEND, UNWOUND_SUM; for interaction values once more per conditioned
  element, paper §3.5), summing into its own float64 accumulator ``(F + 1)`` or ``(F + 1)**2``
  entries (local memory);
* the 32 accumulators are summed with a butterfly of warp shuffles (``a + b == b + a``, so
  every lane ends with the same bits), rounded once to the model's fixed point
  (:func:`~distshap.kernels.cuda.model.fixed_point_shift`, the shift of the regular route) and
  written as float32 by the finish kernel's conversion (the expected value added at the bias
  entry). The values are multiples of ``2**-s`` as the regular route's are, and the pair-slot
  variant (:func:`slot_kernel`, for :mod:`.pairs`) stores the same integers, so top pairs and
  summaries keep the bits of the matrices;
* the additivity check in the same pass: each lane walks the trees ``l, l + 32, ...`` with the
  independent traversal of :mod:`distshap.kernels.margin` (its own function, on the model's raw
  values), the lanes' sums are added by the butterfly, and a row whose float32 values miss
  the margin by more than half the check's tolerance (:data:`distshap.additivity.RTOL`) sets a
  flag in mapped host memory; the host reads it after one stream synchronisation and, when set,
  runs the full check (:func:`~distshap.additivity.check_additivity` against
  :func:`~distshap.kernels.margin.predict_margin`), which raises with its usual message.

Each row is computed by one warp in a fixed order, so its bits depend on the row only: not on
the batch, the grid or the number of GPUs. They are not those of the regular route (another
summation), and :func:`~distshap.plan.routes.small_fits` is a function of the packed model and
the configuration only, so every GPU of a run takes the same route. Model constants (paths sorted by group, the margin
arrays) sit in six device arrays with a header of section offsets (few kernel arguments: each
costs host time at every launch), copied once per model and device.

:data:`VARIANT` picks the kernels a call launches (the same float64 operations per contribution
in each, so the same float32 bits, except ``"gather"``, the default, whose kernels live in
:mod:`.small_gather`): ``"unrolled"`` passes the constants as two
arrays (:func:`merged_arrays`: int64 and float64, float32 and bool sections widened exactly,
the fixed-point scales inside) and the rows once where they are the check's raw values (six
kernel arguments instead of twelve), and compiles the DP for the model's longest path
(:data:`UNROLL_MAX` features at most): loops of constant trip counts, unrolled, so the DP's
local arrays live in registers; ``"merged"`` the same arguments with the DP's loops; ``"v1"``
the twelve-argument kernels (:func:`launch_small`), kept for side-by-side timing; ``"gather"``
the block kernels of :mod:`.small_gather` (:func:`route` picks). With
:data:`.rawlaunch.ENABLED` the merged and gather kernels are launched through the driver
(:mod:`.rawlaunch`: no per-launch typing of CuPy arrays), the same kernels and bits.
"""

from __future__ import annotations

import math
import threading
import warnings
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
from numba import cuda

from distshap.additivity import RTOL
from distshap.kernels.cuda import config
from distshap.kernels.cuda.caches import keep
from distshap.kernels.cuda.device import (
    FULL_MASK,
    SIM,
    device_id,
    extend_path,
    fixed,
    follows,
    stream,
    unwound_sum,
)
from distshap.kernels.margin import _leaf
from distshap.packed import PackedModel
from distshap.plan.routes import longest_path

__all__ = [
    "SMALL_MAX_GROUPS", "SMALL_MAX_INTERACTION_COLUMNS", "SMALL_MAX_PATH_FEATURES",
    "MAX_REGISTERS", "MergedModel", "SMALL_MAX_SHAP_COLUMNS", "SmallModel", "UNROLL_MAX",
    "VARIANT", "VARIANTS", "host_arrays",
    "interaction_kernel", "launch_merged", "launch_slots", "launch_small", "merged_arrays",
    "merged_kernel", "merged_model", "read_flag", "route", "shap_kernel", "slot_kernel",
    "small_model",
]  # fmt: skip

# Frozen at import: the kernels' local arrays have these sizes, so the host side uses them too.
SMALL_MAX_PATH_FEATURES = config.SMALL_MAX_PATH_FEATURES
SMALL_MAX_SHAP_COLUMNS = config.SMALL_MAX_SHAP_COLUMNS
SMALL_MAX_INTERACTION_COLUMNS = config.SMALL_MAX_INTERACTION_COLUMNS
SMALL_MAX_GROUPS = config.SMALL_MAX_GROUPS
_MAXF1 = SMALL_MAX_PATH_FEATURES + 1
_MAXF2 = SMALL_MAX_PATH_FEATURES + 2
_SHAP_ACC = SMALL_MAX_SHAP_COLUMNS
_INTER_ACC = SMALL_MAX_INTERACTION_COLUMNS * SMALL_MAX_INTERACTION_COLUMNS
_HALF_RTOL = 0.5 * RTOL  # stricter than the host check: every row it fails is flagged
_WARPS = 1 if SIM else 4  # warps a block (the simulator's shuffle syncs one warp's block)
_MAX_BLOCKS = 4096  # grid cap: more rows loop (grid-stride), the bits do not change

# Sections of the six constant arrays. ``longs`` starts with a header: for each array in the
# order below, the start of each section and the array's end (offsets into that array).
_SECTIONS = (
    ("ints", np.int32, ("paths", "group_paths", "feature", "nbits", "left", "right",
                        "node_feature", "cat_values", "tree_group")),
    ("longs", np.int64, ("path_offsets", "cat_offsets", "node_cat_offsets", "roots")),
    ("f32s", np.float32, ("lower", "upper", "missing_value")),
    ("f64s", np.float64, ("zero", "value", "expected", "threshold", "leaf_value", "base_score",
                          "zeros")),
    ("bools", np.bool_, ("missing", "cat_other", "default_left", "is_categorical")),
)  # fmt: skip


def _header_layout() -> tuple[dict, int]:
    at, pos = {}, 0
    for name, _, sections in _SECTIONS:
        for i, s in enumerate(sections):
            at[(name, s)] = pos + i
        pos += len(sections) + 1
    return at, pos


_AT, _HEADER = _header_layout()
# header entries of each section's start (its end is the next entry), compile-time constants
(H_PATHS, H_GROUP_PATHS, H_FEATURE, H_NBITS, H_LEFT, H_RIGHT, H_NODE_FEATURE, H_CAT_VALUES,
 H_TREE_GROUP) = (_AT[("ints", s)] for s in _SECTIONS[0][2])  # fmt: skip
H_PATH_OFFSETS, H_CAT_OFFSETS, H_NODE_CAT_OFFSETS, H_ROOTS = (
    _AT[("longs", s)] for s in _SECTIONS[1][2]
)
H_LOWER, H_UPPER, H_MISSING_VALUE = (_AT[("f32s", s)] for s in _SECTIONS[2][2])
H_ZERO, H_VALUE, H_EXPECTED, H_THRESHOLD, H_LEAF_VALUE, H_BASE_SCORE, H_ZEROS = (
    _AT[("f64s", s)] for s in _SECTIONS[3][2]
)
H_MISSING, H_CAT_OTHER, H_DEFAULT_LEFT, H_IS_CATEGORICAL = (
    _AT[("bools", s)] for s in _SECTIONS[4][2]
)


def host_arrays(packed: PackedModel) -> dict:
    """The six constant arrays of the small kernels (host), by name (module docstring)."""
    P = packed.num_paths
    order = np.argsort(np.asarray(packed.path_group, np.int64), kind="stable")
    group_paths = np.searchsorted(np.asarray(packed.path_group)[order], np.arange(
        packed.num_groups + 1))  # fmt: skip
    G = packed.num_groups
    m = packed.margin
    if m is None:  # no traversal (the check is skipped): empty margin sections
        m = {
            "left": np.zeros(0, np.int32), "right": np.zeros(0, np.int32),
            "feature": np.zeros(0, np.int32), "cat_values": np.zeros(0, np.int32),
            "tree_group": np.zeros(0, np.int32), "cat_offsets": np.zeros(0, np.int64),
            "roots": np.zeros(0, np.int64), "missing": np.full(1, np.nan, np.float32),
            "threshold": np.zeros(0), "value": np.zeros(0), "base_score": np.zeros(G),
            "default_left": np.zeros(0, bool), "is_categorical": np.zeros(0, bool),
        }  # fmt: skip
    parts = {
        "ints": (order[:P], group_paths, packed.feature, packed.cat_nbits, m["left"],
                 m["right"], m["feature"], m["cat_values"], m["tree_group"]),
        "longs": (packed.path_offsets, packed.cat_offsets, m["cat_offsets"], m["roots"]),
        "f32s": (packed.lower, packed.upper, m["missing"]),
        "f64s": (packed.zero_fraction, packed.path_value, packed.expected_value,
                 m["threshold"], m["value"], m["base_score"], np.zeros(G)),
        "bools": (packed.missing, packed.cat_other, m["default_left"], m["is_categorical"]),
    }  # fmt: skip
    header = np.zeros(_HEADER, np.int64)
    out = {}
    for name, dtype, sections in _SECTIONS:
        arrays = [np.asarray(a).reshape(-1).astype(dtype, copy=False) for a in parts[name]]
        base = _HEADER if name == "longs" else 0
        sizes = np.array([a.size for a in arrays], np.int64)
        starts = base + np.concatenate(([0], np.cumsum(sizes)))
        first = _AT[(name, sections[0])]
        header[first : first + len(arrays) + 1] = starts
        out[name] = arrays
    for name, dtype, _ in _SECTIONS:
        arrays = ([header] if name == "longs" else []) + out[name]
        joined = np.concatenate(arrays).astype(dtype, copy=False)
        out[name] = joined if joined.size else np.zeros(1, dtype)
    words = np.ascontiguousarray(packed.cat_words, np.uint32)
    out["words"] = words if words.size else np.zeros(1, np.uint32)
    return out


@dataclass(eq=False)
class SmallModel:
    """The small kernels' constants on one device (:func:`host_arrays`, copied), the fixed
    point ``scale = 2**s`` of SHAP and interaction values, and the model's sizes."""

    ints: object
    longs: object
    f32s: object
    f64s: object
    bools: object
    words: object
    shap_scale: float
    interaction_scale: float
    num_features: int
    num_groups: int
    packed: object = None  # the PackedModel (the gather variant's pair slots build from it)


_LOCK = threading.Lock()


def small_model(packed: PackedModel) -> SmallModel:
    """The :class:`SmallModel` of ``packed`` on the current device (a form of its
    :class:`~.model.DeviceModel`, built on first use)."""
    from distshap.kernels.cuda.model import device_model

    return device_model(packed).form("small", lambda: _build_small_model(packed))


def _build_small_model(packed: PackedModel) -> SmallModel:
    from distshap.kernels.cuda.model import _path_bounds, fixed_point_shift

    shap_bound, inter_bound = _path_bounds(packed)
    host = host_arrays(packed)
    to_device = (lambda a: a) if SIM else cuda.to_device
    return SmallModel(
        **{name: to_device(a) for name, a in host.items()},
        shap_scale=2.0 ** fixed_point_shift(shap_bound),
        interaction_scale=2.0 ** fixed_point_shift(inter_bound),
        num_features=packed.num_features,
        num_groups=packed.num_groups,
        packed=packed,
    )


# ------------------------------------------------------------------------------------------
# device code
# ------------------------------------------------------------------------------------------

_leaf_device = cuda.jit(device=True)(_leaf)

if SIM:  # pragma: no cover - only under NUMBA_ENABLE_CUDASIM=1 (no warp intrinsics there)

    def _replay(buf, row):
        """The butterfly of the GPU version over ``buf[row]`` (32 lanes), this lane's result."""
        tree = buf[row].copy()
        offset = 16
        while offset > 0:
            tree = tree + tree[np.arange(32) ^ offset]  # lane i: v_i + v_(i ^ offset)
            offset >>= 1
        return tree[cuda.threadIdx.x & 31]

    @cuda.jit(device=True)  # a device function: the simulator lends it its thread context
    def _warp_sum4(a0, a1, a2, a3):
        """Four warp sums, replayed from shared memory (two barriers for the four)."""
        buf = cuda.shared.array((4, 32), np.float64)
        lane = cuda.threadIdx.x & 31
        buf[0, lane], buf[1, lane], buf[2, lane], buf[3, lane] = a0, a1, a2, a3
        cuda.syncthreads()  # the simulator's block is one warp
        sums = (_replay(buf, 0), _replay(buf, 1), _replay(buf, 2), _replay(buf, 3))
        cuda.syncthreads()
        return sums

    @cuda.jit(device=True)
    def _warp_sum(value):
        return _warp_sum4(value, 0.0, 0.0, 0.0)[0]

else:

    @cuda.jit(device=True)
    def _warp_sum(value):
        """The sum of ``value`` over the warp, the same bits in every lane (butterfly)."""
        offset = 16
        while offset > 0:
            value += cuda.shfl_xor_sync(FULL_MASK, value, offset)
            offset >>= 1
        return value

    @cuda.jit(device=True)
    def _warp_sum4(a0, a1, a2, a3):
        """Four independent warp sums (their shuffles overlap)."""
        return _warp_sum(a0), _warp_sum(a1), _warp_sum(a2), _warp_sum(a3)


@cuda.jit(device=True)
def _add_path(p, X, r, ints, longs, f32s, f64s, bools, words, acc, n_cols, interactions, w,
              zero, one, diag):  # fmt: skip
    """Add path ``p``'s float64 contributions for row ``r`` to this lane's ``acc``."""
    s0 = longs[longs[H_PATH_OFFSETS] + p]
    k = longs[longs[H_PATH_OFFSETS] + p + 1] - s0 - 1
    v = f64s[longs[H_VALUE] + p]
    for i in range(1, k + 1):
        li = s0 + i
        zero[i] = f64s[longs[H_ZERO] + li]
        diag[i] = 0.0
        one[i] = 0.0
        if follows(X[r, ints[longs[H_FEATURE] + li]], f32s[longs[H_LOWER] + li],
                   f32s[longs[H_UPPER] + li], bools[longs[H_MISSING] + li],
                   bools[longs[H_CAT_OTHER] + li], longs[longs[H_CAT_OFFSETS] + li],
                   ints[longs[H_NBITS] + li], words):  # fmt: skip
            one[i] = 1.0
    n_cond = k if interactions else 0
    for c in range(0, n_cond + 1):
        scale_c = 1.0 if c == 0 else 0.5 * (one[c] - zero[c])
        if scale_c == 0.0:
            continue
        depth = extend_path(w, zero, one, 1, k + 1, c)
        fc = ints[longs[H_FEATURE] + s0 + c]
        for i in range(1, k + 1):
            if i == c or one[i] == zero[i]:
                continue
            phi = unwound_sum(w, depth, zero[i], one[i]) * (one[i] - zero[i]) * v * scale_c
            fi = ints[longs[H_FEATURE] + s0 + i]
            if not interactions:
                acc[fi] += phi
            elif c == 0:
                diag[i] += phi
            else:
                diag[i] -= phi
                acc[fc * n_cols + fi] += phi
    if interactions:
        for i in range(1, k + 1):
            fi = ints[longs[H_FEATURE] + s0 + i]
            acc[fi * n_cols + fi] += diag[i]


@cuda.jit(device=True)
def _store_shap(out, r, g, e, n_cols, value):
    out[r, g, e] = value


@cuda.jit(device=True)
def _store_interaction(out, r, g, e, n_cols, value):
    i = e // n_cols
    out[r, g, i, e - i * n_cols] = value


def _make_emit(store, interactions: bool):
    """The device function writing group ``g`` of row ``r`` (float32 values) and checking it."""

    @cuda.jit(device=True)
    def put(out, r, g, e, width, lane, n_cols, summed, scale, inv_scale, expected):
        """Store entry ``e`` (when ``e < width``) of its warp sum; return its float32 value."""
        value = np.float64(fixed(summed, scale)) * inv_scale  # the finish kernel's conversion
        if e == width - 1:
            value += expected  # the bias entry (its sum is 0: no path has feature F)
        value32 = np.float32(value)
        if e < width and (e & 31) == lane:
            store(out, r, g, e, n_cols, value32)
        return np.float64(value32) if e < width else 0.0

    @cuda.jit(device=True)
    def emit(acc, out, flag, r, g, lane, n_cols, scale, f64s, longs, check, margin, slot_i,
             slot_j, group_slots):  # fmt: skip
        width = n_cols * n_cols if interactions else n_cols
        expected = f64s[longs[H_EXPECTED] + g]
        inv_scale = 1.0 / scale
        total = 0.0
        size = 0.0
        # four independent butterflies at a time (latency), the same in every lane (the
        # shuffles stay converged); entries of the bias row and column sum to 0
        for e in range(0, width, 4):
            s0, s1, s2, s3 = _warp_sum4(
                acc[e],
                acc[e + 1] if e + 1 < width else 0.0,
                acc[e + 2] if e + 2 < width else 0.0,
                acc[e + 3] if e + 3 < width else 0.0,
            )
            v = put(out, r, g, e, width, lane, n_cols, s0, scale, inv_scale, expected)
            total += v
            size += abs(v)
            v = put(out, r, g, e + 1, width, lane, n_cols, s1, scale, inv_scale, expected)
            total += v
            size += abs(v)
            v = put(out, r, g, e + 2, width, lane, n_cols, s2, scale, inv_scale, expected)
            total += v
            size += abs(v)
            v = put(out, r, g, e + 3, width, lane, n_cols, s3, scale, inv_scale, expected)
            total += v
            size += abs(v)
        if check:
            m = _warp_sum(margin[0, g])
            bound = size + abs(m)
            if not bound >= 1.0:  # the check's max(scale, 1); a NaN scale stays NaN
                bound = 1.0 if bound == bound else bound
            if lane == 0 and not abs(total - m) <= _HALF_RTOL * bound:
                flag[0] = 1  # a NaN fails too

    return emit


@cuda.jit(device=True)
def _emit_slots(acc, out, flag, r, g, lane, n_cols, scale, f64s, longs, check, margin, slot_i,
                slot_j, group_slots):  # fmt: skip
    """Group ``g``'s upper triangle and diagonal into row ``r``'s pair slots (int64 at the
    fixed point: the integers the values above are made of)."""
    for t in range(group_slots[g], group_slots[g + 1]):
        value = _warp_sum(acc[slot_i[t] * n_cols + slot_j[t]])
        if (t & 31) == lane:
            out[r, t] = fixed(value, scale)


def _make_kernel(kind: str, max_registers: int = 0):
    """The small kernel of ``kind``: ``"shap"``, ``"interactions"`` or ``"slots"``; with
    ``max_registers``, compiled within that many registers a thread (more warps resident,
    the same arithmetic; :mod:`benchmarks.small_models` ``--registers`` times it)."""
    options = {"max_registers": max_registers} if max_registers else {}
    jit = cuda.jit(cache=True, **options)
    interactions = kind != "shap"
    acc_size = _INTER_ACC if interactions else _SHAP_ACC
    if kind == "slots":
        emit = _emit_slots
    else:
        emit = _make_emit(_store_interaction if interactions else _store_shap, interactions)

    @cuda.jit(device=True)
    def body(X, Xraw, out, flag, ints, longs, f32s, f64s, bools, words, check, scale, slot_i,
             slot_j, group_slots):  # fmt: skip
        lane = cuda.threadIdx.x & 31
        warp = (cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x) >> 5
        n_warps = (cuda.gridDim.x * cuda.blockDim.x) >> 5
        n_cols = X.shape[1] + 1
        width = n_cols * n_cols if interactions else n_cols
        acc = cuda.local.array(acc_size, np.float64)
        w = cuda.local.array(_MAXF2, np.float64)
        zero = cuda.local.array(_MAXF1, np.float64)
        one = cuda.local.array(_MAXF1, np.float64)
        diag = cuda.local.array(_MAXF1, np.float64)
        margin = cuda.local.array((1, SMALL_MAX_GROUPS), np.float64)
        paths = ints[longs[H_PATHS] : longs[H_PATHS + 1]]
        group_paths = ints[longs[H_GROUP_PATHS] : longs[H_GROUP_PATHS + 1]]
        for r in range(warp, X.shape[0], n_warps):  # the same rows in every lane of the warp
            if check:  # this lane's trees, by the independent traversal of the raw values
                roots = longs[longs[H_ROOTS] : longs[H_ROOTS + 1]]
                tree_group = ints[longs[H_TREE_GROUP] : longs[H_TREE_GROUP + 1]]
                leaf_value = f64s[longs[H_LEAF_VALUE] : longs[H_LEAF_VALUE + 1]]
                base = H_BASE_SCORE if lane == 0 else H_ZEROS
                for g in range(group_paths.shape[0] - 1):
                    margin[0, g] = f64s[longs[base] + g]
                missing = f32s[longs[H_MISSING_VALUE]]
                for t in range(lane, roots.shape[0], 32):
                    node = _leaf_device(
                        Xraw, r, roots[t],
                        ints[longs[H_LEFT] : longs[H_LEFT + 1]],
                        ints[longs[H_RIGHT] : longs[H_RIGHT + 1]],
                        ints[longs[H_NODE_FEATURE] : longs[H_NODE_FEATURE + 1]],
                        f64s[longs[H_THRESHOLD] : longs[H_THRESHOLD + 1]],
                        bools[longs[H_DEFAULT_LEFT] : longs[H_DEFAULT_LEFT + 1]],
                        bools[longs[H_IS_CATEGORICAL] : longs[H_IS_CATEGORICAL + 1]],
                        longs[longs[H_NODE_CAT_OFFSETS] : longs[H_NODE_CAT_OFFSETS + 1]],
                        ints[longs[H_CAT_VALUES] : longs[H_CAT_VALUES + 1]],
                        missing,
                    )  # fmt: skip
                    margin[0, tree_group[t]] += leaf_value[node]
            for g in range(group_paths.shape[0] - 1):
                for e in range(width):
                    acc[e] = 0.0
                for j in range(group_paths[g] + lane, group_paths[g + 1], 32):
                    _add_path(paths[j], X, r, ints, longs, f32s, f64s, bools, words, acc,
                              n_cols, interactions, w, zero, one, diag)  # fmt: skip
                emit(acc, out, flag, r, g, lane, n_cols, scale, f64s, longs, check, margin,
                     slot_i, slot_j, group_slots)  # fmt: skip

    if kind == "slots":

        @jit
        def kernel(X, acc, ints, longs, f32s, f64s, bools, words, scale, slot_i, slot_j,
                   group_slots):  # fmt: skip
            """One warp per row: interaction values into the row's pair slots (int64)."""
            body(X, X, acc, slot_i, ints, longs, f32s, f64s, bools, words, False, scale, slot_i,
                 slot_j, group_slots)  # fmt: skip

    else:

        @jit
        def kernel(X, Xraw, out, flag, ints, longs, f32s, f64s, bools, words, check, scale):
            """One warp per row: the row's values (float32, bias included) and its check."""
            body(X, Xraw, out, flag, ints, longs, f32s, f64s, bools, words, check, scale, ints,
                 ints, longs)  # fmt: skip

    return kernel


shap_kernel = _make_kernel("shap")
interaction_kernel = _make_kernel("interactions")
slot_kernel = _make_kernel("slots")


# ------------------------------------------------------------------------------------------
# launching
# ------------------------------------------------------------------------------------------

_LAUNCHERS: OrderedDict = OrderedDict()  # (kernel, grid, stream handle) -> configured kernel
_STREAMS: dict = {}  # CuPy stream pointer -> its Numba stream
_LOCAL = threading.local()  # per thread: {device id: the mapped check flag}


def _stream():
    """The current CuPy stream as a Numba stream, made once per stream pointer."""
    if SIM:
        return 0
    import cupy

    ptr = cupy.cuda.get_current_stream().ptr
    s = _STREAMS.get(ptr)
    if s is None:
        s = _STREAMS[ptr] = stream()
    return s


def _grid_block(n_rows: int) -> tuple[int, int]:
    """Blocks and threads a block of the warp-per-row kernels for ``n_rows`` rows."""
    return max(1, min(-(-n_rows // _WARPS), _MAX_BLOCKS)), 32 * _WARPS


def _launcher(kernel, n_rows: int, s):
    """``kernel[grid, block, s]``, configured once per grid and stream (configuring costs host
    time and warns about small grids, which small inputs have by nature)."""
    grid, block = _grid_block(n_rows)
    key = (id(kernel), grid, getattr(s, "handle", s) if not SIM else 0)
    hit = _LAUNCHERS.get(key)
    if hit is None:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*under-utilization.*")
            hit = kernel[grid, block, s]
        with _LOCK:
            keep(_LAUNCHERS, key, hit, 64)
    return hit


def _flag():
    """This thread's check flag on the current device (mapped host memory, zero between
    calls): a call's kernel may set it, the same call reads and clears it."""
    flags = getattr(_LOCAL, "flags", None)
    if flags is None:
        flags = _LOCAL.flags = {}
    dev = device_id()
    f = flags.get(dev)
    if f is None:
        f = np.zeros(1, np.int32) if SIM else cuda.mapped_array(1, np.int32)
        f[0] = 0
        flags[dev] = f
    return f


def launch_small(sm: SmallModel, X, Xraw, out, interactions: bool, check: bool):
    """Run the SHAP or interaction small kernel on the device rows ``X`` (float32) into ``out``
    (``(n, G, F + 1)`` / ``(n, G, F + 1, F + 1)`` float32); with ``check``, each row's
    traversal of ``Xraw`` (the model's raw values, float32 or float64) too. Returns the flag
    and the stream for :func:`read_flag`."""
    kernel = interaction_kernel if interactions else shap_kernel
    s = _stream()
    flag = _flag()
    scale = sm.interaction_scale if interactions else sm.shap_scale
    cfg = _launcher(kernel, int(X.shape[0]), s)
    args = (X, Xraw, out, flag, sm.ints, sm.longs, sm.f32s, sm.f64s, sm.bools, sm.words,
            bool(check), float(scale))  # fmt: skip
    cfg(*args)
    return flag, s


def read_flag(flag, s) -> bool:
    """Whether a row of the launch failed the in-kernel check (waits for the stream); clears
    the flag."""
    if not SIM:
        s.synchronize()
    if flag[0] == 0:
        return False
    flag[0] = 0
    return True


def launch_slots(sm: SmallModel, X, acc, dev, s) -> None:
    """Interaction values of the rows ``X`` into their pair slots ``acc`` (int64 ``(n, S)``,
    zero on entry), for :func:`~distshap.kernels.cuda.launch.run_slot_batches`; ``dev`` is the
    model's :class:`~distshap.kernels.cuda.model.SlotArrays`."""
    if VARIANT == "gather" and sm.packed is not None:  # the integers of the gather matrices
        from distshap.kernels.cuda import small_gather

        gm = small_gather.gather_model(sm.packed)
        if small_gather.fits_shared(gm, True):
            small_gather.launch_gather_slots(gm, X, acc, dev, s)
            return
    _launcher(slot_kernel, int(X.shape[0]), s)(X, acc, sm.ints, sm.longs, sm.f32s, sm.f64s,
                                               sm.bools, sm.words, sm.interaction_scale,
                                               dev.slot_i, dev.slot_j, dev.group_slots)  # fmt: skip


# ------------------------------------------------------------------------------------------
# the merged-argument kernels: two constant arrays, no second copy of the rows, the DP
# unrolled for short paths (VARIANT; the kernels above stay selectable)
# ------------------------------------------------------------------------------------------

#: Which small kernels a call launches: ``"gather"`` (default, measured fastest on an H200:
#: ``benchmarks/RESULTS.md``) the block kernels of :mod:`.small_gather` (quadrature, no
#: division, fixed gathers instead of butterflies; the last bit may differ from the other
#: variants', as exact), for models whose row fits a block's shared memory (others: as
#: ``"unrolled"``); ``"unrolled"`` the merged-argument kernels
#: with the DP specialised to the model's longest path (at most :data:`UNROLL_MAX` features;
#: longer: as ``"merged"``); ``"merged"`` the merged-argument kernels with the DP loops of the
#: kernels above; ``"v1"`` the kernels above (twelve arguments). The same float64 operations
#: per contribution in these three, so the same float32 bits.
VARIANT = "gather"
#: The longest path (features) the unrolled DP is compiled for; longer paths: loops.
UNROLL_MAX = 4
#: Registers a thread the merged kernels are compiled within (0: the compiler's choice; the
#: same arithmetic, more warps resident; :mod:`benchmarks.small_models` times caps).
MAX_REGISTERS = 0

# header entries after the sections of _SECTIONS: where the category words start in the
# merged int64 array, where the two fixed-point scales start in the merged float64 array
H_WORDS = _HEADER
H_SCALES = _HEADER + 1
_HEADER2 = _HEADER + 2


def merged_arrays(packed: PackedModel) -> tuple[np.ndarray, np.ndarray]:
    """The six constant arrays of :func:`host_arrays` as two (the merged kernels' constants).

    ``I`` (int64): the header (the sections' offsets, :data:`H_WORDS`, :data:`H_SCALES`), then
    the ``ints``, ``longs`` and ``bools`` sections and the category words; ``D`` (float64):
    the ``f32s`` sections (float32 values, exact in float64), the ``f64s`` sections and the
    SHAP and interaction fixed-point scales. Every header offset indexes the merged array its
    section lies in (the kernels read ``I[I[H_FEATURE] + i]``, ``D[I[H_LOWER] + i]``...).
    """
    from distshap.kernels.cuda.model import _path_bounds, fixed_point_shift

    host = host_arrays(packed)
    old_header = host["longs"][:_HEADER]
    header = np.zeros(_HEADER2, np.int64)
    parts_i, parts_d = [header], []
    pos_i, pos_d = _HEADER2, 0
    for name, _, sections in _SECTIONS:  # each group's sections keep their order and sizes
        at = _AT[(name, sections[0])]
        starts = old_header[at : at + len(sections) + 1]  # offsets into the old group array
        body = host[name][int(starts[0]) : int(starts[-1])]
        if name in ("f32s", "f64s"):
            header[at : at + len(sections) + 1] = starts - starts[0] + pos_d
            parts_d.append(body.astype(np.float64))
            pos_d += body.size
        else:
            header[at : at + len(sections) + 1] = starts - starts[0] + pos_i
            parts_i.append(body.astype(np.int64))
            pos_i += body.size
    header[H_WORDS] = pos_i
    parts_i.append(host["words"].astype(np.int64))
    header[H_SCALES] = pos_d
    shap_bound, inter_bound = _path_bounds(packed)
    parts_d.append(np.array([2.0 ** fixed_point_shift(shap_bound),
                             2.0 ** fixed_point_shift(inter_bound)]))  # fmt: skip
    return np.concatenate(parts_i), np.concatenate(parts_d)


@dataclass(eq=False)
class MergedModel:
    """The merged kernels' two constant arrays on one device (:func:`merged_arrays`, copied
    once as Numba device arrays: cheap kernel arguments), the unrolled DP's path length ``K``
    (0: loops) and the model's sizes."""

    I: object  # noqa: E741
    D: object
    K: int
    num_features: int
    num_groups: int


def merged_model(packed: PackedModel) -> MergedModel:
    """The :class:`MergedModel` of ``packed`` on the current device (a form of its device
    model, as :func:`small_model`)."""
    from distshap.kernels.cuda.model import device_model

    return device_model(packed).form("small merged", lambda: _build_merged_model(packed))


def _build_merged_model(packed: PackedModel) -> MergedModel:
    I, D = merged_arrays(packed)  # noqa: E741
    to_device = (lambda a: a) if SIM else cuda.to_device
    longest = longest_path(packed)
    return MergedModel(
        I=to_device(I), D=to_device(D), K=max(1, longest) if longest <= UNROLL_MAX else 0,
        num_features=packed.num_features, num_groups=packed.num_groups,
    )  # fmt: skip


def _make_dp(K: int):
    """EXTEND and UNWOUND_SUM for paths of at most ``K`` features, loops of constant trip
    counts (unrolled, the local arrays kept in registers): the operations of
    :func:`~distshap.kernels.treeshap.extend_path` (elements ``1..k`` but ``skip``) and
    :func:`~distshap.kernels.treeshap.unwound_sum`, in their order, on the same values."""

    @cuda.jit(device=True)
    def extend(w, zero, one, k, skip):
        w[0] = 1.0
        for i in range(1, K + 1):  # w[depth] = 0.0 of each step: not written before it
            w[i] = 0.0
        depth = 0
        for e in range(1, K + 1):
            if e <= k and e != skip:
                depth += 1
                zero_fraction = zero[e]
                one_fraction = one[e]
                scale = 1.0 / (depth + 1)
                for i in range(K - 1, -1, -1):
                    if i < depth:
                        w[i + 1] += one_fraction * w[i] * (i + 1) * scale
                        w[i] = zero_fraction * w[i] * (depth - i) * scale
        return depth

    @cuda.jit(device=True)
    def unwound(w, depth, zero_fraction, one_fraction):
        total = 0.0
        if one_fraction != 0.0:
            next_one = w[0]
            for d in range(1, K + 1):
                if d == depth:
                    next_one = w[d]
            for j in range(K - 1, -1, -1):
                if j < depth:
                    tmp = next_one * (depth + 1) / ((j + 1) * one_fraction)
                    total += tmp
                    next_one = w[j] - tmp * zero_fraction * (depth - j) / (depth + 1)
        elif zero_fraction != 0.0:
            for j in range(K - 1, -1, -1):
                if j < depth:
                    total += w[j] * (depth + 1) / (zero_fraction * (depth - j))
        return total

    return extend, unwound


def _make_add_path(K: int, interactions: bool):
    """Path ``p``'s float64 contributions for row ``r`` into this lane's ``acc`` (the
    operations of :func:`_add_path`), on the merged arrays; ``K`` > 0: the unrolled DP for
    paths of at most ``K`` features, 0: the loops of :func:`_add_path`."""
    N = K if K else SMALL_MAX_PATH_FEATURES  # the elements' loop bound
    if K:
        extend, unwound = _make_dp(K)
    else:

        @cuda.jit(device=True)
        def extend(w, zero, one, k, skip):
            return extend_path(w, zero, one, 1, k + 1, skip)

        unwound = unwound_sum

    @cuda.jit(device=True)
    def add_path(p, X, r, I, D, words, acc, n_cols, w, zero, one, diag):  # noqa: E741
        s0 = I[I[H_PATH_OFFSETS] + p]
        k = I[I[H_PATH_OFFSETS] + p + 1] - s0 - 1
        v = D[I[H_VALUE] + p]
        for i in range(1, N + 1):
            if i <= k:
                li = s0 + i
                zero[i] = D[I[H_ZERO] + li]
                diag[i] = 0.0
                one[i] = 0.0
                if follows(X[r, I[I[H_FEATURE] + li]], np.float32(D[I[H_LOWER] + li]),
                           np.float32(D[I[H_UPPER] + li]), I[I[H_MISSING] + li] != 0,
                           I[I[H_CAT_OTHER] + li] != 0, I[I[H_CAT_OFFSETS] + li],
                           I[I[H_NBITS] + li], words):  # fmt: skip
                    one[i] = 1.0
        for c in range(0, (N if interactions else 0) + 1):
            if c <= k:
                scale_c = 1.0 if c == 0 else 0.5 * (one[c] - zero[c])
                if scale_c != 0.0:
                    depth = extend(w, zero, one, k, c)
                    fc = I[I[H_FEATURE] + s0 + c]
                    for i in range(1, N + 1):
                        if i <= k and i != c and one[i] != zero[i]:
                            phi = (unwound(w, depth, zero[i], one[i]) * (one[i] - zero[i]) * v
                                   * scale_c)  # fmt: skip
                            fi = I[I[H_FEATURE] + s0 + i]
                            if not interactions:
                                acc[fi] += phi
                            elif c == 0:
                                diag[i] += phi
                            else:
                                diag[i] -= phi
                                acc[fc * n_cols + fi] += phi
        if interactions:
            for i in range(1, N + 1):
                if i <= k:
                    fi = I[I[H_FEATURE] + s0 + i]
                    acc[fi * n_cols + fi] += diag[i]

    return add_path


@cuda.jit(device=True)
def _leaf_merged(X, r, node, I, D, missing):  # noqa: E741
    """:func:`distshap.kernels.margin._leaf` on the merged arrays (the same comparisons)."""
    left = I[I[H_LEFT] : I[H_LEFT + 1]]
    right = I[I[H_RIGHT] : I[H_RIGHT + 1]]
    feature = I[I[H_NODE_FEATURE] : I[H_NODE_FEATURE + 1]]
    default_left = I[I[H_DEFAULT_LEFT] : I[H_DEFAULT_LEFT + 1]]
    is_categorical = I[I[H_IS_CATEGORICAL] : I[H_IS_CATEGORICAL + 1]]
    cat_offsets = I[I[H_NODE_CAT_OFFSETS] : I[H_NODE_CAT_OFFSETS + 1]]
    cat_values = I[I[H_CAT_VALUES] : I[H_CAT_VALUES + 1]]
    threshold = D[I[H_THRESHOLD] : I[H_THRESHOLD + 1]]
    while left[node] >= 0:
        x = X[r, feature[node]]
        if math.isnan(x) or np.float32(x) == missing:
            go_left = default_left[node] != 0
        elif is_categorical[node] != 0:
            go_left = True
            if x >= 0.0:
                code = int(x)
                for i in range(cat_offsets[node], cat_offsets[node + 1]):
                    if cat_values[i] == code:
                        go_left = False
        else:
            go_left = x < threshold[node]
        node = left[node] if go_left else right[node]
    return node


def _make_merged_emit(interactions: bool):
    """:func:`_make_emit`'s ``emit`` reading the expected values from ``D``."""
    emit = _make_emit(_store_interaction if interactions else _store_shap, interactions)

    @cuda.jit(device=True)
    def emit_merged(acc, out, flag, r, g, lane, n_cols, scale, D, I, check, margin):  # noqa: E741
        emit(acc, out, flag, r, g, lane, n_cols, scale, D, I, check, margin, I, I, I)

    return emit_merged


_MERGED_KERNELS: dict = {}  # (kind, K, raw) -> kernel


def merged_kernel(kind: str, K: int, raw: bool, max_registers: int = 0):
    """The merged-argument small kernel: ``kind`` ``"shap"`` or ``"interactions"``, the DP
    unrolled for paths of at most ``K`` features (0: loops), ``raw``: the check traverses a
    second array of raw values (else the rows themselves); made once per arguments."""
    key = (kind, int(K), bool(raw), int(max_registers))
    hit = _MERGED_KERNELS.get(key)
    if hit is None:
        hit = _MERGED_KERNELS[key] = _make_merged_kernel(*key)
    return hit


def _make_merged_kernel(kind: str, K: int, raw: bool, max_registers: int = 0):
    options = {"max_registers": max_registers} if max_registers else {}
    jit = cuda.jit(cache=True, **options)
    interactions = kind != "shap"
    acc_size = _INTER_ACC if interactions else _SHAP_ACC
    n_el = (K if K else SMALL_MAX_PATH_FEATURES) + 1  # local array sizes: constants
    n_w = n_el + 1
    add_path = _make_add_path(K, interactions)
    emit = _make_merged_emit(interactions)
    scale_at = 1 if interactions else 0
    regs = int(max_registers)  # in the kernels' closures (Numba's cache keys hash them)

    @cuda.jit(device=True)
    def body(X, Xraw, out, flag, I, D, check):  # noqa: E741
        lane = cuda.threadIdx.x & 31
        warp = (cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x) >> 5
        n_warps = (cuda.gridDim.x * cuda.blockDim.x) >> 5
        n_cols = X.shape[1] + 1
        width = n_cols * n_cols if interactions else n_cols
        acc = cuda.local.array(acc_size, np.float64)
        w = cuda.local.array(n_w, np.float64)
        zero = cuda.local.array(n_el, np.float64)
        one = cuda.local.array(n_el, np.float64)
        diag = cuda.local.array(n_el, np.float64)
        margin = cuda.local.array((1, SMALL_MAX_GROUPS), np.float64)
        scale = D[I[H_SCALES] + scale_at]
        words = I[I[H_WORDS] :]
        paths = I[I[H_PATHS] : I[H_PATHS + 1]]
        group_paths = I[I[H_GROUP_PATHS] : I[H_GROUP_PATHS + 1]]
        n_groups = group_paths.shape[0] - 1
        for r in range(warp, X.shape[0], n_warps):  # the same rows in every lane of the warp
            if check:  # this lane's trees, by the independent traversal of the raw values
                roots = I[I[H_ROOTS] : I[H_ROOTS + 1]]
                tree_group = I[I[H_TREE_GROUP] : I[H_TREE_GROUP + 1]]
                leaf_value = D[I[H_LEAF_VALUE] : I[H_LEAF_VALUE + 1]]
                base = H_BASE_SCORE if lane == 0 else H_ZEROS
                for g in range(n_groups):
                    margin[0, g] = D[I[base] + g]
                missing = np.float32(D[I[H_MISSING_VALUE]])
                for t in range(lane, roots.shape[0], 32):
                    node = _leaf_merged(Xraw, r, roots[t], I, D, missing)
                    margin[0, tree_group[t]] += leaf_value[node]
            for g in range(n_groups):
                for e in range(width):
                    acc[e] = 0.0
                for j in range(group_paths[g] + lane, group_paths[g + 1], 32):
                    add_path(paths[j], X, r, I, D, words, acc, n_cols, w, zero, one, diag)
                emit(acc, out, flag, r, g, lane, n_cols, scale, D, I, check, margin)

    if raw:

        @jit
        def kernel(X, Xraw, out, flag, I, D, check):  # noqa: E741
            """One warp per row: the row's values (float32, bias included) and its check of
            the raw values ``Xraw``."""
            if regs >= 0:  # always: ``regs`` keys the on-disk cache by the register cap
                body(X, Xraw, out, flag, I, D, check)

    else:

        @jit
        def kernel(X, out, flag, I, D, check):  # noqa: E741
            """One warp per row: the row's values (float32, bias included) and its check
            (the rows are the raw values)."""
            if regs >= 0:  # always: ``regs`` keys the on-disk cache by the register cap
                body(X, X, out, flag, I, D, check)

    return kernel


def launch_merged(mm: MergedModel, X, Xraw, out, interactions: bool, check: bool):
    """:func:`launch_small` with the merged kernels (``Xraw`` ``None`` or ``X`` itself: the
    rows are the raw values, one argument fewer); returns the flag and the stream. Launched
    through the driver where :data:`.rawlaunch.ENABLED` (the same kernel and bits)."""
    if VARIANT not in ("merged", "unrolled", "gather"):
        raise ValueError(f"small.VARIANT must be one of {VARIANTS}, got {VARIANT!r}")
    kind = "interactions" if interactions else "shap"
    raw = Xraw is not None and Xraw is not X
    K = 0 if VARIANT == "merged" else mm.K  # "gather" falls back here: the unrolled kernels
    kernel = merged_kernel(kind, K, raw, MAX_REGISTERS)
    flag = _flag()
    args = (X, Xraw, out) if raw else (X, out)
    args = (*args, flag, mm.I, mm.D, bool(check))
    if not SIM:
        from distshap.kernels.cuda import rawlaunch

        if rawlaunch.ENABLED:
            s = rawlaunch.current_stream()
            grid, block = _grid_block(int(X.shape[0]))
            key = ("merged", kind, K, MAX_REGISTERS, Xraw.dtype.char if raw else "")
            if rawlaunch.launch(kernel, key, grid, block, 0, args, s):
                return flag, s
    s = _stream()
    _launcher(kernel, int(X.shape[0]), s)(*args)
    return flag, s


#: The values :data:`VARIANT` takes.
VARIANTS = ("v1", "merged", "unrolled", "gather")


def route(packed: PackedModel, interactions: bool):
    """``(launch, model)`` of :data:`VARIANT` for ``packed`` (a model that
    :func:`~distshap.plan.routes.small_fits`):
    :func:`launch_small` and :func:`small_model` (``"v1"``), :func:`launch_merged` and
    :func:`merged_model` (``"merged"``, ``"unrolled"``, and ``"gather"`` where a row of the
    model does not fit a block's shared memory), or the gather kernels of
    :mod:`.small_gather`. A function of the packed model and the module's settings only."""
    if VARIANT == "gather":
        from distshap.kernels.cuda import small_gather

        gm = small_gather.gather_model(packed)
        if small_gather.fits_shared(gm, interactions):
            return small_gather.launch_gather, gm
        return launch_merged, merged_model(packed)
    if VARIANT == "v1":
        return launch_small, small_model(packed)
    if VARIANT in ("merged", "unrolled"):
        return launch_merged, merged_model(packed)
    raise ValueError(f"small.VARIANT must be one of {VARIANTS}, got {VARIANT!r}")
