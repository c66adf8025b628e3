"""The GPU made ready for an explainer's first call while the explainer is built.

A CUDA explainer's first call pays for what no later call pays: importing the CUDA backend
(Numba's CUDA target, CuPy), the process's CUDA context, the kernels loaded from Numba's disk
cache (or compiled) and bound to the context, and the packed model's device arrays (its device
model, the SHAP plan with its tables filled on the device, the additivity check's margin
arrays). None of it depends on the rows. For a large model file :func:`start` does that work in
background threads while the explainer loads and packs the model, in three stages, each in a
thread started once the one before has ended:

1. at :func:`start`: the CUDA backend imported, the context made, the kernels of every model's
   first SHAP call loaded (lane fill, table fill, finish, the additivity check's);
2. :meth:`Preparation.loaded`, with the loaded ensemble: the kernels of its shape (table and
   quadrature kernels, :func:`~distshap.kernels.cuda.runtime.ptx.shap_kernel_names`);
3. :meth:`Preparation.packed`, with the explainer's packed model: its device model, SHAP plan
   and margin arrays.

The first CUDA call waits for what is under way (:func:`wait`, where
:func:`~distshap.kernels.cuda.runtime.model.device_model` starts) and finds it made. The
threads only make what the call would make itself, the same way and into the same caches
(Numba's dispatchers, the device-model cache), so no value depends on them. An exception in a
stage is kept (:attr:`Preparation.error`) and the later stages are skipped: the call then makes
what is missing itself and raises there whatever it raises without the threads.

Only ``backend="cuda"`` starts it: the constructor of such an explainer sets CUDA up anyway.
``"auto"`` starts nothing, so that a process may build an explainer and then fork (a prefork
server, a ``multiprocessing`` pool) with CUDA still untouched, as CUDA requires. Nothing starts
either, and nothing here touches CUDA, where the explainer will not run CUDA in this process:
the CPU backend, a Dask client given or current (its workers run the kernels), model files of
up to ``large_model_file_bytes`` bytes and in-memory models (their first call is short). The
threads work under the configuration in force at :func:`start`
(:mod:`contextvars`), on the device a new thread gets (the first visible one); a call made on
another device makes its own device model. They are no daemons: a process that ends while they
work waits for them (each ends by itself), so CUDA is not torn down under a copy or a compile.
"""

from __future__ import annotations

import contextvars
import importlib
import os
import sys
import threading
import time
from typing import Any

from distshap.plan.config import get_config

__all__ = ["Preparation", "start", "wait", "waited"]

#: The stages' work, imported in their thread (importing it imports the CUDA backend).
_WORK = "distshap.kernels.cuda.runtime.prepare"
_PENDING: list[Preparation] = []  # preparations whose stages a CUDA call has not waited for
_LOCK = threading.Lock()
_LOCAL = threading.local()  # ``preparing``: True in a stage's thread
_WAITED: list[float] = [0.0]  # seconds CUDA calls of this process waited for stages


class Preparation:
    """The background stages of one explainer's GPU preparation (:func:`start`).

    ``seconds``: each finished stage's seconds in its thread; ``error``: the exception that
    ended a stage (the later ones skipped), else None. An inactive preparation (:func:`start`
    started nothing) ignores :meth:`loaded` and :meth:`packed`.
    """

    def __init__(self, backend: str = "cpu", path_dependent: bool = False,
                 active: bool = False) -> None:  # fmt: skip
        self.backend = backend
        self.path_dependent = path_dependent
        self.active = active
        self.error: BaseException | None = None
        self.seconds: dict[str, float] = {}
        self._context = contextvars.copy_context() if active else None
        self._thread: threading.Thread | None = None
        self._stop = False  # a stage failed: the later ones skip

    def loaded(self, ensemble: Any) -> Any:
        """Hand the loaded ensemble to the second stage (for a tree-path-dependent explainer);
        returns ``ensemble``."""
        if self.active and self.path_dependent:
            self._then("kernels", ensemble)
        return ensemble

    def packed(self, packed: Any) -> None:
        """Hand the explainer's packed model to the last stage (for a tree-path-dependent
        explainer): its device model, SHAP plan and margin arrays."""
        if self.active and self.path_dependent:
            self._then("device_model", packed)

    def join(self) -> None:
        """Wait for the stages started so far."""
        thread = self._thread
        if thread is not None:
            thread.join()

    def _then(self, stage: str, *args: Any) -> None:
        with _LOCK:  # with wait()'s look at the last thread: a new stage is always waited for
            before = self._thread
            self._thread = threading.Thread(target=self._run, args=(before, stage, args),
                                            name=f"distshap-gpu-{stage}")  # fmt: skip
            self._thread.start()
            if self not in _PENDING:  # a call waited for the stages before: wait for this one
                _PENDING.append(self)

    def _run(self, before: threading.Thread | None, stage: str, args: tuple) -> None:
        if before is not None:
            before.join()
        if self._stop:
            return
        _LOCAL.preparing = True
        t0 = time.perf_counter()
        try:
            if stage == "context":  # the driver makes it while this thread imports the backend
                threading.Thread(target=_driver_context, name="distshap-gpu-driver").start()
            work = getattr(importlib.import_module(_WORK), stage)
            self._context.copy().run(work, *args)
        except Exception as exc:  # noqa: BLE001 - the call makes it again and raises there
            self.error = exc
            self._stop = True
        finally:
            self.seconds[stage] = time.perf_counter() - t0


def _driver_context() -> None:
    """The CUDA context, made through Numba's driver alone (the first stage then finds it).
    Whatever fails here the first stage meets again, and keeps."""
    try:
        from numba import cuda

        cuda.current_context()
    except Exception:  # noqa: BLE001 - met again by the first stage
        pass


def start(model: Any, backend: str, client: Any, feature_perturbation: str) -> Preparation:
    """Start preparing the GPU for an explainer of ``model`` (its constructor's arguments;
    ``feature_perturbation`` resolved), where it will run CUDA in this process (module
    docstring); an inactive :class:`Preparation` elsewhere."""
    if backend != "cuda" or client is not None or not get_config().gpu_preparation:
        return Preparation()
    if _dask_client():
        return Preparation()
    if not isinstance(model, (str, os.PathLike)):
        return Preparation()  # an in-memory model
    try:
        if os.path.getsize(model) <= get_config().large_model_file_bytes:
            return Preparation()
    except (OSError, ValueError):
        return Preparation()  # not a file: the loader says what is wrong with it
    preparation = Preparation(backend, feature_perturbation == "tree_path_dependent", True)
    preparation._then("context", backend, preparation.path_dependent)
    return preparation


def _dask_client() -> bool:
    """Whether this process has a current Dask client (its inputs may run on the workers)."""
    if "distributed" not in sys.modules:
        return False
    try:
        from distributed import default_client

        default_client()
    except (ImportError, ValueError):
        return False
    return True


def wait() -> float:
    """Wait for the stages under way of every preparation (what a CUDA call does before its
    first device work; nothing in a stage's own thread); the seconds waited."""
    if not _PENDING or getattr(_LOCAL, "preparing", False):
        return 0.0
    with _LOCK:
        pending = list(_PENDING)
    t0 = time.perf_counter()
    for preparation in pending:
        preparation.join()
    with _LOCK:
        for preparation in pending:
            if preparation in _PENDING and preparation._thread is not None:
                if not preparation._thread.is_alive():
                    _PENDING.remove(preparation)
    seconds = time.perf_counter() - t0
    _WAITED[0] += seconds
    return seconds


def waited() -> float:
    """Seconds the CUDA calls of this process waited for preparations (:func:`wait`)."""
    return _WAITED[0]
