"""Shared fixtures: the kernel backends numeric tests run on, a Dask scheduler, and the
process's signal handlers kept as each test found them."""

from __future__ import annotations

import os
import signal
import sys
import warnings

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


@pytest.fixture(autouse=True)
def signal_handlers_kept(request):
    """A test that leaves another Ctrl-C or SIGTERM handler in this worker process is named
    in a warning and the handler put back: later tests (the CLI's signal tests) see Python's."""
    watched = (signal.SIGINT, signal.SIGTERM)
    before = {sig: signal.getsignal(sig) for sig in watched}
    yield
    for sig in watched:
        after = signal.getsignal(sig)
        if after is not before[sig]:
            warnings.warn(f"{request.node.nodeid} left the {sig.name} handler {after!r}",
                          stacklevel=1)  # fmt: skip
            signal.signal(sig, before[sig])


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
