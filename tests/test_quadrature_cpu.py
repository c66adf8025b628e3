"""The CPU SHAP kernel (:mod:`distshap.kernels.quadrature_cpu`): exact at every path length.

Paths without a pattern table are integrated by Gauss-Legendre quadrature, and the tables are
filled by the same quadrature. Checked against the float64 oracles of ``tests/naive.py`` and,
for paths far too long for those (the recursive oracle loses accuracy and the brute force
would need ``2**k`` subsets), against the Shapley formula of one path evaluated in exact
rational arithmetic. Also: zero fractions of 0, bits independent of threads and chunks, and
the cold-start shape of a first SHAP call (one compiled kernel, one specialisation).
"""

from __future__ import annotations

import os
import subprocess
import sys
from fractions import Fraction
from math import factorial

import numba
import numpy as np
import pytest

from distshap.kernels import cpu, quadrature_cpu
from distshap.packed import build_packed_model
from distshap.paths import extract_paths

import naive
import tiny
from tiny import Leaf, Split, build_ensemble


def _path_shapley_exact(z: list[float], o: list[int], v: float) -> list[Fraction]:
    """SHAP values of the one-path game ``v prod_j (o_j if j in S else z_j)``, exactly.

    ``phi_i = v (o_i - z_i) sum_s s! (k-1-s)! / k! e_s``, with ``e_s`` the coefficient of
    ``y**s`` in ``prod_{j != i} (z_j + o_j y)``: the Shapley weights summed by subset size, in
    integers (every ``z_j`` times a common power of two is an integer), not by quadrature.
    """
    k = len(z)
    fz = [Fraction(x) for x in z]
    scale = max(f.denominator for f in fz)  # a power of two: z_j * scale are integers
    zs = [int(f * scale) for f in fz]
    weights = [factorial(s) * factorial(k - 1 - s) for s in range(k)]
    out = []
    for i in range(k):
        poly = [1]  # coefficients of prod_{j != i} (zs_j + o_j scale y), y**0 first
        for j in range(k):
            if j == i:
                continue
            nxt = [c * zs[j] for c in poly] + [0]
            if o[j]:
                for s, c in enumerate(poly):
                    nxt[s + 1] += c * scale
            poly = nxt
        total = sum(c * w for c, w in zip(poly, weights, strict=False))
        out.append(Fraction(v) * (o[i] - fz[i]) * Fraction(total, factorial(k) * scale ** (k - 1)))
    return out


def _chain(k: int, seed: int, zero_tail: int = 0):
    """One path of ``k`` features (feature ``f`` at depth ``f``, leaf value 1.75); the other
    leaves are 0, so they make no paths. The path goes left (``x < 0.5``) at even features and
    right at odd ones. With ``zero_tail``, the path's last nodes have zero cover, so its last
    ``zero_tail`` zero fractions are 0. Returns the ensemble and the path's zero fractions
    as the ensemble defines them (cover of the child on the path / cover of the node)."""
    # zero fractions near 0 and 1 make every power of t count in the integrand
    target = np.random.default_rng(seed).choice([0.05, 0.3, 0.7, 0.95], k)
    cover = np.ones(k + 1)  # cover[f]: the node at depth f (the leaf at depth k)
    for f in reversed(range(k)):
        cover[f] = cover[f + 1] / target[f]
    if zero_tail:
        cover[k - zero_tail + 1 :] = 0.0
    node = Leaf(1.75, float(cover[k]))
    for f in reversed(range(k)):
        off = Leaf(0.0, float(cover[f] - cover[f + 1]) if cover[f] > 0 else 0.0)
        node = Split(f, 0.5, node, off) if f % 2 == 0 else Split(f, 0.5, off, node)
    ens = build_ensemble([node], num_features=k)
    z, at = [], 0
    for f in range(k):
        child = ens.left[at] if f % 2 == 0 else ens.right[at]
        z.append(float(ens.cover[child] / ens.cover[at]) if ens.cover[at] > 0 else 0.0)
        at = child
    assert ens.value[at] == 1.75
    return ens, z


def _follows(x: np.ndarray) -> np.ndarray:
    f = np.arange(x.shape[-1])
    return np.where(f % 2 == 0, x < 0.5, x >= 0.5).astype(int)


@pytest.mark.parametrize(("k", "zero_tail", "budget"), [(9, 0, 1 << 30), (40, 0, 0), (64, 3, 0)])
def test_long_paths_are_exact(k, zero_tail, budget):
    """Within one float32 rounding of the exact rational value, at 40 and 64 features (the DP
    and the recursive oracle lose float64 accuracy on such paths) and with a table (k = 9)."""
    ens, z = _chain(k, seed=k, zero_tail=zero_tail)
    assert z.count(0.0) == zero_tail
    rng = np.random.default_rng(k)
    X = np.where(rng.random((4, k)) < 0.5, 0.25, 0.75).astype(np.float32)
    X[0] = np.where(np.arange(k) % 2 == 0, 0.25, 0.75)  # follows every element
    X[1] = X[0]
    X[1, k // 2] = 1.0 - X[1, k // 2]  # all but one
    packed = build_packed_model(extract_paths(ens), table_budget_bytes=budget)
    assert packed.num_paths == 1 and packed.stats["table_paths"] == int(budget > 0)
    got = cpu.shap_values(packed, X)[:, 0, :k]
    for r in range(X.shape[0]):
        exact = _path_shapley_exact(z, _follows(X[r]).tolist(), 1.75)
        want = np.array([float(e) for e in exact])
        ulp = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
        assert np.all(np.abs(got[r] - want) <= ulp), (r, np.abs(got[r] - want).max())
        if any(zz == 0 and not o for zz, o in zip(z, _follows(X[r]), strict=True)):
            assert not got[r].any()  # a factor 0 at every node: the path adds nothing
    assert np.abs(got[0]).max() > 0  # a row that follows everything gets values
    margin = naive.predict_margin(ens, X.astype(np.float64))
    np.testing.assert_allclose(cpu.shap_values(packed, X).sum(axis=-1), margin, atol=1e-6)


@pytest.mark.parametrize("budget", [0, 1 << 30], ids=["quadrature", "tables"])
@pytest.mark.parametrize("name", ["zero_cover", "repeated_feature", "categorical", "multiclass"])
def test_tiny_models_match_brute_force(name, budget):
    ens = tiny.tiny_ensembles()[name]
    X = tiny.random_rows(3, ens, 30, 0.2)
    packed = build_packed_model(extract_paths(ens), table_budget_bytes=budget)
    got = cpu.shap_values(packed, X).astype(np.float64)
    ref = naive.brute_force_shap_rows(ens, X).reshape(got.shape)
    np.testing.assert_allclose(got, ref, atol=1e-6 * max(1.0, np.abs(ref).max()), rtol=0)


def test_zero_cover_subtree_gives_the_oracles_values():
    """An internal node of zero cover: its children's fractions are 0 / 0, taken as 0."""
    ens = tiny.zero_cover_subtree()
    X = tiny.random_rows(5, ens, 40, 0.1)
    for budget in (0, 1 << 30):
        packed = build_packed_model(extract_paths(ens), table_budget_bytes=budget)
        got = cpu.shap_values(packed, X).astype(np.float64)
        ref = naive.brute_force_shap_rows(ens, X).reshape(got.shape)
        np.testing.assert_allclose(got, ref, atol=1e-6, rtol=0)


@pytest.mark.parametrize("seed", range(3))
def test_quadrature_and_tables_agree_with_recursive_treeshap(seed):
    ens = tiny.random_ensemble(
        seed, n_features=9, n_trees=8, depth=7, n_groups=1 + seed, n_categorical=2
    )
    X = tiny.random_rows(seed, ens, 60, 0.1)
    ref = naive.treeshap_recursive_rows(ens, X)
    scale = max(1.0, np.abs(ref).max())
    paths = extract_paths(ens)
    for budget in (0, 4000, 1 << 30):  # none, some and all paths with a table
        packed = build_packed_model(paths, table_budget_bytes=budget)
        got = cpu.shap_values(packed, X).astype(np.float64).reshape(ref.shape)
        np.testing.assert_allclose(got, ref, atol=2e-7 * scale, rtol=0)


def test_tables_are_the_kernel_values_at_the_pattern_corners():
    """Each table row is the float32 of the quadrature's value at that pattern."""
    ens, z = _chain(6, seed=2)
    packed = build_packed_model(extract_paths(ens))
    offsets, tables = cpu.shap_tables(packed)
    assert offsets.tolist() == [0] and tables.shape == (64 * 6,)
    for pattern in range(64):
        o = [(pattern >> i) & 1 for i in range(6)]
        exact = _path_shapley_exact(z, o, 1.75)
        np.testing.assert_array_equal(
            tables[pattern * 6 : pattern * 6 + 6],
            np.array([float(e) for e in exact], np.float32),
        )


def test_bits_do_not_depend_on_threads_blocks_or_chunks(monkeypatch):
    ens = tiny.random_ensemble(7, n_features=8, n_trees=12, depth=6, n_groups=3)
    X = tiny.random_rows(7, ens, 300, 0.1)
    packed = build_packed_model(extract_paths(ens), table_budget_bytes=20_000)
    assert 0 < packed.stats["table_paths"] < packed.stats["paths"]
    whole = cpu.shap_values(packed, X)
    parts = np.concatenate([cpu.shap_values(packed, X[:37]), cpu.shap_values(packed, X[37:])])
    assert np.array_equal(whole, parts)
    threads = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        assert np.array_equal(cpu.shap_values(packed, X), whole)
    finally:
        numba.set_num_threads(threads)
    monkeypatch.setattr(quadrature_cpu, "_ACC_BYTES", 1)  # blocks of the fewest rows
    monkeypatch.setattr(quadrature_cpu, "_FILL_ROWS", 4)
    cpu.clear_cache()
    assert np.array_equal(cpu.shap_values(packed, X), whole)
    cpu.clear_cache()


def test_empty_input_and_a_model_without_paths():
    ens = build_ensemble([Leaf(2.5)], num_features=3, base_score=0.5)
    packed = build_packed_model(extract_paths(ens))
    X = np.zeros((4, 3), np.float32)
    np.testing.assert_array_equal(cpu.shap_values(packed, X)[:, 0], [[0, 0, 0, 3.0]] * 4)
    assert cpu.shap_values(packed, X[:0]).shape == (0, 1, 4)


_FIRST_CALL = r"""
import numpy as np
import tiny
from distshap import TreeExplainer, paths
from distshap.kernels import cpu, quadrature_cpu
ens = tiny.random_ensemble(1, n_features=6, n_trees=5, depth=5, n_groups=2)
explainer = TreeExplainer(ens, backend="cpu", table_budget_bytes=3000)
assert 0 < explainer.packed.stats["table_paths"] < explainer.packed.stats["paths"]
explainer.shap_values(tiny.random_rows(1, ens, 50, 0.1))
# tables and rows share one specialisation of the one SHAP kernel; nothing else compiled
assert len(quadrature_cpu._shap_rows.signatures) == 1, quadrature_cpu._shap_rows.signatures
assert not cpu._interaction_kernel.signatures and not paths._walk_paths.signatures
print("ok")
"""


def test_a_first_shap_call_compiles_one_kernel_once():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    here = os.path.dirname(__file__)
    proc = subprocess.run(
        [sys.executable, "-c", _FIRST_CALL], env=env, cwd=here, capture_output=True, text=True
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]
