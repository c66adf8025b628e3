"""Device processes: the processes of a server group that run every batch, one per GPU.

In a :class:`~distshap.serve.group.ServerGroup` with device processes, the front processes read,
decode, batch and encode requests and make no CUDA context; each device process holds the
models' explainers (its GPU's copy of them) and runs the batches the fronts send it. Each front
is joined to each device process by one duplex pipe (a socket pair). A batch travels as a
small fixed header (id, model, output, dtype, ``k``, shape) then its rows' raw bytes, written
with one ``writev`` and read straight into the array that holds them; an answer as a header
naming its tensors (name, dtype, shape) then each tensor's raw bytes, or an error's type and
message (:mod:`~distshap.serve.wire`): no array is pickled or copied on the way. A front may
have several batches in flight on one pipe (the ids pair them with their answers).

A device process (:class:`DeviceLoop`) does everything on one thread, so no thread of its own
waits for the interpreter: it reads whatever batches its pipes hold, then runs the oldest
batch waiting and every other waiting batch of the same model, output, ``k`` and dtype, up to
``merge_rows`` rows, as ONE call of :func:`~distshap.serve.backends.explain_block` (rows
concatenated), and sends each front its rows' part. While a call waits for its GPU (a replayed
CUDA graph, :func:`distshap.waiting.while_waiting`), the loop writes the previous call's
answers and reads the batches that arrive, so the next call starts as soon as this one ends,
with every batch that came meanwhile. A row's values do not depend on the rows beside it, so
every answer equals its rows run alone, bit for bit.

A front's :class:`DeviceExecutor` sends each batch to the live device process with the fewest
rows in flight, written by the thread that submits it when the pipe takes it at once (a sender
thread writes what it does not take). When a device process exits, its batches in flight fail
at once with :class:`~distshap.serve.backends.NoWorkerError` (the server's 503), and so does
every new one.
"""

from __future__ import annotations

import itertools
import logging
import multiprocessing
import os
import selectors
import signal
import socket
import struct
import sys
import threading
import time
from collections import deque
from concurrent.futures import Future
from multiprocessing.connection import Connection

import numpy as np

from distshap.parallel import THREADS_VARIABLE
from distshap.serve.backends import NoWorkerError, explain_block
from distshap.serve.device_stats import DeviceCounters
from distshap.serve.registry import Registry, Resident
from distshap.serve.wire import (
    ANSWER,
    BATCH,
    BYE,
    DTYPE_CODE,
    DTYPES,
    OUTPUT_NAMES,
    TENSOR,
    TENSOR_NAMES,
    answer_parts,
    read_array,
    read_bytes,
    write_parts,
)
from distshap.waiting import while_waiting

__all__ = [
    "IN_FLIGHT",
    "DeviceExecutor",
    "DeviceLoop",
    "check_in_flight",
    "device_main",
]

log = logging.getLogger("distshap.serve")

#: Rows a merged call holds at most.
MERGE_ROWS = 1 << 17
#: Batches a front keeps in flight on each device process.
IN_FLIGHT = 4
#: Seconds between two writes of a device process's counters.
_STATS_SECONDS = 0.5
#: Seconds :meth:`DeviceExecutor.close` waits for answers still due, then for its threads.
_CLOSE_SECONDS = 10.0


class _Item:
    """A batch received from a front, waiting to run."""

    __slots__ = ("conn", "ident", "key", "rows", "since")

    def __init__(self, conn: Connection, ident: int, key: tuple, rows: np.ndarray) -> None:
        self.conn, self.ident, self.key, self.rows = conn, ident, key, rows
        self.since = time.perf_counter()  # read whole


class DeviceLoop:
    """A device process's work, on one thread: read batches from the fronts' pipes, run them
    merged, answer.

    Parameters
    ----------
    residents : list of Resident
        The models' explainers, in the order of the group's specs (a batch names its model by
        that index).
    conns : list of multiprocessing Connection
        One duplex pipe per front.
    merge_rows : int
        Rows of a merged call at most.
    """

    def __init__(self, residents: list[Resident], conns: list[Connection],
                 merge_rows: int = MERGE_ROWS) -> None:  # fmt: skip
        self.residents, self.merge_rows = residents, merge_rows
        self._selector = selectors.DefaultSelector()
        for conn in conns:
            self._selector.register(conn.fileno(), selectors.EVENT_READ, conn)
        self._open = len(conns)
        self._pending: deque[_Item] = deque()
        self._waiting_rows = 0
        self._due: dict[Connection, list] = {}  # answers made, not written yet
        self._key: tuple | None = None  # the last call's
        self._waited = False  # whether the running call waited for its GPU in _meanwhile
        self._orphaned = False  # a watched process exited
        self._stop = threading.Event()
        self.counters = DeviceCounters()
        #: The counters' values (:class:`~distshap.serve.device_stats.DeviceCounters`).
        self.stats = self.counters.values

    def stop(self) -> None:
        """Read no more batches; those received still run (safe from a signal handler)."""
        self._stop.set()

    def run(self, watch: tuple = ()) -> None:
        """Serve until every front has closed its pipe, :meth:`stop`, or one of ``watch``
        (sentinels, e.g. the parent process's) is ready; the batches received run first."""
        for sentinel in watch:
            self._selector.register(sentinel, selectors.EVENT_READ, None)
        try:
            while self._open and not self._stop.is_set():
                self._poll(0.0 if self._pending or self._due else 0.25)
                if self._orphaned:
                    log.warning("the parent process exited: the device process stops")
                    return
                if self._pending:
                    self._call()
                else:
                    self._flush()
            while self._pending:
                self._call()
            self._flush()
        finally:
            self._selector.close()

    def _poll(self, timeout: float) -> None:
        """Read every batch the pipes hold (waiting up to ``timeout`` seconds for one), until
        ``merge_rows`` rows wait."""
        while self._waiting_rows < self.merge_rows and not self._stop.is_set():
            events = self._selector.select(timeout)
            for key, _ in events:
                if key.data is None:
                    self._orphaned = True
                    return
                self._read(key.data)
            if not events:
                return
            timeout = 0.0

    def _read(self, conn: Connection) -> None:
        """One batch of ``conn`` (or its goodbye) read whole."""
        fd = conn.fileno()
        try:
            ident, model, output, dtype, k, n, features = BATCH.unpack(read_bytes(fd, BATCH.size))
            if ident == BYE:
                self._flush(conn)  # its answers first
                self._send(conn, [ANSWER.pack(BYE, 0, 0, 0)])
                self._drop(conn)
                return
            rows = read_array(fd, (n, features), DTYPES[dtype])
        except (EOFError, OSError):  # the front exited
            self._drop(conn)
            return
        except Exception as err:  # noqa: BLE001 - a batch not read: the front sees the pipe close
            log.error("a front's batch could not be read (%s): its pipe is closed",
                      type(err).__name__)  # fmt: skip
            self._drop(conn)
            conn.close()
            return
        self._pending.append(_Item(conn, ident, (model, output, k, dtype), rows))
        self._waiting_rows += n

    def _drop(self, conn: Connection) -> None:
        """Read ``conn`` no more: its front said goodbye or is gone."""
        self._selector.unregister(conn.fileno())
        self._due.pop(conn, None)
        self._open -= 1

    def _send(self, conn: Connection, parts: list) -> None:
        try:
            write_parts(conn.fileno(), parts)
        except (OSError, ValueError):  # the front exited: nobody waits for the answer
            pass

    def _flush(self, conn: Connection | None = None) -> None:
        """Write the answers due (to ``conn`` only, where given)."""
        for to in [conn] if conn is not None else list(self._due):
            messages = self._due.pop(to, None)
            if messages:
                self._send(to, messages)

    def _meanwhile(self) -> None:
        """While a call waits for its GPU: the last call's answers written, batches read."""
        self._waited = True
        try:
            self._flush()
            self._poll(0.0)
        except Exception as err:  # noqa: BLE001 - the call that waits must not fail for it
            log.error("reading the fronts' pipes failed (%s)", type(err).__name__)

    def _call(self) -> None:
        """One call for the next batches (rows concatenated); each front gets its rows'
        values. After a call that waited for its GPU, its answers are written while the next
        call of the same kind waits for its own (else at once)."""
        items = self._next_call()
        if items[0].key != self._key:
            self._flush()  # the next call may not wait for a GPU: answer before it
        self._key, self._waited = items[0].key, False
        parts = [item.rows for item in items]
        model, output, k, _ = items[0].key
        values, err = None, None
        start = self.counters.start()
        try:  # rows put together inside: a failure answers the batches, the loop runs on
            batch = parts[0] if len(parts) == 1 else np.concatenate(parts)
            with while_waiting(self._meanwhile):
                values = explain_block(self.residents[model], batch, OUTPUT_NAMES[output], k)
        except Exception as error:  # every front hears of it
            err = error
        finally:
            self.counters.end(start, [item.since for item in items], sum(map(len, parts)))
        self._flush()  # the answers of before, where this call did not wait to write them
        start = 0
        for item in items:
            stop = start + len(item.rows)
            try:
                messages = answer_parts(item.ident, values, err, start, stop)
            except Exception as error:  # a tensor the header cannot name
                messages = answer_parts(item.ident, None, error, start, stop)
            self._due.setdefault(item.conn, []).extend(messages)
            start = stop
        if not self._waited:
            self._flush()

    def _next_call(self) -> list[_Item]:
        """The oldest batch and every other waiting batch of its key (``merge_rows`` at most),
        taken from the waiting ones."""
        first = self._pending.popleft()
        items, rows, kept = [first], len(first.rows), deque()
        for item in self._pending:
            if item.key == first.key and rows + len(item.rows) <= self.merge_rows:
                items.append(item)
                rows += len(item.rows)
            else:
                kept.append(item)
        self._pending = kept
        self._waiting_rows -= rows
        return items

    def write_stats(self, path: str) -> None:
        """The counters as JSON at ``path`` (:meth:`DeviceCounters.write`)."""
        self.counters.write(path)


def check_in_flight(in_flight: object) -> None:
    """ValueError unless ``in_flight`` (a front's batches in flight on each device process) is
    an int >= 1."""
    if type(in_flight) is not int or in_flight < 1:
        raise ValueError(f"in_flight={in_flight!r}: give the batches a front keeps in flight on "
                         "each device process, an int >= 1")  # fmt: skip


class _Link:
    """A front's view of one device process: its pipe, the batches in flight on it (id ->
    (Future, rows)) and the threads that send batches and read answers.

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
                views = [memoryview(p).cast("B") for p in parts if len(p) and getattr(p, "size", 1)]
                try:
                    sent = self.sock.sendmsg(views, [], socket.MSG_DONTWAIT)
                except BlockingIOError:
                    sent = 0
                while views and sent >= len(views[0]):
                    sent -= len(views.pop(0))
                if not views:
                    return
                views[0] = views[0][sent:]
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


_REMOTE_ERRORS: dict[str, type] = {}


def _remote_error(text: str) -> BaseException:
    """An exception of the type a device process raised (by name), with its message."""
    name, _, message = text.partition("\n")
    cls = _REMOTE_ERRORS.get(name)
    if cls is None:
        cls = _REMOTE_ERRORS[name] = type(name, (RuntimeError,), {"__module__": __name__})
    return cls(message)


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
    """

    name = "device-process"
    #: A device process merges the batches that wait for it: a front's queue sends each batch
    #: as soon as one of its ``in_flight`` is free.
    merges = True

    def __init__(self, conns: list[Connection], residents: list[Resident],
                 in_flight: int = IN_FLIGHT) -> None:  # fmt: skip
        check_in_flight(in_flight)
        self._index = {resident: i for i, resident in enumerate(residents)}
        self._in_flight = in_flight
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._closed = False
        self._links = [_Link(i, conn) for i, conn in enumerate(conns)]
        for link in self._links:
            link.sender = threading.Thread(target=self._send_loop, args=(link,), daemon=True,
                                           name=f"distshap-device-send-{link.index}")  # fmt: skip
            link.reader = threading.Thread(target=self._read_loop, args=(link,), daemon=True,
                                           name=f"distshap-device-read-{link.index}")  # fmt: skip
            link.sender.start()
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
                write_parts(link.conn.fileno(), job)
            except Exception as err:  # noqa: BLE001 - any failure: the link's batches fail now
                self._lost(link, err)
                return

    def _read_loop(self, link: _Link) -> None:
        try:
            while self._read_one(link):
                pass
        except Exception as err:  # noqa: BLE001 - any failure: the link's batches fail now
            self._lost(link, err)

    def _read_one(self, link: _Link) -> bool:
        """Read one answer and settle its Future; False on the goodbye's answer."""
        fd = link.conn.fileno()
        ident, status, count, size = ANSWER.unpack(read_bytes(fd, ANSWER.size))
        if ident == BYE:
            return False
        described = read_bytes(fd, size)
        values, err = {}, None
        if status:
            err = _remote_error(described.decode("utf-8", "replace"))
        else:
            at = 0
            for _ in range(count):
                name, dtype, ndim = TENSOR.unpack_from(described, at)
                shape = struct.unpack_from(f"<{ndim}I", described, at + TENSOR.size)
                at += TENSOR.size + 4 * ndim
                values[TENSOR_NAMES[name]] = read_array(fd, shape, DTYPES[dtype])
        with self._lock:
            future, n = link.in_flight.pop(ident)
            link.rows -= n
        if err is not None:
            future.set_exception(err)
        else:
            future.set_result(values)
        return True

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
        if not self._closed:
            log.error("device process %d is gone (%s): its batches fail", link.index,
                      type(err).__name__)  # fmt: skip
        why = f"device process {link.index} exited: the server is stopping, retry later"
        for future, _ in failed:
            future.set_exception(NoWorkerError(why))

    def close(self) -> None:
        """Wait for the answers still due (bounded), say goodbye to each device process and
        close the pipes."""
        deadline = threading.Event()
        for _ in range(int(_CLOSE_SECONDS / 0.05)):
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
            link.reader.join(_CLOSE_SECONDS)
            link.conn.close()
            link.sock.close()
            self._lost(link, EOFError("closed"))


#: Row counts of the warm-up calls of a GPU device process: one call of each plan a call's row
#: count picks (one row, a thread a path, few rows, the usual), so that no kernel is read from
#: the disk cache or set up while the first requests wait (graphs of other row buckets are
#: still captured while serving, by their first batches).
_GPU_WARM_ROWS = (1, 16, 512, 1024)


def _warm(residents: list[Resident], rows: tuple[int, ...] = (1,)) -> None:
    """Compile each model's SHAP kernels for calls of ``rows`` rows (and make this device's
    copy) before serving."""
    for resident in residents:
        features = resident.explainer.num_features
        for n in rows:  # rows that differ (a graph built here is checked on other rows), small
            X = np.random.default_rng(n).integers(0, 4, (n, features)).astype(np.float32)
            explain_block(resident, X, "shap_values", 0)  # ints: valid category codes too


def _write_stats(loop: DeviceLoop, path: str, done: threading.Event) -> None:
    while not done.wait(_STATS_SECONDS):
        try:
            loop.write_stats(path)
        except OSError:  # the folder is gone: the group is stopping
            return


def device_main(index: int, specs: list, backend: str, gpu: str | None, conns: list,
                pipe: Connection, folder: str, level: int, threads: int) -> None:  # fmt: skip
    """One device process of a group: load the models (on GPU ``gpu``: the only one this
    process sees; CPU kernels on ``threads`` threads unless ``DISTSHAP_NUM_THREADS`` is set),
    compile, serve the fronts' pipes until they close or SIGTERM, exit 0."""
    if gpu is not None:  # before anything makes a CUDA context
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    os.environ.setdefault(THREADS_VARIABLE, str(threads))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the parent, which drains
    logging.basicConfig(level=level, format=f"%(asctime)s %(name)s[device {index}] %(message)s")
    try:
        registry = Registry.from_specs(specs, backend=backend)
        residents = [model.resident for model in registry.models.values()]
        _warm(residents, (1,) if gpu is None else _GPU_WARM_ROWS)
        loop = DeviceLoop(residents, conns)
    except BaseException as err:
        pipe.send(("error", f"{type(err).__name__}: {str(err).strip()[:300]}"))
        sys.exit(1)
    signal.signal(signal.SIGTERM, lambda *_: loop.stop())
    done = threading.Event()
    path = os.path.join(folder, f"device-{index}.json")
    threading.Thread(target=_write_stats, args=(loop, path, done), daemon=True).start()
    pipe.send(("ready", os.getpid()))
    pipe.close()
    parent = multiprocessing.parent_process()
    loop.run(watch=() if parent is None else (parent.sentinel,))
    done.set()
    try:
        loop.write_stats(path)
    except OSError:
        pass
