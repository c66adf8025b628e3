"""Kernels: the packed model and a float32 row block -> SHAP / interaction values.

One function pair per backend, same signature (the STUMPY pattern: the distributed layer calls
these single-device functions, it never re-implements them):

* :mod:`distshap.kernels.cpu` - ``shap_values(packed, X)``, ``interaction_values(packed, X)``
  with ``X`` a C-contiguous float32 NumPy array; return NumPy float32 arrays of shape
  ``(n, G, F+1)`` / ``(n, G, F+1, F+1)``.
* :mod:`distshap.kernels.cuda` - the same names; ``X`` a NumPy or CuPy float32 array; return
  CuPy arrays. Imported lazily: importing distshap never touches CUDA.
"""

from __future__ import annotations

__all__ = ["cuda_available", "get_backend"]


def cuda_available() -> bool:
    """Whether a CUDA GPU can be used (imports numba.cuda only when called)."""
    import importlib.util

    if importlib.util.find_spec("cupy") is None:  # the CUDA backend returns CuPy arrays
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
