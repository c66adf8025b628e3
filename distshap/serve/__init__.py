"""The explanation service: registered models answered over the Open Inference Protocol.

:func:`serve` (and ``distshap serve``) loads models from files, keeps them packed and resident
(in this process or on every Dask worker), batches concurrent requests per model and output,
and answers each with the values ``TreeExplainer(model)`` gives for its rows, bit for bit.
Modules: :mod:`~distshap.serve.protocol` (JSON and binary tensors, validation),
:mod:`~distshap.serve.registry` (models by name), :mod:`~distshap.serve.batching` (queues),
:mod:`~distshap.serve.backends` (in-process and Dask executors),
:mod:`~distshap.serve.connection` (HTTP/1.1 on the event loop),
:mod:`~distshap.serve.server` (routes, limits, metrics, drain), :mod:`~distshap.serve.options`
(address, token, limits), :mod:`~distshap.serve.grpc_front` and
:mod:`~distshap.serve.grpc_messages` (the protocol over gRPC), :mod:`~distshap.serve.group`
(several server processes on one port), :mod:`~distshap.serve.command`.
"""

from distshap.serve.command import serve
from distshap.serve.group import ServerGroup
from distshap.serve.registry import ModelSpec, parse_model_spec
from distshap.serve.server import ExplanationServer, ServeOptions

__all__ = [
    "ExplanationServer",
    "ModelSpec",
    "ServeOptions",
    "ServerGroup",
    "parse_model_spec",
    "serve",
]
