"""The order-2 Shapley-Taylor interaction index: oracles, CPU kernel, GPU kernel, entry point.

* The brute-force oracle (``naive.brute_force_taylor``, the definition by subset enumeration)
  and the per-path closed form (``naive.taylor_path_formula``, Beta integrals, no quadrature)
  agree, and satisfy efficiency: this checks the derivation the kernels implement.
* The CPU kernel against both oracles on hand-built, random and XGBoost models (regression,
  multiclass, missing values, categorical splits, DART), paths longer than a warp, zero and tiny
  zero fractions; the axioms (efficiency, symmetry, dummy, main effects = ``v({i}) - v(∅)``).
* The GPU kernel under the CUDA simulator (a subprocess, as in ``test_cuda.py``) against the
  CPU kernel, and ``gpu``-marked tests on real hardware.
* :func:`distshap.taylor.shap_taylor_values`: input preparation, additivity check, errors.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from distshap import TreeExplainer
from distshap.additivity_rule import AdditivityError
from distshap.kernels import cuda_available, taylor_cpu
from distshap.models import load_model
from distshap.packed import build_packed_model
from distshap.paths import extract_paths
from distshap.taylor import shap_taylor_values
from distshap.warmup import chain_ensemble

import naive
import tiny
import xgb_models
from conftest import to_host
from cudasim import assert_simulator_ok, nvvm_available
from tiny import Leaf, Split, build_ensemble

TINY = tiny.tiny_ensembles()


def _cpu(ens, X):
    packed = build_packed_model(extract_paths(ens))
    return taylor_cpu.taylor_values(packed, np.asarray(X, np.float32)).astype(np.float64)


def _tol(ref: np.ndarray) -> float:
    """float32 outputs: a few ulps of the largest entry."""
    return 2e-7 * max(1.0, float(np.abs(ref).max()))


def _random(seed: int, **kw):
    args = dict(n_features=6, n_trees=4, depth=4, n_groups=1 + seed % 3, n_categorical=seed % 2)
    args.update(kw)
    ens = tiny.random_ensemble(seed, **args)
    return ens, tiny.random_rows(seed, ens, 12, 0.15)


# ------------------------------------------------------------------------------------------
# the oracles
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(4))
def test_oracles_agree_and_are_efficient(seed):
    ens, X = _random(seed)
    brute = naive.brute_force_taylor_rows(ens, X)
    formula = naive.taylor_path_formula_rows(ens, X)
    np.testing.assert_allclose(formula, brute, atol=1e-12, rtol=0)
    np.testing.assert_allclose(
        brute.sum(axis=(2, 3)), naive.predict_margin(ens, X), atol=1e-12, rtol=0
    )


def test_oracle_pair_weights_are_the_definition():
    """Three players, one row: the pair index against the definition written out by hand,
    ``I_ij = (2 / 3) (delta_ij(∅) / C(2, 0) + delta_ij({k}) / C(2, 1))``."""
    ens = tiny.random_ensemble(7, n_features=3, n_trees=3, depth=3)
    x = tiny.random_rows(7, ens, 1, 0.0)[0]
    players = naive.used_features(ens)
    assert players == [0, 1, 2]
    v = naive.subset_values(ens, x, players)[0]  # bit b: player b in S
    got = naive.brute_force_taylor(ens, x)[0]
    for i, j, k in ((0, 1, 2), (0, 2, 1), (1, 2, 0)):
        bi, bj, bk = 1 << i, 1 << j, 1 << k
        d0 = v[bi | bj] - v[bi] - v[bj] + v[0]
        dk = v[bi | bj | bk] - v[bi | bk] - v[bj | bk] + v[bk]
        pair = (2.0 / 3.0) * (d0 + dk / 2.0)
        assert got[i, j] == pytest.approx(pair / 2.0, abs=1e-14)
        assert got[j, i] == got[i, j]
        assert got[i, i] == pytest.approx(v[bi] - v[0], abs=1e-14)


# ------------------------------------------------------------------------------------------
# CPU kernel against the oracles
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(TINY))
def test_cpu_tiny_models_match_brute_force(name):
    ens = TINY[name]
    X = tiny.random_rows(1, ens, 20, 0.2)
    got = _cpu(ens, X)
    ref = naive.brute_force_taylor_rows(ens, X)
    np.testing.assert_allclose(got, ref, atol=_tol(ref), rtol=0)


@pytest.mark.parametrize("seed", range(6))
def test_cpu_random_models_match_brute_force(seed):
    """Regression and multiclass (1-3 groups), categorical features, NaNs, repeated features."""
    ens, X = _random(seed, n_features=7, n_trees=5, depth=5)
    got = _cpu(ens, X)
    ref = naive.brute_force_taylor_rows(ens, X)
    np.testing.assert_allclose(got, ref, atol=_tol(ref), rtol=0)


@pytest.mark.parametrize("kind", ["regression", "binary", "multiclass", "missing", "categorical",
                                  "dart"])  # fmt: skip
def test_cpu_xgboost_models_match_brute_force(kind):
    booster, X = xgb_models.MODEL_KINDS[kind]()
    X = X[:20]
    packed = TreeExplainer(booster, backend="cpu").packed
    got = shap_taylor_values(packed, X, backend="cpu").astype(np.float64)
    ens = load_model(booster)
    rows = xgb_models.as_array(X)
    ref = naive.brute_force_taylor_rows(ens, rows)
    np.testing.assert_allclose(got, ref, atol=_tol(ref), rtol=0)
    # efficiency against XGBoost's own margin
    margin = booster.predict(xgb_models.dmatrix(X), output_margin=True).reshape(len(rows), -1)
    np.testing.assert_allclose(got.sum(axis=(2, 3)), margin, atol=1e-5, rtol=0)


def test_cpu_paths_longer_than_a_warp_match_the_path_formula():
    """A chain of 33 features: one path per length 1..33, the longest in an oversize bin and
    integrated with 17 nodes."""
    ens = chain_ensemble(33, 33)
    X = np.full((2, 33), 0.25, np.float32)
    X[0, 5] = 0.75
    X[1, 30] = np.nan
    X[1, 12] = 0.9
    got = _cpu(ens, X[:1])
    ref = naive.taylor_path_formula_rows(ens, X[:1])
    np.testing.assert_allclose(got, ref, atol=_tol(ref), rtol=0)
    got = _cpu(ens, X)
    np.testing.assert_allclose(
        got.sum(axis=(2, 3)), naive.predict_margin(ens, X), atol=1e-6, rtol=0
    )


def test_cpu_very_long_paths_are_efficient():
    ens = chain_ensemble(70, 70)
    rng = np.random.default_rng(0)
    X = np.where(rng.random((6, 70)) < 0.9, 0.25, 0.75).astype(np.float32)
    got = _cpu(ens, X)
    np.testing.assert_allclose(
        got.sum(axis=(2, 3)), naive.predict_margin(ens, X), atol=1e-6, rtol=0
    )
    assert np.isfinite(got).all() and np.abs(got).max() < 10


def _tiny_cover_tree(cover: float) -> object:
    """Feature 0's left branch has cover ``cover`` (zero fraction ~``cover / 10``) above splits on
    features 1 and 2: rows going right at feature 0 take an element with o = 0 and a zero
    fraction of 0 or nearly so, whose pairs with features 1 and 2 are all that is left."""
    left = Split(1, 0.5, Split(2, 0.5, Leaf(3.0, cover / 2), Leaf(-1.0, cover / 4)),
                 Leaf(0.5, cover / 4))  # fmt: skip
    right = Split(1, 0.5, Leaf(1.0, 5.0), Split(2, 0.5, Leaf(-2.0, 2.0), Leaf(0.7, 3.0)))
    return build_ensemble([Split(0, 0.5, left, right, cover=10.0 + cover)], num_features=3)


@pytest.mark.parametrize("cover", [0.0, 1e-250, 1e-6])
def test_cpu_zero_and_tiny_zero_fractions(cover):
    ens = _tiny_cover_tree(cover)
    X = np.array([[0.75, 0.25, 0.25], [0.75, 0.75, 0.25], [0.25, 0.25, 0.75]], np.float32)
    got = _cpu(ens, X)
    ref = naive.taylor_path_formula_rows(ens, X)
    np.testing.assert_allclose(got, ref, atol=_tol(ref), rtol=0)
    np.testing.assert_allclose(got, naive.brute_force_taylor_rows(ens, X), atol=_tol(ref), rtol=0)
    if cover == 1e-250:  # the pair of features 1, 2 on the left path: ~v * d1 * d2 / 3
        assert abs(got[0, 0, 1, 2]) > 0.1


def test_zero_cover_subtree():
    ens = tiny.zero_cover_subtree()
    X = tiny.random_rows(3, ens, 20, 0.2)
    got = _cpu(ens, X)
    ref = naive.brute_force_taylor_rows(ens, X)
    np.testing.assert_allclose(got, ref, atol=_tol(ref), rtol=0)


# ------------------------------------------------------------------------------------------
# axioms
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(3))
def test_efficiency_per_row(seed):
    ens, X = _random(seed, n_features=8, n_trees=10, depth=6)
    got = _cpu(ens, X)
    np.testing.assert_allclose(
        got.sum(axis=(2, 3)), naive.predict_margin(ens, X), atol=2e-6, rtol=0
    )


def test_symmetric_features_get_equal_indices():
    """Features 0 and 1 play the same trees (with feature 2) and the row has x0 = x1: the game
    is symmetric in 0 and 1, so are their main effects and their pairs with feature 2."""

    def tree(f):
        return Split(f, 0.5, Split(2, 0.3, Leaf(1.0, 3.0), Leaf(-2.0, 5.0)), Leaf(0.5, 4.0))

    ens = build_ensemble([tree(0), tree(1)], num_features=3)
    X = np.array([[0.25, 0.25, 0.1], [0.75, 0.75, 0.6], [0.25, 0.25, 0.6]], np.float32)
    got = _cpu(ens, X)[:, 0]
    assert np.abs(got[:, 0, 0] - got[:, 1, 1]).max() == 0.0
    assert np.abs(got[:, 0, 2] - got[:, 1, 2]).max() == 0.0
    assert np.abs(got).max() > 0.1
    assert np.abs(got[:, 0, 2]).min() > 1e-3  # there is an interaction to compare


def test_dummy_features_get_zeros():
    """Features the model never splits on get zero rows and columns, and the oracle does not
    change when they are added as players."""
    ens = tiny.random_ensemble(4, n_features=8, n_trees=3, depth=3)
    unused = sorted(set(range(8)) - set(naive.used_features(ens)))
    assert unused, "the test needs an unused feature"
    X = tiny.random_rows(4, ens, 10, 0.1)
    got = _cpu(ens, X)
    assert np.all(got[:, :, unused, :] == 0) and np.all(got[:, :, :, unused] == 0)
    ref = naive.brute_force_taylor_rows(ens, X)
    every = np.stack([naive.brute_force_taylor(ens, x, features=range(8)) for x in X])
    np.testing.assert_allclose(every, ref, atol=1e-12, rtol=0)
    np.testing.assert_allclose(got, ref, atol=_tol(ref), rtol=0)
    stump = TINY["stump"]  # feature 1 declared, never used
    got = _cpu(stump, tiny.random_rows(2, stump, 5, 0.2))
    assert np.all(got[:, :, 1, :] == 0) and np.all(got[:, :, :, 1] == 0)


@pytest.mark.parametrize("seed", range(3))
def test_main_effects_are_discrete_derivatives_at_the_empty_set(seed):
    """Diagonal = ``v({i}) - v(∅)``, bias = ``v(∅)`` + base score, from the oracle's game."""
    ens, X = _random(seed)
    got = _cpu(ens, X)
    players = naive.used_features(ens)
    F = ens.num_features
    for r, x in enumerate(X):
        v = naive.subset_values(ens, x, players)
        for a, f in enumerate(players):
            np.testing.assert_allclose(got[r, :, f, f], v[:, 1 << a] - v[:, 0], atol=2e-7)
        np.testing.assert_allclose(got[r, :, F, F], v[:, 0] + ens.base_score, atol=2e-7)
        assert np.all(got[r, :, F, :F] == 0) and np.all(got[r, :, :F, F] == 0)
    assert np.array_equal(got, got.transpose(0, 1, 3, 2))  # pairs split equally


def test_differs_from_shap_interaction_values_but_sums_alike():
    """Not the SHAP interaction values (other axioms) though both split the same margin."""
    from distshap.kernels import cpu

    ens, X = _random(1)
    packed = build_packed_model(extract_paths(ens))
    taylor = taylor_cpu.taylor_values(packed, X).astype(np.float64)
    inter = cpu.interaction_values(packed, X).astype(np.float64)
    np.testing.assert_allclose(taylor.sum(axis=(2, 3)), inter.sum(axis=(2, 3)), atol=2e-6)
    assert np.abs(taylor - inter).max() > 1e-2


# ------------------------------------------------------------------------------------------
# the entry point
# ------------------------------------------------------------------------------------------


def test_entry_point_checks_additivity(monkeypatch):
    import distshap.taylor as taylor_module

    booster, X = xgb_models.build_regression()
    packed = TreeExplainer(booster, backend="cpu").packed
    good = shap_taylor_values(packed, X[:5], backend="cpu")
    assert good.shape == (5, 1, 7, 7) and good.dtype == np.float32

    def wrong(packed, rows):
        out = taylor_cpu.taylor_values(packed, rows)
        out[2, 0, 0, 1] += 0.5
        return out

    monkeypatch.setattr(taylor_module, "_kernel", lambda backend: wrong)
    with pytest.raises(AdditivityError, match=r"Shapley-Taylor values of 1 of 5 rows"):
        shap_taylor_values(packed, X[:5], backend="cpu")
    bad = shap_taylor_values(packed, X[:5], backend="cpu", check=False)
    assert bad[2, 0, 0, 1] == good[2, 0, 0, 1] + np.float32(0.5)


def test_entry_point_refuses_bad_input():
    booster, X = xgb_models.build_regression()
    packed = TreeExplainer(booster, backend="cpu").packed
    with pytest.raises(ValueError, match="features but the model expects 6"):
        shap_taylor_values(packed, X[:3, :4], backend="cpu")
    with pytest.raises(ValueError, match="unknown backend"):
        shap_taylor_values(packed, X[:3], backend="gpu")
    with pytest.raises(TypeError, match="expected a PackedModel"):
        shap_taylor_values(booster, X[:3])
    with pytest.raises(ValueError, match="no rows"):
        shap_taylor_values(packed, X[:0], backend="cpu")
    empty = shap_taylor_values(packed, X[:0], backend="cpu", allow_empty=True)
    assert empty.shape == (0, 1, 7, 7)


def test_gauss_legendre_table_is_exact_for_path_polynomials():
    nodes, weights = taylor_cpu.gauss_legendre_table(6)
    rng = np.random.default_rng(0)
    for k in range(1, 13):
        n = taylor_cpu.node_count(k)
        base = n * (n - 1) // 2
        t, w = nodes[base : base + n], weights[base : base + n]
        coef = rng.normal(size=k)  # degree k - 1, the pair polynomial of a k-feature path
        exact = float(np.sum(coef / np.arange(1, k + 1)))
        assert float(w @ np.polynomial.polynomial.polyval(t, coef)) == pytest.approx(exact, 1e-13)


# ------------------------------------------------------------------------------------------
# GPU kernel under the CUDA simulator
# ------------------------------------------------------------------------------------------

_SIM_SCRIPT = r"""
import numpy as np
from tiny import Leaf, Split, build_ensemble
import tiny
from distshap.kernels import taylor_cpu
from distshap.kernels.cuda import taylor as kt
from distshap.packed import build_packed_model
from distshap.paths import extract_paths
from distshap.warmup import chain_ensemble
# TINY_COVER_TREE

def check(ens, X, batch_rows=None):
    packed = build_packed_model(extract_paths(ens))
    got = kt.taylor_values(packed, X, batch_rows=batch_rows)
    ref = taylor_cpu.taylor_values(packed, X)
    assert isinstance(got, np.ndarray) and got.dtype == np.float32 and got.shape == ref.shape
    err = float(np.abs(got.astype(np.float64) - ref).max())
    assert err <= 2e-7 * max(1.0, float(np.abs(ref).max())), err
    return got

ens = tiny.random_ensemble(3, n_features=6, n_trees=3, depth=3, n_groups=2, n_categorical=1)
X = tiny.random_rows(2, ens, 3, 0.15)
a = check(ens, X)
assert np.array_equal(a, check(ens, X, batch_rows=2)), "batching changed the bits"
assert np.array_equal(a, check(ens, X, batch_rows=1)), "batching changed the bits"
for ens in (tiny.categorical_tree(), tiny.nan_default_tree(), tiny.repeated_feature_tree(),
            tiny.multiclass_ensemble(), tiny.zero_cover_tree(), tiny.zero_cover_subtree()):
    check(ens, tiny.random_rows(4, ens, 4, 0.2))
Xz = np.array([[0.75, 0.25, 0.25], [0.25, 0.25, 0.75]], np.float32)
for cover in (0.0, 1e-250):
    check(_tiny_cover_tree(cover), Xz)
kt._DIVIDE_MIN = 2.0  # every pair through the direct product: the same values
check(tiny.random_ensemble(5, n_features=5, n_trees=2, depth=4), X[:, :5])
kt._DIVIDE_MIN = 1e-200
# a path longer than a warp (oversize bin): 17 nodes
Xc = np.full((1, 33), 0.25, np.float32)
Xc[0, 5] = 0.75
check(chain_ensemble(33, 33), Xc)
print("SIMULATOR-OK")
""".replace("# TINY_COVER_TREE", inspect.getsource(_tiny_cover_tree))


def test_gpu_kernel_under_cuda_simulator():
    """The real GPU kernel code in Numba's CUDA simulator (no GPU) against the CPU kernel."""
    assert_simulator_ok(_SIM_SCRIPT, timeout=600)


# ------------------------------------------------------------------------------------------
# GPU (real hardware)
# ------------------------------------------------------------------------------------------

requires_gpu = pytest.mark.skipif(
    not cuda_available(), reason="no CUDA GPU visible (run on the GPU host)"
)


def _gpu(packed, X, batch_rows=None):
    from distshap.kernels.cuda import taylor as kt

    return to_host(kt.taylor_values(packed, X, batch_rows=batch_rows))


@pytest.mark.gpu
@requires_gpu
@pytest.mark.parametrize("seed", range(4))
def test_gpu_matches_cpu(seed):
    ens, _ = _random(seed, n_features=8, n_trees=12, depth=6)
    X = tiny.random_rows(seed, ens, 300, 0.1)
    packed = build_packed_model(extract_paths(ens))
    got = _gpu(packed, X).astype(np.float64)
    ref = taylor_cpu.taylor_values(packed, X).astype(np.float64)
    np.testing.assert_allclose(got, ref, atol=_tol(ref), rtol=0)


@pytest.mark.gpu
@requires_gpu
def test_gpu_matches_brute_force_and_long_paths():
    for name, ens in TINY.items():
        X = tiny.random_rows(1, ens, 20, 0.2)
        got = _gpu(build_packed_model(extract_paths(ens)), X).astype(np.float64)
        ref = naive.brute_force_taylor_rows(ens, X)
        np.testing.assert_allclose(got, ref, atol=_tol(ref), rtol=0, err_msg=name)
    ens = chain_ensemble(60, 60)  # oversize paths, 30 nodes
    rng = np.random.default_rng(1)
    X = np.where(rng.random((50, 60)) < 0.9, 0.25, 0.75).astype(np.float32)
    packed = build_packed_model(extract_paths(ens))
    got = _gpu(packed, X).astype(np.float64)
    ref = taylor_cpu.taylor_values(packed, X).astype(np.float64)
    np.testing.assert_allclose(got, ref, atol=_tol(ref), rtol=0)


@pytest.mark.gpu
@requires_gpu
def test_gpu_deterministic_and_batch_invariant():
    ens, _ = _random(2, n_features=8, n_trees=20, depth=6)
    X = tiny.random_rows(2, ens, 1000, 0.1)
    packed = build_packed_model(extract_paths(ens))
    a = _gpu(packed, X)
    assert np.array_equal(a, _gpu(packed, X))
    assert np.array_equal(a, _gpu(packed, X, batch_rows=97))


@pytest.mark.gpu
@requires_gpu
@pytest.mark.parametrize("kind", ["multiclass", "categorical", "missing"])
def test_gpu_entry_point_cupy_in_cupy_out(kind):
    import cupy

    booster, X = xgb_models.MODEL_KINDS[kind]()
    packed = TreeExplainer(booster, backend="cuda").packed
    rows = xgb_models.as_array(X)
    cpu = shap_taylor_values(packed, X, backend="cpu")
    host = shap_taylor_values(packed, X, backend="cuda")
    assert isinstance(host, np.ndarray)
    np.testing.assert_allclose(host, cpu, atol=_tol(cpu), rtol=0)
    dev = shap_taylor_values(packed, cupy.asarray(rows), backend="auto")
    assert isinstance(dev, cupy.ndarray)
    assert np.array_equal(dev.get(), shap_taylor_values(packed, rows, backend="cuda"))


@pytest.mark.skipif(not nvvm_available(), reason="NVVM (CUDA toolkit compiler) not found")
def test_gpu_kernel_compiles_to_ptx_with_integer_atomics_only():
    """The real compiler (the simulator runs Python: it would not catch typing errors)."""
    from numba import cuda

    from distshap.kernels.cuda.runtime.ptx import _device_free_compilation
    from distshap.kernels.cuda.taylor import taylor_kernel
    from distshap.plan.config import get_config

    sig = (
        "void(float32[:, ::1], int32[:, ::1], int64[::1], float64[:, ::1], uint32[::1], "
        "int64[::1], float64[::1], float64[::1], int64, float32[:, ::1], int64[:, ::1], float64, "
        "int64)"
    )
    with _device_free_compilation((9, 0)):
        kernel = taylor_kernel(get_config().max_fallback_features)
        ptx, _ = cuda.compile_ptx(kernel.py_func, sig, cc=(9, 0))
    assert "atom.global.add.u64" in ptx
    assert "atom.global.add.f32" not in ptx and "atom.global.add.f64" not in ptx
