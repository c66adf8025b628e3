"""Kernels: the packed model and a row block -> SHAP / interaction values.

One function pair per backend, same signature (the STUMPY pattern: the distributed layer calls
these single-device functions, it never re-implements them):

* :mod:`distshap.kernels.cpu` - ``shap_values(packed, X)``, ``interaction_values(packed, X)``
  with ``X`` a float32 NumPy array; return NumPy float32 arrays of shape ``(n, G, F+1)`` /
  ``(n, G, F+1, F+1)``.
* :mod:`distshap.kernels.cuda` - the same names; ``X`` a NumPy or CuPy array; return CuPy
  arrays. A package, imported lazily: importing distshap never touches CUDA.

Shared by both: :mod:`~distshap.kernels.treeshap` (the split rule and the TreeSHAP recursions,
plain Python compiled for each target) and :mod:`~distshap.parallel` (concurrent calls
into parallel CPU code, safe under every Numba threading layer). :mod:`~distshap.kernels.margin`
is the independent traversal behind the additivity check.
"""

from __future__ import annotations

import functools
import importlib.util

__all__ = ["BACKENDS", "cuda_available", "get_backend", "resolve_backend"]

#: Backend names a user may ask for.
BACKENDS = ("auto", "cpu", "cuda")


@functools.cache
def _cupy_installed() -> bool:
    """Whether CuPy can be imported (looked up once a process: the lookup scans ``sys.path``)."""
    return importlib.util.find_spec("cupy") is not None


def cuda_available() -> bool:
    """Whether a CUDA GPU can be used (imports numba.cuda only when called)."""
    if not _cupy_installed():  # the CUDA backend returns CuPy arrays
        return False
    try:
        from numba import cuda

        return bool(cuda.is_available())
    except Exception:  # numba without CUDA support, no driver, ...
        return False


def get_backend(name: str):
    """Return the kernel module of backend ``name`` (``"cpu"`` or ``"cuda"``)."""
    if name == "cpu":
        from distshap.kernels import cpu

        return cpu
    if name == "cuda":
        if not cuda_available():
            raise RuntimeError(
                "backend='cuda' needs an NVIDIA GPU with a working driver, numba-cuda and cupy "
                "(pip install 'distshap[gpu]'); here one of them is missing: use "
                "backend='cpu' or backend='auto'"
            )
        from distshap.kernels import cuda

        return cuda
    raise ValueError(f"unknown backend {name!r}: use 'auto', 'cpu' or 'cuda'")


def resolve_backend(requested: str, cupy_data: bool = False) -> str:
    """The one place a requested backend becomes ``"cpu"`` or ``"cuda"``.

    Parameters
    ----------
    requested : {"auto", "cpu", "cuda"}
        ``"auto"`` picks CUDA for CuPy data, or when a GPU is visible here; the CPU otherwise.
    cupy_data : bool
        Whether the rows to explain are CuPy arrays (they need the CUDA backend).

    Raises
    ------
    ValueError
        An unknown name.
    TypeError
        CuPy data with ``"cpu"``.
    RuntimeError
        ``"cuda"`` where no usable GPU is (see :func:`get_backend`).
    """
    if requested not in BACKENDS:
        raise ValueError(f"unknown backend {requested!r}: use 'auto', 'cpu' or 'cuda'")
    if requested == "cpu" and cupy_data:
        raise TypeError(
            "X holds CuPy (GPU) data but the backend is 'cpu': pass NumPy data (X.get(), or "
            "X.map_blocks(cupy.asnumpy) for a Dask array) or use backend='cuda' / 'auto'"
        )
    if requested == "auto":
        return "cuda" if (cupy_data or cuda_available()) else "cpu"
    if requested == "cuda":
        get_backend("cuda")  # a clear error here when no GPU can be used
    return requested
