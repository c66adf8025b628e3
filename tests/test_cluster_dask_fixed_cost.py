"""The fixed cost of a Dask call: tasks a call runs, and the message streams' batching.

Each task of a call is a hand-over by the scheduler to a worker (and back), and every message
stream of a cluster batches for an interval: these tests count tasks and read the intervals,
never times. Array chunks that ``da.from_array`` leaves unsliced (CuPy arrays; here a NumPy
subclass, which dask treats the same way) travel inside the kernels' tasks.
"""

from __future__ import annotations

import threading

import dask.array as da
import numpy as np
import pytest

import distshap.cluster.graph as graph
from distshap import TreeExplainer, kernels
from distshap.cluster import ClusterError, explain_dask, local, start_cluster
from distshap.cluster.local import _set_interval
from distshap.interventional import build_background

xgb = pytest.importorskip("xgboost")

N_FEATURES = 4


class _Unsliced(np.ndarray):
    """A NumPy array that ``da.from_array`` does not slice at once (as it does not CuPy's)."""


@pytest.fixture(scope="module")
def rows() -> np.ndarray:
    rng = np.random.default_rng(3)
    X = rng.normal(size=(90, N_FEATURES)).astype(np.float32)
    X[rng.random(X.shape) < 0.1] = np.nan
    return X


@pytest.fixture(scope="module")
def packed(rows):
    booster = xgb.train(
        {"max_depth": 3, "eta": 0.5},
        xgb.DMatrix(rows, label=np.nan_to_num(rows[:, 0] - rows[:, 1])),
        num_boost_round=4,
    )
    return TreeExplainer(booster, backend="cpu").packed


@pytest.fixture(scope="module")
def client():
    with start_cluster(
        n_workers=1, processes=False, gpus=False, dashboard_address=":0", batch_interval=0.002
    ) as dask_client:
        yield dask_client


def _unsliced(X: np.ndarray, chunks: tuple, **kwargs) -> da.Array:
    return da.from_array(
        X.view(_Unsliced), chunks=chunks, meta=np.empty((0, X.shape[1]), X.dtype), **kwargs
    )


def _tasks(client, result: da.Array) -> list:
    """Keys of the tasks computing ``result`` ran (after one unmeasured computation)."""
    from distributed import get_task_stream

    result.compute()
    with get_task_stream(client) as stream:
        result.compute()
    return [event["key"] for event in stream.data]


def _key_name(key) -> str:
    return key[0] if isinstance(key, tuple) else key


@pytest.mark.parametrize("inline", [False, True])
def test_unsliced_chunk_is_one_task(client, packed, rows, inline):
    """One chunk: the kernel and Dask's final gathering task, no task holding or slicing X."""
    dX = _unsliced(rows, (-1, -1), inline_array=inline)
    assert len(dX.dask) == (1 if inline else 2)  # dask's graph: the array (if apart), a slice
    keys = _tasks(client, explain_dask(packed, dX, backend="cpu", client=client))
    assert len(keys) == 2, keys
    assert not any(_key_name(k).startswith(("array-", "original-")) for k in keys), keys


def test_unsliced_chunks_same_bits(client, packed, rows):
    dX = _unsliced(rows, ((7, 50, 33), -1))
    out = explain_dask(packed, dX, backend="cpu", client=client)
    keys = _tasks(client, out)
    assert len(keys) == 3 + 1, keys  # a kernel task a chunk, and the final one
    expected = kernels.get_backend("cpu").shap_values(packed, rows)
    np.testing.assert_array_equal(out.compute(), expected)
    numpy_chunks = explain_dask(packed, da.from_array(rows, chunks=(40, -1)), client=client)
    np.testing.assert_array_equal(numpy_chunks.compute(), expected)


def test_in_memory_labels_travel_in_kernel_tasks(client, rows):
    """``model_output="log_loss"``: in-memory labels add no task; the values are those of
    labels given as a Dask array (read from their own chunks' tasks)."""
    y = (np.nan_to_num(rows[:, 0]) > 0).astype(np.float32)
    booster = xgb.train(
        {"max_depth": 2, "objective": "binary:logistic"}, xgb.DMatrix(rows, label=y), 3
    )
    packed = TreeExplainer(booster, backend="cpu").packed
    ask = {"backend": "cpu", "client": client, "model_output": "log_loss",
           "background": build_background(packed, np.nan_to_num(rows[:10]))}  # fmt: skip
    one_chunk = explain_dask(packed, da.from_array(rows, chunks=(-1, -1)), y=y, **ask)
    assert len(_tasks(client, one_chunk)) == 2
    chunked = explain_dask(packed, da.from_array(rows, chunks=(40, -1)), y=y, **ask)
    assert len(_tasks(client, chunked)) == 3 + 1
    lazy_y = explain_dask(
        packed, da.from_array(rows, chunks=(40, -1)), y=da.from_array(y, chunks=30), **ask
    )
    np.testing.assert_array_equal(one_chunk.compute(), lazy_y.compute())
    np.testing.assert_array_equal(chunked.compute(), lazy_y.compute())


def test_only_in_memory_slices_are_taken_here(rows):
    """Chunks of a computation, of a locked getter or of an array-like stay the workers'."""
    dX = _unsliced(rows, (30, -1))
    sliced = graph._sliced_chunks(dX)
    assert sorted(sliced) == [(dX.name, i, 0) for i in range(3)]
    np.testing.assert_array_equal(sliced[(dX.name, 1, 0)], rows[30:60])
    called = threading.Event()

    def block(b):
        called.set()
        return b

    class ArrayLike:  # e.g. an on-disk dataset: reading it is the workers' job
        shape, dtype, ndim = rows.shape, rows.dtype, 2

        def __getitem__(self, index):
            called.set()
            return rows[index]

    others = [
        _unsliced(rows, (30, -1)).map_blocks(block, meta=np.empty((0, N_FEATURES))),
        _unsliced(rows, (30, -1), lock=True),
        da.from_array(ArrayLike(), chunks=(30, -1), meta=np.empty((0, N_FEATURES))),
    ]
    called.clear()  # dask may have read a little to make the arrays
    for other in others:
        assert graph._sliced_chunks(other) == {}
    assert not called.is_set()


def _intervals(client) -> tuple:
    """(client to scheduler, scheduler to workers and clients, workers to scheduler)."""

    def on_scheduler(dask_scheduler):
        streams = [*dask_scheduler.stream_comms.values(), *dask_scheduler.client_comms.values()]
        return sorted({stream.interval for stream in streams})

    workers = client.run(lambda dask_worker: dask_worker.batched_stream.interval)
    return (
        client.scheduler_comm.interval,
        client.run_on_scheduler(on_scheduler),
        sorted(set(workers.values())),
    )


def test_streams_batch_for_the_interval_asked(client):
    assert _intervals(client) == (0.002, [0.002], [0.002])
    client._owned_cluster.scale(2)  # a worker joining later (e.g. after a loss) too
    client.wait_for_workers(2, timeout=60)
    assert _intervals(client) == (0.002, [0.002], [0.002])
    assert len(client.scheduler_info()["workers"]) == 2


def test_refused_plugins_warn_and_leave_the_cluster_working(client, monkeypatch):
    def refuse(plugin, name=None):
        raise ValueError("plugins are off here")

    monkeypatch.setattr(client, "register_plugin", refuse)
    with pytest.warns(RuntimeWarning, match="plugins are off here"):
        local._prompt_streams(client, 0.002)
    assert client.submit(sum, [1, 2]).result() == 3


def test_streams_keep_distributed_intervals_on_none():
    with start_cluster(
        n_workers=1, processes=False, gpus=False, dashboard_address=":0", batch_interval=None
    ) as dask_client:
        client_side, scheduler_side, worker_side = _intervals(dask_client)
    assert client_side == 0.01 and scheduler_side == [0.002, 0.005] and worker_side == [0.002]


def test_batch_interval_checked_before_start():
    for bad in (-0.001, 5, "1ms", True):
        with pytest.raises(ClusterError, match="batch_interval="):
            start_cluster(gpus=False, processes=False, batch_interval=bad)
    assert not _set_interval(object(), 0.0)
