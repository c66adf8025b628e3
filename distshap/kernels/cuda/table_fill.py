"""Pattern tables of short paths filled on the device: every pattern's values of a path.

A row enters a path only through the 0/1 pattern of its one-fractions, so a path of ``k``
features has ``2**k`` possible results. The tables hold them all, filled on the device by one
thread per (path, pattern) in float64 and stored as float32; the device model keeps them and
the table kernel (:mod:`.tables`) reads them.

* SHAP tables (the paths of :func:`distshap.kernels.cuda.runtime.model.shap_plan`): entry
  ``[pattern * k + i]`` is ``phi_i`` of feature element ``i`` (0-based, after the bias lane)
  when bit ``i`` of ``pattern`` says whether the row follows element ``i``, computed by
  Gauss-Legendre quadrature (``ceil(k / 2)`` nodes, exact) in the order of the CPU backend's
  :func:`distshap.kernels.quadrature_cpu.fill_tables` (:func:`fill_shap_tables`).
* Interaction tables (:func:`distshap.kernels.cuda.runtime.model.interaction_plan`): the float64 DP
  (paper §3.5: condition on each element ``c`` of the path, on minus off, halved) stores ``k x
  k`` entries (:func:`fill_interaction_tables`). Entry ``[(pattern * k + c) * k + i]`` is, for
  ``c != i``, half the interaction of ``i`` and ``c`` (added at ``[feature_c, feature_i]``) and,
  for ``c == i``, the diagonal ``phi_i - sum_c`` of those halves.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import cuda

from distshap.kernels.cuda.runtime.device import (
    LD_VALUE,
    LD_ZERO,
    SIM,
    extend_path,
    unwound_sum,
    xp,
)
from distshap.kernels.taylor_cpu import gauss_legendre_table, node_count
from distshap.plan.config import get_config
from distshap.plan.geometry import SHAP_TABLE_MAX_FEATURES

__all__ = ["fill_interaction_tables", "fill_kernel", "fill_shap_tables", "shap_fill_kernel"]

_SHAP_MAXF = SHAP_TABLE_MAX_FEATURES  # the SHAP fill kernel's local arrays


@functools.cache
def fill_kernel(max_features: int):
    """The interaction table fill kernel for paths of at most ``max_features`` features (the
    size of its local arrays): one thread per (table path, pattern), that pattern's ``k x k``
    entries."""
    maxf1 = int(max_features) + 1
    maxf2 = int(max_features) + 2

    @cuda.jit(cache=True)
    def kernel(lane_d, path_offsets, paths, offsets, tables):
        pattern = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        j = cuda.blockIdx.y
        p = paths[j]
        s0 = path_offsets[p]
        k = path_offsets[p + 1] - s0 - 1
        if pattern >= (1 << k):
            return
        base = offsets[j] + pattern * k * k
        w = cuda.local.array(maxf2, np.float64)
        one = cuda.local.array(maxf1, np.float64)
        zero = cuda.local.array(maxf1, np.float64)
        diag = cuda.local.array(maxf1, np.float64)
        v = lane_d[s0, LD_VALUE]
        for i in range(1, k + 1):
            zero[i] = lane_d[s0 + i, LD_ZERO]
            one[i] = np.float64((pattern >> (i - 1)) & 1)
            diag[i] = 0.0
        depth = 0
        for c in range(0, k + 1):
            scale_c = 1.0 if c == 0 else 0.5 * (one[c] - zero[c])
            if scale_c != 0.0:
                depth = extend_path(w, zero, one, 1, k + 1, c)
            for i in range(1, k + 1):
                if i == c:
                    continue
                phi = 0.0
                if scale_c != 0.0 and one[i] != zero[i]:
                    phi = unwound_sum(w, depth, zero[i], one[i]) * (one[i] - zero[i]) * v * scale_c
                if c == 0:
                    diag[i] += phi
                else:
                    diag[i] -= phi
                    tables[base + (c - 1) * k + i - 1] = np.float32(phi)
        for i in range(1, k + 1):
            tables[base + (i - 1) * k + i - 1] = np.float32(diag[i])

    return kernel


def fill_interaction_tables(lane_d, path_offsets, lengths: np.ndarray, offsets: np.ndarray,
                            stream):  # fmt: skip
    """Fill the interaction tables of the paths with ``offsets >= 0`` on the device.

    ``lane_d`` and ``path_offsets`` are the device model's arrays; ``lengths`` (features per
    path) and ``offsets`` (:func:`distshap.plan.gpu.interaction_table_offsets`) host
    arrays. The fill kernel is compiled for the configuration's
    ``interaction_table_max_features`` (its local arrays), which bounds the tables' paths.
    Returns ``(tables, n_values)``. The stream is synchronized before returning: the tables
    serve later calls on any stream or thread.
    """
    chosen = np.flatnonzero(offsets >= 0)
    k = lengths[chosen]
    most = int(get_config().interaction_table_max_features)
    if k.size and int(k.max()) > most:
        raise ValueError(
            f"an interaction table path has {int(k.max())} features; the fill kernel handles at "
            f"most interaction_table_max_features={most}"
        )
    kernel = fill_kernel(most)
    total = int(((np.int64(1) << k) * k * k).sum())
    tables = xp().zeros(max(total, 1), dtype=np.float32)
    keep = []  # device temporaries stay alive until the fill kernels are done
    for j0 in range(0, chosen.size, 65535):  # grid.y is at most 65535
        part = chosen[j0 : j0 + 65535]
        keep.append((cuda.to_device(part.astype(np.int32)), cuda.to_device(offsets[part])))
        tpb = 64
        grid = (-(-(1 << int(k[j0 : j0 + 65535].max())) // tpb), int(part.size))
        kernel[grid, tpb, stream](lane_d, path_offsets, keep[-1][0], keep[-1][1], tables)
    if not SIM:
        stream.synchronize()
    return tables, total


@cuda.jit(cache=True)
def shap_fill_kernel(lane_d, path_offsets, paths, offsets, k, gl_t, gl_w, tables):
    """One thread per (table path of ``k`` features, pattern): that pattern's ``k`` SHAP values.

    ``phi_i = v d_i sum_q w_q prod_{j < i} (z_j + t_q d_j) prod_{j > i} (z_j + t_q d_j)`` with
    ``d_j = o_j - z_j``, over the ``ceil(k / 2)``-node rule of ``gl_t`` / ``gl_w``
    (:func:`distshap.kernels.taylor_cpu.gauss_legendre_table`), in float64.
    """
    n_patterns = np.int64(1) << k
    total = paths.shape[0] * n_patterns
    pre = cuda.local.array(_SHAP_MAXF, np.float64)
    phi = cuda.local.array(_SHAP_MAXF, np.float64)
    d = cuda.local.array(_SHAP_MAXF, np.float64)
    m = (k + 1) // 2  # the m-node rule sits at [m (m - 1) / 2, m (m + 1) / 2)
    start = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    for t in range(start, total, cuda.gridDim.x * cuda.blockDim.x):
        j = t >> k
        pattern = t - (j << k)
        s0 = path_offsets[paths[j]] + 1  # the first feature element (after the bias lane)
        v = lane_d[s0 - 1, LD_VALUE]
        for i in range(k):
            d[i] = np.float64((pattern >> i) & 1) - lane_d[s0 + i, LD_ZERO]
            phi[i] = 0.0
        for q in range(m * (m - 1) // 2, m * (m + 1) // 2):
            tq = gl_t[q]
            pre[0] = gl_w[q] * v
            for i in range(1, k):  # pre[i] = w v prod_{j < i} (z_j + t d_j)
                pre[i] = pre[i - 1] * (lane_d[s0 + i - 1, LD_ZERO] + tq * d[i - 1])
            suf = 1.0
            for i in range(k - 1, -1, -1):  # suf = prod_{j > i} (z_j + t d_j)
                phi[i] += pre[i] * suf
                suf *= lane_d[s0 + i, LD_ZERO] + tq * d[i]
        base = offsets[j] + pattern * k
        for i in range(k):
            tables[base + i] = np.float32(phi[i] * d[i])


def fill_shap_tables(lane_d, path_offsets, lengths: np.ndarray, offsets: np.ndarray, stream):
    """Fill the SHAP tables of the paths with ``offsets >= 0`` on the device.

    ``lane_d`` and ``path_offsets`` are the device model's arrays; ``lengths`` (features per
    path) and ``offsets`` (:func:`distshap.plan.tables.choose_tables` with ``"k"`` values a
    pattern) host arrays. Paths of one length run in one launch (a thread per (path, pattern),
    none idle). Returns ``(tables, n_values)``; the stream is synchronized before returning.
    """
    chosen = np.flatnonzero(offsets >= 0)
    k_all = lengths[chosen]
    if k_all.size and int(k_all.max()) > SHAP_TABLE_MAX_FEATURES:
        raise ValueError(
            f"a SHAP table path has {int(k_all.max())} features; the fill kernel handles at "
            f"most {SHAP_TABLE_MAX_FEATURES}: lower max_table_features"
        )
    total = int(((np.int64(1) << k_all) * k_all).sum())
    tables = xp().zeros(max(total, 1), dtype=np.float32)
    if not chosen.size:
        return tables, total
    gl_t, gl_w = (cuda.to_device(np.array(a, np.float64))  # a writable copy of the cached rules
                  for a in gauss_legendre_table(node_count(int(k_all.max()))))  # fmt: skip
    keep = [gl_t, gl_w]  # device temporaries stay alive until the fill kernels are done
    tpb = 128
    for k in np.unique(k_all).tolist():
        part = chosen[k_all == k]
        keep.append((cuda.to_device(part.astype(np.int32)), cuda.to_device(offsets[part])))
        blocks = int(min(-(-(part.size << k) // tpb), 65535))
        shap_fill_kernel[blocks, tpb, stream](lane_d, path_offsets, keep[-1][0], keep[-1][1],
                                              k, gl_t, gl_w, tables)  # fmt: skip
    if not SIM:
        stream.synchronize()
    return tables, total
