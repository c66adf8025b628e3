"""LightGBM and scikit-learn loaders: margins, SHAP values and refusals against the libraries."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

from distshap.models import UnsupportedModelError, load_model
from distshap.models._common import le_threshold_to_lt_float32

import naive
from conftest import to_host

try:
    import lightgbm as lgb
except ImportError:  # the sklearn half of this module still runs (e.g. on the GPU machine)
    lgb = None
needs_lightgbm = pytest.mark.skipif(lgb is None, reason="lightgbm is not installed")
sk_ensemble = pytest.importorskip("sklearn.ensemble")
sk_tree = pytest.importorskip("sklearn.tree")


@pytest.fixture(autouse=True)
def _one_thread():
    """OpenMP busy-waiting of LightGBM / HistGradientBoosting is slow on small shared CI boxes."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover
        yield
        return
    with threadpool_limits(limits=1):
        yield


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _data(seed: int = 0, n: int = 500) -> tuple[np.ndarray, np.ndarray]:
    """Float32 features with NaNs, exact zeros and an integer-coded categorical column 2."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 5)).astype(np.float32)
    X[:, 2] = rng.integers(0, 8, n)
    X[:, 3] = np.where(rng.random(n) < 0.35, 0.0, X[:, 3])
    X[rng.random(n) < 0.15, 0] = np.nan
    y = (
        np.nan_to_num(X[:, 0], nan=1.5) * (X[:, 2] > 3)
        + X[:, 1]
        + (X[:, 2] % 3)
        + 2.0 * (X[:, 3] == 0)
    )
    return X, y.astype(np.float64)


def _test_rows(X: np.ndarray) -> np.ndarray:
    """Rows with NaN in every column, unseen / negative categories and exact thresholds."""
    Xt = X[:80].copy()
    Xt[:6, 1] = np.nan
    Xt[6:10, 3] = np.nan
    Xt[10:14, 2] = np.nan
    Xt[14:17, 2] = 40.0
    Xt[17:20, 2] = -3.0
    Xt[20:24, 3] = np.float32(-1e-36)
    return Xt


def _labels(y: np.ndarray, objective: str) -> np.ndarray:
    if objective == "binary":
        return (y > np.median(y)).astype(int)
    if objective == "multiclass":
        return np.digitize(y, np.quantile(y, [0.33, 0.66]))
    return y


def _lgb_train(params: dict, rounds: int = 12, leaves: int = 12) -> tuple:
    X, y = _data()
    base = dict(
        verbose=-1,
        num_leaves=leaves,
        min_data_in_leaf=5,
        min_data_per_group=5,
        cat_smooth=1.0,
        max_cat_to_onehot=2,
        seed=1,
        num_threads=1,
    )
    ds = lgb.Dataset(X, _labels(y, params["objective"]), categorical_feature=[2])
    return lgb.train({**base, **params}, ds, num_boost_round=rounds), X


LGB_CASES = {
    "regression": dict(objective="regression"),
    "zero_as_missing": dict(objective="regression", zero_as_missing=True),
    "no_missing": dict(objective="regression", use_missing=False),
    "binary": dict(objective="binary"),
    "multiclass": dict(objective="multiclass", num_class=3),
    "random_forest": dict(
        objective="regression", boosting="rf", bagging_fraction=0.7, bagging_freq=1
    ),
}


# ---------------------------------------------------------------------------------------------
# threshold conversion
# ---------------------------------------------------------------------------------------------


def test_le_threshold_to_lt_float32_matches_double_comparison():
    rng = np.random.default_rng(3)
    f32 = rng.normal(scale=10.0, size=300).astype(np.float32)
    halfway = (f32.astype(np.float64) + np.nextafter(f32, np.float32(np.inf))) / 2
    thr = np.concatenate(
        [
            f32.astype(np.float64),  # exactly representable
            halfway,  # between two float32s
            np.nextafter(f32.astype(np.float64), np.inf),
            np.nextafter(f32.astype(np.float64), -np.inf),
            [0.0, -0.0, 1e-35, -1e-35, 1e-300, -1e-300, 1e300, -1e300],
        ]
    )
    t = le_threshold_to_lt_float32(thr)
    assert t.dtype == np.float32
    # every float32 within 2 ulps of the threshold, both sides
    with np.errstate(over="ignore"):
        base = thr.astype(np.float32)
    for step in range(-2, 3):
        x = base.copy()
        for _ in range(abs(step)):
            x = np.nextafter(x, np.float32(np.sign(step) * np.inf))
        ok = np.isfinite(x)
        expected = x[ok].astype(np.float64) <= thr[ok]
        np.testing.assert_array_equal(x[ok] < t[ok], expected)


# ---------------------------------------------------------------------------------------------
# LightGBM
# ---------------------------------------------------------------------------------------------


@needs_lightgbm
@pytest.mark.parametrize("case", list(LGB_CASES))
def test_lightgbm_margin_matches_raw_score(case):
    booster, X = _lgb_train(LGB_CASES[case])
    ens = load_model(booster)
    Xt = _test_rows(X)
    raw = booster.predict(Xt, raw_score=True).reshape(len(Xt), -1)
    assert ens.num_groups == raw.shape[1]
    assert ens.is_categorical.any(), "the categorical feature should be split on"
    np.testing.assert_allclose(naive.predict_margin(ens, Xt), raw, rtol=0, atol=1e-5)


@needs_lightgbm
def test_lightgbm_zero_as_missing_is_rewritten_exactly():
    booster, X = _lgb_train(LGB_CASES["zero_as_missing"], rounds=4, leaves=6)
    ens = load_model(booster)
    n_lgb_nodes = sum(2 * t["num_leaves"] - 1 for t in booster.dump_model()["tree_info"])
    assert ens.num_nodes > n_lgb_nodes, "the test model should need the zero-region rewrite"
    Xt = _test_rows(X)[:12]
    contrib = booster.predict(Xt, pred_contrib=True).reshape(len(Xt), 1, -1)
    # brute-force Shapley values of E[f | x_S] on the rewritten tree == LightGBM's TreeSHAP
    np.testing.assert_allclose(naive.brute_force_shap_rows(ens, Xt), contrib, atol=1e-9)


@needs_lightgbm
@pytest.mark.parametrize("case", ["regression", "multiclass", "zero_as_missing"])
def test_lightgbm_treeshap_oracle_matches_pred_contrib(case):
    booster, X = _lgb_train(LGB_CASES[case], rounds=5, leaves=8)
    ens = load_model(booster)
    Xt = _test_rows(X)[:25]
    contrib = booster.predict(Xt, pred_contrib=True).reshape(len(Xt), ens.num_groups, -1)
    np.testing.assert_allclose(naive.treeshap_recursive_rows(ens, Xt), contrib, atol=1e-9)


@needs_lightgbm
@pytest.mark.parametrize("case", ["regression", "zero_as_missing", "multiclass"])
def test_lightgbm_tree_explainer_matches_pred_contrib(case, backend):
    from distshap import TreeExplainer

    booster, X = _lgb_train(LGB_CASES[case])
    Xt = _test_rows(X)
    explainer = TreeExplainer(booster, layout="xgboost", backend=backend)
    phi = to_host(explainer.shap_values(Xt))
    contrib = booster.predict(Xt, pred_contrib=True).reshape(phi.shape)
    scale = np.abs(booster.predict(Xt, raw_score=True)).max()
    np.testing.assert_allclose(phi, contrib, rtol=0, atol=1e-4 * scale)
    inter = to_host(explainer.shap_interaction_values(Xt[:20]))
    np.testing.assert_allclose(inter.sum(axis=-1), phi[:20], rtol=0, atol=1e-4 * scale)


@needs_lightgbm
def test_lightgbm_file_loads_without_lightgbm(tmp_path):
    booster, X = _lgb_train(LGB_CASES["multiclass"], rounds=3)
    path = tmp_path / "model.txt"
    booster.save_model(str(path))
    ens = load_model(str(path))
    expected = booster.predict(X[:40], raw_score=True)
    np.testing.assert_allclose(naive.predict_margin(ens, X[:40]), expected, atol=1e-5)
    np.testing.assert_array_equal(ens.threshold, load_model(booster).threshold)
    code = (
        "import sys; sys.modules['lightgbm'] = None\n"
        "from distshap.models import load_model\n"
        f"e = load_model({str(path)!r})\n"
        "print(e.num_trees, e.num_groups)\n"
    )
    env = {**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert out.stdout.split() == [str(ens.num_trees), str(ens.num_groups)]


@needs_lightgbm
def test_lightgbm_sklearn_estimator():
    X, y = _data(seed=4)
    model = lgb.LGBMClassifier(
        n_estimators=8, num_leaves=8, verbose=-1, min_child_samples=5, n_jobs=1
    )
    model.fit(X, _labels(y, "multiclass"))
    ens = load_model(model)
    assert ens.model_kind.startswith("lightgbm:LGBMClassifier")
    expected = model.predict(X[:50], raw_score=True)
    np.testing.assert_allclose(naive.predict_margin(ens, X[:50]), expected, atol=1e-5)


@needs_lightgbm
def test_lightgbm_linear_tree_is_refused():
    X, y = _data()
    X = np.nan_to_num(X)
    booster = lgb.train(
        dict(objective="regression", linear_tree=True, verbose=-1, num_leaves=4, num_threads=1),
        lgb.Dataset(X, y),
        num_boost_round=2,
    )
    with pytest.raises(UnsupportedModelError, match="linear_tree"):
        load_model(booster)


# ---------------------------------------------------------------------------------------------
# scikit-learn
# ---------------------------------------------------------------------------------------------


def _sk_data() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    X, y = _data(seed=2, n=400)
    X = X[:, :4].copy()
    X[:, 2] = X[:, 2] * 3 + 1  # categories 1, 4, ..., 22 (not codes 0..k-1)
    Xt = X[:60].copy()
    Xt[:5, 1] = np.nan
    Xt[5:9, 2] = 5.0  # an unseen category
    Xt[9:12, 2] = np.nan
    return X, y, Xt


def _proba(m, X):
    return m.predict_proba(X)


def _decision(m, X):
    return m.decision_function(X)


def _predict(m, X):
    return m.predict(X)


SK_CASES = {
    "tree_reg": (lambda: sk_tree.DecisionTreeRegressor(max_depth=5), "reg", _predict, True),
    "tree_clf": (lambda: sk_tree.DecisionTreeClassifier(max_depth=5), "multiclass", _proba, True),
    "rf_reg": (
        lambda: sk_ensemble.RandomForestRegressor(8, max_depth=5, random_state=0),
        "reg",
        _predict,
        True,
    ),
    "rf_binary": (
        lambda: sk_ensemble.RandomForestClassifier(8, max_depth=5, random_state=0),
        "binary",
        _proba,
        True,
    ),
    "et_multiclass": (
        lambda: sk_ensemble.ExtraTreesClassifier(8, max_depth=5, random_state=0),
        "multiclass",
        _proba,
        True,
    ),
    "gb_reg": (
        lambda: sk_ensemble.GradientBoostingRegressor(n_estimators=8, random_state=0),
        "reg",
        _predict,
        False,
    ),
    "gb_binary": (
        lambda: sk_ensemble.GradientBoostingClassifier(n_estimators=8, random_state=0),
        "binary",
        _decision,
        False,
    ),
    "gb_multiclass_zero_init": (
        lambda: sk_ensemble.GradientBoostingClassifier(n_estimators=5, init="zero"),
        "multiclass",
        _decision,
        False,
    ),
    "gb_multiclass": (
        lambda: sk_ensemble.GradientBoostingClassifier(n_estimators=5),
        "multiclass",
        _decision,
        False,
    ),
    "hgb_reg": (
        lambda: sk_ensemble.HistGradientBoostingRegressor(max_iter=8),
        "reg",
        _predict,
        True,
    ),
    "hgb_reg_categorical": (
        lambda: sk_ensemble.HistGradientBoostingRegressor(max_iter=8, categorical_features=[2]),
        "reg",
        _predict,
        True,
    ),
    "hgb_multiclass_categorical": (
        lambda: sk_ensemble.HistGradientBoostingClassifier(max_iter=6, categorical_features=[2]),
        "multiclass",
        _decision,
        True,
    ),
}


def _fit_sk(case: str):
    make, task, output, nan_ok = SK_CASES[case]
    X, y, Xt = _sk_data()
    if not nan_ok:
        X, Xt = np.nan_to_num(X), np.nan_to_num(Xt)
    y = y if task == "reg" else _labels(y, task)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = make().fit(X, y)
    return model, Xt, output


@pytest.mark.parametrize("case", list(SK_CASES))
def test_sklearn_margin_matches_predictions(case):
    model, Xt, output = _fit_sk(case)
    ens = load_model(model)
    expected = np.asarray(output(model, Xt), dtype=np.float64).reshape(len(Xt), -1)
    assert ens.num_groups == expected.shape[1]
    if "categorical" in case:
        assert ens.is_categorical.any(), "the categorical feature should be split on"
    np.testing.assert_allclose(naive.predict_margin(ens, Xt), expected, rtol=0, atol=1e-5)


@pytest.mark.parametrize(
    "case", ["tree_reg", "rf_binary", "et_multiclass", "gb_binary", "hgb_reg", "gb_multiclass"]
)
def test_sklearn_shap_matches_shap_package(case, backend):
    shap = pytest.importorskip("shap")
    from distshap import TreeExplainer

    model, Xt, _ = _fit_sk(case)
    Xt = np.nan_to_num(Xt)  # shap's sklearn support predates NaN routing
    ours = to_host(TreeExplainer(model, layout="xgboost", backend=backend).shap_values(Xt))
    ours = ours.reshape(len(Xt), -1, Xt.shape[1] + 1)
    if case == "gb_multiclass":  # shap supports GradientBoostingClassifier for binary only
        ens = load_model(model)
        ref = naive.treeshap_recursive_rows(ens, Xt[:10])
        np.testing.assert_allclose(ours[:10], ref, atol=1e-5)
        return
    explainer = shap.TreeExplainer(model)
    ref = np.asarray(explainer.shap_values(Xt, check_additivity=False))
    if ref.ndim == 3:  # (n, F, G)
        ref = np.moveaxis(ref, 2, 1)
    ref = ref.reshape(len(Xt), -1, Xt.shape[1])
    np.testing.assert_allclose(ours[..., :-1], ref, rtol=0, atol=1e-5)
    bias = np.atleast_1d(explainer.expected_value)
    np.testing.assert_allclose(ours[0, :, -1], bias, rtol=0, atol=1e-5)


def test_sklearn_refuses_multi_output_classifiers():
    X, y, _ = _sk_data()
    model = sk_tree.DecisionTreeClassifier(max_depth=3).fit(np.nan_to_num(X), np.c_[y > 0, y < 1])
    with pytest.raises(UnsupportedModelError, match="multi-output classifiers"):
        load_model(model)


def test_sklearn_refuses_non_constant_init():
    from sklearn.linear_model import LinearRegression

    X, y, _ = _sk_data()
    model = sk_ensemble.GradientBoostingRegressor(n_estimators=3, init=LinearRegression())
    model.fit(np.nan_to_num(X), y)
    with pytest.raises(UnsupportedModelError, match="init"):
        load_model(model)


def test_sklearn_refuses_other_estimators():
    X, y, _ = _sk_data()
    model = sk_ensemble.IsolationForest(n_estimators=3).fit(np.nan_to_num(X))
    with pytest.raises(UnsupportedModelError, match="IsolationForest"):
        load_model(model)
    with pytest.raises(UnsupportedModelError, match="not fitted"):
        load_model(sk_ensemble.RandomForestRegressor())


def test_sklearn_string_categories_keep_the_training_labels():
    """Text categories stay the encoder's codes, the labels stored to code a frame by."""
    from distshap import TreeExplainer

    pd = pytest.importorskip("pandas")
    X, y, _ = _sk_data()
    df = pd.DataFrame(np.nan_to_num(X[:, [0, 1]]), columns=["a", "b"])
    df["c"] = pd.Categorical(np.where(X[:, 2] > 10, "hi", "lo"))
    yy = y + 3 * (X[:, 2] > 10)
    model = sk_ensemble.HistGradientBoostingRegressor(max_iter=3, categorical_features="from_dtype")
    model.fit(df, yy)
    ens = load_model(model)
    assert ens.extra["category_values"] == {2: ("hi", "lo")}
    ours = TreeExplainer(model, layout="xgboost").shap_values(df[:25])
    codes = df[:25].assign(c=(df["c"][:25] == "lo").astype(np.float64)).to_numpy()  # hi 0, lo 1
    ref = naive.treeshap_recursive_rows(ens, codes).reshape(ours.shape)
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-5 * max(1.0, np.abs(ref).max()))


@pytest.mark.parametrize("case", list(SK_CASES))
def test_sklearn_shap_matches_oracle(case, backend):
    """Every scikit-learn kind against the recursive TreeShap oracle, on every backend."""
    from distshap import TreeExplainer

    model, Xt, _ = _fit_sk(case)
    Xt = Xt[:25]
    ours = to_host(TreeExplainer(model, layout="xgboost", backend=backend).shap_values(Xt))
    ref = naive.treeshap_recursive_rows(load_model(model), Xt).reshape(ours.shape)
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-5 * max(1.0, np.abs(ref).max()))


@needs_lightgbm
def test_lightgbm_dataframe_categories_coded_by_training_categories():
    import pandas as pd

    from distshap import TreeExplainer

    rng = np.random.default_rng(3)
    frame = pd.DataFrame(
        {
            "x": rng.normal(size=400),
            "c": pd.Categorical(rng.choice(list("abcd"), 400), categories=list("abcd")),
        }
    )
    y = frame["x"] + frame["c"].cat.codes * 1.5
    model = lgb.LGBMRegressor(n_estimators=10, num_leaves=8, min_child_samples=5, verbose=-1)
    model.fit(frame, y)
    test = frame.assign(c=frame["c"].cat.reorder_categories(list("dcba")))
    phi = to_host(TreeExplainer(model, layout="xgboost", backend="cpu").shap_values(test))
    contrib = model.predict(test, pred_contrib=True)
    np.testing.assert_allclose(phi, contrib, rtol=0, atol=1e-4 * np.abs(contrib).max())


def test_hist_gradient_boosting_pandas_categories_enter_as_values(backend):
    """Categories 11/5/7/9 (dtype order unlike sorted order): the splits list category values,
    so the DataFrame's own codes must not be used."""
    import pandas as pd

    from distshap import TreeExplainer

    rng = np.random.default_rng(0)
    frame = pd.DataFrame(
        {
            "x": rng.normal(size=1500).astype(np.float32).astype(np.float64),
            "c": pd.Categorical(rng.choice([5, 7, 9, 11], 1500), categories=[11, 5, 7, 9]),
        }
    )
    y = frame["x"] + (frame["c"].astype(int) == 9) * 3.0 + (frame["c"].astype(int) == 5) * 1.0
    model = sk_ensemble.HistGradientBoostingRegressor(
        max_iter=15, categorical_features="from_dtype"
    ).fit(frame, y)
    phi = to_host(TreeExplainer(model, layout="xgboost", backend=backend).shap_values(frame))
    np.testing.assert_allclose(phi.sum(axis=1), model.predict(frame), rtol=0, atol=1e-5)
