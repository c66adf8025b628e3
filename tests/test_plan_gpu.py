"""The SHAP plan's host functions against their frozen previous versions (plan_reference.py):
the same arrays, dtypes included, so the plans and bits do not change.

The benchmark models (``benchmarks/.models/*-v3.ubj``, up to cal_housing-large's 4.1M paths)
run with ``DISTSHAP_PLAN_MODELS=1`` (tens of seconds; not in CI).
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import plan_reference as ref
import pytest

from distshap.packed import pack_ensemble
from distshap.plan import costs as cost_model
from distshap.plan import gpu
from distshap.plan.geometry import local_tile_model
from distshap.plan.launches import quadrature_launches
from distshap.plan.tables import gpu_shap_table_offsets, regular_paths

import tiny


def _costs() -> dict:
    everywhere = cost_model.tables_everywhere()
    return {
        "H200": cost_model.SHIPPED["H200"],
        "generic": cost_model.SHIPPED["generic"],
        "simulator": cost_model.SHIPPED["simulator"],
        "everywhere": everywhere,
        # tables chosen on part of the paths: bins and L2 misses priced, a small L2
        "partial": replace(
            everywhere, table_bin=2e-12, table_miss_lane=4e-12, l2_bytes=4096, min_saving=0.01
        ),  # fmt: skip
    }


def _same(a, b) -> None:
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            _same(a[key], b[key])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _same(x, y)
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
    else:
        assert type(a) is type(b) and a == b


def _random_offsets(rng, n_paths: int, oversize: bool):
    lanes = rng.integers(2, 12, n_paths)
    if oversize:
        lanes[rng.random(n_paths) < 0.05] = rng.integers(33, 40)
    path_offsets = np.r_[0, np.cumsum(lanes)].astype(np.int64)
    # bins: runs of paths (some bins empty), each run's first lane
    cuts = np.flatnonzero(rng.random(n_paths) < 0.3)
    cuts = np.unique(np.r_[0, cuts])
    bin_offsets = np.r_[path_offsets[cuts], path_offsets[-1]]
    empty = rng.integers(0, bin_offsets.size, 3)
    bin_offsets = np.sort(np.r_[bin_offsets, bin_offsets[empty]]).astype(np.int64)
    return bin_offsets, path_offsets


@pytest.mark.parametrize("seed", range(4))
def test_regular_paths_as_before(seed):
    rng = np.random.default_rng(seed)
    for n_paths in (1, 2, 50, 3000):
        bins, paths = _random_offsets(rng, n_paths, oversize=seed % 2 == 0)
        _same(regular_paths(bins, paths, 32), ref.regular_paths(bins, paths, 32))
        _same(regular_paths(bins, paths, 8), ref.regular_paths(bins, paths, 8))
    empty = np.zeros(1, np.int64)
    _same(regular_paths(empty, empty), ref.regular_paths(empty, empty))


@pytest.mark.parametrize("seed", range(3))
def test_gpu_shap_table_offsets_as_before(seed):
    rng = np.random.default_rng(seed)
    n = 4000
    k = rng.integers(0, 30, n)
    k[rng.random(n) < 0.5] = rng.integers(1, 9, int((rng.random(n) < 0.5).sum()))[:1]
    group = rng.integers(0, 3, n).astype(np.int32)
    bins, paths = _random_offsets(rng, n, oversize=False)
    path_bin, _ = regular_paths(bins, paths)
    shuffled = rng.permutation(path_bin)  # bins not increasing in path order
    chosen = 0
    for costs in _costs().values():
        for budget in (0, 1000, 1 << 16, 1 << 30):
            for max_features in (0, 8, 12, 24):
                for pb in (path_bin, shuffled, None):
                    args = (k, group, budget, max_features, costs)
                    kw = dict(num_features=30, num_groups=3, path_bin=pb)
                    new = gpu_shap_table_offsets(*args, **kw)
                    _same(new, ref.gpu_shap_table_offsets(*args, **kw))
                    chosen += 0 < int((new >= 0).sum()) < n
    assert chosen > 0  # some choices put part of the paths on tables


@pytest.mark.parametrize("seed", range(3))
def test_quadrature_launches_as_before(seed):
    rng = np.random.default_rng(seed)
    n = 3000
    nodes = (1, 2, 4, 8, 16)
    for n_groups in (1, 4, 5000):  # 5000 groups: a key beyond 16 bits
        k = rng.integers(0, 31, n)
        group = rng.integers(0, n_groups, n).astype(np.int32)
        for selected in (rng.random(n) < 0.7, np.ones(n, bool), np.zeros(n, bool)):
            for chunk in (1, 7, 256):
                new = quadrature_launches(k, group, selected, nodes, chunk)
                _same(new, ref.quadrature_launches(k, group, selected, nodes, chunk))
    with pytest.raises(ValueError, match="fallback"):
        quadrature_launches(np.array([40]), np.zeros(1, np.int32), np.ones(1, bool),
                                     nodes, 4)  # fmt: skip


def _packed_models():
    models = {name: pack_ensemble(ens) for name, ens in tiny.tiny_ensembles().items()}
    for seed, (F, T, depth, G) in enumerate([(5, 6, 4, 1), (9, 20, 6, 3), (40, 30, 8, 2)]):
        models[f"random{seed}"] = pack_ensemble(tiny.random_ensemble(seed, F, T, depth, G))
    return models


def _check_model(packed, costs_by_name: dict) -> int:
    chosen = 0
    gpu._PATH_INFO.pop(packed, None)
    for costs in costs_by_name.values():
        offsets = gpu.shap_table_offsets(packed, costs)
        _same(offsets, ref.shap_table_offsets(packed, costs))
        chosen += int((offsets >= 0).any())
        plan = gpu.plan_arrays(packed, offsets)
        assert plan.pop("lane_column") is None
        for name in ("unit_offsets", "unit_value", "unit_lanes", "unit_pair"):  # no units
            assert plan.pop(name) is None
        _same(plan, ref.plan_core(packed, offsets))
    stats = gpu.strategy_stats(packed, cost_model.tables_everywhere())
    assert stats["shap_table_paths"] + stats["quadrature_paths"] + stats["oversize_paths"] == (
        packed.num_paths
    )
    return chosen


def test_plan_arrays_as_before_on_tiny_models():
    chosen = sum(_check_model(p, _costs()) for p in _packed_models().values())
    assert chosen > 0


def test_path_info_is_shared_and_read_only():
    packed = pack_ensemble(tiny.random_ensemble(7, 6, 5, 4, 1))
    first = gpu.path_info(packed)
    assert all(a is b for a, b in zip(first, gpu.path_info(packed), strict=True))
    with pytest.raises(ValueError):
        first[0][0] = 3
    _same(first[1:], ref.regular_paths(packed.bin_offsets, packed.path_offsets, 32))


_MODELS = Path(__file__).resolve().parent.parent / "benchmarks" / ".models"
_NAMES = ["cal_housing-med-20640", "adult-med-48842", "covtype-med-581012",
          "fashion_mnist-med-70000", "cal_housing-large-20640"]  # fmt: skip


@pytest.mark.skipif(os.environ.get("DISTSHAP_PLAN_MODELS") != "1",
                    reason="benchmark models: DISTSHAP_PLAN_MODELS=1")  # fmt: skip
@pytest.mark.parametrize("name", _NAMES)
def test_plan_as_before_on_benchmark_models(name):
    from distshap.models import load_model_file

    path = _MODELS / f"{name}-v3.ubj"
    if not path.exists():
        pytest.skip(f"{path} not trained")
    packed = pack_ensemble(load_model_file(path))
    costs = {n: c for n, c in _costs().items() if n in ("H200", "everywhere", "partial")}
    _check_model(packed, costs)
    if local_tile_model(packed.num_features):  # the local tiles run too
        offsets = gpu.shap_table_offsets(packed, costs["H200"])
        assert gpu.plan_arrays(packed, offsets, local=True)["lane_column"] is not None
