"""Where a batch runs: in this process, or on the workers of a Dask cluster.

Both run :func:`explain_block`, the public :class:`~distshap.TreeExplainer` calls on a block of
rows, so a response is what ``TreeExplainer(model, layout="xgboost").shap_values(rows)``
returns, bit for bit (each row's values do not depend on the rows beside it). The Dask
executor keeps each model resident on every worker
(:func:`distshap.cluster.shipping.model_future`, a recoverable task, and one pinned copy per
worker) and sends a block as ONE task on that copy (``client.submit``): no collection, no graph
per request. A block whose worker dies is run again on another; with no worker left the batch
fails at once with :class:`NoWorkerError`.
"""

from __future__ import annotations

import itertools
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from distshap.plan.config import config_context
from distshap.serve.registry import PAIRS_OUTPUT, Resident

__all__ = ["DaskExecutor", "InProcessExecutor", "NoWorkerError", "ResidentActor", "explain_block"]


#: Times a block is sent again after its worker died.
_ATTEMPTS = 4
#: Seconds a model's actor may take to start on a worker (its model shipped there).
_START_TIMEOUT = 300.0


class NoWorkerError(RuntimeError):
    """No worker is connected to run a batch (the server answers 503)."""


class _WorkerLost(RuntimeError):
    """The worker running a block left the cluster."""


def explain_block(resident: Resident, rows: np.ndarray, output: str, k: int) -> dict:
    """The values of one output for a block of rows: ``{tensor name: array}``.

    Parameters
    ----------
    resident : Resident
        The model's explainers.
    rows : ndarray (n, F)
        FP32 or FP64 rows.
    output : str
        One of :data:`distshap.serve.registry.OUTPUTS`.
    k : int
        Pairs per row, for ``top_interactions``.
    """
    with config_context(resident.config):
        return _explain_block(resident, rows, output, k)


def _explain_block(resident: Resident, rows: np.ndarray, output: str, k: int) -> dict:
    explainer = resident.explainer
    if output == "shap_values":
        return {output: explainer.shap_values(rows)}
    if output == "interaction_values":
        return {output: explainer.shap_interaction_values(rows)}
    if output == "interventional_values":
        return {output: resident.interventional.shap_values(rows)}
    if output == "top_interactions":
        pairs, values = explainer.top_interactions(rows, k)
        return {output: values, PAIRS_OUTPUT: pairs.astype(np.int32, copy=False)}
    if output == "margin":
        from distshap.inputs import model_matrix
        from distshap.kernels.margin import predict_margin

        margin = predict_margin(explainer.packed, model_matrix(rows, explainer.packed))
        return {output: margin[:, 0] if margin.shape[1] == 1 else margin}
    raise ValueError(f"unknown output {output!r}")


class InProcessExecutor:
    """Runs batches in this process, ``slots`` at a time.

    One at a time suits the CPU (each kernel call uses every core); on a GPU a second slot
    lets one batch's host work (conversion, copies, checks) overlap the other's kernels.
    :meth:`run_here` runs a batch on the calling thread instead: a batch queue's small
    batches, on the server's event loop, while :meth:`idle` (no submitted batch unfinished).
    """

    name = "in-process"

    def __init__(self, slots: int = 1) -> None:
        if not isinstance(slots, int) or slots < 1:
            raise ValueError(f"slots={slots!r}: give the number of batches run at once, >= 1")
        self._slots = slots
        self._pool = ThreadPoolExecutor(slots, thread_name_prefix="distshap-serve-run")
        self._lock = threading.Lock()
        self._busy = 0  # batches submitted and not yet done

    def slots(self) -> int:
        """Batches that may run at once."""
        return self._slots

    def ready(self) -> bool:
        return True

    def workers(self) -> int:
        return 1

    def idle(self) -> bool:
        """Whether no submitted batch is running or waiting for a thread."""
        return not self._busy

    def submit(self, resident: Resident, rows: np.ndarray, output: str, k: int) -> Future:
        """Run :func:`explain_block` on the executor's threads -> a Future of its dict."""
        with self._lock:
            self._busy += 1
        try:
            future = self._pool.submit(explain_block, resident, rows, output, k)
        except BaseException:
            self._one_done(None)
            raise
        future.add_done_callback(self._one_done)
        return future

    def _one_done(self, _future: Future | None) -> None:
        with self._lock:
            self._busy -= 1

    def run_here(self, resident: Resident, rows: np.ndarray, output: str, k: int) -> dict:
        """:func:`explain_block` on the calling thread (a batch queue's small batches, run on
        the server's loop)."""
        return explain_block(resident, rows, output, k)

    def close(self) -> None:
        self._pool.shutdown(wait=True)


class ResidentActor:
    """A model resident on one worker as a Dask actor: a block's call goes from the server
    straight to that worker and back (the scheduler takes no part)."""

    def __init__(self, resident: Resident) -> None:
        self.resident = resident

    def run(self, rows: np.ndarray, output: str, k: int) -> dict:
        """:func:`explain_block` on this worker's copy of the model."""
        return explain_block(self.resident, rows, output, k)


def _stack(parts: list[dict]) -> dict:
    return {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}


class DaskExecutor:
    """Runs blocks on the workers of ``client``'s cluster, the models resident there.

    Parameters
    ----------
    client : distributed.Client
    block_rows : int
        A batch of more rows is split into blocks over the workers (at most one per worker).
    no_worker_timeout : float
        Seconds a batch waits for a worker to appear before it fails.
    """

    name = "dask"

    def __init__(self, client: Any, block_rows: int = 4096, no_worker_timeout: float = 2.0):
        self.client = client
        self.block_rows = block_rows
        self.no_worker_timeout = no_worker_timeout
        self._pool = ThreadPoolExecutor(64, thread_name_prefix="distshap-serve-dask")
        self._blocks = ThreadPoolExecutor(64, thread_name_prefix="distshap-serve-block")
        self._turn = itertools.count()
        self._known: tuple[float, list[str]] = (0.0, [])
        self._lock = threading.Lock()
        # (model digest, worker) -> (the actor's Future, the actor); the Future keeps it alive
        self._actors: dict[tuple[str, str], tuple[Any, Any]] = {}
        self._refresher: threading.Thread | None = None
        self._closed = threading.Event()
        self._worker_list(0.0)

    def _worker_list(self, max_age: float = 0.5) -> list[str]:
        """Addresses of the connected workers (asked of the scheduler at most every max_age s)."""
        with self._lock:
            when, workers = self._known
            if time.monotonic() - when < max_age:
                return workers
        try:
            workers = sorted(self.client.nthreads())
        except Exception:  # the scheduler is gone: no worker either
            workers = []
        with self._lock:
            self._known = (time.monotonic(), workers)
        return workers

    def _cached_workers(self) -> list[str]:
        """The worker list without waiting for the scheduler (the server's event loop asks):
        a thread of its own asks the scheduler every 0.25 s."""
        if self._refresher is None:
            self._refresher = threading.Thread(target=self._refresh, daemon=True,
                                               name="distshap-serve-workers")  # fmt: skip
            self._refresher.start()
        return self._known[1]

    def _refresh(self) -> None:
        while not self._closed.wait(0.25):
            self._worker_list(0.2)

    def workers(self) -> int:
        return len(self._cached_workers())

    def slots(self) -> int:
        return max(1, 2 * self.workers())

    def ready(self) -> bool:
        return self.workers() > 0

    def preload(self, resident: Resident) -> None:
        """Ship ``resident`` to every worker now and compile its SHAP kernel there (at
        registration, not on the first request)."""
        warm = np.zeros((1, resident.explainer.num_features), dtype=np.float32)
        for worker in self._worker_list(0.0):
            self._wait(self._actor(resident, worker).run(warm, "shap_values", 0), worker)

    def _actor(self, resident: Resident, worker: str) -> Any:
        """The actor holding ``resident`` on ``worker``, made on first use.

        Its model comes from the recoverable model task (:func:`model_future`) through a copy
        pinned to ``worker``, so a restarted or new worker gets it again on its first call.
        """
        from distshap.cluster.shipping import model_future, worker_copy

        key = (resident.digest, worker)
        with self._lock:
            held = self._actors.get(key)
        if held is not None:
            return held[1]
        copy = worker_copy(self.client, model_future(self.client, resident), worker)
        future = self.client.submit(ResidentActor, copy, workers=[worker], actor=True,
                                    allow_other_workers=False, pure=False)  # fmt: skip
        actor = self._wait(future, worker, _START_TIMEOUT)
        with self._lock:
            self._actors.setdefault(key, (future, actor))
            return self._actors[key][1]

    def _forget(self, worker: str) -> None:
        """Drop the actors of a worker that died, and the worker from the cached list (which
        is asked again of the scheduler on next use)."""
        with self._lock:
            for key in [key for key in self._actors if key[1] == worker]:
                del self._actors[key]
            self._known = (0.0, [w for w in self._known[1] if w != worker])

    def _run_block(self, resident: Resident, rows: np.ndarray, output: str, k: int) -> dict:
        for attempt in range(_ATTEMPTS):
            worker = self._next_worker()
            try:
                call = self._actor(resident, worker).run(rows, output, k)
                return self._wait(call, worker)
            except NoWorkerError:
                raise
            except BaseException as err:
                if not _is_worker_loss(err) or attempt == _ATTEMPTS - 1:
                    raise
                self._forget(worker)  # it died: run the block on another
        raise AssertionError("unreachable")

    def _next_worker(self) -> str:
        """A connected worker, in turn; NoWorkerError after ``no_worker_timeout`` without."""
        deadline = time.monotonic() + self.no_worker_timeout
        while True:
            workers = self._worker_list()
            if workers:
                return workers[next(self._turn) % len(workers)]
            if time.monotonic() > deadline:
                raise NoWorkerError("no Dask worker is connected to run the request")
            time.sleep(0.05)

    def _wait(self, call: Any, worker: str, timeout: float | None = None) -> Any:
        """The result of ``call`` running on ``worker``: :class:`_WorkerLost` when the worker
        leaves first (an actor's call would wait for it forever), TimeoutError after
        ``timeout`` seconds."""
        from distributed import TimeoutError as DaskTimeout

        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                return call.result(timeout=0.25)
            except (DaskTimeout, TimeoutError):
                if worker not in self._worker_list(0.25):
                    raise _WorkerLost(worker) from None
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(f"worker {worker} did not answer in {timeout} s") from None

    def _run(self, resident: Resident, rows: np.ndarray, output: str, k: int) -> dict:
        n = rows.shape[0]
        blocks = min(max(1, self.workers()), -(-n // self.block_rows))
        if blocks <= 1:
            return self._run_block(resident, rows, output, k)
        bounds = np.linspace(0, n, blocks + 1).astype(int)
        parts = [
            self._blocks.submit(self._run_block, resident, rows[a:b], output, k)
            for a, b in zip(bounds[:-1], bounds[1:], strict=True)
        ]
        return _stack([p.result() for p in parts])

    def submit(self, resident: Resident, rows: np.ndarray, output: str, k: int) -> Future:
        """Run a batch (split into blocks over the workers) -> a Future of its dict."""
        return self._pool.submit(self._run, resident, rows, output, k)

    def close(self) -> None:
        self._closed.set()
        self._pool.shutdown(wait=True)
        self._blocks.shutdown(wait=True)


def _is_worker_loss(err: BaseException) -> bool:
    """Whether ``err`` says the block's worker went away (then it runs again elsewhere)."""
    import asyncio
    import concurrent.futures

    from distributed.scheduler import KilledWorker

    lost = (_WorkerLost, KilledWorker, asyncio.CancelledError, concurrent.futures.CancelledError,
            OSError)  # fmt: skip
    if isinstance(err, RuntimeError) and str(err).startswith("Worker holding Actor was lost"):
        return True  # distributed's words when the actor's worker left (no own exception type)
    return isinstance(err, lost) or type(err).__name__ in (
        "CommClosedError",
        "FutureCancelledError",
    )
