"""An infer request between its queueing and its answer, and the deadlines of such requests.

A :class:`Call` waits for the values of each output it queued (its queue handles call
:meth:`Call.part_done` / :meth:`Call.part_of` on the loop) or for its deadline. Deadlines are
kept in buckets of ``tick`` seconds (:class:`Deadlines`): one timer a bucket, not one a
request; a call answered before its deadline leaves its bucket, and a bucket left empty drops
its timer. Values that come after the deadline (a batch that ran on the loop past it, before
the timer could fire) are answered as the timer would have: the server's timeout.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from distshap.serve.backends import NoWorkerError

__all__ = ["Call", "Deadlines", "error_line"]


def error_line(err: BaseException) -> str:
    """``err`` in one line for an answer: its type and the first line of its message."""
    first = (str(err).strip().splitlines() or [""])[0]
    return f"{type(err).__name__}: {first[:200]}"


class _Bucket(set):
    """The calls whose deadline falls in one tick, with the tick (``key``) and its timer."""

    __slots__ = ("key", "timer")


class Deadlines:
    """The calls waiting for their answer by deadline bucket, each bucket with its timer (on
    ``loop``) that expires its calls."""

    def __init__(self, loop: asyncio.AbstractEventLoop, tick: float) -> None:
        self.loop, self.tick = loop, tick
        self.buckets: dict[int, _Bucket] = {}

    def __bool__(self) -> bool:
        return bool(self.buckets)

    def watch(self, call: Call, deadline: float) -> None:
        """Put ``call`` in the bucket of ``deadline`` (``time.perf_counter`` seconds); its
        timer calls ``call.expire()`` within a tick after it."""
        key = int(deadline / self.tick) + 1
        bucket = self.buckets.get(key)
        if bucket is None:
            bucket = self.buckets[key] = _Bucket()
            bucket.key = key
            left = max(0.0, key * self.tick - time.perf_counter())
            bucket.timer = self.loop.call_later(left, self._expire, key)
        bucket.add(call)
        call.bucket, call.deadline = bucket, deadline

    def leave(self, call: Call) -> None:
        """``call`` is answered: out of its bucket (a bucket left empty drops its timer)."""
        bucket = call.bucket
        call.bucket = None
        bucket.discard(call)
        if not bucket:  # its timer is not needed any more
            bucket.timer.cancel()
            self.buckets.pop(bucket.key, None)

    def _expire(self, key: int) -> None:
        for call in list(self.buckets.pop(key, ())):
            call.expire()


class Call:
    """An infer request waiting for its outputs (one queue handle per output) or its deadline
    (``bucket``: its deadline's bucket, None once answered).

    ``server`` provides ``outputs(call)`` (the answer once every output is in: an HTTP reply,
    or a gRPC response), ``timeout()``, ``error(status, message)`` and ``deadlines``
    (:class:`Deadlines`); ``deliver(request, answer)`` gets the answer.
    """

    __slots__ = ("bucket", "deadline", "deliver", "handles", "left", "request", "results",
                 "server", "specs", "what")  # fmt: skip

    def __init__(self, server: Any, request: Any, deliver: Any, specs: tuple,
                 what: tuple) -> None:  # fmt: skip
        self.server, self.request, self.deliver = server, request, deliver
        self.specs, self.what = specs, what
        self.handles: list = []
        self.results: list = [None] * len(specs)
        self.left = len(specs)
        self.bucket: Any = None
        self.deadline = float("inf")

    def part_done(self, values: dict | None, err: BaseException | None) -> None:
        """The one output's values (or error)."""
        self.part_of(0, values, err)

    def part_of(self, index: int, values: dict | None, err: BaseException | None) -> None:
        """Output ``index``'s values (or error); the answer once all are in."""
        self.results[index] = (values, err)
        self.left -= 1
        if self.left:  # more to come, or expired (negative: what still arrives is dropped)
            return
        if self.bucket is not None:
            self.server.deadlines.leave(self)
            if time.perf_counter() > self.deadline:  # its values came late (the loop was busy)
                self.expire()
                return
        try:
            reply = self.server.outputs(self)
        except Exception as err:  # an answer for every request, whatever went wrong
            reply = self.server.error(500, error_line(err))
        self.deliver(self.request, reply)

    def failure(self) -> tuple[int, str] | None:
        """The status and one-line message of a call whose outputs are all in, where one of
        them failed (503: no worker left to run it; 500: another error); None otherwise."""
        for _, err in self.results:
            if isinstance(err, NoWorkerError):
                return 503, str(err)
            if err is not None:
                return 500, error_line(err)
        return None

    def expire(self) -> None:
        """The deadline passed: the request is answered with the server's timeout."""
        self.bucket = None
        self.left = -1  # what still arrives is dropped
        for handle in self.handles:
            handle.cancel()
        self.deliver(self.request, self.server.timeout())
