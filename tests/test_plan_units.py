"""Sibling units of the SHAP quadrature plans (:mod:`distshap.plan.units`).

* the finder's rules, on XGBoost models of depth 6 to 8 (regression with features repeated on a
  path, binary, multiclass, categorical) and on hand-built trees: every member of a unit is the
  head's common elements ``C`` (its lanes but its own tail lanes) plus its tail, compared lane
  content by lane content; one group; no member longer than its head; tail features distinct
  and not in ``C``; no path in two units, only selected paths; at most ``2**L`` entries and
  ``L`` tail lanes; ``quadrature_unit_levels=0`` no units, 1 pairs only; paths differing in
  more than ``L`` lanes or of two groups in no unit;
* the SHAP plans: heads launched, members not, each quadrature path once; the tail lanes'
  columns in chunk-local tiles; interaction plans and ``quadrature_unit_levels=0`` every path
  apart;
* the fold of the interface (moments of the common product, ``h``, tail contributions) in
  float64: a unit's values equal the sum of its members' SHAP values apart (random units and
  the units of real models, elements of zero fraction among them);
* the CPU SHAP kernel at every level against the float64 oracle (``tests/naive.py``), with
  members for two and three levels, beside pattern tables too; sabotaged members' values and
  tails noticed;
* a ``gpu`` test: a depth-10 XGBoost model at three levels against ``pred_contribs`` and
  every path apart, the same bits a row at a time, 16 rows and 3,000 rows.

The CUDA-simulator run of the kernels with units is ``tests/test_cuda_path_threads.py``'s.
"""

from __future__ import annotations

import dataclasses
import functools
from collections import Counter

import numpy as np
import pytest

from distshap import TreeExplainer
from distshap.inputs import prepare_rows
from distshap.kernels import cuda_available, treeshap
from distshap.models import load_model
from distshap.packed import build_packed_model
from distshap.paths import extract_paths
from distshap.plan import gpu as plan_gpu
from distshap.plan.config import config_context
from distshap.plan.geometry import gauss_legendre
from distshap.plan.units import UNIT_LEVELS, sibling_units

import naive
import tiny
from conftest import to_host
from tiny import Leaf, Split

needs_gpu = pytest.mark.skipif(not cuda_available(), reason="no CUDA GPU visible (GPU host)")

_KINDS = ("regression", "binary", "multiclass", "categorical")


@functools.cache
def _xgboost(kind: str):
    """A small XGBoost model of depth 6 to 8 and 8 rows to explain (float32, category codes):
    regression on five features at depth 8 (features repeated on paths), the others on eight
    (the categorical one: seven and one of six categories, partition splits)."""
    xgb = pytest.importorskip("xgboost")
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(_KINDS.index(kind))
    n = 600
    X = rng.normal(size=(n, 8)).astype(np.float32)
    X[rng.random(X.shape) < 0.05] = np.nan
    x = np.nan_to_num(X.astype(np.float64))
    signal = np.sin(2 * x[:, 0]) + x[:, 1] * x[:, 2] + 0.5 * np.abs(x[:, 3]) + 0.2 * x[:, 4]
    params = {"max_depth": 6, "eta": 0.5, "min_child_weight": 0, "lambda": 0.1, "seed": 0,
              "nthread": 1, "tree_method": "hist"}  # fmt: skip
    rounds, data = 5, X
    if kind == "regression":
        params["max_depth"], y, X = 8, signal, np.ascontiguousarray(X[:, :5])
        data = X
    elif kind == "binary":
        params.update(objective="binary:logistic", max_depth=7)
        y = (signal > 0.3).astype(np.float32)
    elif kind == "multiclass":
        params.update(objective="multi:softprob", num_class=3)
        y, rounds = np.digitize(signal, np.quantile(signal, [0.3, 0.7])).astype(np.float32), 3
    else:
        codes = rng.integers(0, 6, n).astype(np.float64)
        codes[rng.random(n) < 0.05] = np.nan
        data = pd.DataFrame({f"x{j}": X[:, j] for j in range(7)})
        data["c"] = pd.Categorical(codes, categories=list(range(6)))
        X = np.ascontiguousarray(data.to_numpy(np.float32))
        effect = np.array([0.0, 2.0, -1.0, 1.0, 3.0, -2.0])[np.nan_to_num(codes).astype(int)]
        y = signal + 0.3 * np.where(np.isnan(codes), 0.5, effect)  # splits on it below the root
        params["max_cat_to_onehot"] = 2
    dmat = xgb.DMatrix(data, label=y, enable_categorical=kind == "categorical")
    booster = xgb.train(params, dmat, num_boost_round=rounds)
    return booster, X[-8:].copy()


@functools.cache
def _xgboost_packed(kind: str):
    booster, _ = _xgboost(kind)
    return build_packed_model(extract_paths(load_model(booster)), table_budget_bytes=0)


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


def _check_arrays(packed, units, levels: int) -> None:
    n = packed.num_paths
    offsets = units.offsets
    assert offsets.dtype == np.int32 and offsets.shape == (max(n, 1) + 1,)
    assert offsets[0] == 0 and np.all(np.diff(offsets) >= 0)
    E = int(offsets[-1])
    assert units.value.dtype == np.float64 and units.value.shape == (max(E, 1),)
    assert units.lanes.dtype == np.int32 and units.lanes.shape == (max(E, 1), UNIT_LEVELS)
    assert units.path.dtype == np.int32 and units.path.shape == (max(E, 1),)
    assert units.members.dtype == np.bool_ and units.members.shape == (n,)
    for a in (offsets, units.value, units.lanes, units.path, units.members):
        assert not a.flags.writeable
    if levels == 0:
        assert E == 0 and not units.members.any()


def _check_units(packed, selected, units, levels: int) -> list[tuple[int, list, list]]:
    """Asserts the units' rules; returns ``(head, members, tails)`` of each unit (``tails``:
    each entry's tail lanes)."""
    _check_arrays(packed, units, levels)
    n = packed.num_paths
    k = np.diff(packed.path_offsets) - 1
    offsets, path, lanes = units.offsets, units.path.astype(np.int64), units.lanes
    found = []
    for p in np.flatnonzero(np.diff(offsets[: n + 1])).tolist():
        a, b = int(offsets[p]), int(offsets[p + 1])
        assert 2 <= b - a <= 2**levels, (p, b - a)
        assert path[a] == p and selected[p] and not units.members[p]
        own = lanes[a][lanes[a] >= 0].tolist()
        assert own and all(int(packed.lane_path[li]) == p for li in own), (p, own)
        common = [li for li in _lanes(packed, p) if li not in own]
        c_keys = [_lane_key(packed, li) for li in common]
        c_features = {key[0] for key in c_keys}
        tails = []
        for e in range(a, b):
            m = int(path[e])
            tail = lanes[e][lanes[e] >= 0].tolist()
            assert 1 <= len(tail) <= levels and np.all(lanes[e][len(tail) :] == -1), (p, e)
            assert int(packed.lane_path[tail[0]]) == m  # the first: a lane of its own path
            t_keys = [_lane_key(packed, li) for li in tail]
            features = [key[0] for key in t_keys]
            assert len(set(features)) == len(features) and not set(features) & c_features
            assert selected[m] and packed.path_group[m] == packed.path_group[p]
            assert k[m] <= k[p] and units.value[e] == packed.path_value[m]
            member = Counter(_lane_key(packed, li) for li in _lanes(packed, m))
            assert member == Counter(c_keys + t_keys), (p, m)
            tails.append(tail)
        found.append((p, path[a:b].tolist(), tails))
    in_units = np.concatenate([path[: offsets[-1]], np.empty(0, np.int64)])
    assert np.unique(in_units).size == in_units.size, "a path in two units"
    members = np.zeros(n, bool)
    members[[m for _, ms, _ in found for m in ms[1:]]] = True
    assert np.array_equal(units.members, members)
    return found


def _quadrature_paths(plan) -> np.ndarray:
    return np.concatenate(
        [launch["paths"] for launch in plan["quadrature"]] or [np.empty(0, np.int32)]
    )


@pytest.mark.parametrize("kind", _KINDS)
def test_units_of_xgboost_models_keep_the_rules(kind):
    packed = _xgboost_packed(kind)
    everything = np.ones(packed.num_paths, bool)
    k = np.diff(packed.path_offsets) - 1
    assert k.max() >= 5
    counts = {}
    for levels in range(UNIT_LEVELS + 1):
        units = sibling_units(packed, everything, levels)
        found = _check_units(packed, everything, units, levels)
        assert sibling_units(packed, everything, levels) is units  # kept
        again = sibling_units(_packed(load_model(_xgboost(kind)[0])), everything, levels)
        for name in ("offsets", "value", "lanes", "path", "members"):  # the same on every call
            assert np.array_equal(getattr(again, name), getattr(units, name)), name
        counts[levels] = (len(found), int(units.members.sum()))
        if levels == 1:
            assert all(len(ms) == 2 for _, ms, _ in found)
        if levels and kind == "regression":  # a tail element merged from two splits
            tails = [li for _, _, tails in found for tail in tails for li in tail]
            assert (np.isfinite(packed.lower[tails]) & np.isfinite(packed.upper[tails])).any()
        if levels and kind == "categorical":
            tails = [li for _, _, tails in found for tail in tails for li in tail]
            assert (packed.cat_offsets[tails] >= 0).any()
        if levels and kind == "multiclass":
            assert len({int(packed.path_group[p]) for p, _, _ in found}) == 3
    assert counts[0] == (0, 0)
    assert counts[1][1] >= packed.num_paths // 5, counts
    assert counts[2][1] > counts[1][1] and counts[3][1] >= counts[2][1], counts
    # only selected paths: leave out one member of every other unit
    units = sibling_units(packed, everything, 2)
    selected = everything.copy()
    left_out = [
        int(units.path[units.offsets[p] + 1])
        for p in np.flatnonzero(np.diff(units.offsets[: packed.num_paths + 1]))[::2]
    ]
    selected[left_out] = False
    fewer = sibling_units(packed, selected, 2)
    _check_units(packed, selected, fewer, 2)
    assert not fewer.members[left_out].any() and np.diff(fewer.offsets)[left_out].sum() == 0


def _hand_built():
    """Trees whose leaves each have their own value (a packed path is known by it)."""

    def split(f, leaves, cover=(5.0, 5.0)):
        return Split(f, 0.5, Leaf(leaves[0], cover[0]), Leaf(leaves[1], cover[1]))

    def full(features, first):  # a complete tree, one feature a level, leaves first, first + 1..
        if not features:
            return Leaf(first, 5.0)
        half = 2 ** (len(features) - 1)
        return Split(features[0], 0.5, full(features[1:], first), full(features[1:], first + half))

    trees = [
        Split(0, 0.5, split(1, (1, 2)), split(1, (3, 4))),  # equal f1 lanes under both sides
        Split(0, 0.5, split(1, (5, 6)), split(2, (7, 8))),
        split(3, (9, 10), (4.0, 6.0)),  # group 0
        split(3, (11, 12), (4.0, 6.0)),  # group 1: the same lanes
        full([4, 5, 6, 7], 13),  # leaves 13 .. 28
        Split(8, 0.5, split(9, (29, 30)), Leaf(31, 10.0)),  # a shorter path beside two
    ]
    return tiny.build_ensemble(trees, num_features=10, num_groups=2,
                               tree_groups=[0, 0, 0, 1, 0, 0])  # fmt: skip


def test_hand_built_paths_unite_only_by_the_rules():
    packed = _packed(_hand_built())
    path = {int(v): p for p, v in enumerate(packed.path_value)}
    assert sorted(path) == list(range(1, 32))

    def units_of(values, levels) -> set:
        selected = np.zeros(packed.num_paths, bool)
        selected[[path[v] for v in values]] = True
        found = _check_units(packed, selected, sibling_units(packed, selected, levels), levels)
        return {frozenset(int(packed.path_value[m]) for m in ms) for _, ms, _ in found}

    for levels in range(UNIT_LEVELS + 1):
        assert units_of(range(1, 32), levels) or not levels
        assert units_of([9, 12], levels) == set() and units_of([10, 11], levels) == set()
        assert units_of([9, 11], levels) == set()  # the same lanes in two groups
        assert units_of([9], levels) == set()
        assert units_of([13, 28], levels) == set()  # four lanes differ
        if levels < 3:
            assert units_of([13, 20], levels) == set()  # three lanes differ (f5, f6, f7)
        if levels < 2:
            assert units_of([1, 4], levels) == set()  # two lanes differ (f0, f1)
            assert units_of([5, 7], levels) == set()  # f1 against f2 under f0
            assert units_of([29, 31], levels) == set()
    assert units_of([1, 3], 1) == {frozenset((1, 3))}  # one lane (f0): a pair, not siblings
    assert len(units_of([2, 3, 4], 1)) == 1  # no chain
    siblings = {frozenset((v, v + 1)) for v in range(13, 29, 2)}
    assert units_of(range(13, 29), 1) == siblings
    for levels in (2, 3):  # a subtree of depth ``levels`` with nothing else: one unit
        assert units_of(range(13, 13 + 2**levels), levels) == {frozenset(range(13, 13 + 2**levels))}
    assert units_of([29, 30, 31], 2) == {frozenset((29, 30, 31))}  # head: 29 or 30


@pytest.mark.parametrize("levels", [-1, UNIT_LEVELS + 1])
def test_levels_out_of_range_are_refused(levels):
    ens = tiny.random_ensemble(2, n_features=4, n_trees=2, depth=4)
    packed = _packed(ens)
    named = rf"quadrature_unit_levels.*{levels}"
    with pytest.raises(ValueError, match=named):
        sibling_units(packed, np.ones(packed.num_paths, bool), levels)
    explainer = TreeExplainer(ens, backend="cpu", table_budget_bytes=0)
    with pytest.raises(ValueError, match=named):  # by the configuration or before the kernel
        with config_context(quadrature_unit_levels=levels):
            explainer.shap_values(tiny.random_rows(1, ens, 3))


@pytest.mark.parametrize("budget", [0, 6000])
def test_shap_plans_launch_heads_and_no_members(budget):
    ens = tiny.random_ensemble(6, n_features=12, n_trees=3, depth=7, n_groups=2, n_categorical=1)
    packed = _packed(ens, budget)
    offsets = plan_gpu.shap_table_offsets(packed)
    k, _, regular = plan_gpu.path_info(packed)
    is_q = (offsets < 0) & regular
    if budget:
        assert ((offsets >= 0) & regular).any() and is_q.any()
    for levels in range(UNIT_LEVELS + 1):
        with config_context(quadrature_unit_levels=levels):
            plan = plan_gpu.plan_arrays(packed, offsets, local=True, units=True)
            stats = plan_gpu.strategy_stats(packed)
        units = sibling_units(packed, is_q, levels)
        found = _check_units(packed, is_q, units, levels)
        assert bool(found) == bool(levels)
        assert np.array_equal(plan["unit_offsets"], units.offsets)
        assert plan["unit_value"].dtype == np.float32
        assert np.array_equal(plan["unit_value"], units.value.astype(np.float32))
        assert np.array_equal(plan["unit_lanes"], units.lanes)
        launched = _quadrature_paths(plan).astype(np.int64)
        assert np.unique(launched).size == launched.size, "a path launched twice"
        members = np.flatnonzero(units.members)
        assert not set(members.tolist()) & set(launched.tolist())
        assert set(launched.tolist()) | set(members.tolist()) == set(np.flatnonzero(is_q).tolist())
        # a pair's head: the other path's split lane, at the position of the head's own
        pair = plan["unit_pair"]
        assert pair.dtype == np.int32 and pair.size == max(packed.num_paths, 1)
        position = np.arange(packed.lane_path.size) - packed.path_offsets[packed.lane_path]
        for p in np.flatnonzero(pair >= 0):
            e0 = units.offsets[p]
            assert units.offsets[p + 1] - e0 == 2 and (units.lanes[e0 : e0 + 2, 1:] < 0).all()
            assert pair[p] == units.lanes[e0 + 1, 0] and packed.lane_path[pair[p]] != p
            assert position[pair[p]] == position[units.lanes[e0, 0]]
        for launch in plan["quadrature"]:  # the general fold only where a unit needs it
            heads = [p for p in launch["paths"] if units.offsets[p + 1] > units.offsets[p]]
            tails = [int((units.lanes[units.offsets[p] : units.offsets[p + 1]] >= 0).sum())
                     for p in heads]  # fmt: skip
            sizes = [int(units.offsets[p + 1] - units.offsets[p]) for p in heads]
            general = any(t != 2 or n != 2 for t, n in zip(tails, sizes, strict=True))
            assert launch["general_units"] is general
            assert general or all(pair[p] >= 0 for p in heads)  # pairs: the kernels read it
        assert stats["quadrature_units"] == len(found)
        assert stats["quadrature_unit_members"] == members.size
        if plan["lane_column"] is not None:
            # a head's path holds every tail feature of its unit (its tile keeps its width)
            assert _check_tail_columns(packed, plan, units) == 0
    interaction = plan_gpu.plan_arrays(packed, offsets, local=False)
    assert interaction["unit_offsets"] is None and interaction["unit_lanes"] is None
    assert np.array_equal(np.sort(_quadrature_paths(interaction)), np.flatnonzero(is_q))


def _check_tail_columns(packed, plan, units) -> int:
    """In chunk-local tiles, every launched path's lanes and its unit's tail lanes have their
    feature's column in the path's chunk; returns the count of tail lanes of a feature their
    head's path lacks."""
    column = plan["lane_column"]
    checked = foreign = 0
    for launch in plan["quadrature"]:
        if "local_offsets" not in launch:
            continue
        chunk_of = launch["local_offsets"]
        features, f_offsets = launch["local_features"], launch["local_feature_offsets"]
        for c in range(int(launch["n_local"])):
            tile = features[f_offsets[c] : f_offsets[c + 1]]
            for p in launch["paths"][chunk_of[c] : chunk_of[c + 1]].tolist():
                tails = units.lanes[units.offsets[p] : units.offsets[p + 1]].ravel()
                tails = tails[tails >= 0].tolist()
                for li in [*_lanes(packed, p), *tails]:
                    assert 0 <= column[li] < tile.size, (p, li)
                    assert tile[column[li]] == packed.feature[li], (p, li)
                    checked += 1
                foreign += len(set(packed.feature[tails].tolist())
                               - set(packed.feature[list(_lanes(packed, p))].tolist()))  # fmt: skip
    assert checked > 0
    return foreign


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


def _fold(zc, oc, tails, k_head: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """A unit's values as the kernels form them: the common elements' (``zc``, ``oc``) and each
    member's tail elements' (``tails``: ``(v, z, o)`` a member, at most three elements), from
    the moments of the common product and ``h`` in degree 3, ``ceil(k_head / 2)`` nodes."""
    t, w = gauss_legendre((k_head + 1) // 2)
    s = 1.0 - t
    prod = w.copy()
    for z, o in zip(zc, oc, strict=True):
        prod *= z * s + o * t
    M = [(prod * s ** (2 - j) * t**j).sum() for j in range(3)]
    H = np.zeros(4)
    tail_phi = []
    for v, z, o in tails:
        a, b = np.ones(UNIT_LEVELS), np.ones(UNIT_LEVELS)  # padding: the identity factor
        a[: len(z)], b[: len(z)] = z, o
        H += v * np.array([a[0] * a[1] * a[2],
                           b[0] * a[1] * a[2] + a[0] * b[1] * a[2] + a[0] * a[1] * b[2],
                           a[0] * b[1] * b[2] + b[0] * a[1] * b[2] + b[0] * b[1] * a[2],
                           b[0] * b[1] * b[2]])  # fmt: skip
        phi = np.empty(len(z))
        for i in range(len(z)):
            p, q = [j for j in range(UNIT_LEVELS) if j != i]
            phi[i] = v * (b[i] - a[i]) * (a[p] * a[q] * M[0] + (a[p] * b[q] + b[p] * a[q]) * M[1]
                                          + b[p] * b[q] * M[2])  # fmt: skip
        tail_phi.append(phi)
    prod = prod * (H[0] * s**3 + H[1] * t * s**2 + H[2] * t**2 * s + H[3] * t**3)
    common = np.zeros(len(zc))
    for j, (z, o) in enumerate(zip(zc, oc, strict=True)):
        if o != z:
            common[j] = (o - z) * (prod / (z * s + o * t)).sum()
    return common, tail_phi


def _elements(rng, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Zero fractions (0, 1 and halves among them) and ones of ``n`` random elements."""
    z = np.where(rng.random(n) < 0.5, rng.choice([0.0, 0.0, 0.25, 0.5, 1.0], n), rng.random(n))
    return z, (rng.random(n) < 0.5).astype(float)


def test_the_fold_of_random_units_gives_the_paths_apart():
    rng = np.random.default_rng(3)
    for _ in range(400):
        levels = int(rng.integers(1, UNIT_LEVELS + 1))
        k_head = int(rng.integers(1, 12))
        c = k_head - int(rng.integers(1, min(levels, k_head) + 1))
        zc, oc = _elements(rng, c)
        sizes = [k_head - c] + [int(rng.integers(1, min(levels, k_head - c) + 1))
                                for _ in range(int(rng.integers(1, 2**levels)))]  # fmt: skip
        tails = [(float(rng.normal()), *_elements(rng, n)) for n in sizes]
        common, tail_phi = _fold(zc, oc, tails, k_head)
        want = np.zeros(c)
        for (v, z, o), got in zip(tails, tail_phi, strict=True):
            apart = _path_shap(np.r_[zc, z], np.r_[oc, o], v)
            want += apart[:c]
            np.testing.assert_allclose(got, apart[c:], rtol=0, atol=1e-12)
        np.testing.assert_allclose(common, want, rtol=0, atol=1e-12)


def _zero_covers():
    """Leaves of zero cover beside others: elements of zero fraction in units."""
    L, S = Leaf, Split
    trees = [
        S(0, 0.5, S(1, 0.5, L(5.0, 0.0), L(-1.0, 10.0)), S(2, 0.3, L(0.5, 6.0), L(2.0, 0.0))),
        S(1, 0.4, S(0, 0.5, S(2, 0.6, L(1.0, 0.0), L(-2.0, 3.0)), L(3.0, 4.0)),
          S(2, 0.5, L(-1.0, 2.0), L(4.0, 0.0))),
    ]  # fmt: skip
    return tiny.build_ensemble(trees, num_features=3)


def _unit_values(packed, units, p: int, x) -> np.ndarray:
    """The fold of head ``p``'s unit on row ``x``, per feature."""
    a, b = int(units.offsets[p]), int(units.offsets[p + 1])
    own = units.lanes[a][units.lanes[a] >= 0].tolist()
    common = [li for li in _lanes(packed, p) if li not in own]
    tails = []
    for e in range(a, b):
        tail = units.lanes[e][units.lanes[e] >= 0].tolist()
        tails.append((float(units.value[e]), packed.zero_fraction[tail], _ones(packed, tail, x)))
    k_head = len(_lanes(packed, p))
    phi_c, phi_t = _fold(packed.zero_fraction[common], _ones(packed, common, x), tails, k_head)
    out = np.zeros(packed.num_features)
    np.add.at(out, packed.feature[common], phi_c)
    for e, phi in zip(range(a, b), phi_t, strict=True):
        np.add.at(out, packed.feature[units.lanes[e][: phi.size]], phi)
    return out


@pytest.mark.parametrize("name", ["zero_covers", "categorical", "xgboost"])
def test_a_unit_gives_the_sum_of_its_paths_apart(name):
    if name == "xgboost":
        packed, X = _xgboost_packed("regression"), _xgboost("regression")[1][:3]
    else:
        ens = _zero_covers() if name == "zero_covers" else tiny.random_ensemble(
            4, n_features=6, n_trees=4, depth=6, n_groups=2, n_categorical=2)  # fmt: skip
        packed, X = _packed(ens), tiny.random_rows(11, ens, 5, 0.15)
        apart = np.zeros((X.shape[0], packed.num_groups, packed.num_features + 1))
        for r, x in enumerate(prepare_rows(X, packed)):  # the paths apart against the oracle
            for p in range(packed.num_paths):
                lanes = list(_lanes(packed, p))
                phi = _path_shap(packed.zero_fraction[lanes], _ones(packed, lanes, x),
                                 float(packed.path_value[p]))  # fmt: skip
                np.add.at(apart[r, packed.path_group[p]], packed.feature[lanes], phi)
        apart[:, :, -1] = packed.expected_value
        np.testing.assert_allclose(apart, naive.treeshap_recursive_rows(ens, X), rtol=0,
                                   atol=1e-12)  # fmt: skip
    rows = prepare_rows(X, packed)
    everything = np.ones(packed.num_paths, bool)
    checked = zero = 0
    for levels in range(1, UNIT_LEVELS + 1):
        units = sibling_units(packed, everything, levels)
        found = _check_units(packed, everything, units, levels)
        assert found
        for p, members, _ in found[:: max(1, len(found) // 25)]:
            for x in rows:
                want = np.zeros(packed.num_features)
                for m in members:
                    lanes = list(_lanes(packed, m))
                    phi = _path_shap(packed.zero_fraction[lanes], _ones(packed, lanes, x),
                                     float(packed.path_value[m]))  # fmt: skip
                    np.add.at(want, packed.feature[lanes], phi)
                got = _unit_values(packed, units, p, x)
                np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
                checked += np.abs(want).max() > 0
            lanes = [li for m in members for li in _lanes(packed, m)]
            zero += (packed.zero_fraction[lanes] == 0).any()
    assert checked > 0
    if name == "zero_covers":
        assert zero > 0


@functools.cache
def _oracle(kind: str) -> np.ndarray:
    booster, X = _xgboost(kind)
    return naive.treeshap_recursive_rows(load_model(booster), X)


@pytest.mark.parametrize("kind", _KINDS)
def test_cpu_kernel_at_every_level_against_the_oracle(kind):
    booster, X = _xgboost(kind)
    ref = _oracle(kind)
    scale = max(1.0, float(np.abs(ref).max()))
    budgets = (0, 1 << 30) if kind == "regression" else (0,)
    for budget in budgets:
        explainer = TreeExplainer(booster, layout="xgboost", backend="cpu",
                                  table_budget_bytes=budget)  # fmt: skip
        for levels in range(UNIT_LEVELS + 1):
            with config_context(quadrature_unit_levels=levels):
                got = np.asarray(explainer.shap_values(X), np.float64)
                stats = plan_gpu.strategy_stats(explainer.packed)
            err = np.abs(got - ref.reshape(got.shape)).max()
            assert err <= 1e-6 * scale, (budget, levels, err)
            if budget == 0:
                assert stats["quadrature_units"] > 0 if levels else stats["quadrature_units"] == 0
                if levels >= 2:
                    assert stats["quadrature_unit_members"] > stats["quadrature_units"]


@pytest.mark.parametrize("budget", [0, 6000])
def test_cpu_kernel_runs_the_members_inside_their_heads(budget):
    from distshap.kernels import cpu, quadrature_cpu

    ens = tiny.random_ensemble(6, n_features=8, n_trees=4, depth=7, n_groups=2, n_categorical=2)
    packed = _packed(ens, budget)
    X = prepare_rows(tiny.random_rows(7, ens, 40, 0.15), packed)
    table_offsets, tables = cpu.shap_tables(packed)
    assert (table_offsets >= 0).any() == bool(budget)
    units = sibling_units(packed, table_offsets < 0, UNIT_LEVELS)
    _check_units(packed, table_offsets < 0, units, UNIT_LEVELS)
    assert units.members.sum() > units.num_units > 5
    with config_context(quadrature_unit_levels=UNIT_LEVELS):
        got = cpu.shap_values(packed, X)
    ref = naive.treeshap_recursive_rows(ens, X)
    scale = max(1.0, float(np.abs(ref).max()))
    assert np.abs(got.astype(np.float64) - ref.reshape(got.shape)).max() <= 1e-6 * scale

    def run(**change) -> np.ndarray:
        arrays = quadrature_cpu.unit_arrays(dataclasses.replace(units, **change))
        return quadrature_cpu.shap_values(packed, X, table_offsets, tables, arrays)

    assert np.array_equal(run().view(np.uint32), got.view(np.uint32))
    heads = units.offsets[np.flatnonzero(np.diff(units.offsets))]
    member = np.ones(units.value.shape[0], bool)
    member[heads] = False
    value = np.where(member, 2 * units.value, units.value)  # the members' values are used
    assert np.abs(run(value=value) - got).max() > 1e-3 * scale
    lanes = units.lanes.copy()  # and their tails
    lanes[member, 1:] = -1
    assert (lanes != units.lanes).any()
    assert np.abs(run(lanes=lanes) - got).max() > 1e-3 * scale


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
@needs_gpu
def test_gpu_units_match_pred_contribs_on_a_deep_model():
    import distshap

    booster, X, xgb = _deep_xgboost()
    ref = booster.predict(xgb.DMatrix(X), pred_contribs=True)
    tol = 1e-5 * max(1.0, float(np.abs(ref).max()))
    got = {}
    for levels in (UNIT_LEVELS, 0):
        with config_context(small_max_paths=0, quadrature_unit_levels=levels):
            explainer = distshap.TreeExplainer(booster, backend="cuda", layout="xgboost",
                                               table_budget_bytes=0)  # fmt: skip
            assert (np.diff(explainer.packed.path_offsets) - 1).max() >= 6
            stats = plan_gpu.strategy_stats(explainer.packed)
            members = stats["quadrature_unit_members"]
            assert members > explainer.packed.num_paths // 3 if levels else members == 0
            got[levels] = to_host(explainer.shap_values(X)).reshape(ref.shape)
            np.testing.assert_allclose(got[levels], ref, rtol=0, atol=tol)
            if not levels:
                continue
            few = to_host(explainer.shap_values(X[:16])).reshape(16, -1)
            one = np.concatenate([to_host(explainer.shap_values(X[i : i + 1])).reshape(1, -1)
                                  for i in range(16)])  # fmt: skip
            bits = got[levels][:16].view(np.uint32)
            assert np.array_equal(few.view(np.uint32), bits)
            assert np.array_equal(one.view(np.uint32), bits)
    np.testing.assert_allclose(got[UNIT_LEVELS], got[0], rtol=0, atol=tol)


@pytest.fixture(autouse=True)
def _units_at_any_length():
    """GPU plans here take units of more than two paths at any length, as the finder's default
    does (the test models' paths are short; ``quadrature_unit_min_features`` has its own
    test)."""
    with config_context(quadrature_unit_min_features=0):
        yield


def test_gpu_plans_take_more_than_pairs_only_on_long_paths():
    """``quadrature_unit_min_features``: a GPU plan's units of more than two paths have heads
    of at least that many features; above the longest path, only pairs."""
    packed = build_packed_model(extract_paths(tiny.chain_units_ensemble()), table_budget_bytes=0)
    k = np.diff(packed.path_offsets) - 1
    offsets = np.full(packed.num_paths, -1, np.int64)
    for least, most in ((9, 5), (12, 2)):
        with config_context(quadrature_unit_min_features=least):
            plan = plan_gpu.plan_arrays(packed, offsets, local=False, units=True)
        size = np.diff(plan["unit_offsets"])[: packed.num_paths]
        assert size.max() == most, (least, size.max())
        assert (k[size > 2] >= least).all()
        # pairs only: every launch runs the kernels without the general fold
        flags = [launch["general_units"] for launch in plan["quadrature"]]
        assert any(flags) == (most > 2), flags


def _chain(depth: int, threshold: float, v0: float, i: int = 0):
    """A chain of splits on features ``0 .. depth - 1`` (each with a leaf on its right) that
    ends in a split on feature ``depth``: a path of ``depth + 1`` features whose last split
    sits at its last lane."""
    if i == depth:
        return Split(depth, threshold, Leaf(v0, 3.0), Leaf(v0 + 1.0, 5.0))
    return Split(i, 0.5, _chain(depth, threshold, v0, i + 1), Leaf(100.0 + i + v0, 8.0))


@pytest.mark.parametrize("depth", [31, 34])
def test_units_of_paths_longer_than_32_features(depth):
    """Tails at lane positions past 32 stay masked at later levels (two chains whose last
    splits differ form one unit; every member keeps distinct tail features), and the CPU
    kernel's values equal the oracle's at every level."""
    from distshap.kernels import cpu

    ens = tiny.build_ensemble([_chain(depth, 0.5, 1.0), _chain(depth, 0.25, 3.0)],
                              num_features=depth + 1)  # fmt: skip
    packed = build_packed_model(extract_paths(ens), table_budget_bytes=0)
    selected = np.ones(packed.num_paths, bool)
    rng = np.random.default_rng(depth)
    X = (rng.random((6, depth + 1)) * 0.5).astype(np.float32)  # down the chains
    X[:, depth] = rng.random(6).astype(np.float32)
    want = naive.treeshap_recursive_rows(ens, X)
    for levels in range(UNIT_LEVELS + 1):
        units = sibling_units(packed, selected, levels)
        _check_units(packed, selected, units, levels)
        assert (levels < 2) or np.diff(units.offsets).max() >= 3, levels
        with config_context(quadrature_unit_levels=levels):
            got = cpu.shap_values(packed, prepare_rows(X, packed))
        assert np.abs(np.asarray(got, np.float64).reshape(want.shape) - want).max() < 1e-5
