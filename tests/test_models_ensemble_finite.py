"""Non-finite numbers in a model are refused at load, naming the tree and node, by every loader
(the shared check in :meth:`distshap.models.Ensemble.validate`); infinite thresholds, which
models legitimately hold, still explain exactly."""

from __future__ import annotations

import json

import numpy as np
import pytest
import xgboost as xgb

import distshap
from distshap.models import UnsupportedModelError, load_model

RNG = np.random.default_rng(11)
X = RNG.normal(size=(200, 4)).astype(np.float32)
Y = X[:, 0] + X[:, 1] * X[:, 2]


def _xgb_doc() -> dict:
    booster = xgb.train({"max_depth": 3, "nthread": 1}, xgb.DMatrix(X, Y), num_boost_round=3)
    return json.loads(booster.save_raw("json"))


def _tree(doc: dict, t: int) -> dict:
    return doc["learner"]["gradient_booster"]["model"]["trees"][t]


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_xgboost_leaf_refused(bad, tmp_path):
    doc = _xgb_doc()
    tree = _tree(doc, 2)
    leaf = tree["left_children"].index(-1)
    tree["split_conditions"][leaf] = bad  # XGBoost's leaf value
    tree["base_weights"][leaf] = bad
    path = tmp_path / "m.json"
    path.write_text(json.dumps(doc))  # NaN / Infinity literals, as Python writes them
    with pytest.raises(UnsupportedModelError, match=f"tree 2, node {leaf} \\(a leaf\\)"):
        load_model(str(path))


def test_xgboost_nan_split_refused_infinite_split_exact(tmp_path):
    doc = _xgb_doc()
    tree = _tree(doc, 1)
    split = 1 if tree["left_children"][1] != -1 else 0
    for value, refused in ((float("nan"), True), (float("inf"), False), (float("-inf"), False)):
        tree["split_conditions"][split] = value
        path = tmp_path / "m.json"
        path.write_text(json.dumps(doc))
        if refused:
            with pytest.raises(UnsupportedModelError, match=f"tree 1, node {split} .*NaN"):
                load_model(str(path))
            continue
        booster = xgb.Booster(model_file=str(path))
        got = distshap.TreeExplainer(str(path), layout="xgboost", backend="cpu").shap_values(X)
        want = booster.predict(xgb.DMatrix(X), pred_contribs=True)
        np.testing.assert_allclose(got, want, atol=2e-5)


def test_base_score_refused(tmp_path):
    doc = _xgb_doc()
    doc["learner"]["learner_model_param"]["base_score"] = "[Infinity]"
    path = tmp_path / "m.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(UnsupportedModelError, match="base_score"):
        load_model(str(path))


def test_lightgbm_leaf_refused(tmp_path):
    lgb = pytest.importorskip("lightgbm")
    model = lgb.train(
        {"verbose": -1, "num_leaves": 4, "num_threads": 1}, lgb.Dataset(X, Y), num_boost_round=3
    )
    lines = [ln for ln in model.model_to_string().split("\n") if not ln.startswith("tree_sizes=")]
    starts = [i for i, ln in enumerate(lines) if ln.startswith("Tree=")]
    i = next(i for i in range(starts[1], len(lines)) if lines[i].startswith("leaf_value="))
    values = lines[i].split("=")[1].split(" ")
    values[1] = "inf"
    lines[i] = "leaf_value=" + " ".join(values)
    path = tmp_path / "m.txt"
    path.write_text("\n".join(lines))
    for source in (str(path), lgb.Booster(model_file=str(path))):
        with pytest.raises(UnsupportedModelError, match="tree 1, node .*inf"):
            load_model(source)


def test_sklearn_tree_refused():
    tree_mod = pytest.importorskip("sklearn.tree")
    est = tree_mod.DecisionTreeRegressor(max_depth=3, random_state=0).fit(X, Y)
    leaf = int(np.flatnonzero(est.tree_.children_left == -1)[1])
    est.tree_.value[leaf, 0, 0] = np.nan
    with pytest.raises(UnsupportedModelError, match=f"tree 0, node {leaf} \\(a leaf\\)"):
        load_model(est)


def test_catboost_json_leaf_refused(tmp_path):
    catboost = pytest.importorskip("catboost")
    model = catboost.CatBoostRegressor(iterations=3, depth=2, verbose=0, thread_count=1)
    model.fit(X, Y)
    path = tmp_path / "m.json"
    model.save_model(str(path), format="json")
    doc = json.loads(path.read_text())
    doc["oblivious_trees"][1]["leaf_values"][2] = float("inf")
    path.write_text(json.dumps(doc))
    with pytest.raises(UnsupportedModelError, match="tree 1, node .*a leaf.*inf"):
        load_model(str(path))


def test_hist_gradient_boosting_infinite_threshold_kept():
    """HistGradientBoosting stores +inf thresholds (missing values split from all others)."""
    ensemble_mod = pytest.importorskip("sklearn.ensemble")
    Xn = X.astype(np.float64)
    Xn[RNG.random(Xn.shape) < 0.2] = np.nan
    yn = np.where(np.isnan(Xn[:, 0]), 3.0, Y)
    est = ensemble_mod.HistGradientBoostingRegressor(max_iter=5, random_state=0).fit(Xn, yn)
    ens = load_model(est)
    assert np.isposinf(ens.threshold64[ens.left >= 0]).any()
    got = distshap.TreeExplainer(est, layout="xgboost", backend="cpu").shap_values(Xn)
    np.testing.assert_allclose(got.sum(axis=1), est.predict(Xn), atol=1e-4)


def test_cover_names_the_node(tmp_path):
    doc = _xgb_doc()
    tree = _tree(doc, 1)
    tree["sum_hessian"][2] = float("nan")
    path = tmp_path / "m.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match="tree 1, node 2 .*cover nan"):
        load_model(str(path))
