"""A server of several processes: every process answers bit for bit what TreeExplainer gives,
applies the token, /metrics sums the processes; a process killed stops the group (the others
drained); ``distshap serve --processes 2`` drains every process on SIGTERM and exits 0."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

from distshap import TreeExplainer
from distshap.serve import serve
from distshap.serve.metrics import Metrics

pytest.importorskip("xgboost")
from xgb_models import build_binary  # noqa: E402


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    booster, X = build_binary()
    path = str(tmp_path_factory.mktemp("group") / "m.json")
    booster.save_model(path)
    return path, np.asarray(X, dtype=np.float32)


def _post(url: str, body: bytes, headers: dict) -> tuple[int, bytes]:
    """(status, body) of one infer request on a connection of its own."""
    req = urllib.request.Request(url + "/v2/models/m/infer", data=body, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def _binary(rows: np.ndarray) -> tuple[bytes, dict]:
    head = json.dumps({
        "inputs": [{"name": "rows", "shape": list(rows.shape), "datatype": "FP32",
                    "parameters": {"binary_data_size": rows.nbytes}}],
        "outputs": [{"name": "shap_values", "parameters": {"binary_data": True}}],
    }).encode()  # fmt: skip
    return head + rows.tobytes(), {"Inference-Header-Content-Length": str(len(head))}


def _json(rows: np.ndarray) -> tuple[bytes, dict]:
    obj = {"inputs": [{"name": "rows", "shape": list(rows.shape), "datatype": "FP32",
                       "data": rows.astype(np.float64).ravel().tolist()}]}  # fmt: skip
    return json.dumps(obj).encode(), {}


def _values(body: bytes, binary: bool, shape: tuple) -> np.ndarray:
    if binary:
        n = len(body) - int(np.prod(shape)) * 4
        return np.frombuffer(body[n:], dtype=np.float32).reshape(shape)
    out = json.loads(body)["outputs"][0]
    return np.array(out["data"], dtype=np.float32).reshape(out["shape"])


def test_metrics_sum_the_processes():
    a, b = Metrics(), Metrics()
    a.process, b.process = 0, 1
    a.request("m", "shap_values", 200, 5, 0.003)
    b.request("m", "shap_values", 200, 7, 0.004)
    b.request("m", "shap_values", 503, 1, 0.001)
    b.stage("decode", 0.25)
    b.gauge("distshap_serve_workers", "workers", lambda: {(): 1})
    a.gauge("distshap_serve_workers", "workers", lambda: {(): 1})
    text = a.render([b.snapshot()])
    assert 'distshap_serve_rows_total{model="m",output="shap_values"} 12\n' in text
    assert 'distshap_serve_requests_total{model="m",output="shap_values",status="503"} 1' in text
    assert 'distshap_serve_stage_seconds_total{stage="decode"} 0.25' in text
    assert 'le="0.005"} 2\n' in text and "distshap_serve_workers 1\n" in text  # shared: max
    assert 'process_requests_total{process="0"} 1\n' in text
    assert 'process_requests_total{process="1"} 2\n' in text


def test_two_processes_bit_identical_then_a_killed_one_stops_the_group(model):
    path, X = model
    group = serve([f"m={path}"], port=0, processes=2, backend="cpu", token="t")
    watcher = threading.Thread(target=group.serve_forever, daemon=True)  # returns once stopped
    watcher.start()
    try:
        assert group.ready() and len(set(group.pids)) == 2
        auth = {"Authorization": "Bearer t"}
        assert _post(group.url, *_json(X[:2]))[0] == 401  # the token applies in each process
        want = TreeExplainer(path, layout="xgboost").shap_values(X[:40])
        for i in range(24):  # fresh connections: the kernel spreads them over both processes
            rows = X[i : i + 1 + i % 7]
            binary = i % 2 == 0
            body, headers = (_binary if binary else _json)(rows)
            status, answer = _post(group.url, body, {**headers, **auth})
            assert status == 200
            got = _values(answer, binary, (len(rows), X.shape[1] + 1))
            assert got.tobytes() == want[i : i + len(rows)].tobytes()
        time.sleep(1.2)  # the processes' metrics written for each other
        req = urllib.request.Request(group.url + "/metrics", headers=auth)
        text = urllib.request.urlopen(req, timeout=30).read().decode()
        per = [line for line in text.splitlines() if line.startswith("distshap_serve_process_")]
        assert len(per) == 2 and all(int(line.split()[-1]) > 0 for line in per), per
        assert (
            'distshap_serve_requests_total{model="m",output="shap_values",status="200"} 24' in text
        )
        os.kill(group.pids[1], signal.SIGKILL)
        watcher.join(60)
        assert not watcher.is_alive()
        assert group.failure and f"pid {group.pids[1]}" in group.failure
        assert not group.ready()
        with pytest.raises(OSError):
            socket.create_connection(group.address, timeout=2).close()
    finally:
        group.drain()


def test_cli_sigterm_drains_every_process_and_exits_0(model):
    path, X = model
    rows = X[:5]
    env = dict(os.environ)  # the tree first, the environment's own paths kept
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.getcwd(), env.get("PYTHONPATH")]))
    proc = subprocess.Popen(
        [sys.executable, "-m", "distshap.cli", "serve", "--local", "--port", "0",
         "--processes", "2", "--model", f"m={path}"],
        stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        deadline, line = time.monotonic() + 120, ""
        while "http://" not in line and time.monotonic() < deadline:
            line = proc.stderr.readline()
        assert "2 processes" in line
        host, port = line.split("http://", 1)[1].split()[0].split(":")
        pids = [int(p) for p in line.split("pids ", 1)[1].split(";")[0].split(", ")]
        body, _ = _json(rows)
        head = (f"POST /v2/models/m/infer HTTP/1.1\r\nHost: {host}\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()  # fmt: skip
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(head + body[:10])
            time.sleep(0.5)  # a process is reading the body
            proc.send_signal(signal.SIGTERM)
            time.sleep(0.5)
            sock.sendall(body[10:])
            answer = sock.makefile("rb").read()
        assert proc.wait(60) == 0
        status, _, payload = answer.partition(b"\r\n\r\n")
        assert status.startswith(b"HTTP/1.1 200")
        want = TreeExplainer(path, layout="xgboost").shap_values(rows)
        assert _values(payload, False, want.shape).tobytes() == want.tobytes()
        assert "drained" in proc.stderr.read()
        for pid in pids:  # every server process is gone
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_bad_processes_and_missing_file_refused_before_any_process(tmp_path):
    with pytest.raises(ValueError, match="processes=0: give the number of server processes"):
        serve([f"m={tmp_path / 'm.json'}"], port=0, processes=0)
    with pytest.raises(FileNotFoundError, match="model file .* does not exist"):
        serve([f"m={tmp_path / 'm.json'}"], port=0, processes=2)
    for slots in (0, -1, 1.5, True):  # refused by the group itself, not once a process starts
        with pytest.raises(ValueError, match=f"slots={slots!r}: give the number of batches"):
            serve([f"m={tmp_path / 'm.json'}"], port=0, processes=2, slots=slots)
    for processes in (1, 2):  # a missing token is refused before any model loads
        with pytest.raises(ValueError, match="needs a token"):
            serve([f"m={tmp_path / 'm.json'}"], host="0.0.0.0", port=0, processes=processes)


def test_a_port_another_server_holds_is_refused_not_shared(model):
    with socket.socket() as other:  # another group's process: SO_REUSEPORT, listening
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        other.bind(("127.0.0.1", 0))
        other.listen(1)
        with pytest.raises(OSError):
            serve([f"m={model[0]}"], port=other.getsockname()[1], processes=2)
