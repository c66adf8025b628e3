"""A front's side of the device processes: batches sent down each pipe, answers read back.

A front's :class:`DeviceExecutor` sends each batch to the live device process with the fewest
rows in flight, written by the thread that submits it when the pipe takes it at once (a sender
thread writes what it does not take). Answers are read by the front's event loop itself where
one is given (``loop``: the server's, before it runs; the pipe is one more socket the loop
watches, so an answer reaches its requests without a thread switch or a wake-up of the
loop); without a loop (a front driven from threads), by a thread a pipe. Either way the bytes
that arrive are parsed a piece at a time (:class:`_Answers`): several answers read at once
cost one read. When a device process exits, its batches in flight fail at once with
:class:`~distshap.serve.backends.NoWorkerError` (the server's 503), and so does every new one.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import os
import socket
import struct
import threading
from collections import deque
from concurrent.futures import Future
from multiprocessing.connection import Connection

import numpy as np

from distshap.serve.backends import NoWorkerError
from distshap.serve.registry import Resident
from distshap.serve.wire import (
    ANSWER,
    BATCH,
    BYE,
    DTYPE_CODE,
    DTYPES,
    OUTPUT_NAMES,
    TENSOR,
    TENSOR_NAMES,
    byte_views,
    send_some,
    write_parts,
)

__all__ = ["IN_FLIGHT", "DeviceExecutor", "check_in_flight"]

log = logging.getLogger("distshap.serve")

#: Batches a front keeps in flight on each device process.
IN_FLIGHT = 4
#: Seconds :meth:`DeviceExecutor.close` waits for answers still due, then for its threads.
_CLOSE_SECONDS = 10.0
#: Bytes one read of a pipe takes at most.
_READ_BYTES = 1 << 16
#: Reads of one pipe in one turn of the loop at most.
_READS_A_TURN = 16


def check_in_flight(in_flight: object) -> None:
    """ValueError unless ``in_flight`` (a front's batches in flight on each device process) is
    an int >= 1."""
    if type(in_flight) is not int or in_flight < 1:
        raise ValueError(f"in_flight={in_flight!r}: give the batches a front keeps in flight on "
                         "each device process, an int >= 1")  # fmt: skip


_REMOTE_ERRORS: dict[str, type] = {}


def _remote_error(text: str) -> BaseException:
    """An exception of the type a device process raised (by name), with its message."""
    name, _, message = text.partition("\n")
    cls = _REMOTE_ERRORS.get(name)
    if cls is None:
        cls = _REMOTE_ERRORS[name] = type(name, (RuntimeError,), {"__module__": __name__})
    return cls(message)


class _Answers:
    """The bytes a pipe gave so far, and the whole answers among them."""

    def __init__(self) -> None:
        self.buffer = bytearray()

    def take(self) -> list[tuple[int, dict | None, BaseException | None]]:
        """Every whole answer received, in order, as ``(id, values, error)``, removed from
        the buffer (an answer not yet whole stays)."""
        buf, at, out = self.buffer, 0, []
        while len(buf) - at >= ANSWER.size:
            ident, status, count, size = ANSWER.unpack_from(buf, at)
            body = at + ANSWER.size
            if len(buf) < body + size:
                break
            if status or ident == BYE:
                text = bytes(buf[body : body + size]).decode("utf-8", "replace")
                out.append((ident, None, _remote_error(text) if status else None))
                at = body + size
                continue
            tensors, seen = [], 0
            for _ in range(count):
                name, dtype, ndim = TENSOR.unpack_from(buf, body + seen)
                shape = struct.unpack_from(f"<{ndim}I", buf, body + seen + TENSOR.size)
                seen += TENSOR.size + 4 * ndim
                tensors.append((TENSOR_NAMES[name], DTYPES[dtype], shape))
            end = body + size
            if len(buf) < end + sum(dt.itemsize * math.prod(shape) for _, dt, shape in tensors):
                break
            values = {}
            for name, dtype, shape in tensors:
                count = math.prod(shape)
                values[name] = np.frombuffer(buf, dtype, count, end).reshape(shape).copy()
                end += count * dtype.itemsize
            out.append((ident, values, None))
            at = end
        if at:
            del buf[:at]
        return out


class _Link:
    """A front's view of one device process: its pipe, the batches in flight on it (id ->
    (Future, rows)), the answers being read and the threads that send batches (and read
    answers, without a loop).

    A batch is written by the thread that submits it when nothing waits to be written before
    it and the pipe takes it without blocking (no other thread woken); otherwise, or for the
    rest of it, the sender thread writes it (``outbox``, in order; ``sending`` while it
    writes one)."""

    def __init__(self, index: int, conn: Connection) -> None:
        self.index, self.conn = index, conn
        self.alive = True
        self.rows = 0
        self.in_flight: dict[int, tuple[Future, int]] = {}
        self.outbox: deque = deque()
        self.sending = False
        self.cond = threading.Condition()
        self.sock = socket.socket(fileno=os.dup(conn.fileno()))
        self.answers = _Answers()
        self.chunk = bytearray(_READ_BYTES)
        self.watched = -1  # the descriptor an event loop reads, where one does
        self.sender: threading.Thread | None = None
        self.reader: threading.Thread | None = None

    def put(self, job: tuple | list | None) -> None:
        """Hand ``job`` (the parts of a message; None: the sender's end) to the sender."""
        with self.cond:
            self.outbox.append(job)
            self.cond.notify()

    def write(self, parts: tuple) -> None:
        """Write ``parts`` now if nothing is ahead of them and the pipe takes them without
        blocking; what is left goes to the sender. OSError: the device process is gone."""
        with self.cond:
            if not self.outbox and not self.sending:
                views = deque(byte_views(parts))
                send_some(self.sock, views)
                if not views:
                    return
                parts = views
            self.outbox.append(parts)
            self.cond.notify()

    def take(self) -> tuple | list | None:
        """The sender's next job (waits for one); marks the link as writing it."""
        with self.cond:
            self.sending = False
            while not self.outbox:
                self.cond.wait()
            self.sending = True
            return self.outbox.popleft()

    def receive(self, flags: int = 0) -> bool:
        """Read what the pipe holds (one read; ``MSG_DONTWAIT``: none if it holds nothing)
        into the answers' buffer; False when there was nothing. EOFError: the pipe is closed."""
        try:
            n = self.sock.recv_into(self.chunk, _READ_BYTES, flags)
        except BlockingIOError:
            return False
        if n == 0:
            raise EOFError("the device process closed its pipe")
        self.answers.buffer += memoryview(self.chunk)[:n]
        return True


class DeviceExecutor:
    """A front's executor: batches run on the group's device processes (see the module).

    The interface of :class:`~distshap.serve.backends.InProcessExecutor`.

    Parameters
    ----------
    conns : list of multiprocessing Connection
        One duplex pipe per device process.
    residents : list of Resident
        This process's registered models in the order of the group's specs: a batch names its
        model by its index there.
    in_flight : int
        Batches this front keeps in flight on each device process.
    loop : asyncio event loop, optional
        The loop that reads the answers and settles their Futures (not running yet, or this
        is its thread); without one, a thread a device process does.
    """

    name = "device-process"
    #: A device process merges the batches that wait for it: a front's queue sends the
    #: requests of each turn of its loop as one batch as soon as one of its ``in_flight`` is
    #: free, without waiting for more.
    merges = True

    def __init__(self, conns: list[Connection], residents: list[Resident],
                 in_flight: int = IN_FLIGHT,
                 loop: asyncio.AbstractEventLoop | None = None) -> None:  # fmt: skip
        check_in_flight(in_flight)
        self._index = {resident: i for i, resident in enumerate(residents)}
        self._in_flight = in_flight
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._closed = False
        self._loop = loop
        self._links = [_Link(i, conn) for i, conn in enumerate(conns)]
        for link in self._links:
            link.sender = threading.Thread(target=self._send_loop, args=(link,), daemon=True,
                                           name=f"distshap-device-send-{link.index}")  # fmt: skip
            link.sender.start()
            if loop is not None:
                link.watched = link.sock.fileno()
                loop.add_reader(link.watched, self._readable, link)
            else:
                name = f"distshap-device-read-{link.index}"
                link.reader = threading.Thread(target=self._read_loop, args=(link,),
                                               daemon=True, name=name)  # fmt: skip
                link.reader.start()

    def workers(self) -> int:
        """Device processes alive."""
        return sum(link.alive for link in self._links)

    def slots(self) -> int:
        """Batches in flight at once: ``in_flight`` on each device process alive."""
        return self._in_flight * max(1, self.workers())

    def ready(self) -> bool:
        """Whether every device process is alive (the group stops when one is not)."""
        return not self._closed and all(link.alive for link in self._links)

    def loads(self) -> list[int]:
        """Rows in flight on each device process (-1: gone)."""
        return [link.rows if link.alive else -1 for link in self._links]

    def _pick(self) -> _Link:
        """The live device process with the fewest rows in flight (the lock held)."""
        live = [link for link in self._links if link.alive]
        if not live or self._closed:
            raise NoWorkerError("no device process is running: the server is stopping")
        return min(live, key=lambda link: (link.rows, len(link.in_flight), link.index))

    def submit(self, resident: Resident, rows: np.ndarray, output: str, k: int) -> Future:
        """Send a batch to the least loaded device process -> a Future of its dict.

        Raises
        ------
        NoWorkerError
            No device process is alive.
        """
        rows = np.ascontiguousarray(rows)
        dtype = DTYPE_CODE.get(rows.dtype)
        if dtype is None:
            raise TypeError(f"rows of dtype {rows.dtype}: send FP32, FP64, INT32 or INT64")
        n, features = rows.shape
        ident = next(self._ids)
        head = BATCH.pack(ident, self._index[resident], OUTPUT_NAMES.index(output), dtype, k, n,
                           features)  # fmt: skip
        future: Future = Future()
        with self._lock:
            link = self._pick()
            link.in_flight[ident] = (future, n)
            link.rows += n
        try:
            link.write((head, rows))
        except OSError as err:  # the device process is gone: this batch fails with the others
            self._lost(link, err)
        return future

    def _send_loop(self, link: _Link) -> None:
        while True:
            job = link.take()
            if job is None:
                return
            try:
                write_parts(link.sock, job)
            except Exception as err:  # noqa: BLE001 - any failure: the link's batches fail now
                self._lost(link, err)
                return

    def _readable(self, link: _Link) -> None:
        """The loop's callback: ``link``'s pipe holds bytes; settle the answers now whole
        (at most :data:`_READS_A_TURN` reads, then the loop's other work: a large answer
        comes over several turns)."""
        try:
            for _ in range(_READS_A_TURN):
                if not link.receive(socket.MSG_DONTWAIT):
                    break
            self._settle(link)
        except Exception as err:  # noqa: BLE001 - any failure: the link's batches fail now
            self._lost(link, err)

    def _read_loop(self, link: _Link) -> None:
        try:
            while link.receive() and self._settle(link):
                pass
        except Exception as err:  # noqa: BLE001 - any failure: the link's batches fail now
            self._lost(link, err)

    def _settle(self, link: _Link) -> bool:
        """Settle the Futures of the answers now whole; False once the goodbye's answer came."""
        for ident, values, err in link.answers.take():
            if ident == BYE:
                return False
            with self._lock:
                future, n = link.in_flight.pop(ident)
                link.rows -= n
            if err is not None:
                future.set_exception(err)
            else:
                future.set_result(values)
        return True

    def _unwatch(self, link: _Link) -> None:
        """The loop reads ``link`` no more (on the loop's thread, or with the loop stopped)."""
        fd, link.watched = link.watched, -1
        if fd < 0:
            return
        try:
            self._loop.remove_reader(fd)
        except (OSError, ValueError, RuntimeError):  # the loop is closed: it reads nothing
            pass

    def _lost(self, link: _Link, err: BaseException) -> None:
        """The device process behind ``link`` is gone: its batches in flight fail now."""
        with self._lock:
            if not link.alive:
                return
            link.alive = False
            failed = list(link.in_flight.values())
            link.in_flight.clear()
            link.rows = 0
        link.put(None)
        if self._loop is not None:
            try:
                self._loop.call_soon_threadsafe(self._unwatch, link)
            except RuntimeError:  # the loop is closed: it reads nothing any more
                pass
        if not self._closed:
            log.error("device process %d is gone (%s): its batches fail", link.index,
                      type(err).__name__)  # fmt: skip
        why = f"device process {link.index} exited: the server is stopping, retry later"
        for future, _ in failed:
            future.set_exception(NoWorkerError(why))

    def close(self) -> None:
        """Say goodbye to each device process and close the pipes; without a loop, after
        the answers still due (bounded). With one, the server has answered its requests on
        the loop before it stopped it; a batch still in flight fails (as the server's 503).
        The loop must not be running on another thread (its own, or stopped)."""
        deadline = threading.Event()
        for _ in range(int(_CLOSE_SECONDS / 0.05) if self._loop is None else 0):
            with self._lock:
                if not any(link.in_flight for link in self._links if link.alive):
                    break
            deadline.wait(0.05)
        self._closed = True
        for link in self._links:
            link.put((BATCH.pack(BYE, 0, 0, 0, 0, 0, 0),))
            link.put(None)
        for link in self._links:
            link.sender.join(_CLOSE_SECONDS)
            if link.reader is not None:
                link.reader.join(_CLOSE_SECONDS)
            if self._loop is not None and self._loop.is_running():  # not stopped in time
                self._loop.call_soon_threadsafe(self._unwatch, link)
            elif self._loop is not None:
                self._unwatch(link)  # before its descriptor is closed (and its number reused)
            link.conn.close()
            link.sock.close()
            self._lost(link, EOFError("closed"))
