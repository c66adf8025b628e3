"""Banzhaf values and Banzhaf interaction values on the GPU (Numba CUDA): the public entry
points.

Same entry points and layouts as :mod:`distshap.kernels.banzhaf_cpu`: ``banzhaf_values(packed,
X, interactions)`` and ``interventional_banzhaf_values(packed, background, X, *, bias,
interactions)``, float32 CuPy outputs (NumPy under the CUDA simulator). The kernel is
:mod:`distshap.kernels.cuda.banzhaf_tiles` (the path-dependent game by the product form, the
interventional one by pattern tables and background masks). Paths of more than :data:`MAX_K`
features (their pattern is no int64 mask) run on the CPU kernels.
"""

from __future__ import annotations

import numpy as np

from distshap.kernels.cuda.banzhaf_tiles import background_values, kernel_ptx, product_values
from distshap.kernels.cuda.runtime.device import xp
from distshap.kernels.interventional_math import check_background
from distshap.packed import PackedModel
from distshap.plan.tables import path_features

__all__ = ["MAX_K", "banzhaf_values", "interventional_banzhaf_values", "kernel_ptx"]

#: Longest path the kernels take (its pattern is an int64 mask); longer: the CPU kernels.
MAX_K = 62


def _too_long(packed: PackedModel) -> bool:
    k = path_features(packed.path_offsets)
    return bool(k.size and k.max() > MAX_K)


def _on_host(X):
    return np.asarray(X.get() if hasattr(X, "get") else X)


def banzhaf_values(packed: PackedModel, X, interactions: bool = False):
    """Path-dependent Banzhaf (interaction) values of the rows of ``X`` (NumPy or CuPy), as
    :func:`distshap.kernels.banzhaf_cpu.banzhaf_values` lays them out."""
    if _too_long(packed):
        from distshap.kernels import banzhaf_cpu

        return xp().asarray(banzhaf_cpu.banzhaf_values(packed, _on_host(X), interactions))
    return product_values(packed, X, interactions)


def interventional_banzhaf_values(packed: PackedModel, background, X, *, bias=None,
                                  interactions: bool = False):  # fmt: skip
    """Interventional Banzhaf (interaction) values of the rows of ``X`` (raw margin), as
    :func:`distshap.kernels.banzhaf_cpu.interventional_banzhaf_values` lays them out."""
    check_background(background, packed)
    G = packed.num_groups
    bias = np.zeros((1, G)) if bias is None else np.asarray(bias, np.float64).reshape(1, G)
    if _too_long(packed):
        from distshap.kernels import banzhaf_cpu

        out = banzhaf_cpu.interventional_banzhaf_values(
            packed, background, _on_host(X), bias=bias, interactions=interactions
        )
        return xp().asarray(out)
    return background_values(packed, background, X, bias, interactions)
