"""The small-model route's forms of a model: constant arrays on the device, the check flag.

A small model (:func:`distshap.plan.routes.small_fits`) is explained in one launch (:mod:`.small`).
Its constants (paths sorted by group, the margin arrays) sit in few device arrays with a header
of section offsets, since each kernel argument costs host time at every launch:

* :func:`host_arrays`: six arrays by element type (``ints``, ``longs``, ``f32s``, ``f64s``,
  ``bools``, ``words``), the header at the start of ``longs``; the pair-slot kernel reads them
  (:class:`SmallModel`);
* :func:`merged_arrays`: the same sections in two arrays (int64 and float64; float32 and bool
  widened exactly) with the fixed-point scales inside, for the warp-per-row and gather kernels
  (:class:`MergedModel`).

Both are forms of the model's :class:`~.model.DeviceModel`, copied once per device and
configuration. :class:`SmallLimits` are the route's compiled sizes, read from the
configuration at launch; :func:`check_flag` and :func:`read_flag` carry the in-kernel
additivity check's verdict through mapped host memory.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from numba import cuda

from distshap.kernels.cuda.runtime.device import SIM, device_id, stream
from distshap.kernels.cuda.runtime.model import device_model
from distshap.packed import PackedModel
from distshap.plan.config import get_config
from distshap.plan.gpu import fixed_point_shift, path_bounds
from distshap.plan.routes import longest_path

__all__ = [
    "H_SCALES", "H_WORDS", "MergedModel", "SmallLimits", "SmallModel", "UNROLL_MAX",
    "check_flag", "host_arrays", "merged_arrays", "merged_model", "read_flag", "small_limits",
    "small_model", "small_stream",
]  # fmt: skip

#: The longest path (features) the warp-per-row kernels unroll their DP for; longer: loops.
UNROLL_MAX = 4


class SmallLimits(NamedTuple):
    """The small kernels' compiled sizes (their local arrays), from the configuration."""

    path_features: int
    shap_columns: int
    interaction_columns: int
    groups: int


def small_limits() -> SmallLimits:
    """The :class:`SmallLimits` of the configuration in force (they key the kernels)."""
    c = get_config()
    return SmallLimits(c.small_max_path_features, c.small_max_shap_columns,
                       c.small_max_interaction_columns, c.small_max_groups)  # fmt: skip


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


def small_model(packed: PackedModel) -> SmallModel:
    """The :class:`SmallModel` of ``packed`` on the current device (a form of its
    :class:`~.model.DeviceModel`, built on first use)."""
    return device_model(packed).form("small", lambda: _build_small_model(packed))


def _build_small_model(packed: PackedModel) -> SmallModel:
    shap_bound, inter_bound = path_bounds(packed)
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
    shap_bound, inter_bound = path_bounds(packed)
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
    return device_model(packed).form("small merged", lambda: _build_merged_model(packed))


def _build_merged_model(packed: PackedModel) -> MergedModel:
    I, D = merged_arrays(packed)  # noqa: E741
    to_device = (lambda a: a) if SIM else cuda.to_device
    longest = longest_path(packed)
    return MergedModel(
        I=to_device(I), D=to_device(D), K=max(1, longest) if longest <= UNROLL_MAX else 0,
        num_features=packed.num_features, num_groups=packed.num_groups,
    )  # fmt: skip


_STREAMS: dict = {}  # CuPy stream pointer -> its Numba stream
_LOCAL = threading.local()  # per thread: {device id: the mapped check flag}


def small_stream():
    """The current CuPy stream as a Numba stream, made once per stream pointer."""
    if SIM:
        return 0
    import cupy

    ptr = cupy.cuda.get_current_stream().ptr
    s = _STREAMS.get(ptr)
    if s is None:
        s = _STREAMS[ptr] = stream()
    return s


def check_flag():
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


def read_flag(flag, s) -> bool:
    """Whether a row of the launch failed the in-kernel check (waits for the stream); clears
    the flag."""
    if not SIM:
        s.synchronize()
    if flag[0] == 0:
        return False
    flag[0] = 0
    return True
