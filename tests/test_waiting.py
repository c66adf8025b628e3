"""A call run by a handoff parks while it waits for its GPU stream: its starter runs, and
resumes it once the stream is done; the two threads take turns, never run together. Outside a
handoff the wait blocks in ``synchronize``."""

from __future__ import annotations

import threading

import pytest

from distshap.waiting import Handoff, wait_for_stream


class _Stream:
    """A stream that is done once ``finished`` is set; counts its synchronisations."""

    def __init__(self) -> None:
        self.finished, self.synced = False, 0

    @property
    def done(self) -> bool:
        return self.finished

    def synchronize(self) -> None:
        assert self.finished, "synchronized before the stream was done"
        self.synced += 1


def test_a_call_parks_at_its_wait_and_ends_when_resumed():
    stream, steps = _Stream(), []

    def job():
        steps.append(("launch", threading.current_thread().name))
        wait_for_stream(stream)
        steps.append(("read", threading.current_thread().name))
        return 42

    helper = Handoff("helper")
    helper.start(job)
    assert steps == [("launch", "helper")] and helper.parks == 1 and not helper.ended
    assert not helper.ready()  # its stream is not done
    stream.finished = True
    assert helper.ready()
    helper.resume()
    assert steps[-1] == ("read", "helper") and helper.ended and stream.synced == 1
    assert helper.result() == 42 and not helper.busy
    helper.close()


def test_two_calls_take_turns_with_their_starter_and_errors_reach_it():
    first, second, order = _Stream(), _Stream(), []

    def job(name, stream, fail=False):
        def run():
            order.append(f"{name} launched")
            wait_for_stream(stream)
            order.append(f"{name} read")
            if fail:
                raise ValueError(f"{name} failed")
            return name

        return run

    a, b = Handoff("a"), Handoff("b")
    a.start(job("a", first))
    order.append("starter")
    b.start(job("b", second, fail=True))  # started while a is parked
    second.finished = first.finished = True
    b.resume()
    a.resume()
    assert order == ["a launched", "starter", "b launched", "b read", "a read"]
    assert a.result() == "a"
    with pytest.raises(ValueError, match="b failed"):
        b.result()
    a.start(lambda: "no wait")  # a call that never waits ends at its start
    assert a.ended and a.parks == 0 and a.result() == "no wait"
    a.close()
    b.close()


def test_outside_a_handoff_the_wait_blocks_in_synchronize():
    stream = _Stream()
    stream.finished = True
    wait_for_stream(stream)
    assert stream.synced == 1


class _Broken:
    """A stream whose ``done`` fails (a CUDA error) and whose ``synchronize`` raises it."""

    @property
    def done(self) -> bool:
        raise OSError("the device fell off the bus")

    def synchronize(self) -> None:
        raise OSError("the device fell off the bus")


def test_misuse_errors_a_failing_stream_and_close():
    helper, stream = Handoff("h"), _Stream()
    with pytest.raises(RuntimeError, match="resume it first"):
        helper.start(lambda: wait_for_stream(stream))
        helper.result()
    with pytest.raises(RuntimeError, match="runs a job already"):
        helper.start(lambda: None)
    stream.finished = True
    helper.resume()
    helper.result()
    helper.start(lambda: wait_for_stream(_Broken()))  # its stream's error is the job's own
    assert helper.ready()
    helper.resume()
    with pytest.raises(OSError, match="fell off the bus"):
        helper.result()
    helper.start(lambda: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        helper.result()
    helper.close()  # free: its thread ends
    assert not helper._thread.is_alive()
