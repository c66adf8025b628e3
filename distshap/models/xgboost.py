"""XGBoost models -> :class:`~distshap.models.ensemble.Ensemble`.

There is one code path: a saved model document (XGBoost's JSON schema, read from ``.json`` text or
from ``.ubj`` Universal Binary JSON) is turned into flat node arrays with NumPy, one Python step per
*tree* and none per node. A UBJSON model of more than
:attr:`~distshap.plan.config.Config.loader_threaded_min_nodes` nodes has its node arrays read
straight from the bytes instead, by one compiled pass in threads over trees
(:func:`ensemble_from_ubjson`; the same Ensemble bit for bit, and anything it cannot read, or that
is wrong, goes through the NumPy code). :func:`load_xgboost` serialises an in-memory ``Booster`` to
UBJSON bytes (``Booster.save_raw("ubj")``, on one OpenMP thread, in a thread of its own:
XGBoost's OpenMP threads do not survive ``fork``, and a forked child that serialises with them
hangs) and goes through the same parser;
:func:`load_xgboost_file` needs no ``xgboost`` installation at all (Dask workers need not have it).

What is converted:

* ``gbtree`` and ``dart`` boosters (DART tree weights ``weight_drop`` are folded into the leaf
  values), random forests (``num_parallel_tree > 1``), any number of output groups (tree ``t``
  belongs to group ``tree_info[t]``);
* vector-leaf trees (``multi_strategy="multi_output_tree"``, multi-target regression and
  multiclass): every leaf holds one value per output group, and each such tree becomes one
  tree per group, of the same structure, with that group's values (SHAP values are linear
  in the leaf values); a boosting round then holds ``groups x num_parallel_tree`` trees;
* numeric splits (XGBoost sends ``x < split_condition`` left, comparing float32 values, as the
  Ensemble does), the default direction of missing values, and categorical splits (XGBoost
  sends the listed categories right, the Ensemble convention, so no children are swapped);
* ``base_score``, in margin space (see :mod:`distshap.models._xgboost_params`);
* the missing-value sentinel (``missing=``): a scikit-learn estimator's parameter, or the one
  an old scikit-learn wrapper recorded in a saved file; NaN otherwise.

Every count the document records is checked (:class:`~distshap.models._xgboost_params.Counts`):
a truncated or edited file is refused with what disagrees. Refused with
:class:`UnsupportedModelError`: ``gblinear``, and boosters or documents of any other kind.
"""

from __future__ import annotations

import math
import os
import threading
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
from distshap.models._xgboost_nodes import (
    drop_deleted,
    expand_vector_leaves,
    nodes_numpy,
    nodes_threaded,
    vector_leaf_values,
)
from distshap.models._xgboost_params import (
    Counts,
    base_margin,
    category_values,
    get,
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
        For gblinear models.
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
    raw = _save_on_one_thread(booster, xgboost)  # a bytearray, decoded in place
    ens = ensemble_from_ubjson(decode_ubjson_views(raw), iteration_range=iteration_range)
    if not math.isnan(missing):
        ens = replace(ens, missing_value=missing)
    return ens


def _save_on_one_thread(booster: Any, xgboost: Any) -> bytearray:
    """``booster.save_raw("ubj")`` with XGBoost on one thread (its global ``nthread``, which is
    per thread and outranks the booster's): a child forked from a process whose OpenMP threads
    ran (training, loading, predicting) waits for ever on those threads. Run in a thread of its
    own: XGBoost's settings and OpenMP's thread count are per thread, and leaving the context
    does not give an unset ``nthread`` back, so the caller's stay as they were; the caller's
    other XGBoost settings (its verbosity) hold there too."""
    config = xgboost.get_config()
    if "nthread" in config:  # XGBoost < 2 has no such setting
        config = {**config, "nthread": 1}
    out: dict[str, Any] = {}

    def save() -> None:
        try:
            with xgboost.config_context(**config):
                out["raw"] = booster.save_raw(raw_format="ubj")
        except BaseException as exc:  # noqa: BLE001 - raised again on the caller's thread
            out["error"] = exc

    thread = threading.Thread(target=save, name="distshap-xgboost-save")
    thread.start()
    thread.join()
    if "error" in out:
        raise out["error"]
    return out["raw"]


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
        For gblinear, or a document of an unknown shape.
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
    :attr:`~distshap.plan.config.Config.loader_threaded_min_nodes` nodes has its node arrays read
    straight from the bytes, in threads over trees (no per-tree copies, byte swaps or
    concatenations).

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


def _booster_trees(booster: dict[str, Any], booster_name: str) -> tuple[dict, Any, Any]:
    """The booster's model, its trees and DART weights (``None``: not DART).

    Refuses ``gblinear`` and unknown boosters.
    """
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
    return model, trees, weight_drop


def _feature_names_types(
    learner: dict[str, Any], num_feature: int
) -> tuple[tuple[str, ...] | None, tuple[str, ...] | None, Any]:
    """Feature names, types (``"c"`` or ``"q"``) and XGBoost's own types, checked by count."""
    names = learner.get("feature_names") or None
    types = learner.get("feature_types") or None
    feature_names = tuple(str(v) for v in names) if names is not None else None
    feature_types = tuple("c" if v == "c" else "q" for v in types) if types is not None else None
    for label, seq in (("feature_names", feature_names), ("feature_types", feature_types)):
        if seq is not None and len(seq) != num_feature:
            raise ValueError(
                f"inconsistent XGBoost model: it has {len(seq)} {label} for {num_feature} features"
            )
    return feature_names, feature_types, types


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
    model, trees, weight_drop = _booster_trees(booster, booster_name)
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

    leaf_size = num_groups if counts.vector_leaf else 1
    found = None
    if views is not None:
        found = nodes_threaded(trees, keep, num_feature, weight_drop, views, leaf_size)
    if found is None:
        found = nodes_numpy(trees, keep, num_feature, weight_drop, leaf_size)
    nodes, num_deleted, cats, every_node_named = found
    if counts.vector_leaf:
        nodes["value"] = vector_leaf_values(trees, keep, nodes, leaf_size, weight_drop)
    cats.add_to(nodes)

    base_score = base_margin(
        get(mparam, "base_score", "learner_model_param"), objective, num_groups
    )

    feature_names, feature_types, types = _feature_names_types(learner, num_feature)

    version = doc.get("version")
    extra = {
        "booster": "dart" if weight_drop is not None else booster_name,
        "objective": objective,
        "num_parallel_tree": counts.num_parallel_tree,
        # the boosting rounds of the kept trees (distshap.models.iterations)
        "iteration_indptr": _kept_indptr(counts.indptr, keep) * leaf_size,
        "xgboost_version": tuple(int(v) for v in version) if version is not None else None,
        "xgboost_feature_types": tuple(str(v) for v in types) if types is not None else None,
    }
    categories = category_values(model.get("cats"))
    if categories:
        extra["category_values"] = categories

    if num_deleted.any() or not every_node_named:
        nodes = drop_deleted(nodes, num_deleted, keep)
    tree_group = counts.tree_info[keep].astype(np.int32)
    if counts.vector_leaf:
        # one tree per output group from each vector-leaf tree (SHAP is linear in the leaves)
        nodes = expand_vector_leaves(nodes)
        tree_group = np.tile(np.arange(num_groups, dtype=np.int32), keep.size)
        extra["multi_strategy"] = "multi_output_tree"
    return Ensemble(
        **nodes,
        tree_group=tree_group,
        num_features=num_feature,
        num_groups=num_groups,
        base_score=base_score,
        feature_names=feature_names,
        feature_types=feature_types,
        model_kind=f"xgboost:{objective}",
        extra=extra,
        missing_value=sklearn_missing(learner),
    )
