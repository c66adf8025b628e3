"""The stages of a GPU preparation (:mod:`distshap.kernels.prepare`), each run in its thread.

* :func:`context`: the CUDA backend imported (importing this module does it), the context
  made, CuPy started on it, and the kernels a first SHAP call launches on a model of any shape
  loaded (:data:`ANY_SHAPE`);
* :func:`kernels`: the kernels of the loaded ensemble's shape
  (:func:`~.ptx.shap_kernel_names`), once the helpers compiling them ahead are done
  (:func:`distshap.compile_cache.wait_ahead`);
* :func:`device_model`: the packed model's device model (:func:`.model.device_model`), its
  SHAP plan (tables filled on the device) and the additivity check's margin arrays, in threads
  where they do not wait for each other, every launch finished. Their host arrays are mapped
  back where the packed model's saved build keeps them (:func:`.model.lane_host`,
  :func:`.model.shap_plan_host`, :func:`margin_arrays`), else computed and kept there.

A kernel is loaded as a launch loads it: the dispatcher's ``compile`` for the launch's argument
types (from Numba's disk cache, else compiled and saved there), then bound to the context.
Under the CUDA simulator nothing is loaded (its kernels are Python).
"""

from __future__ import annotations

import contextvars
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
from numba import cuda

from distshap import build_cache, compile_cache
from distshap.kernels.cuda import traversal
from distshap.kernels.cuda.runtime import model as runtime_model
from distshap.kernels.cuda.runtime import ptx
from distshap.kernels.cuda.runtime.device import SIM, device_id, xp

__all__ = [
    "ANY_SHAPE", "ONLY_CACHED", "context", "device_model", "kernels", "load_kernels",
    "longest_path", "margin_arrays",
]  # fmt: skip

#: Kernels a SHAP call on any model taking the lane route launches (:func:`.ptx.shap_kernel_names`).
ANY_SHAPE = ("lane_fill_kernel", "fill_shap_tables_kernel", "finish_kernel", *ptx.MARGIN_KERNELS)


def context(backend: str, path_dependent: bool) -> None:
    """The first stage (``backend``: ``"cuda"``): the context, CuPy on it and, for a
    tree-path-dependent explainer (``path_dependent``), the kernels of :data:`ANY_SHAPE`."""
    _numba_main_thread()
    cuda.current_context()  # made meanwhile by the driver's thread (or here)
    device_id()  # CuPy's runtime on the same (primary) context
    cp = xp()
    cp.ascontiguousarray(cp.zeros((2, 2), np.float32).T)  # CuPy's copy, as a call copies rows
    if path_dependent:
        load_kernels(ANY_SHAPE)


def _numba_main_thread() -> None:
    """Numba's CUDA runtime takes the thread that imports it for the one whose
    ``numba.cuda.close()`` destroys the contexts: the process's main thread, as where the
    backend is imported in it, not this one."""
    from numba.cuda.cudadrv import devices

    runtime = getattr(devices, "_runtime", None)
    first = getattr(runtime, "_mainthread", None)
    if isinstance(first, threading.Thread) and first.name.startswith("distshap-gpu"):
        runtime._mainthread = threading.main_thread()


def kernels(ensemble: Any) -> None:
    """The second stage: the kernels of the shape of ``ensemble`` (an
    :class:`~distshap.models.Ensemble`) not loaded by the first."""
    compile_cache.wait_ahead(module=runtime_model.AHEAD_MODULE)
    names = ptx.shap_kernel_names(ensemble.num_features, ensemble.num_groups,
                                  longest_path(ensemble))  # fmt: skip
    load_kernels([name for name in names if name not in ANY_SHAPE])


def device_model(packed: Any) -> None:
    """The last stage: ``packed``'s device model, SHAP plan and margin arrays.

    The plan's host side (:func:`.model.shap_plan_host`) is made in a thread of its own while
    this one makes the device model, then the margin arrays in another while this one fills
    the plan's tables: host work of the three at once (NumPy, mostly without the GIL)."""
    runtime_model.lane_host(packed)  # what the three share (path_info), made once
    plan_host = _meanwhile(runtime_model.shap_plan_host, packed)
    model = runtime_model.device_model(packed)
    margin = None
    if packed.margin is not None:
        margin = _meanwhile(margin_arrays, packed, model)
    runtime_model.shap_plan(packed, model, plan_host.result())
    if margin is not None:
        margin.result()
    cuda.synchronize()


#: The order of :func:`~distshap.kernels.cuda.traversal.device_arrays`' arrays.
_MARGIN_ARRAYS = ("ints", "longs", "f64s", "bools")


def margin_arrays(packed: Any, model: Any) -> tuple:
    """:func:`~distshap.kernels.cuda.traversal.device_arrays` of ``packed`` (the form
    ``"margin"`` of its device model ``model``), from host arrays mapped back where the
    packed model's saved build keeps them, else computed
    (:func:`~distshap.kernels.cuda.traversal.packed_arrays`) and kept there. The host arrays
    are made before the form is entered: a form holds the model's lock, and the SHAP plan's
    tables fill under it meanwhile."""
    host = build_cache.load_derived(packed, "device-margin", (),
                                    lambda: traversal.packed_arrays(packed.margin))  # fmt: skip
    return model.form("margin", lambda: tuple(cuda.to_device(host[n]) for n in _MARGIN_ARRAYS))


def _meanwhile(function: Any, *args: Any) -> Future:
    """``function(*args)`` in a thread of its own under this thread's configuration
    (:mod:`contextvars`); its future."""
    pool = ThreadPoolExecutor(1, thread_name_prefix="distshap-gpu-part")
    future = pool.submit(contextvars.copy_context().run, function, *args)
    pool.shutdown(wait=False)
    return future


#: Kernels loaded where Numba's disk cache has them, never compiled here: the additivity
#: check's kernel of calls of up to :func:`~distshap.kernels.cuda.traversal.block_rows_max`
#: rows (the others of the check serve larger calls), which a call of more rows never
#: launches and which compiles longest of them.
ONLY_CACHED = ("margin_check_kernel",)


def load_kernels(names: Any) -> None:
    """Load (or compile) the kernels ``names`` of :func:`.ptx.shap_kernel_names` into the
    current context, as their first launch would (those of :data:`ONLY_CACHED` only where
    the disk cache has them)."""
    if SIM:
        return
    from numba.core import sigutils

    known = ptx._ahead_kernels()
    for name in names:
        kernel, signature = known[name]
        if name in ONLY_CACHED and not compile_cache.cached_on_disk(kernel):
            continue
        argtypes, _ = sigutils.normalize_signature(signature)
        kernel.compile(tuple(argtypes)).bind()  # the key a launch compiles and looks up


def longest_path(ensemble: Any, most: int = 64) -> int:
    """An upper bound of the distinct features of a path of ``ensemble``: the depth of its
    deepest tree (counted up to ``most``), at most its feature count."""
    left, right = np.asarray(ensemble.left), np.asarray(ensemble.right)
    nodes = np.asarray(ensemble.tree_offsets[:-1], np.int64)
    depth = 0
    while depth < most:
        nodes = nodes[(nodes >= 0) & (nodes < left.shape[0])]
        nodes = nodes[left[nodes] >= 0]
        if nodes.size == 0:
            break
        depth += 1
        nodes = np.concatenate((left[nodes], right[nodes])).astype(np.int64)
    return min(depth, int(ensemble.num_features))
