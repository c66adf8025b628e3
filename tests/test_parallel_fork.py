"""A child forked from a process that used distshap computes the parent's values, and returns.

The parent's thread pool, locks and Numba threads do not survive ``fork`` (``multiprocessing``
with ``fork``, preloading servers, prefork task queues): :mod:`distshap.parallel` makes them new
in the child, and runs ``parallel=True`` functions serially where the parent's layer (GNU
OpenMP) cannot run in a forked child. Runs in a subprocess with a real fork, under the default
threading layer (the ``workqueue`` layer survives a fork by itself).
"""

from __future__ import annotations

import os
import subprocess
import sys

_SCRIPT = r"""
import multiprocessing as mp
import sys
import numpy as np
import tiny
from distshap import TreeExplainer

ens = tiny.random_ensemble(3, n_features=6, n_trees=20, depth=5)
X = tiny.random_rows(4, ens, 200, 0.1)
background = tiny.random_rows(5, ens, 40, 0.0)
tree = TreeExplainer(ens, backend="cpu")
interventional = TreeExplainer(ens, backend="cpu", data=background,
                               feature_perturbation="interventional")


def values():
    return [tree.shap_values(X), tree.shap_interaction_values(X[:30]),
            interventional.shap_values(X[:50]), interventional.shap_interaction_values(X[:10])]


def child(queue):
    queue.put(values())


def in_child():
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    process = ctx.Process(target=child, args=(queue,))
    process.start()
    try:
        return queue.get(timeout=float(sys.argv[1]))
    finally:
        process.join(5)
        if process.is_alive():
            process.kill()


constructed_only = in_child()  # the parent built explainers but computed nothing yet
expected = values()
after_compute = in_child()  # the parent's pool, locks and Numba threads were running
for got in (constructed_only, after_compute):
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        assert a.dtype == b.dtype and np.array_equal(a, b), "child differs from parent"
print("OK")
"""


def test_forked_child_computes_the_parents_values():
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, NUMBA_NUM_THREADS="2")
    env.pop("NUMBA_THREADING_LAYER", None)
    env["PYTHONPATH"] = os.pathsep.join([here, os.path.dirname(here), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, "-c", _SCRIPT, "120"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-3000:])
    assert proc.stdout.strip().endswith("OK")
