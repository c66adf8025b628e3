"""What an XGBoost model document's parameters mean, and the counts it must agree with.

Helpers of :mod:`distshap.models.xgboost`: reading integer parameters stored as strings,
``base_score`` in its several spellings and its margin under each objective, the missing-value
sentinel the scikit-learn wrapper may record, the category encoder (XGBoost >= 3.1), and the
check of every count the document records (``num_trees``, ``tree_info``, ``iteration_indptr``,
``num_parallel_tree``, ``num_class`` / ``num_target``, ``num_feature``). A document whose counts
disagree was truncated or edited; it is refused with what disagrees.
"""

from __future__ import annotations

import json
import math
import warnings
from typing import Any

import numpy as np

from distshap.models._common import check_num_features
from distshap.models.ensemble import UnsupportedModelError

__all__ = [
    "Counts",
    "base_margin",
    "category_values",
    "get",
    "int_param",
    "sklearn_missing",
]

# Objectives whose base_score is stored in output space and reaches margin space through
# logit / log. Every other known objective stores it in margin space already.
_LOGIT_OBJECTIVES = frozenset({"binary:logistic", "reg:logistic"})
# XGBoost clamps a logistic base_score to [_LOGIT_EPS, 1 - _LOGIT_EPS] before the logit.
_LOGIT_EPS = 1e-6
_LOG_OBJECTIVES = frozenset(
    {"count:poisson", "reg:gamma", "reg:tweedie", "survival:cox", "survival:aft"}
)
_IDENTITY_OBJECTIVES = frozenset(
    {
        "reg:squarederror",
        "reg:linear",
        "reg:squaredlogerror",
        "reg:pseudohubererror",
        "reg:absoluteerror",
        "reg:quantileerror",
        "reg:expectileerror",
        "binary:logitraw",
        "binary:hinge",
        "multi:softmax",
        "multi:softprob",
        "rank:pairwise",
        "rank:ndcg",
        "rank:map",
    }
)


def get(obj: Any, key: str, where: str) -> Any:
    """``obj[key]``, or a refusal naming what lacks the key."""
    if not isinstance(obj, dict) or key not in obj:
        raise UnsupportedModelError(
            f"not a recognised XGBoost model document: {where} lacks {key!r} (save the model "
            "with booster.save_model('model.json') from XGBoost >= 1.0)"
        )
    return obj[key]


def int_param(obj: dict, key: str, default: int) -> int:
    """An integer parameter (XGBoost stores them as strings)."""
    raw = obj.get(key, default) if isinstance(obj, dict) else default
    try:
        return int(raw)
    except (TypeError, ValueError):
        raise ValueError(f"cannot read {key}={raw!r} as an integer") from None


def _parse_numbers(raw: Any) -> np.ndarray:
    """base_score as stored: number, "0.5", "[5E-1]", "[a,b]", or an array of either."""
    if isinstance(raw, str):
        text = raw.strip()
        if text.startswith("[") and text.endswith("]"):
            parts = [p for p in text[1:-1].split(",") if p.strip()]
        else:
            parts = [text]
        try:
            return np.array([float(p) for p in parts], dtype=np.float64)
        except ValueError:
            raise UnsupportedModelError(f"cannot read base_score {raw!r} as numbers") from None
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        return np.array([float(raw)], dtype=np.float64)
    if isinstance(raw, (list, tuple, np.ndarray)):
        try:
            return np.array([float(v) for v in raw], dtype=np.float64).reshape(-1)
        except (TypeError, ValueError):
            raise UnsupportedModelError(f"cannot read base_score {raw!r} as numbers") from None
    raise UnsupportedModelError(f"cannot read base_score {raw!r} as numbers")


def base_margin(raw: Any, objective: str, num_groups: int) -> np.ndarray:
    """``base_score`` (as stored) in margin space, one value per output group."""
    values = _parse_numbers(raw)
    if values.size == 1:
        values = np.repeat(values, num_groups)
    elif values.size != num_groups:
        raise UnsupportedModelError(
            f"base_score holds {values.size} values but the model has {num_groups} output groups"
        )
    # XGBoost keeps base_score as float32.
    values = values.astype(np.float32).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        if objective in _LOGIT_OBJECTIVES:
            out = _logit_margin(values, raw)
        elif objective in _LOG_OBJECTIVES:
            out = np.log(values)
        else:
            if objective not in _IDENTITY_OBJECTIVES:
                warnings.warn(
                    f"unknown XGBoost objective {objective!r}: assuming its base_score is "
                    "stored in margin space; check the bias column against "
                    "predict(output_margin=True)",
                    UserWarning,
                    stacklevel=4,
                )
            out = values
    if not np.all(np.isfinite(out)):
        raise UnsupportedModelError(
            f"base_score {raw!r} has no finite margin under objective {objective!r}"
        )
    return out


def _logit_margin(values: np.ndarray, raw: Any) -> np.ndarray:
    """The margin of a probability ``base_score``, as XGBoost predicts with it.

    XGBoost clamps the probability to ``[1e-6, 1 - 1e-6]`` (so 0 and 1, and the automatic
    intercept of rare positives, stay finite) and takes ``-logf(1 / p - 1)`` in float32. The
    float64 logit is kept where the two agree to 1e-6; near ``p = 1`` the float32 cancellation
    in ``1 / p - 1`` moves XGBoost's margin further (13.745 instead of 13.816 at the upper
    bound), and XGBoost's own value is taken, since it is the one every prediction adds.
    """
    if np.any(np.isnan(values) | (values < 0) | (values > 1)):
        raise UnsupportedModelError(
            f"base_score {raw!r} is no probability in [0, 1], which a logistic objective needs "
            "(XGBoost refuses it too); save the model again from XGBoost"
        )
    p32 = np.clip(values.astype(np.float32), np.float32(_LOGIT_EPS), np.float32(1 - _LOGIT_EPS))
    p = p32.astype(np.float64)
    out = np.log(p) - np.log1p(-p)
    xgb = -np.log(np.float32(1) / p32 - np.float32(1)).astype(np.float64)
    return np.where(np.abs(out - xgb) <= 1e-6, out, xgb)


def sklearn_missing(learner: dict) -> float:
    """The ``missing=`` value the scikit-learn wrapper recorded in the model, else NaN.

    ``XGBModel.save_model`` stores a JSON string in ``learner.attributes.scikit_learn``. XGBoost
    before 1.6 put every estimator parameter there, ``missing`` included; later versions store
    only ``_estimator_type``, and then (as for a plain ``Booster``) the file does not know its
    missing value: NaN is assumed and ``TreeExplainer(missing=...)`` can say otherwise.
    """
    attrs = learner.get("attributes")
    meta = attrs.get("scikit_learn") if isinstance(attrs, dict) else None
    if not meta:
        return math.nan
    try:
        params = json.loads(meta)
    except (TypeError, ValueError):
        raise ValueError(
            "the model's scikit_learn attribute is not JSON, so its missing= value cannot be "
            "read; save the model again with XGBModel.save_model"
        ) from None
    raw = params.get("missing") if isinstance(params, dict) else None
    if raw is None:
        return math.nan
    try:
        return float(raw)
    except (TypeError, ValueError):
        raise ValueError(f"the scikit_learn attribute records missing={raw!r}, no number") from None


def category_values(cats: Any) -> dict[int, Any]:
    """Training categories per feature (XGBoost >= 3.1 stores its category encoder)."""
    out: dict[int, Any] = {}
    if not isinstance(cats, dict):
        return out
    enc = cats.get("enc")
    if not isinstance(enc, list):
        return out
    for f, entry in enumerate(enc):
        if not isinstance(entry, dict):
            continue
        values = entry.get("values")
        if values is None or len(values) == 0:
            continue
        offsets = entry.get("offsets")
        if offsets is not None and len(offsets) > 0:
            blob = bytes(np.asarray(values, dtype=np.uint8))
            offs = np.asarray(offsets, dtype=np.int64)
            out[f] = [blob[a:b].decode("utf-8") for a, b in zip(offs[:-1], offs[1:], strict=True)]
        else:  # a copy in native byte order: never a view that keeps the model's bytes alive
            a = np.asarray(values)
            out[f] = np.array(a, dtype=a.dtype.newbyteorder("="))
    return out


def _vector_leaf(trees: list, num_groups: int) -> bool:
    """Whether the trees have vector leaves (``multi_output_tree``): ``num_groups`` values each.

    A vector-leaf tree records ``size_leaf_vector`` and keeps its leaves' values apart, in
    ``leaf_weights``. Every tree of a model is of one kind, with one value per output group.
    """
    kinds = set()
    for t, tree in enumerate(trees):
        if not isinstance(tree, dict):
            continue  # Counts.check_tree says what is wrong
        size = int_param(tree.get("tree_param") or {}, "size_leaf_vector", 1)
        vector = "leaf_weights" in tree or size > 1
        if vector and size != num_groups:
            raise ValueError(
                f"inconsistent XGBoost model: tree {t} has vector leaves of "
                f"size_leaf_vector={size} but the model has {num_groups} outputs (edited)"
            )
        kinds.add(vector)
        if len(kinds) > 1:
            raise ValueError(
                f"inconsistent XGBoost model: tree {t} differs from the trees before it in "
                "having vector leaves (leaf_weights) or not (edited)"
            )
    return True in kinds


class Counts:
    """The counts a document records, read and checked against each other.

    Attributes
    ----------
    num_trees, num_feature, num_groups, num_parallel_tree : int
    vector_leaf : bool
        Whether the trees have vector leaves (``multi_output_tree``): one value per output
        group in each leaf, every tree serving every group.
    tree_info : int64 (num_trees,)
        Output group of each tree.
    indptr : int64 (rounds + 1,)
        First tree of each boosting round (``iteration_indptr``, or rounds of equal size).
    """

    def __init__(self, mparam: dict, model: dict, trees: Any) -> None:
        if not isinstance(trees, list):
            raise ValueError(f"the model's 'trees' is a {type(trees).__name__}, not a list")
        n = len(trees)
        self.num_trees = n
        gbparam = model.get("gbtree_model_param") or {}
        recorded = int_param(gbparam, "num_trees", n)
        if recorded != n:
            raise ValueError(
                f"inconsistent XGBoost model: gbtree_model_param.num_trees is {recorded} but "
                f"the document holds {n} trees (truncated or edited); save the model again"
            )
        self.num_feature = check_num_features(
            int_param(mparam, "num_feature", 0), "learner_model_param.num_feature"
        )
        num_class = int_param(mparam, "num_class", 0)
        num_target = int_param(mparam, "num_target", 1)
        if num_class < 0 or num_target < 1 or (num_class > 1 and num_target > 1):
            raise ValueError(
                f"inconsistent XGBoost model: num_class={num_class}, num_target={num_target} "
                "(a model has classes or targets, each at least 1)"
            )
        self.num_groups = num_class if num_class > 0 else num_target
        self.vector_leaf = _vector_leaf(trees, self.num_groups)
        self.num_parallel_tree = int_param(gbparam, "num_parallel_tree", 1)
        if self.num_parallel_tree < 1:
            raise ValueError(f"num_parallel_tree={self.num_parallel_tree} is below 1")
        info = model.get("tree_info")
        self.tree_info = np.asarray(info if info is not None else np.zeros(n), dtype=np.int64)
        if self.tree_info.shape != (n,):
            raise ValueError(
                f"inconsistent XGBoost model: tree_info has {self.tree_info.size} entries for "
                f"{n} trees (truncated or edited); save the model again"
            )
        if n and (self.tree_info.min() < 0 or self.tree_info.max() >= self.num_groups):
            bad = int(self.tree_info.max() if self.tree_info.max() >= 0 else self.tree_info.min())
            raise ValueError(
                f"tree_info names output group {bad} but the model declares "
                f"{self.num_groups} outputs"
            )
        if self.vector_leaf and np.any(self.tree_info != 0):
            raise ValueError(
                "inconsistent XGBoost model: its vector-leaf trees hold every output, but "
                "tree_info gives some of them an output group other than 0 (edited)"
            )
        self.indptr = self._indptr(model.get("iteration_indptr"))

    def _indptr(self, raw: Any) -> np.ndarray:
        n = self.num_trees
        # a vector-leaf tree holds every output group: a round has one per parallel tree
        groups = 1 if self.vector_leaf else self.num_groups
        per_round = self.num_parallel_tree * groups
        if raw is not None and len(raw) > 0:
            indptr = np.asarray(raw, dtype=np.int64).reshape(-1)
            if indptr[0] != 0 or indptr[-1] != n:
                raise ValueError(
                    f"inconsistent XGBoost model: iteration_indptr runs from {int(indptr[0])} to "
                    f"{int(indptr[-1])} for {n} trees (truncated or edited); save it again"
                )
            if np.any(np.diff(indptr) != per_round):
                raise ValueError(
                    "inconsistent XGBoost model: iteration_indptr has rounds of other than "
                    f"{per_round} trees (num_parallel_tree={self.num_parallel_tree} x "
                    f"{groups} trees per output); the document is truncated or edited"
                )
            return indptr
        if n % per_round:
            raise ValueError(
                f"inconsistent XGBoost model: {n} trees do not make whole boosting rounds of "
                f"{per_round} (num_parallel_tree={self.num_parallel_tree} x "
                f"{groups} trees per output); the document is truncated or edited"
            )
        return np.arange(0, n + 1, per_round, dtype=np.int64)

    def check_tree(self, t: int, tree: Any) -> None:
        """A tree's own record (``id``, ``tree_param``) against its arrays and the model."""
        if not isinstance(tree, dict):
            raise ValueError(f"XGBoost tree {t} is a {type(tree).__name__}, not an object")
        left = get(tree, "left_children", f"tree {t}")
        if not hasattr(left, "__len__") or isinstance(left, (str, dict)):
            raise ValueError(f"XGBoost tree {t}: left_children is no array")
        num_nodes = len(left)
        tree_id = int_param(tree, "id", t)
        if tree_id != t:
            raise ValueError(
                f"inconsistent XGBoost model: the tree at position {t} has id {tree_id} "
                "(trees removed or reordered); save the model again"
            )
        tparam = tree.get("tree_param") or {}
        recorded = int_param(tparam, "num_nodes", num_nodes)
        if recorded != num_nodes:
            raise ValueError(
                f"inconsistent XGBoost model: tree {t} records num_nodes={recorded} but its "
                f"arrays hold {num_nodes} nodes (truncated or edited); save the model again"
            )
        tree_features = int_param(tparam, "num_feature", self.num_feature)
        if tree_features > self.num_feature:
            raise ValueError(
                f"inconsistent XGBoost model: tree {t} records num_feature={tree_features}, "
                f"more than the model's {self.num_feature}"
            )
