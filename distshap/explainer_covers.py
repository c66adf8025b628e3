"""Tree covers counted from data: shap's ``tree_path_dependent`` explainer with background rows.

``shap.TreeExplainer(model, data, feature_perturbation="tree_path_dependent")`` does not use the
trees' training covers: it weights every node by the number of ``data`` rows that reach it, and
explains the tree-path-dependent game of those weights. A node no row reaches would weigh 0,
which TreeSHAP's path weights divide by; shap gives such nodes the weight ``1e-6`` instead (so
they weigh next to nothing beside the counts), and so does :func:`data_covers`: the values are
then shap's, and its ``expected_value`` is the mean prediction over the rows, up to those
nodes' ``1e-6`` share.

The rows walk the trees by the additivity check's own traversal
(:func:`distshap.kernels.margin._leaf`: the model's precision, missing values and categories);
leaves count their rows, and every inner node the sum of its children's counts.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
from numba import njit

from distshap.kernels.margin import _leaf_cpu
from distshap.models import Ensemble

__all__ = ["UNREACHED_COVER", "data_covers", "node_counts"]

#: The cover of a node no data row reaches (shap's value for it).
UNREACHED_COVER = 1e-6


@njit(nogil=True, cache=True)
def _leaf_counts(X, left, right, feature, threshold, default_left, is_categorical, cat_offsets,
                 cat_values, roots, missing, counts):  # fmt: skip
    m = missing[0]
    for r in range(X.shape[0]):
        for t in range(roots.shape[0]):
            node = _leaf_cpu(X, r, roots[t], left, right, feature, threshold, default_left,
                             is_categorical, cat_offsets, cat_values, m)  # fmt: skip
            counts[node] += 1.0


def node_counts(margin: dict, left: np.ndarray, right: np.ndarray, X: np.ndarray) -> np.ndarray:
    """The number of rows of ``X`` that reach each node (float64 ``(n_nodes,)``).

    Parameters
    ----------
    margin : dict
        The model's traversal arrays (:func:`distshap.kernels.margin.margin_model`).
    left, right : ndarray
        Child indices of every node (``-1`` at leaves), as in the :class:`Ensemble`.
    X : ndarray
        ``(n, F)`` rows holding the model's raw values (:func:`distshap.inputs.model_matrix`).
    """
    counts = np.zeros(left.shape[0], dtype=np.float64)
    args = ("left", "right", "feature", "threshold", "default_left", "is_categorical",
            "cat_offsets", "cat_values", "roots", "missing")  # fmt: skip
    _leaf_counts(np.ascontiguousarray(X), *(margin[a] for a in args), counts)
    # inner nodes: the sum of their children, deepest level first
    inner = np.flatnonzero(left >= 0)
    parent = np.full(left.shape[0], -1, dtype=np.int64)
    parent[left[inner]] = inner
    parent[right[inner]] = inner
    levels = [margin["roots"]]
    while True:
        nodes = levels[-1]
        nodes = nodes[left[nodes] >= 0]
        if nodes.size == 0:
            break
        levels.append(np.concatenate([left[nodes], right[nodes]]).astype(np.int64))
    for nodes in reversed(levels[1:]):
        np.add.at(counts, parent[nodes], counts[nodes])
    return counts


def data_covers(ensemble: Ensemble, margin: dict, X: Any) -> Ensemble:
    """``ensemble`` with each node's cover replaced by the count of the rows of ``X`` that reach
    it (:data:`UNREACHED_COVER` where none does), as shap weights trees by background data.

    Parameters
    ----------
    ensemble : Ensemble
        The model.
    margin : dict
        Its traversal arrays (``PackedModel.margin``).
    X : ndarray
        ``(n, F)`` background rows, the model's raw values (``model_matrix``), ``n >= 1``.
    """
    counts = node_counts(margin, ensemble.left, ensemble.right, np.asarray(X))
    counts[counts == 0.0] = UNREACHED_COVER
    return replace(ensemble, cover=counts)
