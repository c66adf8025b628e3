"""The table kernels' shared tile as split uint32 words (``config.TABLE_TILE_WORDS``).

``"split"`` keeps each tile entry as two uint32 words added with native 32-bit shared atomics
and exact carries (and, for interaction values, shuffles the conditioned element's feature
instead of loading it); ``"int64"`` is the previous kernel. Both must give the same bits for
interaction values, SHAP values by tables and pair slots, with partial tiles.
"""

from __future__ import annotations

import pytest

from cudasim import assert_simulator_ok, nvvm_available


def _split_kernels() -> dict:
    from distshap.kernels.cuda import ptx
    from distshap.kernels.cuda.tables import table_kernel

    sig = ptx._TABLE_SIG
    slot_sig = sig.replace(", int64, int64)", ", int64, int32[::1], int64[::1])")
    return {
        "interaction_split": (table_kernel(True, split=True), sig),
        "shap_split_rows4": (table_kernel(True, shap=True, rows4=True, split=True), sig),
        "shap_split_1row": (table_kernel(True, shap=True, split=True), sig),
        "slot_split": (table_kernel(True, slots=True, split=True), slot_sig),
    }


@pytest.mark.skipif(not nvvm_available(), reason="NVVM (CUDA toolkit compiler) not found")
def test_split_tile_kernels_ptx():
    from numba import cuda

    from distshap.kernels.cuda.ptx import _device_free_compilation

    with _device_free_compilation((9, 0)):
        for name, (kernel, sig) in _split_kernels().items():
            text, _ = cuda.compile_ptx(kernel.py_func, sig, cc=(9, 0))
            assert "atom.shared.add.u32" in text, name  # native 32-bit shared adds
            assert "atom.shared.add.u64" not in text and "atom.shared.cas" not in text, name
            assert "atom.global.add.u64" in text, name  # the flush: int64 global atomics
            assert "atom.global.add.f" not in text, name
            assert "vote.sync" in text, name
            assert ".local" not in text, f"{name} spills to local memory"
            assert "call.uni" not in text, f"{name} has a non-inlined call"
            if name == "interaction_split":
                assert "shfl.sync" in text, name
    # the split kernels are distinct from (and leave alone) the int64 ones
    from distshap.kernels.cuda.tables import table_kernel

    assert table_kernel(True) is not table_kernel(True, split=True)
    assert table_kernel(False, split=True) is table_kernel(False)  # no tile: nothing to split


_SIM_SCRIPT = r"""
import numpy as np
import tiny
import distshap.kernels.cuda as kc
from distshap.kernels.cuda import pairs as kp
from distshap.packed import build_packed_model
from distshap.pair_slots import build_pair_slots
from distshap.paths import extract_paths

def same(a, b, what):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape and a.dtype == b.dtype, what
    assert np.array_equal(a.view(np.uint32), b.view(np.uint32)), what

def both(fn, what):
    out = {}
    for words in ("int64", "split"):
        kc.config.TABLE_TILE_WORDS = words
        out[words] = fn()
    same(out["int64"], out["split"], what)
    assert np.any(np.asarray(out["split"]) != 0), what
    return out["split"]

kc.config.SMALL_MAX_PATHS = 0  # not the one-launch route: the table kernels
kc.config.MIN_TILE_ROWS = 1
kc.config.TILE_ROWS = 3  # 7 rows: tiles of 3, 3 and 1 rows (a partial tile)
ens = tiny.random_ensemble(5, n_features=5, n_trees=3, depth=3, n_groups=2, n_categorical=1)
X = tiny.random_rows(6, ens, 7, 0.15)
packed = build_packed_model(extract_paths(ens), table_budget_bytes=1 << 30,
                            max_table_features=10)
inter = both(lambda: kc.interaction_values(packed, X), "interaction values")
shap = both(lambda: kc.shap_values(packed, X), "SHAP values by tables")
slots = build_pair_slots(packed)
kc.config.SLOT_QUADRATURE_VARIANT, kc.config.SLOT_TABLE_VARIANT = "lanes", "plain"
got = both(lambda: kp.interaction_slot_values(packed, X, slots), "pair slots")
group = np.repeat(np.arange(slots.num_groups), np.diff(slots.slot_offsets))
same(got, inter[:, group, slots.slot_i, slots.slot_j], "slots against the full matrices")
kc.config.TILE_ROWS = 128  # one tile of all 7 rows
same(both(lambda: kc.interaction_values(packed, X), "one tile"), inter, "tile sizes")
kc.config.TABLE_TILE_WORDS = "bad"
try:
    kc.interaction_values(packed, X)
except ValueError as err:
    assert "TABLE_TILE_WORDS" in str(err)
else:
    raise AssertionError("a bad TABLE_TILE_WORDS was accepted")
print("SIMULATOR-OK")
"""


def test_split_tiles_same_bits_in_simulator():
    assert_simulator_ok(_SIM_SCRIPT, timeout=600)
