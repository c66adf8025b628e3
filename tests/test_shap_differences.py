"""benchmarks.shap_differences on one tiny model: it runs, its brute force is the definition,
and distshap agrees with it."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from benchmarks.shap_differences import _table, brute_interventional, compare

pytest.importorskip("sklearn")


def test_brute_force_is_additive_and_exact_on_an_additive_model():
    rng = np.random.default_rng(0)
    X, B = rng.random((3, 4)), rng.random((6, 4))
    coef = np.array([1.0, -2.0, 0.5, 3.0])
    values = brute_interventional(lambda Z: (Z @ coef)[:, None], X, B)
    expected = coef * (X - B.mean(axis=0))  # a linear model's interventional values
    assert np.allclose(values[:, 0, :-1], expected, atol=1e-12)
    assert np.allclose(values[:, 0, -1], (B @ coef).mean(), atol=1e-12)


def test_benchmark_runs_on_a_tiny_forest_and_distshap_matches_the_brute_force():
    with_shap = importlib.util.find_spec("shap") is not None
    rows = compare("random_forest", rows=2, background=4, n_trees=2, with_shap=with_shap)
    assert [r["setting"] for r in rows] == ["interventional", "path-dependent"]
    for r in rows:
        assert r["trees_predict_as_model"] < 1e-6
        assert r["distshap"] < 1e-6 and r["distshap_base"] < 1e-6
    assert "| random_forest | interventional | 5 | 1 |" in _table(rows)
