"""Banzhaf values and Banzhaf interaction values on the GPU (Numba CUDA): two rows a thread.

Same entry points and layouts as :mod:`distshap.kernels.banzhaf_cpu`: ``banzhaf_values(packed,
X, interactions)`` and ``interventional_banzhaf_values(packed, background, X, *, bias,
interactions)``, float32 CuPy outputs (NumPy under the CUDA simulator).

Each thread explains two rows: for every path (packed order) it tests each row's elements into
a bit mask ``xb`` (the path's lanes read once for both) and adds the path's values to the row's
own float64 sums (in shared memory, or feature-major ``acc[column, row]`` in global memory,
where a warp's adds are coalesced), so the bits depend neither on the launch nor on the
batch. Values of a path with a pattern table (the CPU's tables, built on the host
and uploaded: :func:`distshap.kernels.banzhaf_cpu.path_dependent_tables` /
``interventional_tables``) are ``k`` reads of the table row of ``xb``; other paths use the
formulas of :mod:`distshap.kernels.banzhaf_rows`: path-dependent by prefix products in a
per-thread array, interventional over the background masks of the path (``rb``, built on the
host; a background row counts when ``xb | rb`` covers the path). Interaction values always take
the formulas. Paths of more than :data:`MAX_K` features (no int64 mask) run on the CPU kernels.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import cuda, types

from distshap.kernels import treeshap
from distshap.kernels.banzhaf_cpu import interventional_tables, path_dependent_tables
from distshap.kernels.banzhaf_rows import background_masks
from distshap.kernels.cuda.banzhaf_tiles import background_values, product_values
from distshap.kernels.cuda.launch import device_rows
from distshap.kernels.cuda.runtime.device import SIM
from distshap.kernels.interventional_math import check_background
from distshap.packed import PackedModel
from distshap.plan.tables import path_features

__all__ = [
    "MAX_K",
    "SHARED_BYTES",
    "THREADS",
    "banzhaf_values",
    "interventional_banzhaf_values",
    "kernel_ptx",
]

#: Longest path the kernels take (its pattern is an int64 mask); longer: the CPU kernels.
MAX_K = 62
_LOCAL = MAX_K + 1  # per-thread products of a path
#: Threads per block.
THREADS = 128
#: Most dynamic shared memory a block sums its values in (more columns: global memory).
SHARED_BYTES = 48 * 1024

_follows = cuda.jit(device=True, inline=True)(treeshap.follows)


@cuda.jit(device=True, inline=True)
def _add(acc, sums, shared, c, rr, row, tid, width, value):
    """Add ``value`` to column ``c`` of the thread's row ``rr`` (``row``)."""
    if shared:
        sums[(c * 2 + rr) * width + tid] += value
    else:
        acc[c, row] += value


@cuda.jit(device=True, inline=True)
def _test(x, e, lower, upper, missing, cat_offsets, cat_nbits, cat_other, cat_words):
    co = cat_offsets[e]
    if co < 0:  # numeric: the categorical lanes are not read
        return _follows(x, lower[e], upper[e], missing[e], False, co, 0, cat_words)
    return _follows(x, lower[e], upper[e], missing[e], cat_other[e], co, cat_nbits[e], cat_words)


@cuda.jit(device=True)
def _formulas(xb, rr, row, start, k, v, base, C, feature, zero_fraction, masks, mask_offset,
              n_background, interactions, shared, sums, tid, width, pre, suf, acc_phi,
              acc_int):  # fmt: skip
    """A path without a table (or interactions) for the row of mask ``xb``."""
    if n_background == 0:  # f = (o + z) / 2, d = o - z
        pre[0] = v
        suf[k] = 1.0
        for i in range(k):
            o = 1.0 if (xb >> i) & 1 else 0.0
            pre[i + 1] = pre[i] * 0.5 * (o + zero_fraction[start + i])
        for i in range(k - 1, -1, -1):
            o = 1.0 if (xb >> i) & 1 else 0.0
            suf[i] = suf[i + 1] * 0.5 * (o + zero_fraction[start + i])
        for i in range(k):
            d = (1.0 if (xb >> i) & 1 else 0.0) - zero_fraction[start + i]
            fi = feature[start + i]
            _add(acc_phi, sums, shared, base + fi, rr, row, tid, width, pre[i] * d * suf[i + 1])
            if interactions:  # v d_i d_j prod_{l < i} f_l prod_{i < l < j} f_l suf_{j + 1}
                mid = pre[i] * d
                for j in range(i + 1, k):
                    oj = 1.0 if (xb >> j) & 1 else 0.0
                    zj = zero_fraction[start + j]
                    val = mid * (oj - zj) * suf[j + 1]
                    fj = feature[start + j]
                    acc_int[(base + fi) * C + fj, row] += val
                    acc_int[(base + fj) * C + fi, row] += val
                    mid *= 0.5 * (oj + zj)
        return
    full = (np.int64(1) << k) - 1  # a background row counts when it covers what x does not
    w0 = v / n_background
    for r in range(n_background):
        rb = masks[mask_offset + r]
        if (xb | rb) != full:
            continue
        sym = xb ^ rb
        m = 0
        s = sym
        while s:
            s &= s - 1
            m += 1
        if m == 0:
            continue
        w = w0 * 2.0 ** (1 - m)
        for i in range(k):
            if (sym >> i) & 1:
                si = w if (xb >> i) & 1 else -w
                fi = feature[start + i]
                _add(acc_phi, sums, shared, base + fi, rr, row, tid, width, si)
                if interactions:
                    for j in range(i + 1, k):
                        if (sym >> j) & 1:
                            val = 2.0 * si * (1.0 if (xb >> j) & 1 else -1.0)
                            fj = feature[start + j]
                            acc_int[(base + fi) * C + fj, row] += val
                            acc_int[(base + fj) * C + fi, row] += val


def _body(X, feature, lower, upper, missing, zero_fraction, cat_offsets, cat_nbits, cat_other,
          cat_words, path_offsets, path_value, path_group, table_offsets, tables, masks,
          mask_offsets, n_background, interactions, shared, acc_phi, acc_int):  # fmt: skip
    """Two rows a thread (each path's lanes read once for both): ``acc_phi[g * C + i, row]``
    the values, ``acc_int[(g * C + i) * C + j, row]`` the pairs ``i != j`` (interactions).
    ``n_background`` 0: the path-dependent game; else ``masks[mask_offsets[p] + r]`` is
    background row ``r``'s mask of path ``p``. ``shared``: the values are summed in the block's
    dynamic shared memory (``2 G C`` float64 a thread) and stored once."""
    row0 = 2 * cuda.grid(1)
    n = X.shape[0]
    if row0 >= n:
        return
    rows = 2 if row0 + 1 < n else 1
    C = X.shape[1] + 1
    sums = cuda.shared.array(0, types.float64)
    tid = cuda.threadIdx.x
    width = cuda.blockDim.x
    if shared:
        for c in range(2 * acc_phi.shape[0]):
            sums[c * width + tid] = 0.0
    pre = cuda.local.array(_LOCAL, np.float64)  # v prod_{l < i} f_l
    suf = cuda.local.array(_LOCAL, np.float64)  # prod_{l >= i} f_l
    for p in range(path_offsets.shape[0] - 1):
        start = path_offsets[p] + 1
        k = path_offsets[p + 1] - start
        base = path_group[p] * C
        off = table_offsets[p]
        if off >= 0 and not interactions:
            xb0 = np.int64(0)
            xb1 = np.int64(0)
            for i in range(k):
                e = start + i
                f = feature[e]
                if _test(X[row0, f], e, lower, upper, missing, cat_offsets, cat_nbits, cat_other,
                         cat_words):  # fmt: skip
                    xb0 |= np.int64(1) << i
                if rows == 2 and _test(X[row0 + 1, f], e, lower, upper, missing, cat_offsets,
                                       cat_nbits, cat_other, cat_words):  # fmt: skip
                    xb1 |= np.int64(1) << i
            t0 = off + xb0 * k
            t1 = off + xb1 * k
            for i in range(k):
                c = base + feature[start + i]
                _add(acc_phi, sums, shared, c, 0, row0, tid, width, tables[t0 + i])
                if rows == 2:
                    _add(acc_phi, sums, shared, c, 1, row0 + 1, tid, width, tables[t1 + i])
            continue
        for rr in range(rows):
            xb = np.int64(0)
            for i in range(k):
                if _test(X[row0 + rr, feature[start + i]], start + i, lower, upper, missing,
                         cat_offsets, cat_nbits, cat_other, cat_words):  # fmt: skip
                    xb |= np.int64(1) << i
            _formulas(xb, rr, row0 + rr, start, k, path_value[p], base, C, feature,
                      zero_fraction, masks, mask_offsets[p], n_background, interactions, shared,
                      sums, tid, width, pre, suf, acc_phi, acc_int)  # fmt: skip
    if shared:
        for rr in range(rows):
            for c in range(acc_phi.shape[0]):
                acc_phi[c, row0 + rr] = sums[(c * 2 + rr) * width + tid]


_kernel = cuda.jit(_body)

_SIGNATURE = (
    "void(float32[:, ::1], int32[::1], float32[::1], float32[::1], boolean[::1], float64[::1], "
    "int64[::1], int32[::1], boolean[::1], uint32[::1], int64[::1], float64[::1], int32[::1], "
    "int64[::1], float32[::1], int64[::1], int64[::1], int64, boolean, boolean, float64[:, ::1], "
    "float64[:, ::1])"
)


def kernel_ptx(cc: tuple[int, int] = (9, 0)) -> str:
    """PTX of the kernel for compute capability ``cc`` (needs NVVM, not a GPU)."""
    from distshap.kernels.cuda.runtime.ptx import _device_free_compilation

    with _device_free_compilation(cc):
        ptx, _ = cuda.compile_ptx(_body, _SIGNATURE, cc=cc)
    return ptx


def _xp():
    if SIM:
        return np
    import cupy

    return cupy


#: The device arrays of the last model and tables (a call reuses them: no upload).
_DEVICE: dict = {}


def _device_arrays(packed: PackedModel, tables: tuple, masks: tuple) -> tuple:
    """The kernel's arrays on the device, kept for the last ``(model, tables, masks)``."""
    key = (packed.digest or id(packed), tuple(id(a) for a in (*tables, *masks)))
    hit = _DEVICE.get("key")
    if hit is not None and hit == key:
        return _DEVICE["arrays"]
    xp = _xp()
    arrays = tuple(xp.asarray(a) for a in (
        packed.feature, packed.lower, packed.upper, packed.missing, packed.zero_fraction,
        packed.cat_offsets, packed.cat_nbits, packed.cat_other, packed.cat_words,
        packed.path_offsets, packed.path_value, packed.path_group, *tables, *masks,
    ))  # fmt: skip
    _DEVICE.clear()
    _DEVICE.update(key=key, arrays=arrays, keep=(tables, masks))
    return arrays


def _run(packed: PackedModel, X, interactions: bool, tables: tuple, masks: tuple, B: int, bias):
    xp = _xp()
    X = device_rows(X, packed.num_features)
    n, G, C = X.shape[0], packed.num_groups, packed.num_features + 1
    acc_phi = xp.zeros((G * C, n), np.float64)
    acc_int = xp.zeros((G * C * C, n) if interactions else (1, 1), np.float64)
    if n:
        lanes = _device_arrays(packed, tables, masks)
        blocks = -(-n // (2 * THREADS))
        shared = 2 * G * C * THREADS * 8 <= SHARED_BYTES
        _kernel[blocks, THREADS, 0, 2 * G * C * THREADS * 8 if shared else 0](
            X, *lanes, np.int64(B), bool(interactions), shared, acc_phi, acc_int
        )
    phi = acc_phi.T.reshape(n, G, C)
    bias = xp.asarray(np.broadcast_to(np.asarray(bias, np.float64), (1, G)))
    if not interactions:
        phi[:, :, C - 1] = bias
        return phi.astype(np.float32)
    pairs = acc_int.T.reshape(n, G, C, C)
    eye = xp.arange(C - 1)
    pairs[:, :, eye, eye] = phi[:, :, : C - 1] - pairs[:, :, : C - 1, : C - 1].sum(axis=3)
    pairs[:, :, C - 1, C - 1] = bias
    return pairs.astype(np.float32)


def _too_long(packed: PackedModel) -> bool:
    k = path_features(packed.path_offsets)
    return bool(k.size and k.max() > MAX_K)


def _on_host(X):
    return np.asarray(X.get() if hasattr(X, "get") else X)


@functools.cache
def _no_masks(n_paths: int) -> tuple[np.ndarray, np.ndarray]:
    return np.zeros(1, np.int64), np.zeros(n_paths, np.int64)


def banzhaf_values(packed: PackedModel, X, interactions: bool = False):
    """Path-dependent Banzhaf (interaction) values of the rows of ``X`` (NumPy or CuPy), as
    :func:`distshap.kernels.banzhaf_cpu.banzhaf_values` lays them out."""
    if _too_long(packed):
        from distshap.kernels import banzhaf_cpu

        return _xp().asarray(banzhaf_cpu.banzhaf_values(packed, _on_host(X), interactions))
    if not interactions:
        return product_values(packed, X)
    offsets, tables = path_dependent_tables(packed)
    none = _no_masks(packed.num_paths)
    return _run(packed, X, interactions, (offsets, tables), none, 0, packed.expected_value)


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
        return _xp().asarray(out)
    R = np.ascontiguousarray(background.rows, dtype=np.float32)
    if not interactions:
        return background_values(packed, R, X, bias)
    tables = interventional_tables(packed, R)
    masks = background_masks(packed, R, None if interactions else tables[0] < 0)
    return _run(packed, X, interactions, tables, masks, R.shape[0], bias)
