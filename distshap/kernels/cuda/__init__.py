"""CUDA backend (Numba): SHAP and interaction values, deterministic fixed-point output.

Imported lazily by :func:`distshap.kernels.get_backend` (``"cuda"``); importing :mod:`distshap`
never touches CUDA. Same entry points as :mod:`distshap.kernels.cpu`: ``shap_values(packed, X)``
-> CuPy float32 ``(n, G, F+1)`` and ``interaction_values(packed, X)`` -> CuPy float32
``(n, G, F+1, F+1)``; ``X`` is a NumPy or CuPy 2-D array.

Modules, by concern:

* :mod:`.device` - device helpers (split rule and DP compiled from
  :mod:`distshap.kernels.treeshap`, intrinsics, simulator shims, fixed point, lane columns);
* :mod:`.caches` - the one bounded cache of device models, kept accumulators,
  :func:`clear_cache`; :mod:`.model` - the device model (every form of a model on a device);
* :mod:`.quadrature` - the SHAP quadrature kernels; :mod:`.tables` - pattern tables;
  :mod:`.fallback` - paths longer than a warp; :mod:`.launch` - row batches, the finish pass,
  :func:`shap_values` / :func:`interaction_values`;
* :mod:`.small` - small models in one launch (:mod:`.small_model`, :mod:`.small_kernels`,
  :mod:`.small_gather`), launched through the driver by :mod:`.rawlaunch`;
* :mod:`.traversal` - the margin traversal and the fused additivity check;
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
