"""The table kernel's shared tile: each sum as two uint32 words with exact carries.

The tile's entries add with native 32-bit shared atomics (and, for interaction values, the
conditioned element's feature is shuffled from its lane instead of loaded). The tile must give
the bits of the kernel without a tile (int64 global atomics) for interaction values, SHAP
values by tables and pair slots, with partial tiles.
"""

from __future__ import annotations

import pytest

from cudasim import assert_simulator_ok, nvvm_available


def _tile_kernels() -> dict:
    from distshap.kernels.cuda.runtime import ptx
    from distshap.kernels.cuda.tables import table_kernel

    sig = ptx._TABLE_SIG
    slot_sig = sig.replace(", int64, int64)", ", int64, int32[::1], int64[::1])")
    return {
        "interaction": (table_kernel(True), sig),
        "shap_rows4": (table_kernel(True, shap=True, rows4=True), sig),
        "slot": (table_kernel(True, slots=True), slot_sig),
    }


@pytest.mark.skipif(not nvvm_available(), reason="NVVM (CUDA toolkit compiler) not found")
def test_tile_kernels_ptx():
    from numba import cuda

    from distshap.kernels.cuda.runtime.ptx import _device_free_compilation

    with _device_free_compilation((9, 0)):
        for name, (kernel, sig) in _tile_kernels().items():
            text, _ = cuda.compile_ptx(kernel.py_func, sig, cc=(9, 0))
            assert "atom.shared.add.u32" in text, name  # native 32-bit shared adds
            assert "atom.shared.add.u64" not in text and "atom.shared.cas" not in text, name
            assert "atom.global.add.u64" in text, name  # the flush: int64 global atomics
            assert "atom.global.add.f" not in text, name
            assert "vote.sync" in text, name
            assert ".local" not in text, f"{name} spills to local memory"
            assert "call.uni" not in text, f"{name} has a non-inlined call"
            if name == "interaction":
                assert "shfl.sync" in text, name


def test_table_kernel_sizes_are_factory_arguments():
    """Bins a block and tile values are compiled in: one kernel per value, the configuration's
    by default."""
    from distshap.kernels.cuda.tables import table_kernel
    from distshap.plan.config import config_context

    assert table_kernel(True) is table_kernel(True, warps=8, tile_values=4096)
    with config_context(table_warps_per_block=4, shared_tile_values=2048):
        assert table_kernel(True) is table_kernel(True, warps=4, tile_values=2048)
        assert table_kernel(True) is not table_kernel(True, warps=8, tile_values=4096)


_SIM_SCRIPT = r"""
import numpy as np
import tiny
import distshap.kernels.cuda as kc
from distshap.kernels.cuda import pairs as kp
from distshap.packed import build_packed_model
from distshap.pair_slots import build_pair_slots
from distshap.paths import extract_paths
from distshap.plan.config import set_config

def same(a, b, what):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape and a.dtype == b.dtype, what
    assert np.array_equal(a.view(np.uint32), b.view(np.uint32)), what

def both(fn, what, tile_rows):
    out = {}
    for name, rows, least in (("global", 128, 1 << 30), ("tile", tile_rows, 1)):
        set_config(tile_rows=rows, min_tile_rows=least)  # least > rows: no tile
        out[name] = fn()
    same(out["global"], out["tile"], what)
    assert np.any(np.asarray(out["tile"]) != 0), what
    return out["tile"]

set_config(small_max_paths=0)  # not the one-launch route: the table kernels
ens = tiny.random_ensemble(5, n_features=5, n_trees=3, depth=3, n_groups=2, n_categorical=1)
X = tiny.random_rows(6, ens, 7, 0.15)
packed = build_packed_model(extract_paths(ens), table_budget_bytes=1 << 30,
                            max_table_features=10)
# 7 rows in tiles of 3, 3 and 1 rows (a partial tile)
inter = both(lambda: kc.interaction_values(packed, X), "interaction values", 3)
shap = both(lambda: kc.shap_values(packed, X), "SHAP values by tables", 3)
slots = build_pair_slots(packed)
got = both(lambda: kp.interaction_slot_values(packed, X, slots), "pair slots", 3)
group = np.repeat(np.arange(slots.num_groups), np.diff(slots.slot_offsets))
same(got, inter[:, group, slots.slot_i, slots.slot_j], "slots against the full matrices")
same(both(lambda: kc.interaction_values(packed, X), "one tile", 128), inter, "tile sizes")
print("SIMULATOR-OK")
"""


def test_tiles_same_bits_in_simulator():
    assert_simulator_ok(_SIM_SCRIPT, timeout=600)
