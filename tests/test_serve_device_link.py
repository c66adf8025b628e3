"""A front's side of the device processes: answers parsed whole from bytes that come a piece
at a time; answers read and their Futures settled on the server's event loop (no reader
thread); batches larger than the pipe holds written whole also on a pipe the loop made
non-blocking (uvloop's); a device process that exits fails its batches there at once."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import socket
import threading
import time

import numpy as np
import pytest

from distshap.serve.backends import NoWorkerError
from distshap.serve.device_link import DeviceExecutor, _Answers
from distshap.serve.device_process import DeviceLoop
from distshap.serve.registry import Resident
from distshap.serve.wire import ANSWER, BYE, answer_parts, write_parts


class _Echo:
    """An explainer whose values are its rows doubled (every byte of them checked)."""

    def shap_values(self, rows):
        return rows * 2


def _bytes(parts: list) -> bytes:
    return b"".join(bytes(memoryview(p).cast("B")) for p in parts)


def test_answers_come_out_whole_however_the_bytes_are_cut():
    values = {"top_interactions": np.arange(24, dtype=np.float32).reshape(4, 3, 2),
              "top_interactions_pairs": np.arange(16, dtype=np.int32).reshape(4, 2, 2)}  # fmt: skip
    stream = (
        _bytes(answer_parts(7, values, None, 1, 3))
        + _bytes(answer_parts(8, None, ValueError("rows have 5 features"), 0, 1))
        + _bytes(answer_parts(9, {"margin": np.ones(0, np.float64)}, None, 0, 0))
        + ANSWER.pack(BYE, 0, 0, 0)
    )  # the goodbye's answer, as a device process writes it
    for cut in (1, 3, 7, len(stream)):
        answers, got = _Answers(), []
        for at in range(0, len(stream), cut):
            answers.buffer += stream[at : at + cut]
            got += answers.take()
        assert [ident for ident, _, _ in got] == [7, 8, 9, BYE] and not answers.buffer
        (_, first, none), (_, nothing, err), (_, empty, _), (_, bye, bye_err) = got
        assert none is None and nothing is None and bye is None and bye_err is None
        for name, array in values.items():
            want = array[1:3]
            assert first[name].dtype == want.dtype and np.array_equal(first[name], want)
        assert type(err).__name__ == "ValueError" and str(err) == "rows have 5 features"
        assert empty["margin"].shape == (0,) and empty["margin"].dtype == np.float64


def _loop_thread() -> tuple[asyncio.AbstractEventLoop, threading.Thread]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    return loop, thread


def _close(loop, thread, front, runner=None) -> None:
    """Stop the loop, close the front (its goodbye ends the device loop) and join them."""
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    front.close()
    assert all(link.watched == -1 for link in front._links)  # unwatched before closed
    loop.close()
    if runner is not None:
        runner.join(10)
        assert not runner.is_alive()  # the goodbye reached the device loop


def test_a_loop_reads_the_answers_and_settles_them_on_its_thread():
    echo = [Resident("echo", _Echo())]
    ctx = multiprocessing.get_context("spawn")
    ours, theirs = ctx.Pipe(duplex=True)
    device = DeviceLoop(echo, [theirs])
    loop, thread = _loop_thread()
    front = DeviceExecutor([ours], echo, loop=loop)  # before the loop runs
    assert all(link.reader is None for link in front._links)  # no reader thread
    runner = threading.Thread(target=device.run, daemon=True)
    thread.start()
    rows = np.arange(3 * 50_000 * 4, dtype=np.float32).reshape(-1, 4)  # answers over many reads
    settled_on = []
    try:
        futures = [front.submit(echo[0], part, "shap_values", 0) for part in np.split(rows, 3)]
        for future in futures:  # before the device loop runs: none is settled yet
            future.add_done_callback(lambda f: settled_on.append(threading.get_ident()))
        runner.start()
        for future, part in zip(futures, np.split(rows, 3), strict=True):
            got = future.result(30)["shap_values"]
            assert got.dtype == part.dtype and np.array_equal(got, part * 2)
        for _ in range(1000):  # the last callback may run just after its result is set
            if len(settled_on) == 3:
                break
            time.sleep(0.01)
        assert settled_on == [thread.ident] * 3  # on the loop's thread
    finally:
        _close(loop, thread, front, runner)


def test_on_a_loop_a_device_that_exits_fails_its_batches_at_once():
    echo = [Resident("echo", _Echo())]
    ctx = multiprocessing.get_context("spawn")
    ours, theirs = ctx.Pipe(duplex=True)  # nobody reads the device's end: it never answers
    loop, thread = _loop_thread()
    front = DeviceExecutor([ours], echo, loop=loop)
    thread.start()
    try:
        future = front.submit(echo[0], np.ones((2, 4), np.float32), "shap_values", 0)
        assert front.loads() == [2] and front.ready()
        theirs.close()  # the device process is gone
        with pytest.raises(NoWorkerError, match="device process 0 exited"):
            future.result(30)
        assert not front.ready() and front.loads() == [-1] and front.workers() == 0
        with pytest.raises(NoWorkerError, match="no device process is running"):
            front.submit(echo[0], np.ones((1, 4), np.float32), "shap_values", 0)
    finally:
        _close(loop, thread, front)


def test_a_non_blocking_pipe_that_fills_is_written_whole():
    ours, theirs = socket.socketpair()
    ours.setblocking(False)  # as uvloop leaves a description it watches
    data = np.arange(4 << 20, dtype=np.float32)  # 16 MiB: far more than the pipe holds
    got = bytearray()

    def drain() -> None:
        while len(got) < data.nbytes:
            time.sleep(0.001)  # a slow reader: the pipe is full most of the time
            got.extend(theirs.recv(1 << 16))

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    write_parts(ours, [b"head", data])
    reader.join(60)
    assert bytes(got) == b"head" + data.tobytes()
    ours.close()
    theirs.close()


def _event_loops() -> list:
    loops = [("asyncio", asyncio.new_event_loop)]
    try:
        import uvloop
    except ImportError:
        return loops
    return [*loops, ("uvloop", uvloop.new_event_loop)]


@pytest.mark.parametrize("name,make", _event_loops(), ids=[n for n, _ in _event_loops()])
def test_on_a_loop_batches_larger_than_the_pipe_holds_arrive_whole(name, make):
    """The sender thread writes what the pipe does not take at once, also where the loop made
    the pipe non-blocking (uvloop does for what it watches)."""
    echo = [Resident("echo", _Echo())]
    ctx = multiprocessing.get_context("spawn")
    ours, theirs = ctx.Pipe(duplex=True)
    loop = make()
    front = DeviceExecutor([ours], echo, loop=loop)
    if name == "asyncio":
        os.set_blocking(ours.fileno(), False)  # what uvloop does, on asyncio's loop too
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    device = DeviceLoop(echo, [theirs])
    big = np.arange(4 << 20, dtype=np.float32).reshape(-1, 4)  # 16 MiB
    runner = threading.Thread(target=device.run, daemon=True)
    try:
        futures = [front.submit(echo[0], part, "shap_values", 0) for part in (big, big[:5], big)]
        runner.start()  # the device reads only now: the batches wait in the pipe
        for future, part in zip(futures, (big, big[:5], big), strict=True):
            assert np.array_equal(future.result(60)["shap_values"], part * 2)
        assert front.ready() and front.workers() == 1
    finally:
        _close(loop, thread, front, runner)
