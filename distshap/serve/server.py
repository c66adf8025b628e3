"""The explanation server: the Open Inference Protocol over HTTP/1.1 on one asyncio event loop.

Routes: ``GET /v2/health/live``, ``/v2/health/ready``, ``/v2``, ``/v2/models/{name}[/versions/
{v}]`` (metadata), ``.../ready``, ``POST .../infer`` and ``GET /metrics`` (Prometheus). The
loop reads every connection (:mod:`~distshap.serve.connection`, no thread a connection),
checks an infer request's route, token and size from its head (404, 401 and 413 before the body
is read), decodes its rows with NumPy (400 naming the field), queues them per model and output
(:class:`~distshap.serve.batching.BatchQueue`; a full queue is 503 with ``Retry-After``) and
answers within ``request_timeout`` (504 otherwise); batches run on the executor's threads or
workers. A non-loopback address needs a bearer token or ``insecure=True``.
:meth:`ExplanationServer.drain` (SIGTERM under ``distshap serve``) stops accepting, answers the
requests begun (503 for new ones on open connections), and stops.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import re
import socket
import threading
import time
from functools import partial
from typing import Any

from distshap.serve.batching import BatchQueue, QueueClosed, QueueFull
from distshap.serve.calls import Call, Deadlines
from distshap.serve.connection import Connection, Reply, Request, sweep
from distshap.serve.metrics import Metrics
from distshap.serve.options import ServeOptions, check_access, host_port
from distshap.serve.protocol import (
    HEADER_LENGTH,
    OutputSpec,
    ProtocolError,
    dumps,
    encode_response,
    parse_infer,
    server_version,
)
from distshap.serve.registry import Registry, output_ks, output_label

__all__ = ["ExplanationServer", "ServeOptions", "check_access", "new_event_loop"]

log = logging.getLogger("distshap.serve")

_MODEL_PATH = re.compile(r"^/v2/models/([^/]+)(?:/versions/([^/]+))?(/ready|/infer)?$")
_JSON = {"Content-Type": "application/json"}
#: Seconds an idle keep-alive connection is kept.
_IDLE_SECONDS = 60.0
#: Seconds a request's head or body may stop arriving before it is answered 408.
_STALL_SECONDS = 30.0
#: Seconds of one deadline bucket: a request past its timeout is answered 504 within this.
_TICK = 0.05


def _grpc_front() -> Any:
    """:class:`~distshap.serve.grpc_front.GrpcFront`, or an ImportError naming the extra."""
    try:
        from distshap.serve.grpc_front import GrpcFront
    except ImportError as err:
        raise ImportError(
            f"grpc_port: the gRPC endpoint needs grpcio and protobuf ({err}): pip install "
            "'distshap[serve]'"
        ) from None
    return GrpcFront


def _error(status: int, message: str, headers: dict | None = None) -> Reply:
    """An answer other than 200: the JSON ``{"error": message}`` (one line)."""
    return Reply(status, dumps({"error": message}), {**_JSON, **(headers or {})})


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop's event loop where installed (the ``serve`` extra: the same API, less time in the
    loop a request), else asyncio's own."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def _listen(host: str, port: int, reuse_port: bool = False) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:  # the kernel spreads the connections over the processes listening
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(1024)  # many clients connect at once
    sock.setblocking(False)
    return sock


class ExplanationServer:
    """An explanation server over ``registry``'s models, running batches on ``executor``.

    Parameters
    ----------
    registry : Registry
    executor : InProcessExecutor, DaskExecutor or DeviceExecutor
    options : ServeOptions
    loop : asyncio event loop, optional
        The loop to serve on (not running yet; one of :func:`new_event_loop` by default), e.g.
        the one an executor already reads its answers on.

    Raises
    ------
    ValueError
        A non-loopback host without a token or ``insecure``.
    """

    def __init__(self, registry: Registry, executor: Any, options: ServeOptions,
                 loop: asyncio.AbstractEventLoop | None = None) -> None:  # fmt: skip
        check_access(options)
        grpc_front = None if options.grpc_port is None else _grpc_front()
        self.registry, self.executor, self.options = registry, executor, options
        self.metrics = Metrics()
        self.draining = False
        self.closing_connections = False
        self._queues: dict[tuple, BatchQueue] = {}
        self._checked: dict[tuple, tuple] = {}
        self._connections: set[Connection] = set()
        self._active = 0
        self._scrapes = 0  # /metrics requests being rendered (not counted in flight)
        self._no_active: asyncio.Event | None = None
        #: Whether every process of the group serves (None: a server of one process).
        self.group_ready: Any = None
        #: The other processes' metrics snapshots, merged into ``/metrics``.
        self.peer_metrics: Any = list
        self._sock = _listen(options.host, options.port, options.reuse_port)
        self.address: tuple[str, int] = self._sock.getsockname()[:2]
        self.loop = new_event_loop() if loop is None else loop
        #: The infer calls waiting for their answer, by deadline (one timer a tick of them).
        self.deadlines = Deadlines(self.loop, _TICK)
        self._thread: threading.Thread | None = None
        self._drained = threading.Event()
        self._launched = False
        self._serving = threading.Event()
        self._stopped = threading.Event()
        #: The gRPC endpoint (``options.grpc_port``), started with the server; or None.
        self.grpc: Any = None
        #: Why the server could not start serving (raised by start / serve_forever), or None.
        self.start_error: Exception | None = None
        if grpc_front is not None:
            try:
                self.grpc = grpc_front(self)
            except BaseException:
                self._sock.close()
                raise
        self.metrics.gauge("distshap_serve_queue_rows", "rows waiting for a batch", self._depths)
        self.metrics.gauge("distshap_serve_workers", "workers connected",
                           lambda: {(): self.executor.workers()})  # fmt: skip
        self.metrics.gauge("distshap_serve_in_flight", "requests being answered",
                           lambda: {(): self._active - self._scrapes})  # fmt: skip
        self.metrics.gauge("distshap_serve_connections", "open connections",
                           lambda: {(): len(self._connections)})  # fmt: skip

    @property
    def url(self) -> str:
        """``http://host:port`` the server listens on."""
        return f"http://{host_port(*self.address)}"

    @property
    def grpc_address(self) -> str | None:
        """``host:port`` of the gRPC endpoint (None: HTTP only)."""
        return None if self.grpc is None else self.grpc.address

    def start(self) -> ExplanationServer:
        """Serve in a background thread; returns ``self`` once it serves."""
        self._check_startable()
        self._launched = True
        self._thread = threading.Thread(target=self._run, name="distshap-serve", daemon=True)
        self._thread.start()
        while not self._serving.wait(0.1):
            if not self._thread.is_alive():
                if self.start_error is not None:
                    raise self.start_error
                raise RuntimeError("the server stopped before it served: see the log above")
        return self

    def serve_forever(self) -> None:
        """Serve until :meth:`drain` (from another thread, or a signal handler) stops it: in
        this thread, or, once :meth:`start` ran, waiting here with this thread free for
        signals."""
        if self._launched:
            while not self._drained.wait(0.5):
                pass
            return
        self._check_startable()
        self._launched = True
        self._run()
        if self.start_error is not None:
            raise self.start_error
        self._drained.wait()

    def _check_startable(self) -> None:
        if self.draining or self._launched:
            raise RuntimeError("the server was started or drained before: build a new one")

    def _run(self) -> None:
        loop = self.loop
        asyncio.set_event_loop(loop)
        self._no_active = asyncio.Event()
        self._no_active.set()
        try:
            self._server = loop.run_until_complete(
                loop.create_server(lambda: Connection(self), sock=self._sock)
            )
            if self.grpc is not None:
                loop.run_until_complete(self.grpc.start())
        except Exception as err:  # raised again by start() / serve_forever()
            self.start_error = err
            if getattr(self, "_server", None) is not None:
                self._server.close()
            loop.close()
            self._stopped.set()  # drain() gives back the socket, the port and the executor
            return
        self._sweeper = loop.call_later(5.0, self._sweep)
        loop.call_soon(self._serving.set)
        try:
            loop.run_forever()
        finally:
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.close()
            finally:
                self._stopped.set()

    def _sweep(self) -> None:
        sweep(self._connections, _IDLE_SECONDS, _STALL_SECONDS)
        self._sweeper = self.loop.call_later(5.0, self._sweep)

    def ready(self) -> bool:
        """Whether requests can run now (not draining, a worker connected)."""
        if self.group_ready is not None and not self.group_ready():
            return False
        return not self.draining and self.executor.ready()

    def wait_drained(self, timeout: float | None = None) -> bool:
        """Wait until :meth:`drain` has stopped the server; whether it has."""
        return self._drained.wait(timeout)

    def drain(self) -> None:
        """Refuse new requests, finish those in flight (``drain_timeout`` at most), stop."""
        if self.draining:
            self._drained.wait()
            return
        self.draining = True
        while self._launched and not self._serving.wait(0.1):
            if self._stopped.is_set():  # its start failed
                break
        if not self._serving.is_set():
            self._close_unstarted()
            return
        log.info("draining: %d request(s) in flight", self._active)
        asyncio.run_coroutine_threadsafe(self._drain(), self.loop).result()
        if not self._stopped.wait(10):  # the loop closed: an executor that reads on it may close
            log.warning("drain: the event loop did not stop within 10 s")
        self.executor.close()
        self._drained.set()

    def _close_unstarted(self) -> None:
        self._sock.close()
        if self.grpc is not None:
            self.grpc.close()
        self.executor.close()
        self._drained.set()

    async def _drain(self) -> None:
        self._server.close()  # no new connections; requests on open ones are answered 503
        try:
            await asyncio.wait_for(self._no_active.wait(), self.options.drain_timeout)
        except asyncio.TimeoutError:
            log.warning("drain: %d request(s) still in flight after %s s", self._active,
                        self.options.drain_timeout)  # fmt: skip
        if self.grpc is not None:  # its new calls were refused meanwhile (503: UNAVAILABLE)
            await self.grpc.stop(1.0)
        for queue in self._queues.values():
            queue.close()
        self.closing_connections = True
        for conn in list(self._connections):
            conn.close()
        self._sweeper.cancel()
        self.loop.call_soon(self.loop.stop)

    # ----------------------------------------------------------------------------------------
    # the application the connections call (on the loop)
    # ----------------------------------------------------------------------------------------

    def opened(self, conn: Connection) -> None:
        self._connections.add(conn)

    def closed(self, conn: Connection) -> None:
        self._connections.discard(conn)

    def error(self, status: int, message: str) -> Reply:
        return _error(status, message)

    def begin(self, request: Request) -> Reply | None:
        """Route a request from its head: an answer now, or None to read its body first."""
        self.hold()
        request.state = {"model": "", "output": "", "rows": 0}
        try:
            return self._route(request)
        except Reply as reply:
            return reply
        except Exception as err:  # an answer for every request, whatever went wrong
            log.exception("while routing %s %s", request.method, request.path)
            return _error(500, f"{type(err).__name__}: {str(err)[:200]}")

    def respond(self, request: Request, deliver: Any) -> Reply | None:
        """An infer request whose body has been read: queued, answered through ``deliver``."""
        try:
            return self._infer(request, deliver)
        except Reply:
            raise
        except Exception as err:  # an answer for every request, whatever went wrong
            log.exception("while answering %s", request.path)
            return _error(500, f"{type(err).__name__}: {str(err)[:200]}")

    def abandoned(self, request: Request) -> None:
        """A request whose client left before its body arrived."""
        self.release()

    def hold(self) -> None:
        """A request begins: :meth:`drain` waits for it."""
        self._active += 1
        self._no_active.clear()

    def release(self) -> None:
        """A request held by :meth:`hold` is answered (or abandoned)."""
        self._active -= 1
        if not self._active:
            self._no_active.set()

    def answered(self, request: Request, reply: Reply) -> None:
        """Metrics and the debug line of one answer (before it is written)."""
        self.release()
        info = request.state
        if info is None:
            return
        seconds = time.perf_counter() - request.received
        path = request.path.rstrip("/") or "/"
        if path.endswith("/infer"):
            spent = request.spent  # decoding and encoding seconds, in one locked update
            self.metrics.request(info["model"], info["output"], reply.status, info["rows"],
                                 seconds, spent[0], spent[1])  # fmt: skip
        if log.isEnabledFor(logging.DEBUG):  # one structured line per request
            line = {"method": request.method, "path": path, "status": reply.status, **info}
            log.debug(json.dumps({**line, "ms": round(seconds * 1e3, 3)}))

    # ----------------------------------------------------------------------------------------
    # routes
    # ----------------------------------------------------------------------------------------

    def _check_token(self, request: Request, path: str) -> None:
        token = self.options.token
        if not token or path.startswith("/v2/health/"):
            return
        given = request.headers.get("authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
            raise _error(
                401,
                "missing or wrong token: send the header 'Authorization: Bearer "
                "<token>' with the server's token",
                {"WWW-Authenticate": "Bearer"},
            )

    def _route(self, request: Request) -> Reply | None:
        method, path = request.method, request.path.rstrip("/") or "/"
        self._check_token(request, path)
        if method == "GET" and path == "/v2/health/live":
            return Reply(200, b"", _JSON)
        if method == "GET" and path == "/v2/health/ready":
            return self._ready_reply()
        if method == "GET" and path == "/v2":
            meta = {"name": "distshap", "version": server_version(),
                    "extensions": ["binary_tensor_data"]}  # fmt: skip
            return Reply(200, dumps(meta), _JSON)
        if method == "GET" and path == "/metrics":
            self._scrapes += 1  # the scrape itself is not counted in flight
            try:
                text = self.metrics.render(self.peer_metrics())
            finally:
                self._scrapes -= 1
            return Reply(200, text.encode(), {"Content-Type": "text/plain; version=0.0.4"})
        match = _MODEL_PATH.match(path)
        if match is None:
            raise _error(404, f"no route {method} {path}: see /v2/models/NAME/infer")
        name, version, action = match.groups()
        try:
            model = self.registry.get(name, version)
        except ProtocolError as err:
            raise _error(err.status, str(err)) from None
        request.state["model"] = name
        if method == "GET" and action is None:
            return Reply(200, dumps(model.metadata()), _JSON)
        if method == "GET" and action == "/ready":
            return self._ready_reply()
        if method == "POST" and action == "/infer":
            return self._infer_head(request, model)
        raise _error(405, f"{method} {path} is not served: use POST for /infer, GET otherwise")

    def _ready_reply(self) -> Reply:
        if not self.ready():
            why = "no worker is connected"
            if self.draining:
                why = "the server is shutting down"
            elif self.group_ready is not None and not self.group_ready():
                why = "not every process of the server is serving"
            raise _error(503, "not ready: " + why)
        return Reply(200, b"", _JSON)

    def _infer_head(self, request: Request, model: Any) -> None:
        """Checks of an infer request before its body is read."""
        if self.draining:
            raise _error(503, "the server is shutting down", self._retry())
        if "content-length" not in request.headers:
            raise _error(411, "Content-Length is required: send the body with its length")
        if request.length > self.options.max_body_bytes:
            raise _error(
                413,
                f"the body has {request.length} bytes, more than the server's limit of "
                f"{self.options.max_body_bytes}: split the rows over several requests",
            )
        request.state["registered"] = model
        return None

    def _decode(self, request: Request, model: Any) -> tuple:
        """The rows, the outputs asked for and their ``k`` of an infer body (400 / 413)."""
        info = request.state
        try:
            parsed = parse_infer(request.body, request.headers.get(HEADER_LENGTH.lower()))
            specs, ks = self._outputs_of(model, parsed)
        except ProtocolError as err:
            raise _error(err.status, str(err)) from None
        info.update(rows=parsed.rows.shape[0], output=output_label(specs))
        try:
            self.check_rows(model, parsed.rows)
        except ProtocolError as err:
            raise _error(err.status, str(err)) from None
        return parsed, specs, ks

    def check_rows(self, model: Any, rows: Any) -> None:
        """:class:`ProtocolError` for rows beyond the request limit (413) or of another
        feature count than ``model``'s (400)."""
        n, F = rows.shape
        if n > self.options.max_request_rows:
            raise ProtocolError(
                413,
                f"inputs[0] has {n} rows, more than the server's limit of "
                f"{self.options.max_request_rows}: split them over several requests",
            )
        if F != model.num_features:
            raise ProtocolError(
                400,
                f"inputs[0].shape: {F} features but model {model.name!r} expects "
                f"{model.num_features}: send the columns it was trained on, in order",
            )

    def _outputs_of(self, model: Any, parsed: Any) -> tuple:
        """The outputs a request asks for and their ``k``, checked once per parsed header (a
        binary request's outputs and parameters are the same objects for every request of
        its header: see :func:`~distshap.serve.protocol.parse_infer`)."""
        key = (id(model), id(parsed.outputs), id(parsed.parameters), parsed.binary_default)
        hit = self._checked.get(key)  # the entry holds its objects: their ids are not reused
        if hit is not None and hit[0] is parsed.outputs and hit[1] is parsed.parameters:
            return hit[2], hit[3]
        specs = parsed.outputs or (OutputSpec("shap_values", {}, parsed.binary_default),)
        ks = output_ks(model, specs, parsed.parameters)
        if len(self._checked) >= 256:
            self._checked.clear()
        self._checked[key] = (parsed.outputs, parsed.parameters, specs, ks, model)
        return specs, ks

    def _infer(self, request: Request, deliver: Any) -> None:
        model = request.state.pop("registered")
        t0 = time.perf_counter()
        parsed, specs, ks = self._decode(request, model)
        request.spent = [time.perf_counter() - t0, 0.0]  # decode; encode (metrics, answered)
        call = Call(self, request, deliver, specs, (model, parsed.id))
        try:
            self.enqueue(call, model, parsed.rows, ks)
        except ProtocolError as err:
            raise _error(err.status, str(err), self._retry()) from None
        if call.left:  # not answered at once: answered 504 at its deadline
            self.deadlines.watch(call, request.received + self.options.request_timeout)
        return None

    def enqueue(self, call: Call, model: Any, rows: Any, ks: list) -> None:
        """Queue ``rows`` for each output of ``call`` (``ks``: their ``k``); a 503
        :class:`ProtocolError` (nothing queued) without a worker or with a full or closing
        queue."""
        if not self.executor.ready():
            raise ProtocolError(503, "no worker is connected to run the request")
        specs = call.specs
        try:
            for i, (spec, k) in enumerate(zip(specs, ks, strict=True)):
                done = call.part_done if len(specs) == 1 else partial(call.part_of, i)
                call.handles.append(self._queue(model, spec.name, k).put(rows, done))
        except (QueueFull, QueueClosed) as err:
            for handle in call.handles:
                handle.cancel()
            what = (
                "the server is shutting down"
                if isinstance(err, QueueClosed)
                else (f"the queue of {model.name!r} is full ({err}): retry after a second")
            )
            raise ProtocolError(503, what) from None

    def outputs(self, call: Call) -> Reply:
        """The answer to an infer call whose outputs are all in."""
        failure = call.failure()
        if failure is not None:
            status, message = failure
            return _error(status, message, self._retry() if status == 503 else None)
        outputs = [
            (name, array, spec.binary)
            for (values, _), spec in zip(call.results, call.specs, strict=True)
            for name, array in values.items()
        ]
        t0 = time.perf_counter()
        (model, request_id) = call.what
        body, headers = encode_response(model.name, model.version, request_id, outputs)
        call.request.spent[1] = time.perf_counter() - t0
        return Reply(200, body, headers)

    def timeout(self) -> Reply:
        """The answer to a request past its ``request_timeout``."""
        return _error(504, self.timeout_message())

    def timeout_message(self) -> str:
        """The one line of a request past its ``request_timeout``."""
        return (
            f"the request took longer than the server's timeout of "
            f"{self.options.request_timeout} s: send fewer rows, or retry"
        )

    def _retry(self) -> dict:
        return {"Retry-After": str(self.options.retry_after)}

    def _queue(self, model: Any, output: str, k: int) -> BatchQueue:
        key = (model.name, output, k)
        queue = self._queues.get(key)
        if queue is None:
            opts, metrics = self.options, self.metrics
            queue = self._queues[key] = BatchQueue(
                model.resident, output, k, self.executor, opts.max_batch_rows, opts.max_wait,
                opts.max_queue_rows,
                on_batch=lambda rows, _n, s, w, m=model.name, o=output:
                    metrics.batch(m, o, rows, s, w),
                on_run=lambda seconds: metrics.stage("run", seconds), loop=self.loop,
                inline_rows=opts.inline_rows,
            )  # fmt: skip
        return queue

    def _depths(self) -> dict:
        out: dict[tuple, float] = {}
        for (name, output, _k), queue in list(self._queues.items()):
            key = (("model", name), ("output", output))
            out[key] = out.get(key, 0) + queue.queued_rows
        return out
