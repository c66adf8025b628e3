"""Interventional SHAP: the engine against the brute-force oracle, shap's own, and itself.

* Oracle (:func:`naive.interventional_shap`, enumeration of coalitions of hybrid rows): SHAP
  and interaction values, raw margin / probability / log loss, missing values, categorical
  splits, several output groups, the row-by-row code for long paths.
* shap's ``TreeExplainer(model, data, feature_perturbation="interventional", model_output=...)``
  on XGBoost, LightGBM, scikit-learn and CatBoost models (shap's layout: no bias column,
  ``(n, F, G)`` for several groups).
* Additivity (a wrong margin is caught), bits independent of chunking, blocking and threads,
  refusals with clear messages, and Dask (bit-identical to in memory).
"""

from __future__ import annotations

import warnings
from dataclasses import replace

import dask.array as da
import numba
import numpy as np
import pytest

from distshap import TreeExplainer
from distshap.additivity_rule import AdditivityError
from distshap.dispatch import explain_rows
from distshap.encoding import encode_ensemble
from distshap.interventional import apply_transform, bias_values, build_background, transform_id
from distshap.kernels import interventional_cpu
from distshap.kernels.interventional_math import Background, weight_tables
from distshap.kernels.margin import margin_model
from distshap.packed import build_packed_model
from distshap.paths import extract_paths

import naive
import tiny


def pack(ens, model_kind=None):
    """The packed model as TreeExplainer builds it (encoding, margin arrays, model kind)."""
    encoded, encoding = encode_ensemble(ens)
    return build_packed_model(
        extract_paths(encoded),
        feature_names=ens.feature_names,
        encoding=encoding,
        margin=margin_model(ens),
        model_kind=model_kind or ens.model_kind,
    )


def packed_of(model):
    return TreeExplainer(model, backend="cpu").packed


def close(ours, ref, rtol=1e-5):
    """float32 values against a float64 reference: ``rtol`` of the largest value."""
    ours, ref = np.asarray(ours, np.float64), np.asarray(ref, np.float64)
    assert ours.shape == ref.shape
    scale = max(1.0, float(np.abs(ref).max()))
    np.testing.assert_allclose(ours, ref, rtol=rtol, atol=rtol * scale)


ORACLE_MODELS = {
    **tiny.tiny_ensembles(),
    "random_categorical_3_groups": tiny.random_ensemble(
        11, n_features=5, n_trees=6, depth=3, n_groups=3, n_categorical=2
    ),
    "random_deep": tiny.random_ensemble(4, n_features=6, n_trees=3, depth=5),
}


# ---------------------------------------------------------------------------------------------
# the oracle
# ---------------------------------------------------------------------------------------------


def test_weight_tables_are_the_factorial_ratios():
    w = weight_tables(6)
    assert w.shape == (5, 7, 7)
    assert w[0, 1, 0] == 1.0 and w[1, 0, 1] == 1.0  # one player: it takes the whole value
    assert w[0, 2, 1] == pytest.approx(1 / 6) and w[1, 2, 1] == pytest.approx(1 / 3)
    # efficiency of the path game: the values sum to u(N) - u(empty) = [b == 0] - [a == 0]
    for a in range(7):
        for b in range(7 - a):
            if a + b:
                total = a * w[0, a, b] - b * w[1, a, b]
                assert total == pytest.approx(float(b == 0) - float(a == 0), abs=1e-15)
    with pytest.raises(ValueError):
        weight_tables(-1)


@pytest.mark.parametrize("name", sorted(ORACLE_MODELS))
def test_shap_and_interactions_equal_the_oracle(name, backend):
    ens = ORACLE_MODELS[name]
    packed = pack(ens)
    X = tiny.random_rows(1, ens, n=8)
    B = tiny.random_rows(2, ens, n=6)
    background = build_background(packed, B)
    phi = explain_rows(packed, X, backend=backend, background=background)
    close(phi, naive.interventional_shap_rows(ens, X, B))
    inter = explain_rows(packed, X, True, backend=backend, background=background)
    close(inter, naive.interventional_interactions_rows(ens, X, B))
    if backend != "cpu":
        return
    # the row-by-row code of long paths gives the same values
    rows = packed.encoding.apply(X)
    bias = bias_values(background, 0)
    slow = interventional_cpu.interventional_values(
        packed, background, rows, bias=bias, max_mask_bits=0
    )
    close(slow, phi, rtol=1e-6)
    slow = interventional_cpu.interventional_values(
        packed, background, rows, bias=bias, interactions=True, max_mask_bits=1
    )
    close(slow, inter, rtol=1e-6)


@pytest.mark.parametrize("model_output", ["probability", "log_loss"])
def test_transformed_outputs_equal_the_oracle(model_output, backend):
    ens = tiny.random_ensemble(5, n_features=5, n_trees=5, depth=3, n_categorical=1)
    packed = pack(ens, "xgboost:binary:logistic")
    X = tiny.random_rows(1, ens, n=9)
    B = tiny.random_rows(2, ens, n=7)
    X[0] = B[3]  # a row whose margin equals a background row's: rescale 1
    y = np.arange(9) % 2
    background = build_background(packed, B)
    phi = explain_rows(packed, X, backend=backend, background=background,
                       model_output=model_output, y=y)  # fmt: skip
    close(phi, naive.interventional_shap_rows(ens, X, B, model_output=model_output, y=y))
    margin = naive.predict_margin(ens, X)
    target = apply_transform(margin, transform_id(model_output, packed), y.astype(float))
    close(phi.sum(axis=-1), target, rtol=1e-6)
    if backend != "cpu":
        return
    # the row-by-row code of long paths: the same values
    t = transform_id(model_output, packed)
    slow = interventional_cpu.interventional_values(
        packed, background, packed.encoding.apply(X), transform=t, x_margin=margin,
        y=y.astype(float), bias=bias_values(background, t, y), max_mask_bits=0,
    )  # fmt: skip
    close(slow, phi, rtol=1e-6)


def test_a_long_path_uses_the_row_by_row_code():
    """A chain of 70 distinct features (more than a mask holds): each pair's game by hand."""
    from distshap.warmup import chain_ensemble

    ens = chain_ensemble(70, 70)
    packed = pack(ens)
    assert np.diff(packed.path_offsets).max() - 1 == 70
    x = np.full((1, 70), 0.25)  # follows every left branch: reaches the deepest leaf
    r = x.copy()
    r[0, [3, 40]] = 0.75  # leaves at split 3 (the leaf of node 6 + 1)
    background = build_background(packed, r)
    phi = explain_rows(packed, x, backend="cpu", background=background)
    # f(x) = 2 (the last leaf); a hybrid row leaves the chain at the first of splits 3, 40
    # where it takes r's value: split 3's right leaf is (3 % 3) - 1 = -1, split 40's is 0
    v = {(): -1.0, (3,): 0.0, (40,): -1.0, (3, 40): 2.0}
    phi3 = 0.5 * (v[(3,)] - v[()]) + 0.5 * (v[(3, 40)] - v[(40,)])
    phi40 = 0.5 * (v[(40,)] - v[()]) + 0.5 * (v[(3, 40)] - v[(3,)])
    expected = np.zeros(71)
    expected[3], expected[40], expected[70] = phi3, phi40, -1.0
    close(phi[0, 0], expected, rtol=1e-6)


# ---------------------------------------------------------------------------------------------
# bits: chunking, blocks, threads
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def multi():
    ens = ORACLE_MODELS["random_categorical_3_groups"]
    packed = pack(ens)
    X = tiny.random_rows(5, ens, n=40)
    background = build_background(packed, tiny.random_rows(6, ens, n=23))
    return packed, X, background


@pytest.mark.parametrize("interactions", [False, True], ids=["shap", "interactions"])
def test_bits_do_not_depend_on_chunks_blocks_or_threads(multi, monkeypatch, interactions):
    packed, X, background = multi
    whole = explain_rows(packed, X, interactions, "cpu", background=background)
    pieces = np.concatenate(
        [
            explain_rows(packed, X[a:b], interactions, "cpu", background=background)
            for a, b in [(0, 1), (1, 17), (17, 40)]
        ]
    )
    np.testing.assert_array_equal(pieces, whole)
    monkeypatch.setattr(interventional_cpu, "BLOCK_ENTRIES", 50)  # paths in blocks of 2
    monkeypatch.setattr(interventional_cpu, "ACCUMULATOR_BYTES", 1)  # one row at a time
    np.testing.assert_array_equal(
        explain_rows(packed, X, interactions, "cpu", background=background), whole
    )
    monkeypatch.undo()
    monkeypatch.setattr(interventional_cpu, "MEMO_ROWS", 3)  # masks shared by 3 rows at most
    np.testing.assert_array_equal(
        explain_rows(packed, X, interactions, "cpu", background=background), whole
    )
    monkeypatch.undo()
    threads = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        one = explain_rows(packed, X, interactions, "cpu", background=background)
    finally:
        numba.set_num_threads(threads)
    np.testing.assert_array_equal(one, whole)


# ---------------------------------------------------------------------------------------------
# additivity and refusals
# ---------------------------------------------------------------------------------------------


def test_additivity_check_catches_a_wrong_background_margin(multi):
    packed, X, background = multi
    explain_rows(packed, X, backend="cpu", background=background)  # passes
    wrong = replace(background, margin=background.margin + 0.5)
    with pytest.raises(AdditivityError, match="do not sum to the model's margin"):
        explain_rows(packed, X, backend="cpu", background=wrong)
    explain_rows(packed, X, backend="cpu", background=wrong, check=False)  # asked not to check


@pytest.fixture(scope="module")
def regression_packed():
    return pack(
        tiny.random_ensemble(8, n_features=4, n_trees=3, depth=3), "xgboost:reg:squarederror"
    )


def test_background_errors(regression_packed):
    packed = regression_packed
    with pytest.raises(ValueError, match="no rows"):
        build_background(packed, np.zeros((0, 4)))
    with pytest.raises(ValueError, match="3 features but the model expects 4"):
        build_background(packed, np.zeros((5, 3)))
    with pytest.raises(ValueError, match="2-D"):
        build_background(packed, np.zeros(4))
    with pytest.raises(TypeError, match="Dask"):
        build_background(packed, da.zeros((5, 4)))
    with pytest.raises(ValueError, match="margin arrays"):
        build_background(replace(packed, margin=None), np.zeros((5, 4)))
    bg = build_background(packed, np.full((3, 4), np.nan))  # NaN: missing, fine
    assert bg.rows.dtype == np.float32 and bg.margin.shape == (3, 1)
    assert isinstance(bg, Background) and bg.model_digest == packed.digest
    other = pack(tiny.random_ensemble(9, n_features=4, n_trees=3, depth=3))
    with pytest.raises(ValueError, match="built for another model"):
        explain_rows(other, np.zeros((2, 4)), backend="cpu", background=bg)
    with pytest.raises(TypeError, match="build_background"):
        explain_rows(packed, np.zeros((2, 4)), backend="cpu", background=np.zeros((3, 4)))


@pytest.mark.parametrize(
    "kind, groups, match",
    [
        ("xgboost:reg:squarederror", 1, "not the log-odds"),
        ("xgboost:multi:softprob", 3, "softmax"),
        ("catboost:CatBoostClassifier", 3, "softmax"),
        ("lightgbm:LGBMClassifier:binary sigmoid:2", 1, "sigmoid"),
        ("lightgbm:LGBMClassifier:multiclass", 3, "multiclass"),
        ("sklearn:GradientBoostingClassifier:exponential", 1, "exponential"),
        ("sklearn:GradientBoostingRegressor:squared_error", 1, "log-odds"),
        ("catboost:file", 1, "CatBoostClassifier object"),
        ("tiny", 1, "does not know"),
    ],
)
def test_transforms_refused_where_the_margin_is_no_log_odds(kind, groups, match):
    class Fake:
        model_kind, num_groups = kind, groups

    for output in ("probability", "log_loss"):
        with pytest.raises(ValueError, match=match):
            transform_id(output, Fake())
    assert transform_id("raw", Fake()) == 0
    with pytest.raises(ValueError, match="unknown model_output"):
        transform_id("predict_proba", Fake())


def test_transform_ids_of_logistic_and_probability_models():
    def kind(k, g=1):
        return type("P", (), {"model_kind": k, "num_groups": g})()

    for k in ("xgboost:binary:logistic", "xgboost:reg:logistic", "lightgbm:file:binary",
              "lightgbm:Booster:cross_entropy", "sklearn:GradientBoostingClassifier:log_loss",
              "sklearn:HistGradientBoostingClassifier", "catboost:CatBoostClassifier"):  # fmt: skip
        assert transform_id("probability", kind(k)) == 1
        assert transform_id("log_loss", kind(k)) == 2
    rf = kind("sklearn:RandomForestClassifier", 2)
    assert transform_id("probability", rf) == 0  # its outputs are probabilities already
    with pytest.raises(ValueError, match="class probabilities"):
        transform_id("log_loss", rf)


def test_output_and_label_errors(regression_packed):
    ens = tiny.random_ensemble(5, n_features=5, n_trees=2, depth=2)
    packed = pack(ens, "xgboost:binary:logistic")
    X = tiny.random_rows(1, ens, n=4)
    bg = build_background(packed, tiny.random_rows(2, ens, n=3))
    with pytest.raises(ValueError, match="needs its label"):
        explain_rows(packed, X, backend="cpu", background=bg, model_output="log_loss")
    with pytest.raises(ValueError, match="one label per row"):
        explain_rows(packed, X, backend="cpu", background=bg, model_output="log_loss",
                     y=np.zeros(3))  # fmt: skip
    with pytest.raises(ValueError, match=r"outside \[0, 1\]"):
        explain_rows(packed, X, backend="cpu", background=bg, model_output="log_loss",
                     y=np.array([0, 1, 2, 1]))  # fmt: skip
    with pytest.raises(ValueError, match="raw margin only"):
        explain_rows(packed, X, True, backend="cpu", background=bg, model_output="probability")
    with pytest.raises(ValueError, match="background data"):
        explain_rows(packed, X, backend="cpu", model_output="probability")
    # y is ignored where no loss is explained
    a = explain_rows(packed, X, backend="cpu", background=bg, y=np.zeros(99))
    np.testing.assert_array_equal(a, explain_rows(packed, X, backend="cpu", background=bg))
    with pytest.raises(ValueError, match="not the log-odds"):
        rows = np.zeros((2, 4))
        explain_rows(regression_packed, rows, backend="cpu", model_output="probability",
                     background=build_background(regression_packed, rows))  # fmt: skip


# ---------------------------------------------------------------------------------------------
# shap's own interventional TreeExplainer
# ---------------------------------------------------------------------------------------------

shap = pytest.importorskip("shap")


def _data(seed=0, n=110, F=5, nan=True):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, F)).astype(np.float32)
    if nan:
        X[rng.random(X.shape) < 0.08] = np.nan
    Xc = np.nan_to_num(X)
    y_reg = Xc[:, 0] * 2 + Xc[:, 1] * Xc[:, 2] + (Xc[:, 3] > 0)
    y_bin = (Xc[:, 0] + Xc[:, 1] + 0.3 * rng.normal(size=n) > 0).astype(int)
    y_multi = (Xc[:, 0] > 0).astype(int) + (Xc[:, 1] > 0.3)
    return X, y_reg, y_bin, y_multi


def _ours_like_shap(phi):
    """(n, G, F+1) -> shap's layout (n, F) or (n, F, G), and the bias (n, G)."""
    values = phi[:, 0, :-1] if phi.shape[1] == 1 else phi[:, :, :-1].transpose(0, 2, 1)
    return values, phi[:, :, -1]


def _models():
    import catboost
    import lightgbm as lgb
    import xgboost as xgb
    from sklearn.ensemble import (
        GradientBoostingClassifier,
        GradientBoostingRegressor,
        RandomForestClassifier,
        RandomForestRegressor,
    )

    X, y_reg, y_bin, y_multi = _data()
    Xc = np.nan_to_num(X)
    small = dict(n_estimators=6, max_depth=3)
    return {
        "xgboost_regression": (xgb.XGBRegressor(**small).fit(X, y_reg), X, ("raw",)),
        "xgboost_binary": (
            xgb.XGBClassifier(**small).fit(X, y_bin),
            X,
            ("raw", "probability", "log_loss"),
        ),
        "xgboost_multiclass": (xgb.XGBClassifier(**small).fit(X, y_multi), X, ("raw",)),
        "lightgbm_regression": (
            lgb.LGBMRegressor(n_estimators=6, num_leaves=7, min_child_samples=5, verbose=-1).fit(
                X, y_reg
            ),
            X,
            ("raw",),
        ),  # fmt: skip
        "lightgbm_binary": (
            lgb.LGBMClassifier(n_estimators=6, num_leaves=7, min_child_samples=5, verbose=-1).fit(
                X, y_bin
            ),
            X,
            ("raw", "probability", "log_loss"),
        ),  # fmt: skip
        "lightgbm_multiclass": (
            lgb.LGBMClassifier(n_estimators=4, num_leaves=5, min_child_samples=5, verbose=-1).fit(
                X, y_multi
            ),
            X,
            ("raw",),
        ),  # fmt: skip
        "sklearn_gb_regression": (GradientBoostingRegressor(**small).fit(Xc, y_reg), Xc, ("raw",)),
        "sklearn_gb_binary": (
            GradientBoostingClassifier(**small).fit(Xc, y_bin),
            Xc,
            ("raw", "probability"),
        ),
        "sklearn_rf_regression": (
            RandomForestRegressor(n_estimators=3, max_depth=4, random_state=0).fit(X, y_reg),
            X,
            ("raw",),
        ),  # fmt: skip
        "sklearn_rf_classifier": (
            RandomForestClassifier(n_estimators=3, max_depth=4, random_state=0).fit(Xc, y_multi),
            Xc,
            ("raw", "probability"),
        ),  # fmt: skip
        "catboost_regression": (
            catboost.CatBoostRegressor(iterations=6, depth=3, verbose=0).fit(X, y_reg),
            X,
            ("raw",),
        ),
        "catboost_binary": (
            catboost.CatBoostClassifier(iterations=6, depth=3, verbose=0).fit(X, y_bin),
            X,
            ("raw", "probability", "log_loss"),
        ),  # fmt: skip
    }


@pytest.fixture(scope="module")
def peer_models():
    pytest.importorskip("catboost")
    return _models()


PEER_CASES = [
    ("xgboost_regression", "raw"),
    ("xgboost_binary", "raw"),
    ("xgboost_binary", "probability"),
    ("xgboost_binary", "log_loss"),
    ("xgboost_multiclass", "raw"),
    ("lightgbm_regression", "raw"),
    ("lightgbm_binary", "probability"),
    ("lightgbm_binary", "log_loss"),
    ("lightgbm_multiclass", "raw"),
    ("sklearn_gb_regression", "raw"),
    ("sklearn_gb_binary", "probability"),
    ("sklearn_rf_regression", "raw"),
    ("sklearn_rf_classifier", "probability"),
    ("catboost_regression", "raw"),
    ("catboost_binary", "probability"),
    ("catboost_binary", "log_loss"),
]


@pytest.mark.parametrize("name, model_output", PEER_CASES, ids=[f"{a}-{b}" for a, b in PEER_CASES])
def test_equals_shap_interventional(peer_models, name, model_output, backend):
    model, X, _ = peer_models[name]
    _, _, y_bin, _ = _data()
    background, rows, y = X[:40], X[40:100], y_bin[40:100]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        explainer = shap.TreeExplainer(
            model, background, feature_perturbation="interventional", model_output=model_output
        )
        theirs = np.asarray(
            explainer.shap_values(rows, y=y) if model_output == "log_loss"
            else explainer.shap_values(rows)
        )  # fmt: skip
    packed = packed_of(model)
    bg = build_background(packed, background)
    phi = explain_rows(packed, rows, backend=backend, background=bg, model_output=model_output,
                       y=y)  # fmt: skip
    values, bias = _ours_like_shap(phi)
    if model_output != "raw":
        # shap scales a pair by the difference of the two rounded T over the margins'
        # difference: rounding noise where they are a few ulps apart (this LightGBM model has
        # such pairs), ours the secant without cancellation (test_interventional_rescale.py).
        # Rows with such a pair: only their sums (both add up); the others value by value.
        close(values.sum(axis=1), theirs.sum(axis=1))
        gap = np.abs(build_background(packed, rows).margin[:, :1] - bg.margin[:, 0])
        keep = ~((gap > 0.0) & (gap < 1e-9)).any(axis=1)
        assert keep.sum() >= len(keep) // 2
        values, theirs = values[keep], theirs[keep]
    close(values, theirs)
    if model_output == "log_loss":
        for i in (0, 7):  # shap's expected value is a function of the label
            close(bias[i], np.atleast_1d(explainer.expected_value(y[i])))
    elif name in SHAP_WRONG_EXPECTED_VALUE:
        # shap 0.51's expected value misses the base score of these models (its values plus
        # it do not sum to the model's margin): the library's own mean margin is the reference
        close(bias[0], SHAP_WRONG_EXPECTED_VALUE[name](model, background).mean(axis=0))
    else:
        close(bias[0], np.atleast_1d(explainer.expected_value))


def _xgboost_margin(model, X):
    import xgboost as xgb

    return model.get_booster().predict(xgb.DMatrix(X), output_margin=True).reshape(len(X), -1)


def _catboost_margin(model, X):
    return np.asarray(model.predict(X, prediction_type="RawFormulaVal")).reshape(len(X), -1)


SHAP_WRONG_EXPECTED_VALUE = {
    "xgboost_multiclass": _xgboost_margin,
    "catboost_regression": _catboost_margin,
}


def test_shap_refusals_we_share_or_lift(peer_models):
    """shap refuses probability for XGBoost multiclass (unknown link); distshap refuses every
    multiclass probability (a softmax), and the log loss of GradientBoostingClassifier, which
    shap refuses too; LightGBM multiclass "probability" (shap: a logistic per class) too."""
    for name in ("xgboost_multiclass", "lightgbm_multiclass"):
        packed = packed_of(peer_models[name][0])
        with pytest.raises(ValueError, match="multiclass model"):
            transform_id("probability", packed)
    assert transform_id("log_loss", packed_of(peer_models["sklearn_gb_binary"][0])) == 2


def test_lightgbm_categorical_splits_equal_the_oracle():
    """LightGBM categorical splits: shap 0.51's interventional values of them fail its own
    additivity check, so the oracle is the reference (float32-exact inputs: the oracle's
    float32 comparisons are then LightGBM's float64 ones)."""
    import lightgbm as lgb

    from distshap.models import load_model

    rng = np.random.default_rng(1)
    n = 160
    X = rng.normal(size=(n, 4)).astype(np.float32).astype(np.float64)
    X[:, 2] = rng.integers(0, 6, size=n)
    X[rng.random((n, 4)) < 0.05] = np.nan
    y = np.nan_to_num(X[:, 0]) + np.isin(X[:, 2], [1, 4]) * 2.0 + np.nan_to_num(X[:, 3])
    model = lgb.LGBMRegressor(
        n_estimators=4, num_leaves=6, min_child_samples=5, min_data_per_group=5,
        cat_smooth=1, max_cat_to_onehot=1, verbose=-1,
    ).fit(X, y, categorical_feature=[2])  # fmt: skip
    ens = load_model(model)
    assert ens.is_categorical.any()
    packed = packed_of(model)
    bg = build_background(packed, X[:10])
    close(
        explain_rows(packed, X[10:18], backend="cpu", background=bg),
        naive.interventional_shap_rows(ens, X[10:18], X[:10]),
    )


def test_categorical_splits_equal_the_oracle():
    """XGBoost categorical splits (shap refuses them in interventional mode): the oracle."""
    import pandas as pd
    import xgboost as xgb

    from distshap.models import load_model

    rng = np.random.default_rng(3)
    n = 150
    frame = pd.DataFrame(
        {
            "a": rng.normal(size=n).astype(np.float32),
            "c": pd.Categorical(rng.integers(0, 5, size=n)),
            "b": rng.normal(size=n).astype(np.float32),
        }
    )
    frame.loc[rng.random(n) < 0.1, "a"] = np.nan
    y = frame["a"].fillna(0).to_numpy() + (frame["c"].cat.codes % 2) * 1.5 + frame["b"]
    booster = xgb.train(
        {"max_depth": 3, "max_cat_to_onehot": 1},
        xgb.DMatrix(frame, label=y, enable_categorical=True),
        num_boost_round=4,
    )
    ens = load_model(booster)
    assert ens.is_categorical.any()
    packed = packed_of(booster)
    B, X = frame.iloc[:12], frame.iloc[12:20]
    bg = build_background(packed, B)
    codes = np.column_stack([frame["a"], frame["c"].cat.codes, frame["b"]]).astype(np.float64)
    phi = explain_rows(packed, X, backend="cpu", background=bg)
    close(phi, naive.interventional_shap_rows(ens, codes[12:20], codes[:12]))
    inter = explain_rows(packed, X, True, backend="cpu", background=bg)
    close(inter, naive.interventional_interactions_rows(ens, codes[12:20], codes[:12]))


# ---------------------------------------------------------------------------------------------
# Dask
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def client():
    from distshap.cluster import start_cluster

    with start_cluster(n_workers=2, processes=False, gpus=False, dashboard_address=":0") as c:
        yield c


@pytest.fixture(scope="module")
def binary_model():
    ens = tiny.random_ensemble(21, n_features=5, n_trees=8, depth=4, n_categorical=1)
    packed = pack(ens, "xgboost:binary:logistic")
    X = tiny.random_rows(3, ens, n=120)
    background = build_background(packed, tiny.random_rows(4, ens, n=30))
    y = (np.arange(120) % 3 == 0).astype(np.float64)
    return packed, X, background, y


@pytest.mark.parametrize(
    "model_output, interactions",
    [("raw", False), ("raw", True), ("probability", False), ("log_loss", False)],
)
def test_dask_bit_identical_to_in_memory(client, binary_model, model_output, interactions):
    from distshap.cluster import explain_dask

    packed, X, background, y = binary_model
    expected = explain_rows(packed, X, interactions, "cpu", background=background,
                            model_output=model_output, y=y)  # fmt: skip
    for chunks in [(120, 5), ((1, 50, 69), (3, 2))]:
        labels = da.from_array(y, chunks=37)  # chunked otherwise than X: aligned here
        result = explain_dask(
            packed, da.from_array(X.astype(np.float32), chunks=chunks), interactions, "cpu",
            client=client, background=background, model_output=model_output, y=labels,
        )  # fmt: skip
        np.testing.assert_array_equal(result.compute(), expected)


def test_dask_ships_the_background_once_and_refuses_early(client, binary_model):
    import distshap.cluster.shipping as dx
    from distshap.cluster import explain_dask

    packed, X, background, y = binary_model
    X = da.from_array(X.astype(np.float32), chunks=40)
    explain_dask(packed, X, client=client, background=background).compute()
    future = dx._MODEL_FUTURES[client][background.digest]
    explain_dask(packed, X, client=client, background=background).compute()
    assert dx._MODEL_FUTURES[client][background.digest] is future  # one task per digest
    with pytest.raises(ValueError, match="needs the label"):
        explain_dask(packed, X, client=client, background=background, model_output="log_loss")
    with pytest.raises(ValueError, match="one label per row"):
        explain_dask(packed, X, client=client, background=background, model_output="log_loss",
                     y=np.zeros(7))  # fmt: skip
    with pytest.raises(ValueError, match="raw margin only"):
        explain_dask(packed, X, True, client=client, background=background,
                     model_output="probability")  # fmt: skip
    with pytest.raises(ValueError, match="interventional SHAP only"):
        explain_dask(packed, X, client=client, model_output="probability")
