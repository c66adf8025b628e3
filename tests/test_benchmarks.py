"""The benchmark helpers that turn measurements into claims."""

from __future__ import annotations

import pytest

from benchmarks.scaling import predict_rows_per_s


def _report(times: dict[int, float], rows: int = 1_000_000) -> dict:
    return {
        "results": [
            {"workers": n, "rows": rows, "distshap_rows_per_s": rows / t} for n, t in times.items()
        ]
    }


def test_cost_model_recovers_its_own_law():
    law = {n: 10.0 / n + 0.5 for n in (1, 2, 4)}
    predicted = predict_rows_per_s(_report(law), 8)
    assert predicted == pytest.approx(1_000_000 / (10.0 / 8 + 0.5), rel=1e-9)


def test_cost_model_needs_two_counts():
    with pytest.raises(ValueError, match="two or more"):
        predict_rows_per_s(_report({1: 3.0}), 8)


@pytest.mark.parametrize("name", ["adult", "cal_housing", "covtype", "fashion_mnist"])
def test_synthetic_data_has_the_paper_shape_and_is_reproducible(name):
    import numpy as np

    from benchmarks.shapes import DATASETS, make_data

    X, y = make_data(name, 300, seed=3)
    assert X.shape == (300, DATASETS[name][1]) and X.dtype == np.float32
    assert y.shape == (300,)
    X2, y2 = make_data(name, 300, seed=3)
    assert np.array_equal(X, X2, equal_nan=True) and np.array_equal(y, y2)
    assert not np.array_equal(X, make_data(name, 300, seed=4)[0], equal_nan=True)
    classes = DATASETS[name][3]
    if classes > 2:
        assert y.min() >= 0 and y.max() < classes


def test_cpu_intercept_is_the_cpu_models_start():
    """The intercept given to GPU-trained multiclass models is the one a CPU-trained model of
    the same labels starts from (covtype: class 0 empty, held far below the others)."""
    import json

    import numpy as np
    import xgboost as xgb

    from benchmarks.shapes import cpu_intercept, make_data, params

    X, y = make_data("covtype", 2000, seed=1)
    p = params("covtype", "small")
    got = cpu_intercept(y, p)
    booster = xgb.train(p, xgb.DMatrix(X, label=y), 1)
    text = json.loads(booster.save_config())["learner"]["learner_model_param"]["base_score"]
    want = [float(v) for v in text.strip("[]").split(",")]
    assert len(got) == p["num_class"] and np.allclose(got, want, rtol=1e-6, atol=1e-6)
    assert got[0] < min(got[1:]) - 3  # class 0 has no rows


def test_paper_table3_tree_counts_match_the_shapes():
    from benchmarks.shapes import DATASETS, DEPTHS, PAPER_TABLE3, ROUNDS, SHAPES

    assert set(PAPER_TABLE3) == set(SHAPES)
    for (name, size), (trees, _, depth) in PAPER_TABLE3.items():
        groups = DATASETS[name][3] if DATASETS[name][2].startswith("multi:") else 1
        assert trees == ROUNDS[size] * groups and depth == DEPTHS[size], (name, size)


def test_real_data_shapes_and_leaf_table(tmp_path, monkeypatch):
    import numpy as np
    from sklearn.datasets import load_diabetes

    from benchmarks import shapes

    X, y = shapes.make_data("diabetes")
    X_ref, y_ref = load_diabetes(return_X_y=True)
    assert np.array_equal(X, X_ref.astype(np.float32)) and np.array_equal(y, y_ref)
    Xs, _ = shapes.make_data("diabetes", 50, seed=1)
    assert Xs.shape == (50, 10) and not np.array_equal(Xs, X[:50])
    with pytest.raises(ValueError, match="unknown data set"):
        shapes.make_data("iris")

    monkeypatch.setattr(shapes, "MODEL_DIR", tmp_path)
    (row,) = shapes.leaf_table([("diabetes", "small")])
    assert row["trees"] == 10 and row["leaves"] == row["paths"] <= 80
    assert row["ratio"] is None and not row["estimated"]
    table = shapes.format_leaf_table([row])
    assert "| diabetes-small | 442 | 10 |" in table and "(real data)" in table
    est = shapes.estimate_leaves("diabetes", "med", step=40, probe=2)
    rounds = [r for r, _ in est["points"]]
    assert est["trees"] == 100 and rounds[0] == 0 and len(rounds) >= 2
    assert all(a < b < 100 for a, b in zip(rounds, rounds[1:], strict=False))
    assert 0 < est["leaves"] <= 100 * 2**8


def test_limits_peaks_by_device_name():
    from benchmarks.limits import device_peaks, ncu_command

    h200 = device_peaks("NVIDIA H200", 132)
    assert h200["sku"] == "H200 SXM" and h200["hbm"] == pytest.approx(4.8e12)
    assert h200["flop"] == pytest.approx(67e12) and h200["fp32"] == pytest.approx(33.5e12)
    assert h200["mufu"] == pytest.approx(h200["fp32"] / 8)
    assert device_peaks("NVIDIA H100 80GB HBM3", 132)["hbm"] == pytest.approx(3.35e12)
    assert device_peaks("NVIDIA H100 PCIe", 114)["sku"] == "H100 PCIe"
    other = device_peaks("NVIDIA A10", 72, 1.695e9)
    assert other["hbm"] is None and other["fp32"] == pytest.approx(128 * 72 * 1.695e9)
    cmd = ncu_command("covtype-med", 1000, "quadrature-n4", "quadrature", False)
    assert "regex:_make_shap_kernel" in cmd and "--only quadrature-n4" in cmd


_LIMITS_SCRIPT = """
import json
import numpy as np
import tiny
from benchmarks import limits
from distshap.kernels.cuda import config
from distshap.kernels.cuda.model import strategy_stats
from distshap.packed import build_packed_model
from distshap.paths import extract_paths

if hasattr(config, "SMALL_MAX_PATHS"):
    config.SMALL_MAX_PATHS = 0  # the regular route's kernels, not the one-launch route
ens = tiny.random_ensemble(4, n_features=5, n_trees=2, depth=4, n_groups=2)
X = tiny.random_rows(6, ens, 4, 0.1)
peaks = limits.device_peaks("NVIDIA H200", 132)
for budget in (0, 1 << 30):
    packed = build_packed_model(extract_paths(ens), table_budget_bytes=budget)
    stats = strategy_stats(packed)
    for inter in (False, True):
        res = limits.profile(packed, X, interactions=inter, repeats=1)
        assert res["parts_match"], (budget, inter)
        names = [r["name"] for r in res["kernels"]]
        assert names[-1] == "finish" and all(r["seconds"] >= 0 for r in res["kernels"])
        quad = [r for r in res["kernels"] if r["name"].startswith("quadrature")]
        if not inter:  # every SHAP quadrature path counted once, with its node count's MUFU
            assert sum(r["info"]["paths"] for r in quad) == stats["quadrature_paths"]
            k = np.diff(packed.path_offsets) - 1
            mufu = 0
            for r in quad:
                n = r["info"]["n_nodes"]
                kq = k[(k + 1) // 2 <= n]
                kq = kq[(kq + 1) // 2 > max([m for m in config.QUADRATURE_NODES if m < n],
                                            default=0)]
                mufu += n * kq.sum()
            assert sum(r["counts"]["mufu"] for r in quad) == mufu
            if budget == 0:
                assert quad and "tables" not in names
        for rec in res["kernels"]:
            rec["fractions"] = limits._fractions(rec, peaks, None)
            if rec["counts"]:
                assert rec["counts"]["dram_min"] > 0
        text = limits.format_table("tiny", res, peaks)
        assert all(name in text for name in names)
        json.dumps(res, default=float)
# chunk-local feature tiles (a bound of 2 features: every path of 3+ features a chunk alone):
# the local kernel's own chunks and flushes counted, the parts still the call's bits
from distshap.kernels import cuda as kc
from distshap.kernels.cuda.model import device_model

config.QUADRATURE_TILE_FEATURES = 2
kc.clear_cache()
packed = build_packed_model(extract_paths(ens), table_budget_bytes=0)
stats = strategy_stats(packed)
assert stats["quadrature_tiles"] == "local", stats
res = limits.profile(packed, X, repeats=1)
assert res["parts_match"]
quad = [r for r in res["kernels"] if r["name"].startswith("quadrature")]
assert quad and all(r["kind"] == "local-quadrature" for r in quad), quad
assert sum(r["info"]["chunks"] for r in quad) == stats["quadrature_chunks"]
plan = device_model(packed).shap
flushes = sum(int(limits._host(q.local_feature_offsets)[-1]) for q in plan.quadrature)
assert sum(r["counts"]["global_atomics"] for r in quad) == flushes
assert max(r["info"]["tile_columns"] for r in quad) == stats["quadrature_tile_columns"]
assert "_make_local_shap_kernel" in limits.ncu_command("tiny", 4, quad[0]["name"],
                                                       quad[0]["kind"], False)
print("SIMULATOR-OK")
"""


def test_limits_counts_and_times_every_kernel_under_cuda_simulator():
    """benchmarks.limits runs each kernel of the plan alone and the parts give the call's bits."""
    from cudasim import assert_simulator_ok

    assert_simulator_ok(_LIMITS_SCRIPT, timeout=600)
