"""The thread-a-path SHAP kernel of calls of few rows (:mod:`distshap.kernels.cuda.path_threads`).

Calls of at most ``path_thread_rows`` rows run a block a row and chunk, its threads over the
chunk's paths; its values must be the row kernels' bit for bit (each contribution truncated to
int64 on its own, integer sums), with a column per feature in shared memory, chunk-local tiles
and global atomics alike, and close to the CPU kernel and the float64 oracle.

* a CUDA-simulator run (no GPU needed), with sibling units (:mod:`distshap.plan.units`) of
  every level and without them;
* ``gpu``-marked tests of the same on a real GPU, and against XGBoost's ``pred_contribs``.
"""

from __future__ import annotations

import numpy as np
import pytest

from distshap.kernels import cuda_available
from distshap.packed import build_packed_model
from distshap.paths import extract_paths
from distshap.plan.config import config_context

import tiny
from conftest import to_host
from cudasim import assert_simulator_ok

needs_gpu = pytest.mark.skipif(not cuda_available(), reason="no CUDA GPU visible (GPU host)")

_SIM_SCRIPT = r"""
import numpy as np
import tiny
import naive
from distshap.kernels import cpu
from distshap.kernels import cuda as kc
from distshap.kernels.cuda import path_threads
from distshap.packed import build_packed_model
from distshap.paths import extract_paths
from distshap.plan.config import config_context

def packed_of(ens, budget=0):
    return build_packed_model(extract_paths(ens), table_budget_bytes=budget)

def both(packed, X, **config):
    path_threads._KERNELS.clear()
    with config_context(**config):
        got = kc.shap_values(packed, X)
        modes = sorted({key[1] for key in path_threads._KERNELS})
        with config_context(path_thread_rows=0):
            want = kc.shap_values(packed, X)
    assert modes, "no thread-a-path launch"
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), (config, modes)
    return got, modes

def close(got, ref, tol=2e-6):
    err = float(np.abs(got.astype(np.float64) - ref.reshape(got.shape)).max())
    assert err <= tol * max(1.0, float(np.abs(ref).max())), err

# a wide multi-class model: categorical splits, missing values; chunk-local tiles, a column
# per feature, global atomics
wide = tiny.random_ensemble(71, n_features=40, n_trees=5, depth=5, n_groups=3, n_categorical=3)
X = tiny.random_rows(72, wide, 3, 0.15)
packed = packed_of(wide)
seen = set()
for config in (dict(quadrature_tile_features=8), dict(quadrature_tile_features=64),
               dict(quadrature_tile_features=64, quadrature_shared_bytes=8 * 39),
               dict(quadrature_tile_features=8, quadrature_shared_bytes=16)):  # local plan
    got, modes = both(packed, X, small_max_paths=0, **config)
    seen.update(modes)
    close(got, cpu.shap_values(packed, X))
assert seen == {"global", "local", "shared"}, seen
close(got, naive.treeshap_recursive_rows(wide, X))
# one row; a thread taking several paths of a chunk (512-path chunks, 256 threads a block)
many = tiny.random_ensemble(78, n_features=12, n_trees=20, depth=5)
Xm = tiny.random_rows(79, many, 1, 0.1)
got, _ = both(packed_of(many), Xm, small_max_paths=0, few_rows=0, few_rows_blocks=0,
               quadrature_chunk_paths=512)
close(got, naive.treeshap_recursive_rows(many, Xm))
# beside SHAP tables (only the quadrature launches change)
deep = tiny.random_ensemble(73, n_features=8, n_trees=2, depth=7, n_groups=2, n_categorical=1)
Xd = tiny.random_rows(74, deep, 2, 0.2)
packed = packed_of(deep, budget=6000)
got, _ = both(packed, Xd, small_max_paths=0)
close(got, naive.treeshap_recursive_rows(deep, Xd))
# sibling units (plan.units): two chains of nine splits that end in a subtree whose children
# split on one feature (a unit of four) and in a leaf beside a pair (a unit of three); the
# thread-a-path kernel, the usual plan's row kernels (batches of a row, two rows a thread; one
# row a thread) give the same bits; at every level close to the oracle
chains = tiny.chain_units_ensemble()
Xu = (np.random.default_rng(78).random((3, 12)) * 0.6).astype(np.float32)
Xu[:, 9:] = np.random.default_rng(79).random((3, 3)).astype(np.float32)
pu = packed_of(chains)
got, _ = both(pu, Xu, small_max_paths=0)
close(got, naive.treeshap_recursive_rows(chains, Xu))
with config_context(small_max_paths=0):
    offsets = np.diff(kc.device_model(pu).shap.unit_offsets.copy_to_host())
    assert offsets.max() >= 4, offsets  # units of more than a pair run
    with config_context(path_thread_rows=0, few_rows=0, few_rows_blocks=0):
        for shared_bytes, rows in ((48 * 1024, 1), (3000, None)):  # 3000: one row's tile fits
            with config_context(quadrature_shared_bytes=shared_bytes):
                again = kc.shap_values(pu, Xu, batch_rows=rows)
            assert np.array_equal(got.view(np.uint32), again.view(np.uint32)), shared_bytes
    for levels in (0, 1, 2):
        with config_context(quadrature_unit_levels=levels):
            offsets = np.diff(kc.device_model(pu).shap.unit_offsets.copy_to_host())
            assert offsets.max() <= (2**levels if levels else 0), (levels, offsets.max())
            close(kc.shap_values(pu, Xu), naive.treeshap_recursive_rows(chains, Xu))
    # pairs only: the kernels without the general fold give the general kernels' bits (a thread
    # a path; two rows a thread); every launch of the plans the calls run is switched
    from distshap.kernels.cuda import shap_quadrature

    def built():
        keys = [*path_threads._KERNELS, *shap_quadrature._KERNELS]
        path_threads._KERNELS.clear()
        shap_quadrature._KERNELS.clear()
        return {key[-1] for key in keys}  # each kernel's general flag

    for config in (dict(), dict(path_thread_rows=0, few_rows=0, few_rows_blocks=0)):
        with config_context(quadrature_unit_levels=1, **config):
            model = kc.device_model(pu)
            launches = [*model.shap.quadrature, *kc.few_rows_shap_plan(pu, model).quadrature]
            assert not any(launch.general_units for launch in launches)
            built()
            lean = kc.shap_values(pu, Xu)
            assert built() == {False}, config
            for launch in launches:
                launch.general_units = True
            full = kc.shap_values(pu, Xu)
            assert built() == {True}, config
            for launch in launches:
                launch.general_units = False
        assert np.array_equal(lean.view(np.uint32), full.view(np.uint32)), config
        close(lean, naive.treeshap_recursive_rows(chains, Xu))
print("SIMULATOR-OK")
"""


def test_path_threads_under_cuda_simulator():
    assert_simulator_ok(_SIM_SCRIPT, timeout=900, row_kernels=False)


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("levels", [1, 3])
@pytest.mark.parametrize("tile_features", [0, 8])
def test_gpu_path_threads_keep_the_bits(tile_features, levels):
    from distshap.kernels import cuda as kc
    from distshap.kernels.cuda import path_threads

    wide = tiny.random_ensemble(75, n_features=150, n_trees=60, depth=8, n_groups=2,
                                n_categorical=4)  # fmt: skip
    narrow = tiny.random_ensemble(76, n_features=8, n_trees=200, depth=8)
    for ensemble in (wide, narrow, tiny.chain_units_ensemble()):
        X = tiny.random_rows(77, ensemble, 40, 0.1)
        packed = build_packed_model(extract_paths(ensemble), table_budget_bytes=0)
        with config_context(small_max_paths=0, quadrature_tile_features=tile_features,
                            quadrature_unit_levels=levels):  # fmt: skip
            units = np.diff(kc.device_model(packed).shap.unit_offsets.copy_to_host())
            assert 2 <= units.max() <= 2**levels, units.max()  # units run
            if ensemble.num_features == 12 and levels > 1:  # the chains: more than pairs
                assert units.max() >= 4, units.max()
            for n in (1, 2, 16, 33):
                path_threads._KERNELS.clear()
                with config_context(path_thread_rows=max(n, 16)):
                    got = to_host(kc.shap_values(packed, X[:n]))
                assert path_threads._KERNELS, n
                general = {key[2] for key in path_threads._KERNELS}  # built with the fold
                assert (True in general) == bool(units.max() > 2), general
                with config_context(path_thread_rows=0):
                    want = to_host(kc.shap_values(packed, X[:n]))
                assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), n
            with config_context(quadrature_unit_levels=0):  # every path apart: close
                apart = to_host(kc.shap_values(packed, X[:33]))
            scale = max(1.0, float(np.abs(apart).max()))
            np.testing.assert_allclose(want, apart, rtol=0, atol=2e-6 * scale)


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("kind", ["multiclass", "missing", "categorical"])
def test_gpu_path_threads_match_pred_contribs(kind):
    import distshap

    import xgb_models

    booster, X = xgb_models.MODEL_KINDS[kind]()
    X = X[:5]
    ref = booster.predict(xgb_models.dmatrix(X), pred_contribs=True)
    explainer = distshap.TreeExplainer(booster, backend="cuda", layout="xgboost")
    with config_context(small_max_paths=0):
        got = to_host(explainer.shap_values(X)).reshape(ref.shape)
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-4 * max(1.0, np.abs(ref).max()))
