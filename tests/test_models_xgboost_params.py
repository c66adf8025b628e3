"""XGBoost's per-row and per-model starting margins, as XGBoost's own predictions use them.

* a logistic ``base_score`` is clamped to ``[1e-6, 1 - 1e-6]`` before XGBoost's float32 logit
  (0 and 1 included), from Booster objects and from JSON and UBJ files;
* an ``xgboost.DMatrix`` with ``base_margin`` has it in each row's bias, as ``pred_contribs`` /
  ``pred_interactions`` have it, or is refused where distshap cannot add it.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import xgboost as xgb

import distshap
from distshap.shap_compat import add_base_margin, explain_input

RNG = np.random.default_rng(3)
X = RNG.normal(size=(120, 4)).astype(np.float32)
Y = (X[:, 0] + 0.3 * X[:, 1] > 0).astype(np.float32)


def _booster(objective: str, base_score: str) -> xgb.Booster:
    """A logistic model whose stored base_score is ``base_score`` (XGBoost's own spelling)."""
    booster = xgb.train(
        {"objective": objective, "max_depth": 3, "base_score": 0.3, "nthread": 1},
        xgb.DMatrix(X, Y),
        num_boost_round=4,
    )
    doc = json.loads(booster.save_raw("json"))
    doc["learner"]["learner_model_param"]["base_score"] = f"[{base_score}]"
    out = xgb.Booster()
    out.load_model(bytearray(json.dumps(doc).encode()))
    return out


@pytest.mark.parametrize("objective", ["binary:logistic", "reg:logistic"])
@pytest.mark.parametrize("base_score", ["1E-7", "0E0", "1E0", "3E-1", "9.99999E-1", "9.9E-1"])
def test_logistic_base_score_as_xgboost(objective, base_score, tmp_path):
    booster = _booster(objective, base_score)
    want = booster.predict(xgb.DMatrix(X), pred_contribs=True)
    margin = booster.predict(xgb.DMatrix(X), output_margin=True)
    json_path, ubj_path = tmp_path / "m.json", tmp_path / "m.ubj"
    booster.save_model(json_path)
    booster.save_model(ubj_path)
    for model in (booster, str(json_path), str(ubj_path)):
        got = distshap.TreeExplainer(model, layout="xgboost", backend="cpu").shap_values(X)
        np.testing.assert_allclose(got, want, atol=2e-5, err_msg=str(model))
        np.testing.assert_allclose(got.sum(axis=1), margin, atol=2e-5)


def test_logistic_base_score_outside_zero_one_refused(tmp_path):
    booster = _booster("binary:logistic", "3E-1")
    doc = json.loads(booster.save_raw("json"))
    doc["learner"]["learner_model_param"]["base_score"] = "[1.5E0]"
    path = tmp_path / "m.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="no probability"):
        distshap.TreeExplainer(str(path))


def _trained(objective: str, groups: int) -> xgb.Booster:
    label = (X[:, 0] > 0).astype(np.float32) + (X[:, 1] > 0.5)
    label = label if groups > 1 else (Y if "logistic" in objective else X[:, 2])
    params = {"objective": objective, "max_depth": 3, "nthread": 1}
    if groups > 1:
        params["num_class"] = groups
    return xgb.train(params, xgb.DMatrix(X, label), num_boost_round=5)


@pytest.mark.parametrize(
    ("objective", "groups"),
    [("reg:squarederror", 1), ("binary:logistic", 1), ("multi:softprob", 3)],
)
@pytest.mark.parametrize("flat", [False, True])
def test_dmatrix_base_margin_in_bias(objective, groups, flat):
    booster = _trained(objective, groups)
    offsets = RNG.normal(size=(X.shape[0], groups)).astype(np.float32)
    dm = xgb.DMatrix(X, base_margin=offsets.ravel() if flat else offsets)
    explainer = distshap.TreeExplainer(booster, layout="xgboost", backend="cpu")
    np.testing.assert_allclose(
        explainer.shap_values(dm), booster.predict(dm, pred_contribs=True), atol=2e-5
    )
    np.testing.assert_allclose(
        explainer.shap_interaction_values(dm),
        booster.predict(dm, pred_interactions=True),
        atol=2e-5,
    )
    explanation = explainer(dm)
    sums = explanation.base_values + explanation.values.sum(axis=1)
    margin = booster.predict(dm, output_margin=True)
    np.testing.assert_allclose(sums, margin.reshape(sums.shape), atol=2e-5)
    plain = explainer.shap_values(X)  # the same rows without offsets are untouched
    np.testing.assert_allclose(
        plain, booster.predict(xgb.DMatrix(X), pred_contribs=True), atol=2e-5
    )


def test_base_margin_of_a_batch_is_its_rows():
    """A batch of rows (``progress=True``) takes the offsets of its own rows."""
    offsets = RNG.normal(size=(X.shape[0], 2)).astype(np.float32)
    inp = explain_input(xgb.DMatrix(X, base_margin=offsets), base_margin=True)
    values = RNG.normal(size=(X.shape[0], 2, 5)).astype(np.float32)
    base_score = np.array([0.25, -1.0])
    whole = add_base_margin(values, inp, base_score, 0, interactions=False)
    batch = add_base_margin(values[50:90], inp, base_score, 50, interactions=False)
    np.testing.assert_array_equal(batch, whole[50:90])
    np.testing.assert_allclose(whole[..., -1], values[..., -1] - base_score + offsets, atol=1e-6)
    np.testing.assert_array_equal(whole[..., :-1], values[..., :-1])


def test_dmatrix_base_margin_refused_where_not_added():
    booster = _trained("reg:squarederror", 1)
    dm = xgb.DMatrix(X, base_margin=np.ones(X.shape[0], np.float32))
    explainer = distshap.TreeExplainer(booster, backend="cpu")
    for call in (
        lambda: explainer.top_interactions(dm),
        lambda: explainer.interaction_summary(dm),
        lambda: explainer.shap_taylor_interaction_values(dm),
        lambda: distshap.TreeExplainer(booster, X[:20], backend="cpu").shap_values(dm),
    ):
        with pytest.raises(ValueError, match="base_margin"):
            call()
    with pytest.raises(ValueError, match="background.*base_margin"):
        distshap.TreeExplainer(booster, dm)


def test_dmatrix_base_margin_wrong_width():
    booster = _trained("multi:softprob", 3)
    dm = xgb.DMatrix(X, base_margin=np.zeros((X.shape[0], 2), np.float32).ravel())
    with pytest.raises(ValueError, match="base_margin"):
        distshap.TreeExplainer(booster, backend="cpu").shap_values(dm)


def test_dask_dmatrix_refused():
    pytest.importorskip("xgboost.dask")
    import dask.array as da
    import xgboost.dask
    from distributed import Client, LocalCluster

    booster = _trained("reg:squarederror", 1)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False) as cluster:
        with Client(cluster) as client:
            rows = da.from_array(X, chunks=60)
            dm = xgboost.dask.DaskDMatrix(client, rows, base_margin=da.ones(len(X), chunks=60))
            with pytest.raises(TypeError, match="DaskDMatrix.*Dask array or DataFrame"):
                distshap.TreeExplainer(booster, client=client).shap_values(dm)


def test_catboost_pool_baseline_refused():
    catboost = pytest.importorskip("catboost")
    model = catboost.CatBoostRegressor(iterations=3, depth=2, verbose=0, thread_count=1)
    model.fit(X, X[:, 0])
    pool = catboost.Pool(X, baseline=np.ones(len(X)))
    with pytest.raises(ValueError, match="baseline"):
        distshap.TreeExplainer(model, backend="cpu").shap_values(pool)
