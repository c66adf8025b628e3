"""The device model's lane columns assembled on the device from the packed model's own arrays.

:func:`lane_columns` gives the four per-lane arrays of :func:`.model.lane_arrays` (``lane_f``,
``lane_i``, ``lane_d``, ``lane_cat``; layout in :mod:`.device`) as device arrays, bit for bit,
without building them on the host: the packed model's compact per-lane arrays (about 38 bytes
a lane: feature, interval, flags, zero fraction, categories, path index) and its per-path
arrays are copied as they are, and :func:`lane_fill_kernel` writes the interleaved columns
(72 bytes a lane) on the device. On a model of 28M lanes the host build allocated and filled
1.8 GB of strided columns (first touch of every page included) before copying them.

Every value is a copy, an integer difference, or a float64 to float32 conversion, which the
device rounds to nearest even as NumPy does: the columns are the host build's, bit for bit
(``tests/test_cuda_runtime_upload.py`` compares them under the CUDA simulator).
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from distshap.kernels.cuda.runtime import device
from distshap.kernels.cuda.runtime.device import SIM

__all__ = ["LANE_FILL_SIGNATURE", "lane_columns", "lane_fill_kernel"]

_LI, _LF, _LD = device.LI_COLUMNS, 4, 2

#: The one signature :func:`lane_fill_kernel` is launched with (the PTX check compiles it).
LANE_FILL_SIGNATURE = (
    "void(int32[::1], float32[::1], float32[::1], uint8[::1], float64[::1], int32[::1], "
    "uint8[::1], int32[::1], int64[::1], float64[::1], int32[::1], int64[::1], "
    "float32[:, ::1], int32[:, ::1], float64[:, ::1])"
)

_THREADS = 32 if SIM else 256
_MAX_BLOCKS = 4 if SIM else 1 << 16  # a grid-stride loop covers the rest


@cuda.jit(cache=True)
def lane_fill_kernel(feature, lower, upper, missing, zero_fraction, cat_nbits, cat_other,
                     lane_path, path_offsets, path_value, path_group, bin_offsets,
                     lane_f, lane_i, lane_d):  # fmt: skip
    """One lane a thread (grid-stride): the lane's rows of ``lane_f``, ``lane_i``, ``lane_d``.

    The lane's bin is found by binary search in ``bin_offsets`` (the last bin starting at or
    before the lane: the one holding it, empty bins skipped).
    """
    n = feature.shape[0]
    n_bins = bin_offsets.shape[0] - 1
    start = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    stride = cuda.gridDim.x * cuda.blockDim.x
    for li in range(start, n, stride):
        p = lane_path[li]
        first = path_offsets[p]
        lo = 0
        hi = n_bins  # bin_offsets[lo] <= li < bin_offsets[hi]
        while hi - lo > 1:
            mid = (lo + hi) >> 1
            if bin_offsets[mid] <= li:
                lo = mid
            else:
                hi = mid
        flags = np.int32(0)
        if missing[li] != 0:
            flags |= device.MISSING_FLAG
        if cat_other[li] != 0:
            flags |= device.CAT_OTHER_FLAG
        lane_i[li, device.LI_FEATURE] = feature[li]
        lane_i[li, device.LI_POSITION] = np.int32(li - first)
        lane_i[li, device.LI_START] = np.int32(first - bin_offsets[lo])
        lane_i[li, device.LI_FEATURES] = np.int32(path_offsets[p + 1] - first - 1)
        lane_i[li, device.LI_GROUP] = path_group[p]
        lane_i[li, device.LI_FLAGS] = flags
        lane_i[li, device.LI_NBITS] = cat_nbits[li]
        for c in range(device.LI_NBITS + 1, lane_i.shape[1]):
            lane_i[li, c] = 0  # the spare column(s)
        zero = zero_fraction[li]
        value = path_value[p]
        lane_f[li, device.LF_LOWER] = lower[li]
        lane_f[li, device.LF_UPPER] = upper[li]
        lane_f[li, device.LF_ZERO] = np.float32(zero)
        lane_f[li, device.LF_VALUE] = np.float32(value)
        lane_d[li, device.LD_ZERO] = zero
        lane_d[li, device.LD_VALUE] = value


def _c(a, dtype) -> np.ndarray:
    """``a`` as a C-contiguous array of ``dtype`` (bools as uint8 views: no copy)."""
    a = np.asarray(a)
    if dtype is np.uint8 and a.dtype == np.bool_:
        return np.ascontiguousarray(a).view(np.uint8)
    return np.ascontiguousarray(a, dtype=dtype)


def lane_columns(packed, stream=0) -> dict:
    """``lane_f``, ``lane_i``, ``lane_d`` and ``lane_cat`` of :func:`.model.lane_arrays` as
    device arrays (Numba device arrays; the simulator's under ``NUMBA_ENABLE_CUDASIM=1``),
    assembled on the current device by :func:`lane_fill_kernel` on ``stream``.

    Parameters
    ----------
    packed : PackedModel
        Packed with ``capacity=32`` (:func:`.model.lane_arrays` checks it).
    stream : Numba stream or 0
        Where the copies and the kernel run (0: the default stream). The kernel has finished
        when this returns (the columns serve later calls on any stream, as copies would).

    Returns
    -------
    dict
        ``lane_f`` float32 ``(n, 4)``, ``lane_i`` int32 ``(n, LI_COLUMNS)``, ``lane_d`` float64
        ``(n, 2)``, ``lane_cat`` int64 ``(n,)``, with ``n = max(n_lanes, 1)`` (an empty model
        gets one row of zeros, ``lane_cat`` one 0, as on the host).
    """
    n = int(packed.feature.shape[0])
    if n == 0:
        return dict(
            lane_f=cuda.to_device(np.zeros((1, _LF), np.float32), stream=stream),
            lane_i=cuda.to_device(np.zeros((1, _LI), np.int32), stream=stream),
            lane_d=cuda.to_device(np.zeros((1, _LD), np.float64), stream=stream),
            lane_cat=cuda.to_device(np.zeros(1, np.int64), stream=stream),
        )
    sources = [
        _c(packed.feature, np.int32),
        _c(packed.lower, np.float32),
        _c(packed.upper, np.float32),
        _c(packed.missing, np.uint8),
        _c(packed.zero_fraction, np.float64),
        _c(packed.cat_nbits, np.int32),
        _c(packed.cat_other, np.uint8),
        _c(packed.lane_path, np.int32),
        _c(packed.path_offsets, np.int64),
        _c(packed.path_value, np.float64),
        _c(packed.path_group, np.int32),
        _c(packed.bin_offsets, np.int64),
    ]
    lane_cat = cuda.to_device(_c(packed.cat_offsets, np.int64), stream=stream)
    d_sources = [cuda.to_device(a, stream=stream) for a in sources]
    lane_f = cuda.device_array((n, _LF), np.float32, stream=stream)
    lane_i = cuda.device_array((n, _LI), np.int32, stream=stream)
    lane_d = cuda.device_array((n, _LD), np.float64, stream=stream)
    blocks = min((n + _THREADS - 1) // _THREADS, _MAX_BLOCKS)
    lane_fill_kernel[blocks, _THREADS, stream](*d_sources, lane_f, lane_i, lane_d)
    if stream == 0:
        cuda.synchronize()
    else:
        stream.synchronize()
    return dict(lane_f=lane_f, lane_i=lane_i, lane_d=lane_d, lane_cat=lane_cat)
