"""Output names never repeat: Parquet columns, Zarr attributes and a ``shap.Explanation``'s
feature names, whatever the features are called (``bias``, ``x[class 0]``, duplicates)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import xgboost as xgb
from hypothesis import given, settings
from hypothesis import strategies as st

import distshap
from distshap.cli import main as cli_main
from distshap.io.write import output_columns, write_array
from distshap.layouts import distinct_names

RNG = np.random.default_rng(5)
X = RNG.normal(size=(80, 4)).astype(np.float32)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.sampled_from(["a", "a_1", "a_2", "bias", "bias_1", "x[class 0]", "x", ""]), max_size=9
    ),
    st.integers(1, 12),
)
def test_columns_distinct(names, groups):
    out = distinct_names(names)
    assert len(set(out)) == len(out) == len(names)
    if len(set(names)) == len(names):
        assert out == names  # distinct names are kept as they are
    columns = output_columns(names, groups)
    assert len(set(columns)) == len(columns) == (len(names) + 1) * groups


def test_bias_column_takes_a_free_name():
    assert output_columns(["bias", "b"], 1) == ["bias", "b", "bias_1"]
    assert output_columns(["bias", "bias_1"], 1) == ["bias", "bias_1", "bias_2"]
    assert output_columns(["x[class 0]", "x"], 2)[:3] == [
        "x[class 0][class 0]",
        "x[class 0]",
        "bias[class 0]",
    ]


def _booster(names: list[str], objective: str = "reg:squarederror", **extra) -> xgb.Booster:
    y = (X[:, 0] > 0).astype(np.float32) + (X[:, 1] > 0) if "multi" in objective else X[:, 0]
    dm = xgb.DMatrix(X, y, feature_names=names)
    return xgb.train({"objective": objective, "max_depth": 3, "nthread": 1, **extra}, dm, 3)


@pytest.mark.parametrize("multiclass", [False, True])
def test_cli_parquet_with_a_feature_named_bias(multiclass, tmp_path):
    names = ["bias", "b", "bias_1", "d"]
    extra = {"objective": "multi:softprob", "num_class": 3} if multiclass else {}
    booster = _booster(names, **extra)
    model = tmp_path / "m.json"
    booster.save_model(model)
    data = tmp_path / "X.parquet"
    pd.DataFrame(X, columns=names).to_parquet(data)
    out = tmp_path / "out.parquet"
    assert cli_main(["explain", str(model), str(data), "-o", str(out), "--local"]) == 0
    got = pd.read_parquet(out)
    assert got.columns.is_unique
    want = distshap.TreeExplainer(booster, layout="xgboost", backend="cpu").shap_values(X)
    np.testing.assert_array_equal(got.to_numpy(), want.reshape(len(X), -1))
    bias = "bias_2"  # the first name no feature has
    assert list(got.columns)[:5] == (
        [f"{n}[class 0]" for n in [*names, bias]] if multiclass else [*names, bias]
    )


def test_zarr_attributes_and_explanation_names_distinct(tmp_path):
    pytest.importorskip("zarr")
    names = ["x[class 0]", "x", "x", "bias"]  # user names may repeat
    booster = _booster(["a", "b", "c", "d"])
    explainer = distshap.TreeExplainer(booster, feature_names=names, backend="cpu")
    assert explainer.output_feature_names() == ("x[class 0]", "x", "x_1", "bias")
    explanation = explainer(X)
    assert len(set(explanation.feature_names)) == 4
    out = tmp_path / "out.zarr"
    write_array(explainer.shap_values(X), str(out), "zarr", names, 1)
    import zarr

    attrs = dict(zarr.open_array(str(out), mode="r").attrs)
    assert attrs["feature_names"] == ["x[class 0]", "x", "x_1", "bias"]
    json.dumps(attrs)


def test_explanation_names_bias_and_class_like_features_kept():
    sklearn_ensemble = pytest.importorskip("sklearn.ensemble")
    frame = pd.DataFrame(X, columns=["bias", "x[class 0]", "c", "d"])
    est = sklearn_ensemble.HistGradientBoostingRegressor(max_iter=3).fit(frame, X[:, 0])
    explanation = distshap.TreeExplainer(est, backend="cpu")(frame)
    assert list(explanation.feature_names) == ["bias", "x[class 0]", "c", "d"]
