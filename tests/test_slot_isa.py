"""The split slot kernel's lean variant (issue #16): the same float32 PTX per element and per
pair as the kernel before it, fewer other instructions (:mod:`benchmarks.kernel_isa`; needs
NVVM, no GPU).

Its slots against the gathered kernel and the full matrices are checked under the CUDA
simulator by ``tests/test_slot_quadrature.py`` (the lean kernel is the default) and on a GPU
by the ``gpu``-marked tests there and ``benchmarks/slot_variants.py``.
"""

from __future__ import annotations

import pytest

from cudasim import nvvm_available


@pytest.mark.skipif(not nvvm_available(), reason="NVVM (CUDA toolkit compiler) not found")
def test_lean_slot_kernel_keeps_the_float_ops_and_cuts_the_others():
    from benchmarks import kernel_isa

    old = kernel_isa.slot_kernel(4, 2, True, "split", "old")
    lean = kernel_isa.slot_kernel(4, 2, True, "split", "lean")
    ops_old, ops_lean = (kernel_isa.float_ops(*k, every=True) for k in (old, lean))
    # the element loop, the pair loop twice (NVVM unswitches it: tile adds, direct adds)
    assert list(ops_old) == ["fp0", "fp1", "fp2"], list(ops_old)
    assert len(ops_old["fp1"]) > 4 * 2  # a division and an addition per node
    assert ops_old == ops_lean  # the same float32 operations, in the same order
    counts = [kernel_isa.report(*k, sass=False)["ptx"] for k in (old, lean)]
    for loop in ("products", "quotients"):  # per (element, row); per (pair, row)
        hot = [c[loop]["hot_total"] for c in counts]
        assert hot[1] < 0.8 * hot[0], (loop, hot)
