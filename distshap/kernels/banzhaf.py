"""The Banzhaf kernels of a backend: :func:`banzhaf_backend`.

Both modules offer ``banzhaf_values(packed, rows, interactions)`` (path-dependent) and
``interventional_banzhaf_values(packed, background, rows, *, bias, interactions)``, float32
outputs in the SHAP kernels' layouts: the CPU's (:mod:`distshap.kernels.banzhaf_cpu`) and the
GPU's (:mod:`distshap.kernels.cuda.banzhaf`).
"""

from __future__ import annotations

from types import ModuleType

__all__ = ["banzhaf_backend"]


def banzhaf_backend(name: str) -> ModuleType:
    """The Banzhaf kernel module of backend ``name`` (``"cpu"`` or ``"cuda"``, resolved)."""
    if name == "cpu":
        from distshap.kernels import banzhaf_cpu

        return banzhaf_cpu
    if name == "cuda":
        from distshap.kernels.cuda import banzhaf

        return banzhaf
    raise ValueError(f"unknown backend {name!r}: use 'cpu' or 'cuda'")
