"""The counting half of ``benchmarks/kernel_limits.py`` (:mod:`benchmarks.kernel_work`; needs
NVVM, no GPU): loops and their longest paths, unrolling undone, trip counts of a small model's
plan, shares of the peaks. The timing half needs a GPU (``benchmarks/RESULTS.md``)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from cudasim import nvvm_available

# a loop (L1 .. the branch back) holding an if-else (two arms of 2 and 3 instructions), and a
# skipped block of one; PTX syntax
_PTX = """$L__BB0_1:
add.s32 %r1, %r1, 1
@%p1 bra $L__BB0_3
mul.f32 %f1, %f1, %f2
add.f32 %f1, %f1, %f2
bra.uni $L__BB0_4
$L__BB0_3:
fma.rn.f32 %f1, %f1, %f2, %f3
rcp.approx.ftz.f32 %f4, %f1
cvt.rzi.s64.f32 %rd1, %f4
$L__BB0_4:
@%p2 bra $L__BB0_5
atom.shared.add.u32 %r2, [%r3], %r4
$L__BB0_5:
setp.lt.s32 %p3, %r1, 8
@%p3 bra $L__BB0_1
ret"""


def test_loop_counts_take_the_longer_arm():
    from benchmarks.kernel_work import loop_counts

    lines = [x.strip() for x in _PTX.splitlines()]
    loops = loop_counts(lines, sass=False)
    assert [(lp["start"], lp["end"], lp["parent"]) for lp in loops[:-1]] == [(0, 15, -1)]
    own = loops[0]["own"]
    # add, bra, the 3-instruction arm, bra, atom, setp, bra: 9 (not both arms: 11)
    assert own["issue"] == 9, own
    assert own["fp32"] == 1 and own["xu"] == 2 and own["atoms"] == 1, own
    assert loops[-1]["own"]["issue"] == 1  # the ret after the loop


def test_unrolled_loop_per_iteration():
    from benchmarks.kernel_work import _per_iteration, _without

    body = Counter(issue=200, rcp=8, fp32=40)  # two iterations of 4 reciprocals each
    per = _per_iteration(body, "rcp", 4)
    assert per == Counter(issue=100, rcp=4, fp32=20)
    outer = Counter(issue=130, rcp=4, fp32=21)  # holds one remainder copy
    assert _without(outer, per, "rcp", 4) == Counter(issue=30, rcp=0, fp32=1)


def test_pair_iterations_match_the_kernel_loops():
    from benchmarks.kernel_work import _npairs

    for k in range(0, 12):
        brute = sum(max(0, k - a - 2) for a in range(0, k, 2))
        assert int(_npairs(np.array([k]))[0]) == brute


def test_shares_of_the_peaks():
    from benchmarks.kernel_limits import Peaks, shares
    from benchmarks.kernel_work import KernelWork

    peaks = Peaks(sms=132, clock_hz=2e9, hbm=4e12, source="test")
    work = KernelWork("k", Counter(issue=132 * 4 * 2e9 * 0.5, xu=132 * 2e9 / 2 * 0.25), 1e12)
    got = shares(work, 1.0, peaks)
    assert got["issue"] == pytest.approx(50.0) and got["xu"] == pytest.approx(25.0)
    assert got["fp32"] == 0.0 and got["hbm"] == pytest.approx(25.0)


@pytest.mark.skipif(not nvvm_available(), reason="NVVM (CUDA toolkit compiler) not found")
def test_plan_work_of_a_small_model():
    import xgboost as xgb

    from benchmarks.kernel_work import host_plan, plan_work
    from distshap import TreeExplainer
    from distshap.plan.config import config_context
    from distshap.plan.tables import path_features

    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 6)).astype(np.float32)
    y = X[:, 0] * X[:, 1] + np.sin(X[:, 2]) + 0.1 * rng.normal(size=400)
    booster = xgb.train({"max_depth": 3, "eta": 0.3}, xgb.DMatrix(X, label=y), 20)
    packed = TreeExplainer(booster, backend="cpu", table_budget_bytes=0).packed
    k = path_features(packed.path_offsets)
    rows = 1000
    with config_context(small_max_paths=0):
        plan = host_plan(packed, interactions=False)
        work = plan_work(packed, plan, rows, interactions=False, sass=False)
    quad = [w for w in work if w.label.startswith("quadrature")]
    assert quad and [w.label for w in work][-2:] == ["rows transposed (CuPy)", "finish"]
    launched = np.concatenate([q["paths"] for q in plan["quadrature"]])
    assert launched.size < int((k > 0).sum())  # sibling units: a launch runs the head
    assert sum(w.elements for w in quad) == int(k[launched].sum()) * rows
    for w in quad:
        assert w.level == "ptx" and w.counts["issue"] > 0, w
        # paths of at most 3 features: the 2-node kernel; a path element of two rows runs its
        # 2 reciprocals a node and row, counted once per warp of 64 rows (32 threads x 2)
        assert w.label.startswith("quadrature 2 nodes")
        assert w.counts["xu"] >= 4 * w.elements / 64, w
        assert w.counts["issue"] > w.counts["fp32"] > 0, w
    assert work[-1].hbm_bytes == 20.0 * rows * (packed.num_features + 1)
    # its units are all pairs: counted as the build without the general fold (no unit entries),
    # which issues less than the general build counted for the same launches
    assert not any(q["general_units"] for q in plan["quadrature"])
    assert all(w.counts["issue:unit"] == 0 for w in quad)
    for q in plan["quadrature"]:
        q["general_units"] = True
    general = plan_work(packed, plan, rows, interactions=False, sass=False)
    general = [w for w in general if w.label.startswith("quadrature")]
    assert all(w.counts["issue:unit"] > 0 for w in general)
    assert sum(w.counts["issue"] for w in quad) < sum(w.counts["issue"] for w in general)


def test_saved_counts_stand_in_for_missing_tools(tmp_path):
    import json

    from benchmarks import kernel_work

    path = tmp_path / "counts.json"
    entry = {"level": "sass", "registers": 48, "roles": {"element": {"issue": 127, "fp32": 24}}}
    path.write_text(json.dumps({"shap/2/shared": entry}))
    try:
        assert kernel_work.load_counts(str(path)) == 1
        got = kernel_work.kernel_counts("shap", 2, "shared", sass=True, nvdisasm="/no/nvdisasm")
        assert got["level"] == "sass*" and got["registers"] == 48
        assert got["roles"]["element"] == Counter(issue=127, fp32=24)
    finally:
        kernel_work._SAVED.clear()


def test_ncu_raw_csv_is_read():
    from benchmarks.kernel_ncu import _parse_ncu

    text = (
        "==PROF== Connected to process 1\n"
        '"ID","Process ID","Kernel Name","gpu__time_duration.sum","sm__inst_executed.sum"\n'
        '"","","","nsecond","warp"\n'
        '"0","7","spin","200,064","1"\n'
        '"1","7","kernel","1,234,567","98765432"\n'
        "application output\n"
    )
    got = _parse_ncu(text)
    assert [r["Kernel Name"] for r in got] == ["spin", "kernel"]
    assert got[1]["gpu__time_duration.sum"] == 1234567.0
    assert got[1]["sm__inst_executed.sum"] == 98765432.0
