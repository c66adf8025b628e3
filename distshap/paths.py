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
first call in a fresh environment compiles nothing; :mod:`distshap.path_merge`) and a compiled
depth-first walk, in threads over ranges of trees and cached by Numba, for very large ones
(:data:`NUMPY_MAX_NODES`; :mod:`distshap.path_walk`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from distshap.models.ensemble import Ensemble
from distshap.path_merge import merge_paths
from distshap.path_walk import PathWalk

__all__ = ["Paths", "extract_paths", "walk_paths"]


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
#: first call), larger ones the compiled walk (tens of times faster once compiled;
#: ``benchmarks/RESULTS.md``, cold start).
NUMPY_MAX_NODES = 1 << 19


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
    more than it saves, and a compiled depth-first walk
    (:class:`~distshap.path_walk.PathWalk`) for larger ones.
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


def walk_paths(ensemble: Ensemble) -> PathWalk:
    """The compiled walk's first pass over ``ensemble`` (checked as :func:`extract_paths`).

    Raises
    ------
    ValueError
        As :func:`extract_paths`.
    """
    return PathWalk(ensemble, _checked_category_bits(ensemble))


#: The element arrays of :class:`Paths` (and ``cat_words``), as :meth:`PathWalk.fill` names them.
_ELEMENT_FIELDS = ("feature", "lower", "upper", "missing", "zero_fraction", "cat_offsets",
                   "cat_nbits", "cat_other", "cat_words")  # fmt: skip


def _paths_compiled(ens: Ensemble, nbits: np.ndarray) -> Paths:
    """:func:`extract_paths` by the compiled depth-first walk (:class:`PathWalk`).

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
        **{name: filled[name] for name in _ELEMENT_FIELDS},
        num_features=ens.num_features,
        num_groups=ens.num_groups,
        expected_value=walk.expected_value(per_path["path_group"], filled["mean_value"]),
    )


def _paths_numpy(ens: Ensemble, nbits: np.ndarray) -> Paths:
    """:func:`extract_paths` in NumPy (:func:`distshap.path_merge.merge_paths`)."""
    return Paths(**merge_paths(ens, nbits))


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
