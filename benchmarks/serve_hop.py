"""Where a batch's round trip through a front and a device process goes, stage by stage.

``--fronts`` fronts, each a :class:`~distshap.serve.batching.BatchQueue` and a
:class:`~distshap.serve.device_process.DeviceExecutor` with its own pipe, run in this process
on one asyncio loop (a server's fronts are processes of their own); ``--clients`` coroutines,
spread over the fronts, each queue one ``--rows``-row request, wait for its answer and queue
the next, for ``--seconds``. A device process (spawned, a
:class:`~distshap.serve.device_process.DeviceLoop` with ``--slots`` runner threads) runs
every batch on a stand-in explainer whose call holds the GIL for ``--hold-us`` microseconds
(host work of a call: busy Python) then waits ``--wait-us`` without it (a GPU's kernels).
Each batch is stamped (``time.perf_counter``: the system's monotonic clock, the same in both
processes) at:

submit (the front's loop hands it to the executor), received (the device process's reader put
it in the waiting list), taken (a runner took it, merged with the others waiting), call start
/ call end (the stand-in explainer), answered (its answer made, about to be written), read
(the front's reader settled its Future), resumed (the front's loop ran the request's answer).

The medians of each step's microseconds are printed, with a request's median latency, the
requests a second, batches a device call and calls a second, for each ``--slots``,
``--overlap-rows`` and ``--in-flight`` given (a device process for each).

:func:`front_cpu` and :func:`pipe_cpu` (``benchmarks.serve --front-cpu`` and ``--pipe-cpu``)
measure the front's CPU a request without sockets, and a front's CPU and wall time a round
trip to a device process whose values are zeros, one batch after the other.

Usage::

    python -m benchmarks.serve_hop --clients 1,16 --slots 1,2 --overlap-rows 0,2048 --seconds 2
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import itertools
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import threading
import time

import numpy as np

_STEPS = ("submit", "received", "taken", "call_start", "call_end", "answered", "read",
          "resumed")  # fmt: skip
_FEATURES = 8


class _Standin:
    """An explainer whose call holds the GIL ``hold`` seconds, then waits ``wait`` without it;
    each call's start and end are kept on the calling thread."""

    num_features = _FEATURES

    def __init__(self, hold: float, wait: float) -> None:
        self.hold, self.wait = hold, wait
        self.local = threading.local()

    def shap_values(self, rows: np.ndarray) -> np.ndarray:
        start = time.perf_counter()
        while time.perf_counter() - start < self.hold:
            pass
        if self.wait:
            time.sleep(self.wait)
        self.local.span = (start, time.perf_counter())
        return np.zeros((len(rows), _FEATURES + 1), np.float32)


def _device(conns: list, slots: int, overlap: int, hold: float, wait: float, path: str) -> None:
    """The device process: a stamped DeviceLoop until every front says goodbye; stamps to
    ``path`` (JSON, {"front id": {step: seconds}})."""
    from collections import deque

    from distshap.serve import device_process as dp
    from distshap.serve.registry import Resident

    try:
        from distshap.serve.wire import ANSWER, BYE
    except ImportError:  # code from before serve/wire.py
        ANSWER, BYE = dp._ANSWER, dp._BYE

    stamps: dict = {}
    standin = _Standin(hold, wait)
    front = {conn: i for i, conn in enumerate(conns)}

    def own(conn, ident: int) -> dict:
        return stamps.setdefault(f"{front[conn]} {ident}", {})

    class Stamped(deque):
        def append(self, item) -> None:
            own(item.conn, item.ident)["received"] = time.perf_counter()
            super().append(item)

    class Loop(dp.DeviceLoop):
        def _next_call(self):
            items = super()._next_call()
            now = time.perf_counter()
            for item in items:
                own(item.conn, item.ident)["taken"] = now
            self._pending = Stamped(self._pending)
            return items

        def _run(self, items) -> None:
            standin.local.span = (float("nan"), float("nan"))
            super()._run(items)
            for item in items:
                mine = own(item.conn, item.ident)
                mine["call_start"], mine["call_end"] = standin.local.span

        def _send(self, conn, parts) -> None:
            now, at = time.perf_counter(), 0
            while at < len(parts):  # one front's answers: a header (+ its tensors) each
                ident, status, count, _ = ANSWER.unpack_from(parts[at])
                if ident != BYE:
                    own(conn, ident)["answered"] = now
                at += 1 + (0 if status else count)
            super()._send(conn, parts)

    known = inspect.signature(dp.DeviceLoop).parameters  # code from before overlap_rows: 0
    more = {"overlap_rows": overlap} if "overlap_rows" in known else {}
    loop = Loop([Resident("standin", standin)], conns, slots, **more)
    loop._pending = Stamped()
    loop.run()
    with open(path, "w") as f:
        json.dump(stamps, f)


async def _load(queues: list, clients: int, rows: np.ndarray, seconds: float, out: list) -> None:
    """``clients`` coroutines over ``queues`` (round robin), each a request at a time."""
    loop = asyncio.get_running_loop()

    async def client(queue) -> None:
        stop = time.perf_counter() + seconds
        while time.perf_counter() < stop:
            done = loop.create_future()
            t0 = time.perf_counter()
            queue.put(rows, lambda values, err, done=done: done.set_result(err))
            err = await done
            assert err is None, err
            out.append(time.perf_counter() - t0)

    await asyncio.gather(*(client(queues[i % len(queues)]) for i in range(clients)))


def _stamped(executor, front: int, stamps: dict, loop) -> None:
    """Stamp ``executor``'s batches at submit, read (its reader thread) and resumed (the
    loop runs what the reader handed it)."""
    submit, ids = executor.submit, iter(range(1, 1 << 62))

    def stamped_submit(resident, rows, output, k):
        ident = next(ids)  # the executor's own count, in step
        t0 = time.perf_counter()
        future = submit(resident, rows, output, k)
        own = stamps.setdefault(f"{front} {ident}", {})
        own["submit"] = t0

        def settled(_) -> None:
            own["read"] = time.perf_counter()
            loop.call_soon_threadsafe(lambda: own.__setitem__("resumed", time.perf_counter()))

        future.add_done_callback(settled)
        return future

    executor.submit = stamped_submit


def _one(clients: int, slots: int, overlap: int, in_flight: int, n: int, args) -> dict:
    """One device process and ``--fronts`` fronts' load -> the medians of each step (us) and
    rates."""
    from distshap.serve import device_process as dp
    from distshap.serve.batching import BatchQueue
    from distshap.serve.registry import Resident

    ctx = multiprocessing.get_context("spawn")
    pairs = [ctx.Pipe(duplex=True) for _ in range(args.fronts)]
    path = tempfile.mktemp(suffix=".json")
    work = (args.hold_us / 1e6, args.wait_us / 1e6)
    device = ctx.Process(target=_device, daemon=True,
                         args=([t for _, t in pairs], slots, overlap, *work, path))  # fmt: skip
    device.start()
    for _, theirs in pairs:
        theirs.close()
    stamps: dict = {}
    resident = Resident("standin", _Standin(0, 0))
    rows = np.zeros((n, _FEATURES), np.float32)
    executors = [dp.DeviceExecutor([ours], [resident], in_flight) for ours, _ in pairs]
    loop = asyncio.new_event_loop()
    for front, executor in enumerate(executors):
        _stamped(executor, front, stamps, loop)
    for executor in executors:  # the device process started and answering
        executor.submit(resident, rows, "shap_values", 0).result(60)
    stamps.clear()
    latencies: list[float] = []

    async def main() -> None:
        queues = [BatchQueue(resident, "shap_values", 0, executor, args.max_batch_rows,
                             args.max_wait_ms / 1e3, 1 << 24)
                  for executor in executors]  # fmt: skip
        await _load(queues, clients, rows, args.seconds, latencies)

    loop.run_until_complete(main())
    loop.close()
    for executor in executors:
        executor.close()
    device.join(30)
    with open(path) as f:
        far = json.load(f)
    os.unlink(path)
    return _summary(stamps, far, latencies, args.seconds)


def _summary(near: dict, far: dict, latencies: list, seconds: float) -> dict:
    """Median microseconds of each step, over the batches stamped at every step."""
    rows = []
    for ident, own in near.items():
        both = {**own, **far.get(ident, {})}
        if all(step in both for step in _STEPS if step != "resumed"):
            rows.append(both)
    out: dict = {}
    for a, b in zip(_STEPS, _STEPS[1:], strict=False):
        spans = [1e6 * (r[b] - r[a]) for r in rows if a in r and b in r]
        if spans:
            out[f"{a}->{b}"] = statistics.median(spans)
    out["round_trip"] = statistics.median(1e6 * (r["read"] - r["submit"]) for r in rows)
    out["latency_p50"] = 1e6 * statistics.median(latencies)
    out["requests_per_s"] = len(latencies) / seconds
    calls = {r["call_start"] for r in rows}
    out["batches_per_call"] = len(rows) / max(1, len(calls))
    out["calls_per_s"] = len(calls) / seconds
    return out


class _Sink:
    """A transport that drops what is written (:func:`front_cpu`)."""

    def write(self, data: bytes) -> None:
        pass

    def close(self) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def front_cpu(path: str, request: bytes, executor, requests: int) -> float:
    """CPU microseconds a request of the front alone: ``requests`` copies of ``request`` (the
    bytes of one) fed into 64 connections on the loop of a server of the model at ``path``
    whose batches run on ``executor`` (values without work)."""
    from distshap.serve import ExplanationServer, ServeOptions
    from distshap.serve.connection import Connection
    from distshap.serve.registry import Registry, parse_model_spec

    registry = Registry.from_specs([parse_model_spec(f"m={path}")], backend="cpu")
    opts = ServeOptions(port=0, max_queue_rows=1 << 24, request_timeout=600)
    server = ExplanationServer(registry, executor, opts).start()
    left, finished, spent = [requests], threading.Event(), []

    def pump(conns: list, t0: float) -> None:
        for conn in conns:
            if conn.idle and left[0] > 0:
                left[0] -= 1
                conn.data_received(request)
        if left[0] > 0 or not all(conn.idle for conn in conns):
            server.loop.call_soon(pump, conns, t0)
            return
        spent.append(time.process_time() - t0)
        finished.set()

    def begin() -> None:
        conns = [Connection(server) for _ in range(64)]
        for conn in conns:
            conn.connection_made(_Sink())
        pump(conns, time.process_time())

    server.loop.call_soon_threadsafe(begin)
    finished.wait()
    server.drain()
    return 1e6 * spent[0] / requests


class _Zeros:
    """An explainer whose values are zeros (:func:`pipe_cpu`: the pipe alone)."""

    num_features = 8

    def shap_values(self, rows):
        return np.zeros((len(rows), self.num_features + 1), np.float32)


def _zero_device(conn) -> None:
    from distshap.serve.device_process import DeviceLoop
    from distshap.serve.registry import Resident

    DeviceLoop([Resident("zeros", _Zeros())], [conn]).run()


def pipe_cpu(n: int, batches: int) -> tuple[float, float]:
    """A front's CPU and wall microseconds a round trip of an ``n``-row batch (8 FP32
    features) to a device process of :class:`_Zeros`, ``batches`` one after the other."""
    from distshap.serve.device_link import DeviceExecutor
    from distshap.serve.registry import Resident

    ctx = multiprocessing.get_context("spawn")
    ours, theirs = ctx.Pipe(duplex=True)
    device = ctx.Process(target=_zero_device, args=(theirs,), daemon=True)
    device.start()
    theirs.close()
    resident = Resident("zeros", _Zeros())
    executor = DeviceExecutor([ours], [resident])
    rows = np.zeros((n, _Zeros.num_features), np.float32)
    for _ in range(min(100, batches)):  # warm: the device process started, pages touched
        executor.submit(resident, rows, "shap_values", 0).result()
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(batches):
        executor.submit(resident, rows, "shap_values", 0).result()
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    executor.close()
    device.join(10)
    return 1e6 * cpu / batches, 1e6 * wall / batches


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ints = lambda text: [int(x) for x in text.split(",") if x]  # noqa: E731
    parser.add_argument("--clients", type=ints, default=[1, 4])
    parser.add_argument("--slots", type=ints, default=[1, 2])
    parser.add_argument("--in-flight", type=ints, default=[4])
    parser.add_argument("--fronts", type=int, default=4, help="fronts (one loop, this process)")
    parser.add_argument("--overlap-rows", type=ints, default=[0, 2048])
    parser.add_argument("--rows", type=int, default=1)
    parser.add_argument("--hold-us", type=float, default=800.0)
    parser.add_argument("--wait-us", type=float, default=200.0)
    parser.add_argument("--max-batch-rows", type=int, default=16384)
    parser.add_argument("--max-wait-ms", type=float, default=2.0)
    parser.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args(argv)
    for clients in args.clients:
        for slots, overlap, in_flight in itertools.product(args.slots, args.overlap_rows,
                                                           args.in_flight):  # fmt: skip
            r = _one(clients, slots, overlap, in_flight, args.rows, args)
            print(f"clients {clients} slots {slots} overlap-rows {overlap} in-flight "
                  f"{in_flight}: " + ", ".join(f"{k} {v:,.0f}" if v >= 10 else f"{k} {v:.2f}"
                                               for k, v in r.items()), flush=True)  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
