"""The explanation server: the Open Inference Protocol over HTTP, on the standard library.

Routes: ``GET /v2/health/live``, ``/v2/health/ready``, ``/v2``, ``/v2/models/{name}[/versions/
{v}]`` (metadata), ``.../ready``, ``POST .../infer`` and ``GET /metrics`` (Prometheus). Each
infer request is validated (400 naming the field, 404 for an unknown model, 413 beyond the size
limits), queued per model and output (:class:`~distshap.serve.batching.BatchQueue`; a full queue
is 503 with ``Retry-After``), and answered within ``request_timeout`` (504 otherwise). A
non-loopback address needs a bearer token or ``insecure=True``. :meth:`ExplanationServer.drain`
(SIGTERM under :func:`run`) refuses new requests, finishes those in flight and stops.
"""

from __future__ import annotations

import concurrent.futures as cf
import hmac
import ipaddress
import json
import logging
import re
import socket
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from distshap.serve.backends import NoWorkerError
from distshap.serve.batching import BatchQueue, QueueClosed, QueueFull
from distshap.serve.metrics import Metrics
from distshap.serve.protocol import (
    HEADER_LENGTH,
    OutputSpec,
    ProtocolError,
    encode_response,
    parse_infer,
)
from distshap.serve.registry import Registry

__all__ = ["ExplanationServer", "ServeOptions"]

log = logging.getLogger("distshap.serve")

_MODEL_PATH = re.compile(r"^/v2/models/([^/]+)(?:/versions/([^/]+))?(/ready|/infer)?$")


@dataclass(frozen=True)
class ServeOptions:
    """Where the server listens, who may call it, and its limits.

    Attributes
    ----------
    host, port : str, int
        Address to listen on (port 0: any free port). Loopback by default.
    token : str or None
        Bearer token every request but the health checks must carry.
    insecure : bool
        Allow a non-loopback ``host`` without a token.
    max_batch_rows : int
        Rows of a batch at most.
    max_wait : float
        Seconds a request waits for others to join its batch at most.
    max_queue_rows : int
        Rows waiting per model and output at most (then 503 + Retry-After).
    max_request_rows, max_body_bytes : int
        Rows and body bytes of one request at most (then 413).
    request_timeout : float
        Seconds from receipt to answer at most (then 504).
    drain_timeout : float
        Seconds :meth:`ExplanationServer.drain` waits for requests in flight.
    retry_after : int
        The ``Retry-After`` seconds of a 503.
    """

    host: str = "127.0.0.1"
    port: int = 8000
    token: str | None = None
    insecure: bool = False
    max_batch_rows: int = 16384
    max_wait: float = 0.002
    max_queue_rows: int = 262144
    max_request_rows: int = 100_000
    max_body_bytes: int = 256 << 20
    request_timeout: float = 30.0
    drain_timeout: float = 30.0
    retry_after: int = 1


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True  # an idle keep-alive connection does not hold the process
    request_queue_size = 1024  # the listen backlog: many clients connect at once
    allow_reuse_address = True
    app: ExplanationServer


class _Reply(Exception):
    """An answer other than 200, raised from the routing: status, message, headers."""

    def __init__(self, status: int, message: str, headers: dict | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as protocol clients expect
    server: _HTTPServer
    timeout = 60  # seconds an idle keep-alive connection is kept

    def setup(self) -> None:
        super().setup()
        # headers and body are two writes: without this, Nagle's algorithm and the client's
        # delayed ACK hold the body back
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base's name)
        log.debug("http %s", format % args)

    def do_GET(self) -> None:  # noqa: N802 (the base class's name)
        self.server.app.handle(self, "GET")

    def do_POST(self) -> None:  # noqa: N802
        self.server.app.handle(self, "POST")

    def send(self, status: int, body: bytes, headers: dict) -> None:
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class ExplanationServer:
    """An explanation server over ``registry``'s models, running batches on ``executor``.

    Parameters
    ----------
    registry : Registry
    executor : InProcessExecutor or DaskExecutor
    options : ServeOptions

    Raises
    ------
    ValueError
        A non-loopback host without a token or ``insecure``.
    """

    def __init__(self, registry: Registry, executor: Any, options: ServeOptions) -> None:
        if not _is_loopback(options.host) and not options.token and not options.insecure:
            raise ValueError(
                f"listening on {options.host!r} (not loopback) needs a token: pass --token "
                "(or set DISTSHAP_SERVE_TOKEN), or --insecure to allow anyone on the network"
            )
        self.registry, self.executor, self.options = registry, executor, options
        self.metrics = Metrics()
        self.draining = False
        self._queues: dict[tuple, BatchQueue] = {}
        self._lock = threading.Lock()
        self._active = 0
        self._idle = threading.Condition(self._lock)
        self._thread: threading.Thread | None = None
        self._drained = threading.Event()
        self.httpd = _HTTPServer((options.host, options.port), _Handler)
        self.httpd.app = self
        self.metrics.gauge("distshap_serve_queue_rows", "rows waiting for a batch", self._depths)
        self.metrics.gauge("distshap_serve_workers", "workers connected",
                           lambda: {(): self.executor.workers()})  # fmt: skip
        self.metrics.gauge("distshap_serve_in_flight", "requests being answered",
                           lambda: {(): self._active})  # fmt: skip

    @property
    def url(self) -> str:
        """``http://host:port`` the server listens on."""
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> ExplanationServer:
        """Serve in a background thread; returns ``self``."""
        self._thread = threading.Thread(target=self._loop, name="distshap-serve",
                                        daemon=True)  # fmt: skip
        self._thread.start()
        return self

    def _loop(self) -> None:
        self.httpd.serve_forever(poll_interval=0.05)  # how soon a drain stops accepting

    def serve_forever(self) -> None:
        """Serve in this thread until :meth:`drain` (from another thread) stops it."""
        self._loop()
        self._drained.wait()

    def ready(self) -> bool:
        """Whether requests can run now (not draining, a worker connected)."""
        return not self.draining and self.executor.ready()

    def drain(self) -> None:
        """Refuse new requests, finish those in flight (``drain_timeout`` at most), stop."""
        if self.draining:
            self._drained.wait()
            return
        self.draining = True
        log.info("draining: %d request(s) in flight", self._active)
        self.httpd.shutdown()
        self.httpd.server_close()  # no new connections; those open are answered 503
        deadline = time.monotonic() + self.options.drain_timeout
        with self._idle:
            while self._active and time.monotonic() < deadline:
                self._idle.wait(0.05)
        for queue in list(self._queues.values()):
            queue.close(wait=False)
        self.executor.close()
        self._drained.set()

    # ----------------------------------------------------------------------------------------
    # requests
    # ----------------------------------------------------------------------------------------

    def handle(self, req: _Handler, method: str) -> None:
        """Answer one HTTP request (every answer goes through here)."""
        start = time.perf_counter()
        path = req.path.split("?", 1)[0].rstrip("/") or "/"
        with self._lock:
            self._active += 1
        info: dict[str, Any] = {"model": "", "output": "", "rows": 0}
        try:
            status, body, headers = 200, b"", {"Content-Type": "application/json"}
            try:
                body, headers = self._route(req, method, path, info)
            except _Reply as reply:
                status, body = reply.status, json.dumps({"error": reply.message}).encode()
                headers = {"Content-Type": "application/json", **reply.headers}
            if status == 413:
                req.close_connection = True
                headers["Connection"] = "close"
            self._record(method, path, status, info, time.perf_counter() - start)
            req.send(status, body, headers)
        finally:
            with self._idle:
                self._active -= 1
                self._idle.notify_all()

    def _record(self, method: str, path: str, status: int, info: dict, seconds: float) -> None:
        """Metrics and the debug line of one answer (before it is sent: clients see both)."""
        if path.endswith("/infer"):
            self.metrics.request(info["model"], info["output"], status, info["rows"], seconds)
        if log.isEnabledFor(logging.DEBUG):  # one structured line per request
            line = {"method": method, "path": path, "status": status, **info}
            log.debug(json.dumps({**line, "ms": round(seconds * 1e3, 3)}))

    def _check_token(self, req: _Handler, path: str) -> None:
        token = self.options.token
        if not token or path.startswith("/v2/health/"):
            return
        given = req.headers.get("Authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
            raise _Reply(
                401,
                "missing or wrong token: send the header 'Authorization: Bearer "
                "<token>' with the server's token",
                {"WWW-Authenticate": "Bearer"},
            )

    def _route(self, req: _Handler, method: str, path: str, info: dict) -> tuple[bytes, dict]:
        self._check_token(req, path)
        js = {"Content-Type": "application/json"}
        if method == "GET" and path == "/v2/health/live":
            return b"", js
        if method == "GET" and path == "/v2/health/ready":
            if not self.ready():
                raise _Reply(503, "not ready: " + self._why_not_ready())
            return b"", js
        if method == "GET" and path == "/v2":
            meta = {"name": "distshap", "version": _version(), "extensions": ["binary_tensor_data"]}
            return json.dumps(meta).encode(), js
        if method == "GET" and path == "/metrics":
            return self.metrics.render().encode(), {"Content-Type": "text/plain; version=0.0.4"}
        match = _MODEL_PATH.match(path)
        if match is None:
            raise _Reply(404, f"no route {method} {path}: see /v2/models/NAME/infer")
        name, version, action = match.groups()
        try:
            model = self.registry.get(name, version)
        except ProtocolError as err:
            raise _Reply(err.status, str(err)) from None
        info["model"] = name
        if method == "GET" and action is None:
            return json.dumps(model.metadata()).encode(), js
        if method == "GET" and action == "/ready":
            if not self.ready():
                raise _Reply(503, "not ready: " + self._why_not_ready())
            return b"", js
        if method == "POST" and action == "/infer":
            return self._infer(req, model, info)
        raise _Reply(405, f"{method} {path} is not served: use POST for /infer, GET otherwise")

    def _why_not_ready(self) -> str:
        return "the server is shutting down" if self.draining else "no worker is connected"

    def _read_body(self, req: _Handler) -> bytes:
        try:
            length = int(req.headers.get("Content-Length", ""))
        except ValueError:
            raise _Reply(411, "Content-Length is required: send the body with its length") from None
        if length > self.options.max_body_bytes:
            raise _Reply(
                413,
                f"the body has {length} bytes, more than the server's limit of "
                f"{self.options.max_body_bytes}: split the rows over several requests",
            )
        return req.rfile.read(length)

    def _infer(self, req: _Handler, model: Any, info: dict) -> tuple[bytes, dict]:
        opts = self.options
        deadline = time.monotonic() + opts.request_timeout
        if self.draining:  # a request begun before the drain is answered
            raise _Reply(503, "the server is shutting down", self._retry())
        body = self._read_body(req)
        try:
            parsed = parse_infer(body, req.headers.get(HEADER_LENGTH))
            specs = parsed.outputs or (OutputSpec("shap_values", {}, parsed.binary_default),)
            ks = _output_ks(model, specs, parsed.parameters)
        except ProtocolError as err:
            raise _Reply(err.status, str(err)) from None
        n, F = parsed.rows.shape
        info.update(rows=n, output=",".join(s.name for s in specs))
        if n > opts.max_request_rows:
            raise _Reply(
                413,
                f"inputs[0] has {n} rows, more than the server's limit of "
                f"{opts.max_request_rows}: split them over several requests",
            )
        if F != model.num_features:
            raise _Reply(
                400,
                f"inputs[0].shape: {F} features but model {model.name!r} expects "
                f"{model.num_features}: send the columns it was trained on, in order",
            )
        if not self.executor.ready():
            raise _Reply(503, "no worker is connected to run the request", self._retry())
        futures = []
        try:
            for spec, k in zip(specs, ks, strict=True):
                futures.append(self._queue(model, spec.name, k).put(parsed.rows))
        except (QueueFull, QueueClosed) as err:
            for f in futures:
                f.cancel()
            what = (
                "the server is shutting down"
                if isinstance(err, QueueClosed)
                else (f"the queue of {model.name!r} is full ({err}): retry after a second")
            )
            raise _Reply(503, what, self._retry()) from None
        outputs = self._collect(futures, specs, deadline)
        out_body, headers = encode_response(model.name, model.version, parsed.id, outputs)
        return out_body, headers

    def _collect(self, futures: list, specs: tuple, deadline: float) -> list:
        done, pending = cf.wait(futures, timeout=max(0.0, deadline - time.monotonic()))
        if pending:
            for f in pending:
                f.cancel()
            raise _Reply(
                504,
                f"the request took longer than the server's timeout of "
                f"{self.options.request_timeout} s: send fewer rows, or retry",
            )
        outputs = []
        for future, spec in zip(futures, specs, strict=True):
            err = future.exception()
            if isinstance(err, NoWorkerError):
                raise _Reply(503, str(err), self._retry())
            if err is not None:
                first = (str(err).strip().splitlines() or [""])[0]
                raise _Reply(500, f"{type(err).__name__}: {first}")
            for name, array in future.result().items():
                outputs.append((name, array, spec.binary))
        return outputs

    def _retry(self) -> dict:
        return {"Retry-After": str(self.options.retry_after)}

    def _queue(self, model: Any, output: str, k: int) -> BatchQueue:
        key = (model.name, output, k)
        queue = self._queues.get(key)
        if queue is None:
            with self._lock:
                queue = self._queues.get(key)
                if queue is None:
                    opts = self.options
                    queue = self._queues[key] = BatchQueue(
                        model.resident, output, k, self.executor, opts.max_batch_rows,
                        opts.max_wait, opts.max_queue_rows,
                        lambda rows, _n, m=model.name, o=output: self.metrics.batch(m, o, rows),
                    )  # fmt: skip
        return queue

    def _depths(self) -> dict:
        out: dict[tuple, float] = {}
        for (name, output, _k), queue in list(self._queues.items()):
            key = (("model", name), ("output", output))
            out[key] = out.get(key, 0) + queue.queued_rows
        return out


def _output_ks(model: Any, specs: tuple, parameters: dict) -> list[int]:
    """Each output's ``k`` (0 for outputs that take none); the request's ``k`` (as tritonclient
    sends parameters) applies to ``top_interactions`` unless the output gives its own."""
    unknown = sorted(set(parameters) - {"k"})
    if unknown:
        raise ProtocolError(
            400, f"parameters: unknown parameter {unknown[0]!r}; the request takes k (for "
            "top_interactions) and the protocol's binary_data_output",
        )  # fmt: skip
    if "k" in parameters and not any(s.name == "top_interactions" for s in specs):
        raise ProtocolError(400, "parameters.k applies to top_interactions: ask for that output")
    ks = []
    for spec in specs:
        params = spec.parameters
        if spec.name == "top_interactions":
            params = {**parameters, **params}
        ks.append(model.check_output(spec.name, params))
    return ks


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("distshap")
    except Exception:
        return "unknown"
