"""CUDA kernels compiled ahead without a CUDA context (``distshap/kernels/cuda/runtime/ahead.py``).

A helper compiles a kernel for a compute capability it is told into Numba's disk cache, under
the key a launch looks up, while Numba's CUDA target sees a stand-in that has a capability and
nothing else. Checked here by compiling PTX (NVVM needed, no GPU); the helpers' wiring in
:func:`distshap.warmup.start_ahead` with fake helpers.
"""

from __future__ import annotations

import io

import pytest

from distshap import compile_cache, path_walk, warmup
from distshap.plan.config import config_context, get_config

from cudasim import nvvm_available


@pytest.mark.skipif(not nvvm_available(), reason="NVVM (CUDA toolkit compiler) not found")
def test_a_kernel_compiled_without_a_context_is_found_by_its_launch_key():
    from numba.cuda import dispatcher as cuda_dispatcher

    from distshap.kernels.cuda.runtime import ahead, ptx

    kernel, signature = ptx._ahead_kernels()["finish_kernel"]
    ahead.compile_without_context(kernel, signature, (9, 0))  # False: a cache entry before
    assert not ahead.compile_without_context(kernel, signature, (9, 0))  # now one
    argtypes, _ = cuda_dispatcher.sigutils.normalize_signature(signature)
    with ahead._without_context((9, 0)):
        loaded = kernel._cache.load_overload(tuple(argtypes), kernel.targetctx)
    assert loaded is not None
    ptxes = loaded._codelibrary._ptx_cache
    assert any(cc[:2] == (9, 0) for cc in ptxes), list(ptxes)
    assert ".target sm_90" in "".join(map(str, ptxes.values()))


def test_the_stand_in_has_a_capability_and_nothing_else():
    from numba.cuda import api
    from numba.cuda.cudadrv import devices

    from distshap.kernels.cuda.runtime import ahead

    before = devices.get_context
    with ahead._without_context((8, 6)):
        context = devices.get_context()
        assert context.device.compute_capability == (8, 6)
        assert api.get_current_device().compute_capability == (8, 6)
        with pytest.raises(ahead._NoContext, match="create_module_image"):
            context.create_module_image(b"")
        with pytest.raises(ahead._NoContext, match="MULTIPROCESSOR_COUNT"):
            context.device.MULTIPROCESSOR_COUNT  # noqa: B018
    assert devices.get_context is before


def test_names_carry_the_capability():
    from distshap.kernels.cuda.runtime import ahead

    names = ahead.ahead_names([("a", "b"), ("c",)], (9, 0))
    assert names == [("a@9.0", "b@9.0"), ("c@9.0",)]
    with pytest.raises(ValueError, match="kernel@major.minor"):
        ahead.ahead_compile("finish_kernel")


class _Helper:
    def __init__(self) -> None:
        self.stdin = io.BytesIO()
        self.stdin.close = lambda: None  # keeps what was written readable

    def wait(self, timeout: float | None = None) -> int:
        return 0


def test_cuda_helpers_run_without_a_context_and_are_waited_for_as_ptx(tmp_path, monkeypatch):
    import distshap.kernels

    started: list[tuple[str, _Helper]] = []

    def start(module: str) -> _Helper:
        started.append((module, _Helper()))
        return started[-1][1]

    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(compile_cache, "_RUNS", {})
    monkeypatch.setattr(warmup, "_cores", lambda: 8)
    monkeypatch.setattr(warmup, "gpu_capability", lambda: (9, 0))
    monkeypatch.setattr(warmup, "gpu_compute_mode", lambda: 0)
    monkeypatch.setattr(distshap.kernels, "cuda_available", lambda: True)
    monkeypatch.setattr(compile_cache, "_start_helper", start)
    monkeypatch.setattr(compile_cache, "cached_on_disk", lambda f: f is path_walk._dfs_paths)
    path = tmp_path / "model.ubj"
    with open(path, "wb") as f:
        f.truncate(get_config().large_model_file_bytes + 1)
    with config_context(compile_ahead_processes=3):
        send = warmup.start_ahead(str(path), "cuda")
    cuda = [h for m, h in started if m == warmup._CUDA_HELPER]
    assert len(cuda) == 2 and all(m != warmup._CUDA_AHEAD for m, _ in started)
    send(warmup.chain_ensemble(5, 5))
    given = b"".join(h.stdin.getvalue() for h in cuda).decode().split()
    assert "finish_kernel@9.0" in given and all(name.endswith("@9.0") for name in given)
    pending = {m for m, _ in compile_cache._PENDING.values()}
    assert warmup._CUDA_AHEAD in pending
    compile_cache.wait_ahead(module=warmup._CUDA_AHEAD)
    compile_cache.wait_ahead(module="distshap.packing")
