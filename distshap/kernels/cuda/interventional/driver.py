"""The host driver of interventional SHAP on the GPU: rows in batches through every kernel.

Per batch of rows, the table kernel (model output ``"raw"``), the direct kernels and the
oversize kernel add their int64 fixed-point contributions to one accumulator; the finish kernel
then writes ``acc * 2**-shift`` as float32 and the bias entries from ``bias``.

Fixed point (bits identical across batchings, chunkings and GPU counts): each kernel adds
``round(value * 2**shift / B)`` to int64 accumulators with integer atomics, ``value`` being one
element's (or one table entry's) float64 sum over the background, rounded once. The background
mean of a path's contribution to one output is at most ``|v| max|s|`` (SHAP: the weights of one
side sum to ``a! b! / (a+b)! <= 1``; interactions: ``k |v|``, as for path-dependent values), so
the model's shifts (:func:`~distshap.plan.gpu.fixed_point_shift`: sums below ``2**61``) are safe for
``"raw"`` and ``"probability"`` (``|s| <= 1/4``). ``"log_loss"`` has ``|s| = |secant slope of
softplus - y| < 1`` for labels in ``[0, 1]`` (others are refused); its shift is one bit lower
for the rounding of ``s``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import cuda

from distshap.kernels.cuda.interventional.background import DeviceBackground, device_background
from distshap.kernels.cuda.interventional.direct import (
    factor_chunk_rows,
    launch_direct,
    launch_factors,
)  # fmt: skip
from distshap.kernels.cuda.interventional.oversize import launch_oversize
from distshap.kernels.cuda.interventional.tables import DeviceTables, device_tables, launch_tables
from distshap.kernels.cuda.launch import device_rows, launch_finish, new_output, run_batches
from distshap.kernels.cuda.runtime.device import xp
from distshap.kernels.cuda.runtime.model import DeviceModel, device_model
from distshap.kernels.interventional_math import Background
from distshap.packed import PackedModel
from distshap.plan.config import Config, get_config

__all__ = ["finish_kernel", "interventional_values"]

_SHIFT_LOG_LOSS = 1  # log loss: |s| < 1 for labels in [0, 1]; one bit for rounding


@cuda.jit(cache=True)
def finish_kernel(acc, out, inv_scale, bias, group_size, bias_offset):
    """``out = acc * inv_scale``, ``bias[row or 0, g]`` at the bias entries; resets ``acc``."""
    start = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    stride = cuda.gridDim.x * cuda.blockDim.x
    width = acc.shape[1]
    per_row = bias.shape[0] > 1
    for t in range(start, acc.shape[0] * width, stride):
        r = t // width
        e = t - r * width
        g = e // group_size
        if e - g * group_size == bias_offset:
            out[r, e] = np.float32(bias[r if per_row else 0, g])
        else:
            out[r, e] = np.float32(np.float64(acc[r, e]) * inv_scale)
        acc[r, e] = 0


def _host_or_device_f64(a, shape_msg: str, shape: tuple):
    arr = xp().asarray(a, dtype=np.float64)
    if tuple(arr.shape) != shape:
        raise ValueError(f"{shape_msg} must have shape {shape}, got {tuple(arr.shape)}")
    return xp().ascontiguousarray(arr)


def _labels(y, n: int):
    """Device float64 labels ``(n,)`` of the log loss, in ``[0, 1]``."""
    if y is None:
        raise ValueError("model_output='log_loss' needs the labels y of the rows")
    yv = _host_or_device_f64(y, "y", (n,))
    bad = ~((yv >= 0.0) & (yv <= 1.0))
    if bool(bad.any()):
        first = int(xp().flatnonzero(bad)[0])
        raise ValueError(
            f"log_loss labels must lie in [0, 1] (0/1 labels or probabilities), got "
            f"y[{first}] = {float(yv[first])}: recode them, e.g. y = (labels == "
            f"positive_class)"
        )
    return yv


def _row_inputs(packed, n, transform, x_margin, y, bias):
    """Device float64 arrays: ``m_x``, ``y`` (length >= 1) and the bias."""
    mod = xp()
    G = packed.num_groups
    if transform not in (0, 1, 2):
        raise ValueError(f"transform must be 0 (raw), 1 (probability) or 2 (log_loss), got "
                         f"{transform!r}")  # fmt: skip
    if transform == 0:
        m_x = yv = mod.zeros(1, dtype=np.float64)
    else:
        if G != 1:
            raise ValueError(
                f"model_output 'probability' and 'log_loss' need a binary logistic model (one "
                f"output group), this model has {G}: use model_output='raw'"
            )
        if x_margin is None:
            raise ValueError("transform != 0 needs x_margin, the (n, 1) margins of X")
        m_x = _host_or_device_f64(x_margin, "x_margin", (n, 1))[:, 0].copy()
        yv = _labels(y, n) if transform == 2 else mod.zeros(1, dtype=np.float64)
    if bias is None:
        bias = np.zeros((1, G), np.float64)
    bias = mod.asarray(bias, dtype=np.float64)
    if bias.ndim != 2 or bias.shape[1] != G or bias.shape[0] not in (1, n):
        raise ValueError(f"bias must have shape (1, {G}) or ({n}, {G}), got {bias.shape}")
    return m_x, yv, mod.ascontiguousarray(bias)


class _Batches:
    """The kernels of one call, run on one batch of rows at a time (:meth:`__call__`)."""

    def __init__(self, model: DeviceModel, bg: DeviceBackground, tp: DeviceTables | None,
                 rows: tuple, transform: int, interactions: bool, scale: float,
                 cfg: Config) -> None:  # fmt: skip
        self.model, self.bg, self.tp, self.cfg = model, bg, tp, cfg
        self.m_x, self.y, self.bias, self.out2, self.group_size, self.bias_offset = rows
        self.transform, self.interactions = transform, interactions
        self.scale, self.scale_b = scale, scale / bg.n_rows
        self.F1 = model.num_features + 1
        n = int(self.out2.shape[0])
        self.no_factors = bg.weights[0]  # a C-contiguous float64 matrix the kernels do not read
        self.chunk = n if transform == 0 else factor_chunk_rows(bg.n_rows)
        self.factors = None  # float64 (rows of a chunk, B), allocated by the first chunk

    def _rowargs(self, a: int, b: int, s) -> tuple:
        """``m_x``, ``y`` and the factors of the rows ``[a, b)`` (factors computed here)."""
        if self.transform == 0:
            return self.m_x, self.y, self.no_factors
        m_c = self.m_x[a:b]
        y_c = self.y[a:b] if self.transform == 2 else self.y
        if self.factors is None:
            n = int(self.out2.shape[0])
            self.factors = xp().empty((min(self.chunk, n), self.bg.n_rows), dtype=np.float64)
        f_c = self.factors[: b - a]
        launch_factors(self.transform, m_c, y_c, self.bg.m_bg, f_c, s)
        return m_c, y_c, f_c

    def __call__(self, r0: int, r1: int, Xb, acc, s) -> None:
        model, bg, tp, F1 = self.model, self.bg, self.tp, self.F1
        transform, inter = self.transform, self.interactions
        warps = self.cfg.interventional_warps_per_block
        if tp is not None:
            launch_tables(model, tp, Xb, acc, F1, s, inter, self.cfg)
            bins = (tp.direct_bins, tp.direct_maxk, tp.n_direct_bins, tp.lane_direct)
        else:
            bins = (bg.regular_bins, bg.regular_maxk, bg.n_regular_bins, bg.lane_all)
        for c0 in range(0, r1 - r0, self.chunk):  # transforms: rows by factor arrays; else one
            c1 = min(r1 - r0, c0 + self.chunk)
            Xc, acc_c = Xb[c0:c1], acc[c0:c1]
            rowargs = self._rowargs(r0 + c0, r0 + c1, s)
            launch_direct(model, bg, *bins, Xc, rowargs, acc_c, self.scale_b, F1, s, transform,
                          inter, warps)  # fmt: skip
            launch_oversize(model, bg, Xc, rowargs, acc_c, self.scale_b, F1, s, transform, inter)
        bias_b = self.bias[r0:r1] if self.bias.shape[0] > 1 else self.bias
        launch_finish(finish_kernel, acc, self.out2[r0:r1], 1.0 / self.scale, bias_b,
                      self.group_size, self.bias_offset, s)  # fmt: skip


def interventional_values(
    packed: PackedModel,
    background: Background,
    X: Any,
    *,
    transform: int = 0,
    x_margin: Any = None,
    y: Any = None,
    bias: Any = None,
    interactions: bool = False,
    batch_rows: int | None = None,
) -> Any:
    """Interventional SHAP (or interaction) values of the rows of ``X`` against a background.

    Parameters
    ----------
    packed : PackedModel
        Copied to the current device once (:func:`.model.device_model`).
    background : distshap.kernels.interventional_math.Background
        Background rows (``rows``: float32 ``(B, F)`` as the kernels read them), their
        margins (``margin``: float64 ``(B, G)``) and a ``digest``; its masks, pattern counts
        and tables are built on the device once per model and kept with it.
    X : numpy.ndarray or cupy.ndarray (n, F)
        :func:`distshap.inputs.prepare_rows` output of the rows to explain.
    transform : {0, 1, 2}
        Model output: 0 raw margin, 1 probability, 2 log loss (1 and 2: one output group).
    x_margin : array (n, 1), optional
        float64 margins of ``X`` (needed for transforms 1 and 2).
    y : array (n,), optional
        Labels (transform 2), in ``[0, 1]``.
    bias : array (n, G) or (1, G), optional
        Written into the bias column (entry ``[F, F]`` of interactions): the mean of
        ``T(m_r, y)`` over the background (:func:`distshap.interventional.bias_values`).
        Default zeros, as on the CPU.
    interactions : bool
        Interaction values (transform 0 only).
    batch_rows : int, optional
        Rows per kernel batch (default :func:`.launch.default_batch_rows`); the bits do not
        depend on it.

    Returns
    -------
    cupy.ndarray
        float32 ``(n, G, F + 1)``, or ``(n, G, F + 1, F + 1)`` with ``interactions`` (NumPy
        under the CUDA simulator).
    """
    if not isinstance(packed, PackedModel):
        raise TypeError(f"expected a PackedModel, got {type(packed).__name__}")
    if interactions and transform != 0:
        raise ValueError(
            "interventional interaction values are defined for model_output='raw' only "
            f"(transform 0), got transform={transform!r}"
        )
    cfg = get_config()
    X = device_rows(X, packed.num_features)
    n = int(X.shape[0])
    m_x, yv, bias_d = _row_inputs(packed, n, transform, x_margin, y, bias)
    model = device_model(packed)
    bg = device_background(packed, background, model)
    out, out2, group_size, bias_offset = new_output(packed, n, interactions)
    if n == 0:
        return out
    shift = model.interaction_shift if interactions else model.shap_shift
    if transform == 2:
        shift -= _SHIFT_LOG_LOSS
    tp = device_tables(packed, model, bg, interactions) if transform == 0 else None
    rows = (m_x, yv, bias_d, out2, group_size, bias_offset)
    batch = _Batches(model, bg, tp, rows, transform, interactions, 2.0**shift, cfg)
    run_batches(X, out2.shape[1], batch_rows, batch)
    return out
