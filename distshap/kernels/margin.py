"""The model's margin by plain tree traversal: the independent side of the additivity check.

SHAP values of a row sum to the model's margin. This module computes that margin without any
of the SHAP machinery (no paths, packing, encoding or fixed point): each row walks every tree
of the :class:`~distshap.models.Ensemble` from its root, comparing the model's raw input values
in the model's own precision (float64 thresholds where the model has them; float32 values and
thresholds otherwise, held exactly in float64), so a fault anywhere upstream shows as a
difference. One traversal function, compiled for the CPU (``njit``, parallel over rows) and, on
first use, for the GPU (``cuda.jit``, one thread per row).
"""

from __future__ import annotations

import math
import threading
import weakref
from functools import cache
from typing import Any

import numpy as np
from numba import njit

from distshap.inputs import array_module
from distshap.kernels.parallel import run_ranges

__all__ = ["MarginModel", "margin_model", "predict_margin"]

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


_ARGS = ("left", "right", "feature", "threshold", "default_left", "is_categorical", "cat_offsets",
         "cat_values", "value", "roots", "tree_group", "base_score", "missing")  # fmt: skip


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
    from distshap.kernels.cuda.device import stream

    device = _device_arrays(model)
    out = xp.zeros((n, groups), dtype=xp.float64)
    if n:
        threads = 128  # on CuPy's current stream, where X and out were made
        _cuda_kernel()[(n + threads - 1) // threads, threads, stream()](
            X, *(device[a] for a in _ARGS), out
        )
    return out


def _row_margin(X, r, left, right, feature, threshold, default_left, is_categorical, cat_offsets,
                cat_values, value, roots, tree_group, base_score, missing, out):  # fmt: skip
    """Walk every tree for row ``r`` and add the leaves' values to ``out[r]`` (both targets)."""
    for g in range(base_score.shape[0]):
        out[r, g] = base_score[g]
    for t in range(roots.shape[0]):
        node = roots[t]
        while left[node] >= 0:
            x = X[r, feature[node]]
            if math.isnan(x) or np.float32(x) == missing[0]:
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
        out[r, tree_group[t]] += value[node]


_row_margin_cpu = njit(inline="always", nogil=True, cache=True)(_row_margin)


@njit(nogil=True, cache=True)  # serial over rows lo..hi-1: run_ranges runs it in threads
def _cpu_margin(X, left, right, feature, threshold, default_left, is_categorical, cat_offsets,
                cat_values, value, roots, tree_group, base_score, missing, out, lo,
                hi):  # fmt: skip
    for r in range(lo, hi):
        _row_margin_cpu(X, r, left, right, feature, threshold, default_left, is_categorical,
                        cat_offsets, cat_values, value, roots, tree_group, base_score, missing,
                        out)  # fmt: skip


@cache
def _cuda_kernel():
    """The GPU traversal, compiled on first use (no CUDA at import time)."""
    from numba import cuda

    row_margin = cuda.jit(device=True)(_row_margin)

    @cuda.jit(cache=True)
    def kernel(X, left, right, feature, threshold, default_left, is_categorical, cat_offsets,
               cat_values, value, roots, tree_group, base_score, missing, out):  # fmt: skip
        r = cuda.grid(1)
        if r < X.shape[0]:
            row_margin(X, r, left, right, feature, threshold, default_left, is_categorical,
                       cat_offsets, cat_values, value, roots, tree_group, base_score, missing,
                       out)  # fmt: skip

    return kernel


# id(model["left"]) -> (weak reference to that array, {device id: the model's device arrays});
# an entry leaves with its array (ndarrays are unhashable, so no WeakKeyDictionary)
_DEVICE_COPIES: dict[int, tuple[weakref.ref, dict]] = {}
_DEVICE_LOCK = threading.Lock()


def _device_arrays(model: MarginModel) -> dict:
    """The model's arrays on the current GPU, copied once per model and device."""
    import cupy

    device = cupy.cuda.Device().id
    anchor = model["left"]
    with _DEVICE_LOCK:
        entry = _DEVICE_COPIES.get(id(anchor))
        if entry is None or entry[0]() is not anchor:
            entry = (weakref.ref(anchor), {})
            _DEVICE_COPIES[id(anchor)] = entry
            weakref.finalize(anchor, _DEVICE_COPIES.pop, id(anchor), None)
        per_device = entry[1]
        if device not in per_device:
            per_device[device] = {a: cupy.asarray(model[a]) for a in _ARGS}
        return per_device[device]
