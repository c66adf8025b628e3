"""distshap.TreeExplainer as a drop-in for shap.TreeExplainer.

shap's own TreeExplainer is the peer: the same calls (shap's positional order) on small XGBoost
models must give shap's values (relative 1e-5), shap's Explanation fields and layouts, and
plots that shap's plotting functions accept. Boosting-round selection is checked against
XGBoost's ``pred_contribs(iteration_range=...)`` and model slicing; inputs users pass to shap
(1-D rows, Series, DMatrix, scipy.sparse, maskers) and the errors where shap has none either.
"""

from __future__ import annotations

import os
import warnings

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import xgboost as xgb

from distshap import TreeExplainer
from distshap.layouts import DaskExplanation

shap = pytest.importorskip("shap")

NAMES = ["age", "bmi", "bp", "s1", "s2"]
N_EXPLAIN = 25


def _data(seed: int = 0, n: int = 160) -> np.ndarray:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, len(NAMES))).astype(np.float32)
    X[rng.random(X.shape) < 0.05] = np.nan
    return X


@pytest.fixture(scope="module")
def setup() -> dict:
    """Tiny models: regression (trained on a named frame), binary and 3-class classifiers."""
    X = _data()
    x = np.nan_to_num(X)
    frame = pd.DataFrame(X, columns=NAMES)
    small = {"max_depth": 3, "learning_rate": 0.5, "n_jobs": 1, "random_state": 0}
    reg = xgb.XGBRegressor(n_estimators=6, **small).fit(frame, x[:, 0] + x[:, 1] * x[:, 2])
    y = (x[:, 0] + x[:, 1] * x[:, 2] > 0).astype(int)
    binary = xgb.XGBClassifier(n_estimators=6, **small).fit(X, y)
    y3 = (x[:, 0] > 0).astype(int) + (x[:, 1] > 0.3)
    multi = xgb.XGBClassifier(n_estimators=4, **small).fit(X, y3)
    return {
        "X": X,
        "frame": frame,
        "y": y,
        "models": {"regression": reg, "binary": binary, "multiclass": multi},
        "bg": X[100:140],
        "rows": X[:N_EXPLAIN],
    }


def rel_close(got, want, tol: float = 1e-5) -> None:
    """``|got - want| <= tol * max|want|`` (relative to the largest value)."""
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    scale = max(1.0, float(np.max(np.abs(want)))) if want.size else 1.0
    np.testing.assert_allclose(got, want, rtol=0, atol=tol * scale)


def _peer_expected_value(peer, model, kind: str, data):
    """shap's expected_value; for interventional multiclass XGBoost the mean margin of the
    background (shap 0.51 offsets its classes by the wrong base score there: its own values
    plus its expected_value miss XGBoost's margin, while its values equal ours)."""
    if kind == "multiclass" and data is not None:
        return model.predict(data, output_margin=True).mean(axis=0)
    return np.squeeze(np.asarray(peer.expected_value, dtype=np.float64))


def _rows(setup: dict, kind: str):
    """The rows to explain: a named frame for the regression model, an array otherwise."""
    return setup["frame"].iloc[:N_EXPLAIN] if kind == "regression" else setup["rows"]


def _background(setup: dict, kind: str):
    bg = setup["bg"]
    return pd.DataFrame(bg, columns=NAMES) if kind == "regression" else bg


# ------------------------------------------------------------------------------------------
# the constructor
# ------------------------------------------------------------------------------------------


def test_positional_shap_call(setup):
    model, bg = setup["models"]["binary"], setup["bg"]
    assert TreeExplainer(model, bg, backend="cpu").feature_perturbation == "interventional"
    assert TreeExplainer(model, backend="cpu").feature_perturbation == "tree_path_dependent"
    explainer = TreeExplainer(model, bg, "probability", "interventional", backend="cpu")
    assert explainer.model_output == "probability"
    with pytest.raises(TypeError):  # distshap's own options are keyword-only
        TreeExplainer(model, None, "raw", "auto", "cpu")


COMBOS = [
    ("regression", "tree_path_dependent", "raw"),
    ("binary", "tree_path_dependent", "raw"),
    ("multiclass", "tree_path_dependent", "raw"),
    ("regression", "interventional", "raw"),
    ("binary", "interventional", "raw"),
    ("multiclass", "interventional", "raw"),
    ("binary", "interventional", "probability"),
    ("binary", "interventional", "log_loss"),
]


@pytest.mark.parametrize(("kind", "perturbation", "output"), COMBOS)
def test_values_match_shap(setup, kind, perturbation, output):
    model = setup["models"][kind]
    data = None if perturbation == "tree_path_dependent" else _background(setup, kind)
    X = _rows(setup, kind)
    y = setup["y"][:N_EXPLAIN] if output == "log_loss" else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        peer = shap.TreeExplainer(
            model, data, model_output=output, feature_perturbation=perturbation
        )
        want = peer.shap_values(X, y)
    ours = TreeExplainer(model, data, output, perturbation, backend="cpu")
    ex = ours(X, y)
    rel_close(ex.values, want)
    # shap_values: shap's layout by default (explainer(X)'s bits); XGBoost's (bias last, groups
    # before features) with layout="xgboost"
    np.testing.assert_array_equal(ours.shap_values(X, y), ex.values)
    xgb_layout = TreeExplainer(model, data, output, perturbation, layout="xgboost", backend="cpu")
    phi = xgb_layout.shap_values(X, y)
    moved = phi[..., :-1] if phi.ndim == 2 else phi[..., :-1].transpose(0, 2, 1)
    np.testing.assert_array_equal(moved, ex.values)
    if output == "log_loss":  # shap's expected_value is a function of the label
        for label in (0, 1):
            rel_close(ours.expected_value(label), peer.expected_value(label))
        rel_close(ex.base_values, [ours.expected_value(v) for v in y])
    else:
        rel_close(ours.expected_value, _peer_expected_value(peer, model, kind, data))
        rel_close(ex.base_values, np.broadcast_to(ours.expected_value, ex.base_values.shape))
    # each row's values and bias sum to the model's output in model_output's space
    total = ex.values.sum(axis=1) + ex.base_values
    margin = model.predict(X, output_margin=True)
    if output == "raw":
        rel_close(total, margin)
    elif output == "probability":
        rel_close(total, model.predict_proba(X)[:, 1])
    else:
        rel_close(total, np.logaddexp(0, margin) - y * margin)


@pytest.mark.parametrize(("kind", "perturbation"), [
    ("regression", "tree_path_dependent"),
    ("multiclass", "tree_path_dependent"),
    ("regression", "interventional"),
    ("multiclass", "interventional"),
])  # fmt: skip
def test_explanation_fields_match_shap(setup, kind, perturbation):
    model = setup["models"][kind]
    data = None if perturbation == "tree_path_dependent" else _background(setup, kind)
    X = _rows(setup, kind)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = shap.TreeExplainer(model, data, feature_perturbation=perturbation)(X)
    got = TreeExplainer(model, data, feature_perturbation=perturbation, backend="cpu")(X)
    assert isinstance(got, shap.Explanation)
    rel_close(got.values, want.values)
    if kind == "multiclass" and data is not None:  # shap's offsets: _peer_expected_value
        want_base = np.broadcast_to(model.predict(data, output_margin=True).mean(axis=0),
                                    want.base_values.shape)  # fmt: skip
    else:
        want_base = want.base_values
    rel_close(got.base_values, want_base)
    np.testing.assert_array_equal(got.data, want.data)
    assert got.feature_names == want.feature_names
    assert got.output_names == want.output_names
    assert got.values.shape == ((N_EXPLAIN, 5, 3) if kind == "multiclass" else (N_EXPLAIN, 5))


@pytest.mark.parametrize("kind", ["binary", "multiclass"])
def test_interaction_explanation_matches_shap(setup, kind):
    model, X = setup["models"][kind], setup["rows"]
    want = shap.TreeExplainer(model)(X, interactions=True)
    got = TreeExplainer(model, backend="cpu")(X, interactions=True)
    rel_close(got.values, want.values)
    rel_close(got.base_values, want.base_values)
    shape = (N_EXPLAIN, 5, 5) + ((3,) if kind == "multiclass" else ())
    assert got.values.shape == shape
    # shap_interaction_values: shap's layout by default, XGBoost's with layout="xgboost"
    np.testing.assert_array_equal(TreeExplainer(model, backend="cpu").shap_interaction_values(X),
                                  got.values)  # fmt: skip
    ours = TreeExplainer(model, layout="xgboost", backend="cpu").shap_interaction_values(X)
    assert ours.shape == ((N_EXPLAIN, 3, 6, 6) if kind == "multiclass" else (N_EXPLAIN, 6, 6))


def test_interventional_interactions(setup):
    # shap has none (its C++ prints a warning and returns zeros); ours sum to the SHAP values
    model, X, bg = setup["models"]["multiclass"], setup["rows"], setup["bg"]
    explainer = TreeExplainer(model, bg, backend="cpu")
    inter = explainer(X, interactions=True)
    values = explainer(X)
    assert inter.values.shape == (N_EXPLAIN, 5, 5, 3)
    rel_close(inter.values.sum(axis=2), values.values, 1e-4)
    rel_close(inter.base_values, values.base_values)
    np.testing.assert_allclose(inter.values, inter.values.swapaxes(1, 2), atol=1e-6)


@pytest.mark.parametrize("output", ["raw", "probability", "log_loss"])
def test_lightgbm_and_forest_match_shap(output):
    lgb = pytest.importorskip("lightgbm")
    from sklearn.ensemble import RandomForestClassifier

    X = np.nan_to_num(_data(3, 200)).astype(np.float64)
    y = (X[:, 0] + X[:, 1] * X[:, 2] > 0).astype(int)
    bg, rows, labels = X[150:190], X[:20], y[:20]
    models = [lgb.LGBMClassifier(n_estimators=5, num_leaves=6, verbose=-1).fit(X, y)]
    if output != "log_loss":  # a forest's outputs are probabilities: no logistic loss
        models.append(RandomForestClassifier(n_estimators=3, max_depth=3, random_state=0))
        models[-1].fit(X, y)
    for model in models:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            peer = shap.TreeExplainer(model, bg, model_output=output)
            want = peer.shap_values(rows, labels)
        ours = TreeExplainer(model, bg, model_output=output, backend="cpu")
        got = ours(rows, labels)
        rel_close(got.values, want)  # the forest: (n, F, 2), as shap's
        np.testing.assert_array_equal(ours.shap_values(rows, labels), got.values)  # the same call
        if output != "log_loss":
            rel_close(ours.expected_value, np.squeeze(peer.expected_value))


def test_shap_plots_take_the_explanation(setup):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    model, X = setup["models"]["regression"], _rows(setup, "regression")
    named = pd.DataFrame(setup["rows"], columns=NAMES)  # shap's scatter needs feature names
    for explainer in (
        TreeExplainer(model, backend="cpu"),
        TreeExplainer(setup["models"]["binary"], setup["bg"], model_output="probability",
                      backend="cpu"),
    ):  # fmt: skip
        ex = explainer(X if explainer.model_output == "raw" else named)
        shap.plots.beeswarm(ex, show=False)
        shap.plots.bar(ex, show=False)
        shap.plots.waterfall(ex[0], show=False)
        shap.plots.scatter(ex[:, 1], color=ex, show=False)
        plt.close("all")
    multi = TreeExplainer(setup["models"]["multiclass"], backend="cpu")(setup["rows"])
    shap.plots.bar(multi[:, :, 1], show=False)
    shap.plots.waterfall(multi[0, :, 2], show=False)
    plt.close("all")


# ------------------------------------------------------------------------------------------
# boosting rounds
# ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def forest():
    """A boosted random forest: 3 classes x 2 parallel trees per round, 4 rounds."""
    X = _data(1, 120)
    y = (np.nan_to_num(X[:, 0]) > 0).astype(int) + (np.nan_to_num(X[:, 1]) > 0)
    params = {"objective": "multi:softprob", "num_class": 3, "num_parallel_tree": 2,
              "subsample": 0.8, "max_depth": 3, "seed": 0, "nthread": 1}  # fmt: skip
    return xgb.train(params, xgb.DMatrix(X, y), num_boost_round=4), X[:20]


@pytest.mark.parametrize("rounds", [(0, 1), (0, 3), (1, 3), (2, 4), (0, 0)])
def test_iteration_range_matches_xgboost(forest, rounds):
    booster, X = forest
    explainer = TreeExplainer(booster, layout="xgboost", backend="cpu")
    got = explainer.shap_values(X, iteration_range=rounds)
    if rounds[0] == 0:  # XGBoost's contributions take ranges from 0 only
        want = booster.predict(xgb.DMatrix(X), pred_contribs=True, iteration_range=rounds)
    else:
        want = booster[rounds[0] : rounds[1]].predict(xgb.DMatrix(X), pred_contribs=True)
    rel_close(got, want)
    inter = explainer.shap_interaction_values(X[:5], iteration_range=rounds)
    rel_close(inter.sum(axis=-1), got[:5], 1e-4)


def test_tree_limit_counts_trees_as_shap(forest, setup):
    booster, X = forest
    explainer = TreeExplainer(booster, backend="cpu")
    per_round = 3 * 2  # classes x parallel trees
    for rounds in (1, 3):
        got = explainer(X, tree_limit=rounds * per_round)
        want = shap.TreeExplainer(booster).shap_values(X, tree_limit=rounds * per_round)
        rel_close(got.values, want)
        np.testing.assert_array_equal(
            explainer.shap_values(X, tree_limit=rounds * per_round),
            explainer.shap_values(X, iteration_range=(0, rounds)),
        )
    assert set(explainer._models) == {None, (0, 1), (0, 3)}  # one packed model per range
    np.testing.assert_array_equal(explainer.shap_values(X, tree_limit=-1), explainer.shap_values(X))


def test_iteration_range_interventional(setup):
    model, X, bg = setup["models"]["binary"], setup["rows"], setup["bg"]
    booster = model.get_booster()
    explainer = TreeExplainer(model, bg, model_output="probability", backend="cpu")
    ex = explainer(X, iteration_range=(0, 3))
    rel_close(ex.values.sum(axis=1) + ex.base_values,
              booster.predict(xgb.DMatrix(X), iteration_range=(0, 3)))  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = shap.TreeExplainer(booster[0:3], bg, model_output="probability").shap_values(X)
    rel_close(ex.values, want)


def test_iteration_errors(setup, forest):
    booster, X = forest
    explainer = TreeExplainer(booster, backend="cpu")
    with pytest.raises(ValueError, match="inside a boosting round of 6"):
        explainer.shap_values(X, tree_limit=4)
    with pytest.raises(ValueError, match="outside the model's 24 trees"):
        explainer.shap_values(X, tree_limit=30)
    with pytest.raises(ValueError, match="outside the model's 4 boosting rounds"):
        explainer.shap_values(X, iteration_range=(1, 5))
    with pytest.raises(ValueError, match="outside the model's 4 boosting rounds"):
        explainer.shap_values(X, iteration_range=(3, 2))
    with pytest.raises(TypeError, match="pair"):
        explainer.shap_values(X, iteration_range=3)
    with pytest.raises(ValueError, match="pass one"):
        explainer.shap_values(X, tree_limit=6, iteration_range=(0, 1))
    from sklearn.ensemble import RandomForestRegressor

    rf = RandomForestRegressor(n_estimators=3, max_depth=2, random_state=0)
    rf.fit(np.nan_to_num(setup["X"]), np.nan_to_num(setup["X"][:, 0]))
    with pytest.raises(ValueError, match="records no boosting iterations"):
        TreeExplainer(rf, backend="cpu").shap_values(np.nan_to_num(X[:, :5]), tree_limit=1)


def test_iteration_range_lightgbm():
    lgb = pytest.importorskip("lightgbm")
    X = np.nan_to_num(_data(2, 200))
    y = (X[:, 0] > 0).astype(int) + (X[:, 1] > 0)
    model = lgb.LGBMClassifier(n_estimators=5, num_leaves=6, verbose=-1, random_state=0)
    model.fit(X, y)
    explainer = TreeExplainer(model, layout="xgboost", backend="cpu")
    got = explainer.shap_values(X[:20], iteration_range=(0, 2))
    want = model.booster_.predict(X[:20], num_iteration=2, pred_contrib=True)
    rel_close(got.reshape(20, -1), want)
    # shap hands tree_limit to LightGBM's num_iteration: rounds, not trees (3 classes here)
    limited = explainer.shap_values(X[:20], tree_limit=2)
    np.testing.assert_array_equal(limited, got)
    with pytest.raises(ValueError, match="counts boosting rounds"):
        TreeExplainer(model, backend="cpu").shap_values(X[:20], tree_limit=6)


# ------------------------------------------------------------------------------------------
# inputs
# ------------------------------------------------------------------------------------------


def test_one_row_and_series(setup):
    model, frame = setup["models"]["regression"], setup["frame"]
    explainer = TreeExplainer(model, backend="cpu")
    whole = explainer(frame.iloc[:3])
    row = frame.iloc[1]
    np.testing.assert_array_equal(
        explainer.shap_values(row), explainer.shap_values(frame.iloc[:3])[1]
    )
    ex = explainer(row)
    assert ex.values.shape == (5,) and np.ndim(ex.base_values) == 0
    np.testing.assert_array_equal(ex.values, whole.values[1])
    assert ex.feature_names == NAMES
    shuffled = row[NAMES[::-1]]  # a Series is matched by its index, as a frame by its columns
    np.testing.assert_array_equal(explainer.shap_values(shuffled), explainer.shap_values(row))
    flat = explainer(frame.to_numpy()[1])
    np.testing.assert_array_equal(flat.values, whole.values[1])
    multi = TreeExplainer(setup["models"]["multiclass"], backend="cpu")
    assert multi.shap_values(setup["rows"][0]).shape == (5, 3)  # shap's layout, as explainer(x)
    assert multi(setup["rows"][0]).values.shape == (5, 3)
    assert multi.shap_interaction_values(setup["rows"][0]).shape == (5, 5, 3)
    xgb_layout = TreeExplainer(setup["models"]["multiclass"], layout="xgboost", backend="cpu")
    assert xgb_layout.shap_values(setup["rows"][0]).shape == (3, 6)
    assert xgb_layout.shap_interaction_values(setup["rows"][0]).shape == (3, 6, 6)


def test_dmatrix_input(setup):
    model, frame = setup["models"]["regression"], setup["frame"].iloc[:N_EXPLAIN]
    explainer = TreeExplainer(model, layout="xgboost", backend="cpu")
    want = explainer.shap_values(frame)
    np.testing.assert_array_equal(explainer.shap_values(xgb.DMatrix(frame)), want)
    # the model's columns by name, as XGBoost matches them
    reordered = xgb.DMatrix(frame[NAMES[::-1]])
    np.testing.assert_array_equal(explainer.shap_values(reordered), want)
    rel_close(want, model.get_booster().predict(xgb.DMatrix(frame), pred_contribs=True))
    # log_loss takes the DMatrix's labels when y is None
    binary, rows, y = setup["models"]["binary"], setup["rows"], setup["y"][:N_EXPLAIN]
    loss = TreeExplainer(binary, setup["bg"], model_output="log_loss", backend="cpu")
    np.testing.assert_array_equal(
        loss.shap_values(xgb.DMatrix(rows, label=y)), loss.shap_values(rows, y)
    )
    with pytest.raises(TypeError, match="QuantileDMatrix"):
        explainer.shap_values(xgb.QuantileDMatrix(frame))


def test_categorical_dmatrix():
    from xgb_models import build_categorical

    booster, frame = build_categorical()
    explainer = TreeExplainer(booster, layout="xgboost", backend="cpu")
    dm = xgb.DMatrix(frame.iloc[:30], enable_categorical=True)
    np.testing.assert_array_equal(explainer.shap_values(dm), explainer.shap_values(frame.iloc[:30]))
    rel_close(explainer.shap_values(dm), booster.predict(dm, pred_contribs=True))


def test_sparse_unstored_is_missing_for_xgboost(setup):
    model, rows = setup["models"]["binary"], setup["rows"].copy()
    rows[np.abs(np.nan_to_num(rows)) < 0.5] = 0.0
    dense = np.where(rows == 0.0, np.nan, rows)  # XGBoost reads unstored entries as missing
    csr = sp.csr_matrix(np.nan_to_num(rows))
    explainer = TreeExplainer(model, layout="xgboost", backend="cpu")
    np.testing.assert_array_equal(explainer.shap_values(csr), explainer.shap_values(dense))
    want = model.get_booster().predict(xgb.DMatrix(csr), pred_contribs=True)
    rel_close(explainer.shap_values(csr), want)
    assert not np.allclose(explainer.shap_values(csr), explainer.shap_values(np.nan_to_num(rows)))


def test_maskers_as_background(setup):
    model, X = setup["models"]["binary"], setup["rows"]
    big = setup["X"][20:160]  # 140 rows: shap samples 100 of them
    masker = shap.maskers.Independent(big, max_samples=100)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = shap.TreeExplainer(model, masker).shap_values(X)
        sampled = shap.TreeExplainer(model, big).shap_values(X)
    rel_close(TreeExplainer(model, masker, backend="cpu")(X).values, want)
    rel_close(sampled, want)  # shap's own sample is the masker's
    every_row = TreeExplainer(model, big, backend="cpu")  # distshap keeps every row
    rel_close(every_row.expected_value, model.predict(big, output_margin=True).mean())
    summary = shap.kmeans(np.nan_to_num(big), 5)
    with pytest.warns(UserWarning, match="ignores the weights"):
        TreeExplainer(model, summary, backend="cpu")
    with pytest.raises(TypeError, match="Partition"):
        TreeExplainer(model, shap.maskers.Partition(np.nan_to_num(big)), backend="cpu")


# ------------------------------------------------------------------------------------------
# errors where shap has none either (or none that says what to do)
# ------------------------------------------------------------------------------------------


def test_errors(setup):
    reg, binary, multi = (setup["models"][k] for k in ("regression", "binary", "multiclass"))
    bg, X = setup["bg"], setup["rows"]
    with pytest.raises(ValueError, match="feature_perturbation='causal'"):
        TreeExplainer(binary, bg, feature_perturbation="causal")
    with pytest.raises(ValueError, match="'probability'"):
        TreeExplainer(binary, bg, model_output="predict_proba")
    with pytest.raises(ValueError, match="needs feature_perturbation='interventional'"):
        TreeExplainer(binary, model_output="probability")
    with pytest.raises(ValueError, match="pass them as data"):
        TreeExplainer(binary, feature_perturbation="interventional")
    with pytest.raises(ValueError, match="needs feature_perturbation='interventional'"):
        TreeExplainer(binary, bg, "probability", "tree_path_dependent")  # as shap refuses it
    with pytest.raises(ValueError, match="binary logistic"):
        TreeExplainer(reg, pd.DataFrame(bg, columns=NAMES), model_output="probability")
    with pytest.raises(ValueError, match="binary logistic"):
        TreeExplainer(multi, bg, model_output="log_loss")
    loss = TreeExplainer(binary, bg, model_output="log_loss", backend="cpu")
    with pytest.raises(ValueError, match="needs its label"):
        loss.shap_values(X)
    with pytest.raises(ValueError, match="one label per row"):
        loss.shap_values(X, setup["y"][:3])
    prob = TreeExplainer(binary, bg, model_output="probability", backend="cpu")
    with pytest.raises(ValueError, match="interaction values explain the margin"):
        prob.shap_interaction_values(X)
    with pytest.raises(ValueError, match="approximate"):
        prob.shap_values(X, approximate=True)
    da = pytest.importorskip("dask.array")
    with pytest.raises(TypeError, match="compute"):
        TreeExplainer(binary, da.from_array(bg), backend="cpu")


# ------------------------------------------------------------------------------------------
# Dask
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("output", ["raw", "log_loss"])
def test_dask_gives_a_lazy_explanation(setup, scheduler, output):
    da = pytest.importorskip("dask.array")
    from distributed import Client

    model, X, bg, y = setup["models"]["binary"], setup["rows"], setup["bg"], setup["y"]
    explainer = TreeExplainer(model, bg, model_output=output, backend="cpu")
    labels = y[:N_EXPLAIN] if output == "log_loss" else None
    want = explainer(X, labels)
    with Client(scheduler) as client:
        explainer.client = client
        dy = None if labels is None else da.from_array(labels, chunks=10)
        lazy = explainer(da.from_array(X, chunks=(10, 5)), dy)
        assert isinstance(lazy, DaskExplanation) and isinstance(lazy.values, da.Array)
        assert lazy.shape == (N_EXPLAIN, 5)
        got = lazy.compute()
    assert isinstance(got, shap.Explanation)
    np.testing.assert_array_equal(got.values, want.values)
    np.testing.assert_array_equal(got.base_values, want.base_values)
    np.testing.assert_array_equal(got.data, want.data)


# ------------------------------------------------------------------------------------------
# the command line: distshap explain --background FILE [--model-output ...] [--labels COLUMN]
# ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cli_files(setup, tmp_path_factory) -> dict:
    """The binary model saved, a Parquet of its rows with a label column, backgrounds."""
    d = tmp_path_factory.mktemp("dropin_cli")
    model = setup["models"]["binary"]
    out = {"dir": d, "model": str(d / "binary.json")}
    model.save_model(out["model"])
    frame = pd.DataFrame(setup["X"][:60], columns=[f"f{j}" for j in range(5)])
    frame.insert(2, "label", setup["y"][:60].astype(np.float64))
    out["data"] = str(d / "rows.parquet")
    frame.to_parquet(out["data"])
    out["csv"] = str(d / "rows.csv")
    frame.to_csv(out["csv"], index=False)
    out["bg_parquet"] = str(d / "bg.parquet")
    frame.iloc[40:].to_parquet(out["bg_parquet"])  # holds the label column too: left out
    out["bg_npy"] = str(d / "bg.npy")
    np.save(out["bg_npy"], setup["X"][40:60])
    out["X"], out["y"], out["bg"] = setup["X"][:60], setup["y"][:60], setup["X"][40:60]
    return out


def _explain(cli_files: dict, name: str, *args: str) -> str:
    from distshap.cli import main

    out = str(cli_files["dir"] / name)
    code = main(["explain", cli_files["model"], cli_files["data"], "-o", out, "--no-progress",
                 "--overwrite", *args])  # fmt: skip
    assert code == 0
    return out


def test_cli_background_probability(cli_files):
    out = _explain(cli_files, "prob.npy", "--background", cli_files["bg_parquet"],
                   "--model-output", "probability", "--drop", "label")  # fmt: skip
    want = TreeExplainer(cli_files["model"], cli_files["bg"], model_output="probability",
                         layout="xgboost", backend="cpu").shap_values(cli_files["X"])  # fmt: skip
    np.testing.assert_array_equal(np.load(out), want)
    raw = _explain(cli_files, "raw.npy", "--background", cli_files["bg_npy"], "--drop", "label")
    want = TreeExplainer(cli_files["model"], cli_files["bg"], layout="xgboost", backend="cpu")
    np.testing.assert_array_equal(np.load(raw), want.shap_values(cli_files["X"]))


def test_cli_log_loss_labels_column(cli_files, scheduler):
    explainer = TreeExplainer(cli_files["model"], cli_files["bg"], model_output="log_loss",
                              layout="xgboost", backend="cpu")  # fmt: skip
    want = explainer.shap_values(cli_files["X"], cli_files["y"])
    args = ["--background", cli_files["bg_parquet"], "--model-output", "log_loss",
            "--labels", "label"]  # fmt: skip
    local = _explain(cli_files, "loss.parquet", *args, "--local")
    got = pd.read_parquet(local)
    assert list(got.columns) == [f"f{j}" for j in range(5)] + ["bias"]
    np.testing.assert_array_equal(got.to_numpy(), want)
    zarr = pytest.importorskip("zarr")
    on_cluster = _explain(cli_files, "loss.zarr", *args, "--scheduler", scheduler)
    stored = zarr.open_array(on_cluster, mode="r")
    np.testing.assert_array_equal(stored[:], want)
    assert stored.attrs["expected_value"] is None  # the bias depends on each row's label
    assert stored.attrs["space"] == "log loss (interventional)"


@pytest.mark.parametrize(("args", "needle"), [
    (["--model-output", "probability"], "give --background FILE"),
    (["--background", "BG", "--model-output", "log_loss"], "--labels COLUMN"),
    (["--background", "BG", "--labels", "label"], "log_loss only"),
    (["--background", "BG", "--model-output", "log_loss", "--labels", "nope"], "'nope'"),
    (["--background", "BG", "--model-output", "probability", "--interactions"],
     "--interactions explain the margin"),
])  # fmt: skip
def test_cli_output_option_errors(cli_files, capsys, args, needle):
    from distshap.cli import main

    args = [cli_files["bg_parquet"] if a == "BG" else a for a in args]
    out = str(cli_files["dir"] / ("never.npy" if "--interactions" in args else "never.parquet"))
    code = main(["explain", cli_files["model"], cli_files["data"], "-o", out, *args])
    assert code == 2
    assert needle in capsys.readouterr().err
    assert not os.path.exists(out)


def test_cli_labels_need_named_columns(cli_files, capsys):
    from distshap.cli import main

    npy = str(cli_files["dir"] / "rows.npy")
    np.save(npy, cli_files["X"])
    args = ["--background", cli_files["bg_npy"], "--model-output", "log_loss", "--labels", "y"]
    assert main(["explain", cli_files["model"], npy, "-o", npy + ".out.npy", *args]) == 2
    assert "needs named columns" in capsys.readouterr().err


def test_progress_batches_carry_the_labels(setup, monkeypatch):
    import distshap.explainer as explainer_module

    model, X, y = setup["models"]["binary"], setup["X"], setup["y"]
    explainer = TreeExplainer(model, setup["bg"], model_output="log_loss", backend="cpu")
    whole = explainer.shap_values(X, y)
    monkeypatch.setattr(explainer_module, "PROGRESS_BATCH_ROWS", 32)
    np.testing.assert_array_equal(explainer.shap_values(X, y, progress=True), whole)


def test_dask_shap_layout(setup, scheduler):
    da = pytest.importorskip("dask.array")
    from distributed import Client

    model, X = setup["models"]["multiclass"], setup["rows"]
    explainer = TreeExplainer(model, backend="cpu")  # shap's layout by default, Dask too
    with Client(scheduler) as client:
        explainer.client = client
        lazy = explainer.shap_values(da.from_array(X, chunks=(10, 5)))
        assert isinstance(lazy, da.Array) and lazy.shape == (N_EXPLAIN, 5, 3)
        got = lazy.compute()
        inter = explainer.shap_interaction_values(da.from_array(X[:6], chunks=(3, 5)))
        assert isinstance(inter, da.Array) and inter.shape == (6, 5, 5, 3)
        inter = inter.compute()
    np.testing.assert_array_equal(got, explainer.shap_values(X))
    np.testing.assert_array_equal(inter, explainer.shap_interaction_values(X[:6]))


def test_dask_frame_explanation(setup, scheduler):
    dd = pytest.importorskip("dask.dataframe")
    from distributed import Client

    model, frame = setup["models"]["regression"], setup["frame"].iloc[:40]
    explainer = TreeExplainer(model, backend="cpu")
    want = explainer(frame)
    with Client(scheduler) as client:
        explainer.client = client
        lazy = explainer(dd.from_pandas(frame[NAMES[::-1]], npartitions=3), interactions=False)
        got = lazy.compute()
        inter = explainer(dd.from_pandas(frame, npartitions=2), interactions=True).compute()
    np.testing.assert_array_equal(got.values, want.values)
    np.testing.assert_array_equal(got.data, want.data)
    assert got.feature_names == NAMES
    np.testing.assert_array_equal(inter.values, explainer(frame, interactions=True).values)


def test_dmatrix_missing_sentinel(setup):
    rows = np.nan_to_num(setup["rows"])
    rows[::4, 1] = -999.0
    y = (rows[:, 0] > 0).astype(int)
    model = xgb.XGBClassifier(n_estimators=3, max_depth=2, missing=-999.0).fit(rows, y)
    explainer = TreeExplainer(model, backend="cpu")
    dense = np.where(rows == -999.0, np.nan, rows)
    stored_missing = xgb.DMatrix(rows, missing=-999.0)  # the sentinel is not stored
    np.testing.assert_array_equal(
        explainer.shap_values(stored_missing), explainer.shap_values(dense)
    )
    with pytest.raises(ValueError, match="missing=-999.0"):
        explainer.shap_values(xgb.DMatrix(rows))  # stores -999 as a number


# ------------------------------------------------------------------------------------------
# review fixes: in-memory labels with Dask rows of unknown chunk sizes; DMatrix backgrounds
# ------------------------------------------------------------------------------------------


def test_log_loss_dask_rows_of_unknown_sizes_with_numpy_labels(setup, scheduler):
    from distributed import Client

    dd = pytest.importorskip("dask.dataframe")
    model, X, y = setup["models"]["binary"], setup["X"][:60], setup["y"][:60]
    frame = dd.from_pandas(pd.DataFrame(X, columns=[f"f{j}" for j in range(5)]), npartitions=3)
    rows = frame.to_dask_array()  # chunk sizes unknown until computed
    assert any(np.isnan(c) for c in rows.chunks[0])
    with Client(scheduler) as client:
        explainer = TreeExplainer(model, setup["bg"], "log_loss", backend="cpu", client=client)
        got = explainer.shap_values(rows, y).compute()
    np.testing.assert_array_equal(got, explainer.shap_values(X, y))


def test_background_dmatrix_storing_the_missing_sentinel_is_refused(setup):
    model = setup["models"]["binary"]
    background = np.nan_to_num(setup["bg"])
    background[0, 0] = 0.0
    dmatrix = xgb.DMatrix(background, missing=np.nan)  # stores the zero as a value
    with pytest.raises(ValueError, match="stores the value 0.0"):
        TreeExplainer(model, dmatrix, missing=0.0, backend="cpu")
