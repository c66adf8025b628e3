"""XGBoost models -> :class:`~distshap.models.ensemble.Ensemble`.

There is one code path: a saved model document (XGBoost's JSON schema, read from ``.json`` text
or from ``.ubj`` Universal Binary JSON) is turned into flat node arrays with NumPy, one Python
step per *tree* and none per node. A UBJSON model of more than
:data:`~distshap.models._threaded.MIN_NODES` nodes has its node arrays read straight from the
bytes instead, by one compiled pass in threads over trees (:func:`ensemble_from_ubjson`; the
same Ensemble bit for bit, and anything it cannot read, or that is wrong, goes through the
NumPy code). :func:`load_xgboost` serialises an in-memory ``Booster`` to UBJSON bytes
(``Booster.save_raw("ubj")``) and goes through the same parser; :func:`load_xgboost_file` needs
no ``xgboost`` installation at all (Dask workers need not have it).

What is converted:

* ``gbtree`` and ``dart`` boosters (DART tree weights ``weight_drop`` are folded into the leaf
  values), random forests (``num_parallel_tree > 1``), any number of output groups (tree ``t``
  belongs to group ``tree_info[t]``);
* numeric splits (XGBoost sends ``x < split_condition`` left, comparing float32 values, as the
  Ensemble does), the default direction of missing values, and categorical splits (XGBoost
  sends the listed categories right, the Ensemble convention, so no children are swapped);
* ``base_score``, in margin space (see :mod:`distshap.models._xgboost_params`);
* the missing-value sentinel (``missing=``): a scikit-learn estimator's parameter, or the one
  an old scikit-learn wrapper recorded in a saved file; NaN otherwise.

Every count the document records is checked (:class:`~distshap.models._xgboost_params.Counts`):
a truncated or edited file is refused with what disagrees. Refused with
:class:`UnsupportedModelError`: ``gblinear``, vector-leaf trees
(``multi_strategy="multi_output_tree"``), and boosters or documents of any other kind.
"""

from __future__ import annotations

import math
import os
from dataclasses import replace
from typing import Any

import numpy as np

from distshap.models._common import malformed_is_value_error
from distshap.models._files import (
    in_file,
    parse_json,
    read_model_bytes,
    refusal,
    sniff_model_bytes,
)
from distshap.models._ubjson import UBJSONError, UBJSONViews, decode_ubjson, decode_ubjson_views
from distshap.models._xgboost_params import (
    Counts,
    base_margin,
    category_values,
    get,
    int_param,
    sklearn_missing,
)
from distshap.models.ensemble import Ensemble, UnsupportedModelError

__all__ = [
    "ensemble_from_ubjson",
    "ensemble_from_xgboost_document",
    "load_xgboost",
    "load_xgboost_file",
    "read_xgboost_document",
]


def read_xgboost_document(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a saved XGBoost model file (``.json`` or ``.ubj``; the content decides) into a dict.

    Parameters
    ----------
    path
        File written by ``Booster.save_model`` / ``XGBModel.save_model``.

    Returns
    -------
    dict
        The model document (the JSON schema's top-level object).

    Raises
    ------
    UnsupportedModelError
        For content that is no XGBoost JSON / UBJSON document (a pickle, XGBoost's deprecated
        binary format, ...); the message says how to save the model instead.
    ValueError
        For invalid JSON or UBJSON. Every message names the file.
    """
    with in_file(path):
        return _read_document(read_model_bytes(path), views=False)[0]


def _read_document(data: bytes, views: bool) -> tuple[dict[str, Any], UBJSONViews | None]:
    """A model file's document; with ``views``, a UBJSON one decoded with views (also
    returned) for :func:`ensemble_from_ubjson`."""
    kind = sniff_model_bytes(data)
    decoded = None
    if kind == "json":
        doc = parse_json(data)
    elif kind == "ubjson":
        try:
            if views:
                decoded = decode_ubjson_views(data)
                doc = decoded.value
            else:
                doc = decode_ubjson(data)
        except UBJSONError as exc:
            raise ValueError(f"not a valid XGBoost UBJSON model: {exc}") from None
    else:
        raise UnsupportedModelError(refusal(kind, data))
    if not isinstance(doc, dict):
        raise UnsupportedModelError("the document is no JSON object: not an XGBoost model")
    return doc, decoded


def load_xgboost_file(
    path: str | os.PathLike[str], *, iteration_range: tuple[int, int] | None = None
) -> Ensemble:
    """Load a saved XGBoost ``.json`` / ``.ubj`` model without importing xgboost.

    Parameters
    ----------
    path
        The model file.
    iteration_range
        ``(begin, end)`` boosting rounds to keep, as in ``Booster.predict``; all when ``None``.

    Returns
    -------
    Ensemble
        With ``missing_value`` set when the file records the scikit-learn wrapper's
        ``missing=`` (XGBoost < 1.6); NaN otherwise.

    Raises
    ------
    ValueError
        For a truncated or inconsistent file; the message names the file.
    """
    from distshap.models._threaded import start_warm_up

    start_warm_up(path)  # a large model: Numba starts while the file is read
    with in_file(path):
        doc, views = _read_document(read_model_bytes(path), views=True)
        return _ensemble(doc, iteration_range, views).validate()


def load_xgboost(model: Any, *, iteration_range: tuple[int, int] | None = None) -> Ensemble:
    """Convert an ``xgboost.Booster`` or XGBoost scikit-learn estimator into an Ensemble.

    The booster is serialised to UBJSON in memory and parsed by the same code as
    :func:`load_xgboost_file`. All trees of a ``Booster`` are kept unless ``iteration_range``
    says otherwise; a scikit-learn estimator fitted with early stopping keeps the rounds up to
    its ``best_iteration``, as its ``predict`` does, and its ``missing`` parameter becomes
    ``Ensemble.missing_value`` (a ``Booster`` does not know its missing value: NaN).

    Parameters
    ----------
    model
        ``xgboost.Booster``, or a fitted ``XGBRegressor`` / ``XGBClassifier`` / ``XGBRanker`` /
        ``XGBRF*`` (anything with ``get_booster()``).
    iteration_range
        ``(begin, end)`` boosting rounds to keep; all when ``None``.

    Returns
    -------
    Ensemble

    Raises
    ------
    TypeError
        If ``model`` is no XGBoost model.
    ValueError
        If a scikit-learn estimator is not fitted.
    UnsupportedModelError
        For gblinear and vector-leaf (multi_output_tree) models.
    """
    import xgboost

    booster = model
    missing = math.nan
    if not isinstance(model, xgboost.Booster):
        get_booster = getattr(model, "get_booster", None)
        if get_booster is None:
            raise TypeError(
                f"load_xgboost needs an xgboost.Booster or an XGBoost scikit-learn estimator, "
                f"got {type(model).__module__}.{type(model).__name__}"
            )
        try:
            booster = get_booster()
        except Exception as exc:  # xgboost raises NotFittedError (a ValueError)
            raise ValueError(
                f"cannot get the booster of {type(model).__name__} ({exc}): fit it first"
            ) from exc
        if not isinstance(booster, xgboost.Booster):
            raise TypeError(
                f"{type(model).__name__}.get_booster() returned {type(booster).__name__}, "
                "not an xgboost.Booster"
            )
        if iteration_range is None:
            try:  # set only after early stopping
                best = int(model.best_iteration)
            except (AttributeError, TypeError, ValueError):
                best = None
            if best is not None:
                iteration_range = (0, best + 1)
        missing = _estimator_missing(model)
    raw = booster.save_raw(raw_format="ubj")  # a bytearray, decoded in place
    ens = ensemble_from_ubjson(decode_ubjson_views(raw), iteration_range=iteration_range)
    if not math.isnan(missing):
        ens = replace(ens, missing_value=missing)
    return ens


def _estimator_missing(model: Any) -> float:
    """The ``missing`` parameter of an XGBoost scikit-learn estimator (None and NaN: NaN)."""
    raw = getattr(model, "missing", math.nan)
    if raw is None:
        return math.nan
    try:
        return float(raw)
    except (TypeError, ValueError):
        raise ValueError(
            f"{type(model).__name__}(missing={raw!r}) is not a number: XGBoost needs a float"
        ) from None


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
        raise ValueError(
            f"inconsistent XGBoost model: tree {t}'s {name} has shape {arr.shape}, expected "
            f"({n},) like its left_children (truncated or edited)"
        )
    return arr


def _counted(tree: dict, name: str, t: int, n: int) -> None:
    """Check that ``tree[name]`` (an array the conversion does not use) has ``n`` numbers.

    A decoded UBJSON array is checked by its shape alone (it holds numbers by construction);
    anything else goes through :func:`_array`'s conversion.
    """
    value = tree[name]
    if isinstance(value, np.ndarray) and value.dtype.kind in "iuf":
        if value.shape != (n,):
            raise ValueError(
                f"inconsistent XGBoost model: tree {t}'s {name} has shape {value.shape}, "
                f"expected ({n},) like its left_children (truncated or edited)"
            )
        return
    _array(tree, name, np.float64, t, n)


def _drop_deleted(nodes: dict, num_deleted: np.ndarray, trees: np.ndarray) -> dict:
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


def _iteration_trees(indptr: np.ndarray, iteration_range: tuple[int, int] | None) -> np.ndarray:
    """Indices of the trees of boosting rounds ``[begin, end)``."""
    if iteration_range is None:
        return np.arange(indptr[-1])
    begin, end = (int(v) for v in iteration_range)
    rounds = indptr.size - 1
    if end == 0:
        end = rounds
    if not 0 <= begin < end <= rounds:
        raise ValueError(
            f"iteration_range=({begin}, {end}) is outside the model's {rounds} boosting rounds: "
            f"use 0 <= begin < end <= {rounds}"
        )
    return np.arange(indptr[begin], indptr[end])


def _kept_indptr(indptr: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """The round boundaries of the kept (contiguous, whole-round) trees, from 0."""
    if keep.size == 0:
        return np.zeros(1, dtype=np.int64)
    first, stop = int(keep[0]), int(keep[-1]) + 1
    inside = indptr[(indptr >= first) & (indptr <= stop)]
    return (inside - first).astype(np.int64)


#: The node arrays :func:`_nodes_threaded` reads from the model's bytes, in the order of
#: :data:`distshap.models._threaded.XGBOOST_FIELDS`, with their UBJSON (big-endian) dtypes.
_VIEW_DTYPES = (">i4", ">i4", ">i4", ">f4", "|u1", "|u1", ">f4")


class _Categories:
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


#: What :func:`_nodes_numpy` and :func:`_nodes_threaded` return: the node arrays (and
#: ``tree_offsets``), each kept tree's ``num_deleted``, the category lists, and whether every
#: node but the roots is known to be some split's child (nothing for :func:`_drop_deleted`).
_Nodes = tuple[dict, np.ndarray, _Categories, bool]


def _nodes_numpy(
    trees: list, keep: np.ndarray, num_feature: int, weight_drop: np.ndarray | None
) -> _Nodes:
    """The kept trees' node arrays in NumPy: one Python step per tree, then one concatenation
    per field (any document: JSON lists, or UBJSON arrays copied or viewed)."""
    lefts, rights, feats, conds, dlefts, stypes, hess = [], [], [], [], [], [], []
    cats = _Categories()
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
                _counted(tree, name, t, n)
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


def _nodes_threaded(
    trees: list,
    keep: np.ndarray,
    num_feature: int,
    weight_drop: np.ndarray | None,
    views: UBJSONViews,
) -> _Nodes | None:
    """:func:`_nodes_numpy`'s arrays, bit for bit, read from the model's bytes in threads.

    For models of more than :data:`~distshap.models._threaded.MIN_NODES` nodes whose node
    arrays are all views of the decoded bytes (:func:`~distshap.models._ubjson.
    decode_ubjson_views`) of XGBoost's own types: one Python step per tree records where its
    arrays are, then :func:`~distshap.models._threaded.xgboost_node_arrays` reads them all,
    in threads over trees. ``None`` for any other model, or one whose arrays the NumPy
    conversion refuses: it then runs and raises its own error.
    """
    from distshap.models import _threaded

    if sum(len(trees[t]["left_children"]) for t in keep.tolist()) <= _threaded.MIN_NODES:
        return None
    known = views.offsets
    rows = []
    cats = _Categories()
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
            if type(arr) is not np.ndarray or arr.dtype.kind not in "iuf" or arr.shape != (n,):
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


def ensemble_from_xgboost_document(
    doc: dict[str, Any], *, iteration_range: tuple[int, int] | None = None
) -> Ensemble:
    """Convert a decoded XGBoost model document (JSON schema) into an :class:`Ensemble`.

    Parameters
    ----------
    doc
        The top-level object of a saved model, from JSON or UBJSON.
    iteration_range
        ``(begin, end)`` boosting rounds to keep; all when ``None``.

    Returns
    -------
    Ensemble
        Not yet validated (the dispatcher calls :meth:`Ensemble.validate`).

    Raises
    ------
    UnsupportedModelError
        For gblinear, vector-leaf trees, or a document of an unknown shape.
    ValueError
        For a document whose counts disagree (truncated or edited) or whose structure is not
        XGBoost's.
    """
    return _ensemble(doc, iteration_range, None)


def ensemble_from_ubjson(
    views: UBJSONViews, *, iteration_range: tuple[int, int] | None = None
) -> Ensemble:
    """:func:`ensemble_from_xgboost_document` of a UBJSON model decoded with views.

    The same Ensemble, bit for bit; a model of more than
    :data:`~distshap.models._threaded.MIN_NODES` nodes has its node arrays read straight from
    the bytes, in threads over trees (no per-tree copies, byte swaps or concatenations).

    Parameters
    ----------
    views
        :func:`~distshap.models._ubjson.decode_ubjson_views` of the model's bytes.
    iteration_range
        ``(begin, end)`` boosting rounds to keep; all when ``None``.

    Returns
    -------
    Ensemble
        Not yet validated.

    Raises
    ------
    UnsupportedModelError, ValueError
        As :func:`ensemble_from_xgboost_document`.
    """
    return _ensemble(views.value, iteration_range, views)


@malformed_is_value_error(
    "XGBoost model document", "save the model again with booster.save_model('model.json')"
)
def _ensemble(
    doc: dict[str, Any], iteration_range: tuple[int, int] | None, views: UBJSONViews | None
) -> Ensemble:
    """The conversion; ``views`` (the decoded bytes) lets large models take the threaded read."""
    learner = get(doc, "learner", "the document")
    booster = get(learner, "gradient_booster", "learner")
    booster_name = get(booster, "name", "gradient_booster")
    mparam = get(learner, "learner_model_param", "learner")
    objective_obj = learner.get("objective", {})
    objective = str(objective_obj.get("name", "reg:squarederror")) if objective_obj else ""
    objective = objective or "reg:squarederror"

    if booster_name == "gblinear":
        raise UnsupportedModelError(
            "this XGBoost model uses booster='gblinear' (a linear model, not trees): distshap "
            "explains tree ensembles only; retrain with booster='gbtree', or use linear SHAP "
            "values coef * (x - mean(x))"
        )
    weight_drop = None
    if booster_name == "dart":
        weight_drop = get(booster, "weight_drop", "dart booster")
        booster = get(booster, "gbtree", "dart booster")
    elif booster_name != "gbtree":
        raise UnsupportedModelError(
            f"unknown XGBoost booster {booster_name!r}: distshap supports 'gbtree' and 'dart'"
        )
    model = get(booster, "model", "gbtree booster")
    if weight_drop is None and "weight_drop" in model:
        # XGBoost >= 3.3 saves DART models as booster "gbtree" with the tree weights inside
        weight_drop = model["weight_drop"]
    trees = get(model, "trees", "gbtree model")
    for t, tree in enumerate(trees if isinstance(trees, list) else []):
        if not isinstance(tree, dict):
            continue  # Counts.check_tree says what is wrong
        leaf_size = int_param(tree.get("tree_param") or {}, "size_leaf_vector", 1)
        if leaf_size > 1 or "leaf_weights" in tree:
            raise UnsupportedModelError(
                f"XGBoost tree {t} has vector leaves (size_leaf_vector={leaf_size}, "
                "multi_strategy='multi_output_tree'): distshap cannot explain multi-target "
                "trees; retrain with multi_strategy='one_output_per_tree' (the default)"
            )
    counts = Counts(mparam, model, trees)
    num_feature, num_groups = counts.num_feature, counts.num_groups
    if weight_drop is not None:
        weight_drop = np.asarray(weight_drop, dtype=np.float32).astype(np.float64).reshape(-1)
        if weight_drop.shape != (counts.num_trees,):
            raise ValueError(
                f"inconsistent XGBoost model: DART weight_drop has {weight_drop.size} entries "
                f"for {counts.num_trees} trees"
            )
    for t, tree in enumerate(trees):  # every tree's own counts, kept or not
        counts.check_tree(t, tree)
    keep = _iteration_trees(counts.indptr, iteration_range)

    found = None
    if views is not None:
        found = _nodes_threaded(trees, keep, num_feature, weight_drop, views)
    if found is None:
        found = _nodes_numpy(trees, keep, num_feature, weight_drop)
    nodes, num_deleted, cats, every_node_named = found
    cats.add_to(nodes)

    base_score = base_margin(
        get(mparam, "base_score", "learner_model_param"), objective, num_groups
    )

    names = learner.get("feature_names") or None
    types = learner.get("feature_types") or None
    feature_names = tuple(str(v) for v in names) if names is not None else None
    feature_types = tuple("c" if v == "c" else "q" for v in types) if types is not None else None
    for label, seq in (("feature_names", feature_names), ("feature_types", feature_types)):
        if seq is not None and len(seq) != num_feature:
            raise ValueError(
                f"inconsistent XGBoost model: it has {len(seq)} {label} for {num_feature} features"
            )

    version = doc.get("version")
    extra = {
        "booster": "dart" if weight_drop is not None else booster_name,
        "objective": objective,
        "num_parallel_tree": counts.num_parallel_tree,
        # the boosting rounds of the kept trees (distshap.models.iterations)
        "iteration_indptr": _kept_indptr(counts.indptr, keep),
        "xgboost_version": tuple(int(v) for v in version) if version is not None else None,
        "xgboost_feature_types": tuple(str(v) for v in types) if types is not None else None,
    }
    categories = category_values(model.get("cats"))
    if categories:
        extra["category_values"] = categories

    if num_deleted.any() or not every_node_named:
        nodes = _drop_deleted(nodes, num_deleted, keep)
    return Ensemble(
        **nodes,
        tree_group=counts.tree_info[keep].astype(np.int32),
        num_features=num_feature,
        num_groups=num_groups,
        base_score=base_score,
        feature_names=feature_names,
        feature_types=feature_types,
        model_kind=f"xgboost:{objective}",
        extra=extra,
        missing_value=sklearn_missing(learner),
    )
