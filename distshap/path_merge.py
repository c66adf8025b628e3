"""Merged root-to-leaf paths in NumPy: nothing to compile, the choice for small ensembles.

Paths are handled in batches of (paths x levels) work arrays; the same bits as the compiled
walk (:mod:`distshap.path_walk`), which takes ensembles too large for this one.
"""

from __future__ import annotations

import numpy as np

from distshap.models.ensemble import Ensemble

__all__ = ["merge_paths"]

#: Cells (paths x levels) of the work arrays of one batch of paths in :func:`merge_paths`.
_BATCH_CELLS = 1 << 20


def merge_paths(ens: Ensemble, nbits: np.ndarray) -> dict:
    """The fields of :class:`~distshap.paths.Paths` of ``ens``, in NumPy.

    ``nbits`` is each feature's category bits (no feature split both ways).

    Paths are handled in batches of (paths x levels) work arrays: one vector step per level
    walks every leaf of the batch up towards its root, a row sort by (feature, level) groups
    each path's splits by feature, and one vector step per column merges runs of equal
    features. Products are taken one factor at a time, leaf upwards, as in the compiled walk.
    """
    left = ens.left.astype(np.int64)
    internal = np.flatnonzero(left >= 0)
    parent = np.full(ens.num_nodes, -1, np.int64)
    parent[left[internal]] = internal
    parent[ens.right[internal].astype(np.int64)] = internal
    depth = _depths(parent)
    leaves = np.flatnonzero((left < 0) & (ens.value != 0.0))
    n_paths = leaves.shape[0]
    node_tree = np.repeat(np.arange(ens.num_trees, dtype=np.int64), np.diff(ens.tree_offsets))

    batch = max(1, _BATCH_CELLS // max(int(depth.max()), 1))
    parts = [_merge_batch(ens, parent, leaves[b : b + batch]) for b in range(0, n_paths, batch)]
    counts = np.concatenate([part["counts"] for part in parts]) if parts else np.zeros(0, int)
    prob = np.concatenate([part["prob"] for part in parts]) if parts else np.zeros(0)
    elements = {}
    for name in ("feature", "lower", "upper", "missing", "zero_fraction", "cat_other"):
        values = [part[name] for part in parts]
        elements[name] = np.concatenate(values) if values else _EMPTY[name]
    first = np.cumsum([0] + [part["feature"].shape[0] for part in parts])
    cat_element = np.concatenate(
        [part["cat_element"] + first[i] for i, part in enumerate(parts)] or [np.zeros(0, int)]
    )
    cat_node = np.concatenate([part["cat_node"] for part in parts] or [np.zeros(0, int)])
    cat_left = np.concatenate([part["cat_left"] for part in parts] or [np.zeros(0, bool)])
    feature = elements["feature"]
    cat_offsets, cat_words = _category_words(
        ens, (nbits + 31) // 32, feature, cat_element, cat_node, cat_left
    )

    path_offsets = np.zeros(n_paths + 1, dtype=np.int64)
    np.cumsum(counts, out=path_offsets[1:])
    path_value = ens.value[leaves]
    path_tree = node_tree[leaves]
    path_group = ens.tree_group[path_tree].astype(np.int32)
    expected = ens.base_score.astype(np.float64)
    expected = expected + np.bincount(
        path_group, weights=path_value * prob, minlength=ens.num_groups
    )
    return dict(
        path_offsets=path_offsets,
        path_value=path_value,
        path_group=path_group,
        path_tree=path_tree.astype(np.int32),
        feature=feature,
        lower=elements["lower"],
        upper=elements["upper"],
        missing=elements["missing"],
        zero_fraction=elements["zero_fraction"],
        cat_offsets=cat_offsets,
        cat_nbits=np.where(cat_offsets >= 0, nbits[feature], 0).astype(np.int32),
        cat_other=elements["cat_other"],
        cat_words=cat_words,
        num_features=ens.num_features,
        num_groups=ens.num_groups,
        expected_value=expected,
    )


_EMPTY = {
    "feature": np.zeros(0, np.int32),
    "lower": np.zeros(0, np.float32),
    "upper": np.zeros(0, np.float32),
    "missing": np.zeros(0, bool),
    "zero_fraction": np.zeros(0, np.float64),
    "cat_other": np.zeros(0, bool),
}


def _merge_batch(ens: Ensemble, parent: np.ndarray, leaves: np.ndarray) -> dict:
    """The merged elements of the paths of ``leaves`` (path-major, sorted by feature).

    Work arrays are ``(paths, levels)``; level 0 is the leaf's parent. Returns the element
    arrays, each path's element count and cover product (``prob``), and the categorical
    splits as (element, node, went left).
    """
    n = leaves.shape[0]
    # walk up: node[p, level] (-1 above the root), went_left, zero fraction
    levels = []
    child = leaves
    prob = np.ones(n, np.float64)
    while True:
        node = parent[child]
        up = node >= 0
        if not up.any():
            break
        at = np.where(up, node, 0)
        cover = np.where(up, ens.cover[at], 0.0)
        z = np.zeros(n, np.float64)
        np.divide(ens.cover[child], cover, out=z, where=cover > 0)
        prob *= np.where(up, z, 1.0)  # leaf upwards, one factor at a time
        levels.append((node, (ens.left[at] == child) & up, z))
        child = np.where(up, node, child)
    n_levels = len(levels)
    nodes = np.stack([lv[0] for lv in levels], axis=1) if n_levels else np.zeros((n, 0), int)
    went_left = np.stack([lv[1] for lv in levels], axis=1) if n_levels else nodes > 0
    zero = np.stack([lv[2] for lv in levels], axis=1) if n_levels else nodes * 0.0
    valid = nodes >= 0
    # sort each path's splits by (feature, level): the stable order of the definition
    feat = np.where(valid, ens.feature[np.where(valid, nodes, 0)], 0).astype(np.int64)
    big = np.iinfo(np.int64).max
    key = np.where(valid, feat * max(n_levels, 1) + np.arange(n_levels), big)
    order = np.argsort(key, axis=1)
    nodes = np.take_along_axis(nodes, order, axis=1)
    went_left = np.take_along_axis(went_left, order, axis=1)
    zero = np.take_along_axis(zero, order, axis=1)
    feat = np.take_along_axis(feat, order, axis=1)
    valid = np.take_along_axis(valid, order, axis=1)
    at = np.where(valid, nodes, 0)
    # runs of equal features: merge column by column
    starts = valid.copy()
    starts[:, 1:] &= feat[:, 1:] != feat[:, :-1]
    ends = valid.copy()  # the last split of a run: the next cell starts a run or is empty
    ends[:, :-1] &= starts[:, 1:] | ~valid[:, 1:]
    is_cat = ens.is_categorical[at] & valid
    threshold = ens.threshold[at]
    ok_missing = ens.default_left[at] == went_left
    inf = np.float32(np.inf)
    run_zero = np.empty((n, n_levels), np.float64)
    run_upper = np.empty((n, n_levels), np.float32)
    run_lower = np.empty((n, n_levels), np.float32)
    run_missing = np.empty((n, n_levels), bool)
    run_other = np.empty((n, n_levels), bool)
    for j in range(n_levels):
        s = starts[:, j]
        numeric_left = went_left[:, j] & ~is_cat[:, j]
        numeric_right = ~went_left[:, j] & ~is_cat[:, j]
        if j == 0:
            z0, up0, lo0 = np.ones(n), np.full(n, inf), np.full(n, -inf)
            m0, o0 = np.ones(n, bool), np.ones(n, bool)
        else:
            z0 = np.where(s, 1.0, run_zero[:, j - 1])
            up0 = np.where(s, inf, run_upper[:, j - 1])
            lo0 = np.where(s, -inf, run_lower[:, j - 1])
            m0 = s | run_missing[:, j - 1]
            o0 = s | run_other[:, j - 1]
        run_zero[:, j] = z0 * zero[:, j]
        run_upper[:, j] = np.where(numeric_left, np.minimum(up0, threshold[:, j]), up0)
        run_lower[:, j] = np.where(numeric_right, np.maximum(lo0, threshold[:, j]), lo0)
        run_missing[:, j] = m0 & ok_missing[:, j]
        run_other[:, j] = o0 & ~(is_cat[:, j] & ~went_left[:, j])
    element = np.cumsum(starts.ravel()).reshape(starts.shape) - 1  # element of each cell
    cat_cells = is_cat.ravel()
    return {
        "counts": starts.sum(axis=1),
        "prob": prob,
        "feature": feat[ends].astype(np.int32),
        "lower": run_lower[ends],
        "upper": run_upper[ends],
        "missing": run_missing[ends],
        "zero_fraction": run_zero[ends],
        "cat_other": run_other[ends],
        "cat_element": element.ravel()[cat_cells],
        "cat_node": nodes.ravel()[cat_cells],
        "cat_left": went_left.ravel()[cat_cells],
    }


def _depths(parent: np.ndarray) -> np.ndarray:
    """Depth of every node (roots 0), by pointer jumping: ``O(n log depth)``.

    Raises ``ValueError`` when a node is its own ancestor (its ancestors never end).
    """
    n = parent.shape[0]
    depth = (parent >= 0).astype(np.int64)
    up = parent.copy()
    for _ in range(max(n, 2).bit_length() + 1):  # 2**rounds > n: every chain has ended
        going = np.flatnonzero(up >= 0)
        if going.shape[0] == 0:
            return depth
        above = up[going]
        depth[going] += depth[above]
        up[going] = up[above]
    raise ValueError("the trees contain a cycle: a node is its own ancestor")


def _category_words(ens, nwords, feature, cat_element, cat_node, cat_left):
    """Start word (-1: numeric) of each element, and the category bitsets.

    Each categorical element holds ``nwords[feature]`` words, laid out in element order. A set
    starts full; each of its splits (``cat_element``, ``cat_node``, ``cat_left``) keeps the
    codes it lists where the path goes right (``&= mask``) and the others where it goes left
    (``&= ~mask``).
    """
    n_elem = feature.shape[0]
    elem_words = nwords[feature]
    cat_elem = np.flatnonzero(elem_words > 0)
    cat_offsets = np.full(n_elem, -1, np.int64)
    ends = np.cumsum(elem_words[cat_elem])
    cat_offsets[cat_elem] = ends - elem_words[cat_elem]
    if cat_elem.shape[0] == 0:
        return cat_offsets, np.zeros(0, np.uint32)
    width = int(nwords.max())
    rank = np.full(n_elem, -1, np.int64)  # row of each categorical element in ``words``
    rank[cat_elem] = np.arange(cat_elem.shape[0])
    sizes = ens.cat_offsets[cat_node + 1] - ens.cat_offsets[cat_node]
    which = np.repeat(np.arange(cat_node.shape[0]), sizes)
    first = np.repeat(ens.cat_offsets[cat_node] - np.cumsum(sizes) + sizes, sizes)
    codes = ens.cat_values[first + np.arange(which.shape[0])].astype(np.int64)
    bits = np.left_shift(np.uint32(1), (codes & 31).astype(np.uint32))
    mask = np.zeros((cat_node.shape[0], width), np.uint32)  # the listed codes of each split
    np.bitwise_or.at(mask, (which, codes >> 5), bits)
    keep = np.where(cat_left[:, None], ~mask, mask)
    words = np.full((cat_elem.shape[0], width), np.uint32(0xFFFFFFFF), np.uint32)
    np.bitwise_and.at(words, rank[cat_element], keep)
    used = np.arange(width)[None, :] < elem_words[cat_elem][:, None]
    return cat_offsets, words[used]
