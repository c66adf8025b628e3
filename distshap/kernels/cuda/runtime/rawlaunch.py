"""Launching a compiled Numba kernel through the CUDA driver with a kept parameter block.

A Numba launch costs the host about 100 microseconds when its arguments are CuPy arrays
(each typed through DLPack and wrapped at every launch, the current context looked up
several times), next to a kernel of the small route that runs for tens. :func:`launch` does
what Numba's launch does with less: the kernel is compiled (or read from Numba's disk cache)
by Numba itself, once per argument types and device (:meth:`CUDADispatcher.compile
<numba.cuda.dispatcher.CUDADispatcher.compile>`, the types by the dispatcher's own
``typeof_pyval``), and its parameters are laid out as Numba lays them out (each array as
``meminfo, parent, nitems, itemsize, data, shape..., strides...``; a scalar as its C type):
one int64 slot a parameter in a per-thread block whose pointers are made once. A call
writes the arrays' pointers, shapes and strides into the block and launches with
:func:`cupy.cuda.driver.launchKernel` on CuPy's current stream.

The layout is checked once per compiled kernel against its parameters' sizes as the driver
reports them for the loaded kernel (:func:`driver_param_widths`), or, where the driver cannot
say, as its PTX lists them (a kernel read from Numba's disk cache keeps no PTX: NVVM makes it
again, a fraction of a second a kernel in every new process, which the driver's answer
avoids); a kernel whose parameters do not match, or any failure while setting it up, is
launched by Numba from then on (:func:`launch` returns ``False``), with a warning. The
arithmetic is the kernel's own, so the results are those of a Numba launch, bit for bit
(``tests/test_cuda_small.py`` compares them on a GPU).

Nothing here touches CUDA at import time; under the CUDA simulator nothing is launched here.
"""

from __future__ import annotations

import functools
import re
import threading
import warnings

import numpy as np

from distshap.kernels.cuda.runtime.device import SIM

__all__ = [
    "clear",
    "current_stream",
    "driver_param_widths",
    "flat_layout",
    "launch",
    "ptx_param_widths",
]

_LOCK = threading.Lock()
_KERNELS: dict = {}  # (id(dispatcher), key, device) -> (dispatcher, handle, layout) or None
_LOCAL = threading.local()  # per thread: {(id(dispatcher), key, device): _Block}


def current_stream():
    """CuPy's current stream (the stream :func:`launch` queues on)."""
    import cupy

    return cupy.cuda.get_current_stream()


def flat_layout(argtypes) -> list:
    """Per argument, ``(first slot, kind, extra)`` of Numba's flattened kernel parameters:
    ``("array", ndim)`` (``5 + 2 ndim`` slots), ``("int", bytes)``, ``("bool", 1)``,
    ``("float64", 8)`` or ``("float32", 4)`` (one slot); raises ``TypeError`` otherwise."""
    from numba import types

    out, at = [], 0
    for ty in argtypes:
        if isinstance(ty, types.Array):
            out.append((at, "array", int(ty.ndim)))
            at += 5 + 2 * int(ty.ndim)
        elif isinstance(ty, types.Boolean):
            out.append((at, "bool", 1))
            at += 1
        elif isinstance(ty, types.Integer):
            out.append((at, "int", int(ty.bitwidth) // 8))
            at += 1
        elif ty == types.float64:
            out.append((at, "float64", 8))
            at += 1
        elif ty == types.float32:
            out.append((at, "float32", 4))
            at += 1
        else:
            raise TypeError(f"rawlaunch: no layout for argument type {ty}")
    return out


def _widths(layout) -> list[int]:
    """Bytes of each flattened parameter of ``layout`` (:func:`flat_layout`)."""
    out = []
    for _, kind, extra in layout:
        if kind == "array":
            out += [8] * (5 + 2 * extra)
        else:
            out.append(extra)
    return out


_PARAM = re.compile(r"\.param\s+\.([a-z]+)(\d+)\s")


def ptx_param_widths(ptx: str, name: str | None = None) -> list[int]:
    """Bytes of each parameter of the (named, else the first) ``.entry`` of ``ptx``."""
    at = ptx.find(f".entry {name}") if name else ptx.find(".entry ")
    if at < 0:
        raise ValueError("rawlaunch: no .entry in the PTX")
    params = ptx[at : ptx.index(")", at)]
    return [int(bits) // 8 for _, bits in _PARAM.findall(params)]


#: More parameters than any kernel has: where the driver's answers would run past it, they are
#: not believed.
_MAX_PARAMS = 4096


@functools.cache
def _param_info():
    """The driver's ``cuFuncGetParamInfo`` (CUDA 12.4 and later) with its prototype, or None."""
    import ctypes

    try:
        query = ctypes.CDLL("libcuda.so.1").cuFuncGetParamInfo
    except (OSError, AttributeError):
        return None
    size_p = ctypes.POINTER(ctypes.c_size_t)
    query.restype = ctypes.c_int
    query.argtypes = [ctypes.c_void_p, ctypes.c_size_t, size_p, size_p]
    return query


def driver_param_widths(handle: int) -> list[int] | None:
    """Bytes of each parameter of the loaded kernel ``handle`` as the driver reports them
    (``cuFuncGetParamInfo``, CUDA 12.4 and later), or ``None`` where it cannot say."""
    import ctypes

    query = _param_info()
    if query is None:
        return None
    size, offset = ctypes.c_size_t(), ctypes.c_size_t()
    widths: list[int] = []
    while len(widths) <= _MAX_PARAMS:  # past the last one: CUDA_ERROR_INVALID_VALUE
        if query(ctypes.c_void_p(handle), len(widths), offset, size) != 0:
            return widths or None
        widths.append(int(size.value))
    return None


class _Block:
    """One thread's parameters of one kernel: an int64 slot each, their pointers made once,
    and the last array written at each argument (kept, so its id stays its own)."""

    def __init__(self, n_slots: int, n_args: int):
        import ctypes

        self.slots = np.zeros(max(1, n_slots), np.int64)
        base = self.slots.ctypes.data
        self.pointers = (ctypes.c_void_p * max(1, n_slots))(
            *(base + 8 * i for i in range(max(1, n_slots)))
        )
        self.address = ctypes.addressof(self.pointers)
        self.last = [None] * n_args


def _array_fields(a) -> tuple:
    """``(pointer, shape, strides, size, itemsize)`` of a device array (CuPy, Numba or any
    ``__cuda_array_interface__`` exporter)."""
    data = getattr(a, "data", None)
    if data is not None and hasattr(data, "ptr"):  # CuPy
        return int(data.ptr), a.shape, a.strides, int(a.size), int(a.itemsize)
    if hasattr(a, "device_ctypes_pointer"):  # Numba device (or mapped) array
        ptr = a.device_ctypes_pointer.value or 0
        return int(ptr), a.shape, a.strides, int(a.size), int(a.dtype.itemsize)
    cai = a.__cuda_array_interface__
    dtype = np.dtype(cai["typestr"])
    shape = tuple(cai["shape"])
    strides = cai.get("strides") or tuple(
        int(np.prod(shape[i + 1 :], dtype=np.int64)) * dtype.itemsize for i in range(len(shape))
    )
    return int(cai["data"][0]), shape, tuple(strides), int(np.prod(shape)), dtype.itemsize


def _setup(dispatcher, args, device: int):
    """Compile (or fetch) the kernel for ``args``' types; its handle and layout."""
    from numba import cuda

    argtypes = tuple(dispatcher.typeof_pyval(a) for a in args)
    kernel = dispatcher.compile(argtypes)
    kernel.bind()
    layout = flat_layout(argtypes)
    handle = kernel.library.get_cufunc().handle  # a CUfunction or CUkernel (both launch)
    try:
        handle = int(handle)  # cuda-python handles
    except TypeError:
        handle = int(handle.value or 0)  # ctypes handles
    if not handle:
        raise RuntimeError("rawlaunch: no function handle")
    found = driver_param_widths(handle)
    if found is None:  # an older driver: the PTX's list (NVVM makes it again if need be)
        try:
            ptx = kernel.inspect_asm(cuda.get_current_device().compute_capability)
        except Exception:  # noqa: BLE001 - no PTX at all: Numba's layout
            ptx = None
        found = _widths(layout) if ptx is None else ptx_param_widths(ptx, kernel.entry_name)
    if found != _widths(layout):
        raise RuntimeError(f"rawlaunch: kernel parameters {found} are not Numba's layout "
                           f"{_widths(layout)}")  # fmt: skip
    return handle, layout


def _kernel(dispatcher, key, args, device: int):
    k = (id(dispatcher), key, device)
    hit = _KERNELS.get(k)
    if hit is None and k not in _KERNELS:
        try:
            handle, layout = _setup(dispatcher, args, device)
            hit = (dispatcher, handle, layout)
        except Exception as e:  # noqa: BLE001 - any failure: Numba launches it instead
            warnings.warn(f"rawlaunch: launching {getattr(dispatcher, '__name__', dispatcher)} "
                          f"through Numba ({type(e).__name__}: {e})", RuntimeWarning,
                          stacklevel=3)  # fmt: skip
            hit = None
        with _LOCK:
            _KERNELS[k] = hit
    return hit


def launch(dispatcher, key, grid: int | tuple, block: int, shared: int, args, stream,
           constants: tuple | None = None) -> bool:  # fmt: skip
    """Launch ``dispatcher`` (a ``cuda.jit`` kernel) on ``grid`` (blocks, or ``(x, y)``
    blocks) x ``block`` threads with
    ``shared`` bytes of dynamic shared memory and ``args`` on the CuPy ``stream``; ``False``
    (nothing launched) where it must go through Numba (the simulator, a layout that does not
    match). ``key`` names the argument types: every call with one key
    passes arrays of the same dtypes, dimensions and layout, and scalars of the same
    types, on each device (the caller's promise; the first call's types are compiled).
    ``constants`` (a flag an argument): the arrays that stay the same object for life (a
    model's), whose fields are written again only when another object comes; the others are
    not kept (by default: every array but CuPy's is kept, until the next launch)."""
    if SIM:
        return False
    import cupy

    device = cupy.cuda.runtime.getDevice()
    hit = _kernel(dispatcher, key, args, device)
    if hit is None:
        return False
    _, handle, layout = hit
    blocks = getattr(_LOCAL, "blocks", None)
    if blocks is None:
        blocks = _LOCAL.blocks = {}
    k = (id(dispatcher), key, device)
    b = blocks.get(k)
    if b is None:
        n_slots = layout[-1][0] + (5 + 2 * layout[-1][2] if layout[-1][1] == "array" else 1)
        b = blocks[k] = _Block(n_slots, len(layout))
    slots, last = b.slots, b.last
    for i, (at, kind, extra) in enumerate(layout):
        a = args[i]
        if kind == "array":
            if last[i] is a:
                continue  # the same constant array as the last launch: the same fields
            ptr, shape, strides, size, itemsize = _array_fields(a)
            slots[at : at + 5 + 2 * extra] = (0, 0, size, itemsize, ptr, *shape, *strides)
            if constants is None:
                keep = not hasattr(getattr(a, "data", None), "ptr")  # not CuPy
            else:
                keep = constants[i]
            last[i] = a if keep else None  # kept, its id stays its own
        elif kind in ("int", "bool"):
            slots[at] = int(a)  # little-endian: the low bytes hold the value
        elif kind == "float64":
            slots[at : at + 1] = np.array([a], np.float64).view(np.int64)
        else:
            slots[at] = int(np.array([a], np.float32).view(np.int32)[0])
    gx, gy = (int(grid[0]), int(grid[1])) if isinstance(grid, tuple) else (int(grid), 1)
    cupy.cuda.driver.launchKernel(handle, gx, gy, 1, block, 1, 1, shared, stream.ptr,
                                  b.address, 0)  # fmt: skip
    return True


def clear() -> None:
    """Forget the compiled kernels' handles (every thread's blocks stay until it ends)."""
    with _LOCK:
        _KERNELS.clear()
