"""Device processes: batches of several fronts merged into one call keep every row's bits; each
batch goes to the least loaded device process; a device process that dies fails its batches
and new ones at once (503); a group with a device process answers what TreeExplainer gives,
stops when the device process is killed, and drains on SIGTERM with exit code 0."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from distshap import TreeExplainer
from distshap.kernels import cuda_available
from distshap.serve import ExplanationServer, ServeOptions, serve
from distshap.serve.backends import NoWorkerError, explain_block
from distshap.serve.device_link import DeviceExecutor
from distshap.serve.device_process import DeviceLoop
from distshap.serve.group import device_plan
from distshap.serve.registry import Registry, Resident, parse_model_spec
from distshap.waiting import wait_for_stream

pytest.importorskip("xgboost")
from xgb_models import build_binary, build_multiclass  # noqa: E402


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("device")
    binary, X = build_binary()
    multi, Xm = build_multiclass()
    binary.save_model(str(d / "bin.json"))
    multi.save_model(str(d / "mc.json"))
    np.save(d / "bg.npy", np.asarray(X[:30], dtype=np.float32))
    X, Xm = np.asarray(X, dtype=np.float32), np.asarray(Xm, dtype=np.float32)
    return {"bin": str(d / "bin.json"), "mc": str(d / "mc.json"), "bg": str(d / "bg.npy"),
            "X": X, "Xm": Xm}  # fmt: skip


@pytest.fixture(scope="module")
def residents(files):
    specs = [f"bin={files['bin']},background={files['bg']},output=probability",
             f"mc={files['mc']}"]  # fmt: skip
    registry = Registry.from_specs([parse_model_spec(s) for s in specs], backend="cpu")
    return [m.resident for m in registry.models.values()]


class _Stream:
    """A stand-in GPU stream whose work is done once ``event`` is set."""

    def __init__(self, event: threading.Event) -> None:
        self.event = event

    @property
    def done(self) -> bool:
        return self.event.is_set()

    def synchronize(self) -> None:
        assert self.event.wait(30)


class _Gate:
    """An explainer whose call waits for ``open`` as a GPU call waits for its stream (the
    device process kept busy, reading its pipes meanwhile)."""

    def __init__(self) -> None:
        self.open = threading.Event()
        self.entered = threading.Event()

    def shap_values(self, rows):
        self.entered.set()
        wait_for_stream(_Stream(self.open))
        return np.zeros((len(rows), 2), dtype=np.float32)


def _wire(fronts: int, device_residents: list, in_flight=None) -> tuple:
    """Device loops (not started) joined to ``fronts`` executors by pipes of this process."""
    ctx = multiprocessing.get_context("spawn")
    links = [[ctx.Pipe(duplex=True) for _ in device_residents] for _ in range(fronts)]
    loops = [
        DeviceLoop(res, [links[f][d][1] for f in range(fronts)])
        for d, res in enumerate(device_residents)
    ]
    executors = [
        DeviceExecutor(
            [links[f][d][0] for d in range(len(loops))],
            device_residents[0],
            **({} if in_flight is None else {"in_flight": in_flight}),
        )
        for f in range(fronts)
    ]
    return loops, executors, links


def _start(loop: DeviceLoop) -> threading.Thread:
    thread = threading.Thread(target=loop.run, daemon=True)
    thread.start()
    return thread


def _until(condition, seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "the condition did not come true"
        time.sleep(0.01)


def same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def test_batches_of_two_fronts_merge_into_one_call_with_every_rows_bits(files, residents):
    gate = _Gate()
    held = [*residents, Resident("gate", gate)]
    loops, (a, b), _ = _wire(2, [held])
    thread = _start(loops[0])
    X, Xm = files["X"], files["Xm"]
    try:
        busy = a.submit(held[2], X[:1], "shap_values", 0)
        assert gate.entered.wait(30)  # the one slot is busy: what comes next waits
        jobs = [  # (front, model, rows, output, k)
            (a, 0, X[:5], "shap_values", 0), (b, 0, X[5:12], "shap_values", 0),
            (a, 0, X[12:13], "shap_values", 0), (b, 0, X[13:20].astype(np.float64),
            "shap_values", 0), (a, 0, X[:9], "interaction_values", 0),
            (b, 0, X[3:9], "interaction_values", 0), (a, 0, X[:6], "margin", 0),
            (b, 0, X[:4], "interventional_values", 0), (a, 1, Xm[:8], "top_interactions", 3),
            (b, 1, Xm[8:11], "top_interactions", 3), (b, 1, Xm[:3], "interventional_values", 0),
        ]  # fmt: skip
        futures = [f.submit(held[m], rows, out, k) for f, m, rows, out, k in jobs]
        _until(lambda: len(loops[0]._pending) == len(jobs))
        gate.open.set()
        assert busy.result(30)["shap_values"].shape == (1, 2)
        ex = TreeExplainer(files["bin"], layout="xgboost", backend="cpu")
        iv = TreeExplainer(files["bin"], data=np.load(files["bg"]), model_output="probability",
                           layout="xgboost", backend="cpu")  # fmt: skip
        mc = TreeExplainer(files["mc"], layout="xgboost", backend="cpu")
        for (_, _, rows, output, k), future in zip(jobs[:-1], futures, strict=False):
            got = future.result(30)
            if output == "shap_values":
                assert same_bits(got[output], ex.shap_values(rows))
            elif output == "interaction_values":
                assert same_bits(got[output], ex.shap_interaction_values(rows))
            elif output == "margin":
                assert same_bits(got[output], explain_block(residents[0], rows, output, 0)[output])
            elif output == "interventional_values":
                assert same_bits(got[output], iv.shap_values(rows))
            else:
                pairs, values = mc.top_interactions(rows, k)
                assert same_bits(got[output], values)
                assert same_bits(got["top_interactions_pairs"], pairs.astype(np.int32))
        with pytest.raises(Exception) as remote:  # mc has no background: the device's error
            futures[-1].result(30)
        with pytest.raises(Exception) as local:
            explain_block(residents[1], Xm[:3], "interventional_values", 0)
        assert type(remote.value).__name__ == type(local.value).__name__
        assert str(remote.value) == str(local.value).strip()
        stats = loops[0].stats
        # the gate, then one call per (model, output, k, dtype): the FP32 shap_values of both
        # fronts in one, the interaction values of both in one, top_interactions in one
        assert stats["batches"] == 1 + len(jobs) and stats["calls"] == 1 + 7
        assert stats["merged"] == 3
    finally:
        gate.open.set()
        a.close()
        b.close()
        thread.join(10)
    assert not thread.is_alive()  # both fronts said goodbye: the device loop returned


def test_batches_that_cannot_be_merged_fail_and_the_device_runs_on(files, residents):
    """Batches whose rows cannot be put together (widths the front would have refused) are
    answered with the error, and the device process's slot keeps running batches."""
    gate = _Gate()
    held = [*residents, Resident("gate", gate)]
    loops, (a, b), _ = _wire(2, [held])
    thread = _start(loops[0])
    X = files["X"]
    try:
        busy = a.submit(held[2], X[:1], "shap_values", 0)
        assert gate.entered.wait(30)
        wide = a.submit(held[0], X[:2], "shap_values", 0)
        narrow = b.submit(held[0], np.ascontiguousarray(X[:2, :3]), "shap_values", 0)
        _until(lambda: len(loops[0]._pending) == 2)
        gate.open.set()
        busy.result(30)
        for future in (wide, narrow):
            with pytest.raises(Exception, match="dimension"):
                future.result(30)
        assert a.submit(held[0], X[:3], "shap_values", 0).result(30)["shap_values"].shape[0] == 3
    finally:
        gate.open.set()
        a.close()
        b.close()
        thread.join(10)


def test_each_batch_goes_to_the_least_loaded_device(files, residents):
    loops, (front,), _ = _wire(1, [residents, residents])
    X = files["X"]
    sizes = [50, 10, 10, 25, 8, 1]
    futures = []
    loads = []
    try:
        for n in sizes:  # the loops do not run yet: every batch stays in flight
            futures.append(front.submit(residents[0], X[:n], "shap_values", 0))
            loads.append(front.loads())
        assert loads == [[50, 0], [50, 10], [50, 20], [50, 45], [50, 53], [51, 53]]
        threads = [_start(loop) for loop in loops]
        want = TreeExplainer(files["bin"], layout="xgboost", backend="cpu").shap_values(X)
        for n, future in zip(sizes, futures, strict=True):
            assert same_bits(future.result(30)["shap_values"], want[:n])
        assert [loop.stats["rows"] for loop in loops] == [51, 53]
        assert front.loads() == [0, 0] and front.workers() == 2 and front.slots() == 8
    finally:
        front.close()
    for thread in threads:
        thread.join(10)


def test_in_flight_sets_a_fronts_batches_on_each_device_and_settings_are_checked(files, residents):
    for in_flight, slots in ((None, 8), (3, 6)):  # on each of 2 device processes; default 4
        loops, (front,), _ = _wire(1, [residents, residents], in_flight=in_flight)
        threads = [_start(loop) for loop in loops]
        try:
            assert front.slots() == slots
            rows = files["X"][:3]
            got = front.submit(residents[0], rows, "shap_values", 0).result(30)["shap_values"]
            assert same_bits(
                got, explain_block(residents[0], rows, "shap_values", 0)["shap_values"]
            )
        finally:
            front.close()
        for thread in threads:
            thread.join(10)
    for bad in (0, -1, 1.5, True, None):  # before any thread starts
        with pytest.raises(ValueError, match=f"in_flight={bad!r}: give the batches a front"):
            DeviceExecutor([], residents, in_flight=bad)
    model = f"bin={files['bin']}"  # refused before any process starts
    with pytest.raises(ValueError, match="in_flight=0: give the batches a front keeps"):
        serve([model], port=0, processes=2, backend="cpu", device_processes=1, in_flight=0)
    with pytest.raises(ValueError, match="in_flight=3: a setting of device processes, and "
                       "this group has none; leave it out"):  # fmt: skip
        serve([model], port=0, processes=2, backend="cpu", in_flight=3)
    with pytest.raises(ValueError, match="in_flight=3: .* one process has none"):
        serve([model], port=0, backend="cpu", in_flight=3)
    with pytest.raises(ValueError, match="slots=2: a setting of fronts that run their own "
                       "batches; a device process runs one call at a time"):  # fmt: skip
        serve([model], port=0, processes=2, backend="cpu", device_processes=1, slots=2)


class _Echo:
    """An explainer whose values are its rows doubled (every byte of them checked)."""

    def shap_values(self, rows):
        return rows * 2


def test_a_batch_larger_than_the_pipe_holds_is_written_whole_and_before_the_next():
    echo = [Resident("echo", _Echo())]
    loops, (front,), _ = _wire(1, [echo])
    big = np.arange(4 << 20, dtype=np.float32).reshape(-1, 4)  # 16 MiB: more than the pipe holds
    small = np.full((3, 4), 7, dtype=np.float32)
    try:
        first = front.submit(echo[0], big, "shap_values", 0)
        link = front._links[0]
        assert link.sending or link.outbox  # the rest of it is the sender's
        second = front.submit(echo[0], small, "shap_values", 0)  # behind it, not written now
        thread = _start(loops[0])
        assert same_bits(first.result(60)["shap_values"], big * 2)
        assert same_bits(second.result(60)["shap_values"], small * 2)
    finally:
        front.close()
    thread.join(10)


def test_a_calls_answers_to_one_front_go_together_however_many(files):
    gate = _Gate()
    held = [Resident("echo", _Echo()), Resident("gate", gate)]
    loops, (front,), _ = _wire(1, [held])
    thread = _start(loops[0])
    rows = np.arange(600 * 4, dtype=np.float32).reshape(600, 4)
    try:
        busy = front.submit(held[1], rows[:1], "shap_values", 0)
        assert gate.entered.wait(30)
        futures = [front.submit(held[0], rows[i : i + 1], "shap_values", 0) for i in range(600)]
        _until(lambda: len(loops[0]._pending) == 600)
        gate.open.set()  # one call of 600 batches: 1,200 parts, more than a writev takes
        for i, future in enumerate(futures):
            assert same_bits(future.result(30)["shap_values"], rows[i : i + 1] * 2)
        assert busy.result(30)["shap_values"].shape == (1, 2)
        stats = dict(loops[0].stats)
        assert stats.pop("busy") > 0 and stats.pop("ran") > 0 and stats.pop("waited") > 0
        assert stats == {"calls": 2, "rows": 601, "merged": 1, "batches": 601}
    finally:
        gate.open.set()
        front.close()
    thread.join(10)


def test_a_device_that_dies_fails_its_batches_and_new_ones_with_503(files, residents):
    registry = Registry.from_specs(
        [parse_model_spec(f"bin={files['bin']},background={files['bg']},output=probability"),
         parse_model_spec(f"mc={files['mc']}")], backend="cpu")  # fmt: skip
    ctx = multiprocessing.get_context("spawn")
    ours, device_end = ctx.Pipe(duplex=True)  # nobody reads the device's end: it never answers
    executor = DeviceExecutor([ours], [m.resident for m in registry.models.values()])
    srv = ExplanationServer(registry, executor, ServeOptions(port=0, request_timeout=60)).start()
    body = json.dumps({"inputs": [{"name": "rows", "shape": [2, 6], "datatype": "FP32",
                                   "data": files["X"][:2].ravel().tolist()}]}).encode()  # fmt: skip
    url = srv.url + "/v2/models/bin/infer"

    def post():
        try:
            with urllib.request.urlopen(urllib.request.Request(url, data=body), timeout=60) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as err:
            return err.code, err.read()

    try:
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(post)
            _until(lambda: executor.loads() == [2])  # in flight on the device
            assert srv.ready()
            device_end.close()  # the device process is gone
            status, answer = pending.result(30)  # long before the request's 60 s timeout
        assert status == 503 and b"device process 0 exited" in answer
        assert not srv.ready() and executor.loads() == [-1]
        assert post()[0] == 503
        with pytest.raises(NoWorkerError):
            executor.submit(registry.models["bin"].resident, files["X"][:1], "shap_values", 0)
    finally:
        srv.drain()


def test_device_plan():
    assert device_plan("cpu", None, None) == []  # CPU: each process runs its own batches
    assert device_plan("cpu", None, 2) == [None, None]
    assert device_plan("auto", "tcp://127.0.0.1:1", None) == []
    with pytest.raises(ValueError, match="device_processes=1 with a Dask scheduler"):
        device_plan("cuda", "tcp://127.0.0.1:1", 1)
    with pytest.raises(ValueError, match="device_processes=-1: give a number >= 0"):
        device_plan("cpu", None, -1)


def test_device_plan_one_process_a_visible_gpu(monkeypatch):
    import distshap.cluster.local as local

    monkeypatch.setattr(local, "count_gpus", lambda: 2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    assert device_plan("cuda", None, None) == ["3", "5"]
    assert device_plan("auto", None, 3) == ["3", "5", "3"]
    assert device_plan("cuda", None, 0) == []


def _post(url: str, obj: dict, token: str) -> tuple[int, dict | bytes]:
    req = urllib.request.Request(url + "/v2/models/bin/infer", data=json.dumps(obj).encode(),
                                 headers={"Authorization": f"Bearer {token}"})  # fmt: skip
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def _answer_matches(url: str, X, want: dict, a: int, n: int, extra: tuple = ()) -> bool:
    """One JSON request of the rows ``X[a:a + n]`` (outputs: ``want``'s and ``extra``): each of
    ``want``'s outputs holds its rows' values bit for bit."""
    obj = {"inputs": [{"name": "rows", "shape": [n, X.shape[1]], "datatype": "FP32",
                       "data": X[a : a + n].astype(np.float64).ravel().tolist()}],
           "outputs": [{"name": k} for k in (*want, *extra)]}  # fmt: skip
    status, answer = _post(url, obj, "t")
    assert status == 200, answer
    got = {o["name"]: np.array(o["data"], np.float32).reshape(o["shape"])
           for o in answer["outputs"]}  # fmt: skip
    return all(same_bits(got[k], want[k][a : a + n]) for k in want)


def test_group_with_a_device_process_then_the_device_killed(files):
    X = files["X"]
    group = serve([f"bin={files['bin']}"], port=0, processes=2, backend="cpu", token="t",
                  device_processes=1, in_flight=3)  # fmt: skip
    watcher = threading.Thread(target=group.serve_forever, daemon=True)
    watcher.start()
    ex = TreeExplainer(files["bin"], layout="xgboost", backend="cpu")
    want = {"shap_values": ex.shap_values(X), "interaction_values": ex.shap_interaction_values(X)}

    def run(i):
        a = (i * 11) % 250
        return _answer_matches(group.url, X, want, a, min(1 + i % 40, len(X) - a), ("margin",))

    try:
        assert group.ready() and len(group.pids) == 2 and len(group.device_pids) == 1
        with ThreadPoolExecutor(12) as pool:
            assert all(pool.map(run, range(48)))
        time.sleep(1.2)  # the device's counters and the fronts' metrics written
        req = urllib.request.Request(group.url + "/metrics", headers={"Authorization": "Bearer t"})
        text = urllib.request.urlopen(req, timeout=30).read().decode()
        assert 'distshap_serve_device_calls{device="0"}' in text
        rows = [line for line in text.splitlines() if line.startswith("distshap_serve_device_rows")]
        assert rows and float(rows[0].split()[-1]) >= sum(1 + i % 40 for i in range(48))
        os.kill(group.device_pids[0], signal.SIGKILL)
        watcher.join(60)
        assert not watcher.is_alive()
        assert group.failure and "distshap-device-0" in group.failure and not group.ready()
    finally:
        group.drain()


def test_cli_sigterm_drains_fronts_then_the_device_process_exit_0(files):
    rows = files["X"][:5]
    env = dict(os.environ)  # the tree first, the environment's own paths kept
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.getcwd(), env.get("PYTHONPATH")]))
    proc = subprocess.Popen(
        [sys.executable, "-m", "distshap.cli", "serve", "--local", "--port", "0",
         "--backend", "cpu", "--processes", "2", "--device-processes", "1",
         "--model", f"m={files['bin']}"],
        stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        deadline, line = time.monotonic() + 120, ""
        while "http://" not in line and time.monotonic() < deadline:
            line = proc.stderr.readline()
        assert "2 processes" in line and "1 device process" in line, line
        host, port = line.split("http://", 1)[1].split()[0].split(":")
        pids = [int(p) for p in line.split("pids ", 1)[1].split(";")[0].split(", ")]
        pids.append(int(line.rsplit("pids ", 1)[1].rstrip(")\n")))
        body = json.dumps(
            {
                "inputs": [
                    {
                        "name": "rows",
                        "shape": [5, 6],
                        "datatype": "FP32",
                        "data": rows.astype(np.float64).ravel().tolist(),
                    }
                ]
            }
        )
        head = (f"POST /v2/models/m/infer HTTP/1.1\r\nHost: {host}\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()  # fmt: skip
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(head + body[:10].encode())
            time.sleep(0.5)  # a front is reading the body
            proc.send_signal(signal.SIGTERM)
            time.sleep(0.5)
            sock.sendall(body[10:].encode())
            answer = sock.makefile("rb").read()
        assert proc.wait(60) == 0
        status, _, payload = answer.partition(b"\r\n\r\n")
        assert status.startswith(b"HTTP/1.1 200")
        want = TreeExplainer(files["bin"], layout="xgboost", backend="cpu").shap_values(rows)
        got = np.array(json.loads(payload)["outputs"][0]["data"], np.float32).reshape(want.shape)
        assert same_bits(got, want)
        assert "drained" in proc.stderr.read()
        for pid in pids:  # the fronts and the device process are gone
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="no CUDA GPU visible")
def test_gpu_group_a_device_process_a_gpu_and_fronts_without_a_context(files):
    from distshap.cluster.local import count_gpus

    X = files["X"]
    group = serve([f"bin={files['bin']}"], port=0, processes=2, backend="cuda", token="t")
    ex = TreeExplainer(files["bin"], layout="xgboost", backend="cuda")
    want = {"shap_values": ex.shap_values(X), "interaction_values": ex.shap_interaction_values(X)}

    def run(i):
        a, n = (i * 13) % 250, 1 + i % 50
        return _answer_matches(group.url, X, want, a, n)

    try:
        assert len(group.device_pids) == max(1, count_gpus())
        with ThreadPoolExecutor(16) as pool:
            assert all(pool.map(run, range(64)))
        listed = subprocess.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=30).stdout  # fmt: skip
        holders = {int(p) for p in listed.split() if p.isdigit()}
        if set(group.device_pids) <= holders:  # pids as this namespace sees them
            assert not set(group.pids) & holders
    finally:
        group.drain()
    assert group.failure is None
