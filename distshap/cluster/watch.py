"""Bounded waits on a cluster: a job no worker can run fails, saying why, instead of hanging.

A Dask future waits for ever when every worker has died or none ever connects, and a task that
kills its worker (out of memory) several times ends in a bare ``KilledWorker``. :func:`wait_for`
waits in short steps, watching the scheduler's workers: when none has been connected for
``no_worker_timeout`` seconds (``$DISTSHAP_NO_WORKER_TIMEOUT``, default 120) it cancels the job
and raises :class:`ClusterError`; a ``KilledWorker`` becomes a :class:`ClusterError` naming the
workers' memory limit and the fix.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

__all__ = ["ClusterError", "no_worker_timeout", "result_of", "wait_for"]

_POLL_SECONDS = 1.0


class ClusterError(RuntimeError):
    """What was asked of a cluster cannot be done: no worker to run a job, workers that die
    running it, or (:class:`~distshap.cluster.local.ClusterRequestError`) a cluster that cannot
    be started as asked. The message says why and what to do."""


def no_worker_timeout() -> float:
    """Seconds a job waits with no worker connected: ``$DISTSHAP_NO_WORKER_TIMEOUT`` or 120."""
    text = os.environ.get("DISTSHAP_NO_WORKER_TIMEOUT", "120")
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ValueError(
            f"DISTSHAP_NO_WORKER_TIMEOUT={text!r}: set it to a positive number of seconds"
        )
    return value


def _memory_limits(client: Any) -> str:
    limits = sorted(
        {int(w.get("memory_limit") or 0) for w in client.scheduler_info()["workers"].values()}
    )
    shown = [f"{limit / 2**20:,.0f} MiB" for limit in limits if limit > 0]
    return ", ".join(shown) if shown else "not set"


def _killed(client: Any, error: Exception) -> ClusterError:
    return ClusterError(
        f"a task of this job killed the worker running it several times ({error}); workers' "
        f"memory_limit: {_memory_limits(client)}: explain fewer rows a chunk (X.rechunk, "
        f"batch_rows, or --chunk-rows on the command line) or give the workers more memory"
    )


def wait_for(futures: Any, client: Any, timeout: float | None = None) -> None:
    """Wait until ``futures`` are done; fail if no worker is connected for ``timeout`` seconds.

    Parameters
    ----------
    futures : distributed.Future or collection of futures / persisted Dask collections
    client : distributed.Client
    timeout : float, optional
        Seconds without any connected worker before the job is cancelled
        (default :func:`no_worker_timeout`).

    Raises
    ------
    ClusterError
        No worker connected for ``timeout`` seconds, or a task killed its workers.
    """
    from distributed import wait
    from distributed.scheduler import KilledWorker

    limit = no_worker_timeout() if timeout is None else float(timeout)
    alone_since = None
    while True:
        try:
            wait(futures, timeout=_POLL_SECONDS)
            return
        except KilledWorker as error:
            raise _killed(client, error) from None
        except (TimeoutError, asyncio.TimeoutError):  # the latter is another class before 3.11
            pass
        if client.nthreads():
            alone_since = None
            continue
        alone_since = time.monotonic() if alone_since is None else alone_since
        if time.monotonic() - alone_since >= limit:
            client.cancel(futures)
            raise ClusterError(
                f"no worker has been connected to the scheduler at {client.scheduler.address} "
                f"for {limit:.0f} s, so nothing can run this job: start workers (`dask worker "
                f"ADDRESS`, `dask cuda worker ADDRESS`) or set DISTSHAP_NO_WORKER_TIMEOUT to "
                f"wait longer"
            )


def result_of(future: Any, client: Any, timeout: float | None = None) -> Any:
    """``future.result()`` after :func:`wait_for` (same errors), so it cannot wait for ever;
    anything but a ``distributed.Future`` (a synchronous stand-in) is simply asked its result."""
    from distributed import Future
    from distributed.scheduler import KilledWorker

    if not isinstance(future, Future):
        return future.result()
    wait_for(future, client, timeout)
    try:
        return future.result()
    except KilledWorker as error:
        raise _killed(client, error) from None
