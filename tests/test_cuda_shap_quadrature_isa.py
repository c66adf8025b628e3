"""The two-row SHAP kernel's per-element PTX (:mod:`benchmarks.kernel_isa`; needs
NVVM, no GPU): the float32 operations the source asks for, per node and row, and no more
than a bound on the other instructions (the kernel is issue-bound).

Its bits against the one-row and all-features kernels are checked under the CUDA simulator by
``tests/test_cuda_shap_quadrature.py`` and on a GPU by the ``gpu``-marked tests there.
"""

from __future__ import annotations

from collections import Counter

import pytest

from cudasim import nvvm_available

N_NODES = 8
#: Non-float PTX instructions per path element (two rows), products and quotients loops
#: together: a bound between the earlier kernel's count and the lean one's (both in
#: ``benchmarks/RESULTS.md``), with room for compiler changes.
MAX_OTHER_PER_ELEMENT = 125


def _node_fmas(ops, nodes) -> int:
    """``z + t_m d``: an fma with a node's float32 constant."""
    return sum(1 for op, imm in ops if op == "fma.rn.f32" and imm and imm[0] in nodes)


@pytest.mark.skipif(not nvvm_available(), reason="NVVM (CUDA toolkit compiler) not found")
def test_two_row_kernel_ptx_per_element():
    import numpy as np

    from benchmarks import kernel_isa
    from distshap.plan.geometry import gauss_legendre

    nodes = {f"0f{v:08X}" for v in gauss_legendre(N_NODES)[0].astype(np.float32).view(np.uint32)}
    kernel = kernel_isa.two_row_kernel(N_NODES, "local")
    ops = kernel_isa.float_ops(kernel)
    assert set(ops) == {"products", "quotients"}, set(ops)
    per_loop = {}
    for loop in ("products", "quotients"):
        names = Counter(op for op, _ in ops[loop])
        assert not [op for op in names if op.startswith(("div.", "sqrt.", "ex2."))], names
        assert all(op == "rcp.approx.ftz.f32" for op in names if op.startswith("rcp")), names
        fmas = _node_fmas(ops[loop], nodes)
        assert fmas > 0 and fmas % (2 * N_NODES) == 0, (loop, fmas)
        per_loop[loop] = fmas // (2 * N_NODES)  # path elements a trip (NVVM may unroll)
        if loop == "products":  # prod[m] *= z + t_m d, two rows: an fma and a multiply a node
            assert names["mul.f32"] == fmas, (loop, names)
            assert names["rcp.approx.ftz.f32"] == 0, (loop, names)
        else:  # total += prod[m] / (z + t_m d): an fma, a reciprocal and a fused add a node
            assert names["rcp.approx.ftz.f32"] == fmas, (loop, names)
            assert names["fma.rn.ftz.f32"] == fmas, (loop, names)
            assert names["cvt.rzi.s64.f32"] == 2 * per_loop[loop], (loop, names)
    counts = kernel_isa.report(kernel, sass=False)["ptx"]
    other = sum(
        (counts[loop]["hot_total"] - counts[loop]["hot"]["float"]) / per_loop[loop]
        for loop in ("products", "quotients")
    )
    assert other <= MAX_OTHER_PER_ELEMENT, other
