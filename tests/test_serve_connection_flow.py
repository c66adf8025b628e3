"""The connection's flow control: a connection paused while an answer is prepared reads on once
it is delivered, also when the buffer then ends inside the next request's body; the body of a
request answered from its head is dropped as it arrives (never held), or ends the connection
with the answer and a FIN when large or when the connection closes (no reset); a client that
closes its side gets its answers; the sweep closes idle connections and answers stalled
requests 408."""

from __future__ import annotations

import asyncio

from distshap.serve import connection
from distshap.serve.connection import Connection, Reply


class _Transport:
    def __init__(self) -> None:
        self.paused = False
        self.written = b""

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def write(self, data: bytes) -> None:
        self.written += data

    def close(self) -> None:
        pass


class _App:
    closing_connections = False

    def __init__(self) -> None:
        self.waiting = []
        self.abandoned_requests = []

    def abandoned(self, request) -> None:
        self.abandoned_requests.append(request)

    def closed(self, conn) -> None:
        pass

    def opened(self, conn) -> None:
        pass

    def begin(self, request):
        return None

    def respond(self, request, deliver):
        self.waiting.append((request, deliver))
        return None  # answered later, as the server does

    def answered(self, request, reply) -> None:
        pass


def _post(length: int) -> bytes:
    return f"POST /x HTTP/1.1\r\nContent-Length: {length}\r\n\r\n".encode()


def test_reads_on_after_the_answer_when_the_next_body_is_incomplete():
    app, transport = _App(), _Transport()
    conn = Connection(app)
    conn.connection_made(transport)
    conn.data_received(_post(1) + b"a")  # the first request, being answered
    assert len(app.waiting) == 1
    big = connection._READ_AHEAD + 10
    conn.data_received(_post(big) + b"b" * (big - 5))  # the next one, its body not all in
    assert transport.paused  # buffered beyond the limit while the first is answered
    request, deliver = app.waiting.pop()
    deliver(request, Reply(200, b"ok"))
    assert transport.written.startswith(b"HTTP/1.1 200 OK")
    assert not transport.paused  # the rest of the body can arrive
    conn.data_received(b"b" * 5)
    assert len(app.waiting) == 1 and len(app.waiting[0][0].body) == big


def test_a_content_length_of_other_digits_is_a_400():
    class App(_App):
        def error(self, status, message):
            return Reply(status, message.encode())

    transport = _Transport()
    conn = Connection(App())
    conn.connection_made(transport)
    conn.data_received("POST /x HTTP/1.1\r\nContent-Length: ²\r\n\r\n".encode("latin-1"))
    assert transport.written.startswith(b"HTTP/1.1 400 ")


class _Closing(_Transport):
    def __init__(self) -> None:
        super().__init__()
        self.closed = False
        self.eof = False

    def close(self) -> None:
        self.closed = True

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.eof = True


class _Refusing(_App):
    """Answers every request from its head (as a 404 or 401 does)."""

    def begin(self, request):
        return Reply(404, b"no")

    def error(self, status, message):
        return Reply(status, message.encode())


def _open(app) -> tuple:
    transport = _Closing()
    conn = Connection(app)
    conn.connection_made(transport)
    return conn, transport


def test_a_refused_body_is_dropped_as_it_arrives_and_the_connection_stays_open():
    conn, transport = _open(_Refusing())
    size = connection._READ_AHEAD  # at most this much is dropped to keep the connection
    conn.data_received(_post(size) + b"x" * 1000)
    assert transport.written.startswith(b"HTTP/1.1 404 ") and b"Connection: close" not in (
        transport.written
    )
    rest = size - 1000
    while rest > 65536:
        conn.data_received(b"x" * 65536)
        rest -= 65536
        assert len(conn._buf) == 0  # nothing of the refused body is held
    conn.data_received(b"x" * rest + _post(0))  # the rest, then a request
    assert transport.written.count(b"HTTP/1.1 404 ") == 2 and not transport.closed


def test_a_large_refused_body_ends_the_connection_after_the_answer_without_a_reset():
    async def run():
        conn, transport = _open(_Refusing())
        conn.data_received(_post(connection._READ_AHEAD + 1001) + b"x" * 1000)
        assert transport.written.startswith(b"HTTP/1.1 404 ") and b"Connection: close" in (
            transport.written
        )
        assert transport.eof and not transport.closed  # the answer with a FIN; the rest dropped
        conn.data_received(b"x" * 65536)
        assert len(conn._buf) == 0
        conn._linger.cancel()

    asyncio.run(run())


def test_connection_close_with_a_body_still_coming_lingers_instead_of_resetting():
    async def run():
        conn, transport = _open(_Refusing())
        head = b"POST /x HTTP/1.1\r\nConnection: close\r\nContent-Length: 5000\r\n\r\n"
        conn.data_received(head + b"x" * 100)
        assert b"Connection: close" in transport.written
        assert transport.eof and not transport.closed
        conn._linger.cancel()

    asyncio.run(run())


def test_a_client_that_closes_its_side_still_gets_its_answers():
    app = _App()
    conn, transport = _open(app)
    conn.data_received(_post(1) + b"a" + _post(1) + b"b")
    assert conn.eof_received() is True  # keep the transport open to answer
    assert not transport.closed and len(app.waiting) == 1
    request, deliver = app.waiting.pop()
    deliver(request, Reply(200, b"one"))
    assert not transport.closed and len(app.waiting) == 1  # the second request read on
    request, deliver = app.waiting.pop()
    deliver(request, Reply(200, b"two"))
    assert transport.written.count(b"HTTP/1.1 200 OK") == 2 and transport.closed


def test_sweep_closes_idle_connections_and_answers_stalled_requests_408():
    class App(_Refusing):
        def __init__(self) -> None:
            super().__init__()
            self.statuses = []

        def begin(self, request):
            return None

        def answered(self, request, reply) -> None:
            self.statuses.append(reply.status)

    idle, idle_t = _open(App())
    head, head_t = _open(App())
    head.data_received(b"POST /x HTTP/1.1\r\nContent-")  # half a head
    body_app = App()
    body, body_t = _open(body_app)
    body.data_received(_post(10) + b"abc")  # half a body
    busy, busy_t = _open(App())
    busy.data_received(_post(1) + b"a")  # being answered
    refused, refused_t = _open(_Refusing())
    refused.data_received(_post(100) + b"abc")  # answered 404, the rest of its body to drop
    everyone = {idle, head, body, busy, refused}
    now = max(c.last_active for c in everyone)
    connection.sweep(everyone, 60.0, 30.0, now=lambda: now + 10)
    assert not any(t.closed for t in (idle_t, head_t, body_t, busy_t, refused_t))
    connection.sweep(everyone, 60.0, 30.0, now=lambda: now + 31)
    assert head_t.written.startswith(b"HTTP/1.1 408 ") and head_t.closed
    assert body_t.written.startswith(b"HTTP/1.1 408 ") and body_t.closed
    assert body_app.statuses == [408]  # the begun request counted as answered, once
    body.connection_lost(None)
    assert body_app.abandoned_requests == []  # released by answered(), not again
    assert refused_t.closed and refused_t.written.count(b"HTTP/1.1") == 1  # no second answer
    assert not idle_t.closed and not busy_t.closed
    connection.sweep(everyone, 60.0, 30.0, now=lambda: now + 61)
    assert idle_t.closed and not busy_t.closed
