"""Dask layer: results through a cluster equal the single-device kernel's, bit for bit.

Runs on an in-process CPU ``LocalCluster`` (threads, fast to start); the worker-loss tests
(worker processes) are in ``test_cluster_worker_loss.py``. The model goes through the real pipeline:
``TreeExplainer(booster).packed`` (loader, input encoding, paths, packing).
"""

from __future__ import annotations

from dataclasses import replace

import dask
import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest

import distshap.cluster.dask_explain as dx
import distshap.cluster.graph as graph
import distshap.cluster.shipping as shipping
from distshap import TreeExplainer, kernels
from distshap.cluster import (
    ClusterError,
    clear_model_cache,
    compute,
    explain_dask,
    model_future,
    start_cluster,
    warm_up,
)
from distshap.frames import frame_to_matrix
from distshap.inputs import prepare_rows
from distshap.packed import build_packed_model
from distshap.paths import extract_paths

xgb = pytest.importorskip("xgboost")

N_FEATURES = 5


def _packed(model):
    return TreeExplainer(model, backend="cpu").packed


@pytest.fixture(scope="module")
def data() -> np.ndarray:
    rng = np.random.default_rng(7)
    X = rng.normal(size=(600, N_FEATURES)).astype(np.float32)
    X[rng.random(X.shape) < 0.05] = np.nan
    return X


@pytest.fixture(scope="module")
def regression(data):
    """Packed depth-4 regression model with missing values."""
    X = np.nan_to_num(data[:400])
    y = X[:, 0] * X[:, 1] + np.sin(X[:, 2]) + (X[:, 3] > 0)
    booster = xgb.train(
        {"max_depth": 4, "eta": 0.3, "base_score": 0.5},
        xgb.DMatrix(data[:400], label=y),
        num_boost_round=12,
    )
    return _packed(booster)


@pytest.fixture(scope="module")
def multiclass(data):
    """Packed 3-class model (G = 3 output groups)."""
    y = (np.nan_to_num(data[:400, 0]) > 0).astype(int) + (np.nan_to_num(data[:400, 1]) > 0.5)
    booster = xgb.train(
        {"max_depth": 3, "objective": "multi:softprob", "num_class": 3},
        xgb.DMatrix(data[:400], label=y),
        num_boost_round=4,
    )
    return _packed(booster)


@pytest.fixture(scope="module")
def frame_model():
    """A pandas frame with a categorical and a nullable column, and an XGBoost model of it."""
    rng = np.random.default_rng(3)
    n = 300
    colour = pd.Categorical(
        rng.choice(["red", "green", "blue", None], size=n), categories=["red", "green", "blue"]
    )
    count = pd.array(rng.integers(0, 5, size=n), dtype="Int64")
    count[rng.random(n) < 0.1] = pd.NA
    frame = pd.DataFrame(
        {
            "a": rng.normal(size=n).astype(np.float32),
            "colour": colour,
            "count": count,
            "flag": rng.random(n) < 0.5,
        }
    )
    y = frame["a"].to_numpy() + (frame["colour"] == "red") * 2.0 + frame["flag"] * 0.5
    booster = xgb.train(
        {"max_depth": 3, "max_cat_to_onehot": 1},
        xgb.DMatrix(frame, label=y, enable_categorical=True),
        num_boost_round=6,
    )
    return frame, booster, _packed(booster)


@pytest.fixture(scope="module")
def client():
    with start_cluster(
        n_workers=2, processes=False, gpus=False, dashboard_address=":0"
    ) as dask_client:
        yield dask_client


def _reference(packed, X, backend, interactions):
    module = kernels.get_backend(backend)
    out = (module.interaction_values if interactions else module.shap_values)(packed, X)
    return out.get() if hasattr(out, "get") else np.asarray(out)


CHUNKINGS = [(600, N_FEATURES), (97, 2), ((1, 250, 349), (3, 2)), (50, N_FEATURES)]


@pytest.mark.parametrize("chunks", CHUNKINGS, ids=["one", "97x2", "ragged", "50"])
@pytest.mark.parametrize("interactions", [False, True], ids=["shap", "interactions"])
def test_array_equals_single_device(client, regression, data, chunks, interactions, backend):
    expected = _reference(regression, data, backend, interactions)
    result = explain_dask(
        regression, da.from_array(data, chunks=chunks), interactions, backend, client=client
    )
    width = N_FEATURES + 1
    tail = (1, width, width) if interactions else (1, width)
    assert result.shape == (data.shape[0],) + tail
    assert result.dtype == np.float32
    assert result.chunks[0] == da.from_array(data, chunks=chunks).chunks[0]
    out = result.compute()
    assert isinstance(out, np.ndarray) and out.dtype == np.float32
    np.testing.assert_array_equal(out, expected)  # both kernels are per-row deterministic


@pytest.mark.parametrize("interactions", [False, True], ids=["shap", "interactions"])
def test_multiclass_any_chunking_same_bits(client, multiclass, data, interactions):
    expected = _reference(multiclass, data, "cpu", interactions)
    assert expected.shape[1] == 3
    for chunks in [(600, N_FEATURES), (64, N_FEATURES), (7, 1)]:
        result = explain_dask(
            multiclass, da.from_array(data, chunks=chunks), interactions, "cpu", client=client
        )
        np.testing.assert_array_equal(compute(result, client=client), expected)


@pytest.mark.gpu
@pytest.mark.skipif(not kernels.cuda_available(), reason="no CUDA GPU visible")
@pytest.mark.parametrize("interactions", [False, True], ids=["shap", "interactions"])
def test_cupy_chunks_stay_on_device(client, regression, data, interactions):
    cupy = pytest.importorskip("cupy")
    X = da.from_array(cupy.asarray(data), chunks=(97, 2))
    result = explain_dask(regression, X, interactions, "auto", client=client)
    assert type(result._meta).__module__.split(".")[0] == "cupy"
    out = result.compute()
    assert isinstance(out, cupy.ndarray) and out.dtype == cupy.float32
    np.testing.assert_array_equal(out.get(), _reference(regression, data, "cuda", interactions))
    with pytest.raises(TypeError, match="CuPy.*backend is 'cpu'"):
        explain_dask(regression, X, backend="cpu", client=client)


def test_same_bits_with_one_or_two_workers(regression, data):
    results = []
    for workers in (1, 2):
        with start_cluster(
            n_workers=workers, processes=False, gpus=False, dashboard_address=":0"
        ) as c:
            X = da.from_array(data, chunks=(41, N_FEATURES))
            results.append(explain_dask(regression, X, backend="cpu", client=c).compute())
    np.testing.assert_array_equal(results[0], results[1])
    np.testing.assert_array_equal(results[0], _reference(regression, data, "cpu", False))


@pytest.mark.parametrize("interactions", [False, True], ids=["shap", "interactions"])
def test_dataframe_equals_in_memory(client, frame_model, interactions):
    """A categorical model: the Dask DataFrame gives the in-memory values, bit for bit."""
    frame, booster, packed = frame_model
    dframe = dd.from_pandas(frame, npartitions=3)
    result = explain_dask(packed, dframe, interactions, "cpu", client=client)
    assert len(result.chunks[0]) == 3 and sum(result.chunks[0]) == len(frame)
    out = result.compute()
    explainer = TreeExplainer(booster, backend="cpu", layout="xgboost")
    in_memory = (
        explainer.shap_interaction_values(frame) if interactions else explainer.shap_values(frame)
    )
    np.testing.assert_array_equal(out[:, 0], in_memory)
    np.testing.assert_array_equal(
        out, _reference(packed, prepare_rows(frame, packed), "cpu", interactions)
    )
    # the conversion is the one XGBoost applies to the same frame
    dmatrix = xgb.DMatrix(frame, enable_categorical=True)
    if interactions:
        theirs = booster.predict(dmatrix, pred_interactions=True)
    else:
        theirs = booster.predict(dmatrix, pred_contribs=True)
    np.testing.assert_allclose(out[:, 0], theirs, rtol=1e-4, atol=1e-4)


def test_dataframe_columns_reordered_by_name(client, frame_model):
    frame, _, packed = frame_model
    names = tuple(str(c) for c in frame.columns)
    assert packed.feature_names == names  # XGBoost kept the frame's column names
    expected = _reference(packed, prepare_rows(frame, packed), "cpu", False)
    shuffled = dd.from_pandas(frame[["flag", "count", "a", "colour"]], npartitions=2)
    out = explain_dask(packed, shuffled, backend="cpu", client=client).compute()
    np.testing.assert_array_equal(out, expected)
    # an extra column (a label) is ignored, as for pandas input
    labelled = dd.from_pandas(frame.assign(label=1.0)[["label", *names[::-1]]], npartitions=2)
    out = explain_dask(packed, labelled, backend="cpu", client=client).compute()
    np.testing.assert_array_equal(out, expected)
    renamed = dd.from_pandas(frame.rename(columns={names[0]: "other"}), npartitions=2)
    with pytest.raises(ValueError, match="lacks the model's feature column"):
        explain_dask(packed, renamed, backend="cpu", client=client)


def test_dataframe_category_on_numeric_feature_refused_like_pandas(client, monkeypatch):
    """A category column on a feature the model splits numerically: the in-memory error, early."""
    rng = np.random.default_rng(5)
    frame = pd.DataFrame({"a": rng.normal(size=200), "b": rng.integers(0, 4, 200).astype(float)})
    booster = xgb.train(
        {"max_depth": 3}, xgb.DMatrix(frame, label=frame["a"] + 2 * frame["b"]), num_boost_round=4
    )
    explainer = TreeExplainer(booster, backend="cpu", client=client, layout="xgboost")
    # the numeric frame gives the in-memory values
    out = explain_dask(explainer.packed, dd.from_pandas(frame, npartitions=2), client=client)
    np.testing.assert_array_equal(out.compute()[:, 0], explainer.shap_values(frame))

    coded = frame.assign(b=frame["b"].astype("category"))
    with pytest.raises(TypeError, match="'b' is a category column") as in_memory:
        explainer.shap_values(coded)
    with pytest.raises(ValueError):  # XGBoost refuses it too
        booster.predict(xgb.DMatrix(coded, enable_categorical=True))
    ran = []
    monkeypatch.setattr(client, "compute", lambda *args, **kwargs: ran.append(args))
    dcoded = dd.from_pandas(coded, npartitions=2)
    for call in (
        lambda: explain_dask(explainer.packed, dcoded, client=client),
        lambda: explainer.shap_values(dcoded),
    ):
        with pytest.raises(TypeError) as on_dask:
            call()
        assert str(on_dask.value) == str(in_memory.value)
    assert ran == []  # refused before anything ran on the cluster


def test_float64_model_rows_never_rounded_to_float32(client):
    """HistGradientBoosting compares float64 inputs: Dask rows reach the encoding unrounded."""
    pytest.importorskip("sklearn")
    from sklearn.datasets import load_diabetes
    from sklearn.ensemble import HistGradientBoostingRegressor

    X, y = load_diabetes(return_X_y=True, as_frame=True)
    model = HistGradientBoostingRegressor(max_iter=50, random_state=0).fit(X, y)
    explainer = TreeExplainer(model, backend="cpu", client=client, layout="xgboost")
    assert explainer.packed.encoding.float64
    expected = explainer.shap_values(X)  # additivity-checked against the model
    values = X.to_numpy()
    for rows in (da.from_array(values, chunks=(100, 3)), dd.from_pandas(X, npartitions=4)):
        out = explain_dask(explainer.packed, rows, backend="cpu", client=client).compute()
        np.testing.assert_array_equal(out[:, 0], expected)
    # a float32 copy of the same rows takes other branches: a cast would have been seen
    rounded = da.from_array(values.astype(np.float32).astype(np.float64), chunks=(100, -1))
    out = explain_dask(explainer.packed, rounded, backend="cpu", client=client).compute()
    assert (out[:, 0] != expected).any(axis=1).sum() > 0


def test_models_differing_only_in_names_or_categories_do_not_share_a_worker_copy(client):
    """Workers reuse the model of a digest: feature names and categories must be part of it.

    Two models with the same trees but other feature names read other columns of a frame; a
    shared digest made the second explain the frame with the first's column order, silently.
    """
    rng = np.random.default_rng(11)
    frame = pd.DataFrame(rng.normal(size=(200, 3)), columns=["a", "b", "c"])
    booster = xgb.train({"max_depth": 3}, xgb.DMatrix(frame, label=frame["a"] - 2 * frame["c"]), 4)
    first = TreeExplainer(booster, backend="cpu", layout="xgboost")
    swapped = TreeExplainer(
        replace(first.ensemble, feature_names=("c", "b", "a")), backend="cpu", layout="xgboost"
    )
    assert swapped.packed.digest != first.packed.digest
    categories = {1: ["x", "y"]}
    coded = [
        build_packed_model(extract_paths(first.ensemble), feature_categories=c).digest
        for c in (categories, {1: ["y", "x"]}, {1: np.array([0.0, 1.0])}, None)
    ]
    assert len(set(coded)) == 4
    rows = dd.from_pandas(frame, npartitions=2)
    for explainer in (first, swapped):  # the first's model is on the workers when swapped runs
        out = explain_dask(explainer.packed, rows, backend="cpu", client=client).compute()
        np.testing.assert_array_equal(out[:, 0], explainer.shap_values(frame))


def test_frame_to_matrix_conversion():
    """The partition conversion (frames.frame_to_matrix; belongs with the inputs tests)."""
    frame = pd.DataFrame(
        {
            "cat": pd.Categorical(["b", None, "a"], categories=["a", "b"]),
            "nullable": pd.array([1, pd.NA, 3], dtype="Int64"),
            "flag": [True, False, True],
            "x": np.array([0.5, np.nan, -2.0]),
        }
    )
    for dtype in (np.float32, np.float64):
        out = frame_to_matrix(frame, dtype=dtype)
        assert out.dtype == dtype and out.flags.c_contiguous and out.shape == (3, 4)
        np.testing.assert_array_equal(out[:, 0], [1.0, np.nan, 0.0])
        np.testing.assert_array_equal(out[:, 1], [1.0, np.nan, 3.0])
        np.testing.assert_array_equal(out[:, 2], [1.0, 0.0, 1.0])
        np.testing.assert_array_equal(out[:, 3], [0.5, np.nan, -2.0])
    with pytest.raises(TypeError, match="'name'.*category"):
        frame_to_matrix(pd.DataFrame({"name": ["x", "y"]}))


def test_lazy_and_model_sent_once(client, regression, data, monkeypatch):
    clear_model_cache(client)
    submitted = []
    real_submit = client.submit

    def counting_submit(fn, *args, **kwargs):
        submitted.append(fn)
        return real_submit(fn, *args, **kwargs)

    kernel_blocks = []
    real_get_backend = kernels.get_backend

    def counting_get_backend(name):
        kernel_blocks.append(name)
        return real_get_backend(name)

    monkeypatch.setattr(client, "submit", counting_submit)
    monkeypatch.setattr(kernels, "get_backend", counting_get_backend)
    X = da.from_array(data, chunks=(100, N_FEATURES))
    first = explain_dask(regression, X, backend="cpu", client=client)
    second = explain_dask(regression, X, backend="cpu", client=client)
    third = explain_dask(regression, X, interactions=True, backend="cpu", client=client)
    assert kernel_blocks == []  # lazy: nothing ran yet
    assert submitted == [shipping._unpickle_model]  # the model, once
    assert len({first.name, second.name, third.name}) == 3  # no reuse of a persisted result
    expected = first.compute()
    np.testing.assert_array_equal(expected, second.compute())
    assert len(kernel_blocks) == 2 * X.numblocks[0]  # the second compute ran the kernels again
    third.compute()
    assert submitted == [shipping._unpickle_model]
    future = model_future(client, regression)
    assert future.status == "finished"
    assert shipping._MODEL_FUTURES[client] == {regression.digest: future}
    # a task the scheduler can run again (scattered data has nothing to rerun)
    key = future.key
    assert client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.tasks[key].run_spec)
    # a cancelled model is replaced, not reused
    client.cancel(future)
    replaced = model_future(client, regression)
    assert replaced.key != key and replaced.result().digest == regression.digest
    again = explain_dask(regression, X, backend="cpu", client=client).compute()
    np.testing.assert_array_equal(again, expected)


def test_warm_up_runs_on_every_worker(client, regression):
    seconds = warm_up(client, regression, backend="cpu", interactions=True)
    assert sorted(seconds) == sorted(client.ncores())
    assert all(s >= 0 for s in seconds.values())


def test_bad_inputs(client, regression, data):
    with pytest.raises(ValueError, match=r"4 columns.*5 features"):
        explain_dask(regression, da.from_array(data[:, :4]), client=client)
    with pytest.raises(ValueError, match="1 dimension"):
        explain_dask(regression, da.from_array(data[:, 0]), client=client)
    with pytest.raises(TypeError, match="MaskedArray"):
        explain_dask(regression, da.ma.masked_invalid(da.from_array(data)), client=client)
    with pytest.raises(TypeError, match="dask.array.Array"):
        explain_dask(regression, data, client=client)
    with pytest.raises(ValueError, match="backend"):
        explain_dask(regression, da.from_array(data), backend="tpu", client=client)
    frame = dd.from_pandas(pd.DataFrame(data[:, :3], columns=list("abc")), npartitions=2)
    with pytest.raises(ValueError, match=r"3 features.*expects 5"):
        explain_dask(regression, frame, client=client)
    with pytest.raises(ValueError, match="1-D"):
        explain_dask(regression, frame["a"], client=client)
    with pytest.raises(TypeError, match="numeric"):
        explain_dask(regression, da.from_array(np.full((4, N_FEATURES), "x")), client=client)
    coded = pd.DataFrame(data[:20], columns=list("abcde")).assign(c=lambda f: f["c"] > 0)
    unknown = dd.from_pandas(coded.astype({"c": "category"}), npartitions=2)
    unknown["c"] = unknown["c"].cat.as_unknown()
    with pytest.raises(ValueError, match=r"'c' has unknown categories.*categorize"):
        explain_dask(regression, unknown, client=client)


def test_start_cluster_arguments(monkeypatch):
    with pytest.raises(ClusterError, match="n_workers=0"):
        start_cluster(n_workers=0, gpus=False)
    with pytest.raises(ClusterError, match="dask cuda worker"):
        start_cluster("tcp://127.0.0.1:1", n_workers=2)
    from distshap.cluster import local

    monkeypatch.setattr(local, "count_gpus", lambda: 2)  # more workers than GPUs: refused
    for gpus, n_workers in (([0, 1], 3), (1, 2), ("0", 2)):
        with pytest.raises(ClusterError, match=f"n_workers={n_workers} but gpus="):
            start_cluster(gpus=gpus, n_workers=n_workers)
    started = []  # fewer: the first n_workers GPUs
    monkeypatch.setattr(local, "_check_kwargs", lambda kwargs, cls: None)
    monkeypatch.setattr(local, "_import_dask_cuda", lambda: lambda **kw: started.append(kw))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    for gpus in (2, True, None, [0, 1]):
        local._gpu_cluster(gpus, 1, 1, {})
    assert [kw.get("CUDA_VISIBLE_DEVICES") for kw in started] == ["0"] * 4


def test_client_closes_its_cluster():
    c = start_cluster(n_workers=1, processes=False, gpus=False, dashboard_address=":0")
    cluster = c.cluster
    assert len(c.ncores()) == 1
    c.close()
    assert cluster.status.name == "closed"


def test_count_gpus_respects_visible_devices(monkeypatch):
    from distshap.cluster import local

    monkeypatch.setattr(local, "_physical_gpu_count", lambda: 4)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,3")
    assert local.count_gpus() == 2
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert local.count_gpus() == 0
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,-1,2")
    assert local.count_gpus() == 1
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert local.count_gpus() == 4
    monkeypatch.setattr(local, "_physical_gpu_count", lambda: 0)
    with pytest.raises(ClusterError, match="gpus=False"):
        start_cluster(gpus=True)


def test_unknown_row_chunks_are_counted(client, regression, data, monkeypatch):
    """An array of unknown chunk sizes (frame.to_dask_array()) gets known output chunks."""
    unknown = dd.from_pandas(pd.DataFrame(data), npartitions=3).to_dask_array()
    assert np.isnan(unknown.shape[0])
    width = regression.num_features + 1
    # small output chunks force the interaction split, which needs the row counts
    monkeypatch.setattr(dx, "MAX_OUTPUT_CHUNK_BYTES", 90 * regression.num_groups * width**2 * 4)
    out = explain_dask(regression, unknown, interactions=True, backend="cpu", client=client)
    assert out.shape[0] == len(data) and max(out.chunks[0]) == 90
    np.testing.assert_array_equal(out.compute(), _reference(regression, data, "cpu", True))


def test_interaction_output_chunks_are_bounded(client, regression, data, monkeypatch):
    import distshap.cluster.dask_explain as dx

    packed = regression
    X = da.from_array(data, chunks=(len(data), -1))
    width = packed.num_features + 1
    monkeypatch.setattr(dx, "MAX_OUTPUT_CHUNK_BYTES", 7 * packed.num_groups * width * width * 4)
    out = explain_dask(packed, X, interactions=True, backend="cpu", client=client)
    assert max(out.chunks[0]) == 7 and sum(out.chunks[0]) == len(data)
    np.testing.assert_array_equal(out.compute(), _reference(packed, data, "cpu", True))


# --------------------------------------------------------------------------------------------
# Uneven placement: persisted chunks that sit on one worker still spread over all of them
# --------------------------------------------------------------------------------------------


def _shares(pieces, sizes):
    """Rows per worker of a balance_plan, after checking it covers every row once, in order."""
    seen = []
    for chunk, start, stop, _ in pieces:
        seen.extend((chunk, r) for r in range(start, stop))
    assert seen == [(c, r) for c, n in enumerate(sizes) for r in range(n)]
    shares: dict = {}
    for _, start, stop, worker in pieces:
        shares[worker] = shares.get(worker, 0) + stop - start
    return shares


@pytest.mark.parametrize(
    "sizes, holders",
    [
        ([150] * 8, ["a"] * 5 + ["b"] * 3),  # 5/3: one chunk moves, whole
        ([150] * 8, ["a"] * 7 + ["b"]),  # 7/1: three chunks move
        ([100, 250, 7, 0, 300, 99], ["b", "b", "b", "b", "b", "a"]),  # ragged, an empty chunk
        ([90] * 6, ["a", "b", "c", "a", "a", "a"]),  # three workers
    ],
)
def test_balance_plan_gives_equal_shares_moving_least(sizes, holders):
    workers = sorted(set(holders) | {"a", "b"})
    pieces = graph.balance_plan(sizes, [[h] for h in holders], workers, min_piece=1)
    shares = _shares(pieces, sizes)
    assert max(shares.values()) - min(shares.values()) <= 1
    assert sum(shares.values()) == sum(sizes)
    moved = sum(b - a for c, a, b, w in pieces if w != holders[c])
    held = {w: sum(n for n, h in zip(sizes, holders, strict=True) if h == w) for w in workers}
    assert moved == sum(max(0, held[w] - shares[w]) for w in workers)  # only the surplus moves


def test_balance_plan_keeps_small_surplus_and_uses_replicas():
    # a surplus under min_piece stays: no task for a handful of rows
    pieces = graph.balance_plan([100, 104], [["a"], ["a"]], ["a", "b"], min_piece=10)
    assert _shares(pieces, [100, 104]) == {"a": 102, "b": 102}
    pieces = graph.balance_plan([100, 104], [["a"], ["b"]], ["a", "b"], min_piece=10)
    assert pieces == [(0, 0, 100, "a"), (1, 0, 104, "b")]
    # a chunk held by both counts for the worker with room: nothing moves
    pieces = graph.balance_plan(
        [50, 50, 50, 50], [["a"], ["a"], ["a", "b"], ["a", "b"]], ["a", "b"]
    )
    assert [w for *_, w in pieces] == ["a", "a", "b", "b"]
    with pytest.raises(ValueError, match="at least one worker"):
        graph.balance_plan([1], [["a"]], [])


def _kernel_tasks(task_stream) -> dict:
    """Worker -> rows explained there, from the kernel tasks of a task stream."""
    rows: dict = {}
    for event in task_stream.data:
        key = event["key"]
        if isinstance(key, tuple) and str(key[0]).startswith("distshap-"):
            name = str(key[0])
            if "shap" in name or "interactions" in name or "pair" in name:
                rows[event["worker"]] = rows.get(event["worker"], 0) + 1
    return rows


@pytest.mark.parametrize("interactions", [False, True], ids=["shap", "interactions"])
def test_uneven_placement_spreads_rows_and_keeps_bits(client, regression, data, interactions):
    """Six chunks all on one worker: half the rows run on the other one, same bits, same chunks."""
    from distributed import get_task_stream, wait

    workers = sorted(client.ncores())
    X = client.persist(da.from_array(data, chunks=(100, N_FEATURES)), workers=workers[:1])
    wait(X)
    assert {w for ws in client.who_has(X).values() for w in ws} == {workers[0]}
    calls = []
    real = kernels.get_backend

    def spy(name):
        calls.append(name)
        return real(name)

    kernels.get_backend = spy
    try:
        result = explain_dask(regression, X, interactions, "cpu", client=client)
        assert calls == []  # still lazy: rows may move now, kernels run on compute only
    finally:
        kernels.get_backend = real
    assert result.chunks[0] == X.chunks[0]  # pieces merged back
    with get_task_stream(client) as stream:
        out = result.compute()
    np.testing.assert_array_equal(out, _reference(regression, data, "cpu", interactions))
    per_worker = _kernel_tasks(stream)
    assert sorted(per_worker) == workers and set(per_worker.values()) == {3}, per_worker
    model_key = model_future(client, regression).key  # one model copy held on each worker
    assert sorted(w for k, w in shipping._WORKER_COPIES[client] if k == model_key) == workers
    # the same without balancing: still the same bits
    unbalanced = explain_dask(regression, X, interactions, "cpu", client=client, balance=False)
    np.testing.assert_array_equal(unbalanced.compute(), out)


def test_uneven_placement_splits_chunks_and_aligns_labels(client):
    """5 chunks on one worker, 2 on the other: a chunk is cut in two; log-loss labels follow."""
    from distributed import get_task_stream, wait

    from distshap.dispatch import explain_rows
    from distshap.interventional import build_background

    rng = np.random.default_rng(5)
    X = rng.normal(size=(350, 4)).astype(np.float32)
    y = (X[:, 0] + X[:, 1] > 0).astype(np.float64)
    booster = xgb.train(
        {"max_depth": 3, "objective": "binary:logistic"}, xgb.DMatrix(X, label=y), 5
    )
    packed = _packed(booster)
    background = build_background(packed, X[:20])
    workers = sorted(client.ncores())
    parts = [
        client.persist(da.from_array(X[i * 50 : (i + 1) * 50]), workers=[workers[i >= 5]])
        for i in range(7)
    ]
    Xd = client.persist(da.concatenate(parts))
    wait(Xd)
    labels = da.from_array(y, chunks=60)  # chunked otherwise than X
    expected = explain_rows(packed, X, False, "cpu", background=background,
                            model_output="log_loss", y=y)  # fmt: skip
    with get_task_stream(client) as stream:
        result = explain_dask(packed, Xd, False, "cpu", client=client, background=background,
                              model_output="log_loss", y=labels)  # fmt: skip
        out = result.compute()
    assert result.chunks[0] == (50,) * 7
    np.testing.assert_array_equal(out, expected)
    per_worker = _kernel_tasks(stream)
    assert sorted(per_worker) == workers and sum(per_worker.values()) == 8  # one chunk in two


def test_unknown_chunk_sizes_persisted_unevenly(client, regression, data):
    from distributed import get_task_stream, wait

    workers = sorted(client.ncores())
    unknown = dd.from_pandas(pd.DataFrame(data), npartitions=4).to_dask_array()
    unknown = client.persist(unknown, workers=workers[1:])
    wait(unknown)
    with get_task_stream(client) as stream:
        out = explain_dask(regression, unknown, backend="cpu", client=client).compute()
    np.testing.assert_array_equal(out, _reference(regression, data, "cpu", False))
    assert sorted(_kernel_tasks(stream)) == workers


def test_pairs_of_uneven_placement_spread_and_keep_bits(client, regression, data):
    from distributed import get_task_stream, wait

    from distshap import pair_interactions as pi
    from distshap.cluster.dask_pairs import interaction_summary_dask, top_interactions_dask

    workers = sorted(client.ncores())
    X = client.persist(da.from_array(data, chunks=(150, N_FEATURES)), workers=workers[:1])
    wait(X)
    pairs, values = pi.top_interactions(regression, data, 3, "cpu")
    summary = pi.interaction_summary(regression, data, backend="cpu")
    with get_task_stream(client) as stream:
        lazy = top_interactions_dask(regression, X, 3, "cpu", client=client)
        got = dask.compute(*lazy)
        lazy_summary = interaction_summary_dask(regression, X, backend="cpu", client=client)
        got_summary = lazy_summary.compute()
    assert lazy[0].chunks[0] == X.chunks[0]
    assert np.array_equal(got[0], pairs) and np.array_equal(got[1], values)
    assert np.array_equal(got_summary, summary)
    per_worker = _kernel_tasks(stream)
    assert sorted(per_worker) == workers and set(per_worker.values()) == {4}, per_worker


def test_uneven_placement_survives_the_loss_of_a_receiving_worker(regression, data, tmp_path):
    """The worker that got moved rows and a model copy dies mid-kernel: the job still finishes.

    Worker processes (the kill ends one); the moved rows and the copy are tasks the scheduler
    reruns elsewhere from the persisted chunks and the model task.
    """
    from distributed import wait
    from test_cluster_worker_loss import _install_killer

    flag = tmp_path / "killed"
    with start_cluster(
        n_workers=2, processes=True, gpus=False, dashboard_address=":0", threads_per_worker=1
    ) as c:
        workers = sorted(c.ncores())
        X = c.persist(da.from_array(data, chunks=(100, N_FEATURES)), workers=workers[:1])
        wait(X)
        result = explain_dask(regression, X, False, "cpu", client=c)
        c.run(_install_killer, str(flag), workers=workers[1:])
        out = compute(result, client=c)
        assert flag.exists(), "no worker was killed"
    np.testing.assert_array_equal(out, _reference(regression, data, "cpu", False))


@pytest.mark.gpu
@pytest.mark.skipif(not kernels.cuda_available(), reason="no CUDA GPU visible")
def test_cupy_chunks_on_one_worker_spread_and_stay_on_device(client, regression, data):
    from distributed import get_task_stream, wait

    cupy = pytest.importorskip("cupy")
    workers = sorted(client.ncores())
    X = client.persist(da.from_array(cupy.asarray(data), chunks=(70, -1)), workers=workers[:1])
    wait(X)
    with get_task_stream(client) as stream:
        result = explain_dask(regression, X, False, "cuda", client=client)
        out = result.compute()
    assert isinstance(out, cupy.ndarray) and result.chunks[0] == X.chunks[0]
    np.testing.assert_array_equal(out.get(), _reference(regression, data, "cuda", False))
    assert sorted(_kernel_tasks(stream)) == workers
