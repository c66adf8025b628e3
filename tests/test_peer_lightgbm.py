"""LightGBM's own contribution tests, ported: distshap must give ``predict(pred_contrib=True)``.

Written in our own code from what LightGBM's Python test suite checks
(``tests/python_package_test/test_engine.py`` and ``test_sklearn.py``), path-dependent values
in raw-score space only:

* ``test_contribs``: breast cancer, binary objective, held-out rows, contributions summing to
  the raw score; ``test_contribs_sparse`` / ``test_contribs_sparse_multiclass``: CSR and CSC
  input (LightGBM reads absent entries as zeros).
* ``test_regression`` (objectives regression, L1, Huber, Fair, Poisson, quantile), and the
  other objectives the engine tests train (gamma, Tweedie, MAPE, cross-entropy, lambdarank,
  XE-NDCG, multiclass, one-vs-all); ``test_multiclass`` and ``test_multiclass_rf`` on digits;
  the ``rf``, ``dart`` and GOSS boosting modes.
* ``test_missing_value_handle`` (and ``_more_na``, ``_na``, ``_zero``, ``_none``): NaN,
  ``zero_as_missing`` and ``use_missing=False``; ``test_categorical_handle`` (and ``_na``,
  ``test_categorical_non_zero_inputs``): categorical splits, with categories never seen in
  training, negative or fractional values and NaN at prediction time.
* ``test_sklearn.py::test_pandas_categorical``: string, integer, float, boolean and ordered
  category columns, an unseen category, every ``categorical_feature`` choice, a saved model;
  and a numeric column passed for a category column, which LightGBM refuses.
* Early stopping: a booster that keeps its trees past ``best_iteration`` predicts with the
  best iteration; ``test_sklearn.py``'s estimators (``LGBMRegressor``, ``LGBMClassifier``) on
  DataFrames, binary and multiclass.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from distshap import TreeExplainer

from conftest import to_host

lgb = pytest.importorskip("lightgbm")

TOL = 1e-5  # float32 outputs: differences relative to the output's scale
QUIET = {"verbose": -1, "num_threads": 1}


def assert_close(got, ref, tol: float = TOL) -> None:
    got, ref = to_host(got), np.asarray(ref)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    scale = max(1.0, float(np.nanmax(np.abs(ref))))
    np.testing.assert_allclose(got, ref, rtol=0, atol=tol * scale)


def pred_contrib(model, X) -> np.ndarray:
    """LightGBM's contributions in distshap's layout: ``(n, F + 1)`` or ``(n, G, F + 1)``."""
    ref = model.predict(X, pred_contrib=True)
    ref = ref.toarray() if sp.issparse(ref) else np.asarray(ref)
    width = X.shape[1] + 1
    return ref if ref.shape[1] == width else ref.reshape(len(ref), -1, width)


def check_against_lightgbm(model, X, backend: str, n_interaction_rows: int = 10) -> None:
    """Values equal ``pred_contrib``; values and interactions sum to the raw score."""
    explainer = TreeExplainer(model, layout="xgboost", backend=backend)
    phi = explainer.shap_values(X)
    assert to_host(phi).dtype == np.float32
    assert_close(phi, pred_contrib(model, X))
    raw = model.predict(X, raw_score=True)
    assert_close(to_host(phi).sum(axis=-1), raw)
    inter = to_host(explainer.shap_interaction_values(X[:n_interaction_rows]))
    assert_close(inter.sum(axis=-1), to_host(phi)[:n_interaction_rows])
    assert_close(inter, np.swapaxes(inter, -1, -2))


def _regression_data(n: int = 400, f: int = 6, seed: int = 2):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, f))
    return X, X[:, 0] * 2 + X[:, 1] * X[:, 2] + rng.normal(size=n) * 0.1


# --- test_contribs, test_contribs_sparse ---------------------------------------------------------


def test_breast_cancer_binary_held_out_rows(backend):
    from sklearn.datasets import load_breast_cancer
    from sklearn.model_selection import train_test_split

    X, y = load_breast_cancer(return_X_y=True)
    X_train, X_test, y_train, _ = train_test_split(X, y, test_size=0.1, random_state=42)
    booster = lgb.train(dict(QUIET, objective="binary"), lgb.Dataset(X_train, y_train), 20)
    check_against_lightgbm(booster, X_test, backend)


@pytest.mark.parametrize("layout, n_classes", [("csr", 2), ("csc", 4)])
def test_sparse_input_is_explained_as_lightgbm_reads_it_or_refused_clearly(layout, n_classes):
    from sklearn.datasets import make_multilabel_classification

    X, y = make_multilabel_classification(
        n_samples=100, sparse=True, n_features=20, n_classes=1, n_labels=n_classes, random_state=0
    )
    params = dict(QUIET, objective="binary" if n_classes == 2 else "multiclass")
    if n_classes > 2:
        params["num_class"] = n_classes
    booster = lgb.train(params, lgb.Dataset(X, y.ravel().astype(float)), 20)
    X = X.tocsr() if layout == "csr" else X.tocsc()
    explainer = TreeExplainer(booster, layout="xgboost", backend="cpu")
    try:
        got = explainer.shap_values(X)
    except (TypeError, ValueError) as err:
        assert "sparse" in str(err)
    else:
        assert_close(got, pred_contrib(booster, X.toarray()))


# --- test_regression and the other objectives, boosting modes ------------------------------------

OBJECTIVES = [
    "regression",
    "regression_l1",
    "huber",
    "fair",
    "poisson",
    "quantile",
    "gamma",
    "tweedie",
    "mape",
    "cross_entropy",
    "binary",
    "lambdarank",
    "rank_xendcg",
    "multiclass",
    "multiclassova",
]


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_objectives(objective, backend):
    X, y = _regression_data()
    y = np.abs(y) + 0.1
    params = dict(QUIET, objective=objective)
    group = None
    if objective in ("binary", "cross_entropy"):
        y = (X[:, 0] > 0).astype(float)
    elif objective.startswith("multiclass"):
        y, params["num_class"] = np.digitize(X[:, 0], [-0.5, 0.5]), 3
    elif objective in ("lambdarank", "rank_xendcg"):
        y, group = np.floor(y).clip(0, 3), [40] * 10
    booster = lgb.train(params, lgb.Dataset(X, y, group=group), 15)
    check_against_lightgbm(booster, X, backend)


@pytest.mark.parametrize("boosting", ["rf", "dart", "goss"])
def test_boosting_modes(boosting, backend):
    X, y = _regression_data()
    params = dict(QUIET, boosting=boosting)
    if boosting == "rf":
        params.update(bagging_freq=1, bagging_fraction=0.6, feature_fraction=0.6)
    if boosting == "goss":
        params = dict(QUIET, data_sample_strategy="goss")
    booster = lgb.train(params, lgb.Dataset(X, y), 15)
    check_against_lightgbm(booster, X, backend)


@pytest.mark.parametrize("boosting", ["gbdt", "rf"])
def test_digits_multiclass(boosting, backend):
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    params = dict(QUIET, objective="multiclass", num_class=10, num_leaves=8, boosting=boosting)
    if boosting == "rf":
        params.update(bagging_freq=1, bagging_fraction=0.6, feature_fraction=0.6, min_data=1)
    booster = lgb.train(params, lgb.Dataset(X, y), 5)
    check_against_lightgbm(booster, X[:150], backend, n_interaction_rows=3)


# --- test_missing_value_handle*, test_categorical_handle* ----------------------------------------

ONE_LEAF_SPLIT = dict(
    QUIET,
    objective="regression",
    boost_from_average=False,
    min_data=1,
    num_leaves=2,
    learning_rate=1,
    min_data_in_bin=1,
)
PROBE = np.array([0, 1, 2, 3, 4, 5, 6, 7, np.nan, -1, 0.5, 100, -0.0]).reshape(-1, 1)


@pytest.mark.parametrize(
    "labels, option",
    [
        ([1, 1, 1, 1, 0, 0, 0, 0, 1], {"zero_as_missing": False}),
        ([0, 1, 1, 1, 0, 0, 0, 0, 0], {"zero_as_missing": True}),
        ([0, 1, 1, 1, 0, 0, 0, 0, 0], {"use_missing": False}),
    ],
    ids=["nan-missing", "zero-as-missing", "no-missing"],
)
def test_missing_value_handling_one_split(labels, option, backend):
    X = np.array([0, 1, 2, 3, 4, 5, 6, 7, np.nan]).reshape(-1, 1)
    booster = lgb.train(dict(ONE_LEAF_SPLIT, **option), lgb.Dataset(X, np.array(labels, float)), 1)
    check_against_lightgbm(booster, PROBE, backend)


@pytest.mark.parametrize("fill, n_missing", [(0.0, 20), (1.0, 80)], ids=["few-na", "more-na"])
def test_missing_value_handling_mostly_constant(fill, n_missing, backend):
    rng = np.random.default_rng(1)
    X, y = np.full((100, 1), fill), np.full(100, fill)
    rows = rng.choice(100, n_missing, replace=False)
    X[rows], y[rows] = np.nan, 1.0 - fill
    booster = lgb.train(dict(QUIET, boost_from_average=False), lgb.Dataset(X, y), 20)
    check_against_lightgbm(booster, np.vstack([X, PROBE]), backend)


@pytest.mark.parametrize("option", [{"zero_as_missing": True}, {"use_missing": False}])
def test_zeros_and_nans_in_many_features(option, backend):
    X, y = _regression_data(seed=7)
    rng = np.random.default_rng(7)
    X[rng.random(X.shape) < 0.3] = 0.0
    X[rng.random(X.shape) < 0.1] = np.nan
    booster = lgb.train(dict(QUIET, **option), lgb.Dataset(X, y), 20)
    check_against_lightgbm(booster, X, backend)


CATEGORICAL = dict(
    ONE_LEAF_SPLIT,
    min_data_per_group=1,
    cat_smooth=1,
    cat_l2=0,
    max_cat_to_onehot=1,
    categorical_column=0,
)
CATEGORY_PROBE = np.array([0, 1, 2, 3, 7, 8, 1000, -1, 2.5, np.nan]).reshape(-1, 1)


@pytest.mark.parametrize(
    "values, labels, zero_as_missing",
    [
        ([0, 1, 2, 3, 4, 5, 6, 7], [0, 1, 0, 1, 0, 1, 0, 1], True),
        ([0, np.nan, 0, np.nan, 0, np.nan], [0, 1, 0, 1, 0, 1], False),
        ([1, 1, 1, 1, 1, 1, 2, 2], [1, 1, 1, 1, 1, 1, 0, 0], False),
    ],
    ids=["handle", "handle-na", "non-zero-inputs"],
)
def test_categorical_handling(values, labels, zero_as_missing, backend):
    X = np.array(values, dtype=float).reshape(-1, 1)
    params = dict(CATEGORICAL, zero_as_missing=zero_as_missing)
    booster = lgb.train(params, lgb.Dataset(X, np.array(labels, float)), 1)
    np.testing.assert_allclose(booster.predict(X), labels)  # the split LightGBM's test expects
    check_against_lightgbm(booster, CATEGORY_PROBE, backend)


# --- early stopping; test_sklearn.py's estimators ------------------------------------------------


def test_booster_kept_past_its_best_iteration(backend):
    X, y = _regression_data()
    noisy = y[300:] + np.random.default_rng(0).normal(size=100) * 3
    booster = lgb.train(
        dict(QUIET, learning_rate=0.3),
        lgb.Dataset(X[:300], y[:300]),
        300,
        valid_sets=[lgb.Dataset(X[300:], noisy)],
        callbacks=[lgb.early_stopping(3, verbose=False)],
        keep_training_booster=True,
    )
    assert booster.best_iteration < booster.current_iteration()
    check_against_lightgbm(booster, X, backend)  # LightGBM predicts with the best iteration
    reloaded = lgb.Booster(model_str=booster.model_to_string())
    check_against_lightgbm(reloaded, X, backend)


def _pandas_categorical_frames():
    """Training and test frames as in LightGBM's ``test_pandas_categorical``."""
    rs = np.random.RandomState(42)
    train = pd.DataFrame(
        {
            "A": rs.permutation(["a", "b", "c", "d"] * 75),
            "B": rs.permutation([1, 2, 3] * 100),
            "C": rs.permutation([0.1, 0.2, -0.1, -0.1, 0.2] * 60),
            "D": rs.permutation([True, False] * 150),
            "E": pd.Categorical(rs.permutation(["z", "y", "x", "w", "v"] * 60), ordered=True),
        }
    )
    y = rs.permutation([0, 1] * 150)
    test = pd.DataFrame(
        {
            "A": rs.permutation(["a", "b", "e"] * 20),  # 'e' was never seen
            "B": rs.permutation([1, 3] * 30),
            "C": rs.permutation([0.1, -0.1, 0.2, 0.2] * 15),
            "D": rs.permutation([True, False] * 30),
            "E": pd.Categorical(rs.permutation(["z", "y"] * 30), ordered=True),
        }
    )
    columns = ["A", "B", "C", "D"]
    train[columns] = train[columns].astype("category")
    test[columns] = test[columns].astype("category")
    return train, y, test


@pytest.mark.parametrize(
    "categorical_feature",
    [
        "auto",
        [0],
        ["A"],
        ["A", "B", "C", "D"],
        ["A", "B", "C", "D", "E"],
        [],
    ],
    ids=["auto", "first", "A", "ABCD", "ABCDE", "none"],
)
def test_pandas_categorical(categorical_feature, tmp_path):
    """``test_sklearn.py::test_pandas_categorical``: str, int, float, bool, ordered columns."""
    train, y, test = _pandas_categorical_frames()
    model = lgb.LGBMClassifier(n_jobs=1, n_estimators=10, verbose=-1)
    model.fit(train, y, categorical_feature=categorical_feature)
    check_against_lightgbm(model, test, "cpu")
    path = tmp_path / "categorical.model"
    model.booster_.save_model(path)
    reloaded = lgb.Booster(model_file=str(path))
    check_against_lightgbm(reloaded, test, "cpu")
    from_file = TreeExplainer(str(path), layout="xgboost", backend="cpu").shap_values(test)
    assert_close(from_file, pred_contrib(reloaded, test))


def test_numeric_column_on_a_pandas_categorical_feature_is_refused():
    rng = np.random.default_rng(0)
    frame = pd.DataFrame(
        {"a": rng.normal(size=300), "k": pd.Categorical(rng.choice([10, 20, 30], 300))}
    )
    model = lgb.LGBMRegressor(n_jobs=1, n_estimators=10, min_child_samples=5, verbose=-1)
    model.fit(frame, frame["a"] + (frame["k"] == 20) * 2)
    numeric = frame.assign(k=frame["k"].astype(np.int64))
    with pytest.raises(ValueError, match="categorical_feature"):
        model.predict(numeric)  # what LightGBM does
    with pytest.raises((TypeError, ValueError)):
        TreeExplainer(model, layout="xgboost", backend="cpu").shap_values(numeric)


@pytest.mark.parametrize("n_classes", [0, 2, 3], ids=["regressor", "binary", "multiclass"])
def test_sklearn_estimators_on_frames(n_classes, backend):
    X, y = _regression_data(n=300)
    frame = pd.DataFrame(X, columns=[f"feature {j}" for j in range(X.shape[1])])
    if n_classes:
        model = lgb.LGBMClassifier(n_jobs=1, n_estimators=10, num_leaves=8, verbose=-1)
        model.fit(frame, np.digitize(y, np.quantile(y, np.linspace(0, 1, n_classes + 1)[1:-1])))
    else:
        model = lgb.LGBMRegressor(n_jobs=1, n_estimators=10, num_leaves=8, verbose=-1).fit(frame, y)
    check_against_lightgbm(model, frame, backend)
