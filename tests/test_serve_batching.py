"""The batch queue: while a batch runs, a request waits for ``max_wait`` to join others, unless
the executor merges the batches waiting for it itself (device processes): then it goes as soon
as a slot is free, with the other requests of its turn of the loop. A small batch runs on the
loop, with every request queued in its turn."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future

import numpy as np

from distshap.serve.batching import BatchQueue


class _Held:
    """An executor of two slots whose batches end when the test says."""

    def __init__(self, merges: bool) -> None:
        self.merges = merges
        self.batches: list[tuple[Future, np.ndarray]] = []

    def slots(self) -> int:
        return 2

    def submit(self, resident, rows, output, k) -> Future:
        future: Future = Future()
        self.batches.append((future, rows))
        return future


async def _scenario(merges: bool, one_turn: bool = False) -> tuple[list[int], list[int], list]:
    """Rows of the batches sent before the first ends, then of all; each request's answer
    (requests of 1, 3 and 2 rows, each in its own turn of the loop unless ``one_turn``)."""
    executor = _Held(merges)
    queue = BatchQueue(None, "shap_values", 0, executor, max_rows=100, max_wait=60.0,
                       max_queue_rows=1000)  # fmt: skip
    answers: list = []
    for n in (1, 3, 2):
        rows = np.full((n, 2), n, dtype=np.float32)
        queue.put(rows, lambda values, err: answers.append((values, err)))
        if not one_turn:
            await asyncio.sleep(0)
    await asyncio.sleep(0.05)
    early = [len(rows) for _, rows in executor.batches]
    while len(answers) < 3:
        for future, rows in executor.batches:
            if not future.done():
                future.set_result({"shap_values": rows * 2})
        await asyncio.sleep(0.01)
    return early, [len(rows) for _, rows in executor.batches], answers


def test_a_merging_executor_gets_each_batch_when_a_slot_is_free_without_the_wait():
    early, sent, answers = asyncio.run(_scenario(merges=True))
    assert early == [1, 3]  # the second slot at once, without max_wait
    assert sent == [1, 3, 2]  # the third when a slot is free
    early, sent, answers_waited = asyncio.run(_scenario(merges=False))
    assert early == [1]  # the others wait up to max_wait while the first runs
    assert sent == [1, 5]  # then go together
    early, sent, answers_turn = asyncio.run(_scenario(merges=True, one_turn=True))
    assert early == sent == [6]  # the requests of one turn: one batch, though slots were free
    for got in (answers, answers_waited, answers_turn):
        assert [err for _, err in got] == [None] * 3
        values = sorted((v["shap_values"] for v, _ in got), key=len)
        assert [v.tolist() for v in values] == [[[2, 2]], [[4, 4]] * 2, [[6, 6]] * 3]


class _Here:
    """A one-slot executor that can run a batch on the calling thread; it notes the thread and
    rows of every batch, and whether it went to ``submit`` or ``run_here``."""

    def __init__(self) -> None:
        self.batches: list[tuple[str, int, int]] = []
        self.busy = 0

    def slots(self) -> int:
        return 1

    def idle(self) -> bool:
        return not self.busy

    def run_here(self, resident, rows, output, k) -> dict:
        self.batches.append(("here", threading.get_ident(), len(rows)))
        return {"shap_values": rows * 2}

    def submit(self, resident, rows, output, k) -> Future:
        self.batches.append(("submit", threading.get_ident(), len(rows)))
        future: Future = Future()
        future.set_result({"shap_values": rows * 2})
        return future


async def _inline_scenario(executor, sizes, inline_rows: int) -> list:
    queue = BatchQueue(None, "shap_values", 0, executor, max_rows=100, max_wait=60.0,
                       max_queue_rows=1000, inline_rows=inline_rows)  # fmt: skip
    answers: list = []
    for n in sizes:  # in one turn of the loop
        queue.put(np.full((n, 2), n, dtype=np.float32), lambda v, e: answers.append((v, e)))
    await asyncio.sleep(0.05)
    return answers


def test_a_small_batch_runs_on_the_loop_with_every_request_of_its_turn():
    executor = _Here()
    answers = asyncio.run(_inline_scenario(executor, (1, 3, 2), inline_rows=6))
    ((where, thread, rows),) = executor.batches
    assert (where, rows) == ("here", 6) and thread == threading.get_ident()  # asyncio.run's
    values = sorted((v["shap_values"] for v, e in answers if e is None), key=len)
    assert [v.tolist() for v in values] == [[[2, 2]], [[4, 4]] * 2, [[6, 6]] * 3]
    # more rows than inline_rows, no inline_rows, or a busy executor: the executor's thread
    for sizes, inline_rows, busy in (((4, 3), 6, 0), ((1,), 0, 0), ((1,), 6, 1)):
        executor = _Here()
        executor.busy = busy
        answers = asyncio.run(_inline_scenario(executor, sizes, inline_rows))
        assert [b[0] for b in executor.batches] == ["submit"] and len(answers) == len(sizes)


def test_a_batch_run_on_the_loop_that_fails_answers_each_request_with_its_error():
    class Failing(_Here):
        def run_here(self, resident, rows, output, k):
            raise ValueError("no values")

    answers = asyncio.run(_inline_scenario(Failing(), (1, 2), inline_rows=6))
    assert [(v, str(e)) for v, e in answers] == [(None, "no values")] * 2
