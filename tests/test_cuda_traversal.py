"""The margin traversal on the GPU and the one-kernel additivity check (kernels.cuda.traversal).

* host: the CPU margin is ``base_score`` plus the leaves in tree order (the float64 oracle's
  left fold, bit for bit), the packed device sections hold the model, the launch helpers of
  :mod:`distshap.kernels.cuda.runtime.args` keep what they should;
* CUDA simulator: both GPU traversals (block per row with several tiles and a grid-stride
  loop, thread per row) give the CPU's bits; the fused and the plain check pass right values
  and flag a missed row and a NaN;
* ``gpu``: the same on a GPU with a model of many trees, through the public check functions
  (``AdditivityError`` on a wrong margin), and a public call's bits with the block traversal
  and the thread per row.
"""

from __future__ import annotations

import numpy as np
import pytest

from distshap.kernels import cuda_available
from distshap.kernels.cuda.traversal import packed_arrays
from distshap.kernels.margin import margin_model, predict_margin
from distshap.packed import build_packed_model
from distshap.paths import extract_paths
from distshap.plan.config import config_context

import naive
import tiny
from cudasim import assert_simulator_ok, nvvm_available


def _packed(ens):
    return build_packed_model(extract_paths(ens), margin=margin_model(ens))


def _same(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and np.array_equal(a.view(np.uint64), b.view(np.uint64))


def test_cpu_margin_is_the_left_fold_in_tree_order():
    ens = tiny.random_ensemble(7, n_features=6, n_trees=30, depth=4, n_groups=3, n_categorical=2)
    X = tiny.random_rows(3, ens, 40, 0.2)
    assert _same(predict_margin(_packed(ens), X), naive.predict_margin(ens, X))
    nan = tiny.nan_default_tree()
    Xn = tiny.random_rows(1, nan, 10, 0.5)
    assert _same(predict_margin(_packed(nan), Xn), naive.predict_margin(nan, Xn))


def test_packed_sections_hold_the_model():
    from distshap.kernels.cuda import traversal as m

    ens = tiny.random_ensemble(2, n_features=4, n_trees=5, depth=3, n_groups=2, n_categorical=1)
    model = margin_model(ens)
    host = packed_arrays(model)
    longs = host["longs"]
    for name, arrays, sections in (
        ("left", host["ints"], (m.H_LEFT,)), ("tree_group", host["ints"], (m.H_TREE_GROUP,)),
        ("roots", longs, (m.H_ROOTS,)), ("cat_offsets", longs, (m.H_CAT_OFFSETS,)),
        ("value", host["f64s"], (m.H_VALUE,)), ("base_score", host["f64s"], (m.H_BASE_SCORE,)),
        ("is_categorical", host["bools"], (m.H_IS_CATEGORICAL,)),
    ):  # fmt: skip
        h = sections[0]
        np.testing.assert_array_equal(arrays[longs[h] : longs[h + 1]], model[name], name)
    assert host["f64s"][longs[m.H_MISSING]] == np.float64(model["missing"][0]) or np.isnan(
        model["missing"][0]
    )


def test_launch_configurations_are_kept_per_stream():
    from distshap.kernels.cuda.runtime import args

    class Kernel:
        def __init__(self):
            self.calls = 0

        def __getitem__(self, key):
            self.calls += 1
            return ("config", key)

    k = Kernel()
    args.clear()
    a = args.configured(k, 4, 128, 0)
    assert args.configured(k, 4, 128, 0) is a and k.calls == 1
    args.configured(k, 5, 128, 0)
    assert k.calls == 2
    args.clear()
    args.configured(k, 4, 128, 0)
    assert k.calls == 3
    args.clear()
    assert args.stream_key(0) == 0
    x = np.zeros(3)
    assert args.view(x) is x  # host arrays pass through


_SIM_SCRIPT = r"""
import sys
import numpy as np
import tiny, naive
from distshap.kernels.margin import margin_model, predict_margin
from distshap.kernels.cuda import traversal as T
from distshap.packed import build_packed_model
from distshap.paths import extract_paths
from distshap.kernels.cuda.small.model import read_flag
from distshap.plan.config import config_context
sys.setswitchinterval(1e-4)

def same(a, b, what):
    assert a.shape == b.shape and np.array_equal(a.view(np.uint64), b.view(np.uint64)), what

ens = tiny.random_ensemble(3, n_features=6, n_trees=9, depth=3, n_groups=3, n_categorical=2)
X = tiny.random_rows(2, ens, 5, 0.2)
model = build_packed_model(extract_paths(ens), margin=margin_model(ens))
cpu = predict_margin(model, X)
same(cpu, naive.predict_margin(ens, X), "cpu")
T._TILE = 4  # three tiles: both buffers, a partial last tile (the kernels are keyed by it)
for rows_max in (4096, 0):  # the block traversal, then a thread per row
    with config_context(margin_block_rows=rows_max):
        out = np.full_like(cpu, np.nan)
        T.gpu_margin(model, X, out)
    same(out, cpu, rows_max)
T._MAX_BLOCKS = 2  # two blocks loop over the five rows (the default setting: a block a row)
out = np.full_like(cpu, np.nan)
T.gpu_margin(model, X, out)
same(out, cpu, "grid-stride")
# values that sum to the margin pass; one entry off, or a NaN, is flagged
vals = np.zeros((X.shape[0], 3, 4), np.float32)
vals[:, :, 0] = cpu.astype(np.float32)
vals[:, :, 1] = (cpu - vals[:, :, 0].astype(np.float64)).astype(np.float32)
assert read_flag(*T.check_rows(model, X, vals, 0.5e-4)) is False
assert read_flag(*T.check_values(vals, cpu, 0.5e-4)) is False
bad = vals.copy()
bad[3, 2, 2] += 1e-3 * (1.0 + abs(cpu[3, 2]))
assert read_flag(*T.check_rows(model, X, bad, 0.5e-4)) is True
assert read_flag(*T.check_values(bad, cpu, 0.5e-4)) is True
assert read_flag(*T.check_values(vals, cpu, 0.5e-4)) is False  # the flag was cleared
bad = vals.copy()
bad[0, 0, 3] = np.nan
assert read_flag(*T.check_values(bad, cpu, 0.5e-4)) is True
print("SIMULATOR-OK")
"""


def test_block_traversal_rows_bounded_by_the_setting_and_the_trees():
    from distshap.kernels.cuda.traversal import block_rows_max

    ens = tiny.random_ensemble(4, n_features=5, n_trees=7, depth=3)
    model = _packed(ens)
    assert model.margin["roots"].shape[0] == 7
    with config_context(margin_block_rows=5000, margin_block_rows_per_tree=400):
        assert block_rows_max() == 5000  # no model: the setting alone
        assert block_rows_max(model) == 2800  # 7 trees: 400 rows each
    with config_context(margin_block_rows=1000, margin_block_rows_per_tree=400):
        assert block_rows_max(model) == 1000
    with config_context(margin_block_rows=5000, margin_block_rows_per_tree=0):
        assert block_rows_max(model) == 5000  # no bound a tree


def test_traversal_and_check_under_cuda_simulator():
    assert_simulator_ok(_SIM_SCRIPT, timeout=600)


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="needs a CUDA GPU")
def test_gpu_margin_bits_and_checks():
    import cupy

    from distshap.additivity import check_additivity, check_margin
    from distshap.additivity_rule import AdditivityError

    ens = tiny.random_ensemble(11, n_features=8, n_trees=700, depth=6, n_groups=3,
                               n_categorical=2)  # fmt: skip
    model = _packed(ens)
    for n in (1, 200, 3000):
        X = tiny.random_rows(5, ens, n, 0.1)
        cpu = predict_margin(model, X)
        Xd = cupy.asarray(X)
        for rows_max in (0, 1 << 30, 100):  # a thread per row, the block traversal, either
            with config_context(margin_block_rows=rows_max):
                assert _same(cupy.asnumpy(predict_margin(model, Xd)), cpu), (n, rows_max)
        vals = np.zeros((n, 3, 5), np.float32)
        vals[:, :, 0] = cpu.astype(np.float32)
        vals[:, :, 1] = (cpu - vals[:, :, 0]).astype(np.float32)
        v = cupy.asarray(vals)
        check_margin(v, model, Xd)
        check_additivity(v, cupy.asarray(cpu))
        vals[n // 2, 1, 3] += 0.5
        with pytest.raises(AdditivityError, match=f"rows \\[{n // 2}\\]"):
            check_margin(cupy.asarray(vals), model, Xd)
        with config_context(margin_block_rows=0):  # a thread per row, then the check alone
            check_margin(v, model, Xd)
            with pytest.raises(AdditivityError, match=f"rows \\[{n // 2}\\]"):
                check_margin(cupy.asarray(vals), model, Xd)
        with pytest.raises(AdditivityError, match=f"rows \\[{n // 2}\\]"):
            check_additivity(cupy.asarray(vals), cupy.asarray(cpu))
        check_margin(v, model, Xd)  # the flag was cleared


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="needs a CUDA GPU")
def test_gpu_public_call_bits_do_not_depend_on_the_traversal():
    import cupy
    import xgboost as xgb

    from distshap import TreeExplainer

    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 6)).astype(np.float32)
    y = X[:, 0] + X[:, 1] * X[:, 2]
    booster = xgb.train({"max_depth": 6}, xgb.DMatrix(X, label=y), num_boost_round=60)
    explainer = TreeExplainer(booster, backend="cuda")
    Xd = cupy.asarray(X[:200])
    outs = []
    for on in (False, True):
        with config_context(margin_block_rows=1 << 12 if on else 0):
            outs.append((cupy.asnumpy(explainer.shap_values(Xd)),
                         cupy.asnumpy(explainer.shap_interaction_values(Xd))))  # fmt: skip
    for a, b in zip(*outs, strict=True):
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32))


@pytest.mark.skipif(not nvvm_available(), reason="NVVM (CUDA toolkit compiler) not found")
def test_traversal_kernels_compile():
    from numba import cuda

    from distshap.kernels.cuda import traversal
    from distshap.kernels.cuda.runtime.ptx import _device_free_compilation

    rows, block, check, values = traversal._kernels()
    consts = "int32[::1], int64[::1], float64[::1], boolean[::1]"
    sigs = []
    for X in ("float32[:, ::1]", "float64[:, ::1]"):
        sigs += [
            ("rows", rows, f"void({X}, {consts}, float64[:, ::1])"),
            ("block", block, f"void({X}, {consts}, float64[:, ::1])"),
            ("check", check, f"void(float32[:, :, ::1], {X}, {consts}, int32[::1], float64)"),
        ]
    sigs.append(("values", values, "void(float32[:, :, ::1], float64[:, ::1], int32[::1], "
                                   "float64)"))  # fmt: skip
    with _device_free_compilation((9, 0)):
        for name, kernel, sig in sigs:
            ptx, _ = cuda.compile_ptx(kernel.py_func, sig, cc=(9, 0))
            assert "call.uni" not in ptx, f"{name} has a non-inlined call"
            assert "atom." not in ptx, f"{name}: no atomics"
            if name != "rows":
                assert "bar.sync" in ptx, name  # the block's barriers
