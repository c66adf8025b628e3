"""Shapley-Taylor interaction index of order 2 of a packed model's rows (exact, CPU or GPU).

The Shapley-Taylor index (Sundararajan, Dhamdhere & Agarwal, ICML 2020) splits a prediction
into main effects and pairwise interactions that add up to it, like SHAP interaction values do,
but with other axioms: a feature's main effect is its effect alone, ``v({i}) - v(∅)``, and a
pair's index weighs the pair's discrete second derivative by the law of the players that come
before the first of the two in a random order. The game is the path-dependent one TreeSHAP
explains. The exact per-path closed form, its Gauss-Legendre evaluation and the cost (against
the SHAP interaction values' DP) are in :mod:`distshap.kernels.taylor_cpu`; the GPU kernel is
:mod:`distshap.kernels.cuda.taylor`.

:func:`shap_taylor_values` prepares rows as :func:`distshap.dispatch.explain_rows` does (the
model's raw values, then its encoding), runs the kernel of the resolved backend and checks
additivity (each row's entries sum to the margin of an independent tree traversal).
"""

from __future__ import annotations

from typing import Any

from distshap.additivity import check_additivity
from distshap.inputs import is_cupy, model_matrix
from distshap.kernels import resolve_backend
from distshap.kernels.margin import predict_margin
from distshap.packed import PackedModel

__all__ = ["shap_taylor_values"]


def _kernel(backend: str):
    if backend == "cuda":
        from distshap.kernels.cuda.taylor import taylor_values
    else:
        from distshap.kernels.taylor_cpu import taylor_values
    return taylor_values


def shap_taylor_values(
    packed: PackedModel,
    X: Any,
    backend: str = "auto",
    check: bool = True,
    first_row: int = 0,
    allow_empty: bool = False,
) -> Any:
    """Order-2 Shapley-Taylor interaction index of every row of ``X``.

    Parameters
    ----------
    packed : PackedModel
    X : ndarray, cupy.ndarray, pandas DataFrame or scipy.sparse matrix
        ``(n, F)`` rows as :func:`distshap.inputs.prepare_rows` takes them; NaN is missing.
    backend : {"auto", "cpu", "cuda"}
        Resolved by :func:`distshap.kernels.resolve_backend`.
    check : bool
        Check that each row's entries sum to the model's margin (where ``packed`` carries its
        margin arrays), raising :class:`~distshap.additivity_rule.AdditivityError` otherwise.
    first_row : int
        Row index of ``X[0]`` in the whole input, for error messages.
    allow_empty : bool
        Accept zero rows (a Dask chunk may be empty).

    Returns
    -------
    ndarray or cupy.ndarray
        float32 ``(n, G, F + 1, F + 1)``: main effects ``v({i}) - v(∅)`` on the diagonal, each
        pair's index split equally between ``[i, j]`` and ``[j, i]``, the expected value (base
        score included) at ``[F, F]``, zeros elsewhere in the bias row and column. CuPy for
        CuPy input, NumPy otherwise.
    """
    if not isinstance(packed, PackedModel):
        raise TypeError(f"expected a PackedModel, got {type(packed).__name__}")
    raw = model_matrix(X, packed, allow_empty)  # the values the model compares
    rows = packed.encoding.apply(raw)  # ... as the kernels compare them
    out = _kernel(resolve_backend(backend, cupy_data=is_cupy(rows)))(packed, rows)
    if check and packed.margin is not None:
        if is_cupy(out) and not is_cupy(raw):
            import cupy

            raw = cupy.asarray(raw)  # the traversal runs where the values are
        check_additivity(out, predict_margin(packed, raw), "Shapley-Taylor values", first_row)
    if is_cupy(out) and not is_cupy(rows):
        out = out.get()
    return out
