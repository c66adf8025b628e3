"""Interventional SHAP on the CUDA backend (distshap.kernels.cuda.interventional).

* No GPU: the Shapley weights, the table plan, a float64 per-path reference of the contract's
  formulas (checked here against the brute-force oracle of ``naive``), the PTX of every kernel
  (integer atomics only, no local memory in the per-row kernels), and a CUDA-simulator run
  (``NUMBA_ENABLE_CUDASIM=1`` in a subprocess) of the real kernels on tiny models against the
  oracle, the per-path reference and the CPU kernel: background tables, direct kernels,
  oversize paths, the three model outputs, interactions, bits across batchings, bad input.
* ``gpu``: XGBoost models (missing values, categorical, multiclass, binary with the
  probability and log-loss outputs) against the CPU kernel, bits across batchings and cache
  states, tables against the direct kernels, CuPy inputs; the transforms' factors once per
  (row, background row) pair across factor chunks and against the CPU.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from distshap.kernels import cuda_available
from distshap.kernels.margin import margin_model
from distshap.kernels.treeshap import follows
from distshap.packed import build_packed_model
from distshap.paths import extract_paths
from distshap.plan.config import config_context
from distshap.plan.interventional import table_plan

import naive
import tiny
from conftest import to_host
from cudasim import assert_simulator_ok, nvvm_available


def make_packed(ens, **kw):
    """A packed model with its margin arrays (what a Background needs)."""
    return build_packed_model(extract_paths(ens), margin=margin_model(ens), **kw)


_OUTPUTS = ("raw", "probability", "log_loss")


def path_reference(packed, X, R, x_margin, r_margin, transform=0, y=None, interactions=False):
    """float64 values of the contract's per-path formulas (bias entries 0), any path length.

    For each path, explained row ``x`` and background row ``r``: ``X`` / ``R`` the elements
    only ``x`` / only ``r`` follows (none if some element neither follows); ``i`` in ``X`` gets
    ``v (a-1)! b! / (a+b)!``, ``j`` in ``R`` ``-v a! (b-1)! / (a+b)!``; interactions (half the
    index) ``+v (a-2)! b! / (a+b-1)!`` (both in ``X``), ``-v (a-1)! (b-1)! / (a+b-1)!`` (one
    each), ``+v a! (b-2)! / (a+b-1)!`` (both in ``R``); diagonal ``phi_i - sum_j``; each pair
    scaled by ``s(x, r)`` and averaged over ``R``.
    """
    F, G = packed.num_features, packed.num_groups
    n, B = X.shape[0], R.shape[0]
    out = np.zeros((n, G, F + 1, F + 1) if interactions else (n, G, F + 1))
    fact = math.factorial

    def hit(row, li):
        return bool(follows(float(row[packed.feature[li]]), packed.lower[li], packed.upper[li],
                            bool(packed.missing[li]), bool(packed.cat_other[li]),
                            int(packed.cat_offsets[li]), int(packed.cat_nbits[li]),
                            packed.cat_words))  # fmt: skip

    for p in range(packed.num_paths):
        lanes = range(int(packed.path_offsets[p]) + 1, int(packed.path_offsets[p + 1]))
        feats = [int(packed.feature[li]) for li in lanes]
        v, g = float(packed.path_value[p]), int(packed.path_group[p])
        r_hits = [[hit(R[q], li) for li in lanes] for q in range(B)]
        for i_x in range(n):
            x_hits = [hit(X[i_x], li) for li in lanes]
            yx = 0.0 if y is None else float(y[i_x])
            for q in range(B):
                both = list(zip(x_hits, r_hits[q], strict=True))
                if any(not xo and not ro for xo, ro in both):
                    continue
                xs = {e for e, (xo, ro) in enumerate(both) if xo and not ro}
                rs = {e for e, (xo, ro) in enumerate(both) if ro and not xo}
                a, b = len(xs), len(rs)
                mx, mr = float(x_margin[i_x, 0]), float(r_margin[q, 0])
                s = naive.output_secant(mx, mr, yx, _OUTPUTS[transform])
                c = s * v / B
                phi = {e: c * fact(a - 1) * fact(b) / fact(a + b) for e in xs}
                phi.update({e: -c * fact(a) * fact(b - 1) / fact(a + b) for e in rs})
                if not interactions:
                    for e, val in phi.items():
                        out[i_x, g, feats[e]] += val
                    continue
                for i in phi:
                    row = 0.0
                    for j in phi:
                        if j == i:
                            continue
                        if i in xs and j in xs:
                            w = fact(a - 2) * fact(b) / fact(a + b - 1)
                        elif i in rs and j in rs:
                            w = fact(a) * fact(b - 2) / fact(a + b - 1)
                        else:
                            w = -fact(a - 1) * fact(b - 1) / fact(a + b - 1)
                        out[i_x, g, feats[i], feats[j]] += 0.5 * c * w
                        row += 0.5 * c * w
                    out[i_x, g, feats[i], feats[i]] += phi[i] - row
    return out


def _without_bias(a, interactions):
    a = np.array(a, dtype=np.float64)
    if interactions:
        a[..., -1, -1] = 0.0
    else:
        a[..., -1] = 0.0
    return a


# ------------------------------------------------------------------------------------------
# no GPU needed
# ------------------------------------------------------------------------------------------


def test_shapley_weights_are_exact_and_efficient():
    from distshap.kernels.cuda.interventional.common import shapley_weights

    w = shapley_weights()
    fact = math.factorial
    for a, b in [(1, 0), (1, 1), (2, 3), (5, 1), (7, 9), (30, 1), (1, 31), (60, 67)]:
        assert w[0, a, b] == float(Fraction(fact(a - 1) * fact(b), fact(a + b)))
        if a >= 2:
            assert w[1, a, b] == float(Fraction(fact(a - 2) * fact(b), fact(a + b - 1)))
        if b >= 1:
            assert w[2, a, b] == float(Fraction(fact(a - 1) * fact(b - 1), fact(a + b - 1)))
    assert w[0, 0, 5] == 0 and w[1, 1, 5] == 0 and w[2, 3, 0] == 0
    # efficiency of one path's game (v = 1): values sum to v(N) - v(empty) = [b == 0] - [a == 0]
    for a in range(0, 40):
        for b in range(0, 40 - a):
            if a + b == 0:
                continue
            total = a * w[0, a, b] - b * w[0, b, a]
            assert abs(total - (float(b == 0) - float(a == 0))) < 1e-14, (a, b)


def test_table_plan_budgets_and_limits():
    from distshap.warmup import chain_ensemble

    ens = tiny.random_ensemble(5, n_features=7, n_trees=8, depth=5, n_groups=2)
    packed = make_packed(ens)
    k = np.diff(packed.path_offsets) - 1
    plan = table_plan(packed)
    assert (plan.shap >= 0).all() and (plan.interactions >= 0).all()  # all small
    sizes = np.int64(1) << k
    assert plan.n_counts == int(sizes.sum())
    assert np.array_equal(plan.count, np.cumsum(sizes) - sizes)
    # a budget for about half the SHAP tables: shortest first, within the budget (8 bytes)
    budget = 8 * int(((np.int64(1) << k) * k).sum()) // 2
    with config_context(interventional_table_budget_bytes=budget):
        plan = table_plan(packed)
        has = plan.shap >= 0
        assert has.any() and not has.all()
        assert 8 * int(((np.int64(1) << k[has]) * k[has]).sum()) <= budget
        assert k[has].max() <= k[~has].min()
        assert not (plan.interactions[~has] >= 0).any()  # interaction tables only with SHAP ones
        assert (plan.count[~has] == -1).all()
        with config_context(interventional_table_max_features=3):
            plan = table_plan(packed)
            assert (k[plan.shap >= 0] <= 3).all() and (plan.shap[k > 3] == -1).all()
            assert plan.shap_max_features == 3
    # paths longer than a warp never get a table
    chain = make_packed(chain_ensemble(34, 34))
    plan = table_plan(chain)
    assert (~plan.regular).any() and (plan.shap[~plan.regular] == -1).all()


@pytest.mark.parametrize("seed", [0, 1])
def test_path_reference_matches_the_brute_force_oracle(seed):
    ens = tiny.random_ensemble(seed, n_features=4, n_trees=3, depth=3, n_groups=1 + seed,
                               n_categorical=1)  # fmt: skip
    X = tiny.random_rows(seed + 1, ens, 2, 0.2)
    R = tiny.random_rows(seed + 2, ens, 3, 0.2)
    packed = make_packed(ens)
    xm, rm = naive.predict_margin(ens, X), naive.predict_margin(ens, R)
    for inter in (False, True):
        ref = path_reference(packed, X, R, xm, rm, interactions=inter)
        oracle = (naive.interventional_interactions_rows(ens, X, R) if inter
                  else naive.interventional_shap_rows(ens, X, R))  # fmt: skip
        np.testing.assert_allclose(ref, _without_bias(oracle, inter), rtol=0, atol=1e-12)
    if seed == 0:  # one group: the probability and log-loss outputs
        y = np.array([1.0, 0.25])
        for t, name in ((1, "probability"), (2, "log_loss")):
            ref = path_reference(packed, X, R, xm, rm, transform=t, y=y)
            oracle = naive.interventional_shap_rows(ens, X, R, model_output=name, y=y)
            np.testing.assert_allclose(ref, _without_bias(oracle, False), rtol=0, atol=1e-12)


@pytest.mark.skipif(not nvvm_available(), reason="NVVM (CUDA toolkit compiler) not found")
def test_every_kernel_compiles_with_integer_atomics_only():
    from distshap.kernels.cuda.interventional.ptx import kernel_ptx

    ptx = kernel_ptx((9, 0))
    assert len(ptx) == 17
    for name, text in ptx.items():
        assert "atom.global.add.f32" not in text and "atom.global.add.f64" not in text, name
        if (
            "fill" not in name
            and "finish" not in name
            and "mask" not in name
            and "factor" not in name
        ):
            assert "atom.global.add.u64" in text, name
        if "direct" in name or "table" in name or "mask" in name:
            assert ".local" not in text, f"{name} uses local memory"
            assert "vote.sync" in text, name
            assert "call.uni" not in text, f"{name} has a non-inlined call"
        if "direct" in name:
            assert "shfl.sync" in text and "popc.b" in text, name
        if "direct" in name or "oversize" in name:  # s(x, r) loaded (factor kernel), not computed
            assert "div.rn.f64" not in text, f"{name} divides in float64"
        if "table_kernel_shared" in name:
            assert "atom.shared.add.u64" in text, name
    assert "div.rn.f64" in ptx["interventional_factor_kernel"]


_SIM_COMMON = r"""
import numpy as np
import naive
import tiny
from test_cuda_interventional import make_packed, path_reference
from distshap.interventional import build_background
from distshap.kernels import cpu
from distshap.kernels.cuda.interventional import direct as direct_kernels
from distshap.kernels.cuda.interventional import interventional_values
from distshap.kernels.cuda.interventional.background import device_background
from distshap.plan.config import set_config
from distshap.warmup import chain_ensemble

# smaller pattern tables in the simulator (one thread per pattern): paths of 7+ go direct;
# two warps per block (every barrier of the simulator waits for each thread of a block)
set_config(interventional_table_max_features=6, interventional_interaction_table_max_features=6,
           interventional_warps_per_block=2, table_warps_per_block=2)


def close(got, want, what, tol=2e-6):
    assert isinstance(got, np.ndarray) and got.dtype == np.float32, what
    assert got.shape == want.shape, (what, got.shape, want.shape)
    err = float(np.abs(got.astype(np.float64) - want).max())
    assert err <= tol * max(1.0, float(np.abs(want).max())), (what, err)


def budgets(shap, inter):  # a new configuration: new device models, backgrounds and tables
    set_config(interventional_table_budget_bytes=shap,
               interventional_interaction_table_budget_bytes=inter)


def run(packed, bg, X, **kw):
    return interventional_values(packed, bg, X, **kw)
"""

_SIM_PATTERNS = r"""  # after _SIM_COMMON: sections 1 and 2
# 1. two groups, a categorical feature, NaNs: background tables and direct kernels
ens = tiny.random_ensemble(3, n_features=4, n_trees=3, depth=3, n_groups=2, n_categorical=1)
X = tiny.random_rows(2, ens, 3, 0.2)
R = tiny.random_rows(5, ens, 4, 0.2)
packed = make_packed(ens)
bg = build_background(packed, R)
bias = bg.margin.mean(axis=0, keepdims=True)
for inter in (False, True):
    want = (naive.interventional_interactions_rows(ens, X, R) if inter
            else naive.interventional_shap_rows(ens, X, R))
    ref_cpu = cpu.interventional_values(packed, bg, X, bias=bias, interactions=inter)
    budgets(1 << 30, 1 << 30)
    tables = run(packed, bg, X, bias=bias, interactions=inter)
    close(tables, want, ("tables", inter))
    close(tables, ref_cpu.astype(np.float64), ("cpu", inter))
    again = run(packed, bg, X, bias=bias, interactions=inter, batch_rows=1)
    assert np.array_equal(tables, again), ("batching changed the bits", inter)
    budgets(0, 0)
    direct = run(packed, bg, X, bias=bias, interactions=inter)
    close(direct, want, ("direct", inter))
    # the new configuration's device model holds its own background, without tables
    assert (device_background(packed, bg).plan.shap == -1).all(), "a background of old budgets"
    budgets(1 << 30, 0)  # SHAP tables but direct interactions
    close(run(packed, bg, X, bias=bias, interactions=inter), want, ("mixed", inter))
budgets(1 << 30, 1 << 30)
zero_bias = run(packed, bg, X)
assert (zero_bias[..., -1] == 0).all(), "the default bias is zero, as on the CPU"
# the table kernel's shared tile of 2 rows (several tiles per block), and global atomics
shared = run(packed, bg, X, interactions=True)
set_config(tile_rows=2, min_tile_rows=1)
assert np.array_equal(shared, run(packed, bg, X, interactions=True)), "2-row tiles"
set_config(tile_rows=128, min_tile_rows=1 << 30)
assert np.array_equal(shared, run(packed, bg, X, interactions=True)), "global atomics"
set_config(min_tile_rows=8)

# 2. one group, 33 background rows (two rounds of the direct kernels): the three outputs, the
# transforms' factors s(x, r) once per pair (factor kernel) equal to the CPU's bits
ens = tiny.random_ensemble(7, n_features=4, n_trees=2, depth=3, n_groups=1)
X = tiny.random_rows(2, ens, 2, 0.2)
R = tiny.random_rows(5, ens, 33, 0.2)
packed = make_packed(ens)
bg = build_background(packed, R)
xm = naive.predict_margin(ens, X)
y = np.array([1.0, 0.25])  # log loss: one label, one probability (both terms of the factor)
for t, name in ((0, "raw"), (1, "probability"), (2, "log_loss")):
    want = naive.interventional_shap_rows(ens, X, R, model_output=name, y=y)
    bias = want[:, :, -1]
    got = run(packed, bg, X, transform=t, x_margin=xm, y=y, bias=bias)
    close(got, want, name)
    ref_cpu = cpu.interventional_values(packed, bg, X, transform=t, x_margin=xm, y=y, bias=bias)
    assert np.array_equal(got, ref_cpu), ("not the CPU's bits", name)
# factor arrays of one row (two chunks of a batch): the same bits
direct_kernels.FACTOR_BUDGET_BYTES = 8 * 33
again = run(packed, bg, X, transform=2, x_margin=xm, y=y, bias=bias)
direct_kernels.FACTOR_BUDGET_BYTES = 256 << 20
assert np.array_equal(got, again), "factor chunks changed the bits (log loss)"
# batches of one row: the same bits
again = run(packed, bg, X, transform=2, x_margin=xm, y=y, bias=bias, batch_rows=1)
assert np.array_equal(got, again), "batching changed the bits (log loss)"
budgets(0, 0)
want = path_reference(packed, X[:1], R, xm, bg.margin, interactions=True)
close(run(packed, bg, X[:1], interactions=True), want, "interactions direct B=33")
budgets(1 << 30, 1 << 30)
print("SIMULATOR-OK")
"""

_SIM_LONG_PATHS = r"""  # after _SIM_COMMON: sections 3 to 5
# 3. paths of up to 9 features: tables for the short ones (<= 6 here), direct for the others
ens = chain_ensemble(9, 9)
packed = make_packed(ens)
X = np.full((2, 9), 0.25, np.float32)
X[0, 3] = 0.75
X[1, 7] = np.nan
R = np.full((3, 9), 0.25, np.float32)
R[0, 5] = 0.75
R[1, 1] = 0.75
R[2, 0] = np.nan
bg = build_background(packed, R)
xm = naive.predict_margin(ens, X)
for inter in (False, True):
    got = run(packed, bg, X, interactions=inter)
    close(got, path_reference(packed, X, R, xm, bg.margin, interactions=inter), ("chain 9", inter))

# 4. paths of 32 and 33 features (longer than a warp): the oversize kernel
ens = chain_ensemble(33, 33)
packed = make_packed(ens)
X = np.full((2, 33), 0.25, np.float32)
X[0, 3] = 0.75
X[1, 30] = np.nan
X[1, 32] = 0.75
R = np.full((2, 33), 0.25, np.float32)
R[0, 5] = 0.75
R[1, 31] = 0.75
bg = build_background(packed, R)
xm = naive.predict_margin(ens, X)
y = np.array([0.0, 1.0])
for inter, t, n in ((False, 0, 2), (True, 0, 1), (False, 2, 1)):
    got = run(packed, bg, X[:n], interactions=inter, transform=t, x_margin=xm[:n], y=y[:n])
    want = path_reference(packed, X[:n], R, xm, bg.margin, transform=t, y=y, interactions=inter)
    close(got, want, ("chain 33", inter, t))


# 5. bad input: clear errors
def refused(match, **kw):
    try:
        run(kw.pop("packed"), kw.pop("bg"), kw.pop("X"), **kw)
    except (ValueError, TypeError) as e:
        assert match in str(e), (match, str(e))
        return
    raise AssertionError(f"not refused: {match}")


ens2 = tiny.random_ensemble(3, n_features=4, n_trees=3, depth=3, n_groups=2)
p2 = make_packed(ens2)
X2 = tiny.random_rows(2, ens2, 2, 0.2)
bg2 = build_background(p2, tiny.random_rows(3, ens2, 3, 0.2))
xm2 = naive.predict_margin(ens2, X2)
refused("one output group", packed=p2, bg=bg2, X=X2, transform=1, x_margin=xm2)
refused("'raw' only", packed=p2, bg=bg2, X=X2, transform=1, x_margin=xm2, interactions=True)
refused("transform must be", packed=p2, bg=bg2, X=X2, transform=3)
refused("bias must have shape", packed=p2, bg=bg2, X=X2, bias=np.zeros((1, 3)))
refused("shape (n_rows, 4)", packed=p2, bg=bg2, X=X2[:, :3])
ens3 = tiny.random_ensemble(4, n_features=4, n_trees=2, depth=3, n_groups=2)
bg3 = build_background(make_packed(ens3), X2)
refused("another model", packed=p2, bg=bg3, X=X2)
ens1 = tiny.random_ensemble(7, n_features=4, n_trees=2, depth=3, n_groups=1)
p1 = make_packed(ens1)
bg1 = build_background(p1, tiny.random_rows(5, ens1, 3, 0.2))
xm1 = naive.predict_margin(ens1, X2)
refused("needs x_margin", packed=p1, bg=bg1, X=X2, transform=1)
refused("needs the labels", packed=p1, bg=bg1, X=X2, transform=2, x_margin=xm1)
refused("[0, 1]", packed=p1, bg=bg1, X=X2, transform=2, x_margin=xm1, y=np.array([0.0, 2.0]))
refused("[0, 1]", packed=p1, bg=bg1, X=X2, transform=2, x_margin=xm1,
        y=np.array([np.nan, 1.0]))
assert run(p1, bg1, X2[:0]).shape == (0, 1, 5)
print("SIMULATOR-OK")
"""


def test_kernels_under_cuda_simulator():
    """The real kernel code in Numba's CUDA simulator (no GPU) against the oracles: two
    groups, categorical splits and NaNs (tables, direct kernels, tiles), then 33 background
    rows (the transforms, factor chunks, batches)."""
    assert_simulator_ok(_SIM_COMMON + _SIM_PATTERNS, timeout=900)


def test_long_paths_and_bad_input_under_cuda_simulator():
    """The same in the simulator: paths of up to 9 features (tables and direct kernels), of 32
    and 33 (the oversize kernel), and the errors bad input raises."""
    assert_simulator_ok(_SIM_COMMON + _SIM_LONG_PATHS, timeout=900)


# ------------------------------------------------------------------------------------------
# GPU
# ------------------------------------------------------------------------------------------


def _xgb_case(kind: str, n_bg: int = 50, n_rows: int = 300):
    """``(packed, background, rows, x_margin, y)`` of a small XGBoost model."""
    from distshap import TreeExplainer
    from distshap.inputs import model_matrix, prepare_rows
    from distshap.interventional import build_background
    from distshap.kernels.margin import predict_margin

    import xgb_models

    booster, X = xgb_models.MODEL_KINDS[kind]()
    packed = TreeExplainer(booster, backend="cpu").packed
    background = build_background(packed, X[:n_bg])
    rows = prepare_rows(X[n_bg : n_bg + n_rows], packed)
    raw = model_matrix(X[n_bg : n_bg + n_rows], packed)
    x_margin = predict_margin(packed, raw)
    y = (np.arange(rows.shape[0]) % 3 == 0).astype(np.float64)
    return packed, background, rows, x_margin, y


def _assert_matches_cpu(got, ref, rel=1e-5):
    got = to_host(got).astype(np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=0, atol=rel * max(1.0, float(np.abs(ref).max())))


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="no CUDA GPU visible (run on the GPU host)")
@pytest.mark.parametrize("kind", ["regression", "missing", "categorical", "multiclass"])
@pytest.mark.parametrize("interactions", [False, True], ids=["shap", "interactions"])
def test_gpu_raw_matches_cpu(kind, interactions):
    from distshap.interventional import bias_values
    from distshap.kernels import cpu
    from distshap.kernels.cuda import interventional_values

    n = 60 if interactions else 300
    packed, bg, rows, _, _ = _xgb_case(kind, n_rows=n)
    bias = bias_values(bg, 0)
    ref = cpu.interventional_values(packed, bg, rows, bias=bias, interactions=interactions)
    got = interventional_values(packed, bg, rows, bias=bias, interactions=interactions)
    _assert_matches_cpu(got, ref)
    if interactions:  # rows of the matrix sum to the SHAP values
        shap = to_host(interventional_values(packed, bg, rows, bias=bias)).astype(np.float64)
        np.testing.assert_allclose(to_host(got).sum(axis=-1), shap, rtol=0,
                                   atol=1e-5 * max(1.0, np.abs(shap).max()))  # fmt: skip


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="no CUDA GPU visible (run on the GPU host)")
@pytest.mark.parametrize("transform", [1, 2], ids=["probability", "log_loss"])
def test_gpu_transforms_match_cpu_and_add_up(transform):
    from distshap.interventional import apply_transform, bias_values
    from distshap.kernels import cpu
    from distshap.kernels.cuda import interventional_values

    packed, bg, rows, xm, y = _xgb_case("binary")
    yy = y if transform == 2 else None
    bias = bias_values(bg, transform, yy)
    kw = dict(transform=transform, x_margin=xm, y=yy, bias=bias)
    ref = cpu.interventional_values(packed, bg, rows, **kw)
    got = to_host(interventional_values(packed, bg, rows, **kw))
    _assert_matches_cpu(got, ref)
    total = np.asarray(apply_transform(xm, transform, yy), np.float64)[:, 0]
    np.testing.assert_allclose(got.astype(np.float64).sum(axis=-1)[:, 0], total, rtol=0,
                               atol=1e-5 * max(1.0, np.abs(total).max()))  # fmt: skip


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="no CUDA GPU visible (run on the GPU host)")
def test_gpu_bits_do_not_depend_on_batching_cache_or_input_kind():
    import cupy

    from distshap.kernels.cuda import interventional_values
    from distshap.kernels.cuda.runtime.caches import clear_cache

    packed, bg, rows, xm, y = _xgb_case("missing", n_bg=70, n_rows=500)
    for inter in (False, True):
        n = 80 if inter else 500
        first = to_host(interventional_values(packed, bg, rows[:n], interactions=inter))
        for batch_rows in (1, 7, 128):
            again = interventional_values(packed, bg, rows[:n], interactions=inter,
                                          batch_rows=batch_rows)  # fmt: skip
            assert np.array_equal(to_host(again), first), (inter, batch_rows)
        clear_cache()
        on_device = interventional_values(packed, bg, cupy.asarray(rows[:n]), interactions=inter)
        assert isinstance(on_device, cupy.ndarray)
        assert np.array_equal(on_device.get(), first), inter
        # a chunk of the rows gives the same bits as those rows of the whole
        part = interventional_values(packed, bg, rows[17:41], interactions=inter)
        assert np.array_equal(to_host(part), first[17:41]), inter
        # the direct kernels (no tables) agree with the tables to float32 rounding
        with config_context(interventional_table_budget_bytes=0,
                            interventional_interaction_table_budget_bytes=0):  # fmt: skip
            direct = to_host(interventional_values(packed, bg, rows[:n], interactions=inter))
        _assert_matches_cpu(direct, first, rel=2e-6)
    binary = _xgb_case("binary", n_bg=70)
    p2, bg2, rows2, xm2, y2 = binary
    one = to_host(interventional_values(p2, bg2, rows2, transform=2, x_margin=xm2, y=y2))
    two = interventional_values(p2, bg2, rows2, transform=2, x_margin=xm2, y=y2, batch_rows=33)
    assert np.array_equal(to_host(two), one)


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="no CUDA GPU visible (run on the GPU host)")
@pytest.mark.parametrize("transform", [1, 2], ids=["probability", "log_loss"])
def test_gpu_factors_once_per_pair_keep_the_bits(monkeypatch, transform):
    """The factors s(x, r) written once per pair (factor kernel, whole batch or chunks of 7
    rows) give the same bits either way, and the CPU's bits (the same float64 factor
    arithmetic; float32 results of 300 rows, fractional labels)."""
    from distshap.interventional import bias_values
    from distshap.kernels import cpu
    from distshap.kernels.cuda.interventional import direct, interventional_values

    packed, bg, rows, xm, y = _xgb_case("binary", n_bg=70)
    yy = None
    if transform == 2:
        yy = np.where(np.arange(rows.shape[0]) % 4 == 1, 0.3, y)
    kw = dict(transform=transform, x_margin=xm, y=yy, bias=bias_values(bg, transform, yy))
    pair = to_host(interventional_values(packed, bg, rows, **kw))
    monkeypatch.setattr(direct, "FACTOR_BUDGET_BYTES", 8 * 70 * 7)
    chunks = to_host(interventional_values(packed, bg, rows, batch_rows=100, **kw))
    assert np.array_equal(chunks, pair)
    assert np.array_equal(pair, cpu.interventional_values(packed, bg, rows, **kw))


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="no CUDA GPU visible (run on the GPU host)")
def test_gpu_oversize_and_long_paths_match_the_reference():
    from distshap.interventional import build_background
    from distshap.kernels.cuda import interventional_values
    from distshap.warmup import chain_ensemble

    for depth in (14, 36):  # direct kernels beyond the table limit; oversize beyond a warp
        ens = chain_ensemble(depth, depth)
        packed = make_packed(ens)
        rng = np.random.default_rng(depth)
        X = np.where(rng.random((4, depth)) < 0.1, 0.75, 0.25).astype(np.float32)
        X[1, 2] = np.nan
        R = np.where(rng.random((5, depth)) < 0.1, 0.75, 0.25).astype(np.float32)
        bg = build_background(packed, R)
        xm = naive.predict_margin(ens, X)
        for inter in (False, True):
            got = to_host(interventional_values(packed, bg, X, interactions=inter))
            want = path_reference(packed, X, R, xm, bg.margin, interactions=inter)
            _assert_matches_cpu(got, want, rel=2e-6)
