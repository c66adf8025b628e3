"""Top pairs and exact summary partials of one device's in-memory rows.

The single-device steps under :mod:`distshap.pair_interactions` (which adds Dask input and the
tables) and :mod:`distshap.cluster.dask_pairs` (which runs them on each row chunk): the CPU
backend's slot values batch by batch (:func:`~distshap.kernels.cpu.interaction_slot_values`,
reduced here), the CUDA backend's reductions on the device (:mod:`distshap.kernels.cuda.pairs`),
each batch checked for additivity. Summaries are exact integer partials
(:func:`summary_partial`) that add in any grouping (:func:`combine_partials`) and finish once
(:func:`finish_summary`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit, prange

from distshap.additivity import check_additivity
from distshap.inputs import array_module, is_cupy, model_matrix
from distshap.kernels import get_backend, resolve_backend
from distshap.kernels.margin import predict_margin
from distshap.pair_slots import PairSlots, check_k, interaction_shift, pair_slots, select_top_pairs
from distshap.parallel import run_parallel

__all__ = [
    "CPU_BATCH_BYTES",
    "combine_partials",
    "finish_summary",
    "summary_partial",
    "top_interactions_rows",
]

#: Slot values (float32) of one CPU row batch at most, in bytes.
CPU_BATCH_BYTES = 64 << 20


@njit(parallel=True, nogil=True, cache=True)
def _summary_kernel(values, scale, signed, hi, lo, bad):
    n, S = values.shape
    block = 1024
    limit = 2.0**62
    for b in prange((S + block - 1) // block):
        e1 = min(S, (b + 1) * block)
        for r in range(n):
            for e in range(b * block, e1):
                v = values[r, e]
                if v == 0.0:
                    continue
                x = np.float64(v) * scale
                if not abs(x) < limit:  # NaN, or beyond the model's bound (a bug)
                    bad[0] = 1
                    continue
                q = np.int64(np.rint(x))
                if not signed and q < 0:
                    q = -q
                hi[e] += q >> 32
                lo[e] += q & 0xFFFFFFFF


@njit(parallel=True, nogil=True, cache=True)
def _row_sums_kernel(values, slot_offsets, num_pairs, expected_value, sums, scales):
    n = values.shape[0]
    G = num_pairs.shape[0]
    for r in prange(n):
        for g in range(G):
            a = slot_offsets[g]
            mid = a + num_pairs[g]
            total = 0.0
            absolute = 0.0
            for e in range(a, slot_offsets[g + 1]):
                v = np.float64(values[r, e])
                weight = 2.0 if e < mid else 1.0  # [i, j] and [j, i]
                total += weight * v
                absolute += weight * abs(v)
            sums[r, g] = total + expected_value[g]
            scales[r, g] = absolute + abs(expected_value[g])


def _row_sums(values: np.ndarray, slots: PairSlots, expected_value: np.ndarray):
    n = values.shape[0]
    sums = np.empty((n, slots.num_groups), np.float64)
    scales = np.empty_like(sums)
    run_parallel(_row_sums_kernel, values, slots.slot_offsets, slots.num_pairs,
                 np.asarray(expected_value, np.float64), sums, scales)  # fmt: skip
    return sums, scales


def _check_sums(sums: Any, scales: Any, margin: Any, first_row: int) -> None:
    """The additivity check on per-(row, group) sums: ``check_additivity`` sums its values and
    their absolute values, so two columns ``(t + a) / 2`` and ``(t - a) / 2`` (``a >= |t|``)
    stand for a row of total ``t`` and absolute sum ``a``."""
    xp = array_module(sums)
    columns = xp.stack([(sums + scales) / 2, (sums - scales) / 2], axis=-1)
    check_additivity(columns, margin, "interaction values", first_row)


def _host(a: Any) -> np.ndarray:
    return a.get() if hasattr(a, "get") else np.asarray(a)


def _prepare(packed: Any, X: Any, backend: str) -> tuple[Any, Any, str]:
    raw = model_matrix(X, packed, allow_empty=True)
    rows = packed.encoding.apply(raw)
    return raw, rows, resolve_backend(backend, cupy_data=is_cupy(rows))


def _cpu_batches(n: int, slots: PairSlots, batch_rows: int | None) -> int:
    if batch_rows is None:
        batch_rows = CPU_BATCH_BYTES // (4 * max(1, slots.num_slots))
    batch_rows = int(batch_rows)
    if batch_rows < 1:
        raise ValueError(f"batch_rows must be >= 1, got {batch_rows}")
    return max(1, min(batch_rows, max(n, 1)))


def _check_margin(packed: Any, raw: Any, sums: Any, scales: Any, first_row: int) -> None:
    if packed.margin is None:
        return
    if is_cupy(sums) and not is_cupy(raw):
        import cupy

        raw = cupy.asarray(raw)
    _check_sums(sums, scales, predict_margin(packed, raw), first_row)


def _cpu_slot_batches(packed: Any, raw: Any, rows: Any, slots: PairSlots,
                      batch_rows: int | None, check: bool, first_row: int):  # fmt: skip
    """``(r0, r1, slot values)`` of the CPU kernel batch by batch, each batch checked for
    additivity first (when ``check``)."""
    n = int(rows.shape[0])
    step = _cpu_batches(n, slots, batch_rows)
    cpu = get_backend("cpu")
    for r0 in range(0, n, step):
        r1 = min(n, r0 + step)
        slot_values = cpu.interaction_slot_values(packed, rows[r0:r1], slots)
        if check:
            _check_margin(packed, raw[r0:r1],
                          *_row_sums(slot_values, slots, packed.expected_value),
                          first_row + r0)  # fmt: skip
        yield r0, r1, slot_values


def top_interactions_rows(
    packed: Any,
    X: Any,
    k: int = 10,
    backend: str = "auto",
    *,
    check_additivity: bool = True,
    batch_rows: int | None = None,
    first_row: int = 0,
) -> tuple[Any, Any]:
    """The ``k`` strongest feature pairs of every row of in-memory rows ``X`` (one device).

    Parameters and results are those of :func:`distshap.pair_interactions.top_interactions`
    (``X`` not a Dask collection), with the group axis always kept.
    """
    k = check_k(k, packed.num_features)
    raw, rows, name = _prepare(packed, X, backend)
    slots = pair_slots(packed)
    n, G = int(rows.shape[0]), packed.num_groups
    if name == "cuda":
        from distshap.kernels.cuda import pairs as cuda_pairs  # (CUDA on first use)

        get_backend("cuda")  # a clear error where no GPU is usable
        pairs, values, sums = cuda_pairs.top_interactions(
            packed, rows, slots, k, batch_rows, with_sums=check_additivity
        )
        if check_additivity:
            _check_margin(packed, raw, *sums, first_row)
        if not is_cupy(rows):
            pairs, values = _host(pairs), _host(values)
    else:
        pairs = np.empty((n, G, k, 2), np.int32)
        values = np.empty((n, G, k), np.float32)
        for r0, r1, slot_values in _cpu_slot_batches(packed, raw, rows, slots, batch_rows,
                                                     check_additivity, first_row):  # fmt: skip
            pairs[r0:r1], values[r0:r1] = select_top_pairs(slot_values, slots, k)
    return pairs, values


def summary_partial(
    packed: Any,
    X: Any,
    signed: bool = False,
    backend: str = "auto",
    *,
    check_additivity: bool = True,
    batch_rows: int | None = None,
    first_row: int = 0,
) -> np.ndarray:
    """Exact sums over the rows of ``X``, the unit of the data-set reduction.

    Returns
    -------
    ndarray
        int64 ``(2, S + 1)``: ``[0, :S]`` and ``[1, :S]`` the high and low parts of each slot's
        sum of ``round(|value| * 2**s)`` (``value`` when ``signed``), the sum being ``hi * 2**32
        + lo`` with ``0 <= lo < 2**32``; ``[0, S]`` the number of rows. Partials add as integers
        (:func:`combine_partials`), exactly, in any grouping.
    """
    raw, rows, name = _prepare(packed, X, backend)
    slots = pair_slots(packed)
    n, S = int(rows.shape[0]), slots.num_slots
    out = np.zeros((2, S + 1), np.int64)
    out[0, S] = n
    if n == 0:
        return out
    if name == "cuda":
        from distshap.kernels.cuda import pairs as cuda_pairs

        get_backend("cuda")
        hi, lo, sums = cuda_pairs.summary_sums(
            packed, rows, slots, signed, batch_rows, with_sums=check_additivity
        )
        if check_additivity:
            _check_margin(packed, raw, *sums, first_row)
        out[0, :S], out[1, :S] = _host(hi), _host(lo)
    else:
        scale = 2.0 ** interaction_shift(packed)
        hi = np.zeros(S, np.int64)
        lo = np.zeros(S, np.int64)
        bad = np.zeros(1, np.int64)
        for _, _, slot_values in _cpu_slot_batches(packed, raw, rows, slots, batch_rows,
                                                   check_additivity, first_row):  # fmt: skip
            run_parallel(_summary_kernel, slot_values, scale, bool(signed), hi, lo, bad)
        if bad[0]:
            raise RuntimeError(
                "an interaction value is NaN or beyond the model's bound: a distshap bug, "
                "please report it with the model"
            )
        out[0, :S], out[1, :S] = hi, lo
    return _normalise(out)


def _normalise(partial: np.ndarray) -> np.ndarray:
    """Carry the low parts' upper bits into the high parts (``0 <= lo < 2**32``)."""
    S = partial.shape[1] - 1
    carry = partial[1, :S] >> 32
    partial[0, :S] += carry
    partial[1, :S] -= carry << 32
    return partial


def combine_partials(*partials: np.ndarray) -> np.ndarray:
    """The partial of the union of the rows of ``partials`` (exact integer sums)."""
    total = np.sum(np.stack(partials), axis=0, dtype=np.int64)
    return _normalise(total)


def finish_summary(partial: np.ndarray, packed: Any, signed: bool = False) -> np.ndarray:
    """The ``(G, F+1, F+1)`` float64 summary of a (combined) partial (module docstring)."""
    slots = pair_slots(packed)
    S = slots.num_slots
    partial = _normalise(np.array(partial, dtype=np.int64, copy=True))
    if partial.shape != (2, S + 1):
        raise ValueError(
            f"a partial of this model has shape {(2, S + 1)}, got {partial.shape}: pass the "
            "output of summary_partial or combine_partials for the same model"
        )
    n = int(partial[0, S])
    if n <= 0:
        raise ValueError("the summary of zero rows is undefined: pass at least one row")
    total = partial[0, :S].astype(np.float64) * 2.0**32 + partial[1, :S].astype(np.float64)
    mean = total * 2.0 ** -interaction_shift(packed) / n
    G, F1 = slots.num_groups, slots.num_features + 1
    out = np.zeros((G, F1, F1), np.float64)
    group = np.repeat(np.arange(G), np.diff(slots.slot_offsets))
    out[group, slots.slot_i, slots.slot_j] = mean
    out[group, slots.slot_j, slots.slot_i] = mean
    ev = np.asarray(packed.expected_value, np.float32).astype(np.float64)  # as the rows hold it
    out[:, F1 - 1, F1 - 1] = ev if signed else np.abs(ev)
    return out
