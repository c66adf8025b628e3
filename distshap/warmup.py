"""Warm-up: compile a backend's kernels ahead, on tiny built-in models (``distshap compile``).

Numba compiles a kernel on its first call (or loads it from its disk cache,
:mod:`distshap.compile_cache`), which takes seconds. :func:`warm_up` runs every kernel of a
backend once on chain-shaped trees (:func:`chain_ensemble`): a short chain (pattern tables),
and one longer than a warp (quadrature; the CUDA backend's fallback kernel). On the CPU it also
runs the margin traversal and the interventional kernels (SHAP and interaction values of the
raw margin, SHAP values of the probability and of the log loss, and the row-by-row test of
paths too long for a mask), and for either backend the host passes of large models (the
loader's node reader and checks, the compiled path walk, BFD packing and its grouping by bin),
so a later process finds all of them in the cache: the step for images and CI. It sits above
the kernels, so the kernels never import the model-building side.

:func:`start_ahead` is the cold start of a large model file (one that takes the compiled path
walk) in a fresh environment: while the explainer loads it, helper processes
(:mod:`distshap.compile_cache`) compile the path walk, the packing and, for the CUDA backend,
the kernels of a SHAP call on a model of its shape into Numba's disk cache, each on a core of
its own, so the build and the first call load them instead of compiling them one after another.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np

from distshap import build_cache, compile_cache, packing, path_walk
from distshap.interventional import build_background
from distshap.kernels import get_backend
from distshap.kernels.interventional_cpu import MAX_MASK_BITS, interventional_values
from distshap.kernels.margin import margin_model, predict_margin
from distshap.models import _threaded, load_model
from distshap.models.ensemble import Ensemble
from distshap.packed import PackedModel, build_packed_model
from distshap.paths import extract_paths
from distshap.plan.config import get_config

__all__ = [
    "COMPUTE_MODE_DEFAULT", "KINDS", "chain_ensemble", "gpu_capability", "gpu_compute_mode",
    "helpers_may_share_gpu", "load_ahead", "longest_path_bound", "start_ahead", "warm_up",
]  # fmt: skip

_CUDA_AHEAD = "distshap.kernels.cuda.runtime.ptx"  # the CUDA kernels' helpers, waited for as
_CUDA_HELPER = "distshap.kernels.cuda.runtime.ahead"  # what they run: compiling, no context


def chain_ensemble(depth: int, n_features: int) -> Ensemble:
    """One tree: a chain of ``depth`` splits ``x[i % n_features] < 0.5`` (right: a leaf).

    Its deepest path has ``min(depth, n_features)`` distinct features, so a chain with
    ``depth = n_features > 31`` is longer than a warp of lanes.
    """
    n = 2 * depth + 1  # internal node i at 2i, its right leaf at 2i + 1, last leaf at 2 depth
    left = np.full(n, -1, np.int32)
    right = np.full(n, -1, np.int32)
    feature = np.full(n, -1, np.int32)
    threshold = np.zeros(n, np.float32)
    value = np.zeros(n, np.float64)
    cover = np.zeros(n, np.float64)
    for i in range(depth):
        node = 2 * i
        left[node] = node + 2
        right[node] = node + 1
        feature[node] = i % n_features
        threshold[node] = 0.5
        value[node + 1] = (i % 3) - 1.0
        cover[node] = float(depth - i + 1)
        cover[node + 1] = 1.0
    cover[2 * depth] = 1.0
    value[2 * depth] = 2.0
    return Ensemble(
        left=left, right=right, feature=feature, threshold=threshold,
        default_left=np.ones(n, bool), is_categorical=np.zeros(n, bool),
        cat_offsets=np.zeros(n + 1, np.int64), cat_values=np.zeros(0, np.int32),
        value=value, cover=cover, tree_offsets=np.array([0, n], np.int64),
        tree_group=np.zeros(1, np.int32), num_features=n_features, num_groups=1,
        base_score=np.zeros(1, np.float64),
    )  # fmt: skip


KINDS = ("shap", "interactions", "interventional", "banzhaf")


def warm_up(backend: str = "cpu", kinds: tuple[str, ...] = KINDS) -> None:
    """Compile (or load from Numba's cache) every kernel of ``backend`` ("cpu" or "cuda").

    Parameters
    ----------
    backend : {"cpu", "cuda"}
    kinds : tuple of {"shap", "interactions", "interventional", "banzhaf"}
        The kernels to compile: path-dependent SHAP values, interaction values, interventional
        values (CPU only: every transform, SHAP and interaction values), Banzhaf values
        (path-dependent and interventional, values and interaction values; the backend's
        :func:`~distshap.kernels.banzhaf.banzhaf_backend`).
    """
    unknown = set(kinds) - set(KINDS)
    if unknown:
        raise ValueError(f"unknown kinds {sorted(unknown)}: use {', '.join(KINDS)}")
    kernels = get_backend(backend)
    _threaded.ahead_compile(_threaded.AHEAD_NAME)  # the host passes of large models
    path_walk.ahead_compile(path_walk.AHEAD_NAME)
    packing.ahead_compile(packing.AHEAD_NAME)
    for depth in (3, 33):  # the second has paths longer than a warp (CUDA: fallback kernel)
        ensemble = chain_ensemble(depth, depth)
        packed = build_packed_model(extract_paths(ensemble), margin=margin_model(ensemble))
        X = np.full((2, depth), 0.25, np.float32)
        if "shap" in kinds:
            kernels.shap_values(packed, X)
            if backend == "cuda":  # more rows than path_thread_rows: the row kernels
                rows = int(get_config().path_thread_rows) + 1
                kernels.shap_values(packed, np.full((rows, depth), 0.25, np.float32))
        if "interactions" in kinds:
            kernels.interaction_values(packed, X)
        if backend == "cpu":
            predict_margin(packed, X)  # the additivity check's traversal
            if "interventional" in kinds:
                _interventional(packed, X, long_paths=depth > 3)
        if "banzhaf" in kinds:
            _banzhaf(backend, packed, X)
    if backend == "cuda":
        from numba import cuda

        cuda.synchronize()


def _interventional(packed: PackedModel, X: np.ndarray, long_paths: bool) -> None:
    """The CPU interventional kernels of every kind of call on ``packed``."""
    background = build_background(packed, X)
    bits = 1 if long_paths else MAX_MASK_BITS  # long_paths: every path tested row by row
    margin = predict_margin(packed, X)
    y = np.zeros(X.shape[0])
    for transform in (0, 1, 2):
        interventional_values(packed, background, X, transform=transform, x_margin=margin,
                              y=y, max_mask_bits=bits)  # fmt: skip
    interventional_values(packed, background, X, interactions=True, max_mask_bits=bits)


def _banzhaf(backend: str, packed: PackedModel, X: np.ndarray) -> None:
    """The Banzhaf kernels of ``backend``: path-dependent and interventional, values and
    interaction values."""
    from distshap.kernels.banzhaf import banzhaf_backend

    module = banzhaf_backend(backend)
    background = build_background(packed, X)
    for interactions in (False, True):
        module.banzhaf_values(packed, X, interactions)
        module.interventional_banzhaf_values(packed, background, X, interactions=interactions)


def _nothing(ensemble: Ensemble) -> None:
    return None


def _cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def start_ahead(model: Any, backend: str) -> Callable[[Ensemble], None]:
    """Start compiling a large model file's kernels in helper processes; returns the function
    to call with the loaded ensemble (it hands the CUDA helpers the kernels of its shape).

    Only for a model file of more than ``large_model_file_bytes`` bytes
    (smaller ones never take the compiled path walk), with a Numba cache directory, what is
    not in the disk cache yet (a filled cache starts nothing) and at most
    ``compile_ahead_processes`` helpers (:class:`~distshap.plan.config.Config`), and two
    fewer than the cores: the loading process compiles the file's decoders in a thread of its
    own meanwhile, and a helper without an idle core slows that down more than it saves.
    ``backend``: the explainer's (``"cuda"`` adds the CUDA helpers, which compile for the
    GPU's compute capability, :func:`gpu_capability`, and make no CUDA context:
    :mod:`distshap.kernels.cuda.runtime.ahead`; none for ``"auto"``, whose constructor leaves
    the CUDA driver untouched, so that the process may fork; none on a
    GPU whose compute mode is not the default: :func:`helpers_may_share_gpu`).
    """
    count = min(int(get_config().compile_ahead_processes), _cores() - 2)
    try:
        large = os.path.getsize(model) > get_config().large_model_file_bytes
    except (OSError, TypeError, ValueError):
        large = False  # not a file: the loader says what is wrong with it
    if count <= 0 or not large or compile_cache.cache_dir() is None:
        return _nothing
    for module, name, compiled in (
        (path_walk, path_walk.AHEAD_NAME, path_walk._dfs_paths),
        (packing, packing.AHEAD_NAME, packing._bfd_compiled),
    ):  # a helper each, while the file loads
        if count > 0 and not compile_cache.cached_on_disk(compiled):
            compile_cache.compile_ahead(module.__name__, [name])
            count -= 1
    if backend != "cuda" or count <= 0:  # "auto": asking for a GPU would start the driver
        return _nothing
    from distshap.kernels.cuda.runtime import ptx

    if compile_cache.cached_on_disk(ptx.finish_kernel):
        return _nothing  # the SHAP call's kernels were compiled here before
    cc = gpu_capability()
    if cc is None or not helpers_may_share_gpu(gpu_compute_mode()):
        return _nothing
    compile_cache.start_helpers(_CUDA_AHEAD, count, runs=_CUDA_HELPER)

    def send(ensemble: Ensemble) -> None:
        from distshap.kernels.cuda.runtime.ahead import ahead_names

        names = ptx.shap_kernel_names(
            ensemble.num_features, ensemble.num_groups, longest_path_bound(ensemble)
        )
        compile_cache.compile_ahead(_CUDA_AHEAD, ahead_names(ptx.ahead_groups(names), cc))

    return send


#: ``CU_DEVICE_ATTRIBUTE_COMPUTE_MODE`` of a GPU any number of processes may hold contexts on.
COMPUTE_MODE_DEFAULT = 0


def gpu_compute_mode(device: int = 0) -> int | None:
    """The compute mode of the CUDA device ``device`` (the first visible one: where the CUDA
    helpers make their contexts), read through the driver without making a context in this
    process; None where it cannot be read (no driver, the CUDA simulator)."""
    from distshap.kernels.cuda.runtime.device import SIM

    if SIM:
        return None
    try:
        from numba.cuda.cudadrv.driver import driver

        return int(driver.get_device(device).COMPUTE_MODE)
    except Exception:  # no driver or device, an attribute this binding does not name
        return None


def gpu_capability(device: int = 0) -> tuple[int, int] | None:
    """The compute capability of the CUDA device ``device`` (the first visible one: the
    explaining process's), read through the driver without making a context; None where it
    cannot be read (no driver, the CUDA simulator)."""
    from distshap.kernels.cuda.runtime.device import SIM

    if SIM:
        return None
    try:
        from numba.cuda.cudadrv.driver import driver

        major, minor = driver.get_device(device).compute_capability
        return int(major), int(minor)
    except Exception:  # no driver or device
        return None


def helpers_may_share_gpu(mode: int | None) -> bool:
    """Whether CUDA helper processes may make contexts on a GPU of compute ``mode``
    (:func:`gpu_compute_mode`): only in the default mode. In exclusive-process mode a helper's
    context would keep the explaining process off the GPU until the helper exits (its own
    context fails meanwhile); in prohibited mode, or where the mode is unknown, no helper
    starts."""
    return mode == COMPUTE_MODE_DEFAULT


def load_ahead(model: Any, backend: str) -> Ensemble:
    """:func:`distshap.models.load_model` of ``model``, the kernels of a large model file
    compiled ahead meanwhile (:func:`start_ahead`; ``backend``: the explainer's); a large
    model file's ensemble is saved, and found again by a later process
    (:func:`distshap.build_cache.load_ensemble`)."""
    send = start_ahead(model, backend)
    _threaded.start_warm_up(model)  # Numba starts meanwhile, a saved build found or not
    try:
        ensemble = build_cache.load_ensemble(model, get_config().large_model_file_bytes, load_model)
    except BaseException:
        compile_cache.compile_ahead(_CUDA_AHEAD, [])  # the helpers started for it exit
        raise
    send(ensemble)
    return ensemble


def longest_path_bound(ensemble: Ensemble, most: int = 64) -> int:
    """The most distinct features a path of ``ensemble`` can have: its features, or its
    deepest tree's depth if smaller (counted level by level up to ``most``)."""
    left, right = ensemble.left, ensemble.right
    frontier = np.asarray(ensemble.tree_offsets[:-1], np.int64)
    depth = 0
    while depth < most:
        frontier = frontier[(frontier >= 0) & (frontier < left.shape[0])]
        frontier = frontier[left[frontier] >= 0]  # the splits of this level
        if frontier.size == 0:
            break
        depth += 1
        frontier = np.concatenate([left[frontier], right[frontier]]).astype(np.int64)
    return min(depth, int(ensemble.num_features))
