"""The CUDA Banzhaf kernels under Numba's CUDA simulator (no GPU needed) against the CPU
kernels, and their PTX (needs NVVM only)."""

from __future__ import annotations

import pytest

from cudasim import assert_simulator_ok, nvvm_available

SCRIPT = r"""
import numpy as np
from tiny import random_ensemble, random_rows
from distshap import TreeExplainer
from distshap.interventional import build_background, bias_values
from distshap.kernels import banzhaf_cpu
from distshap.kernels.cuda import banzhaf as gpu

def same(a, b):
    np.testing.assert_allclose(np.asarray(a), b, rtol=1e-5, atol=1e-6)

# a path of 14 features: no interventional table (the masks route), none path-dependent either
# with table_budget_bytes=0
ens = random_ensemble(3, n_features=15, n_trees=2, depth=14, n_groups=2, n_categorical=2,
                      split_prob=0.5, repeat_prob=0.0)
X = random_rows(4, ens, n=3)
R = random_rows(5, ens, n=6)
for budget in (1 << 30, 0):
    packed = TreeExplainer(ens, table_budget_bytes=budget).packed
    rows = packed.encoding.apply(X.astype(np.float32))
    background = build_background(packed, R)
    bias = bias_values(background, 0)
    for interactions in (False, True):
        same(gpu.banzhaf_values(packed, rows, interactions),
             banzhaf_cpu.banzhaf_values(packed, rows, interactions))
        same(gpu.interventional_banzhaf_values(packed, background, rows, bias=bias,
                                               interactions=interactions),
             banzhaf_cpu.interventional_banzhaf_values(packed, background, rows, bias=bias,
                                                       interactions=interactions))
gpu.SHARED_BYTES = 0  # values summed in global memory, as for models of many columns
same(gpu.banzhaf_values(packed, rows), banzhaf_cpu.banzhaf_values(packed, rows))
print("SIMULATOR-OK")
"""


def test_simulator_matches_the_cpu_kernels():
    assert_simulator_ok(SCRIPT, timeout=600)


@pytest.mark.skipif(not nvvm_available(), reason="NVVM not available")
def test_kernel_compiles_to_ptx():
    from distshap.kernels.cuda.banzhaf import kernel_ptx

    ptx = kernel_ptx((9, 0))
    assert ".entry" in ptx and ".f64" in ptx
