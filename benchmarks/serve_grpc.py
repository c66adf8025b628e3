"""The server's gRPC endpoint under load, beside its HTTP endpoint on the same server.

One distshap server (:func:`distshap.serve.serve` with ``grpc_port``; ``--processes N``: a
group of N front processes, with one device process per GPU on a GPU) answers, for each
``--cells`` cell (concurrency x rows), the same FP32 rows by HTTP (the binary tensor extension,
:mod:`benchmarks.serve`'s load generator) and by gRPC (``ModelInfer`` with
``raw_input_contents``, as ``tritonclient.grpc`` sends it), one protocol after the other, each
for ``--warm`` then ``--duration`` seconds. Each concurrent client has a connection of its own
(for gRPC, a channel with its own subchannel), sending its next request when its answer is in;
the load runs in ``--client-procs`` processes. Reported: p50 / p99 latency and rows/s of each
protocol, and gRPC's rows/s over HTTP's; every answer's status is checked (errors counted) and
the first gRPC answer of each cell is compared, bit for bit, with ``TreeExplainer``'s values
in this process.

Usage::

    python -m benchmarks.serve_grpc --kernel-backend cpu --cells 1x1,16x100 --duration 2
    python -m benchmarks.serve_grpc --kernel-backend cuda --cells 1x1,16x100,256x100 \\
        --processes 6 --client-procs 12                                        # one GPU
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import statistics
import time

import numpy as np

from benchmarks.serve import _cell, _cells, _request

_PATH = "/inference.GRPCInferenceService/ModelInfer"


def _grpc_request(rows: np.ndarray) -> bytes:
    """A serialised ``ModelInferRequest`` for ``rows`` (raw contents, SHAP values)."""
    from distshap.serve.grpc_messages import messages

    request = messages["ModelInferRequest"](model_name="m")
    request.inputs.add(name="rows", datatype="FP32", shape=list(rows.shape))
    request.outputs.add(name="shap_values")
    request.raw_input_contents.append(np.ascontiguousarray(rows, dtype="<f4").tobytes())
    return request.SerializeToString()


async def _client(address: str, request: bytes, stop: float, out: list) -> None:
    """Send requests on one channel of its own until ``stop``; latencies (or -1: an error)."""
    import grpc
    from grpc import aio

    options = [("grpc.use_local_subchannel_pool", 1), ("grpc.max_receive_message_length", -1)]
    async with aio.insecure_channel(address, options=options) as channel:
        call = channel.unary_unary(_PATH)  # bytes in, bytes out
        while time.perf_counter() < stop:
            t0 = time.perf_counter()
            try:
                await call(request)
                out.append(time.perf_counter() - t0)
            except grpc.RpcError:
                out.append(-1.0)


def _generate(address: str, request: bytes, clients: int, begin: float, seconds: float):
    """Child process: ``clients`` gRPC clients from wall time ``begin`` for ``seconds`` ->
    latencies, first start and last answer (wall), this process's CPU seconds meanwhile."""
    out: list[float] = []

    async def run() -> tuple[float, float, float]:
        await asyncio.sleep(max(0.0, begin - time.time()))
        cpu, start = time.process_time(), time.time()
        stop = time.perf_counter() + seconds
        await asyncio.gather(*(_client(address, request, stop, out) for _ in range(clients)))
        return start, time.time(), time.process_time() - cpu

    start, end, cpu = asyncio.run(run())
    return out, start, end, cpu


def _grpc_cell(pool, procs: int, address: str, request: bytes, n: int, concurrency: int,
               seconds: float) -> dict:  # fmt: skip
    """The gRPC twin of :func:`benchmarks.serve._cell`."""
    shares = [concurrency // procs + (i < concurrency % procs) for i in range(procs)]
    begin = time.time() + 0.5
    parts = pool.starmap(_generate, [(address, request, c, begin, seconds) for c in shares if c])
    samples = [x for out, *_ in parts for x in out]
    ok = sorted(s for s in samples if s >= 0)
    elapsed = max(p[2] for p in parts) - min(p[1] for p in parts)
    return {
        "requests": len(ok),
        "errors": len(samples) - len(ok),
        "p50_ms": 1e3 * statistics.median(ok) if ok else float("nan"),
        "p99_ms": 1e3 * ok[min(len(ok) - 1, int(0.99 * len(ok)))] if ok else float("nan"),
        "rows_per_s": len(ok) * n / elapsed,
        "client_cpu_us": 1e6 * sum(p[3] for p in parts) / max(1, len(samples)),
    }


def _same_bits(address: str, rows: np.ndarray, path: str, backend: str) -> bool:
    """Whether one gRPC answer for ``rows`` equals ``TreeExplainer``'s values bit for bit."""
    import grpc

    from distshap import TreeExplainer
    from distshap.serve.grpc_messages import messages

    with grpc.insecure_channel(address) as channel:
        raw = channel.unary_unary(_PATH)(_grpc_request(rows), timeout=60)
    response = messages["ModelInferResponse"].FromString(raw)
    got = np.frombuffer(response.raw_output_contents[0], dtype="<f4")
    want = TreeExplainer(path, layout="xgboost", backend=backend).shap_values(rows)
    return got.tobytes() == np.ascontiguousarray(want, dtype="<f4").tobytes()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="cal_housing-med", help="NAME-SIZE (benchmarks.shapes)")
    parser.add_argument("--kernel-backend", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--cells", type=_cells, default=[(1, 1), (16, 100), (256, 100)])
    parser.add_argument("--processes", type=int, default=1, help="front processes")
    parser.add_argument("--duration", type=float, default=3.0, help="measured seconds a cell")
    parser.add_argument("--warm", type=float, default=2.0, help="seconds of load before it")
    parser.add_argument("--client-procs", type=int, default=4)
    args = parser.parse_args(argv)

    import tempfile

    from benchmarks.shapes import make_data, train_model
    from distshap.serve import serve

    name, size = args.shape.rsplit("-", 1)
    X = np.ascontiguousarray(make_data(name, 20_000)[0], dtype=np.float32)
    tmp = tempfile.TemporaryDirectory()
    path = f"{tmp.name}/model.ubj"
    train_model(name, size).save_model(path)
    server = serve([f"m={path}"], backend=args.kernel_backend, port=0, grpc_port=0,
                   processes=args.processes, max_queue_rows=1 << 24,
                   request_timeout=600)  # fmt: skip
    host = server.url.removeprefix("http://").rsplit(":", 1)[0]
    print(f"# {args.shape}, kernels {args.kernel_backend}, {args.processes} front process(es), "
          f"{args.client_procs} client process(es); HTTP "
          f"{server.url}, gRPC {server.grpc_address}", flush=True)  # fmt: skip
    print(f"{'protocol':<8} {'conc':>5} {'rows':>6} {'requests':>9} {'errors':>6} "
          f"{'p50 ms':>8} {'p99 ms':>8} {'rows/s':>12} {'client us':>9}", flush=True)  # fmt: skip
    ctx = multiprocessing.get_context("spawn")
    try:
        with ctx.Pool(args.client_procs) as pool:
            for concurrency, n in args.cells:
                rows = X[np.arange(n) % len(X)]
                same = _same_bits(server.grpc_address, rows, path, args.kernel_backend)
                rates = {}
                for protocol in ("http", "grpc"):
                    for seconds in (args.warm, args.duration):
                        if protocol == "http":
                            cell = _cell(pool, args.client_procs, server.url,
                                         _request(rows, host), n, concurrency, seconds)  # fmt: skip
                        else:
                            cell = _grpc_cell(pool, args.client_procs, server.grpc_address,
                                              _grpc_request(rows), n, concurrency,
                                              seconds)  # fmt: skip
                    rates[protocol] = cell["rows_per_s"]
                    print(f"{protocol:<8} {concurrency:>5} {n:>6} {cell['requests']:>9} "
                          f"{cell['errors']:>6} {cell['p50_ms']:>8.2f} {cell['p99_ms']:>8.2f} "
                          f"{cell['rows_per_s']:>12,.0f} {cell['client_cpu_us']:>9.0f}",
                          flush=True)  # fmt: skip
                print(f"#   gRPC / HTTP {rates['grpc'] / rates['http']:.2f}x; gRPC answer "
                      f"bit-identical to in-process: {same}", flush=True)  # fmt: skip
    finally:
        server.drain()


if __name__ == "__main__":
    main()
