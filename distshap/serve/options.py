"""Where an explanation server listens, who may call it, and its limits."""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass

__all__ = ["ServeOptions", "check_access", "host_port", "reserve_port"]


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
    inline_rows : int
        Batches of at most this many rows, when nothing else runs, run on the event loop's
        thread itself instead of an executor thread (in-process, one slot: see
        :mod:`~distshap.serve.batching`); 0: every batch on the executor's threads.
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
    reuse_port : bool
        Listen with ``SO_REUSEPORT`` (the processes of a
        :class:`~distshap.serve.group.ServerGroup` share the port).
    grpc_port : int or None
        Also serve the protocol over gRPC on this port (0: any free port; None: HTTP only;
        :mod:`~distshap.serve.grpc_front`), with the same models, batches, limits and token.
    """

    host: str = "127.0.0.1"
    port: int = 8000
    token: str | None = None
    insecure: bool = False
    max_batch_rows: int = 16384
    max_wait: float = 0.002
    inline_rows: int = 64
    max_queue_rows: int = 262144
    max_request_rows: int = 100_000
    max_body_bytes: int = 256 << 20
    request_timeout: float = 30.0
    drain_timeout: float = 30.0
    retry_after: int = 1
    reuse_port: bool = False
    grpc_port: int | None = None

    def __post_init__(self) -> None:
        grpc_port = self.grpc_port
        is_port = type(grpc_port) is int and 0 <= grpc_port < 65536
        if grpc_port is not None and not is_port:
            raise ValueError(
                f"grpc_port={grpc_port!r}: give a port for the gRPC endpoint (0: any free one), "
                "or None for HTTP only"
            )
        if grpc_port and grpc_port == self.port:
            raise ValueError(
                f"grpc_port={grpc_port} is the HTTP port too: give gRPC a port of its own"
            )
        rows = self.inline_rows
        if not isinstance(rows, int) or isinstance(rows, bool) or rows < 0:
            raise ValueError(
                f"inline_rows={rows!r}: give the rows of a batch run on the event loop at most, "
                ">= 0 (0: every batch on the executor's threads)"
            )


def check_access(options: ServeOptions) -> None:
    """Refuse a non-loopback host without a token or ``insecure``, and a token clients cannot
    send (before any model loads)."""
    try:
        loopback = options.host == "localhost" or ipaddress.ip_address(options.host).is_loopback
    except ValueError:
        loopback = False
    token = options.token
    if token and not (token.isascii() and token.isprintable() and token == token.strip()):
        raise ValueError(
            "token: give printable ASCII characters without spaces at either end (HTTP "
            "headers and gRPC metadata carry it as ASCII)"
        )
    if not (loopback or options.token or options.insecure):
        raise ValueError(
            f"listening on {options.host!r} (not loopback) needs a token: pass --token "
            "(or set DISTSHAP_SERVE_TOKEN), or --insecure to allow anyone on the network"
        )


def reserve_port(host: str, port: int) -> socket.socket:
    """A socket bound to the address with ``SO_REUSEPORT``, not listening: it holds the port
    while the processes listen on it. The port is first bound without ``SO_REUSEPORT`` (and
    picked, for port 0), so that a port another server holds is refused as for one process,
    not shared with it."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((host, port))  # OSError when the port is taken
        port = probe.getsockname()[1]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    return sock


def host_port(host: str, port: int) -> str:
    """``host:port`` as clients name an address (an IPv6 host in brackets)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
