"""The Open Inference Protocol codecs: JSON and binary tensors in, every malformed field a 400."""

from __future__ import annotations

import json

import numpy as np
import pytest

from distshap.serve.protocol import ProtocolError, encode_response, parse_infer


def _body(**fields) -> bytes:
    obj = {"inputs": [{"name": "rows", "shape": [2, 3], "datatype": "FP32",
                       "data": [1, 2, 3, 4, 5, 6]}]}  # fmt: skip
    obj["inputs"][0].update(fields)
    return json.dumps(obj).encode()


def _with(**fields) -> bytes:
    """A request of :func:`_body`'s rows with top-level ``fields`` added."""
    return json.dumps({**json.loads(_body()), **fields}).encode()


def test_json_rows_flat_and_nested():
    flat = parse_infer(_body())
    nested = parse_infer(_body(data=[[1, 2, 3], [4, 5, 6]]))
    assert flat.rows.dtype == np.float32 and flat.rows.shape == (2, 3)
    np.testing.assert_array_equal(flat.rows, nested.rows)
    assert parse_infer(_body(datatype="FP64")).rows.dtype == np.float64


def test_json_fp32_largest_as_printed_is_held():
    largest = np.finfo(np.float32).max
    rows = parse_infer(_body(data=[1, 2, 3, 4, 5, float(str(largest))])).rows  # 3.4028235e+38
    assert rows[1, 2] == largest


def test_binary_rows_and_request_parameters():
    rows = np.arange(6, dtype=np.float64).reshape(2, 3) / 7
    head = json.dumps({
        "inputs": [{"name": "x", "shape": [2, 3], "datatype": "FP64",
                    "parameters": {"binary_data_size": rows.nbytes}}],
        "outputs": [{"name": "top_interactions", "parameters": {"binary_data": True}}],
        "parameters": {"k": 2, "priority": 0},
    }).encode()  # fmt: skip
    req = parse_infer(head + rows.tobytes(), str(len(head)))
    assert req.rows.tobytes() == rows.tobytes()
    assert req.outputs[0].binary and req.outputs[0].parameters == {}
    assert req.parameters == {"k": 2}  # Triton's priority is ignored


@pytest.mark.parametrize(
    "body, header, field",
    [
        (b"{not json", None, "not valid JSON"),
        (b"[]", None, "JSON object"),
        (json.dumps({"inputs": []}).encode(), None, "exactly one tensor"),
        (_body(shape=[6]), None, "inputs[0].shape"),
        (_body(datatype="INT8"), None, "inputs[0].datatype"),
        (_body(data=[1, 2, 3]), None, "inputs[0].data has 3 values"),
        (_body(data=["a"] * 6), None, "numbers only"),
        (_body(data=[1, 2, 3, 4, 5, -1e308]), None, "-1e+308, beyond FP32's range"),
        (_body(data=[1, 2, 3, 4, 5, 3.4028236e38]), None, "3.4028236e+38, beyond FP32's range"),
        (_body(data=[1, 2, 3, 4, 5, 10**400]), None, "integer beyond FP64's range"),
        (_body(shape=[0, 3], data=[]), None, "0 rows"),
        (_body(), "12x", "Inference-Header-Content-Length"),
        (_body(), "100000", "Inference-Header-Content-Length=100000"),
        (_body(parameters={"binary_data_size": 8}), None, "binary_data_size"),
        (_body(shape=[1, 2], data=[[1, 2], [3, 4]]), None, "inputs[0].data has 4 values"),
        (_body(data=[1, [2, 3], 4, 5, 6, 7]), None, "numbers only"),
        (_body(), "\u00b2", "Inference-Header-Content-Length"),
        (_body(parameters=5), None, "inputs[0].parameters must be a JSON object"),
        (_body(parameters="binary_data_size"), None, "inputs[0].parameters must be a JSON"),
        (_with(outputs=[{"name": "margin", "parameters": 5}]), None,
         "outputs[0].parameters must be a JSON object"),
        (_with(outputs=[{"name": "margin", "parameters": "ab"}]), None,
         "outputs[0].parameters must be a JSON object"),
        (_with(parameters=[1]), None, "parameters must be a JSON object"),
    ],
)  # fmt: skip
def test_bad_requests_name_the_field(body, header, field):
    with pytest.raises(ProtocolError) as info:
        parse_infer(body, header)
    assert info.value.status == 400 and field in str(info.value)
    assert "\n" not in str(info.value)


def test_response_json_reads_back_bit_for_bit():
    values = (np.random.default_rng(0).normal(size=(3, 4)) / 3).astype(np.float32)
    body, headers = encode_response("m", "1", "r1", [("shap_values", values, False)])
    out = json.loads(body)
    assert headers["Content-Type"] == "application/json" and out["id"] == "r1"
    back = np.array(out["outputs"][0]["data"], dtype=np.float32).reshape(out["outputs"][0]["shape"])
    assert back.tobytes() == values.tobytes()


def test_response_binary():
    values = np.arange(6, dtype=np.float32).reshape(2, 3)
    pairs = np.zeros((2, 1, 2), np.int32)
    body, headers = encode_response("m", "1", None, [("v", values, True), ("p", pairs, False)])
    n = int(headers["Inference-Header-Content-Length"])
    head = json.loads(body[:n])
    assert head["outputs"][0]["parameters"]["binary_data_size"] == values.nbytes
    assert head["outputs"][1]["datatype"] == "INT32"
    assert body[n:] == values.tobytes()


def test_binary_header_read_once_still_checks_each_body():
    """A repeated binary header is parsed once; each body's rows and length are its own."""
    head = json.dumps({
        "inputs": [{"name": "x", "shape": [2, 3], "datatype": "FP32",
                    "parameters": {"binary_data_size": 24}}],
    }).encode()  # fmt: skip
    for seed in (1, 2):
        rows = np.random.default_rng(seed).normal(size=(2, 3)).astype(np.float32)
        req = parse_infer(head + rows.tobytes(), str(len(head)))
        assert req.rows.tobytes() == rows.tobytes() and req.rows.shape == (2, 3)
    with pytest.raises(ProtocolError, match="binary_data_size=24"):
        parse_infer(head + rows.tobytes()[:-4], str(len(head)))


def test_binary_response_header_made_once_is_the_same():
    from distshap.serve import protocol

    rng = np.random.default_rng(3)
    a, b = rng.random((4, 7), dtype=np.float32), rng.random((4, 7), dtype=np.float32)
    first = encode_response("m", "1", "x", [("shap_values", a, True)])
    second = encode_response("m", "1", "x", [("shap_values", b, True)])  # the header reused
    protocol._RESPONSE_HEADS.clear()
    fresh = encode_response("m", "1", "x", [("shap_values", b, True)])
    assert second == fresh and first[0] != second[0]
    assert second[0].endswith(b.tobytes()) and second[1] == fresh[1]


@pytest.mark.parametrize("flags", [(False, True), (True, False)])
def test_response_of_json_and_binary_outputs_reads_back(flags):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    body, headers = encode_response("m", "1", None, [("x", a, flags[0]), ("y", a + 1, flags[1])])
    length = int(headers["Inference-Header-Content-Length"])
    head = json.loads(body[:length])
    assert [("data" in t) for t in head["outputs"]] == [not f for f in flags]
    assert body[length:] == (a + 1 if flags[1] else a).tobytes()
