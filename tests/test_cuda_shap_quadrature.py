"""Chunk-local feature tiles of the SHAP quadrature kernel.

The SHAP quadrature kernel sums a row's contributions in shared memory until its block's chunk
of paths is done. For models of more than ``quadrature_tile_features`` features the chunks
are formed so that each touches at most that many distinct features (chunk-local tiles), and a
thread keeps that many columns instead of one per feature of the model.

* host tests of the chunking (:func:`distshap.plan.launches.local_chunks`): every chunk
  within its feature bound, group and path limit, closed only where it had to be, each lane's
  column naming its feature;
* a CUDA-simulator run: the local kernel's SHAP values bit-identical to the all-features
  kernel's (shared and global sums) on wide multi-class, categorical and missing-value models,
  and against the CPU kernel, the float64 recursive oracle and XGBoost's ``pred_contribs``;
* ``gpu``-marked tests of the same on a real GPU.
"""

from __future__ import annotations

import numpy as np
import pytest

from distshap.kernels import cuda_available
from distshap.packed import build_packed_model
from distshap.paths import extract_paths
from distshap.plan import gpu as plan_gpu
from distshap.plan import launches as plan_launches
from distshap.plan import tables as plan_tables
from distshap.plan.config import config_context, get_config

import tiny
from conftest import to_host
from cudasim import assert_simulator_ok

needs_gpu = pytest.mark.skipif(not cuda_available(), reason="no CUDA GPU visible (GPU host)")


def _packed(ens, budget=0):
    return build_packed_model(extract_paths(ens), table_budget_bytes=budget)


def _km():
    from distshap.kernels.cuda.runtime import model

    return model


def _check_local_plan(packed, plan, max_features, chunk_paths):
    """Every property the local kernel relies on (``max_features``: one bound, or a bound a
    launch by its node count); returns (local chunks, old chunks)."""
    po = packed.path_offsets
    feature = packed.feature
    group = packed.path_group
    lane_column = plan["lane_column"]
    assert lane_column is not None and lane_column.dtype == np.int16
    covered = np.zeros(lane_column.size, bool)
    n_local = n_old = 0
    for q in plan["quadrature"]:
        paths, off = q["paths"], q["local_offsets"]
        bound = max_features[q["n_nodes"]] if isinstance(max_features, dict) else max_features
        fo, feats = q["local_feature_offsets"], q["local_features"]
        assert q["n_local"] == off.size - 1 == fo.size - 1 == q["local_group"][: q["n_local"]].size
        assert off[0] == 0 and off[-1] == paths.size and np.all(np.diff(off) >= 1)
        assert np.all(np.diff(off) <= chunk_paths)
        widest = 0
        for c in range(q["n_local"]):
            ps = paths[off[c] : off[c + 1]]
            assert np.all(group[ps] == q["local_group"][c])
            lanes = np.concatenate([np.arange(po[p] + 1, po[p + 1]) for p in ps])
            mine = feats[fo[c] : fo[c + 1]]
            assert np.array_equal(mine, np.unique(feature[lanes]))  # distinct, increasing
            assert mine.size <= bound or ps.size == 1  # a long path: a chunk of its own
            assert np.array_equal(mine[lane_column[lanes]], feature[lanes])  # columns name them
            assert not covered[lanes].any()
            covered[lanes] = True
            widest = max(widest, mine.size)
            if off[c + 1] < paths.size:  # closed only where the next path had to go elsewhere
                nxt = paths[off[c + 1]]
                more = np.union1d(mine, feature[po[nxt] + 1 : po[nxt + 1]]).size
                assert (group[nxt] != group[ps[0]] or ps.size == chunk_paths
                        or more > bound)  # fmt: skip
        assert q["local_columns"] == widest
        n_local += q["n_local"]
        n_old += q["n_chunks"]
    assert np.all(lane_column[~covered] == -1)  # bias lanes, table and oversize paths
    return n_local, n_old


@pytest.fixture
def bound7():
    """Chunks of at most 40 paths and 7 features, in plan order (windows: below)."""
    with config_context(
        quadrature_tile_features=7, quadrature_chunk_paths=40, quadrature_tile_window=0
    ):
        yield


def test_local_chunks_bound_features_and_name_each_lanes_column(bound7):
    ens = tiny.random_ensemble(31, n_features=40, n_trees=24, depth=6, n_groups=3,
                               n_categorical=2)  # fmt: skip
    packed = _packed(ens, budget=20000)  # some paths on tables: not in the quadrature launches
    k = plan_tables.path_features(packed.path_offsets)
    offsets = plan_tables.choose_tables(k, packed.table_budget_bytes, packed.max_table_features)
    assert (offsets >= 0).any() and (offsets < 0).any()
    plan = plan_gpu.plan_arrays(packed, offsets, local=True)
    n_local, n_old = _check_local_plan(packed, plan, 7, 40)
    assert n_local > n_old  # the feature bound closed chunks
    old = plan_gpu.plan_arrays(packed, offsets)  # interaction plans: no local tiles, same chunks
    assert old["lane_column"] is None
    for a, b in zip(old["quadrature"], plan["quadrature"], strict=True):
        assert "local_offsets" not in a
        assert np.array_equal(a["paths"], b["paths"]) and np.array_equal(a["offsets"], b["offsets"])


def test_paths_longer_than_the_bound_get_a_chunk_of_their_own():
    from distshap.warmup import chain_ensemble

    packed = _packed(chain_ensemble(9, 9))
    with config_context(quadrature_tile_features=3) as config:
        plan = plan_gpu.plan_arrays(packed, np.full(packed.num_paths, -1, np.int64), local=True)
    _check_local_plan(packed, plan, 3, config.quadrature_chunk_paths)
    assert max(q["local_columns"] for q in plan["quadrature"]) == 9


def test_each_launch_gets_tiles_as_narrow_as_its_own_paths():
    ens = tiny.random_ensemble(17, n_features=60, n_trees=6, depth=14)
    packed = _packed(ens)
    none = np.full(packed.num_paths, -1, np.int64)
    k = plan_tables.path_features(packed.path_offsets)
    plan = plan_gpu.plan_arrays(packed, none, local=True)
    assert plan["lane_column"] is not None
    bounds = {}
    for q in plan["quadrature"]:
        longest = int(k[q["paths"]].max())
        bounds[q["n_nodes"]] = min(16, max(8, longest))  # the default tile_bound of the launch
        assert q["local_columns"] <= bounds[q["n_nodes"]]
    assert min(bounds.values()) < max(bounds.values()) == 14  # short paths, narrower tiles
    narrow = [q for q in plan["quadrature"] if bounds[q["n_nodes"]] < 14]
    assert narrow and max(q["local_columns"] for q in narrow) < 14
    n_local, _ = _check_local_plan(packed, plan, bounds, get_config().quadrature_chunk_paths)
    with config_context(quadrature_tile_features=14):  # one width set: every launch takes it
        wide = plan_gpu.plan_arrays(packed, none, local=True)
    n_wide, _ = _check_local_plan(packed, wide, 14, get_config().quadrature_chunk_paths)
    assert n_local > n_wide  # narrower tiles close more chunks
    for q in narrow:  # the same paths, in the order the window chose for the tile
        same = next(w for w in wide["quadrature"] if w["n_nodes"] == q["n_nodes"])
        assert np.array_equal(np.sort(q["paths"]), np.sort(same["paths"]))


def test_narrow_models_keep_the_all_features_tile_and_bad_settings_are_refused():
    packed = _packed(tiny.random_ensemble(2, n_features=8, n_trees=5, depth=4))
    none = np.full(packed.num_paths, -1, np.int64)
    assert plan_gpu.plan_arrays(packed, none, local=True)["lane_column"] is None  # 8 <= 16 columns
    wider = _packed(tiny.random_ensemble(3, n_features=12, n_trees=6, depth=4))
    none = np.full(wider.num_paths, -1, np.int64)
    plan = plan_gpu.plan_arrays(wider, none, local=True)  # paths of <= 4 features: tiles of 8
    assert plan["lane_column"] is not None
    assert max(q["local_columns"] for q in plan["quadrature"]) <= 8
    with config_context(quadrature_tile_features=12):  # a tile as wide as the model: none
        assert plan_gpu.plan_arrays(wider, none, local=True)["lane_column"] is None
    with pytest.raises(ValueError, match="quadrature_tile_features=-1: pass a non-negative"):
        with config_context(quadrature_tile_features=-1):
            plan_gpu.plan_arrays(packed, none, local=True)
    with pytest.raises(ValueError, match=r"quadrature_tile_features must be at least 1 \(or"):
        plan_launches.local_chunks(packed, np.arange(packed.num_paths), 0, 256,
                                   np.full(packed.feature.shape[0], -1, np.int16), 0)  # fmt: skip


_SIM_SCRIPT = r"""
from distshap.plan import geometry as plan_geometry
from distshap.plan import gpu as plan_gpu
import numpy as np
import tiny
import naive
import xgb_models
import distshap
from distshap.inputs import prepare_rows
from distshap.kernels import cpu
from distshap.kernels import cuda as kc
from distshap.kernels.cuda.runtime.model import shap_plan_of_rows
from distshap.packed import build_packed_model
from distshap.paths import extract_paths

from distshap.plan.config import config_context, get_config, set_config

set_config(small_max_paths=0)  # the plans' kernels, not the one-launch route of small models
ALL = 1 << 20  # quadrature_tile_features: no chunk-local tiles (a column per feature)

def variants(packed, X, tile_features, shared_bytes=48 * 1024, batch=False):
    # SHAP values by the all-features kernel and by the chunk-local kernel, bit for bit
    with config_context(quadrature_tile_features=ALL, quadrature_shared_bytes=shared_bytes):
        old = kc.shap_values(packed, X)
    with config_context(quadrature_tile_features=tile_features,
                        quadrature_shared_bytes=shared_bytes):
        new = kc.shap_values(packed, X)
        plan = kc.device_model(packed).shap
        if batch:
            batched = kc.shap_values(packed, X, batch_rows=3)
            assert np.array_equal(new.view(np.uint32), batched.view(np.uint32)), "batching"
    assert plan.lane_column is not None and plan_geometry.local_tiles(plan)
    assert sum(q.n_local for q in plan.quadrature) > 0
    assert np.array_equal(old.view(np.uint32), new.view(np.uint32)), "local tiles changed bits"
    return new, plan

def close(got, ref, tol=2e-6):
    err = float(np.abs(got.astype(np.float64) - ref.reshape(got.shape)).max())
    assert err <= tol * max(1.0, float(np.abs(ref).max())), err

# a wide multi-class model (120 features, 3 groups), categorical splits and missing values
wide = tiny.random_ensemble(41, n_features=120, n_trees=6, depth=5, n_groups=3, n_categorical=3)
X = tiny.random_rows(42, wide, 5, 0.15)
packed = build_packed_model(extract_paths(wide), table_budget_bytes=0)
got, plan = variants(packed, X, 16, batch=True)
assert max(q.local_columns for q in plan.quadrature) <= 16
with config_context(quadrature_tile_features=16, few_rows_chunk_paths=16):  # shorter chunks
    model = kc.device_model(packed)
    few = kc.few_rows_shap_plan(packed, model)
    assert sum(q.n_chunks for q in few.quadrature) > sum(q.n_chunks for q in model.shap.quadrature)
    with config_context(few_rows=0):
        whole = kc.shap_values(packed, X)  # (the script runs with few_rows_blocks=0)
    assert np.array_equal(got.view(np.uint32), whole.view(np.uint32)), "few-rows chunks"
    with config_context(few_rows=0, few_rows_blocks=1 << 20):  # too few blocks: shorter chunks
        assert shap_plan_of_rows(packed, model, 5000) is few
        assert np.array_equal(whole.view(np.uint32), kc.shap_values(packed, X).view(np.uint32))
    usual = sum(q.n_local for q in model.shap.quadrature)  # blocks of a call of 5 rows
    with config_context(few_rows=0, few_rows_blocks=usual):  # as many as wanted: usual plan
        assert shap_plan_of_rows(packed, model, 5) is model.shap
    with config_context(few_rows=0, few_rows_blocks=usual + 1):
        assert shap_plan_of_rows(packed, model, 5) is few
close(got, cpu.shap_values(packed, X))
close(got, naive.treeshap_recursive_rows(wide, X))
# too wide for a column per feature (global atomics), a 1-warp local tile (16 columns)
variants(packed, X, 16, shared_bytes=8 * 32 * 16)
# a small bound: many chunks, paths longer than the bound in chunks of their own
deep = tiny.random_ensemble(43, n_features=10, n_trees=2, depth=7, n_groups=2, n_categorical=1)
Xd = tiny.random_rows(44, deep, 4, 0.2)
packed = build_packed_model(extract_paths(deep), table_budget_bytes=0)
got, plan = variants(packed, Xd, 3)
assert max(q.local_columns for q in plan.quadrature) > 3
close(got, naive.treeshap_recursive_rows(deep, Xd))
# beside SHAP tables (the quadrature kernel runs the paths without one)
packed = build_packed_model(extract_paths(deep), table_budget_bytes=6000)
assert plan_gpu.strategy_stats(packed)["shap_table_paths"] > 0
got, _ = variants(packed, Xd, 6)
close(got, cpu.shap_values(packed, Xd))
# XGBoost models: pred_contribs (multi-class, missing values, categorical splits)
for kind in ("multiclass", "missing", "categorical"):
    booster, Xx = xgb_models.MODEL_KINDS[kind]()
    Xx = Xx[:3]
    ref = booster.predict(xgb_models.dmatrix(Xx), pred_contribs=True)
    packed = distshap.TreeExplainer(booster, backend="cpu", table_budget_bytes=0).packed
    got, _ = variants(packed, prepare_rows(Xx, packed), packed.num_features - 2)
    close(got.reshape(ref.shape), ref, 1e-4)
print("SIMULATOR-OK")
"""


def test_local_tiles_under_cuda_simulator():
    """The chunk-local kernel's bits equal the all-features kernel's (CUDA simulator)."""
    assert_simulator_ok(_SIM_SCRIPT, timeout=900)


def test_windowed_chunks_regroup_paths_within_their_group(bound7):
    ens = tiny.random_ensemble(31, n_features=40, n_trees=24, depth=6, n_groups=3,
                               n_categorical=2)  # fmt: skip
    packed = _packed(ens)
    none = np.full(packed.num_paths, -1, np.int64)
    plain = plan_gpu.plan_arrays(packed, none, local=True)
    with config_context(quadrature_tile_window=64):
        plan = plan_gpu.plan_arrays(packed, none, local=True)
    n_local, _ = _check_local_plan(packed, plan, 7, 40)  # the greedy's rules in the new order
    assert n_local < sum(q["n_local"] for q in plain["quadrature"])
    for a, b in zip(plain["quadrature"], plan["quadrature"], strict=True):
        assert np.array_equal(a["offsets"], b["offsets"])  # all-features chunks: one group each
        assert not np.array_equal(a["paths"], b["paths"])
        group = packed.path_group
        for c in range(a["n_chunks"]):  # the same paths in each group, reordered
            lo, hi = a["offsets"][c], a["offsets"][c + 1]
            assert np.all(group[b["paths"][lo:hi]] == a["group"][c])
        assert np.array_equal(np.sort(a["paths"]), np.sort(b["paths"]))


def test_windowed_order_in_threads_equals_one_serial_pass():
    """Each group's run is reordered on its own (in threads): the order of one pass."""
    ens = tiny.random_ensemble(33, n_features=40, n_trees=30, depth=6, n_groups=4,
                               n_categorical=2)  # fmt: skip
    packed = _packed(ens)
    paths = np.argsort(packed.path_group, kind="stable").astype(np.int64)
    runs = plan_launches._group_runs(paths, packed.path_group)
    assert runs.size == 5 and runs[-1] == paths.size
    assert np.all(np.diff(packed.path_group[paths[runs[:-1]]]) > 0)
    lanes = np.zeros(packed.feature.size, np.int16)
    threaded = plan_launches.local_chunks(packed, paths, 7, 40, lanes, window=16)["paths"]
    serial = np.empty_like(paths)
    args = (
        np.ascontiguousarray(packed.path_offsets, np.int64),
        np.ascontiguousarray(packed.feature, np.int64),
        7,
        40,
        packed.num_features,
        16,
    )
    plan_launches._window_order(paths, *args, runs, serial, 0, runs.size - 1)  # fmt: skip
    assert np.array_equal(threaded, serial)
    assert not np.array_equal(serial, paths)  # the window did reorder
    assert np.array_equal(np.sort(serial), np.sort(paths))


_SIM_VARIANTS = r"""
from distshap.plan import geometry as plan_geometry
import numpy as np
import tiny
import naive
import xgb_models
import distshap
from distshap.inputs import prepare_rows
from distshap.kernels import cpu
from distshap.kernels import cuda as kc
from distshap.packed import build_packed_model
from distshap.paths import extract_paths

from distshap.plan.config import config_context, get_config, set_config

set_config(small_max_paths=0)  # the plans' kernels, not the one-launch route of small models
ALL = 1 << 20  # quadrature_tile_features: no chunk-local tiles (a column per feature)

def run(packed, X, tile_features=16, window=0, warps=4, shared_bytes=48 * 1024,
        batch_rows=None):
    with config_context(quadrature_tile_features=tile_features, quadrature_tile_window=window,
                        shap_quadrature_warps=warps, quadrature_shared_bytes=shared_bytes):
        out = kc.shap_values(packed, X, batch_rows=batch_rows)
        plan = kc.device_model(packed).shap
    return out, plan

def same(a, b, what):
    assert np.array_equal(a.view(np.uint32), b.view(np.uint32)), what

def close(got, ref, tol=2e-6):
    err = float(np.abs(got.astype(np.float64) - ref.reshape(got.shape)).max())
    assert err <= tol * max(1.0, float(np.abs(ref).max())), err

# wide multi-class (40 features, 2 groups), categorical splits and missing values; 70 rows with
# one warp a block: two-row blocks of 64 rows, the second block with rows a only
wide = tiny.random_ensemble(61, n_features=40, n_trees=4, depth=5, n_groups=2, n_categorical=3)
X = tiny.random_rows(62, wide, 70, 0.15)
packed = build_packed_model(extract_paths(wide), table_budget_bytes=0)
ref, _ = run(packed, X, tile_features=ALL, warps=1)  # all-features, 2 rows
if PART == 0:  # the oracle once
    close(ref, naive.treeshap_recursive_rows(wide, X))
VARIANTS = (dict(tile_features=ALL, warps=1, shared_bytes=8 * 32 * 40),  # 1 row: 2 do not fit
            dict(tile_features=ALL, warps=1, shared_bytes=8 * 32 * 20),  # global atomics
            dict(tile_features=ALL, warps=8),                         # 8 warps (too wide: 4)
            dict(tile_features=6, warps=1),                           # local tiles, 2 rows
            dict(tile_features=6, warps=1, window=8,                  # windowed chunks, 1 row
                 shared_bytes=8 * 32 * 6),
            dict(tile_features=6, warps=2, window=64),                # both, 2 warps
            dict(tile_features=6, warps=1, batch_rows=37))            # batches
for kw in VARIANTS[:4] if PART == 0 else VARIANTS[4:]:
    got, plan = run(packed, X, **kw)
    same(ref, got, kw)
    if kw["tile_features"] != ALL:
        assert plan.lane_column is not None and plan_geometry.local_tiles(plan)
if PART == 1:  # the local tiles' plans and XGBoost models
    chunks = []
    for w in (0, 64):  # the plans only: no launch
        with config_context(quadrature_tile_features=6, quadrature_tile_window=w):
            chunks.append(sum(q.n_local for q in kc.device_model(packed).shap.quadrature))
    assert chunks[1] < chunks[0], chunks  # the window regroups paths: fewer chunks
    # XGBoost models: pred_contribs (multi-class, missing values, categorical splits), on a few
    # rows (the simulator runs every thread's paths in Python)
    for kind in ("multiclass", "missing", "categorical"):
        booster, Xx = xgb_models.MODEL_KINDS[kind]()
        Xx = Xx[:5]
        ref = booster.predict(xgb_models.dmatrix(Xx), pred_contribs=True)
        packed = distshap.TreeExplainer(booster, backend="cpu", table_budget_bytes=0).packed
        Xp = prepare_rows(Xx, packed)
        base, _ = run(packed, Xp, tile_features=ALL, warps=1)
        got, _ = run(packed, Xp, tile_features=max(packed.num_features - 2, 1), warps=1,
                     window=16)
        same(base, got, kind)
        got1, _ = run(packed, Xp, tile_features=ALL, warps=1,
                      shared_bytes=8 * 32 * packed.num_features)
        same(base, got1, kind + " all 1 row")
        close(got.reshape(ref.shape), ref, 1e-4)
print("SIMULATOR-OK")
"""


@pytest.mark.parametrize("part", [0, 1])
def test_two_rows_windows_and_warps_under_cuda_simulator(part):
    """Two rows a thread, windowed chunks and warps a block keep the bits (CUDA simulator);
    the variants in two independent parts."""
    assert_simulator_ok(f"PART = {part}\n" + _SIM_VARIANTS, timeout=900)


# ------------------------------------------------------------------------------------------
# GPU
# ------------------------------------------------------------------------------------------


ALL = 1 << 20  # quadrature_tile_features: no chunk-local tiles (a column per feature)


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("tile_features", [4, 16, 32])
def test_gpu_local_tiles_keep_the_bits(tile_features):
    from distshap.kernels import cpu
    from distshap.kernels import cuda as kc

    ens = tiny.random_ensemble(51, n_features=150, n_trees=60, depth=8, n_groups=4,
                               n_categorical=4)  # fmt: skip
    X = tiny.random_rows(52, ens, 3000, 0.1)
    packed = _packed(ens)
    narrow_bytes = 8 * 32 * max(tile_features, 8)
    with config_context(small_max_paths=0):
        with config_context(quadrature_tile_features=ALL):
            old = to_host(kc.shap_values(packed, X))
        with config_context(quadrature_tile_features=tile_features):
            new = to_host(kc.shap_values(packed, X))
            plan = kc.device_model(packed).shap
            assert plan.lane_column is not None
            assert max(q.local_columns for q in plan.quadrature) <= max(tile_features, 8)
            batched = to_host(kc.shap_values(packed, X, batch_rows=777))
        with config_context(quadrature_tile_features=tile_features,
                            quadrature_shared_bytes=narrow_bytes):  # fmt: skip
            narrow = to_host(kc.shap_values(packed, X))  # all-features sums: global atomics
        with config_context(quadrature_tile_features=ALL, quadrature_shared_bytes=narrow_bytes):
            direct = to_host(kc.shap_values(packed, X))
    for other in (new, batched, narrow, direct):
        assert np.array_equal(old.view(np.uint32), other.view(np.uint32))
    ref = cpu.shap_values(packed, X)
    np.testing.assert_allclose(new, ref, rtol=0, atol=2e-6 * max(1.0, np.abs(ref).max()))


@pytest.mark.gpu
@needs_gpu
def test_gpu_few_rows_take_shorter_chunks_and_keep_the_bits():
    from distshap.kernels import cuda as kc

    wide = tiny.random_ensemble(57, n_features=150, n_trees=60, depth=8, n_groups=2,
                                n_categorical=4)  # fmt: skip
    narrow = tiny.random_ensemble(58, n_features=8, n_trees=200, depth=8)
    for ensemble in (wide, narrow):
        X = tiny.random_rows(59, ensemble, 600, 0.1)
        packed = _packed(ensemble)
        with config_context(small_max_paths=0):
            model = kc.device_model(packed)
            few = kc.few_rows_shap_plan(packed, model)
            chunks = [sum(q.n_chunks for q in plan.quadrature) for plan in (few, model.shap)]
            assert chunks[0] > chunks[1]
            for n in (1, 7, 512, 513):
                got = to_host(kc.shap_values(packed, X[:n]))
                with config_context(few_rows=0, few_rows_blocks=0):
                    want = to_host(kc.shap_values(packed, X[:n]))
                assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), n


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("kind", ["multiclass", "missing", "categorical"])
def test_gpu_local_tiles_match_pred_contribs(kind):
    import distshap
    from distshap.inputs import prepare_rows
    from distshap.kernels import cuda as kc

    import xgb_models

    booster, X = xgb_models.MODEL_KINDS[kind]()
    ref = booster.predict(xgb_models.dmatrix(X), pred_contribs=True)
    packed = distshap.TreeExplainer(booster, backend="cpu", table_budget_bytes=0).packed
    with config_context(small_max_paths=0, quadrature_tile_features=2):
        got = to_host(kc.shap_values(packed, prepare_rows(X, packed))).reshape(ref.shape)
        assert kc.device_model(packed).shap.lane_column is not None
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-4 * max(1.0, np.abs(ref).max()))


@pytest.mark.gpu
@needs_gpu
def test_gpu_two_rows_windows_and_warps_keep_the_bits():
    from distshap.kernels import cuda as kc

    ens = tiny.random_ensemble(53, n_features=150, n_trees=60, depth=8, n_groups=4,
                               n_categorical=4)  # fmt: skip
    X = tiny.random_rows(54, ens, 3001, 0.1)
    narrow = tiny.random_ensemble(55, n_features=12, n_trees=40, depth=7, n_categorical=2)
    Xn = tiny.random_rows(56, narrow, 3001, 0.1)
    settings = [
        {"quadrature_tile_features": ALL},
        {}, {"shap_quadrature_warps": 8},
        {"quadrature_tile_features": ALL, "quadrature_shared_bytes": 8 * 32 * 150},  # 1 row
        {"quadrature_tile_window": 256},
        {"quadrature_tile_window": 256, "shap_quadrature_warps": 8},
        {"quadrature_shared_bytes": 8 * 32 * 16},
    ]  # fmt: skip
    for ensemble, rows in ((ens, X), (narrow, Xn)):
        packed = _packed(ensemble)
        outs = []
        for chosen in settings:
            with config_context(small_max_paths=0, **chosen):
                outs.append(to_host(kc.shap_values(packed, rows)))
        for other in outs[1:]:
            assert np.array_equal(outs[0].view(np.uint32), other.view(np.uint32))
