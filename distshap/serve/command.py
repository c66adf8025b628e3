"""``distshap serve`` and :func:`serve`: registry, executor and server put together.

The command registers the models given by ``--model``, starts (or connects to) a Dask cluster
and ships every model to every worker before it listens (``--local``: batches run in this
process instead), then serves until SIGTERM or Ctrl-C, which drain it: requests in flight are
answered, new ones refused, and the command exits 0. ``--processes N`` serves from N processes
sharing the port (:class:`~distshap.serve.group.ServerGroup`): with ``--local`` on a GPU they
are fronts (HTTP, decoding, batching, encoding) and one device process per GPU runs every
batch (``--device-processes`` sets how many; 0: each process runs its own); one process that
exits on its own stops the group, and the command exits 1.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Any

from distshap.serve.group import ServerGroup, build_server
from distshap.serve.registry import ModelSpec, parse_model_spec
from distshap.serve.server import ExplanationServer, ServeOptions

__all__ = ["TOKEN_VARIABLE", "add_parser", "run_command", "serve"]

#: The environment variable read for the bearer token when ``--token`` is not given.
TOKEN_VARIABLE = "DISTSHAP_SERVE_TOKEN"


def serve(
    models: Sequence[str | ModelSpec],
    *,
    client: Any = None,
    backend: str = "auto",
    start: bool = True,
    slots: int | None = None,
    processes: int = 1,
    device_processes: int | None = None,
    in_flight: int | None = None,
    **options: Any,
) -> ExplanationServer | ServerGroup:
    """Start an explanation server (in a background thread) over ``models``.

    Parameters
    ----------
    models : sequence of str or ModelSpec
        ``"NAME[:VERSION]=PATH[,background=FILE][,output=raw|probability]"`` or specs.
    client : distributed.Client, optional
        Run batches on this client's workers, each model resident there. Default: in this
        process.
    backend : {"auto", "cpu", "cuda"}
        Kernel backend of the explainers.
    start : bool
        Serve in a background thread now (else call ``serve_forever``).
    slots : int, optional
        Batches run at once in each server process that runs its own (without ``client`` or
        device processes; default 1): 2 lets a GPU's kernels overlap the host work of the next
        batch, 1 merges more of the waiting batches into each call. A device process runs one
        call at a time.
    processes : int
        Server processes sharing the port (> 1: a :class:`~distshap.serve.group.ServerGroup`
        of front processes; ``start`` then starts the processes).
    device_processes : int, optional
        With ``processes`` (without ``client``): processes that run every front's batches,
        one GPU each; 0: each front runs its own batches on its own copy of the models.
        Default: one per visible GPU on a GPU backend, 0 on CPU (and with ``client``). Given
        > 0 with ``processes=1``: one front and the device processes.
    in_flight : int, optional
        With device processes: batches each front keeps in flight on each device process
        (default 4; more lets a device process merge more of them into one call).
    **options
        Fields of :class:`~distshap.serve.options.ServeOptions` (``port=0``: any free port;
        ``grpc_port``: the gRPC endpoint too).

    Returns
    -------
    ExplanationServer or ServerGroup
        ``.url`` is its address; ``.drain()`` stops it.

    Raises
    ------
    ValueError
        ``processes`` < 1, or > 1 with a cluster other processes cannot reach;
        ``in_flight`` without device processes, ``slots`` with them.
    OSError
        A port that cannot be listened on (taken, or not this host's address).
    """
    specs = [parse_model_spec(m) if isinstance(m, str) else m for m in models]
    if not isinstance(processes, int) or isinstance(processes, bool) or processes < 1:
        raise ValueError(f"processes={processes!r}: give the number of server processes, >= 1")
    if processes > 1 or device_processes:
        scheduler = None if client is None else client.scheduler.address
        if scheduler is not None and not scheduler.startswith(("tcp://", "tls://", "ucx://")):
            raise ValueError(
                f"processes={processes} with a cluster at {scheduler!r}: other processes "
                "cannot reach it; start the cluster with worker processes (or use processes=1)"
            )
        group = ServerGroup(specs, processes, ServeOptions(**options), backend=backend,
                            slots=slots, scheduler=scheduler,
                            device_processes=device_processes,
                            in_flight=in_flight)  # fmt: skip
        return group.start() if start else group
    if in_flight is not None:
        raise ValueError(f"in_flight={in_flight!r}: a setting of device processes, and one "
                         "process has none; give device_processes >= 1 (or processes > 1 on a "
                         "GPU), or leave it out")  # fmt: skip
    server = build_server(specs, ServeOptions(**options), client=client, backend=backend,
                          slots=1 if slots is None else slots)  # fmt: skip
    if start:
        try:
            server.start()
        except BaseException:
            server.drain()  # its socket, port and executor given back
            raise
    return server


def add_parser(sub: Any) -> None:
    """Register the ``serve`` subcommand on the CLI's subparsers."""
    p = sub.add_parser(
        "serve",
        help="serve explanations over HTTP and gRPC (the Open Inference Protocol, KServe v2 / "
        "Triton)",
        description="Serve SHAP values of registered models over HTTP (and gRPC with "
        "--grpc-port): the Open Inference Protocol (KServe v2 / Triton; JSON and binary "
        "tensors) with dynamic batching. Batches "
        "run on a Dask cluster with every model resident on every worker (GPU workers when GPUs "
        "are visible, CPU workers otherwise; --scheduler for a running cluster), or in this "
        "process with --local. SIGTERM drains: requests in flight are answered, then exit 0.",
    )
    p.add_argument(
        "--model", action="append", required=True, metavar="SPEC",
        help="NAME[:VERSION]=PATH[,background=FILE][,output=raw|probability]: a model file "
        "(XGBoost .json/.ubj, LightGBM .txt) and optionally background rows (Parquet / CSV / "
        ".npy) for interventional values; repeatable",
    )  # fmt: skip
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default loopback)")
    p.add_argument("--port", type=int, default=8000, help="port (0: any free one; default 8000)")
    p.add_argument("--grpc-port", type=int, metavar="PORT",
                   help="also serve the protocol over gRPC on this port (KServe v2 / Triton "
                   "gRPC clients; 0: any free port; default: HTTP only)")  # fmt: skip
    p.add_argument("--token", help=f"bearer token callers must send (default ${TOKEN_VARIABLE})")
    p.add_argument("--insecure", action="store_true",
                   help="allow a non-loopback --host without a token")  # fmt: skip
    where = p.add_mutually_exclusive_group()
    where.add_argument("--local", action="store_true", help="run batches in this process")
    where.add_argument("--scheduler", metavar="ADDR", help="address of a running Dask scheduler")
    p.add_argument("--gpus", type=int, help="local cluster with N GPU workers (0: CPU workers)")
    p.add_argument("--workers", type=int, help="local workers (GPUs: first N; CPU: default 1)")
    p.add_argument("--backend", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--processes", type=int, default=1,
                   help="server processes sharing the port: each reads, decodes, batches and "
                   "encodes on one core. With --local on a GPU they send their batches to one "
                   "device process per GPU, which holds the models and merges batches (no "
                   "CUDA context in the server processes); on CPU (or --device-processes 0) "
                   "each runs its own batches on its own copy of the models; with a cluster "
                   "each is its own client (default 1)")  # fmt: skip
    p.add_argument("--device-processes", type=int, metavar="N",
                   help="with --local: processes that run every batch, one GPU each (default: "
                   "one per visible GPU on a GPU backend when --processes > 1, none on CPU; "
                   "0: each server process runs its own batches)")  # fmt: skip
    p.add_argument("--slots", type=int,
                   help="with --local, without device processes: batches run at once in each "
                   "server process (2 overlaps a GPU's kernels with the next batch's host work, "
                   "1 merges more batches a call; default 1); a device process runs one call "
                   "at a time")  # fmt: skip
    p.add_argument("--in-flight", type=int, metavar="N",
                   help="with device processes: batches each server process keeps in flight on "
                   "each device process (default 4; more lets a device process merge more of "
                   "them into one call)")  # fmt: skip
    d = ServeOptions()
    for flag, kind, default, text in (
        ("--max-batch-rows", int, d.max_batch_rows, "rows of a batch at most"),
        ("--max-wait-ms", float, d.max_wait * 1e3, "ms a request waits for a batch to fill"),
        ("--inline-rows", int, d.inline_rows, "rows of a batch run on the event loop (0: none)"),
        ("--max-queue-rows", int, d.max_queue_rows, "rows queued per model and output (then 503)"),
        ("--max-request-rows", int, d.max_request_rows, "rows of one request (then 413)"),
        ("--max-body-mb", float, d.max_body_bytes / 2**20, "MiB of one request body (then 413)"),
        ("--request-timeout", float, d.request_timeout, "seconds to answer (then 504)"),
        ("--drain-timeout", float, d.drain_timeout, "seconds SIGTERM waits for requests"),
    ):
        p.add_argument(flag, type=kind, default=default, help=f"{text} (default {default:g})")
    p.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING"),
                   help="DEBUG logs one JSON line per request")  # fmt: skip
    p.set_defaults(func=run_command)


def _options(args: argparse.Namespace) -> dict:
    return {
        "host": args.host,
        "port": args.port,
        "grpc_port": args.grpc_port,
        "token": args.token or os.environ.get(TOKEN_VARIABLE) or None,
        "insecure": args.insecure,
        "max_batch_rows": args.max_batch_rows,
        "max_wait": args.max_wait_ms / 1e3,
        "inline_rows": args.inline_rows,
        "max_queue_rows": args.max_queue_rows,
        "max_request_rows": args.max_request_rows,
        "max_body_bytes": int(args.max_body_mb * 2**20),
        "request_timeout": args.request_timeout,
        "drain_timeout": args.drain_timeout,
    }


def _client(args: argparse.Namespace) -> Any:
    from distshap.cluster import start_cluster

    if args.local:
        return None
    if args.scheduler:
        return start_cluster(address=args.scheduler)
    gpus: Any = None if args.gpus is None else (False if args.gpus == 0 else args.gpus)
    return start_cluster(gpus=gpus, n_workers=args.workers, dashboard_address=None)


def run_command(args: argparse.Namespace) -> int:
    """``distshap serve``: serve until SIGTERM / Ctrl-C, then drain and return 0."""
    import logging

    logging.basicConfig(level=args.log_level, format="%(asctime)s %(name)s %(message)s")
    options = _options(args)
    specs = [parse_model_spec(m) for m in args.model]
    if args.device_processes and not args.local:
        raise ValueError(f"--device-processes {args.device_processes} runs batches in "
                         "processes of this host: add --local (without it they run on Dask "
                         "workers)")  # fmt: skip
    client = _client(args)
    try:
        server = serve(specs, client=client, backend=args.backend, slots=args.slots,
                       processes=args.processes, device_processes=args.device_processes,
                       in_flight=args.in_flight, **options)  # fmt: skip
        stop = lambda *_: threading.Thread(target=server.drain, daemon=True).start()  # noqa: E731
        previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
        # every endpoint listens by now: the line's addresses take calls at once
        print(f"distshap serve: {_where(server, specs, client)}", file=sys.stderr, flush=True)
        try:
            server.serve_forever()  # waits; the main thread stays free for signals
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        failure = getattr(server, "failure", None)
        if failure:
            print(f"distshap serve: {failure}; the others drained, stopped", file=sys.stderr,
                  flush=True)  # fmt: skip
            return 1
        print("distshap serve: drained, stopped", file=sys.stderr, flush=True)
    finally:
        if client is not None:
            client.close()
    return 0


def _where(server: Any, specs: list[ModelSpec], client: Any) -> str:
    """The line saying what serves where."""
    names = ", ".join(s.name for s in specs)
    grpc = server.grpc_address
    grpc = "" if grpc is None else f"; gRPC at {grpc}"
    if isinstance(server, ServerGroup):
        runs = "each in its own process" if client is None else "on the cluster's workers"
        if server.device_pids:
            devices = ", ".join(str(p) for p in server.device_pids)
            runs = f"batches on {len(server.device_pids)} device process(es), pids {devices}"
        pids = ", ".join(str(p) for p in server.pids)
        return f"{names} at {server.url} ({server.processes} processes, pids {pids}; {runs}){grpc}"
    where = "in this process" if client is None else f"on {server.executor.workers()} worker(s)"
    return f"{names} at {server.url} ({where}){grpc}"
