"""A server of several processes: N explanation servers sharing one port.

One Python process reads, decodes and encodes requests on one core; a fast device answers more.
:class:`ServerGroup` starts ``processes`` server processes (``spawn``: nothing of this process's
state, no GPU context, is inherited), each with its own registry, executor and batcher, each
listening on the same address with ``SO_REUSEPORT`` (Linux spreads the connections over them).
In-process batches run on each process's own copy of the models (on the GPU: one copy per
process), their CPU kernels on ``cores / processes`` threads (``DISTSHAP_NUM_THREADS`` unless
set); with a Dask cluster each process has its own client to it. Every process applies the
same token and limits, and answers each request with the values ``TreeExplainer(model)`` gives
for its rows, bit for bit.

Operations: the group is ready when every process serves (``/v2/health/ready`` answers 503
before, and while draining); :meth:`ServerGroup.drain` (SIGTERM to ``distshap serve``) sends
SIGTERM to every process, each drains as a single server does, and the group stops. A process
that exits on its own is reported (``ServerGroup.failure``), the others are drained, and
``distshap serve`` exits 1: the group is not restarted piecemeal, the supervisor restarts it.
``/metrics`` in any process renders the sum over all processes (the others' series as they
were at most half a second before), and each process's request count.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
from dataclasses import replace
from multiprocessing.connection import wait
from typing import Any

import numpy as np

from distshap.parallel import THREADS_VARIABLE
from distshap.serve.backends import DaskExecutor, InProcessExecutor
from distshap.serve.registry import ModelSpec, Registry, check_files
from distshap.serve.server import ExplanationServer, ServeOptions, check_access

__all__ = ["ServerGroup", "build_server"]

log = logging.getLogger("distshap.serve")

#: Seconds between two writes of a process's metrics for the others.
_SNAPSHOT_SECONDS = 0.5
#: Seconds a process may take to load its models and listen.
_START_SECONDS = 900.0


def build_server(
    specs: list[ModelSpec],
    options: ServeOptions,
    *,
    client: Any = None,
    backend: str = "auto",
    slots: int = 1,
) -> ExplanationServer:
    """A server (not started) over ``specs``: models loaded, resident and their kernels
    compiled (on every worker of ``client``, or in this process)."""
    check_access(options)  # before the models load
    registry = Registry.from_specs(specs, backend=backend)
    executor: Any = InProcessExecutor(slots) if client is None else DaskExecutor(client)
    for model in registry.models.values():
        if client is not None:
            executor.preload(model.resident)  # on every worker, its kernel compiled
        else:  # compile the SHAP kernel before the first request
            warm = np.zeros((1, model.num_features), dtype=np.float32)
            executor.submit(model.resident, warm, "shap_values", 0).result()
    return ExplanationServer(registry, executor, options)


def _reserve(host: str, port: int) -> socket.socket:
    """A socket bound to the address with ``SO_REUSEPORT``, not listening: it holds the port
    while the processes listen on it. The port is first bound without ``SO_REUSEPORT`` (and
    picked, for port 0), so that a port another server holds is refused as for one process,
    not shared with it."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((host, port))  # OSError when the port is taken
        port = probe.getsockname()[1]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    return sock


class ServerGroup:
    """``processes`` explanation servers on one address (see the module's description).

    Parameters
    ----------
    specs : list of ModelSpec
        The models every process registers.
    processes : int
        Server processes, >= 2.
    options : ServeOptions
        Address, token and limits (each process applies them).
    backend : {"auto", "cpu", "cuda"}
        Kernel backend of the explainers.
    slots : int
        Batches run at once in each process (without ``scheduler``).
    scheduler : str, optional
        Address of a Dask scheduler: each process connects its own client there.

    Raises
    ------
    ValueError
        ``processes`` < 2, a platform without ``SO_REUSEPORT``, or in-process batches on a
        GPU whose compute mode admits one process only.
    FileNotFoundError
        A model or background file that does not exist.
    """

    def __init__(
        self,
        specs: list[ModelSpec],
        processes: int,
        options: ServeOptions,
        *,
        backend: str = "auto",
        slots: int = 1,
        scheduler: str | None = None,
    ) -> None:
        if not isinstance(processes, int) or processes < 2:
            raise ValueError(f"processes={processes!r}: a group has 2 or more; use 1 otherwise")
        if not hasattr(socket, "SO_REUSEPORT"):
            raise ValueError(f"processes={processes}: this platform lacks SO_REUSEPORT; use 1")
        check_access(options)  # before any process starts
        for spec in specs:
            check_files(spec)
        if scheduler is None and backend != "cpu":
            _check_gpu_shared(processes)
        self._reserved = _reserve(options.host, options.port)
        self.address: tuple[str, int] = self._reserved.getsockname()[:2]
        self.options = replace(options, port=self.address[1], reuse_port=True)
        self.specs, self.processes = list(specs), processes
        self.backend, self.slots, self.scheduler = backend, slots, scheduler
        self._ctx = multiprocessing.get_context("spawn")
        self._serving = self._ctx.RawValue("b", 0)
        self._dir = tempfile.mkdtemp(prefix="distshap-serve-")
        self._procs: list[Any] = []
        self._lock = threading.Lock()
        self._drained = threading.Event()
        self.draining = False
        #: Why the group stopped on its own (a process exited), or None.
        self.failure: str | None = None

    @property
    def url(self) -> str:
        """``http://host:port`` the processes listen on."""
        host, port = self.address
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    @property
    def pids(self) -> list[int]:
        """The server processes' ids."""
        return [p.pid for p in self._procs]

    def start(self) -> ServerGroup:
        """Start every process; returns once all serve.

        Raises
        ------
        RuntimeError
            A process failed to start (its error), the others stopped.
        """
        if self._procs:
            return self
        pipes = []
        for index in range(self.processes):
            ours, theirs = self._ctx.Pipe(duplex=False)
            args = (index, self.processes, self.specs, self.options, self.backend, self.slots,
                    self.scheduler, theirs, self._serving, self._dir,
                    log.getEffectiveLevel())  # fmt: skip
            proc = self._ctx.Process(target=_process_main, args=args, daemon=True,
                                     name=f"distshap-serve-{index}")  # fmt: skip
            proc.start()
            theirs.close()
            self._procs.append(proc)
            pipes.append(ours)
        try:
            self._wait_started(pipes)
        except BaseException:
            self.drain()
            raise
        self._serving.value = 1
        threading.Thread(target=self._watch, name="distshap-serve-group", daemon=True).start()
        return self

    def _wait_started(self, pipes: list) -> None:
        waiting = dict(enumerate(pipes))
        while waiting:
            sentinels = {self._procs[i].sentinel: i for i in waiting}
            ready = wait([*waiting.values(), *sentinels], timeout=_START_SECONDS)
            if not ready:
                raise RuntimeError(f"server processes {sorted(waiting)} did not start in "
                                   f"{_START_SECONDS:g} s")  # fmt: skip
            for index, pipe in list(waiting.items()):
                message = None
                if pipe in ready or self._procs[index].sentinel in ready:
                    try:
                        message = pipe.recv()
                    except EOFError:
                        message = ("error", f"exited with code {self._procs[index].exitcode}")
                if message is None:
                    continue
                if message[0] != "ready":
                    raise RuntimeError(f"server process {index} failed to start: {message[1]}")
                del waiting[index]

    def ready(self) -> bool:
        """Whether every process serves."""
        return (
            bool(self._serving.value)
            and not self.draining
            and all(p.is_alive() for p in self._procs)
        )

    def serve_forever(self) -> None:
        """Start (when not started) and wait until :meth:`drain` stops the processes, or one
        exits on its own (then ``failure`` says which, and the others are drained)."""
        self.start()
        while not self._drained.wait(0.5):  # the main thread stays free for signals
            pass

    def _watch(self) -> None:
        """The group's thread: a process that exits on its own stops the group."""
        while not self.draining:
            gone = wait([p.sentinel for p in self._procs], timeout=0.5)
            if gone and not self.draining:
                proc = next(p for p in self._procs if p.sentinel in gone)
                proc.join()
                self.failure = (f"server process {proc.name} (pid {proc.pid}) exited with "
                                f"code {proc.exitcode}")  # fmt: skip
                log.error("%s: draining the others", self.failure)
                self.drain()

    def drain(self) -> None:
        """Send SIGTERM to every process (each drains), wait for them, stop."""
        with self._lock:
            if self.draining:
                first = False
            else:
                self.draining = first = True
        if not first:
            self._drained.wait()
            return
        self._serving.value = 0
        for proc in self._procs:
            if proc.is_alive():
                os.kill(proc.pid, signal.SIGTERM)
        for proc in self._procs:
            proc.join(self.options.drain_timeout + 30)
            if proc.is_alive():
                proc.kill()
                proc.join()
            if proc.exitcode and self.failure is None:
                self.failure = f"server process {proc.name} exited with code {proc.exitcode}"
        self._reserved.close()
        shutil.rmtree(self._dir, ignore_errors=True)
        self._drained.set()


def _check_gpu_shared(processes: int) -> None:
    """ValueError when the GPU admits one process only (its compute mode is not the default),
    read without making a context here."""
    from distshap.warmup import COMPUTE_MODE_DEFAULT, gpu_compute_mode

    mode = gpu_compute_mode()
    if mode is not None and mode != COMPUTE_MODE_DEFAULT:
        raise ValueError(
            f"processes={processes}: the GPU's compute mode ({mode}) lets one process only use "
            "it; use processes=1, or the Dask backend (one worker a GPU)"
        )


class _Snapshots:
    """The processes' metrics in files of a shared folder: each writes its own, reads the
    others'."""

    def __init__(self, folder: str, index: int, processes: int) -> None:
        self.folder, self.index, self.processes = folder, index, processes

    def write(self, server: ExplanationServer) -> None:
        path = os.path.join(self.folder, f"{self.index}.json")
        with open(path + ".tmp", "w") as f:
            json.dump(server.metrics.snapshot(), f)
        os.replace(path + ".tmp", path)

    def peers(self) -> list[dict]:
        out = []
        for index in range(self.processes):
            if index == self.index:
                continue
            try:
                with open(os.path.join(self.folder, f"{index}.json")) as f:
                    out.append(json.load(f))
            except (OSError, ValueError):  # not written yet
                continue
        return out


def _watch(server: ExplanationServer, snapshots: _Snapshots) -> None:
    """A process's thread: its metrics written for the others; a drain when the parent dies."""
    parent = multiprocessing.parent_process()
    while not server.wait_drained(0):
        try:
            snapshots.write(server)
        except OSError:  # the folder is gone: the group is stopping
            pass
        if parent is None:
            server.wait_drained(_SNAPSHOT_SECONDS)
        elif wait([parent.sentinel], timeout=_SNAPSHOT_SECONDS):
            log.warning("the parent process exited: draining")
            server.drain()
            return


def _process_main(index: int, processes: int, specs: list, options: ServeOptions, backend: str,
                  slots: int, scheduler: str | None, pipe: Any, serving: Any, folder: str,
                  level: int) -> None:  # fmt: skip
    """One server process of a group: build, serve, drain on SIGTERM, exit 0."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the parent, which drains
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    os.environ.setdefault(THREADS_VARIABLE, str(max(1, (cores or 1) // processes)))
    logging.basicConfig(level=level, format=f"%(asctime)s %(name)s[{index}] %(message)s")
    client = None
    try:
        if scheduler is not None:
            from distshap.cluster import start_cluster

            client = start_cluster(address=scheduler)
        server = build_server(specs, options, client=client, backend=backend, slots=slots)
    except BaseException as err:
        pipe.send(("error", f"{type(err).__name__}: {str(err).strip()[:300]}"))
        sys.exit(1)
    server.group_ready = lambda: bool(serving.value)
    server.metrics.process = index
    snapshots = _Snapshots(folder, index, processes)
    server.peer_metrics = snapshots.peers
    signal.signal(
        signal.SIGTERM, lambda *_: threading.Thread(target=server.drain, daemon=True).start()
    )
    server.start()
    threading.Thread(target=_watch, args=(server, snapshots), daemon=True).start()
    pipe.send(("ready", os.getpid()))
    pipe.close()
    while not server.wait_drained(0.5):
        pass
    if client is not None:
        client.close()
