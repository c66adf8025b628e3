"""The public surface: shapes, expected_value, and clear errors for bad input."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import distshap
from distshap import TreeExplainer, UnsupportedModelError

from xgb_models import MODEL_KINDS


@pytest.fixture(scope="module")
def regression():
    booster, X = MODEL_KINDS["regression"]()
    return TreeExplainer(booster, backend="cpu"), X


def test_import_does_not_touch_cuda():
    import subprocess
    import sys

    code = (
        "import sys, distshap; "
        "bad = [m for m in sys.modules if m.startswith(('numba.cuda', 'cupy', 'dask_cuda'))]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_shapes_and_expected_value():
    booster, X = MODEL_KINDS["multiclass"]()
    explainer = TreeExplainer(booster, backend="cpu")
    assert explainer.shap_values(X).shape == (len(X), X.shape[1], 3)  # shap's layout
    assert explainer.expected_value.shape == (3,)
    xgb_layout = TreeExplainer(booster, layout="xgboost", backend="cpu")
    assert xgb_layout.shap_values(X).shape == (len(X), 3, X.shape[1] + 1)
    booster, X = MODEL_KINDS["binary"]()
    explainer = TreeExplainer(booster, backend="cpu")
    assert explainer.shap_values(X).shape == (len(X), X.shape[1])
    assert TreeExplainer(booster, layout="xgboost").shap_values(X).shape == (len(X), X.shape[1] + 1)
    assert isinstance(explainer.expected_value, float)


def test_wrong_feature_count(regression):
    explainer, X = regression
    with pytest.raises(ValueError, match=f"{X.shape[1] + 1} features but the model expects"):
        explainer.shap_values(np.hstack([X, X[:, :1]]))


def test_one_dimensional_input(regression):
    # one row, as shap takes it: the output has no row axis
    explainer, X = regression
    np.testing.assert_array_equal(explainer.shap_values(X[0]), explainer.shap_values(X[:1])[0])
    with pytest.raises(ValueError, match="2-D"):
        explainer.shap_values(X[None])


def test_empty_input(regression):
    explainer, X = regression
    with pytest.raises(ValueError, match="no rows"):
        explainer.shap_values(X[:0])


def test_non_numeric_input(regression):
    explainer, X = regression
    with pytest.raises(TypeError, match="numeric"):
        explainer.shap_values(X.astype(str))
    frame = pd.DataFrame(X).astype({0: str})
    with pytest.raises(TypeError, match="column"):
        explainer.shap_values(frame)


def test_unknown_model_type():
    with pytest.raises(TypeError, match="cannot explain"):
        TreeExplainer(object())


def test_unknown_backend(regression):
    booster, _ = MODEL_KINDS["regression"]()
    with pytest.raises(ValueError, match="backend"):
        TreeExplainer(booster, backend="tpu")


def test_cupy_is_looked_up_once_a_process(monkeypatch):
    import importlib.util

    import distshap.kernels as kernels

    calls = []
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: calls.append(name) or real(name, *a))  # fmt: skip
    kernels._cupy_installed.cache_clear()
    try:
        first = kernels.cuda_available()
        assert kernels.cuda_available() == first and calls.count("cupy") == 1
    finally:
        kernels._cupy_installed.cache_clear()  # the next lookup unpatched


def test_missing_model_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        TreeExplainer(str(tmp_path / "nope.json"))


def test_gblinear_is_refused():
    import xgboost as xgb

    X = np.random.default_rng(0).normal(size=(50, 3)).astype(np.float32)
    booster = xgb.train({"booster": "gblinear"}, xgb.DMatrix(X, X[:, 0]), 2)
    with pytest.raises(UnsupportedModelError, match="gblinear"):
        TreeExplainer(booster)


def test_dataframe_columns_follow_model_names():
    import xgboost as xgb

    rng = np.random.default_rng(1)
    frame = pd.DataFrame(rng.normal(size=(200, 3)), columns=["a", "b", "c"]).astype(np.float32)
    booster = xgb.train({"max_depth": 3}, xgb.DMatrix(frame, frame["a"] * 2 + frame["c"]), 5)
    explainer = TreeExplainer(booster, backend="cpu")
    expected = explainer.shap_values(frame)
    assert np.array_equal(explainer.shap_values(frame[["c", "a", "b"]]), expected)
    with pytest.raises(ValueError, match="lacks the model's feature column"):
        explainer.shap_values(frame[["a", "b"]].assign(d=1.0))


def test_public_names():
    for name in distshap.__all__:
        assert getattr(distshap, name) is not None


def test_broken_tree_structure_is_refused():
    import dataclasses

    import tiny

    ens = tiny.repeated_feature_tree()
    out_of_range = ens.left.copy()
    out_of_range[0] = 10**6
    with pytest.raises(ValueError, match="outside"):
        TreeExplainer(dataclasses.replace(ens, left=out_of_range))
    shared = ens.right.copy()
    shared[0] = ens.left[0]  # two edges into one node
    with pytest.raises(ValueError, match="exactly one parent"):
        TreeExplainer(dataclasses.replace(ens, right=shared))


def test_result_too_large_for_memory_is_refused(regression, monkeypatch):
    import os

    explainer, X = regression
    monkeypatch.setattr(os, "sysconf", lambda name: 1 << 10 if name == "SC_PHYS_PAGES" else 4096)
    with pytest.raises(ValueError, match="half of this machine's"):
        explainer.shap_interaction_values(np.repeat(X, 100, axis=0))
