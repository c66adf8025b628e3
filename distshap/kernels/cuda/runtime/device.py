"""Device helpers shared by the CUDA kernels, and the layout of the lane arrays they read.

* The TreeSHAP building blocks of :mod:`distshap.kernels.treeshap` compiled as device
  functions (the CPU kernel compiles the same Python functions with ``njit``).
* Warp intrinsics and fast division; under the CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``),
  which has no warp intrinsics, ``ballot`` is emulated through block shared memory.
* The fixed-point conversion every kernel adds with (integer atomics: deterministic sums),
  and the split int64 sums of shared-memory tiles (:func:`read_split`): two uint32 words a
  sum, added with native 32-bit atomics instead of the compare-and-swap loop that a 64-bit
  shared-memory atomic add compiles to. The adders use ``cuda.atomic``, so each kernel module
  keeps its own (under the CUDA simulator a device function may use ``cuda.*`` only from its
  kernel's module: the simulator swaps a module's ``cuda`` per device call, which races
  between simulated threads).
* Named columns of the device model's lane arrays (built by :mod:`.model`): a kernel reads
  ``lane_i[li, LI_FEATURE]``, never a bare column number.
* Host-side helpers: the array module (CuPy, NumPy under the simulator), the current stream
  and device.
"""

from __future__ import annotations

import math
import os

import numpy as np
from numba import cuda

from distshap import compile_cache
from distshap.kernels import treeshap

__all__ = [
    "CAT_OTHER_FLAG", "FULL_MASK", "LD_VALUE", "LD_ZERO", "LF_LOWER", "LF_UPPER", "LF_VALUE",
    "LF_ZERO", "LI_COLUMNS", "LI_FEATURE", "LI_FEATURES", "LI_FLAGS", "LI_GROUP", "LI_NBITS",
    "LI_POSITION", "LI_START", "MISSING_FLAG", "SIM", "add_quotient", "ballot", "device_id",
    "extend_path", "fdiv", "fixed", "follows", "lane_follows", "read_split", "stream",
    "unwound_sum", "xp",
]  # fmt: skip

SIM = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")
FULL_MASK = 0xFFFFFFFF

# lane_f, float32 (n_lanes, 4): the interval and the values the float32 kernels use
LF_LOWER, LF_UPPER, LF_ZERO, LF_VALUE = 0, 1, 2, 3
# lane_i, int32 (n_lanes, LI_COLUMNS): feature (-1: a path's bias lane), position in the path
# (0: bias lane), warp lane of the path's bias lane in its bin, features k of the path, output
# group, flags, categories of a categorical element
LI_FEATURE, LI_POSITION, LI_START, LI_FEATURES, LI_GROUP, LI_FLAGS, LI_NBITS = range(7)
LI_COLUMNS = 8  # one spare column: rows of 32 bytes
# lane_d, float64 (n_lanes, 2): what the float64 kernels (table fill, fallback) use
LD_ZERO, LD_VALUE = 0, 1
# bits of lane_i[:, LI_FLAGS]: NaN follows the element; other categories follow it
MISSING_FLAG, CAT_OTHER_FLAG = 1, 2

compile_cache.listen_cuda()  # one line when a CUDA kernel is compiled, not loaded

follows = cuda.jit(device=True)(treeshap.follows)
extend_path = cuda.jit(device=True)(treeshap.extend_path)
unwound_sum = cuda.jit(device=True)(treeshap.unwound_sum)

if SIM:  # pragma: no cover - only under NUMBA_ENABLE_CUDASIM=1
    import sys
    import threading
    from contextlib import contextmanager

    from numba.cuda.simulator import kernel as _sim_kernel

    _SWAP_LOCK = threading.Lock()
    _CUDA_NAMES: dict[int, tuple[dict, list]] = {}  # id(globals) -> (globals, names of cuda)
    _SWAPPED: set[int] = set()  # the module globals holding the launch's fake module now
    # this module's own ``cuda`` is swapped while its device functions run: keep the real one
    # where no swap reaches it
    _REAL_CUDA = (cuda,)

    @contextmanager
    def _launch_module_swap(fn, fake_cuda_module):
        """The simulator's swap of a function's ``cuda`` global, made safe for threads.

        On each device-function call the simulator puts its fake ``cuda`` module in the
        function's module globals and puts the real one back on return. The threads of a
        block call a device function of another module at once, so one thread's return put the
        real module back while another thread was still inside it (``module 'numba.cuda' has
        no attribute 'threadIdx'``, at random). Here a device function's module keeps the
        launch's fake module until the launch ends (the host thread's swap of the kernel
        restores every module swapped meanwhile), and a thread finding it in place already
        takes no lock: hundreds of threads taking one lock twice a device call queued behind
        the host thread's polling for many minutes.
        """
        globs = fn.__globals__
        key = id(globs)
        entry = _CUDA_NAMES.get(key)
        if entry is None or any(globs[name] is not fake_cuda_module for name in entry[1]):
            with _SWAP_LOCK:
                entry = _CUDA_NAMES.get(key)
                if entry is None:
                    entry = (globs, [name for name, v in globs.items() if v is _REAL_CUDA[0]])
                    _CUDA_NAMES[key] = entry
                globs.update(dict.fromkeys(entry[1], fake_cuda_module))
                _SWAPPED.add(key)
        if isinstance(threading.current_thread(), _sim_kernel.BlockThread):
            yield  # a device function inside a launch
            return
        try:
            yield
        finally:  # the launch ended: every module swapped during it gets the real module back
            with _SWAP_LOCK:
                for swapped in _SWAPPED:
                    module_globals, names = _CUDA_NAMES[swapped]
                    module_globals.update(dict.fromkeys(names, _REAL_CUDA[0]))
                _SWAPPED.clear()

    _sim_kernel.swapped_cuda_module = _launch_module_swap

    from numba.core import types as _types
    from numba.cuda.simulator import kernelapi as _sim_api
    from numba.np import numpy_support as _numpy_support

    _SHARED_LOCK = threading.Lock()

    def _block_shared_array(self, shape, dtype):
        """The simulator's ``cuda.shared.array``, its array made once per block and call site
        under a lock (the simulator's own check-then-store let two threads of a block each
        make an array at once: each wrote its own, and a reduction read another's)."""
        if isinstance(dtype, _types.Type):
            dtype = _numpy_support.as_dtype(dtype)
        if shape == 0:  # dynamic shared memory: one buffer for the block already
            return _plain_shared_array(self, shape, dtype)
        frame = sys._getframe(1)
        caller = (frame.f_code.co_filename, frame.f_lineno)
        with _SHARED_LOCK:
            array = self._allocations.get(caller)
            if array is None:
                array = self._allocations[caller] = np.empty(shape, dtype)
        return array

    _plain_shared_array = _sim_api.FakeCUDAShared.array
    _sim_api.FakeCUDAShared.array = _block_shared_array

    @cuda.jit(device=True)  # a device function: the simulator lends it its thread context
    def ballot(mask, predicate):
        """Bit ``i``: the predicate of lane ``i`` of this warp (all lanes call in lockstep)."""
        buf = cuda.shared.array(1024, np.int64)
        t = cuda.threadIdx.x
        buf[t] = 1 if predicate else 0
        cuda.syncthreads()
        w = t - (t & 31)
        bits = 0
        for i in range(32):
            if buf[w + i] != 0:
                bits |= 1 << i
        cuda.syncthreads()
        return np.uint32(bits)

    def fdiv(a, b):
        return a / b

    def add_quotient(total, a, b):
        return total + a / b

else:
    from distshap.kernels.cuda.runtime import nvvm  # called as nvvm.name: see its docstring

    @cuda.jit(device=True)
    def ballot(mask, predicate):
        """``cuda.ballot_sync`` as a device function (inlined): the intrinsic itself pickles
        with a per-process id, which would give every kernel closing over a device function
        that calls it a new disk-cache key (``cache=True``) in every process."""
        return cuda.ballot_sync(mask, predicate)

    @cuda.jit(device=True)
    def fdiv(a, b):
        """float32 ``a / b`` to 2 ulp (every divisor here is > 0): ``a`` times the approximate
        reciprocal of ``b``, subnormals flushed to zero.

        The value of libdevice's ``fast_fdividef`` (``div.approx.f32``, what this was) for
        normal operands and results, without the range test and two predicated scalings that
        ptxas wraps around its reciprocal for subnormal divisors: two instructions instead of
        five in the quadrature kernels' innermost loops. A subnormal dividend or quotient
        (below 1.2e-38) becomes 0; its fixed-point contribution truncates to 0 either way
        unless the fixed-point scale is near 2**100 (:mod:`.model`: only models whose largest
        sums are below about 1e-12 get such scales). A device function (inlined), so kernels
        that call it keep one disk-cache key (see :func:`ballot`)."""
        return nvvm.mul_ftz(np.float32(a), nvvm.rcp_ftz(np.float32(b)))

    @cuda.jit(device=True)
    def add_quotient(total, a, b):
        """``total + a / b`` as :func:`fdiv`, the product fused into the sum (one rounding).

        With ``div.approx.f32`` ptxas fused the quotient's multiply into a following add; the
        flushing multiply cannot fuse with a plain add, so this writes the fused form out
        (``fma.rn.ftz``): the same value as before for normal numbers, in two instructions."""
        return nvvm.fma_ftz(np.float32(a), nvvm.rcp_ftz(np.float32(b)), np.float32(total))


@cuda.jit(device=True)
def lane_follows(x, lane_f, lane_i, lane_cat, cat_words, li):
    """Whether value ``x`` follows the element of lane ``li`` (:func:`follows` on its fields)."""
    flags = lane_i[li, LI_FLAGS]
    return follows(x, lane_f[li, LF_LOWER], lane_f[li, LF_UPPER], (flags & MISSING_FLAG) != 0,
                   (flags & CAT_OTHER_FLAG) != 0, lane_cat[li], lane_i[li, LI_NBITS],
                   cat_words)  # fmt: skip


@cuda.jit(device=True)
def fixed(value, scale):
    """``round(value * scale)`` as int64 (the fixed-point representation), float64 inputs."""
    return np.int64(math.floor(value * scale + 0.5))


# Split sums: an int64 sum kept as two uint32 words, lo and hi. A contribution ``v = h 2**32 +
# l`` (``h = v >> 32``, ``0 <= l < 2**32``) adds ``l`` to lo (a native 32-bit atomic that
# returns the old word) and ``h + carry`` to hi, ``carry`` 1 where that add wrapped lo around.
# The carries count exactly the wraps of lo, so ``hi 2**32 + lo`` is the int64 sum modulo
# ``2**64`` whatever the order of the adds; every sum is below ``2**61`` in magnitude
# (:mod:`distshap.kernels.cuda.runtime.model`), so :func:`read_split` gets it back exactly (hi as a
# signed 32-bit number). The GPU adds 32-bit words in shared memory natively; a 64-bit add
# there is a compare-and-swap loop (``ATOMS.CAST.SPIN.64``), retried for every other lane of
# the warp that hit the same word. The same 8 bytes a sum as an int64 word.
_TWO32 = np.int64(1 << 32)
_SIGN32 = np.int64(1 << 31)


@cuda.jit(device=True)
def read_split(words, i, hi_offset):
    """The int64 sum ``i`` kept as split words (the comment above)."""
    hi = np.int64(words[hi_offset + i])
    if hi >= _SIGN32:
        hi -= _TWO32
    return hi * _TWO32 + np.int64(words[i])


def xp():
    """CuPy on a GPU; NumPy under the CUDA simulator (which runs kernels on host arrays)."""
    if SIM:
        return np
    import cupy

    return cupy


def stream():
    """The current CuPy stream as a Numba stream (0 under the simulator)."""
    if SIM:
        return 0
    import cupy

    ptr = cupy.cuda.get_current_stream().ptr
    return cuda.external_stream(ptr) if ptr else cuda.default_stream()


def device_id() -> int:
    """Id of the current device (0 under the simulator): what keys per-device caches.

    By CuPy's runtime call (where CuPy allocates; the device of the current context, as
    Numba's): Numba's ``cuda.get_current_device()`` looks the context up through the driver
    at every call outside its own launches."""
    if SIM:
        return 0
    import cupy

    return int(cupy.cuda.runtime.getDevice())
