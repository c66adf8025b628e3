"""The one-launch route of small models (distshap.kernels.cuda.small).

* host tests (no GPU): :func:`fits` at its boundaries, the constant arrays' layout, and PTX of
  the three kernels where NVVM is present (no atomics, warp shuffles, the float64 DP);
* a CUDA-simulator run of the real kernel code: against the CPU kernel, the float64 oracle
  and XGBoost (regression, multiclass, missing values, categorical splits), bits identical
  for any batching and grid, the check fused in the kernel (and its error), the dispatch and
  the pair-slot route;
* ``gpu``-marked tests: the same on a GPU, against the regular route.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from distshap.kernels import cuda_available
from distshap.kernels.margin import margin_model
from distshap.packed import build_packed_model
from distshap.paths import extract_paths
from distshap.plan.routes import small_fits
from distshap.warmup import chain_ensemble

import tiny
from cudasim import assert_simulator_ok, nvvm_available


def _sm():
    from distshap.kernels.cuda.small import model as small_model

    return small_model


def _packed(ens, budget=1 << 30):
    return build_packed_model(
        extract_paths(ens), table_budget_bytes=budget, margin=margin_model(ens)
    )


# ------------------------------------------------------------------------------------------
# no GPU needed
# ------------------------------------------------------------------------------------------


def test_fits_boundaries():
    from distshap.plan.config import config_context, get_config

    ens = tiny.random_ensemble(1, n_features=6, n_trees=10, depth=3, n_groups=2)
    packed = _packed(ens)
    assert small_fits(packed, False) and small_fits(packed, True)
    with config_context(small_max_paths=packed.num_paths):
        assert small_fits(packed, False)
    with config_context(small_max_paths=packed.num_paths - 1):
        assert not small_fits(packed, False) and not small_fits(packed, True)
    with config_context(small_max_paths=0):  # the route off
        assert not small_fits(_packed(tiny.stump()), False)
    config = get_config()
    # the longest path: small_max_path_features features fit, one more does not
    k = config.small_max_path_features
    assert small_fits(_packed(chain_ensemble(k, k)), True)
    assert not small_fits(_packed(chain_ensemble(k + 1, k + 1)), False)
    # columns: F + 1 within the compiled accumulators (interaction values: (F + 1)**2)
    for interactions, columns in ((False, config.small_max_shap_columns),
                                  (True, config.small_max_interaction_columns)):  # fmt: skip
        wide = _packed(tiny.random_ensemble(2, n_features=columns - 1, n_trees=2, depth=2))
        wider = _packed(tiny.random_ensemble(2, n_features=columns, n_trees=2, depth=2))
        assert small_fits(wide, interactions) and not small_fits(wider, interactions)
    assert small_fits(_packed(tiny.random_ensemble(3, n_trees=32, depth=1, n_groups=16)), False)
    assert not small_fits(_packed(tiny.random_ensemble(3, n_trees=34, depth=1, n_groups=17)), False)
    # a model without margin arrays fits too (the check is then the caller's: none)
    assert small_fits(dataclasses.replace(packed, margin=None), False)
    with pytest.raises(TypeError, match="PackedModel"):
        small_fits(ens, False)


def test_host_arrays_sections_hold_the_model():
    small = _sm()
    ens = tiny.random_ensemble(4, n_features=5, n_trees=6, depth=3, n_groups=3, n_categorical=1)
    packed = _packed(ens)
    host = small.host_arrays(packed)
    longs = host["longs"]

    def section(name, h):
        return host[name][longs[h] : longs[h + 1]]

    order = section("ints", small.H_PATHS)
    groups = section("ints", small.H_GROUP_PATHS)
    assert sorted(order.tolist()) == list(range(packed.num_paths))
    for g in range(packed.num_groups):  # each group's paths, in packed order
        paths = order[groups[g] : groups[g + 1]]
        assert np.array_equal(paths, np.flatnonzero(packed.path_group == g))
    assert np.array_equal(section("longs", small.H_PATH_OFFSETS), packed.path_offsets)
    assert np.array_equal(section("ints", small.H_FEATURE), packed.feature)
    assert np.array_equal(section("f32s", small.H_LOWER), packed.lower)
    assert np.array_equal(section("f32s", small.H_UPPER), packed.upper)
    assert np.array_equal(section("f64s", small.H_ZERO), packed.zero_fraction)
    assert np.array_equal(section("f64s", small.H_VALUE), packed.path_value)
    assert np.array_equal(section("f64s", small.H_EXPECTED), packed.expected_value)
    assert np.array_equal(section("bools", small.H_MISSING), packed.missing)
    assert np.array_equal(section("bools", small.H_CAT_OTHER), packed.cat_other)
    assert np.array_equal(section("longs", small.H_CAT_OFFSETS), packed.cat_offsets)
    m = packed.margin
    assert np.array_equal(section("ints", small.H_LEFT), m["left"])
    assert np.array_equal(section("ints", small.H_TREE_GROUP), m["tree_group"])
    assert np.array_equal(section("longs", small.H_ROOTS), m["roots"])
    assert np.array_equal(section("f64s", small.H_THRESHOLD), m["threshold"])
    assert np.array_equal(section("f64s", small.H_BASE_SCORE), m["base_score"])
    assert not section("f64s", small.H_ZEROS).any()
    assert np.array_equal(section("bools", small.H_DEFAULT_LEFT), m["default_left"])
    assert np.array_equal(host["words"][: packed.cat_words.size], packed.cat_words)


@pytest.mark.skipif(not nvvm_available(), reason="NVVM (CUDA toolkit compiler) not found")
def test_slot_kernel_compiles():
    from numba import cuda

    from distshap.kernels.cuda.runtime.ptx import _device_free_compilation
    from distshap.kernels.cuda.small.kernels import slot_kernel

    X = "float32[:, ::1]"
    consts = "int32[::1], int64[::1], float32[::1], float64[::1], boolean[::1], uint32[::1]"
    sig = f"void({X}, int64[:, ::1], {consts}, float64, int32[::1], int32[::1], int64[::1])"
    with _device_free_compilation((9, 0)):
        ptx, _ = cuda.compile_ptx(slot_kernel(_sm().small_limits()).py_func, sig, cc=(9, 0))
    assert "atom." not in ptx, "one warp writes each row, no atomics"
    assert "shfl.sync" in ptx  # the butterfly
    assert "div.rn.f64" in ptx  # the float64 DP
    assert "call.uni" not in ptx, "a non-inlined call"


# ------------------------------------------------------------------------------------------
# the CUDA simulator
# ------------------------------------------------------------------------------------------

_SIM_SCRIPT = r"""
from distshap.plan.routes import small_fits
import dataclasses
import sys

import numpy as np
import xgboost as xgb

import naive
import tiny
import distshap.kernels as kernels
from distshap import TreeExplainer, dispatch
from distshap.additivity_rule import AdditivityError
from distshap.kernels import cpu
from distshap.kernels import cuda as kc
from distshap.kernels.cuda import launch
from distshap.kernels.cuda.small import gather as small_gather, kernels as small_kernels
from distshap.kernels.cuda.small import model as small_model
from distshap.kernels.margin import margin_model, predict_margin
from distshap.plan.config import get_config
from distshap.packed import build_packed_model
from distshap.paths import extract_paths
from distshap.warmup import chain_ensemble

sys.setswitchinterval(1e-4)  # simulated threads meet at barriers: hand over quickly

def packed_of(ens):
    return build_packed_model(extract_paths(ens), margin=margin_model(ens))

def close(got, ref, what, rtol=2e-6):
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    assert got.shape == ref.shape, (what, got.shape, ref.shape)
    err = float(np.abs(got - ref).max())
    assert err <= rtol * max(1.0, float(np.abs(ref).max())), (what, err)

def same(a, b, what):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32)), what

def checked_values(packed, X, raw, inter):
    values, flagged = launch.checked_values(packed, X, raw, inter)
    assert not flagged
    return values

def both(packed, X, what, oracle=None, checked=False):
    # SHAP and interaction values against the CPU kernel (and the oracle); checked == unchecked
    out = []
    for inter in (False, True):
        assert small_fits(packed, inter), what
        got = (kc.interaction_values if inter else kc.shap_values)(packed, X)
        assert isinstance(got, np.ndarray) and got.dtype == np.float32
        close(got, (cpu.interaction_values if inter else cpu.shap_values)(packed, X), what)
        if oracle is not None:
            ref = (naive.treeshap_interactions_recursive_rows if inter
                   else naive.treeshap_recursive_rows)(oracle, X).reshape(got.shape)
            close(got, ref, (what, "oracle"))
        if checked:
            same(checked_values(packed, X, X, inter), got, (what, "checked"))
        out.append(got)
    return out

# random ensembles: regression, multiclass, categorical, NaN rows
ens = tiny.random_ensemble(3, n_features=6, n_trees=4, depth=3, n_groups=2, n_categorical=1)
X = tiny.random_rows(2, ens, 4, 0.2)
packed = packed_of(ens)
shap, inter = both(packed, X, "multiclass, categorical", oracle=ens, checked=True)
ens1 = tiny.random_ensemble(5, n_features=4, n_trees=4, depth=4)
both(packed_of(ens1), tiny.random_rows(6, ens1, 2, 0.3), "regression", oracle=ens1)
both(packed_of(tiny.nan_default_tree()), tiny.random_rows(5, tiny.nan_default_tree(), 2, 0.4),
     "missing", oracle=tiny.nan_default_tree())
both(packed_of(tiny.categorical_tree()), tiny.random_rows(4, tiny.categorical_tree(), 2, 0.2),
     "categorical", oracle=tiny.categorical_tree())
K8 = get_config().small_max_path_features
chain = chain_ensemble(K8, K8)
Xc = np.full((2, K8), 0.25, np.float32)
Xc[0, 3], Xc[1, 5] = 0.75, np.nan
both(packed_of(chain), Xc, "longest path", oracle=chain)  # every local array full
stump = tiny.stump()  # paths without features: the bias only
both(packed_of(stump), tiny.random_rows(1, stump, 2, 0.0), "stump", oracle=stump)

# bits: any batch, any grid (rows per warp), the same
for i in range(X.shape[0]):
    same(kc.shap_values(packed, X[i : i + 1])[0], shap[i], ("row", i))
same(kc.interaction_values(packed, X[2:4]), inter[2:4], "two rows")
small_gather._MAX_BLOCKS = small_kernels._MAX_BLOCKS = 1  # one block loops over the rows
kc.clear_cache()
same(kc.shap_values(packed, X), shap, "grid-stride")
same(kc.interaction_values(packed, X[:3], batch_rows=1), inter[:3], "grid-stride, batch_rows")
small_gather._MAX_BLOCKS, small_kernels._MAX_BLOCKS = 65535, 4096
try:
    kc.shap_values(packed, X, batch_rows=0)
    raise AssertionError("batch_rows=0 accepted")
except ValueError as e:
    assert "batch_rows" in str(e)
assert kc.shap_values(packed, X[:0]).shape == (0, 2, 7)

# the check in the kernel: a margin that misses every row's sum by 1 is flagged (the caller's
# full check then raises its error, below through the dispatch)
bad = dict(packed.margin, base_score=packed.margin["base_score"] + 1.0)
wrong = dataclasses.replace(packed, margin=bad, digest="")
for kind in (False, True):
    assert launch.checked_values(wrong, X, X, kind)[1], kind
assert small_model.read_flag(small_model.check_flag(), 0) is False  # cleared for the next call
same(checked_values(packed, X, X, False), shap, "after a failure")

# through the dispatch (the explainer's path): the fused check replaces the separate one
kernels.get_backend = lambda name: kc
kernels.resolve_backend = lambda name, cupy_data=False: "cuda"
calls = []
margin = dispatch.predict_margin
dispatch.predict_margin = lambda *a: calls.append(1) or margin(*a)
same(dispatch.explain_rows(packed, X, backend="cuda"), shap, "dispatch")
same(dispatch.explain_rows(packed, X, True, backend="cuda"), inter, "dispatch interactions")
assert not calls, "the separate traversal ran"
try:
    dispatch.explain_rows(wrong, X, backend="cuda", first_row=10)
    raise AssertionError("dispatch: a wrong margin passed")
except AdditivityError as e:
    assert "do not sum to" in str(e) and "from row 10" in str(e), str(e)
same(dispatch.explain_rows(wrong, X, backend="cuda", check=False), shap, "check off")

# XGBoost: regression with missing values, multiclass, categorical; its margin as raw values
rng = np.random.default_rng(0)
Xt = rng.normal(size=(200, 5)).astype(np.float32)
Xt[rng.random(Xt.shape) < 0.1] = np.nan
y = np.nan_to_num(Xt[:, 0]) + np.nan_to_num(Xt[:, 1]) * np.nan_to_num(Xt[:, 2])
for params in ({"objective": "reg:squarederror"},
               {"objective": "multi:softprob", "num_class": 3}):
    label = y if params["objective"].startswith("reg") else np.digitize(y, [-0.5, 0.5])
    booster = xgb.train(dict(params, max_depth=3, eta=0.5), xgb.DMatrix(Xt, label=label),
                        num_boost_round=4)
    explainer = TreeExplainer(booster, backend="cpu")
    assert small_fits(explainer.packed, True)
    Xe = Xt[:2]
    for inter in (False, True):
        got = checked_values(explainer.packed, Xe, Xe, inter)
        kw = {"pred_interactions": True} if inter else {"pred_contribs": True}
        ref = booster.predict(xgb.DMatrix(Xe), **kw).reshape(got.shape)
        close(got, ref, (params["objective"], inter), rtol=1e-5)
import pandas as pd
frame = pd.DataFrame({"a": pd.Categorical(rng.integers(0, 5, 200)), "b": Xt[:, 1]})
cat_y = (frame["a"].cat.codes.to_numpy() % 2) + np.nan_to_num(Xt[:, 1])
booster = xgb.train({"max_depth": 3, "tree_method": "hist", "max_cat_to_onehot": 1},
                    xgb.DMatrix(frame, cat_y, enable_categorical=True), num_boost_round=4)
explainer = TreeExplainer(booster, backend="cpu")
rows = np.ascontiguousarray(np.column_stack([frame["a"].cat.codes, frame["b"]])[:2], np.float32)
for inter in (False, True):
    got = checked_values(explainer.packed, rows, rows, inter)
    kw = {"pred_interactions": True} if inter else {"pred_contribs": True}
    ref = booster.predict(xgb.DMatrix(frame[:2], enable_categorical=True), **kw)
    close(got, ref.reshape(got.shape), ("categorical", inter), rtol=1e-5)
print("SIMULATOR-OK")
"""


def test_small_route_under_cuda_simulator():
    """The real kernel code in Numba's CUDA simulator (no GPU): values, bits, the check."""
    assert_simulator_ok(_SIM_SCRIPT, timeout=600)


_SIM_SLOTS = r"""
from distshap.plan.routes import small_fits
import sys
import numpy as np
import tiny
import distshap.kernels.cuda as kc
from distshap.kernels.cuda import small
from distshap.kernels.cuda import pairs as kp
from distshap.kernels.margin import margin_model
from distshap.packed import build_packed_model
from distshap.pair_slots import build_pair_slots
from distshap.paths import extract_paths

sys.setswitchinterval(1e-4)
ens = tiny.random_ensemble(3, n_features=6, n_trees=3, depth=3, n_groups=2, n_categorical=1)
X = tiny.random_rows(2, ens, 3, 0.15)
packed = build_packed_model(extract_paths(ens), table_budget_bytes=0, margin=margin_model(ens))
assert small_fits(packed, True)
slots = build_pair_slots(packed)
full = kc.interaction_values(packed, X)
group = np.repeat(np.arange(slots.num_groups), np.diff(slots.slot_offsets))
got = kp.interaction_slot_values(packed, X, slots, batch_rows=2)
want = full[:, group, slots.slot_i, slots.slot_j]
assert np.array_equal(np.asarray(got).view(np.uint32), want.view(np.uint32))
print("SIMULATOR-OK")
"""


def test_small_pair_slots_keep_the_matrix_bits_under_cuda_simulator():
    """Pair slots of a small model (top pairs, summaries) hold the bits of its matrices."""
    assert_simulator_ok(_SIM_SLOTS, timeout=600)


# ------------------------------------------------------------------------------------------
# on a GPU
# ------------------------------------------------------------------------------------------

gpu = pytest.mark.skipif(not cuda_available(), reason="no CUDA GPU visible")


@pytest.mark.gpu
@gpu
def test_gpu_small_route_against_regular_route_and_xgboost(monkeypatch):
    import cupy
    import xgboost as xgb

    from distshap import TreeExplainer
    from distshap.kernels import cuda as kc
    from distshap.plan.config import config_context

    rng = np.random.default_rng(1)
    X = rng.normal(size=(3000, 8)).astype(np.float32)
    X[rng.random(X.shape) < 0.05] = np.nan
    y = np.nan_to_num(X[:, 0]) * 2 + np.nan_to_num(X[:, 3]) * np.nan_to_num(X[:, 5])
    booster = xgb.train({"max_depth": 3}, xgb.DMatrix(X, label=y), num_boost_round=10)
    explainer = TreeExplainer(booster, layout="xgboost", backend="cuda")
    packed = explainer.packed
    assert small_fits(packed, False) and small_fits(packed, True)
    for inter, n in ((False, 3000), (True, 200)):
        Xd = cupy.asarray(X[:n])
        call = explainer.shap_interaction_values if inter else explainer.shap_values
        got = call(Xd).get()
        ref = booster.predict(
            xgb.DMatrix(X[:n]),
            **({"pred_interactions": True} if inter else {"pred_contribs": True}),
        )
        scale = max(1.0, float(np.abs(ref).max()))
        assert np.abs(got - ref).max() <= 1e-5 * scale
        f = kc.interaction_values if inter else kc.shap_values
        rows = packed.encoding.apply(X[:n])
        full = f(packed, rows).get()  # without the check: the same bits
        assert np.array_equal(full.reshape(got.shape), got)
        for batch in (1, 7, 1000):  # the bits of a row are its own
            parts = [f(packed, rows[i : i + batch]).get() for i in range(0, n, batch)]
            assert np.array_equal(np.concatenate(parts), full)
        with config_context(small_max_paths=0):  # the regular route
            regular = f(packed, rows).get()
        assert np.abs(regular - full).max() <= 2e-6 * scale
    bad = dict(packed.margin, base_score=packed.margin["base_score"] + 1.0)
    wrong = dataclasses.replace(packed, margin=bad, digest="")
    from distshap.additivity_rule import AdditivityError
    from distshap.dispatch import explain_rows

    with pytest.raises(AdditivityError, match="do not sum to"):
        explain_rows(wrong, cupy.asarray(X[:100]), backend="cuda")


# ------------------------------------------------------------------------------------------
# the warp-per-row kernels (models whose gather matrices do not fit shared memory)
# ------------------------------------------------------------------------------------------


def test_merged_arrays_hold_the_sections_of_host_arrays():
    small = _sm()
    ens = tiny.random_ensemble(3, n_features=6, n_trees=4, depth=3, n_groups=2, n_categorical=1)
    packed = _packed(ens)
    host = small.host_arrays(packed)
    I, D = small.merged_arrays(packed)  # noqa: E741
    assert I.dtype == np.int64 and D.dtype == np.float64
    for name, _, sections in small._SECTIONS:
        merged = D if name in ("f32s", "f64s") else I
        for s in sections:
            at = small._AT[(name, s)]
            old = host[name][host["longs"][at] : host["longs"][at + 1]]
            new = merged[I[at] : I[at + 1]]
            assert np.array_equal(new, old.astype(new.dtype), equal_nan=True), (name, s)
            if name == "f32s":  # float32 values exact in float64
                assert np.array_equal(new.astype(np.float32).view(np.uint32), old.view(np.uint32))
    words = I[I[small.H_WORDS] :]
    assert np.array_equal(words, host["words"].astype(np.int64))
    from distshap.plan.gpu import fixed_point_shift, path_bounds

    bounds = path_bounds(packed)
    scales = D[I[small.H_SCALES] : I[small.H_SCALES] + 2]
    assert scales.tolist() == [2.0 ** fixed_point_shift(b) for b in bounds]


def merged_signatures() -> dict:
    """Name -> (kernel, signature) of merged kernels: loops and unrolled DP, rows once or not."""
    from distshap.kernels.cuda.small.kernels import merged_kernel

    limits = _sm().small_limits()
    X = "float32[:, ::1]"
    tail = "int32[::1], int64[::1], float64[::1], boolean"
    out = {}
    for kind, o in (("shap", "float32[:, :, ::1]"), ("interactions", "float32[:, :, :, ::1]")):
        for K in (0, 3):
            out[f"merged_{kind}_K{K}"] = (
                merged_kernel(kind, K, False, limits), f"void({X}, {o}, {tail})"
            )  # fmt: skip
        out[f"merged_{kind}_K3_raw64"] = (
            merged_kernel(kind, 3, True, limits), f"void({X}, float64[:, ::1], {o}, {tail})"
        )  # fmt: skip
    return out


@pytest.mark.skipif(not nvvm_available(), reason="NVVM (CUDA toolkit compiler) not found")
def test_merged_kernels_compile_and_unrolled_dp_leaves_local_memory():
    import re

    from numba import cuda

    from distshap.kernels.cuda.runtime.ptx import _device_free_compilation

    depot = {}
    with _device_free_compilation((9, 0)):
        for name, (kernel, sig) in merged_signatures().items():
            ptx, _ = cuda.compile_ptx(kernel.py_func, sig, cc=(9, 0))
            assert "atom." not in ptx, f"{name}: one warp writes each row, no atomics"
            assert "shfl.sync" in ptx, name
            assert "div.rn.f64" in ptx, name
            assert "call.uni" not in ptx, f"{name} has a non-inlined call"
            depot[name] = sum(int(b) for b in re.findall(r"__local_depot\d+\[(\d+)\]", ptx))
    for kind in ("shap", "interactions"):  # the unrolled DP's arrays are no longer local
        assert depot[f"merged_{kind}_K3"] < depot[f"merged_{kind}_K0"], depot


_SIM_MERGED = r"""
import dataclasses
import sys

import numpy as np
import tiny
from distshap.kernels import cpu
from distshap.kernels.cuda.small import kernels as small_kernels, model as small_model
from distshap.kernels.margin import margin_model
from distshap.packed import build_packed_model
from distshap.paths import extract_paths
from distshap.plan.config import get_config
from distshap.warmup import chain_ensemble

sys.setswitchinterval(1e-4)

def packed_of(ens):
    return build_packed_model(extract_paths(ens), margin=margin_model(ens))

def same(a, b, what):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32)), what

def run(mm, packed, X, raw, inter, check):
    n, G, F1 = X.shape[0], packed.num_groups, packed.num_features + 1
    out = np.empty((n, G, F1, F1) if inter else (n, G, F1), np.float32)
    flag, s = small_kernels.launch_merged(mm, X, raw, out, inter, check)
    return out, small_model.read_flag(flag, s)

def merged(packed, X, what, raw=None, K=None, base=None):
    # the unrolled DP and the loops: the same bits, checked or not, SHAP and interactions;
    # base: the unchecked values of a call on the same model and rows (checked runs only)
    mm = small_model.merged_model(packed)
    if K is not None:
        assert mm.K == K, (what, mm.K)
    loops = dataclasses.replace(mm, K=0)
    runs = ((None, False), (X if raw is None else raw, True)) if base is None else ((raw, True),)
    values = {}
    for inter in (False, True):
        outs = [] if base is None else [base[inter]]
        for m in (mm, loops):
            for r, check in runs:
                out, failed = run(m, packed, X, r, inter, check)
                assert not failed, (what, inter)
                outs.append(out)
        for i, o in enumerate(outs[1:]):
            same(o, outs[0], (what, inter, i))
        ref = (cpu.interaction_values if inter else cpu.shap_values)(packed, X)
        err = float(np.abs(outs[0] - ref).max())
        assert err <= 2e-6 * max(1.0, float(np.abs(ref).max())), (what, err)
        values[inter] = outs[0]
    return values

ens = tiny.random_ensemble(3, n_features=6, n_trees=4, depth=3, n_groups=2, n_categorical=1)
X = tiny.random_rows(2, ens, 4, 0.2)
packed = packed_of(ens)
base = merged(packed, X, "multiclass, categorical, NaN", K=3)
merged(packed, X, "raw float64", raw=X.astype(np.float64), base=base)
ens5 = tiny.random_ensemble(8, n_features=6, n_trees=2, depth=5)
merged(packed_of(ens5), tiny.random_rows(8, ens5, 2, 0.3), "depth 5")
K8 = get_config().small_max_path_features
chain = chain_ensemble(K8, K8)
Xc = np.full((2, K8), 0.25, np.float32)
Xc[0, 3], Xc[1, 5] = 0.75, np.nan
merged(packed_of(chain), Xc, "longest path: loops", K=0)
chain4 = chain_ensemble(4, 4)
merged(packed_of(chain4), np.full((2, 4), 0.25, np.float32), "UNROLL_MAX features", K=4)
stump = tiny.stump()
merged(packed_of(stump), tiny.random_rows(1, stump, 2, 0.0), "stump", K=1)

# a wrong margin is flagged
bad = dict(packed.margin, base_score=packed.margin["base_score"] + 1.0)
wrong = dataclasses.replace(packed, margin=bad, digest="")
for inter in (False, True):
    assert run(small_model.merged_model(wrong), wrong, X, X, inter, True)[1], inter
assert small_model.read_flag(small_model.check_flag(), 0) is False
print("SIMULATOR-OK")
"""


def test_merged_kernels_keep_the_bits_under_cuda_simulator():
    """The unrolled and looped warp-per-row kernels give the same float32 bits (values, checked
    values, raw values of another dtype), exact against the CPU kernel, and flag a wrong
    margin."""
    assert_simulator_ok(_SIM_MERGED, timeout=600)


@pytest.mark.gpu
@gpu
def test_gpu_merged_kernels_keep_the_bits():
    """On a GPU (where the compiler may contract multiplies and adds): the unrolled and looped
    warp-per-row kernels give the same bits, SHAP and interactions, the rows once or raw
    float64 values."""
    import dataclasses

    import cupy
    import xgboost as xgb

    from distshap import TreeExplainer
    from distshap.kernels.cuda.small import kernels as small_kernels
    from distshap.plan.config import config_context

    sm = _sm()
    rng = np.random.default_rng(2)
    X = rng.normal(size=(2000, 8)).astype(np.float32)
    X[rng.random(X.shape) < 0.05] = np.nan
    y = np.nan_to_num(X[:, 0]) * 2 + np.nan_to_num(X[:, 3]) * np.nan_to_num(X[:, 5])
    with config_context(small_max_paths=1024):  # 10 trees of depth 6: up to 640 paths
        for depth in (3, 4, 6):  # unrolled for 1..4 features, loops beyond
            booster = xgb.train({"max_depth": depth}, xgb.DMatrix(X, label=y),
                                num_boost_round=10)  # fmt: skip
            packed = TreeExplainer(booster, backend="cuda").packed
            assert small_fits(packed, False)
            mm = sm.merged_model(packed)
            assert 0 <= mm.K <= min(depth, sm.UNROLL_MAX)
            Xd = cupy.asarray(packed.encoding.apply(X))
            raw64 = Xd.astype(cupy.float64)
            G, F1 = packed.num_groups, packed.num_features + 1
            for inter, n in ((False, 2000), (True, 200)):
                if not small_fits(packed, inter):
                    continue
                got = []
                for m in (mm, dataclasses.replace(mm, K=0)):
                    for raw, check in ((None, False), (Xd[:n], True), (raw64[:n], True)):
                        out = cupy.empty((n, G, F1, F1) if inter else (n, G, F1), np.float32)
                        flag, s = small_kernels.launch_merged(m, Xd[:n], raw, out, inter, check)
                        assert not sm.read_flag(flag, s)
                        got.append(out.get())
                for a in got[1:]:
                    assert np.array_equal(a.view(np.uint32), got[0].view(np.uint32)), (depth, inter)


# ------------------------------------------------------------------------------------------
# the gather kernels (distshap.kernels.cuda.small.gather, the default small route) and the
# driver launch (distshap.kernels.cuda.runtime.rawlaunch)
# ------------------------------------------------------------------------------------------


def test_gather_lists_cover_every_slot_of_its_entries():
    from distshap.kernels.cuda.small import gather as sg

    ens = tiny.random_ensemble(6, n_features=5, n_trees=5, depth=3, n_groups=2, n_categorical=1)
    packed = _packed(ens)
    I, D = sg.gather_arrays(packed)  # noqa: E741
    I0, D0 = _sm().merged_arrays(packed)  # noqa: E741
    assert np.array_equal(I[: I0.size], I0) and np.array_equal(D, D0, equal_nan=True)
    head = I[-sg._E :]
    k = np.diff(packed.path_offsets) - 1
    offsets, feature, group = packed.path_offsets, packed.feature, packed.path_group
    F1, G = packed.num_features + 1, packed.num_groups
    for inter in (False, True):
        at = sg.X_COFF_INTER if inter else sg.X_COFF_SHAP
        coff = I[head[at] : head[at] + k.size + 1]
        per_path = k * (k + 1) // 2 if inter else k
        assert np.array_equal(np.diff(coff), per_path) and coff[0] == 0
        assert head[sg.X_C_INTER if inter else sg.X_C_SHAP] == per_path.sum()
        W = F1 * F1 if inter else F1
        eo = head[sg.X_EOFF_INTER if inter else sg.X_EOFF_SHAP]
        eoff = I[eo : eo + G * W + 1]
        it0 = head[sg.X_ITEMS_INTER if inter else sg.X_ITEMS_SHAP]
        items = I[it0 : it0 + eoff[-1]]
        # the expected (entry, slot) pairs, from the packed model directly
        want = []
        for p in range(k.size):
            f = feature[offsets[p] + 1 : offsets[p + 1]]
            base = group[p] * W
            pair, rank = {}, coff[p] + k[p]
            for i in range(k[p]):
                for c in range(i + 1, k[p]):
                    pair[i, c] = pair[c, i] = rank
                    rank += 1
            for x in range(k[p]):
                if not inter:
                    want.append((base + f[x], coff[p] + x))
                    continue
                for y in range(k[p]):
                    want.append((base + f[x] * F1 + f[y], coff[p] + x if x == y else pair[x, y]))
        got = [(e, int(s)) for e in range(G * W) for s in items[eoff[e] : eoff[e + 1]]]
        assert got == sorted(want, key=lambda t: t[0])  # entry by entry, in path order
    assert sg.rows_per_block(10_000, 250) == -(-10_000 // sg.TARGET_BLOCKS)
    assert sg.rows_per_block(1, 250) == 1
    assert sg.rows_per_block(10**9, sg.SHARED_BYTES // 8) == 1  # within the shared memory


def gather_signatures() -> dict:
    """Name -> (kernel, signature) of gather kernels (rows once or a float64 copy, slots)."""
    from distshap.kernels.cuda.small import gather as sg

    X = "float32[:, ::1]"
    tail = "int32[::1], int64[::1], float64[::1], boolean, int64"
    out = {}
    for kind, o in (("shap", "float32[:, :, ::1]"), ("interactions", "float32[:, :, :, ::1]")):
        out[f"gather_{kind}_K3"] = (sg.gather_kernel(kind, 3, False), f"void({X}, {o}, {tail})")
        out[f"gather_{kind}_K3_raw64"] = (
            sg.gather_kernel(kind, 3, True), f"void({X}, float64[:, ::1], {o}, {tail})"
        )  # fmt: skip
    out["gather_slots_K3"] = (
        sg.gather_kernel("slots", 3, False),
        f"void({X}, int64[:, ::1], int64[::1], float64[::1], int64, int32[::1], int32[::1], "
        "int64[::1])",
    )
    return out


@pytest.mark.skipif(not nvvm_available(), reason="NVVM (CUDA toolkit compiler) not found")
def test_gather_kernels_compile_without_local_memory_or_divisions():
    import re

    from numba import cuda

    from distshap.kernels.cuda.runtime.ptx import _device_free_compilation

    with _device_free_compilation((9, 0)):
        for name, (kernel, sig) in gather_signatures().items():
            ptx, _ = cuda.compile_ptx(kernel.py_func, sig, cc=(9, 0))
            assert "atom." not in ptx, f"{name}: each entry written by one thread, no atomics"
            assert "div.rn.f64" not in ptx, f"{name}: the quadrature needs no division"
            assert "call.uni" not in ptx, f"{name} has a non-inlined call"
            assert "bar.sync" in ptx, name  # the phases' barriers
            assert not re.findall(r"__local_depot\d+\[(\d+)\]", ptx), f"{name}: local memory"


@pytest.mark.skipif(not nvvm_available(), reason="NVVM (CUDA toolkit compiler) not found")
def test_rawlaunch_layout_is_the_kernels_ptx_parameter_list():
    from numba import cuda, types

    from distshap.kernels.cuda.runtime import rawlaunch
    from distshap.kernels.cuda.runtime.ptx import _device_free_compilation

    arr = types.Array
    argtypes = (arr(types.float32, 2, "C"), arr(types.float64, 2, "C"),
                arr(types.float32, 4, "C"), arr(types.int32, 1, "C"),
                arr(types.int64, 1, "C"), arr(types.float64, 1, "C"), types.boolean,
                types.int64)  # fmt: skip
    layout = rawlaunch.flat_layout(argtypes)
    assert [(at, kind) for at, kind, _ in layout] == [
        (0, "array"), (9, "array"), (18, "array"), (31, "array"), (38, "array"),
        (45, "array"), (52, "bool"), (53, "int")]  # fmt: skip
    kernel, sig = gather_signatures()["gather_interactions_K3_raw64"]
    with _device_free_compilation((9, 0)):
        ptx, _ = cuda.compile_ptx(kernel.py_func, sig, cc=(9, 0))
    assert rawlaunch.ptx_param_widths(ptx) == rawlaunch._widths(layout)
    with pytest.raises(TypeError, match="no layout"):
        rawlaunch.flat_layout((types.complex128,))
    with pytest.raises(ValueError, match="entry"):
        rawlaunch.ptx_param_widths(".version 8.0")


_SIM_GATHER = r"""
import dataclasses
import sys

import numpy as np
import naive
import tiny
from distshap.additivity_rule import AdditivityError
from distshap.kernels import cpu
from distshap.kernels import cuda as kc
from distshap.kernels.cuda import launch, small
from distshap.kernels.cuda.small import gather as small_gather, kernels as small_kernels
from distshap.kernels.cuda.small import model as small_model
from distshap.kernels.cuda import pairs as kp
from distshap.plan.config import get_config
from distshap.kernels.margin import margin_model
from distshap.packed import build_packed_model
from distshap.pair_slots import build_pair_slots
from distshap.paths import extract_paths
from distshap.warmup import chain_ensemble

sys.setswitchinterval(1e-4)

def packed_of(ens):
    return build_packed_model(extract_paths(ens), margin=margin_model(ens))

def close(got, ref, what, rtol=2e-6):
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    assert got.shape == ref.shape, (what, got.shape, ref.shape)
    err = float(np.abs(got - ref).max())
    assert err <= rtol * max(1.0, float(np.abs(ref).max())), (what, err)

def same(a, b, what):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32)), what

def checked_values(packed, X, raw, inter):
    values, flagged = launch.checked_values(packed, X, raw, inter)
    assert not flagged
    return values

def both(packed, X, what, oracle=None):
    out = []
    for inter in (False, True):
        assert small.route(packed, inter)[0] is small_gather.launch_gather, what
        got = (kc.interaction_values if inter else kc.shap_values)(packed, X)
        close(got, (cpu.interaction_values if inter else cpu.shap_values)(packed, X), what)
        if oracle is not None:
            ref = (naive.treeshap_interactions_recursive_rows if inter
                   else naive.treeshap_recursive_rows)(oracle, X).reshape(got.shape)
            close(got, ref, (what, "oracle"))
        same(checked_values(packed, X, X, inter), got, (what, "checked"))
        out.append(got)
    return out

ens = tiny.random_ensemble(3, n_features=5, n_trees=3, depth=3, n_groups=2, n_categorical=1)
X = tiny.random_rows(2, ens, 3, 0.2)
packed = packed_of(ens)
shap, inter = both(packed, X, "multiclass, categorical, NaN", oracle=ens)
K8 = get_config().small_max_path_features
chain = chain_ensemble(K8, K8)
Xc = np.full((1, K8), 0.25, np.float32)
Xc[0, 3] = np.nan
both(packed_of(chain), Xc, "longest path (K = 8, 4 nodes)", oracle=chain)
stump = tiny.stump()
both(packed_of(stump), tiny.random_rows(1, stump, 1, 0.0), "stump", oracle=stump)

# bits: any rows a block, grid, batch; a float64 copy of the rows for the check
for i in range(X.shape[0]):
    same(kc.shap_values(packed, X[i : i + 1])[0], shap[i], ("row", i))
small_gather.TARGET_BLOCKS, small_gather._MAX_BLOCKS = 1, 1  # one block, three rows, looped
small_gather.SHARED_BYTES = 8 * small_gather.gather_model(packed).row_slots[1] * 2  # 2 rows
same(kc.shap_values(packed, X), shap, "grid-stride, rows a block")
same(kc.interaction_values(packed, X), inter, "grid-stride, rows a block (interactions)")
same(checked_values(packed, X, X.astype(np.float64), True), inter, "raw float64")
small_gather.TARGET_BLOCKS, small_gather._MAX_BLOCKS = 2048, 65535
small_gather.SHARED_BYTES = 48 * 1024

# pair slots: the integers of the matrices
slots = build_pair_slots(packed)
group = np.repeat(np.arange(slots.num_groups), np.diff(slots.slot_offsets))
got = kp.interaction_slot_values(packed, X, slots, batch_rows=2)
same(got, inter[:, group, slots.slot_i, slots.slot_j], "pair slots")

# the check: a wrong margin is flagged and the host check raises
bad = dict(packed.margin, base_score=packed.margin["base_score"] + 1.0)
wrong = dataclasses.replace(packed, margin=bad, digest="")
for kind in (False, True):
    assert launch.checked_values(wrong, X, X, kind)[1], kind
assert small_model.read_flag(small_model.check_flag(), 0) is False

# a row that does not fit a block's shared memory: the warp-per-row kernels (another exact
# summation), pair slots from the warp-per-row slot kernel
small_gather.SHARED_BYTES = 64
assert small.route(packed, False)[0] is small_kernels.launch_merged
close(kc.shap_values(packed, X), shap, "fallback")
warp = kc.interaction_values(packed, X)
close(warp, inter, "fallback interactions")
same(kp.interaction_slot_values(packed, X, slots, batch_rows=2),
     warp[:, group, slots.slot_i, slots.slot_j], "fallback pair slots")
print("SIMULATOR-OK")
"""


def test_gather_kernels_under_cuda_simulator():
    """The gather kernels in the simulator: exact (CPU kernel, oracle), bits of a row its own,
    the check (and its error), pair slots with the matrices' integers, the fallback."""
    assert_simulator_ok(_SIM_GATHER, timeout=600)


@pytest.mark.gpu
@gpu
def test_gpu_gather_and_raw_launch(monkeypatch):
    """On a GPU: the gather kernels against XGBoost and the warp-per-row kernels (another exact
    summation), bits independent of the batch, pair slots with the matrices' integers; the
    driver launch (rawlaunch) gives the bits of the Numba launch for both routes."""
    import cupy
    import xgboost as xgb

    from distshap import TreeExplainer
    from distshap.kernels import cuda as kc
    from distshap.kernels.cuda import launch
    from distshap.kernels.cuda import pairs as kp
    from distshap.kernels.cuda.runtime import rawlaunch
    from distshap.kernels.cuda.small import gather as small_gather
    from distshap.pair_slots import build_pair_slots

    rng = np.random.default_rng(3)
    X = rng.normal(size=(3000, 8)).astype(np.float32)
    X[rng.random(X.shape) < 0.05] = np.nan
    y = np.nan_to_num(X[:, 0]) * 2 + np.nan_to_num(X[:, 3]) * np.nan_to_num(X[:, 5])
    driver, fits_shared = rawlaunch.launch, small_gather.fits_shared
    for params in ({"max_depth": 3}, {"max_depth": 4, "objective": "multi:softprob",
                                      "num_class": 3}):  # fmt: skip
        label = y if "num_class" not in params else np.digitize(y, [-0.5, 0.5])
        booster = xgb.train(params, xgb.DMatrix(X, label=label), num_boost_round=10)
        explainer = TreeExplainer(booster, layout="xgboost", backend="cuda")
        packed = explainer.packed
        rows = cupy.asarray(packed.encoding.apply(X))
        for inter, n in ((False, 3000), (True, 200)):
            if not small_fits(packed, inter):
                continue
            f = kc.interaction_values if inter else kc.shap_values
            got = {}
            for route in ("warp", "gather"):
                for raw in (False, True):
                    monkeypatch.setattr(
                        small_gather,
                        "fits_shared",
                        fits_shared if route == "gather" else lambda gm, i: False,
                    )
                    monkeypatch.setattr(rawlaunch, "launch", driver if raw
                                        else lambda *a, **k: False)  # fmt: skip
                    got[route, raw] = (
                        f(packed, rows[:n]).get(),
                        launch.checked_values(packed, rows[:n], rows[:n], inter)[0].get(),
                        launch.checked_values(packed, rows[:n], rows[:n].astype(cupy.float64),
                                              inter)[0].get(),
                    )  # fmt: skip
            monkeypatch.setattr(small_gather, "fits_shared", fits_shared)
            monkeypatch.setattr(rawlaunch, "launch", driver)
            for key, vals in got.items():  # the driver launch: the bits of Numba's
                for a, b in zip(vals, got[key[0], False], strict=True):
                    assert np.array_equal(a.view(np.uint32), b.view(np.uint32)), key
                assert np.array_equal(vals[0], vals[1]) and np.array_equal(vals[1], vals[2])
            g, warp = got["gather", True][0], got["warp", False][0]
            kw = {"pred_interactions": True} if inter else {"pred_contribs": True}
            ref = booster.predict(xgb.DMatrix(X[:n]), **kw).reshape(g.shape)
            scale = max(1.0, float(np.abs(ref).max()))
            assert np.abs(g - ref).max() <= 1e-5 * scale, (params, inter)
            assert np.abs(g - warp).max() <= 2e-6 * scale, (params, inter)
            for batch in (1, 7, 1000):  # the bits of a row are its own
                parts = [f(packed, rows[i : min(n, i + batch)]).get() for i in range(0, n, batch)]
                assert np.array_equal(np.concatenate(parts), g), batch
            if inter:
                slots = build_pair_slots(packed)
                group = np.repeat(np.arange(slots.num_groups), np.diff(slots.slot_offsets))
                pairs = kp.interaction_slot_values(packed, rows[:n], slots).get()
                assert np.array_equal(pairs, g[:, group, slots.slot_i, slots.slot_j])
        call = explainer.shap_values  # the public call on the gather route, with its check
        assert np.array_equal(call(rows).get().reshape(-1), kc.shap_values(packed, rows)
                              .get().reshape(-1))  # fmt: skip
