"""Every kernel against the float64 oracles of tests/naive.py, on hand-built and random trees."""

from __future__ import annotations

import numpy as np
import pytest

from distshap.kernels import get_backend
from distshap.packed import build_packed_model
from distshap.paths import extract_paths

import naive
import tiny
from conftest import to_host

BUDGETS = {"dp-only": 0, "tables": 1 << 30}


def _run(ens, X, backend, budget, interactions=False):
    packed = build_packed_model(extract_paths(ens), table_budget_bytes=budget)
    kernels = get_backend(backend)
    fn = kernels.interaction_values if interactions else kernels.shap_values
    return to_host(fn(packed, X)).astype(np.float64)


def _scale(ref: np.ndarray) -> float:
    return max(1.0, float(np.abs(ref).max()))


@pytest.mark.parametrize("budget", BUDGETS.values(), ids=BUDGETS.keys())
@pytest.mark.parametrize("name", sorted(tiny.tiny_ensembles()))
def test_tiny_shap_matches_brute_force(name, budget, backend):
    ens = tiny.tiny_ensembles()[name]
    X = tiny.random_rows(1, ens, 25, 0.2)
    got = _run(ens, X, backend, budget)
    ref = naive.brute_force_shap_rows(ens, X).reshape(got.shape)
    np.testing.assert_allclose(got, ref, atol=1e-6 * _scale(ref), rtol=0)


@pytest.mark.parametrize("name", sorted(tiny.tiny_ensembles()))
def test_tiny_interactions_match_brute_force(name, backend):
    ens = tiny.tiny_ensembles()[name]
    X = tiny.random_rows(2, ens, 15, 0.2)
    got = _run(ens, X, backend, 0, interactions=True)
    ref = naive.brute_force_interactions_rows(ens, X).reshape(got.shape)
    np.testing.assert_allclose(got, ref, atol=1e-6 * _scale(ref), rtol=0)


@pytest.mark.parametrize("budget", BUDGETS.values(), ids=BUDGETS.keys())
@pytest.mark.parametrize("seed", range(4))
def test_random_ensembles_match_recursive_treeshap(seed, budget, backend):
    ens = tiny.random_ensemble(seed, n_features=7, n_trees=6, depth=5, n_groups=1 + seed % 3)
    X = tiny.random_rows(seed, ens, 40, 0.1)
    got = _run(ens, X, backend, budget)
    ref = naive.treeshap_recursive_rows(ens, X).reshape(got.shape)
    np.testing.assert_allclose(got, ref, atol=2e-6 * _scale(ref), rtol=0)
    margin = naive.predict_margin(ens, X)
    np.testing.assert_allclose(got.sum(axis=-1), margin, atol=1e-5 * _scale(margin), rtol=0)


@pytest.mark.parametrize("seed", range(3))
def test_random_interactions_match_brute_force(seed, backend):
    ens = tiny.random_ensemble(seed, n_features=5, n_trees=4, depth=4, n_groups=1 + seed % 2)
    X = tiny.random_rows(seed, ens, 12, 0.1)
    got = _run(ens, X, backend, 0, interactions=True)
    ref = naive.brute_force_interactions_rows(ens, X).reshape(got.shape)
    np.testing.assert_allclose(got, ref, atol=2e-6 * _scale(ref), rtol=0)


def test_table_and_dp_agree_bitwise_close():
    ens = tiny.random_ensemble(11, n_features=8, n_trees=10, depth=6, n_groups=2)
    X = tiny.random_rows(11, ens, 200, 0.05)
    dp = _run(ens, X, "cpu", 0)
    tab = _run(ens, X, "cpu", 1 << 30)
    np.testing.assert_allclose(dp, tab, atol=1e-6 * _scale(dp), rtol=0)


def _chain(n: int, seed: int):
    """A chain tree splitting on ``n`` distinct features: its deepest path has ``n`` features."""
    from tiny import Leaf, Split, build_ensemble

    rng = np.random.default_rng(seed)
    node = Leaf(1.5)
    for f in reversed(range(n)):
        node = Split(f, 0.5, Leaf(float(rng.normal())), node)
    X = rng.random((20, n)).astype(np.float32) * 0.2 + 0.45
    return build_ensemble([node], num_features=n), X


def test_path_longer_than_a_warp():
    ens, X = _chain(40, 5)
    got = _run(ens, X, "cpu", 1 << 30)
    ref = naive.treeshap_recursive_rows(ens, X).reshape(got.shape)
    np.testing.assert_allclose(got, ref, atol=1e-6 * _scale(ref), rtol=0)


def test_path_longer_than_a_bit_mask():
    """70 features: lanes are tested per row. UNWIND loses float64 accuracy on paths this long
    (the recursive oracle itself misses additivity by ~1e-2 here), so only additivity is
    checked, at a tolerance that still catches wrong one-fractions."""
    ens, X = _chain(70, 5)
    got = _run(ens, X, "cpu", 0)
    margin = naive.predict_margin(ens, X)
    np.testing.assert_allclose(got.sum(axis=-1), margin, atol=0.1, rtol=0)
    assert np.abs(got).max() < 10


def test_infinite_and_huge_values_follow_the_open_branches(backend):
    """+inf (and float64 values beyond float32's range, which become inf) go right of every
    numeric split, -inf left, as the float32 comparison ``x < threshold`` says."""
    ens = tiny.random_ensemble(3, n_features=5, n_trees=5, depth=4, n_groups=1)
    X = tiny.random_rows(3, ens, 30, 0.0).astype(np.float64)
    X[::3, 0] = np.inf
    X[1::3, 1] = -np.inf
    X[2::3, 2] = 1e39
    got = _run(ens, X.astype(np.float32), backend, 1 << 30)
    margin = naive.predict_margin(ens, X)
    np.testing.assert_allclose(got.sum(axis=-1), margin, atol=1e-5 * _scale(margin), rtol=0)
    ref = naive.treeshap_recursive_rows(ens, X.astype(np.float32)).reshape(got.shape)
    np.testing.assert_allclose(got, ref, atol=1e-6 * _scale(ref), rtol=0)
