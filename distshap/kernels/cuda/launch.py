"""Launching: row batches through the kernels, then the finish pass; the public entry points.

Per batch of rows every kernel of the output kind adds its int64 fixed-point contributions to
one accumulator (interaction tables, quadrature kernels, fallback kernel); the finish kernel
then writes ``acc * 2**-s`` as float32 (converted in float64), adds the expected value in the
bias column and zeroes the accumulator for the next batch. Results are bit-identical run to run
and do not depend on the batching. ``batch_rows`` keeps the accumulator within
:data:`config.BATCH_BUDGET_BYTES` (and a quarter of the free device memory); the float32
output of all rows is allocated at once, so chunking larger inputs is the caller's job.
:func:`run_slot_batches` runs the same kernels into a row's pair slots and hands each batch's
accumulator to a consumer (:mod:`.pairs`), so no matrix is ever stored. :func:`run_batches`
(the batch loop) and :func:`launch_finish` also serve :mod:`.taylor` and :mod:`.interventional`.

Small models (:func:`distshap.plan.routes.small_fits`, a function of the packed model and
:mod:`.config` only) take the one-launch route instead: one kernel writes every row's float32
values (:mod:`.small`), with no accumulator, batches or finish pass; :func:`checked_values`
runs it with the additivity check inside (what :func:`distshap.dispatch.explain_rows` calls
first), and :func:`run_slot_batches` stores its integers into the pair slots.

Per-call host costs (:func:`_run`): the accumulator of a small call (at most
:data:`.caches.KEPT_ACC_BYTES`) is kept between calls (:func:`.caches.kept_accumulator`: one
per device, stream, row count and width, zero between calls since the finish kernel zeroes
it, handed out to one call at a time, with its Numba view made once), launchers with no work
are not called,
the rows are handed to the kernels as one Numba view where three or more launches read them,
and the output is not sliced when one batch covers it; results do not depend on any of it.
"""

from __future__ import annotations

import numbers
import warnings

import numpy as np
from numba import cuda

from distshap.kernels.cuda import small
from distshap.kernels.cuda.fallback import launch_fallback
from distshap.kernels.cuda.interaction_quadrature import launch_interaction_quadrature
from distshap.kernels.cuda.runtime import args
from distshap.kernels.cuda.runtime.caches import KEPT_ACC_BYTES, give_back, kept_accumulator
from distshap.kernels.cuda.runtime.device import SIM, xp
from distshap.kernels.cuda.runtime.model import (
    device_model,
    interaction_plan,
    shap_plan_of_rows,
    slot_arrays,
)
from distshap.kernels.cuda.shap_quadrature import launch_quadrature
from distshap.kernels.cuda.slot_quadrature import launch_slot_quadrature
from distshap.kernels.cuda.small.model import read_flag
from distshap.kernels.cuda.tables import launch_tables
from distshap.packed import PackedModel
from distshap.plan.config import get_config
from distshap.plan.routes import small_fits

__all__ = [
    "checked_values", "default_batch_rows",
    "device_rows", "finish_kernel", "interaction_values", "launch_finish",
    "new_output", "run_batches", "run_slot_batches", "shap_values",
]  # fmt: skip


@cuda.jit(cache=True)
def finish_kernel(acc, out, inv_scale, expected_value, group_size, bias_offset):
    """``out = acc * inv_scale`` (+ expected value at the bias entries); resets ``acc`` to 0."""
    start = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    stride = cuda.gridDim.x * cuda.blockDim.x
    width = acc.shape[1]
    n = acc.shape[0] * width
    for t in range(start, n, stride):
        r = t // width
        e = t - r * width
        value = np.float64(acc[r, e]) * inv_scale
        g = e // group_size
        if e - g * group_size == bias_offset:
            value += expected_value[g]
        out[r, e] = np.float32(value)
        acc[r, e] = 0


#: Accumulators up to this size (all rows in one batch) skip the free-memory query.
_SMALL_ACC_BYTES = 1 << 24


def default_batch_rows(values_per_row: int) -> int:
    """Rows per batch so the int64 accumulator stays within the budget (module docstring)."""
    budget = get_config().batch_budget_bytes
    if not SIM:
        free, _ = cuda.current_context().get_memory_info()
        budget = min(budget, int(free) // 4)
    return max(1, budget // (8 * max(1, values_per_row)))


def device_rows(X, num_features: int):
    """``X`` as C-contiguous float32 on the device (NumPy under the simulator); checks its shape."""
    if X.ndim != 2 or X.shape[1] != num_features:
        raise ValueError(f"X must have shape (n_rows, {num_features}), got {tuple(X.shape)}")
    if SIM:
        return np.ascontiguousarray(np.asarray(X), dtype=np.float32)
    cp = xp()
    if isinstance(X, np.ndarray):
        return cp.asarray(np.ascontiguousarray(X, dtype=np.float32))
    return cp.ascontiguousarray(cp.asarray(X), dtype=cp.float32)


def run_batches(
    X, width: int, batch_rows: int | None, batch, cap: int | None = 1 << 24, keep: bool = False
) -> None:
    """Runs ``batch(r0, r1, Xb, acc, stream)`` over the rows of ``X`` in batches.

    ``acc`` is the int64 accumulator ``(r1 - r0, width)`` shared by all batches (zero on entry;
    ``batch`` must leave it zeroed, as :func:`finish_kernel` does) and ``Xb = X[r0:r1]``.
    ``batch_rows`` (default: :func:`default_batch_rows` for ``width``) must be >= 1; it is
    capped at the row count and at ``cap`` (the launches' grid limit, ``None``: none). Nothing
    runs, and ``batch_rows`` is not checked, when ``X`` has no rows. With ``keep`` an
    accumulator of at most :data:`.caches.KEPT_ACC_BYTES` is kept for the next call
    (:func:`.caches.kept_accumulator`), and one batch of all rows gets ``X`` itself.
    """
    n = int(X.shape[0])
    if n == 0:
        return
    if batch_rows is None and 8 * max(1, width) * n <= _SMALL_ACC_BYTES:
        batch_rows = n  # one small batch: no free-memory query (the bits do not depend on it)
    elif batch_rows is None:
        batch_rows = default_batch_rows(width)
    batch_rows = int(batch_rows)
    if batch_rows < 1:
        raise ValueError(f"batch_rows must be >= 1, got {batch_rows}")
    batch_rows = min(batch_rows, n) if cap is None else min(batch_rows, n, cap)
    s = args.current_stream()
    if keep:
        _kept_batches(X, n, width, batch_rows, batch, s)
        return
    acc_all = xp().zeros((batch_rows, width), dtype=np.int64)
    with warnings.catch_warnings():  # small inputs give small grids: not worth a warning
        warnings.filterwarnings("ignore", message=".*under-utilization.*")
        for r0 in range(0, n, batch_rows):
            r1 = min(n, r0 + batch_rows)
            # one view of the accumulator for all the batch's launches (.args); the rows stay
            # CuPy (a launcher may run CuPy on them)
            acc = acc_all if r1 - r0 == batch_rows else acc_all[: r1 - r0]
            batch(r0, r1, X[r0:r1], args.view(acc), s)


def _kept_batches(X, n: int, width: int, batch_rows: int, batch, s) -> None:
    """:func:`run_batches` with ``keep``: a kept accumulator where it is small, its view made
    once (sliced for a last short batch), ``X`` unsliced when one batch holds every row."""
    key = None
    if 8 * max(1, width) * batch_rows <= KEPT_ACC_BYTES:
        key, acc_all, acc_view = kept_accumulator(batch_rows, width, s)
    else:
        acc_all = xp().zeros((batch_rows, width), dtype=np.int64)
        acc_view = args.view(acc_all)
    with warnings.catch_warnings():  # small inputs give small grids: not worth a warning
        warnings.filterwarnings("ignore", message=".*under-utilization.*")
        if batch_rows == n:
            batch(0, n, X, acc_view, s)
        else:
            for r0 in range(0, n, batch_rows):
                r1 = min(n, r0 + batch_rows)
                acc = acc_view if r1 - r0 == batch_rows else acc_view[: r1 - r0]
                batch(r0, r1, X[r0:r1], acc, s)
    if key is not None:
        give_back(key, acc_all, acc_view)


def launch_finish(kernel, acc, out, inv_scale, expected, group_size, bias_offset, s) -> None:
    """Launches a finish kernel (:func:`finish_kernel` or its interventional form) on one batch:
    ``kernel(acc, out, inv_scale, expected, group_size, bias_offset)``, 256 threads a block."""
    blocks = int(min(-(-(acc.shape[0] * acc.shape[1]) // 256), 65535))
    args.launch(kernel, blocks, 256, s, 0, (acc, out, inv_scale, expected, group_size,
                                           bias_offset))  # fmt: skip


def new_output(packed: PackedModel, n: int, interactions: bool):
    """The float32 output of ``n`` rows, ``(n, G, F + 1)`` or with ``interactions``
    ``(n, G, F + 1, F + 1)`` (uninitialised), its ``(n, width)`` view, and the finish kernel's
    ``group_size`` (values a group) and ``bias_offset`` (the last entry of a group: bias or
    ``[F, F]``)."""
    G = packed.num_groups
    F1 = packed.num_features + 1
    group_size = F1 * F1 if interactions else F1
    shape = (n, G, F1, F1) if interactions else (n, G, F1)
    out = xp().empty(shape, dtype=np.float32)
    return out, out.reshape(n, G * group_size), group_size, group_size - 1


def _check_batch_rows(batch_rows: int | None) -> None:
    if batch_rows is not None and int(batch_rows) < 1:
        raise ValueError(f"batch_rows must be >= 1, got {int(batch_rows)}")


def _run_small(packed: PackedModel, X, raw, interactions: bool):
    """The one-launch route (:mod:`.small`) on the rows ``X``: ``(values, flagged)``. With
    ``raw`` (the model's raw values of the same rows) the additivity check runs in the kernel
    and ``flagged`` says whether it flagged a row (``False`` without ``raw``)."""
    launch_kernel, sm = small.route(packed, interactions)
    Xd = device_rows(X, packed.num_features)
    n = int(Xd.shape[0])
    G, F1 = packed.num_groups, packed.num_features + 1
    out = xp().empty((n, G, F1, F1) if interactions else (n, G, F1), dtype=np.float32)
    if n == 0:
        return out, False
    if raw is None:
        launch_kernel(sm, Xd, Xd, out, interactions, False)
        return out, False
    Xraw = Xd if _same_values(raw, X) else _device_raw(raw, n, packed.num_features)
    return out, read_flag(*launch_kernel(sm, Xd, Xraw, out, interactions, True))


def _same_values(raw, X) -> bool:
    """Whether ``raw`` is the float32 array ``X`` (an identity encoding: no second copy)."""
    return raw is X or (
        type(raw) is type(X) and raw.dtype == np.float32 and X.dtype == np.float32
        and raw.shape == X.shape and _pointer(raw) == _pointer(X) and _pointer(X) is not None
        and raw.flags.c_contiguous and X.flags.c_contiguous
    )  # fmt: skip


def _pointer(a):
    if hasattr(a, "data") and hasattr(a.data, "ptr"):
        return int(a.data.ptr)  # CuPy
    if isinstance(a, np.ndarray):
        return int(a.__array_interface__["data"][0])
    return None


def _device_raw(raw, n: int, num_features: int):
    """The model's raw values (float32 or float64) as a C-contiguous device array."""
    if tuple(raw.shape) != (n, num_features):
        raise ValueError(f"raw rows must have shape ({n}, {num_features}), got {raw.shape}")
    dtype = np.float64 if raw.dtype == np.float64 else np.float32
    if SIM:
        return np.ascontiguousarray(np.asarray(raw), dtype=dtype)
    cp = xp()
    return cp.ascontiguousarray(cp.asarray(raw), dtype=dtype)


def checked_values(packed: PackedModel, rows, raw, interactions: bool):
    """Values of ``rows`` with the additivity check fused into the kernel, or ``None``.

    For models that take the one-launch route (:func:`distshap.plan.routes.small_fits`) and
    carry their margin arrays: ``(values, flagged)``, the values of :func:`shap_values` /
    :func:`interaction_values` and whether a row missed the independent traversal of ``raw``
    (the rows' raw values, :func:`distshap.inputs.model_matrix`) by more than half the check's
    tolerance; the caller then runs the full check (:mod:`distshap.additivity`), which decides
    and raises with its message. ``None`` for other models: the caller runs the kernels and
    the check itself.
    """
    if packed.margin is None or not small_fits(packed, interactions):
        return None
    return _run_small(packed, rows, raw, interactions)


def _run(packed: PackedModel, X, batch_rows: int | None, interactions: bool):
    if small_fits(packed, interactions):
        _check_batch_rows(batch_rows)  # the bits do not depend on it: one launch
        return _run_small(packed, X, None, interactions)[0]
    model = device_model(packed)
    X = device_rows(X, packed.num_features)
    n = int(X.shape[0])
    if interactions:
        plan = interaction_plan(packed, model)
    else:  # few rows (a batch's): the same bits through shorter chunks
        per_batch = n  # (a bad batch_rows is refused by run_batches, with its message)
        if isinstance(batch_rows, numbers.Integral) and not isinstance(batch_rows, bool):
            per_batch = min(n, max(1, int(batch_rows)))
        plan = shap_plan_of_rows(packed, model, per_batch)
    F1 = packed.num_features + 1
    out, out2, group_size, bias_offset = new_output(packed, n, interactions)
    if n == 0:
        return out
    scale = 2.0 ** (model.interaction_shift if interactions else model.shap_shift)

    # only the launchers with work; the rows as one Numba view where three or more launches
    # read them (a view costs about two CuPy arguments; the SHAP quadrature reads a transposed
    # CuPy copy of the rows instead)
    quadrature = bool(plan.quadrature)
    readers = (plan.n_table_bins > 0) + -(-model.n_oversize // 65535)
    readers += len(plan.quadrature) * -(-n // 65535) if interactions else 0
    shared_rows = readers >= 3 and (interactions or not quadrature)
    run_quadrature = launch_interaction_quadrature if interactions else launch_quadrature
    expected = model.read_only("expected_value", lambda: (model.expected_value,))[0]

    def kept_batch(r0, r1, Xb, acc, s):
        if shared_rows:
            Xb = args.view(Xb)
        if plan.n_table_bins:
            launch_tables(model, plan, Xb, acc, scale, F1, s)
        if quadrature:
            run_quadrature(model, plan, Xb, acc, scale, F1, s)
        if model.n_oversize:
            launch_fallback(model, Xb, acc, scale, F1, s, interactions)
        rows_out = out2 if r0 == 0 and r1 == n else out2[r0:r1]
        launch_finish(finish_kernel, acc, rows_out, 1.0 / scale, expected, group_size,
                      bias_offset, s)  # fmt: skip

    run_batches(X, out2.shape[1], batch_rows, kept_batch, keep=True)  # cap 1 << 24, as above
    return out


def run_slot_batches(packed: PackedModel, X, slots, consume, batch_rows: int | None = None):
    """Interaction values in pair-slot form, batch by batch, handed to ``consume``.

    For each row batch the table, quadrature and fallback kernels add the batch's upper-triangle
    and diagonal contributions to an int64 accumulator ``(rows, S)`` of pair slots
    (:mod:`distshap.pair_slots`; ``slots`` is the host :class:`~distshap.pair_slots.PairSlots`),
    then ``consume(acc, first_row, model, device_slots, inv_scale, stream)`` launches whatever
    reads it (:mod:`.pairs`) and must leave it zeroed. ``batch_rows`` (default: the budget of
    :func:`default_batch_rows` for ``S`` values a row) does not change any result.
    """
    model = device_model(packed)
    plan = interaction_plan(packed, model)
    dev = slot_arrays(packed, model, slots, plan)
    X = device_rows(X, packed.num_features)
    width = max(1, dev.num_slots)
    scale = 2.0**model.interaction_shift
    F1 = packed.num_features + 1
    small_route = small_fits(packed, True)
    readers = (plan.n_table_bins > 0) + len(plan.quadrature) + -(-model.n_oversize // 65535)

    def batch(r0, r1, Xb, acc, s):
        if dev.num_slots and small_route:  # the integers of the one-launch route's matrices
            small.launch_slots(packed, Xb, acc, dev, s)
        elif dev.num_slots:
            if readers >= 3:  # the rows as one Numba view for all their launches (as in _run)
                Xb = args.view(Xb)
            launch_tables(model, plan, Xb, acc, scale, F1, s, slots=dev)
            launch_slot_quadrature(model, plan, Xb, acc, scale, s, dev)
            launch_fallback(model, Xb, acc, scale, F1, s, True, slots=dev)
        consume(acc, r0, model, dev, 1.0 / scale, s)

    # the consumers' grids have one block row per row
    run_batches(X, width, batch_rows, batch, cap=65535)


def shap_values(packed: PackedModel, X, batch_rows: int | None = None):
    """SHAP values of every row of ``X``: CuPy float32 ``(n, G, F + 1)``, bias last.

    Parameters
    ----------
    packed : PackedModel
        Copied to the current device once and cached by digest.
    X : numpy.ndarray or cupy.ndarray (n, F)
        Kernel input: :func:`distshap.inputs.prepare_rows` of the user's rows (it applies the
        model's encoding); copied to the device when needed.
    batch_rows : int, optional
        Rows per kernel batch (default: :func:`default_batch_rows`). Results do not depend
        on it.
    """
    return _run(packed, X, batch_rows, interactions=False)


def interaction_values(packed: PackedModel, X, batch_rows: int | None = None):
    """SHAP interaction values: CuPy float32 ``(n, G, F + 1, F + 1)``, bias last.

    Parameters are those of :func:`shap_values`.
    """
    return _run(packed, X, batch_rows, interactions=True)
