"""Concurrent calls into the CPU kernels are safe under every Numba threading layer.

Numba's ``workqueue`` layer (used where neither TBB nor OpenMP is present) aborts the process
when two threads enter parallel regions at once; :func:`distshap.parallel.run_parallel`
serialises the calls under that layer. Each case runs in a subprocess, since the layer is
chosen once per process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import numba
import pytest

from distshap import parallel

_SCRIPT = r"""
import threading
import numba
import numpy as np
import tiny
from distshap import TreeExplainer
from distshap import parallel
from distshap.kernels import cpu
from distshap.packed import build_packed_model
from distshap.paths import extract_paths

assert parallel._serialise()  # no layer launched yet: serialise until Numba has chosen one
ens = tiny.random_ensemble(3, n_features=8, n_trees=30, depth=6, n_groups=2)
X = tiny.random_rows(4, ens, 400, 0.1)
models = [build_packed_model(extract_paths(ens), table_budget_bytes=b) for b in (0, 1 << 30)]
# the tables of the second model are filled (a parallel call too) by the threads themselves
expected = [cpu.shap_values(build_packed_model(extract_paths(ens)), X),
            cpu.interaction_values(models[0], X[:40])]
explainer = TreeExplainer(ens, backend="cpu")  # its additivity check is a parallel call too
expected.append(explainer.shap_values(X))
cpu.clear_cache()
results, errors = [], []

def work(i):
    try:
        for _ in range(20):
            if i == 3:
                results.append(np.array_equal(explainer.shap_values(X), expected[2]))
            elif i % 2:
                results.append(np.array_equal(cpu.interaction_values(models[0], X[:40]),
                                              expected[1]))
            else:
                results.append(np.array_equal(cpu.shap_values(models[1], X), expected[0]))
    except Exception as exc:  # reported below; the test fails on it
        errors.append(repr(exc))

threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
assert not errors, errors
assert len(results) == 80 and all(results), results
print("LAYER", numba.threading_layer(), parallel._serialise())
"""


@pytest.mark.parametrize("layer", ["workqueue", "default"])
def test_concurrent_cpu_calls_finish_with_correct_results(layer):
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, NUMBA_THREADING_LAYER=layer, NUMBA_NUM_THREADS="2")
    env["PYTHONPATH"] = os.pathsep.join([here, os.path.dirname(here), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-3000:])
    line = [x for x in proc.stdout.splitlines() if x.startswith("LAYER")][-1]
    _, chosen, serialised = line.split()
    if layer == "workqueue":
        assert chosen == "workqueue" and serialised == "True"
    else:  # TBB or OpenMP where present (then calls run concurrently), workqueue otherwise
        assert serialised == str(chosen == "workqueue")


def test_distshap_num_threads_applies_to_every_calling_thread(monkeypatch):
    """``DISTSHAP_NUM_THREADS`` is applied per calling thread at call time, within Numba's pool."""
    seen = {}

    def probe(name):
        try:
            seen[name] = (parallel.num_threads(), numba.get_num_threads())
        except ValueError as err:
            seen[name] = str(err)

    def in_thread(name):
        thread = threading.Thread(target=probe, args=(name,))
        thread.start()
        thread.join()

    monkeypatch.setenv("DISTSHAP_NUM_THREADS", "1")
    in_thread("one")
    monkeypatch.setenv("DISTSHAP_NUM_THREADS", str(numba.config.NUMBA_NUM_THREADS + 5))
    in_thread("many")
    monkeypatch.setenv("DISTSHAP_NUM_THREADS", "zero")
    in_thread("bad")
    monkeypatch.delenv("DISTSHAP_NUM_THREADS")
    in_thread("unset")
    pool = numba.config.NUMBA_NUM_THREADS
    assert seen["one"] == (1, 1)
    assert seen["many"] == (pool, pool)  # cut to the pool Numba launched
    assert "DISTSHAP_NUM_THREADS='zero'" in seen["bad"] and "positive integer" in seen["bad"]
    assert seen["unset"] == (pool, pool)  # Numba's own count in a new thread


def test_run_ranges_returns_when_its_ranges_are_done_though_the_pool_is_busy(monkeypatch):
    """A call whose ranges its own thread finished does not wait for helpers that never started
    (the shared pool busy with another caller's work)."""
    import threading

    from distshap import parallel

    monkeypatch.setattr(parallel, "num_threads", lambda: 2)
    parallel.run_ranges(lambda lo, hi: None, 4, 2)  # the pool exists
    release = threading.Event()
    blockers = [parallel._POOL.submit(release.wait) for _ in range(parallel._POOL._max_workers)]
    done = threading.Event()
    seen = []

    def call():
        parallel.run_ranges(lambda lo, hi: seen.append((lo, hi)), 8, 4)
        done.set()

    caller = threading.Thread(target=call)
    caller.start()
    try:
        assert done.wait(10), "run_ranges waited for the busy pool"
        assert sorted(seen) == [(0, 2), (2, 4), (4, 6), (6, 8)]
    finally:
        release.set()
        caller.join(10)
        for blocker in blockers:
            blocker.result(10)
