"""An ``"auto"`` explainer of a large model file starts no CUDA helper and asks no driver.

:func:`distshap.warmup.start_ahead` starts the CUDA compile helpers only for ``backend="cuda"``:
asking whether a GPU is visible, or its compute capability, starts the CUDA driver, after which
a forked child (a prefork server) cannot use CUDA; ``"auto"`` leaves CUDA untouched until its
first call.
"""

from __future__ import annotations

from distshap import compile_cache, warmup
from distshap.plan.config import config_context, get_config


def test_auto_starts_no_cuda_helper_and_asks_no_driver(tmp_path, monkeypatch):
    import distshap.kernels

    def touched(*args):
        raise AssertionError("the CUDA driver was asked")

    started: list[str] = []
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(compile_cache, "_RUNS", {})
    monkeypatch.setattr(warmup, "_cores", lambda: 8)
    monkeypatch.setattr(warmup, "gpu_capability", touched)
    monkeypatch.setattr(warmup, "gpu_compute_mode", touched)
    monkeypatch.setattr(distshap.kernels, "cuda_available", touched)
    monkeypatch.setattr(compile_cache, "_start_helper", started.append)
    monkeypatch.setattr(compile_cache, "cached_on_disk", lambda f: True)  # no CPU helper either
    path = tmp_path / "model.ubj"
    with open(path, "wb") as f:
        f.truncate(get_config().large_model_file_bytes + 1)
    with config_context(compile_ahead_processes=3):
        send = warmup.start_ahead(str(path), "auto")
    send(warmup.chain_ensemble(5, 5))
    assert started == []
