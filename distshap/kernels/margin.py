"""The model's margin by plain tree traversal: the independent side of the additivity check.

SHAP values of a row sum to the model's margin. This module computes that margin without any
of the SHAP machinery (no paths, packing, encoding or fixed point): each row walks every tree
of the :class:`~distshap.models.Ensemble` from its root, comparing the model's raw input values
in the model's own precision (float64 thresholds where the model has them; float32 values and
thresholds otherwise, held exactly in float64), so a fault anywhere upstream shows as a
difference. One traversal function (:func:`distshap.kernels.treeshap.leaf`: a row's leaf in
one tree), compiled for the CPU (``njit``, parallel over rows) and for the GPU (``cuda.jit``).

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
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from distshap.inputs import array_module
from distshap.kernels.treeshap import leaf
from distshap.packed import PackedModel
from distshap.parallel import run_ranges

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


def predict_margin(packed: PackedModel, X: Any) -> Any:
    """Margin ``(n, G)`` float64 of the rows of ``X`` under ``packed.margin`` (NumPy: CPU;
    CuPy: GPU, CuPy out, the margin arrays a form of the packed model's device model).

    ``X`` holds the model's raw feature values (:func:`distshap.inputs.model_matrix`): float64
    for models that compare in float64, float32 otherwise.
    """
    model = packed.margin
    n, groups = X.shape[0], model["base_score"].shape[0]
    xp = array_module(X)
    X = xp.ascontiguousarray(X)  # float32 values compare exactly with the float64 thresholds
    if xp is np:
        out = np.zeros((n, groups), dtype=np.float64)
        run_ranges(_cpu_margin, n, 16, X, *(model[a] for a in _ARGS), out)
        return out
    from distshap.kernels.cuda.traversal import gpu_margin

    out = xp.empty((n, groups), dtype=xp.float64)
    gpu_margin(packed, X, out)
    return out


_ARGS = ("left", "right", "feature", "threshold", "default_left", "is_categorical", "cat_offsets",
         "cat_values", "value", "roots", "tree_group", "base_score", "missing")  # fmt: skip


_leaf_cpu = njit(inline="always", nogil=True, cache=True)(leaf)


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
