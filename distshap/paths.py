"""Ensemble -> unique root-to-leaf paths with duplicate features merged (paper §3.1-3.2).

A path of ``k`` distinct features has ``k`` elements, sorted by feature. The bias (root)
element of the paper is implicit here (feature -1, zero and one fraction 1); the packing stage
adds it back as the first lane of each path because the warp DP needs a lane for it.

An element says which values of its feature follow the path:

* numeric: ``lower <= x < upper`` (float32; ``-inf`` / ``+inf`` where unbounded);
* categorical (``cat_offsets[e] >= 0``): the code ``c = int(x)`` follows when
  ``0 <= c < cat_nbits[e]`` and bit ``c`` of ``cat_words[cat_offsets[e]:]`` is set, or when
  ``c`` is outside ``[0, cat_nbits[e])`` and ``cat_other[e]`` is true;
* a missing value (NaN) follows when ``missing[e]`` is true.

``zero_fraction`` is the product over the merged splits of cover(child) / cover(parent).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from distshap.models.ensemble import Ensemble

__all__ = ["Paths", "extract_paths"]


@dataclass(frozen=True, eq=False)
class Paths:
    """Merged unique paths as a struct of arrays (elements of one path are contiguous).

    Attributes
    ----------
    path_offsets : int64 (n_paths + 1,)
        Element range of each path.
    path_value : float64 (n_paths,)
        Leaf value ``v`` of the path (margin space).
    path_group : int32 (n_paths,)
        Output group of the path's tree.
    path_tree : int32 (n_paths,)
        Tree index of the path.
    feature : int32 (n_elements,)
    lower, upper : float32 (n_elements,)
    missing : bool (n_elements,)
    zero_fraction : float64 (n_elements,)
    cat_offsets : int64 (n_elements,)
        Start word in ``cat_words`` of a categorical element, ``-1`` for numeric ones.
    cat_nbits : int32 (n_elements,)
        Number of category bits of a categorical element (0 for numeric).
    cat_other : bool (n_elements,)
        Whether codes outside ``[0, cat_nbits)`` follow a categorical element.
    cat_words : uint32 (n_words,)
        Category bitsets, 32 codes per word.
    num_features, num_groups : int
    expected_value : float64 (num_groups,)
        Base score plus the cover-weighted mean prediction: the bias column of SHAP outputs.
    """

    path_offsets: np.ndarray
    path_value: np.ndarray
    path_group: np.ndarray
    path_tree: np.ndarray
    feature: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    missing: np.ndarray
    zero_fraction: np.ndarray
    cat_offsets: np.ndarray
    cat_nbits: np.ndarray
    cat_other: np.ndarray
    cat_words: np.ndarray
    num_features: int
    num_groups: int
    expected_value: np.ndarray

    @property
    def num_paths(self) -> int:
        return int(self.path_offsets.shape[0] - 1)

    @property
    def lengths(self) -> np.ndarray:
        """Number of (merged) feature elements of each path."""
        return np.diff(self.path_offsets)


def extract_paths(ensemble: Ensemble) -> Paths:
    """Extract every root-to-leaf path of ``ensemble`` and merge duplicate features.

    Parameters
    ----------
    ensemble : Ensemble
        A validated ensemble.

    Returns
    -------
    Paths
        One path per leaf with a non-zero value, elements sorted by feature, duplicate features
        merged (ranges and category sets intersected, missing flags AND-ed, zero fractions
        multiplied).
    """
    ens = ensemble
    nbits = _category_bits_per_feature(ens)
    nwords = (nbits + 31) // 32
    (counts, path_value, path_group, path_tree, mean_value, feature, lower, upper, missing,
     zero_fraction, cat_offsets, cat_other, cat_words, n_elem, n_words) = _walk_paths(
        ens.left, ens.right, ens.feature, ens.threshold, ens.default_left, ens.is_categorical,
        ens.cat_offsets, ens.cat_values, ens.value, ens.cover, ens.tree_offsets, ens.tree_group,
        nbits, nwords,
    )  # fmt: skip
    path_offsets = np.zeros(counts.shape[0] + 1, dtype=np.int64)
    np.cumsum(counts, out=path_offsets[1:])
    feature = feature[:n_elem]
    cat_offsets = cat_offsets[:n_elem]
    expected = ens.base_score.astype(np.float64)
    expected = expected + np.bincount(path_group, weights=mean_value, minlength=ens.num_groups)
    return Paths(
        path_offsets=path_offsets,
        path_value=path_value,
        path_group=path_group,
        path_tree=path_tree,
        feature=feature,
        lower=lower[:n_elem],
        upper=upper[:n_elem],
        missing=missing[:n_elem],
        zero_fraction=zero_fraction[:n_elem],
        cat_offsets=cat_offsets,
        cat_nbits=np.where(cat_offsets >= 0, nbits[feature], 0).astype(np.int32),
        cat_other=cat_other[:n_elem],
        cat_words=cat_words[:n_words],
        num_features=ens.num_features,
        num_groups=ens.num_groups,
        expected_value=expected,
    )


def _category_bits_per_feature(ens: Ensemble) -> np.ndarray:
    """Bits each feature's category sets need: 1 + the largest listed code (0 if numeric)."""
    nbits = np.zeros(ens.num_features, dtype=np.int64)
    split = ens.is_categorical & (ens.left >= 0)
    np.maximum.at(nbits, ens.feature[split], 1)
    sizes = np.diff(ens.cat_offsets)
    node_of_value = np.repeat(np.arange(ens.num_nodes), sizes)
    values = ens.cat_values.astype(np.int64)
    if values.size and values.min() < 0:
        raise ValueError("a categorical split lists a negative category code")
    keep = split[node_of_value]
    np.maximum.at(nbits, ens.feature[node_of_value[keep]], values[keep] + 1)
    return nbits


@njit(cache=True, nogil=True)
def _walk_paths(
    left, right, feature, threshold, default_left, is_cat, cat_offsets, cat_values, value,
    cover, tree_offsets, tree_group, nbits, nwords,
):  # fmt: skip
    n_nodes = left.shape[0]
    n_trees = tree_offsets.shape[0] - 1
    parent = np.full(n_nodes, -1, np.int64)
    node_tree = np.empty(n_nodes, np.int64)
    for t in range(n_trees):
        for i in range(tree_offsets[t], tree_offsets[t + 1]):
            node_tree[i] = t
            if left[i] >= 0:
                parent[left[i]] = i
                parent[right[i]] = i
    depth = np.zeros(n_nodes, np.int64)
    n_leaves = 0
    max_depth = 0
    bound = 0
    cat_bound = 0
    max_words = 0
    for f in range(nwords.shape[0]):
        max_words = max(max_words, nwords[f])
    for i in range(n_nodes):  # parents precede children in every supported format? not assumed
        d = 0
        j = parent[i]
        while j >= 0:
            d += 1
            j = parent[j]
            if d > n_nodes:
                raise ValueError("the trees contain a cycle: a node is its own ancestor")
        depth[i] = d
        if left[i] < 0 and value[i] != 0.0:
            n_leaves += 1
            bound += d
            cat_bound += d * max_words
            max_depth = max(max_depth, d)
    counts = np.zeros(n_leaves, np.int64)
    path_value = np.empty(n_leaves, np.float64)
    path_group = np.empty(n_leaves, np.int32)
    path_tree = np.empty(n_leaves, np.int32)
    mean_value = np.empty(n_leaves, np.float64)
    out_feature = np.empty(bound, np.int32)
    out_lower = np.empty(bound, np.float32)
    out_upper = np.empty(bound, np.float32)
    out_missing = np.empty(bound, np.bool_)
    out_zero = np.empty(bound, np.float64)
    out_cat = np.empty(bound, np.int64)
    out_other = np.empty(bound, np.bool_)
    words = np.empty(cat_bound, np.uint32)
    # per-path scratch: one entry per split on the path
    s_feat = np.empty(max_depth, np.int32)
    s_node = np.empty(max_depth, np.int64)
    s_left = np.empty(max_depth, np.bool_)
    s_zero = np.empty(max_depth, np.float64)
    n_elem = 0
    n_words = 0
    p = 0
    for leaf in range(n_nodes):
        if left[leaf] >= 0 or value[leaf] == 0.0:
            continue
        d = depth[leaf]
        child = leaf
        k = 0
        prob = 1.0
        while parent[child] >= 0:
            node = parent[child]
            s_feat[k] = feature[node]
            s_node[k] = node
            s_left[k] = left[node] == child
            z = cover[child] / cover[node] if cover[node] > 0 else 0.0
            s_zero[k] = z
            prob *= z
            k += 1
            child = node
        # insertion sort of the d splits by feature (stable)
        for a in range(1, d):
            fa = s_feat[a]
            na = s_node[a]
            la = s_left[a]
            za = s_zero[a]
            b = a - 1
            while b >= 0 and s_feat[b] > fa:
                s_feat[b + 1] = s_feat[b]
                s_node[b + 1] = s_node[b]
                s_left[b + 1] = s_left[b]
                s_zero[b + 1] = s_zero[b]
                b -= 1
            s_feat[b + 1] = fa
            s_node[b + 1] = na
            s_left[b + 1] = la
            s_zero[b + 1] = za
        start = n_elem
        a = 0
        while a < d:
            f = s_feat[a]
            e = n_elem
            n_elem += 1
            out_feature[e] = f
            out_lower[e] = -np.inf
            out_upper[e] = np.inf
            out_missing[e] = True
            out_zero[e] = 1.0
            out_cat[e] = -1
            out_other[e] = True
            if nbits[f] > 0:
                out_cat[e] = n_words
                for w in range(nwords[f]):
                    words[n_words + w] = np.uint32(0xFFFFFFFF)
                n_words += nwords[f]
            while a < d and s_feat[a] == f:
                node = s_node[a]
                went_left = s_left[a]
                out_zero[e] *= s_zero[a]
                if went_left:
                    out_missing[e] = out_missing[e] and default_left[node]
                else:
                    out_missing[e] = out_missing[e] and not default_left[node]
                if is_cat[node]:
                    if out_cat[e] < 0:
                        raise ValueError("a feature has both categorical and numeric splits")
                    base = out_cat[e]
                    for w in range(nwords[f]):
                        mask = np.uint32(0)
                        lo = w * 32
                        for c in range(cat_offsets[node], cat_offsets[node + 1]):
                            code = cat_values[c]
                            if lo <= code < lo + 32:
                                mask |= np.uint32(1) << np.uint32(code - lo)
                        if went_left:
                            words[base + w] &= ~mask
                        else:
                            words[base + w] &= mask
                    if not went_left:
                        out_other[e] = False
                else:
                    if out_cat[e] >= 0:
                        raise ValueError("a feature has both categorical and numeric splits")
                    if went_left:
                        out_upper[e] = min(out_upper[e], threshold[node])
                    else:
                        out_lower[e] = max(out_lower[e], threshold[node])
                a += 1
        counts[p] = n_elem - start
        path_value[p] = value[leaf]
        t = node_tree[leaf]
        path_group[p] = tree_group[t]
        path_tree[p] = t
        mean_value[p] = value[leaf] * prob
        p += 1
    return (
        counts, path_value, path_group, path_tree, mean_value, out_feature, out_lower, out_upper,
        out_missing, out_zero, out_cat, out_other, words, n_elem, n_words,
    )  # fmt: skip
