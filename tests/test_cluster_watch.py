"""Bounded waits: a job with no worker to run it, or one that kills its workers, fails saying
why (distshap.cluster.watch), through the same compute path the explainer's Dask results take."""

from __future__ import annotations

import os
import time

import dask
import dask.array as da
import numpy as np
import pytest

distributed = pytest.importorskip("distributed")

import distshap.cluster  # noqa: E402
from distshap.cluster import watch  # noqa: E402
from distshap.cluster.dask_explain import compute  # noqa: E402


def test_a_job_on_a_cluster_without_workers_fails_after_the_timeout(monkeypatch):
    monkeypatch.setenv("DISTSHAP_NO_WORKER_TIMEOUT", "2")
    with (
        distributed.LocalCluster(n_workers=0, processes=False, dashboard_address=None) as cluster,
        distributed.Client(cluster) as client,
    ):
        start = time.monotonic()
        with pytest.raises(distshap.cluster.ClusterError, match="no worker has been connected"):
            compute(da.ones((10, 3), chunks=5) * 2, client)  # the package's one ClusterError
        assert time.monotonic() - start < 30


def test_one_cluster_error_a_request_error_is_also_a_value_error():
    from distshap.cluster.local import ClusterRequestError

    assert watch.ClusterError is distshap.cluster.ClusterError
    assert issubclass(ClusterRequestError, distshap.cluster.ClusterError)
    assert issubclass(ClusterRequestError, ValueError)
    assert not issubclass(watch.ClusterError, ValueError)  # a job's failure: not bad input


def _die(block):
    os._exit(3)


def test_a_task_that_kills_its_worker_says_what_to_change():
    with (
        dask.config.set({"distributed.scheduler.allowed-failures": 0}),
        distributed.LocalCluster(
            n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        with pytest.raises(watch.ClusterError, match="killed the worker running it.*memory"):
            blocks = da.ones((4, 2), chunks=2).map_blocks(_die, meta=np.empty((0, 0)))
            compute(blocks, client)


@pytest.mark.parametrize("value", ["0", "-1", "soon"])
def test_a_bad_timeout_setting_is_refused_naming_it(monkeypatch, value):
    monkeypatch.setenv("DISTSHAP_NO_WORKER_TIMEOUT", value)
    with pytest.raises(ValueError, match="DISTSHAP_NO_WORKER_TIMEOUT"):
        watch.no_worker_timeout()
