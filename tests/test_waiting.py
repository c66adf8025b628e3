"""While a GPU call waits for its stream, the work of ``while_waiting`` runs, on the waiting
thread only, until the stream is done; without it the call blocks in ``synchronize``."""

from __future__ import annotations

import threading

from distshap.waiting import wait_for_stream, while_waiting


class _Stream:
    """A stream that is done after ``polls`` looks at ``done``; counts its synchronisations."""

    def __init__(self, polls: int) -> None:
        self.polls, self.synced = polls, 0

    @property
    def done(self) -> bool:
        self.polls -= 1
        return self.polls < 0

    def synchronize(self) -> None:
        self.synced += 1


def test_the_work_runs_until_the_stream_is_done_then_it_synchronises():
    stream, ran = _Stream(5), []
    with while_waiting(lambda: ran.append(1)):
        wait_for_stream(stream)
    assert len(ran) == 5 and stream.synced == 1


def test_without_work_the_wait_blocks_in_synchronize_and_blocks_nest():
    stream = _Stream(5)
    wait_for_stream(stream)
    assert stream.polls == 5 and stream.synced == 1  # done never asked
    outer, inner = [], []
    with while_waiting(lambda: outer.append(1)):
        with while_waiting(lambda: inner.append(1)):
            wait_for_stream(_Stream(2))
        wait_for_stream(_Stream(3))
    wait_for_stream(_Stream(4))
    assert (len(inner), len(outer)) == (2, 3)


def test_the_work_is_the_waiting_threads_own():
    ran = []
    other = _Stream(4)
    with while_waiting(lambda: ran.append(1)):
        thread = threading.Thread(target=wait_for_stream, args=(other,))
        thread.start()
        thread.join(10)
    assert not ran and other.synced == 1 and other.polls == 4
