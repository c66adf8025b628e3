"""The explanation server in this process: bits equal to TreeExplainer across concurrent clients
and batch boundaries, the tritonclient round trip (JSON and binary), every error status,
back-pressure, the timeout, the token and the metrics."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from distshap import TreeExplainer
from distshap.serve import ExplanationServer, ServeOptions, serve
from distshap.serve.backends import InProcessExecutor, explain_block
from distshap.serve.registry import Registry, parse_model_spec

pytest.importorskip("xgboost")
from xgb_models import serve_files, serve_specs  # noqa: E402


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return serve_files(tmp_path_factory.mktemp("serve"))


@pytest.fixture(scope="module")
def server(files):
    srv = serve(serve_specs(files), port=0, max_batch_rows=64, max_wait=0.01, max_request_rows=500,
                max_body_bytes=200_000)  # fmt: skip
    yield srv
    srv.drain()


def call(url, path, body=None, headers=None, method=None):
    """(status, headers, body) of one HTTP request."""
    req = urllib.request.Request(url + path, data=body, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def infer(url, model, rows, outputs=None, parameters=None, datatype="FP32", headers=None):
    obj = {"inputs": [{"name": "rows", "shape": list(rows.shape), "datatype": datatype,
                       "data": rows.astype(np.float64).ravel().tolist()}]}  # fmt: skip
    if outputs is not None:
        obj["outputs"] = [{"name": o} if isinstance(o, str) else o for o in outputs]
    if parameters:
        obj["parameters"] = parameters
    return call(url, f"/v2/models/{model}/infer", json.dumps(obj).encode(), headers)


def tensors(body):
    out = json.loads(body)["outputs"]
    return {o["name"]: np.array(o["data"], dtype={"FP32": np.float32, "FP64": np.float64,
            "INT32": np.int32}[o["datatype"]]).reshape(o["shape"]) for o in out}  # fmt: skip


def same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def test_health_and_metadata(server):
    assert call(server.url, "/v2/health/live")[0] == 200
    assert call(server.url, "/v2/health/ready")[0] == 200
    assert call(server.url, "/v2/models/mc/versions/3/ready")[0] == 200
    status, _, body = call(server.url, "/v2/models/mc")
    meta = json.loads(body)
    assert status == 200 and meta["versions"] == ["3"] and meta["parameters"]["output_groups"] == 3
    assert meta["inputs"][0]["shape"] == [-1, 6]
    assert {"shap_values", "margin", "top_interactions"} <= {o["name"] for o in meta["outputs"]}
    bin_meta = json.loads(call(server.url, "/v2/models/bin")[2])
    assert bin_meta["parameters"]["model_output"] == "probability"


def test_every_output_matches_in_process(server, files):
    rows = files["X"][:23]
    ex = TreeExplainer(files["bin"], layout="xgboost")
    iv = TreeExplainer(
        files["bin"], data=np.load(files["bg"]), model_output="probability", layout="xgboost"
    )
    outputs = ["shap_values", "margin", "interaction_values", "interventional_values",
               {"name": "top_interactions", "parameters": {"k": 4}}]  # fmt: skip
    status, _, body = infer(server.url, "bin", rows, outputs)
    assert status == 200, body
    got = tensors(body)
    assert same_bits(got["shap_values"], ex.shap_values(rows))
    assert same_bits(got["interaction_values"], ex.shap_interaction_values(rows))
    assert same_bits(got["interventional_values"], iv.shap_values(rows))
    pairs, values = ex.top_interactions(rows, 4)
    assert same_bits(got["top_interactions"], values)
    assert np.array_equal(got["top_interactions_pairs"], pairs)
    margin = got["margin"]
    assert margin.shape == (23,)
    np.testing.assert_allclose(margin, ex.shap_values(rows).sum(axis=1), rtol=1e-5, atol=1e-5)


def test_concurrent_clients_across_batch_boundaries(server, files):
    """Requests of 1..100 rows from 16 threads (batches of 64 rows at most): each response
    equals its rows explained alone, and requests were merged."""
    refs = {
        name: TreeExplainer(files[name], layout="xgboost").shap_values(files[x])
        for name, x in (("bin", "X"), ("mc", "Xm"))
    }
    data = {"bin": files["X"], "mc": files["Xm"]}
    before = server.metrics.batch_rows.copy()
    rng = np.random.default_rng(5)
    jobs = []
    for i in range(96):
        model = "bin" if i % 2 else "mc"
        n = int(rng.choice([1, 3, 17, 60, 100]))
        start = int(rng.integers(0, len(data[model]) - n))
        jobs.append((model, start, n, "FP64" if i % 3 == 0 else "FP32"))

    def run(job):
        model, start, n, dtype = job
        status, _, body = infer(server.url, model, data[model][start : start + n], datatype=dtype)
        assert status == 200, body
        return same_bits(tensors(body)["shap_values"], refs[model][start : start + n])

    with ThreadPoolExecutor(16) as pool:
        assert all(pool.map(run, jobs))
    batches = sum(h.counts and sum(h.counts) for h in server.metrics.batch_rows.values())
    earlier = sum(sum(h.counts) for h in before.values())
    assert batches - earlier < len(jobs)  # some requests shared a batch
    assert not server.deadlines  # answered requests keep no deadline timer


def test_tritonclient_json_and_binary(server, files):
    http = pytest.importorskip("tritonclient.http")
    client = http.InferenceServerClient(server.url.removeprefix("http://"))
    assert client.is_server_live() and client.is_model_ready("mc", "3")
    rows = files["Xm"][:50].astype(np.float64)
    ex = TreeExplainer(files["mc"], layout="xgboost")
    pairs, values = ex.top_interactions(rows, 2)
    for binary in (False, True):
        inp = http.InferInput("rows", list(rows.shape), "FP64")
        inp.set_data_from_numpy(rows, binary_data=binary)
        outs = [http.InferRequestedOutput(n, binary_data=binary)
                for n in ("shap_values", "top_interactions")]  # fmt: skip
        result = client.infer("mc", [inp], outputs=outs, parameters={"k": 2})
        assert same_bits(result.as_numpy("shap_values"), ex.shap_values(rows))
        assert same_bits(result.as_numpy("top_interactions"), values)
        assert np.array_equal(result.as_numpy("top_interactions_pairs"), pairs)
    client.close()


@pytest.mark.parametrize(
    "model, rows, kwargs, status, words",
    [
        ("bin", np.zeros((2, 5)), {}, 400, "inputs[0].shape: 5 features"),
        ("bin", np.zeros((2, 6)), {"datatype": "INT32"}, 400, "inputs[0].datatype"),
        ("bin", np.zeros((2, 6)), {"outputs": ["shapley"]}, 400, "unknown output 'shapley'"),
        ("mc", np.zeros((2, 6)), {"outputs": ["interventional_values"]}, 400, "background=FILE"),
        ("bin", np.zeros((2, 6)), {"outputs": [{"name": "margin", "parameters": {"k": 2}}]},
         400, "margin takes none"),
        ("bin", np.zeros((2, 6)), {"outputs": [{"name": "top_interactions",
                                                "parameters": {"k": 99}}]}, 400, "k must be"),
        ("bin", np.zeros((2, 6)), {"parameters": {"kk": 1}}, 400, "unknown parameter 'kk'"),
        ("bin", np.zeros((2, 6)), {"outputs": ["margin", "shap_values", "margin"]}, 400,
         "'margin' is asked for twice"),
        ("nope", np.zeros((2, 6)), {}, 404, "unknown model 'nope'"),
        ("mc/versions/1", np.zeros((2, 6)), {}, 404, "version '1'"),
        ("bin", np.zeros((501, 6)), {}, 413, "501 rows"),
    ],
)  # fmt: skip
def test_error_statuses(server, model, rows, kwargs, status, words):
    got, _, body = infer(server.url, model, rows, **kwargs)
    assert got == status
    error = json.loads(body)["error"]
    assert words in error and "\n" not in error


def test_oversize_body_and_routes(server):
    status, headers, body = call(server.url, "/v2/models/bin/infer", b"x" * 300_000)
    assert status == 413 and "limit of 200000" in json.loads(body)["error"]
    assert call(server.url, "/v2/models/bin/infer")[0] == 405
    assert call(server.url, "/v3/whatever")[0] == 404
    # answered from the head while the body still comes, then closed (urllib sends
    # Connection: close): the client reads its answer, not a reset connection
    status, headers, body = call(server.url, "/v2/models/nope/infer", b"x" * (4 << 20))
    assert status == 404 and headers["Connection"] == "close"
    assert "unknown model 'nope'" in json.loads(body)["error"]


class _SlowExecutor(InProcessExecutor):
    """Every batch takes ``delay`` seconds more."""

    def __init__(self, delay):
        super().__init__()
        self.delay = delay

    def submit(self, resident, rows, output, k):
        return self._pool.submit(self.run_here, resident, rows, output, k)

    def run_here(self, resident, rows, output, k):
        time.sleep(self.delay)
        return explain_block(resident, rows, output, k)


def _slow_server(files, delay, **options):
    registry = Registry.from_specs([parse_model_spec(f"bin={files['bin']}")])
    opts = ServeOptions(port=0, **options)
    return ExplanationServer(registry, _SlowExecutor(delay), opts).start()


def test_back_pressure_503_with_retry_after(files):
    # batches on the executor's thread: the loop queues requests while one runs
    srv = _slow_server(files, 0.3, max_batch_rows=10, max_queue_rows=10, max_wait=0.0,
                       inline_rows=0)  # fmt: skip
    rows = files["X"][:5]
    ref = TreeExplainer(files["bin"], layout="xgboost").shap_values(rows)
    try:
        with ThreadPoolExecutor(12) as pool:
            results = list(pool.map(lambda _: infer(srv.url, "bin", rows), range(12)))
        statuses = [r[0] for r in results]
        assert 503 in statuses and 200 in statuses
        for status, headers, body in results:
            if status == 503:
                assert headers["Retry-After"] == "1" and "full" in json.loads(body)["error"]
            else:
                assert same_bits(tensors(body)["shap_values"], ref)
        assert 'distshap_serve_errors_total{status="503"}' in srv.metrics.render()
    finally:
        srv.drain()


@pytest.mark.parametrize("inline_rows", [0, 64])
def test_request_timeout_504(files, inline_rows):
    """The deadline's timer answers 504 (a batch on the executor's thread), or values that come
    after it are (a batch run on the loop, which held the timer back)."""
    srv = _slow_server(files, 1.0, request_timeout=0.2, inline_rows=inline_rows)
    try:
        status, _, body = infer(srv.url, "bin", files["X"][:2])
        assert status == 504 and "timeout of 0.2 s" in json.loads(body)["error"]
        assert not srv.deadlines  # the expired request's bucket is gone
    finally:
        srv.drain()


def test_token(files):
    registry = Registry.from_specs([parse_model_spec(f"bin={files['bin']}")])
    with pytest.raises(ValueError, match="needs a token"):
        ExplanationServer(registry, InProcessExecutor(), ServeOptions(host="0.0.0.0", port=0))
    for token in ("s\u00e9cret", "s3cret ", "s3\ncret"):  # clients could not send it
        with pytest.raises(ValueError, match="token: give printable ASCII"):
            ExplanationServer(registry, InProcessExecutor(), ServeOptions(port=0, token=token))
    opts = ServeOptions(port=0, token="s3cret")  # a token on the loopback address too
    srv = ExplanationServer(registry, InProcessExecutor(), opts).start()
    url = srv.url
    try:
        assert call(url, "/v2/health/live")[0] == 200  # health checks need no token
        assert call(url, "/v2/models/bin")[0] == 401
        wrong = {"Authorization": "Bearer nope"}
        assert infer(url, "bin", files["X"][:1], headers=wrong)[0] == 401
        good = {"Authorization": "Bearer s3cret"}
        assert infer(url, "bin", files["X"][:1], headers=good)[0] == 200
    finally:
        srv.drain()


def test_metrics_and_drain_refuses(files):
    srv = serve([f"bin={files['bin']}"], port=0)
    assert infer(srv.url, "bin", files["X"][:3])[0] == 200
    text = call(srv.url, "/metrics")[2].decode()
    for name in ("distshap_serve_requests_total", "distshap_serve_rows_total",
                 "distshap_serve_request_seconds_bucket", "distshap_serve_batch_rows_bucket",
                 "distshap_serve_queue_rows", "distshap_serve_workers"):  # fmt: skip
        assert name in text
    assert 'distshap_serve_rows_total{model="bin",output="shap_values"} 3' in text
    assert "distshap_serve_in_flight 0\n" in text  # the scrape itself is not counted
    for outputs in (["shap_values", "margin"], ["margin", "shap_values"]):  # one series
        assert infer(srv.url, "bin", files["X"][:2], outputs=outputs)[0] == 200
    text = call(srv.url, "/metrics")[2].decode()
    assert 'distshap_serve_rows_total{model="bin",output="margin,shap_values"} 4' in text
    done = threading.Event()
    threading.Thread(target=lambda: (srv.drain(), done.set())).start()
    assert done.wait(10)
    with pytest.raises(OSError):
        urllib.request.urlopen(srv.url + "/v2/health/live", timeout=2)


def test_one_debug_line_per_request(server, files, caplog):
    with caplog.at_level("DEBUG", logger="distshap.serve"):
        assert infer(server.url, "bin", files["X"][:2])[0] == 200
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.getMessage().startswith("{")]
    assert len(lines) == 1
    assert lines[0]["status"] == 200 and lines[0]["rows"] == 2 and lines[0]["model"] == "bin"


def test_blocks_run_under_the_configuration_the_model_was_registered_with():
    """A model registered inside config_context serves with those settings, whatever the thread
    (or worker) that runs its blocks."""
    import threading

    from distshap.plan.config import config_context, get_config
    from distshap.serve.backends import explain_block
    from distshap.serve.registry import Resident

    class Probe:
        def shap_values(self, rows):
            return np.array([get_config().tile_rows])

    with config_context(tile_rows=64):
        resident = Resident("digest", Probe())
    seen = []
    thread = threading.Thread(
        target=lambda: seen.append(explain_block(resident, np.zeros((1, 2)), "shap_values", 1))
    )
    thread.start()
    thread.join(10)
    assert seen[0]["shap_values"][0] == 64
    assert get_config().tile_rows != 64


def test_two_slots_run_batches_side_by_side_with_the_same_bits(files):
    """Two batches at once in this process (``slots=2``): every response keeps its bits."""
    srv = serve([f"mc={files['mc']}"], port=0, slots=2, max_batch_rows=16, max_wait=0.0)
    X = files["Xm"]
    ref = TreeExplainer(files["mc"], layout="xgboost").shap_values(X)

    def run(i):
        start, n = (i * 7) % (len(X) - 12), 1 + i % 12
        status, _, body = infer(srv.url, "mc", X[start : start + n])
        return status == 200 and same_bits(tensors(body)["shap_values"], ref[start : start + n])

    try:
        assert srv.executor.slots() == 2
        with ThreadPoolExecutor(8) as pool:
            assert all(pool.map(run, range(48)))
    finally:
        srv.drain()
    with pytest.raises(ValueError, match="slots=0"):
        InProcessExecutor(0)
    with pytest.raises(ValueError, match="inline_rows=-1"):
        ServeOptions(inline_rows=-1)
    with pytest.raises(ValueError, match="slots=0"):  # refused, not taken as the default
        serve([f"mc={files['mc']}"], port=0, slots=0, start=False)


def test_asyncios_own_loop_serves_the_same_bits(files):
    """Without the serve extra (no uvloop) the server runs on asyncio's own loop."""
    registry = Registry.from_specs([parse_model_spec(s) for s in serve_specs(files)])
    srv = ExplanationServer(registry, InProcessExecutor(), ServeOptions(port=0, max_wait=0.005),
                            loop=asyncio.new_event_loop()).start()  # fmt: skip
    try:
        assert type(srv.loop).__module__.startswith("asyncio")
        ex = TreeExplainer(files["bin"], layout="xgboost")
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda i: infer(srv.url, "bin", files["X"][i : i + 3]),
                                    range(0, 48, 3)))  # fmt: skip
        for i, (status, _, body) in zip(range(0, 48, 3), answers, strict=True):
            assert status == 200, body
            assert same_bits(tensors(body)["shap_values"], ex.shap_values(files["X"][i : i + 3]))
    finally:
        srv.drain()
