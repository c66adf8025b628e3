"""HTTP/1.1 on an asyncio event loop: one protocol object a connection, no thread a connection.

The server's requests are small and many, so the connection does the least a request needs:
it finds the head (request line and headers) in the bytes received, hands it to the
application's ``begin`` (which may answer at once: routing, token and size checks happen
before the body is read, so a 413 is sent without reading a too-large body), collects
``Content-Length`` bytes of body (answering ``Expect: 100-continue``), and hands the whole
request to the application's ``respond``, whose answer is written as soon as it is ready.
Requests of one connection are answered in order (pipelined requests wait their turn);
keep-alive is the default of HTTP/1.1, ``Connection: close`` and HTTP/1.0 close after the
answer. Bodies need ``Content-Length``: ``Transfer-Encoding`` is refused with 411.

The body of a request answered from its head is dropped as it arrives, never held; one of more
than :data:`_READ_AHEAD` bytes still to come ends the connection after the answer instead. A
connection that closes after an answer while the client is still sending sends the answer with
a FIN and drops what arrives for a while (closing at once would reset the connection before
the client reads its answer). A client that half-closes its side after its requests gets their
answers, then the connection closes. A request whose head or body stops arriving for
``stall_seconds`` (:func:`sweep`) is answered 408 and its connection closed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

__all__ = ["Connection", "Reply", "Request"]

#: Bytes of a request's head (request line and headers) at most (then 431).
MAX_HEAD_BYTES = 64 << 10
#: Bytes buffered beyond the request being answered before the connection stops reading; also
#: the most body bytes a connection drops to stay open after answering a request from its head.
_READ_AHEAD = 1 << 20

#: Seconds a connection closed after an early answer keeps dropping what the client sends.
_LINGER_SECONDS = 2.0

_REASONS = {s.value: s.phrase for s in HTTPStatus}


class Reply(Exception):
    """An answer: status, body and headers (raised for answers other than 200)."""

    def __init__(self, status: int, body: bytes = b"", headers: dict | None = None) -> None:
        super().__init__(status)
        self.status, self.body, self.headers = status, body, headers or {}


@dataclass(eq=False)
class Request:
    """One request: method, path (query cut), headers (lower-case names), body when read."""

    method: str
    path: str
    headers: dict[str, str]
    length: int
    keep_alive: bool
    received: float
    body: bytes = b""
    #: what the application keeps between ``begin`` and ``respond``
    state: Any = None
    #: the application's seconds spent on the request by stage (metrics)
    spent: Any = (0.0, 0.0)


class _Malformed(Exception):
    """A request that cannot be read: status and a one-line message; the connection ends."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


#: Heads already read -> what :func:`_parse_head` made of them: a client sends the same head
#: with every request of one size, so it is parsed once (the headers dict is shared, read-only).
_HEADS: dict[bytes, tuple] = {}
_HEADS_KEPT = 256


def _parse_head(head: bytes) -> Request:
    """The request line and headers -> :class:`Request` (:class:`_Malformed` otherwise)."""
    known = _HEADS.get(head)
    if known is None:
        known = _read_head(head)
        if len(_HEADS) >= _HEADS_KEPT:
            _HEADS.clear()
        _HEADS[head] = known
    return Request(*known, time.perf_counter())


def _read_head(head: bytes) -> tuple:
    """The fields of a :class:`Request` but the time, from its head."""
    lines = head.decode("latin-1").split("\r\n")  # latin-1 decodes every byte
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise _Malformed(400, "malformed request line: send 'METHOD /path HTTP/1.1'")
    method, target, version = parts
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name[-1] in " \t":
            raise _Malformed(400, f"malformed header line {line[:80]!r}: send 'Name: value'")
        headers[name.lower()] = value.strip()
    if "transfer-encoding" in headers:
        raise _Malformed(411, "Transfer-Encoding is not supported: send the body with a "
                              "Content-Length header")  # fmt: skip
    length_text = headers.get("content-length", "0")
    if not (length_text.isascii() and length_text.isdigit()):  # "²".isdigit() is True
        raise _Malformed(400, f"Content-Length must be a byte count, got {length_text[:40]!r}")
    connection = headers.get("connection", "").lower()
    keep_alive = "close" not in connection and (version != "HTTP/1.0" or "keep-alive" in connection)
    path = target.split("?", 1)[0]
    return method, path, headers, int(length_text), keep_alive


def encode_reply(status: int, body: bytes, headers: dict, close: bool) -> bytes:
    """The bytes of an HTTP/1.1 answer (status line, headers, ``Content-Length``, body)."""
    lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Unknown')}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    lines.append(f"Content-Length: {len(body)}")
    if close:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


class Connection(asyncio.Protocol):
    """One client connection of the server ``app``.

    ``app`` provides ``begin(request) -> Reply | None`` (None: read the body),
    ``respond(request, deliver) -> Reply | None`` (the body read; None: the application calls
    ``deliver(request, reply)`` later, from a callback of the loop), ``error(status,
    message) -> Reply`` for malformed requests, ``answered(request, reply)`` (metrics, logs),
    ``abandoned(request)`` (the client left mid-body), ``opened`` / ``closed(connection)``
    and ``closing_connections`` (set by a drain).
    """

    def __init__(self, app: Any) -> None:
        self.app = app
        self.transport: asyncio.Transport | None = None
        self._buf = bytearray()
        self._request: Request | None = None  # head read, body awaited
        self._skip = 0  # body bytes still to drop (a request answered from its head)
        self._busy = False  # an answer is being prepared
        self._paused = False
        self._closing = False
        self._eof = False  # the client closed its side: answer what was read, then close
        self._linger: asyncio.TimerHandle | None = None
        self.last_active = time.monotonic()

    # asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.app.opened(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        request = self._request
        if request is not None:
            self.app.abandoned(request)  # the client left while sending the body
        self._request = None
        if self._linger is not None:
            self._linger.cancel()
        self.app.closed(self)

    def data_received(self, data: bytes) -> None:
        if self._linger is not None:
            return  # the answer said Connection: close; what still arrives is dropped
        self._buf += data
        self.last_active = time.monotonic()
        if not self._busy:
            self._advance()
        elif len(self._buf) > _READ_AHEAD and not self._paused:
            self._paused = True  # a client that sends faster than it reads waits
            self.transport.pause_reading()

    def eof_received(self) -> bool:
        """The client closed its side: the requests read whole are still answered (True keeps
        the transport open to write them), then the connection closes."""
        self._eof = True
        if not self._busy:
            self._advance()
        return True

    # requests -----------------------------------------------------------------------------

    @property
    def idle(self) -> bool:
        """No request is being read or answered."""
        return not self._busy and self._request is None and not self._buf and not self._skip

    def expire(self, idle_limit: float, stall_limit: float) -> None:
        """Close the connection if nothing arrived since ``idle_limit`` (monotonic seconds)
        while it waits for a request, or since ``stall_limit`` while a request's head or body
        is still arriving (answered 408 first); a request being answered is not touched."""
        if self._busy or self._closing or self._linger is not None:
            return
        if self.idle:
            if self.last_active < idle_limit:
                self.close()
        elif self.last_active < stall_limit:
            request, self._request = self._request, None
            if request is None and not self._buf:  # the body of a request already answered
                self.close()
                return
            self._fail(408, "the request stopped arriving: send its head and body without "
                            "pausing", request)  # fmt: skip

    def close(self) -> None:
        """Close the connection (what is being written is written first)."""
        if not self._closing:
            self._closing = True
            self.transport.close()

    def _advance(self) -> None:
        """Read and answer the requests in the buffer, one at a time; with none being answered,
        read on (the buffer ends inside a request whose rest is still to come), or close once
        the client has closed its side."""
        self._read_requests()
        if self._busy or self._closing:
            return
        if self._eof:
            if self._linger is None:
                self.close()  # nothing more can arrive
        elif self._paused:
            self._paused = False
            self.transport.resume_reading()

    def _read_requests(self) -> None:
        while not self._busy and not self._closing and self._linger is None:
            if self._skip:
                dropped = min(self._skip, len(self._buf))
                del self._buf[:dropped]
                self._skip -= dropped
                if self._skip:
                    return
            request = self._request
            if request is None:
                end = self._buf.find(b"\r\n\r\n", 0, MAX_HEAD_BYTES + 4)
                if end < 0:
                    if len(self._buf) > MAX_HEAD_BYTES:
                        self._fail(431, "the request's head is larger than 64 KiB")
                    return
                head = bytes(self._buf[:end])
                del self._buf[: end + 4]
                try:
                    request = _parse_head(head)
                except _Malformed as bad:
                    self._fail(bad.status, str(bad))
                    return
                early = self.app.begin(request)
                if early is not None:
                    if early.status == 413 or request.length - len(self._buf) > _READ_AHEAD:
                        request.keep_alive = False  # the body is not read: the connection ends
                    dropped = min(request.length, len(self._buf))
                    del self._buf[:dropped]
                    self._skip = request.length - dropped  # dropped as it arrives
                    self._write(early, request)
                    continue
                self._request = request
                if request.length > len(self._buf) and (
                    request.headers.get("expect", "").lower() == "100-continue"
                ):
                    self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            if len(self._buf) < request.length:
                return
            request.body = bytes(self._buf[: request.length])
            del self._buf[: request.length]
            self._request = None
            self._answer(request)

    def _answer(self, request: Request) -> None:
        self._busy = True
        try:
            answer = self.app.respond(request, self.deliver)
        except Reply as reply:
            answer = reply
        if answer is not None:  # else the application calls deliver when it has the answer
            self._busy = False
            self._write(answer, request)

    def deliver(self, request: Request, reply: Reply) -> None:
        """The answer to ``request`` (called on the loop, after ``respond`` returned None)."""
        self._busy = False
        self._write(reply, request)
        if not self._closing:
            self._advance()

    def _write(self, reply: Reply, request: Request) -> None:
        self.app.answered(request, reply)  # metrics first: a client sees them with its answer
        if self._closing:
            return
        self.last_active = time.monotonic()
        close = not request.keep_alive or self.app.closing_connections
        self.transport.write(encode_reply(reply.status, reply.body, reply.headers, close))
        if close and self._skip:
            self._linger_close()  # the client is still sending the body
        elif close:
            self.close()

    def _linger_close(self) -> None:
        """Close after the answer without reading the rest of the body: the answer's bytes are
        sent with a FIN, what the client still sends is dropped for a few seconds (closing at
        once with unread bytes would reset the connection before the client reads the answer).
        """
        self._buf.clear()
        self._skip = 0
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self._linger = asyncio.get_running_loop().call_later(_LINGER_SECONDS, self.close)

    def _fail(self, status: int, message: str, request: Request | None = None) -> None:
        """Answer a request that cannot be read, or stopped arriving (``request``: one begun,
        counted and let go as answered), then close."""
        reply = self.app.error(status, message)
        if request is not None:
            self.app.answered(request, reply)
        self.transport.write(encode_reply(reply.status, reply.body, reply.headers, True))
        self.close()


def sweep(connections: set, idle_seconds: float, stall_seconds: float,
          now: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
    """Close the connections that waited for a request more than ``idle_seconds``, and those
    whose request stopped arriving more than ``stall_seconds`` ago (:meth:`Connection.expire`).
    """
    at = now()
    for conn in list(connections):
        conn.expire(at - idle_seconds, at - stall_seconds)
