"""CUDA backend (Numba): SHAP and interaction values, deterministic fixed-point output.

Imported lazily by :func:`distshap.kernels.get_backend` (``"cuda"``); importing :mod:`distshap`
never touches CUDA. Same entry points as :mod:`distshap.kernels.cpu`: ``shap_values(packed, X)``
-> CuPy float32 ``(n, G, F+1)`` and ``interaction_values(packed, X)`` -> CuPy float32
``(n, G, F+1, F+1)``; ``X`` is a NumPy or CuPy 2-D array.

Kernel families, each module its jit code beside its launcher (routes chosen by
:mod:`distshap.plan`):

* SHAP values: :mod:`.shap_quadrature` (two rows a thread, sums in shared tiles) and the table
  kernel of :mod:`.tables` (paths the plan puts on pattern tables, filled by
  :mod:`.table_fill`);
* interaction values: :mod:`.interaction_quadrature` and :mod:`.tables`;
* pair slots, top pairs and summaries: :mod:`.slot_quadrature` (:mod:`.slot_layout`),
  :mod:`.tables`, :mod:`.pairs`;
* Shapley-Taylor values: :mod:`.taylor`; interventional values: :mod:`.interventional`;
* small models in one launch, the check inside: :mod:`.small`;
* paths longer than a warp (every output): :mod:`.fallback`;
* the margin and the fused additivity check: :mod:`.traversal`;
* row batches, the finish pass and the entry points: :mod:`.launch`; checked calls of up to
  thousands of rows replayed as CUDA graphs: :mod:`.replay`; kernel cost constants:
  :mod:`.calibrate`;
* the shared runtime (device helpers, arguments, driver launches, upload, the one
  ``DeviceModel`` and its bounded cache, PTX checks): :mod:`.runtime`.
"""

from __future__ import annotations

from distshap.kernels.cuda.interventional import interventional_values
from distshap.kernels.cuda.launch import (
    default_batch_rows,
    interaction_values,
    shap_values,
)
from distshap.kernels.cuda.replay import checked_values
from distshap.kernels.cuda.runtime.caches import clear_cache
from distshap.kernels.cuda.runtime.model import (
    DeviceModel,
    Plan,
    QuadratureLaunch,
    device_model,
    few_rows_shap_plan,
    interaction_plan,
)  # fmt: skip
from distshap.kernels.cuda.runtime.ptx import compile_check

__all__ = [
    "DeviceModel", "Plan", "QuadratureLaunch", "checked_values", "clear_cache", "compile_check",
    "default_batch_rows", "device_model", "few_rows_shap_plan", "interaction_plan",
    "interaction_values", "interventional_values", "shap_values",
]  # fmt: skip
