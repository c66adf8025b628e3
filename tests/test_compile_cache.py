"""The first call in a fresh environment: the compile notice, the cache location, compiling ahead.

Each case runs in a new Python process with an empty Numba cache directory (a fresh install),
then, where it matters, in a second process on the cache the first one filled.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

_EXPLAIN = """
import sys
import numpy as np
import distshap
from distshap.warmup import chain_ensemble

kind = sys.argv[1]
X = np.random.default_rng(0).random((40, 6)).astype(np.float32)
background = X[:10] if kind.startswith("interventional") else None
explainer = distshap.TreeExplainer(chain_ensemble(6, 6), background)
if kind.endswith("interactions"):
    explainer.shap_interaction_values(X)
else:
    explainer.shap_values(X)
print("done")
"""

_NOTICE = "distshap: compiling"


def _run(code: str, *args: str, env: dict[str, str | None]) -> subprocess.CompletedProcess:
    full = dict(os.environ)
    full.pop("NUMBA_CACHE_DIR", None)
    for key, value in env.items():
        if value is None:
            full.pop(key, None)
        else:
            full[key] = value
    full["PYTHONPATH"] = str(ROOT) + os.pathsep + full.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, "-c", code, *args], env=full, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def _notices(proc: subprocess.CompletedProcess) -> list[str]:
    return [line for line in proc.stderr.splitlines() if line.startswith(_NOTICE)]


@pytest.mark.parametrize("kind", ["shap", "interventional"])
def test_a_cold_cache_says_one_line_and_a_warm_cache_nothing(tmp_path: Path, kind: str) -> None:
    # SHAP in the default user cache directory (NUMBA_CACHE_DIR unset), interventional in the
    # directory NUMBA_CACHE_DIR names
    if kind == "shap":
        env: dict[str, str | None] = {"XDG_CACHE_HOME": str(tmp_path), "NUMBA_CACHE_DIR": None}
        where = tmp_path / "distshap" / "numba"
    else:
        env, where = {"NUMBA_CACHE_DIR": str(tmp_path)}, tmp_path
    cold = _run(_EXPLAIN, kind, env=env)
    lines = _notices(cold)
    assert len(lines) == 1, cold.stderr
    (line,) = lines
    assert "kernel" in line and "about" in line and str(where) in line
    assert "distshap compile" in line
    assert any(where.rglob("*.nbi")), cold.stderr  # the compiled kernels landed there
    warm = _run(_EXPLAIN, kind, env=env)
    assert _notices(warm) == [], warm.stderr


def test_the_default_cache_is_a_user_directory(tmp_path: Path) -> None:
    code = (
        "import os, numba, distshap; "
        "print(os.environ['NUMBA_CACHE_DIR']); print(numba.config.CACHE_DIR)"
    )
    proc = _run(code, env={"XDG_CACHE_HOME": str(tmp_path), "NUMBA_CACHE_DIR": None})
    expected = str(tmp_path / "distshap" / "numba")
    assert proc.stdout.split() == [expected, expected]
    # Numba imported before distshap: its configuration follows too
    code = "import numba, os, distshap; print(numba.config.CACHE_DIR)"
    proc = _run(code, env={"XDG_CACHE_HOME": str(tmp_path), "NUMBA_CACHE_DIR": None})
    assert proc.stdout.split() == [expected]
    # that compiled kernels land there: test_a_cold_cache_says_one_line_and_a_warm_cache_nothing


def test_a_users_numba_cache_dir_is_kept(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    code = "import os, distshap; print(os.environ['NUMBA_CACHE_DIR'])"
    proc = _run(code, env={"XDG_CACHE_HOME": str(tmp_path / "xdg"), "NUMBA_CACHE_DIR": str(mine)})
    assert proc.stdout.split() == [str(mine)]
    assert not (tmp_path / "xdg").exists()


def test_compile_ahead_leaves_nothing_to_compile(tmp_path: Path) -> None:
    env = {"NUMBA_CACHE_DIR": str(tmp_path)}
    code = "import sys; from distshap.cli import main; sys.exit(main(sys.argv[1:]))"
    ahead = _run(code, "compile", "--backend", "cpu", "--kinds", "shap,interventional", env=env)
    assert "cpu kernels (shap, interventional)" in ahead.stdout
    assert str(tmp_path) in ahead.stdout
    for kind in ("shap", "interventional"):
        later = _run(_EXPLAIN, kind, env=env)
        assert _notices(later) == [], later.stderr


_AHEAD = """
from distshap import compile_cache, path_walk
from distshap.paths import extract_paths, walk_paths
from distshap.warmup import chain_ensemble

assert not compile_cache.cached_on_disk(path_walk._dfs_paths)
compile_cache.compile_ahead("distshap.plan.config", ["nothing"])  # a helper that fails
assert compile_cache.wait_ahead(["nothing"]) >= 0
compile_cache.compile_ahead(path_walk.__name__, [path_walk.AHEAD_NAME])
walk = walk_paths(chain_ensemble(5, 5))  # waits for the helper, then loads its work
assert list(walk.lengths) == list(extract_paths(chain_ensemble(5, 5)).lengths), walk.lengths
assert path_walk.AHEAD_NAME in compile_cache.ahead_waits()
assert compile_cache.cached_on_disk(path_walk._dfs_paths)
print(sum(path_walk._dfs_paths._cache_hits.values()),
      sum(path_walk._dfs_paths._cache_misses.values()))
"""


def test_a_helper_process_compiles_the_walk_into_the_cache(tmp_path: Path) -> None:
    proc = _run(_AHEAD, env={"NUMBA_CACHE_DIR": str(tmp_path)})
    assert proc.stdout.split() == ["1", "0"], proc.stdout + proc.stderr  # loaded, not compiled


_AHEAD_PACKING = """
import numpy as np
from distshap import compile_cache, get_config, packing

assert not compile_cache.cached_on_disk(packing._bfd_compiled)
compile_cache.compile_ahead(packing.__name__, [packing.AHEAD_NAME])
sizes = np.arange(get_config().packing_numpy_max_items + 1) % 7 + 1  # the compiled route
order, lanes = packing.bin_order(packing.pack(sizes), sizes)  # waits, then loads
assert packing.AHEAD_NAME in compile_cache.ahead_waits()
print(*(sum(getattr(f, c).values()) for f in (packing._bfd_compiled,
        packing._group_by_bin_compiled) for c in ("_cache_hits", "_cache_misses")))
"""


def test_a_helper_process_compiles_the_packing_into_the_cache(tmp_path: Path) -> None:
    proc = _run(_AHEAD_PACKING, env={"NUMBA_CACHE_DIR": str(tmp_path)})
    assert proc.stdout.split() == ["1", "0", "1", "0"], proc.stdout + proc.stderr


def test_compiling_ahead_starts_nothing_for_small_files_or_objects(tmp_path: Path) -> None:
    from distshap import compile_cache
    from distshap.warmup import chain_ensemble, start_ahead

    small = tmp_path / "model.json"
    small.write_text("{}")
    for model in (str(small), chain_ensemble(3, 3), tmp_path / "missing.json"):
        before = dict(compile_cache._PENDING)
        send = start_ahead(model, "cuda")
        send(chain_ensemble(3, 3))
        assert compile_cache._PENDING == before
    assert compile_cache.wait_ahead(["never given"]) == 0.0


def test_longest_path_bound_is_the_depth_or_the_features() -> None:
    from distshap.warmup import chain_ensemble, longest_path_bound

    assert longest_path_bound(chain_ensemble(3, 3)) == 3
    assert longest_path_bound(chain_ensemble(33, 40)) == 33  # deeper than a warp
    assert longest_path_bound(chain_ensemble(12, 5)) == 5  # features repeat along the chain


class _FakeHelper:
    """Stands for a started helper: what it is given stays readable after the close."""

    def __init__(self) -> None:
        self.given = b""
        self.stdin = self

    def write(self, data: bytes) -> None:
        self.given += data

    def close(self) -> None:
        pass

    def wait(self, timeout: float | None = None) -> int:
        return 0


def test_names_sharing_an_index_go_to_one_helper_and_idle_helpers_are_released() -> None:
    from distshap import compile_cache

    module = "tests.fake_helpers"
    helpers = [_FakeHelper() for _ in range(3)]
    compile_cache._IDLE[module] = list(helpers)
    compile_cache.compile_ahead(module, [("q2", "q4", "q6"), "finish", "fill"])
    shares = [h.given.decode().split() for h in helpers]
    assert ["q2", "q4", "q6"] in shares  # one helper, in order
    assert sorted(n for s in shares for n in s) == ["fill", "finish", "q2", "q4", "q6"]
    assert all(shares)  # dealt over every helper
    assert compile_cache.wait_ahead(module=module) >= 0.0
    assert not any(m == module for m, _ in compile_cache._PENDING.values())
    idle = _FakeHelper()
    compile_cache._IDLE[module] = [idle]
    compile_cache.compile_ahead(module, [])  # nothing to compile: released with no names
    assert idle.given == b"" and module not in compile_cache._IDLE


def test_the_cuda_line_is_said_once_and_only_for_distshap_cuda_kernels(caplog) -> None:
    from distshap import compile_cache

    said = compile_cache._CUDA_SAID in compile_cache._SAID
    compile_cache._SAID.discard(compile_cache._CUDA_SAID)
    try:
        with caplog.at_level("WARNING", logger="distshap.compile"):
            assert not compile_cache.cuda_compiling(None)
            assert not compile_cache.cuda_compiling("distshap.kernels.banzhaf_cpu")  # a CPU one
            assert not compile_cache.cuda_compiling("numba.cuda.tests")
            assert compile_cache.cuda_compiling("distshap.kernels.cuda.tables")
            assert not compile_cache.cuda_compiling("distshap.kernels.cuda.launch")  # once
        lines = [r.getMessage() for r in caplog.records if r.name == "distshap.compile"]
        assert len(lines) == 1, lines
        assert lines[0].startswith(_NOTICE) and "CUDA kernels" in lines[0] and "about" in lines[0]
        assert "distshap compile --backend cuda" in lines[0]
        assert (compile_cache.cache_dir() or "__pycache__") in lines[0]
    finally:
        if not said:
            compile_cache._SAID.discard(compile_cache._CUDA_SAID)


_CUDA_PTX = """
import logging
from numba import cuda
from distshap.kernels.cuda.runtime.ptx import _device_free_compilation
from distshap.kernels.cuda.runtime.upload import LANE_FILL_SIGNATURE, lane_fill_kernel

with _device_free_compilation((9, 0)):
    for _ in range(2):  # each call compiles again (no cache): still one line
        cuda.compile_ptx(lane_fill_kernel.py_func, LANE_FILL_SIGNATURE, cc=(9, 0))
"""


def test_compiling_a_cuda_kernel_says_the_cuda_line_once(tmp_path: Path) -> None:
    """Through Numba's own compiler events: PTX compiled without a GPU (NVVM needed)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from cudasim import nvvm_available

    if not nvvm_available():
        pytest.skip("NVVM (CUDA toolkit compiler) not found")
    proc = _run(_CUDA_PTX, env={"NUMBA_CACHE_DIR": str(tmp_path)})
    lines = _notices(proc)
    assert len(lines) == 1 and "CUDA kernels" in lines[0], proc.stderr
    assert str(tmp_path) in lines[0]


_BANZHAF = """
import numpy as np
import distshap
from distshap.warmup import chain_ensemble

X = np.random.default_rng(0).random((40, 6)).astype(np.float32)
for background in (None, X[:10]):
    explainer = distshap.TreeExplainer(chain_ensemble(6, 6), background)
    explainer.banzhaf_values(X)
    explainer.banzhaf_interaction_values(X)
print("done")
"""


def test_compile_ahead_covers_the_banzhaf_kernels(tmp_path: Path) -> None:
    env = {"NUMBA_CACHE_DIR": str(tmp_path)}
    code = "import sys; from distshap.cli import main; sys.exit(main(sys.argv[1:]))"
    ahead = _run(code, "compile", "--backend", "cpu", "--kinds", "banzhaf", env=env)
    assert "cpu kernels (banzhaf)" in ahead.stdout
    later = _run(_BANZHAF, env=env)
    assert "done" in later.stdout and _notices(later) == [], later.stderr


def test_cuda_helpers_start_only_on_a_gpu_in_the_default_compute_mode() -> None:
    from distshap.warmup import gpu_compute_mode, helpers_may_share_gpu

    assert helpers_may_share_gpu(0)
    for mode in (1, 2, 3, None):  # exclusive thread, prohibited, exclusive process, unknown
        assert not helpers_may_share_gpu(mode)
    mode = gpu_compute_mode()
    assert mode is None or mode in (0, 1, 2, 3)


def test_the_compile_line_says_where_a_kernel_is_cached_or_that_it_is_not(
    tmp_path: Path, monkeypatch
) -> None:
    from distshap.compile_cache import _where

    (tmp_path / "a-file").write_text("")
    assert _where(str(tmp_path / "new" / "dir")) == f"cached in {tmp_path / 'new' / 'dir'}"
    under_a_file = str(tmp_path / "a-file" / "numba")
    assert _where(under_a_file).startswith(f"not cached: {under_a_file} cannot be written")
    assert "NUMBA_CACHE_DIR" in _where(under_a_file)
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    assert _where() == "cached in __pycache__ beside distshap's modules"
