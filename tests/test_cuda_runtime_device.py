"""The CUDA simulator runs our kernels faithfully: a device function of another module, called
by every thread of a block at once, keeps the simulator's ``cuda`` module for its whole call."""

from __future__ import annotations

from cudasim import assert_simulator_ok

_SCRIPT = """
import sys
import numpy as np
from numba import cuda
from distshap.kernels.cuda.runtime.device import ballot

sys.setswitchinterval(1e-6)  # switch threads often: the race showed within a few launches


@cuda.jit
def count_ballots(out):
    t = cuda.threadIdx.x
    acc = 0
    for i in range(40):
        bits = ballot(0xFFFFFFFF, (t + i) % 3 == 0)
        acc += (bits >> ((t + 1) & 31)) & 1
    out[t] = acc


expected = np.array([sum(((t - (t & 31) + ((t + 1) & 31)) + i) % 3 == 0 for i in range(40))
                     for t in range(128)])
out = np.zeros(128, np.int64)
for _ in range(5):
    out[:] = -1
    count_ballots[1, 128](out)
    assert (out == expected).all(), (out, expected)
print("SIMULATOR-OK")
"""


def test_cross_module_device_functions_keep_the_simulator_module():
    """``device.ballot`` (shared memory, ``threadIdx``, ``syncthreads``) called by 128 threads
    from a kernel of another module: every call sees the simulator's module and gives the
    warp's bits (the simulator's own per-call swap let one thread's return strip the module
    from another thread still inside: ``module 'numba.cuda' has no attribute 'threadIdx'``)."""
    assert_simulator_ok(_SCRIPT, timeout=300, threads=True)  # the race needs preemption
