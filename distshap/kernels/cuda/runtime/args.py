"""What a kernel launch costs the host, made small: cached streams, launch configurations and
argument views (public Numba APIs only).

Every Numba launch ``kernel[grid, block, stream](*args)`` costs host time in three places:

* ``kernel[grid, block, stream]`` builds a launch configuration (and checks the grid size,
  warning about small grids, which small inputs have by nature): :func:`configured` keeps one
  per ``(kernel, grid, block, stream handle)``;
* the stream: :func:`cuda.runtime.device.stream` wraps CuPy's current stream in a new
  Numba stream object on every call; :func:`current_stream` keeps one per stream pointer;
* each array argument is typed and converted at every launch. A CuPy array is exported through
  DLPack twice (once to type it, once to read its pointer and strides); a Numba
  ``DeviceNDArray`` keeps both its type and its pointer view (cached on the object), so device
  arrays made once (the device model's: ``cuda.to_device``) cost least. :func:`view` turns a
  CuPy array that several launches read (a batch's rows and accumulator) into one
  ``DeviceNDArray`` (``cuda.as_cuda_array``, no copy, no synchronisation), paid once for all
  of them.

Results do not depend on any of it. Nothing here touches CUDA at import time.
"""

from __future__ import annotations

import threading
import warnings
from collections import OrderedDict

from distshap.kernels.cuda.runtime import rawlaunch
from distshap.kernels.cuda.runtime.device import SIM

__all__ = ["clear", "configured", "current_stream", "launch", "stream_key", "view"]

_CONFIGS: OrderedDict = OrderedDict()  # (id(kernel), grid, block, shared, stream key) -> config
_KERNELS: dict = {}  # id(kernel) -> kernel: an id in a key stays that kernel's
_STREAMS: dict = {}  # CuPy stream pointer -> its Numba stream
_LOCK = threading.Lock()
_MAX_CONFIGS = 512


def current_stream():
    """CuPy's current stream as a Numba stream, made once per stream pointer (0 under the
    simulator)."""
    if SIM:
        return 0
    import cupy

    from distshap.kernels.cuda.runtime.device import stream

    ptr = cupy.cuda.get_current_stream().ptr
    s = _STREAMS.get(ptr)
    if s is None:
        s = stream()
        with _LOCK:
            _STREAMS[ptr] = s
    return s


def stream_key(s) -> int:
    """An integer naming the stream ``s`` (a Numba stream or 0): its handle."""
    handle = getattr(s, "handle", s)
    try:
        return int(handle or 0)
    except TypeError:  # a handle object without __int__: its value
        return int(getattr(handle, "value", 0) or 0)


def configured(kernel, grid, block, s, shared: int = 0):
    """``kernel[grid, block, s, shared]``, built once per grid, block, shared memory size and
    stream and kept (the last 512), with no warning about small grids. Under the simulator it
    is made at each launch: the simulator's ``kernel[...]`` re-dimensions the kernel object
    itself, so a kept one would launch with the dimensions set last."""
    if SIM:
        return kernel[grid, block, s, shared]
    key = (id(kernel), grid, block, shared, stream_key(s))
    hit = _CONFIGS.get(key)
    if hit is not None:
        return hit
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*under-utilization.*")
        hit = kernel[grid, block, s, shared]
    with _LOCK:
        _KERNELS[id(kernel)] = kernel  # the id cannot be reused while the key lives
        _CONFIGS[key] = hit
        while len(_CONFIGS) > _MAX_CONFIGS:
            _CONFIGS.popitem(last=False)
    return hit


class _Stream:
    """A stream as :func:`.rawlaunch.launch` takes it: its handle as ``ptr``."""

    __slots__ = ("ptr",)

    def __init__(self, ptr: int) -> None:
        self.ptr = ptr


def _signature(a) -> tuple | type:
    """What a kernel's compiled types depend on in the argument ``a``: an array's kind,
    dtype, dimensions and layout as Numba types it (C-, else F-contiguous, else any); a
    scalar's Python type."""
    if not hasattr(a, "dtype") or not hasattr(a, "shape"):
        return type(a)
    flags = a.flags
    if isinstance(flags, dict):  # a Numba device array's
        c, f = flags["C_CONTIGUOUS"], flags["F_CONTIGUOUS"]
    else:
        c, f = flags.c_contiguous, flags.f_contiguous
    return type(a), a.dtype.str, len(a.shape), "C" if c else "F" if f else "A"


def launch(kernel, grid, block: int, s, shared: int, arguments: tuple) -> None:
    """``configured(kernel, grid, block, s, shared)(*arguments)``, launched through the driver
    with a kept parameter block (:func:`.rawlaunch.launch`: the same compiled kernel, so the
    same bits, for a fraction of Numba's host time a launch) where it can be, else by Numba.
    Read-only hints (``numba.cuda.In``) are handed to the driver as the arrays they wrap."""
    if not SIM:
        from numba.cuda.args import ArgHint

        bare, key, constants = [], ["args"], []
        for a in arguments:
            hint = isinstance(a, ArgHint)
            if hint:  # a kept hint wraps the same array for life: typed once
                sig = getattr(a, "_distshap_signature", None)
                if sig is None:
                    sig = a._distshap_signature = _signature(a.value)
                bare.append(a.value)
                key.append(sig)
            else:
                bare.append(a)
                key.append(_signature(a))
            constants.append(hint)  # only a model's arrays are kept between launches
        stream = _Stream(stream_key(s))
        if rawlaunch.launch(kernel, tuple(key), grid, block, shared, bare, stream, constants):
            return
    configured(kernel, grid, block, s, shared)(*arguments)


def view(a):
    """A ``DeviceNDArray`` view of the CuPy array ``a`` (no copy, no stream synchronisation),
    for several launches to share; anything else (NumPy under the simulator, Numba device
    arrays) as it is."""
    if SIM or not hasattr(a, "__cuda_array_interface__"):
        return a
    if hasattr(a, "__cuda_memory__"):  # a Numba device array already
        return a
    from numba import cuda

    return cuda.as_cuda_array(a, sync=False)


def clear() -> None:
    """Drop the kept launch configurations and streams."""
    with _LOCK:
        _CONFIGS.clear()
        _KERNELS.clear()
        _STREAMS.clear()
