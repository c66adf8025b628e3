"""Checked GPU SHAP calls replayed as CUDA graphs (:mod:`distshap.kernels.cuda.replay`).

A graph must give the launches' values bit for bit (first call: eager, later calls: the graph),
with SHAP tables, quadrature, oversize paths and several groups, for its own row count and for
the fewer rows of its bucket (zero rows beside them); flag a row that misses its margin as the
launches' check does; serve one call at a time, a bucket keeping up to ``replay_graphs`` of
them (a call that finds them all busy takes the launches), and never serve what
it does not take (CuPy rows, float64 rows, rows that are not ``raw``, buckets beyond
``replay_rows`` or ``replay_graph_bytes``).
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from distshap.kernels import cuda_available
from distshap.kernels.margin import margin_model
from distshap.packed import build_packed_model
from distshap.paths import extract_paths
from distshap.plan.config import config_context
from distshap.warmup import chain_ensemble

import tiny
from conftest import to_host

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not cuda_available(), reason="no CUDA GPU visible (GPU host)"),
]


def _packed(ens, budget=0):
    return build_packed_model(extract_paths(ens), margin=margin_model(ens),
                              table_budget_bytes=budget)  # fmt: skip


def _launched(packed, rows):
    from distshap.kernels import cuda as kc

    with config_context(replay_rows=0):
        return to_host(kc.shap_values(packed, rows))


def _models():
    wide = tiny.random_ensemble(81, n_features=40, n_trees=30, depth=6, n_groups=3,
                                n_categorical=3)  # fmt: skip
    narrow = tiny.random_ensemble(82, n_features=8, n_trees=80, depth=7)
    yield "wide", _packed(wide), wide
    yield "tables", _packed(narrow, budget=1 << 20), narrow
    yield "oversize", _packed(chain_ensemble(33, 33)), chain_ensemble(33, 33)


def test_gpu_replay_keeps_the_bits():
    from distshap.kernels.cuda import device_model
    from distshap.kernels.cuda.replay import replayed_values
    from distshap.plan.costs import forced_costs

    for name, packed, ens in _models():
        X = np.ascontiguousarray(tiny.random_rows(83, ens, 48, 0.1), np.float32)
        # 24 rows: a graph over the row kernels (more rows than path_thread_rows)
        with config_context(small_max_paths=0, replay_rows=24):
            for n in (1, 3, 16, 24):
                rows = np.ascontiguousarray(X[:n])
                want = _launched(packed, rows)
                for call in ("eager", "graph", "graph again"):
                    got, flagged = replayed_values(packed, rows, rows)
                    assert not flagged, (name, n, call)
                    assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), (name, n)
                slot = device_model(packed)._forms[("replay", n, forced_costs())]
                assert slot.graphs and not slot.failed, (name, n)
                other = np.ascontiguousarray(X[24 : 24 + n])  # new rows through the graph
                got, _ = replayed_values(packed, other, other)
                want = _launched(packed, other)
                assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), (name, n)


#: (settings, rows, first row) of calls through their bucket's graph: the call's own plan and
#: the bucket's (the graph's) may differ, the bits may not
_BUCKET_CALLS = (
    ({}, 19, 0),  # row kernels, both (a graph of 20 rows)
    ({}, 1020, 0),  # the few-rows plan, both (a graph of 1,024 rows) ...
    ({}, 1000, 2000),  # ... which a call of 1,000 rows replays
    ({"few_rows_blocks": 0}, 3000, 3000),  # the usual plan, both (3,072 rows)
    ({"few_rows": 1120, "few_rows_blocks": 0}, 1100, 0),  # few-rows plan; its bucket's: usual
    ({"path_thread_rows": 17}, 17, 0),  # a thread a path; its bucket's (18 rows): row kernels
)


def test_gpu_replay_buckets_keep_the_bits():
    from distshap.kernels.cuda import device_model
    from distshap.kernels.cuda.replay import replay_bucket, replayed_values
    from distshap.plan.costs import forced_costs

    # every size through the block traversal (the one-tree model's too), no one-launch route
    wide_open = {"replay_graph_bytes": 1 << 30, "margin_block_rows_per_tree": 0,
                 "small_max_paths": 0}  # fmt: skip
    for name, packed, ens in _models():
        X = np.ascontiguousarray(tiny.random_rows(88, ens, 6000, 0.1), np.float32)
        for settings, n, at in _BUCKET_CALLS:
            with config_context(**wide_open, **settings):
                rows = np.ascontiguousarray(X[at : at + n])
                want = _launched(packed, rows)
                got, flagged = replayed_values(packed, rows, rows)
                assert not flagged, (name, n)
                assert got.shape == want.shape
                assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), (name, n)
                slot = device_model(packed)._forms[("replay", replay_bucket(n), forced_costs())]
                assert slot.graphs and not slot.failed, (name, n)
        with config_context(**wide_open):
            rows = np.ascontiguousarray(X[5000:5999])  # 999 rows through the graph of 1,024
            got, _ = replayed_values(packed, rows, rows)
            want = _launched(packed, rows)
            assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), name
            graph = device_model(packed)._forms[("replay", 1024, forced_costs())].graphs[0]
            assert not graph.host_in[999:].any(), name  # the rows beyond the call's: zeros


def test_gpu_replay_branches_keep_the_bits_and_the_flag():
    """A graph whose quadrature launches are dealt over several streams beside the check's
    traversal gives the one-stream launches' bits; a margin its values miss still flags."""
    from distshap.kernels.cuda import device_model
    from distshap.kernels.cuda.replay import replayed_values
    from distshap.plan.costs import forced_costs

    ens = tiny.random_ensemble(90, n_features=12, n_trees=60, depth=8)
    packed = _packed(ens)
    rows = np.ascontiguousarray(tiny.random_rows(91, ens, 3072, 0.1), np.float32)
    with config_context(few_rows_blocks=0, replay_graph_bytes=1 << 30):
        want = _launched(packed, rows)
        for call in ("eager", "graph"):
            got, flagged = replayed_values(packed, rows, rows)
            assert not flagged and np.array_equal(got.view(np.uint32), want.view(np.uint32)), call
        graph = device_model(packed)._forms[("replay", 3072, forced_costs())].graphs[0]
        launches = len(graph.plan.quadrature)  # on the graph's stream and a side at least
        assert launches >= 2, launches
        other = tiny.random_ensemble(92, n_features=12, n_trees=60, depth=8)
        missed = _packed(other)
        missed.margin["base_score"] = missed.margin["base_score"] + 1.0  # values miss it
        assert replayed_values(missed, rows, rows)[1]  # eager
        assert replayed_values(missed, rows, rows)[1]  # graph


def test_gpu_replay_flags_a_row_that_misses_its_margin():
    from distshap.kernels.cuda.replay import replayed_values

    ens = tiny.random_ensemble(84, n_features=8, n_trees=40, depth=6)
    packed = _packed(ens)
    packed.margin["base_score"] = packed.margin["base_score"] + 1.0  # a margin the values miss
    rows = np.ascontiguousarray(tiny.random_rows(85, ens, 4, 0.1), np.float32)
    with config_context(small_max_paths=0):
        assert replayed_values(packed, rows, rows)[1]  # eager
        assert replayed_values(packed, rows, rows)[1]  # graph
    many = np.ascontiguousarray(tiny.random_rows(85, ens, 1000, 0.1), np.float32)
    assert replayed_values(packed, many, many)[1]  # eager, 1,024 rows
    assert replayed_values(packed, many, many)[1]  # graph


def test_gpu_replay_through_the_explainer_and_from_threads():
    import distshap

    import xgb_models

    booster, X = xgb_models.MODEL_KINDS["multiclass"]()
    X = np.ascontiguousarray(X[:6], np.float32)
    explainer = distshap.TreeExplainer(booster, backend="cuda", layout="xgboost")
    previous = distshap.set_config(small_max_paths=0)  # the threads' configuration: lanes
    try:
        with config_context(replay_rows=0):
            want = explainer.shap_values(X)
        _from_threads(explainer, X, want)
        from distshap.kernels.cuda import device_model
        from distshap.plan.costs import forced_costs

        slot = device_model(explainer.packed)._forms[("replay", 6, forced_costs())]
        assert 1 <= len(slot.graphs) <= 2 and not slot.failed  # replay_graphs
    finally:
        distshap.set_config(**{"small_max_paths": previous.small_max_paths})


def _from_threads(explainer, X, want):
    results, errors = [], []

    def work():
        try:
            for _ in range(20):
                results.append(explainer.shap_values(X))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 80
    for got in results:
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_gpu_replay_serves_only_what_it_takes():
    import cupy

    from distshap.kernels.cuda import device_model
    from distshap.kernels.cuda.replay import graph_bytes, replayed_values
    from distshap.plan.costs import forced_costs

    ens = tiny.random_ensemble(86, n_features=8, n_trees=40, depth=6)
    packed = _packed(ens)
    rows = np.ascontiguousarray(tiny.random_rows(87, ens, 4, 0.1), np.float32)
    assert replayed_values(packed, cupy.asarray(rows), cupy.asarray(rows)) is None
    assert replayed_values(packed, rows.astype(np.float64), rows.astype(np.float64)) is None
    assert replayed_values(packed, rows, rows.copy()) is None
    with config_context(replay_rows=3):
        assert replayed_values(packed, rows, rows) is None  # 4 rows
    many = np.zeros((65, 8), np.float32)  # more than the check's block traversal takes
    with config_context(replay_rows=100, margin_block_rows=64):
        assert replayed_values(packed, many, many) is None
    sixty, sixty_four = many[:60], many[:64]  # one object each: the rows are their raw values
    with config_context(replay_rows=1000):
        assert replayed_values(packed, sixty, sixty) is not None
        whole = np.zeros((1000, 8), np.float32)  # its bucket, 1,024 rows, cut to 1,000
        assert replayed_values(packed, whole, whole) is not None
        assert device_model(packed)._forms[("replay", 1000, forced_costs())].graphs
        over = np.zeros((1001, 8), np.float32)
        assert replayed_values(packed, over, over) is None
    with config_context(replay_graph_bytes=graph_bytes(packed, 64) - 1):
        assert replayed_values(packed, sixty_four, sixty_four) is None  # 64 rows' buffers
        assert replayed_values(packed, sixty, sixty) is not None  # 60: fewer bytes
    sixteen, seventeen = many[:16], many[:17]
    with config_context(replay_graph_bytes=1):  # up to 16 rows, whatever their bytes
        assert replayed_values(packed, sixteen, sixteen) is not None
        assert replayed_values(packed, seventeen, seventeen) is None


def test_gpu_replay_keeps_graphs_for_calls_side_by_side():
    from distshap.kernels.cuda import device_model
    from distshap.kernels.cuda.replay import replayed_values
    from distshap.plan.costs import forced_costs

    ens = tiny.random_ensemble(88, n_features=9, n_trees=30, depth=6, n_groups=2)
    packed = _packed(ens)
    rows = np.ascontiguousarray(tiny.random_rows(89, ens, 40, 0.1), np.float32)
    want = _launched(packed, rows)
    with config_context(replay_graphs=2):
        assert np.array_equal(replayed_values(packed, rows, rows)[0], want)  # builds graph 1
        slot = device_model(packed)._forms[("replay", 40, forced_costs())]
        held, build = slot.take(2)  # a call holds graph 1 ...
        assert held is slot.graphs[0] and not build
        got, _ = replayed_values(packed, rows, rows)  # ... so this one builds graph 2
        assert len(slot.graphs) == 2 and np.array_equal(got.view(np.uint32), want.view(np.uint32))
        got, _ = replayed_values(packed, rows, rows)  # graph 2, replayed
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
        other, _ = slot.take(2)  # both held: the launches serve
        assert other is slot.graphs[1] and replayed_values(packed, rows, rows) is None
        slot.give(held, False)
        slot.give(other, False)
        got, _ = replayed_values(packed, rows, rows)
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
        assert len(slot.graphs) == 2 and len(slot.free) == 2
    fewer = np.ascontiguousarray(rows[:36])  # a bucket of its own (36 rows)
    with config_context(replay_graphs=1):  # one graph: a call beside it takes the launches
        assert replayed_values(packed, fewer, fewer) is not None
        slot = device_model(packed)._forms[("replay", 36, forced_costs())]
        held, build = slot.take(1)
        assert held is slot.graphs[0] and not build
        assert replayed_values(packed, fewer, fewer) is None and len(slot.graphs) == 1
        slot.give(held, False)
