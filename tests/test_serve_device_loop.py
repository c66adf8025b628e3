"""A device process's loop: a call's answers written while the next call waits for its GPU,
never held behind a call that will not wait; the next call started while the running one's
GPU work is due to end; a front that stops mid-batch holds up no other front; a goodbye drops
that front's batches not yet run."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import threading
import time

import numpy as np
import pytest
from test_serve_device_process import _Echo, _Gate, _start, _Stream, _until, _wire, same_bits

from distshap.serve.device_link import DeviceExecutor, _Answers
from distshap.serve.device_process import DeviceLoop
from distshap.serve.registry import Resident
from distshap.serve.wire import BATCH, BYE
from distshap.waiting import wait_for_stream


class _Turns:
    """An explainer whose calls each wait, as for a GPU stream, for their own event; each
    notes how many calls ``loop`` had ended when it started (where ``loop`` is set)."""

    def __init__(self, calls: int) -> None:
        self.events = [threading.Event() for _ in range(calls)]
        self.entered = [threading.Event() for _ in range(calls)]
        self.calls = 0
        self.loop, self.ended_before = None, []

    def shap_values(self, rows):
        turn, self.calls = self.calls, self.calls + 1
        if self.loop is not None:
            self.ended_before.append(self.loop.stats["calls"])
        self.entered[turn].set()
        wait_for_stream(_Stream(self.events[turn]))
        return rows * 3


def test_a_calls_answers_are_written_while_the_next_call_waits_for_its_gpu():
    turns = _Turns(3)
    held = [Resident("turns", turns)]
    loops, (front,), _ = _wire(1, [held])
    thread = _start(loops[0])
    rows = np.arange(12, dtype=np.float32).reshape(3, 4)
    try:
        first = front.submit(held[0], rows[:1], "shap_values", 0)
        assert turns.entered[0].wait(30)
        second = front.submit(held[0], rows[1:2], "shap_values", 0)  # read during the wait
        _until(lambda: len(loops[0]._pending) == 1)
        turns.events[0].set()  # the first call ends; the second starts and waits
        assert turns.entered[1].wait(30)
        assert same_bits(first.result(30)["shap_values"], rows[:1] * 3)  # written meanwhile
        assert not second.done()
        turns.events[1].set()
        assert same_bits(second.result(30)["shap_values"], rows[1:2] * 3)  # nothing after it
        assert loops[0].stats["calls"] == 2 and not turns.entered[2].is_set()
    finally:
        for event in turns.events:
            event.set()
        front.close()
    thread.join(10)
    assert not thread.is_alive()


@contextlib.contextmanager
def _second_and_third(per_row: float, launch: float):
    """A device loop whose first call of two rows has waited for its "GPU" and ended, its
    kind's GPU seconds a row and a start's seconds then set; a second call of two rows waits
    for its GPU and a third batch of two rows has arrived -> (turns, loop, second, third,
    rows)."""
    turns = _Turns(3)
    held = [Resident("turns", turns)]
    loops, (front,), _ = _wire(1, [held])
    loop = turns.loop = loops[0]
    thread = _start(loop)
    rows = np.arange(24, dtype=np.float32).reshape(6, 4)
    try:
        turns.events[0].set()
        first = front.submit(held[0], rows[:2], "shap_values", 0)
        assert same_bits(first.result(30)["shap_values"], rows[:2] * 3)
        (kind,) = loop._waits  # calls of two rows wait for their GPU
        loop._gpu_seconds[kind], loop._launch_seconds = per_row, launch
        second = front.submit(held[0], rows[2:4], "shap_values", 0)
        assert turns.entered[1].wait(30)
        third = front.submit(held[0], rows[4:], "shap_values", 0)
        yield turns, loop, second, third, rows
        assert same_bits(second.result(30)["shap_values"], rows[2:4] * 3)
        assert same_bits(third.result(30)["shap_values"], rows[4:] * 3)
        assert loop.stats["calls"] == 3
    finally:
        for event in turns.events:
            event.set()
        front.close()
    thread.join(10)
    assert not thread.is_alive()


def test_the_next_call_starts_while_the_running_call_is_due_to_end_on_its_gpu():
    """Once a kind of call is known to wait for its GPU for about so long, the next call starts
    (its host work and launch) before the running call's GPU is done; the calls are answered
    in the order they ran, each with its own rows' values."""
    with _second_and_third(0.025, 0.04) as (turns, _, second, third, _):  # due 25 ms in
        assert turns.entered[2].wait(30)  # started though the second's GPU work goes on
        assert not turns.events[1].is_set() and not second.done()
        turns.events[2].set()  # the third's GPU is done first: it is answered after the second
        time.sleep(0.05)
        assert not third.done()
        turns.events[1].set()
    assert turns.ended_before == [0, 1, 1]


def test_the_next_call_does_not_start_before_the_running_call_is_due_to_end():
    with _second_and_third(600.0, 0.04) as (turns, loop, _, _, _):  # not due within the test
        _until(lambda: len(loop._pending) == 1)
        time.sleep(0.1)
        assert not turns.entered[2].is_set()  # it waits for the second's GPU
        turns.events[1].set()
        assert turns.entered[2].wait(30)  # then starts, before the second is answered
        assert turns.ended_before == [0, 1, 1]
        turns.events[2].set()


class _Waits:
    """An explainer whose calls wait for a stream done 50 ms after it is made; its first
    call waits twice (as a graph's first build does)."""

    def __init__(self) -> None:
        self.calls = 0

    def shap_values(self, rows):
        self.calls += 1
        for _ in range(2 if self.calls == 1 else 1):
            done = threading.Event()
            threading.Timer(0.05, done.set).start()
            wait_for_stream(_Stream(done))
        return rows + 1


def test_the_gpu_and_start_seconds_are_learnt_from_calls_that_waited_once():
    held = [Resident("waits", _Waits())]
    loops, (front,), _ = _wire(1, [held])
    loop = loops[0]
    thread = _start(loop)
    rows = np.arange(8, dtype=np.float32).reshape(2, 4)
    try:
        front.submit(held[0], rows, "shap_values", 0).result(30)
        assert loop._waits and not loop._gpu_seconds and loop._launch_seconds is None
        for _ in range(3):
            got = front.submit(held[0], rows, "shap_values", 0).result(30)["shap_values"]
            assert same_bits(got, rows + 1)
        ((kind, per_row),) = loop._gpu_seconds.items()  # two rows a call: 25 ms a row at least
        assert kind in loop._waits and 0.025 <= per_row < 5 and 0 < loop._launch_seconds < 5
    finally:
        front.close()
    thread.join(10)
    assert not thread.is_alive()


class _Failing:
    """An explainer whose calls wait for their GPU, then fail."""

    def shap_values(self, rows):
        done = threading.Event()
        done.set()
        wait_for_stream(_Stream(done))
        raise ArithmeticError("no values for these rows")


def test_a_failing_call_and_a_batch_of_no_known_model_are_answered_and_the_loop_serves_on():
    held = [Resident("echo", _Echo()), Resident("failing", _Failing())]
    raw, loop, front, thread = _beside_a_raw_front(held)
    rows = np.ones((2, 4), np.float32)
    try:
        failed = front.submit(held[1], rows, "shap_values", 0)
        with pytest.raises(RuntimeError, match="no values for these rows"):
            failed.result(30)
        os.write(raw.fileno(), BATCH.pack(5, 7, 0, 0, 0, 2, 4) + rows.tobytes())  # model 7
        got = _read_answers(raw)
        [(ident, values, err)] = got
        assert ident == 5 and values is None and type(err).__name__ == "IndexError"
        answer = front.submit(held[0], rows, "shap_values", 0).result(30)["shap_values"]
        assert same_bits(answer, rows * 2) and thread.is_alive()
    finally:
        front.close()
        raw.close()
    thread.join(10)
    assert not thread.is_alive()


def test_stop_while_a_call_waits_for_its_gpu_answers_it_then_ends():
    gate = _Gate()
    held = [Resident("gate", gate)]
    loops, (front,), _ = _wire(1, [held])
    thread = _start(loops[0])
    try:
        pending = front.submit(held[0], np.ones((1, 4), np.float32), "shap_values", 0)
        assert gate.entered.wait(30)
        loops[0].stop()
        time.sleep(0.05)
        assert thread.is_alive() and not pending.done()  # it waits for the call's GPU
        gate.open.set()
        assert pending.result(30)["shap_values"].shape == (1, 2)
        thread.join(10)
        assert not thread.is_alive()
    finally:
        gate.open.set()
        front.close()


class _Sizes:
    """An explainer that notes each call's rows in ``log`` (shared); its first call waits for
    ``gate``."""

    def __init__(self, log: list) -> None:
        self.log, self.calls = log, 0
        self.gate, self.entered = threading.Event(), threading.Event()

    def shap_values(self, rows):
        self.log.append(rows[:, 0].tolist())
        self.calls += 1
        if self.calls == 1:
            self.entered.set()
            wait_for_stream(_Stream(self.gate))
        return rows * 2


def test_a_call_takes_the_oldest_batch_and_the_later_ones_of_its_key_that_fit():
    log: list = []
    sizes, other = _Sizes(log), _Sizes(log)
    other.gate.set()
    held = [Resident("sizes", sizes), Resident("other", other)]
    loops, (front,), _ = _wire(1, [held])
    loop = loops[0]
    thread = _start(loop)
    try:
        busy = front.submit(held[0], np.zeros((1, 4), np.float32), "shap_values", 0)
        assert sizes.entered.wait(30)
        batches = [(held[0], 2, 1), (held[1], 2, 2), (held[0], 2, 3), (held[0], 2, 4),
                   (held[0], 1, 5)]  # fmt: skip
        futures = [front.submit(r, np.full((n, 4), v, np.float32), "shap_values", 0)
                   for r, n, v in batches]  # fmt: skip
        _until(lambda: len(loop._pending) == 5)
        loop.merge_rows = 5  # once they are all read
        sizes.gate.set()
        for future, (_, n, v) in zip(futures, batches, strict=True):
            assert same_bits(future.result(30)["shap_values"], np.full((n, 4), 2 * v, np.float32))
        busy.result(30)
        # 1, 3 and 5 fit in five rows; then the oldest left, 2 (another model), then 4
        assert log == [[0], [1, 1, 3, 3, 5], [2, 2], [4, 4]]
    finally:
        sizes.gate.set()
        front.close()
    thread.join(10)
    assert not thread.is_alive()


class _Mixed:
    """An explainer whose calls of at most 10 rows wait for ``small`` as a GPU call waits for
    its stream, and whose larger calls block on ``large`` without looking at a stream (the
    launches of a call beyond every graph)."""

    def __init__(self) -> None:
        self.small, self.large = threading.Event(), threading.Event()
        self.entered_small, self.entered_large = threading.Event(), threading.Event()

    def shap_values(self, rows):
        if len(rows) <= 10:
            self.entered_small.set()
            wait_for_stream(_Stream(self.small))
        else:
            self.entered_large.set()
            assert self.large.wait(30)
        return rows * 5


def test_answers_are_not_held_behind_a_call_that_will_not_wait_for_a_gpu():
    mixed = _Mixed()
    held = [Resident("mixed", mixed)]
    loops, (front,), _ = _wire(1, [held])
    thread = _start(loops[0])
    rows = np.arange(4 * 110, dtype=np.float32).reshape(110, 4)
    try:
        small = front.submit(held[0], rows[:2], "shap_values", 0)
        assert mixed.entered_small.wait(30)
        large = front.submit(held[0], rows[10:], "shap_values", 0)  # read while the first waits
        _until(lambda: len(loops[0]._pending) == 1)
        mixed.small.set()  # the small call ends; the large one (100 rows) starts and blocks
        assert mixed.entered_large.wait(30)
        assert same_bits(small.result(30)["shap_values"], rows[:2] * 5)  # not behind it
        assert not large.done()
        mixed.large.set()
        assert same_bits(large.result(30)["shap_values"], rows[10:] * 5)
    finally:
        mixed.small.set()
        mixed.large.set()
        front.close()
    thread.join(10)


def _read_answers(pipe) -> list:
    """The whole answers a raw front's pipe gives at its next reads (at least one)."""
    answers, got = _Answers(), []
    while not got:
        data = os.read(pipe.fileno(), 1 << 20)
        if not data:
            raise EOFError("the device loop closed the pipe before answering")
        answers.buffer += data
        got = answers.take()
    return got


def _beside_a_raw_front(held: list) -> tuple:
    """A device loop of ``held`` (running) with two fronts: a raw pipe, whose bytes the test
    writes and reads itself, and an executor -> (raw pipe, loop, executor, loop's thread)."""
    ctx = multiprocessing.get_context("spawn")
    (raw, raw_end), (ours, theirs) = ctx.Pipe(duplex=True), ctx.Pipe(duplex=True)
    loop = DeviceLoop(held, [raw_end, theirs])
    return raw, loop, DeviceExecutor([ours], held), _start(loop)


def test_a_front_that_stops_mid_batch_holds_up_no_other():
    echo = [Resident("echo", _Echo())]
    slow, loop, front, thread = _beside_a_raw_front(echo)
    rows = np.arange(1000 * 4, dtype=np.float32).reshape(1000, 4)
    message = BATCH.pack(7, 0, 0, 0, 0, 1000, 4) + rows.tobytes()
    try:
        os.write(slow.fileno(), message[:5])  # part of the header
        os.write(slow.fileno(), message[5:2000])  # and part of the rows: then it stops
        quick = front.submit(echo[0], rows[:3], "shap_values", 0)
        assert same_bits(quick.result(30)["shap_values"], rows[:3] * 2)  # not held up
        os.write(slow.fileno(), message[2000:])  # the rest of it
        got = _read_answers(slow)  # the slow front's answer, read from its pipe
        [(ident, values, err)] = got
        assert ident == 7 and err is None and same_bits(values["shap_values"], rows * 2)
        assert loop.stats["calls"] == 2
    finally:
        front.close()
        slow.close()
    thread.join(10)
    assert not thread.is_alive()


def test_a_goodbye_drops_the_fronts_batches_not_yet_run():
    gate = _Gate()
    held = [Resident("echo", _Echo()), Resident("gate", gate)]
    raw, loop, front, thread = _beside_a_raw_front(held)
    rows = np.ones((3, 4), np.float32)
    try:
        busy = front.submit(held[1], rows[:1], "shap_values", 0)
        assert gate.entered.wait(30)  # the device waits for its "GPU", reading meanwhile
        os.write(raw.fileno(), BATCH.pack(5, 0, 0, 0, 0, 3, 4) + rows.tobytes())
        os.write(raw.fileno(), BATCH.pack(BYE, 0, 0, 0, 0, 0, 0))
        got = _read_answers(raw)
        assert [ident for ident, _, _ in got] == [BYE] and not loop._pending
        gate.open.set()
        assert busy.result(30)["shap_values"].shape == (1, 2)
        assert loop.stats["calls"] == 1  # the raw front's batch never ran
    finally:
        gate.open.set()
        front.close()
        raw.close()
    thread.join(10)
    assert not thread.is_alive()


def test_a_front_that_stops_reading_its_answers_holds_up_no_other():
    echo = [Resident("echo", _Echo())]
    raw, loop, front, thread = _beside_a_raw_front(echo)
    rows = np.arange(400_000 * 4, dtype=np.float32).reshape(-1, 4)  # a 6.4 MB answer
    message = BATCH.pack(9, 0, 0, 0, 0, *rows.shape) + rows.tobytes()
    try:
        writer = threading.Thread(target=os.write, args=(raw.fileno(), message), daemon=True)
        writer.start()  # the raw front reads none of its answer
        _until(lambda: loop.stats["calls"] == 1)
        for n in (1, 2, 3):  # the answers of another front come through meanwhile
            quick = front.submit(echo[0], rows[:n], "shap_values", 0)
            assert same_bits(quick.result(30)["shap_values"], rows[:n] * 2)
        got = _read_answers(raw)  # now the raw front takes its answer, every byte of it
        [(ident, values, err)] = got
        assert ident == 9 and err is None and same_bits(values["shap_values"], rows * 2)
    finally:
        front.close()
        raw.close()
    thread.join(10)
    assert not thread.is_alive()


class _ByeAtTheEnd:
    """An explainer whose first call waits, as for a GPU stream, until ``release``; at the
    stream's last look its front says goodbye and closes its pipe (the goodbye then waits to
    be read beside that call's answers, due but not written)."""

    def __init__(self) -> None:
        self.raw, self.release, self.entered = None, threading.Event(), threading.Event()
        self.calls = 0

    @property
    def done(self) -> bool:
        if not self.release.is_set():
            return False
        if not self.raw.closed:
            os.write(self.raw.fileno(), BATCH.pack(BYE, 0, 0, 0, 0, 0, 0))
            self.raw.close()
        return True

    def synchronize(self) -> None:
        pass

    def shap_values(self, rows):
        self.calls += 1
        if self.calls == 1:
            self.entered.set()
            wait_for_stream(self)
        return rows * 3


def test_a_front_gone_with_answers_due_leaves_the_others_served():
    """A front says goodbye and closes its pipe while its answers wait to be written: the
    device process serves the other fronts on, and ends when they have said goodbye."""
    bye = _ByeAtTheEnd()
    held = [Resident("bye", bye)]
    bye.raw, loop, front, thread = _beside_a_raw_front(held)
    raw = bye.raw
    rows = np.ones((2, 4), np.float32)
    try:
        os.write(raw.fileno(), BATCH.pack(3, 0, 0, 0, 0, 2, 4) + rows.tobytes())
        assert bye.entered.wait(30)  # its call waits for its "GPU"
        bye.release.set()
        _until(lambda: raw.closed and loop.stats["calls"] == 1)
        answer = front.submit(held[0], rows, "shap_values", 0).result(30)["shap_values"]
        assert same_bits(answer, rows * 3) and thread.is_alive()
    finally:
        bye.release.set()
        front.close()
    thread.join(10)
    assert not thread.is_alive()  # both goodbyes counted once each
