"""The CPU SHAP and interaction kernels (:mod:`distshap.kernels.quadrature_cpu`,
:mod:`distshap.kernels.interactions_cpu`): exact at every path length.

Paths without a pattern table are integrated by Gauss-Legendre quadrature, and the tables are
filled by the same quadrature. Checked against the float64 oracles of ``tests/naive.py`` and,
for paths far too long for those (the recursive oracle loses accuracy and the brute force
would need ``2**k`` subsets), against the Shapley (interaction) formula of one path evaluated
in exact rational arithmetic; interaction values also against XGBoost's ``pred_interactions``.
Also: zero fractions of 0, bits independent of threads and chunks (sibling units among the
paths), pair slots with the bits of
the matrix entries, and the cold-start shape of a first call (one compiled kernel, one
specialisation).
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

from distshap import TreeExplainer
from distshap.kernels import cpu, interactions_cpu, quadrature_cpu
from distshap.packed import build_packed_model
from distshap.paths import extract_paths
from distshap.plan.config import get_config

import naive
import tiny
from tiny import Leaf, Split, build_ensemble
from xgb_models import MODEL_KINDS, dmatrix


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
    levels = get_config().quadrature_unit_levels  # members run inside their units
    assert levels >= 2 and cpu.shap_units(packed, levels)[3].sum() > 10
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
from distshap import TreeExplainer
from distshap.kernels import cpu, interactions_cpu, quadrature_cpu
ens = tiny.random_ensemble(1, n_features=6, n_trees=5, depth=5, n_groups=2)
explainer = TreeExplainer(ens, backend="cpu", table_budget_bytes=3000)
assert 0 < explainer.packed.stats["table_paths"] < explainer.packed.stats["paths"]
explainer.shap_values(tiny.random_rows(1, ens, 50, 0.1))
# tables and rows share one specialisation of the one SHAP kernel; nothing else compiled
assert len(quadrature_cpu._shap_rows.signatures) == 1, quadrature_cpu._shap_rows.signatures
assert not interactions_cpu._interaction_rows.signatures
walks = [n for n, f in vars(paths).items() if getattr(f, "signatures", None)]
assert not walks, walks  # the model of usual size is built in NumPy

print("ok")
"""


def test_a_first_shap_call_compiles_one_kernel_once():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    here = os.path.dirname(__file__)
    proc = subprocess.run(
        [sys.executable, "-c", _FIRST_CALL], env=env, cwd=here, capture_output=True, text=True
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


# --- interaction values ----------------------------------------------------------------------


def _path_interactions_exact(z: list[float], o: list[int], v: float) -> list[list[Fraction]]:
    """Interaction values ``(k, k)`` of the one-path game, exactly (XGBoost's convention).

    ``phi_ic = v (o_i - z_i) (o_c - z_c) / 2 sum_s s! (k-2-s)! / (k-1)! e_s``, with ``e_s``
    the coefficient of ``y**s`` in ``prod_{j != i, c} (z_j + o_j y)``; the diagonal is the
    SHAP value (:func:`_path_shapley_exact`) less the row's off-diagonal values.
    """
    k = len(z)
    fz = [Fraction(x) for x in z]
    scale = max(f.denominator for f in fz)
    zs = [int(f * scale) for f in fz]
    weights = [factorial(s) * factorial(k - 2 - s) for s in range(k - 1)]
    phi = [[Fraction(0)] * k for _ in range(k)]
    for i in range(k):
        for c in range(i + 1, k):
            poly = [1]
            for j in range(k):
                if j in (i, c):
                    continue
                nxt = [x * zs[j] for x in poly] + [0]
                if o[j]:
                    for s, x in enumerate(poly):
                        nxt[s + 1] += x * scale
                poly = nxt
            total = Fraction(sum(x * w for x, w in zip(poly, weights, strict=False)))
            value = total / (factorial(k - 1) * scale ** (k - 2)) / 2
            phi[i][c] = phi[c][i] = Fraction(v) * (o[i] - fz[i]) * (o[c] - fz[c]) * value
    shap = _path_shapley_exact(z, o, v)
    for i in range(k):
        phi[i][i] = shap[i] - sum(phi[i][c] for c in range(k) if c != i)
    return phi


@pytest.mark.parametrize(("k", "zero_tail", "budget"), [(9, 0, 1 << 30), (30, 0, 0), (40, 3, 0)])
def test_long_path_interactions_are_exact(k, zero_tail, budget):
    """Off-diagonal values within one float32 rounding of the exact rational value, the
    diagonal (a difference of k terms) within k roundings of the row's largest term; at 30 and
    40 features by quadrature, at 9 from a table."""
    ens, z = _chain(k, seed=k, zero_tail=zero_tail)
    rng = np.random.default_rng(k)
    X = np.where(rng.random((3, k)) < 0.5, 0.25, 0.75).astype(np.float32)
    X[0] = np.where(np.arange(k) % 2 == 0, 0.25, 0.75)  # follows every element
    X[1] = X[0]
    X[1, k // 3] = 1.0 - X[1, k // 3]
    packed = build_packed_model(extract_paths(ens), table_budget_bytes=budget)
    offsets, _ = interactions_cpu.interaction_tables(packed)
    assert (offsets >= 0).tolist() == [budget > 0]
    got = cpu.interaction_values(packed, X)[:, 0, :k, :k].astype(np.float64)
    assert np.abs(got[0]).max() > 0
    for r in range(X.shape[0]):
        exact = _path_interactions_exact(z, _follows(X[r]).tolist(), 1.75)
        want = np.array([[float(e) for e in row] for row in exact])
        off = ~np.eye(k, dtype=bool)
        ulp = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
        assert np.all(np.abs(got[r] - want)[off] <= ulp[off]), (r, np.abs(got[r] - want).max())
        row_scale = np.spacing(np.abs(want).max(axis=1).astype(np.float32)).astype(np.float64)
        assert np.all(np.abs(np.diag(got[r]) - np.diag(want)) <= k * row_scale), r
        np.testing.assert_array_equal(got[r], got[r].T)


@pytest.mark.parametrize("budget", [0, 3000, 1 << 30], ids=["quadrature", "mixed", "tables"])
@pytest.mark.parametrize("name", ["zero_cover", "repeated_feature", "categorical", "multiclass"])
def test_tiny_interactions_match_brute_force(name, budget):
    ens = tiny.tiny_ensembles()[name]
    X = tiny.random_rows(4, ens, 25, 0.2)
    packed = build_packed_model(extract_paths(ens), table_budget_bytes=budget)
    got = cpu.interaction_values(packed, X).astype(np.float64)
    ref = naive.brute_force_interactions_rows(ens, X).reshape(got.shape)
    np.testing.assert_allclose(got, ref, atol=1e-6 * max(1.0, np.abs(ref).max()), rtol=0)


@pytest.mark.parametrize("seed", range(2))
def test_interactions_agree_with_recursive_treeshap(seed):
    ens = tiny.random_ensemble(
        seed, n_features=9, n_trees=6, depth=7, n_groups=1 + seed, n_categorical=2
    )
    X = tiny.random_rows(seed, ens, 12, 0.1)
    ref = naive.treeshap_interactions_recursive_rows(ens, X)
    scale = max(1.0, np.abs(ref).max())
    paths = extract_paths(ens)
    for budget in (0, 40_000, 1 << 30):  # none, some and all paths with a table
        packed = build_packed_model(paths, table_budget_bytes=budget)
        got = cpu.interaction_values(packed, X).astype(np.float64).reshape(ref.shape)
        np.testing.assert_allclose(got, ref, atol=5e-7 * scale, rtol=0)


@pytest.mark.parametrize("kind", ["regression", "multiclass", "missing", "categorical"])
def test_interactions_match_xgboost_with_and_without_tables(kind):
    booster, X = MODEL_KINDS[kind]()
    X = X.iloc[:25] if hasattr(X, "iloc") else X[:25]
    ref = booster.predict(dmatrix(X), pred_interactions=True)
    scale = max(1.0, float(np.abs(ref).max()))
    for budget in (0, 1 << 30):
        explainer = TreeExplainer(
            booster, layout="xgboost", backend="cpu", table_budget_bytes=budget
        )
        got = explainer.shap_interaction_values(X)
        assert got.shape == ref.shape and got.dtype == np.float32
        np.testing.assert_allclose(got, ref, atol=1e-5 * scale, rtol=0)


def _slot_entries(packed, X, slots):
    full = cpu.interaction_values(packed, X)
    group = np.searchsorted(slots.slot_offsets, np.arange(slots.num_slots), side="right") - 1
    return full, full[:, group, slots.slot_i, slots.slot_j]


def test_interaction_bits_do_not_depend_on_threads_blocks_or_chunks(monkeypatch):
    """Matrices and pair slots, tables and quadrature mixed: the same bits for any row split,
    thread count, block size and table-filling batch; every slot has its entry's bits."""
    from distshap.pair_slots import build_pair_slots

    ens = tiny.random_ensemble(8, n_features=7, n_trees=10, depth=6, n_groups=3, n_categorical=1)
    X = tiny.random_rows(8, ens, 150, 0.1)
    packed = build_packed_model(extract_paths(ens), table_budget_bytes=60_000)
    offsets, _ = interactions_cpu.interaction_tables(packed)
    assert 0 < (offsets >= 0).sum() < packed.num_paths
    slots = build_pair_slots(packed)
    whole, entries = _slot_entries(packed, X, slots)
    np.testing.assert_array_equal(whole, whole.swapaxes(-1, -2))
    assert np.array_equal(cpu.interaction_slot_values(packed, X, slots), entries)
    parts = np.concatenate(
        [cpu.interaction_values(packed, X[:29]), cpu.interaction_values(packed, X[29:])]
    )
    assert np.array_equal(whole, parts)
    threads = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        assert np.array_equal(cpu.interaction_values(packed, X), whole)
    finally:
        numba.set_num_threads(threads)
    monkeypatch.setattr(interactions_cpu, "_ACC_BYTES", 1)  # blocks of the fewest rows
    monkeypatch.setattr(interactions_cpu, "_FILL_ROWS", 4)
    monkeypatch.setattr(interactions_cpu, "_FILL_VALUES", 64)
    cpu.clear_cache()
    assert np.array_equal(cpu.interaction_values(packed, X), whole)
    assert np.array_equal(cpu.interaction_slot_values(packed, X[5:40], slots), entries[5:40])
    cpu.clear_cache()


def test_interaction_tables_are_the_kernel_values_at_the_pattern_corners():
    """Each table row is the float32 of the exact upper entries (``phi_i`` on the diagonal)."""
    ens, z = _chain(5, seed=3)
    packed = build_packed_model(extract_paths(ens))
    offsets, tables = interactions_cpu.interaction_tables(packed)
    assert offsets.tolist() == [0] and tables.shape == (32 * 15,)
    upper = np.triu_indices(5)
    for pattern in range(32):
        o = [(pattern >> i) & 1 for i in range(5)]
        pairs = _path_interactions_exact(z, o, 1.75)
        shap = _path_shapley_exact(z, o, 1.75)
        want = [
            float(shap[i]) if i == c else float(pairs[i][c]) for i, c in zip(*upper, strict=True)
        ]
        np.testing.assert_array_equal(tables[pattern * 15 : pattern * 15 + 15],
                                      np.array(want, np.float32))  # fmt: skip


def test_interactions_of_empty_input_and_a_model_without_paths():
    ens = build_ensemble([Leaf(2.5)], num_features=3, base_score=0.5)
    packed = build_packed_model(extract_paths(ens))
    X = np.zeros((2, 3), np.float32)
    want = np.zeros((2, 1, 4, 4), np.float32)
    want[:, 0, 3, 3] = 3.0
    np.testing.assert_array_equal(cpu.interaction_values(packed, X), want)
    assert cpu.interaction_values(packed, X[:0]).shape == (0, 1, 4, 4)


_FIRST_INTERACTIONS = r"""
import numpy as np
import tiny
from distshap import TreeExplainer
from distshap.kernels import interactions_cpu, quadrature_cpu
ens = tiny.random_ensemble(1, n_features=6, n_trees=5, depth=5, n_groups=2)
explainer = TreeExplainer(ens, backend="cpu", table_budget_bytes=3000)
explainer.shap_interaction_values(tiny.random_rows(1, ens, 30, 0.1))
offsets, _ = interactions_cpu.interaction_tables(explainer.packed)
assert 0 < (offsets >= 0).sum() < explainer.packed.num_paths
# tables, matrices (and slots) share one specialisation of the one interaction kernel
sigs = interactions_cpu._interaction_rows.signatures
assert len(sigs) == 1, sigs
print("ok")
"""


def test_a_first_interaction_call_compiles_one_kernel_once():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    here = os.path.dirname(__file__)
    proc = subprocess.run(
        [sys.executable, "-c", _FIRST_INTERACTIONS], env=env, cwd=here, capture_output=True,
        text=True,
    )  # fmt: skip
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]
