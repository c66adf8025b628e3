"""What a server's front costs on its own: its CPU a request, and a batch's round trip
through a device process's pipe.

:func:`front_cpu` (``benchmarks.serve --front-cpu``) feeds requests straight into connection
objects of a server whose batches cost nothing (no sockets, no load generator);
:func:`pipe_cpu` (``benchmarks.serve --pipe-cpu``) sends batches one after the other to a
device process whose values are zeros. The server's own per-stage seconds under load (queue,
a device process's wait and call, a batch's round trip) are in its ``/metrics``, which
``benchmarks.serve`` prints after each cell.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import threading
import time

import numpy as np

__all__ = ["front_cpu", "pipe_cpu"]


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
    features) to a device process of :class:`_Zeros`, ``batches`` one after the other (the
    answers read on an event loop's thread, as in a server's front)."""
    from distshap.serve.device_link import DeviceExecutor
    from distshap.serve.registry import Resident

    ctx = multiprocessing.get_context("spawn")
    ours, theirs = ctx.Pipe(duplex=True)
    device = ctx.Process(target=_zero_device, args=(theirs,), daemon=True)
    device.start()
    theirs.close()
    resident = Resident("zeros", _Zeros())
    loop = asyncio.new_event_loop()  # the answers read on a loop, as a server's front does
    executor = DeviceExecutor([ours], [resident], loop=loop)
    reader = threading.Thread(target=loop.run_forever, daemon=True)
    reader.start()
    rows = np.zeros((n, _Zeros.num_features), np.float32)
    for _ in range(min(100, batches)):  # warm: the device process started, pages touched
        executor.submit(resident, rows, "shap_values", 0).result()
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(batches):
        executor.submit(resident, rows, "shap_values", 0).result()
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    loop.call_soon_threadsafe(loop.stop)
    reader.join(10)
    executor.close()
    loop.close()
    device.join(10)
    return 1e6 * cpu / batches, 1e6 * wall / batches
