"""SHAP values on the GPU by pattern tables, mixed path by path with the quadrature kernels.

The SHAP :class:`~distshap.kernels.cuda.runtime.model.Plan` runs the regular paths that
``plan.gpu.shap_table_offsets`` gives a table in the table kernel (tables filled on the device),
the other regular paths in the quadrature kernels and oversize paths in the fallback kernel.

* host tests: which paths get a SHAP table, what :func:`strategy_stats` reports, the PTX of the
  new kernels (integer atomics only, warp votes, no spills);
* a CUDA-simulator run (subprocess, ``NUMBA_ENABLE_CUDASIM=1``): tables-only, quadrature-only
  and mixed plans against the float64 recursive oracle and XGBoost's ``pred_contribs``
  (multiclass, missing values, categorical), the same bits for any batching and accumulation,
  the device-filled tables equal to the CPU backend's;
* ``gpu``-marked tests of the same on a real GPU, on larger models.
"""

from __future__ import annotations

import numpy as np
import pytest

from distshap.kernels import cuda_available
from distshap.packed import build_packed_model
from distshap.paths import extract_paths
from distshap.plan import costs as plan_costs
from distshap.plan import geometry as plan_geometry
from distshap.plan import gpu as plan_gpu
from distshap.plan import tables as plan_tables
from distshap.plan.config import config_context
from distshap.warmup import chain_ensemble

import naive
import tiny
from conftest import to_host
from cudasim import assert_simulator_ok, nvvm_available


def _packed(ens, budget=1 << 30, max_features=12):
    return build_packed_model(
        extract_paths(ens), table_budget_bytes=budget, max_table_features=max_features
    )


def _km():
    from distshap.kernels.cuda.runtime import model

    return model


def _kc():
    from distshap.kernels import cuda as kc

    return kc


# ------------------------------------------------------------------------------------------
# no GPU needed
# ------------------------------------------------------------------------------------------


def test_shap_tables_follow_the_model_policy_on_regular_paths():
    packed = _packed(chain_ensemble(34, 34), max_features=20)  # paths of 1..34 features
    k = plan_tables.path_features(packed.path_offsets)
    _, regular = plan_tables.regular_paths(packed.bin_offsets, packed.path_offsets)
    offsets = plan_gpu.shap_table_offsets(packed)
    assert np.array_equal(offsets >= 0, regular & (k <= 20))  # none on oversize paths
    chosen = np.flatnonzero(offsets >= 0)
    sizes = (1 << k[chosen]) * k[chosen]
    assert np.array_equal(offsets[chosen], np.r_[0, np.cumsum(sizes)[:-1]])  # path order
    assert not (plan_gpu.shap_table_offsets(_packed(chain_ensemble(34, 34), budget=0)) >= 0).any()
    # a budget for part of the paths: the shortest first
    budget = 4 * int(sizes[k[chosen] <= 9].sum())
    small = plan_gpu.shap_table_offsets(_packed(chain_ensemble(34, 34), budget, 20)) >= 0
    assert np.array_equal(small, regular & (k <= 9))


def test_strategy_stats_report_the_shap_tables():
    ens = tiny.random_ensemble(6, n_features=8, n_trees=10, depth=5, n_groups=2)
    for budget in (0, 3000, 1 << 30):
        packed = _packed(ens, budget)
        st = plan_gpu.strategy_stats(packed)
        offsets = plan_gpu.shap_table_offsets(packed)
        k = plan_tables.path_features(packed.path_offsets)
        lanes = np.diff(packed.path_offsets)
        on = offsets >= 0
        assert st["shap_table_paths"] == int(on.sum())
        assert st["shap_table_lanes"] == int(lanes[on].sum())
        assert st["shap_table_bytes"] == 4 * int(((1 << k[on]) * k[on]).sum())
        assert st["shap_table_paths"] + st["quadrature_paths"] + st["oversize_paths"] == (
            packed.num_paths
        )
        plan = plan_gpu.plan_arrays(packed, offsets)
        assert plan["table_paths"] == st["shap_table_paths"]
        assert sum(q["paths"].size for q in plan["quadrature"]) == st["quadrature_paths"]
        if budget == 0:
            assert st["shap_table_paths"] == 0 and plan["n_table_bins"] == 0
        elif budget == 3000:
            assert 0 < st["shap_table_paths"] < packed.num_paths  # a mixed plan
        else:
            assert st["quadrature_paths"] == 0  # every path has at most 12 features


@pytest.mark.skipif(not nvvm_available(), reason="NVVM (CUDA toolkit compiler) not found")
def test_shap_table_kernels_ptx():
    from numba import cuda

    from distshap.kernels.cuda.runtime import ptx

    kernels = ptx._kernels()
    names = ("shap_table_kernel", "shap_table_shared_kernel", "fill_shap_tables_kernel")
    with ptx._device_free_compilation((9, 0)):
        text = {}
        for name in names:
            kernel, sig = kernels[name]
            text[name], _ = cuda.compile_ptx(kernel.py_func, sig, cc=(9, 0))
    for name, t in text.items():
        # determinism: integer atomics only
        assert "atom.global.add.f32" not in t and "atom.global.add.f64" not in t, name
        assert "atom.shared.add.f" not in t, name
    for name in names[:2]:
        assert "vote.sync" in text[name], name  # the ballot gathers the pattern
        assert "atom.global.add.u64" in text[name], name
        assert ".local" not in text[name], f"{name} spills to local memory"
        assert "call.uni" not in text[name], f"{name} has a non-inlined call"
        if "shared" in name:  # the tile as split uint32 words
            assert "atom.shared.add.u32" in text[name], name
    assert "atom." not in text["fill_shap_tables_kernel"]  # one thread writes each entry


# ------------------------------------------------------------------------------------------
# CUDA simulator
# ------------------------------------------------------------------------------------------

_SIM_SCRIPT = r"""
from distshap.plan import geometry as plan_geometry
from distshap.plan import gpu as plan_gpu
from distshap.plan import tables as plan_tables
import numpy as np
import naive
import tiny
import xgb_models
import distshap
from distshap.inputs import prepare_rows
from distshap.kernels import cpu, quadrature_cpu
from distshap.kernels import cuda as kc
from distshap.kernels.cuda.runtime import model as km
from distshap.packed import build_packed_model
from distshap.paths import extract_paths
from distshap.warmup import chain_ensemble

from distshap.plan.config import set_config

set_config(small_max_paths=0)  # the plans' kernels, not the one-launch route of small models

def packed_of(ens, budget):
    return build_packed_model(extract_paths(ens), table_budget_bytes=budget)

def mixed_budget(ens):
    # tables for the shorter half of the paths
    k = np.sort(plan_tables.path_features(packed_of(ens, 0).path_offsets))
    short = k[: k.size // 2]
    return 4 * int(((1 << short) * short).sum())

def bits(a):
    return np.ascontiguousarray(a).view(np.uint32)

def plans(ens):
    out = {}
    for name, budget in (("quadrature", 0), ("mixed", mixed_budget(ens)), ("tables", 1 << 30)):
        packed = packed_of(ens, budget)
        st = plan_gpu.strategy_stats(packed)
        if name == "quadrature":
            assert st["shap_table_paths"] == 0, st
        elif name == "mixed":
            assert 0 < st["shap_table_paths"] and 0 < st["quadrature_paths"], st
        else:
            assert st["quadrature_paths"] == 0 and st["shap_table_paths"], st
        out[name] = packed
    return out

def close(got, ref, tol, msg):
    err = float(np.abs(got.astype(np.float64) - ref).max())
    assert err <= tol * max(1.0, float(np.abs(ref).max())), (msg, err)

# 1. multiclass, categorical, missing values: every plan against the float64 oracle
ens = tiny.random_ensemble(4, n_features=7, n_trees=6, depth=4, n_groups=3, n_categorical=1)
X = tiny.random_rows(5, ens, 4, 0.2)
exact = naive.treeshap_recursive_rows(ens, X)
for name, packed in plans(ens).items():
    got = kc.shap_values(packed, X)
    assert got.dtype == np.float32 and got.shape == (4, 3, 8)
    close(got, exact.reshape(got.shape), 2e-6, name)
    close(got, cpu.shap_values(packed, X), 2e-6, name)
    plan = kc.device_model(packed).shap
    assert plan.per_pattern == "k"
    assert plan.table_paths == plan_gpu.strategy_stats(packed)["shap_table_paths"]
    assert bool(plan.n_table_bins) == (name != "quadrature")
    assert bool(plan.quadrature) == (name != "tables")
    if name == "quadrature":
        continue
    # the same bits for any batching
    assert np.array_equal(bits(got), bits(kc.shap_values(packed, X, batch_rows=3))), name
    if name == "tables":
        # the device-filled tables are the CPU backend's, bit for bit
        k = plan_tables.path_features(packed.path_offsets)
        offsets = plan_gpu.shap_table_offsets(packed)
        host = quadrature_cpu.fill_tables(packed.path_offsets, packed.zero_fraction,
                                          packed.path_value, offsets,
                                          plan_tables.table_values(k, offsets))
        assert plan.table_bytes == 4 * host.size
        assert np.array_equal(np.asarray(plan.tables)[: host.size], host)
        # shared tiles of 3 rows (two a block), and the table kernel adding globally
        set_config(tile_rows=3, min_tile_rows=1)
        assert np.array_equal(bits(got), bits(kc.shap_values(packed, X))), "small tiles"
        set_config(tile_rows=128, min_tile_rows=1 << 30)
        assert plan_geometry.shared_tile_rows(3 * 8) == 0
        assert np.array_equal(bits(got), bits(kc.shap_values(packed, X))), "global adds"
        set_config(min_tile_rows=8)

# 2. tables, quadrature and the fallback kernel in one plan: paths of 1 to 33 features
chain = chain_ensemble(33, 33)
packed = packed_of(chain, 1 << 30)
st = plan_gpu.strategy_stats(packed)
assert st["shap_table_paths"] and st["quadrature_paths"] and st["oversize_paths"], st
Xc = np.full((3, 33), 0.25, np.float32)
Xc[0, 3] = 0.75
Xc[1, 30] = np.nan
Xc[2, 8] = 0.75
got = kc.shap_values(packed, Xc)
close(got, naive.treeshap_recursive_rows(chain, Xc).reshape(got.shape), 2e-6, "chain")
assert np.array_equal(bits(got), bits(kc.shap_values(packed, Xc, batch_rows=2))), "chain batches"

# 3. XGBoost models against pred_contribs: mixed plans (tables for the shorter half)
for kind, n in (("multiclass", 4), ("missing", 6), ("categorical", 6)):
    booster, Xu = xgb_models.MODEL_KINDS[kind]()
    Xu = Xu.iloc[:n] if hasattr(Xu, "iloc") else Xu[:n]
    ref = booster.predict(xgb_models.dmatrix(Xu), pred_contribs=True)
    packed = distshap.TreeExplainer(booster, backend="cpu").packed
    k = np.sort(plan_tables.path_features(packed.path_offsets))[: packed.num_paths // 2]
    budget = 4 * int(((1 << k) * k).sum())
    packed = distshap.TreeExplainer(booster, backend="cpu", table_budget_bytes=budget).packed
    st = plan_gpu.strategy_stats(packed)
    assert st["shap_table_paths"] and st["quadrature_paths"], (kind, st)
    Xp = prepare_rows(Xu, packed)
    got = kc.shap_values(packed, Xp)
    close(got.reshape(ref.shape), ref, 1e-4, kind)
    close(got, cpu.shap_values(packed, Xp), 2e-6, kind)
print("SIMULATOR-OK")
"""


def test_shap_tables_under_cuda_simulator():
    """The table kernel's SHAP mode and mixed plans, run by Numba's CUDA simulator (no GPU)."""
    assert_simulator_ok(_SIM_SCRIPT, timeout=900)


# ------------------------------------------------------------------------------------------
# GPU
# ------------------------------------------------------------------------------------------

needs_gpu = pytest.mark.skipif(not cuda_available(), reason="no CUDA GPU visible")


@pytest.fixture
def plans_only():
    """The plans' kernels for every model (the one-launch route of small models off), every
    eligible path on a table within the budget (not the device's cost-model choice)."""

    with config_context(small_max_paths=0), plan_costs.use_costs(plan_costs.tables_everywhere()):
        yield


def _cpu(packed, X):
    from distshap.kernels import cpu

    return cpu.shap_values(packed, X)


def _bits(a):
    return np.ascontiguousarray(to_host(a)).view(np.uint32)


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("budget", [0, 6000, 1 << 30], ids=["quadrature", "mixed", "tables"])
@pytest.mark.parametrize("seed", [0, 1])
def test_gpu_shap_plans_match_cpu_oracle_and_batching(seed, budget, plans_only):
    kc = _kc()
    ens = tiny.random_ensemble(seed, n_features=10, n_trees=30, depth=6, n_groups=1 + 2 * seed,
                               n_categorical=1)  # fmt: skip
    X = tiny.random_rows(seed + 30, ens, 500, 0.1)
    packed = _packed(ens, budget)
    st = plan_gpu.strategy_stats(packed)
    assert (st["shap_table_paths"] > 0) == (budget > 0)
    got = kc.shap_values(packed, X)
    host = to_host(got).astype(np.float64)
    ref = _cpu(packed, X)
    np.testing.assert_allclose(host, ref, rtol=0, atol=2e-6 * max(1.0, np.abs(ref).max()))
    exact = naive.treeshap_recursive_rows(ens, X[:40]).reshape(host[:40].shape)
    np.testing.assert_allclose(host[:40], exact, rtol=0, atol=2e-6 * max(1.0, np.abs(exact).max()))
    first = _bits(got)
    for batch_rows in (7, 64):
        assert np.array_equal(first, _bits(kc.shap_values(packed, X, batch_rows=batch_rows)))
    assert np.array_equal(first[13:14], _bits(kc.shap_values(packed, X[13:14])))


@pytest.mark.gpu
@needs_gpu
def test_gpu_shap_tables_shared_global_and_row_steps_agree(monkeypatch, plans_only):
    kc = _kc()
    ens = tiny.random_ensemble(11, n_features=9, n_trees=30, depth=5, n_groups=2)
    X = tiny.random_rows(12, ens, 700, 0.1)
    packed = _packed(ens)
    assert plan_geometry.shared_tile_rows(2 * 10) > 0
    assert plan_gpu.strategy_stats(packed)["shap_table_paths"]
    shared = _bits(kc.shap_values(packed, X))
    with config_context(tile_rows=3, min_tile_rows=1):
        assert np.array_equal(shared, _bits(kc.shap_values(packed, X)))
    with config_context(tile_rows=3, min_tile_rows=1 << 30):
        assert np.array_equal(shared, _bits(kc.shap_values(packed, X)))
    assert np.array_equal(shared, _bits(kc.shap_values(packed, X)))


@pytest.mark.gpu
@needs_gpu
def test_gpu_filled_shap_tables_match_the_cpu_tables(plans_only):
    from distshap.kernels import quadrature_cpu

    kc = _kc()
    packed = _packed(tiny.random_ensemble(3, n_features=14, n_trees=20, depth=9, n_groups=2))
    k = plan_tables.path_features(packed.path_offsets)
    offsets = plan_gpu.shap_table_offsets(packed)
    assert k[offsets >= 0].max() >= 9
    host = quadrature_cpu.fill_tables(packed.path_offsets, packed.zero_fraction,
                                      packed.path_value, offsets,
                                      plan_tables.table_values(k, offsets))  # fmt: skip
    plan = kc.device_model(packed).shap
    dev = to_host(plan.tables)[: host.size]
    np.testing.assert_allclose(dev, host, rtol=2e-7, atol=1e-30)  # float64 -> float32: 1 ulp


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("kind", ["multiclass", "missing", "categorical"])
def test_gpu_shap_tables_match_pred_contribs(kind, plans_only):
    import distshap
    from distshap.inputs import prepare_rows

    import xgb_models

    kc = _kc()
    booster, X = xgb_models.MODEL_KINDS[kind]()
    ref = booster.predict(xgb_models.dmatrix(X), pred_contribs=True)
    for budget in (0, 3000, 1 << 30):
        packed = distshap.TreeExplainer(booster, backend="cpu", table_budget_bytes=budget).packed
        got = to_host(kc.shap_values(packed, prepare_rows(X, packed))).reshape(ref.shape)
        np.testing.assert_allclose(got, ref, rtol=0, atol=1e-4 * max(1.0, np.abs(ref).max()))
