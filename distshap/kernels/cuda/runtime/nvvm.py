"""float32 PTX instructions for the CUDA kernels that Numba has no function for.

``rcp_ftz`` (``rcp.approx.ftz.f32``, one ``MUFU.RCP``), ``mul_ftz`` (``mul.rn.ftz.f32``) and
``fma_ftz`` (``fma.rn.ftz.f32``): the parts of :func:`distshap.kernels.cuda.runtime.device.fdiv` and
:func:`~distshap.kernels.cuda.runtime.device.add_quotient`. Each is a Numba intrinsic (an NVVM
intrinsic call, or inline PTX where NVVM has none).

Device code must call them as attributes of this module (``nvvm.rcp_ftz(x)``), never bound
to a global name: a kernel's disk-cache key pickles the device functions in its closure with
the globals they use, and an intrinsic object pickles with a new id in every process (every
run would compile again), while a module pickles by its name. Importing this module touches
no GPU.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core.extending import intrinsic

__all__ = ["fma_ftz", "mul_ftz", "rcp_ftz"]


def _codegen(name: str, arity: int):
    """Code generation of a call to the float32 NVVM intrinsic ``name``, or of the PTX
    instruction ``name`` (``"asm:..."``, as inline assembly) where NVVM has no intrinsic."""

    def codegen(context, builder, signature, args):
        fnty = ir.FunctionType(ir.FloatType(), [ir.FloatType()] * arity)
        if name.startswith("asm:"):
            operands = ", ".join(f"${i + 1}" for i in range(arity))
            text = f"{name[4:]} $0, {operands};"
            return builder.call(ir.InlineAsm(fnty, text, "=f" + ",f" * arity), args)
        return builder.call(cgutils.get_or_insert_function(builder.module, fnty, name), args)

    return codegen


_F32 = types.float32


@intrinsic
def rcp_ftz(typingctx, a):
    """The approximate reciprocal of ``a`` (``rcp.approx.ftz.f32``)."""
    return _F32(_F32), _codegen("asm:rcp.approx.ftz.f32", 1)


@intrinsic
def mul_ftz(typingctx, a, b):
    """``a * b`` rounded to nearest, subnormals flushed (``mul.rn.ftz.f32``: never fused)."""
    return _F32(_F32, _F32), _codegen("llvm.nvvm.mul.rn.ftz.f", 2)


@intrinsic
def fma_ftz(typingctx, a, b, c):
    """``a * b + c`` with one rounding, subnormals flushed (``fma.rn.ftz.f32``)."""
    return _F32(_F32, _F32, _F32), _codegen("llvm.nvvm.fma.rn.ftz.f", 3)
