"""Values right at the edges (never silently wrong), each against the model's own library.

float64 thresholds (HistGradientBoosting, LightGBM) compared exactly, a model's missing-value
sentinel, pandas category columns on numeric features refused, LightGBM's stored column names,
and the additivity check that catches a wrong result.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

import distshap
from distshap.additivity_rule import AdditivityError
from distshap.encoding import encode_ensemble
from distshap.kernels import get_backend

from naive import treeshap_recursive_rows
from tiny import random_ensemble

xgb = pytest.importorskip("xgboost")


# --- float64 comparisons ---------------------------------------------------------------------


def _float64_model(seed: int):
    """A random ensemble made float64: thresholds moved off float32 values by a few ulps."""
    ens = random_ensemble(seed, n_features=4, n_trees=6, depth=4, n_categorical=1)
    rng = np.random.default_rng(seed)
    t64 = ens.threshold.astype(np.float64) + rng.integers(-3, 4, ens.num_nodes) * 2.0**-40
    return replace(ens, threshold64=t64, model_kind="test:float64")


def _float64_rows(ens, seed: int, n: int = 60) -> np.ndarray:
    """Rows at, just below and just above the float64 thresholds (and NaN, categories)."""
    rng = np.random.default_rng(seed)
    X = rng.random((n, ens.num_features))
    X[:, -1] = rng.integers(-1, 8, n)  # the categorical feature
    numeric = np.flatnonzero((ens.left >= 0) & ~ens.is_categorical)
    for r in range(n):
        node = rng.choice(numeric)
        step = rng.integers(-1, 2)
        X[r, ens.feature[node]] = ens.threshold64[node] + step * 2.0**-52 * ens.threshold64[node]
    X[rng.random(X.shape) < 0.05] = np.nan
    return X


def _margin64(ens, X: np.ndarray) -> np.ndarray:
    """Margin by a plain float64 traversal of ``threshold64`` (the float64 model's own rule)."""
    out = np.tile(ens.base_score, (X.shape[0], 1))
    for r, row in enumerate(X):
        for t in range(ens.num_trees):
            node = ens.tree_offsets[t]
            while ens.left[node] >= 0:
                x = row[ens.feature[node]]
                if np.isnan(x):
                    left = ens.default_left[node]
                elif ens.is_categorical[node]:
                    cats = ens.cat_values[ens.cat_offsets[node] : ens.cat_offsets[node + 1]]
                    left = x < 0 or int(x) not in set(cats.tolist())
                else:
                    left = x < ens.threshold64[node]
                node = ens.left[node] if left else ens.right[node]
            out[r, ens.tree_group[t]] += ens.value[node]
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rank_encoding_takes_every_float64_branch(seed):
    ens = _float64_model(seed)
    X = _float64_rows(ens, seed)
    # rounding these rows to float32 takes other branches: the test could fail
    assert (
        np.abs(_margin64(ens, X.astype(np.float32).astype(np.float64)) - _margin64(ens, X)).max()
        > 0
    )
    encoded, encoding = encode_ensemble(ens)
    assert encoding.float64
    rows = encoding.apply(X)
    assert rows.dtype == np.float32 and rows.flags.c_contiguous
    explainer = distshap.TreeExplainer(ens, layout="xgboost", backend="cpu")
    phi = explainer.shap_values(X)
    np.testing.assert_allclose(phi.sum(axis=1), _margin64(ens, X)[:, 0], rtol=1e-6, atol=1e-6)
    # and the values are the exact TreeSHAP values of the float64 model (oracle on the encoding)
    oracle = treeshap_recursive_rows(encoded, rows)[:, 0]
    np.testing.assert_allclose(phi, oracle, rtol=1e-5, atol=1e-6)


def test_float32_models_keep_the_plain_float32_path():
    ens = random_ensemble(3, n_features=4, n_trees=3)
    encoded, encoding = encode_ensemble(ens)
    assert encoded is ens and encoding.identity and not encoding.float64
    X = np.random.default_rng(0).random((5, 4)).astype(np.float32)
    assert encoding.apply(X) is X  # no copy for C-contiguous float32 input


def test_histgradientboosting_diabetes_matches_predict():
    """sklearn's bundled diabetes data: HGB thresholds are training values (float64)."""
    from sklearn.datasets import load_diabetes
    from sklearn.ensemble import HistGradientBoostingRegressor

    X, y = load_diabetes(return_X_y=True)
    model = HistGradientBoostingRegressor(max_iter=500, random_state=0).fit(X, y)
    phi = distshap.TreeExplainer(model, layout="xgboost", backend="cpu").shap_values(X)
    np.testing.assert_allclose(phi.sum(axis=1), model.predict(X), rtol=1e-5, atol=1e-4)


def test_histgradientboosting_nan_float64_matches_predict():
    from sklearn.ensemble import HistGradientBoostingRegressor

    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 5))
    y = X[:, 0] * 2 + X[:, 1] ** 2 + rng.normal(size=200)
    X[rng.random(X.shape) < 0.1] = np.nan
    model = HistGradientBoostingRegressor(max_iter=200, random_state=0).fit(X, y)
    phi = distshap.TreeExplainer(model, layout="xgboost", backend="cpu").shap_values(X)
    np.testing.assert_allclose(phi.sum(axis=1), model.predict(X), rtol=1e-5, atol=1e-4)


def test_lightgbm_breast_cancer_matches_pred_contrib():
    lgb = pytest.importorskip("lightgbm")
    from sklearn.datasets import load_breast_cancer

    X, y = load_breast_cancer(return_X_y=True)
    model = lgb.LGBMClassifier(n_estimators=100, verbose=-1, random_state=0).fit(X, y)
    phi = distshap.TreeExplainer(model, layout="xgboost", backend="cpu").shap_values(X)
    expected = model.predict(X, pred_contrib=True)
    np.testing.assert_allclose(phi, expected, rtol=1e-4, atol=1e-5)


# --- the model's missing value ---------------------------------------------------------------


def _sentinel_data():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(300, 5)).astype(np.float32)
    y = (X[:, 0] + X[:, 1] > 0).astype(int)
    X[rng.random(X.shape) < 0.3] = np.float32(1e-8)
    return X, y


def test_xgboost_estimator_missing_sentinel_is_honoured():
    X, y = _sentinel_data()
    model = xgb.XGBClassifier(n_estimators=20, max_depth=4, missing=1e-8).fit(X, y)
    phi = distshap.TreeExplainer(model, layout="xgboost", backend="cpu").shap_values(X)
    np.testing.assert_allclose(
        phi.sum(axis=1), model.predict(X, output_margin=True), rtol=1e-5, atol=1e-5
    )
    expected = model.get_booster().predict(xgb.DMatrix(X, missing=1e-8), pred_contribs=True)
    np.testing.assert_allclose(phi, expected, rtol=1e-4, atol=1e-5)


def test_booster_missing_keyword():
    X, y = _sentinel_data()
    dtrain = xgb.DMatrix(X, y, missing=1e-8)
    booster = xgb.train({"max_depth": 4, "objective": "binary:logistic"}, dtrain, 20)
    phi = distshap.TreeExplainer(
        booster, layout="xgboost", backend="cpu", missing=1e-8
    ).shap_values(X)
    expected = booster.predict(xgb.DMatrix(X, missing=1e-8), pred_contribs=True)
    np.testing.assert_allclose(phi, expected, rtol=1e-4, atol=1e-5)
    # without it the sentinel is a number, as for xgboost.DMatrix(X) without missing=
    plain = distshap.TreeExplainer(booster, layout="xgboost", backend="cpu").shap_values(X)
    assert np.abs(plain - expected).max() > 1e-2


# --- DataFrame columns -----------------------------------------------------------------------


def test_category_column_on_numeric_feature_is_refused():
    rng = np.random.default_rng(2)
    frame = pd.DataFrame({"a": rng.normal(size=100), "b": rng.integers(0, 3, 100).astype(float)})
    booster = xgb.train({"max_depth": 3}, xgb.DMatrix(frame, frame["a"] + frame["b"]), 5)
    bad = frame.assign(b=frame["b"].astype("category"))
    with pytest.raises(TypeError, match=r"column 'b' is a category column.*astype"):
        distshap.TreeExplainer(booster, backend="cpu").shap_values(bad)
    with pytest.raises(ValueError):  # XGBoost refuses it as well
        booster.predict(xgb.DMatrix(bad, enable_categorical=True))


def test_lightgbm_frame_with_spaces_in_names():
    lgb = pytest.importorskip("lightgbm")
    rng = np.random.default_rng(3)
    frame = pd.DataFrame(rng.normal(size=(200, 3)), columns=["first col", "b", "c d e"])
    y = frame["first col"] * 2 + frame["c d e"]
    model = lgb.LGBMRegressor(n_estimators=20, verbose=-1).fit(frame, y)
    assert model.booster_.feature_name()[0] == "first_col"
    phi = distshap.TreeExplainer(model, layout="xgboost", backend="cpu").shap_values(frame)
    np.testing.assert_allclose(phi, model.predict(frame, pred_contrib=True), rtol=1e-4, atol=1e-5)
    # reordered columns are matched by name too
    phi2 = distshap.TreeExplainer(model, layout="xgboost", backend="cpu").shap_values(
        frame[["c d e", "b", "first col"]]
    )
    np.testing.assert_array_equal(phi, phi2)


# --- the additivity check ---------------------------------------------------------------------


def test_additivity_check_catches_a_wrong_row(monkeypatch):
    ens = random_ensemble(5, n_features=4, n_trees=4, depth=3)
    X = np.random.default_rng(5).random((30, 4))
    explainer = distshap.TreeExplainer(ens, backend="cpu")
    good = explainer.shap_values(X)
    kernels = get_backend("cpu")
    real = kernels.shap_values

    def one_wrong_row(packed, rows):
        out = real(packed, rows).copy()
        out[7, 0, 1] += 0.5
        return out

    monkeypatch.setattr(kernels, "shap_values", one_wrong_row)
    with pytest.raises(AdditivityError, match=r"1 of 30 rows.*rows \[7\].*difference 0.5"):
        explainer.shap_values(X)
    wrong = explainer.shap_values(X, check_additivity=False)
    assert np.abs(wrong - good).max() == pytest.approx(0.5)


def test_additivity_check_fails_a_nan_value(monkeypatch):
    """A NaN value makes its row's difference NaN: the check must fail it, not pass it."""
    ens = random_ensemble(5, n_features=4, n_trees=4, depth=3)
    X = np.random.default_rng(5).random((30, 4))
    explainer = distshap.TreeExplainer(ens, backend="cpu")
    kernels = get_backend("cpu")
    real = kernels.shap_values

    def one_nan(packed, rows):
        out = real(packed, rows).copy()
        out[4, 0, 2] = np.nan
        return out

    monkeypatch.setattr(kernels, "shap_values", one_nan)
    with pytest.raises(AdditivityError, match=r"1 of 30 rows.*rows \[4\].*sum to nan"):
        explainer.shap_values(X)


def test_additivity_check_on_interactions(monkeypatch):
    ens = random_ensemble(6, n_features=3, n_trees=3, depth=3, n_groups=2)
    X = np.random.default_rng(6).random((10, 3))
    explainer = distshap.TreeExplainer(ens, backend="cpu")
    explainer.shap_interaction_values(X)  # passes
    kernels = get_backend("cpu")
    real = kernels.interaction_values

    def wrong(packed, rows):
        out = real(packed, rows).copy()
        out[3, 1, 0, 2] -= 1.0
        return out

    monkeypatch.setattr(kernels, "interaction_values", wrong)
    with pytest.raises(AdditivityError, match=r"interaction values.*row 3, output 1"):
        explainer.shap_interaction_values(X)


def test_additivity_check_of_dask_chunks(monkeypatch):
    """Each Dask chunk is checked on its worker; the error names the row in the whole input."""
    da = pytest.importorskip("dask.array")
    distributed = pytest.importorskip("distributed")
    ens = random_ensemble(7, n_features=4, n_trees=4, depth=3)
    X = np.random.default_rng(7).random((100, 4))
    with (
        distributed.LocalCluster(
            n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        explainer = distshap.TreeExplainer(ens, backend="cpu", client=client)
        good = explainer.shap_values(X)
        lazy = explainer.shap_values(da.from_array(X, chunks=30))
        np.testing.assert_array_equal(lazy.compute(), good)
        kernels = get_backend("cpu")
        real = kernels.shap_values

        def wrong_in_second_chunk(packed, rows):
            out = real(packed, rows).copy()
            if rows.shape[0] == 30 and np.array_equal(rows[0], packed.encoding.apply(X[30:31])[0]):
                out[4, 0, 1] += 1.0
            return out

        monkeypatch.setattr(kernels, "shap_values", wrong_in_second_chunk)
        with pytest.raises(AdditivityError, match=r"chunk from row 30.*rows \[34\]"):
            explainer.shap_values(da.from_array(X, chunks=30)).compute()
        unchecked = explainer.shap_values(da.from_array(X, chunks=30), check_additivity=False)
        assert np.abs(unchecked.compute() - good).max() == pytest.approx(1.0)


def test_sparse_input_with_repeated_entries_adds_them():
    """A non-canonical scipy.sparse matrix means the sum of its repeated entries, as in scipy."""
    sp = pytest.importorskip("scipy.sparse")
    rng = np.random.default_rng(8)
    X = rng.normal(size=(50, 4))
    booster = xgb.train({"max_depth": 3, "nthread": 1}, xgb.DMatrix(X, X[:, 0]), 5)
    rows, cols = np.repeat(np.arange(50), 4), np.tile(np.arange(4), 50)
    halves = sp.coo_matrix(
        (np.concatenate([X.ravel() / 2, X.ravel() / 2]), (np.tile(rows, 2), np.tile(cols, 2))),
        shape=X.shape,
    )
    explainer = distshap.TreeExplainer(booster, backend="cpu")
    np.testing.assert_array_equal(explainer.shap_values(halves), explainer.shap_values(X))
