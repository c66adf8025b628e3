"""Shapley-Taylor interaction index of order 2 on the GPU: one thread per (row, path), float64.

The same closed form as the CPU kernel (:mod:`distshap.kernels.taylor_cpu`, whose docstring
derives it): per path of ``k`` features, main effects ``v d_i prod_{e != i} z_e`` and pairs
``2 v d_i d_j integral_0^1 (1 - t) prod_{e != i, j} q_e(t) dt`` by Gauss-Legendre with
``ceil(k / 2)`` nodes (exact). A thread tests the path's elements for its row, then per element
``i`` forms ``c_m = w_m (1 - t_m) prod_{e != i} q_e(t_m)`` at every node and takes each pair
``j > i`` as ``sum_m c_m / q_j(t_m)``. ``q_j > 0`` at every node when ``d_j != 0`` (pairs with
``d_j = 0`` are 0 and skipped); below :data:`_DIVIDE_MIN` the thread forms the product without
``j`` directly instead, so a tiny zero fraction loses nothing to underflow.

Contributions are rounded to int64 fixed point at the model's interaction shift
(:func:`~distshap.plan.gpu.fixed_point_shift`: a path adds at most ``|v|`` to one
entry) and added with integer atomics; :func:`~distshap.kernels.cuda.launch.finish_kernel`
converts them and adds the expected value at ``[F, F]``. Bits do not depend on the batching or
the order threads run in. A straightforward kernel (no warp packing, no shared memory): paths
of up to the configuration's ``max_fallback_features`` features (compiled into its local
arrays), as the device model allows; cost per (row, path) ``O(k^2 ceil(k / 2))``.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import cuda

from distshap.kernels.cuda.launch import (
    device_rows,
    finish_kernel,
    launch_finish,
    new_output,
    run_batches,
)
from distshap.kernels.cuda.runtime.device import (
    LD_VALUE,
    LD_ZERO,
    LI_FEATURE,
    LI_GROUP,
    SIM,
    fixed,
    lane_follows,
)  # fmt: skip
from distshap.kernels.cuda.runtime.model import device_model
from distshap.kernels.taylor_cpu import gauss_legendre_table, node_count
from distshap.packed import PackedModel
from distshap.plan.config import get_config

__all__ = ["taylor_kernel", "taylor_values"]

#: Divisors ``q_j`` below this are not divided by (the product is formed without them).
_DIVIDE_MIN = 1e-200
_THREADS = 128


@functools.cache
def taylor_kernel(max_features: int):
    """The Shapley-Taylor kernel for paths of at most ``max_features`` features (the size of
    its local arrays): one thread per (row ``r`` of ``X``, path ``path0 + blockIdx.y``),
    float64. Launch: grid ``(ceil(rows / T), paths)``, ``T`` threads."""
    maxf = int(max_features)
    maxn = node_count(maxf)

    @cuda.jit(cache=True)
    def kernel(lane_f, lane_i, lane_cat, lane_d, cat_words, path_offsets, gl_nodes, gl_weights,
               path0, X, acc, scale, n_cols):  # fmt: skip
        r = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        if r >= X.shape[0]:
            return
        p = path0 + cuda.blockIdx.y
        s0 = path_offsets[p] + 1  # the first feature element (after the bias lane)
        k = path_offsets[p + 1] - s0
        z = cuda.local.array(maxf, np.float64)
        d = cuda.local.array(maxf, np.float64)
        c = cuda.local.array(maxn, np.float64)
        v = lane_d[s0 - 1, LD_VALUE]
        base = lane_i[s0 - 1, LI_GROUP] * n_cols * n_cols
        any_d = False
        for i in range(k):
            li = s0 + i
            z[i] = lane_d[li, LD_ZERO]
            o = 0.0
            if lane_follows(X[r, lane_i[li, LI_FEATURE]], lane_f, lane_i, lane_cat, cat_words, li):
                o = 1.0
            d[i] = o - z[i]
            if d[i] != 0.0:
                any_d = True
        if not any_d:
            return  # every main effect and pair of the path is 0
        for i in range(k):  # main effects
            if d[i] == 0.0:
                continue
            value = v * d[i]
            for e in range(k):
                if e != i:
                    value *= z[e]
            iv = fixed(value, scale)
            if iv != 0:
                fi = lane_i[s0 + i, LI_FEATURE]
                cuda.atomic.add(acc, (r, base + fi * n_cols + fi), iv)
        n_nodes = (k + 1) // 2
        g0 = n_nodes * (n_nodes - 1) // 2  # this rule's place in the node table
        for i in range(k - 1):  # pairs i < j, half to [i, j] and half to [j, i]
            if d[i] == 0.0:
                continue
            for m in range(n_nodes):
                t = gl_nodes[g0 + m]
                prod = gl_weights[g0 + m] * (1.0 - t)
                for e in range(k):
                    if e != i:
                        prod *= z[e] + t * d[e]
                c[m] = prod
            fi = lane_i[s0 + i, LI_FEATURE]
            for j in range(i + 1, k):
                if d[j] == 0.0:
                    continue
                total = 0.0
                for m in range(n_nodes):
                    t = gl_nodes[g0 + m]
                    qj = z[j] + t * d[j]
                    if qj >= _DIVIDE_MIN:
                        total += c[m] / qj
                    else:
                        prod = gl_weights[g0 + m] * (1.0 - t)
                        for e in range(k):
                            if e != i and e != j:
                                prod *= z[e] + t * d[e]
                        total += prod
                iv = fixed(v * d[i] * d[j] * total, scale)
                if iv != 0:
                    fj = lane_i[s0 + j, LI_FEATURE]
                    cuda.atomic.add(acc, (r, base + fi * n_cols + fj), iv)
                    cuda.atomic.add(acc, (r, base + fj * n_cols + fi), iv)

    return kernel


def _node_arrays(model, max_features: int):
    """The Gauss-Legendre table of up to ``node_count(max_features)`` nodes on the device of
    ``model`` (kept as a form of the device model)."""
    nodes, weights = gauss_legendre_table(node_count(max_features))
    if SIM:
        return np.array(nodes), np.array(weights)
    return model.form(("taylor_nodes", max_features),
                      lambda: (cuda.to_device(nodes), cuda.to_device(weights)))  # fmt: skip


def taylor_values(packed: PackedModel, X, batch_rows: int | None = None):
    """Order-2 Shapley-Taylor interaction index: CuPy float32 ``(n, G, F + 1, F + 1)``.

    Parameters
    ----------
    packed : PackedModel
        Copied to the current device once and cached by digest
        (:func:`~distshap.kernels.cuda.runtime.model.device_model`).
    X : numpy.ndarray or cupy.ndarray (n, F)
        Kernel input: :func:`distshap.inputs.prepare_rows` of the user's rows.
    batch_rows : int, optional
        Rows per batch of the int64 accumulator (default:
        :func:`~distshap.kernels.cuda.launch.default_batch_rows`). Results do not depend on it.

    Returns
    -------
    cupy.ndarray (NumPy under the CUDA simulator)
        Main effects on the diagonal, each pair's index split equally between ``[i, j]`` and
        ``[j, i]``, the expected value at ``[F, F]``.
    """
    model = device_model(packed)
    X = device_rows(X, packed.num_features)
    n = int(X.shape[0])
    F1 = packed.num_features + 1
    out, out2, group_size, bias_offset = new_output(packed, n, True)
    if n == 0:
        return out
    scale = 2.0**model.interaction_shift
    max_features = int(get_config().max_fallback_features)  # the device model's longest path
    kernel = taylor_kernel(max_features)
    nodes, weights = _node_arrays(model, max_features)
    n_paths = packed.num_paths

    def batch(r0, r1, Xb, acc, s):
        tpb = min(_THREADS, 32 * -(-(r1 - r0) // 32))
        for p0 in range(0, n_paths, 65535):  # grid.y is at most 65535
            grid = (-(-(r1 - r0) // tpb), min(n_paths - p0, 65535))
            kernel[grid, tpb, s](
                model.lane_f, model.lane_i, model.lane_cat, model.lane_d, model.cat_words,
                model.path_offsets, nodes, weights, p0, Xb, acc, scale, F1,
            )  # fmt: skip
        launch_finish(finish_kernel, acc, out2[r0:r1], 1.0 / scale, model.expected_value,
                      group_size, bias_offset, s)  # fmt: skip

    run_batches(X, out2.shape[1], batch_rows, batch, cap=None)
    return out
