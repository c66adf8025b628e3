"""The interaction quadrature kernel's shared-memory tile in split uint32 words (no GPU needed).

:func:`distshap.kernels.cuda.interaction_quadrature.interaction_kernel` sums a block's
contributions in a shared-memory tile; each sum is two uint32 words added with native 32-bit
atomics (``_add_split32`` of :mod:`distshap.kernels.cuda.interaction_quadrature`) instead of a
64-bit shared atomic add, which ptxas compiles into a compare-and-swap loop. Checked here:

* the PTX (and, where ``nvdisasm`` is found, the SASS) of the full-matrix kernel has no
  64-bit shared (or generic) atomic left, and 32-bit shared adds;
* under the CUDA simulator (a subprocess): the split words sum many large contributions of
  both signs exactly from many threads, the full matrices from the shared tile have the bits
  of those summed in global memory (int64 atomics) and match the CPU kernel and the recursive
  oracle, and the pair slots have the bits of the full matrices' entries.
"""

from __future__ import annotations

import re

import pytest

from cudasim import assert_simulator_ok, nvvm_available

N_NODES = 4
# a 64-bit atomic on shared memory, or on a generic address (which may be shared memory)
_WIDE_ATOMIC = re.compile(r"\batom(?:\.shared)?\.(?:add\.[us]64|cas\.b64|exch\.b64)\b")


def _kernels():
    """Name -> (kernel, signature) of the interaction kernels with a shared-memory tile."""
    from distshap.kernels.cuda.interaction_quadrature import interaction_kernel
    from distshap.kernels.cuda.runtime.ptx import _QUADRATURE_SIG

    return {"full": (interaction_kernel(N_NODES, True), _QUADRATURE_SIG)}


@pytest.mark.skipif(not nvvm_available(), reason="NVVM (CUDA toolkit compiler) not found")
def test_shared_tiles_add_32_bit_words_without_a_64_bit_shared_atomic():
    from benchmarks import kernel_isa

    for name, (kernel, sig) in _kernels().items():
        ptx = kernel_isa.kernel_ptx(kernel, sig)  # (with line info: sass_of reads it)
        atomics = re.findall(r"\batom\.[\w.]+", ptx)
        assert not [a for a in atomics if _WIDE_ATOMIC.match(a)], (name, sorted(set(atomics)))
        # lo (old value returned) and hi of each tile add: the diagonal and the pair adds
        assert atomics.count("atom.shared.add.u32") >= 4, (name, sorted(set(atomics)))
        assert "atom.global.add.u64" in atomics, name  # the flush (and direct adds)
        nvdisasm = kernel_isa._default_nvdisasm()
        if nvdisasm is None:
            continue  # (pip install nvidia-cuda-nvdisasm for the SASS check)
        try:
            lines, _, _ = kernel_isa.sass_of(ptx, nvdisasm=nvdisasm)
        except (OSError, RuntimeError) as err:  # no ptxas
            pytest.skip(f"ptxas/nvdisasm did not run: {err}")
        ops = [kernel_isa._op(line, True) for line in lines]
        assert not [op for op in ops if op.startswith("ATOMS.CAS")], name
        assert not [op for op in ops if op.startswith("ATOM.") and ".64" in op], name
        assert ops.count("ATOMS.ADD") >= 4, name


def test_global_kernel_keeps_int64_atomics():
    """Without a tile (``shared`` False) every add stays a 64-bit global atomic."""
    if not nvvm_available():
        pytest.skip("NVVM (CUDA toolkit compiler) not found")
    from benchmarks import kernel_isa
    from distshap.kernels.cuda.interaction_quadrature import interaction_kernel
    from distshap.kernels.cuda.runtime.ptx import _QUADRATURE_SIG

    kernel = interaction_kernel(N_NODES, False)
    ptx = kernel_isa.kernel_ptx(kernel, _QUADRATURE_SIG, lineinfo=False)
    atomics = set(re.findall(r"\batom\.[\w.]+", ptx))
    assert atomics == {"atom.global.add.u64"}, atomics


_SIM_SCRIPT = r"""
import numpy as np
from numba import cuda
import naive
import tiny
import distshap.kernels.cuda as kc
from distshap.kernels import cpu
from distshap.kernels.cuda import pairs as kp
from distshap.kernels.cuda.runtime.device import read_split
from distshap.kernels.cuda.interaction_quadrature import _add_split32 as add_split32
from distshap.kernels.cuda.runtime.model import device_model, interaction_plan, slot_arrays
from distshap.packed import build_packed_model
from distshap.pair_slots import build_pair_slots
from distshap.paths import extract_paths
from distshap.plan.config import get_config, reset_config, set_config

# the split words from 64 threads: contributions of both signs up to 2**58 on 3 sums (many
# wraps of the low words, hi words that go negative)
@cuda.jit
def split_sum(values, out):
    words = cuda.shared.array(6, np.uint32)
    t = cuda.threadIdx.x
    if t < 6:
        words[t] = 0
    cuda.syncthreads()
    for i in range(t, values.shape[0], cuda.blockDim.x):
        s = i % 3
        add_split32(words, np.uint32(s), np.uint32(3 + s), values[i])
    cuda.syncthreads()
    if t < 3:
        out[t] = read_split(words, t, 3)

rng = np.random.default_rng(7)
for scale in (1 << 33, 1 << 58):
    v = rng.integers(-scale, scale, 900, dtype=np.int64)
    v[:6] = [-1, -1, -1, (1 << 32) - 1, (1 << 32) - 1, -(1 << 32)]
    out = np.zeros(3, np.int64)
    split_sum[1, 64](v, out)
    want = [int(v[s::3].sum()) for s in range(3)]
    assert out.tolist() == want, (scale, out, want)

def same(a, b, what):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape and a.dtype == b.dtype, what
    assert np.array_equal(a.view(np.uint32), b.view(np.uint32)), what

set_config(small_max_paths=0)  # not the one-launch route: the quadrature kernels
ens = tiny.random_ensemble(11, n_features=6, n_trees=5, depth=5, n_groups=2, n_categorical=1)
X = tiny.random_rows(3, ens, 3, 0.15)
packed = build_packed_model(extract_paths(ens), table_budget_bytes=0)  # no tables
F1 = packed.num_features + 1
assert F1 * F1 * 8 <= get_config().quadrature_shared_bytes  # the shared tile
tile = kc.interaction_values(packed, X)
set_config(quadrature_shared_bytes=0)  # every add to global memory (int64 atomics)
direct = kc.interaction_values(packed, X)
set_config(quadrature_shared_bytes=48 * 1024)
same(tile, direct, "the split-word tile against int64 global atomics")
# the tile's sums carry across the low word: negative, and far above 2**32 in fixed point
fixed = tile.astype(np.float64) * 2.0 ** device_model(packed).interaction_shift
assert fixed.min() < -(2.0**40) and fixed.max() > 2.0**40, (fixed.min(), fixed.max())
ref = cpu.interaction_values(packed, X)
exact = naive.treeshap_interactions_recursive_rows(ens, X).reshape(ref.shape)
bound = 2e-6 * max(1.0, float(np.abs(exact).max()))
assert np.abs(tile - ref).max() <= bound, float(np.abs(tile - ref).max())
assert np.abs(tile - exact).max() <= bound, float(np.abs(tile - exact).max())

# pair slots: a tile of each chunk's slots (all blocks, then some blocks: chunks of 5 paths,
# tiles of at most 8 slots), or none
slots = build_pair_slots(packed)
group = np.repeat(np.arange(slots.num_groups), np.diff(slots.slot_offsets))
want = tile[:, group, slots.slot_i, slots.slot_j]
for chunk, shared_bytes in ((256, 48 * 1024), (5, 8 * 8), (256, 0)):
    set_config(quadrature_chunk_paths=chunk, quadrature_shared_bytes=shared_bytes)
    if chunk == 5:  # some chunks' slots fit the tile, some do not
        model = device_model(packed)
        arrays = slot_arrays(packed, model, slots, interaction_plan(packed, model))
        widths = np.concatenate([np.diff(np.asarray(o)) for o, _ in arrays.tiles])
        assert widths.min() <= 8 < widths.max(), widths
    same(kp.interaction_slot_values(packed, X, slots), want, ("slots", chunk, shared_bytes))
reset_config()
print("SIMULATOR-OK")
"""


def test_split_word_tiles_keep_the_bits_under_cuda_simulator():
    assert_simulator_ok(_SIM_SCRIPT, timeout=900)
