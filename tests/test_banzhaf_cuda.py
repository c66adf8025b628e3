"""The CUDA Banzhaf kernels under Numba's CUDA simulator (no GPU needed) against the CPU
kernels and the brute-force oracle, and their PTX (needs NVVM only)."""

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
from distshap.kernels.cuda import banzhaf_tiles as bt

def same(a, b):
    np.testing.assert_allclose(np.asarray(a), b, rtol=1e-5, atol=1e-6)

# a path of 14 features: no interventional table (the masks route); the CPU kernels with and
# without path-dependent tables (table_budget_bytes=0)
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
bt.SHARED_BYTES = 0  # values summed in global memory, as for models of many columns
same(gpu.banzhaf_values(packed, rows), banzhaf_cpu.banzhaf_values(packed, rows))
same(gpu.interventional_banzhaf_values(packed, background, rows, bias=bias),
     banzhaf_cpu.interventional_banzhaf_values(packed, background, rows, bias=bias))
print("SIMULATOR-OK")
"""


def test_simulator_matches_the_cpu_kernels():
    assert_simulator_ok(SCRIPT, timeout=600)


TILES_SCRIPT = r"""
import numpy as np
from naive import brute_force_banzhaf_rows
from tiny import random_ensemble, random_rows, tiny_ensembles, zero_cover_subtree
from distshap import TreeExplainer
from distshap.interventional import build_background
from distshap.kernels import banzhaf_cpu
from distshap.kernels.cuda import banzhaf_tiles as bt

# tiles of at most 16 lanes: paths across several tiles; sums and rows in shared memory, and
# both in global memory
models = dict(tiny_ensembles(), zero_cover_subtree=zero_cover_subtree(),
              random=random_ensemble(5, n_features=6, n_trees=4, depth=4, n_groups=2,
                                     n_categorical=2))
for name, ens in models.items():
    packed = TreeExplainer(ens).packed
    X = random_rows(1, ens, n=5)
    R = random_rows(2, ens, n=4)
    rows = packed.encoding.apply(X.astype(np.float32))
    background = build_background(packed, R)
    ref = brute_force_banzhaf_rows(ens, X)
    ref_bg = brute_force_banzhaf_rows(ens, X, R)
    for sums in (43 * 1024, 0) if name in ("multiclass", "random") else (43 * 1024,):
        bt.SHARED_BYTES = sums
        out = bt.product_values(packed, rows, tile=16)
        np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1e-7, err_msg=name)
        out = bt.background_values(packed, background, rows, ref_bg[:1, :, -1], tile=16)
        np.testing.assert_allclose(out, ref_bg, rtol=1e-6, atol=1e-7, err_msg=name)
assert len(bt.lane_tiles(packed.path_offsets, 16)) > 10
print("SIMULATOR-OK")
"""

BLOCKS_SCRIPT = r"""
import numpy as np
from tiny import random_ensemble, random_rows
from distshap import TreeExplainer
from distshap.interventional import build_background
from distshap.kernels import banzhaf_cpu
from distshap.kernels.cuda import banzhaf_tiles as bt

ens = random_ensemble(5, n_features=6, n_trees=4, depth=4, n_groups=2, n_categorical=2)
packed = TreeExplainer(ens).packed
# 32 threads a block (14 columns' sums fit 8000 bytes for 32 threads, not for 64; the rows not
# after them): 3 blocks; the bits do not depend on the block size, the row's place in the batch,
# the tiles or where the rows are read
X = random_rows(7, ens, n=70)
rows = packed.encoding.apply(X.astype(np.float32))
bt.SHARED_BYTES = 8000
assert bt._threads(14) == 32
R = build_background(packed, random_rows(8, ens, n=6))
small = bt.product_values(packed, rows, tile=16)
bg_small = bt.background_values(packed, R, rows, [0.5, 1.0], tile=16)
bt.SHARED_BYTES = 43 * 1024
big = bt.product_values(packed, rows)
np.testing.assert_array_equal(small, big)
np.testing.assert_array_equal(bg_small, bt.background_values(packed, R, rows, [0.5, 1.0]))
np.testing.assert_array_equal(bt.product_values(packed, rows[37:]), big[37:])
np.testing.assert_allclose(big, banzhaf_cpu.banzhaf_values(packed, rows), rtol=1e-5, atol=1e-6)
assert bt.product_values(packed, rows[:0]).shape == (0, 2, 7)
print("SIMULATOR-OK")
"""


def test_tile_kernels_match_the_oracle_under_the_simulator():
    assert_simulator_ok(TILES_SCRIPT, timeout=600)


def test_tile_kernels_bits_do_not_depend_on_blocks_tiles_or_batch():
    assert_simulator_ok(BLOCKS_SCRIPT, timeout=600)


PAIRS_SCRIPT = r"""
import numpy as np
from naive import brute_force_banzhaf_rows
from tiny import random_ensemble, random_rows, tiny_ensembles, zero_cover_subtree
from distshap import TreeExplainer
from distshap.interventional import build_background
from distshap.kernels.cuda import banzhaf_tiles as bt

# interaction values: the product form's pairs and diagonals, the background masks' (every path)
tiny = tiny_ensembles()
models = dict(categorical=tiny["categorical"], multiclass=tiny["multiclass"],
              nan_default=tiny["nan_default"], zero_cover_subtree=zero_cover_subtree(),
              random=random_ensemble(5, n_features=5, n_trees=3, depth=4, n_groups=2,
                                     n_categorical=1))
for name, ens in models.items():
    packed = TreeExplainer(ens).packed
    X = random_rows(1, ens, n=3)
    R = random_rows(2, ens, n=4)
    rows = packed.encoding.apply(X.astype(np.float32))
    background = build_background(packed, R)
    ref = brute_force_banzhaf_rows(ens, X, interactions=True)
    ref_bg = brute_force_banzhaf_rows(ens, X, R, interactions=True)
    out = bt.product_values(packed, rows, interactions=True, tile=16)
    np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1e-7, err_msg=name)
    out = bt.background_values(packed, background, rows, ref_bg[:1, :, -1, -1], True, tile=16)
    np.testing.assert_allclose(out, ref_bg, rtol=1e-6, atol=1e-7, err_msg=name)
print("SIMULATOR-OK")
"""


def test_tile_kernels_interaction_values_match_the_oracle_under_the_simulator():
    assert_simulator_ok(PAIRS_SCRIPT, timeout=600)


def test_lane_tiles_hold_whole_paths():
    import numpy as np

    from distshap.kernels.cuda.banzhaf_tiles import lane_tiles

    offsets = np.array([0, 3, 9, 10, 14, 20], np.int64)
    np.testing.assert_array_equal(lane_tiles(offsets, 9), [0, 9, 14, 20])
    np.testing.assert_array_equal(lane_tiles(offsets, 10), [0, 10, 20])
    np.testing.assert_array_equal(lane_tiles(offsets[:1], 8), [0])
    with pytest.raises(ValueError, match="tile=5"):
        lane_tiles(offsets, 5)


@pytest.mark.skipif(not nvvm_available(), reason="NVVM not available")
@pytest.mark.parametrize(
    "shared, background, pairs, rows",
    [(True, False, False, True), (False, True, False, False), (False, False, True, True),
     (True, True, True, False)],
)  # fmt: skip
def test_kernels_compile_to_ptx_without_local_memory(shared, background, pairs, rows):
    import re

    from distshap.kernels.cuda.banzhaf import kernel_ptx
    from distshap.kernels.cuda.banzhaf_tiles import SHARED_BYTES

    ptx = kernel_ptx(shared, background, pairs, rows, (9, 0))
    assert ".entry" in ptx and ".f64" in ptx and "bar.sync" in ptx
    assert ".local" not in ptx  # no per-thread arrays: the products live in registers
    static = sum(int(b) for b in re.findall(r"^\.visible \.shared .*\[(\d+)\];$", ptx, re.M))
    assert 4 * 1024 <= static and static + SHARED_BYTES <= 48 * 1024  # no opt-in needed
