"""Sibling pairs of the SHAP quadrature plans (:mod:`distshap.plan.pairs`).

* which paths pair: a head and its partner are quadrature paths of one group and length whose
  lanes are equal at every position but one, of the same feature; no path is in two pairs;
  only selected paths pair; hand-built paths differing in two lanes, in a lane of another
  feature, or in another group do not pair;
* the plans: SHAP plans launch every head and no partner, each quadrature path once;
  ``quadrature_pairs=0`` and interaction plans (``pairs=False``) run every path alone;
* the math of the module docstring in float64: the pair's quadrature (the leaf values folded
  into the common product) equals the two paths' SHAP values computed apart;
* the CPU SHAP kernel with pairs and without them against the float64 oracle, partners skipped
  and sabotaged partner values noticed;
* a ``gpu``-marked test: a deep XGBoost model's values with pairs and without them against
  ``pred_contribs``, the same bits with pairs a row at a time, 16 rows and 3,000 rows.

The CUDA-simulator run of the kernels with pairs and without them is
``tests/test_cuda_path_threads.py``'s (its models have pairs).
"""

from __future__ import annotations

import numpy as np
import pytest

from distshap.inputs import prepare_rows
from distshap.kernels import cuda_available, treeshap
from distshap.packed import build_packed_model
from distshap.paths import extract_paths
from distshap.plan import gpu as plan_gpu
from distshap.plan.config import config_context
from distshap.plan.geometry import gauss_legendre
from distshap.plan.pairs import sibling_pairs

import naive
import tiny
from conftest import to_host

needs_gpu = pytest.mark.skipif(not cuda_available(), reason="no CUDA GPU visible (GPU host)")

_MODELS = {
    "numeric": lambda: tiny.random_ensemble(3, n_features=6, n_trees=4, depth=5),
    "categorical": lambda: tiny.random_ensemble(
        4, n_features=6, n_trees=4, depth=5, n_groups=3, n_categorical=2
    ),
    "merged": lambda: tiny.random_ensemble(5, n_features=3, n_trees=3, depth=7),
}


def _packed(ens, budget: int = 0):
    return build_packed_model(extract_paths(ens), table_budget_bytes=budget)


def _lanes(packed, p: int) -> range:
    """The feature lanes of path ``p`` (after its bias lane)."""
    return range(int(packed.path_offsets[p]) + 1, int(packed.path_offsets[p + 1]))


def _lane_key(packed, li: int) -> tuple:
    """Everything a lane tests, its zero fraction and its category words."""
    words = ()
    if packed.cat_offsets[li] >= 0:
        n = (int(packed.cat_nbits[li]) + 31) // 32
        start = int(packed.cat_offsets[li])
        words = tuple(int(w) for w in packed.cat_words[start : start + n])
    return (int(packed.feature[li]), float(packed.lower[li]), float(packed.upper[li]),
            float(packed.zero_fraction[li]), bool(packed.missing[li]),
            bool(packed.cat_other[li]), int(packed.cat_nbits[li]), words)  # fmt: skip


def _differing(packed, p: int, q: int) -> list[int]:
    """Positions where paths ``p`` and ``q`` (of one length) hold different lanes."""
    a, b = _lanes(packed, p), _lanes(packed, q)
    assert len(a) == len(b), (p, q)
    return [e for e in range(len(a)) if _lane_key(packed, a[e]) != _lane_key(packed, b[e])]


def _check_pairs(packed, selected, pair_lane) -> list[tuple[int, int, int]]:
    """Asserts the pairs' rules; returns ``(head, partner, position)`` of each pair."""
    n = packed.num_paths
    assert pair_lane.dtype == np.int32 and pair_lane.shape == (max(n, 1),)
    heads = np.flatnonzero(pair_lane[:n] >= 0)
    partners = packed.lane_path[pair_lane[heads]].astype(np.int64)
    in_pairs = np.concatenate([heads, partners])
    assert np.unique(in_pairs).size == in_pairs.size, "a path in two pairs"
    assert selected[in_pairs].all(), "an unselected path paired"
    assert np.all(pair_lane[partners] == -1)
    pairs = []
    for p, q in zip(heads.tolist(), partners.tolist(), strict=True):
        assert q != p and packed.path_group[q] == packed.path_group[p]
        assert len(_lanes(packed, q)) == len(_lanes(packed, p))
        differ = _differing(packed, p, q)
        assert len(differ) == 1, (p, q, differ)
        e = differ[0]
        assert packed.feature[_lanes(packed, p)[e]] == packed.feature[_lanes(packed, q)[e]]
        assert pair_lane[p] == _lanes(packed, q)[e]
        pairs.append((p, q, e))
    return pairs


def _quadrature_paths(plan) -> np.ndarray:
    return np.concatenate(
        [launch["paths"] for launch in plan["quadrature"]] or [np.empty(0, np.int32)]
    )


@pytest.mark.parametrize("name", sorted(_MODELS))
def test_pairs_differ_in_one_lane_of_one_feature(name):
    packed = _packed(_MODELS[name]())
    everything = np.ones(packed.num_paths, bool)
    pairs = _check_pairs(packed, everything, sibling_pairs(packed, everything))
    assert len(pairs) >= packed.num_paths // 5, len(pairs)
    if name == "merged":  # a differing element merged from two splits on its feature
        k = np.diff(packed.path_offsets) - 1
        assert k.max() <= 3  # three features, trees of depth 7
        lanes = [_lanes(packed, p)[e] for p, _, e in pairs]
        merged = np.isfinite(packed.lower[lanes]) & np.isfinite(packed.upper[lanes])
        assert merged.any()
    if name == "categorical":
        lanes = [_lanes(packed, p)[e] for p, _, e in pairs]
        assert (packed.cat_offsets[lanes] >= 0).any()
        assert len(set(packed.path_group[[p for p, _, _ in pairs]].tolist())) == 3
    # only selected paths pair: leave out one path of every other pair
    selected = everything.copy()
    selected[[q for _, q, _ in pairs[::2]]] = False
    pair_lane = sibling_pairs(packed, selected)
    fewer = _check_pairs(packed, selected, pair_lane)
    assert 0 < len(fewer) < len(pairs)
    assert not np.array_equal(pair_lane, sibling_pairs(packed, everything))


def test_hand_built_paths_pair_only_by_the_rule():
    def split(f, leaves, cover=(5.0, 5.0)):
        return tiny.Split(f, 0.5, tiny.Leaf(leaves[0], cover[0]), tiny.Leaf(leaves[1], cover[1]))

    trees = [  # every leaf its own value: a packed path is known by it
        tiny.Split(0, 0.5, split(1, (1, 2)), split(1, (3, 4))),  # equal lanes under both sides
        tiny.Split(0, 0.5, split(1, (5, 6)), split(2, (7, 8))),
        split(3, (9, 10), (4.0, 6.0)),  # group 0
        split(3, (11, 12), (4.0, 6.0)),  # group 1: the same lanes
    ]
    ens = tiny.build_ensemble(trees, num_features=4, num_groups=2, tree_groups=[0, 0, 0, 1])
    packed = _packed(ens)
    path = {int(v): p for p, v in enumerate(packed.path_value)}
    assert sorted(path) == list(range(1, 13))

    def pairs_of(values) -> set:
        selected = np.zeros(packed.num_paths, bool)
        selected[[path[v] for v in values]] = True
        pairs = _check_pairs(packed, selected, sibling_pairs(packed, selected))
        return {frozenset(int(packed.path_value[i]) for i in (p, q)) for p, q, _ in pairs}

    siblings = {frozenset((v, v + 1)) for v in range(1, 13, 2)}
    assert pairs_of(range(1, 13)) == siblings
    assert pairs_of([1, 4]) == set()  # two lanes differ (features 0 and 1)
    assert pairs_of([2, 3]) == set()
    assert pairs_of([1, 3]) == {frozenset((1, 3))}  # one lane (feature 0): a pair, not siblings
    assert len(pairs_of([2, 3, 4])) == 1  # 3 or 4 with 2 or each other: one pair, no chain
    assert pairs_of([5, 7]) == set()  # features (0, 1) and (0, 2): a lane of another feature
    assert pairs_of([6, 8]) == set()
    assert pairs_of([9, 12]) == set() and pairs_of([10, 11]) == set()  # two groups
    assert pairs_of([9]) == set()


@pytest.mark.parametrize("budget", [0, 6000])
def test_shap_plans_launch_heads_and_no_partners(budget):
    ens = tiny.random_ensemble(6, n_features=8, n_trees=3, depth=7, n_groups=2, n_categorical=1)
    packed = _packed(ens, budget)
    offsets = plan_gpu.shap_table_offsets(packed)
    k, _, regular = plan_gpu.path_info(packed)
    is_q = (offsets < 0) & regular
    if budget:
        assert ((offsets >= 0) & regular).any() and is_q.any()
    plan = plan_gpu.plan_arrays(packed, offsets, local=True, pairs=True)
    pair_lane = plan["pair_lane"]
    pairs = _check_pairs(packed, is_q, pair_lane)
    assert pairs
    heads = [p for p, _, _ in pairs]
    partners = [q for _, q, _ in pairs]
    launched = _quadrature_paths(plan).astype(np.int64)
    assert np.unique(launched).size == launched.size, "a path launched twice"
    assert set(heads) <= set(launched.tolist()) and not set(partners) & set(launched.tolist())
    assert set(launched.tolist()) | set(partners) == set(np.flatnonzero(is_q).tolist())
    assert plan_gpu.strategy_stats(packed)["quadrature_pairs"] == len(pairs)
    with config_context(quadrature_pairs=0):
        alone = plan_gpu.plan_arrays(packed, offsets, local=True, pairs=True)
    assert np.all(alone["pair_lane"] == -1) and alone["pair_lane"].shape == pair_lane.shape
    assert np.array_equal(np.sort(_quadrature_paths(alone)), np.flatnonzero(is_q))
    interaction = plan_gpu.plan_arrays(packed, offsets, local=False)
    assert interaction["pair_lane"] is None
    assert np.array_equal(np.sort(_quadrature_paths(interaction)), np.flatnonzero(is_q))


def _ones(packed, lanes, x) -> np.ndarray:
    """Whether row ``x`` (encoded) follows each lane (:func:`treeshap.follows`)."""
    return np.array([float(treeshap.follows(
        np.float32(x[packed.feature[li]]), packed.lower[li], packed.upper[li],
        packed.missing[li], packed.cat_other[li], packed.cat_offsets[li], packed.cat_nbits[li],
        packed.cat_words)) for li in lanes])  # fmt: skip


def _path_shap(z, o, v) -> np.ndarray:
    """Each element's SHAP value of a path, apart (float64, more nodes than needed)."""
    t, w = gauss_legendre(len(z) + 2)
    factors = z[:, None] + t[None, :] * (o - z)[:, None]
    out = np.empty(len(z))
    for i in range(len(z)):
        out[i] = v * (o[i] - z[i]) * (w * np.prod(np.delete(factors, i, 0), axis=0)).sum()
    return out


def _pair_shap(z, o, v, e, z2, o2, v2) -> np.ndarray:
    """The pair's values as the kernels form them: the head's path with element ``e`` and the
    leaf values left out, ``h(t)`` folded in (``ceil(k / 2)`` nodes, as a path of ``k``)."""
    t, w = gauss_legendre((len(z) + 1) // 2)
    prod = w.copy()
    for j in range(len(z)):
        if j != e:
            prod *= z[j] + t * (o[j] - z[j])
    out = np.zeros(len(z))
    d1, d2 = o[e] - z[e], o2 - z2
    out[e] = (v * d1 + v2 * d2) * prod.sum()
    prod = prod * (v * (z[e] + t * d1) + v2 * (z2 + t * d2))
    for j in range(len(z)):
        d = o[j] - z[j]
        if j != e and d != 0:
            out[j] = d * (prod / (z[j] + t * d)).sum()
    return out


def _zero_covers():
    """Leaves of zero cover beside others: a pair's element of zero fraction."""
    L, S = tiny.Leaf, tiny.Split
    trees = [
        S(0, 0.5, S(1, 0.5, L(5.0, 0.0), L(-1.0, 10.0)), S(2, 0.3, L(0.5, 6.0), L(2.0, 0.0))),
        S(1, 0.4, S(0, 0.5, S(2, 0.6, L(1.0, 0.0), L(-2.0, 3.0)), L(3.0, 4.0)),
          S(2, 0.5, L(-1.0, 2.0), L(4.0, 0.0))),
    ]  # fmt: skip
    return tiny.build_ensemble(trees, num_features=3)


@pytest.mark.parametrize("name", ["categorical", "merged", "zero_covers"])
def test_a_pair_gives_the_sum_of_its_two_paths(name):
    ens = _zero_covers() if name == "zero_covers" else _MODELS[name]()
    packed = _packed(ens)
    X = tiny.random_rows(11, ens, 6, 0.15)
    rows = prepare_rows(X, packed)
    everything = np.ones(packed.num_paths, bool)
    pairs = _check_pairs(packed, everything, sibling_pairs(packed, everything))
    n_groups, width = packed.num_groups, packed.num_features + 1
    whole = np.zeros((X.shape[0], n_groups, width))  # every path apart: the oracle's values
    for r, x in enumerate(rows):
        for p in range(packed.num_paths):
            lanes = list(_lanes(packed, p))
            phi = _path_shap(packed.zero_fraction[lanes], _ones(packed, lanes, x),
                             float(packed.path_value[p]))  # fmt: skip
            np.add.at(whole[r, packed.path_group[p]], packed.feature[lanes], phi)
    whole[:, :, -1] = packed.expected_value
    np.testing.assert_allclose(whole, naive.treeshap_recursive_rows(ens, X), rtol=0, atol=1e-12)
    checked = 0
    for p, q, e in pairs[:12]:
        a, b = list(_lanes(packed, p)), list(_lanes(packed, q))
        za, zb = packed.zero_fraction[a], packed.zero_fraction[b]
        va, vb = float(packed.path_value[p]), float(packed.path_value[q])
        for x in rows:
            oa, ob = _ones(packed, a, x), _ones(packed, b, x)
            want = _path_shap(za, oa, va) + _path_shap(zb, ob, vb)
            got = _pair_shap(za, oa, va, e, zb[e], ob[e], vb)
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
            checked += abs(want).max() > 0
    assert checked > 0
    if name == "zero_covers":  # both differing lanes of each pair
        heads = [p for p, _, _ in pairs]
        lanes = [_lanes(packed, p)[e] for p, _, e in pairs]
        lanes += sibling_pairs(packed, everything)[heads].tolist()
        assert (packed.zero_fraction[lanes] == 0).any()


def _deep_xgboost(n_features: int = 10):
    """A deep XGBoost regression (``max_depth`` 10, 20 rounds on 400 rows, missing values)
    and 3,000 rows to explain."""
    xgb = pytest.importorskip("xgboost")
    rng = np.random.default_rng(7)
    X = rng.random((3400, n_features), dtype=np.float32)
    X[rng.random(X.shape) < 0.05] = np.nan
    train = np.nan_to_num(X[:400], nan=0.5)
    y = np.sin(6 * train[:, 0]) + train[:, 1] * train[:, 2] + 0.1 * rng.normal(size=400)
    params = {"max_depth": 10, "eta": 0.3, "min_child_weight": 0, "lambda": 0.1, "seed": 0,
              "tree_method": "exact"}  # fmt: skip
    booster = xgb.train(params, xgb.DMatrix(X[:400], label=y), num_boost_round=20)
    return booster, X[400:], xgb


@pytest.mark.gpu
@pytest.mark.parametrize("budget", [0, 6000])
def test_cpu_kernel_runs_pairs_as_the_paths_apart(budget):
    from distshap.kernels import cpu, quadrature_cpu

    ens = tiny.random_ensemble(6, n_features=8, n_trees=4, depth=7, n_groups=2, n_categorical=2)
    packed = _packed(ens, budget)
    X = prepare_rows(tiny.random_rows(7, ens, 60, 0.15), packed)
    table_offsets, tables = cpu.shap_tables(packed)
    pair_lane, pair_pos, pair_value = cpu.shap_pairs(packed)
    heads = np.flatnonzero(pair_pos >= 0)
    assert heads.size > 5 and (pair_pos == -2).sum() == heads.size
    assert np.all(table_offsets[heads] < 0)  # only paths without a table pair
    ref = naive.treeshap_recursive_rows(ens, X)
    scale = max(1.0, float(np.abs(ref).max()))
    paired = cpu.shap_values(packed, X)
    with config_context(quadrature_pairs=0):
        apart = cpu.shap_values(packed, X)
    for got in (paired, apart):
        assert np.abs(got.astype(np.float64) - ref.reshape(got.shape)).max() <= 1e-6 * scale
    lanes = (packed.feature, packed.lower, packed.upper, packed.missing, packed.zero_fraction,
             packed.cat_offsets, packed.cat_nbits, packed.cat_other, packed.cat_words)  # fmt: skip
    wrong = np.empty_like(paired)
    quadrature_cpu._run(X, lanes, packed.path_offsets, packed.path_value, packed.path_group,
                        table_offsets, tables, packed.expected_value, wrong,
                        (pair_lane, pair_pos, pair_value * 2))  # fmt: skip
    assert np.abs(wrong - paired).max() > 1e-3 * scale  # the partners' values are used


@needs_gpu
def test_gpu_pairs_match_pred_contribs_on_a_deep_model():
    import distshap

    booster, X, xgb = _deep_xgboost()
    ref = booster.predict(xgb.DMatrix(X), pred_contribs=True)
    tol = 1e-5 * max(1.0, float(np.abs(ref).max()))
    for pairs in (1, 0):
        with config_context(small_max_paths=0, quadrature_pairs=pairs):
            explainer = distshap.TreeExplainer(booster, backend="cuda", layout="xgboost",
                                               table_budget_bytes=0)  # fmt: skip
            k = np.diff(explainer.packed.path_offsets) - 1
            assert k.max() >= 6
            n_pairs = plan_gpu.strategy_stats(explainer.packed)["quadrature_pairs"]
            assert n_pairs > explainer.packed.num_paths // 5 if pairs else n_pairs == 0
            got = to_host(explainer.shap_values(X)).reshape(ref.shape)
            np.testing.assert_allclose(got, ref, rtol=0, atol=tol)
            if not pairs:
                continue
            few = to_host(explainer.shap_values(X[:16])).reshape(16, -1)
            one = np.concatenate([to_host(explainer.shap_values(X[i : i + 1])).reshape(1, -1)
                                  for i in range(16)])  # fmt: skip
            assert np.array_equal(few.view(np.uint32), got[:16].view(np.uint32))
            assert np.array_equal(one.view(np.uint32), got[:16].view(np.uint32))
