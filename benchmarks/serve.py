"""The explanation server under load, beside in-process throughput and a per-request baseline.

For each concurrency (``--concurrency``) and request size (``--rows``), a load generator sends
infer requests (FP32, the binary tensor extension) for ``--duration`` seconds, each connection
sending its next request when its answer is in, and reports the p50 / p99 latency and rows/s
of:

* ``distshap``: :func:`distshap.serve.serve` with dynamic batching, batches run in this process
  (``--backend local``) or on the workers of a local Dask cluster (``--backend dask``,
  ``--workers N``; GPU workers when GPUs are visible, one per GPU), each model resident there;
  with ``--processes 1,4``, one such server for each number of server processes (``distshap/4``:
  four processes sharing the port, each with its own copy of the model, or client;
  ``distshap/4+1dev``: four front processes whose batches run on one device process, the
  default for several processes on a GPU: ``--device-processes`` sets how many, 0 for none);
  ``--slots 1,2``, ``--max-wait-ms 2,0``, ``--inline-rows 0,64`` (batches of at most that
  many rows run on the server's loop when nothing else runs; 0: on the executor's thread),
  and ``--in-flight 2,4`` (batches a front keeps in flight on each device process) add a
  server for each value (``distshap/4+1dev f4``, ``distshap/4+0dev s2``, ``distshap i0``);
  each server runs alone, started before its cells and drained after them;
* ``baseline``: the same server (the same HTTP front, one request a batch) calling XGBoost's
  ``Booster.predict(DMatrix, pred_contribs=True)`` once per request, 8 requests at a time;
* the floor (unless ``--no-floor``): ``floor/infer``, the same front in this process whose
  batches are zeros made without work (HTTP, decoding, batching and encoding alone), and
  ``floor/ready``, ``GET /v2/health/ready`` on it (HTTP alone; its rows/s are requests/s, one
  row a concurrency): what the load generator and the HTTP front cost before any explaining;

and, in the same run, the in-process batch throughput of ``TreeExplainer.shap_values``
(``--inproc-rows`` rows at once, median of 3 calls) and, for each request size of the cells up
to 1,000 rows, one warm call's microseconds on the calling thread and through a pool thread
(what a server's call costs before any HTTP). The load generator runs in
``--client-procs`` child processes (asyncio, one keep-alive connection per concurrent client),
so that neither its interpreter nor the server's limits the other. After each distshap cell,
the server's own per-stage seconds (``/metrics``: decode, queue wait, batch assembly, run,
encode; summed over a group's processes, CPU time of all of them) are printed, with the mean
batch size (and, with device processes, their CPU time a request and rows a merged call);
``--front-only`` runs the floor alone; ``--front-cpu N`` feeds N binary requests of each
``--rows`` straight into 64 connection objects of such a server (no sockets, no load generator:
the front's own CPU microseconds a request, median of 3); ``--pipe-cpu N`` sends N batches of
each ``--rows`` one after the other through a front's pipe to a device process whose values are
zeros (the front's CPU and wall microseconds a round trip: what the device-process route adds
to a batch). ``--cells 1x1,256x100`` runs those cells only; otherwise cells with more than
``--max-inflight-rows`` rows in flight (concurrency x rows) are skipped. Each distshap cell
runs its load for ``--warm`` seconds (3 by default) before the measured ``--duration`` (the
server's batches, device buffers and the CUDA graphs of its call sizes at their steady state: a
GPU server's first call of each row bucket captures its graph). A table of every server's
rows/s (p99) by cell, and its ratio to the baseline's, ends the run.

Usage::

    python -m benchmarks.serve --kernel-backend cpu --concurrency 1,16 --rows 1,100 \\
        --duration 2                                                              # CPU, < 1 min
    python -m benchmarks.serve --kernel-backend cuda --concurrency 1,16,256 \\
        --rows 1,100,10000 --duration 2 --max-inflight-rows 400000                # one GPU
    python -m benchmarks.serve --backend dask --workers 2 --concurrency 1,16,256 \\
        --rows 1,100,10000 --duration 2                                           # two GPUs
    python -m benchmarks.serve --kernel-backend cuda --concurrency 1,16,256 --rows 1,100 \\
        --processes 1,4 --client-procs 6 --max-inflight-rows 400000       # one GPU, 1 and 4 fronts
    python -m benchmarks.serve --kernel-backend cuda --cells 1x1,16x1,256x100 --processes 4,8 \
        --in-flight 2,4 --duration 1 \
        --client-procs 6                        # one GPU: the device route's settings side by side
    python -m benchmarks.serve --kernel-backend cpu --concurrency 16 --rows 100 \
        --processes 2 --device-processes 0,1                   # CPU: each front runs its batches,
                                                               # then one device process runs them
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import re
import statistics
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlparse

import numpy as np

from benchmarks.serve_cpu import front_cpu, pipe_cpu
from benchmarks.serve_executors import NullExecutor, XGBoostExecutor


def _request(rows: np.ndarray, host: str) -> bytes:
    """The bytes of one infer request for ``rows`` in the binary tensor extension."""
    head = json.dumps({
        "inputs": [{"name": "rows", "shape": list(rows.shape), "datatype": "FP32",
                    "parameters": {"binary_data_size": rows.nbytes}}],
        "outputs": [{"name": "shap_values", "parameters": {"binary_data": True}}],
    }).encode()  # fmt: skip
    body = head + rows.tobytes()
    return (
        f"POST /v2/models/m/infer HTTP/1.1\r\nHost: {host}\r\n"
        f"Inference-Header-Content-Length: {len(head)}\r\n"
        f"Content-Type: application/octet-stream\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body


async def _connection(host: str, port: int, request: bytes, stop: float, out: list) -> None:
    """Send requests on one keep-alive connection until ``stop``; latencies (or -status)."""
    reader, writer = await asyncio.open_connection(host, port)
    while time.perf_counter() < stop:
        t0 = time.perf_counter()
        writer.write(request)
        head = await reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = int(head.lower().split(b"\r\ncontent-length:", 1)[1].split(b"\r\n", 1)[0])
        await reader.readexactly(length)
        out.append(time.perf_counter() - t0 if status == 200 else -status)
    writer.close()


def _generate(url: str, request: bytes, connections: int, begin: float, seconds: float):
    """Child process: ``connections`` clients from wall time ``begin`` for ``seconds`` (then
    until each has its last answer) -> all latencies, first start and last answer (wall), and
    this process's CPU seconds meanwhile."""
    where = urlparse(url)
    out: list[float] = []
    cpu = [0.0]

    async def run() -> tuple[float, float]:
        await asyncio.sleep(max(0.0, begin - time.time()))
        cpu[0] = time.process_time()
        start = time.time()
        stop = time.perf_counter() + seconds
        await asyncio.gather(*(_connection(where.hostname, where.port, request, stop, out)
                               for _ in range(connections)))  # fmt: skip
        cpu[0] = time.process_time() - cpu[0]  # before the connections close
        return start, time.time()

    try:
        import uvloop

        loop = uvloop.new_event_loop()
    except ImportError:
        loop = asyncio.new_event_loop()
    try:
        start, end = loop.run_until_complete(run())
    finally:
        loop.close()
    return out, start, end, cpu[0]


def _cell(pool, procs: int, url: str, request: bytes, n: int, concurrency: int, seconds: float):
    """One load of ``concurrency`` clients over ``procs`` processes sending ``request`` (of
    ``n`` rows) -> latencies, rows/s, the load generator's CPU microseconds a request and the
    busiest load process's share of a core (near 100%: the load generator bounds the cell)."""
    shares = [concurrency // procs + (i < concurrency % procs) for i in range(procs)]
    begin = time.time() + 0.3  # every process connects at once
    jobs = [(url, request, c, begin, seconds) for c in shares if c]
    parts = pool.starmap(_generate, jobs)
    samples = [x for out, _, _, _ in parts for x in out]
    elapsed = max(end for _, _, end, _ in parts) - min(start for _, start, _, _ in parts)
    ok = sorted(s for s in samples if s >= 0)
    errors = len(samples) - len(ok)
    return {
        "requests": len(ok),
        "errors": errors,
        "p50_ms": 1e3 * statistics.median(ok) if ok else float("nan"),
        "p99_ms": 1e3 * ok[min(len(ok) - 1, int(0.99 * len(ok)))] if ok else float("nan"),
        "rows_per_s": len(ok) * n / elapsed,
        "seconds": elapsed,
        "client_cpu_us": 1e6 * sum(cpu for *_, cpu in parts) / max(1, len(samples)),
        "client_busiest": max(cpu / max(1e-9, end - start) for _, start, end, cpu in parts),
    }


_SERIES = re.compile(r"^(distshap_serve_[a-z_]+)(\{[^}]*\})? (\S+)$", re.M)


def _group_stages(group) -> dict:
    """:func:`_stages` of a server of several processes, from its ``/metrics`` (summed over
    the processes) and their CPU time (``/proc``)."""
    # every process's metrics written for the others (the device processes' counters pass
    # through front 0's)
    time.sleep(1.1 if group.device_pids else 0.6)
    text = urllib.request.urlopen(group.url + "/metrics", timeout=30).read().decode()
    out: dict = {"requests": 0, "latency": 0.0, "batches": 0, "batch_rows": 0.0,
                 "devices": len(group.device_pids)}  # fmt: skip
    names = {"distshap_serve_request_seconds_count": "requests",
             "distshap_serve_request_seconds_sum": "latency",
             "distshap_serve_batch_rows_count": "batches",
             "distshap_serve_batch_rows_sum": "batch_rows",
             "distshap_serve_device_calls": "device_calls",
             "distshap_serve_device_rows": "device_rows",
             "distshap_serve_device_busy": "device_busy",
             "distshap_serve_device_ran": "device_ran",
             "distshap_serve_device_waited": "device_waited"}  # fmt: skip
    for name, labels, value in _SERIES.findall(text):
        if name in names:
            out[names[name]] = out.get(names[name], 0) + float(value)
        elif name == "distshap_serve_stage_seconds_total":
            out[labels.split('"')[1]] = float(value)
    ticks = os.sysconf("SC_CLK_TCK")
    for key, pids in (("cpu", group.pids), ("device_cpu", group.device_pids)):
        out[key] = 0.0
        for pid in pids:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            out[key] += (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
    if not group.device_pids:
        del out["device_cpu"]
    return out


def _stages(server) -> dict:
    """The server's per-stage seconds, requests answered and batches so far."""
    if not hasattr(server, "metrics"):
        return _group_stages(server)
    m = server.metrics
    with m._lock:  # noqa: SLF001 (a consistent reading)
        out = {key[0][1]: value for key, value in getattr(m, "stages", {}).items()}
        out["requests"] = sum(h.counts and sum(h.counts) for h in m.latency.values())
        out["latency"] = sum(h.sum for h in m.latency.values())
        out["batches"] = sum(sum(h.counts) for h in m.batch_rows.values())
        out["batch_rows"] = sum(h.sum for h in m.batch_rows.values())
    out["cpu"] = time.process_time()  # the server's process (the load is in other processes)
    return out


def _stage_line(before: dict, after: dict, seconds: float) -> dict:
    """Between two readings around ``seconds`` of load: microseconds a request of the server
    processes' CPU time (all their threads; the device processes' apart), latency, decoding,
    queue wait and encoding; a batch's assembly and run; the mean batch (rows and requests); a
    device process's mean call (rows and microseconds), a batch's wait there, and the share of
    the load's seconds during which a device process ran a call."""
    d = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    n, batches = max(1, d["requests"]), max(1, d["batches"])
    keys = ("cpu", "device_cpu", "latency", "decode", "queue", "encode")
    per = {k: 1e6 * d[k] / n for k in keys if k in d}
    per.update({f"{k}/batch": 1e6 * d.get(k, 0) / batches for k in ("assemble", "run")})
    if d.get("device_calls"):
        per["rows_per_call"] = d["device_rows"] / d["device_calls"]
        per["device_run/call"] = 1e6 * d.get("device_ran", 0) / d["device_calls"]
        per["device_wait/batch"] = 1e6 * d.get("device_waited", 0) / batches
    if d.get("device_busy"):
        per["device_busy_share"] = d["device_busy"] / seconds / max(1, after["devices"])
    per["rows_per_batch"] = d["batch_rows"] / batches
    per["requests_per_batch"] = n / batches
    return per


def _variants(args) -> list[tuple[str, dict]]:
    """Each distshap server of the run: its label and its arguments of ``serve`` (one for
    each number of ``--processes``, of ``--device-processes``, of ``--max-wait-ms``, of
    ``--inline-rows`` and, without device processes, of ``--slots``, with them of
    ``--in-flight``; the label names each setting given as a list of several)."""
    import itertools

    from distshap.serve.group import device_plan

    scheduler = "tcp://" if args.backend == "dask" else None
    out: list[tuple[str, dict]] = []
    seen = set()
    for processes in args.processes:
        for devices in args.device_processes:
            label, count = "distshap" if args.processes == [1] else f"distshap/{processes}", 0
            if processes > 1 or devices:  # a group: as many device processes as it will have
                try:
                    count = len(device_plan(args.kernel_backend, scheduler, devices))
                except ValueError as err:
                    print(f"# {label} (device processes {devices}) not run: {err}", flush=True)
                    continue
                label += f"+{count}dev" if count else ""
            flights, slotting = (args.in_flight, [None]) if count else ([None], args.slots)
            waits = args.max_wait_ms[:1] if count else args.max_wait_ms  # merged there
            inlines = args.inline_rows
            for slots, wait, inline, in_flight in itertools.product(
                slotting, waits, inlines, flights
            ):
                name = label + ("" if slots is None else f" s{slots}")
                name += "" if in_flight is None else f" f{in_flight}"
                name += f" w{wait:g}" if len(waits) > 1 else ""
                name += f" i{inline}" if len(inlines) > 1 else ""
                if name not in seen:  # not the same server as one before
                    seen.add(name)
                    out.append((name, {"processes": processes, "slots": slots,
                                       "device_processes": devices, "in_flight": in_flight,
                                       "max_wait": wait / 1e3}))  # fmt: skip
                    if inline is not None:
                        out[-1][1]["inline_rows"] = inline
    return out


def _start(args, path: str, client, kwargs: dict):
    """One distshap server of :func:`_variants`, started."""
    from distshap.serve import serve

    return serve([f"m={path}"], client=client, backend=args.kernel_backend, port=0,
                 max_batch_rows=args.max_batch_rows, max_queue_rows=1 << 24,
                 request_timeout=600, **kwargs)  # fmt: skip


def _peers(args, path: str, booster) -> list[tuple[str, object]]:
    """The servers every distshap server is compared with, started: the baseline, and the
    floor (the same front, batches whose values are zeros made without work)."""
    from distshap.serve import ExplanationServer, ServeOptions
    from distshap.serve.registry import Registry, parse_model_spec

    out: list[tuple[str, object]] = []
    if not args.no_baseline and not args.front_only:
        registry = Registry.from_specs([parse_model_spec(f"m={path}")])
        opts = ServeOptions(port=0, max_batch_rows=1, max_wait=0.0, max_queue_rows=1 << 24,
                            request_timeout=600)  # fmt: skip
        out.append(("baseline", ExplanationServer(registry, XGBoostExecutor(booster, 8), opts)))
    if not args.no_floor:
        registry = Registry.from_specs([parse_model_spec(f"m={path}")], backend="cpu")
        features = next(iter(registry.models.values())).num_features
        opts = ServeOptions(port=0, max_batch_rows=args.max_batch_rows, max_queue_rows=1 << 24,
                            max_wait=args.max_wait_ms[0] / 1e3, request_timeout=600)  # fmt: skip
        floor = ExplanationServer(registry, NullExecutor(features), opts)
        out += [("floor/infer", floor), ("floor/ready", floor)]
    for server in {id(server): server for _, server in out}.values():
        server.start()
    return out


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


def _call_us(path: str, X: np.ndarray, n: int, backend: str) -> tuple[float, float]:
    """Microseconds of one warm ``TreeExplainer.shap_values`` call on ``n`` rows, median of
    31: on this thread, and handed to a pool thread and back (``submit(...).result()``), as a
    server's executor runs it."""
    from distshap import TreeExplainer

    explainer = TreeExplainer(path, layout="xgboost", backend=backend)
    rows = np.ascontiguousarray(X[np.arange(n) % len(X)])
    out = []
    with ThreadPoolExecutor(1) as pool:
        for call in (lambda: explainer.shap_values(rows),
                     lambda: pool.submit(explainer.shap_values, rows).result()):  # fmt: skip
            call()
            call()  # compiled, uploaded, the pool's thread started
            times = []
            for _ in range(31):
                t0 = time.perf_counter()
                call()
                times.append(time.perf_counter() - t0)
            out.append(1e6 * statistics.median(times))
    return out[0], out[1]


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def _optional_ints(text: str) -> list[int | None]:
    return [None if x == "auto" else int(x) for x in text.split(",") if x]


def _cells(text: str) -> list[tuple[int, int]]:
    return [tuple(int(v) for v in x.split("x")) for x in text.split(",") if x]


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
    parser.add_argument("--max-wait-ms", type=lambda t: [float(x) for x in t.split(",") if x],
                        default=[2.0], help="ms a request waits for a batch to fill while "
                        "one runs (default 2; not with device processes: they merge what "
                        "waits); 2,0: a server each")  # fmt: skip
    parser.add_argument("--inline-rows", type=_optional_ints, default=[None],
                        help="batches of at most this many rows run on a server's loop when "
                        "nothing else runs (default: the server's, 64; 0: every batch on the "
                        "executor's thread); 0,64: a server each")  # fmt: skip
    parser.add_argument("--slots", type=_optional_ints, default=[None],
                        help="--backend local, without device processes: batches run at once "
                        "in each process that runs them (default 1); 1,2,3: a server "
                        "each")  # fmt: skip
    parser.add_argument("--in-flight", type=_optional_ints, default=[None],
                        help="with device processes: batches each front keeps in flight on "
                        "each device process (default 4); 2,4: a server each")  # fmt: skip
    parser.add_argument("--cells", type=_cells, default=None,
                        help="CxN,...: only these concurrency x rows cells (instead of the "
                        "grid of --concurrency and --rows)")  # fmt: skip
    parser.add_argument("--device-processes", type=_optional_ints, default=[None],
                        help="with several --processes: processes running every batch, one "
                        "a GPU (default auto: one a visible GPU on a GPU backend, none on "
                        "CPU); 0: each process runs its own; 0,1: a server each",
                        )  # fmt: skip
    parser.add_argument("--processes", type=_ints, default=[1],
                        help="server processes of the distshap server; several (1,4): one "
                        "server for each, in the same run")  # fmt: skip
    parser.add_argument("--warm", type=float, default=3.0,
                        help="seconds of a distshap cell's load before it is measured")  # fmt: skip
    parser.add_argument("--max-inflight-rows", type=int, default=1 << 20)
    parser.add_argument("--inproc-rows", type=int, default=100_000)
    parser.add_argument("--client-procs", type=int, default=max(1, min(8, os.cpu_count() // 2)),
                        help="processes of the load generator")  # fmt: skip
    parser.add_argument("--no-baseline", action="store_true")
    parser.add_argument("--no-floor", action="store_true",
                        help="no floor rows (the front with batches of zeros made without "
                        "work, and GET /v2/health/ready)")  # fmt: skip
    parser.add_argument(
        "--front-only",
        action="store_true",
        help="only the floor: the front with batches of zeros made without work",
    )
    parser.add_argument("--front-cpu", type=int, metavar="N", default=0,
                        help="only the front's CPU microseconds a request, over N requests fed "
                        "without sockets (per --rows)")  # fmt: skip
    parser.add_argument("--pipe-cpu", type=int, metavar="N", default=0,
                        help="only a front's CPU and wall microseconds a batch's round trip "
                        "to a device process (values of zeros), over N batches (per --rows)",
                        )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="one JSON record per line")
    args = parser.parse_args(argv)
    if args.pipe_cpu:
        for n in args.rows:
            cpu, wall = pipe_cpu(n, args.pipe_cpu)
            print(f"pipe to a device process, {n}-row batches: {cpu:.1f} us of the front's CPU, "
                  f"{wall:.1f} us wall a round trip", flush=True)  # fmt: skip
        return

    import tempfile

    from benchmarks.shapes import make_data, train_model

    name, size = args.shape.rsplit("-", 1)
    booster = train_model(name, size)
    X = np.ascontiguousarray(make_data(name, 20_000)[0], dtype=np.float32)
    tmp = tempfile.TemporaryDirectory()
    path = f"{tmp.name}/model.ubj"
    booster.save_model(path)
    if args.front_cpu:
        for n in args.rows:
            request = _request(X[np.arange(n) % len(X)], "localhost")
            us = sorted(front_cpu(path, request, NullExecutor(X.shape[1]), args.front_cpu)
                        for _ in range(3))  # fmt: skip
            print(f"front CPU, {n}-row binary requests: {us[1]:.1f} us a request "
                  f"(median of {', '.join(f'{u:.1f}' for u in us)})", flush=True)  # fmt: skip
        return
    inproc = (
        float("nan")
        if args.front_only
        else _in_process(path, X, args.inproc_rows, args.kernel_backend)
    )
    cells = args.cells or [(c, n) for c in args.concurrency for n in args.rows
                           if c * n <= args.max_inflight_rows]  # fmt: skip
    client = None
    if args.backend == "dask" and not args.front_only:
        from distshap.cluster import start_cluster

        client = start_cluster(n_workers=args.workers, dashboard_address=None)
    print(f"# {args.shape}, backend {args.backend}, kernels {args.kernel_backend}, "
          f"{args.client_procs} client process(es); in-process TreeExplainer.shap_values "
          f"({args.inproc_rows} rows): {inproc:,.0f} rows/s", flush=True)  # fmt: skip
    for n in [] if args.front_only else sorted({n for _, n in cells if n <= 1000}):
        here, pooled = _call_us(path, X, n, args.kernel_backend)
        print(f"# in-process call of {n} row(s): {here:,.0f} us on the calling thread, "
              f"{pooled:,.0f} us through a pool thread", flush=True)  # fmt: skip
    print(f"{'server':<24} {'conc':>5} {'rows':>6} {'requests':>9} {'errors':>6} {'p50 ms':>8} "
          f"{'p99 ms':>8} {'rows/s':>11} {'of in-proc':>10}", flush=True)  # fmt: skip
    results = []
    with multiprocessing.get_context("spawn").Pool(args.client_procs) as pool:
        for label, kwargs in [] if args.front_only else _variants(args):
            try:  # one server at a time: the others' processes do not share the machine
                server = _start(args, path, client, kwargs)
            except (ValueError, RuntimeError) as err:  # the others still run
                print(f"# {label} not run: {err}", flush=True)
                continue
            try:
                for concurrency, n in cells:
                    results.append(_row(args, pool, label, server, X, concurrency, n, inproc))
            finally:
                server.drain()
        peers = _peers(args, path, booster)
        for label, server in peers:
            for concurrency, n in cells:
                if label != "floor/ready" or n == min(m for c, m in cells if c == concurrency):
                    results.append(_row(args, pool, label, server, X, concurrency, n, inproc))
        for server in {id(server): server for _, server in peers}.values():
            server.drain()
    if client is not None:
        client.close()
    tmp.cleanup()
    if not args.json:
        _table(results, cells)


def _row(args, pool, label: str, server, X, concurrency: int, n: int, inproc: float) -> dict:
    """One cell of the grid for one server, printed (with distshap's stages) -> its record.

    ``floor/ready`` sends ``GET /v2/health/ready`` (no body, no batch) instead of an infer."""
    rows = X[:n] if n <= len(X) else X[np.arange(n) % len(X)]
    host = urlparse(server.url).netloc
    request = _request(rows, host)
    if label == "floor/ready":
        request, n = f"GET /v2/health/ready HTTP/1.1\r\nHost: {host}\r\n\r\n".encode(), 1
    if label == "baseline":  # warm: connections
        _cell(pool, args.client_procs, server.url, _request(rows[:1], host), 1, 1, 0.2)
    else:  # the same load a moment first: batch sizes and device buffers as they will be
        _cell(pool, args.client_procs, server.url, request, n, concurrency, args.warm)
    before = _stages(server)
    cell = _cell(pool, args.client_procs, server.url, request, n, concurrency, args.duration)
    r = {"server": label, "concurrency": concurrency, "rows": n, **cell}
    r["of_in_process"] = r["rows_per_s"] / inproc
    if label not in ("baseline", "floor/ready"):
        r["stages_us"] = _stage_line(before, _stages(server), cell["seconds"])
    if args.json:
        print(json.dumps(r), flush=True)
        return r
    print(f"{label:<24} {concurrency:>5} {n:>6} {r['requests']:>9} {r['errors']:>6} "
          f"{r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f} {r['rows_per_s']:>11,.0f} "
          f"{r['of_in_process']:>10.1%}", flush=True)  # fmt: skip
    if "stages_us" in r:
        print("#   us: " + ", ".join(f"{k} {v:,.0f}" for k, v in r["stages_us"].items()
                                    if not k.endswith(("_batch", "_call", "_share")))
              + f"; {r['stages_us']['rows_per_batch']:,.0f} rows "
              f"({r['stages_us']['requests_per_batch']:.1f} requests) a batch"
              + (f", {r['stages_us']['rows_per_call']:,.0f} rows a device call"
                 if "rows_per_call" in r["stages_us"] else "")
              + (f", device processes busy {r['stages_us']['device_busy_share']:.0%}"
                 if "device_busy_share" in r["stages_us"] else "")
              + f"; load generator {r['client_cpu_us']:,.0f} us a request, busiest load "
              f"process {r['client_busiest']:.0%} of a core",
              flush=True)  # fmt: skip
    return r


def _table(results: list[dict], cells: list[tuple[int, int]]) -> None:
    """Every server's rows/s (p99 ms) by cell, one line a server (``floor/ready``: requests/s,
    under each of its concurrency's cells), then each server's ratio to the baseline (of
    requests/s for ``floor/ready``)."""
    labels = list(dict.fromkeys(r["server"] for r in results))
    got = {(r["server"], r["concurrency"], r["rows"]): r for r in results}
    print("\n# rows/s (p99 ms) by concurrency x rows; then x the baseline's rows/s")
    print(f"{'server':<24} " + " ".join(f"{f'{c} x {n}':>20}" for c, n in cells))
    for label in labels:
        line, ratios = [], []
        for c, n in cells:
            r = got.get((label, c, n)) or got.get((label, c, 1) if label == "floor/ready" else 0)
            base = got.get(("baseline", c, n))
            line.append(f"{r['rows_per_s']:>11,.0f} ({r['p99_ms']:>5.1f})" if r else "")
            per = n if label == "floor/ready" else 1  # requests/s against the baseline's
            ratio = per * r["rows_per_s"] / base["rows_per_s"] if r and base else None
            ratios.append("" if ratio is None else f"{ratio:.1f}x")
        print(f"{label:<24} " + " ".join(f"{x:>20}" for x in line))
        if any(ratios) and label != "baseline":
            print(f"{'':<24} " + " ".join(f"{x:>20}" for x in ratios))


if __name__ == "__main__":
    sys.exit(main())
