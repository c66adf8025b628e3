"""The Open Inference Protocol's gRPC messages, built at import from a table.

The protocol (KServe v2; Triton's clients speak it) names its service
``inference.GRPCInferenceService``. Protobuf's wire format carries field numbers and values,
never message names, so the messages here keep the protocol's field numbers and kinds under a
package of distshap's own, in a descriptor pool of their own: a process that also imports a
client's generated messages (``tritonclient.grpc``, whose package is ``inference``) holds both
without a clash, and no generated code ties this module to one protobuf release.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

__all__ = ["SERVICE", "messages"]

#: The protocol's service name: its methods' paths are ``/SERVICE/Method``.
SERVICE = "inference.GRPCInferenceService"
_PACKAGE = "distshap.oip"

_F = descriptor_pb2.FieldDescriptorProto
_KINDS = {
    "bool": _F.TYPE_BOOL,
    "int32": _F.TYPE_INT32,
    "int64": _F.TYPE_INT64,
    "uint32": _F.TYPE_UINT32,
    "uint64": _F.TYPE_UINT64,
    "float": _F.TYPE_FLOAT,
    "double": _F.TYPE_DOUBLE,
    "string": _F.TYPE_STRING,
    "bytes": _F.TYPE_BYTES,
}

#: Message -> its fields: (name, number, kind, how). ``how``: "" one value, "repeated", "map"
#: (string keys, message values), "oneof" (one of the message's fields that share a oneof).
_MESSAGES: dict[str, list[tuple[str, int, str, str]]] = {
    "ServerLiveRequest": [],
    "ServerLiveResponse": [("live", 1, "bool", "")],
    "ServerReadyRequest": [],
    "ServerReadyResponse": [("ready", 1, "bool", "")],
    "ModelReadyRequest": [("name", 1, "string", ""), ("version", 2, "string", "")],
    "ModelReadyResponse": [("ready", 1, "bool", "")],
    "ServerMetadataRequest": [],
    "ServerMetadataResponse": [
        ("name", 1, "string", ""),
        ("version", 2, "string", ""),
        ("extensions", 3, "string", "repeated"),
    ],
    "ModelMetadataRequest": [("name", 1, "string", ""), ("version", 2, "string", "")],
    "TensorMetadata": [
        ("name", 1, "string", ""),
        ("datatype", 2, "string", ""),
        ("shape", 3, "int64", "repeated"),
    ],
    "ModelMetadataResponse": [
        ("name", 1, "string", ""),
        ("versions", 2, "string", "repeated"),
        ("platform", 3, "string", ""),
        ("inputs", 4, "TensorMetadata", "repeated"),
        ("outputs", 5, "TensorMetadata", "repeated"),
    ],
    "InferParameter": [
        ("bool_param", 1, "bool", "oneof"),
        ("int64_param", 2, "int64", "oneof"),
        ("string_param", 3, "string", "oneof"),
        ("double_param", 4, "double", "oneof"),
        ("uint64_param", 5, "uint64", "oneof"),
    ],
    "InferTensorContents": [
        ("bool_contents", 1, "bool", "repeated"),
        ("int_contents", 2, "int32", "repeated"),
        ("int64_contents", 3, "int64", "repeated"),
        ("uint_contents", 4, "uint32", "repeated"),
        ("uint64_contents", 5, "uint64", "repeated"),
        ("fp32_contents", 6, "float", "repeated"),
        ("fp64_contents", 7, "double", "repeated"),
        ("bytes_contents", 8, "bytes", "repeated"),
    ],
    "InferInputTensor": [
        ("name", 1, "string", ""),
        ("datatype", 2, "string", ""),
        ("shape", 3, "int64", "repeated"),
        ("parameters", 4, "InferParameter", "map"),
        ("contents", 5, "InferTensorContents", ""),
    ],
    "InferRequestedOutputTensor": [
        ("name", 1, "string", ""),
        ("parameters", 2, "InferParameter", "map"),
    ],
    "ModelInferRequest": [
        ("model_name", 1, "string", ""),
        ("model_version", 2, "string", ""),
        ("id", 3, "string", ""),
        ("parameters", 4, "InferParameter", "map"),
        ("inputs", 5, "InferInputTensor", "repeated"),
        ("outputs", 6, "InferRequestedOutputTensor", "repeated"),
        ("raw_input_contents", 7, "bytes", "repeated"),
    ],
    "InferOutputTensor": [
        ("name", 1, "string", ""),
        ("datatype", 2, "string", ""),
        ("shape", 3, "int64", "repeated"),
        ("parameters", 4, "InferParameter", "map"),
        ("contents", 5, "InferTensorContents", ""),
    ],
    "ModelInferResponse": [
        ("model_name", 1, "string", ""),
        ("model_version", 2, "string", ""),
        ("id", 3, "string", ""),
        ("parameters", 4, "InferParameter", "map"),
        ("outputs", 5, "InferOutputTensor", "repeated"),
        ("raw_output_contents", 6, "bytes", "repeated"),
    ],
}


def _set_kind(field: Any, kind: str) -> None:
    if kind in _KINDS:
        field.type = _KINDS[kind]
    else:
        field.type = _F.TYPE_MESSAGE
        field.type_name = f".{_PACKAGE}.{kind}"


def _message(name: str, fields: list) -> descriptor_pb2.DescriptorProto:
    proto = descriptor_pb2.DescriptorProto(name=name)
    for field_name, number, kind, how in fields:
        field = proto.field.add(name=field_name, number=number, label=_F.LABEL_OPTIONAL)
        if how == "map":  # map<string, kind>: a repeated entry message nested in this one
            entry = proto.nested_type.add(name=field_name.title().replace("_", "") + "Entry")
            entry.options.map_entry = True
            entry.field.add(name="key", number=1, label=_F.LABEL_OPTIONAL, type=_F.TYPE_STRING)
            _set_kind(entry.field.add(name="value", number=2, label=_F.LABEL_OPTIONAL), kind)
            field.label = _F.LABEL_REPEATED
            field.type = _F.TYPE_MESSAGE
            field.type_name = f".{_PACKAGE}.{name}.{entry.name}"
            continue
        _set_kind(field, kind)
        if how == "repeated":
            field.label = _F.LABEL_REPEATED
        elif how == "oneof":
            if not proto.oneof_decl:
                proto.oneof_decl.add(name="parameter_choice")
            field.oneof_index = 0
    return proto


def _build() -> dict[str, type]:
    file = descriptor_pb2.FileDescriptorProto(
        name="distshap/oip.proto", package=_PACKAGE, syntax="proto3"
    )
    for name, fields in _MESSAGES.items():
        file.message_type.append(_message(name, fields))
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(file.SerializeToString())
    described = pool.FindFileByName(file.name)
    make = getattr(message_factory, "GetMessageClass", None)  # protobuf >= 4.22
    if make is None:
        make = message_factory.MessageFactory(pool).GetPrototype
    return {name: make(described.message_types_by_name[name]) for name in _MESSAGES}


#: Message name -> its class (e.g. ``messages["ModelInferRequest"]``).
messages: dict[str, type] = _build()
