"""A server of several processes: N explanation servers sharing one port.

One Python process reads, decodes and encodes requests on one core; a fast device answers more.
:class:`ServerGroup` starts ``processes`` server processes, the fronts (``spawn``: nothing of
this process's state, no GPU context, is inherited), each with its own registry and batcher,
each listening on the same address with ``SO_REUSEPORT`` (Linux spreads the connections over
them). Where their batches run:

* on device processes (``device_processes`` > 0; by default one per visible GPU when batches
  run on a GPU without a Dask cluster): each holds the models' explainers on its own GPU and
  runs every front's batches, merging those that wait for the same model and output
  (:mod:`~distshap.serve.device_process`); the fronts make no CUDA context;
* in each front (``device_processes=0``; the default on CPU): each process runs its batches on
  its own copy of the models, its CPU kernels on ``cores / processes`` threads
  (``DISTSHAP_NUM_THREADS`` unless set);
* on a Dask cluster (``scheduler``): each front has its own client to it.

Every process applies the same token and limits, and answers each request with the values
``TreeExplainer(model)`` gives for its rows, bit for bit.

Operations: the group is ready when every process serves (``/v2/health/ready`` answers 503
before, and while draining); :meth:`ServerGroup.drain` (SIGTERM to ``distshap serve``) sends
SIGTERM to every process, each drains as a single server does, and the group stops. A process
that exits on its own is reported (``ServerGroup.failure``), the others are drained, and
``distshap serve`` exits 1: the group is not restarted piecemeal, the supervisor restarts it
(a device process that exits fails its batches in flight and every new one with 503 at once).
Draining stops the fronts first (their requests answered), then the device processes.
``/metrics`` in any process renders the sum over all processes (the others' series as they
were at most half a second before), each process's request count and, with device processes,
their calls, rows and merged calls.
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
import time
from dataclasses import replace
from multiprocessing.connection import wait
from typing import Any

import numpy as np

from distshap.parallel import THREADS_VARIABLE
from distshap.serve.backends import DaskExecutor, InProcessExecutor
from distshap.serve.device_link import IN_FLIGHT, DeviceExecutor, check_in_flight
from distshap.serve.device_process import device_main
from distshap.serve.device_stats import read_device_stats
from distshap.serve.options import host_port, reserve_port
from distshap.serve.registry import ModelSpec, Registry, check_files
from distshap.serve.server import ExplanationServer, ServeOptions, check_access, new_event_loop

__all__ = ["ServerGroup", "build_server"]

log = logging.getLogger("distshap.serve")

#: Seconds between two writes of a process's metrics for the others.
_SNAPSHOT_SECONDS = 0.5
#: Seconds a process may take to load its models and listen.
_START_SECONDS = 900.0
#: Seconds the device processes are given to stop on their own once the fronts have exited.
_DEVICE_EXIT_SECONDS = 10.0


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
    try:
        return ExplanationServer(registry, executor, options)
    except BaseException:  # e.g. the port is taken: the executor's threads given back
        executor.close()
        raise


def build_front(specs: list[ModelSpec], options: ServeOptions, conns: list,
                in_flight: int = IN_FLIGHT) -> ExplanationServer:  # fmt: skip
    """A front server (not started) whose batches run on the device processes at the other
    ends of ``conns`` (``in_flight`` at once on each): its models loaded for their metadata
    and checks, no kernel of its own."""
    check_access(options)
    registry = Registry.from_specs(specs, backend="cpu")
    residents = [model.resident for model in registry.models.values()]
    loop = new_event_loop()  # the answers are read on the loop the server runs
    executor = DeviceExecutor(conns, residents, in_flight, loop=loop)
    return ExplanationServer(registry, executor, options, loop=loop)


def device_plan(backend: str, scheduler: str | None, device_processes: int | None) -> list:
    """The GPU of each device process (``CUDA_VISIBLE_DEVICES`` value; None: unchanged, as
    on CPU); an empty list where each front runs its own batches.

    By default one device process per visible GPU for in-process batches on a GPU backend
    (counted without a CUDA context), none on CPU or with a Dask cluster.
    """
    if device_processes is not None and (
        not isinstance(device_processes, int) or isinstance(device_processes, bool)
        or device_processes < 0
    ):  # fmt: skip
        raise ValueError(f"device_processes={device_processes!r}: give a number >= 0, or None "
                         "for one a visible GPU")  # fmt: skip
    if scheduler is not None:
        if device_processes:
            raise ValueError(f"device_processes={device_processes} with a Dask scheduler: "
                             "batches run on its workers; give one or the other")  # fmt: skip
        return []
    if device_processes == 0 or (device_processes is None and backend == "cpu"):
        return []
    gpus: list[str] = []
    if backend != "cpu":
        from distshap.cluster.local import count_gpus

        count = count_gpus()
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        ids = [g.strip() for g in (visible or "").split(",") if g.strip()]
        gpus = (ids if visible is not None else [str(i) for i in range(count)])[:count]
    if device_processes is None:
        device_processes = max(1, len(gpus)) if backend == "cuda" else len(gpus)
    return [gpus[i % len(gpus)] if gpus else None for i in range(device_processes)]


class ServerGroup:
    """``processes`` explanation servers on one address (see the module's description).

    Parameters
    ----------
    specs : list of ModelSpec
        The models every process registers.
    processes : int
        Front processes, >= 2 (>= 1 with device processes).
    options : ServeOptions
        Address, token and limits (each process applies them).
    backend : {"auto", "cpu", "cuda"}
        Kernel backend of the explainers.
    slots : int, optional
        Without device processes: batches each front runs at once (default 1). A device
        process runs one call at a time.
    scheduler : str, optional
        Address of a Dask scheduler: each process connects its own client there.
    device_processes : int, optional
        Processes that run every front's batches, one GPU each (round robin over the visible
        GPUs); 0: each front runs its own. Default: one per visible GPU on a GPU backend
        without ``scheduler``, else 0.
    in_flight : int, optional
        With device processes: batches each front keeps in flight on each device process
        (default :data:`~distshap.serve.device_link.IN_FLIGHT`). More lets a device process
        merge more batches into one call; each front's batches then wait less for a free one.

    Raises
    ------
    ValueError
        Too few ``processes``, ``slots`` or ``in_flight`` not an int >= 1, ``in_flight``
        without device processes or ``slots`` with them, a platform without ``SO_REUSEPORT``,
        device processes with a scheduler, or batches in every front on a GPU whose compute
        mode admits one process.
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
        slots: int | None = None,
        scheduler: str | None = None,
        device_processes: int | None = None,
        in_flight: int | None = None,
    ) -> None:
        if not isinstance(processes, int) or isinstance(processes, bool) or processes < 1:
            raise ValueError(f"processes={processes!r}: give the number of front processes")
        if slots is not None and (type(slots) is not int or slots < 1):
            raise ValueError(f"slots={slots!r}: give the number of batches run at once, >= 1")
        if not hasattr(socket, "SO_REUSEPORT"):
            raise ValueError(f"processes={processes}: this platform lacks SO_REUSEPORT; use 1")
        check_access(options)  # before any process starts
        for spec in specs:
            check_files(spec)
        #: The GPU of each device process (None: as this process sees them, e.g. on CPU).
        self.gpus = device_plan(backend, scheduler, device_processes)
        if in_flight is not None:
            check_in_flight(in_flight)
            if not self.gpus:
                raise ValueError(f"in_flight={in_flight}: a setting of device processes, and "
                                 "this group has none; leave it out")  # fmt: skip
        if slots is not None and self.gpus:
            raise ValueError(f"slots={slots}: a setting of fronts that run their own batches; "
                             "a device process runs one call at a time; leave it out")  # fmt: skip
        #: Batches each front keeps in flight on each device process.
        self.in_flight = IN_FLIGHT if in_flight is None else in_flight
        if processes < 2 and not self.gpus:
            raise ValueError(f"processes={processes!r}: a group has 2 or more (or device "
                             "processes); use 1 otherwise")  # fmt: skip
        if scheduler is None and backend != "cpu" and not self.gpus:
            _check_gpu_shared(processes)
        self._reserved = reserve_port(options.host, options.port)
        self.address: tuple[str, int] = self._reserved.getsockname()[:2]
        self.options = replace(options, port=self.address[1], reuse_port=True)
        #: ``host:port`` of the gRPC endpoint every process serves too (None: HTTP only).
        self.grpc_address: str | None = None
        self._reserved_grpc = None
        if options.grpc_port is not None:
            try:
                self._reserved_grpc = reserve_port(options.host, options.grpc_port)
            except OSError as err:
                self._reserved.close()
                raise OSError(
                    f"grpc_port={options.grpc_port}: cannot listen on {options.host} ({err}): "
                    "give another port (0: any free one)"
                ) from None
            port = self._reserved_grpc.getsockname()[1]
            self.options = replace(self.options, grpc_port=port)
            self.grpc_address = host_port(options.host, port)
        self.specs, self.processes = list(specs), processes
        if slots is None:
            slots = 1  # one call at a time merges the most batches a call
        self.backend, self.slots, self.scheduler = backend, slots, scheduler
        self._ctx = multiprocessing.get_context("spawn")
        self._serving = self._ctx.RawValue("b", 0)
        self._dir = tempfile.mkdtemp(prefix="distshap-serve-")
        self._procs: list[Any] = []
        self._devices: list[Any] = []
        self._lock = threading.Lock()
        self._drained = threading.Event()
        self.draining = False
        #: Why the group stopped on its own (a process exited), or None.
        self.failure: str | None = None

    @property
    def url(self) -> str:
        """``http://host:port`` the processes listen on."""
        return f"http://{host_port(*self.address)}"

    @property
    def pids(self) -> list[int]:
        """The front processes' ids."""
        return [p.pid for p in self._procs]

    @property
    def device_pids(self) -> list[int]:
        """The device processes' ids (none without device processes)."""
        return [p.pid for p in self._devices]

    def start(self) -> ServerGroup:
        """Start every process; returns once all serve.

        Raises
        ------
        RuntimeError
            A process failed to start (its error), the others stopped.
        """
        if self._procs:
            return self
        level = log.getEffectiveLevel()
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        threads = max(1, (cores or 1) // max(1, len(self.gpus)))
        # links[front][device]: (the front's end, the device process's end)
        links = [[self._ctx.Pipe(duplex=True) for _ in self.gpus] for _ in range(self.processes)]
        waiting = []
        for index, gpu in enumerate(self.gpus):
            conns = [links[front][index][1] for front in range(self.processes)]
            args = (index, self.specs, self.backend, gpu, conns)
            waiting.append(self._launch(device_main, f"distshap-device-{index}", args,
                                        (self._dir, level, threads), conns,
                                        self._devices))  # fmt: skip
        for index in range(self.processes):
            conns = [links[index][device][0] for device in range(len(self.gpus))] or None
            args = (index, self.processes, self.specs, self.options, self.backend, self.slots,
                    self.scheduler, conns, len(self.gpus), self.in_flight)  # fmt: skip
            waiting.append(self._launch(_process_main, f"distshap-serve-{index}", args,
                                        (self._serving, self._dir, level), conns or [],
                                        self._procs))  # fmt: skip
        try:
            self._wait_started(waiting)
        except BaseException:
            self.drain()
            raise
        self._serving.value = 1
        threading.Thread(target=self._watch, name="distshap-serve-group", daemon=True).start()
        return self

    def _launch(self, target: Any, name: str, args: tuple, tail: tuple, conns: list,
                into: list) -> tuple:  # fmt: skip
        """Start one process (its start pipe between ``args`` and ``tail``); the ends it was
        handed are closed here (its copies keep them open) -> (process, start pipe)."""
        ours, theirs = self._ctx.Pipe(duplex=False)
        proc = self._ctx.Process(target=target, args=(*args, theirs, *tail), daemon=True,
                                 name=name)  # fmt: skip
        proc.start()
        theirs.close()
        for conn in conns:
            conn.close()
        into.append(proc)
        return proc, ours

    def _wait_started(self, waiting: list) -> None:
        waiting = list(waiting)
        while waiting:
            ready = wait([x for proc, pipe in waiting for x in (pipe, proc.sentinel)],
                         timeout=_START_SECONDS)  # fmt: skip
            if not ready:
                names = sorted(proc.name for proc, _ in waiting)
                raise RuntimeError(f"processes {names} did not start in {_START_SECONDS:g} s")
            for proc, pipe in list(waiting):
                if pipe not in ready and proc.sentinel not in ready:
                    continue
                try:
                    message = pipe.recv()
                except EOFError:
                    message = ("error", f"exited with code {proc.exitcode}")
                if message[0] != "ready":
                    raise RuntimeError(f"process {proc.name} failed to start: {message[1]}")
                waiting.remove((proc, pipe))

    def ready(self) -> bool:
        """Whether every process serves."""
        return (
            bool(self._serving.value)
            and not self.draining
            and all(p.is_alive() for p in (*self._procs, *self._devices))
        )

    def serve_forever(self) -> None:
        """Start (when not started) and wait until :meth:`drain` stops the processes, or one
        exits on its own (then ``failure`` says which, and the others are drained)."""
        self.start()
        while not self._drained.wait(0.5):  # the main thread stays free for signals
            pass

    def _watch(self) -> None:
        """The group's thread: a process that exits on its own stops the group."""
        procs = [*self._procs, *self._devices]
        while not self.draining:
            gone = wait([p.sentinel for p in procs], timeout=0.5)
            if gone and not self.draining:
                proc = next(p for p in procs if p.sentinel in gone)
                proc.join()
                self.failure = (f"server process {proc.name} (pid {proc.pid}) exited with "
                                f"code {proc.exitcode}")  # fmt: skip
                log.error("%s: draining the others", self.failure)
                self.drain()

    def drain(self) -> None:
        """Send SIGTERM to every front (each drains), wait for them, then stop the device
        processes."""
        with self._lock:
            if self.draining:
                first = False
            else:
                self.draining = first = True
        if not first:
            self._drained.wait()
            return
        self._serving.value = 0
        self._stop(self._procs, 0.0)  # the fronts' requests answered first
        self._stop(self._devices, _DEVICE_EXIT_SECONDS)  # they stop once no front is left
        self._reserved.close()
        if self._reserved_grpc is not None:
            self._reserved_grpc.close()
        shutil.rmtree(self._dir, ignore_errors=True)
        self._drained.set()

    def _stop(self, procs: list, grace: float) -> None:
        """Wait ``grace`` seconds for ``procs`` to exit on their own, then SIGTERM the others
        and wait for them (a process that does not stop is killed)."""
        for proc in procs:
            proc.join(grace)
            if proc.is_alive():
                os.kill(proc.pid, signal.SIGTERM)
        for proc in procs:
            proc.join(self.options.drain_timeout + 30)
            if proc.is_alive():
                proc.kill()
                proc.join()
            if proc.exitcode and self.failure is None:
                self.failure = f"server process {proc.name} exited with code {proc.exitcode}"


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
                  slots: int, scheduler: str | None, conns: list | None, devices: int,
                  in_flight: int, pipe: Any, serving: Any, folder: str,
                  level: int) -> None:  # fmt: skip
    """One front process of a group: build, serve, drain on SIGTERM, exit 0 (``conns``: its
    pipes to the ``devices`` device processes, which run its batches, ``in_flight`` at once
    on each)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the parent, which drains
    if conns is not None:  # the device processes hold the GPUs: no context here
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    os.environ.setdefault(THREADS_VARIABLE, str(max(1, (cores or 1) // processes)))
    logging.basicConfig(level=level, format=f"%(asctime)s %(name)s[{index}] %(message)s")
    client = None
    try:
        if scheduler is not None:
            from distshap.cluster import start_cluster

            client = start_cluster(address=scheduler)
        if conns is not None:
            server = build_front(specs, options, conns, in_flight)
        else:
            server = build_server(specs, options, client=client, backend=backend, slots=slots)
    except BaseException as err:
        pipe.send(("error", f"{type(err).__name__}: {str(err).strip()[:300]}"))
        sys.exit(1)
    server.group_ready = lambda: bool(serving.value)
    server.metrics.process = index
    if devices and index == 0:  # one front reports the device processes' counters
        _device_gauges(server, folder, devices)
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


def _device_gauges(server: ExplanationServer, folder: str, devices: int) -> None:
    """The device processes' counters as gauges of ``server``'s ``/metrics``."""
    latest: dict = {"at": -1.0, "stats": {}}

    def read(name: str):
        def series() -> dict:
            now = time.monotonic()
            if now - latest["at"] > 0.1:  # one reading of the files serves a scrape's gauges
                latest["stats"], latest["at"] = read_device_stats(folder, devices), now
            return latest["stats"][name]

        return series

    for name, what in (("calls", "calls run on each device process (merged batches)"),
                       ("rows", "rows of those calls"),
                       ("merged", "calls that merged several batches"),
                       ("busy", "seconds during which the device process ran a call"),
                       ("ran", "seconds of its calls, summed"),
                       ("waited", "seconds its batches waited for a call, summed")):  # fmt: skip
        server.metrics.gauge(f"distshap_serve_device_{name}", what, read(name))
