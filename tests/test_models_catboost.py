"""CatBoost loader: raw margins and SHAP values against CatBoost's own, refusals."""

from __future__ import annotations

import numpy as np
import pytest

from distshap.models import load_model

import naive
from conftest import to_host

cb = pytest.importorskip("catboost")


def _data(n: int = 400) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(5)
    X = rng.normal(size=(n, 4)).astype(np.float32)
    X[rng.random(n) < 0.15, 0] = np.nan
    y = np.nan_to_num(X[:, 0], nan=2.0) + X[:, 1] - 0.5 * (X[:, 3] > 0.3)
    Xt = X[:50].copy()
    Xt[:5, 1] = np.nan  # NaN in a feature trained without NaN
    return X, y, Xt


CASES = {
    "regression": (lambda: cb.CatBoostRegressor, {}, "reg"),
    "nan_mode_max": (lambda: cb.CatBoostRegressor, {"nan_mode": "Max"}, "reg"),
    "binary": (lambda: cb.CatBoostClassifier, {}, "binary"),
    "multiclass": (lambda: cb.CatBoostClassifier, {}, "multiclass"),
    "depthwise": (lambda: cb.CatBoostRegressor, {"grow_policy": "Depthwise"}, "reg"),
    "lossguide_multiclass": (
        lambda: cb.CatBoostClassifier,
        {"grow_policy": "Lossguide"},
        "multiclass",
    ),
}


def _fit(case: str):
    cls, params, task = CASES[case]
    X, y, Xt = _data()
    if task == "binary":
        y = (y > np.median(y)).astype(int)
    elif task == "multiclass":
        y = np.digitize(y, np.quantile(y, [0.33, 0.66]))
    model = cls()(iterations=8, depth=3, verbose=0, thread_count=1, random_seed=0, **params)
    return model.fit(X, y), Xt


@pytest.mark.parametrize("case", list(CASES))
def test_catboost_margin_matches_raw_formula_val(case):
    model, Xt = _fit(case)
    ens = load_model(model)
    raw = np.asarray(model.predict(Xt, prediction_type="RawFormulaVal")).reshape(len(Xt), -1)
    assert ens.num_groups == raw.shape[1]
    np.testing.assert_allclose(naive.predict_margin(ens, Xt), raw, rtol=0, atol=1e-5)


@pytest.mark.parametrize("case", ["regression", "binary", "multiclass"])
def test_catboost_shap_matches_catboost(case, backend):
    from distshap import TreeExplainer

    model, Xt = _fit(case)
    ours = to_host(TreeExplainer(model, layout="xgboost", backend=backend).shap_values(Xt))
    ref = np.asarray(model.get_feature_importance(cb.Pool(Xt), type="ShapValues"))
    ref = ref.reshape(ours.shape)
    scale = np.abs(model.predict(Xt, prediction_type="RawFormulaVal")).max()
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-4 * scale)


def test_catboost_categorical_features_become_categorical_splits():
    """(Their values: tests/test_models_catboost_categorical.py.)"""
    X, y, _ = _data()
    cats = np.where(X[:, 2] > 0, "a", "b").astype(object)
    data = np.c_[np.nan_to_num(X[:, :2]).astype(object), cats]
    model = cb.CatBoostRegressor(iterations=3, depth=2, verbose=0, thread_count=1)
    model.fit(data, y + (cats == "a"), cat_features=[2])
    ens = load_model(model)
    assert set(ens.feature[ens.is_categorical].tolist()) == {2}


@pytest.mark.parametrize("case", ["depthwise", "lossguide_multiclass"])
def test_catboost_nonsymmetric_shap_matches_catboost_on_the_export(case, backend, tmp_path):
    """Non-symmetric trees: against CatBoost's ShapValues of the JSON export distshap reads."""
    from test_models_catboost_gpu import exported_shap_values

    from distshap import TreeExplainer

    model, Xt = _fit(case)
    model.save_model(str(tmp_path / "m.json"), format="json")
    ours = to_host(TreeExplainer(model, layout="xgboost", backend=backend).shap_values(Xt))
    ref = exported_shap_values(tmp_path / "m.json", Xt).reshape(ours.shape)
    scale = np.abs(model.predict(Xt, prediction_type="RawFormulaVal")).max()
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-4 * scale)
