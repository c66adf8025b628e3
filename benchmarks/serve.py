"""The explanation server under load, beside in-process throughput and a per-request baseline.

For each concurrency (``--concurrency``) and request size (``--rows``), a load generator (threads
with one keep-alive HTTP connection each, in a child process so that it does not share the
server's interpreter) sends infer requests (FP32, the binary tensor extension) for
``--duration`` seconds and reports the p50 / p99 latency and rows/s of:

* ``distshap``: :func:`distshap.serve.serve` with dynamic batching, batches run in this process
  (``--backend local``) or on the workers of a local Dask cluster (``--backend dask``,
  ``--workers N``; GPU workers when GPUs are visible), each model resident there;
* ``baseline``: the same HTTP server calling XGBoost's
  ``Booster.predict(DMatrix, pred_contribs=True)`` once per request, without batching;

and, in the same run, the in-process batch throughput of ``TreeExplainer.shap_values``
(``--inproc-rows`` rows at once, median of 3 calls). Cells with more than ``--max-inflight-rows``
rows in flight (concurrency x rows) are skipped.

Usage::

    python -m benchmarks.serve --concurrency 1,16 --rows 1,100 --duration 2     # CPU, < 1 min
    python -m benchmarks.serve --backend dask --workers 2 --concurrency 1,16,256 \\
        --rows 1,100,10000 --duration 10 --shape cal_housing-med                  # the issue's
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlparse

import numpy as np


def _body(rows: np.ndarray) -> tuple[bytes, dict]:
    """An infer request for ``rows`` in the binary tensor extension: body and headers."""
    head = json.dumps({
        "inputs": [{"name": "rows", "shape": list(rows.shape), "datatype": "FP32",
                    "parameters": {"binary_data_size": rows.nbytes}}],
        "outputs": [{"name": "shap_values", "parameters": {"binary_data": True}}],
    }).encode()  # fmt: skip
    headers = {"Inference-Header-Content-Length": str(len(head)),
               "Content-Type": "application/octet-stream"}  # fmt: skip
    return head + rows.tobytes(), headers


def _client_thread(url: str, body: bytes, headers: dict, stop: float, out: list) -> None:
    """Send requests on one keep-alive connection until ``stop``; latencies (or -status)."""
    where = urlparse(url)
    conn = http.client.HTTPConnection(where.hostname, where.port, timeout=120)
    while time.perf_counter() < stop:
        t0 = time.perf_counter()
        conn.request("POST", "/v2/models/m/infer", body, headers)
        resp = conn.getresponse()
        resp.read()
        out.append(time.perf_counter() - t0 if resp.status == 200 else -resp.status)
    conn.close()


def _generate(url: str, rows: np.ndarray, concurrency: int, seconds: float) -> tuple:
    """Child process: ``concurrency`` client threads for ``seconds`` (then until each has its
    last answer) -> all latencies, and the seconds until the last answer."""
    body, headers = _body(rows)
    outs: list[list] = [[] for _ in range(concurrency)]
    stop = time.perf_counter() + seconds
    threads = [threading.Thread(target=_client_thread, args=(url, body, headers, stop, out))
               for out in outs]  # fmt: skip
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [x for out in outs for x in out], time.perf_counter() - start


def _cell(url: str, rows: np.ndarray, concurrency: int, seconds: float) -> dict:
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        samples, elapsed = pool.apply(_generate, (url, rows, concurrency, seconds))
    ok = sorted(s for s in samples if s >= 0)
    errors = len(samples) - len(ok)
    return {
        "requests": len(ok),
        "errors": errors,
        "p50_ms": 1e3 * statistics.median(ok) if ok else float("nan"),
        "p99_ms": 1e3 * ok[min(len(ok) - 1, int(0.99 * len(ok)))] if ok else float("nan"),
        "rows_per_s": len(ok) * len(rows) / elapsed,
    }


class _XGBoostExecutor:
    """The baseline: XGBoost's pred_contribs on each request as it comes (no batching)."""

    name = "xgboost"

    def __init__(self, booster, threads: int) -> None:
        self.booster = booster
        self._pool = ThreadPoolExecutor(threads)
        self._threads = threads

    def slots(self) -> int:
        return self._threads

    def ready(self) -> bool:
        return True

    def workers(self) -> int:
        return 1

    def submit(self, resident, rows, output, k):
        import xgboost as xgb

        def run():
            values = self.booster.predict(xgb.DMatrix(rows), pred_contribs=True)
            return {output: values}

        return self._pool.submit(run)

    def close(self) -> None:
        self._pool.shutdown(wait=True)


def _servers(args, path: str, booster) -> list[tuple[str, object]]:
    """The distshap server and the baseline, started."""
    from distshap.serve import ExplanationServer, ServeOptions, serve
    from distshap.serve.registry import Registry, parse_model_spec

    client = None
    if args.backend == "dask":
        from distshap.cluster import start_cluster

        client = start_cluster(n_workers=args.workers, dashboard_address=None)
    server = serve([f"m={path}"], client=client, backend=args.kernel_backend, port=0,
                   max_batch_rows=args.max_batch_rows, max_wait=args.max_wait_ms / 1e3,
                   max_queue_rows=1 << 24, request_timeout=600)  # fmt: skip
    server.client = client
    registry = Registry.from_specs([parse_model_spec(f"m={path}")])
    opts = ServeOptions(port=0, max_batch_rows=1, max_wait=0.0, max_queue_rows=1 << 24,
                        request_timeout=600)  # fmt: skip
    baseline = ExplanationServer(registry, _XGBoostExecutor(booster, 8), opts).start()
    return [("distshap", server), ("baseline", baseline)]


def _in_process(path: str, X: np.ndarray, n: int, backend: str) -> float:
    from distshap import TreeExplainer

    explainer = TreeExplainer(path, layout="xgboost", backend=backend)
    rows = X[np.arange(n) % len(X)]
    explainer.shap_values(rows)  # compile, upload
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        explainer.shap_values(rows)
        times.append(time.perf_counter() - t0)
    return n / statistics.median(times)


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="cal_housing-med", help="NAME-SIZE (benchmarks.shapes)")
    parser.add_argument("--backend", choices=("local", "dask"), default="local",
                        help="where batches run: this process, or local Dask workers")  # fmt: skip
    parser.add_argument("--workers", type=int, default=None, help="Dask workers (GPUs: first N)")
    parser.add_argument("--kernel-backend", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--concurrency", type=_ints, default=[1, 16, 256])
    parser.add_argument("--rows", type=_ints, default=[1, 100, 10000])
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per cell")
    parser.add_argument("--max-batch-rows", type=int, default=16384)
    parser.add_argument("--max-wait-ms", type=float, default=2.0)
    parser.add_argument("--max-inflight-rows", type=int, default=1 << 20)
    parser.add_argument("--inproc-rows", type=int, default=100_000)
    parser.add_argument("--no-baseline", action="store_true")
    parser.add_argument("--json", action="store_true", help="one JSON record per line")
    args = parser.parse_args(argv)

    import tempfile

    from benchmarks.shapes import make_data, train_model

    name, size = args.shape.rsplit("-", 1)
    booster = train_model(name, size)
    X = np.ascontiguousarray(make_data(name, 20_000)[0], dtype=np.float32)
    tmp = tempfile.TemporaryDirectory()
    path = f"{tmp.name}/model.ubj"
    booster.save_model(path)
    inproc = _in_process(path, X, args.inproc_rows, args.kernel_backend)
    servers = _servers(args, path, booster)
    if args.no_baseline:
        servers[1][1].drain()
        servers = servers[:1]
    records = []
    print(f"# {args.shape}, backend {args.backend}, in-process TreeExplainer.shap_values "
          f"({args.inproc_rows} rows): {inproc:,.0f} rows/s", flush=True)  # fmt: skip
    print(f"{'server':<9} {'conc':>5} {'rows':>6} {'requests':>9} {'errors':>6} {'p50 ms':>8} "
          f"{'p99 ms':>8} {'rows/s':>11} {'of in-proc':>10}", flush=True)  # fmt: skip
    for concurrency in args.concurrency:
        for n in args.rows:
            if concurrency * n > args.max_inflight_rows:
                continue
            rows = X[:n] if n <= len(X) else X[np.arange(n) % len(X)]
            for label, server in servers:
                _cell(server.url, rows[:1], 1, 0.2)  # warm: compile, connections
                r = {"server": label, "concurrency": concurrency, "rows": n,
                     **_cell(server.url, rows, concurrency, args.duration)}  # fmt: skip
                r["of_in_process"] = r["rows_per_s"] / inproc
                records.append(r)
                if args.json:
                    print(json.dumps(r), flush=True)
                else:
                    print(f"{label:<9} {concurrency:>5} {n:>6} {r['requests']:>9} "
                          f"{r['errors']:>6} {r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f} "
                          f"{r['rows_per_s']:>11,.0f} {r['of_in_process']:>10.1%}",
                          flush=True)  # fmt: skip
    for _, server in servers:
        server.drain()
        if getattr(server, "client", None) is not None:
            server.client.close()
    tmp.cleanup()


if __name__ == "__main__":
    sys.exit(main())
