"""A worker that dies mid-compute loses no job: the model and the lost chunks are recomputed.

CPU ``LocalCluster`` with worker processes. The kill is deterministic: a function run on the
workers (``client.run``) wraps ``distshap.kernels.get_backend`` there, so the first kernel call
to create a flag file ends its worker process with ``os._exit``; every later call, and the
worker a nanny restarts, runs normally. The model's worker dies before any other worker got a
copy, so the job can only finish if the scheduler reruns the model task (a scattered model
failed here with "FutureCancelledError ... already forgotten").
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import cloudpickle
import dask.array as da
import numpy as np
import pytest
from distributed import wait

from distshap import TreeExplainer, kernels
from distshap.cluster import compute, explain_dask, model_future, start_cluster, warm_up
from distshap.inputs import prepare_rows

xgb = pytest.importorskip("xgboost")

# the functions below run on the workers, which cannot import this test module
cloudpickle.register_pickle_by_value(sys.modules[__name__])

N_FEATURES = 4


@pytest.fixture(scope="module")
def model_and_rows():
    rng = np.random.default_rng(11)
    X = rng.normal(size=(400, N_FEATURES)).astype(np.float32)
    X[rng.random(X.shape) < 0.05] = np.nan
    y = np.nan_to_num(X[:, 0]) * np.nan_to_num(X[:, 1]) + (np.nan_to_num(X[:, 2]) > 0)
    booster = xgb.train({"max_depth": 4, "eta": 0.3}, xgb.DMatrix(X, label=y), num_boost_round=8)
    return TreeExplainer(booster, backend="cpu").packed, X


def _install_killer(flag: str) -> None:
    """On a worker: the first kernel lookup that creates ``flag`` ends this process."""
    from distshap import kernels as worker_kernels

    real = worker_kernels.get_backend

    def get_backend_or_die(name: str):
        try:
            os.close(os.open(flag, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return real(name)
        os._exit(1)  # the worker process dies mid-task, holding the model

    worker_kernels.get_backend = get_backend_or_die


def _times_computed(client, key: str) -> int:
    """How often the scheduler saw ``key`` finish computing (its transitions to memory)."""

    def count(dask_scheduler, key=key) -> int:
        story = dask_scheduler.story(key)
        return sum(1 for event in story if event[1] == "processing" and event[2] == "memory")

    return client.run_on_scheduler(count)


def _expected(packed, X, interactions):
    """The in-memory values of the same rows."""
    cpu = kernels.get_backend("cpu")
    return (cpu.interaction_values if interactions else cpu.shap_values)(
        packed, prepare_rows(X, packed)
    )


def _cluster(workers: int):
    return start_cluster(
        n_workers=workers, processes=True, gpus=False, dashboard_address=":0", threads_per_worker=1
    )


def test_only_worker_dies_nanny_restarts_it(model_and_rows, tmp_path: Path):
    """One worker: it dies with the only model copy; the restarted worker finishes the job."""
    packed, X = model_and_rows
    flag = tmp_path / "killed"
    with _cluster(1) as client:
        model = model_future(client, packed)
        wait(model)
        client.run(_install_killer, str(flag))
        result = explain_dask(packed, da.from_array(X, chunks=(50, -1)), False, "cpu", client)
        out = compute(result, client=client)
        assert flag.exists(), "no worker was killed"
        assert _times_computed(client, model.key) == 2  # the model task ran again
    np.testing.assert_array_equal(out, _expected(packed, X, False))


def test_warm_up_finishes_when_its_worker_dies_and_comes_back(model_and_rows, tmp_path: Path):
    """The warm-up block's worker dies; its nanny restarts it under another address, where the
    block runs (a block pinned to the old address would wait for ever)."""
    packed, _ = model_and_rows
    flag = tmp_path / "killed"
    with _cluster(1) as client:
        client.run(_install_killer, str(flag))
        before = set(client.ncores())
        got: dict = {}
        warming = threading.Thread(  # a hang fails the test instead of holding it
            target=lambda: got.update(warm_up(client, packed, backend="cpu")), daemon=True
        )
        warming.start()
        warming.join(120)
        assert not warming.is_alive(), "warm_up still waits for the worker that died"
        seconds = got
        assert flag.exists(), "no worker was killed"
        assert set(seconds) and not set(seconds) & before  # run by the restarted worker


def test_model_worker_dies_survivor_finishes(model_and_rows, tmp_path: Path):
    """Two workers: the model's worker dies first; the other recomputes the model and the chunks."""
    packed, X = model_and_rows
    flag = tmp_path / "killed"
    with _cluster(2) as client:
        model = model_future(client, packed)
        wait(model)
        (holder,) = client.who_has(model)[model.key]
        client.run(_install_killer, str(flag), workers=[holder])
        result = explain_dask(packed, da.from_array(X, chunks=(50, -1)), True, "cpu", client)
        # every chunk prefers the model's worker, so the survivor has no model copy when it dies
        persisted = client.persist(result, workers=[holder], allow_other_workers=True)
        wait(persisted)
        out = client.compute(persisted).result()
        assert flag.exists(), "no worker was killed"
        assert _times_computed(client, model.key) == 2  # the model task ran again
        assert holder not in client.who_has(model)[model.key]
    np.testing.assert_array_equal(out, _expected(packed, X, True))


@pytest.mark.gpu
@pytest.mark.skipif(not kernels.cuda_available(), reason="no CUDA GPU visible")
def test_gpu_worker_dies_restarted(model_and_rows, tmp_path: Path):
    """A GPU worker (dask-cuda) dies with the model on its device; its restart finishes."""
    pytest.importorskip("dask_cuda")
    packed, X = model_and_rows
    flag = tmp_path / "killed"
    with start_cluster(n_workers=1, gpus=True, dashboard_address=":0") as client:
        model = model_future(client, packed)
        wait(model)
        client.run(_install_killer, str(flag))
        result = explain_dask(packed, da.from_array(X, chunks=(50, -1)), True, "cuda", client)
        out = compute(result, client=client)
        assert flag.exists(), "no worker was killed"
        assert _times_computed(client, model.key) == 2
    expected = kernels.get_backend("cuda").interaction_values(packed, prepare_rows(X, packed))
    np.testing.assert_array_equal(out, expected.get())
