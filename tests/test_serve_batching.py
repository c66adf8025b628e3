"""The batch queue: while a batch runs, a request waits for ``max_wait`` to join others, unless
the executor merges the batches waiting for it itself (device processes): then it goes as soon
as a slot is free."""

from __future__ import annotations

import asyncio
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


async def _scenario(merges: bool) -> tuple[list[int], list[int], list]:
    """Rows of the batches sent before the first ends, then of all; each request's answer."""
    executor = _Held(merges)
    queue = BatchQueue(None, "shap_values", 0, executor, max_rows=100, max_wait=60.0,
                       max_queue_rows=1000)  # fmt: skip
    answers: list = []
    for n in (1, 3, 2):
        rows = np.full((n, 2), n, dtype=np.float32)
        queue.put(rows, lambda values, err: answers.append((values, err)))
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
    for got in (answers, answers_waited):
        assert [err for _, err in got] == [None] * 3
        values = sorted((v["shap_values"] for v, _ in got), key=len)
        assert [v.tolist() for v in values] == [[[2, 2]], [[4, 4]] * 2, [[6, 6]] * 3]
