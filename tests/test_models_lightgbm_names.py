"""LightGBM's made-up feature names: a model trained without names takes a DataFrame by position.

LightGBM stores ``Column_0 ... Column_{F-1}`` for a model trained on an array; LightGBM and
shap accept any DataFrame of ``F`` columns for it, by position. distshap does the same (the
names are treated as no names), except for a frame that holds all those names (taken by name,
so a reordered frame is not misread). A model trained with real names still matches by name.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from distshap import TreeExplainer
from distshap.frames import lightgbm_generated_names, select_model_columns
from distshap.io.read import InputError, read_data, select_features

lgb = pytest.importorskip("lightgbm")

F = 3


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, F))
    y = X[:, 0] - 2.0 * X[:, 1] + 0.5 * X[:, 2] ** 2
    return X, y


@pytest.fixture(scope="module")
def unnamed(data):
    X, y = data
    model = lgb.LGBMRegressor(n_estimators=5, num_leaves=7, verbose=-1).fit(X, y)
    assert model.booster_.feature_name() == [f"Column_{j}" for j in range(F)]
    return model


def test_generated_names_are_recognised():
    assert lightgbm_generated_names(("Column_0", "Column_1"), 2)
    assert not lightgbm_generated_names(("Column_0", "Column_1"), 3)
    assert not lightgbm_generated_names(("Column_1", "Column_0"), 2)
    assert not lightgbm_generated_names(("a", "b"), 2)
    assert not lightgbm_generated_names(None, 2)


def test_unnamed_model_takes_a_frame_by_position(data, unnamed):
    X, _ = data
    rows = X[:20]
    explainer = TreeExplainer(unnamed, layout="xgboost", backend="cpu")
    want = explainer.shap_values(rows)
    frame = pd.DataFrame(rows, columns=["a", "b", "c"])
    got = explainer.shap_values(frame)
    np.testing.assert_array_equal(got, want)
    contrib = unnamed.predict(frame, pred_contrib=True)  # LightGBM's own reading of the frame
    np.testing.assert_allclose(got, contrib, rtol=1e-5, atol=1e-6)
    # interventional, with a frame as background too
    inter = TreeExplainer(unnamed, pd.DataFrame(X[:30], columns=["u", "v", "w"]), backend="cpu")
    np.testing.assert_array_equal(
        inter.shap_values(frame), TreeExplainer(unnamed, X[:30], backend="cpu").shap_values(rows)
    )


def test_unnamed_model_frames_named_like_its_positions(data, unnamed):
    X, _ = data
    rows = X[:10]
    explainer = TreeExplainer(unnamed, backend="cpu")
    want = explainer.shap_values(rows)
    # all generated names present, reordered and with an extra column: taken by name
    frame = pd.DataFrame(
        {"Column_2": rows[:, 2], "label": 0.0, "Column_0": rows[:, 0], "Column_1": rows[:, 1]}
    )
    np.testing.assert_array_equal(explainer.shap_values(frame), want)
    # by position, a wrong column count is an error, not a silent misreading
    wide = pd.DataFrame(np.c_[rows, rows[:, :1]], columns=["a", "b", "c", "d"])
    with pytest.raises(ValueError, match="4"):
        explainer.shap_values(wide)


def test_named_model_still_matches_by_name(data):
    X, y = data
    frame = pd.DataFrame(X, columns=["a", "b", "c"])
    model = lgb.LGBMRegressor(n_estimators=5, num_leaves=7, verbose=-1).fit(frame, y)
    explainer = TreeExplainer(model, backend="cpu")
    want = explainer.shap_values(X[:10])
    np.testing.assert_array_equal(explainer.shap_values(frame.iloc[:10, ::-1]), want)
    with pytest.raises(ValueError, match="lacks the model's feature column"):
        explainer.shap_values(pd.DataFrame(X[:10], columns=["x", "y", "z"]))


def test_select_model_columns_rules():
    cols = ["p", "q"]
    gen = ("Column_0", "Column_1")

    class Frame:
        columns = cols

    assert select_model_columns(Frame, 2, gen, "lightgbm") == cols
    with pytest.raises(ValueError):  # other libraries' names are names
        select_model_columns(Frame, 2, gen, "exact")
    with pytest.raises(ValueError):  # probing single names keeps them
        select_model_columns(Frame, 2, gen, "lightgbm", generated_by_position=False)


def test_files_are_read_by_position_too(tmp_path, data, unnamed):
    X, _ = data
    path = tmp_path / "rows.csv"
    pd.DataFrame(X[:5], columns=["a", "b", "c"]).to_csv(path, index=False)
    packed = TreeExplainer(unnamed, backend="cpu").packed
    ds = select_features(read_data(str(path)), packed)
    assert list(ds.columns) == ["a", "b", "c"]
    with pytest.raises(InputError, match="4 columns"):
        pd.DataFrame(np.c_[X[:5], X[:5, :1]], columns=list("abcd")).to_csv(path, index=False)
        select_features(read_data(str(path)), packed)


def test_outputs_are_named_by_the_data_not_by_made_up_names(tmp_path, data, unnamed):
    """A file's columns name the CLI's output columns, as they name ``Explanation`` features;
    without data the model's own ``Column_j`` names stay (e.g. a server's metadata)."""
    from distshap.cli import main

    X, _ = data
    frame = pd.DataFrame(X[:20], columns=["a", "b", "c"])
    explainer = TreeExplainer(unnamed, backend="cpu")
    assert explainer.output_feature_names(frame) == ("a", "b", "c")
    assert list(explainer(frame).feature_names) == ["a", "b", "c"]
    assert explainer.output_feature_names() == ("Column_0", "Column_1", "Column_2")
    by_name = pd.DataFrame(X[:20], columns=["Column_2", "Column_0", "Column_1"])  # matched by name
    assert explainer.output_feature_names(by_name) == ("Column_0", "Column_1", "Column_2")
    model, rows, out = tmp_path / "m.txt", tmp_path / "rows.parquet", tmp_path / "o.parquet"
    unnamed.booster_.save_model(str(model))
    frame.to_parquet(rows)
    assert main(["explain", str(model), str(rows), "-o", str(out), "--no-progress"]) == 0
    assert list(pd.read_parquet(out).columns) == ["a", "b", "c", "bias"]
