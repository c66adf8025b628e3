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

``zero_fraction`` is the product over the merged splits of cover(child) / cover(parent), taken
from the leaf upwards.

Two implementations give the same arrays bit for bit: NumPy for ensembles of usual size (a
first call in a fresh environment compiles nothing) and a compiled depth-first walk, in
threads over ranges of trees and cached by Numba, for very large ones (:data:`NUMPY_MAX_NODES`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np
from numba import njit

from distshap.models.ensemble import Ensemble
from distshap.parallel import run_ranges

__all__ = ["PathWalk", "Paths", "extract_paths", "walk_paths"]


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


#: Ensembles of up to this many nodes take the NumPy path extraction (no compilation: a short
#: first call), larger ones the compiled walk (tens of times faster once compiled: 4.1M paths
#: in about 1 CPU second against 26; ``benchmarks/RESULTS.md``, cold start).
NUMPY_MAX_NODES = 1 << 19
#: Cells (paths x levels) of the work arrays of one batch of paths in :func:`_paths_numpy`.
_BATCH_CELLS = 1 << 20


def extract_paths(ensemble: Ensemble) -> Paths:
    """Extract every root-to-leaf path of ``ensemble`` and merge duplicate features.

    Parameters
    ----------
    ensemble : Ensemble
        A validated ensemble.

    Returns
    -------
    Paths
        One path per leaf with a non-zero value (in node order), elements sorted by feature,
        duplicate features merged (ranges and category sets intersected, missing flags AND-ed,
        zero fractions multiplied from the leaf upwards).

    Raises
    ------
    ValueError
        A node is its own ancestor, or a feature has both categorical and numeric splits.

    Notes
    -----
    Two implementations give the same arrays, bit for bit: NumPy (:func:`_paths_numpy`) for
    ensembles of at most :data:`NUMPY_MAX_NODES` nodes, where compiling the walk would cost
    more than it saves, and a compiled depth-first walk (:func:`_dfs_paths`) for larger ones.
    """
    ens = ensemble
    nbits = _checked_category_bits(ens)
    if ens.num_nodes <= NUMPY_MAX_NODES:
        return _paths_numpy(ens, nbits)
    return _paths_compiled(ens, nbits)


def _checked_category_bits(ens: Ensemble) -> np.ndarray:
    """:func:`_category_bits_per_feature`, refusing a feature split both ways."""
    if not ens.is_categorical.any():  # no bits, and no feature split both ways
        _check_category_codes(ens)
        return np.zeros(ens.num_features, dtype=np.int64)
    nbits = _category_bits_per_feature(ens)
    internal = ens.left >= 0
    if np.any(ens.is_categorical[internal] != (nbits[ens.feature[internal]] > 0)):
        raise ValueError("a feature has both categorical and numeric splits")
    return nbits


class PathWalk:
    """The compiled walk's first pass over an ensemble: each path's element and word counts.

    :func:`walk_paths` makes it; :meth:`fill` (the second pass) writes the elements at any
    offsets, so the same two passes give :func:`extract_paths`'s arrays (elements in path
    order) or a packed model's lanes directly (:func:`distshap.packed.pack_ensemble`: each
    path at its lanes after a bias lane, no intermediate arrays). Paths are numbered in node
    order (the order of :func:`extract_paths`).

    Attributes
    ----------
    lengths : int64 (n_paths,)
        Merged feature elements of each path.
    word_counts : int64 (n_paths,)
        Category words of each path.
    """

    def __init__(self, ens: Ensemble, nbits: np.ndarray) -> None:
        nwords = (nbits + 31) // 32
        self.ensemble = ens
        self.is_path = (ens.left < 0) & (ens.value != 0.0)
        # a leaf's path index (node order)
        self.path_of_node = np.cumsum(self.is_path, dtype=np.int64) - 1
        n_paths = int(self.path_of_node[-1]) + 1 if self.path_of_node.size else 0
        self.lengths = np.zeros(n_paths, np.int64)
        self.word_counts = np.zeros(n_paths, np.int64)
        self._trees = (
            ens.left, ens.right, ens.feature, ens.threshold, ens.default_left,
            ens.is_categorical, ens.cat_offsets, ens.cat_values, ens.value, ens.cover,
            ens.tree_offsets, np.ascontiguousarray(ens.tree_group, np.int32),
            nbits.astype(np.int64), nwords.astype(np.int64), self.path_of_node, self.lengths,
            self.word_counts,
        )  # fmt: skip
        self._pieces = min(ens.num_trees, 8 * numba.get_num_threads())  # trees differ in size
        i64, f64 = np.zeros(0, np.int64), np.zeros(0, np.float64)
        bool_, f32 = np.zeros(0, np.bool_), np.zeros(0, np.float32)
        i32 = np.zeros(0, np.int32)
        unused = (i64, i64, i32, f32, f32, bool_, f64, i64, i32, bool_, np.zeros(0, np.uint32),
                  f64, i32, i32, f64, i32, i64)  # fmt: skip
        self._run(*unused, False)

    @property
    def num_paths(self) -> int:
        return int(self.lengths.shape[0])

    def _run(self, *args: object) -> None:
        bad = np.zeros(self.ensemble.num_trees, np.int8)
        run_ranges(_dfs_paths, self.ensemble.num_trees, self._pieces, *self._trees, *args[:-1],
                   bad, args[-1])  # fmt: skip
        _check_walk(bad)

    def fill(self, starts: np.ndarray, n_elements: int, rank: np.ndarray | None = None) -> dict:
        """The second pass: every path's elements written from ``starts[p]``.

        Parameters
        ----------
        starts : int64 (n_paths,)
            First element of each path in the output arrays (ignored for a path of no
            elements, or of ``rank[p] < 0``).
        n_elements : int
            Length of the output arrays.
        rank : int32 (n_paths,), optional
            Packed index of each path (``-1``: not packed, nothing written): each packed path
            also gets a bias lane at ``starts[p] - 1`` (feature -1, always followed, zero
            fraction 1) and ``lane_path`` (its packed index) on its lanes.

        Returns
        -------
        dict
            ``feature, lower, upper, missing, zero_fraction, cat_offsets, cat_nbits,
            cat_other`` (``n_elements``), ``cat_words`` (category words in path order) and
            ``mean_value`` (each path's leaf value times its cover product); with ``rank``
            also ``lane_path`` (``n_elements``), ``path_value`` and ``path_group`` (float64
            and int32, of the packed paths in packed order) and ``node_group`` (int64, the
            group of every path in node order).
        """
        word_offsets = np.zeros(self.num_paths + 1, dtype=np.int64)
        np.cumsum(self.word_counts, out=word_offsets[1:])
        out = {
            "feature": np.empty(n_elements, np.int32),
            "lower": np.empty(n_elements, np.float32),
            "upper": np.empty(n_elements, np.float32),
            "missing": np.empty(n_elements, np.bool_),
            "zero_fraction": np.empty(n_elements, np.float64),
            "cat_offsets": np.empty(n_elements, np.int64),
            "cat_nbits": np.empty(n_elements, np.int32),
            "cat_other": np.empty(n_elements, np.bool_),
        }
        cat_words = np.empty(int(word_offsets[-1]), np.uint32)
        mean_value = np.empty(self.num_paths, np.float64)
        dtypes = {"lane_path": np.int32, "path_value": np.float64, "path_group": np.int32,
                  "node_group": np.int64}  # fmt: skip
        packed = {name: np.zeros(0, dtype) for name, dtype in dtypes.items()}  # none
        with_rank = rank is not None
        if not with_rank:
            rank = np.zeros(0, np.int32)
        else:
            rank = np.ascontiguousarray(rank, np.int32)
            n_packed = int(np.count_nonzero(rank >= 0))
            sizes = (n_elements, n_packed, n_packed, self.num_paths)
            packed = {
                name: np.empty(n, dtypes[name]) for name, n in zip(dtypes, sizes, strict=True)
            }
        starts = np.ascontiguousarray(starts, np.int64)
        self._run(starts, word_offsets, *out.values(), cat_words, mean_value, rank,
                  *packed.values(), True)  # fmt: skip
        if with_rank:
            out.update(packed)
        return {**out, "cat_words": cat_words, "mean_value": mean_value}

    def path_arrays(self) -> dict:
        """``path_value``, ``path_group`` (int32), ``path_tree`` (int32) in node order."""
        ens = self.ensemble
        leaves = np.flatnonzero(self.is_path)
        # paths of each tree: the leaves (increasing) within its node range
        per_tree = np.diff(np.searchsorted(leaves, ens.tree_offsets))
        return {
            "path_value": ens.value[leaves],
            "path_group": np.repeat(ens.tree_group.astype(np.int32), per_tree),
            "path_tree": np.repeat(np.arange(ens.num_trees, dtype=np.int32), per_tree),
        }

    def expected_value(self, path_group: np.ndarray, mean_value: np.ndarray) -> np.ndarray:
        """Base score plus the cover-weighted mean prediction of each group."""
        ens = self.ensemble
        expected = ens.base_score.astype(np.float64)
        return expected + np.bincount(path_group, weights=mean_value, minlength=ens.num_groups)


def walk_paths(ensemble: Ensemble) -> PathWalk:
    """The compiled walk's first pass over ``ensemble`` (checked as :func:`extract_paths`).

    Raises
    ------
    ValueError
        As :func:`extract_paths`.
    """
    return PathWalk(ensemble, _checked_category_bits(ensemble))


def _paths_compiled(ens: Ensemble, nbits: np.ndarray) -> Paths:
    """:func:`extract_paths` by the compiled depth-first walk (:func:`_dfs_paths`).

    Two passes over the trees, each in threads over ranges of trees: the first counts each
    path's elements and category words, the second writes them at offsets from those counts,
    so the arrays (paths in node order) do not depend on the number of threads. ``nbits``
    must be :func:`_category_bits_per_feature` of ``ens`` with categorical and numeric splits
    never on one feature (:func:`extract_paths` checks).
    """
    walk = PathWalk(ens, nbits)
    path_offsets = np.zeros(walk.num_paths + 1, dtype=np.int64)
    np.cumsum(walk.lengths, out=path_offsets[1:])
    filled = walk.fill(path_offsets[:-1], int(path_offsets[-1]))
    per_path = walk.path_arrays()
    return Paths(
        path_offsets=path_offsets,
        path_value=per_path["path_value"],
        path_group=per_path["path_group"],
        path_tree=per_path["path_tree"],
        feature=filled["feature"],
        lower=filled["lower"],
        upper=filled["upper"],
        missing=filled["missing"],
        zero_fraction=filled["zero_fraction"],
        cat_offsets=filled["cat_offsets"],
        cat_nbits=filled["cat_nbits"],
        cat_other=filled["cat_other"],
        cat_words=filled["cat_words"],
        num_features=ens.num_features,
        num_groups=ens.num_groups,
        expected_value=walk.expected_value(per_path["path_group"], filled["mean_value"]),
    )


def _check_walk(bad: np.ndarray) -> None:
    """Raise for the first tree the compiled walk flagged (1: a cycle, 2: a stray child)."""
    flagged = np.flatnonzero(bad)
    if flagged.size == 0:
        return
    t = int(flagged[0])
    if bad[t] == 2:
        raise ValueError(f"tree {t} has a child index outside its own nodes: not a tree")
    raise ValueError(f"the trees contain a cycle: a node is its own ancestor (tree {t})")


def _paths_numpy(ens: Ensemble, nbits: np.ndarray) -> Paths:
    """:func:`extract_paths` in NumPy: nothing to compile, the choice for small ensembles.

    Paths are handled in batches of (paths x levels) work arrays: one vector step per level
    walks every leaf of the batch up towards its root, a row sort by (feature, level) groups
    each path's splits by feature, and one vector step per column merges runs of equal
    features. Products are taken one factor at a time, leaf upwards, as in :func:`_dfs_paths`.
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
    return Paths(
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


def _category_bits_per_feature(ens: Ensemble) -> np.ndarray:
    """Bits each feature's category sets need: 1 + the largest listed code (0 if numeric)."""
    nbits = np.zeros(ens.num_features, dtype=np.int64)
    split = ens.is_categorical & (ens.left >= 0)
    np.maximum.at(nbits, ens.feature[split], 1)
    sizes = np.diff(ens.cat_offsets)
    node_of_value = np.repeat(np.arange(ens.num_nodes), sizes)
    values = ens.cat_values.astype(np.int64)
    _check_category_codes(ens)
    keep = split[node_of_value]
    np.maximum.at(nbits, ens.feature[node_of_value[keep]], values[keep] + 1)
    return nbits


def _check_category_codes(ens: Ensemble) -> None:
    """Refuse a negative category code in ``ens.cat_values``."""
    if ens.cat_values.size and ens.cat_values.min() < 0:
        raise ValueError("a categorical split lists a negative category code")


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


@njit(cache=True, nogil=True)
def _dfs_paths(
    left, right, feature, threshold, default_left, is_cat, cat_offsets, cat_values, value,
    cover, tree_offsets, tree_group, nbits, nwords, path_of_node, counts, word_counts,
    path_offsets, word_offsets, out_feature, out_lower, out_upper, out_missing, out_zero,
    out_cat, out_nbits, out_other, words, mean_value, rank, lane_path, path_value, path_group,
    node_group, bad, fill, t_lo, t_hi,
):  # fmt: skip
    """Depth-first walk of trees ``t_lo .. t_hi - 1``, serial (``run_ranges`` runs it in threads).

    ``fill`` False: each path's element and category-word counts (``counts``,
    ``word_counts``). ``fill`` True: its elements, written at ``path_offsets`` /
    ``word_offsets``, and ``mean_value`` (leaf value times the cover product); with a
    non-empty ``rank`` (packed lanes, :meth:`PathWalk.fill`), a path of ``rank[p] >= 0`` also
    gets its bias lane at ``path_offsets[p] - 1``, ``lane_path`` on its lanes and its leaf
    value and group at ``rank[p]`` of ``path_value`` / ``path_group``, a path of
    ``rank[p] < 0`` no elements; every path gets its group at ``node_group[p]``.

    The stack holds the splits from the root to the current node; the split at depth ``j``
    keeps its zero fraction towards the child being walked, and the next shallower split on
    the same feature (``below``; ``deepest[f]`` starts each feature's chain). The features on
    the stack are kept sorted (``present``), so a leaf's elements come out sorted by feature
    and each folds its splits leaf upwards, with no sort per leaf: the products and folds of a
    walk up from the leaf, in its order. A tree that is not a tree gets ``bad[t]`` (1: a cycle
    or a node its root does not reach, 2: a child outside the tree) and ends the range.
    """
    most = 1
    for t in range(t_lo, t_hi):
        most = max(most, tree_offsets[t + 1] - tree_offsets[t])
    n_features = nbits.shape[0]
    node_at = np.empty(most + 1, np.int64)  # the stack
    state = np.empty(most + 1, np.int64)  # of a split: 1 in its left subtree, 2 in its right
    below = np.empty(most + 1, np.int64)
    zero_at = np.empty(most + 1, np.float64)
    deepest = np.full(n_features, -1, np.int64)
    present = np.empty(n_features, np.int64)  # distinct features on the stack, increasing
    for t in range(t_lo, t_hi):
        first = tree_offsets[t]
        end = tree_offsets[t + 1]
        top = 0
        node_at[0] = first
        state[0] = 0
        visits = 1
        distinct = 0
        n_words = 0
        while top >= 0:
            node = node_at[top]
            if left[node] < 0:
                if value[node] != 0.0:
                    p = path_of_node[node]
                    if not fill:
                        counts[p] = distinct
                        word_counts[p] = n_words
                    else:
                        e = path_offsets[p]
                        w0 = word_offsets[p]
                        write = distinct
                        if rank.shape[0] > 0:
                            q = rank[p]
                            node_group[p] = tree_group[t]
                            if q < 0:
                                write = 0
                            else:
                                path_value[q] = value[node]
                                path_group[q] = tree_group[t]
                                a = e - 1  # the bias lane
                                out_feature[a] = -1
                                out_lower[a] = -np.inf
                                out_upper[a] = np.inf
                                out_missing[a] = True
                                out_zero[a] = 1.0
                                out_cat[a] = -1
                                out_nbits[a] = 0
                                out_other[a] = True
                                for i in range(a, e + distinct):
                                    lane_path[i] = q
                        for i in range(write):
                            f = present[i]
                            out_feature[e] = f
                            out_nbits[e] = nbits[f]
                            upper = np.float32(np.inf)
                            lower = np.float32(-np.inf)
                            miss = True
                            zero = 1.0
                            other = True
                            out_cat[e] = -1
                            if nbits[f] > 0:
                                out_cat[e] = w0
                                for w in range(nwords[f]):
                                    words[w0 + w] = np.uint32(0xFFFFFFFF)
                            j = deepest[f]
                            while j >= 0:  # this feature's splits, leaf upwards
                                split = node_at[j]
                                went_left = state[j] == 1
                                zero *= zero_at[j]
                                if went_left:
                                    miss = miss and default_left[split]
                                else:
                                    miss = miss and not default_left[split]
                                if is_cat[split]:
                                    for w in range(nwords[f]):
                                        mask = np.uint32(0)
                                        lo = w * 32
                                        for c in range(cat_offsets[split], cat_offsets[split + 1]):
                                            code = cat_values[c]
                                            if lo <= code < lo + 32:
                                                mask |= np.uint32(1) << np.uint32(code - lo)
                                        if went_left:
                                            words[w0 + w] &= ~mask
                                        else:
                                            words[w0 + w] &= mask
                                    if not went_left:
                                        other = False
                                elif went_left:
                                    upper = min(upper, threshold[split])
                                else:
                                    lower = max(lower, threshold[split])
                                j = below[j]
                            if nbits[f] > 0:
                                w0 += nwords[f]
                            out_lower[e] = lower
                            out_upper[e] = upper
                            out_missing[e] = miss
                            out_zero[e] = zero
                            out_other[e] = other
                            e += 1
                        prob = 1.0
                        for j in range(top - 1, -1, -1):  # leaf upwards
                            prob *= zero_at[j]
                        mean_value[p] = value[node] * prob
                top -= 1
                continue
            f = feature[node]
            s = state[top]
            if s == 2:  # both subtrees done: the split leaves the stack
                deepest[f] = below[top]
                if deepest[f] < 0:
                    distinct -= 1
                    n_words -= nwords[f]
                    at = 0
                    while present[at] != f:
                        at += 1
                    for i in range(at, distinct):
                        present[i] = present[i + 1]
                top -= 1
                continue
            if s == 0:  # the split enters the stack
                if deepest[f] < 0:
                    i = distinct
                    while i > 0 and present[i - 1] > f:
                        present[i] = present[i - 1]
                        i -= 1
                    present[i] = f
                    distinct += 1
                    n_words += nwords[f]
                below[top] = deepest[f]
                deepest[f] = top
                child = left[node]
            else:
                child = right[node]
            state[top] = s + 1
            if child < first or child >= end:
                bad[t] = 2
                return
            visits += 1
            if visits > end - first:  # a node reached twice: not a tree
                bad[t] = 1
                return
            zero_at[top] = cover[child] / cover[node] if cover[node] > 0 else 0.0
            top += 1
            node_at[top] = child
            state[top] = 0
        if visits != end - first:  # nodes the root does not reach hang in a cycle
            bad[t] = 1
            return
