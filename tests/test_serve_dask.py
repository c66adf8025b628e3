"""The explanation server on a CPU Dask cluster (two worker processes), each model resident on
every worker: bits equal to TreeExplainer in-process across concurrent clients and blocks
split over the workers, a worker killed under load, and no worker left (503 at once)."""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from distshap import TreeExplainer
from distshap.cluster import start_cluster
from distshap.serve import ExplanationServer, ServeOptions
from distshap.serve.backends import DaskExecutor
from distshap.serve.registry import Registry, parse_model_spec

pytest.importorskip("xgboost")
from xgb_models import build_multiclass  # noqa: E402


def _call(url, model, rows):
    body = json.dumps({"inputs": [{"name": "rows", "shape": list(rows.shape), "datatype": "FP32",
                                   "data": rows.ravel().tolist()}]}).encode()  # fmt: skip
    req = urllib.request.Request(f"{url}/v2/models/{model}/infer", data=body)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            out = json.loads(r.read())["outputs"][0]
            return 200, np.array(out["data"], np.float32).reshape(out["shape"])
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())["error"]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("serve_dask") / "mc.json")
    booster, X = build_multiclass()
    booster.save_model(path)
    X = np.asarray(X, dtype=np.float32)
    ref = TreeExplainer(path, layout="xgboost").shap_values(X)
    client = start_cluster(gpus=False, n_workers=2, threads_per_worker=1,
                           dashboard_address=None)  # fmt: skip
    registry = Registry.from_specs([parse_model_spec(f"mc={path}")])
    executor = DaskExecutor(client, block_rows=40)
    for model in registry.models.values():
        executor.preload(model.resident)
    opts = ServeOptions(port=0, max_batch_rows=128, max_wait=0.005)
    server = ExplanationServer(registry, executor, opts).start()
    yield server, client, X, ref
    server.drain()
    client.close()


def _load(server, X, ref, jobs, threads=8):
    def run(i):
        n = (1, 9, 40, 90)[i % 4]
        start = (i * 37) % (len(X) - n)
        status, values = _call(server.url, "mc", X[start : start + n])
        if status != 200:
            return f"{status}: {values}"
        return values.tobytes() == ref[start : start + n].tobytes() or "other bits"

    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(run, range(jobs)))


def test_bits_across_clients_and_workers(setup):
    server, client, X, ref = setup
    assert set(_load(server, X, ref, 40)) == {True}
    status, values = _call(server.url, "mc", X)  # 300 rows: blocks on both workers
    assert status == 200 and values.tobytes() == ref.tobytes()


def test_worker_killed_under_load(setup):
    """Requests keep coming from before the kill until the scheduler has dropped the worker
    and a little after: every one is answered with the in-process bits."""
    server, client, X, ref = setup
    victim = sorted(client.nthreads())[0]
    gone = threading.Event()

    def load():
        results, after = [], 0
        while after < 3 and len(results) < 2000:
            results += _load(server, X, ref, 12, 6)
            after += gone.is_set()
        return results

    with ThreadPoolExecutor(2) as pool:
        results = pool.submit(load)
        time.sleep(0.3)
        kill = pool.submit(client.run, os._exit, 1, workers=[victim])
        assert kill.exception(timeout=30) is not None  # its comm closed: the worker died
        deadline = time.monotonic() + 30  # the scheduler may learn of it a moment later
        while victim in client.nthreads() and time.monotonic() < deadline:
            time.sleep(0.05)
        gone.set()
        assert set(results.result(timeout=120)) == {True}
    assert victim not in client.nthreads()


def test_no_worker_left_fails_at_once(setup):
    server, client, X, ref = setup
    client.cluster.scale(0)
    deadline = time.monotonic() + 30
    while client.nthreads() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.6)  # the executor asks the scheduler at most every 0.5 s
    start = time.monotonic()
    status, error = _call(server.url, "mc", X[:3])
    assert status == 503 and "worker is" in error
    assert time.monotonic() - start < 5
    req = urllib.request.Request(server.url + "/v2/health/ready")
    deadline = time.monotonic() + 5  # its worker count is refreshed at most every 0.5 s
    while True:
        try:
            urllib.request.urlopen(req, timeout=10)
            code = 200
        except urllib.error.HTTPError as exc:
            code = exc.code
        if code == 503 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert code == 503
