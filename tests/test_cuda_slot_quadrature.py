"""The pair-slot quadrature kernels (:mod:`distshap.kernels.cuda.slot_quadrature`): the split
32-bit shared sums, and the gathered kernel that runs launches too large for 32-bit offsets.

Both must give the full matrices' entries bit for bit: under the CUDA simulator here (a
subprocess; the default route there is tested by ``tests/test_pair_interactions.py``), on a
GPU (marked ``gpu``).
"""

from __future__ import annotations

import numpy as np
import pytest

import distshap
from distshap.dispatch import explain_rows
from distshap.kernels import cuda_available
from distshap.pair_slots import pair_slots

import xgb_models
from conftest import to_host
from cudasim import assert_simulator_ok, nvvm_available

_SIM_SCRIPT = r"""
import numpy as np
from numba import cuda
from distshap.kernels.cuda.slot_quadrature import _add_split32
from distshap.kernels.cuda.runtime.device import read_split

# split words: many large contributions of both signs, many wraps of the low word
# (one simulated thread: the simulator swaps a device function's module per call, which races
# between threads when the kernel lives in another module)
@cuda.jit
def split_sum(values, out):
    words = cuda.shared.array(4, np.uint32)
    for t in range(4):
        words[t] = 0
    for i in range(values.shape[0]):
        _add_split32(words, i % 2, 2 + i % 2, values[i])
    for t in range(2):
        out[t] = read_split(words, t, 2)

rng = np.random.default_rng(5)
for scale in (1 << 20, 1 << 40, 1 << 58):
    v = rng.integers(-scale, scale, 600, dtype=np.int64)
    v[:7] = [0, -1, 1, scale - 1, -scale, (1 << 32) - 1, -(1 << 32)]
    out = np.zeros(2, np.int64)
    split_sum[1, 1](v, out)
    assert out[0] == v[0::2].sum() and out[1] == v[1::2].sum(), (scale, out)
print("SIMULATOR-OK")
"""


def test_split_words_sum_exactly_under_cuda_simulator():
    """Split uint32 words with carries hold the exact int64 sums, in any order."""
    assert_simulator_ok(_SIM_SCRIPT, timeout=600)


def _signatures():
    from distshap.kernels.cuda.slot_quadrature import gathered_slot_kernel, split_slot_kernel

    xa = "float32[:, ::1]"
    rows = (f"void(float32[:, ::1], int32[:, ::1], int64[:, ::1], int32[::1], float32[::1], "
            f"uint32[::1], int32[::1], int64[::1], int16[:, ::1], int64[::1], int32[::1], {xa}, "
            "int64[:, ::1], float64, int64, int64[::1], int64[::1], int64)")  # fmt: skip
    flat = (f"void(float32[::1], int32[::1], int64[::1], int32[::1], float32[::1], "
            f"uint32[::1], int32[::1], int64[::1], int16[::1], int64[::1], int32[::1], {xa}, "
            "int64[:, ::1], float64, int64, int64[::1], int64[::1], int64)")  # fmt: skip
    return {
        "split": (split_slot_kernel(4, 2, True), flat),
        "split_one_row": (split_slot_kernel(4, 1, True), flat),
        "split_x": (split_slot_kernel(4, 2, False), flat),  # rows read from X
        "gathered": (gathered_slot_kernel(4, 2, True), rows),
    }


@pytest.mark.skipif(not nvvm_available(), reason="NVVM (CUDA toolkit) not installed")
def test_slot_kernels_add_integer_words_in_shared_memory():
    """The split kernel's shared adds are 32-bit (no 64-bit shared atomic, no float atomic);
    the gathered kernel keeps int64 words."""
    from numba import cuda

    from distshap.kernels.cuda.runtime.ptx import _device_free_compilation

    with _device_free_compilation((9, 0)):
        for name, (kernel, sig) in _signatures().items():
            ptx, _ = cuda.compile_ptx(kernel.py_func, sig, cc=(9, 0))
            assert "atom.global.add.u64" in ptx, name  # the flush (or direct adds)
            assert ".f32" not in "".join(ln for ln in ptx.splitlines() if "atom" in ln), name
            shared64 = "atom.shared.add.u64" in ptx or "atom.shared.cas.b64" in ptx
            if "split" in name:
                assert "atom.shared.add.u32" in ptx and not shared64, name
            else:
                assert shared64, name


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="no CUDA GPU visible (run on the GPU host)")
@pytest.mark.parametrize("kind", ["regression", "multiclass", "missing", "categorical"])
def test_gpu_gathered_kernel_gives_the_matrix_bits(kind, monkeypatch):
    """The gathered kernel (forced: real launches reach it past ``2**32`` gathered elements)
    gives the bits of the full matrices' entries, as the split kernel does."""
    from distshap.kernels.cuda import pairs as kp
    from distshap.kernels.cuda import slot_quadrature
    from distshap.plan.config import config_context

    booster, X = xgb_models.MODEL_KINDS[kind]()
    packed = distshap.TreeExplainer(booster, backend="cuda", table_budget_bytes=0).packed
    with config_context(small_max_paths=0):  # the regular kernels for both
        full = to_host(explain_rows(packed, X, True, "cuda"))
    slots = pair_slots(packed)
    group = np.repeat(np.arange(slots.num_groups), np.diff(slots.slot_offsets))
    want = full[:, group, slots.slot_i, slots.slot_j]
    monkeypatch.setattr(slot_quadrature, "slot_kernel_arrays", lambda lay: None)
    with config_context(small_max_paths=0, quadrature_chunk_paths=16):
        got = to_host(kp.interaction_slot_values(packed, X, slots, batch_rows=7))
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_slot_kernel_arrays_flat_below_2_32_elements():
    """Flat views (no copy) for the split slot kernel's 32-bit offsets; ``None`` (the launcher
    runs the gathered kernel) where an array has ``2**32`` elements or more."""
    from types import SimpleNamespace

    from distshap.kernels.cuda.slot_quadrature import slot_kernel_arrays

    ef = np.arange(6 * 5, dtype=np.float32).reshape(6, 5)
    lay = SimpleNamespace(ef=ef, ei=np.zeros((6, 5), np.int32), ecat=np.zeros((2, 5), np.int64),
                          tmap=np.zeros((3, 5), np.int16))  # fmt: skip
    flat = slot_kernel_arrays(lay)
    assert [a.shape for a in flat] == [(30,), (30,), (10,), (15,)]
    assert np.shares_memory(flat[0], ef) and np.array_equal(flat[0][5:10], ef[1])
    # k = 31 features: tmap (496, P) reaches 2**32 elements at P = 8,659,209 paths
    big = SimpleNamespace(shape=(31 * 32 // 2, 8_659_209))
    assert 496 * 8_659_209 >= 2**32 > 496 * 8_659_208
    assert slot_kernel_arrays(SimpleNamespace(ef=ef, ei=ef, ecat=ef, tmap=big)) is None
