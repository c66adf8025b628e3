"""CatBoost models -> :class:`~distshap.models.ensemble.Ensemble`.

The model is read from CatBoost's JSON export (``save_model(..., format="json")``), which holds
symmetric (``oblivious_trees``) or, for ``grow_policy`` Depthwise/Lossguide, nested (``trees``)
trees.

* **Splits.** CatBoost sets a split's bit when ``x > border`` (float32 values and borders), so
  ``x <= border`` goes left, converted to ``x < t`` exactly on float32 inputs
  (:func:`~distshap.models._common.le_threshold_to_lt_float32`); ``threshold64`` stays None.
* **Missing values.** ``nan_value_treatment`` ``AsFalse`` (``nan_mode='Min'``) and ``AsIs``
  send NaN left (bit 0), ``AsTrue`` (``nan_mode='Max'``) sends it right.
* **Oblivious trees.** Split ``i`` contributes bit ``i`` of the leaf index; the tree becomes a
  complete binary tree that tests the last split at the root, so leaves come out in leaf-index
  order. Covers are the leaf weights (sums over the leaves below for inner nodes); empty leaves
  give zero-cover nodes.
* **Outputs.** Raw formula values (``prediction_type='RawFormulaVal'``): leaf values times the
  model's scale, plus the per-dimension bias as ``base_score``. A multi-dimensional model
  (MultiClass, MultiRMSE) has one group per dimension, each tree copied once per group.

* **Categorical features.** One-hot splits and CTR splits over one categorical feature become
  categorical splits on category codes fixed at load time
  (:mod:`~distshap.models.catboost_categorical`), so SHAP values and everything else are
  attributed to the categorical feature itself; ``extra["category_values"]`` holds each such
  feature's known category keys, by which the input side codes its values. CTRs over feature
  combinations, text and embedding features are refused.

The counts the JSON implies are checked: every tree's leaf values and weights against its depth
and the model's dimension (the length of the bias), every split's feature against
``features_info``; a truncated or edited file is refused.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

import numpy as np

from distshap.models._common import (
    EMPTY_CATS,
    assemble_trees,
    check_num_features,
    le_threshold_to_lt_float32,
    malformed_is_value_error,
)
from distshap.models._files import (
    in_file,
    parse_json,
    read_model_bytes,
    refusal,
    sniff_model_bytes,
)
from distshap.models.catboost_categorical import CategoricalSplits
from distshap.models.ensemble import Ensemble, UnsupportedModelError

__all__ = ["is_catboost_document", "load_catboost", "load_catboost_json"]

#: Deepest tree accepted (CatBoost grows trees at most 16 deep).
_MAX_DEPTH = 64
_RESAVE = "save the model again with model.save_model('model.json', format='json')"


def is_catboost_document(doc: Any) -> bool:
    """Whether a parsed JSON document is CatBoost's JSON model export."""
    return (
        isinstance(doc, dict)
        and "features_info" in doc
        and ("oblivious_trees" in doc or "trees" in doc)
    )


def _fail(what: str) -> ValueError:
    return ValueError(f"inconsistent CatBoost model: {what}; {_RESAVE}")


def load_catboost(model: Any) -> Ensemble:
    """Convert a fitted CatBoost model (``CatBoost``, ``CatBoostRegressor``, ...).

    Parameters
    ----------
    model : catboost.CatBoost
        A fitted model with numeric features, and categorical ones split one-hot or by CTRs
        of one feature each.

    Returns
    -------
    Ensemble

    Raises
    ------
    UnsupportedModelError
        For models with CTRs over feature combinations, text or embedding features.
    """
    if not hasattr(model, "save_model"):
        raise TypeError(f"cannot read a CatBoost model from a {type(model).__name__}")
    _refuse_declared(model)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.json")
        model.save_model(path, format="json")
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    return load_catboost_json(doc, model_kind=f"catboost:{type(model).__name__}")


def _refuse_declared(model: Any) -> None:
    """Refuse a fitted model declaring text or embedding features, naming them, before the
    JSON export (which fails on some and leaves the others out, with their columns)."""
    names = list(getattr(model, "feature_names_", None) or [])
    for method, what in (
        ("get_text_feature_indices", "text"),
        ("get_embedding_feature_indices", "embedding"),
    ):
        try:
            indices = [int(i) for i in getattr(model, method)()]
        except Exception:  # an older CatBoost, or no such features: the document decides
            continue
        if indices:
            shown = [names[i] if i < len(names) else i for i in indices]
            raise UnsupportedModelError(
                f"the CatBoost model has {what} features {shown}: their splits use statistics "
                "distshap cannot explain exactly; encode them as numeric features before fitting"
            )


def _refuse_features(info: dict) -> None:
    for key, what in (("text_features", "text"), ("embedding_features", "embedding")):
        if info.get(key):
            raise UnsupportedModelError(
                f"the CatBoost model has {what} features: their splits use statistics "
                "distshap cannot explain exactly; encode them as numeric features before fitting"
            )


#: A split's (feature, threshold, default_left, codes that go right or None when numeric).
_Split = tuple[int, np.float32, bool, "np.ndarray | None"]


def _split_params(split: Any, float_features: dict[int, dict], cats: Any) -> _Split:
    if not isinstance(split, dict):
        raise _fail(f"a split is a {type(split).__name__}, not an object")
    kind = split.get("split_type", "FloatFeature")
    if kind in ("OneHotFeature", "OnlineCtr") and cats is not None:
        feature, codes, default_left = cats.split(split)
        return feature, np.float32(0.0), default_left, codes
    if kind != "FloatFeature":
        raise UnsupportedModelError(
            f"the CatBoost model has a {kind} split: only numeric, one-hot and CTR splits "
            "can be explained exactly"
        )
    try:
        index = int(split["float_feature_index"])
        border = np.float32(split["border"])
    except (KeyError, TypeError, ValueError):
        raise _fail("a split lacks a numeric float_feature_index or border") from None
    if index not in float_features:
        raise _fail(f"a split uses float feature {index}, which features_info does not list")
    ff = float_features[index]
    feature = int(ff.get("flat_feature_index", ff.get("feature_index")))
    t = le_threshold_to_lt_float32(np.float64(border))
    default_left = ff.get("nan_value_treatment", "AsIs") != "AsTrue"
    return feature, np.float32(t), default_left, None


def _categorical_arrays(codes: list, n: int) -> dict[str, np.ndarray]:
    """``is_categorical``, ``cat_sizes`` and ``cat_values`` of a tree's nodes (``None``:
    a numeric split or a leaf)."""
    listed = [c for c in codes if c is not None]
    if not listed:
        return {
            "is_categorical": np.zeros(n, dtype=bool),
            "cat_sizes": np.zeros(n, dtype=np.int64),
            "cat_values": EMPTY_CATS,
        }
    sizes = np.array([0 if c is None else c.size for c in codes] + [0] * (n - len(codes)))
    return {
        "is_categorical": np.array([c is not None for c in codes] + [False] * (n - len(codes))),
        "cat_sizes": sizes.astype(np.int64),
        "cat_values": np.concatenate(listed).astype(np.int32),
    }


def _numbers(tree: dict, key: str, t: int) -> np.ndarray:
    try:
        return np.asarray(tree[key], dtype=np.float64).reshape(-1)
    except KeyError:
        raise _fail(f"tree {t} lacks {key!r}") from None
    except (TypeError, ValueError):
        raise _fail(f"tree {t}'s {key} holds values that are no numbers") from None


def _oblivious_part(
    tree: dict, t: int, ff: dict[int, dict], scale: float, dim: int, cats: Any
) -> list:
    splits = tree.get("splits") or []
    depth = len(splits)
    if depth > _MAX_DEPTH:
        raise _fail(f"tree {t} is {depth} splits deep (CatBoost grows at most 16)")
    n_leaves = 1 << depth
    values = _numbers(tree, "leaf_values", t) * scale
    weights = _numbers(tree, "leaf_weights", t)
    if values.size != n_leaves * dim or weights.size != n_leaves:
        raise _fail(
            f"tree {t} has {depth} splits, so {n_leaves} leaves of {dim} values, but "
            f"{values.size} leaf_values and {weights.size} leaf_weights"
        )
    values = values.reshape(n_leaves, dim)
    n_inner = n_leaves - 1
    n = n_inner + n_leaves
    ids = np.arange(n)
    level = np.floor(np.log2(ids + 1)).astype(np.int64)
    inner = ids < n_inner
    feature = np.full(n, -1, dtype=np.int32)
    thr = np.zeros(n, dtype=np.float32)
    dl = np.zeros(n, dtype=bool)
    codes: list = []
    for lv in range(depth):
        f, th, d, c = _split_params(splits[depth - 1 - lv], ff, cats)
        sel = inner & (level == lv)
        feature[sel] = f
        thr[sel] = th
        dl[sel] = d
        codes.extend([c] * (1 << lv))  # the nodes of a level, in index order
    categorical = _categorical_arrays(codes, n)
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
                **categorical,
                "value": val,
                "cover": cover.copy(),
            }
        )
    return parts


def _nested_part(
    tree: dict, t: int, ff: dict[int, dict], scale: float, dim: int, cats: Any
) -> list:
    """A nested (Depthwise / Lossguide) tree, walked with an explicit stack in pre-order."""
    feature: list[int] = []
    thr: list[float] = []
    dl: list[bool] = []
    left: list[int] = []
    right: list[int] = []
    values: list[np.ndarray] = []
    cover: list[float] = []
    inner: list[int] = []
    codes: list = []
    stack: list[tuple[Any, int, int, str]] = [(tree, 0, -1, "")]  # node, depth, parent, side
    while stack:
        node, depth, parent, side = stack.pop()
        if not isinstance(node, dict) or depth > _MAX_DEPTH:
            raise _fail(f"tree {t} has a node that is no object, or is over {_MAX_DEPTH} deep")
        idx = len(feature)
        feature.append(-1)
        thr.append(0.0)
        dl.append(False)
        codes.append(None)
        left.append(-1)
        right.append(-1)
        values.append(np.zeros(dim))
        cover.append(0.0)
        if parent >= 0:
            (left if side == "l" else right)[parent] = idx
        if "split" not in node:
            try:
                value = np.asarray(node["value"], dtype=np.float64).reshape(-1) * scale
                cover[idx] = float(node.get("weight", 0.0))
            except (KeyError, TypeError, ValueError):
                raise _fail(f"tree {t} has a leaf without a numeric value or weight") from None
            if value.size != dim:
                raise _fail(f"tree {t} has a leaf of {value.size} values, the model {dim}")
            values[idx] = value
            continue
        if "left" not in node or "right" not in node:
            raise _fail(f"tree {t} has a split without both children")
        feature[idx], th, dl[idx], codes[idx] = _split_params(node["split"], ff, cats)
        thr[idx] = float(th)
        inner.append(idx)
        stack.append((node["right"], depth + 1, idx, "r"))
        stack.append((node["left"], depth + 1, idx, "l"))
    for idx in reversed(inner):  # children come after their parent
        cover[idx] = cover[left[idx]] + cover[right[idx]]
    n = len(feature)
    categorical = _categorical_arrays(codes, n)
    parts = []
    for g in range(dim):
        parts.append(
            {
                "left": np.array(left, dtype=np.int32),
                "right": np.array(right, dtype=np.int32),
                "feature": np.array(feature, dtype=np.int32),
                "threshold": np.array(thr, dtype=np.float32),
                "default_left": np.array(dl, dtype=bool),
                **categorical,
                "value": np.array([v[g] for v in values]),
                "cover": np.array(cover, dtype=np.float64),
            }
        )
    return parts


def _dimension(bias: np.ndarray, trees: list, oblivious: bool) -> int:
    """The model's dimension: the bias length, or (a scalar bias) what the first tree implies."""
    if bias.size > 1 or not trees:
        return max(bias.size, 1)
    tree = trees[0]
    if not isinstance(tree, dict):
        raise _fail("tree 0 is no object")
    if oblivious:
        n_leaves = 1 << min(len(tree.get("splits") or []), _MAX_DEPTH + 1)
        return max(_numbers(tree, "leaf_values", 0).size // n_leaves, 1)
    node = tree
    for _ in range(_MAX_DEPTH + 1):
        if not isinstance(node, dict) or "split" not in node:
            break
        node = node.get("left")
    value = node.get("value", 0.0) if isinstance(node, dict) else 0.0
    return max(np.asarray(value).size, 1)


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

    Raises
    ------
    ValueError
        For a truncated or inconsistent document (a path is named in the message).
    UnsupportedModelError
        For categorical, text or embedding features, or a document that is no CatBoost model.
    """
    if not isinstance(doc, dict):
        path = os.fspath(doc)
        with in_file(path):
            data = read_model_bytes(path)
            kind = sniff_model_bytes(data)
            if kind != "json":
                raise UnsupportedModelError(refusal(kind, data))
            return _from_document(parse_json(data), model_kind)
    return _from_document(doc, model_kind)


@malformed_is_value_error("CatBoost JSON model", _RESAVE)
def _from_document(doc: Any, model_kind: str) -> Ensemble:
    if not is_catboost_document(doc):
        raise UnsupportedModelError(
            "this JSON is no CatBoost model export (it lacks 'features_info' and "
            f"'oblivious_trees' / 'trees'): {_RESAVE}"
        )
    info = doc.get("features_info") or {}
    _refuse_features(info)
    try:
        float_features = {int(f["feature_index"]): f for f in info.get("float_features", [])}
        named = {
            int(f.get("flat_feature_index", f["feature_index"])): str(f.get("feature_id", ""))
            for f in [*float_features.values(), *(info.get("categorical_features") or [])]
        }
        n_float_bins = sum(len(f.get("borders") or []) for f in float_features.values())
    except (KeyError, TypeError, ValueError):
        raise _fail("features_info.float_features lacks feature indices") from None
    num_features = check_num_features(1 + max(named, default=-1), "the CatBoost features_info")
    cats = CategoricalSplits(doc, info, n_float_bins) if info.get("categorical_features") else None
    sb = doc.get("scale_and_bias", [1.0, [0.0]])
    try:
        scale = float(sb[0])
        bias = np.atleast_1d(np.asarray(sb[1], dtype=np.float64)).reshape(-1)
    except (TypeError, ValueError, IndexError):
        raise _fail(f"scale_and_bias is {str(sb)[:80]}, not [scale, [bias, ...]]") from None
    oblivious = "oblivious_trees" in doc
    trees = doc["oblivious_trees"] if oblivious else doc["trees"]
    if not isinstance(trees, list):
        raise _fail("the trees are no list")
    convert = _oblivious_part if oblivious else _nested_part
    dim = _dimension(bias, trees, oblivious)
    parts: list = []
    groups: list[int] = []
    for t, tree in enumerate(trees):
        if not isinstance(tree, dict):
            raise _fail(f"tree {t} is no object")
        parts.extend(convert(tree, t, float_features, scale, dim, cats))
        groups.extend(range(dim))
    if not parts:
        raise ValueError("the CatBoost model has no trees: nothing to explain")
    if bias.size == 1 and dim > 1:
        bias = np.repeat(bias, dim)
    names = tuple(named.get(j, "") for j in range(num_features))
    extra = {}
    if cats is not None:  # the known categories' keys, by which rows are coded
        extra["category_values"] = {j: tuple(int(k) for k in v) for j, v in cats.keys.items()}
    return Ensemble(
        **assemble_trees(parts),
        tree_group=np.asarray(groups, dtype=np.int32),
        num_features=int(num_features),
        num_groups=int(dim),
        base_score=bias.astype(np.float64),
        feature_names=names if all(names) and len(names) == num_features else None,
        model_kind=model_kind,
        extra=extra,
    ).validate()
