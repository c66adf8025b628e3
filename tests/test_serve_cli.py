"""``distshap serve`` as a process: its help, a bad model spec, SIGTERM draining (the request
in flight is answered, bit for bit, then the process exits 0), and its gRPC endpoint."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from distshap import TreeExplainer
from distshap.cli import main

pytest.importorskip("xgboost")
from xgb_models import build_binary  # noqa: E402


def test_help_lists_every_option(capsys):
    with pytest.raises(SystemExit) as info:
        main(["serve", "--help"])
    assert info.value.code == 0
    text = capsys.readouterr().out
    for flag in ("--model", "--host", "--token", "--insecure", "--local", "--scheduler",
                 "--max-batch-rows", "--max-wait-ms", "--request-timeout",
                 "--processes", "--slots", "--in-flight", "--grpc-port"):  # fmt: skip
        assert flag in text


def test_bad_model_spec_is_one_line(capsys):
    assert main(["serve", "--local", "--model", "m=x.json,colour=red"]) == 2
    err = capsys.readouterr().err.strip()
    assert "unknown option 'colour=red'" in err and "\n" not in err


def _refused(host, port, seconds=10.0):
    """Whether new connections are refused within ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            socket.create_connection((host, port), timeout=1).close()
        except OSError:
            return True
        time.sleep(0.05)
    return False


def _serve_process(*flags: str) -> tuple[subprocess.Popen, str]:
    """``distshap serve --local --port 0 FLAGS`` in a subprocess (this tree first on its path)
    and its line saying where it serves (read from its stderr, within 60 s)."""
    env = dict(os.environ)  # the tree first, the environment's own paths kept
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.getcwd(), env.get("PYTHONPATH")]))
    proc = subprocess.Popen(
        [sys.executable, "-m", "distshap.cli", "serve", "--local", "--port", "0", *flags],
        stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    line = ""
    while "http://" not in line and time.monotonic() < deadline and proc.poll() is None:
        line = proc.stderr.readline()
    return proc, line


def test_sigterm_drains_and_exits_0(tmp_path):
    """A request whose body is still arriving when SIGTERM comes is answered; then exit 0."""
    booster, X = build_binary()
    path = str(tmp_path / "m.json")
    booster.save_model(path)
    rows = np.asarray(X[:5], dtype=np.float32)
    proc, line = _serve_process("--model", f"m={path}")
    try:
        host, port = line.split("http://", 1)[1].split()[0].split(":")
        body = json.dumps({"inputs": [{"name": "rows", "shape": [5, 6], "datatype": "FP32",
                                       "data": rows.ravel().tolist()}]}).encode()  # fmt: skip
        head = (f"POST /v2/models/m/infer HTTP/1.1\r\nHost: {host}\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()  # fmt: skip
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(head + body[:10])
            time.sleep(0.5)  # the server is reading the body
            proc.send_signal(signal.SIGTERM)
            assert _refused(host, int(port))  # no new connections while draining
            sock.sendall(body[10:])
            answer = sock.makefile("rb").read()
        assert proc.wait(30) == 0
        status, _, payload = answer.partition(b"\r\n\r\n")
        assert status.startswith(b"HTTP/1.1 200")
        out = json.loads(payload)["outputs"][0]
        values = np.array(out["data"], dtype=np.float32).reshape(out["shape"])
        assert values.tobytes() == TreeExplainer(path, layout="xgboost").shap_values(rows).tobytes()
        assert "drained" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()


def test_grpc_port_serves_then_sigterm_exits_0(tmp_path):
    """``--grpc-port 0``: the line names the gRPC address, a gRPC call there is answered bit
    for bit, and SIGTERM drains both endpoints (exit 0)."""
    grpc = pytest.importorskip("grpc")
    from distshap.serve.grpc_messages import SERVICE, messages

    booster, X = build_binary()
    path = str(tmp_path / "m.json")
    booster.save_model(path)
    rows = np.asarray(X[:5], dtype=np.float32)
    proc, line = _serve_process("--grpc-port", "0", "--model", f"m={path}")
    try:
        address = line.split("gRPC at ", 1)[1].split()[0]
        request = messages["ModelInferRequest"](model_name="m")
        request.inputs.add(name="rows", datatype="FP32", shape=[5, 6])
        request.raw_input_contents.append(rows.tobytes())
        with grpc.insecure_channel(address) as channel:
            infer = channel.unary_unary(
                f"/{SERVICE}/ModelInfer",
                request_serializer=lambda m: m.SerializeToString(),
                response_deserializer=messages["ModelInferResponse"].FromString,
            )
            answer = infer(request, timeout=30)
        values = TreeExplainer(path, layout="xgboost").shap_values(rows)
        assert answer.raw_output_contents[0] == values.tobytes()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        assert "drained" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
