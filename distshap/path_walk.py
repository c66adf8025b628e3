"""The compiled depth-first walk of an ensemble's paths, in threads over ranges of trees.

:class:`PathWalk` runs :func:`_dfs_paths` twice: a first pass counts each path's elements and
category words, a second writes them at any offsets, so one walk gives the merged paths of
:func:`distshap.paths.extract_paths` (elements in path order) or a packed model's lanes. The
arrays do not depend on the number of threads. It is the choice for ensembles too large for
the NumPy extraction (:mod:`distshap.path_merge`); both give the same bits.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import njit

from distshap.compile_cache import wait_ahead
from distshap.models.ensemble import Ensemble
from distshap.pages import page_array
from distshap.parallel import run_ranges

__all__ = ["AHEAD_NAME", "PathWalk", "ahead_compile", "bias_lane"]

#: The walk's name for :func:`distshap.compile_cache.compile_ahead` (this module's helpers).
AHEAD_NAME = "path_walk"


class PathWalk:
    """The compiled walk's first pass over an ensemble: each path's element and word counts.

    :func:`distshap.paths.walk_paths` makes it; :meth:`fill` (the second pass) writes the
    elements at any offsets, so the same two passes give the arrays of
    :func:`~distshap.paths.extract_paths` (elements in path order) or a packed model's lanes
    directly (:func:`distshap.packed.pack_ensemble`: each path at its lanes after a bias lane,
    no intermediate arrays). Paths are numbered in node order, as there.

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
        self.path_of_node = page_array(self.is_path.shape[0], np.int64)
        np.cumsum(self.is_path, dtype=np.int64, out=self.path_of_node)
        self.path_of_node -= 1
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
        wait_ahead((AHEAD_NAME,))  # a helper compiling the walk: load it from the cache
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
            "feature": page_array(n_elements, np.int32),
            "lower": page_array(n_elements, np.float32),
            "upper": page_array(n_elements, np.float32),
            "missing": page_array(n_elements, np.bool_),
            "zero_fraction": page_array(n_elements, np.float64),
            "cat_offsets": page_array(n_elements, np.int64),
            "cat_nbits": page_array(n_elements, np.int32),
            "cat_other": page_array(n_elements, np.bool_),
        }
        cat_words = page_array(int(word_offsets[-1]), np.uint32)
        mean_value = page_array(self.num_paths, np.float64)
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
                name: page_array(n, dtypes[name]) for name, n in zip(dtypes, sizes, strict=True)
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


def ahead_compile(name: str) -> None:
    """Compile the walk (``name``: :data:`AHEAD_NAME`) into Numba's disk cache, a helper
    process's work (:func:`distshap.compile_cache.compile_ahead`): both passes over one split,
    with the array types of a loaded ensemble."""
    if name != AHEAD_NAME:
        raise ValueError(f"name={name!r}: this module compiles ahead only {AHEAD_NAME!r}")
    i32 = np.array([1, -1, -1], np.int32)
    ens = Ensemble(
        left=i32, right=np.array([2, -1, -1], np.int32), feature=np.array([0, -1, -1], np.int32),
        threshold=np.zeros(3, np.float32), default_left=np.ones(3, bool),
        is_categorical=np.zeros(3, bool), cat_offsets=np.zeros(4, np.int64),
        cat_values=np.zeros(0, np.int32), value=np.array([0.0, -1.0, 1.0]),
        cover=np.array([2.0, 1.0, 1.0]), tree_offsets=np.array([0, 3], np.int64),
        tree_group=np.zeros(1, np.int32), num_features=1, num_groups=1,
        base_score=np.zeros(1, np.float64),
    )  # fmt: skip
    walk = PathWalk(ens, np.zeros(1, np.int64))
    walk.fill(np.array([1, 3], np.int64), 4, np.array([0, 1], np.int32))


def _check_walk(bad: np.ndarray) -> None:
    """Raise for the first tree the compiled walk flagged (1: a cycle, 2: a stray child)."""
    flagged = np.flatnonzero(bad)
    if flagged.size == 0:
        return
    t = int(flagged[0])
    if bad[t] == 2:
        raise ValueError(f"tree {t} has a child index outside its own nodes: not a tree")
    raise ValueError(f"the trees contain a cycle: a node is its own ancestor (tree {t})")


@njit(inline="always", cache=True, nogil=True)
def bias_lane(a, feature, lower, upper, missing, zero, cat, nbits, other):
    """Lane ``a`` of the lane arrays a bias lane: feature -1, always followed (bounds
    ``-inf, inf``, missing and other categories go its way), zero fraction 1, no categories."""
    feature[a] = -1
    lower[a] = -np.inf
    upper[a] = np.inf
    missing[a] = True
    zero[a] = 1.0
    cat[a] = -1
    nbits[a] = 0
    other[a] = True


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
                                bias_lane(a, out_feature, out_lower, out_upper, out_missing,
                                          out_zero, out_cat, out_nbits, out_other)  # fmt: skip
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
