"""Bad or unusual inputs: accepted as their library means them, or refused in one line that
names the argument, the value and the fix, before anything is computed."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

import distshap

xgb = pytest.importorskip("xgboost")

N = 120


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    rng = np.random.default_rng(3)
    df = pd.DataFrame(rng.normal(size=(N, 3)), columns=list("abc"))
    df["e"] = pd.Categorical(rng.choice(["x", "y", "z"], N))
    return df


@pytest.fixture(scope="module")
def xgb_explainer(frame: pd.DataFrame) -> distshap.TreeExplainer:
    y = frame.a + 2.0 * (frame.e == "y") + frame.b * frame.c
    dm = xgb.DMatrix(frame, y, enable_categorical=True)
    return distshap.TreeExplainer(xgb.train({"max_depth": 3}, dm, 4))


@pytest.fixture(scope="module")
def numeric() -> tuple[distshap.TreeExplainer, np.ndarray]:
    rng = np.random.default_rng(4)
    X = rng.normal(size=(N, 4)).astype(np.float32)
    bst = xgb.train({"max_depth": 3}, xgb.DMatrix(X, X[:, 0] * X[:, 1]), 4)
    return distshap.TreeExplainer(bst), X


def _lightgbm_explainer(frame: pd.DataFrame) -> distshap.TreeExplainer:
    lgb = pytest.importorskip("lightgbm")
    y = frame.a + 2.0 * (frame.e == "y")
    params = {"verbose": -1, "min_data_in_leaf": 5}
    return distshap.TreeExplainer(lgb.train(params, lgb.Dataset(frame, y), 4))


# ------------------------------------------------------------------------------------------
# other DataFrame libraries
# ------------------------------------------------------------------------------------------


def test_polars_and_arrow_frames_equal_pandas(frame, xgb_explainer):
    pl = pytest.importorskip("polars")
    expected = xgb_explainer.shap_values(frame)
    as_polars = pl.from_pandas(frame)
    assert np.array_equal(xgb_explainer.shap_values(as_polars), expected)
    assert np.array_equal(xgb_explainer.shap_values(as_polars.to_arrow()), expected)
    # columns by name, category columns by label, the background too
    shuffled = as_polars.select(["e", "c", "b", "a"])
    assert np.array_equal(xgb_explainer.shap_values(shuffled), expected)
    explanation = xgb_explainer(as_polars[:5])
    assert list(explanation.feature_names) == ["a", "b", "c", "e"]
    with pytest.raises(TypeError, match=r"X is a lazy polars LazyFrame.*X\.collect\(\)"):
        xgb_explainer.shap_values(as_polars.lazy())


def test_polars_columns_refused_in_polars_words(frame, xgb_explainer):
    from decimal import Decimal

    pl = pytest.importorskip("polars")
    as_polars = pl.from_pandas(frame)
    on_numeric = as_polars.with_columns(pl.col("b").cast(pl.String).cast(pl.Categorical))
    with pytest.raises(
        TypeError,
        match=r"'b' is a category column \(pandas 'category', "
        r"polars Categorical or Enum\).*pl\.col\('b'\)\.cast\(pl\.Float64\)",
    ):
        xgb_explainer.shap_values(on_numeric)
    decimals = as_polars.with_columns(
        pl.Series("a", [Decimal("1.25")] * N, dtype=pl.Decimal(10, 2))
    )
    with pytest.raises(TypeError, match=r"'a' holds decimal\.Decimal values.*pl\.col\('a'\)"):
        xgb_explainer.shap_values(decimals)


def test_polars_background(frame, xgb_explainer):
    pl = pytest.importorskip("polars")
    model = xgb_explainer.ensemble
    with_pandas = distshap.TreeExplainer(model, frame.iloc[:30])
    with_polars = distshap.TreeExplainer(model, pl.from_pandas(frame.iloc[:30]))
    rows = frame.iloc[30:40]
    assert np.array_equal(with_polars.shap_values(rows), with_pandas.shap_values(rows))


# ------------------------------------------------------------------------------------------
# frames: repeated names, rows of frames with category columns
# ------------------------------------------------------------------------------------------


def test_repeated_column_name_is_named(frame, xgb_explainer):
    doubled = pd.concat([frame, frame[["b"]]], axis=1)
    with pytest.raises(ValueError, match=r"X has more than one column named 'b'.*rename or drop"):
        xgb_explainer.shap_values(doubled)
    # a repeated column the model does not read is no ambiguity
    extra = pd.concat(
        [frame, pd.DataFrame({"label": 0.0, "label2": 1.0}, index=frame.index)], axis=1
    )
    extra.columns = [*frame.columns, "label", "label"]
    assert np.array_equal(xgb_explainer.shap_values(extra), xgb_explainer.shap_values(frame))


def test_repeated_column_name_by_position(numeric):
    explainer, X = numeric
    df = pd.DataFrame(X, columns=["p", "q", "p", "r"])  # the model has no names: by position
    with pytest.raises(ValueError, match="X has more than one column named 'p'"):
        explainer.shap_values(df)


@pytest.mark.parametrize("library", ["xgboost", "lightgbm"])
def test_series_row_of_a_frame_with_category_columns(frame, xgb_explainer, library):
    explainer = xgb_explainer if library == "xgboost" else _lightgbm_explainer(frame)
    expected = explainer.shap_values(frame.iloc[:6])
    rows = np.stack([explainer.shap_values(frame.iloc[i]) for i in range(6)])
    assert np.array_equal(rows, expected)
    if library == "xgboost":  # an unknown label is refused as XGBoost refuses it
        row = frame.iloc[0].copy()
        row["e"] = "w"
        with pytest.raises(ValueError, match="never saw"):
            explainer.shap_values(row)


# ------------------------------------------------------------------------------------------
# what is no table
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "X, error, message",
    [
        (None, TypeError, "X is None: pass rows"),
        (3.0, ValueError, r"X is a single number \(3\.0\), not rows"),
        (np.float32(2), ValueError, r"X is a single number \(2\.0\)"),
        (np.array(1.5), ValueError, r"X is a single number \(1\.5\)"),
        ([[1, 2, 3, 4], [1, 2]], ValueError, r"X is a ragged list: its rows hold \[2, 4\] values"),
    ],
)
def test_what_is_no_rows(numeric, X, error, message):
    explainer, _ = numeric
    with pytest.raises(error, match=message):
        explainer.shap_values(X)


def test_background_errors_name_the_background(numeric):
    explainer, X = numeric
    model = explainer.ensemble
    with pytest.raises(ValueError, match=r"data \(the background\) has no rows"):
        distshap.TreeExplainer(model, X[:0])
    with pytest.raises(ValueError, match=r"data \(the background\) has 5 features .* expects 4"):
        distshap.TreeExplainer(model, np.zeros((3, 5)))
    with pytest.raises(ValueError, match=r"data \(the background\) is a ragged list"):
        distshap.TreeExplainer(model, [[0.0, 1.0, 2.0, 3.0], [1.0]])
    df = pd.DataFrame(X[:10], columns=["p", "q", "p", "r"])
    repeated = r"data \(the background\) has more than one column named 'p'"
    with pytest.raises(ValueError, match=repeated):
        distshap.TreeExplainer(model, df)


# ------------------------------------------------------------------------------------------
# scipy.sparse index types
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["csr", "csc"])
def test_sparse_with_mixed_index_types(numeric, fmt):
    explainer, X = numeric
    X = X.copy()
    X[X < 0.3] = 0.0
    m = sp.csr_matrix(X) if fmt == "csr" else sp.csc_matrix(X)
    m.indices = m.indices.astype(np.int32)
    m.indptr = m.indptr.astype(np.int64)  # as LightGBM / XGBoost / toarray() take it
    assert np.array_equal(explainer.shap_values(m), explainer.shap_values(sp.csr_matrix(X)))


# ------------------------------------------------------------------------------------------
# constructor options
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"table_budget_bytes": "1GB"}, TypeError, "table_budget_bytes='1GB': pass a whole"),
        ({"table_budget_bytes": -1}, ValueError, "table_budget_bytes=-1: pass a whole number"),
        ({"table_budget_bytes": 1.5}, ValueError, "table_budget_bytes=1.5"),
        ({"max_table_features": None}, TypeError, "max_table_features=None"),
        ({"missing": "x"}, TypeError, "missing='x': pass the number read as missing"),
        ({"missing": [1]}, TypeError, r"missing=\[1\]"),
        ({"missing": True}, TypeError, "missing=True"),
        ({"algorithm": "best"}, ValueError, "algorithm='best': use one of"),
    ],
)
def test_bad_options_refused_before_loading(kwargs, error, message):
    # the model is never read: a file that does not exist shows it
    with pytest.raises(error, match=message):
        distshap.TreeExplainer("/nonexistent/model.json", **kwargs)


def test_whole_float_options_accepted(numeric):
    explainer, X = numeric
    model = explainer.ensemble
    other = distshap.TreeExplainer(model, table_budget_bytes=float(1 << 30), missing=np.float32(-1))
    assert other.packed.table_budget_bytes == 1 << 30
    assert re.fullmatch(r"[0-9]+", str(other.packed.table_budget_bytes))


@pytest.mark.parametrize(
    "X, error, message",
    [
        ({"a": [1.0]}, TypeError, r"X is a dict: pass pandas\.DataFrame\(X\)"),
        ("rows.parquet", TypeError, "X is a file name or text"),
        ([["a", "b", "c", "d"]], TypeError, "X has dtype object; SHAP values need numeric input"),
    ],
)
def test_what_is_no_table(numeric, X, error, message):
    explainer, _ = numeric
    with pytest.raises(error, match=message):
        explainer.shap_values(X)


def test_one_row_of_any_array_library(numeric):
    explainer, X = numeric
    expected = explainer.shap_values(X[0])
    assert np.array_equal(explainer.shap_values(list(X[0])), expected)
    pa = pytest.importorskip("pyarrow")
    assert np.array_equal(explainer.shap_values(pa.array(X[0])), expected)
    pl = pytest.importorskip("polars")
    assert np.array_equal(explainer.shap_values(pl.Series(X[0])), expected)


def test_client_and_flags_checked(numeric):
    explainer, X = numeric
    with pytest.raises(TypeError, match="client='tcp://host:8786': pass a distributed.Client"):
        distshap.TreeExplainer(explainer.ensemble, client="tcp://host:8786")
    with pytest.raises(TypeError, match="check_additivity='no': pass True or False"):
        explainer.shap_values(X, check_additivity="no")
    assert explainer.shap_values(X[:3], check_additivity=0).shape == (3, X.shape[1])


@pytest.mark.parametrize("library", ["xgboost", "lightgbm"])
def test_series_row_with_numeric_category_labels(library):
    rng = np.random.default_rng(5)
    df = pd.DataFrame(rng.normal(size=(N, 2)), columns=list("ab"))
    df["e"] = pd.Categorical(rng.choice([3, 7, 9], N))  # labels that are numbers
    df["f"] = rng.integers(0, 5, N)
    y = df.a + 2.0 * (df.e == 7) + df.f
    if library == "xgboost":
        dm = xgb.DMatrix(df, y, enable_categorical=True)
        explainer = distshap.TreeExplainer(xgb.train({"max_depth": 3}, dm, 4))
    else:
        lgb = pytest.importorskip("lightgbm")
        params = {"verbose": -1, "min_data_in_leaf": 5}
        explainer = distshap.TreeExplainer(lgb.train(params, lgb.Dataset(df, y), 4))
    expected = explainer.shap_values(df.iloc[:6])
    assert np.array_equal(np.stack([explainer.shap_values(df.iloc[i]) for i in range(6)]), expected)


def test_empty_list(numeric):
    explainer, _ = numeric
    with pytest.raises(ValueError, match="X is empty"):
        explainer.shap_values([])
    with pytest.raises(ValueError, match=r"data \(the background\) is empty"):
        distshap.TreeExplainer(explainer.ensemble, [])
