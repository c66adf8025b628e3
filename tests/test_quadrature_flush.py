"""The SHAP quadrature kernels' transposed flush (issue #15).

With ``config.SHAP_QUADRATURE_FLUSH = "transposed"`` the SHAP quadrature kernels add their
int64 sums to a scratch laid out (columns, rows), a slice of the batch's rows at a time, and
:func:`distshap.kernels.cuda.quadrature.add_transposed` adds each slice into the accumulator.
Integer addition is associative, so the output must be the direct flush's, bit for bit:

* host tests: the scratch's row slices, refused settings, the benchmark's ``t`` token;
* a CUDA-simulator run: every SHAP kernel form (chunk-local tiles with one and two rows a
  thread, the all-features tile, global atomics) with the transposed flush, in one slice and
  in several, gives the all-features direct kernel's bits; ``add_transposed`` on its own;
* a PTX check of the transposed kernels (no GPU needed), and a ``gpu``-marked test of the
  bits on a real GPU (where the atomics are the hardware's).
"""

from __future__ import annotations

import numpy as np
import pytest

from distshap.kernels import cuda_available
from distshap.packed import build_packed_model
from distshap.paths import extract_paths

import tiny
from conftest import to_host
from cudasim import assert_simulator_ok, nvvm_available


def test_flush_rows_keep_the_scratch_within_its_budget(monkeypatch):
    from distshap.kernels.cuda import config
    from distshap.kernels.cuda.quadrature import flush_rows

    monkeypatch.setattr(config, "QUADRATURE_FLUSH_BUDGET_BYTES", 8 * 100 * 2048 + 5)
    assert flush_rows(100, 10**6) == 2048  # a multiple of 512 within the budget
    assert flush_rows(100, 700) == 700  # at most the batch
    monkeypatch.setattr(config, "QUADRATURE_FLUSH_BUDGET_BYTES", 1)
    assert flush_rows(7850, 10**6) == 512  # at least 512 rows
    monkeypatch.setattr(config, "QUADRATURE_FLUSH_BUDGET_BYTES", 1 << 40)
    assert flush_rows(1, 10**8) == 65535 * 32  # the transposing kernel's grid


def test_bad_flush_settings_are_refused(monkeypatch):
    from distshap.kernels.cuda import config
    from distshap.kernels.cuda.quadrature import flush_transposed, quadrature_kernel

    assert not flush_transposed()  # the default
    monkeypatch.setattr(config, "SHAP_QUADRATURE_FLUSH", "sideways")
    with pytest.raises(ValueError, match="SHAP_QUADRATURE_FLUSH must be 'direct' or"):
        flush_transposed()
    with pytest.raises(ValueError, match="SHAP kernels only"):
        quadrature_kernel(4, True, interactions=True, transposed=True)


def test_benchmark_variant_token():
    from benchmarks.quadrature_tiles import _effective, parse_variant

    s = parse_variant("c24+r2+t")
    assert s["SHAP_QUADRATURE_FLUSH"] == "transposed" and s["QUADRATURE_TILE_FEATURES"] == 24
    assert parse_variant("c24+r2")["SHAP_QUADRATURE_FLUSH"] == "direct"
    assert _effective(s, 10) != _effective(parse_variant("c24+r2"), 10)  # never skipped
    with pytest.raises(ValueError, match="bad variant token 'tt'"):
        parse_variant("c16+tt")


_SIM_SCRIPT = r"""
import numpy as np
import tiny
import naive
from distshap.kernels import cuda as kc
from distshap.kernels.cuda import quadrature as kq
from distshap.packed import build_packed_model
from distshap.paths import extract_paths

config = kc.config
config.SMALL_MAX_PATHS = 0  # the plans' kernels, not the one-launch route of small models

# add_transposed on its own: rows 5..5+37 of a (50, 70) accumulator, scratch reset to 0
rng = np.random.default_rng(3)
acc = rng.integers(-2**61, 2**61, size=(50, 70), dtype=np.int64)
scratch = rng.integers(-2**40, 2**40, size=(70, 40), dtype=np.int64)
want = acc.copy()
want[5:42] += scratch[:, :37].T
kq.add_transposed(acc, scratch, 5, 37, 0)
assert np.array_equal(acc, want) and not scratch[:, :37].any() and scratch[:, 37:].all()

# long paths (depth 7 of 24 features), 2 groups, categorical splits and missing values; 33
# rows with one warp a block: the two-row kernels' second rows partly absent
ens = tiny.random_ensemble(81, n_features=24, n_trees=2, depth=7, n_groups=2, n_categorical=2)
X = tiny.random_rows(82, ens, 33, 0.15)
packed = build_packed_model(extract_paths(ens), table_budget_bytes=0)

def run(**kw):
    kc.clear_cache()
    saved = {k: getattr(config, k) for k in kw}
    for k, v in kw.items():
        setattr(config, k, v)
    try:
        return kc.shap_values(packed, X), kc.device_model(packed).shap
    finally:
        for k, v in saved.items():
            setattr(config, k, v)

ref, _ = run(SHAP_QUADRATURE_TILES="all", SHAP_QUADRATURE_ROWS=1, SHAP_QUADRATURE_WARPS=1)
err = np.abs(ref - naive.treeshap_recursive_rows(ens, X).reshape(ref.shape)).max()
assert err <= 2e-6 * max(1.0, float(np.abs(ref).max())), err
assert float(np.abs(ref).max()) * 2.0 ** kc.device_model(packed).shap_shift > 2**40  # big ints
flush_rows = kq.flush_rows
for kw, step in ((dict(QUADRATURE_TILE_FEATURES=5, SHAP_QUADRATURE_ROWS=2), None),
                 (dict(QUADRATURE_TILE_FEATURES=5, SHAP_QUADRATURE_ROWS=1), 16),
                 (dict(SHAP_QUADRATURE_TILES="all", SHAP_QUADRATURE_ROWS=2), 13),
                 (dict(SHAP_QUADRATURE_TILES="all", SHAP_QUADRATURE_ROWS=1,
                       QUADRATURE_SHARED_BYTES=8 * 32 * 20), None)):  # global atomics
    if step:  # several slices of the batch's rows (the last one short)
        kq.flush_rows = lambda width, n, step=step: min(n, step)
    try:
        got, plan = run(SHAP_QUADRATURE_FLUSH="transposed", SHAP_QUADRATURE_WARPS=1, **kw)
    finally:
        kq.flush_rows = flush_rows
    assert np.array_equal(ref.view(np.uint32), got.view(np.uint32)), (kw, step)
    if "QUADRATURE_TILE_FEATURES" in kw:
        assert kq.local_tiles(plan) and max(q.local_columns for q in plan.quadrature) > 5
print("SIMULATOR-OK")
"""


def test_transposed_flush_keeps_the_bits_under_cuda_simulator():
    """Every SHAP kernel form with the transposed flush gives the direct kernel's bits."""
    assert_simulator_ok(_SIM_SCRIPT, timeout=600)


_LOCAL_SIG = (
    "void(float32[:, ::1], int32[:, ::1], int64[::1], uint32[::1], int64[::1], int32[::1], "
    "int64[::1], int32[::1], int16[::1], int32[::1], int64[::1], float32[:, ::1], "
    "int64[:, ::1], float64, int64, int64)"
)


@pytest.mark.skipif(not nvvm_available(), reason="NVVM (CUDA toolkit) not installed")
def test_transposed_kernels_compile_to_ptx():
    """The transposed two-row local kernel and the transposing add compile for sm_90; the
    kernel still sums in shared memory (no shared atomics: a thread's own columns) and adds
    to global memory with 64-bit integer atomics only."""
    from numba import cuda

    from distshap.kernels.cuda.ptx import _device_free_compilation
    from distshap.kernels.cuda.quadrature import _make_add_transposed, quadrature_kernel

    with _device_free_compilation((9, 0)):
        kernel = quadrature_kernel(4, True, local=True, rows=2, transposed=True)
        ptx, _ = cuda.compile_ptx(kernel.py_func, _LOCAL_SIG, cc=(9, 0))
        atoms = [ln for ln in ptx.splitlines() if ln.split()[:1] and
                 ln.split()[0].startswith(("atom.", "red."))]  # fmt: skip
        assert atoms and all(".global" in ln and "64" in ln for ln in atoms), atoms
        assert "ld.shared.u64" in ptx and "st.shared.u64" in ptx
        add = _make_add_transposed()
        ptx, _ = cuda.compile_ptx(add.py_func, "void(int64[:, ::1], int64[:, ::1], int64, int64)",
                                  cc=(9, 0))  # fmt: skip
        assert "atom.global" not in ptx and "red.global" not in ptx and "bar.sync" in ptx


# ------------------------------------------------------------------------------------------
# GPU
# ------------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="no CUDA GPU visible (GPU host)")
def test_gpu_transposed_flush_keeps_the_bits(monkeypatch):
    from distshap.kernels import cuda as kc

    config = kc.config
    monkeypatch.setattr(config, "SMALL_MAX_PATHS", 0)
    ens = tiny.random_ensemble(91, n_features=150, n_trees=60, depth=9, n_groups=4,
                               n_categorical=4)  # fmt: skip
    X = tiny.random_rows(92, ens, 3001, 0.1)
    narrow = tiny.random_ensemble(93, n_features=12, n_trees=40, depth=7, n_categorical=2)
    Xn = tiny.random_rows(94, narrow, 3001, 0.1)
    settings = [("SHAP_QUADRATURE_TILES", "all")]
    variants = [
        [("SHAP_QUADRATURE_ROWS", r), ("QUADRATURE_TILE_FEATURES", c)]
        for r in (1, 2) for c in (16, 32)
    ] + [
        [("SHAP_QUADRATURE_TILES", "all"), ("SHAP_QUADRATURE_ROWS", 2)],
        [("QUADRATURE_FLUSH_BUDGET_BYTES", 1)],  # slices of 512 rows
        [("SHAP_QUADRATURE_ROWS", 2), ("QUADRATURE_SHARED_BYTES", 8 * 32 * 16)],
    ]  # fmt: skip
    for ensemble, rows in ((ens, X), (narrow, Xn)):
        packed = build_packed_model(extract_paths(ensemble))
        outs = []
        for chosen in [settings, *variants]:
            kc.clear_cache()
            with monkeypatch.context() as m:
                if chosen is not settings:
                    m.setattr(config, "SHAP_QUADRATURE_FLUSH", "transposed")
                for name, value in chosen:
                    m.setattr(config, name, value)
                outs.append(to_host(kc.shap_values(packed, rows)))
                if chosen is not settings:  # batches of 777 rows: slices of each
                    batched = to_host(kc.shap_values(packed, rows, batch_rows=777))
                    assert np.array_equal(outs[0].view(np.uint32), batched.view(np.uint32))
        kc.clear_cache()
        for other in outs[1:]:
            assert np.array_equal(outs[0].view(np.uint32), other.view(np.uint32))
