"""The split slot kernel's per-element and per-pair PTX (:mod:`benchmarks.kernel_isa`; needs
NVVM, no GPU): the float32 operations the source asks for
(:func:`distshap.kernels.cuda.interaction_quadrature.pair_steps`), per node, and no more than
a bound on the other instructions (the kernel is issue-bound on integer work).

Its slots against the full matrices are checked under the CUDA simulator by
``tests/test_pair_interactions.py`` and on a GPU by the ``gpu``-marked tests there and in
``tests/test_cuda_slot_quadrature.py``.
"""

from __future__ import annotations

from collections import Counter

import pytest

from cudasim import nvvm_available

N_NODES = 4
#: Non-float PTX instructions per (element, row) and per (pair, row). The kernel before issue
#: #16 had 96 and 58.5 (117 per two pairs), the lean one 61 and 35.5, both measured at commit
#: 1957994: bounds between them, with room for compiler changes. The kernel running a block's
#: rows two at a time (a trip is an element or pair of two rows) has 43.5 and 33.
MAX_OTHER_PER_ELEMENT = 80
MAX_OTHER_PER_PAIR = 47


@pytest.mark.skipif(not nvvm_available(), reason="NVVM (CUDA toolkit compiler) not found")
def test_slot_kernel_ptx_per_element_and_pair():
    import numpy as np

    from benchmarks import kernel_isa
    from distshap.plan.geometry import gauss_legendre

    nodes = {f"0f{v:08X}" for v in gauss_legendre(N_NODES)[0].astype(np.float32).view(np.uint32)}
    kernel = kernel_isa.slot_kernel(N_NODES, 2, True)
    ops = kernel_isa.float_ops(*kernel, every=True)
    # the element loop, the pair loop twice (NVVM unswitches it: tile adds, direct adds)
    assert list(ops) == ["fp0", "fp1", "fp2"], list(ops)
    trips = {}
    for name, loop in ops.items():
        names = Counter(op for op, _ in loop)
        assert not [op for op in names if op.startswith(("div.", "sqrt.", "ex2."))], names
        assert all(op == "rcp.approx.ftz.f32" for op in names if op.startswith("rcp")), names
        node_fmas = sum(1 for op, imm in loop if op == "fma.rn.f32" and imm and imm[0] in nodes)
        rcp = names["rcp.approx.ftz.f32"]
        assert rcp > 0 and rcp % N_NODES == 0 and node_fmas == rcp, (name, names)
        trips[name] = rcp // N_NODES  # elements or pairs a trip (NVVM may unroll)
        if name == "fp0":  # forward: prod[m] *= q; usum[m] += d / q (reciprocal, fused add)
            assert names["mul.f32"] == rcp and names["fma.rn.ftz.f32"] == rcp, (name, names)
        else:  # pair: total += part[m] * (d * (1 / q)): a multiply by d and an fma a node
            accumulate = sum(1 for op, _ in loop if op == "fma.rn.f32") - node_fmas
            assert names["mul.rn.ftz.f32"] == rcp and accumulate == rcp, (name, names)
            assert names["cvt.rzi.s64.f32"] == trips[name], (name, names)
    counts = kernel_isa.report(*kernel, sass=False)["ptx"]
    for loop, fp, bound in (("products", "fp0", MAX_OTHER_PER_ELEMENT),
                            ("quotients", "fp1", MAX_OTHER_PER_PAIR)):  # fmt: skip
        other = (counts[loop]["hot_total"] - counts[loop]["hot"]["float"]) / trips[fp]
        assert other <= bound, (loop, other)
