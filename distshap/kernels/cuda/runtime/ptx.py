"""Compilation checks: every kernel compiled to PTX, where NVVM is installed (no GPU needed).

:func:`compile_check` is what ``distshap`` runs to tell a broken CUDA setup from a missing GPU;
the tests read the PTX (:func:`kernel_ptx`) to check properties the design relies on: integer
atomics only (determinism), no spills to local memory in the hot kernels, warp votes where
expected. Both Numba's built-in CUDA target and ``numba-cuda`` ask the current device for its
compute capability while compiling a device function called from a kernel; where no GPU is
visible they are told the target's capability for the duration of the compilation.

The same names and signatures serve compiling ahead (:mod:`distshap.compile_cache`): a helper
process compiles the kernels :func:`shap_kernel_names` lists for a model's shape into Numba's
disk cache (:func:`ahead_compile`, on its own CUDA context), where the first call then finds
them.
"""

from __future__ import annotations

from contextlib import contextmanager
from functools import cache

import numpy as np
from numba import cuda

from distshap.kernels.cuda.fallback import oversize_kernel
from distshap.kernels.cuda.interaction_quadrature import interaction_kernel
from distshap.kernels.cuda.launch import finish_kernel
from distshap.kernels.cuda.path_threads import path_thread_kernel
from distshap.kernels.cuda.runtime.device import SIM
from distshap.kernels.cuda.runtime.upload import LANE_FILL_SIGNATURE, lane_fill_kernel
from distshap.kernels.cuda.shap_quadrature import quadrature_kernel
from distshap.kernels.cuda.table_fill import fill_kernel, shap_fill_kernel
from distshap.kernels.cuda.tables import table_kernel
from distshap.plan.config import get_config
from distshap.plan.geometry import (
    REGULAR_MAX_K,
    local_tile_model,
    quadrature_node_index,
    quadrature_tile_columns,
    quadrature_warps,
    shared_tile_rows,
)

__all__ = [
    "MARGIN_KERNELS", "ahead_compile", "ahead_groups", "ahead_prepare", "compile_check",
    "kernel_ptx", "pairs_only", "shap_kernel_names",
]  # fmt: skip

_X_ACC = "float32[:, ::1], int64[:, ::1], float64, int64"
_TABLE_SIG = (
    "void(float32[:, ::1], int32[:, ::1], int64[::1], int64[::1], uint32[::1], float32[::1], "
    f"int64[::1], int32[::1], int32[::1], {_X_ACC}, int64, int64)"
)
_QUADRATURE_SIG = (  # the interaction kernel takes X, the SHAP kernel its transpose
    "void(float32[:, ::1], int32[:, ::1], int64[::1], uint32[::1], int64[::1], int32[::1], "
    f"int64[::1], int32[::1], {_X_ACC}, int64)"
)
_UNITS = "int32[::1], float32[::1], int32[:, ::1], int32[::1]"  # unit_offsets ... unit_pair
_SHAP_QUADRATURE_SIG = (  # the one-row SHAP kernel: the paths' sibling units after the paths
    "void(float32[:, ::1], int32[:, ::1], int64[::1], uint32[::1], int64[::1], int32[::1], "
    f"{_UNITS}, int64[::1], int32[::1], {_X_ACC}, int64)"
)
_TWO_ROW_QUADRATURE_SIG = (  # the two-row SHAP kernel without local tiles: three unused arrays
    "void(float32[:, ::1], int32[:, ::1], int64[::1], uint32[::1], int64[::1], int32[::1], "
    f"{_UNITS}, int64[::1], int32[::1], int64[::1], int64[::1], int64[::1], {_X_ACC}, int64)"
)
_LOCAL_QUADRATURE_SIG = (  # the SHAP kernel with chunk-local feature tiles: XT, lane_column...
    "void(float32[:, ::1], int32[:, ::1], int64[::1], uint32[::1], int64[::1], int32[::1], "
    f"{_UNITS}, int64[::1], int32[::1], int16[::1], int32[::1], int64[::1], {_X_ACC}, int64)"
)


def _kernels() -> dict:
    """Name -> (kernel, signature) of every kernel the backend launches."""
    kernels = {
        "interaction_table_kernel": (table_kernel(False), _TABLE_SIG),
        "interaction_table_shared_kernel": (table_kernel(True), _TABLE_SIG),
        "shap_table_kernel": (table_kernel(False, shap=True, rows4=True), _TABLE_SIG),
        "shap_table_shared_kernel": (table_kernel(True, shap=True, rows4=True), _TABLE_SIG),
        "fill_shap_tables_kernel": (
            shap_fill_kernel,
            "void(float64[:, ::1], int64[::1], int32[::1], int64[::1], int64, float64[::1], "
            "float64[::1], float32[::1])",
        ),
        "fill_interaction_tables_kernel": (
            fill_kernel(get_config().interaction_table_max_features),
            "void(float64[:, ::1], int64[::1], int32[::1], int64[::1], float32[::1])",
        ),
        "oversize_kernel": (
            oversize_kernel(),
            "void(float32[:, ::1], int32[:, ::1], int64[::1], float64[:, ::1], uint32[::1], "
            f"int64[::1], int32[::1], {_X_ACC}, boolean)",
        ),
        "lane_fill_kernel": (lane_fill_kernel, LANE_FILL_SIGNATURE),
        "finish_kernel": (
            finish_kernel,
            "void(int64[:, ::1], float32[:, ::1], float64, float64[::1], int64, int64)",
        ),
    }
    for n_nodes in get_config().quadrature_nodes:
        for shared in (False, True):
            name = f"interaction_quadrature_kernel_{n_nodes}{'_shared' if shared else ''}"
            kernels[name] = (interaction_kernel(n_nodes, shared), _QUADRATURE_SIG)
        kernels[f"shap_quadrature_kernel_{n_nodes}_shared"] = (
            quadrature_kernel(n_nodes, True), _SHAP_QUADRATURE_SIG,
        )  # fmt: skip
        kernels[f"shap_quadrature_kernel_{n_nodes}_local"] = (
            quadrature_kernel(n_nodes, True, local=True), _LOCAL_QUADRATURE_SIG,
        )  # fmt: skip
        for general in (True, False) if pairs_only(n_nodes) else (True,):
            kernels.update(_unit_kernels(n_nodes, general))
    return kernels


def pairs_only(n_nodes: int) -> bool:
    """Whether the SHAP plans' launches of ``n_nodes`` nodes can head only sibling pairs
    under the configuration in force: units of at most two paths (``quadrature_unit_levels``
    at most 1), or paths of at most ``2 n_nodes`` features, fewer than
    ``quadrature_unit_min_features``. Their two-row kernels built without the general fold
    (names ending ``_pairs``) are the ones compiled ahead."""
    config = get_config()
    return (int(config.quadrature_unit_levels) <= 1
            or 2 * int(n_nodes) < int(config.quadrature_unit_min_features))  # fmt: skip


def _unit_kernels(n_nodes: int, general: bool) -> dict:
    """The SHAP kernels of ``n_nodes`` nodes built with or without the general unit fold
    (:func:`~distshap.kernels.cuda.shap_quadrature.quadrature_kernel`) that a call may compile
    ahead: two rows a thread in every mode; and with it, a thread a path."""
    end = "" if general else "_pairs"
    kernels = {}
    for shared in (False, True):
        kernels[f"shap_quadrature_kernel_{n_nodes}_2rows{'_shared' if shared else ''}{end}"] = (
            quadrature_kernel(n_nodes, shared, rows=2, general=general), _TWO_ROW_QUADRATURE_SIG,
        )  # fmt: skip
    kernels[f"shap_quadrature_kernel_{n_nodes}_local_2rows{end}"] = (
        quadrature_kernel(n_nodes, True, local=True, rows=2, general=general),
        _LOCAL_QUADRATURE_SIG,
    )  # fmt: skip
    for mode in ("local", "shared", "global") if general else ():  # few rows: a thread a path
        sig = _LOCAL_QUADRATURE_SIG if mode == "local" else _TWO_ROW_QUADRATURE_SIG
        name = f"shap_quadrature_kernel_{n_nodes}_{mode}_path_threads"
        kernels[name] = (path_thread_kernel(n_nodes, mode), sig)
    return kernels


@contextmanager
def _device_free_compilation(cc: tuple[int, int]):
    """Let Numba compile device functions for ``cc`` where no GPU is visible."""
    if cuda.is_available():
        yield
        return
    from numba.cuda import dispatcher

    class _Device:
        compute_capability = cc

    saved = dispatcher.get_current_device
    dispatcher.get_current_device = lambda: _Device()
    try:
        yield
    finally:
        dispatcher.get_current_device = saved


def kernel_ptx(cc: tuple[int, int] = (9, 0)) -> dict[str, str]:
    """PTX of every kernel for compute capability ``cc`` (no GPU needed), by kernel name."""
    if SIM:
        raise RuntimeError("compile_check cannot run under NUMBA_ENABLE_CUDASIM=1")
    out = {}
    with _device_free_compilation(cc):
        for name, (kernel, sig) in _kernels().items():
            ptx, _ = cuda.compile_ptx(kernel.py_func, sig, cc=cc)
            out[name] = ptx
    return out


def compile_check() -> None:
    """Compile every kernel to PTX for compute capability 9.0 (needs NVVM, not a GPU)."""
    kernel_ptx((9, 0))


def shap_kernel_names(num_features: int, num_groups: int, longest_path: int) -> list[str]:
    """Names (of :func:`kernel_ptx`, and :data:`MARGIN_KERNELS`) of the kernels a SHAP call can
    launch on a model that takes the lane route (not the small one), with ``num_features``
    features, ``num_groups`` output groups and paths of at most ``longest_path`` features: the
    device model's lane fill, the table fill and table kernel, the quadrature kernels of every
    node count such paths need (the launchers' variant for this width), the oversize kernel,
    the finish kernel and the additivity check's kernels."""
    F, config = int(num_features), get_config()
    table = (
        "shap_table_shared_kernel"
        if shared_tile_rows(num_groups * (F + 1))
        else "shap_table_kernel"
    )
    names = ["lane_fill_kernel", "fill_shap_tables_kernel", table]
    if local_tile_model(F, longest_path):
        columns = quadrature_tile_columns(F, longest_path)
        suffix = "_local_2rows" if quadrature_warps(columns, 2) else "_local"
    else:
        rows = 2 if quadrature_warps(F, 2) or not quadrature_warps(F) else 1
        suffix = ("_2rows" if rows == 2 else "") + ("_shared" if quadrature_warps(F, rows) else "")
    longest = min(int(longest_path), F)
    nodes = config.quadrature_nodes
    used = np.unique(quadrature_node_index(np.arange(1, min(longest, REGULAR_MAX_K) + 1), nodes))
    nodes = [nodes[q] for q in used if q < len(nodes)]
    lean = lambda n: "_pairs" if "2rows" in suffix and pairs_only(n) else ""  # noqa: E731
    names += [f"shap_quadrature_kernel_{n}{suffix}{lean(n)}" for n in nodes]
    if longest > REGULAR_MAX_K:
        names.append("oversize_kernel")
    names += ["finish_kernel", *MARGIN_KERNELS]
    known = _ahead_kernels()
    return [name for name in names if name in known]


_TRAVERSAL = "int32[::1], int64[::1], float64[::1], boolean[::1]"  # the margin model's arrays

#: The additivity check's kernels (float32 rows, as XGBoost's): up to
#: :func:`~distshap.kernels.cuda.traversal.block_rows_max` rows the block traversal with the
#: check, more rows the thread-per-row traversal and the check against its margins.
MARGIN_KERNELS = ("margin_check_kernel", "margin_rows_kernel", "margin_values_kernel")


def _ahead_kernels() -> dict:
    """:func:`_kernels` and the additivity check's kernels (:data:`MARGIN_KERNELS`), made
    once for each set of node counts and of those built without the general fold
    (:func:`pairs_only`)."""
    nodes = tuple(get_config().quadrature_nodes)
    return _ahead_kernels_of(nodes, tuple(pairs_only(n) for n in nodes))


@cache
def _ahead_kernels_of(nodes: tuple, lean: tuple) -> dict:
    """:func:`_ahead_kernels` of the configuration in force, which ``nodes`` and ``lean`` key."""
    from distshap.kernels.cuda import traversal

    rows_kernel, _, check_kernel, values_kernel = traversal._kernels()
    return {
        **_kernels(),
        MARGIN_KERNELS[0]: (
            check_kernel,
            f"void(float32[:, :, ::1], float32[:, ::1], {_TRAVERSAL}, int32[::1], float64)",
        ),
        MARGIN_KERNELS[1]: (rows_kernel, f"void(float32[:, ::1], {_TRAVERSAL}, float64[:, ::1])"),
        MARGIN_KERNELS[2]: (
            values_kernel, "void(float32[:, :, ::1], float64[:, ::1], int32[::1], float64)",
        ),
    }  # fmt: skip


def ahead_groups(names: list[str]) -> list[tuple[str, ...]]:
    """``names`` grouped by the disk-cache index their kernels share (the closures of one
    factory, as the quadrature kernels of each node count): one helper compiles a group
    (:func:`distshap.compile_cache.compile_ahead`)."""
    kernels = _ahead_kernels()
    groups: dict[tuple, list[str]] = {}
    for name in names:
        f = kernels[name][0].py_func
        key = (f.__module__, f.__qualname__, f.__code__.co_firstlineno)
        groups.setdefault(key, []).append(name)
    return [tuple(group) for group in groups.values()]


def ahead_prepare() -> None:
    """A helper process's start (:mod:`distshap.compile_cache`): its CUDA context, made while
    the model still loads."""
    cuda.current_context()


def ahead_compile(name: str) -> None:
    """Compile the kernel ``name`` (:func:`shap_kernel_names`) for the current device into
    Numba's disk cache (or load it from there), as its first launch would."""
    kernel, signature = _ahead_kernels()[name]
    kernel.compile(signature)
