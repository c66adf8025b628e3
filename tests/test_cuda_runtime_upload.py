"""The device model's lane columns built on the device (:mod:`cuda.runtime.upload`).

Under the CUDA simulator (a subprocess with ``NUMBA_ENABLE_CUDASIM=1``) the device build must
give :func:`distshap.kernels.cuda.runtime.model.lane_arrays`' host columns bit for bit: categorical
splits, several output groups, oversize paths (longer than a warp), and path values and zero
fractions that float32 must round (ties, subnormals, huge values). On a GPU the same script
runs on the device (its float64 to float32 conversions are the hardware's).
"""

from __future__ import annotations

import pytest

from distshap.kernels import cuda_available

from cudasim import assert_simulator_ok, nvvm_available

_SIM_SCRIPT = r"""
import dataclasses
import numpy as np
import tiny
from distshap.kernels.cuda.runtime import model as km
from distshap.kernels.cuda.runtime.upload import lane_columns
from distshap.packed import build_packed_model
from distshap.paths import extract_paths
from distshap.warmup import chain_ensemble

def same(packed, name):
    host = km.lane_arrays(packed)
    dev = lane_columns(packed)
    assert sorted(dev) == ["lane_cat", "lane_d", "lane_f", "lane_i"], sorted(dev)
    for key, d in dev.items():
        got, want = d.copy_to_host(), host[key]
        assert got.dtype == want.dtype and got.shape == want.shape, (name, key, got.shape)
        assert got.flags.c_contiguous, (name, key)
        assert got.tobytes() == want.tobytes(), (name, key, np.argwhere(got != want)[:5])
    return host

cat = build_packed_model(extract_paths(tiny.random_ensemble(
    5, n_features=7, n_trees=6, depth=4, n_groups=3, n_categorical=2)))
assert cat.cat_words.size and cat.cat_other.any() and cat.missing.any() and cat.num_groups == 3
same(cat, "categorical, 3 groups")
same(build_packed_model(extract_paths(tiny.categorical_tree())), "categorical tree")
same(build_packed_model(extract_paths(tiny.multiclass_ensemble())), "multiclass")
long = build_packed_model(extract_paths(chain_ensemble(40, 45)))
assert np.diff(long.bin_offsets).max() > 32  # oversize bins
same(long, "oversize paths")
# values float32 must round: halfway ties, subnormals, beyond float32's range, negative zero
rng = np.random.default_rng(1)
n, P = cat.feature.size, cat.path_value.size
tie = np.float64(np.float32(1.5)) + np.float64(2.0 ** -24)  # halfway between two float32
pv = rng.choice(np.array([tie, -tie, 1e-40, -3e-45, 1e300, -0.0, np.pi, 2.0 ** -149 * 1.5]),
                size=P)
zf = rng.choice(np.array([tie, 1e-39, 1.0 / 3.0, 0.0, 1.0, 7e-46]), size=n)
odd = dataclasses.replace(cat, path_value=pv, zero_fraction=zf)
host = same(odd, "rounding")
assert np.isinf(host["lane_f"][:, 3]).any()  # 1e300 overflows float32 as on the host
print("SIMULATOR-OK")
"""


def test_lane_columns_match_the_host_build_under_cuda_simulator():
    assert_simulator_ok(_SIM_SCRIPT, timeout=600)


@pytest.mark.skipif(not nvvm_available(), reason="NVVM (CUDA toolkit) not installed")
def test_lane_fill_kernel_ptx_rounds_to_nearest():
    from numba import cuda

    from distshap.kernels.cuda.runtime.ptx import _device_free_compilation
    from distshap.kernels.cuda.runtime.upload import LANE_FILL_SIGNATURE, lane_fill_kernel

    with _device_free_compilation((9, 0)):
        ptx, _ = cuda.compile_ptx(lane_fill_kernel.py_func, LANE_FILL_SIGNATURE, cc=(9, 0))
    cvt = [line for line in ptx.splitlines() if "cvt." in line and ".f32.f64" in line]
    assert cvt and all("cvt.rn.f32.f64" in line for line in cvt), cvt  # as NumPy, no flush
    assert "atom." not in ptx and ".local" not in ptx


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="no CUDA GPU visible (run on the GPU host)")
def test_lane_columns_match_the_host_build_on_the_gpu(capsys):
    exec(compile(_SIM_SCRIPT, "lane_columns_script", "exec"), {})
    assert "SIMULATOR-OK" in capsys.readouterr().out
