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
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from typing import Any

from distributed import Client, LocalCluster

__all__ = ["ClusterError", "count_gpus", "start_cluster"]


class ClusterError(ValueError):
    """A cluster request that cannot be met (the message says why and what to do)."""


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
        raise ClusterError(
            "GPUs were found (or requested) but dask_cuda is not installed: "
            "`pip install dask-cuda` (or `distshap[gpu]`), or pass gpus=False for a CPU cluster"
        ) from err
    return LocalCUDACluster


def start_cluster(
    address: str | None = None,
    n_workers: int | None = None,
    gpus: bool | int | str | Sequence[int] | None = None,
    processes: bool = True,
    threads_per_worker: int | None = None,
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
    **kwargs
        Passed to ``LocalCUDACluster`` / ``LocalCluster`` (e.g. ``dashboard_address``,
        ``memory_limit``, ``env``). For CPU worker processes, ``env`` defaults to
        ``NUMBA_NUM_THREADS = cores // n_workers``.

    Returns
    -------
    distributed.Client
        Closing it (or leaving ``with start_cluster() as client:``) also closes a cluster
        started here; a client of ``address`` leaves that cluster running.

    Raises
    ------
    ClusterError
        GPUs requested but none visible or ``dask_cuda`` missing, or arguments that conflict.
    """
    if address is not None:
        if n_workers is not None or gpus not in (None, True) or threads_per_worker is not None:
            raise ClusterError(
                "n_workers, gpus and threads_per_worker configure a local cluster; with "
                f"address={address!r} start workers with `dask cuda worker {address}` instead"
            )
        return Client(address, **kwargs)
    if n_workers is not None and n_workers < 1:
        raise ClusterError(f"n_workers={n_workers} must be >= 1 (or None for the default)")
    threads = 1 if threads_per_worker is None else int(threads_per_worker)

    if gpus is None:
        use_gpu = count_gpus() > 0
    else:
        use_gpu = gpus is not False and not (isinstance(gpus, int) and gpus == 0)
    if use_gpu:
        visible = count_gpus()
        devices = _device_list(gpus)
        if devices is None:
            wanted = gpus if isinstance(gpus, int) and not isinstance(gpus, bool) else n_workers
            wanted = visible if wanted is None else int(wanted)
            if wanted < 1 or wanted > visible:
                raise ClusterError(
                    f"asked for {wanted} GPU(s) but {visible} visible here: ask for at most "
                    f"{visible}, or pass gpus=False for a CPU cluster"
                )
            devices = None if wanted == visible else list(range(wanted))
        elif visible == 0:
            raise ClusterError(
                f"asked for GPUs {devices} but none is visible here: pass gpus=False for a CPU "
                "cluster"
            )
        if n_workers is not None and devices is not None and n_workers != len(devices):
            devices = devices[:n_workers]
        local_cuda_cluster = _import_dask_cuda()
        cuda_kwargs: dict[str, Any] = {"threads_per_worker": threads}
        if devices is not None:
            cuda_kwargs["CUDA_VISIBLE_DEVICES"] = ",".join(str(d) for d in devices)
        cuda_kwargs.update(kwargs)
        cluster = local_cuda_cluster(**cuda_kwargs)
    else:
        workers = 1 if n_workers is None else int(n_workers)
        cpu_kwargs: dict[str, Any] = {
            "n_workers": workers,
            "threads_per_worker": threads,
            "processes": processes,
        }
        if processes and "env" not in kwargs:
            cores = os.cpu_count() or 1
            cpu_kwargs["env"] = {"NUMBA_NUM_THREADS": str(max(1, cores // (workers * threads)))}
        cpu_kwargs.update(kwargs)
        cluster = LocalCluster(**cpu_kwargs)
    try:
        client = _OwningClient(cluster)
    except BaseException:
        cluster.close()
        raise
    client._owned_cluster = cluster
    return client
