"""The CUDA backend (distshap.kernels.cuda).

Three kinds of tests:

* host-side and compilation tests that need no GPU (lane arrays, fixed-point shift, strategy
  statistics, PTX for compute capability 9.0 where NVVM is present);
* a CUDA-simulator run (``NUMBA_ENABLE_CUDASIM=1`` in a subprocess) of the real kernel code on
  tiny models against the CPU kernel, so the logic is exercised without a GPU;
* ``gpu``-marked tests against the CPU kernel and the naive oracles, determinism, batching
  invariance and CuPy in/out, skipped where no GPU is visible.
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
from distshap.plan.config import config_context, get_config
from distshap.warmup import chain_ensemble

import naive
import tiny
from conftest import to_host
from cudasim import assert_simulator_ok, nvvm_available


def _packed(ens, budget=1 << 30):
    return build_packed_model(extract_paths(ens), table_budget_bytes=budget)


def _chain(depth, n_features, budget=1 << 30):
    return _packed(chain_ensemble(depth, n_features), budget)


def _kc():
    from distshap.kernels import cuda as kc

    return kc


def _km():
    from distshap.kernels.cuda.runtime import model

    return model


def _shap_table_offsets(packed):
    k = plan_tables.path_features(packed.path_offsets)
    return plan_tables.choose_tables(k, packed.table_budget_bytes, packed.max_table_features)


# ------------------------------------------------------------------------------------------
# no GPU needed
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bound", [0.0, 1e-3, 0.7, 1.0, 3.0, 1e3, 1e9, 1e17])
def test_fixed_point_shift_keeps_sums_in_int64(bound):
    s = plan_gpu.fixed_point_shift(bound)
    assert bound * 2.0**s < 2.0**61  # every output and partial sum fits with headroom
    if 1.0 <= bound < 1e15:  # below 1 the shift is clamped at 60
        assert bound * 2.0**s >= 2.0**59  # and the shift uses the available bits


def test_lane_arrays_describe_the_packing():
    from distshap.kernels.cuda.runtime import device as d

    km = _km()
    ens = tiny.random_ensemble(5, n_features=7, n_trees=6, depth=4, n_groups=2, n_categorical=1)
    packed = _packed(ens, budget=3000)  # some paths with tables, some without
    host = km.lane_arrays(packed)
    offsets = plan_gpu.interaction_table_offsets(packed)
    plan = plan_gpu.plan_arrays(packed, offsets)
    lane_i, lane_f, lane_d = host["lane_i"], host["lane_f"], host["lane_d"]
    k = np.diff(packed.path_offsets) - 1
    for b in range(packed.num_bins):
        lo, hi = packed.bin_offsets[b], packed.bin_offsets[b + 1]
        for lane in range(lo, hi):
            p = packed.lane_path[lane]
            pos, start = lane_i[lane, d.LI_POSITION], lane_i[lane, d.LI_START]
            assert packed.path_offsets[p] + pos == lane
            assert lo + start == packed.path_offsets[p]
            assert lane_i[lane, d.LI_FEATURES] == k[p]
            assert lane_i[lane, d.LI_FEATURE] == packed.feature[lane]
            assert lane_i[lane, d.LI_GROUP] == packed.path_group[p]
            assert lane_i[lane, d.LI_NBITS] == packed.cat_nbits[lane]
            flags = lane_i[lane, d.LI_FLAGS]
            assert bool(flags & d.MISSING_FLAG) == packed.missing[lane]
            assert bool(flags & d.CAT_OTHER_FLAG) == packed.cat_other[lane]
            assert (pos == 0) == (packed.feature[lane] < 0)
            assert lane_f[lane, d.LF_LOWER] == packed.lower[lane]
            assert lane_f[lane, d.LF_UPPER] == packed.upper[lane]
            assert lane_d[lane, d.LD_ZERO] == packed.zero_fraction[lane]
            assert lane_d[lane, d.LD_VALUE] == packed.path_value[p]
            assert lane_f[lane, d.LF_VALUE] == np.float32(packed.path_value[p])
        in_bin = np.unique(packed.lane_path[lo:hi])
        table = in_bin[offsets[in_bin] >= 0]
        assert plan["table_maxk"][b] == (k[table].max() if table.size else 0)
        assert (b in plan["table_bins"]) == bool(table.size)
    assert plan["n_table_bins"] and plan["table_paths"] < packed.num_paths
    assert np.array_equal(plan["lane_table"], offsets[packed.lane_path])


def test_quadrature_launches_cover_every_path_without_a_table_once():
    ens = tiny.random_ensemble(4, n_features=9, n_trees=40, depth=7, n_groups=3)
    packed = _packed(ens, budget=20000)  # the shortest paths get tables
    offsets = _shap_table_offsets(packed)
    plan = plan_gpu.plan_arrays(packed, offsets)
    k = np.diff(packed.path_offsets) - 1
    rest = np.flatnonzero(offsets < 0)
    assert rest.size and plan["table_paths"] == packed.num_paths - rest.size
    seen = []
    for launch in plan["quadrature"]:
        paths, starts, group = launch["paths"], launch["offsets"], launch["group"]
        assert launch["n_chunks"] == group.size == starts.size - 1
        assert np.all(np.diff(starts) >= 1)
        assert np.all(np.diff(starts) <= get_config().quadrature_chunk_paths)
        for c in range(launch["n_chunks"]):
            assert np.all(packed.path_group[paths[starts[c] : starts[c + 1]]] == group[c])
        # exact (2 n - 1 >= k - 1) with the smallest compiled node count
        n = launch["n_nodes"]
        assert np.all(2 * n >= k[paths])
        smaller = [m for m in get_config().quadrature_nodes if m < n]
        assert not smaller or np.all(2 * max(smaller) < k[paths])
        seen.append(paths)
    seen = np.concatenate(seen)
    assert np.array_equal(np.sort(seen), rest) and seen.size == rest.size


def test_models_the_kernels_cannot_run_are_refused_with_the_fix():
    km = _km()
    with pytest.raises(ValueError, match="130 distinct features.*at most 127.*backend='cpu'"):
        km.lane_arrays(_chain(130, 130))
    with config_context(max_fallback_features=130):  # a fallback kernel compiled that long
        km.lane_arrays(_chain(130, 130))
    with config_context(max_fallback_features=100):
        with pytest.raises(ValueError, match="at most 100"):
            km.lane_arrays(_chain(120, 120))
    packed = build_packed_model(extract_paths(chain_ensemble(3, 3)), capacity=16)
    with pytest.raises(ValueError, match="capacity=32"):
        km.lane_arrays(packed)


@pytest.mark.parametrize("n_nodes", [1, 2, 5, 16])
def test_gauss_legendre_integrates_path_polynomials_exactly(n_nodes):
    t, w = plan_geometry.gauss_legendre(n_nodes)
    rng = np.random.default_rng(n_nodes)
    coef = rng.normal(size=2 * n_nodes)  # degree 2n - 1
    exact = sum(c / (i + 1) for i, c in enumerate(coef))
    assert abs(float(np.dot(w, np.polyval(coef[::-1], t))) - exact) < 1e-12


def test_interaction_tables_chosen_within_budget():
    ens = tiny.random_ensemble(5, n_features=7, n_trees=6, depth=4, n_groups=2)
    packed = _packed(ens, budget=3000)
    offsets = plan_gpu.interaction_table_offsets(packed)
    k = np.diff(packed.path_offsets) - 1
    chosen = offsets >= 0
    no_shap_table = _shap_table_offsets(packed) < 0
    assert chosen.any() and no_shap_table.any() and not chosen[no_shap_table].any()
    assert (k[chosen] <= get_config().interaction_table_max_features).all()
    sizes = (1 << k[chosen]) * k[chosen] ** 2
    order = np.argsort(offsets[chosen])
    assert np.array_equal(offsets[chosen][order][1:], np.cumsum(sizes[order])[:-1])  # packed
    st = plan_gpu.strategy_stats(packed)
    assert st["interaction_table_paths"] == int(chosen.sum())
    assert st["interaction_table_bytes"] == 4 * int(sizes.sum())


def test_models_too_wide_for_the_interaction_tile_get_no_interaction_tables():
    """Interaction tables only for models of at most 78 output columns (77 features), the
    widest whose (F+1)^2 int64 matrix fits a quadrature block's 48 KiB; the SHAP tables are
    not affected, nor is the choice by the launch's shared-memory tunable."""
    from distshap.plan.geometry import interaction_tile_fits

    width = get_config().interaction_table_max_columns
    assert interaction_tile_fits(width) and not interaction_tile_fits(width + 1)
    for n_features, fits in ((77, True), (78, False), (120, False)):
        ens = tiny.random_ensemble(7, n_features=n_features, n_trees=20, depth=4, n_groups=2)
        packed = _packed(ens)
        chosen = plan_gpu.interaction_table_offsets(packed) >= 0
        assert chosen.any() == fits and plan_gpu.interaction_tables_too_wide(packed) != fits
        assert (_shap_table_offsets(packed) >= 0).any()
        st = plan_gpu.strategy_stats(packed)
        assert st["interaction_table_paths"] == int(chosen.sum())
        assert st["interaction_tables_too_wide"] != fits
        with config_context(quadrature_shared_bytes=0):
            assert np.array_equal(plan_gpu.interaction_table_offsets(packed) >= 0, chosen)


def test_interaction_tables_shortest_first_under_a_small_budget():
    ens = tiny.random_ensemble(5, n_features=7, n_trees=6, depth=4, n_groups=2)
    packed = _packed(ens)
    k = np.diff(packed.path_offsets) - 1
    budget = 4 * int(((1 << k) * k * k).sum()) // 3
    with config_context(interaction_table_budget_bytes=budget):
        chosen = plan_gpu.interaction_table_offsets(packed) >= 0
    assert chosen.any() and not chosen.all()
    assert 4 * int(((1 << k[chosen]) * k[chosen] ** 2).sum()) <= budget
    assert k[chosen].max() <= k[~chosen].min()  # shortest paths first


def test_strategy_stats_account_for_every_path():
    ens = tiny.random_ensemble(6, n_features=6, n_trees=8, depth=4)
    packed = _packed(ens, budget=2000)
    # every eligible path a table within the budget, whatever this machine's device kind
    everywhere = plan_costs.tables_everywhere()
    st = plan_gpu.strategy_stats(packed, everywhere)
    assert st["shap_table_paths"] and st["quadrature_paths"]  # SHAP: tables and quadrature
    assert st["shap_table_paths"] + st["quadrature_paths"] + st["oversize_paths"] == (
        packed.num_paths
    )
    assert (
        st["shap_table_lanes"] + st["quadrature_lanes"] + st["oversize_lanes"]
        == (packed.feature.shape[0])
    )
    assert sum(st["quadrature_nodes"].values()) == st["quadrature_paths"]
    assert st["quadrature_shared"] == (True, True)
    plan = plan_gpu.plan_arrays(packed, plan_gpu.shap_table_offsets(packed, everywhere))
    assert {launch["n_nodes"]: launch["paths"].size for launch in plan["quadrature"]} == dict(
        st["quadrature_nodes"]
    )
    # 6 features: the all-features tile, one column a feature, the launches' chunks
    assert st["quadrature_tiles"] == "all" and st["quadrature_tile_columns"] == 6
    assert st["quadrature_chunks"] == sum(launch["n_chunks"] for launch in plan["quadrature"])
    assert st["quadrature_warps"] == 4
    # 300 features: too wide for a column a feature; chunk-local feature tiles sum in shared
    # memory, the all-features kernel (local tiles of as many columns as the model's) in global
    # memory
    wide = _packed(tiny.random_ensemble(6, n_features=300, n_trees=8, depth=4), budget=0)
    st = plan_gpu.strategy_stats(wide)
    assert st["quadrature_shared"] == (True, False)
    local = plan_gpu.plan_arrays(wide, np.full(wide.num_paths, -1, np.int64), local=True)
    assert st["quadrature_tiles"] == "local"
    assert st["quadrature_chunks"] == sum(launch["n_local"] for launch in local["quadrature"])
    assert st["quadrature_chunks"] > sum(launch["n_chunks"] for launch in local["quadrature"])
    assert 1 <= st["quadrature_tile_columns"] <= plan_geometry.tile_bound(4)  # depth 4: 8
    assert st["quadrature_tile_columns"] == max(q["local_columns"] for q in local["quadrature"])
    assert st["quadrature_warps"] == 4
    with config_context(quadrature_tile_features=300):
        st = plan_gpu.strategy_stats(wide)
    assert st["quadrature_shared"] == (False, False) and st["quadrature_tiles"] == "all"
    assert st["quadrature_tile_columns"] == 0 and st["quadrature_warps"] == 0
    assert st["quadrature_chunks"] == sum(launch["n_chunks"] for launch in local["quadrature"])
    chain = _chain(34, 34)  # paths of 32 to 34 features: oversize bins
    st = plan_gpu.strategy_stats(chain)
    lanes = np.diff(chain.path_offsets)
    assert st["oversize_paths"] == int((lanes > 32).sum()) >= 1
    assert st["oversize_lanes"] == int(lanes[lanes > 32].sum())


@pytest.mark.skipif(not nvvm_available(), reason="NVVM (CUDA toolkit compiler) not found")
def test_compile_check_and_ptx(monkeypatch):
    from distshap.kernels.cuda.runtime import ptx as ptx_module

    kc = _kc()
    real, compiled = ptx_module.kernel_ptx, []

    def recorded(cc=(9, 0)):  # compile_check's own PTX, read below: every kernel compiled once
        compiled.append((cc, real(cc)))
        return compiled[-1][1]

    monkeypatch.setattr(ptx_module, "kernel_ptx", recorded)
    assert kc.compile_check() is None
    [(cc, ptx)] = compiled
    assert cc == (9, 0)
    local = [name for name in ptx if name.endswith("_local")]  # chunk-local feature tiles
    assert len(local) == len(get_config().quadrature_nodes), sorted(ptx)
    for name, text in ptx.items():
        if "table_kernel" in name:
            assert "vote.sync" in text, name
            assert ".local" not in text, f"{name} spills to local memory"
            assert "call.uni" not in text, f"{name} has a non-inlined call"
        if "shared" in name and "table" in name:  # the tile as split uint32 words
            assert "atom.shared.add.u32" in text, name
        if "quadrature" in name:  # warp-uniform paths: no shuffles; per-row sums in registers
            assert "shfl.sync" not in text and "vote.sync" not in text, name
            assert ".local" not in text, f"{name} spills to local memory"
            assert "rcp.approx.ftz.f32" in text, name  # device.fdiv, device.add_quotient
    for name, text in ptx.items():
        # determinism: integer atomics only, never float atomics
        assert "atom.global.add.f32" not in text and "atom.global.add.f64" not in text, name
        if name not in ("finish_kernel", "fill_interaction_tables_kernel",
                        "fill_shap_tables_kernel", "lane_fill_kernel"):  # fmt: skip
            assert "atom.global.add.u64" in text, name


_SIM_SCRIPT = r"""
import numpy as np
import tiny
import naive
from distshap.kernels import cpu
from distshap.kernels import cuda as kc
from distshap.packed import build_packed_model
from distshap.paths import extract_paths
from distshap.warmup import chain_ensemble

from distshap.plan.config import set_config

def check(ens, X, budget, inter, batch_rows=None):
    packed = build_packed_model(extract_paths(ens), table_budget_bytes=budget)
    f = kc.interaction_values if inter else kc.shap_values
    got = f(packed, X, batch_rows=batch_rows)
    ref = (cpu.interaction_values if inter else cpu.shap_values)(packed, X)
    assert isinstance(got, np.ndarray) and got.dtype == np.float32 and got.shape == ref.shape
    err = float(np.abs(got.astype(np.float64) - ref).max())
    assert err <= 2e-6 * max(1.0, float(np.abs(ref).max())), (budget, inter, err)
    return got

ens = tiny.random_ensemble(3, n_features=6, n_trees=3, depth=3, n_groups=2, n_categorical=1)
X = tiny.random_rows(2, ens, 3, 0.15)
a = check(ens, X, 0, False)  # SHAP values: the quadrature kernel (no table budget)
check(ens, X, 1 << 30, False)  # SHAP tables (tests/test_cuda_tables.py)
b = check(ens, X, 0, False, batch_rows=2)
assert np.array_equal(a, b), "batching changed the bits"
check(tiny.categorical_tree(), tiny.random_rows(4, tiny.categorical_tree(), 4, 0.2), 0, True)
check(tiny.nan_default_tree(), tiny.random_rows(5, tiny.nan_default_tree(), 3, 0.3), 0, True)
# interaction tables (filled by a kernel), alone and beside the quadrature kernel
i_all = check(ens, X, 1 << 30, True)
i_mixed = check(ens, X, 700, True)
check(tiny.categorical_tree(), tiny.random_rows(4, tiny.categorical_tree(), 4, 0.2), 1 << 30, True)
# shared tiles of 4 rows: several tiles per block (zeroing, flushing, re-zeroing)
set_config(tile_rows=4, min_tile_rows=1)
assert np.array_equal(i_mixed, check(ens, X, 700, True)), "small shared tiles changed the bits"
set_config(tile_rows=128)
# the table kernel accumulating in global memory (the path taken for wide outputs)
set_config(min_tile_rows=1 << 30)
assert np.array_equal(i_all, check(ens, X, 1 << 30, True)), "shared and global tiles differ"
set_config(min_tile_rows=8)
# the quadrature kernels adding to global memory (outputs too wide for shared memory)
set_config(quadrature_shared_bytes=0)
assert np.array_equal(a, check(ens, X, 0, False)), "shared and global quadrature sums differ"
check(ens, X, 0, True)
set_config(quadrature_shared_bytes=48 * 1024)

def against_oracles(depth, X):
    chain = chain_ensemble(depth, depth)
    packed = build_packed_model(extract_paths(chain), table_budget_bytes=0)
    for inter in (False, True):
        got = (kc.interaction_values if inter else kc.shap_values)(packed, X)
        ref = (cpu.interaction_values if inter else cpu.shap_values)(packed, X)
        exact = (naive.treeshap_interactions_recursive_rows if inter
                 else naive.treeshap_recursive_rows)(chain, X).reshape(ref.shape)
        scale = max(1.0, np.abs(exact).max())
        assert np.abs(got - ref).max() <= 2e-6 * scale, (depth, inter)
        assert np.abs(got - exact).max() <= 2e-6 * scale, (depth, inter)

# paths of up to 12 features: the quadrature kernels (3 node counts)
Xc = np.full((2, 12), 0.25, np.float32)
Xc[0, 3] = 0.75
Xc[1, 7] = np.nan
against_oracles(12, Xc)
# paths of 32 and 33 features (longer than a warp): the fallback kernel
Xc = np.full((2, 33), 0.25, np.float32)
Xc[1, 5] = 0.75
Xc[0, 30] = np.nan
against_oracles(33, Xc)
print("SIMULATOR-OK")
"""


def test_kernels_under_cuda_simulator():
    """Runs the real kernel code in Numba's CUDA simulator (no GPU) against the CPU kernel."""
    assert_simulator_ok(_SIM_SCRIPT, timeout=600)


# ------------------------------------------------------------------------------------------
# GPU
# ------------------------------------------------------------------------------------------


def _cpu(packed, X, inter=False):
    from distshap.kernels import cpu

    return (cpu.interaction_values if inter else cpu.shap_values)(packed, X)


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="no CUDA GPU visible (run on the GPU host)")
@pytest.mark.parametrize("budget", [0, 2000, 1 << 30], ids=["dp", "mixed", "tables"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gpu_shap_matches_cpu(seed, budget):
    kc = _kc()
    ens = tiny.random_ensemble(seed, n_features=8, n_trees=12, depth=5, n_groups=1 + seed % 3,
                               n_categorical=seed % 2)  # fmt: skip
    X = tiny.random_rows(seed + 10, ens, 300, 0.1)
    packed = _packed(ens, budget)
    got = to_host(kc.shap_values(packed, X)).astype(np.float64)
    ref = _cpu(packed, X)
    np.testing.assert_allclose(got, ref, rtol=0, atol=2e-6 * max(1.0, np.abs(ref).max()))
    # additivity against the model's margin
    margin = naive.predict_margin(ens, X)
    np.testing.assert_allclose(got.sum(axis=-1), margin, rtol=0, atol=1e-5 * np.abs(margin).max())


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="no CUDA GPU visible (run on the GPU host)")
@pytest.mark.parametrize("budget", [0, 2000, 1 << 30], ids=["dp", "mixed", "tables"])
@pytest.mark.parametrize("seed", [1, 3])
def test_gpu_interactions_match_cpu(seed, budget):
    kc = _kc()
    ens = tiny.random_ensemble(seed, n_features=6, n_trees=6, depth=4, n_groups=1 + seed,
                               n_categorical=1)  # fmt: skip
    X = tiny.random_rows(seed + 20, ens, 60, 0.1)
    packed = _packed(ens, budget)
    got = to_host(kc.interaction_values(packed, X)).astype(np.float64)
    ref = _cpu(packed, X, inter=True)
    np.testing.assert_allclose(got, ref, rtol=0, atol=2e-6 * max(1.0, np.abs(ref).max()))
    shap = to_host(kc.shap_values(packed, X)).astype(np.float64)
    np.testing.assert_allclose(got.sum(axis=-1), shap, rtol=0, atol=1e-5 * np.abs(shap).max())


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="no CUDA GPU visible (run on the GPU host)")
def test_gpu_tiny_models_match_brute_force():
    kc = _kc()
    for name, ens in sorted(tiny.tiny_ensembles().items()):
        X = tiny.random_rows(3, ens, 20, 0.2)
        for budget in (0, 1 << 30):
            got = to_host(kc.shap_values(_packed(ens, budget), X)).astype(np.float64)
            ref = naive.brute_force_shap_rows(ens, X).reshape(got.shape)
            np.testing.assert_allclose(got, ref, rtol=0, atol=1e-6 * max(1, np.abs(ref).max()),
                                       err_msg=name)  # fmt: skip
        got = to_host(kc.interaction_values(_packed(ens), X)).astype(np.float64)
        ref = naive.brute_force_interactions_rows(ens, X).reshape(got.shape)
        np.testing.assert_allclose(got, ref, rtol=0, atol=1e-6 * max(1, np.abs(ref).max()),
                                   err_msg=name)  # fmt: skip


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="no CUDA GPU visible (run on the GPU host)")
def test_gpu_oversize_paths_match_cpu():
    kc = _kc()
    packed = _chain(40, 45)
    assert plan_gpu.strategy_stats(packed)["oversize_paths"] >= 1
    rng = np.random.default_rng(0)
    X = rng.choice(np.float32([0.25, 0.75, np.nan]), size=(50, 45), p=[0.9, 0.05, 0.05])
    for inter in (False, True):
        got = to_host((kc.interaction_values if inter else kc.shap_values)(packed, X))
        ref = _cpu(packed, X, inter)
        np.testing.assert_allclose(got, ref, rtol=0, atol=2e-6 * max(1, np.abs(ref).max()))


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="no CUDA GPU visible (run on the GPU host)")
@pytest.mark.parametrize("inter", [False, True], ids=["shap", "interactions"])
def test_gpu_deterministic_and_batch_invariant(inter):
    kc = _kc()
    ens = tiny.random_ensemble(7, n_features=7, n_trees=40, depth=5, n_groups=2)
    X = tiny.random_rows(8, ens, 101, 0.1)
    packed = _packed(ens, budget=4000)
    fn = kc.interaction_values if inter else kc.shap_values
    first = to_host(fn(packed, X))
    again = to_host(fn(packed, X))
    batched = to_host(fn(packed, X, batch_rows=7))
    assert np.array_equal(first.view(np.uint32), again.view(np.uint32))
    assert np.array_equal(first.view(np.uint32), batched.view(np.uint32))
    # rows are independent: a row alone gives the same bits as inside the block
    alone = to_host(fn(packed, X[13:14]))
    assert np.array_equal(first[13:14].view(np.uint32), alone.view(np.uint32))


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="no CUDA GPU visible (run on the GPU host)")
def test_gpu_cupy_in_cupy_out_and_model_cache():
    cp = pytest.importorskip("cupy")
    kc = _kc()
    ens = tiny.random_ensemble(9, n_features=5, n_trees=4, depth=3)
    packed = _packed(ens)
    X = tiny.random_rows(9, ens, 33, 0.1)
    from_numpy = kc.shap_values(packed, X)  # float64 NumPy in
    Xd = cp.asfortranarray(cp.asarray(X))  # float64, not C-contiguous
    from_cupy = kc.shap_values(packed, Xd)
    assert isinstance(from_numpy, cp.ndarray) and isinstance(from_cupy, cp.ndarray)
    assert from_cupy.dtype == cp.float32 and from_cupy.shape == (33, 1, 6)
    assert bool(cp.all(from_numpy == from_cupy))
    assert kc.device_model(packed) is kc.device_model(packed)
    with pytest.raises(ValueError, match="shape"):
        kc.shap_values(packed, X[:, :3])
    empty = kc.interaction_values(packed, X[:0])
    assert isinstance(empty, cp.ndarray) and empty.shape == (0, 1, 6, 6)


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="no CUDA GPU visible (run on the GPU host)")
@pytest.mark.parametrize("inter", [False, True], ids=["shap", "interactions"])
def test_gpu_shared_and_global_accumulation_agree(inter):
    kc = _kc()
    ens = tiny.random_ensemble(11, n_features=9, n_trees=30, depth=5, n_groups=2)
    X = tiny.random_rows(12, ens, 700, 0.1)
    packed = _packed(ens)
    fn = kc.interaction_values if inter else kc.shap_values
    width = packed.num_groups * (packed.num_features + 1) ** (2 if inter else 1)
    assert plan_geometry.shared_tile_rows(width) > 0
    shared = to_host(fn(packed, X))
    with config_context(tile_rows=3, min_tile_rows=1):  # several tiles per block
        small = to_host(fn(packed, X))
    assert np.array_equal(shared.view(np.uint32), small.view(np.uint32))
    with config_context(tile_rows=3, min_tile_rows=1 << 30):  # the table kernel adds globally
        assert plan_geometry.shared_tile_rows(width) == 0
        direct = to_host(fn(packed, X))
    assert np.array_equal(shared.view(np.uint32), direct.view(np.uint32))
    ref = _cpu(packed, X, inter)
    np.testing.assert_allclose(shared, ref, rtol=0, atol=2e-6 * max(1, np.abs(ref).max()))


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="no CUDA GPU visible (run on the GPU host)")
def test_gpu_quadrature_every_node_count_matches_cpu_and_oracle():
    # SHAP and interaction values against the CPU kernel and the float64 recursive oracles
    kc = _kc()
    rng = np.random.default_rng(5)
    for depth in (1, 3, 4, 5, 8, 9, 12, 13, 16, 17, 24, 25, 31):  # every compiled node count
        chain = chain_ensemble(depth, depth)
        packed = _packed(chain, budget=0)
        X = rng.choice(np.float32([0.25, 0.75, np.nan]), size=(70, depth), p=[0.7, 0.25, 0.05])
        for inter in (False, True):
            got = to_host((kc.interaction_values if inter else kc.shap_values)(packed, X))
            ref = _cpu(packed, X, inter)
            tol = 2e-6 * max(1.0, np.abs(ref).max())
            msg = f"depth {depth}, interactions {inter}"
            np.testing.assert_allclose(got, ref, rtol=0, atol=tol, err_msg=msg)
            rows = 10 if inter else len(X)  # the interaction oracle is slow Python
            oracle = (naive.treeshap_interactions_recursive_rows if inter
                      else naive.treeshap_recursive_rows)(chain, X[:rows])  # fmt: skip
            np.testing.assert_allclose(got[:rows], oracle.reshape(got[:rows].shape), rtol=0,
                                       atol=tol, err_msg=msg)  # fmt: skip
    # deep random trees, several groups, categorical splits and missing values
    ens = tiny.random_ensemble(21, n_features=14, n_trees=10, depth=10, n_groups=2,
                               n_categorical=1)  # fmt: skip
    X = tiny.random_rows(22, ens, 60, 0.1)
    packed = _packed(ens, budget=0)
    for inter in (False, True):
        got = to_host((kc.interaction_values if inter else kc.shap_values)(packed, X))
        ref = _cpu(packed, X, inter)
        tol = 2e-6 * max(1.0, np.abs(ref).max())
        np.testing.assert_allclose(got, ref, rtol=0, atol=tol, err_msg=f"inter={inter}")
    oracle = naive.treeshap_recursive_rows(ens, X).reshape(got.shape[:-1])
    np.testing.assert_allclose(got.sum(axis=-1), oracle, rtol=0, atol=1e-5 * np.abs(oracle).max())


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="no CUDA GPU visible (run on the GPU host)")
@pytest.mark.parametrize("inter", [False, True], ids=["shap", "interactions"])
def test_gpu_quadrature_bits_do_not_depend_on_chunks_or_accumulation(inter):
    kc = _kc()
    ens = tiny.random_ensemble(23, n_features=10, n_trees=60, depth=7, n_groups=3)
    X = tiny.random_rows(24, ens, 120 if inter else 300, 0.1)
    packed = _packed(ens, budget=0)
    fn = kc.interaction_values if inter else kc.shap_values
    first = to_host(fn(packed, X))
    with config_context(quadrature_shared_bytes=0):  # sums in global memory
        assert not any(plan_gpu.strategy_stats(packed)["quadrature_shared"])
        direct = to_host(fn(packed, X))
        with config_context(quadrature_chunk_paths=7):  # many small chunks
            chunked = to_host(fn(packed, X))
            model = kc.device_model(packed)
            plan = kc.interaction_plan(packed, model) if inter else model.shap
            assert len(plan.quadrature[0].group) > 10
    assert np.array_equal(first.view(np.uint32), direct.view(np.uint32))
    assert np.array_equal(first.view(np.uint32), chunked.view(np.uint32))
    ref = _cpu(packed, X, inter)
    np.testing.assert_allclose(first, ref, rtol=0, atol=2e-6 * max(1, np.abs(ref).max()))


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="no CUDA GPU visible (run on the GPU host)")
def test_gpu_wide_outputs_match_cpu():
    kc = _kc()
    ens = tiny.random_ensemble(13, n_features=60, n_trees=20, depth=6, n_groups=3)
    X = tiny.random_rows(14, ens, 40, 0.1)
    packed = _packed(ens)
    assert plan_geometry.shared_tile_rows(3 * 61 * 61) == 0  # interactions: global accumulation
    for inter in (False, True):
        got = to_host((kc.interaction_values if inter else kc.shap_values)(packed, X))
        ref = _cpu(packed, X, inter)
        np.testing.assert_allclose(got, ref, rtol=0, atol=2e-6 * max(1, np.abs(ref).max()))
