"""Kernels launched through the driver (``runtime.args.launch``) give the Numba launch's bits.

Setting such a launch up reads the kernel's parameters from the driver, without NVVM: each
kernel's sizes there equal its PTX's parameter list and Numba's layout.

The quadrature, table, finish and additivity-check launches of a call go through
:func:`distshap.kernels.cuda.runtime.rawlaunch.launch` where they can; the same compiled
kernels run, so every output must equal a call whose launches all go through Numba.
"""

from __future__ import annotations

import numpy as np
import pytest

from distshap.kernels import cuda_available


def test_signature_tells_apart_what_compiles_apart():
    from distshap.kernels.cuda.runtime.args import _signature

    a = np.zeros((4, 3), np.float32)
    assert _signature(a) == _signature(np.ones((2, 5), np.float32))
    assert _signature(a) != _signature(a.astype(np.float64))
    assert _signature(a) != _signature(a.T)  # not C-contiguous
    assert _signature(a) != _signature(a[0])  # one dimension fewer
    b = np.zeros((4, 6), np.float32)  # F-contiguous and strided: Numba's layouts F and A
    assert _signature(np.asfortranarray(b)) != _signature(b[:, ::2])
    assert _signature(1.0) is float and _signature(3) is int and _signature(True) is bool


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="no CUDA GPU visible (run on the GPU host)")
def test_gpu_driver_launches_give_numba_bits(monkeypatch):
    import cupy
    import xgboost as xgb

    from distshap import TreeExplainer
    from distshap.kernels.cuda.runtime import rawlaunch
    from distshap.plan.routes import small_fits

    rng = np.random.default_rng(5)
    X = rng.normal(size=(2000, 9)).astype(np.float32)
    X[rng.random(X.shape) < 0.05] = np.nan
    y = np.nan_to_num(X[:, 0]) * 2 + np.nan_to_num(X[:, 3]) * np.nan_to_num(X[:, 5])
    booster = xgb.train({"max_depth": 7, "eta": 0.1}, xgb.DMatrix(X, label=y),
                        num_boost_round=120)  # fmt: skip
    driver = rawlaunch.launch
    driven = []

    def counted(*a, **k):
        ok = driver(*a, **k)
        driven.append(ok)
        return ok

    def run() -> list:
        explainer = TreeExplainer(booster, layout="xgboost", backend="cuda")
        assert not small_fits(explainer.packed, False), "the test needs the batched route"
        out = []
        for n in (1, 7, 600, 2000):
            out.append(explainer.shap_values(X[:n]))  # NumPy rows: the additivity check too
            out.append(cupy.asnumpy(explainer.shap_values(cupy.asarray(X[:n]))))
        out.append(explainer.shap_interaction_values(X[:50]))
        return out

    monkeypatch.setattr(rawlaunch, "launch", counted)
    with_driver = run()
    assert driven and all(driven), "no launch went through the driver"
    monkeypatch.setattr(rawlaunch, "launch", lambda *a, **k: False)
    with_numba = run()
    for a, b in zip(with_driver, with_numba, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert np.array_equal(a.view(np.uint8), b.view(np.uint8))


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="no CUDA GPU visible (run on the GPU host)")
def test_gpu_driver_reports_each_kernels_ptx_parameters(monkeypatch):
    import xgboost as xgb
    from numba import cuda
    from numba.cuda.dispatcher import _Kernel

    from distshap import TreeExplainer
    from distshap.kernels.cuda.runtime import rawlaunch

    rng = np.random.default_rng(6)
    X = rng.normal(size=(3000, 9)).astype(np.float32)
    y = X[:, 0] * X[:, 4] + np.sin(X[:, 2])
    booster = xgb.train({"max_depth": 6, "eta": 0.1}, xgb.DMatrix(X, label=y),
                        num_boost_round=80)  # fmt: skip
    explainer = TreeExplainer(booster, backend="cuda", layout="xgboost")
    rawlaunch.clear()
    asked = []
    kernel_asm = _Kernel.inspect_asm
    monkeypatch.setattr(
        _Kernel, "inspect_asm", lambda *a, **k: asked.append(a) or kernel_asm(*a, **k)
    )
    for n in (1, 40, 3000):  # NumPy rows: the graphs' first calls launch one by one
        explainer.shap_values(X[:n])
        explainer.shap_values(X[:n] + 1)
    hits = [hit for hit in rawlaunch._KERNELS.values() if hit is not None]
    assert hits
    if rawlaunch.driver_param_widths(hits[0][1]) is None:
        pytest.skip("the driver does not report kernel parameters (before CUDA 12.4)")
    assert not asked, "setting up a driver launch compiled PTX"
    cc = cuda.get_current_device().compute_capability
    for dispatcher, handle, layout in hits:
        widths = rawlaunch.driver_param_widths(handle)
        assert widths == rawlaunch._widths(layout), dispatcher
        (kernel,) = [k for k in dispatcher.overloads.values()
                     if int(getattr(k.library.get_cufunc().handle, "value", None)
                            or k.library.get_cufunc().handle) == handle]  # fmt: skip
        assert rawlaunch.ptx_param_widths(kernel_asm(kernel, cc), kernel.entry_name) == widths
