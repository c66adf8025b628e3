"""One device's work on a block of rows: the path every entry point takes.

User rows -> the model's raw values (:func:`distshap.inputs.model_matrix`) -> their encoding
-> the kernels of the resolved backend -> the additivity check against an independent tree
traversal -> values. :class:`~distshap.TreeExplainer` calls it for in-memory rows (whole, or
batch by batch with a progress bar) and each Dask chunk runs it on its worker (the STUMPY
shape: the distributed layer calls the single-device path, it does not re-implement it).
"""

from __future__ import annotations

from typing import Any

from distshap import kernels
from distshap.additivity import check_additivity
from distshap.inputs import is_cupy, model_matrix
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

    Returns
    -------
    ndarray or cupy.ndarray
        CuPy for CuPy input (the kernel may still be running), NumPy otherwise.
    """
    raw = model_matrix(X, packed, allow_empty)  # the values the model compares
    rows = packed.encoding.apply(raw)  # ... as the kernels compare them
    module = kernels.get_backend(kernels.resolve_backend(backend, cupy_data=is_cupy(rows)))
    out = (module.interaction_values if interactions else module.shap_values)(packed, rows)
    if check and packed.margin is not None:
        if is_cupy(out) and not is_cupy(raw):
            import cupy

            raw = cupy.asarray(raw)  # the traversal runs where the values are
        what = "interaction values" if interactions else "SHAP values"
        check_additivity(out, predict_margin(packed.margin, raw), what, first_row)
    if is_cupy(out) and not is_cupy(rows):
        out = out.get()
    return out
