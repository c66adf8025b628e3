"""The model's margin by plain tree traversal: the independent side of the additivity check.

SHAP values of a row sum to the model's margin. This module computes that margin without any
of the SHAP machinery (no paths, packing, encoding or fixed point): each row walks every tree
of the :class:`~distshap.models.Ensemble` from its root, comparing the model's raw input values
in the model's own precision (float64 thresholds where the model has them; float32 values and
thresholds otherwise, held exactly in float64), so a fault anywhere upstream shows as a
difference. One traversal function (:func:`_leaf`: a row's leaf in one tree), compiled for the
CPU (``njit``, parallel over rows) and, on first use, for the GPU (``cuda.jit``).

Summation: a row's margin of output group ``g`` is ``base_score[g]`` plus the leaf values of
the group's trees added one by one in tree order, in float64, on every target and launch, so
CPU and GPU margins (and the interventional outputs made from them) have the same bits. On the
GPU the traversals, which are what takes time, run in parallel and only that sum is serial:

* few rows: a block of threads per row; its threads
  walk a tile of trees at a time (one tree each) and put the leaf values in shared memory,
  where one thread per group adds them in tree order while the block walks the next tile;
* many rows: one thread per row walking every tree (rows fill the GPU).

The two give the same bits, so the choice changes the time only. The GPU kernels, and the
additivity check run in the traversal's launch, are in :mod:`distshap.kernels.cuda.traversal`.

Device copies: the model's arrays go to each GPU once, packed in four arrays (32- and 64-bit
integers, float64, bool; sections addressed by a header), as Numba device arrays: few kernel
arguments, each cheap to pass (:mod:`distshap.kernels.cuda.args`).
"""

from __future__ import annotations

import math
import threading
import weakref
from typing import Any

import numpy as np
from numba import njit

from distshap.inputs import array_module
from distshap.parallel import run_ranges

__all__ = ["MarginModel", "device_arrays", "margin_model", "packed_arrays", "predict_margin"]

MarginModel = dict  # name -> NumPy array; plain data, pickled with the packed model


def margin_model(ensemble: Any) -> MarginModel:
    """The node arrays the traversal reads, from an :class:`~distshap.models.Ensemble`."""
    thresholds = ensemble.threshold64
    if thresholds is None:
        thresholds = ensemble.threshold.astype(np.float64)  # float32 values, held exactly
    return {
        "left": np.ascontiguousarray(ensemble.left, np.int32),
        "right": np.ascontiguousarray(ensemble.right, np.int32),
        "feature": np.ascontiguousarray(ensemble.feature, np.int32),
        "threshold": np.ascontiguousarray(thresholds, np.float64),
        "default_left": np.ascontiguousarray(ensemble.default_left, np.bool_),
        "is_categorical": np.ascontiguousarray(ensemble.is_categorical, np.bool_),
        "cat_offsets": np.ascontiguousarray(ensemble.cat_offsets, np.int64),
        "cat_values": np.ascontiguousarray(np.append(ensemble.cat_values, -1), np.int32),
        "value": np.ascontiguousarray(ensemble.value, np.float64),
        "roots": np.ascontiguousarray(ensemble.tree_offsets[:-1], np.int64),
        "tree_group": np.ascontiguousarray(ensemble.tree_group, np.int32),
        "base_score": np.ascontiguousarray(ensemble.base_score, np.float64),
        "missing": np.array([ensemble.missing_value], np.float32),
    }


def predict_margin(model: MarginModel, X: Any) -> Any:
    """Margin ``(n, G)`` float64 of the rows of ``X`` (NumPy: CPU; CuPy: GPU, CuPy out).

    ``X`` holds the model's raw feature values (:func:`distshap.inputs.model_matrix`): float64
    for models that compare in float64, float32 otherwise.
    """
    n, groups = X.shape[0], model["base_score"].shape[0]
    xp = array_module(X)
    X = xp.ascontiguousarray(X)  # float32 values compare exactly with the float64 thresholds
    if xp is np:
        out = np.zeros((n, groups), dtype=np.float64)
        run_ranges(_cpu_margin, n, 16, X, *(model[a] for a in _ARGS), out)
        return out
    from distshap.kernels.cuda.traversal import gpu_margin

    out = xp.empty((n, groups), dtype=xp.float64)
    gpu_margin(model, X, out)
    return out


_ARGS = ("left", "right", "feature", "threshold", "default_left", "is_categorical", "cat_offsets",
         "cat_values", "value", "roots", "tree_group", "base_score", "missing")  # fmt: skip


def _leaf(X, r, node, left, right, feature, threshold, default_left, is_categorical,
          cat_offsets, cat_values, missing):  # fmt: skip
    """The leaf row ``r`` of ``X`` reaches from ``node`` (a tree's root); ``missing`` is the
    model's float32 missing value."""
    while left[node] >= 0:
        x = X[r, feature[node]]
        if math.isnan(x) or np.float32(x) == missing:
            go_left = default_left[node]
        elif is_categorical[node]:
            # listed categories go right; other values (and negative codes) go left
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


_leaf_cpu = njit(inline="always", nogil=True, cache=True)(_leaf)


@njit(nogil=True, cache=True)  # serial over rows lo..hi-1: run_ranges runs it in threads
def _cpu_margin(X, left, right, feature, threshold, default_left, is_categorical, cat_offsets,
                cat_values, value, roots, tree_group, base_score, missing, out, lo,
                hi):  # fmt: skip
    m = missing[0]
    for r in range(lo, hi):
        for g in range(base_score.shape[0]):
            out[r, g] = base_score[g]
        for t in range(roots.shape[0]):
            node = _leaf_cpu(X, r, roots[t], left, right, feature, threshold, default_left,
                             is_categorical, cat_offsets, cat_values, m)  # fmt: skip
            out[r, tree_group[t]] += value[node]


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


def packed_arrays(model: MarginModel) -> dict:
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


# id(model["left"]) -> (weak reference to that array, {device id: the model's device arrays});
# an entry leaves with its array (ndarrays are unhashable, so no WeakKeyDictionary)
_DEVICE_COPIES: dict[int, tuple[weakref.ref, dict]] = {}
_DEVICE_LOCK = threading.Lock()


def device_arrays(model: MarginModel) -> tuple:
    """``(ints, longs, f64s, bools)`` of :func:`packed_arrays` on the current GPU (Numba
    device arrays; NumPy under the simulator), copied once per model and device."""
    from distshap.kernels.cuda.device import SIM, device_id

    if SIM:
        host = packed_arrays(model)
        return tuple(host[name] for name, _, _ in _SECTIONS)
    device = device_id()
    anchor = model["left"]
    with _DEVICE_LOCK:
        entry = _DEVICE_COPIES.get(id(anchor))
        if entry is None or entry[0]() is not anchor:
            entry = (weakref.ref(anchor), {})
            _DEVICE_COPIES[id(anchor)] = entry
            weakref.finalize(anchor, _DEVICE_COPIES.pop, id(anchor), None)
        per_device = entry[1]
        if device not in per_device:
            from numba import cuda

            host = packed_arrays(model)
            per_device[device] = tuple(cuda.to_device(host[name]) for name, _, _ in _SECTIONS)
        return per_device[device]
