"""Regression tests for wrong results found by differential fuzzing (tiny models, CPU only).

Each test pins one case where distshap's values (and its own additivity check, which read the
same wrong values) disagreed with the model's library, with the reason in its docstring.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from distshap import TreeExplainer

lgb = pytest.importorskip("lightgbm")

#: LightGBM's kZeroThreshold: the float 1e-35f held in a double.
ZERO = float(np.float32(1e-35))


def _lightgbm(X, y, categorical="auto", **params):
    params = dict(objective="regression", min_data_in_leaf=1, min_data_in_bin=1, verbose=-1,
                  **params)  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        data = lgb.Dataset(X, y, categorical_feature=categorical, params={"verbose": -1})
        return lgb.train(params, data, 2)


def _assert_lightgbm(booster, E):
    phi = TreeExplainer(booster, layout="xgboost", backend="cpu").shap_values(E)
    np.testing.assert_allclose(phi.sum(-1), booster.predict(E, raw_score=True), atol=1e-6)
    np.testing.assert_allclose(phi, booster.predict(E, pred_contrib=True), atol=1e-6)


def test_lightgbm_minus_zero_threshold_reads_as_zero():
    """LightGBM reads every dense value in [-z, z] as 0, and its bins put a threshold at -z:
    x = -z goes right of -z (as 0 does), where x <= -z sent it left."""
    X = np.array([-2.0, -1.0, 0.0, 0.0, 1.0, 2.0] * 3)[:, None]
    y = np.array([0.0, 1.0, 5.0, 5.0, 2.0, 3.0] * 3)
    booster = _lightgbm(X, y, num_leaves=4)
    assert "-1.0000000180025095e-35" in booster.model_to_string()  # the threshold at -z
    E = np.array([[-ZERO], [ZERO], [-1e-36], [0.0], [-1.0], [np.nextafter(-ZERO, -1.0)]])
    _assert_lightgbm(booster, E)
    _assert_lightgbm(booster, E.astype(np.float32))


def test_lightgbm_categorical_truncates_towards_zero():
    """LightGBM takes int(x) of a categorical value: (-1, 0) is category 0, not unknown."""
    rng = np.random.default_rng(0)
    X = np.c_[rng.integers(0, 4, 200).astype(float), rng.normal(size=200)]
    y = 3.0 * (X[:, 0] == 0) + X[:, 1]
    booster = _lightgbm(X, y, categorical=[0], num_leaves=4, min_data_per_group=1,
                        max_cat_to_onehot=1, cat_smooth=1)  # fmt: skip
    E = np.array([[v, 0.5] for v in (0.0, -0.5, -0.999, -1.0, -1e-36, 0.5, 2.5, np.nan)])
    _assert_lightgbm(booster, E)
    assert E[1, 0] == -0.5  # the caller's array is not rewritten


def test_hist_gradient_boosting_categorical_non_integer_is_unknown():
    """scikit-learn's encoder reads a categorical value that is no integer (0.5, 2.999) as an
    unknown category (the missing-value direction); int(x) made it category 0 / 2."""
    from sklearn.ensemble import HistGradientBoostingRegressor

    rng = np.random.default_rng(0)
    X = np.c_[rng.integers(0, 5, 200).astype(float), rng.normal(size=200)]
    y = 3.0 * (X[:, 0] == 0) + 1.5 * (X[:, 0] == 2) + X[:, 1]
    model = HistGradientBoostingRegressor(max_iter=2, categorical_features=[0]).fit(X, y)
    E = np.array([[v, 0.5] for v in (0.0, 0.5, 1e-36, 2.0, 2.999, 3.5, -0.5, np.nan)])
    explainer = TreeExplainer(model, layout="xgboost", backend="cpu")
    phi = explainer.shap_values(E)
    np.testing.assert_allclose(phi.sum(-1), model.predict(E), atol=1e-6)
    # the interventional path reads its background the same way
    background = TreeExplainer(model, E[:4], layout="xgboost", backend="cpu").shap_values(E)
    np.testing.assert_allclose(background.sum(-1), model.predict(E), atol=1e-6)
