"""The connection's flow control: a connection paused while an answer is prepared reads on once
it is delivered, also when the buffer then ends inside the next request's body."""

from __future__ import annotations

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
