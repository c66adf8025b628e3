"""The cost model (distshap.plan.costs, plan.predict), its strategy choice
(plan.tables.gpu_shap_table_offsets),
the cost cache, `distshap info` / `distshap calibrate`, and calibration under the simulator."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest

from distshap.kernels import cuda_available
from distshap.kernels.cuda.calibrate import Experiment, synthetic_packed, synthetic_paths
from distshap.packed import build_packed_model
from distshap.plan import costs as cm
from distshap.plan import geometry as geo
from distshap.plan import predict as pr
from distshap.plan import tables
from distshap.plan.config import config_context

from cudasim import assert_simulator_ok

H100 = cm.SHIPPED["H100"]
MIX = replace(H100, table_bin=100e-12)  # tables pay for the longer paths


def _shape(ks, num_features=16, num_groups=1, n_bins=None):
    ks = np.asarray(ks, np.int64)
    n = ks.size
    return pr.ModelShape(
        k=ks, group=np.arange(n) % num_groups, path_bin=np.arange(n) // 4 if n_bins is None
        else np.arange(n) % n_bins, regular=ks <= 31, num_features=num_features,
        num_groups=num_groups,
    )  # fmt: skip


def _packed(n_paths=300, k=5, F=12, G=1, seed=0, **kw):
    """Synthetic packed model (300 paths and more: not the one-launch small route)."""
    return build_packed_model(synthetic_paths(n_paths, k, F, G, seed), **kw)


# --- the choice ---------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _any_saving(monkeypatch, request):
    """The choice tests study the greedy prefix itself: any predicted saving counts (the
    margin of tables.TABLE_MIN_SAVING has its own test)."""
    if "min_saving" not in request.node.name:
        monkeypatch.setattr(tables, "TABLE_MIN_SAVING", 0.0)


def test_min_saving_keeps_quadrature_unless_tables_clearly_win(monkeypatch):
    k = _mixed_lengths()
    g = np.zeros_like(k)
    monkeypatch.setattr(tables, "TABLE_MIN_SAVING", 0.0)
    mixed = tables.gpu_shap_table_offsets(k, g, 1 << 24, 16, MIX, num_features=30)
    assert (mixed >= 0).any()  # some saving is predicted
    monkeypatch.setattr(tables, "TABLE_MIN_SAVING", 0.25)
    margin = tables.gpu_shap_table_offsets(k, g, 1 << 24, 16, MIX, num_features=30)
    assert (margin < 0).all()  # ... but less than a quarter of the quadrature's time
    free = replace(MIX, table_bin=0.0, table_lane=0.0)  # tables cost nothing: a clear win
    assert (tables.gpu_shap_table_offsets(k, g, 1 << 24, 16, free, num_features=30) >= 0).any()


def _mixed_lengths(seed=0, n=400):
    return np.random.default_rng(seed).integers(1, 20, n)


def test_choice_is_deterministic_and_in_choose_tables_format():
    k = _mixed_lengths()
    g = np.zeros_like(k)
    a = tables.gpu_shap_table_offsets(k, g, 1 << 24, 16, MIX, num_features=30)
    b = tables.gpu_shap_table_offsets(k.copy(), g.copy(), 1 << 24, 16, MIX, num_features=30)
    assert a.dtype == np.int64 and np.array_equal(a, b)
    chosen = np.flatnonzero(a >= 0)
    assert 0 < chosen.size < k.size
    sizes = (1 << k[chosen]) * k[chosen]  # laid out in path order, back to back
    assert np.array_equal(a[chosen], np.r_[0, np.cumsum(sizes)[:-1]])
    assert 4 * tables.table_values(k, a) <= 1 << 24
    assert (k[chosen] <= 16).all()


def test_forced_tables_equal_choose_tables():
    """Where every path is worth a table the choice is choose_tables' (shortest first)."""
    k = _mixed_lengths(1)
    g = np.zeros_like(k)
    for budget in (0, 1000, 1 << 16, 1 << 22, 1 << 40):
        got = tables.gpu_shap_table_offsets(k, g, budget, 12, cm.tables_everywhere(H100))
        assert np.array_equal(got, tables.choose_tables(k, budget, 12)), budget


def test_ties_broken_by_path_index():
    k = np.full(10, 6)
    costs = cm.tables_everywhere(H100)
    budget = 4 * 3 * (1 << 6) * 6  # room for three tables
    got = tables.gpu_shap_table_offsets(k, np.zeros(10, np.int64), budget, 12, costs)
    assert np.array_equal(np.flatnonzero(got >= 0), [0, 1, 2])


def test_choice_follows_the_costs():
    k = _mixed_lengths(2)
    g = np.zeros_like(k)
    cheap = replace(H100, table_bin=0.0, table_lane=0.0)
    dear = replace(H100, table_bin=1e-6, table_lane=1e-6)
    assert (tables.gpu_shap_table_offsets(k, g, 1 << 40, 12, dear) < 0).all()
    every = tables.gpu_shap_table_offsets(k, g, 1 << 40, 12, cheap)
    assert np.array_equal(every >= 0, (k >= 1) & (k <= 12))
    # long paths cost the quadrature more nodes: with tables of middling cost, a length rule
    # (quadrature: 7 + 10 n ps a lane, n = 2 nodes up to 4 features, 4 up to 8; tables 40 ps)
    mid = replace(H100, quad_path=0.0, quad_lane_node=10e-12, table_bin=0.0, table_lane=40e-12)
    got = tables.gpu_shap_table_offsets(k, g, 1 << 40, 12, mid) >= 0
    assert np.array_equal(got, (k >= 5) & (k <= 12))


def test_l2_misses_limit_the_tables():
    k = np.full(4000, 10)  # 40 KiB a table
    g = np.zeros_like(k)
    costs = replace(H100, table_bin=0.0, table_lane=0.0, table_miss_lane=1e-9,
                    l2_bytes=4 << 20)  # fmt: skip
    got = tables.gpu_shap_table_offsets(k, g, 1 << 40, 12, costs)
    nbytes = 4 * tables.table_values(k, got)
    assert 0 < nbytes < 4000 * 40960
    none_missing = tables.gpu_shap_table_offsets(
        k, g, 1 << 40, 12, replace(costs, l2_bytes=1 << 40)
    )
    assert (none_missing >= 0).all()


def test_budget_zero_and_no_candidates():
    k = _mixed_lengths(3)
    g = np.zeros_like(k)
    assert (tables.gpu_shap_table_offsets(k, g, 0, 12, cm.tables_everywhere()) < 0).all()
    assert tables.gpu_shap_table_offsets(np.zeros(0, np.int64), np.zeros(0), 10, 12, H100).size == 0
    assert (tables.gpu_shap_table_offsets(np.full(5, 30), np.zeros(5), 1 << 40, 24, H100) < 0).all()


@pytest.mark.parametrize(
    "args, match",
    [
        ((np.ones(3), np.zeros(3), 100, 12, H100), "integer array"),
        ((np.ones(3, int), np.zeros(4), 100, 12, H100), "path_group"),
        ((np.ones(3, int), np.zeros(3), -1, 12, H100), "budget_bytes"),
        ((np.ones(3, int), np.zeros(3), 100, 25, H100), "too large"),
        ((np.array([1, -1, 2]), np.zeros(3), 100, 12, H100), ">= 0"),
    ],
)
def test_choice_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        tables.gpu_shap_table_offsets(*args)


def test_choice_needs_kernel_costs():
    with pytest.raises(TypeError, match="KernelCosts"):
        tables.gpu_shap_table_offsets(np.ones(3, int), np.zeros(3), 100, 12, {"a": 1})


# --- predictions ----------------------------------------------------------------------------


def test_prediction_is_the_linear_terms():
    packed = _packed(300, 6)
    p = pr.predict(packed, "quadrature", H100, 1000)
    terms = pr.row_terms(pr.model_shape(packed), np.full(300, -1), H100.l2_bytes)
    per_row = sum(terms[f] * getattr(H100, f) for f in cm.COST_FIELDS)
    launches = pr.launches_per_batch(pr.model_shape(packed), np.full(300, -1))
    assert p.seconds == pytest.approx(1000 * per_row + launches * H100.launch + H100.call)
    assert p.rows_per_second == pytest.approx(1000 / p.seconds)
    assert sum(p.breakdown.values()) == pytest.approx(p.seconds)
    assert p.quadrature_paths == 300 and p.table_paths == 0 and p.kind == "H100"
    assert p.route == "regular"


def test_small_route_prediction():
    packed = _packed(80, 3, 8)  # 10 trees of depth 3: the one-launch route
    p = pr.predict(packed, "auto", H100, 10_000)
    assert p.route == "small" and p.table_paths == p.quadrature_paths == 0
    assert p.seconds == pytest.approx(10_000 * 80 * 9 * H100.small_lane2 + H100.small_call)


def test_prediction_monotone():
    small, large = _packed(300, 5), _packed(3000, 5)
    for choice in ("quadrature", "tables", "auto"):
        assert pr.predict(large, choice, H100).rows_per_second < pr.predict(
            small, choice, H100).rows_per_second  # fmt: skip
        s = [pr.predict(small, choice, H100, n).seconds for n in (1, 10, 10_000, 10**6)]
        assert s == sorted(s) and s[0] < s[-1]
    slow = replace(H100, **{f: 2 * getattr(H100, f) for f in cm.COST_FIELDS})
    assert pr.predict(large, "quadrature", slow).rows_per_second < pr.predict(
        large, "quadrature", H100).rows_per_second  # fmt: skip
    longer = [pr.predict(_packed(300, k, 20), "quadrature", H100).rows_per_second
              for k in (2, 6, 12, 20)]  # fmt: skip
    assert longer == sorted(longer, reverse=True)
    narrow = pr.predict(_packed(300, 4, 8, 1), "quadrature", H100).rows_per_second
    wide = pr.predict(_packed(300, 4, 400, 1), "quadrature", H100).rows_per_second
    assert wide < narrow  # more tile columns to flush and a wider finish pass


def test_local_tiles_price_shared_sums_and_the_chunks_features():
    from distshap.plan import gpu

    packed = _packed(600, 8, 300, 2, seed=3)  # 300 features: no column a feature fits
    shape = pr.model_shape(packed)
    none = np.full(packed.num_paths, -1)
    lanes = float(shape.k.sum())
    with config_context(quadrature_tile_features=300):  # no local tiles: a column a feature
        terms = pr.row_terms(shape, none, H100.l2_bytes)
        assert terms["quad_global_lane"] == lanes and terms["quad_chunk_col"] == 0
        assert not geo.quadrature_shared(300) and geo.quadrature_tile_columns(300) == 300
        all_features = pr.predict(shape, "quadrature", H100).rows_per_second
    assert geo.quadrature_shared(300) and geo.quadrature_tile_columns(300) == 31
    terms = pr.row_terms(shape, none, H100.l2_bytes)
    plan = gpu.plan_arrays(packed, none, local=True)  # what the kernel launches
    flushed = sum(int(q["local_feature_offsets"][-1]) for q in plan["quadrature"])
    assert terms["quad_global_lane"] == 0 and terms["quad_chunk_col"] == flushed
    assert sum(q["n_local"] for q in plan["quadrature"]) * 8 <= flushed <= lanes
    assert pr.predict(shape, "quadrature", H100).rows_per_second > all_features
    seconds = cm.quadrature_path_seconds(H100, shape.k, 300)
    assert np.allclose(
        seconds, H100.quad_path + shape.k * (H100.quad_lane + 4 * H100.quad_lane_node)
    )
    # without the lanes' features: estimated, a column a feature of each all-features chunk
    bare = replace(shape, lane_feature=None, path_offsets=None)
    chunks = sum(q["n_chunks"] for q in plan["quadrature"])
    terms = pr.row_terms(bare, none, H100.l2_bytes)
    assert terms["quad_global_lane"] == 0
    assert terms["quad_chunk_col"] == min(chunks * 300, lanes)
    # a bound whose tiles do not fit shared memory: the all-features kernel, global sums
    with config_context(quadrature_tile_features=250):
        assert not geo.quadrature_shared(300)
        terms = pr.row_terms(shape, none, H100.l2_bytes)
        assert terms["quad_global_lane"] == lanes and terms["quad_chunk_col"] == 0


def test_local_tiles_leave_narrow_models_alone():
    packed = _packed(600, 5, 12, 1, seed=4)  # 12 features: within the bound
    shape = pr.model_shape(packed)
    none = np.full(packed.num_paths, -1)
    got = {}
    for bound in (16, 12):
        with config_context(quadrature_tile_features=bound):
            got[bound] = pr.row_terms(shape, none, H100.l2_bytes)
            assert geo.quadrature_tile_columns(12) == 12
    assert got[16] == got[12]
    chunks = -(-packed.num_paths // 256)  # one group, one node count (k = 5: 4 nodes)
    assert got[16]["quad_chunk_col"] == chunks * 12


def test_auto_never_predicted_slower_than_either_extreme():
    for packed in (_packed(300, 3), _packed(300, 9, 20), _packed(300, 12, 300, 3)):
        for costs in (H100, MIX, cm.SHIPPED["generic"], replace(H100, table_bin=20e-12)):
            auto = pr.predict(packed, "auto", costs).seconds
            assert auto <= pr.predict(packed, "quadrature", costs).seconds * 1.001
            assert auto <= pr.predict(packed, "tables", costs).seconds * 1.02


def test_prediction_counts_oversize_paths():
    p = pr.predict(_packed(5, 40, 50), "auto", H100, 100)
    assert p.oversize_paths == 5 and p.breakdown["fallback"] > 0 and p.table_paths == 0


@pytest.mark.parametrize(
    "kw, err",
    [
        (dict(n_rows=0), ValueError),
        (dict(n_rows=2.5), ValueError),
        (dict(choice="fastest"), ValueError),
        (dict(costs={"quad_lane": 1}), TypeError),
        (dict(choice=np.zeros(3, np.int64)), ValueError),
    ],
)
def test_prediction_bad_input(kw, err):
    with pytest.raises(err):
        pr.predict(_packed(300, 3), **kw)
    with pytest.raises(TypeError, match="PackedModel"):
        pr.predict("model.json")


# --- constants, kinds and the cache -----------------------------------------------------------


def test_device_kinds():
    assert cm.device_kind("NVIDIA H100 80GB HBM3") == "H100"
    assert cm.device_kind(b"NVIDIA H100 PCIe") == "H100"
    assert cm.device_kind("NVIDIA H200") == "H200"
    assert cm.device_kind("Tesla T4") == "generic"
    assert cm.costs_for("Tesla T4", cache="/nonexistent/costs.json") is cm.SHIPPED["generic"]
    with pytest.raises(TypeError, match="device_name"):
        cm.costs_for(3)


@pytest.mark.parametrize("name, value", [("quad_lane", -1.0), ("table_bin", float("nan")),
                                         ("call", float("inf"))])  # fmt: skip
def test_bad_constants_refused(name, value):
    with pytest.raises(ValueError, match=name):
        replace(H100, **{name: value})


def test_bad_constant_types_refused():
    with pytest.raises(TypeError, match="quad_lane"):
        replace(H100, quad_lane="7ps")
    with pytest.raises(ValueError, match="l2_bytes"):
        replace(H100, l2_bytes=0)
    with pytest.raises(ValueError, match="unknown keys"):
        cm.KernelCosts.from_dict({**H100.to_dict(), "warp_speed": 9})
    with pytest.raises(ValueError, match="missing keys"):
        cm.KernelCosts.from_dict({k: v for k, v in H100.to_dict().items() if k != "quad_lane"})


def test_cache_round_trip(tmp_path, monkeypatch):
    path = tmp_path / "sub" / "costs.json"
    mine = replace(H100, source="calibrated test", quad_lane=1.25e-11, table_bin=3e-10)
    assert cm.save_costs("NVIDIA H100 80GB HBM3", mine, path) == path
    other = replace(cm.SHIPPED["generic"], source="calibrated other", call=1e-4)
    cm.save_costs("Tesla T4", other, path)  # a second device: the first entry kept
    loaded = cm.load_cache(path)
    assert loaded == {"NVIDIA H100 80GB HBM3": mine, "Tesla T4": other}
    assert cm.costs_for("NVIDIA H100 80GB HBM3", cache=path) == mine
    assert cm.costs_for("NVIDIA H100 PCIe", cache=path) is cm.SHIPPED["H100"]  # not that name
    monkeypatch.setenv(cm.CACHE_ENV, str(path))  # the default cache file from the environment
    assert cm.cache_file() == path and cm.costs_for("Tesla T4") == other
    monkeypatch.setenv(cm.CACHE_ENV, "none")
    assert cm.cache_file() is None and cm.costs_for("Tesla T4") is cm.SHIPPED["generic"]
    with pytest.raises(ValueError, match="none"):
        cm.save_costs("x", mine)


def test_default_cache_location(monkeypatch, tmp_path):
    monkeypatch.delenv(cm.CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cm.cache_file() == tmp_path / "distshap" / "kernel_costs.json"


BAD_CACHES = ["{not json", '{"version": 99, "devices": {}}',
              '{"version": 1, "devices": {"x": {"kind": "H100"}}}']  # fmt: skip


@pytest.mark.parametrize("text", BAD_CACHES)
def test_bad_cache_file_refused(tmp_path, text):
    path = tmp_path / "costs.json"
    path.write_text(text)
    with pytest.raises(ValueError, match="costs.json"):
        cm.costs_for("x", cache=path)


def test_shipped_literal_round_trip():
    text = cm.shipped_literal(H100)
    assert text.startswith("dict(") and "table_bin=230" in text
    values = eval(text.split("  #")[0])  # noqa: S307 - our own output
    again = cm._costs("H100", H100.source, H100.l2_bytes >> 20, **values)
    assert again == H100


def test_round_costs_and_override():
    r = cm.round_costs(replace(H100, quad_lane=1.23456789e-11), digits=3)
    assert r.quad_lane == 1.23e-11 and r.table_bin == H100.table_bin
    with cm.use_costs(r):
        assert cm.device_costs() is r
    with pytest.raises(TypeError):
        with cm.use_costs("H100"):
            pass


# --- info and the command line ------------------------------------------------------------


def _model_file(tmp_path):
    xgb = pytest.importorskip("xgboost")
    rng = np.random.default_rng(0)
    X = rng.random((300, 6))
    y = X[:, 0] + X[:, 1] * X[:, 2] + rng.normal(0, 0.1, 300)
    booster = xgb.train({"max_depth": 5, "eta": 0.3}, xgb.DMatrix(X, label=y), 40)
    path = tmp_path / "m.json"
    booster.save_model(path)
    return path


def test_info_names_kind_and_prediction(tmp_path, monkeypatch):
    from distshap.info import format_info, model_info

    monkeypatch.setenv(cm.CACHE_ENV, "none")
    path = _model_file(tmp_path)
    info = model_info(str(path), device_kind="H100", n_rows=10_000)
    c = info["cost_model"]
    assert c["kind"] == "H100" and c["n_rows"] == 10_000
    assert c["choice"]["rows_per_second"] > 0
    assert c["choice"]["table_paths"] + c["choice"]["quadrature_paths"] == info["paths"][
        "unique_paths"] - info["paths"]["featureless_paths"]  # fmt: skip
    text = format_info(info, str(path))
    assert "SHAP strategy   H100" in text and "predicted" in text
    assert c["choice"]["route"] == "regular" and info["paths"]["unique_paths"] > 256
    unknown = model_info(str(path), device_kind="Tesla T4")["cost_model"]
    assert unknown["kind"] == "generic" and unknown["device"] == "Tesla T4"
    text = format_info(model_info(str(path), device_kind="Tesla T4"), str(path))
    assert "Tesla T4 (unknown kind: generic defaults)" in text


@pytest.mark.parametrize("n_features", [6, 90])
def test_info_says_why_wide_models_have_no_interaction_tables(tmp_path, monkeypatch, n_features):
    from distshap.info import format_info, model_info

    xgb = pytest.importorskip("xgboost")
    monkeypatch.setenv(cm.CACHE_ENV, "none")
    rng = np.random.default_rng(1)
    X = rng.random((300, n_features))
    y = X[:, 0] + X[:, 1] * X[:, 2] + X[:, -1] + rng.normal(0, 0.1, 300)
    booster = xgb.train({"max_depth": 4, "eta": 0.3}, xgb.DMatrix(X, label=y), 20)
    info = model_info(booster, device_kind="H200", n_rows=1000)
    if info["cuda"] is None:
        pytest.skip("Numba's CUDA target is not available")
    wide = n_features + 1 > 78
    assert (info["cuda"]["interaction_table_paths"] == 0) == wide
    assert ("too wide for tables to pay" in format_info(info, "m")) == wide


def test_cli_info_device_kind_and_calibrate_without_gpu(tmp_path):
    path = _model_file(tmp_path)
    env = {"DISTSHAP_KERNEL_COSTS": "none"}
    import os

    run = dict(capture_output=True, text=True, env={**os.environ, **env}, timeout=120)
    out = subprocess.run([sys.executable, "-m", "distshap.cli", "info", str(path), "--json",
                          "--device-kind", "H200", "--rows", "5000"], **run)  # fmt: skip
    assert out.returncode == 0, out.stderr
    c = json.loads(out.stdout)["cost_model"]
    assert c["kind"] == "H200" and c["n_rows"] == 5000
    bad = subprocess.run([sys.executable, "-m", "distshap.cli", "info", str(path), "--rows", "0"],
                         **run)  # fmt: skip
    assert bad.returncode == 2 and "--rows" in bad.stderr
    from numba import cuda

    if not cuda.is_available():  # (with a GPU it would calibrate: the gpu test below)
        cal = subprocess.run([sys.executable, "-m", "distshap.cli", "calibrate", "--dry-run"],
                             **run)  # fmt: skip
        assert cal.returncode == 1 and "no CUDA GPU" in cal.stderr


# --- calibration ----------------------------------------------------------------------------


def test_synthetic_models():
    e = Experiment("t", "tables", 5, 40, num_features=9, num_groups=2)
    packed = synthetic_packed(e)
    k = tables.path_features(packed.path_offsets)
    assert packed.num_paths == 40 and (k == 5).all() and packed.num_groups == 2
    assert packed.table_budget_bytes >= 1 << 40
    assert synthetic_packed(replace(e, variant="quadrature")).table_budget_bytes == 0
    with pytest.raises(ValueError, match="k <= num_features"):
        synthetic_paths(3, 10, 5)
    mixed = synthetic_packed(Experiment("m", "tables", 2, 40, k_alt=25))
    k = tables.path_features(mixed.path_offsets)
    assert sorted(np.unique(k)) == [2, 25] and (k == 2).sum() == (k == 25).sum() == 40
    from distshap.plan.gpu import shap_table_offsets

    with cm.use_costs(cm.tables_everywhere()):
        on = shap_table_offsets(mixed) >= 0
    assert np.array_equal(on, k == 2)  # the long paths stay in the quadrature kernels


CALIBRATE_SCRIPT = r"""
import json, os, sys
from distshap.kernels.cuda.calibrate import Experiment, calibrate
from distshap.plan import costs as cm
from distshap.plan.config import set_config
set_config(small_max_paths=0)  # the regular kernels (tables, quadrature) even for tiny models
path = sys.argv[1] if len(sys.argv) > 1 else os.environ["COSTS_FILE"]
exps = (Experiment("q4", "quadrature", 4, 3, num_features=6, rows=128),  # a block a 128 rows
        Experiment("q9", "quadrature", 9, 2, num_features=10, rows=2),
        Experiment("t3", "tables", 3, 3, num_features=6, rows=2))
r = calibrate(repeats=1, cache=path, experiments=exps)
assert r.path == path and r.device == "simulator", r.path
loaded = cm.load_cache(path)["simulator"]
assert loaded == r.costs and loaded.source.startswith("calibrated"), loaded
skipped = [n for n in r.notes if "skipped" in n]  # the simulator's rows cost little
assert r.measurements and len(r.measurements) + len(skipped) == 3, (r.measurements, r.notes)
assert all(m["slope"] > 0 for m in r.measurements)
assert "q4" in {m["name"] for m in r.measurements}, r.notes  # the quadrature kernel timed
assert not any("no path on a table" in n for n in r.notes), r.notes  # t3 ran on tables
assert [m["table_paths"] for m in r.measurements if m["name"] == "t3"] in ([3], [])
assert cm.costs_for("simulator", cache=path) == r.costs
with cm.use_costs(r.costs):
    assert cm.device_costs() == r.costs
print("SIMULATOR-OK")
"""


def test_calibrate_plumbing_under_simulator(tmp_path):
    path = str(tmp_path / "costs.json")
    script = CALIBRATE_SCRIPT.replace('os.environ["COSTS_FILE"]', repr(path))
    assert_simulator_ok(script, timeout=300)
    assert "simulator" in json.loads(open(path).read())["devices"]


FORCED_SCRIPT = r"""
from dataclasses import replace
import numpy as np
from distshap.kernels.cuda import device_model, shap_values
from distshap.kernels.cuda.calibrate import Experiment, synthetic_packed
from distshap.plan import costs as cm
from distshap.plan.config import set_config
set_config(small_max_paths=0)  # the plans' kernels even for this small model
packed = synthetic_packed(Experiment("t", "tables", 4, 40, num_features=6))
X = np.random.default_rng(0).random((3, 6), dtype=np.float32)
dear = replace(cm.SHIPPED["generic"], table_bin=1.0)  # tables never pay: all quadrature
with cm.use_costs(cm.tables_everywhere()):
    tables = device_model(packed).shap.table_paths
    with_tables = shap_values(packed, X)
with cm.use_costs(dear):  # no cache clearing: the plan is kept per forced constants
    quadrature = device_model(packed).shap.table_paths
    without = shap_values(packed, X)
assert tables == 40 and quadrature == 0, (tables, quadrature)
assert np.allclose(with_tables, without, rtol=0, atol=1e-5)
print("SIMULATOR-OK")
"""


def test_forced_costs_choose_the_plan_without_clearing_the_cache():
    assert_simulator_ok(FORCED_SCRIPT, timeout=300)


def test_calibrate_bad_arguments():
    from distshap.kernels.cuda.calibrate import calibrate

    with pytest.raises(ValueError, match="scale"):
        calibrate(scale=0, write=False)
    with pytest.raises(ValueError, match="repeats"):
        calibrate(repeats=0, write=False)


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="no CUDA GPU visible (run on the GPU host)")
def test_calibrate_on_gpu(tmp_path):
    """The real calibration (<60 s): constants within sane bounds, the fit within 50%."""
    from distshap.kernels.cuda.calibrate import calibrate

    r = calibrate(cache=str(tmp_path / "costs.json"))
    assert r.seconds < 120 and r.path and r.costs.source.startswith("calibrated")
    # a quadrature lane's cost is quad_lane + n quad_lane_node (n nodes); since the lean
    # kernels the fit may put all of it on the per-node term (quad_lane 0 on an H200)
    lane = r.costs.quad_lane + 4 * r.costs.quad_lane_node
    assert r.costs.quad_lane >= 0 and 1e-13 < lane < 1e-9, r.costs
    # a table bin's fixed cost is small beside its lanes: with other kernels sharing the GPU
    # (tests run in parallel) the non-negative fit may put it at 0; it may never go negative,
    # and the lanes of a table path must keep a positive cost
    assert r.costs.table_bin >= 0 and r.costs.table_lane > 0, r.costs
    assert max(abs(m["fit_error"]) for m in r.measurements) < 0.5, r.measurements


def test_simulator_and_no_gpu_put_every_eligible_path_on_a_table(monkeypatch):
    assert cm.device_kind("simulator") == "simulator"
    sim = cm.costs_for("simulator", cache="/nonexistent/costs.json")
    assert sim is cm.SHIPPED["simulator"]
    k = _mixed_lengths(4)
    got = tables.gpu_shap_table_offsets(k, np.zeros_like(k), 1 << 20, 12, sim)
    assert np.array_equal(got, tables.choose_tables(k, 1 << 20, 12))
    monkeypatch.setattr(cm, "current_device_name", lambda: "")  # no GPU: host-side planning
    assert cm.device_costs() is sim
    monkeypatch.setattr(cm, "current_device_name", lambda: "NVIDIA H100 80GB HBM3")
    monkeypatch.setenv(cm.CACHE_ENV, "none")
    assert cm.device_costs() is cm.SHIPPED["H100"]


BENCH_SCRIPT = r"""
import json, sys
from benchmarks import cost_model
cost_model.main(["--shapes", "cal_housing-small", "--rows", "3", "--repeats", "1",
                 "--no-xgboost", "--out", sys.argv[1] if len(sys.argv) > 1 else OUT])
rec = json.loads(open(OUT).read().splitlines()[-1])
assert "error" not in rec, rec
for v in ("quadrature", "auto", "tables"):
    assert rec[v]["measured_rows_s"] > 0 and rec[v]["predicted_rows_s"] > 0, rec
assert rec["auto"]["plan_is_cost_model_choice"], rec
print("SIMULATOR-OK")
"""


def test_benchmark_plumbing_under_simulator(tmp_path):
    out = str(tmp_path / "bench.jsonl")
    assert_simulator_ok(f"OUT = {out!r}\n" + BENCH_SCRIPT, timeout=600)
