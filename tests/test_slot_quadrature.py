"""Slot kernels with split 32-bit shared sums and spread paths (:mod:`distshap.kernels.cuda.
slot_quadrature`, the ``"split"`` table variant of :mod:`distshap.kernels.cuda.slot_tables`).

They must give the slots of the gathered kernels bit for bit: under the CUDA simulator here
(a subprocess), on a GPU (marked ``gpu``) against the full matrices' entries.
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


def test_spread_order_is_a_permutation_spreading_a_warp():
    from distshap.kernels.cuda.slot_quadrature import spread_order

    for n in (0, 1, 5, 31, 32, 33, 100, 256, 1000, 1024):
        order = spread_order(n)
        assert np.array_equal(np.sort(order), np.arange(n)), n
    order = spread_order(1024)
    warp = order[:32]  # a warp's lanes: originals 32 apart
    assert np.array_equal(warp, np.arange(32) * 32)
    assert np.array_equal(order[32:64], np.arange(32) * 32 + 1)


_SIM_SCRIPT = r"""
import numpy as np
from numba import cuda
import tiny
from test_pair_interactions import _packed
import distshap.kernels.cuda as kc
import distshap.kernels.cuda.slot_tables as st
from distshap.kernels.cuda import pairs as kp
from distshap.kernels.cuda.slot_quadrature import add_split, read_split
from distshap.pair_slots import build_pair_slots

# split words: many large contributions of both signs, many wraps of the low word
# (one simulated thread: the simulator swaps a device function's module per call, which races
# between threads when the kernel lives in another module)
@cuda.jit
def split_sum(values, out):
    words = cuda.shared.array(4, np.uint32)
    for t in range(4):
        words[t] = 0
    for i in range(values.shape[0]):
        add_split(words, i % 2, 2, values[i])
    for t in range(2):
        out[t] = read_split(words, t, 2)

rng = np.random.default_rng(5)
for scale in (1 << 20, 1 << 40, 1 << 58):
    v = rng.integers(-scale, scale, 600, dtype=np.int64)
    v[:7] = [0, -1, 1, scale - 1, -scale, (1 << 32) - 1, -(1 << 32)]
    out = np.zeros(2, np.int64)
    split_sum[1, 1](v, out)
    assert out[0] == v[0::2].sum() and out[1] == v[1::2].sum(), (scale, out)

def same(a, b, what):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32)), what

NEW = [("split", "split"), ("spread", "plain"), ("spread64", "tiled"), ("split", "plain")]

def slots_match(packed, X, what, variants=NEW, **kw):
    slots = build_pair_slots(packed)
    kc.config.SLOT_QUADRATURE_VARIANT, kc.config.SLOT_TABLE_VARIANT = "gathered", "plain"
    ref = np.asarray(kp.interaction_slot_values(packed, X, slots, **kw))
    full = kc.interaction_values(packed, X)
    group = np.repeat(np.arange(slots.num_groups), np.diff(slots.slot_offsets))
    same(ref, full[:, group, slots.slot_i, slots.slot_j], (what, "reference"))
    for variant in variants:
        kc.config.SLOT_QUADRATURE_VARIANT, kc.config.SLOT_TABLE_VARIANT = variant
        same(kp.interaction_slot_values(packed, X, slots, **kw), ref, (what, variant))
    kc.config.SLOT_QUADRATURE_VARIANT, kc.config.SLOT_TABLE_VARIANT = "gathered", "plain"

kp.TOPK_MAX_THREADS = 8
kc.config.SMALL_MAX_PATHS = 0  # no one-launch route for these tiny models: the slot kernels
ens = tiny.random_ensemble(3, n_features=6, n_trees=3, depth=3, n_groups=2, n_categorical=1)
X = tiny.random_rows(2, ens, 4, 0.15)
slots_match(_packed(ens, 0), X, "quadrature", batch_rows=3)
kc.config.SLOT_QUADRATURE_ROWS = 3  # blocks of 3 rows: one full, one of a single row
slots_match(_packed(ens, 0), X, "three rows a block", variants=NEW[:2])
kc.config.SLOT_QUADRATURE_ROWS = 2
# chunks of 3 paths, blocks of up to 4 chunks (one tile of their slots) or of one: the
# spread order moves paths within blocks of several chunks
kc.config.QUADRATURE_CHUNK_PATHS = 3
for merge in (4, 1):
    kc.config.SLOT_QUADRATURE_CHUNKS = merge
    kc.clear_cache()
    slots_match(_packed(ens, 0), X, ("blocks of chunks", merge), variants=NEW[:3])
kc.config.SLOT_QUADRATURE_CHUNKS = 4
# blocks of more than 32 paths (64: 4 chunks of 16), so that the spread order moves them
kc.config.QUADRATURE_CHUNK_PATHS = 16
kc.clear_cache()
big = tiny.random_ensemble(4, n_features=8, n_trees=6, depth=5, n_groups=1)
pb = _packed(big, 0)
assert int(np.diff(pb.path_offsets).size) > 64
slots_match(pb, tiny.random_rows(5, big, 2, 0.1), "spread blocks", variants=NEW[1:3])
kc.config.QUADRATURE_CHUNK_PATHS = 3
# small tiles: some blocks sum in a tile, the others add to the row directly (rows' features
# in shared memory, then not)
for shared_bytes in (8 * 8 + 2 * 6 * 4, 8 * 8):
    kc.config.QUADRATURE_SHARED_BYTES = shared_bytes
    kc.clear_cache()
    slots_match(_packed(ens, 0), X, ("mixed tiles", shared_bytes), variants=NEW[:3])
kc.config.QUADRATURE_CHUNK_PATHS = 256
kc.config.QUADRATURE_SHARED_BYTES = 48 * 1024
kc.clear_cache()
# tables beside quadrature; the split table kernel with one bin a block and tiles of 12 slots
slots_match(_packed(ens, 700), X, "mixed")
st._TABLE_WARPS, st._TILE_BYTES = 1, 8 * 12
kc.clear_cache()
slots_match(_packed(ens, 1 << 30), X, "table tiles", variants=[("split", "split")])
st._TABLE_WARPS, st._TILE_BYTES = 8, 40 * 1024
kc.clear_cache()
print("SIMULATOR-OK")
"""


def test_split_slot_kernels_under_cuda_simulator():
    """The split words sum exactly; every new variant gives the gathered kernels' slots (which
    equal the full matrices' entries) for any batching, rows a block, chunks a block and tile
    size."""
    assert_simulator_ok(_SIM_SCRIPT, timeout=900)


def _split_signatures():
    from distshap.kernels.cuda.quadrature import slot_rows_kernel
    from distshap.kernels.cuda.slot_quadrature import split_slot_kernel
    from distshap.kernels.cuda.slot_tables import slot_table_kernel, split_slot_table_kernel

    xa = "float32[:, ::1]"
    rows = (f"void(float32[:, ::1], int32[:, ::1], int64[:, ::1], int32[::1], float32[::1], "
            f"uint32[::1], int32[::1], int64[::1], int16[:, ::1], int64[::1], int32[::1], {xa}, "
            "int64[:, ::1], float64, int64, int64[::1], int64[::1], int64)")  # fmt: skip
    flat = (f"void(float32[::1], int32[::1], int64[::1], int32[::1], float32[::1], "
            f"uint32[::1], int32[::1], int64[::1], int16[::1], int64[::1], int32[::1], {xa}, "
            "int64[:, ::1], float64, int64, int64[::1], int64[::1], int64)")  # fmt: skip
    table = (f"void(float32[:, ::1], int32[:, ::1], int64[::1], int64[::1], uint32[::1], "
             f"float32[::1], int64[::1], int32[::1], {xa}, int64[:, ::1], float64, int64, "
             "int64, int64[::1], int32[::1], int32[::1], int64[::1], int64[::1], int64, "
             "boolean)")  # fmt: skip
    return {
        "split": (split_slot_kernel(4, 2, True, "split"), flat),
        "int64": (split_slot_kernel(4, 2, True, "int64"), flat),
        "probe": (split_slot_kernel(4, 2, True, "probe"), flat),
        "split_x": (split_slot_kernel(4, 2, False, "split"), flat),  # rows read from X
        # the gathered kernel, which runs launches too large for 32-bit offsets
        "gathered_int64": (slot_rows_kernel(4, 2, True), rows),
        "table_split": (split_slot_table_kernel, table),
        "table_int64": (slot_table_kernel, table),
    }


@pytest.mark.skipif(not nvvm_available(), reason="NVVM (CUDA toolkit) not installed")
def test_split_kernels_add_32_bit_words_in_shared_memory():
    """The split kernels' shared adds are 32-bit (no 64-bit shared atomic, no float atomic);
    the int64 forms keep theirs; the probe adds nothing anywhere."""
    from numba import cuda

    from distshap.kernels.cuda.ptx import _device_free_compilation

    with _device_free_compilation((9, 0)):
        for name, (kernel, sig) in _split_signatures().items():
            ptx, _ = cuda.compile_ptx(kernel.py_func, sig, cc=(9, 0))
            if name == "probe":
                assert "atom." not in ptx, name
                continue
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
@pytest.mark.parametrize("budget", [0, 1 << 30], ids=["quadrature", "tables"])
def test_gpu_split_variants_give_the_matrix_bits(kind, budget, monkeypatch):
    """Every new variant (quadrature ``"split"``, ``"spread"``, ``"spread64"`` at 1-3 rows and
    1-4 chunks a block; tables ``"split"``) gives the bits of the full matrices' entries on the
    GPU (where float32 contraction and division are the hardware's, unlike the simulator)."""
    from distshap.kernels.cuda import config
    from distshap.kernels.cuda import pairs as kp
    from distshap.kernels.cuda.caches import clear_cache

    monkeypatch.setattr(config, "SMALL_MAX_PATHS", 0, raising=False)
    booster, X = xgb_models.MODEL_KINDS[kind]()
    packed = distshap.TreeExplainer(booster, backend="cuda", table_budget_bytes=budget).packed
    full = to_host(explain_rows(packed, X, True, "cuda"))
    slots = pair_slots(packed)
    group = np.repeat(np.arange(slots.num_groups), np.diff(slots.slot_offsets))
    want = full[:, group, slots.slot_i, slots.slot_j]
    monkeypatch.setattr(config, "QUADRATURE_CHUNK_PATHS", 16)  # several chunks a block
    clear_cache()
    variants = [("split", 1, 1, "split"), ("spread", 2, 4, "split"), ("spread64", 3, 2, "plain"),
                ("split", 2, 4, "plain"), ("spread", 1, 2, "tiled")]  # fmt: skip
    for quadrature, rows, chunks, table in variants:
        monkeypatch.setattr(config, "SLOT_QUADRATURE_VARIANT", quadrature)
        monkeypatch.setattr(config, "SLOT_QUADRATURE_ROWS", rows)
        monkeypatch.setattr(config, "SLOT_QUADRATURE_CHUNKS", chunks)
        monkeypatch.setattr(config, "SLOT_TABLE_VARIANT", table)
        got = to_host(kp.interaction_slot_values(packed, X, slots, batch_rows=7))
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), (quadrature, table)
    clear_cache()


def test_bad_variants_are_refused(monkeypatch):
    from distshap.kernels.cuda import config
    from distshap.kernels.cuda.slot_quadrature import launch_slot_quadrature, split_slot_kernel
    from distshap.kernels.cuda.slot_tables import launch_slot_tables

    with pytest.raises(ValueError, match="mode must be one of.*'fast'"):
        split_slot_kernel(4, 1, True, "fast")
    monkeypatch.setattr(config, "SLOT_QUADRATURE_VARIANT", "gathered")
    with pytest.raises(ValueError, match="probe runs the variants"):
        launch_slot_quadrature(None, None, None, None, 1.0, 3, 0, object(), probe=True)
    monkeypatch.setattr(config, "SLOT_TABLE_VARIANT", "fast")
    with pytest.raises(ValueError, match="SLOT_TABLE_VARIANT must be one of.*'fast'"):
        launch_slot_tables(None, None, None, None, None, None, 1.0, 3, 0, None)


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
