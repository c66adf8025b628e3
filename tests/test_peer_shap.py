"""shap's own TreeExplainer tests, ported: the path-dependent, raw-output cases that apply.

Written in our own code from what shap's test suite checks (``tests/explainers/``), keeping
the ``feature_perturbation="tree_path_dependent"``, ``model_output="raw"`` cases (no
background data, no probability or loss outputs, no Saabas approximation):

* ``test_tree.py``, scikit-learn: the paper's two-feature tree (the exact half of
  ``test_consistency_approximate``), ``test_sklearn_tree_explainer_with_missing_values``, the
  ``TestExplainerSklearn`` sums for decision trees, random forests, extra trees, gradient
  boosting and histogram gradient boosting (classifiers in their raw output: probabilities
  for forests, ``decision_function`` for boosting), ``test_sklearn_interaction_values``
  (symmetry), ``test_sklearn_decision_tree_multiclass`` and
  ``test_sklearn_random_forest_multiclass`` (fully grown trees),
  ``test_single_row_gradient_boosting_*``, ``test_multi_target_*`` and
  ``test_isolation_forest`` (refused by distshap: the refusal must be clear),
  ``test_gradient_boosting_classifier_invalid_init_estimator`` (an ``init="zero"`` model,
  which distshap explains), ``test_nullable_pandas_dtype``, ``test_tree_explainer_expected_value``
  and ``test_tree_explainer_with_pandas_series``.
* ``test_tree.py``, XGBoost (``TestExplainerXGBoost`` and module tests): regressors and
  random-forest regressors, ``test_xgboost_dmatrix_propagation`` (missing=1e-8),
  ``test_xgboost_direct``, ``test_xgboost_multiclass`` (with interactions),
  ``test_xgboost_ranking``, ``test_xgboost_mixed_types``, ``test_tree_limit`` (early stopping,
  forests), ``test_xgboost_tweedie_regression``, ``test_xgboost_dart_regression`` and
  ``test_tree_explainer_expected_value_xgboost_4495``.
* ``test_tree.py``, LightGBM (``TestExplainerLightGBM`` and module tests): regression with a
  categorical feature, ``test_lightgbm_constant_prediction`` / ``_constant_multiclass``,
  binary, multiclass, ``test_lightgbm_interaction`` (symmetry, one row),
  ``test_lightgbm_call_explanation`` (a pandas category column),
  ``test_lightgbm_categorical_split`` and ``test_lightgbm_interactions`` (digits).
* ``test_tree.py``, CatBoost: ``test_catboost`` (a string category column, against
  CatBoost's own values; numeric regression and classification), ``test_catboost_interactions``,
  ``test_catboost_regression_interactions`` and
  ``test_catboost_column_names_with_special_characters``; and
  ``test_check_consistent_outputs_binary_classification`` / ``_for_regression``.
* ``test_tree_categorical.py``: LightGBM native categorical splits with 8, 33 and 300
  categories, missing categories, and trees mixing categorical and numeric splits.
* ``test_gpu_tree.py``: ``test_gpu_tree_explainer_shap_interactions`` over its task list and
  ``test_gpu_tree_explainer_shap_with_missing_values`` (parametrised over our backends, so the
  GPU runs them on the device machine).

scikit-learn models have no contributions of their own: there we compare with shap 0.5x's
TreeExplainer, and every model's values sum to the model's own raw output. For
HistGradientBoosting's categorical splits, which shap 0.51 does not explain right (its values
come out on the wrong features), we add a brute-force oracle over scikit-learn's own
predictor nodes.
"""

from __future__ import annotations

import importlib
import itertools
import math

import numpy as np
import pandas as pd
import pytest
import xgboost as xgb
from sklearn import ensemble, tree
from sklearn.datasets import load_breast_cancer, load_diabetes, load_digits, load_iris
from threadpoolctl import threadpool_limits

from distshap import TreeExplainer, UnsupportedModelError

from conftest import to_host


class _Absent:
    """An optional library that is not installed: a test touching it is skipped (the GPU
    machine has no catboost, LightGBM or shap; CI has them)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __getattr__(self, attribute: str):
        pytest.skip(f"{self.name} is not installed")


def _optional(name: str):
    try:
        return importlib.import_module(name)
    except ImportError:
        return _Absent(name)


catboost = _optional("catboost")
lgb = _optional("lightgbm")
shap = _optional("shap")

TOL = 1e-5  # float32 outputs: differences relative to the output's scale


def assert_close(got, ref, tol: float = TOL) -> None:
    got, ref = to_host(got), np.asarray(ref, dtype=np.float64)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    scale = max(1.0, float(np.nanmax(np.abs(ref))))
    np.testing.assert_allclose(got, ref, rtol=0, atol=tol * scale)


def check_sums(explainer, X, raw, n_interaction_rows: int = 8) -> np.ndarray:
    """Values sum to ``raw``; interactions are symmetric, sum to the values and to ``raw``."""
    phi = to_host(explainer.shap_values(X))
    raw = np.asarray(raw)
    if phi.ndim == 3 and raw.ndim == 1:
        raw = raw[:, None]
    assert_close(phi.sum(axis=-1), raw)
    inter = to_host(explainer.shap_interaction_values(X[:n_interaction_rows]))
    assert_close(inter, np.swapaxes(inter, -1, -2))
    assert_close(inter.sum(axis=-1), phi[:n_interaction_rows])
    assert_close(inter.sum(axis=(-1, -2)), raw[:n_interaction_rows])
    return phi


def shap_reference(model, X, interactions: bool = False) -> np.ndarray:
    """shap's path-dependent values in distshap's layout (bias last, outputs before features)."""
    explainer = shap.TreeExplainer(model)
    if interactions:
        values = np.asarray(explainer.shap_interaction_values(X))  # (n, F, F[, G])
    else:
        values = np.asarray(explainer.shap_values(X))  # (n, F[, G])
    # read after the call: shap updates expected_value while explaining (its GH #4495)
    base = np.atleast_1d(np.asarray(explainer.expected_value, dtype=np.float64))
    if interactions:
        if values.ndim == 4:
            values = np.moveaxis(values, 3, 1)
        pad = [(0, 0)] * (values.ndim - 2) + [(0, 1), (0, 1)]
        out = np.pad(values, pad)
        out[..., -1, -1] = base if values.ndim == 4 else base[0]
        return out
    if values.ndim == 3:
        values = np.moveaxis(values, 2, 1)
        bias = np.broadcast_to(base[None, :, None], (len(X), len(base), 1))
        return np.concatenate([values, bias], 2)
    return np.concatenate([values, np.full((len(X), 1), base[0])], 1)


def _data(n: int = 300, f: int = 5, seed: int = 3):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, f))
    y = X[:, 0] * 2 + X[:, 1] * X[:, 2] + rng.normal(size=n) * 0.1
    return X, y


# --- scikit-learn -------------------------------------------------------------------------------


def test_paper_example_exact_values(backend):
    """The two-feature tree of the consistency paper: exact SHAP values, bias 20."""
    X = np.array([[0, 0], [0, 1], [1, 0], [1, 1]], dtype=float)
    model = tree.DecisionTreeRegressor(max_depth=2).fit(X, [0, 0, 0, 80])
    explainer = TreeExplainer(model, layout="xgboost", backend=backend)
    expected = [[-10, -10, 20], [-30, 10, 20], [10, -30, 20], [30, 30, 20]]
    np.testing.assert_allclose(to_host(explainer.shap_values(X)), expected, rtol=0, atol=1e-5)
    check_sums(explainer, X, model.predict(X))


def test_decision_tree_with_missing_values(backend):
    """A tree trained on NaN (scikit-learn >= 1.3): class 1 gets 4/5 for the row that has it."""
    X = np.array([[1], [np.nan], [np.nan], [np.nan], [100]])
    model = tree.DecisionTreeClassifier().fit(X, [1, 0, 0, 0, 0])
    explainer = TreeExplainer(model, layout="xgboost", backend=backend)
    phi = to_host(explainer.shap_values(X))
    np.testing.assert_allclose(phi[:, 1, 0], [0.8, -0.2, -0.2, -0.2, -0.2], atol=1e-6)
    np.testing.assert_allclose(phi[:, 0, 0], [-0.8, 0.2, 0.2, 0.2, 0.2], atol=1e-6)
    check_sums(explainer, X, model.predict_proba(X))


def _with_nans(X):
    X = X.copy()
    X[np.random.default_rng(0).random(X.shape) < 0.15] = np.nan
    return X


SKLEARN = {
    "tree-regressor": (lambda: tree.DecisionTreeRegressor(max_depth=5, random_state=0), "reg"),
    "tree-classifier": (lambda: tree.DecisionTreeClassifier(max_depth=4, random_state=0), "bin"),
    "tree-3-classes": (lambda: tree.DecisionTreeClassifier(max_depth=4, random_state=0), "3"),
    "forest-regressor": (
        lambda: ensemble.RandomForestRegressor(10, max_depth=6, random_state=0),
        "reg",
    ),
    "forest-classifier": (
        lambda: ensemble.RandomForestClassifier(10, max_depth=4, random_state=0),
        "bin",
    ),
    "forest-3-classes": (
        lambda: ensemble.RandomForestClassifier(10, max_depth=3, random_state=0),
        "3",
    ),
    "extra-regressor": (
        lambda: ensemble.ExtraTreesRegressor(10, max_depth=10, random_state=0),
        "reg",
    ),
    "extra-3-classes": (
        lambda: ensemble.ExtraTreesClassifier(10, max_depth=5, random_state=0),
        "3",
    ),
    "boosting-regressor": (
        lambda: ensemble.GradientBoostingRegressor(n_estimators=20, random_state=0),
        "reg",
    ),
    "boosting-huber": (
        lambda: ensemble.GradientBoostingRegressor(loss="huber", n_estimators=20, random_state=0),
        "reg",
    ),
    "boosting-classifier": (
        lambda: ensemble.GradientBoostingClassifier(n_estimators=15, random_state=0),
        "bin",
    ),
    "boosting-subsample": (
        lambda: ensemble.GradientBoostingClassifier(n_estimators=10, subsample=0.6, random_state=0),
        "bin",
    ),
    "boosting-3-classes": (
        lambda: ensemble.GradientBoostingClassifier(n_estimators=10, random_state=0),
        "3",
    ),
    "hist-regressor": (
        lambda: ensemble.HistGradientBoostingRegressor(max_iter=30, max_depth=6),
        "reg",
    ),
    "hist-poisson": (
        lambda: ensemble.HistGradientBoostingRegressor(loss="poisson", max_iter=20),
        "pos",
    ),
    "hist-classifier": (
        lambda: ensemble.HistGradientBoostingClassifier(max_iter=10, max_depth=6),
        "bin",
    ),
    "hist-3-classes": (
        lambda: ensemble.HistGradientBoostingClassifier(max_iter=10, max_depth=6),
        "3",
    ),
    "tree-regressor-nan": (
        lambda: tree.DecisionTreeRegressor(max_depth=5, random_state=0),
        "reg-nan",
    ),
    "forest-classifier-nan": (
        lambda: ensemble.RandomForestClassifier(10, max_depth=4, random_state=0),
        "bin-nan",
    ),
    "hist-regressor-nan": (lambda: ensemble.HistGradientBoostingRegressor(max_iter=20), "reg-nan"),
}


def raw_output(model, X) -> np.ndarray:
    """The scikit-learn model's own raw output: what its trees add up to."""
    if isinstance(
        model, (ensemble.GradientBoostingClassifier, ensemble.HistGradientBoostingClassifier)
    ):
        return model.decision_function(X)
    if hasattr(model, "predict_proba"):
        return model.predict_proba(X)
    if getattr(model, "loss", None) == "poisson":
        return np.log(model.predict(X))
    return model.predict(X)


@pytest.mark.parametrize("name", sorted(SKLEARN))
def test_sklearn_models(name, backend):
    make, task = SKLEARN[name]
    X, y = _data()
    if task.endswith("-nan"):
        X = _with_nans(X)
    target = {
        "reg": y,
        "pos": np.abs(y),
        "bin": (y > 0).astype(int),
        "3": np.digitize(y, [-1.0, 1.0]),
    }[task.split("-")[0]]
    with threadpool_limits(1):  # one OpenMP thread: HistGradientBoosting trains fast
        model = make().fit(X, target)
    explainer = TreeExplainer(model, layout="xgboost", backend=backend)
    phi = check_sums(explainer, X, raw_output(model, X))
    if name == "boosting-3-classes":  # shap explains binary GradientBoostingClassifiers only
        return
    assert_close(phi[:50], shap_reference(model, X[:50]))
    inter = to_host(explainer.shap_interaction_values(X[:5]))
    assert_close(inter, shap_reference(model, X[:5], interactions=True))


@pytest.mark.parametrize("estimator", ["tree", "forest"])
def test_fully_grown_trees_on_iris(estimator, backend):
    """``test_sklearn_decision_tree_multiclass`` / ``_random_forest_multiclass``: no depth limit."""
    X, y = load_iris(return_X_y=True)
    y[y == 2] = 1
    if estimator == "tree":
        model = tree.DecisionTreeClassifier(max_depth=None, min_samples_split=2, random_state=0)
    else:
        model = ensemble.RandomForestClassifier(n_estimators=100, random_state=0)
    model.fit(X, y)
    explainer = TreeExplainer(model, layout="xgboost", backend=backend)
    phi = check_sums(explainer, X, model.predict_proba(X))
    assert_close(phi, shap_reference(model, X))
    np.testing.assert_allclose(phi[:, 0, :-1], -phi[:, 1, :-1], atol=1e-6)  # mirror images


def _hgb_brute_force(model, x: np.ndarray) -> np.ndarray:
    """Path-dependent Shapley values of one row, from scikit-learn's own predictor nodes."""
    predictors = [p[0] for p in model._predictors]  # one output: one predictor per iteration
    F = len(x)
    order = np.arange(F)  # the trees' column j is the input's column order[j]
    if model._preprocessor is not None:  # categorical columns first, their categories coded
        order = np.concatenate([np.flatnonzero(c) for _, _, c in model._preprocessor.transformers_])
        x = model._preprocessor.transform(x.reshape(1, -1))[0]

    def goes_left(predictor, node) -> bool:
        value = x[node["feature_idx"]]
        if np.isnan(value):
            return bool(node["missing_go_to_left"])
        if node["is_categorical"]:
            words = predictor.raw_left_cat_bitsets[node["bitset_idx"]]
            c = int(value)
            return bool((int(words[c // 32]) >> (c % 32)) & 1)
        return bool(value <= node["num_threshold"])

    def mean(predictor, i, known) -> float:
        node = predictor.nodes[i]
        if node["is_leaf"]:
            return float(node["value"])
        if node["feature_idx"] in known:
            child = node["left"] if goes_left(predictor, node) else node["right"]
            return mean(predictor, child, known)
        left, right = predictor.nodes[node["left"]], predictor.nodes[node["right"]]
        total = float(left["count"] + right["count"])
        return (
            left["count"] * mean(predictor, node["left"], known)
            + right["count"] * mean(predictor, node["right"], known)
        ) / total

    def v(known) -> float:
        return sum(mean(p, 0, set(known)) for p in predictors)

    phi = np.zeros(F + 1)
    for i in range(F):
        others = [j for j in range(F) if j != i]
        for k in range(F):
            w = math.factorial(k) * math.factorial(F - k - 1) / math.factorial(F)
            for s in itertools.combinations(others, k):
                phi[i] += w * (v(s + (i,)) - v(s))
    phi[F] = v(()) + float(np.ravel(model._baseline_prediction)[0])
    out = phi.copy()
    out[order] = phi[:F]
    return out


def test_hist_gradient_boosting_categorical_splits(backend):
    """Integer-coded categories (shap's own values for these splits are not a usable reference)."""
    X, y = _data(n=400, f=4)
    X[:, 3] = np.random.default_rng(1).integers(0, 6, len(X))
    X[::17, 3] = np.nan
    target = (X[:, 0] + np.isin(X[:, 3], [2, 5]) - 0.5 > 0).astype(int)
    model = ensemble.HistGradientBoostingClassifier(
        max_iter=10, max_depth=4, categorical_features=[3], random_state=0
    )
    with threadpool_limits(1):
        model.fit(X, target)
    explainer = TreeExplainer(model, layout="xgboost", backend=backend)
    phi = check_sums(explainer, X, model.decision_function(X))
    for r in (0, 1, 17, 34):
        assert_close(phi[r], _hgb_brute_force(model, X[r]))
    odd = X[:4].copy()
    odd[:, 3] = [7, -1, 2.5, 100]  # categories never seen, negative, fractional
    check_sums(explainer, odd, model.decision_function(odd))


def test_gradient_boosting_with_zero_init(backend):
    """shap refuses ``init="zero"``; its raw output is still the sum of its trees."""
    X, y = _data()
    model = ensemble.GradientBoostingClassifier(n_estimators=10, init="zero").fit(X, y > 0)
    check_sums(
        TreeExplainer(model, layout="xgboost", backend=backend), X, model.decision_function(X)
    )


def test_single_rows(backend):
    X, y = _data()
    frame = pd.DataFrame(X, columns=list("abcde"))
    model = ensemble.GradientBoostingRegressor(n_estimators=10, max_depth=6).fit(frame, y)
    explainer = TreeExplainer(model, layout="xgboost", backend=backend)
    full = to_host(explainer.shap_values(frame))
    np.testing.assert_array_equal(to_host(explainer.shap_values(frame.iloc[[7]])), full[[7]])
    np.testing.assert_array_equal(to_host(explainer.shap_values(X[7:8])), full[[7]])
    assert_close(full[7].sum(), model.predict(frame.iloc[[7]])[0])
    # a 1-D row (array or Series) is one row, as in shap: no row axis in the output
    for row in (X[7], frame.iloc[7]):
        np.testing.assert_array_equal(to_host(explainer.shap_values(row)), full[7])


def test_unsupported_models_are_refused_clearly():
    X, y = _data()
    multi_output = ensemble.RandomForestClassifier(3).fit(X, np.stack([y > 0, y < 1], axis=1))
    with pytest.raises(UnsupportedModelError, match="2 outputs"):
        TreeExplainer(multi_output, backend="cpu")
    isolation = ensemble.IsolationForest(n_estimators=3, random_state=0).fit(X)
    with pytest.raises(UnsupportedModelError, match="IsolationForest"):
        TreeExplainer(isolation, backend="cpu")


def test_nullable_pandas_dtypes(backend):
    frame = pd.DataFrame(
        {
            "x1": pd.array([1.0, 2.0, 3.0, 4.0, 5.0] * 20, dtype="Float64"),
            "x2": pd.array([10, 20, 30, 40, 50] * 20, dtype="Int64"),
        }
    )
    model = tree.DecisionTreeClassifier(max_depth=2, random_state=0).fit(
        frame, [0, 1, 0, 1, 0] * 20
    )
    rows = frame.iloc[:5].copy()
    rows.iloc[2, 0] = pd.NA
    rows.iloc[3, 1] = pd.NA
    explainer = TreeExplainer(model, layout="xgboost", backend=backend)
    phi = check_sums(explainer, rows, model.predict_proba(rows))
    numeric = rows.to_numpy(dtype=float, na_value=np.nan)
    np.testing.assert_array_equal(phi, to_host(explainer.shap_values(numeric)))


def test_expected_value_is_the_mean_training_prediction():
    """Unweighted covers are training counts, so the bias is the mean prediction exactly."""
    X, y = _data()
    for model in (
        tree.DecisionTreeRegressor(max_depth=4, random_state=0).fit(X, y),
        ensemble.GradientBoostingRegressor(n_estimators=10, random_state=0).fit(X, y),
    ):
        explainer = TreeExplainer(model, layout="xgboost", backend="cpu")
        assert explainer.expected_value == pytest.approx(model.predict(X).mean(), abs=1e-6)
    booster = xgb.train(
        {"max_depth": 4, "min_child_weight": 0, "nthread": 1}, xgb.DMatrix(X, y), 10
    )
    explainer = TreeExplainer(booster, layout="xgboost", backend="cpu")
    margin = booster.predict(xgb.DMatrix(X), output_margin=True)
    assert explainer.expected_value == pytest.approx(float(margin.mean()), abs=1e-5)


# --- XGBoost ------------------------------------------------------------------------------------


def _xgb_contribs(model, X, **kw) -> np.ndarray:
    booster = model.get_booster() if hasattr(model, "get_booster") else model
    return booster.predict(xgb.DMatrix(X, **kw), pred_contribs=True)


@pytest.mark.parametrize("estimator", [xgb.XGBRegressor, xgb.XGBRFRegressor])
def test_xgboost_regressors(estimator, backend):
    X, y = load_diabetes(return_X_y=True)
    model = estimator(n_estimators=20, max_depth=4, n_jobs=1).fit(X, y)
    explainer = TreeExplainer(model, layout="xgboost", backend=backend)
    check_sums(explainer, X, model.predict(X, output_margin=True))
    assert_close(explainer.shap_values(X), _xgb_contribs(model, X))


@pytest.mark.parametrize("estimator", [xgb.XGBClassifier, xgb.XGBRFClassifier])
def test_xgboost_missing_sentinel_propagates(estimator, backend):
    X, y = load_breast_cancer(return_X_y=True)
    rng = np.random.default_rng(42)
    X = X.copy()
    X[np.ix_(rng.random(len(X)) < 0.3, rng.random(X.shape[1]) < 0.5)] = 1e-8
    model = estimator(n_estimators=10, max_depth=4, missing=1e-8, n_jobs=1, random_state=42)
    model.fit(X, y)
    check_sums(
        TreeExplainer(model, layout="xgboost", backend=backend),
        X,
        model.predict(X, output_margin=True),
    )


def test_xgboost_direct_against_shap(backend):
    rng = np.random.RandomState(0)
    X, y = rng.standard_normal(size=(100, 4)), rng.standard_normal(size=100)
    model = xgb.XGBRegressor(n_jobs=1, n_estimators=20, random_state=0).fit(X, y)
    got = to_host(TreeExplainer(model, layout="xgboost", backend=backend).shap_values(X))
    assert_close(got, shap_reference(model, X))


def test_xgboost_multiclass(backend):
    X, y = load_iris(return_X_y=True)
    model = xgb.XGBClassifier(n_jobs=1, n_estimators=10, max_depth=4).fit(X, y)
    explainer = TreeExplainer(model, layout="xgboost", backend=backend)
    check_sums(explainer, X, model.predict(X, output_margin=True))
    assert_close(explainer.shap_values(X), _xgb_contribs(model, X))
    # shap refuses multiclass forests; XGBoost has their contributions
    forest = xgb.XGBRFClassifier(n_jobs=1, n_estimators=4, max_depth=3).fit(X, y)
    assert_close(
        TreeExplainer(forest, layout="xgboost", backend=backend).shap_values(X),
        _xgb_contribs(forest, X),
    )
    stacked = xgb.XGBClassifier(n_jobs=1, n_estimators=2, num_parallel_tree=3).fit(X, y)
    assert_close(
        TreeExplainer(stacked, layout="xgboost", backend=backend).shap_values(X),
        _xgb_contribs(stacked, X),
    )


def test_xgboost_ranking(backend):
    X, y = _data(n=200, seed=11)
    relevance = np.digitize(y, [-1.0, 0.0, 1.0])
    params = dict(objective="rank:pairwise", learning_rate=0.1, gamma=1.0, min_child_weight=0.1)
    model = xgb.XGBRanker(n_jobs=1, **params, max_depth=5, n_estimators=4)
    model.fit(X, relevance, qid=np.repeat(np.arange(10), 20))
    check_sums(
        TreeExplainer(model, layout="xgboost", backend=backend),
        X,
        model.predict(X, output_margin=True),
    )


def test_xgboost_mixed_column_types(backend):
    X, y = _data()
    frame = pd.DataFrame(X[:, :3], columns=["a", "b", "c"])
    frame["HouseAge"] = (X[:, 3] * 10 + 30).astype(np.int64)
    frame["IsOld"] = frame["HouseAge"] > 30
    booster = xgb.train({"learning_rate": 0.1, "nthread": 1}, xgb.DMatrix(frame, y), 50)
    explainer = TreeExplainer(booster, layout="xgboost", backend=backend)
    assert_close(explainer.shap_values(frame), _xgb_contribs(booster, frame))
    check_sums(explainer, frame, booster.predict(xgb.DMatrix(frame), output_margin=True))


def test_xgboost_tree_limit_after_early_stopping(backend):
    """Estimators explain up to their best iteration, as their predictions use it."""
    X, y = load_iris(return_X_y=True)
    for extra in ({}, {"num_parallel_tree": 3}):
        model = xgb.XGBClassifier(n_jobs=1, n_estimators=500, early_stopping_rounds=1, **extra)
        model.fit(X[::2], y[::2], eval_set=[(X[1::2], y[1::2])], verbose=False)
        assert model.best_iteration + 1 < model.get_booster().num_boosted_rounds()
        check_sums(
            TreeExplainer(model, layout="xgboost", backend=backend),
            X,
            model.predict(X, output_margin=True),
        )
    Xr, yr = load_diabetes(return_X_y=True)
    data = xgb.DMatrix(Xr[:300], yr[:300])
    booster = xgb.train(
        {"learning_rate": 0.3, "nthread": 1},
        data,
        100,
        evals=[(xgb.DMatrix(Xr[300:], yr[300:]), "valid")],
        early_stopping_rounds=1,
        verbose_eval=False,
    )
    margin = booster.predict(xgb.DMatrix(Xr), output_margin=True)  # a Booster: every tree
    check_sums(TreeExplainer(booster, layout="xgboost", backend=backend), Xr, margin)


def test_xgboost_tweedie_regression(backend):
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(100, 5)), rng.exponential(size=100)
    model = xgb.XGBRegressor(n_jobs=1, objective="reg:tweedie", n_estimators=20).fit(X, y)
    check_sums(TreeExplainer(model, layout="xgboost", backend=backend), X, np.log(model.predict(X)))


def test_xgboost_dart_regression(backend):
    rng = np.random.default_rng(0)
    X, y = rng.random((10, 5)), np.array([0] * 5 + [1] * 5)
    model = xgb.XGBRegressor(n_jobs=1, booster="dart", n_estimators=20, rate_drop=0.3).fit(X, y)
    explainer = TreeExplainer(model, layout="xgboost", backend=backend)
    check_sums(explainer, X, model.predict(X, output_margin=True))
    assert_close(explainer.shap_values(X), _xgb_contribs(model, X))


def test_xgboost_expected_value_does_not_change(backend):
    from sklearn.datasets import make_classification

    X, y = make_classification(n_samples=200, n_features=10, random_state=42)
    model = xgb.XGBClassifier(n_jobs=1, n_estimators=50, random_state=42).fit(X[:150], y[:150])
    explainer = TreeExplainer(model, layout="xgboost", backend=backend)
    before = explainer.expected_value
    phi = to_host(explainer.shap_values(X[150:]))
    assert explainer.expected_value == before
    np.testing.assert_allclose(phi[:, -1], before, rtol=1e-6)
    assert_close(phi.sum(axis=1), model.predict(X[150:], output_margin=True))


# --- LightGBM -----------------------------------------------------------------------------------


QUIET_LGB = {"verbose": -1, "num_threads": 1}


def _lgb_contribs(model, X) -> np.ndarray:
    ref = np.asarray(model.predict(X, pred_contrib=True))
    width = X.shape[1] + 1
    return ref if ref.shape[1] == width else ref.reshape(len(ref), -1, width)


def _house_age_group(X):
    return pd.cut(X[:, 3], bins=[-np.inf, -0.5, 0.0, 0.5, np.inf], labels=False, right=False)


def test_lightgbm_regression_with_a_categorical_feature(backend):
    X, y = _data(n=500)
    X = np.column_stack([X, _house_age_group(X)])
    y = y + (X[:, -1] == 2) * 1.5
    data = lgb.Dataset(X, y, categorical_feature=[X.shape[1] - 1])
    booster = lgb.train({"verbose": -1, "num_threads": 1}, data, 200)
    explainer = TreeExplainer(booster, layout="xgboost", backend=backend)
    assert_close(explainer.shap_values(X), _lgb_contribs(booster, X))
    check_sums(explainer, X, booster.predict(X, raw_score=True))


def test_lightgbm_constant_target_gives_stumps(backend):
    X, y = _data()
    booster = lgb.train(QUIET_LGB, lgb.Dataset(X, np.full(len(y), y.mean())), 50)
    phi = to_host(TreeExplainer(booster, layout="xgboost", backend=backend).shap_values(X))
    np.testing.assert_array_equal(phi[:, :-1], 0.0)
    assert_close(phi[:, -1], booster.predict(X, raw_score=True))
    Xi, _ = load_iris(return_X_y=True)
    model = lgb.LGBMClassifier(
        n_jobs=1, n_estimators=20, objective="multiclass", num_class=3, verbose=-1
    )
    model.fit(Xi, np.ones(len(Xi), dtype=int))
    explainer = TreeExplainer(model, layout="xgboost", backend=backend)
    phi = check_sums(explainer, Xi, model.predict(Xi, raw_score=True))
    np.testing.assert_array_equal(phi[..., :-1], 0.0)


@pytest.mark.parametrize("task", ["binary", "multiclass"])
def test_lightgbm_classifiers(task, backend):
    X, y = load_breast_cancer(return_X_y=True) if task == "binary" else load_iris(return_X_y=True)
    model = lgb.LGBMClassifier(n_jobs=1, n_estimators=50, verbose=-1).fit(X, y)
    explainer = TreeExplainer(model, layout="xgboost", backend=backend)
    assert_close(explainer.shap_values(X), _lgb_contribs(model, X))
    check_sums(explainer, X, model.predict(X, raw_score=True))


def test_lightgbm_interactions_of_one_row(backend):
    X, y = _data(n=50)
    frame = pd.DataFrame(X, columns=[f"x{j}" for j in range(X.shape[1])])
    model = lgb.LGBMRegressor(n_jobs=1, n_estimators=20, min_child_samples=5, verbose=-1).fit(
        frame, y
    )
    explainer = TreeExplainer(model, layout="xgboost", backend=backend)
    check_sums(explainer, frame, model.predict(frame, raw_score=True))
    one = to_host(explainer.shap_interaction_values(frame.iloc[[0]]))
    assert_close(one.sum(), model.predict(frame.iloc[[0]], raw_score=True)[0])


def test_lightgbm_pandas_category_column(backend):
    X, y = _data()
    frame = pd.DataFrame(X, columns=[f"x{j}" for j in range(X.shape[1])])
    frame["categ"] = pd.Categorical(np.repeat(["M", "F"], len(frame) // 2))
    label = (X[:, 0] + (frame["categ"] == "M") > 0).astype(int)
    model = lgb.LGBMClassifier(n_jobs=1, n_estimators=7, verbose=-1).fit(frame, label)
    explainer = TreeExplainer(model, layout="xgboost", backend=backend)
    assert_close(explainer.shap_values(frame), _lgb_contribs(model, frame))
    check_sums(explainer, frame, model.predict(frame, raw_score=True))


def test_lightgbm_categorical_split_interactions(backend):
    X, y = _data(n=2000)
    frame = pd.DataFrame(X, columns=[f"x{j}" for j in range(X.shape[1])])
    frame["group"] = _house_age_group(X).astype(int)
    model = lgb.LGBMRegressor(n_jobs=1, n_estimators=100, max_cat_to_onehot=1, verbose=-1)
    model.fit(frame, y + frame["group"] % 2, categorical_feature=[frame.columns.get_loc("group")])
    explainer = TreeExplainer(model, layout="xgboost", backend=backend)
    check_sums(explainer, frame.iloc[:100], model.predict(frame.iloc[:100], raw_score=True))


def test_lightgbm_digits_interactions(backend):
    X, y = load_digits(return_X_y=True)
    model = lgb.LGBMClassifier(n_jobs=1, n_estimators=10, max_depth=3, verbose=-1).fit(X, y)
    explainer = TreeExplainer(model, layout="xgboost", backend=backend)
    check_sums(explainer, X[:200], model.predict(X[:200], raw_score=True), n_interaction_rows=4)


# --- test_tree_categorical.py: LightGBM native categorical splits --------------------------------

NATIVE_CATEGORICAL = dict(
    objective="regression",
    verbosity=-1,
    num_threads=1,
    seed=0,
    min_data_in_leaf=1,
    min_data_per_group=1,
    max_cat_to_onehot=1,
    cat_smooth=0,
    cat_l2=0,
    learning_rate=0.3,
    force_col_wise=True,
)


def _native_categorical_data(n_categories: int, with_missing: bool = False):
    categories = np.tile(np.arange(n_categories, dtype=np.float64), 12)
    numeric = np.linspace(-1.0, 1.0, categories.size)
    missing = np.zeros(categories.size, dtype=bool)
    if with_missing:
        missing[::13] = True
        categories[missing] = np.nan
    codes = np.nan_to_num(categories, nan=0).astype(int)
    y = 3.0 * np.isin(codes % 5, [0, 2]) + 0.2 * numeric
    y[missing] = 8.0
    return np.column_stack([categories, numeric]), y


def _check_native(booster, X, backend):
    explainer = TreeExplainer(booster, layout="xgboost", backend=backend)
    assert_close(explainer.shap_values(X), _lgb_contribs(booster, X))
    check_sums(explainer, X, booster.predict(X, raw_score=True), n_interaction_rows=len(X))


@pytest.mark.parametrize("n_categories", [8, 33, 300])
def test_lightgbm_native_categorical(n_categories, backend):
    X, y = _native_categorical_data(n_categories)
    params = dict(NATIVE_CATEGORICAL, max_depth=3, num_leaves=8)
    booster = lgb.train(params, lgb.Dataset(X, y, categorical_feature=[0]), 4)
    kinds = {t["tree_structure"]["decision_type"] for t in booster.dump_model()["tree_info"]}
    assert "==" in kinds
    unseen = np.array([[n_categories + 5, 0.0], [-3, 0.1], [2.7, -0.2], [np.nan, 0.5]])
    rows = np.vstack([X[[0, min(32, n_categories - 1), n_categories - 1]], unseen])
    _check_native(booster, rows, backend)


def test_lightgbm_native_categorical_missing(backend):
    X, y = _native_categorical_data(33, with_missing=True)
    params = dict(NATIVE_CATEGORICAL, max_depth=3, num_leaves=8)
    booster = lgb.train(params, lgb.Dataset(X, y, categorical_feature=[0]), 4)
    _check_native(booster, X[np.isnan(X[:, 0])][:6], backend)


def test_lightgbm_mixed_categorical_and_numeric_trees(backend):
    X, y = _native_categorical_data(33)
    y = y + 2.0 * (X[:, 1] > 0)
    booster = lgb.train(
        dict(NATIVE_CATEGORICAL, max_depth=2, num_leaves=4),
        lgb.Dataset(X, y, categorical_feature=[0]),
        3,
        callbacks=[lgb.reset_parameter(feature_contri=lambda i: [1, 0] if i != 1 else [0, 1])],
    )
    _check_native(booster, X[[0, 32, 64, 100, 200]], backend)


# --- CatBoost and the cross-library consistency checks ------------------------------------------

QUIET_CB = {"verbose": False, "allow_writing_files": False, "random_seed": 12, "thread_count": 1}


def test_catboost_models(backend):
    X, y = _data()
    frame = pd.DataFrame(X, columns=[f"x{j}" for j in range(X.shape[1])])
    regressor = catboost.CatBoostRegressor(iterations=30, learning_rate=0.1, **QUIET_CB).fit(
        frame, y
    )
    raw = regressor.predict(frame, prediction_type="RawFormulaVal")
    check_sums(TreeExplainer(regressor, layout="xgboost", backend=backend), frame, raw)
    Xb, yb = load_breast_cancer(return_X_y=True)
    classifier = catboost.CatBoostClassifier(iterations=10, learning_rate=0.5, **QUIET_CB).fit(
        Xb, yb
    )
    explainer = TreeExplainer(classifier, layout="xgboost", backend=backend)
    check_sums(explainer, Xb, classifier.predict(Xb, prediction_type="RawFormulaVal"))
    ref = classifier.get_feature_importance(catboost.Pool(Xb), type="ShapValues")
    assert_close(explainer.shap_values(Xb), ref)


def test_catboost_string_category_matches_catboost(backend):
    X, y = _data()
    frame = pd.DataFrame(X, columns=[f"x{j}" for j in range(X.shape[1])])
    frame["IsOld"] = (frame["x3"] > 0).astype(str)
    model = catboost.CatBoostRegressor(iterations=10, cat_features=["IsOld"], **QUIET_CB)
    model.fit(frame, y)
    ref = model.get_feature_importance(catboost.Pool(frame, cat_features=["IsOld"]),
                                       type="ShapValues")  # fmt: skip
    explainer = TreeExplainer(model, layout="xgboost", backend=backend)
    assert_close(explainer.shap_values(frame), ref)
    raw = model.predict(frame, prediction_type="RawFormulaVal")
    check_sums(explainer, frame, raw)


@pytest.mark.parametrize("task", ["regression", "classification"])
def test_catboost_depth_one_interactions(task, backend):
    X, y = _data(n=50)
    frame = pd.DataFrame(X, columns=[f"x{j}" for j in range(X.shape[1])])
    if task == "regression":
        model = catboost.CatBoostRegressor(depth=1, iterations=10, **QUIET_CB).fit(frame, y)
    else:
        model = catboost.CatBoostClassifier(depth=1, iterations=10, **QUIET_CB).fit(frame, y > 0)
    check_sums(
        TreeExplainer(model, layout="xgboost", backend=backend),
        frame,
        model.predict(frame, prediction_type="RawFormulaVal"),
        50,
    )


def test_catboost_column_names_with_special_characters(backend):
    rng = np.random.default_rng(42)
    frame = pd.DataFrame({"x5=ROMÁNIA": rng.choice([0.0, 1.0], 10), "b": rng.normal(size=10)})
    model = catboost.CatBoostClassifier(iterations=3, depth=1, **QUIET_CB)
    model.fit(frame, rng.choice([0, 1], 10))
    explainer = TreeExplainer(model, layout="xgboost", backend=backend)
    assert explainer.feature_names == ("x5=ROMÁNIA", "b")
    check_sums(explainer, frame, model.predict(frame, prediction_type="RawFormulaVal"))


@pytest.mark.parametrize("task", ["binary", "regression"])
def test_consistent_outputs_across_libraries(task, backend):
    """Depth-one models of each library: one output for binary margins, per class for forests."""
    X, y = _data(n=50)
    frame = pd.DataFrame(X, columns=[f"x{j}" for j in range(X.shape[1])])
    if task == "binary":
        label = (y > 0).astype(int)
        models = [
            (lgb.LGBMClassifier(n_jobs=1, max_depth=1, min_child_samples=5, verbose=-1), "raw"),
            (xgb.XGBClassifier(n_jobs=1, max_depth=1), "margin"),
            (catboost.CatBoostClassifier(depth=1, iterations=10, **QUIET_CB), "formula"),
            (ensemble.RandomForestClassifier(n_estimators=10, random_state=0), "proba"),
        ]
    else:
        label = y
        models = [
            (lgb.LGBMRegressor(n_jobs=1, max_depth=1, min_child_samples=5, verbose=-1), "raw"),
            (xgb.XGBRegressor(n_jobs=1, max_depth=1), "margin"),
            (catboost.CatBoostRegressor(depth=1, iterations=10, **QUIET_CB), "formula"),
            (ensemble.RandomForestRegressor(n_estimators=10, random_state=0), "predict"),
        ]
    for model, kind in models:
        model.fit(frame, label)
        raw = {
            "raw": lambda m: m.predict(frame, raw_score=True),
            "margin": lambda m: m.predict(frame, output_margin=True),
            "formula": lambda m: m.predict(frame, prediction_type="RawFormulaVal"),
            "proba": lambda m: m.predict_proba(frame),
            "predict": lambda m: m.predict(frame),
        }[kind](model)
        explainer = TreeExplainer(model, layout="xgboost", backend=backend)
        phi = check_sums(explainer, frame, raw, n_interaction_rows=50)
        expected_shape = (50, 2, 6) if kind == "proba" else (50, 6)
        assert phi.shape == expected_shape


# --- test_gpu_tree.py: its task list, interactions summing to the margin -------------------------

_RS = np.random.RandomState(15921)
GPU_DATA = {
    "regression": (_RS.randn(100, 4), _RS.randn(100)),
    "binary": (_RS.randn(100, 4), _RS.binomial(1, 0.5, 100)),
    "multiclass": (_RS.randn(100, 4), _RS.randint(0, 5, 100)),
}


def _gpu_task(name):
    library, kind = name.split("-")
    X, y = GPU_DATA["regression" if kind in ("base", "regressor") else kind]
    if library == "xgboost":
        estimator = xgb.XGBRegressor if kind in ("base", "regressor") else xgb.XGBClassifier
        model = estimator(tree_method="hist", n_jobs=1).fit(X, y)
        raw = model.predict(X, output_margin=True)
        return (model.get_booster() if kind == "base" else model), X, raw
    if library == "lightgbm":
        estimator = lgb.LGBMRegressor if kind in ("base", "regressor") else lgb.LGBMClassifier
        model = estimator(n_jobs=1, verbose=-1).fit(X, y)
        return (model.booster_ if kind == "base" else model), X, model.predict(X, raw_score=True)
    estimator = (
        ensemble.RandomForestRegressor if kind == "regressor" else ensemble.RandomForestClassifier
    )
    model = estimator(n_estimators=20, random_state=0).fit(X, y)
    return model, X, model.predict(X) if kind == "regressor" else model.predict_proba(X)


GPU_TASKS = [
    f"{lib}-{kind}"
    for lib in ("xgboost", "lightgbm")
    for kind in ("base", "regressor", "binary", "multiclass")
] + ["forest-regressor", "forest-binary", "forest-multiclass"]


@pytest.mark.parametrize("name", GPU_TASKS)
def test_gpu_task_list_interactions(name, backend):
    model, X, raw = _gpu_task(name)
    check_sums(
        TreeExplainer(model, layout="xgboost", backend=backend), X, raw, n_interaction_rows=20
    )


def test_gpu_task_with_missing_values(backend):
    model, X, _ = _gpu_task("xgboost-base")
    X = X.copy()
    X[::10, 0] = np.nan
    explainer = TreeExplainer(model, layout="xgboost", backend=backend)
    assert_close(explainer.shap_values(X), model.predict(xgb.DMatrix(X), pred_contribs=True))
    check_sums(explainer, X, model.predict(xgb.DMatrix(X), output_margin=True))
