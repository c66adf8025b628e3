"""The Open Inference Protocol (KServe v2 / Triton HTTP) as the server speaks it.

An infer request carries one input tensor ``[n, F]`` (FP32 or FP64) as JSON ``data`` or in the
binary tensor extension (a JSON header of ``Inference-Header-Content-Length`` bytes followed by
the raw little-endian tensors), and names the outputs it wants, each with its parameters
(``top_interactions`` takes ``k``). Responses carry each output as JSON ``data`` or, where the
request asks for ``binary_data``, as raw bytes after the JSON header. Every malformed request is
a :class:`ProtocolError`: an HTTP status and one line naming the field and the fix.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

try:  # one fast JSON codec where installed (the ``serve`` extra); the standard library else
    import orjson
except ImportError:  # pragma: no cover - exercised where orjson is missing
    orjson = None

__all__ = [
    "DATATYPE_OF",
    "HEADER_LENGTH",
    "IGNORED_PARAMETERS",
    "InferRequest",
    "OutputSpec",
    "ProtocolError",
    "dumps",
    "encode_response",
    "input_rows",
    "little_bytes",
    "parse_infer",
    "server_version",
]

#: The HTTP header of the binary tensor extension: bytes of the JSON part of the body.
HEADER_LENGTH = "Inference-Header-Content-Length"

#: Protocol datatype -> NumPy dtype (little-endian), for inputs and outputs.
DTYPES = {
    "FP32": np.dtype("<f4"),
    "FP64": np.dtype("<f8"),
    "INT32": np.dtype("<i4"),
    "INT64": np.dtype("<i8"),
}
_INPUT_TYPES = ("FP32", "FP64")
#: NumPy dtype -> protocol datatype, for outputs.
DATATYPE_OF = {dtype: name for name, dtype in DTYPES.items()}


class ProtocolError(ValueError):
    """A request the server refuses: ``status`` (400, 404, 413, ...) and a one-line message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def bad_request(message: str) -> ProtocolError:
    """A 400 :class:`ProtocolError`."""
    return ProtocolError(400, message)


@dataclass(frozen=True)
class OutputSpec:
    """One output a request asks for: its name, parameters and whether it comes back binary."""

    name: str
    parameters: dict = field(default_factory=dict)
    binary: bool = False


class InferRequest(NamedTuple):
    """A parsed infer request: its id, the rows ``(n, F)``, the outputs asked for, whether
    outputs come back binary by default, and the request's parameters."""

    id: str | None
    rows: np.ndarray
    outputs: tuple[OutputSpec, ...]
    binary_default: bool
    parameters: dict


#: Request parameters of the protocol (and Triton) that do not change the values: ignored.
IGNORED_PARAMETERS = ("priority", "timeout", "sequence_id", "sequence_start", "sequence_end")


def dumps(obj: Any) -> bytes:
    """``obj`` as compact JSON bytes (NaN and infinities as JSON's ``NaN`` / ``Infinity``, as
    Python's ``json`` writes them)."""
    return json.dumps(obj, separators=(",", ":")).encode()


def _loads(data: bytes) -> Any:
    if orjson is not None:
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass  # NaN / Infinity literals (which Python's json writes), or malformed
    return json.loads(data)


def _json_object(data: bytes, what: str) -> dict:
    try:
        obj = _loads(data)
    except (ValueError, UnicodeDecodeError) as err:
        raise bad_request(f"{what} is not valid JSON ({err}): send a JSON object") from None
    if not isinstance(obj, dict):
        raise bad_request(f"{what} must be a JSON object, got {type(obj).__name__}")
    return obj


def _split_body(body: bytes, header_length: str | None) -> tuple[dict, bytes | memoryview]:
    """The JSON header and the binary part of a body (all JSON without the extension)."""
    if header_length is None:
        return _json_object(body, "the request body"), b""
    try:
        n = int(header_length)
    except ValueError:
        raise bad_request(
            f"{HEADER_LENGTH} must be an integer (bytes of the JSON header), got {header_length!r}"
        ) from None
    if not 0 < n <= len(body):
        raise bad_request(
            f"{HEADER_LENGTH}={n} but the body has {len(body)} bytes: give the JSON header's "
            "length in bytes"
        )
    return _json_object(body[:n], "the request's JSON header"), memoryview(body)[n:]


def _shape(spec: dict) -> tuple[int, int]:
    shape = spec.get("shape")
    if (
        not isinstance(shape, list)
        or len(shape) != 2
        or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape)
    ):
        raise bad_request(
            f"inputs[0].shape must be [n_rows, n_features] (two non-negative integers), got "
            f"{shape!r}: send the rows as one 2-D tensor"
        )
    if shape[0] == 0:
        raise bad_request("inputs[0].shape has 0 rows: send at least one row")
    return shape[0], shape[1]


def _flat_data(data: Any) -> list:
    """A protocol ``data`` field (flat or nested lists) as one flat list."""
    if not isinstance(data, list):
        raise bad_request(
            f"inputs[0].data must be a list of numbers, got {type(data).__name__}: send the "
            "row-major values (flat or nested lists), or use the binary tensor extension"
        )
    while data and isinstance(data[0], list):
        data = [x for row in data for x in (row if isinstance(row, list) else [row])]
    return data


def _parameters(obj: dict, field: str) -> dict:
    """The ``parameters`` object (named ``field``) of a request, tensor or output (``{}`` when
    absent)."""
    params = obj.get("parameters")
    if params is None:
        return {}
    if not isinstance(params, dict):
        raise bad_request(f'{field} must be a JSON object, e.g. {{"k": 5}}, got '
                          f"{type(params).__name__}")  # fmt: skip
    return params


def input_rows(spec: dict, binary: bytes | memoryview) -> np.ndarray:
    """The rows of the one input tensor, as its datatype says (``spec``: the tensor's JSON
    object, or one built from a gRPC request's tensor; ``binary``: its raw bytes)."""
    datatype = spec.get("datatype")
    if datatype not in _INPUT_TYPES:
        raise bad_request(
            f"inputs[0].datatype must be FP32 or FP64, got {datatype!r}: send the rows as "
            "floating-point values (NaN for missing)"
        )
    n, F = _shape(spec)
    dtype = DTYPES[datatype]
    params = _parameters(spec, "inputs[0].parameters")
    if "binary_data_size" in params:
        size = params["binary_data_size"]
        if size != n * F * dtype.itemsize or size != len(binary):
            raise bad_request(
                f"inputs[0].parameters.binary_data_size={size!r}: shape {[n, F]} of {datatype} "
                f"is {n * F * dtype.itemsize} bytes and the body carries {len(binary)}"
            )
        return np.frombuffer(binary, dtype=dtype).reshape(n, F)
    if "data" not in spec:
        raise bad_request("inputs[0] has no data: give data, or binary_data_size with bytes")
    values = _flat_data(spec["data"])
    if len(values) != n * F:
        raise bad_request(
            f"inputs[0].data has {len(values)} values but shape {[n, F]} needs {n * F}: send "
            "n_rows * n_features values, row-major"
        )
    try:
        rows = np.array(values, dtype=np.float64)
    except OverflowError:  # an integer literal of more digits than FP64 holds
        raise bad_request("inputs[0].data holds an integer beyond FP64's range") from None
    except (TypeError, ValueError):
        raise bad_request("inputs[0].data must hold numbers only (NaN for missing)") from None
    if rows.ndim != 1:
        raise bad_request("inputs[0].data must hold numbers only (NaN for missing)")
    with np.errstate(over="ignore"):  # a number that rounds to FP32's largest is held
        out = rows.astype(dtype)
    if dtype == np.float32 and np.isinf(out).any():  # a finite number FP32 cannot hold?
        over = np.isfinite(rows) & np.isinf(out)
        if over.any():
            raise bad_request(
                f"inputs[0].data holds {float(rows[over][0])!r}, beyond FP32's range: send the "
                "rows as FP64, or values within +-3.4e38"
            )
    return out.reshape(n, F)


def _output_specs(obj: dict, binary_default: bool) -> tuple[OutputSpec, ...]:
    outputs = obj.get("outputs")
    if outputs is None:
        return ()
    if not isinstance(outputs, list) or not all(isinstance(o, dict) for o in outputs):
        raise bad_request('outputs must be a list of objects like {"name": "shap_values"}')
    specs = []
    for i, out in enumerate(outputs):
        name = out.get("name")
        if not isinstance(name, str):
            raise bad_request(f"outputs[{i}].name must be a string, got {name!r}")
        params = dict(_parameters(out, f"outputs[{i}].parameters"))
        binary = bool(params.pop("binary_data", binary_default))
        specs.append(OutputSpec(name, params, binary))
    return tuple(specs)


#: Binary requests' JSON headers already read -> the request less its rows: a client sends the
#: same header with every request of one shape, so it is parsed and checked once.
_HEADERS: dict[bytes, tuple] = {}
_HEADERS_KEPT = 256
#: Binary answers' JSON headers and HTTP headers by (model, version, id, tensors' names, dtypes
#: and shapes).
_RESPONSE_HEADS: dict[tuple, tuple] = {}


def parse_infer(body: bytes, header_length: str | None = None) -> InferRequest:
    """An infer request's body (and its :data:`HEADER_LENGTH` header) -> :class:`InferRequest`.

    Raises
    ------
    ProtocolError
        400 with the field at fault: no or several inputs, a shape that is not ``[n, F]``, a
        datatype other than FP32 / FP64, data of the wrong length, malformed outputs.
    """
    if header_length is not None and header_length.isascii() and header_length.isdigit():
        n = int(header_length)
        known = _HEADERS.get(body[:n]) if 0 < n <= len(body) else None
        if known is not None and known[0] == len(body) - n:
            _, dtype, shape, request_id, outputs, binary_default, parameters = known
            rows = np.frombuffer(body, dtype=dtype, offset=n).reshape(shape)
            return InferRequest(request_id, rows, outputs, binary_default, parameters)
    request, binary_input = _parse_infer(body, header_length)
    if binary_input and header_length is not None:
        if len(_HEADERS) >= _HEADERS_KEPT:
            _HEADERS.clear()
        n = int(header_length)
        r = request
        _HEADERS[body[:n]] = (len(body) - n, r.rows.dtype, r.rows.shape, r.id, r.outputs,
                              r.binary_default, r.parameters)  # fmt: skip
    return request


def _parse_infer(body: bytes, header_length: str | None) -> tuple[InferRequest, bool]:
    """The request, and whether its rows came as binary data."""
    obj, binary = _split_body(body, header_length)
    inputs = obj.get("inputs")
    if not isinstance(inputs, list) or len(inputs) != 1 or not isinstance(inputs[0], dict):
        count = len(inputs) if isinstance(inputs, list) else 0
        raise bad_request(
            f"inputs must hold exactly one tensor (the rows, shape [n_rows, n_features]), got "
            f"{count}"
        )
    params = _parameters(obj, "parameters")
    binary_default = bool(params.get("binary_data_output", False))
    params = {
        key: value
        for key, value in params.items()
        if key != "binary_data_output" and key not in IGNORED_PARAMETERS
    }
    request_id = obj.get("id")
    request = InferRequest(
        None if request_id is None else str(request_id),
        input_rows(inputs[0], binary),
        _output_specs(obj, binary_default),
        binary_default,
        params,
    )
    return request, "binary_data_size" in _parameters(inputs[0], "inputs[0].parameters")


def _json_values(a: np.ndarray) -> Any:
    """Flat values of ``a`` for JSON: float32 widened exactly (they read back bit for bit); a
    NumPy array where orjson writes it (finite values: orjson would write NaN as null)."""
    flat = a.astype(np.float64).ravel() if a.dtype.kind == "f" else a.ravel()
    if orjson is not None and (flat.dtype.kind != "f" or np.isfinite(flat).all()):
        return np.ascontiguousarray(flat)
    return flat.tolist()


def _dumps_head(head: dict) -> bytes:
    """The response's JSON: by orjson unless a tensor holds NaN or infinities (a list then)."""
    if orjson is not None and not any(isinstance(t.get("data"), list) for t in head["outputs"]):
        return orjson.dumps(head, option=orjson.OPT_SERIALIZE_NUMPY)
    return json.dumps(head, separators=(",", ":"), default=lambda a: a.tolist()).encode()


def little_bytes(a: np.ndarray) -> bytes:
    """``a``'s values as little-endian bytes, row-major."""
    order = a.dtype.byteorder
    if order == ">" or (order == "=" and sys.byteorder == "big"):
        a = a.astype(a.dtype.newbyteorder("<"))
    return a.tobytes()


def encode_response(
    model: str,
    version: str,
    request_id: str | None,
    outputs: list[tuple[str, np.ndarray, bool]],
) -> tuple[bytes, dict[str, str]]:
    """An infer response: body and headers, from ``(name, array, binary)`` outputs.

    Binary outputs follow the JSON header in order; the headers then carry its length.
    """
    binary = all(b for _, _, b in outputs)
    if binary:  # the JSON header of answers of one shape is made once
        key = (model, version, request_id, tuple((n, a.dtype, a.shape) for n, a, _ in outputs))
        known = _RESPONSE_HEADS.get(key)
        if known is not None:
            return known[0] + b"".join(map(little_bytes, (a for _, a, _ in outputs))), known[1]
    tensors, blobs = [], []
    for name, array, as_binary in outputs:
        array = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))
        tensor: dict[str, Any] = {
            "name": name,
            "datatype": DATATYPE_OF[np.dtype(array.dtype)],
            "shape": list(array.shape),
        }
        if as_binary:
            blob = array.tobytes()
            tensor["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        else:
            tensor["data"] = _json_values(array)
        tensors.append(tensor)
    head: dict[str, Any] = {"model_name": model, "model_version": version, "outputs": tensors}
    if request_id is not None:
        head["id"] = request_id
    header = _dumps_head(head)
    headers = {"Content-Type": "application/json"}
    if blobs:
        headers = {"Content-Type": "application/octet-stream", HEADER_LENGTH: str(len(header))}
    if binary:
        if len(_RESPONSE_HEADS) >= _HEADERS_KEPT:
            _RESPONSE_HEADS.clear()
        _RESPONSE_HEADS[key] = (header, headers)
    return header + b"".join(blobs), headers


def server_version() -> str:
    """distshap's version as installed ("unknown" where it is not)."""
    try:
        from importlib.metadata import version

        return version("distshap")
    except Exception:
        return "unknown"
