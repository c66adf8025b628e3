"""The kept trees' node arrays of an XGBoost model document, for :mod:`distshap.models.xgboost`.

Two readers give the same arrays bit for bit: :func:`nodes_numpy` (any document: one Python
step per tree, then one concatenation per field) and :func:`nodes_threaded` (large UBJSON
models whose node arrays are views of the bytes: one compiled pass in threads over trees). Both
gather the category lists (:class:`Categories`); :func:`drop_deleted` then removes the pruned
nodes XGBoost keeps in place.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from distshap.models._ubjson import UBJSONViews
from distshap.models._xgboost_params import get, int_param
from distshap.models.ensemble import UnsupportedModelError
from distshap.plan.config import get_config

__all__ = [
    "Categories",
    "Nodes",
    "drop_deleted",
    "expand_vector_leaves",
    "nodes_numpy",
    "nodes_threaded",
    "vector_leaf_values",
]


def _ragged_gather(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Indices ``concat(arange(s, s + n) for s, n in zip(starts, lengths))``, vectorised."""
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    ends = np.cumsum(lengths)
    shift = np.repeat(starts - (ends - lengths), lengths)
    return np.arange(total, dtype=np.int64) + shift


def _array(tree: dict, name: str, dtype: Any, t: int, n: int | None) -> np.ndarray:
    """``tree[name]`` as a 1-D array of ``dtype`` with ``n`` entries (when given)."""
    try:
        arr = np.asarray(get(tree, name, f"tree {t}"), dtype=dtype)
    except (TypeError, ValueError, OverflowError) as exc:
        raise ValueError(f"XGBoost tree {t}: {name} holds values that are no {np.dtype(dtype)} "
                         f"({exc})") from None  # fmt: skip
    if arr.ndim != 1 or (n is not None and arr.shape != (n,)):
        raise _shape_error(t, name, arr.shape, n)
    return arr


def _shape_error(t: int, name: str, shape: tuple, n: int | None) -> ValueError:
    """Tree ``t``'s array ``name`` has ``shape``, not ``(n,)``."""
    return ValueError(
        f"inconsistent XGBoost model: tree {t}'s {name} has shape {shape}, expected "
        f"({n},) like its left_children (truncated or edited)"
    )


def _counted(tree: dict, name: str, t: int, n: int) -> None:
    """Check that ``tree[name]`` (an array the conversion does not use) has ``n`` numbers.

    A decoded UBJSON array is checked by its shape alone (it holds numbers by construction);
    anything else goes through :func:`_array`'s conversion.
    """
    value = tree[name]
    if isinstance(value, np.ndarray) and value.dtype.kind in "iuf":
        if value.shape != (n,):
            raise _shape_error(t, name, value.shape, n)
        return
    _array(tree, name, np.float64, t, n)


def drop_deleted(nodes: dict, num_deleted: np.ndarray, trees: np.ndarray) -> dict:
    """Remove the nodes no path reaches: pruned nodes XGBoost keeps in place (``num_deleted``).

    A tree grown with ``tree_method='exact'`` and pruned (``gamma``) keeps its deleted nodes in
    the arrays, unreachable; XGBoost's predictor never visits them. The count of unreachable
    nodes in each tree must equal its recorded ``num_deleted``.
    """
    left, right, offsets = nodes["left"], nodes["right"], nodes["tree_offsets"]
    roots = offsets[:-1]
    if not num_deleted.any():
        # nothing deleted: when every node but the roots is a child, every node is reached
        # (a node of one parent whose chain of parents does not end at the root hangs in a
        # cycle, which Ensemble.validate and the path extraction refuse)
        inner = left >= 0
        child = np.zeros(left.size, dtype=bool)
        child[left[inner]] = True
        child[right[inner]] = True
        child[roots] = True
        if child.all():
            return nodes
    reach = np.zeros(left.size, dtype=bool)
    reach[roots] = True
    frontier = roots
    while frontier.size:
        inner = frontier[left[frontier] >= 0]
        children = np.concatenate([left[inner], right[inner]])
        children = children[~reach[children]]
        reach[children] = True
        frontier = children
    unreached = np.add.reduceat((~reach).astype(np.int64), roots)
    bad = np.flatnonzero(unreached != num_deleted)
    if bad.size:
        k = int(bad[0])
        raise ValueError(
            f"inconsistent XGBoost model: tree {int(trees[k])} has {int(unreached[k])} nodes no "
            f"path reaches but records num_deleted={int(num_deleted[k])} (edited); save it again"
        )
    if reach.all():
        return nodes
    new_index = np.cumsum(reach) - 1
    per_node = ("left", "right", "feature", "threshold", "default_left", "is_categorical")
    out = {k: nodes[k][reach] for k in (*per_node, "value", "cover")}
    for key in ("left", "right"):
        child = out[key]
        out[key] = np.where(child >= 0, new_index[np.maximum(child, 0)], -1).astype(np.int32)
    out["tree_offsets"] = np.concatenate([[0], np.cumsum(np.add.reduceat(reach, roots))])
    cat_offsets = nodes["cat_offsets"]
    counts = np.diff(cat_offsets)[reach]
    out["cat_values"] = nodes["cat_values"][_ragged_gather(cat_offsets[:-1][reach], counts)]
    out["cat_offsets"] = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    out["tree_offsets"] = out["tree_offsets"].astype(np.int64)
    return out


#: The node arrays :func:`nodes_threaded` reads from the model's bytes, in the order of
#: :data:`distshap.models._threaded.XGBOOST_FIELDS`, with their UBJSON (big-endian) dtypes.
_VIEW_DTYPES = (">i4", ">i4", ">i4", ">f4", "|u1", "|u1", ">f4")


class Categories:
    """The kept trees' category lists, gathered tree by tree (global node indices)."""

    def __init__(self) -> None:
        self.nodes: list[np.ndarray] = []
        self.segments: list[np.ndarray] = []
        self.sizes: list[np.ndarray] = []
        self.values: list[np.ndarray] = []
        self.count = 0  # category values so far

    def add(self, tree: dict, t: int, node_base: int) -> None:
        """Tree ``t``'s categorical splits (none when it lists none), its nodes from
        ``node_base``."""
        cnodes = tree.get("categories_nodes")
        if cnodes is None or len(cnodes) == 0:
            return
        cnodes = _array(tree, "categories_nodes", np.int64, t, None)
        csegs = _array(tree, "categories_segments", np.int64, t, cnodes.size)
        csizes = _array(tree, "categories_sizes", np.int64, t, cnodes.size)
        cvals = _array(tree, "categories", np.int64, t, None)
        if np.any(csegs < 0) or np.any(csizes < 0) or np.any(csegs + csizes > cvals.size):
            raise ValueError(f"XGBoost tree {t}: inconsistent category arrays")
        self.nodes.append(cnodes + node_base)
        self.segments.append(csegs + self.count)
        self.sizes.append(csizes)
        self.values.append(cvals)
        self.count += cvals.size

    def add_to(self, nodes: dict) -> None:
        """``cat_offsets`` and ``cat_values`` of ``nodes`` (category sets in node order)."""
        num_nodes = nodes["left"].shape[0]
        # without categories all zero: calloc'd pages, untouched until read
        cat_offsets = np.zeros(num_nodes + 1, dtype=np.int64)
        cat_values = np.zeros(0, dtype=np.int64)
        if self.nodes:
            all_nodes = np.concatenate(self.nodes)
            all_segs = np.concatenate(self.segments)
            all_sizes = np.concatenate(self.sizes)
            all_vals = np.concatenate(self.values)
            if np.any((all_nodes < 0) | (all_nodes >= num_nodes)) or not np.all(
                nodes["is_categorical"][all_nodes]
            ):
                raise ValueError(
                    "XGBoost categories_nodes names a node that is no categorical split"
                )
            order = np.argsort(all_nodes, kind="stable")
            cat_counts = np.zeros(num_nodes, dtype=np.int64)
            cat_counts[all_nodes] = all_sizes
            np.cumsum(cat_counts, out=cat_offsets[1:])
            cat_values = all_vals[_ragged_gather(all_segs[order], all_sizes[order])]
        if np.any(cat_values < 0) or np.any(cat_values > np.iinfo(np.int32).max):
            raise UnsupportedModelError("an XGBoost categorical split lists a negative category")
        nodes["cat_offsets"] = cat_offsets
        nodes["cat_values"] = cat_values.astype(np.int32)


def _tree_offsets(keep: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Node range of each kept tree; refuses no trees and more nodes than int32 indexes."""
    if keep.size == 0:
        raise UnsupportedModelError("the XGBoost model has no trees: nothing to explain")
    tree_offsets = np.zeros(keep.size + 1, dtype=np.int64)
    np.cumsum(sizes, out=tree_offsets[1:])
    num_nodes = int(tree_offsets[-1])
    if num_nodes >= np.iinfo(np.int32).max:
        raise UnsupportedModelError(f"the model has {num_nodes} nodes: more than int32 indexes")
    return tree_offsets


#: What :func:`nodes_numpy` and :func:`nodes_threaded` return: the node arrays (and
#: ``tree_offsets``), each kept tree's ``num_deleted``, the category lists, and whether every
#: node but the roots is known to be some split's child (nothing for :func:`drop_deleted`).
Nodes = tuple[dict, np.ndarray, Categories, bool]


def nodes_numpy(
    trees: list,
    keep: np.ndarray,
    num_feature: int,
    weight_drop: np.ndarray | None,
    leaf_size: int = 1,
) -> Nodes:
    """The kept trees' node arrays in NumPy: one Python step per tree, then one concatenation
    per field (any document: JSON lists, or UBJSON arrays copied or viewed).

    ``leaf_size`` is the number of values per leaf (``base_weights`` holds that many per node);
    the ``value`` of vector-leaf trees is :func:`vector_leaf_values`'s to fill."""
    lefts, rights, feats, conds, dlefts, stypes, hess = [], [], [], [], [], [], []
    cats = Categories()
    sizes = np.zeros(keep.size, dtype=np.int64)
    num_deleted = np.zeros(keep.size, dtype=np.int64)
    node_base = 0
    for k, t in enumerate(keep.tolist()):
        tree = trees[t]
        left = _array(tree, "left_children", np.int32, t, None)
        n = left.shape[0]
        if n == 0:
            raise ValueError(f"XGBoost tree {t} has no nodes")
        lefts.append(left)
        rights.append(_array(tree, "right_children", np.int32, t, n))
        feats.append(_array(tree, "split_indices", np.int32, t, n))
        conds.append(_array(tree, "split_conditions", np.float32, t, n))
        dlefts.append(_array(tree, "default_left", np.bool_, t, n))
        # sum_hessian is stored as float32: JSON text and UBJ agree
        hess.append(_array(tree, "sum_hessian", np.float32, t, n))
        for name in ("parents", "loss_changes", "base_weights"):  # unused, but counted
            if name in tree:
                _counted(tree, name, t, n * leaf_size if name == "base_weights" else n)
        stype = tree.get("split_type")
        if stype is None or len(stype) == 0:
            stypes.append(np.zeros(n, dtype=np.int8))
        else:
            stypes.append(_array(tree, "split_type", np.int8, t, n))
        sizes[k] = n
        num_deleted[k] = int_param(tree.get("tree_param") or {}, "num_deleted", 0)
        cats.add(tree, t, node_base)
        node_base += n

    tree_offsets = _tree_offsets(keep, sizes)
    base = np.repeat(tree_offsets[:-1].astype(np.int32), sizes)
    end = np.repeat(tree_offsets[1:].astype(np.int32), sizes)

    left = np.concatenate(lefts)
    leaf = left < 0
    internal = ~leaf
    left += base
    right = np.concatenate(rights)
    right += base
    if np.any(internal & ((left >= end) | (right < base) | (right >= end))):
        raise ValueError("an XGBoost tree has a child index outside the tree")
    left[leaf] = -1
    right[leaf] = -1
    del end
    cond = np.concatenate(conds)
    is_cat = np.concatenate(stypes) == 1
    is_cat &= internal
    feature = np.concatenate(feats)
    feature[leaf] = -1
    if np.any(internal & ((feature < 0) | (feature >= max(num_feature, 1)))):
        bad = int(feature[internal & ((feature < 0) | (feature >= num_feature))][0])
        raise ValueError(
            f"inconsistent XGBoost model: a split uses feature {bad} but num_feature is "
            f"{num_feature}"
        )

    value = np.where(leaf, cond.astype(np.float64), 0.0)
    if weight_drop is not None:
        value *= np.repeat(weight_drop[keep], sizes)
    nodes = {
        "left": left,
        "right": right,
        "feature": feature,
        "threshold": np.where(leaf | is_cat, np.float32(0.0), cond),
        "default_left": internal & np.concatenate(dlefts),
        "is_categorical": is_cat,
        "value": value,
        "cover": np.concatenate(hess).astype(np.float64),
        "tree_offsets": tree_offsets,
    }
    return nodes, num_deleted, cats, False


def nodes_threaded(
    trees: list,
    keep: np.ndarray,
    num_feature: int,
    weight_drop: np.ndarray | None,
    views: UBJSONViews,
    leaf_size: int = 1,
) -> Nodes | None:
    """:func:`nodes_numpy`'s arrays, bit for bit, read from the model's bytes in threads.

    For models of more than ``loader_threaded_min_nodes`` nodes (the configuration) whose node
    arrays are all views of the decoded bytes (:func:`~distshap.models._ubjson.
    decode_ubjson_views`) of XGBoost's own types: one Python step per tree records where its
    arrays are, then :func:`~distshap.models._threaded.xgboost_node_arrays` reads them all,
    in threads over trees. ``None`` for any other model, one whose arrays the NumPy
    conversion refuses (it then runs and raises its own error), or while the compiled reader
    is not in Numba's disk cache (:func:`~distshap.models._threaded.compiled_route`).
    """
    from distshap.models import _threaded

    total = sum(len(trees[t]["left_children"]) for t in keep.tolist())
    if total <= get_config().loader_threaded_min_nodes or not _threaded.compiled_route(total):
        return None  # small, or not compiled here: the NumPy conversion
    known = views.offsets
    rows = []
    cats = Categories()
    sizes = np.zeros(keep.size, dtype=np.int64)
    num_deleted = np.zeros(keep.size, dtype=np.int64)
    node_base = 0
    for k, t in enumerate(keep.tolist()):
        tree = trees[t]
        left = tree["left_children"]
        n = left.shape[0] if type(left) is np.ndarray and left.ndim == 1 else 0
        if n == 0:
            return None
        row = []
        for name, dtype in zip(_threaded.XGBOOST_FIELDS, _VIEW_DTYPES, strict=True):
            arr = tree.get(name)
            if name == "split_type" and (arr is None or (type(arr) is list and not arr)):
                row.append(-1)  # no split types: every split numeric
                continue
            if type(arr) is not np.ndarray or arr.dtype.str != dtype or arr.shape != (n,):
                if name == "split_type" and type(arr) is np.ndarray and arr.size == 0:
                    row.append(-1)
                    continue
                return None
            at = known.get(id(arr))
            if at is None:
                return None
            row.append(at)
        for name in ("parents", "loss_changes", "base_weights"):  # unused, but counted
            arr = tree.get(name, left)
            size = n * leaf_size if name == "base_weights" and arr is not left else n
            if type(arr) is not np.ndarray or arr.dtype.kind not in "iuf" or arr.shape != (size,):
                return None
        try:
            num_deleted[k] = int_param(tree.get("tree_param") or {}, "num_deleted", 0)
        except ValueError:
            return None
        rows.append(row)
        sizes[k] = n
        cats.add(tree, t, node_base)
        node_base += n

    tree_offsets = _tree_offsets(keep, sizes)
    weights = None if weight_drop is None else weight_drop[keep]
    offsets = np.array(rows, dtype=np.int64).reshape(keep.size, len(_VIEW_DTYPES))
    nodes, flags = _threaded.xgboost_node_arrays(
        views.buffer, offsets, tree_offsets, weights, num_feature
    )
    if np.any(flags & (_threaded.CHILD_OUTSIDE | _threaded.BAD_FEATURE)):
        return None  # the NumPy conversion says what is wrong
    nodes["tree_offsets"] = tree_offsets
    every_node_named = not np.any(flags & _threaded.NOBODYS_CHILD)
    return nodes, num_deleted, cats, every_node_named


def vector_leaf_values(
    trees: list,
    keep: np.ndarray,
    nodes: dict,
    leaf_size: int,
    weight_drop: np.ndarray | None,
) -> np.ndarray:
    """The leaf values of the kept vector-leaf trees: float64 ``(n_nodes, leaf_size)``.

    A vector-leaf tree (``multi_strategy="multi_output_tree"``) keeps its leaves' values in
    ``leaf_weights``, ``leaf_size`` per leaf (learning rate included); a leaf's
    ``right_children`` entry is its row there. Splits get 0; DART weights multiply the values,
    as for scalar leaves. One Python step per tree, then one gather for all of them.
    """
    offsets = nodes["tree_offsets"]
    sizes = np.diff(offsets)
    rights, weights = [], []
    num_leaves = np.zeros(keep.size, dtype=np.int64)
    for k, t in enumerate(keep.tolist()):
        tree = trees[t]
        rights.append(_array(tree, "right_children", np.int64, t, int(sizes[k])))
        w = _array(tree, "leaf_weights", np.float32, t, None)
        if w.size % leaf_size:
            raise ValueError(
                f"inconsistent XGBoost model: tree {t} has {w.size} leaf_weights, no multiple "
                f"of its {leaf_size} values per leaf (truncated or edited)"
            )
        weights.append(w)
        num_leaves[k] = w.size // leaf_size
    leaf = nodes["left"] < 0
    row = np.concatenate(rights)[leaf]
    tree_of_leaf = np.repeat(np.arange(keep.size), sizes)[leaf]
    bad = np.flatnonzero((row < 0) | (row >= num_leaves[tree_of_leaf]))
    if bad.size:
        t = int(keep[tree_of_leaf[bad[0]]])
        raise ValueError(
            f"inconsistent XGBoost model: a leaf of tree {t} names row {int(row[bad[0]])} of "
            f"its leaf_weights, which hold {int(num_leaves[tree_of_leaf[bad[0]]])} leaves "
            "(truncated or edited)"
        )
    row += (np.cumsum(num_leaves) - num_leaves)[tree_of_leaf]
    table = np.concatenate(weights).astype(np.float64).reshape(-1, leaf_size)
    values = np.zeros((leaf.size, leaf_size), dtype=np.float64)
    values[leaf] = table[row]
    if weight_drop is not None:
        values *= np.repeat(weight_drop[keep], sizes)[:, None]
    return values


def expand_vector_leaves(nodes: dict) -> dict:
    """Every tree whose ``value`` holds ``k`` columns -> ``k`` trees of the same structure.

    SHAP values are linear in the leaf values, so a tree of vector leaves explains as ``k``
    trees with scalar leaves, tree ``j``'s copies consecutive (copy ``g`` holds column ``g``:
    output group ``g``), as the trees of one boosting round of a multiclass model are.
    """
    value = nodes["value"]
    k = value.shape[1]
    offsets = nodes["tree_offsets"]
    sizes = np.diff(offsets)
    if int(offsets[-1]) * k >= np.iinfo(np.int32).max:
        raise UnsupportedModelError(
            f"the model's {int(offsets[-1])} nodes hold {k} values each: as {k} trees per "
            "tree that is more nodes than int32 indexes"
        )
    lengths = np.repeat(sizes, k)
    starts = np.repeat(offsets[:-1], k)
    source = _ragged_gather(starts, lengths)  # the node each new node copies
    tree_offsets = np.zeros(lengths.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=tree_offsets[1:])
    shift = np.repeat(tree_offsets[:-1] - starts, lengths)
    out = {key: nodes[key][source] for key in _COPIED}
    for key in ("left", "right"):
        child = nodes[key][source]
        out[key] = np.where(child >= 0, child + shift, -1).astype(np.int32)
    group = np.repeat(np.tile(np.arange(k), sizes.size), lengths)
    out["value"] = value[source, group]
    cat_offsets = nodes["cat_offsets"]
    counts = np.diff(cat_offsets)[source]
    out["cat_values"] = nodes["cat_values"][_ragged_gather(cat_offsets[:-1][source], counts)]
    out["cat_offsets"] = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    out["tree_offsets"] = tree_offsets
    return out


#: The per-node arrays :func:`expand_vector_leaves` copies unchanged.
_COPIED = ("feature", "threshold", "default_left", "is_categorical", "cover")
