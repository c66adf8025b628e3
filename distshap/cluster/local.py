"""Start (or connect to) the Dask cluster that explains row partitions.

:func:`start_cluster` returns a :class:`distributed.Client`:

* with ``address``, a client of that running scheduler (multi-node: ``dask scheduler`` on one
  host, ``dask cuda worker SCHEDULER:8786`` on each GPU host);
* otherwise, on a host with NVIDIA GPUs (and ``dask_cuda`` installed), a
  ``dask_cuda.LocalCUDACluster`` with one worker process per GPU;
* otherwise a CPU :class:`distributed.LocalCluster`.

GPUs are counted without creating a CUDA context in the client process (``CUDA_VISIBLE_DEVICES``,
NVML, then ``nvidia-smi -L``): dask-cuda workers must create theirs first. A local cluster is
owned by its client: closing the client (or leaving its ``with`` block) closes the cluster.
It is returned once its workers run and idle below their memory limit's pause threshold, or
refused after ``start_timeout`` seconds, so that no job waits on workers that never come.
CPU worker processes get their thread count as ``DISTSHAP_NUM_THREADS``, which distshap applies
per call: Numba cannot take a new ``NUMBA_NUM_THREADS`` once a worker imported it.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import inspect
import logging
import numbers
import os
import shutil
import signal
import subprocess
import time
import warnings
from collections.abc import Sequence
from typing import Any

from distributed import Client, LocalCluster, SchedulerPlugin, WorkerPlugin

from distshap.cluster.watch import ClusterError
from distshap.parallel import THREADS_VARIABLE

__all__ = ["ClusterError", "ClusterRequestError", "count_gpus", "start_cluster"]


class ClusterRequestError(ClusterError, ValueError):
    """A cluster request that cannot be met (a bad argument, or workers that cannot start as
    asked): a :class:`~distshap.cluster.ClusterError` and a ``ValueError``."""


class _OwningClient(Client):
    """A client that closes the local cluster it was started with."""

    _owned_cluster: Any = None

    def close(self, *args: Any, **kwargs: Any) -> Any:
        result = super().close(*args, **kwargs)
        cluster, self._owned_cluster = self._owned_cluster, None
        if cluster is not None:
            cluster.close()
        return result


def _parse_visible_devices(value: str) -> list[str] | None:
    """Entries of a ``CUDA_VISIBLE_DEVICES`` value; ``None`` when unset (all devices)."""
    entries = []
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        if item.lstrip("-").isdigit() and int(item) < 0:
            break  # CUDA stops at the first invalid (negative) index
        entries.append(item)
    return entries


def _physical_gpu_count() -> int:
    """Number of NVIDIA GPUs in this host, without a CUDA context (NVML, else nvidia-smi)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no pynvml, no driver, ...
        pass
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return 0
    try:
        out = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return 0
    if out.returncode != 0:
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))


def count_gpus() -> int:
    """Number of GPUs this process may use, counted without creating a CUDA context.

    Physical GPUs (NVML, else ``nvidia-smi -L``), restricted by ``CUDA_VISIBLE_DEVICES`` when
    it is set (an empty value or a leading negative index hides every GPU).
    """
    physical = _physical_gpu_count()
    if physical == 0:
        return 0
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return physical
    entries = _parse_visible_devices(visible)
    return min(len(entries), physical)


def _device_list(gpus: Any) -> list[str] | None:
    """Explicit device ids from ``gpus`` (int list or ``"0,1"``), ``None`` for "all visible"."""
    if isinstance(gpus, str):
        return [g.strip() for g in gpus.split(",") if g.strip()]
    if isinstance(gpus, Sequence):
        return [str(g) for g in gpus]
    return None


def _import_dask_cuda():
    try:
        from dask_cuda import LocalCUDACluster
    except ImportError as err:
        raise ClusterRequestError(
            "GPUs were found (or requested) but dask_cuda is not installed: "
            "`pip install dask-cuda` (or `distshap[gpu]`), or pass gpus=False for a CPU cluster"
        ) from err
    return LocalCUDACluster


def _check_kwargs(kwargs: dict[str, Any], cluster_class: Any) -> None:
    """Refuse a keyword no local cluster, nanny or worker takes (it would fail in each worker)."""
    from distributed import Nanny, Worker

    known = {"env"}
    for cls in (LocalCluster, cluster_class, Nanny, Worker):
        known.update(inspect.signature(cls.__init__).parameters)
    known -= {"self", "kwargs", "worker_kwargs"}
    for name, value in kwargs.items():
        if name not in known:
            close = difflib.get_close_matches(name, sorted(known) + ["n_workers", "gpus"], n=1)
            hint = f"did you mean {close[0]}=...?" if close else "see distributed.LocalCluster"
            raise ClusterRequestError(
                f"start_cluster got an unknown argument {name}={value!r}: {hint} (a local "
                f"cluster takes {cluster_class.__name__}'s, Nanny's and Worker's arguments)"
            )


def _worker_env(env: Any, workers: int, threads: int) -> dict[str, str]:
    """The worker processes' environment: ``DISTSHAP_NUM_THREADS``, never ``NUMBA_NUM_THREADS``.

    A nanny sets its ``env`` in the worker process after the worker imported Numba, which reads
    ``NUMBA_NUM_THREADS`` once and fails every later compile when the value changed; distshap
    reads ``DISTSHAP_NUM_THREADS`` at each call (:func:`distshap.parallel.num_threads`).
    """
    out = {str(k): str(v) for k, v in (env or {}).items()}
    numba_threads = out.pop("NUMBA_NUM_THREADS", None)
    if THREADS_VARIABLE not in out:
        cores = os.cpu_count() or 1
        default = str(max(1, cores // (workers * threads)))
        out[THREADS_VARIABLE] = default if numba_threads is None else numba_threads
    return out


def _gpu_cluster(
    gpus: Any, n_workers: int | None, threads: int, kwargs: dict[str, Any]
) -> LocalCluster:
    """A ``dask_cuda.LocalCUDACluster`` on the requested (or every visible) GPU."""
    visible = count_gpus()
    devices = _device_list(gpus)
    if devices is None:
        wanted = gpus if isinstance(gpus, int) and not isinstance(gpus, bool) else n_workers
        wanted = visible if wanted is None else int(wanted)
        if n_workers is not None and n_workers > wanted:
            raise ClusterRequestError(
                f"n_workers={n_workers} but gpus={gpus!r} gives {wanted} GPU(s): a GPU cluster "
                f"runs one worker a GPU; ask for at most {wanted} workers"
            )
        wanted = wanted if n_workers is None else int(n_workers)  # the first n_workers GPUs
        if wanted < 1 or wanted > visible:
            raise ClusterRequestError(
                f"asked for {wanted} GPU(s) but {visible} visible here: ask for at most "
                f"{visible}, or pass gpus=False for a CPU cluster"
            )
        entries = _parse_visible_devices(os.environ.get("CUDA_VISIBLE_DEVICES") or "")
        # the first ``wanted`` of this process's devices (their ids where it is restricted)
        devices = None if wanted == visible else (entries or list(range(visible)))[:wanted]
    elif visible == 0:
        raise ClusterRequestError(
            f"asked for GPUs {devices} but none is visible here: pass gpus=False for a CPU cluster"
        )
    if n_workers is not None and devices is not None and n_workers > len(devices):
        raise ClusterRequestError(
            f"n_workers={n_workers} but gpus={gpus!r} names {len(devices)} GPU(s): a GPU cluster "
            f"runs one worker a GPU; ask for at most {len(devices)} workers"
        )
    if n_workers is not None and devices is not None:
        devices = devices[:n_workers]
    local_cuda_cluster = _import_dask_cuda()
    cuda_kwargs: dict[str, Any] = {"threads_per_worker": threads}
    if devices is not None:
        cuda_kwargs["CUDA_VISIBLE_DEVICES"] = ",".join(str(d) for d in devices)
    _check_kwargs(kwargs, local_cuda_cluster)
    cuda_kwargs.update(kwargs)
    return local_cuda_cluster(**cuda_kwargs)


def _cpu_cluster(
    n_workers: int | None, threads: int, processes: bool, kwargs: dict[str, Any]
) -> tuple[LocalCluster, int]:
    """A CPU :class:`distributed.LocalCluster` with no worker yet, and its number of workers.

    The workers start in :func:`_await_workers`, within ``start_timeout`` (the constructor
    would wait for them without a bound). Worker processes get their Numba thread count.
    """
    workers = 1 if n_workers is None else int(n_workers)
    cpu_kwargs: dict[str, Any] = {"threads_per_worker": threads, "processes": processes}
    _check_kwargs(kwargs, LocalCluster)
    cpu_kwargs.update(kwargs)
    cpu_kwargs["n_workers"] = 0
    if "memory_limit" not in kwargs:  # what LocalCluster gives each of n workers (0: "auto" each)
        from distributed.worker_memory import parse_memory_limit

        cpu_kwargs["memory_limit"] = parse_memory_limit(
            "auto", 1, workers, logger=logging.getLogger("distributed.deploy.local")
        )
    if processes:
        cpu_kwargs["env"] = _worker_env(kwargs.get("env"), workers, threads)
    return LocalCluster(**cpu_kwargs), workers


def _worker_processes(cluster: Any) -> dict[str, int]:
    """``{worker name: pid}`` of the cluster's nanny-run worker processes now alive."""
    pids = {}
    for name, worker in getattr(cluster, "workers", {}).items():
        process = getattr(getattr(worker, "process", None), "process", None)
        pid = getattr(process, "pid", None)
        if pid is not None:
            pids[str(name)] = int(pid)
    return pids


def _memory_limits(cluster: Any) -> list[int]:
    """Per-worker memory limits (bytes) the cluster's nannies enforce (0: none)."""
    limits = []
    for worker in getattr(cluster, "workers", {}).values():
        manager = getattr(worker, "memory_manager", None)
        limits.append(int(getattr(manager, "memory_limit", None) or 0))
    return limits


def _memory_error(cluster: Any, settle: float) -> str | None:
    """Why the idle workers cannot run a task (memory), or ``None``: sampled for ``settle`` s.

    A nanny pauses its worker above ``distributed.worker.memory.pause`` of ``memory_limit`` (it
    then runs no task) and restarts it above ``...terminate``: a worker that idle is already
    there never finishes a chunk, and a job on it would wait forever.
    """
    import dask
    import psutil

    fractions = [dask.config.get(f"distributed.worker.memory.{k}") for k in ("pause", "terminate")]
    fractions = [float(f) for f in fractions if f not in (None, False)]
    limits = [m for m in _memory_limits(cluster) if m > 0]
    if not fractions or not limits:
        return None
    threshold = min(fractions) * min(limits)
    first = _worker_processes(cluster)
    peak, deadline = 0, time.monotonic() + settle
    while True:
        for pid in _worker_processes(cluster).values():
            try:
                peak = max(peak, psutil.Process(pid).memory_info().rss)
            except psutil.Error:  # exited between the listing and the reading
                pass
        if time.monotonic() >= deadline:
            break
        time.sleep(settle / 5)
    restarted = _worker_processes(cluster) != first
    if peak < threshold and not restarted:
        return None
    mib = 1 << 20
    return (
        f"memory_limit={min(limits) / mib:.0f} MiB per worker, but an idle worker already uses "
        f"{peak / mib:.0f} MiB (its nanny pauses it at {min(fractions):.0%} and restarts it at "
        f"{max(fractions):.0%}{', and did restart it' if restarted else ''}): pass "
        f"memory_limit='{-(-4 * peak // mib)}MiB' or more, or leave memory_limit out"
    )


def _set_interval(stream: Any, seconds: float) -> bool:
    """Set the batching interval of ``stream`` (a ``distributed.batched.BatchedSend``).

    False, changing nothing, when ``stream`` is not one or keeps no ``interval`` in seconds
    (a distributed that batches otherwise).
    """
    from distributed.batched import BatchedSend

    if not isinstance(stream, BatchedSend):
        return False
    if not isinstance(getattr(stream, "interval", None), (int, float)):
        return False
    stream.interval = seconds
    return True


class _SchedulerStreams(SchedulerPlugin):
    """The scheduler's streams to workers and clients batch for at most ``seconds``.

    The streams present at registration, and each worker's stream as it joins (a worker
    restarted after a loss included).
    """

    name = "distshap-scheduler-streams"

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    async def start(self, scheduler: Any) -> None:
        for stream in [*scheduler.stream_comms.values(), *scheduler.client_comms.values()]:
            _set_interval(stream, self.seconds)

    def add_worker(self, scheduler: Any, worker: str) -> None:
        _set_interval(scheduler.stream_comms.get(worker), self.seconds)


class _WorkerStream(WorkerPlugin):
    """A worker's stream to the scheduler batches for at most ``seconds`` (every worker, also
    one that joins later)."""

    name = "distshap-worker-stream"

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def setup(self, worker: Any) -> None:
        _set_interval(getattr(worker, "batched_stream", None), self.seconds)


def _check_batch_interval(value: Any) -> None:
    if value is not None and (
        isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 <= value <= 1
    ):
        raise ClusterRequestError(
            f"batch_interval={value!r} must be seconds between 0 and 1 (e.g. 0.0), "
            "or None for distributed's own intervals"
        )


def _prompt_streams(client: Client, seconds: float) -> None:
    """Every message stream of ``client``'s cluster batches for at most ``seconds``.

    distributed batches the messages of a stream: one sent within the interval after the last
    waits for its end (client to scheduler 10 ms, scheduler to worker 5 ms, worker to scheduler
    and scheduler to client 2 ms), and a call runs through several such hops back to back. A
    shorter interval means more, smaller messages when many tasks finish at once. A cluster
    that refuses the plugins (e.g. a scheduler that unpickles nothing) keeps its intervals,
    with a warning: it works as before.
    """
    _set_interval(getattr(client, "scheduler_comm", None), seconds)
    try:
        client.register_plugin(_SchedulerStreams(seconds))
        client.register_plugin(_WorkerStream(seconds))
    except Exception as err:
        warnings.warn(
            f"distshap: the cluster's message streams keep distributed's batching intervals "
            f"({_root_cause(err)}); pass batch_interval=None to skip this step",
            RuntimeWarning,
            stacklevel=3,
        )


def _root_cause(err: BaseException) -> str:
    """``Type: first line`` of the innermost cause of ``err``."""
    while err.__cause__ is not None or err.__context__ is not None:
        err = err.__cause__ or err.__context__
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return f"{type(err).__name__}: {lines[0] if lines else ''}"


async def _start_workers(cluster: Any, expected: int, timeout: float) -> bool:
    """Start the cluster's workers (on its loop); ``False`` when they did not within ``timeout``.

    Worker processes still starting then are killed (their nannies fail, and the cluster can
    close); a worker that failed to start raises its error.
    """
    cluster.scale(expected)
    task = cluster._correct_state()
    done, _ = await asyncio.wait({task}, timeout=timeout)
    if task in done:
        task.result()
        return True
    for worker in list(getattr(cluster, "_created", ())):  # their starts then fail
        process = getattr(getattr(worker, "process", None), "process", None)
        with contextlib.suppress(Exception):
            os.kill(process.pid, getattr(signal, "SIGKILL", signal.SIGTERM))
    await asyncio.wait({task}, timeout=30)
    return False


def _await_workers(client: Client, cluster: Any, expected: int, timeout: float) -> None:
    """Start (if not started) and wait for ``expected`` workers able to run tasks, else raise.

    Everything within ``timeout`` seconds: workers that do not come, fail to start, or idle
    above their memory limit's pause threshold raise :class:`ClusterError` saying why.
    """
    deadline = time.monotonic() + timeout
    try:
        started = len(cluster.worker_spec) >= expected or cluster.sync(
            _start_workers, cluster, expected, timeout
        )
        if started:
            client.wait_for_workers(expected, timeout=max(deadline - time.monotonic(), 0.01))
    except (TimeoutError, asyncio.TimeoutError):  # the latter is another class before 3.11
        started = False
    except Exception as err:  # a nanny that failed to start its worker
        raise ClusterRequestError(
            f"the workers failed to start ({_root_cause(err)}): see the worker log above; a "
            "script that starts a cluster runs it under `if __name__ == '__main__':`"
        ) from err
    if not started:
        try:
            have = str(len(client.scheduler_info().get("workers", {})))
        except Exception:  # the scheduler itself is gone
            have = "none"
        why = _memory_error(cluster, 0.0)
        raise ClusterRequestError(
            f"{have} of {expected} worker(s) started within start_timeout={timeout:g} s"
            + (f"; {why}" if why else ": see the worker log above, or raise start_timeout")
        )
    why = _memory_error(cluster, 0.5)
    if why is not None:
        raise ClusterRequestError(why)


def start_cluster(
    address: str | None = None,
    n_workers: int | None = None,
    gpus: bool | int | str | Sequence[int] | None = None,
    processes: bool = True,
    threads_per_worker: int | None = None,
    start_timeout: float = 120.0,
    batch_interval: float | None = 0.0,
    **kwargs: Any,
) -> Client:
    """Start a local Dask cluster (GPU or CPU), or connect to a running scheduler.

    Parameters
    ----------
    address : str, optional
        Scheduler address (``"tcp://host:8786"``) of a running cluster. The other arguments
        then must be left at their defaults; ``kwargs`` go to :class:`distributed.Client`.
    n_workers : int, optional
        GPU cluster: use the first ``n_workers`` GPUs (default: all visible). CPU cluster:
        number of workers (default: 1 worker whose Numba kernels use every core).
    gpus : None, bool, int, str or sequence of int
        ``None``: GPUs when any are visible, else CPU. ``False``: a CPU cluster. ``True``:
        require GPUs. An int: that many GPUs. ``"0,2"`` / ``[0, 2]``: those devices.
    processes : bool
        CPU cluster only: worker processes (default) or threads of this process (fast to
        start, for tests). GPU clusters always use one process per GPU.
    threads_per_worker : int, optional
        Dask threads per worker (default 1: each task is one multi-threaded Numba kernel call,
        or one GPU kernel launch, that owns its device).
    start_timeout : float
        Seconds a local cluster's workers may take to start and settle. Workers that do not
        start in time, or that idle above their nanny's pause or restart threshold of
        ``memory_limit`` (they would never finish a task), raise :class:`ClusterError`.
    batch_interval : float or None
        A local cluster only: seconds for which each message stream (client to scheduler,
        scheduler to workers and client, workers to scheduler) batches messages, instead of
        distributed's 10, 5 and 2 ms, which a small call pays at several hops. Default 0: a
        message leaves as soon as the sender's event loop is free (those queued meanwhile go
        together); more, smaller messages when many tasks finish at once. ``None``:
        distributed's own.
    **kwargs
        Passed to ``LocalCUDACluster`` / ``LocalCluster`` (e.g. ``dashboard_address``,
        ``memory_limit``, ``env``). CPU worker processes get ``DISTSHAP_NUM_THREADS`` in
        ``env`` (default ``cores // (n_workers * threads_per_worker)``; a ``NUMBA_NUM_THREADS``
        given in ``env`` becomes it: Numba cannot change its count once started).

    Returns
    -------
    distributed.Client
        Closing it (or leaving ``with start_cluster() as client:``) also closes a cluster
        started here; a client of ``address`` leaves that cluster running.

    Raises
    ------
    ClusterError
        GPUs requested but none visible or ``dask_cuda`` missing, arguments that conflict or
        that no cluster takes, or workers that did not start (in time, or within their memory).
    """
    if address is not None:
        if n_workers is not None or gpus not in (None, True) or threads_per_worker is not None:
            raise ClusterRequestError(
                "n_workers, gpus and threads_per_worker configure a local cluster; with "
                f"address={address!r} start workers with `dask cuda worker {address}` instead"
            )
        return Client(address, **kwargs)
    if n_workers is not None and (isinstance(n_workers, bool) or int(n_workers) < 1):
        raise ClusterRequestError(f"n_workers={n_workers} must be >= 1 (or None for the default)")
    if not start_timeout > 0:
        raise ClusterRequestError(
            f"start_timeout={start_timeout!r} must be a positive number of seconds"
        )
    if threads_per_worker is not None and (
        isinstance(threads_per_worker, bool) or int(threads_per_worker) < 1
    ):
        raise ClusterRequestError(
            f"threads_per_worker={threads_per_worker} must be >= 1 (or None for the default 1)"
        )
    _check_batch_interval(batch_interval)
    threads = 1 if threads_per_worker is None else int(threads_per_worker)
    if gpus is None:
        use_gpu = count_gpus() > 0
    else:
        use_gpu = gpus is not False and not (isinstance(gpus, int) and gpus == 0)
    if use_gpu:
        cluster = _gpu_cluster(gpus, n_workers, threads, kwargs)
        expected = len(cluster.worker_spec)
    else:
        cluster, expected = _cpu_cluster(n_workers, threads, processes, kwargs)
    try:
        client = _OwningClient(cluster)
        client._owned_cluster = cluster
        _await_workers(client, cluster, expected, start_timeout)
        if batch_interval is not None:
            _prompt_streams(client, float(batch_interval))
    except BaseException:
        cluster.close()
        raise
    return client
