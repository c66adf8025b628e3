"""Helper processes compiling ahead are let go: those started for a large model file that fails
to load (they would otherwise wait, each with its CUDA context, until this process exits; fake
helpers stand in for them), and a helper still compiling at the wait's timeout (ended, so that
its other names are not waited for one by one)."""

from __future__ import annotations

import io
import os

import pytest

from distshap import compile_cache, path_walk, warmup
from distshap.plan.config import config_context, get_config


class _Helper:
    def __init__(self) -> None:
        self.stdin = io.BytesIO()

    def wait(self, timeout: float | None = None) -> int:
        return 0


def test_a_failed_load_releases_the_cuda_helpers(tmp_path, monkeypatch):
    import distshap.kernels

    started: list[_Helper] = []

    def start(module: str) -> _Helper:
        started.append(_Helper())
        return started[-1]

    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(warmup, "_cores", lambda: 8)
    monkeypatch.setattr(distshap.kernels, "cuda_available", lambda: True)
    monkeypatch.setattr(compile_cache, "_start_helper", start)
    monkeypatch.setattr(compile_cache, "cached_on_disk", lambda f: f is path_walk._dfs_paths)
    path = tmp_path / "model.json"
    with open(path, "wb") as f:
        f.truncate(get_config().large_model_file_bytes + 1)  # large: compiled ahead; no model
    with config_context(compile_ahead_processes=4), pytest.raises(ValueError, match="model.json"):
        warmup.load_ahead(str(path), "auto")
    assert started  # helpers were started for the CUDA kernels
    assert all(h.stdin.closed for h in started)  # and each told there is nothing to compile
    assert not compile_cache._IDLE.get(warmup._CUDA_AHEAD)


def test_a_helper_past_the_timeout_is_ended(tmp_path, monkeypatch):
    (tmp_path / "stuck_helper_module.py").write_text(
        "import time\n\ndef ahead_compile(name):\n    time.sleep(600)\n"
    )
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}:{os.path.dirname(os.path.dirname(__file__))}")
    compile_cache.compile_ahead("stuck_helper_module", [("a", "b", "c")])
    helpers = {id(p): p for m, p in compile_cache._PENDING.values() if m == "stuck_helper_module"}
    assert len(helpers) == 1
    compile_cache.wait_ahead(module="stuck_helper_module", timeout=0.5)
    (helper,) = helpers.values()
    assert helper.poll() is not None  # ended, not left compiling (or waited for name by name)
    assert not [m for m, _ in compile_cache._PENDING.values() if m == "stuck_helper_module"]
