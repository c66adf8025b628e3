"""The server's HTTP/1.1 on raw sockets: keep-alive and pipelined requests answered in order,
``Expect: 100-continue``, 413 from the head alone, refused framings, a client that leaves
mid-body (the request is let go: nothing stays in flight), and one that closes its side after
its request (it still gets the answer)."""

from __future__ import annotations

import json
import socket
import time

import numpy as np
import pytest

from distshap import TreeExplainer
from distshap.serve import serve

pytest.importorskip("xgboost")
from xgb_models import build_binary  # noqa: E402


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    booster, _ = build_binary()
    path = str(tmp_path_factory.mktemp("serve_http") / "bin.json")
    booster.save_model(path)
    return path


@pytest.fixture(scope="module")
def setup(model_path):
    _, X = build_binary()
    X = np.asarray(X[:8], dtype=np.float32)
    srv = serve([f"bin={model_path}"], port=0, max_body_bytes=10_000)
    yield srv, X, TreeExplainer(model_path, layout="xgboost").shap_values(X)
    srv.drain()


def _infer(rows: np.ndarray, extra: str = "") -> bytes:
    tensor = {"name": "rows", "shape": list(rows.shape), "datatype": "FP32",
              "data": rows.astype(np.float64).ravel().tolist()}  # fmt: skip
    body = json.dumps({"inputs": [tensor]}).encode()
    head = (f"POST /v2/models/bin/infer HTTP/1.1\r\nHost: x\r\n{extra}"
            f"Content-Length: {len(body)}\r\n\r\n").encode()  # fmt: skip
    return head + body


def _read_answer(f) -> tuple[int, dict, bytes]:
    status = int(f.readline().split()[1])
    headers = {}
    while (line := f.readline().strip()) != b"":
        name, _, value = line.decode().partition(":")
        headers[name.lower()] = value.strip()
    return status, headers, f.read(int(headers["content-length"]))


def _values(body: bytes) -> np.ndarray:
    out = json.loads(body)["outputs"][0]
    return np.array(out["data"], dtype=np.float32).reshape(out["shape"])


def _connect(srv):
    sock = socket.create_connection(srv.address, timeout=20)
    return sock, sock.makefile("rb")


def test_keep_alive_and_pipelined_requests_in_order(setup):
    srv, X, ref = setup
    sock, f = _connect(srv)
    with sock:
        sock.sendall(_infer(X[:2]))
        status, headers, body = _read_answer(f)
        assert status == 200 and "connection" not in headers
        assert _values(body).tobytes() == ref[:2].tobytes()
        sock.sendall(_infer(X[2:3]) + _infer(X[3:8]) + b"GET /v2/health/live HTTP/1.1\r\n\r\n")
        first, second, live = _read_answer(f), _read_answer(f), _read_answer(f)
        assert _values(first[2]).tobytes() == ref[2:3].tobytes()
        assert _values(second[2]).tobytes() == ref[3:8].tobytes()
        assert live[0] == 200


def test_expect_100_continue(setup):
    srv, X, ref = setup
    request = _infer(X[:1], "Expect: 100-continue\r\n")
    head, body = request.split(b"\r\n\r\n", 1)
    sock, f = _connect(srv)
    with sock:
        sock.sendall(head + b"\r\n\r\n")
        assert f.readline().startswith(b"HTTP/1.1 100")
        assert f.readline() == b"\r\n"
        sock.sendall(body)
        status, _, answer = _read_answer(f)
        assert status == 200 and _values(answer).tobytes() == ref[:1].tobytes()


@pytest.mark.parametrize(
    "head, status, words",
    [
        ("POST /v2/models/bin/infer HTTP/1.1\r\nContent-Length: 99999\r\n\r\n", 413, "99999"),
        ("POST /v2/models/bin/infer HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 411,
         "Content-Length"),
        ("HELLO\r\n\r\n", 400, "request line"),
        ("GET / HTTP/1.1\r\nno colon here\r\n\r\n", 400, "header line"),
    ],
)  # fmt: skip
def test_refused_from_the_head_and_closed(setup, head, status, words):
    srv, _, _ = setup
    sock, f = _connect(srv)
    with sock:
        sock.sendall(head.encode())  # no body follows: the answer comes from the head alone
        got, headers, body = _read_answer(f)
        assert got == status and headers["connection"] == "close"
        error = json.loads(body)["error"]
        assert words in error and "\n" not in error
        assert f.read() == b""  # the server closed the connection


def test_client_leaving_mid_body_is_let_go(setup):
    srv, X, _ = setup
    request = _infer(X[:2])
    sock = socket.create_connection(srv.address, timeout=20)
    sock.sendall(request[:-10])
    deadline = time.monotonic() + 10
    while srv._active == 0 and time.monotonic() < deadline:  # the head was read
        time.sleep(0.01)
    assert srv._active == 1
    sock.close()
    while srv._active and time.monotonic() < deadline:
        time.sleep(0.01)
    assert srv._active == 0


def test_a_client_that_closes_its_side_after_its_request_gets_the_answer(setup, model_path):
    _, X, ref = setup
    srv = serve([f"bin={model_path}"], port=0, inline_rows=0)
    try:  # inline_rows=0: the answer comes from the executor, after the client's FIN
        sock, f = _connect(srv)
        with sock:
            sock.sendall(_infer(X[:3]))
            sock.shutdown(socket.SHUT_WR)
            status, _, body = _read_answer(f)
            assert status == 200 and _values(body).tobytes() == ref[:3].tobytes()
            assert f.read() == b""  # then the server closes
    finally:
        srv.drain()
