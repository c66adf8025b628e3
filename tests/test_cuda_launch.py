"""Kept accumulators and the other per-call savings of :mod:`distshap.kernels.cuda.launch`.

Under the CUDA simulator (a subprocess): the same bits with fresh and kept accumulators,
call after call (a kept accumulator must be zero again after each call), with batches that
leave a short last one, after a call that failed between its launches (its accumulator is
dropped, not reused), and with the kept accumulators evicted.
"""

from __future__ import annotations

from cudasim import assert_simulator_ok

_SCRIPT = r"""
import numpy as np
import tiny
from distshap.kernels.cuda import launch
from distshap.kernels.cuda.runtime import caches
from distshap.packed import build_packed_model
from distshap.paths import extract_paths
from distshap.plan.config import set_config
from distshap.warmup import chain_ensemble

set_config(small_max_paths=0)  # the batched route (tables, quadrature, fallback, finish)
ens = tiny.random_ensemble(4, n_features=5, n_trees=3, depth=3, n_groups=2)
X = tiny.random_rows(3, ens, 3, 0.15)
mixed = build_packed_model(extract_paths(ens), table_budget_bytes=700)  # tables + quadrature
quad = build_packed_model(extract_paths(ens), table_budget_bytes=0)
fallback = build_packed_model(extract_paths(chain_ensemble(33, 33)), table_budget_bytes=0)
Xf = np.full((2, 33), 0.25, np.float32)
Xf[1, 5] = 0.75

def bits(packed, X, inter, **kw):
    f = launch.interaction_values if inter else launch.shap_values
    return f(packed, X, **kw).view(np.uint32).copy()

cases = [(mixed, X, True), (mixed, X, False), (quad, X, True), (quad, X, False),
         (fallback, Xf, False)]
before = []
for p, x, i in cases:  # every call with fresh accumulators
    caches.clear_cache()
    before.append(bits(p, x, i))
caches.clear_cache()
for rep in range(2):  # the second time every accumulator is a kept one
    for (p, x, i), ref in zip(cases, before):
        assert np.array_equal(bits(p, x, i), ref), (rep, i)
assert len(caches._KEPT) >= 3, caches._KEPT.keys()
# a short last batch reads a slice of the kept accumulator's view
for rep in range(2):
    assert np.array_equal(bits(mixed, X, True, batch_rows=2), before[0])
# a call failing between its launches does not give its (dirty) accumulator back
real = launch.launch_finish
def broken(*a, **k):
    raise RuntimeError("boom")
launch.launch_finish = broken
try:
    bits(mixed, X, True)
    raise AssertionError("expected the failure")
except RuntimeError:
    pass
launch.launch_finish = real
assert np.array_equal(bits(mixed, X, True), before[0]), "a dirty accumulator was reused"
# eviction keeps the total bounded and the bits
caches._KEPT_TOTAL_BYTES = 1
for (p, x, i), ref in zip(cases, before):
    assert np.array_equal(bits(p, x, i), ref)
assert len(caches._KEPT) == 1
print("SIMULATOR-OK")
"""


def test_kept_accumulators_keep_the_bits():
    assert_simulator_ok(_SCRIPT, timeout=600)
