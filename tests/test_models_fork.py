"""A child forked after XGBoost's or LightGBM's OpenMP threads ran reads their in-memory models.

Training, loading or predicting starts the library's OpenMP threads, which do not survive
``fork`` (``multiprocessing`` with ``fork``, preloading servers, prefork task queues): a child
whose call uses them waits for ever. Building an explainer from an in-memory booster in such a
child serialises the booster (:func:`distshap.models.xgboost.load_xgboost`,
:func:`distshap.models.lightgbm.load_lightgbm`) on one thread, so it returns the parent's values.
Runs in a subprocess with a real fork.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

_SCRIPT = r"""
import ctypes
import multiprocessing as mp
import sys
import numpy as np
import distshap

rng = np.random.RandomState(0)
X = rng.randn(300, 5)
y = X[:, 0] + X[:, 1] * X[:, 2]
models = []
if "xgboost" in sys.argv[2:]:
    import xgboost as xgb

    models.append(xgb.XGBRegressor(n_estimators=8, max_depth=3, n_jobs=2).fit(X, y))
if "lightgbm" in sys.argv[2:]:
    import lightgbm as lgb

    models.append(lgb.LGBMRegressor(n_estimators=8, num_leaves=8, n_jobs=2, verbose=-1).fit(X, y))
expected = [distshap.TreeExplainer(m, backend="cpu").shap_values(X) for m in models]
if "lightgbm" in sys.argv[2:]:  # the process-wide thread limit is back as it was
    from lightgbm.basic import _LIB

    limit = ctypes.c_int(0)
    _LIB.LGBM_GetMaxThreads(ctypes.byref(limit))
    assert limit.value == -1, limit.value


def child(queue):
    queue.put([distshap.TreeExplainer(m, backend="cpu").shap_values(X) for m in models])


ctx = mp.get_context("fork")
queue = ctx.Queue()
process = ctx.Process(target=child, args=(queue,))
process.start()
try:
    got = queue.get(timeout=float(sys.argv[1]))
finally:
    process.join(5)
    if process.is_alive():
        process.kill()
for a, b in zip(got, expected, strict=True):
    assert a.dtype == b.dtype and np.array_equal(a, b), "child differs"
print("OK", len(got))
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_forked_child_reads_in_memory_boosters():
    libraries = [m for m in ("xgboost", "lightgbm") if importlib.util.find_spec(m) is not None]
    if not libraries:
        pytest.skip("needs xgboost or lightgbm")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, "60", *libraries],
        capture_output=True, text=True, timeout=180, env=env,
    )  # fmt: skip
    assert done.returncode == 0 and f"OK {len(libraries)}" in done.stdout, done.stderr[-2000:]
