"""CatBoost models -> :class:`~distshap.models.ensemble.Ensemble`.

The model is read from CatBoost's JSON export (``save_model(..., format="json")``), which holds
symmetric (``oblivious_trees``) or, for ``grow_policy`` Depthwise/Lossguide, nested (``trees``)
trees.

* **Splits.** CatBoost sets a split's bit when ``x > border`` (float32 values and borders), so
  ``x <= border`` goes left, converted to ``x < t`` exactly as for LightGBM
  (:func:`~distshap.models.lightgbm.le_threshold_to_lt_float32`).
* **Missing values.** ``nan_value_treatment`` ``AsFalse`` (``nan_mode='Min'``) and ``AsIs``
  send NaN left (bit 0), ``AsTrue`` (``nan_mode='Max'``) sends it right.
* **Oblivious trees.** Split ``i`` contributes bit ``i`` of the leaf index; the tree becomes a
  complete binary tree that tests the last split at the root, so leaves come out in leaf-index
  order. Covers are the leaf weights (sums over the leaves below for inner nodes); empty leaves
  give zero-cover nodes.
* **Outputs.** Raw formula values (``prediction_type='RawFormulaVal'``): leaf values times the
  model's scale, plus the per-dimension bias as ``base_score``. A multi-dimensional model
  (MultiClass, MultiRMSE) has one group per dimension, each tree copied once per group.

Categorical, text and embedding features (CTR / one-hot splits) are refused: their splits depend
on statistics distshap does not model.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

import numpy as np

from distshap.models.ensemble import Ensemble, UnsupportedModelError
from distshap.models.lightgbm import assemble_trees, le_threshold_to_lt_float32

__all__ = ["load_catboost", "load_catboost_json"]

_EMPTY_CATS = np.zeros(0, dtype=np.int32)


def load_catboost(model: Any) -> Ensemble:
    """Convert a fitted CatBoost model (``CatBoost``, ``CatBoostRegressor``, ...).

    Parameters
    ----------
    model : catboost.CatBoost
        A fitted model with numeric features only.

    Returns
    -------
    Ensemble

    Raises
    ------
    UnsupportedModelError
        For models with categorical, text or embedding features.
    """
    if not hasattr(model, "save_model"):
        raise TypeError(f"cannot read a CatBoost model from a {type(model).__name__}")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.json")
        model.save_model(path, format="json")
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    return load_catboost_json(doc, model_kind=f"catboost:{type(model).__name__}")


def _refuse_features(info: dict) -> None:
    for key, what in (
        ("categorical_features", "categorical"),
        ("text_features", "text"),
        ("embedding_features", "embedding"),
        ("ctrs", "categorical (CTR)"),
    ):
        if info.get(key):
            raise UnsupportedModelError(
                f"the CatBoost model has {what} features: their splits use target statistics "
                "distshap cannot explain exactly; encode them as numeric features before fitting"
            )


def _split_params(split: dict, float_features: dict[int, dict]) -> tuple[int, np.float32, bool]:
    if split.get("split_type", "FloatFeature") != "FloatFeature":
        raise UnsupportedModelError(
            f"the CatBoost model has a {split.get('split_type')} split: only numeric "
            "(FloatFeature) splits can be explained exactly"
        )
    ff = float_features[int(split["float_feature_index"])]
    feature = int(ff.get("flat_feature_index", ff.get("feature_index")))
    t = le_threshold_to_lt_float32(np.float64(np.float32(split["border"])))
    default_left = ff.get("nan_value_treatment", "AsIs") != "AsTrue"
    return feature, np.float32(t), default_left


def _oblivious_part(tree: dict, ff: dict[int, dict], scale: float) -> tuple[list, int]:
    splits = tree.get("splits") or []
    depth = len(splits)
    n_leaves = 1 << depth
    values = np.asarray(tree["leaf_values"], dtype=np.float64) * scale
    dim = values.size // n_leaves
    values = values.reshape(n_leaves, dim)
    weights = np.asarray(tree["leaf_weights"], dtype=np.float64)
    n_inner = n_leaves - 1
    n = n_inner + n_leaves
    ids = np.arange(n)
    level = np.floor(np.log2(ids + 1)).astype(np.int64)
    inner = ids < n_inner
    feature = np.full(n, -1, dtype=np.int32)
    thr = np.zeros(n, dtype=np.float32)
    dl = np.zeros(n, dtype=bool)
    for lv in range(depth):
        f, t, d = _split_params(splits[depth - 1 - lv], ff)
        sel = inner & (level == lv)
        feature[sel] = f
        thr[sel] = t
        dl[sel] = d
    cover = np.zeros(n)
    cover[n_inner:] = weights
    for i in range(n_inner - 1, -1, -1):
        cover[i] = cover[2 * i + 1] + cover[2 * i + 2]
    left = np.where(inner, 2 * ids + 1, -1).astype(np.int32)
    right = np.where(inner, 2 * ids + 2, -1).astype(np.int32)
    parts = []
    for g in range(dim):
        val = np.zeros(n)
        val[n_inner:] = values[:, g]
        parts.append(
            {
                "left": left,
                "right": right,
                "feature": feature,
                "threshold": thr,
                "default_left": dl,
                "is_categorical": np.zeros(n, dtype=bool),
                "cat_sizes": np.zeros(n, dtype=np.int64),
                "cat_values": _EMPTY_CATS,
                "value": val,
                "cover": cover.copy(),
            }
        )
    return parts, dim


def _nested_part(tree: dict, ff: dict[int, dict], scale: float) -> tuple[list, int]:
    feature: list[int] = []
    thr: list[float] = []
    dl: list[bool] = []
    left: list[int] = []
    right: list[int] = []
    values: list[np.ndarray] = []
    cover: list[float] = []

    def visit(node: dict) -> int:
        idx = len(feature)
        feature.append(-1)
        thr.append(0.0)
        dl.append(False)
        left.append(-1)
        right.append(-1)
        values.append(np.zeros(0))
        cover.append(0.0)
        if "split" not in node:
            values[idx] = np.atleast_1d(np.asarray(node["value"], dtype=np.float64)) * scale
            cover[idx] = float(node.get("weight", 0.0))
            return idx
        f, t, d = _split_params(node["split"], ff)
        feature[idx], thr[idx], dl[idx] = f, float(t), d
        left[idx] = visit(node["left"])
        right[idx] = visit(node["right"])
        cover[idx] = cover[left[idx]] + cover[right[idx]]
        return idx

    visit(tree)
    dim = max(v.size for v in values)
    n = len(feature)
    parts = []
    for g in range(dim):
        val = np.array([v[g] if v.size else 0.0 for v in values])
        parts.append(
            {
                "left": np.array(left, dtype=np.int32),
                "right": np.array(right, dtype=np.int32),
                "feature": np.array(feature, dtype=np.int32),
                "threshold": np.array(thr, dtype=np.float32),
                "default_left": np.array(dl, dtype=bool),
                "is_categorical": np.zeros(n, dtype=bool),
                "cat_sizes": np.zeros(n, dtype=np.int64),
                "cat_values": _EMPTY_CATS,
                "value": val,
                "cover": np.array(cover, dtype=np.float64),
            }
        )
    return parts, dim


def load_catboost_json(doc: dict | str | os.PathLike, model_kind: str = "catboost") -> Ensemble:
    """Convert CatBoost's JSON model export (a parsed dict or a ``.json`` path).

    Parameters
    ----------
    doc : dict or path
        The JSON document written by ``save_model(path, format="json")``.
    model_kind : str
        Recorded in :attr:`Ensemble.model_kind`.

    Returns
    -------
    Ensemble
    """
    if not isinstance(doc, dict):
        with open(os.fspath(doc), encoding="utf-8") as fh:
            doc = json.load(fh)
    info = doc.get("features_info", {})
    _refuse_features(info)
    float_features = {int(f["feature_index"]): f for f in info.get("float_features", [])}
    num_features = 1 + max(
        (int(f.get("flat_feature_index", f["feature_index"])) for f in float_features.values()),
        default=-1,
    )
    sb = doc.get("scale_and_bias", [1.0, [0.0]])
    scale = float(sb[0])
    bias = np.atleast_1d(np.asarray(sb[1], dtype=np.float64))
    if "oblivious_trees" in doc:
        trees, convert = doc["oblivious_trees"], _oblivious_part
    elif "trees" in doc:
        trees, convert = doc["trees"], _nested_part
    else:
        raise UnsupportedModelError(
            "the CatBoost JSON has neither 'oblivious_trees' nor 'trees': unknown model layout"
        )
    parts: list = []
    groups: list[int] = []
    dim = 1
    for tree in trees:
        tparts, dim = convert(tree, float_features, scale)
        parts.extend(tparts)
        groups.extend(range(dim))
    if not parts:
        raise ValueError("the CatBoost model has no trees: nothing to explain")
    if bias.size == 1 and dim > 1:
        bias = np.repeat(bias, dim)
    names = tuple(str(f.get("feature_id", "")) for f in float_features.values())
    return Ensemble(
        **assemble_trees(parts),
        tree_group=np.asarray(groups, dtype=np.int32),
        num_features=int(num_features),
        num_groups=int(dim),
        base_score=bias.astype(np.float64),
        feature_names=names if all(names) and len(names) == num_features else None,
        model_kind=model_kind,
    ).validate()
