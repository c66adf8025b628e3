"""One device's work on a block of rows: the path every entry point takes.

User rows -> the model's raw values (:func:`distshap.inputs.model_matrix`, the one conversion)
-> their encoding -> the kernels of the request's backend -> the additivity check against an
independent tree traversal -> values. :class:`~distshap.TreeExplainer` runs its
:class:`~distshap.request.Request` here for in-memory rows (whole, or batch by batch with a
progress bar) and each Dask chunk runs the client's request here on its worker (the STUMPY
shape: the distributed layer calls the single-device path, it does not re-implement it).

With a background the values are interventional (:mod:`distshap.interventional`): the rows'
margins (the same independent traversal) feed the ``model_output`` transform and the check,
which then compares each row's sum with ``T(margin, y)``.
"""

from __future__ import annotations

from typing import Any

from distshap import kernels
from distshap.additivity import check_additivity, check_margin
from distshap.inputs import is_cupy, model_matrix, on_gpu
from distshap.interventional import apply_transform, bias_values, check_labels
from distshap.kernels.interventional_math import RAW
from distshap.kernels.margin import predict_margin
from distshap.request import Request, make_request
from distshap.sparse_blocks import dense_rows

__all__ = ["explain_rows", "run_request"]


def explain_rows(
    packed: Any,
    X: Any,
    interactions: bool = False,
    backend: str = "auto",
    check: bool = True,
    first_row: int = 0,
    allow_empty: bool = False,
    *,
    background: Any = None,
    model_output: str = "raw",
    y: Any = None,
) -> Any:
    """Values of the rows of ``X`` for one device: float32 ``(n, G, F+1)`` (``(n, G, F+1, F+1)``).

    Builds the :class:`~distshap.request.Request` of these arguments
    (:func:`~distshap.request.make_request`), checks the labels and runs
    :func:`run_request`.

    Parameters
    ----------
    packed : PackedModel
    X : ndarray, cupy.ndarray, pandas DataFrame or scipy.sparse matrix
        Rows as :func:`distshap.inputs.model_matrix` takes them.
    interactions, backend, check, background, model_output
        As :func:`distshap.request.make_request` takes them.
    first_row : int
        Row index of ``X[0]`` in the whole input, for error messages.
    allow_empty : bool
        Accept zero rows (a Dask chunk may be empty).
    y : array (n,), optional
        Labels of the rows, for ``model_output="log_loss"`` (ignored otherwise).

    Returns
    -------
    ndarray or cupy.ndarray
        CuPy for CuPy input (the kernel may still be running), NumPy otherwise.

    Raises
    ------
    ValueError
        What :func:`~distshap.request.make_request` refuses; missing or malformed labels.
    AdditivityError
        With ``check``, rows whose values do not sum to the margin (or ``T(margin, y)``).
    """
    request = make_request(packed, interactions=interactions, backend=backend, check=check,
                           background=background, model_output=model_output,
                           cupy_data=on_gpu(X))  # fmt: skip
    raw = model_matrix(X, packed, allow_empty)  # the one conversion
    y = check_labels(y, raw.shape[0], request.transform)
    return run_request(packed, raw, request, y, first_row)


def run_request(packed: Any, raw: Any, request: Request, y: Any = None, first_row: int = 0) -> Any:
    """:func:`explain_rows` of converted rows and a built request.

    Parameters
    ----------
    packed : PackedModel
    raw : ndarray, cupy.ndarray or SparseRows
        The rows' values as the model compares them (:func:`distshap.inputs.model_matrix`:
        the caller converts them, once).
    request : Request
        Built by :func:`~distshap.request.make_request` (its backend resolved, or ``"auto"``
        for a Dask worker's NumPy chunk).
    y : array (n,), optional
        Labels as :func:`~distshap.interventional.check_labels` returns them (the caller
        checks them, once), for the log loss.
    first_row : int
        Row index of ``raw[0]`` in the whole input, for error messages.
    """
    raw = dense_rows(raw)  # scipy.sparse rows: a block of them, dense now
    rows = packed.encoding.apply(raw)  # the values as the kernels compare them
    backend = request.backend
    if backend == "auto":  # a Dask worker with NumPy chunks: its own device decides
        backend = kernels.resolve_backend(backend, cupy_data=is_cupy(rows))
    module = kernels.get_backend(backend)
    if request.method == "banzhaf":
        out = _banzhaf(backend, packed, rows, request)
    elif request.background is not None:
        out = _interventional(module, packed, raw, rows, request, y, first_row)
    else:
        out = _path_dependent(module, packed, raw, rows, request, first_row, backend)
    if is_cupy(out) and not is_cupy(rows):
        out = out.get()
    return out


def _banzhaf(backend: str, packed: Any, rows: Any, request: Request) -> Any:
    """Banzhaf (interaction) values of the raw margin, unchecked: they sum to no traversal's
    output (:mod:`distshap.explainer_banzhaf`)."""
    from distshap.kernels.banzhaf import banzhaf_backend

    module = banzhaf_backend(backend)
    if request.background is None:
        return module.banzhaf_values(packed, rows, request.interactions)
    bias = bias_values(request.background, RAW)
    return module.interventional_banzhaf_values(packed, request.background, rows, bias=bias,
                                                interactions=request.interactions)  # fmt: skip


def _path_dependent(
    module: Any,
    packed: Any,
    raw: Any,
    rows: Any,
    request: Request,
    first_row: int,
    backend: str,
) -> Any:
    """Tree-path-dependent values, checked against the margin."""
    interactions, check = request.interactions, request.check
    fused = check and packed.margin is not None and hasattr(module, "checked_values")
    # the backend may run the same check inside its kernel or graph (None: not for this call)
    fused = module.checked_values(packed, rows, raw, interactions) if fused else None
    if fused is None:
        if backend == "cuda" and check and packed.margin is not None and rows is raw:
            from distshap.kernels.cuda.runtime.device import xp

            rows = raw = xp().asarray(rows)  # one copy for the kernels and the check
        out = (module.interaction_values if interactions else module.shap_values)(packed, rows)
    else:
        out, check = fused  # a flagged row: the full check decides, with its message
    if check and packed.margin is not None:
        if is_cupy(out) and not is_cupy(raw):
            import cupy

            raw = cupy.asarray(raw)  # the traversal runs where the values are
        check_margin(out, packed, raw, request.what, first_row)
    return out


def _interventional(
    module: Any, packed: Any, raw: Any, rows: Any, request: Request, y: Any, first_row: int
) -> Any:
    """Interventional values, checked against ``T(margin, y)``."""
    transform, background = request.transform, request.background
    if y is not None and is_cupy(rows) and not is_cupy(y):
        import cupy

        y = cupy.asarray(y)
    # the rows' margins, by the independent traversal, where the rows are
    x_margin = predict_margin(packed, raw) if (request.check or transform != RAW) else None
    out = module.interventional_values(
        packed,
        background,
        rows,
        transform=transform,
        x_margin=x_margin if transform != RAW else None,
        y=y,
        bias=bias_values(background, transform, y),
        interactions=request.interactions,
    )
    if request.check:
        target = apply_transform(x_margin, transform, y)
        if is_cupy(out) and not is_cupy(target):
            import cupy

            target = cupy.asarray(target)
        check_additivity(out, target, request.what, first_row, request.target)
    return out
