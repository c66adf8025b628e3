"""Device processes: the processes of a server group that run every batch, one per GPU.

In a :class:`~distshap.serve.group.ServerGroup` with device processes, the front processes read,
decode, batch and encode requests and make no CUDA context; each device process holds the
models' explainers (its GPU's copy of them) and runs the batches the fronts send it. Each front
is joined to each device process by one duplex pipe (a socket pair). A batch travels as a
small fixed header (id, model, output, dtype, ``k``, shape) then its rows' raw bytes, written
with one ``writev`` and read straight into the array that holds them; an answer as a header
naming its tensors (name, dtype, shape) then each tensor's raw bytes, or an error's type and
message (:mod:`~distshap.serve.wire`): no array is pickled. A front may have several batches in
flight on one pipe (the ids pair them with their answers).

A device process (:class:`DeviceLoop`) reads whatever batches its pipes hold, then runs the
oldest batch waiting and every other waiting batch of the same model, output, ``k`` and dtype,
up to ``merge_rows`` rows, as ONE call of :func:`~distshap.serve.backends.explain_block` (rows
concatenated), and sends each front its rows' part. A call runs on one of two helper threads
(:class:`distshap.waiting.Handoff`) in turns with the loop's thread, never beside it: when it
waits for its GPU (a replayed CUDA graph) it hands the turn back, and the loop reads the
batches that arrive and writes answers meanwhile. When the running call's GPU work is about to
end (its expected GPU time, learned from the calls before it, less the host time a launch
takes), or has ended, the next call is started, so that its host work and launch overlap the
running call's GPU work, and only then the running call's values are read and answered: the
GPU does not wait for the host between calls. A call whose kind (model, output, rows' octave)
did not wait for its GPU last time is not started before the running call is answered (its
host work would hold the answers up). Its pipes never make it wait: a batch is read as its
bytes come and answers are written as a front takes them, so a front slow to write or to read
holds up no other. A row's values do not depend on the rows beside it, so every answer equals
its rows run alone, bit for bit.

A front's side of the pipes is :mod:`~distshap.serve.device_link`.
"""

from __future__ import annotations

import itertools
import logging
import multiprocessing
import os
import selectors
import signal
import socket
import sys
import threading
import time
from collections import deque
from multiprocessing.connection import Connection

import numpy as np

from distshap.parallel import THREADS_VARIABLE
from distshap.serve.backends import explain_block
from distshap.serve.device_stats import DeviceCounters
from distshap.serve.registry import Registry, Resident
from distshap.serve.wire import (
    ANSWER,
    BATCH,
    BYE,
    DTYPES,
    OUTPUT_NAMES,
    answer_parts,
    byte_views,
    send_some,
)
from distshap.waiting import Handoff

__all__ = ["DeviceLoop", "device_main"]

log = logging.getLogger("distshap.serve")

#: Rows a merged call holds at most.
MERGE_ROWS = 1 << 17
#: Seconds between two writes of a device process's counters.
_STATS_SECONDS = 0.5
#: Seconds a device process that stops keeps writing answers its fronts have not taken.
_CLOSE_SECONDS = 10.0
#: Weight of the newest call in the running means of a call's GPU and launch seconds (learnt
#: from calls that waited for their GPU once: a replayed graph, not a graph's first build).
_LEARN = 0.2


class _Call:
    """A call started on a helper: its batches, rows and kind, when it started, when its
    start handed the turn back (waiting for its GPU) and the seconds until its GPU was seen
    done."""

    __slots__ = ("gpu", "helper", "items", "kind", "launched", "rows", "start")

    def __init__(self, items: list[_Item], helper: Handoff, start: float) -> None:
        self.items, self.helper, self.start = items, helper, start
        self.rows = sum(len(item.rows) for item in items)
        self.kind = (items[0].key, self.rows.bit_length())
        self.launched = 0.0  # 0: it has not waited for its GPU (yet)
        self.gpu: float | None = None


class _Item:
    """A batch received from a front, waiting to run."""

    __slots__ = ("conn", "ident", "key", "rows", "since")

    def __init__(self, conn: Connection, ident: int, key: tuple, rows: np.ndarray) -> None:
        self.conn, self.ident, self.key, self.rows = conn, ident, key, rows
        self.since = time.perf_counter()  # read whole


class _Front:
    """A front's pipe as its device process sees it: what it has given of its next batch (the
    header, then the rows, read in place however many reads it takes) and the answers' bytes
    it has not taken yet."""

    __slots__ = ("events", "got", "head", "ident", "key", "out", "reading", "rows", "sock")

    def __init__(self, conn: Connection) -> None:
        self.sock = socket.socket(fileno=os.dup(conn.fileno()))  # reads and writes that never wait
        self.head = bytearray(BATCH.size)
        self.out: deque[memoryview] = deque()
        self.reading, self.events = True, selectors.EVENT_READ
        self.reset()

    def reset(self) -> None:
        self.got, self.ident, self.key, self.rows = 0, 0, None, None

    def view(self) -> memoryview:
        """The bytes still to read of the current piece (header or rows)."""
        whole = memoryview(self.head if self.rows is None else self.rows.reshape(-1)).cast("B")
        return whole[self.got :]


class DeviceLoop:
    """A device process's work: read batches from the fronts' pipes, run them merged (on two
    helper threads in turns with the loop's), answer.

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
        self._conns = list(conns)
        self._fronts: dict[Connection, _Front] = {}  # the fronts not gone, made by run
        for conn in conns:
            self._selector.register(conn.fileno(), selectors.EVENT_READ, conn)
        self._open = len(conns)
        self._pending: deque[_Item] = deque()
        self._waiting_rows = 0
        self._due: dict[Connection, list] = {}  # answers made, not written yet
        self._waits: set[tuple] = set()  # kinds of calls whose last one waited for its GPU
        self._helpers: list[Handoff] = []  # made by run
        self._running: deque[_Call] = deque()  # started, oldest first (two at most)
        self._gpu_seconds: dict[tuple, float] = {}  # a kind's mean seconds a row, launch to ready
        self._launch_seconds: float | None = None  # mean host seconds of a start to its launch
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
        self._fronts = {conn: _Front(conn) for conn in self._conns}
        self._helpers = [Handoff(f"distshap-device-call-{i}") for i in range(2)]
        try:
            while self._open and not self._stop.is_set():
                self._poll(0.0 if self._pending or self._due or self._running else 0.25)
                if self._orphaned:
                    log.warning("the parent process exited: the device process stops")
                    return
                self._advance()
            while self._pending or self._running:
                self._advance()
            self._flush()
            self._write_out()
        finally:
            self._selector.close()
            for front in self._fronts.values():
                front.sock.close()
            for helper in self._helpers:
                helper.close()

    def _poll(self, timeout: float) -> None:
        """Read every batch the pipes hold (waiting up to ``timeout`` seconds for one), until
        ``merge_rows`` rows wait, and write what the pipes take of the answers queued (those
        also once ``merge_rows`` rows wait)."""
        while not self._stop.is_set():
            full = self._waiting_rows >= self.merge_rows
            events = self._selector.select(0.0 if full else timeout)
            for key, mask in events:
                if key.data is None:
                    self._orphaned = True
                    return
                if mask & selectors.EVENT_WRITE and key.data in self._fronts:
                    self._write(key.data)
                front = self._fronts.get(key.data)
                if mask & selectors.EVENT_READ and front is not None and front.reading and not full:
                    self._read(key.data)
            if not events or full:
                return
            timeout = 0.0

    def _write_out(self) -> None:
        """Once serving ends: write what the fronts have not taken yet, as they take it
        (:data:`_CLOSE_SECONDS` at most)."""
        deadline = time.monotonic() + _CLOSE_SECONDS
        for conn, front in list(self._fronts.items()):
            front.reading = False  # watched for room only (or done)
            self._write(conn)
        while any(front.out for front in self._fronts.values()) and time.monotonic() < deadline:
            for key, mask in self._selector.select(0.1):
                if key.data is None:  # a watched process exited: nobody to write for
                    return
                if mask & selectors.EVENT_WRITE:
                    self._write(key.data)

    def _read(self, conn: Connection) -> None:
        """What ``conn`` holds of its next batch, without waiting for the rest (a front slow
        to write a large batch holds up no other): a batch read whole joins the waiting ones;
        a goodbye is answered after the answers made for that front, and its batches not yet
        run are dropped."""
        front = self._fronts[conn]
        try:
            while True:
                view = front.view()
                if len(view):
                    got = front.sock.recv_into(view, len(view), socket.MSG_DONTWAIT)
                    if got == 0:
                        raise EOFError("the front closed its pipe")
                    front.got += got
                    continue
                if front.rows is None:  # the header is whole
                    ident, model, output, dtype, k, n, features = BATCH.unpack(front.head)
                    if ident == BYE:  # its answers made are written first; the rest dropped
                        self._goodbye(conn)
                        return
                    front.got, front.ident = 0, ident
                    front.key = (model, output, k, dtype)
                    front.rows = np.empty((n, features), DTYPES[dtype])
                    continue
                self._pending.append(_Item(conn, front.ident, front.key, front.rows))
                self._waiting_rows += len(front.rows)
                front.reset()
                return
        except BlockingIOError:  # the rest comes later
            return
        except (EOFError, OSError):  # the front exited
            self._drop(conn)
        except Exception as err:  # noqa: BLE001 - a batch not read: the front sees the pipe close
            log.error("a front's batch could not be read (%s): its pipe is closed",
                      type(err).__name__)  # fmt: skip
            self._drop(conn)
            conn.close()

    def _goodbye(self, conn: Connection) -> None:
        """``conn``'s front says goodbye: its batches not yet run dropped, its answers made
        then the goodbye's own written (as it takes them), its pipe read no more."""
        self._forget(conn)
        self._fronts[conn].reading = False
        self._send(conn, [*self._due.pop(conn, []), ANSWER.pack(BYE, 0, 0, 0)])

    def _forget(self, conn: Connection) -> None:
        """No more reads of ``conn``, nor calls of its batches waiting."""
        self._open -= 1
        kept = deque(item for item in self._pending if item.conn is not conn)
        self._waiting_rows -= sum(len(item.rows) for item in self._pending if item.conn is conn)
        self._pending = kept

    def _drop(self, conn: Connection) -> None:
        """``conn``'s front is gone (or its pipe broken): nothing more is read, run, answered
        or written for it."""
        front = self._fronts.pop(conn, None)
        if front is None:
            return
        if front.reading:
            self._forget(conn)
        self._selector.unregister(conn.fileno())
        front.sock.close()
        self._due.pop(conn, None)

    def _send(self, conn: Connection, parts: list) -> None:
        """Queue ``parts`` (bytes, or C-contiguous arrays) for ``conn`` and write what its
        pipe takes now: a front slow to read its answers holds up no other."""
        front = self._fronts.get(conn)
        if front is None:  # gone: nobody waits for the answer
            return
        front.out.extend(byte_views(parts))
        self._write(conn)

    def _write(self, conn: Connection) -> None:
        """Write what ``conn``'s pipe takes of its queued bytes; watch it for room while some
        are left (once none are left and it is read no more, it is done)."""
        front = self._fronts[conn]
        try:
            send_some(front.sock, front.out)  # the rest when the pipe has room
        except OSError:  # the front exited
            self._drop(conn)
            return
        events = (selectors.EVENT_READ if front.reading else 0) | (
            selectors.EVENT_WRITE if front.out else 0
        )
        if not events:
            self._drop(conn)  # said goodbye and took every answer
        elif events != front.events:
            front.events = events
            self._selector.modify(conn.fileno(), events, conn)

    def _flush(self, conn: Connection | None = None) -> None:
        """Write the answers due (to ``conn`` only, where given)."""
        for to in [conn] if conn is not None else list(self._due):
            messages = self._due.pop(to, None)
            if messages:
                self._send(to, messages)

    def _advance(self) -> None:
        """One step: end the oldest call if its GPU is done (the next call started first,
        where it will wait for its GPU too), else start the next call if it is due, else
        write the answers due."""
        running = self._running
        if running and running[0].helper.ready():
            call = running[0]
            if call.helper.ended:
                running.popleft()
                self._end(call)
                return
            if call.launched and call.gpu is None:
                call.gpu = time.perf_counter() - call.launched
            if len(running) == 1 and self._pending and self._next_waits():
                self._start()  # its launch before this call's host work
            call.helper.resume()
            return
        if self._pending and (not running or self._due_to_start(running)):
            self._start()
            return
        self._flush()

    def _next_waits(self) -> bool:
        """Whether the last call of the next call's kind waited for its GPU."""
        items, rows = self._peek_next()
        return (items[0].key, rows.bit_length()) in self._waits

    def _due_to_start(self, running: deque[_Call]) -> bool:
        """Whether the next call starts now, beside the running one: that one waits for its
        GPU and is expected to end within a start's host time (at most half its GPU time),
        and the next call will wait for its GPU too."""
        call = running[0]
        per_row = self._gpu_seconds.get(call.kind)
        if len(running) > 1 or not call.launched or call.gpu is not None or per_row is None:
            return False
        gpu = per_row * call.rows
        lead = min(self._launch_seconds or 0.0, gpu / 2)
        return time.perf_counter() >= call.launched + gpu - lead and self._next_waits()

    def _learn(self, call: _Call) -> None:
        """A call that waited for its GPU once (a replayed graph) ended: its GPU seconds a row
        join its kind's mean, its start's host seconds the starts' mean."""
        if call.helper.parks != 1 or call.gpu is None:
            return
        per_row = call.gpu / call.rows
        mean = self._gpu_seconds.get(call.kind)
        self._gpu_seconds[call.kind] = per_row if mean is None else mean + _LEARN * (per_row - mean)
        host, mean = call.launched - call.start, self._launch_seconds
        self._launch_seconds = host if mean is None else mean + _LEARN * (host - mean)

    def _start(self) -> None:
        """Start the next call (the oldest batch and the others of its key) on a free helper;
        it runs until it waits for its GPU or ends."""
        items = self._next_call()
        model, output, k, _ = items[0].key
        parts = [item.rows for item in items]

        def job() -> dict:  # everything inside: a failure (a bad model index too) answers
            batch = parts[0] if len(parts) == 1 else np.concatenate(parts)
            return explain_block(self.residents[model], batch, OUTPUT_NAMES[output], k)

        helper = next(h for h in self._helpers if not h.busy)
        call = _Call(items, helper, self.counters.start())
        self._running.append(call)
        helper.start(job)
        if not helper.ended:  # it waits for its GPU
            call.launched = time.perf_counter()

    def _end(self, call: _Call) -> None:
        """``call`` ended: each front gets its rows' values (or the error), written now."""
        values, err = None, None
        try:
            values = call.helper.result()
        except Exception as error:  # every front of the call hears of it
            err = error
        finally:
            self.counters.end(call.start, [item.since for item in call.items], call.rows)
        if err is None:  # a failed call's seconds say nothing of the next ones
            self._learn(call)
        if call.helper.parks:
            self._waits.add(call.kind)
        else:
            self._waits.discard(call.kind)  # e.g. a row bucket whose graph could not be built
        start = 0
        for item in call.items:
            stop = start + len(item.rows)
            front = self._fronts.get(item.conn)
            if front is None or not front.reading:  # the front said goodbye or is gone
                start = stop
                continue
            try:
                messages = answer_parts(item.ident, values, err, start, stop)
            except Exception as error:  # a tensor the header cannot name
                messages = answer_parts(item.ident, None, error, start, stop)
            self._due.setdefault(item.conn, []).extend(messages)
            start = stop
        self._flush()

    def _peek_next(self) -> tuple[list[_Item], int]:
        """The next call's batches (the oldest and every other waiting batch of its key,
        ``merge_rows`` rows at most) and rows, left waiting."""
        first = self._pending[0]
        items, rows = [first], len(first.rows)
        for item in itertools.islice(self._pending, 1, None):
            if item.key == first.key and rows + len(item.rows) <= self.merge_rows:
                items.append(item)
                rows += len(item.rows)
        return items, rows

    def _next_call(self) -> list[_Item]:
        """The next call's batches (:meth:`_peek_next`), taken from the waiting ones."""
        items, rows = self._peek_next()
        taken = {id(item) for item in items}
        self._pending = deque(item for item in self._pending if id(item) not in taken)
        self._waiting_rows -= rows
        return items

    def write_stats(self, path: str) -> None:
        """The counters as JSON at ``path`` (:meth:`DeviceCounters.write`)."""
        self.counters.write(path)


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
