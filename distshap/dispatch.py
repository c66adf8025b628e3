"""One device's work on a block of rows: the path every entry point takes.

User rows -> the model's raw values (:func:`distshap.inputs.model_matrix`) -> their encoding
-> the kernels of the resolved backend -> the additivity check against an independent tree
traversal -> values. :class:`~distshap.TreeExplainer` calls it for in-memory rows (whole, or
batch by batch with a progress bar) and each Dask chunk runs it on its worker (the STUMPY
shape: the distributed layer calls the single-device path, it does not re-implement it).

With a :class:`~distshap.interventional.Background` the values are interventional
(:mod:`distshap.interventional`): the rows' margins (the same independent traversal) feed the
``model_output`` transform and the check, which then compares each row's sum with
``T(margin, y)``.
"""

from __future__ import annotations

from typing import Any

from distshap import kernels
from distshap.additivity import check_additivity, check_margin
from distshap.inputs import is_cupy, model_matrix
from distshap.interventional import (
    apply_transform,
    bias_values,
    check_background,
    check_labels,
    transform_id,
)
from distshap.kernels.interventional_math import LOG_LOSS, PROBABILITY, RAW
from distshap.kernels.margin import predict_margin

__all__ = ["explain_rows"]


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
    """Values of the rows of ``X``: float32 ``(n, G, F+1)`` (``(n, G, F+1, F+1)``).

    Parameters
    ----------
    packed : PackedModel
    X : ndarray, cupy.ndarray, pandas DataFrame or scipy.sparse matrix
        Rows as :func:`distshap.inputs.prepare_rows` takes them.
    interactions : bool
        Interaction values instead of SHAP values.
    backend : {"auto", "cpu", "cuda"}
        Resolved here (:func:`distshap.kernels.resolve_backend`).
    check : bool
        The additivity check (where ``packed`` carries its margin arrays).
    first_row : int
        Row index of ``X[0]`` in the whole input, for error messages.
    allow_empty : bool
        Accept zero rows (a Dask chunk may be empty).
    background : Background, optional
        Interventional SHAP over these background rows
        (:func:`distshap.interventional.build_background` for ``packed``); ``None``: the
        path-dependent values.
    model_output : {"raw", "probability", "log_loss"}
        What interventional values explain (:func:`distshap.interventional.transform_id`);
        anything but ``"raw"`` needs ``background``, and interactions only ``"raw"``.
    y : array (n,), optional
        Labels of the rows, for ``model_output="log_loss"`` (ignored otherwise).

    Returns
    -------
    ndarray or cupy.ndarray
        CuPy for CuPy input (the kernel may still be running), NumPy otherwise.

    Raises
    ------
    ValueError
        A ``model_output`` without ``background`` or that the model does not support,
        interactions of a transformed output, missing or malformed labels, a background of
        another model.
    AdditivityError
        With ``check``, rows whose values do not sum to the margin (or ``T(margin, y)``).
    """
    raw = model_matrix(X, packed, allow_empty)  # the values the model compares
    rows = packed.encoding.apply(raw)  # ... as the kernels compare them
    if background is not None:
        return _interventional(packed, raw, rows, interactions, backend, check, first_row,
                               background, model_output, y)  # fmt: skip
    if model_output != "raw":
        raise ValueError(
            f"model_output={model_output!r} is defined for interventional SHAP only: pass "
            "background data (e.g. a sample of the training rows), or use model_output='raw'"
        )
    module = kernels.get_backend(kernels.resolve_backend(backend, cupy_data=is_cupy(rows)))
    fused = check and packed.margin is not None and hasattr(module, "checked_values")
    # the backend may run the same check inside its kernel (None: not for this model)
    out = module.checked_values(packed, rows, raw, interactions, first_row) if fused else None
    if out is None:
        out = (module.interaction_values if interactions else module.shap_values)(packed, rows)
    else:
        check = False  # checked
    if check and packed.margin is not None:
        if is_cupy(out) and not is_cupy(raw):
            import cupy

            raw = cupy.asarray(raw)  # the traversal runs where the values are
        what = "interaction values" if interactions else "SHAP values"
        check_margin(out, packed.margin, raw, what, first_row)
    if is_cupy(out) and not is_cupy(rows):
        out = out.get()
    return out


_TARGETS = {
    RAW: "the model's margin",
    PROBABILITY: "the model's probability (the logistic of its margin)",
    LOG_LOSS: "the log loss of the model's probability for the labels y",
}


def _interventional(
    packed: Any,
    raw: Any,
    rows: Any,
    interactions: bool,
    backend: str,
    check: bool,
    first_row: int,
    background: Any,
    model_output: str,
    y: Any,
) -> Any:
    """:func:`explain_rows` with a background: interventional values, checked against T."""
    check_background(background, packed)
    transform = transform_id(model_output, packed)
    if interactions and transform != RAW:
        raise ValueError(
            f"interaction values explain the raw margin only, not model_output={model_output!r}"
            ": use model_output='raw', or SHAP values for the transformed output"
        )
    y = check_labels(y, rows.shape[0], transform)
    module = kernels.get_backend(kernels.resolve_backend(backend, cupy_data=is_cupy(rows)))
    if y is not None and is_cupy(rows) and not is_cupy(y):
        import cupy

        y = cupy.asarray(y)
    # the rows' margins, by the independent traversal, where the rows are
    x_margin = predict_margin(packed.margin, raw) if (check or transform != RAW) else None
    out = module.interventional_values(
        packed,
        background,
        rows,
        transform=transform,
        x_margin=x_margin if transform != RAW else None,
        y=y,
        bias=bias_values(background, transform, y),
        interactions=interactions,
    )
    if check:
        target = apply_transform(x_margin, transform, y)
        if is_cupy(out) and not is_cupy(target):
            import cupy

            target = cupy.asarray(target)
        what = "interventional " + ("interaction values" if interactions else "SHAP values")
        check_additivity(out, target, what, first_row, _TARGETS[transform])
    if is_cupy(out) and not is_cupy(rows):
        out = out.get()
    return out
