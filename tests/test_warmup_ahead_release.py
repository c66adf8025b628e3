"""A large model file that fails to load releases the helper processes started to compile its
CUDA kernels ahead (they would otherwise wait, each with its CUDA context, until this process
exits). Fake helpers stand in for the processes: what is checked is that each is released."""

from __future__ import annotations

import io

import pytest

from distshap import compile_cache, path_walk, warmup
from distshap.models._threaded import WARM_UP_BYTES


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
        f.truncate(WARM_UP_BYTES + 1)  # large enough to compile ahead, and no model
    with pytest.raises(ValueError, match="model.json"):
        warmup.load_ahead(str(path), "auto")
    assert started  # helpers were started for the CUDA kernels
    assert all(h.stdin.closed for h in started)  # and each told there is nothing to compile
    assert not compile_cache._IDLE.get(warmup._CUDA_AHEAD)
