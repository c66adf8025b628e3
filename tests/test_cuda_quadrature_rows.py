"""Rows a thread of the SHAP quadrature kernels (``shap_quadrature_rows``): the bits do not
depend on it (the sums are integers), and a bad value is refused in one line."""

from __future__ import annotations

import numpy as np
import pytest

from distshap.kernels import cuda_available
from distshap.plan.config import config_context


def test_rows_a_thread_is_checked():
    from distshap.kernels.cuda.shap_quadrature import _rows_a_thread

    assert _rows_a_thread() == 2
    with config_context(shap_quadrature_rows=1):
        assert _rows_a_thread() == 1
    with config_context(shap_quadrature_rows=3), pytest.raises(ValueError, match="1 or 2"):
        _rows_a_thread()


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="no CUDA GPU visible (run on the GPU host)")
@pytest.mark.parametrize("features", [9, 40])  # a column per feature; chunk-local tiles
def test_gpu_one_row_a_thread_gives_the_same_bits(features):
    import xgboost as xgb

    from distshap import TreeExplainer

    rng = np.random.default_rng(features)
    X = rng.normal(size=(3000, features)).astype(np.float32)
    X[rng.random(X.shape) < 0.05] = np.nan
    y = np.nan_to_num(X[:, 0]) * 2 + np.nan_to_num(X[:, 3]) * np.nan_to_num(X[:, 5])
    booster = xgb.train({"max_depth": 8, "eta": 0.1}, xgb.DMatrix(X, label=y),
                        num_boost_round=80)  # fmt: skip
    out = {}
    for rows in (2, 1):
        with config_context(shap_quadrature_rows=rows):
            explainer = TreeExplainer(booster, layout="xgboost", backend="cuda")
            out[rows] = [explainer.shap_values(X[:n]) for n in (5, 3000)]
    for a, b in zip(out[2], out[1], strict=True):
        assert np.array_equal(a.view(np.uint8), b.view(np.uint8))
