"""A child forked after XGBoost's OpenMP threads ran reads an in-memory XGBoost model.

Training, loading or predicting starts XGBoost's OpenMP threads, which do not survive ``fork``
(``multiprocessing`` with ``fork``, preloading servers, prefork task queues): a child whose
XGBoost call uses them waits for ever. Building an explainer from an in-memory booster in such
a child serialises the booster (:func:`distshap.models.xgboost.load_xgboost`), on the calling
thread only, so it returns the parent's values. Runs in a subprocess with a real fork.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("xgboost")

_SCRIPT = r"""
import multiprocessing as mp
import sys
import numpy as np
import xgboost as xgb
import distshap

rng = np.random.RandomState(0)
X = rng.randn(300, 5).astype(np.float32)
y = X[:, 0] + X[:, 1] * X[:, 2]
model = xgb.XGBRegressor(n_estimators=8, max_depth=3, n_jobs=2).fit(X, y)  # OpenMP threads ran
expected = distshap.TreeExplainer(model, backend="cpu").shap_values(X)


def child(queue):
    queue.put(distshap.TreeExplainer(model, backend="cpu").shap_values(X))


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
assert got.dtype == expected.dtype and np.array_equal(got, expected), "child differs"
print("OK")
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_forked_child_reads_an_in_memory_booster():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, "60"], capture_output=True, text=True, timeout=180, env=env
    )
    assert done.returncode == 0 and "OK" in done.stdout, done.stderr[-2000:]
