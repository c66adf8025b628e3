"""CUDA kernels cached on disk (``cuda.jit(cache=True)``): loaded, not recompiled, in a new process.

numba-cuda keys a cached kernel by its signature, the device, its bytecode and a pickle of its
closure. A kernel made in a factory closes over device functions, pickled by value with the
globals they use; a global that pickles differently in every process (numba-cuda's
``cuda.ballot_sync`` intrinsic carries a per-process uuid) gives a new key in every process: the
kernel is compiled again each time and the cache directory grows. Both tests run only where the
kernels have caching enabled and numba-cuda is the CUDA target (the GPU machine); elsewhere they
are skipped.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[1]

_ENABLED = textwrap.dedent(
    """
    import importlib.util, json, sys
    from distshap.kernels.cuda.launch import finish_kernel
    cached = type(getattr(finish_kernel, "_cache", None)).__name__ == "CUDACache"
    print(json.dumps(cached and importlib.util.find_spec("numba_cuda") is not None))
    """
)

_KEYS = textwrap.dedent(
    """
    import hashlib, importlib, json, pkgutil
    from numba.cuda.dispatcher import CUDADispatcher
    try:
        from numba.cuda.serialize import dumps  # numba-cuda
    except ImportError:
        from numba.core.serialize import dumps  # numba's built-in CUDA target
    import distshap.kernels.cuda as package
    from distshap.kernels.cuda.runtime.ptx import _kernels
    from distshap.kernels.cuda.shap_quadrature import quadrature_kernel
    from distshap.kernels.cuda.slot_quadrature import gathered_slot_kernel, split_slot_kernel

    kernels = {name: k for name, (k, _) in _kernels().items()}
    # kernels made by factories that the PTX list leaves out
    kernels["shap_two_row_local_8"] = quadrature_kernel(8, True, local=True, rows=2)
    kernels["shap_two_row_shared_8"] = quadrature_kernel(8, True, rows=2)
    kernels["gathered_slot_kernel_4"] = gathered_slot_kernel(4, 2, True)
    kernels["split_slot_kernel_4"] = split_slot_kernel(4, 2, True)
    for info in pkgutil.iter_modules(package.__path__):
        mod = importlib.import_module("distshap.kernels.cuda." + info.name)
        for name, obj in vars(mod).items():
            if isinstance(obj, CUDADispatcher) and not obj.targetoptions.get("device"):
                kernels[info.name + "." + name] = obj
    keys = {}
    for name, kernel in sorted(kernels.items()):
        cells = kernel.py_func.__closure__ or ()
        keys[name] = hashlib.sha256(dumps(tuple(c.cell_contents for c in cells))).hexdigest()
    print(json.dumps(keys))
    """
)

_RUN = textwrap.dedent(
    """
    import hashlib, json, sys
    import numpy as np
    from numba.cuda.dispatcher import CUDADispatcher
    sys.path.insert(0, "tests")
    import tiny
    import distshap

    counts = {"compiled": 0, "cached": 0}
    original = CUDADispatcher.compile

    def compile(disp, sig):
        hits, before = sum(disp._cache_hits.values()), len(disp.overloads)
        try:
            return original(disp, sig)
        finally:
            if len(disp.overloads) > before:
                loaded = sum(disp._cache_hits.values()) > hits
                counts["cached" if loaded else "compiled"] += 1

    CUDADispatcher.compile = compile
    ens = tiny.random_ensemble(4, n_features=6, n_trees=6, depth=5, n_groups=2, n_categorical=1)
    X = np.random.default_rng(0).normal(size=(300, 6)).astype(np.float32)
    X[:, 5] = np.abs(X[:, 5] * 3).astype(np.int32)
    explainer = distshap.TreeExplainer(ens, backend="cuda")
    digest = hashlib.sha256()
    for values in (explainer.shap_values(X), explainer.shap_interaction_values(X[:50])):
        values = values.get() if hasattr(values, "get") else np.asarray(values)
        digest.update(np.ascontiguousarray(values).tobytes())
    print(json.dumps({**counts, "values": digest.hexdigest()}))
    """
)


def _python(code: str, cache_dir: str) -> str:
    env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir)
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("numba-cache"))
    if not json.loads(_python(_ENABLED, path)):
        pytest.skip("CUDA kernels are not cached on disk here (cache=True, numba-cuda)")
    return path


def test_every_kernel_has_the_same_cache_key_in_every_process(cache_dir):
    first = json.loads(_python(_KEYS, cache_dir))
    second = json.loads(_python(_KEYS, cache_dir))
    assert first.keys() == second.keys()
    moving = sorted(name for name in first if first[name] != second[name])
    assert not moving, f"closures pickle differently per process (new cache key each run): {moving}"


def test_a_second_process_loads_every_kernel_from_the_disk_cache(cache_dir):
    first = json.loads(_python(_RUN, cache_dir))
    second = json.loads(_python(_RUN, cache_dir))
    assert first["compiled"] > 0 and second["cached"] == first["compiled"] + first["cached"]
    assert second["compiled"] == 0, second
    assert second["values"] == first["values"]
