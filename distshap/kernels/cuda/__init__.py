"""CUDA backend (Numba): SHAP and interaction values, deterministic fixed-point output.

Imported lazily by :func:`distshap.kernels.get_backend` (``"cuda"``); importing :mod:`distshap`
never touches CUDA. Same entry points as :mod:`distshap.kernels.cpu`: ``shap_values(packed, X)``
-> CuPy float32 ``(n, G, F+1)`` and ``interaction_values(packed, X)`` -> CuPy float32
``(n, G, F+1, F+1)``; ``X`` is a NumPy or CuPy 2-D array.

Modules, by concern:

* :mod:`.config` - tunables (tests patch them there);
* :mod:`.device` - device helpers (split rule and DP compiled from
  :mod:`distshap.kernels.treeshap`, intrinsics, simulator shims, fixed point, lane columns);
* :mod:`.quadrature` - the quadrature kernels (SHAP values, interaction values);
* :mod:`.tables` - pattern tables (SHAP and interaction values): fill kernels, table kernel;
* :mod:`.fallback` - the kernel for paths longer than a warp;
* :mod:`.model` - the device model (every form of a model on a device), its plans;
* :mod:`.caches` - the one bounded cache of device models, :func:`clear_cache`;
* :mod:`.launch` - row batches, the finish pass, :func:`shap_values` / :func:`interaction_values`;
* :mod:`.interventional` - :func:`interventional_values` (against a background data set);
* :mod:`.ptx` - :func:`compile_check` (PTX of every kernel, no GPU needed).
"""

from __future__ import annotations

from distshap.kernels.cuda.caches import clear_cache
from distshap.kernels.cuda.interventional import interventional_values
from distshap.kernels.cuda.launch import (
    checked_values,
    default_batch_rows,
    interaction_values,
    shap_values,
)
from distshap.kernels.cuda.model import (
    DeviceModel,
    Plan,
    QuadratureLaunch,
    device_model,
    interaction_plan,
)  # fmt: skip
from distshap.kernels.cuda.ptx import compile_check

__all__ = [
    "DeviceModel", "Plan", "QuadratureLaunch", "checked_values", "clear_cache", "compile_check",
    "default_batch_rows", "device_model", "interaction_plan", "interaction_values",
    "interventional_values", "shap_values",
]  # fmt: skip
