"""Dynamic batching: concurrent requests for one model and output merged into one batch.

Each (model, output, parameters) has a :class:`BatchQueue`, which lives on the server's event
loop (every method but the executor's callback runs there, so it takes no lock). A request
that finds the queue idle is sent at once; while batches run, requests pile up, and a free
executor slot takes the next batch when it holds ``max_rows`` rows or its oldest request has
waited ``max_wait`` seconds (with one slot, as soon as the running batch ends; with an executor
that merges the batches waiting for it itself, ``merges``, as a device process does, as soon
as a slot is free, with every request read in the same turn of the loop: it does not wait
there as well, and a front pays its costs of a batch once for all the requests of a turn).
A batch
concatenates its requests' rows (as float64 when any request sent FP64: widening is exact,
and the model converts each value as it would alone), runs on the executor (up to
``executor.slots()`` batches at once) and, when its values come back, is split by the requests'
row counts. Each row's values do not depend on the rows beside it, so every response equals
its rows run alone. The queue is bounded in rows: a request that does not fit is refused at
once (:class:`QueueFull`, the server's 503 + Retry-After). A request's answer is a callback
called on the loop (no Future, no extra turn of the loop per request); its handle's ``cancel``
drops its rows from batches not yet sent.

Small batches run on the loop itself (``inline_rows``): with an executor that can run a batch
on the calling thread (``run_here``) and runs nothing now (``idle()``, one slot), a batch of at
most ``inline_rows`` rows is run there at the end of the loop's turn (every request read in
that turn joins it) instead of being handed to the executor's thread and its answer handed
back: two thread wake-ups less a batch. A larger batch still goes to the executor's thread, so
that the loop reads and answers other requests while it runs.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import numpy as np

__all__ = ["BatchQueue", "QueueClosed", "QueueFull"]

log = logging.getLogger("distshap.serve")


class QueueFull(RuntimeError):
    """The queue holds its maximum of rows: retry later."""


class QueueClosed(RuntimeError):
    """The queue takes no more requests (the server is draining)."""


class _Pending:
    """A request's rows in the queue; ``cancel`` drops them (its callback is not called)."""

    __slots__ = ("done", "on_done", "queued", "rows")

    def __init__(self, rows: np.ndarray, on_done: Callable, now: float) -> None:
        self.rows, self.on_done, self.queued = rows, on_done, now
        self.done = False

    def cancel(self) -> None:
        self.done = True


class BatchQueue:
    """The requests for one model and output, run in batches by ``executor``.

    Parameters
    ----------
    resident : Resident
        The model's explainers, as the executor runs them.
    output : str
        The output (see :data:`distshap.serve.registry.OUTPUTS`).
    k : int
        ``top_interactions``'s pairs per row (0 otherwise).
    executor : InProcessExecutor or DaskExecutor
    max_rows : int
        Rows of a batch at most (a larger single request runs alone).
    max_wait : float
        Seconds the oldest request waits for others at most while a batch runs (0 for an
        executor whose ``merges`` is true).
    max_queue_rows : int
        Rows waiting at most; beyond, :meth:`put` raises :class:`QueueFull`.
    on_batch : callable, optional
        Called with ``(rows, requests, assembly seconds, seconds its requests waited in
        the queue, summed)`` of every batch (metrics).
    on_run : callable, optional
        Called with the seconds each batch took on the executor (metrics).
    loop : asyncio.AbstractEventLoop, optional
        The loop the queue lives on (default: the running one).
    inline_rows : int
        Batches of at most this many rows run on the loop when the executor can (see the
        module's text); 0: every batch on the executor's threads.
    """

    def __init__(
        self,
        resident: Any,
        output: str,
        k: int,
        executor: Any,
        max_rows: int,
        max_wait: float,
        max_queue_rows: int,
        on_batch: Callable | None = None,
        on_run: Callable | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
        inline_rows: int = 0,
    ) -> None:
        self.resident, self.output, self.k = resident, output, k
        self.executor = executor
        merges = getattr(executor, "merges", False)
        if merges:  # it merges what waits for it: no wait here too
            max_wait = 0.0
        self.max_rows, self.max_wait, self.max_queue_rows = max_rows, max_wait, max_queue_rows
        self.on_batch, self.on_run = on_batch, on_run
        self.loop = loop or asyncio.get_running_loop()
        self._items: deque[_Pending] = deque()
        self._queued_rows = 0
        self._running = 0
        self._closed = False
        self._timer: asyncio.TimerHandle | None = None
        here = callable(getattr(executor, "run_here", None)) and executor.slots() == 1
        self.inline_rows = inline_rows if here else 0
        self._merges = merges and not self.inline_rows
        self._kick: asyncio.Handle | None = None  # the batch of this turn, to come

    @property
    def queued_rows(self) -> int:
        """Rows waiting for a batch."""
        return self._queued_rows

    def put(self, rows: np.ndarray, on_done: Callable) -> _Pending:
        """Queue ``rows``; ``on_done(values, error)`` is called on the loop with their
        ``{tensor name: array}`` (or the batch's error) -> a handle whose ``cancel()`` drops them.

        Raises
        ------
        QueueFull
            The rows do not fit in the queue now.
        QueueClosed
            The queue is closed.
        """
        if self._closed:
            raise QueueClosed("the server is shutting down")
        if self._queued_rows and self._queued_rows + len(rows) > self.max_queue_rows:
            raise QueueFull(f"{self._queued_rows} rows are waiting")
        item = _Pending(rows, on_done, time.monotonic())
        self._items.append(item)
        self._queued_rows += len(rows)
        self._schedule()
        return item

    def _schedule(self) -> None:
        """Send the next batches that may go now; else wake up when the oldest must go."""
        if self.inline_rows and not self._running:
            if self._items and self._kick is None:  # the turn's other requests join first
                self._kick = self.loop.call_soon(self._run_here)
            return
        if self._merges:  # the requests read in this turn leave together, at its end
            if self._items and self._kick is None and self._running < self.executor.slots():
                self._kick = self.loop.call_soon(self._send_turn)
            return
        while self._items and self._running < self.executor.slots():
            if self._running and self._queued_rows < self.max_rows:
                left = self._items[0].queued + self.max_wait - time.monotonic()
                if left > 0:  # a batch runs: let this one fill, max_wait at most
                    if self._timer is None:
                        self._timer = self.loop.call_later(left, self._wake)
                    return
            self._send()

    def _send_turn(self) -> None:
        """The batches of this turn's requests, while slots are free (a merging executor)."""
        self._kick = None
        while self._items and self._running < self.executor.slots():
            self._send()

    def _wake(self) -> None:
        self._timer = None
        self._schedule()

    def _run_here(self) -> None:
        """The batch of this turn: on the loop when small and the executor idle, else sent."""
        self._kick = None
        if self._running or not self._items:
            return
        if self._queued_rows > self.inline_rows or not self.executor.idle():
            self._send()
            self._schedule()
            return
        begun = self._begin()
        if begun is None:
            return
        live, batch, started = begun
        try:
            values = self.executor.run_here(self.resident, batch, self.output, self.k)
        except BaseException as err:  # the requests' answer, as an executor's thread gives it
            self._finish(None, err, live, started)
            if not isinstance(err, Exception):
                raise
            return
        self._finish(values, None, live, started)

    def _take(self) -> tuple[list[_Pending], np.ndarray] | None:
        """The oldest live requests (``max_rows`` rows at most) and their rows as one batch."""
        t0 = time.perf_counter()
        live: list[_Pending] = []
        rows = 0
        while self._items and (not live or rows + len(self._items[0].rows) <= self.max_rows):
            item = self._items.popleft()
            self._queued_rows -= len(item.rows)
            if not item.done:  # a request that timed out is not run
                live.append(item)
                rows += len(item.rows)
        if not live:
            return None
        parts = [p.rows for p in live]
        batch = parts[0] if len(parts) == 1 else np.concatenate(parts, dtype=np.result_type(*parts))
        if self.on_batch is not None:
            now = time.monotonic()
            waited = sum(now - p.queued for p in live)
            self.on_batch(rows, len(live), time.perf_counter() - t0, waited)
        return live, batch

    def _begin(self) -> tuple[list[_Pending], np.ndarray, float] | None:
        """:meth:`_take` counted as a running batch, with its start time."""
        taken = self._take()
        if taken is None:
            return None
        self._running += 1
        return (*taken, time.perf_counter())

    def _send(self) -> None:
        """Take the oldest requests (``max_rows`` rows at most) and run them as one batch on
        the executor."""
        begun = self._begin()
        if begun is None:
            return
        live, batch, started = begun
        try:
            future = self.executor.submit(self.resident, batch, self.output, self.k)
        except BaseException as err:
            self._finish(None, err, live, started)
            return
        future.add_done_callback(lambda f: self._done_elsewhere(f, live, started))

    def _done_elsewhere(self, future: Future, live: list[_Pending], started: float) -> None:
        """The executor's callback (any thread): hand the result to the loop (at once where
        the loop itself settled the Future: an executor that reads its answers there)."""
        err = future.exception()
        values = None if err is not None else future.result()
        try:
            here = asyncio.get_running_loop() is self.loop
        except RuntimeError:  # no loop runs on this thread
            here = False
        if here:
            self._finish(values, err, live, started)
            return
        try:
            self.loop.call_soon_threadsafe(self._finish, values, err, live, started)
        except RuntimeError:  # the loop is closed: nobody waits for the answers
            pass

    def _finish(self, values: dict | None, err: BaseException | None, live: list, started: float):
        self._running -= 1
        if self.on_run is not None:
            self.on_run(time.perf_counter() - started)
        start = 0
        for p in live:
            stop = start + len(p.rows)
            if not p.done:
                p.done = True
                part = None if err is not None else {k: a[start:stop] for k, a in values.items()}
                try:
                    p.on_done(part, err)
                except Exception:  # one answer's failure does not stop the others'
                    log.exception("while answering a request of a batch")
            start = stop
        self._schedule()

    def close(self) -> None:
        """Take no more requests (those queued still run)."""
        self._closed = True
