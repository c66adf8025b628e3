"""PTX of every interventional kernel, compiled by NVVM without a GPU (tests and reviews)."""

from __future__ import annotations

from numba import cuda

from distshap.kernels.cuda.interventional.background import mask_kernel
from distshap.kernels.cuda.interventional.direct import direct_kernel, factor_kernel
from distshap.kernels.cuda.interventional.driver import finish_kernel
from distshap.kernels.cuda.interventional.oversize import oversize_kernel
from distshap.kernels.cuda.interventional.tables import (
    interaction_fill_kernel,
    shap_fill_kernel,
    table_kernel,
)  # fmt: skip
from distshap.kernels.cuda.runtime.device import SIM
from distshap.kernels.cuda.runtime.ptx import _device_free_compilation
from distshap.plan.config import Config, get_config

__all__ = ["kernel_ptx"]

_LANES = "float32[:, ::1], int32[:, ::1], int64[::1]"  # lane_f, lane_i, lane_cat
_ROW_F64 = "float64[::1], float64[::1], float64[::1], float64[:, ::1]"  # m_x, y, m_bg, factors
_FILL = (
    "void(float64[:, ::1], int64[::1], int32[::1], int64[::1], int64[::1], int32[::1], "
    "float64[:, :, ::1], int64[::1], float64)"
)
_TABLE = (
    f"void({_LANES}, uint32[::1], int64[::1], int64[::1], int64[::1], int32[::1], "
    "int32[::1], float32[:, ::1], int64[:, ::1], int64, int64, int64)"
)
_DIRECT = (
    f"void({_LANES}, float64[:, ::1], uint32[::1], int8[::1], int64[::1], int32[::1], "
    f"int32[::1], int32[:, ::1], float64[:, :, ::1], float32[:, ::1], {_ROW_F64}, "
    "int64[:, ::1], float64, int64, int64)"
)
_OVERSIZE = (
    f"void({_LANES}, float64[:, ::1], uint32[::1], int64[::1], int32[::1], int32[::1], "
    f"float64[:, :, ::1], float32[:, ::1], float32[:, ::1], {_ROW_F64}, int64[:, ::1], "
    "float64, int64)"
)


def _signatures(cfg: Config) -> dict:
    """Name -> (kernel, signature) of every interventional kernel under ``cfg``."""
    warps = cfg.interventional_warps_per_block
    sigs = {
        "interventional_mask_kernel": (
            mask_kernel(warps),
            f"void({_LANES}, uint32[::1], int64[::1], int32[::1], float32[:, ::1], "
            "int32[:, ::1], int64[::1], int32[::1], int64)",
        ),
        "interventional_shap_fill_kernel": (
            shap_fill_kernel(cfg.interventional_table_max_features),
            _FILL,
        ),
        "interventional_interaction_fill_kernel": (
            interaction_fill_kernel(cfg.interventional_interaction_table_max_features),
            _FILL,
        ),
        "interventional_finish_kernel": (
            finish_kernel,
            "void(int64[:, ::1], float32[:, ::1], float64, float64[:, ::1], int64, int64)",
        ),
        "interventional_factor_kernel": (
            factor_kernel,
            "void(int64, float64[::1], float64[::1], float64[::1], float64[:, ::1])",
        ),
    }
    for inter in (False, True):
        what = "interaction" if inter else "shap"
        for shared in (False, True):
            name = f"interventional_{what}_table_kernel{'_shared' if shared else ''}"
            kernel = table_kernel(shared, inter, cfg.table_warps_per_block,
                                  cfg.shared_tile_values)  # fmt: skip
            sigs[name] = (kernel, _TABLE)
        for transform in (0,) if inter else (0, 1, 2):
            sigs[f"interventional_{what}_direct_kernel_{transform}"] = (
                direct_kernel(transform, inter, warps),
                _DIRECT,
            )
            sigs[f"interventional_{what}_oversize_kernel_{transform}"] = (
                oversize_kernel(transform, inter),
                _OVERSIZE,
            )
    return sigs


def kernel_ptx(cc: tuple[int, int] = (9, 0)) -> dict[str, str]:
    """PTX of every interventional kernel for compute capability ``cc`` (NVVM, no GPU), as the
    current configuration builds them."""
    if SIM:
        raise RuntimeError("kernel_ptx cannot run under NUMBA_ENABLE_CUDASIM=1")
    out = {}
    with _device_free_compilation(cc):
        for name, (kernel, sig) in _signatures(get_config()).items():
            out[name], _ = cuda.compile_ptx(kernel.py_func, sig, cc=cc)
    return out
