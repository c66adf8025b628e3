"""The additivity check: every row's values must sum to the model's own margin.

SHAP values of a row (bias included) sum to the model's margin, and so do its interaction
values. :func:`check_additivity` compares those sums with the margin an independent traversal
of the trees gives (:mod:`distshap.kernels.margin`) and raises :class:`AdditivityError` naming
the rows and the worst difference, so a wrong result never passes silently.

The tolerance and the error class: :mod:`distshap.additivity_rule`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from distshap.additivity_rule import KERNEL_RTOL, RTOL, AdditivityError
from distshap.inputs import array_module

__all__ = ["check_additivity", "check_margin"]


def check_additivity(
    values: Any,
    margin: Any,
    what: str = "SHAP values",
    first_row: int = 0,
    target: str = "the model's margin",
) -> None:
    """Raise :class:`AdditivityError` unless each row's ``values`` sum to its ``margin``.

    Parameters
    ----------
    values : ndarray or cupy.ndarray
        ``(n, G, F+1)`` SHAP values or ``(n, G, F+1, F+1)`` interaction values.
    margin : ndarray or cupy.ndarray
        ``(n, G)`` float64 margins from :func:`distshap.kernels.margin.predict_margin`.
    what : str
        Named in the message.
    first_row : int
        Index of ``values``' first row in the whole input (a Dask chunk's offset), for the
        message.
    target : str
        What ``margin`` is, for the message (interventional SHAP of a transformed output checks
        against ``T(margin)``: :func:`distshap.interventional.apply_transform`).
    """
    xp = array_module(values)
    if xp is not np and _gpu_passes(values, margin):
        return
    axes = tuple(range(2, values.ndim))
    total = values.sum(axis=axes, dtype=xp.float64)
    scale = xp.abs(values).sum(axis=axes, dtype=xp.float64) + xp.abs(margin)
    diff = xp.abs(total - margin)
    bad = ~(diff <= RTOL * xp.maximum(scale, 1.0))  # a NaN value (or margin) fails too
    if not bool(bad.any()):
        return
    diff, total, margin, bad = (_to_host(a) for a in (diff, total, margin, bad))
    rows = np.flatnonzero(bad.any(axis=1)) + first_row
    worst = np.unravel_index(int(np.argmax(np.where(bad, diff, -1.0))), diff.shape)
    group = f", output {worst[1]}" if diff.shape[1] > 1 else ""
    raise AdditivityError(
        f"{what} of {rows.size:,} of {diff.shape[0]:,} rows{_chunk(first_row)} do not sum to "
        f"{target} "
        f"(rows {rows[:10].tolist()}{'...' if rows.size > 10 else ''}); worst: row "
        f"{worst[0] + first_row}"
        f"{group}: values sum to {total[worst]:.9g}, the trees give {margin[worst]:.9g} "
        f"(difference {diff[worst]:.3g}). This is a distshap fault or a model feature it reads "
        "wrongly: please report it with the model; check_additivity=False skips the check"
    )


def check_margin(
    values: Any, packed: Any, raw: Any, what: str = "SHAP values", first_row: int = 0
) -> None:
    """:func:`check_additivity` of ``values`` against the margin of the rows ``raw`` under the
    margin arrays of the packed model ``packed`` (:func:`distshap.kernels.margin.predict_margin`).

    On a GPU (CuPy ``values`` and ``raw``) the traversal and the check run in one launch
    and the margins are computed again only where a row misses (for the error message).
    """
    if array_module(values) is not np and array_module(raw) is not np:
        launched = _launch(values, lambda v: _traversal().check_rows(packed, _rows(raw), v, _TIGHT))
        if launched is not None and not _read(launched):
            return
    from distshap.kernels.margin import predict_margin

    check_additivity(values, predict_margin(packed, raw), what, first_row)


_TIGHT = KERNEL_RTOL  # the kernel's tolerance: every row the full check fails is flagged


def _traversal():
    from distshap.kernels.cuda import traversal

    return traversal


def _rows(raw: Any) -> Any:
    import cupy

    return cupy.ascontiguousarray(raw)


def _launch(values: Any, launch: Any):
    """``launch(v)`` on ``v``, the ``(n, G, W)`` view of ``values``, or ``None`` where the
    kernel does not take them (not float32, not C-contiguous)."""
    if values.ndim < 3 or values.dtype != np.float32 or not values.flags.c_contiguous:
        return None
    if values.size == 0:
        return None
    n, groups = values.shape[:2]
    return launch(values.reshape(n, groups, -1))


def _read(launched) -> bool:
    from distshap.kernels.cuda.small.model import read_flag

    return read_flag(*launched)


def _gpu_passes(values: Any, margin: Any) -> bool:
    """Whether every row passes the in-kernel check (``False``: the full check decides)."""
    import cupy

    if not isinstance(margin, cupy.ndarray) or margin.shape != values.shape[:2]:
        return False
    margin = cupy.ascontiguousarray(margin, dtype=cupy.float64)
    launched = _launch(values, lambda v: _traversal().check_values(v, margin, _TIGHT))
    return launched is not None and not _read(launched)


def _chunk(first_row: int) -> str:
    return f" (a chunk from row {first_row:,})" if first_row else ""


def _to_host(a: Any) -> np.ndarray:
    return a.get() if hasattr(a, "get") else np.asarray(a)
