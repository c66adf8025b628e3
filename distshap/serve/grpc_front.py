"""The Open Inference Protocol over gRPC, beside a server process's HTTP endpoint.

:class:`GrpcFront` serves ``inference.GRPCInferenceService`` (the KServe v2 / Triton gRPC
service: ``ServerLive``, ``ServerReady``, ``ModelReady``, ``ServerMetadata``, ``ModelMetadata``,
``ModelInfer``) on the :class:`~distshap.serve.server.ExplanationServer`'s own event loop
(``grpc.aio``). An infer request's rows join the same batch queues as HTTP requests, so a
response holds the values ``TreeExplainer(model)`` gives for its rows, bit for bit, whatever
protocol its neighbours in a batch came by. The rows come as ``raw_input_contents[0]``
(little-endian, as ``tritonclient.grpc`` sends them) or as ``inputs[0].contents``; outputs go
back as ``raw_output_contents``, in the order of the response's ``outputs``.

The HTTP endpoint's checks and limits apply, with the same one-line messages; the status is
gRPC's: 400 INVALID_ARGUMENT, 401 UNAUTHENTICATED, 404 NOT_FOUND, 413 RESOURCE_EXHAUSTED,
503 UNAVAILABLE (with a ``retry-after`` trailer), 504 DEADLINE_EXCEEDED, 500 INTERNAL. A
message over ``max_body_bytes`` is refused by gRPC itself (RESOURCE_EXHAUSTED, its own
message, before any of this module's code). A request's deadline is the sooner of the server's
``request_timeout`` and the client's own; a call its client cancels (or whose client deadline
passes first) counts in the metrics as status 499. The bearer token, where the server has one,
comes as the ``authorization`` metadata (``Bearer <token>``); the health checks need none.
Draining refuses new calls and answers those in flight.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from typing import Any

import grpc
import numpy as np
from grpc import aio

from distshap.serve.calls import Call, error_line
from distshap.serve.grpc_messages import SERVICE, messages
from distshap.serve.options import host_port, reserve_port
from distshap.serve.protocol import (
    DATATYPE_OF,
    IGNORED_PARAMETERS,
    OutputSpec,
    ProtocolError,
    bad_request,
    input_rows,
    little_bytes,
    server_version,
)
from distshap.serve.registry import output_ks, output_label

__all__ = ["GrpcFront"]

log = logging.getLogger("distshap.serve")

#: HTTP status of a refusal -> the gRPC status code it is sent with.
CODES = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    401: grpc.StatusCode.UNAUTHENTICATED,
    404: grpc.StatusCode.NOT_FOUND,
    413: grpc.StatusCode.RESOURCE_EXHAUSTED,
    500: grpc.StatusCode.INTERNAL,
    503: grpc.StatusCode.UNAVAILABLE,
    504: grpc.StatusCode.DEADLINE_EXCEEDED,
}
#: Methods anyone may call (no token), as the HTTP health routes.
_OPEN = ("ServerLive", "ServerReady")
_ITEMSIZE = {"FP32": 4, "FP64": 8}
#: gRPC's largest message (its limits are C ints).
_MAX_MESSAGE = 2**31 - 1
#: Characters of a refusal's message at most (a status's details travel as metadata).
_MAX_DETAILS = 1000


def _rows(request: Any) -> np.ndarray:
    """The one input tensor of a ``ModelInferRequest`` as rows ``(n, F)`` (400 naming the
    field at fault)."""
    if len(request.inputs) != 1:
        raise bad_request(
            f"inputs must hold exactly one tensor (the rows, shape [n_rows, n_features]), got "
            f"{len(request.inputs)}"
        )
    tensor = request.inputs[0]
    spec: dict[str, Any] = {"datatype": tensor.datatype, "shape": list(tensor.shape)}
    if len(request.raw_input_contents) > 1:
        raise bad_request(
            f"raw_input_contents has {len(request.raw_input_contents)} entries for 1 input: "
            "send the rows' bytes as its one entry"
        )
    if request.raw_input_contents:
        raw = request.raw_input_contents[0]
        shape, size = spec["shape"], _ITEMSIZE.get(tensor.datatype)
        if size and len(shape) == 2 and min(shape) >= 0 and len(raw) != size * shape[0] * shape[1]:
            raise bad_request(
                f"raw_input_contents[0] has {len(raw)} bytes but shape {shape} of "
                f"{tensor.datatype} needs {size * shape[0] * shape[1]}: send n_rows * "
                "n_features little-endian values, row-major"
            )
        spec["parameters"] = {"binary_data_size": len(raw)}
        return input_rows(spec, raw)
    if not tensor.HasField("contents"):
        raise bad_request(
            "inputs[0] has no values: send them as raw_input_contents[0] (or inputs[0].contents)"
        )
    field = "fp64_contents" if tensor.datatype == "FP64" else "fp32_contents"
    values = getattr(tensor.contents, field)
    shape, size = spec["shape"], _ITEMSIZE.get(tensor.datatype)
    if size and len(shape) == 2 and min(shape) >= 0 and len(values) != shape[0] * shape[1]:
        raise bad_request(
            f"inputs[0].contents.{field} has {len(values)} values but shape {shape} needs "
            f"{shape[0] * shape[1]}: send n_rows * n_features values, row-major, in the "
            "field of the tensor's datatype"
        )
    spec["data"] = list(values)
    return input_rows(spec, b"")


def _value(parameter: Any) -> Any:
    """An ``InferParameter``'s value (None where it holds none)."""
    which = parameter.WhichOneof("parameter_choice")
    return None if which is None else getattr(parameter, which)


def _outputs(model: Any, request: Any) -> tuple[tuple[OutputSpec, ...], list[int]]:
    """The outputs a request asks for (SHAP values by default) and their ``k``."""
    specs = tuple(
        OutputSpec(o.name, {k: _value(v) for k, v in o.parameters.items() if k != "binary_data"})
        for o in request.outputs
    ) or (OutputSpec("shap_values"),)
    parameters = {
        key: _value(value)
        for key, value in request.parameters.items()
        if key not in IGNORED_PARAMETERS and key != "binary_data_output"
    }
    return specs, output_ks(model, specs, parameters)


class GrpcFront:
    """The gRPC endpoint of ``server`` (an :class:`~distshap.serve.server.ExplanationServer`),
    listening on its host at ``options.grpc_port`` once :meth:`start` ran on its loop.

    To the :class:`~distshap.serve.calls.Call` of an infer request it is the server:
    ``outputs(call)`` gives the response (or the :class:`ProtocolError` to abort with),
    ``timeout()`` and ``error(status, message)`` the refusals, ``deadlines`` the server's.
    """

    def __init__(self, server: Any) -> None:
        self.server = server
        self.deadlines = server.deadlines
        opts = server.options
        #: The port it listens on (0 until it started, for any free port in a group).
        self.port: int = opts.grpc_port
        # Any free port for one process: picked and held now (its number known before the
        # start), then shared with gRPC's listener (SO_REUSEPORT). A group holds its own.
        self._held = None
        if opts.grpc_port == 0 and not opts.reuse_port:
            self._held = reserve_port(opts.host, 0)
            self.port = self._held.getsockname()[1]
        self._grpc: Any = None

    @property
    def address(self) -> str:
        """``host:port`` as gRPC clients take it."""
        return host_port(self.server.options.host, self.port)

    async def start(self) -> None:
        """Listen and serve (on the running loop: the server's)."""
        opts = self.server.options
        shared = opts.reuse_port or self._held is not None  # beside a reservation
        self._grpc = aio.server(
            options=[
                ("grpc.so_reuseport", 1 if shared else 0),
                ("grpc.max_receive_message_length", min(opts.max_body_bytes, _MAX_MESSAGE)),
                ("grpc.max_send_message_length", -1),
            ]
        )
        methods = {
            "ServerLive": self._live,
            "ServerReady": self._ready,
            "ModelReady": self._model_ready,
            "ServerMetadata": self._server_metadata,
            "ModelMetadata": self._model_metadata,
            "ModelInfer": self._infer,
        }
        handlers = {
            name: grpc.unary_unary_rpc_method_handler(
                self._guarded(name, method),
                request_deserializer=messages[f"{name}Request"].FromString,
                response_serializer=lambda message: message.SerializeToString(),
            )
            for name, method in methods.items()
        }
        self._grpc.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(SERVICE, handlers),)
        )
        try:
            bound = self._grpc.add_insecure_port(self.address)
        except RuntimeError as err:
            raise OSError(
                f"grpc_port={opts.grpc_port}: cannot listen on {self.address} ({err}): the port "
                "is taken or the address is not this host's; give another port (0: any free one)"
            ) from None
        self.port = bound or self.port
        await self._grpc.start()

    async def stop(self, grace: float) -> None:
        """Refuse new calls; answer those in flight (``grace`` seconds at most)."""
        if self._grpc is not None:
            await self._grpc.stop(grace)
        self.close()

    def close(self) -> None:
        """Give up the port's reservation."""
        if self._held is not None:
            self._held.close()
            self._held = None

    def _guarded(self, name: str, method: Any) -> Any:
        """``method`` behind the token check, a :class:`ProtocolError` sent as its status."""
        token = self.server.options.token

        async def handler(request: Any, context: Any) -> Any:
            try:
                if token and name not in _OPEN:
                    given = dict(context.invocation_metadata()).get("authorization", "")
                    if not hmac.compare_digest(str(given).encode(), f"Bearer {token}".encode()):
                        if name == "ModelInfer":  # counted as HTTP counts its infer 401s
                            self.server.metrics.request("", "", 401, 0, 0.0)
                        raise ProtocolError(401, "missing or wrong token: send the metadata "
                                            "'authorization: Bearer <token>' with the server's "
                                            "token")  # fmt: skip
                return await method(request, context)
            except ProtocolError as err:
                status, message = err.status, str(err)
            except Exception as err:  # an answer for every call, whatever went wrong
                log.exception("while answering %s", name)
                status, message = 500, error_line(err)
            message = message[:_MAX_DETAILS]  # gRPC refuses a status over its metadata limit
            trailer = ()
            if status == 503:
                trailer = (("retry-after", str(self.server.options.retry_after)),)
            await context.abort(CODES.get(status, grpc.StatusCode.INTERNAL), message, trailer)

        return handler

    # ----------------------------------------------------------------------------------------
    # methods
    # ----------------------------------------------------------------------------------------

    async def _live(self, request: Any, context: Any) -> Any:
        return messages["ServerLiveResponse"](live=True)

    async def _ready(self, request: Any, context: Any) -> Any:
        return messages["ServerReadyResponse"](ready=self.server.ready())

    async def _model_ready(self, request: Any, context: Any) -> Any:
        self.server.registry.get(request.name, request.version or None)
        return messages["ModelReadyResponse"](ready=self.server.ready())

    async def _server_metadata(self, request: Any, context: Any) -> Any:
        return messages["ServerMetadataResponse"](name="distshap", version=server_version())

    async def _model_metadata(self, request: Any, context: Any) -> Any:
        meta = self.server.registry.get(request.name, request.version or None).metadata()
        response = messages["ModelMetadataResponse"](
            name=meta["name"], versions=meta["versions"], platform=meta["platform"]
        )
        for field in ("inputs", "outputs"):
            for tensor in meta[field]:
                getattr(response, field).add(**tensor)
        return response

    async def _infer(self, request: Any, context: Any) -> Any:
        server = self.server
        received = time.perf_counter()
        info = {"model": "", "output": "", "rows": 0}
        spent = [0.0, 0.0]  # decoding and encoding seconds (metrics)
        status = 500
        server.hold()
        try:
            response = await self._answer(request, context, received, info, spent)
            status = 200
            return response
        except ProtocolError as err:
            status = err.status
            raise
        except asyncio.CancelledError:  # the client left (or its deadline passed)
            status = 499
            raise
        finally:
            server.release()
            seconds = time.perf_counter() - received
            server.metrics.request(info["model"], info["output"], status, info["rows"], seconds,
                                   spent[0], spent[1])  # fmt: skip
            if log.isEnabledFor(logging.DEBUG):  # one structured line per request
                line = {"rpc": "ModelInfer", "status": status, **info}
                log.debug(json.dumps({**line, "ms": round(seconds * 1e3, 3)}))

    async def _answer(self, request: Any, context: Any, received: float, info: dict,
                      spent: list) -> Any:  # fmt: skip
        """The response to an infer request: checked, queued, awaited."""
        server = self.server
        model = server.registry.get(request.model_name, request.model_version or None)
        info["model"] = model.name
        if server.draining:
            raise ProtocolError(503, "the server is shutting down")
        t0 = time.perf_counter()
        rows = _rows(request)
        specs, ks = _outputs(model, request)
        info.update(rows=rows.shape[0], output=output_label(specs))
        server.check_rows(model, rows)
        spent[0] = time.perf_counter() - t0
        answer = server.loop.create_future()

        def deliver(_request: Any, result: Any) -> None:
            if not answer.done():
                answer.set_result(result)

        call = Call(self, spent, deliver, specs, (model, request.id))
        server.enqueue(call, model, rows, ks)
        if call.left:  # not answered at once: answered at the sooner deadline
            timeout = server.options.request_timeout
            left = context.time_remaining()
            server.deadlines.watch(call, received + (timeout if left is None else
                                                     min(timeout, left)))  # fmt: skip
        try:
            result = await answer
        except asyncio.CancelledError:
            if call.bucket is not None:
                server.deadlines.leave(call)
            call.left = -1  # what still arrives is dropped
            for handle in call.handles:
                handle.cancel()
            raise
        if isinstance(result, ProtocolError):
            raise result
        return result

    # ----------------------------------------------------------------------------------------
    # what a Call asks of its server
    # ----------------------------------------------------------------------------------------

    def outputs(self, call: Call) -> Any:
        """The response to an infer call whose outputs are all in (or its refusal)."""
        failure = call.failure()
        if failure is not None:
            return ProtocolError(*failure)
        t0 = time.perf_counter()
        model, request_id = call.what
        response = messages["ModelInferResponse"](
            model_name=model.name, model_version=model.version, id=request_id
        )
        for values, _ in call.results:
            for name, array in values.items():
                datatype = DATATYPE_OF[array.dtype.newbyteorder("<")]
                response.outputs.add(name=name, datatype=datatype, shape=array.shape)
                response.raw_output_contents.append(little_bytes(array))
        call.request[1] = time.perf_counter() - t0
        return response

    def timeout(self) -> ProtocolError:
        """The refusal of a call past its deadline (DEADLINE_EXCEEDED)."""
        return ProtocolError(504, self.server.timeout_message())

    def error(self, status: int, message: str) -> ProtocolError:
        """The refusal of a call that failed while its response was made."""
        return ProtocolError(status, message)
