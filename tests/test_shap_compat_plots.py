"""The drop-in audit: shap.TreeExplainer's constructor, layouts and plots across libraries.

Each test holds distshap.TreeExplainer to what shap.TreeExplainer (0.51) does with the same
call, on tiny models of every library: the default layout's outputs (shap's ``shap_values`` /
``shap_interaction_values`` shapes, values and ``expected_value``) and shap's legacy plots fed
with them (``layout="xgboost"`` only where XGBoost's layout is the point); shap's
constructor parameters (``feature_names``, the ignored ``approximate`` / ``link``);
``feature_perturbation="tree_path_dependent"`` with background data (trees weighted by the rows,
as shap weights them); ``catboost.Pool`` inputs.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from distshap import TreeExplainer
from distshap.explainer_covers import UNREACHED_COVER, node_counts

shap = pytest.importorskip("shap")
xgb = pytest.importorskip("xgboost")

NAMES = ["age", "bmi", "bp", "s1"]


def _data(n: int = 120, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, len(NAMES)))
    x = X.copy()
    X[rng.random(X.shape) < 0.05] = np.nan
    y = x[:, 0] + x[:, 1] * x[:, 2]
    return X, y, (y > 0).astype(int), (x[:, 0] > 0).astype(int) + (x[:, 1] > 0.3)


@pytest.fixture(scope="module")
def models() -> dict:
    """Tiny models of each library (NaNs for the libraries that take them)."""
    from sklearn.ensemble import HistGradientBoostingClassifier, RandomForestClassifier

    X, y, yb, y3 = _data()
    frame = pd.DataFrame(X, columns=NAMES)
    dense = pd.DataFrame(np.nan_to_num(X), columns=NAMES)
    small = {"max_depth": 3, "n_estimators": 3, "random_state": 0}
    out = {
        "xgb_regression": (xgb.XGBRegressor(**small, n_jobs=1).fit(frame, y), frame),
        "xgb_binary": (xgb.XGBClassifier(**small, n_jobs=1).fit(frame, yb), frame),
        "xgb_multiclass": (xgb.XGBClassifier(**small, n_jobs=1).fit(frame, y3), frame),
        "forest_binary": (RandomForestClassifier(**small).fit(dense, yb), dense),
        "hist_gb_binary": (
            HistGradientBoostingClassifier(max_depth=3, max_iter=3).fit(frame, yb),
            frame,
        ),
    }
    try:
        import lightgbm as lgb

        lgbm = lgb.LGBMClassifier(n_estimators=3, num_leaves=5, verbose=-1, n_jobs=1)
        out["lgbm_multiclass"] = (lgbm.fit(frame, y3), frame)
    except ImportError:
        pass
    try:
        import catboost as cb

        boost = cb.CatBoostClassifier(iterations=3, depth=2, verbose=0, thread_count=1,
                                      allow_writing_files=False)  # fmt: skip
        out["catboost_binary"] = (boost.fit(frame, yb), frame)
    except ImportError:
        pass
    return out


def _peer(model, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return shap.TreeExplainer(model, *args, **kwargs)


def _close(got, want, tol: float = 1e-5) -> None:
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    scale = max(1.0, float(np.max(np.abs(want))))
    np.testing.assert_allclose(got, want, rtol=0, atol=tol * scale)


# ------------------------------------------------------------------------------------------
# the default layout: shap_values and shap_interaction_values as shap returns them
# ------------------------------------------------------------------------------------------

KINDS = ["xgb_regression", "xgb_binary", "xgb_multiclass", "forest_binary", "hist_gb_binary",
         "lgbm_multiclass", "catboost_binary"]  # fmt: skip


@pytest.mark.parametrize("kind", KINDS)
def test_shap_layout_matches_shap(models, kind):
    if kind not in models:
        pytest.skip(f"the library of {kind} is not installed")
    model, frame = models[kind]
    X = frame.iloc[:12]
    peer = _peer(model)
    ours = TreeExplainer(model, backend="cpu")
    assert ours.layout == "shap"
    want = peer.shap_values(X)
    got = ours.shap_values(X)
    _close(got, want)  # (n, F) / (n, F, G): the forest's two probabilities, classes last
    assert got.dtype == np.float32
    np.testing.assert_array_equal(ours.shap_values(X.iloc[0]), got[0])  # one row: no row axis
    np.testing.assert_array_equal(ours.shap_values(X.to_numpy()[0]), got[0])
    inter = ours.shap_interaction_values(X.iloc[:4])
    _close(inter, peer.shap_interaction_values(X.iloc[:4]))  # (n, F, F) / (n, F, F, G)
    _close(inter.sum(axis=2), got[:4], 1e-4)
    # expected_value: a float for one output, (G,) for G (shap's: a float, (1,) or a list)
    assert np.shape(ours.expected_value) == np.shape(np.squeeze(peer.expected_value))
    _close(ours.expected_value, np.squeeze(peer.expected_value))
    # the same numbers as XGBoost's layout (layout="xgboost") and as explainer(X)
    xgb_layout = TreeExplainer(model, layout="xgboost", backend="cpu").shap_values(X)
    moved = xgb_layout[..., :-1] if xgb_layout.ndim == 2 else xgb_layout[..., :-1].swapaxes(1, 2)
    np.testing.assert_array_equal(got, moved)
    np.testing.assert_array_equal(got, ours(X).values)


def test_shap_layout_interventional_and_shap_call_signature(models):
    model, frame = models["xgb_multiclass"]
    X, bg = frame.iloc[:10], frame.iloc[60:100]
    ours = TreeExplainer(model, bg, layout="shap", backend="cpu")  # the default, spelled out
    # shap's positional order, from_call included (shap's own flag; ignored)
    got = ours.shap_values(X, None, None, False, True, True)
    _close(got, _peer(model, bg).shap_values(X))
    assert got.shape == (10, len(NAMES), 3)
    with pytest.raises(ValueError, match="layout='columns'"):
        TreeExplainer(model, layout="columns")


def test_legacy_plots_take_the_default_layout(models):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for kind in ("xgb_regression", "xgb_multiclass"):
        model, frame = models[kind]
        X = frame.iloc[:20]
        explainer = TreeExplainer(model, backend="cpu")
        sv = explainer.shap_values(X)
        ev = explainer.expected_value
        one = sv if sv.ndim == 2 else sv[:, :, 1]  # one class of a multiclass model
        base = ev if np.ndim(ev) == 0 else ev[1]
        shap.summary_plot(sv, X, show=False)
        shap.summary_plot(sv, X, plot_type="bar", show=False)
        shap.dependence_plot("bmi", one, X, show=False)
        shap.force_plot(base, one[0], X.iloc[0], matplotlib=True, show=False)
        shap.decision_plot(base, one, X, show=False)
        if sv.ndim == 2:
            inter = explainer.shap_interaction_values(X)
            shap.summary_plot(inter, X, show=False)
            shap.dependence_plot(("bmi", "bp"), inter, X, show=False)
        plt.close("all")
    # XGBoost's layout carries the bias column these plots do not take
    xgb_layout = TreeExplainer(models["xgb_regression"][0], layout="xgboost", backend="cpu")
    with pytest.raises((ValueError, AssertionError)):
        shap.summary_plot(xgb_layout.shap_values(X), X, show=False)
    plt.close("all")


# ------------------------------------------------------------------------------------------
# shap's constructor parameters
# ------------------------------------------------------------------------------------------


def test_constructor_takes_shap_parameters(models):
    model, frame = models["xgb_regression"]
    X = frame.to_numpy()[:5]
    names = ["a", "b", "c", "d"]
    want = _peer(model, None, "raw", "auto", names)(X)
    ours = TreeExplainer(model, None, "raw", "auto", names, backend="cpu")
    got = ours(X)
    assert got.feature_names == want.feature_names == names
    assert ours.feature_names == tuple(names)
    assert ours(frame.iloc[:5]).feature_names == NAMES  # a DataFrame's columns win, as in shap
    with pytest.warns(DeprecationWarning, match="approximate"):
        TreeExplainer(model, approximate=True, backend="cpu")
    with pytest.warns(UserWarning, match="link"):
        TreeExplainer(model, link=shap.links.logit, backend="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        TreeExplainer(model, link=shap.links.identity, linearize_link=True, backend="cpu")
        TreeExplainer(model, link="identity", backend="cpu")  # shap's string name of it
    background = ours._with_background(frame.iloc[:20])  # the CLI's route to a background
    assert background(X).feature_names == names, "the user's names survive a background"
    with pytest.raises(ValueError, match="3 names but the model has 4"):
        TreeExplainer(model, feature_names=names[:3])
    with pytest.raises(TypeError, match="keyword-only"):
        TreeExplainer(model, None, "raw", "auto", "cpu")


# ------------------------------------------------------------------------------------------
# tree_path_dependent with data: trees weighted by the background rows
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["xgb_regression", "xgb_multiclass", "forest_binary",
                                  "hist_gb_binary"])  # fmt: skip
@pytest.mark.parametrize("n_background", [50, 4])  # 4 rows miss leaves: shap's 1e-6 covers
def test_path_dependent_with_data_matches_shap(models, kind, n_background):
    model, frame = models[kind]
    X, bg = frame.iloc[:10], frame.iloc[60 : 60 + n_background]
    peer = _peer(model, bg, feature_perturbation="tree_path_dependent")
    want = peer.shap_values(X)
    ours = TreeExplainer(model, bg, feature_perturbation="tree_path_dependent", layout="shap",
                         backend="cpu")  # fmt: skip
    assert ours.feature_perturbation == "tree_path_dependent" and ours.background is None
    _close(ours.shap_values(X), want)
    if kind == "xgb_multiclass":  # shap's expected_value misses the class base scores here
        _close(ours.expected_value, model.predict(bg, output_margin=True).mean(axis=0))
    else:
        _close(ours.expected_value, np.squeeze(peer.expected_value))
    if n_background == 4:
        assert np.any(ours.ensemble.cover == UNREACHED_COVER)
    inter = ours.shap_interaction_values(X.iloc[:3])
    _close(inter.sum(axis=2), ours.shap_values(X.iloc[:3]), 1e-4)
    if not kind.startswith("xgb"):  # shap's XGBoost interactions ignore the data's weights
        _close(inter, peer.shap_interaction_values(X.iloc[:3]))
    # not the training covers' values
    plain = TreeExplainer(model, layout="shap", backend="cpu").shap_values(X)
    assert not np.allclose(plain, want, atol=1e-3)


def test_node_counts_follow_the_model():
    X, y, _, _ = _data(80, seed=3)
    booster = xgb.train({"max_depth": 3, "nthread": 1}, xgb.DMatrix(X, y), 2)
    explainer = TreeExplainer(booster, backend="cpu")
    ens = explainer.ensemble
    rows = np.asarray(X[:30], dtype=np.float32)
    counts = node_counts(explainer.packed.margin, ens.left, ens.right, rows)
    roots = ens.tree_offsets[:-1]
    np.testing.assert_array_equal(counts[roots], 30)
    inner = np.flatnonzero(ens.left >= 0)
    np.testing.assert_array_equal(counts[inner], counts[ens.left[inner]] + counts[ens.right[inner]])
    # each row's leaf, as XGBoost finds it (node ids are local to each tree)
    leaves = booster.predict(xgb.DMatrix(rows), pred_leaf=True).astype(np.int64)
    want = np.zeros_like(counts)
    np.add.at(want, (roots[None, :] + leaves).ravel(), 1.0)
    np.testing.assert_array_equal(counts[ens.left < 0], want[ens.left < 0])


# ------------------------------------------------------------------------------------------
# catboost.Pool, which shap takes for CatBoost models
# ------------------------------------------------------------------------------------------


def test_catboost_pool_input():
    cb = pytest.importorskip("catboost")
    X, y, yb, _ = _data(100, seed=1)
    frame = pd.DataFrame(X, columns=NAMES)
    model = cb.CatBoostClassifier(iterations=3, depth=2, verbose=0, thread_count=1,
                                  allow_writing_files=False).fit(frame, yb)  # fmt: skip
    pool = cb.Pool(frame.iloc[:8], label=yb[:8])
    ours = TreeExplainer(model, layout="shap", backend="cpu")
    got = ours.shap_values(pool)
    _close(got, _peer(model).shap_values(pool))
    np.testing.assert_array_equal(got, ours.shap_values(frame.iloc[:8].astype(np.float32)))
    assert ours(pool).feature_names == NAMES
    # log loss: the Pool's labels, as a DMatrix's
    loss = TreeExplainer(model, frame.iloc[50:80], "log_loss", backend="cpu")
    np.testing.assert_array_equal(loss.shap_values(pool), loss.shap_values(frame.iloc[:8], yb[:8]))
    coded = frame.iloc[:8].assign(c=["x", "y"] * 4)
    with pytest.raises(TypeError, match="catboost.Pool with categorical"):
        ours.shap_values(cb.Pool(coded, cat_features=["c"]))
