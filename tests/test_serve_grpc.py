"""The server's gRPC endpoint (the Open Inference Protocol's gRPC service): the tritonclient.grpc
round trip bit for bit, typed contents, every refusal with its gRPC status and one line, HTTP
and gRPC requests in the same batches, the token, the metrics, a group of processes, a taken
port, and draining under load."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from distshap import TreeExplainer
from distshap.serve import ServeOptions, serve

grpc = pytest.importorskip("grpc")
tc = pytest.importorskip("tritonclient.grpc")
pytest.importorskip("xgboost")
from distshap.serve.grpc_messages import SERVICE, messages  # noqa: E402

from xgb_models import serve_files, serve_specs  # noqa: E402


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return serve_files(tmp_path_factory.mktemp("serve_grpc"))


@pytest.fixture(scope="module")
def server(files):
    srv = serve(serve_specs(files), port=0, grpc_port=0, max_batch_rows=64, max_wait=0.01,
                max_request_rows=500, max_body_bytes=200_000)  # fmt: skip
    yield srv
    srv.drain()


def same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def rpc(address, name, request, metadata=None, timeout=30):
    """One call of the service's method ``name`` with our own messages."""
    with grpc.insecure_channel(address) as channel:
        method = channel.unary_unary(
            f"/{SERVICE}/{name}",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=messages[f"{name}Response"].FromString,
        )
        return method(request, metadata=metadata, timeout=timeout)


def infer_request(model, rows, outputs=(), parameters=None, datatype=None, raw=True):
    request = messages["ModelInferRequest"](model_name=model)
    datatype = datatype or {np.float32: "FP32", np.float64: "FP64"}[rows.dtype.type]
    tensor = request.inputs.add(name="rows", datatype=datatype, shape=list(rows.shape))
    if raw:
        request.raw_input_contents.append(rows.tobytes())
    elif datatype == "FP64":
        tensor.contents.fp64_contents.extend(rows.ravel().tolist())
    else:
        tensor.contents.fp32_contents.extend(rows.ravel().tolist())
    for name in outputs:
        request.outputs.add(name=name)
    for key, value in (parameters or {}).items():
        request.parameters[key].int64_param = value
    return request


def tensors(response):
    dtypes = {"FP32": np.float32, "FP64": np.float64, "INT32": np.int32}
    return {
        out.name: np.frombuffer(raw, dtype=dtypes[out.datatype]).reshape(list(out.shape))
        for out, raw in zip(response.outputs, response.raw_output_contents, strict=True)
    }


def test_tritonclient_round_trip(server, files):
    client = tc.InferenceServerClient(server.grpc_address)
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready("mc", "3") and client.is_model_ready("bin")
    assert client.get_server_metadata().name == "distshap"
    meta = client.get_model_metadata("mc")
    assert meta.versions == ["3"] and list(meta.inputs[0].shape) == [-1, 6]
    assert {"shap_values", "margin", "top_interactions"} <= {o.name for o in meta.outputs}
    ex = TreeExplainer(files["mc"], layout="xgboost")
    for dtype in (np.float64, np.float32):
        rows = files["Xm"][:50].astype(dtype)
        inp = tc.InferInput("rows", list(rows.shape), "FP64" if dtype == np.float64 else "FP32")
        inp.set_data_from_numpy(rows)
        outs = [tc.InferRequestedOutput(n) for n in ("shap_values", "top_interactions")]
        result = client.infer("mc", [inp], outputs=outs, parameters={"k": 2}, model_version="3")
        pairs, values = ex.top_interactions(rows, 2)
        assert same_bits(result.as_numpy("shap_values"), ex.shap_values(rows))
        assert same_bits(result.as_numpy("top_interactions"), values)
        assert np.array_equal(result.as_numpy("top_interactions_pairs"), pairs)
    client.close()


def test_every_output_and_typed_contents(server, files):
    rows = files["X"][:23]
    ex = TreeExplainer(files["bin"], layout="xgboost")
    iv = TreeExplainer(files["bin"], data=np.load(files["bg"]), model_output="probability",
                       layout="xgboost")  # fmt: skip
    names = ("shap_values", "margin", "interaction_values", "interventional_values",
             "top_interactions")  # fmt: skip
    raw = tensors(rpc(server.grpc_address, "ModelInfer",
                      infer_request("bin", rows, names, {"k": 4})))  # fmt: skip
    typed = tensors(rpc(server.grpc_address, "ModelInfer",
                        infer_request("bin", rows, names, {"k": 4}, raw=False)))  # fmt: skip
    pairs, values = ex.top_interactions(rows, 4)
    for got in (raw, typed):
        assert same_bits(got["shap_values"], ex.shap_values(rows))
        assert same_bits(got["interaction_values"], ex.shap_interaction_values(rows))
        assert same_bits(got["interventional_values"], iv.shap_values(rows))
        assert same_bits(got["top_interactions"], values)
        assert np.array_equal(got["top_interactions_pairs"], pairs)
        assert got["margin"].shape == (23,) and got["margin"].dtype == np.float64
    # no outputs named: the SHAP values
    plain = tensors(rpc(server.grpc_address, "ModelInfer", infer_request("bin", rows[:3])))
    assert list(plain) == ["shap_values"] and same_bits(plain["shap_values"],
                                                         ex.shap_values(rows[:3]))  # fmt: skip


def _two_inputs():
    request = infer_request("bin", np.zeros((2, 6), np.float32))
    request.inputs.add(name="more", datatype="FP32", shape=[2, 6])
    return request


def _no_values():
    request = messages["ModelInferRequest"](model_name="bin")
    request.inputs.add(name="rows", datatype="FP32", shape=[2, 6])
    return request


def _two_raw():
    request = infer_request("bin", np.zeros((2, 6), np.float32))
    request.raw_input_contents.append(b"\0" * 48)
    return request


def _wrong_field():
    request = infer_request("bin", np.zeros((2, 6), np.float32), raw=False)
    request.inputs[0].contents.fp64_contents.extend([0.0] * 12)  # FP32 rows in FP64's field
    del request.inputs[0].contents.fp32_contents[:]
    return request


def _short_raw():
    request = infer_request("bin", np.zeros((2, 6), np.float32))
    request.raw_input_contents[0] = b"\0" * 40
    return request


@pytest.mark.parametrize(
    "make, code, words",
    [
        (lambda: infer_request("bin", np.zeros((2, 5), np.float32)), "INVALID_ARGUMENT",
         "inputs[0].shape: 5 features"),
        (lambda: infer_request("bin", np.zeros((2, 6), np.int32), datatype="INT32"),
         "INVALID_ARGUMENT", "inputs[0].datatype"),
        (lambda: infer_request("bin", np.zeros((2, 6), np.float32), ["shapley"]),
         "INVALID_ARGUMENT", "unknown output 'shapley'"),
        (lambda: infer_request("bin", np.zeros((2, 6), np.float32), ["margin", "margin"]),
         "INVALID_ARGUMENT", "'margin' is asked for twice"),
        (lambda: infer_request("bin", np.zeros((2, 6), np.float32), (), {"kk": 1}),
         "INVALID_ARGUMENT", "unknown parameter 'kk'"),
        (lambda: infer_request("mc", np.zeros((2, 6), np.float32), ["interventional_values"]),
         "INVALID_ARGUMENT", "background=FILE"),
        (_two_inputs, "INVALID_ARGUMENT", "exactly one tensor"),
        (_no_values, "INVALID_ARGUMENT", "has no values"),
        (_short_raw, "INVALID_ARGUMENT", "raw_input_contents[0] has 40 bytes"),
        (_two_raw, "INVALID_ARGUMENT", "raw_input_contents has 2 entries"),
        (_wrong_field, "INVALID_ARGUMENT", "inputs[0].contents.fp32_contents has 0 values"),
        (lambda: infer_request("nope", np.zeros((2, 6), np.float32)), "NOT_FOUND",
         "unknown model 'nope'"),
        (lambda: infer_request("bin", np.zeros((501, 6), np.float32)), "RESOURCE_EXHAUSTED",
         "501 rows"),
        (lambda: infer_request("bin", np.zeros((0, 6), np.float32)), "INVALID_ARGUMENT",
         "0 rows"),
    ],
)  # fmt: skip
def test_refusals(server, make, code, words):
    with pytest.raises(grpc.RpcError) as info:
        rpc(server.grpc_address, "ModelInfer", make())
    assert info.value.code() == getattr(grpc.StatusCode, code)
    details = info.value.details()
    assert words in details and "\n" not in details


def test_oversize_message_and_unknown_model_metadata(server):
    with pytest.raises(grpc.RpcError) as info:  # over max_body_bytes (200,000)
        rpc(server.grpc_address, "ModelInfer", infer_request("bin", np.zeros((499, 100))))
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    with pytest.raises(grpc.RpcError) as info:
        rpc(server.grpc_address, "ModelMetadata", messages["ModelMetadataRequest"](name="x"))
    assert info.value.code() == grpc.StatusCode.NOT_FOUND and "unknown model 'x'" in (
        info.value.details()
    )


def test_http_and_grpc_requests_share_batches_bit_for_bit(server, files):
    ex = TreeExplainer(files["bin"], layout="xgboost")
    rng = np.random.default_rng(3)
    jobs = [(i % 2, int(rng.integers(0, 150)), int(rng.integers(1, 40))) for i in range(48)]

    def run(job):
        by_grpc, start, n = job
        rows = files["X"][start : start + n]
        if by_grpc:
            got = tensors(rpc(server.grpc_address, "ModelInfer", infer_request("bin", rows)))
            return rows, got["shap_values"]
        head = json.dumps({
            "inputs": [{"name": "rows", "shape": list(rows.shape), "datatype": "FP32",
                        "parameters": {"binary_data_size": rows.nbytes}}],
            "outputs": [{"name": "shap_values", "parameters": {"binary_data": True}}],
        }).encode()  # fmt: skip
        req = urllib.request.Request(
            server.url + "/v2/models/bin/infer", data=head + rows.tobytes(),
            headers={"Inference-Header-Content-Length": str(len(head))},
        )  # fmt: skip
        with urllib.request.urlopen(req, timeout=30) as r:
            body = r.read()
        n_head = int(r.headers["Inference-Header-Content-Length"])
        shape = json.loads(body[:n_head])["outputs"][0]["shape"]
        return rows, np.frombuffer(body[n_head:], dtype=np.float32).reshape(shape)

    with ThreadPoolExecutor(12) as pool:
        for rows, values in pool.map(run, jobs):
            assert same_bits(values, ex.shap_values(rows))
    text = urllib.request.urlopen(server.url + "/metrics", timeout=30).read().decode()
    assert 'model="bin"' in text and 'status="200"' in text


def test_token(files):
    srv = serve([f"mc:3={files['mc']}"], port=0, grpc_port=0, token="s3cret")
    try:
        request = infer_request("mc", files["Xm"][:4])
        assert rpc(srv.grpc_address, "ServerLive", messages["ServerLiveRequest"]()).live
        for metadata in (None, (("authorization", "Bearer wrong"),)):
            with pytest.raises(grpc.RpcError) as info:
                rpc(srv.grpc_address, "ModelInfer", request, metadata=metadata)
            assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert "authorization: Bearer <token>" in info.value.details()
        ok = rpc(srv.grpc_address, "ModelInfer", request,
                 metadata=(("authorization", "Bearer s3cret"),))  # fmt: skip
        ex = TreeExplainer(files["mc"], layout="xgboost")
        assert same_bits(tensors(ok)["shap_values"], ex.shap_values(files["Xm"][:4]))
    finally:
        srv.drain()


def test_an_unexpected_error_is_internal_and_one_line(server, monkeypatch):
    def broken(model, rows):
        raise TypeError("boom\nsecond line")

    monkeypatch.setattr(server, "check_rows", broken)
    with pytest.raises(grpc.RpcError) as info:
        rpc(server.grpc_address, "ModelInfer", infer_request("bin", np.zeros((2, 6), np.float32)))
    assert info.value.code() == grpc.StatusCode.INTERNAL
    assert info.value.details() == "TypeError: boom"


def test_grpc_port_checks(files):
    with pytest.raises(ValueError, match="grpc_port=-1"):
        ServeOptions(grpc_port=-1)
    with pytest.raises(ValueError, match="grpc_port=8000 is the HTTP port too"):
        ServeOptions(port=8000, grpc_port=8000)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        before = threading.active_count()
        with pytest.raises(OSError, match=f"grpc_port={port}"):
            serve([f"mc:3={files['mc']}"], port=0, grpc_port=port)
        assert threading.active_count() <= before  # the server's threads given back


def test_drain_under_load_answers_or_refuses_never_hangs(files):
    srv = serve([f"bin={files['bin']}"], port=0, grpc_port=0, max_batch_rows=32)
    ex = TreeExplainer(files["bin"], layout="xgboost")
    rows = files["X"][:20]
    expected = ex.shap_values(rows)
    address, outcomes, lock = srv.grpc_address, [], threading.Lock()
    answered = threading.Semaphore(0)

    def client():
        for _ in range(40):
            try:
                got = tensors(rpc(address, "ModelInfer", infer_request("bin", rows), timeout=20))
                outcome = "same" if same_bits(got["shap_values"], expected) else "different"
            except grpc.RpcError as err:
                outcome = err.code().name
            with lock:
                outcomes.append(outcome)
            answered.release()

    threads = [threading.Thread(target=client) for _ in range(4)]
    for t in threads:
        t.start()
    for _ in range(12):  # requests are being answered: drain now, under load
        answered.acquire(timeout=30)
    srv.drain()
    for t in threads:
        t.join(60)
        assert not t.is_alive()
    assert len(outcomes) == 160 and "different" not in outcomes
    # refused: UNAVAILABLE, or CANCELLED by gRPC's own shutdown for a call that came as it
    # stopped (never started: see the counts below)
    assert set(outcomes) <= {"same", "UNAVAILABLE", "CANCELLED"}, outcomes
    assert outcomes.count("same") >= 12 and outcomes[-1] != "same"
    statuses: dict[str, int] = {}
    for key, count in srv.metrics.requests.items():
        status = dict(key)["status"]
        statuses[status] = statuses.get(status, 0) + count
    # every call the server took was answered in full: 200s as many as the clients' values
    assert statuses.get("200", 0) == outcomes.count("same")
    assert set(statuses) <= {"200", "503"}, statuses


@pytest.mark.parametrize("device_processes", [0, 1])
def test_group_serves_grpc_from_every_process(files, device_processes):
    """Two fronts answer gRPC calls, running their batches themselves or on a device process
    (on the CPU here: the route a GPU server takes)."""
    group = serve([f"mc:3={files['mc']}"], processes=2, port=0, grpc_port=0, backend="cpu",
                  device_processes=device_processes)  # fmt: skip
    try:
        ex = TreeExplainer(files["mc"], layout="xgboost")
        for start in range(0, 96, 6):  # a channel (a connection) each: spread over processes
            rows = files["Xm"][start : start + 5]
            got = tensors(rpc(group.grpc_address, "ModelInfer", infer_request("mc", rows)))
            assert same_bits(got["shap_values"], ex.shap_values(rows))
        deadline = time.monotonic() + 10  # the other process's counts come within 0.5 s
        counts: list[int] = []
        while sum(counts) < 16 and time.monotonic() < deadline:
            text = urllib.request.urlopen(group.url + "/metrics", timeout=30).read().decode()
            counts = [int(float(line.rsplit(" ", 1)[1])) for line in text.splitlines()
                      if line.startswith("distshap_serve_process_requests_total{")]  # fmt: skip
            time.sleep(0.1)
        assert sum(counts) == 16 and len(counts) == 2 and min(counts) > 0, counts
    finally:
        group.drain()
    assert group.failure is None


def test_a_long_refusal_keeps_its_status(server):
    request = infer_request("x" * 20_000, np.zeros((2, 6), np.float32))
    with pytest.raises(grpc.RpcError) as info:
        rpc(server.grpc_address, "ModelInfer", request)
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    assert len(info.value.details()) <= 1000


def test_a_failed_start_raises_and_drain_returns(files):
    from distshap.serve import ExplanationServer
    from distshap.serve.backends import InProcessExecutor
    from distshap.serve.registry import Registry, parse_model_spec

    registry = Registry.from_specs([parse_model_spec(f"mc:3={files['mc']}")])
    srv = ExplanationServer(registry, InProcessExecutor(1), ServeOptions(port=0, grpc_port=0))
    srv._sock.close()  # its HTTP listener cannot serve: the start fails
    with pytest.raises(OSError):
        srv.start()
    drained = threading.Thread(target=srv.drain)
    drained.start()
    drained.join(10)
    assert not drained.is_alive() and srv.wait_drained(0)
    with pytest.raises(RuntimeError, match="build a new one"):
        srv.start()
