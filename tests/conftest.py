"""Shared fixtures: the kernel backends numeric tests run on, and a Dask scheduler."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))

from distshap.kernels import cuda_available  # noqa: E402

BACKENDS = [
    "cpu",
    pytest.param(
        "cuda",
        marks=[
            pytest.mark.gpu,
            pytest.mark.skipif(not cuda_available(), reason="no CUDA GPU visible"),
        ],
    ),
]


@pytest.fixture(params=BACKENDS)
def backend(request) -> str:
    """Kernel backend name; CUDA runs only where a GPU is visible (marked ``gpu``)."""
    return request.param


def to_host(a) -> np.ndarray:
    """NumPy view of a NumPy or CuPy array."""
    return a.get() if hasattr(a, "get") else np.asarray(a)


@pytest.fixture(scope="module")
def scheduler():
    """One in-process CPU Dask cluster (one worker) per module; yields its address."""
    from distributed import LocalCluster

    with LocalCluster(
        n_workers=1,
        threads_per_worker=1,
        processes=False,
        protocol="tcp",
        host="127.0.0.1",
        dashboard_address=None,
    ) as cluster:
        yield cluster.scheduler_address
