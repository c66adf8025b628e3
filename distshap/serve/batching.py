"""Dynamic batching: concurrent requests for one model and output merged into one batch.

Each (model, output, parameters) has a :class:`BatchQueue`. Its thread takes the oldest request
and waits for a free executor slot, so that requests pile up into the next batch while one
runs; while a batch of the queue runs, it also waits at most ``max_wait`` seconds for the batch
to reach ``max_rows`` rows (an idle queue sends at once). It concatenates the rows (as float64
when any request sent FP64: widening is exact, and the model converts each value as it would
alone), hands the batch to the executor and, when its values come back, splits them by the
requests' row counts. Each row's values do not depend on the rows beside it, so every response
equals its rows run alone. The queue is bounded in rows: a request that does not fit is refused
at once (:class:`QueueFull`, the server's 503 + Retry-After).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["BatchQueue", "QueueClosed", "QueueFull"]


class QueueFull(RuntimeError):
    """The queue holds its maximum of rows: retry later."""


class QueueClosed(RuntimeError):
    """The queue takes no more requests (the server is draining)."""


@dataclass(eq=False)
class _Pending:
    rows: np.ndarray
    future: Future = field(default_factory=Future)
    queued: float = field(default_factory=time.monotonic)


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
        Seconds the oldest request waits for others at most.
    max_queue_rows : int
        Rows waiting at most; beyond, :meth:`put` raises :class:`QueueFull`.
    on_batch : callable, optional
        Called with ``(rows, requests)`` of every batch (metrics).
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
        on_batch: Any = None,
    ) -> None:
        self.resident, self.output, self.k = resident, output, k
        self.executor = executor
        self.max_rows, self.max_wait, self.max_queue_rows = max_rows, max_wait, max_queue_rows
        self.on_batch = on_batch
        self._items: deque[_Pending] = deque()
        self._queued_rows = 0
        self._running = 0
        self._closed = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._loop, name=f"distshap-batch-{output}",
                                        daemon=True)  # fmt: skip
        self._thread.start()

    @property
    def queued_rows(self) -> int:
        """Rows waiting for a batch."""
        return self._queued_rows

    def put(self, rows: np.ndarray) -> Future:
        """Queue ``rows`` -> a Future of their ``{tensor name: array}``.

        Raises
        ------
        QueueFull
            The rows do not fit in the queue now.
        QueueClosed
            The queue is closed.
        """
        item = _Pending(rows)
        with self._cond:
            if self._closed:
                raise QueueClosed("the server is shutting down")
            if self._queued_rows and self._queued_rows + len(rows) > self.max_queue_rows:
                raise QueueFull(f"{self._queued_rows} rows are waiting")
            self._items.append(item)
            self._queued_rows += len(rows)
            self._cond.notify_all()
        return item.future

    def _take(self) -> list[_Pending] | None:
        """The next batch (None once closed and empty): waits for a free slot and for rows."""
        with self._cond:
            while not self._items or self._running >= self.executor.slots():
                if self._closed and not self._items:
                    return None
                self._cond.wait(0.1)
            deadline = self._items[0].queued + self.max_wait
            # an idle queue sends at once; while a batch runs, the next one fills (max_wait)
            while not self._closed and self._running:
                left = deadline - time.monotonic()
                if self._queued_rows >= self.max_rows or left <= 0:
                    break
                self._cond.wait(left)
            batch = [self._items.popleft()]
            rows = len(batch[0].rows)
            while self._items and rows + len(self._items[0].rows) <= self.max_rows:
                item = self._items.popleft()
                batch.append(item)
                rows += len(item.rows)
            self._queued_rows -= rows
            self._running += 1
            return batch

    def _loop(self) -> None:
        while True:
            batch = self._take()
            if batch is None:
                return
            live = [p for p in batch if p.future.set_running_or_notify_cancel()]
            if not live:
                self._done()
                continue
            parts = [p.rows for p in live]
            dtype = np.result_type(*parts)
            rows = parts[0] if len(parts) == 1 else np.concatenate(parts).astype(dtype, copy=False)
            if self.on_batch is not None:
                self.on_batch(len(rows), len(live))
            try:
                future = self.executor.submit(self.resident, rows, self.output, self.k)
            except BaseException as err:
                self._fail(live, err)
                continue
            future.add_done_callback(lambda f, live=live: self._split(f, live))

    def _done(self) -> None:
        with self._cond:
            self._running -= 1
            self._cond.notify_all()

    def _fail(self, live: list[_Pending], err: BaseException) -> None:
        self._done()
        for p in live:
            p.future.set_exception(err)

    def _split(self, future: Future, live: list[_Pending]) -> None:
        err = future.exception()
        if err is not None:
            self._fail(live, err)
            return
        values = future.result()
        self._done()
        start = 0
        for p in live:
            stop = start + len(p.rows)
            p.future.set_result({name: a[start:stop] for name, a in values.items()})
            start = stop

    def close(self, wait: bool = True) -> None:
        """Take no more requests; run those queued (``wait``: until they are done)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if wait:
            self._thread.join()
            with self._cond:
                while self._running:
                    self._cond.wait(0.1)
