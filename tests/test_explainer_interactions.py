"""TreeExplainer's interaction methods beyond shap's: top pairs, data-set summary, Shapley-Taylor.

The kernels behind them are tested in ``test_pair_interactions.py`` and ``test_taylor.py``;
here the public methods: layouts (one group squeezed, one row without the row axis), equality
with the full interaction matrices, and the refusal on an interventional explainer.
"""

from __future__ import annotations

import numpy as np
import pytest

import distshap

xgb = pytest.importorskip("xgboost")


@pytest.fixture(scope="module")
def model():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(300, 6)).astype(np.float32)
    X[rng.random(X.shape) < 0.05] = np.nan
    y = np.nan_to_num(X[:, 0] * X[:, 1] + X[:, 2] - X[:, 3] * X[:, 4])
    booster = xgb.train({"max_depth": 4, "eta": 0.3}, xgb.DMatrix(X, label=y), 20)
    return booster, X


def _sorted_upper(matrix: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top ``k`` pairs of a full matrix's upper triangle: |value| down, then (i, j) up."""
    F = matrix.shape[0] - 1
    i, j = np.triu_indices(F, 1)
    values = matrix[i, j]
    order = np.lexsort((j, i, -np.abs(values)))[:k]
    return np.stack([i[order], j[order]], axis=1), values[order]


def test_top_interactions_equal_the_sorted_full_matrix(model):
    booster, X = model
    explainer = distshap.TreeExplainer(booster, layout="xgboost", backend="cpu")
    pairs, values = explainer.top_interactions(X[:40], k=4)
    assert pairs.shape == (40, 4, 2) and values.shape == (40, 4)
    full = explainer.shap_interaction_values(X[:40])
    for r in range(40):
        expected_pairs, expected_values = _sorted_upper(full[r], 4)
        np.testing.assert_array_equal(pairs[r], expected_pairs)
        np.testing.assert_array_equal(values[r], expected_values)
    one_pairs, one_values = explainer.top_interactions(X[7], k=4)
    np.testing.assert_array_equal(one_pairs, pairs[7])
    np.testing.assert_array_equal(one_values, values[7])


def test_interaction_summary_is_the_mean_of_the_full_matrices(model):
    booster, X = model
    explainer = distshap.TreeExplainer(booster, layout="xgboost", backend="cpu")
    full = explainer.shap_interaction_values(X[:60]).astype(np.float64)
    summary = explainer.interaction_summary(X[:60])
    assert summary.shape == (7, 7)
    scale = np.abs(full).max()
    # the mirror [j, i] holds the upper entry's mean: compare the upper triangle and diagonal
    upper = np.triu(np.ones((7, 7), bool))
    np.testing.assert_allclose(summary[upper], np.abs(full).mean(0)[upper], atol=1e-6 * scale)
    signed = explainer.interaction_summary(X[:60], signed=True)
    np.testing.assert_allclose(signed[upper], full.mean(0)[upper], atol=1e-6 * scale)


def test_shapley_taylor_sums_to_the_margin(model):
    booster, X = model
    explainer = distshap.TreeExplainer(booster, backend="cpu")
    taylor = explainer.shap_taylor_interaction_values(X[:20])
    assert taylor.shape == (20, 7, 7)
    margin = booster.predict(xgb.DMatrix(X[:20]), output_margin=True)
    np.testing.assert_allclose(taylor.sum(axis=(1, 2)), margin, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(taylor, np.swapaxes(taylor, 1, 2))
    assert taylor[0, 6, 6] == pytest.approx(explainer.expected_value, rel=1e-6)
    np.testing.assert_array_equal(explainer.shap_taylor_interaction_values(X[3]), taylor[3])


def test_interventional_explainers_refuse_them(model):
    booster, X = model
    explainer = distshap.TreeExplainer(booster, X[:20], backend="cpu")
    for call in (
        explainer.top_interactions,
        explainer.interaction_summary,
        explainer.shap_taylor_interaction_values,
    ):
        with pytest.raises(ValueError, match="tree-path-dependent"):
            call(X[:3])


def test_no_rows_are_refused_as_by_shap_values(model):
    booster, X = model
    explainer = distshap.TreeExplainer(booster, backend="cpu")
    for call in (
        explainer.shap_values,
        explainer.top_interactions,
        explainer.interaction_summary,
        explainer.shap_taylor_interaction_values,
    ):
        with pytest.raises(ValueError, match="no rows"):
            call(X[:0])
