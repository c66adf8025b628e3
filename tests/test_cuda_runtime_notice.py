"""The CUDA kernels' compile line (:func:`distshap.compile_cache.cuda_compiling`) on a GPU.

A first process on an empty Numba cache compiles the CUDA kernels of its calls and says so in
one line on the ``distshap.compile`` logger; a second process on the filled cache loads them
and says nothing about CUDA. GPU only (the CUDA simulator compiles nothing); the line itself
is tested without a GPU in ``tests/test_compile_cache.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from distshap.kernels import cuda_available

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not cuda_available(), reason="no CUDA GPU visible (run on the GPU host)"),
]

ROOT = Path(__file__).resolve().parents[1]

_RUN = textwrap.dedent(
    """
    import sys
    import numpy as np
    sys.path.insert(0, "tests")
    import tiny
    import distshap

    ens = tiny.random_ensemble(4, n_features=6, n_trees=6, depth=5, n_groups=2)
    X = np.random.default_rng(0).normal(size=(300, 6)).astype(np.float32)
    explainer = distshap.TreeExplainer(ens, backend="cuda")
    explainer.shap_values(X)
    explainer.shap_interaction_values(X[:50])
    print("done")
    """
)


def _cuda_lines(cache_dir: str) -> list[str]:
    env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir)
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, "-c", _RUN], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=900)  # fmt: skip
    assert proc.returncode == 0 and "done" in proc.stdout, proc.stderr[-3000:]
    lines = proc.stderr.splitlines()
    return [line for line in lines if line.startswith("distshap: compiling") and "CUDA" in line]


def test_a_cold_cache_says_one_cuda_line_and_a_filled_cache_none(tmp_path: Path) -> None:
    first = _cuda_lines(str(tmp_path))
    assert len(first) == 1 and str(tmp_path) in first[0], first
    assert _cuda_lines(str(tmp_path)) == []
