"""scikit-learn tree models -> :class:`~distshap.models.ensemble.Ensemble`.

Supported estimators, their number of output groups ``G`` and what one output (margin) is:

* ``DecisionTreeRegressor``, ``RandomForestRegressor``, ``ExtraTreesRegressor``
  (and ``ExtraTreeRegressor``): ``G = 1``, ``predict(X)`` (mean of the trees); fitted on a
  2-D target of ``K`` columns, ``G = K`` and output ``g`` is ``predict(X)[:, g]`` (each tree
  becomes one tree per output, with that output's leaf values, as shap explains it);
* ``DecisionTreeClassifier``, ``RandomForestClassifier``, ``ExtraTreesClassifier``
  (and ``ExtraTreeClassifier``): ``G = n_classes`` (binary included: 2 groups),
  ``predict_proba(X)[:, g]``; classifiers fitted on several outputs are refused (shap's
  values for them sum to each output's probabilities divided by the number of outputs);
* ``GradientBoostingRegressor``: ``G = 1``, ``predict(X)``;
* ``GradientBoostingClassifier``: ``G = 1`` (binary) or ``K``, ``decision_function(X)``;
* ``HistGradientBoostingRegressor``: ``G = 1``, the raw prediction (``predict(X)`` for
  identity-link losses, its log for ``poisson`` / ``gamma``);
* ``HistGradientBoostingClassifier``: ``G = 1`` (binary) or ``K``, ``decision_function(X)``.

Forests are averages: every tree's leaf values are divided by ``n_estimators``. A classifier
tree's leaf value is its class-probability vector (node values normalised per node, as
``predict_proba`` does), and each tree becomes one :class:`Ensemble` tree per class. Gradient
boosting leaves include the learning rate; ``base_score`` is the init estimator's constant raw
prediction (``init='zero'`` or a ``DummyRegressor``/``DummyClassifier``; any other init
estimator is refused, it is not a tree). Covers are ``weighted_n_node_samples`` (trees) and the
node sample ``count`` (histogram gradient boosting), as shap uses.

Split semantics: sklearn trees send ``x <= threshold`` left. Decision trees, forests and
``GradientBoosting*`` cast inputs to float32 and compare them with a float64 threshold: the
threshold becomes ``x < t`` on float32 (exact for every float32 input) and ``threshold64`` stays
``None``. Histogram gradient boosting compares float64 inputs with float64 thresholds: its
loader also sets ``threshold64 = nextafter(threshold, +inf)`` (``x <= thr  <=>  x < t`` on
doubles), which :mod:`distshap.encoding` keeps exact. NaN follows ``missing_go_to_left``.
Histogram gradient boosting's categorical splits are converted back to the raw category values
of the input (its internal ordinal encoder is undone) where those are non-negative integers;
other categories (text, negative or fractional numbers) stay the encoder's codes and are kept
as the feature's training labels (``extra["category_values"]``), by which a DataFrame's category
column is coded, as the encoder codes it. Unknown categories and NaN follow the missing
direction, as sklearn's predictor does.

Histogram gradient boosting is read through private attributes (``_predictors``,
``_baseline_prediction``, ``_bin_mapper``, ``_preprocessor``); a scikit-learn release that
changes them is reported as :class:`UnsupportedModelError`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from distshap.models._common import (
    EMPTY_CATS,
    assemble_trees,
    le_threshold_to_lt64,
    le_threshold_to_lt_float32,
    lt64_to_float32,
)
from distshap.models.ensemble import Ensemble, UnsupportedModelError
from distshap.models.iterations import iterations_indptr

__all__ = ["SKLEARN_MODELS", "load_sklearn"]

#: The scikit-learn classes :func:`load_sklearn` converts.
SKLEARN_MODELS = (
    "DecisionTreeRegressor",
    "DecisionTreeClassifier",
    "ExtraTreeRegressor",
    "ExtraTreeClassifier",
    "RandomForestRegressor",
    "RandomForestClassifier",
    "ExtraTreesRegressor",
    "ExtraTreesClassifier",
    "GradientBoostingRegressor",
    "GradientBoostingClassifier",
    "HistGradientBoostingRegressor",
    "HistGradientBoostingClassifier",
)


def _tree_part(tree: Any, values: np.ndarray) -> dict[str, np.ndarray]:
    """Node arrays of one fitted ``sklearn.tree._tree.Tree`` with the given leaf values."""
    left = np.asarray(tree.children_left, dtype=np.int64)
    right = np.asarray(tree.children_right, dtype=np.int64)
    leaf = left < 0
    n = left.shape[0]
    thr = np.where(leaf, 0.0, np.asarray(tree.threshold, dtype=np.float64))
    if hasattr(tree, "missing_go_to_left"):
        dl = np.asarray(tree.missing_go_to_left).astype(bool)
    else:  # scikit-learn < 1.3: NaN is rejected at predict time, any direction is fine
        dl = np.ones(n, dtype=bool)
    return {
        "left": np.where(leaf, -1, left).astype(np.int32),
        "right": np.where(leaf, -1, right).astype(np.int32),
        "feature": np.where(leaf, -1, np.asarray(tree.feature)).astype(np.int32),
        "threshold": np.where(leaf, np.float32(0), le_threshold_to_lt_float32(thr)),
        "default_left": dl & ~leaf,
        "is_categorical": np.zeros(n, dtype=bool),
        "cat_sizes": np.zeros(n, dtype=np.int64),
        "cat_values": EMPTY_CATS,
        "value": np.where(leaf, values, 0.0).astype(np.float64),
        "cover": np.asarray(tree.weighted_n_node_samples, dtype=np.float64),
    }


def _check_single_output(est: Any, name: str) -> None:
    if int(getattr(est.tree_, "n_outputs", 1)) != 1:
        raise UnsupportedModelError(
            f"{name} was fitted on {est.tree_.n_outputs} outputs: multi-output trees are not "
            "supported; fit one model per output"
        )


def _check_classifier_outputs(est: Any, name: str) -> None:
    """Refuse a classifier fitted on several outputs (a 2-D ``y``)."""
    n_outputs = int(getattr(est.tree_, "n_outputs", 1))
    if n_outputs != 1:
        raise UnsupportedModelError(
            f"{name} was fitted on {n_outputs} outputs: multi-output classifiers are not "
            "supported (predict_proba gives one array per output, which shap's values do not "
            "sum to either); fit one classifier per output"
        )


def _tree_estimators(model: Any, is_classifier: bool, scale: float) -> tuple[list, list, int]:
    """Parts and groups for a single tree or a forest (averaged).

    A regressor fitted on ``K`` outputs (a 2-D ``y``) has ``K`` values per leaf: each tree
    becomes ``K`` trees of the same structure, one per output group (as shap explains it).
    """
    estimators = [model] if hasattr(model, "tree_") else list(model.estimators_)
    name = type(model).__name__
    parts: list[dict[str, np.ndarray]] = []
    groups: list[int] = []
    num_groups = 1
    for est in estimators:
        if not is_classifier:
            raw = np.asarray(est.tree_.value, dtype=np.float64)[:, :, 0]
            num_groups = raw.shape[1]
            part = _tree_part(est.tree_, raw[:, 0] * scale)
            parts.append(part)
            groups.append(0)
            leaf = part["left"] < 0
            for g in range(1, num_groups):
                parts.append(dict(part, value=np.where(leaf, raw[:, g] * scale, 0.0)))
                groups.append(g)
            continue
        _check_classifier_outputs(est, name)
        raw = np.asarray(est.tree_.value, dtype=np.float64)[:, 0, :]
        num_groups = raw.shape[1]
        total = raw.sum(axis=1, keepdims=True)
        total[total == 0.0] = 1.0
        proba = raw / total * scale
        for g in range(num_groups):
            parts.append(_tree_part(est.tree_, proba[:, g]))
            groups.append(g)
    return parts, groups, num_groups


def _gradient_boosting(model: Any) -> Ensemble:
    name = type(model).__name__
    init = getattr(model, "init_", None)
    if not (isinstance(init, str) and init == "zero"):
        if type(init).__name__ not in ("DummyRegressor", "DummyClassifier"):
            raise UnsupportedModelError(
                f"{name} uses init={type(init).__name__}: only init='zero' or the default "
                "constant (Dummy*) init can be explained exactly; refit with the default init"
            )
    stages = np.asarray(model.estimators_)
    n_stages, k = stages.shape
    lr = float(model.learning_rate)
    parts = []
    groups = []
    for i in range(n_stages):
        for g in range(k):
            est = stages[i, g]
            _check_single_output(est, name)
            parts.append(_tree_part(est.tree_, np.asarray(est.tree_.value)[:, 0, 0] * lr))
            groups.append(g)
    # the init prediction is constant: raw(x0) minus the trees' sum at any row x0
    x0 = np.zeros((1, int(model.n_features_in_)), dtype=np.float32)
    if hasattr(model, "decision_function"):
        raw0 = np.asarray(model.decision_function(x0), dtype=np.float64).reshape(k)
    else:
        raw0 = np.asarray(model.predict(x0), dtype=np.float64).reshape(k)
    trees0 = np.zeros(k)
    for i in range(n_stages):
        for g in range(k):
            trees0[g] += lr * float(stages[i, g].predict(x0)[0])
    # the loss says what the margin is (exponential: probability 1 / (1 + exp(-2 m)))
    kind = f"sklearn:{name}:{getattr(model, 'loss', '?')}"
    ens = _finish(model, parts, groups, k, raw0 - trees0, kind)
    ens.extra["iteration_indptr"] = iterations_indptr(len(parts), k)  # k trees per stage
    return ens


def _hgb_feature_map(model: Any, n_features: int) -> tuple[np.ndarray, list | None]:
    """Map internal (preprocessed) columns to input columns; encoder categories per column."""
    pre = getattr(model, "_preprocessor", None)
    if pre is None:
        return np.arange(n_features), None
    perm = np.empty(n_features, dtype=np.int64)
    categories: list = [None] * n_features
    for tname, trans, cols in pre.transformers_:
        if tname not in pre.output_indices_:
            continue
        out = pre.output_indices_[tname]
        cols = np.asarray(cols)
        idx = np.flatnonzero(cols) if cols.dtype == bool else cols.astype(np.int64)
        out_cols = np.arange(out.start, out.stop)
        if out_cols.size == 0:
            continue
        if out_cols.size != idx.size:
            raise UnsupportedModelError(
                f"cannot map {type(model).__name__}'s internal columns back to its inputs "
                f"(transformer {tname!r}); this scikit-learn version is not supported"
            )
        perm[out_cols] = idx
        if tname == "encoder":
            for o, cats in zip(out_cols, trans.categories_, strict=True):
                categories[o] = cats
    return perm, categories


def _integer_values(cats: Any) -> np.ndarray | None:
    """The encoder's categories (a feature's, or None) as float64, by code, when all are
    non-negative integers (NaN, the missing category, aside), else None. Text categories are
    labels even where they read as numbers (``"01"`` and ``"1"`` are two categories)."""
    if cats is None:
        return None
    if any(isinstance(c, (str, bytes)) for c in np.asarray(cats, dtype=object).tolist()):
        return None
    try:
        values = np.asarray(cats).astype(np.float64)
    except (TypeError, ValueError):
        return None
    known = values[~np.isnan(values)]
    if np.any(known < 0) or np.any(known != np.floor(known)) or np.any(known >= 2**31):
        return None
    return values


def _split_categories(values: np.ndarray | None, codes: np.ndarray) -> np.ndarray:
    """The category values a split lists: the raw values of encoder codes where the encoder's
    categories are non-negative integers (``values``: :func:`_integer_values`), else the codes
    (the feature then keeps its labels)."""
    if values is None:
        return codes.astype(np.int32)
    return values[codes].astype(np.int32)


def _hist_gradient_boosting(model: Any) -> Ensemble:
    name = type(model).__name__
    try:
        predictors = model._predictors
        baseline = np.asarray(model._baseline_prediction, dtype=np.float64).ravel()
        n_features = int(model.n_features_in_)
        known, f_idx_map = None, None
        if getattr(model, "is_categorical_", None) is not None and np.any(model.is_categorical_):
            known, f_idx_map = model._bin_mapper.make_known_categories_bitsets()
        perm, categories = _hgb_feature_map(model, n_features)
    except AttributeError as exc:
        raise UnsupportedModelError(
            f"cannot read the internals of this scikit-learn {name} ({exc}); distshap reads "
            "_predictors/_baseline_prediction/_bin_mapper, which this version lacks"
        ) from exc
    k = len(predictors[0]) if predictors else baseline.shape[0]
    parts = []
    groups = []
    raw_value_features: set[int] = set()  # splits list category values, not encoder codes
    integer = [_integer_values(c) for c in categories or ()]  # once a feature, not a split
    for stage in predictors:
        for g, pred in enumerate(stage):
            nodes = pred.nodes
            leaf = nodes["is_leaf"].astype(bool)
            n = nodes.shape[0]
            left = nodes["left"].astype(np.int64)
            right = nodes["right"].astype(np.int64)
            mgl = nodes["missing_go_to_left"].astype(bool)
            is_cat = nodes["is_categorical"].astype(bool) & ~leaf
            feat_int = nodes["feature_idx"].astype(np.int64)
            thr = np.where(leaf | is_cat, 0.0, nodes["num_threshold"].astype(np.float64))
            t64 = np.where(leaf | is_cat, 0.0, le_threshold_to_lt64(thr))
            dl = mgl.copy()
            cat_lists = [EMPTY_CATS] * n
            for j in np.flatnonzero(is_cat):
                f = int(feat_int[j])
                left_bits = np.unpackbits(
                    np.ascontiguousarray(pred.raw_left_cat_bitsets[nodes["bitset_idx"][j]])
                    .astype("<u4")
                    .view(np.uint8),
                    bitorder="little",
                )
                known_bits = np.unpackbits(
                    np.ascontiguousarray(known[f_idx_map[f]]).astype("<u4").view(np.uint8),
                    bitorder="little",
                )
                if mgl[j]:
                    # listed (-> right) = known categories outside the left set
                    codes = np.flatnonzero(known_bits.astype(bool) & ~left_bits.astype(bool))
                else:
                    # swap children: the left set is listed and goes to distshap's right
                    codes = np.flatnonzero(left_bits)
                    left[j], right[j] = right[j], left[j]
                dl[j] = True
                cat_lists[j] = np.sort(_split_categories(integer[f] if integer else None, codes))
                if categories and categories[f] is not None:
                    raw_value_features.add(int(perm[f]))
            parts.append(
                {
                    "left": np.where(leaf, -1, left).astype(np.int32),
                    "right": np.where(leaf, -1, right).astype(np.int32),
                    "feature": np.where(leaf, -1, perm[feat_int]).astype(np.int32),
                    "threshold": lt64_to_float32(t64),
                    "threshold64": t64,
                    "default_left": dl & ~leaf,
                    "is_categorical": is_cat,
                    "cat_sizes": np.array([c.size for c in cat_lists], dtype=np.int64),
                    "cat_values": np.concatenate(cat_lists).astype(np.int32),
                    "value": np.where(leaf, nodes["value"], 0.0).astype(np.float64),
                    "cover": nodes["count"].astype(np.float64),
                }
            )
            groups.append(g)
    if baseline.shape[0] != k:
        raise UnsupportedModelError(
            f"{name}: baseline prediction has {baseline.shape[0]} entries for {k} trees per "
            "iteration; this scikit-learn version is not supported"
        )
    types = None
    is_cat_in = getattr(model, "is_categorical_", None)
    if is_cat_in is not None:
        types = tuple("c" if c else "q" for c in np.asarray(is_cat_in, dtype=bool))
    ens = _finish(model, parts, groups, k, baseline, f"sklearn:{name}", types)
    ens.extra["iteration_indptr"] = iterations_indptr(len(parts), k)  # k trees per iteration
    stored = _stored_categories(perm, categories, integer, raw_value_features)
    if stored:
        ens.extra["category_values"] = stored
    return ens


def _stored_categories(perm: np.ndarray, categories: list | None, integer: list,
                       split: set[int]) -> dict:  # fmt: skip
    """Input column -> ``"values"`` (a DataFrame category column enters as its values, which
    the splits list) or the training labels (text or other categories: a column is coded by
    them, as the encoder codes it; see :func:`distshap.frames.frame_to_matrix`); ``integer``:
    :func:`_integer_values` of each feature's categories."""
    stored: dict[int, Any] = {}
    for f, cats in enumerate(categories or ()):
        if cats is None:
            continue
        if integer[f] is None:
            stored[int(perm[f])] = tuple(c for c in np.asarray(cats, dtype=object).tolist()
                                         if not (isinstance(c, float) and np.isnan(c)))  # fmt: skip
        elif int(perm[f]) in split:
            stored[int(perm[f])] = "values"
    return dict(sorted(stored.items()))


def _finish(
    model: Any,
    parts: list,
    groups: list,
    num_groups: int,
    base: np.ndarray,
    kind: str,
    feature_types: tuple[str, ...] | None = None,
) -> Ensemble:
    if not parts:
        raise ValueError(f"the {type(model).__name__} has no trees: nothing to explain")
    names = getattr(model, "feature_names_in_", None)
    return Ensemble(
        **assemble_trees(parts),
        tree_group=np.asarray(groups, dtype=np.int32),
        num_features=int(model.n_features_in_),
        num_groups=int(num_groups),
        base_score=np.asarray(base, dtype=np.float64).reshape(num_groups),
        feature_names=tuple(str(s) for s in names) if names is not None else None,
        feature_types=feature_types,
        model_kind=kind,
    ).validate()


def load_sklearn(model: Any) -> Ensemble:
    """Convert a fitted scikit-learn tree model.

    Parameters
    ----------
    model
        A fitted ``DecisionTree*``, ``RandomForest*``, ``ExtraTrees*``,
        ``GradientBoosting*`` or ``HistGradientBoosting*`` regressor or classifier
        (see the module docstring for the output space of each).

    Returns
    -------
    Ensemble

    Raises
    ------
    UnsupportedModelError
        For multi-output classifiers, non-constant gradient boosting init estimators, other
        scikit-learn estimators and unfitted models.
    """
    name = type(model).__name__
    if name not in SKLEARN_MODELS:
        raise UnsupportedModelError(
            f"cannot explain a scikit-learn {name}: supported are {', '.join(SKLEARN_MODELS)}"
        )
    fitted = hasattr(model, "tree_") or hasattr(model, "estimators_")
    fitted = fitted or hasattr(model, "_predictors")
    if not fitted:
        raise UnsupportedModelError(f"the {name} is not fitted: call fit() before explaining it")
    if name.startswith("HistGradientBoosting"):
        return _hist_gradient_boosting(model)
    if name.startswith("GradientBoosting"):
        return _gradient_boosting(model)
    is_classifier = name.endswith("Classifier")
    n_est = 1 if hasattr(model, "tree_") else len(model.estimators_)
    parts, groups, num_groups = _tree_estimators(model, is_classifier, 1.0 / n_est)
    return _finish(model, parts, groups, num_groups, np.zeros(num_groups), f"sklearn:{name}")
