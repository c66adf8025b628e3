"""Compiling the CUDA kernels ahead in helper processes that make no CUDA context.

A helper process of :func:`distshap.warmup.start_ahead` compiles kernels of
:mod:`distshap.kernels.cuda.runtime.ptx` into Numba's disk cache while the explaining process
loads the model. A helper that made a CUDA context of its own would share the GPU with the
explaining process while it copies the model to the device; these helpers make none. They are
told the GPU's compute capability (read by the explaining process through the driver, without
a context: :func:`ahead_names`) and, while compiling, Numba's CUDA target is shown a device of
that capability in place of a context (:func:`_without_context`): typing, lowering and NVVM
need no GPU, and the cache entry is keyed as the explaining process keys it (the CUDA
runtime's version and the capability, the signature as a tuple of types). The link to a cubin
needs no context where Numba links with nvJitLink; elsewhere the entry keeps the PTX alone and
the first launch links it. Anything else that would need a context raises in the helper, whose
kernels the explaining process then compiles itself, as without helpers.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["ahead_compile", "ahead_names", "ahead_prepare", "compile_without_context"]

_SEP = "@"  # "kernel_name@9.0": a kernel and the compute capability to compile it for


def ahead_names(groups: list[tuple[str, ...]], cc: tuple[int, int]) -> list[tuple[str, ...]]:
    """The names of :func:`~distshap.kernels.cuda.runtime.ptx.ahead_groups` with the compute
    capability ``cc`` the helper compiles them for (:func:`ahead_compile`)."""
    return [tuple(f"{name}{_SEP}{cc[0]}.{cc[1]}" for name in group) for group in groups]


def ahead_prepare() -> None:
    """A helper process's start (:mod:`distshap.compile_cache`), while the model still loads:
    Numba's CUDA target and the kernels' dispatchers, no context."""
    from distshap.kernels.cuda.runtime import ptx

    ptx._ahead_kernels()


def ahead_compile(name: str) -> None:
    """Compile the kernel of ``name`` (``"kernel@major.minor"``: :func:`ahead_names`) into
    Numba's disk cache without a CUDA context, a helper process's work
    (:func:`distshap.compile_cache.compile_ahead`)."""
    from distshap.kernels.cuda.runtime import ptx

    kernel_name, _, version = name.partition(_SEP)
    major, _, minor = version.partition(".")
    if not (major.isdigit() and minor.isdigit()):
        raise ValueError(f"name={name!r}: use 'kernel@major.minor', as ahead_names makes them")
    kernel, signature = ptx._ahead_kernels()[kernel_name]
    compile_without_context(kernel, signature, (int(major), int(minor)))


def compile_without_context(dispatcher: Any, signature: str, cc: tuple[int, int]) -> bool:
    """Compile the CUDA kernel ``dispatcher`` for ``signature`` and compute capability ``cc``
    into Numba's disk cache, making no CUDA context; False when the cache already held it.

    What the dispatcher's own ``compile`` does on a cache miss, but for its ``bind`` (which
    loads the cubin into a context): the kernel is compiled, linked to a cubin where that needs
    no context, and saved under the key a launch looks up.
    """
    from numba.cuda import dispatcher as cuda_dispatcher

    argtypes, _ = cuda_dispatcher.sigutils.normalize_signature(signature)  # its own types
    key = tuple(argtypes)  # the signature a launch compiles for
    cache = dispatcher._cache
    with _without_context(cc):
        if cache.load_overload(key, dispatcher.targetctx) is not None:
            return False
        kernel = cuda_dispatcher._Kernel(dispatcher.py_func, argtypes, **dispatcher.targetoptions)
        if getattr(kernel, "launch_config_sensitive", False):
            return False  # keyed by its launch configuration too: left to the launch
        try:
            kernel._codelibrary.get_cubin()
        except Exception:  # noqa: BLE001 - a linker that needs a context: the PTX is kept
            pass
        cache.save_overload(key, kernel)
    return True


class _NoContext(Exception):
    """Raised where Numba asks a compile helper's stand-in for more than a compute capability."""


class _Device:
    """A device of a compute capability, for compiling; nothing else."""

    def __init__(self, cc: tuple[int, int]) -> None:
        self.compute_capability = cc
        self.id = 0

    def __getattr__(self, name: str) -> Any:
        raise _NoContext(f"a compile helper has no CUDA device ({name!r} asked)")


class _Context:
    """In place of a CUDA context while a helper compiles: its device's capability only."""

    def __init__(self, cc: tuple[int, int]) -> None:
        self.device = _Device(cc)

    def __getattr__(self, name: str) -> Any:
        raise _NoContext(f"a compile helper has no CUDA context ({name!r} asked)")


@contextmanager
def _without_context(cc: tuple[int, int]) -> Iterator[None]:
    """Numba's CUDA modules see a context of a device of capability ``cc`` (:class:`_Context`)
    wherever they would get or make the current one, for the duration."""
    from numba.cuda import api
    from numba.cuda.cudadrv import devices

    context = _Context(cc)
    stand_ins = {
        devices.get_context: lambda *args, **kwargs: context,
        api.get_current_device: lambda *args, **kwargs: context.device,
    }
    saved = []
    for module in [m for n, m in list(sys.modules.items()) if n.startswith("numba.cuda")]:
        for name, value in list(vars(module).items()):
            stand_in = next((new for old, new in stand_ins.items() if value is old), None)
            if stand_in is not None:
                saved.append((module, name, value))
                setattr(module, name, stand_in)
    try:
        yield
    finally:
        for module, name, value in saved:
            setattr(module, name, value)
