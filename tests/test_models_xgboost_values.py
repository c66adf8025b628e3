"""distshap against XGBoost's own pred_contribs / pred_interactions: every model kind, backend."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import distshap
from distshap import TreeExplainer

from conftest import to_host
from xgb_models import MODEL_KINDS, as_array, dmatrix


def _scale(ref: np.ndarray) -> float:
    return max(1.0, float(np.abs(ref).max()))


@pytest.mark.parametrize("kind", sorted(MODEL_KINDS))
def test_shap_values_match_pred_contribs(kind, backend):
    booster, X = MODEL_KINDS[kind]()
    explainer = distshap.TreeExplainer(booster, layout="xgboost", backend=backend)
    got = to_host(explainer.shap_values(X))
    ref = booster.predict(dmatrix(X), pred_contribs=True)
    assert got.shape == ref.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, ref, atol=1e-4 * _scale(ref), rtol=0)
    margin = booster.predict(dmatrix(X), output_margin=True)
    np.testing.assert_allclose(got.sum(axis=-1), margin, atol=1e-4 * _scale(margin), rtol=0)
    np.testing.assert_allclose(
        got[..., -1], np.broadcast_to(explainer.expected_value, got.shape[:-1])
    )


@pytest.mark.parametrize("kind", sorted(MODEL_KINDS))
def test_interactions_match_pred_interactions(kind, backend):
    booster, X = MODEL_KINDS[kind]()
    X = X.iloc[:60] if isinstance(X, pd.DataFrame) else X[:60]
    explainer = distshap.TreeExplainer(booster, layout="xgboost", backend=backend)
    got = to_host(explainer.shap_interaction_values(X))
    ref = booster.predict(dmatrix(X), pred_interactions=True)
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, atol=1e-4 * _scale(ref), rtol=0)
    shap = to_host(explainer.shap_values(X))
    np.testing.assert_allclose(got.sum(axis=-1), shap, atol=1e-5 * _scale(shap), rtol=0)


@pytest.mark.parametrize("kind", ["regression", "multiclass", "categorical"])
def test_saved_model_files_give_identical_values(kind, tmp_path):
    booster, X = MODEL_KINDS[kind]()
    expected = distshap.TreeExplainer(booster, layout="xgboost", backend="cpu").shap_values(X)
    for suffix in ("json", "ubj"):
        path = tmp_path / f"model.{suffix}"
        booster.save_model(path)
        got = distshap.TreeExplainer(str(path), layout="xgboost", backend="cpu").shap_values(X)
        assert np.array_equal(got, expected)


def test_packing_heuristic_does_not_change_values():
    booster, X = MODEL_KINDS["multiclass"]()
    X = as_array(X)
    results = [
        distshap.TreeExplainer(booster, layout="xgboost", backend="cpu", algorithm=a).shap_values(X)
        for a in ("bfd", "ffd", "nf", "none")
    ]
    for other in results[1:]:
        np.testing.assert_allclose(other, results[0], atol=1e-6)


def test_input_layouts_give_identical_values():
    booster, X = MODEL_KINDS["missing"]()
    explainer = distshap.TreeExplainer(booster, layout="xgboost", backend="cpu")
    expected = explainer.shap_values(X)
    assert np.array_equal(explainer.shap_values(np.asfortranarray(X)), expected)
    assert np.array_equal(explainer.shap_values(X.astype(np.float64)), expected)
    frame = pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])])
    assert np.array_equal(explainer.shap_values(frame), expected)


def _string_category_model():
    import xgboost as xgb

    rng = np.random.default_rng(7)
    labels = np.array(["red", "green", "blue", "teal"])
    frame = pd.DataFrame(
        {
            "x": rng.normal(size=400).astype(np.float32),
            "colour": pd.Categorical(rng.choice(labels, 400), categories=labels),
        }
    )
    y = frame["x"] + (frame["colour"] == "blue") * 2.0 - (frame["colour"] == "teal") * 1.0
    params = {"max_depth": 3, "max_cat_to_onehot": 1, "nthread": 1}
    booster = xgb.train(params, xgb.DMatrix(frame, y, enable_categorical=True), 8)
    return booster, frame


def test_categories_are_coded_by_the_training_categories():
    """A DataFrame whose category order differs from training gets the model's codes."""
    import xgboost as xgb

    booster, frame = _string_category_model()
    explainer = TreeExplainer(booster, layout="xgboost", backend="cpu")
    if explainer.packed.feature_categories is None:
        pytest.skip("this XGBoost does not store its training categories")
    reordered = frame.assign(
        colour=frame["colour"].cat.reorder_categories(["teal", "blue", "green", "red"])
    )
    got = explainer.shap_values(reordered.assign(label=1.0)[["label", "colour", "x"]])
    ref = booster.predict(xgb.DMatrix(reordered, enable_categorical=True), pred_contribs=True)
    np.testing.assert_allclose(got, ref, atol=1e-5 * _scale(ref), rtol=0)
    assert np.array_equal(got, explainer.shap_values(frame))


def test_early_stopped_estimator_uses_its_best_iteration():
    import xgboost as xgb

    rng = np.random.default_rng(11)
    X = rng.normal(size=(400, 4)).astype(np.float32)
    y = X[:, 0] + rng.normal(0, 2.0, 400)  # noisy: early stopping stops early
    model = xgb.XGBRegressor(n_estimators=200, early_stopping_rounds=3, max_depth=3, n_jobs=1)
    model.fit(X[:300], y[:300], eval_set=[(X[300:], y[300:])], verbose=False)
    assert model.best_iteration + 1 < model.get_booster().num_boosted_rounds()
    phi = TreeExplainer(model, layout="xgboost", backend="cpu").shap_values(X)
    margin = model.predict(X, output_margin=True)
    np.testing.assert_allclose(phi.sum(axis=1), margin, atol=1e-4 * _scale(margin), rtol=0)
