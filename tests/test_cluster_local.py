"""Local clusters as users start them: fresh worker processes, one thread each, bounded starts.

The cluster cases run in a subprocess, as a user's script does (worker processes spawned from
its ``__main__``), with an empty ``NUMBA_CACHE_DIR``: workers compile on their own, after their
nanny set their environment, and must still apply one Numba thread each and return the
in-process values. Workers that cannot run (a ``memory_limit`` below an idle worker's memory,
a worker that never comes up) make ``start_cluster`` fail within its time, saying why.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import pytest

from distshap.cluster import ClusterError, start_cluster
from distshap.cluster.local import _worker_env

_FRESH_CLUSTER = r"""
import os
import sys
import numpy as np
import dask.array as da
import tiny
import distshap
from distshap import TreeExplainer, parallel


def main():
    ens = tiny.random_ensemble(3, n_features=6, n_trees=20, depth=5)
    X = tiny.random_rows(4, ens, 400, 0.1)
    # the cluster first: its workers compile in the empty cache themselves
    with distshap.start_cluster(n_workers=2, gpus=False, dashboard_address=":0") as client:
        threads = client.run(parallel.num_threads)
        explainer = TreeExplainer(ens, backend="cpu", client=client)
        got = np.asarray(explainer.shap_values(da.from_array(X, chunks=50)).compute())
        threads_after = client.run(parallel.num_threads)
    expected = TreeExplainer(ens, backend="cpu").shap_values(X)
    assert np.array_equal(got, expected), "cluster values differ from in-process values"
    cores = os.cpu_count() or 1
    want = max(1, cores // 2)
    assert set(threads.values()) == {want} == set(threads_after.values()), (threads, want)
    print("OK")


if __name__ == "__main__":
    main()
"""


def _run_script(source: str, tmp_path, timeout: float = 240) -> subprocess.CompletedProcess:
    here = os.path.dirname(os.path.abspath(__file__))
    script = tmp_path / "user_script.py"
    script.write_text(source)
    env = dict(os.environ, NUMBA_CACHE_DIR=tempfile.mkdtemp(dir=tmp_path))
    env.pop("NUMBA_NUM_THREADS", None)
    env.pop("DISTSHAP_NUM_THREADS", None)
    paths = [str(tmp_path), here, os.path.dirname(here), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=timeout
    )


def test_fresh_two_worker_cpu_cluster_explains_rows(tmp_path):
    proc = _run_script(_FRESH_CLUSTER, tmp_path)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-3000:])
    assert proc.stdout.strip().endswith("OK")


_CANNOT_RUN = r"""
import time
import distshap
from distshap.cluster import ClusterError


def refused(**kwargs):
    start = time.monotonic()
    try:
        distshap.start_cluster(n_workers=1, gpus=False, dashboard_address=":0", **kwargs)
    except ClusterError as err:
        print("REFUSED", round(time.monotonic() - start), str(err))
    else:
        print("STARTED")


if __name__ == "__main__":
    refused(memory_limit="30MiB", start_timeout=30)  # the nanny restarts it in a loop
    refused(preload=["slow_start"], start_timeout=5)  # a worker that never comes up
"""


def test_workers_that_cannot_run_are_refused_in_time(tmp_path):
    (tmp_path / "slow_start.py").write_text(
        "import time\n\n\ndef dask_setup(worker):\n    time.sleep(600)\n"
    )
    proc = _run_script(_CANNOT_RUN, tmp_path, timeout=150)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-3000:])
    memory, slow = [line.split(" ", 2) for line in proc.stdout.strip().splitlines()[-2:]]
    assert memory[0] == "REFUSED" and int(memory[1]) < 60, memory
    assert "memory_limit=30 MiB" in memory[2] and "idle worker" in memory[2], memory
    assert slow[0] == "REFUSED" and int(slow[1]) < 40, slow
    assert "0 of 1 worker(s) started within start_timeout=5 s" in slow[2], slow


def test_worker_env_carries_distshap_threads_never_numba_threads():
    assert _worker_env(None, 2, 1)["DISTSHAP_NUM_THREADS"] == str(
        max(1, (os.cpu_count() or 1) // 2)
    )
    env = _worker_env({"NUMBA_NUM_THREADS": 3, "OMP_NUM_THREADS": "3"}, 2, 1)
    assert env == {"DISTSHAP_NUM_THREADS": "3", "OMP_NUM_THREADS": "3"}
    env = _worker_env({"DISTSHAP_NUM_THREADS": "4"}, 2, 1)
    assert env == {"DISTSHAP_NUM_THREADS": "4"}


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"workers": 1}, ["workers=1", "n_workers"]),
        ({"n_workers": 0}, ["n_workers=0", ">= 1"]),
        ({"start_timeout": 0}, ["start_timeout=0"]),
        ({"threads_per_worker": 0}, ["threads_per_worker=0", ">= 1"]),
    ],
)
def test_bad_arguments_are_one_line_errors(kwargs, words):
    with pytest.raises(ClusterError) as info:
        start_cluster(gpus=False, processes=False, dashboard_address=":0", **kwargs)
    message = str(info.value)
    assert "\n" not in message and all(w in message for w in words), message


def test_cpu_workers_share_the_memory_as_a_local_cluster_does():
    """Without a memory_limit each of n CPU workers may use 1/n of the machine's memory (what
    distributed.LocalCluster gives them), not 'auto' per worker."""
    from distributed.system import MEMORY_LIMIT

    with start_cluster(n_workers=2) as client:
        limits = [w["memory_limit"] for w in client.scheduler_info()["workers"].values()]
    assert len(limits) == 2
    assert all(abs(limit - MEMORY_LIMIT / 2) <= 0.01 * MEMORY_LIMIT for limit in limits), limits


@pytest.mark.parametrize(
    ("visible", "wanted", "devices"),
    [("3,5,6", 2, "3,5"), (None, 2, "0,1"), ("GPU-a,GPU-b", 1, "GPU-a"), ("3,5,6", 3, None)],
)
def test_gpu_workers_take_this_process_s_first_visible_devices(
    monkeypatch, visible, wanted, devices
):
    from distshap.cluster import local

    made = {}

    class FakeCluster:
        def __init__(self, **kwargs):
            made.update(kwargs)

    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    monkeypatch.setattr(local, "_physical_gpu_count", lambda: 8)
    monkeypatch.setattr(local, "_import_dask_cuda", lambda: FakeCluster)
    local._gpu_cluster(None, wanted, 1, {})
    assert made.get("CUDA_VISIBLE_DEVICES") == devices
