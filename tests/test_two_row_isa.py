"""The two-row SHAP kernel's lean variant (issue #15): the same float32 PTX per element as the
kernel before it, fewer other instructions (:mod:`benchmarks.kernel_isa`; needs NVVM, no GPU).

Its bits against the one-row and all-features kernels are checked under the CUDA simulator by
``tests/test_quadrature_tiles.py`` (the lean kernel is the default) and on a GPU by the
``gpu``-marked tests there and ``benchmarks/two_row_variants.py``.
"""

from __future__ import annotations

import pytest

from cudasim import nvvm_available


def test_unknown_variant_is_refused():
    from distshap.kernels.cuda.quadrature import _make_two_row_shap_kernel

    with pytest.raises(ValueError, match="variant must be 'lean' or 'old', got 'fast'"):
        _make_two_row_shap_kernel(8, "local", variant="fast")


@pytest.mark.skipif(not nvvm_available(), reason="NVVM (CUDA toolkit compiler) not found")
def test_lean_kernel_keeps_the_float_ops_and_cuts_the_others():
    from benchmarks import kernel_isa

    old = kernel_isa.two_row_kernel(8, "local", "old")
    lean = kernel_isa.two_row_kernel(8, "local", "lean")
    ops_old, ops_lean = kernel_isa.float_ops(old), kernel_isa.float_ops(lean)
    assert set(ops_old) == {"products", "quotients"}
    assert len(ops_old["quotients"]) > 8 * 2 * 2  # a division and an addition per node, row
    assert ops_old == ops_lean  # the same float32 operations per element, in the same order
    counts = [kernel_isa.report(k, sass=False)["ptx"] for k in (old, lean)]
    per_element = [c["products"]["hot_total"] + c["quotients"]["hot_total"] for c in counts]
    assert per_element[1] < 0.8 * per_element[0], per_element
