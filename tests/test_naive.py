"""The float64 oracles agree with each other and satisfy the Shapley axioms; tiny.py is valid."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import naive
import tiny

TINY = tiny.tiny_ensembles()
ATOL = 1e-12


def _leaf_rows(ens, n_random: int = 12) -> np.ndarray:
    """Random rows plus rows with every feature missing and with every feature at 0 / 1."""
    X = tiny.random_rows(1, ens, n_random, nan_fraction=0.2)
    f = ens.num_features
    extra = np.array([np.full(f, np.nan), np.zeros(f), np.full(f, 0.999), np.full(f, 3.0)])
    return np.vstack([X, extra])


def _random_cases():
    # (seed, n_features, n_trees, depth, n_groups, n_categorical)
    return [
        (0, 4, 3, 3, 1, 0),
        (1, 6, 4, 4, 1, 0),
        (2, 5, 3, 5, 2, 0),
        (3, 7, 5, 3, 3, 2),
        (4, 3, 6, 4, 1, 1),
        (5, 8, 2, 6, 1, 0),
        (6, 5, 3, 0, 2, 0),  # bare leaves only
        (7, 2, 4, 5, 1, 0),  # few features, deep: many repeats
    ]


RANDOM = {c: tiny.random_ensemble(c[0], *c[1:5], n_categorical=c[5]) for c in _random_cases()}
ALL = {**TINY, **{f"random{c}": e for c, e in RANDOM.items()}}


# --------------------------------------------------------------------------------------------
# tiny.py
# --------------------------------------------------------------------------------------------


def _paths(ens, tree):
    """Every root-to-leaf list of (node, went_left)."""
    out = []

    def walk(node, acc):
        if ens.left[node] < 0:
            out.append(acc)
            return
        walk(int(ens.left[node]), acc + [(node, True)])
        walk(int(ens.right[node]), acc + [(node, False)])

    walk(int(ens.tree_offsets[tree]), [])
    return out


def test_tiny_models_have_their_advertised_features():
    rep = TINY["repeated_feature"]
    feats = [[int(rep.feature[n]) for n, _ in p] for p in _paths(rep, 0)]
    assert any(len(p) != len(set(p)) for p in feats)
    nan = TINY["nan_default"]
    internal = nan.left >= 0
    assert nan.default_left[internal].any() and not nan.default_left[internal].all()
    assert TINY["categorical"].is_categorical.any()
    mc = TINY["multiclass"]
    assert mc.num_groups == 2 and np.any(mc.base_score != 0)
    assert np.any(mc.left[mc.tree_offsets[:-1]] < 0)  # a bare-leaf tree
    zc = TINY["zero_cover"]
    assert np.any(zc.cover == 0) and np.all(zc.cover[zc.left >= 0] > 0)
    assert set(naive.used_features(TINY["stump"])) == {0} and TINY["stump"].num_features == 2


@pytest.mark.parametrize("case", list(RANDOM), ids=str)
def test_random_ensemble_is_consistent(case):
    ens = RANDOM[case]
    ens.validate()
    internal = np.flatnonzero(ens.left >= 0)
    np.testing.assert_allclose(
        ens.cover[internal], ens.cover[ens.left[internal]] + ens.cover[ens.right[internal]]
    )
    assert np.array_equal(ens.tree_group, np.arange(ens.num_trees) % ens.num_groups)
    assert ens.num_groups == case[4]
    depths = [len(p) for t in range(ens.num_trees) for p in _paths(ens, t)]
    assert max(depths) <= case[3]
    n_cat = case[5]
    cat_feats = set(ens.feature[ens.is_categorical].tolist())
    assert cat_feats <= set(range(ens.num_features - n_cat, ens.num_features))


def test_random_ensembles_repeat_features_on_paths():
    repeats = 0
    for ens in RANDOM.values():
        for t in range(ens.num_trees):
            for p in _paths(ens, t):
                f = [int(ens.feature[n]) for n, _ in p]
                repeats += len(f) != len(set(f))
    assert repeats > 0


def test_random_rows_reach_both_sides_nans_and_thresholds():
    ens = tiny.random_ensemble(11, 5, 4, 3, n_categorical=2)
    X = tiny.random_rows(11, ens, 300, nan_fraction=0.1)
    assert X.dtype == np.float64 and X.shape == (300, 5)
    assert np.array_equal(X[~np.isnan(X)], X[~np.isnan(X)].astype(np.float32))
    assert 0.05 < np.isnan(X).mean() < 0.15
    seen = set()
    for t in range(ens.num_trees):
        for row in X:
            node = int(ens.tree_offsets[t])
            while ens.left[node] >= 0:
                left = naive.goes_left(ens, node, row[ens.feature[node]])
                seen.add((node, left))
                node = int(ens.left[node] if left else ens.right[node])
    for node in np.flatnonzero(ens.left >= 0):
        assert (node, True) in seen and (node, False) in seen, f"split {node} one-sided"
    numeric = (ens.left >= 0) & ~ens.is_categorical
    hits = np.isin(X[:, ens.feature[numeric]], ens.threshold[numeric].astype(np.float64))
    assert hits.any()


def test_build_ensemble_wires_the_spec():
    ens = TINY["repeated_feature"]
    # x0 < 0.5, x1 < 0.3, x0 < 0.2 -> 1.0;  x0 >= 0.8 -> 0.25;  NaN x0: root default right,
    # then the x0 < 0.8 split's default (left), then x2 < 0.6 -> 3.0
    X = np.array([[0.1, 0.2, 0.0], [0.9, 0.0, 0.7], [np.nan, 0.0, 0.0]])
    np.testing.assert_array_equal(naive.predict_margin(ens, X)[:, 0], [1.0, 0.25, 3.0])
    assert ens.tree_offsets.tolist() == [0, ens.num_nodes] and ens.cover[0] == 70.0


# --------------------------------------------------------------------------------------------
# oracles agree
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(ALL))
def test_brute_force_matches_recursive_shap(name):
    ens = ALL[name]
    X = _leaf_rows(ens)
    brute = naive.brute_force_shap_rows(ens, X)
    rec = naive.treeshap_recursive_rows(ens, X)
    assert brute.shape == (X.shape[0], ens.num_groups, ens.num_features + 1)
    assert brute.dtype == np.float64 and rec.dtype == np.float64
    np.testing.assert_allclose(rec, brute, rtol=0, atol=ATOL)


@pytest.mark.parametrize("name", list(ALL))
def test_brute_force_matches_recursive_interactions(name):
    ens = ALL[name]
    X = _leaf_rows(ens, n_random=5)
    brute = naive.brute_force_interactions_rows(ens, X)
    rec = naive.treeshap_interactions_recursive_rows(ens, X)
    f1 = ens.num_features + 1
    assert brute.shape == (X.shape[0], ens.num_groups, f1, f1)
    np.testing.assert_allclose(rec, brute, rtol=0, atol=ATOL)


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    n_features=st.integers(1, 6),
    depth=st.integers(1, 5),
    n_groups=st.integers(1, 2),
)
def test_oracles_agree_on_hypothesis_models(seed, n_features, depth, n_groups):
    ens = tiny.random_ensemble(seed, n_features, 2, depth, n_groups, repeat_prob=0.5)
    X = tiny.random_rows(seed, ens, 3, nan_fraction=0.2)
    np.testing.assert_allclose(
        naive.treeshap_recursive_rows(ens, X), naive.brute_force_shap_rows(ens, X), atol=ATOL
    )
    np.testing.assert_allclose(
        naive.treeshap_interactions_recursive_rows(ens, X),
        naive.brute_force_interactions_rows(ens, X),
        atol=ATOL,
    )


def test_zero_cover_subtree_is_finite_and_agrees():
    ens = tiny.zero_cover_subtree()
    X = np.array([[0.1, 0.1], [0.1, 0.9], [0.9, 0.1], [np.nan, np.nan]])
    brute = naive.brute_force_shap_rows(ens, X)
    assert np.all(np.isfinite(brute))
    np.testing.assert_allclose(naive.treeshap_recursive_rows(ens, X), brute, atol=ATOL)
    np.testing.assert_allclose(
        naive.treeshap_interactions_recursive_rows(ens, X),
        naive.brute_force_interactions_rows(ens, X),
        atol=ATOL,
    )
    np.testing.assert_allclose(brute.sum(-1), naive.predict_margin(ens, X), atol=ATOL)


# --------------------------------------------------------------------------------------------
# properties
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(ALL))
def test_additivity(name):
    ens = ALL[name]
    X = _leaf_rows(ens)
    margin = naive.predict_margin(ens, X)
    for fn in (naive.brute_force_shap_rows, naive.treeshap_recursive_rows):
        np.testing.assert_allclose(fn(ens, X).sum(-1), margin, atol=ATOL)


@pytest.mark.parametrize("name", list(ALL))
def test_interactions_sum_to_shap_and_are_symmetric(name):
    ens = ALL[name]
    X = _leaf_rows(ens, n_random=5)
    shap = naive.treeshap_recursive_rows(ens, X)
    f = ens.num_features
    for fn in (naive.brute_force_interactions_rows, naive.treeshap_interactions_recursive_rows):
        inter = fn(ens, X)
        np.testing.assert_allclose(inter.sum(-1), shap, atol=ATOL)
        np.testing.assert_allclose(inter, np.swapaxes(inter, -1, -2), atol=ATOL)
        # bias row / column: expected value at [F, F], zeros elsewhere
        np.testing.assert_array_equal(inter[..., f, :f], 0.0)
        np.testing.assert_array_equal(inter[..., :f, f], 0.0)
        np.testing.assert_allclose(inter[..., f, f], shap[..., f], atol=ATOL)


@pytest.mark.parametrize("name", list(ALL))
def test_bias_is_cover_weighted_mean_of_leaves(name):
    ens = ALL[name]
    # independent of the recursion: sum over leaves of value * product of child fractions
    expected = ens.base_score.astype(np.float64).copy()
    for t in range(ens.num_trees):
        for p in _paths(ens, t):
            frac = 1.0
            for node, went_left in p:
                child = ens.left[node] if went_left else ens.right[node]
                frac *= naive.child_fraction(ens, int(child), node)
            leaf = int(ens.tree_offsets[t])
            if p:
                node, went_left = p[-1]
                leaf = int(ens.left[node] if went_left else ens.right[node])
            expected[ens.tree_group[t]] += frac * ens.value[leaf]
    np.testing.assert_allclose(naive.expected_value(ens), expected, atol=ATOL)
    x = _leaf_rows(ens)[0]
    np.testing.assert_allclose(naive.brute_force_shap(ens, x)[:, -1], expected, atol=ATOL)
    np.testing.assert_allclose(naive.treeshap_recursive(ens, x)[:, -1], expected, atol=ATOL)


@pytest.mark.parametrize("name", ["stump", "multiclass", "categorical"])
def test_dummy_features_get_zero_and_do_not_change_others(name):
    ens = ALL[name]
    # declare two extra, never-used features
    wide = dataclasses.replace(ens, num_features=ens.num_features + 2, feature_types=None)
    X = _leaf_rows(ens, n_random=6)
    Xw = np.hstack([X, np.random.default_rng(0).random((X.shape[0], 2))])
    everyone = list(range(wide.num_features))
    used = naive.used_features(wide)
    unused = [f for f in everyone if f not in used]
    assert len(unused) >= 2
    for r in range(X.shape[0]):
        full = naive.brute_force_shap(wide, Xw[r], features=everyone)
        assert np.all(full[:, unused] == 0)
        np.testing.assert_allclose(full, naive.brute_force_shap(wide, Xw[r]), atol=ATOL)
        np.testing.assert_allclose(full, naive.treeshap_recursive(wide, Xw[r]), atol=ATOL)
        inter = naive.brute_force_interactions(wide, Xw[r], features=everyone)
        assert np.all(inter[:, unused, :] == 0) and np.all(inter[:, :, unused] == 0)
        np.testing.assert_allclose(inter, naive.brute_force_interactions(wide, Xw[r]), atol=ATOL)
        np.testing.assert_allclose(
            inter, naive.treeshap_interactions_recursive(wide, Xw[r]), atol=ATOL
        )
        narrow = naive.brute_force_shap(ens, X[r])
        np.testing.assert_allclose(full[:, : ens.num_features], narrow[:, :-1], atol=ATOL)


def test_permuting_features_permutes_values():
    ens = RANDOM[(3, 7, 5, 3, 3, 2)]
    f = ens.num_features
    perm = np.random.default_rng(5).permutation(f)  # new column j holds old feature perm[j]
    inv = np.argsort(perm)
    feature = ens.feature.copy()
    internal = feature >= 0
    feature[internal] = inv[feature[internal]]
    types = tuple(ens.feature_types[p] for p in perm)
    permuted = dataclasses.replace(ens, feature=feature.astype(np.int32), feature_types=types)
    X = tiny.random_rows(5, ens, 6, nan_fraction=0.2)
    cols = np.append(perm, f)
    for fn in (naive.brute_force_shap_rows, naive.treeshap_recursive_rows):
        np.testing.assert_allclose(fn(permuted, X[:, perm]), fn(ens, X)[..., cols], atol=ATOL)
    inter = naive.treeshap_interactions_recursive_rows(ens, X)
    np.testing.assert_allclose(
        naive.treeshap_interactions_recursive_rows(permuted, X[:, perm]),
        inter[..., cols[:, None], cols[None, :]],
        atol=ATOL,
    )


def _single_tree(ens, t):
    """Tree ``t`` of ``ens`` alone, with zero base score."""
    lo, hi = int(ens.tree_offsets[t]), int(ens.tree_offsets[t + 1])

    def shift(a):
        return np.where(a >= 0, a - lo, a).astype(np.int32)

    c0, c1 = int(ens.cat_offsets[lo]), int(ens.cat_offsets[hi])
    return dataclasses.replace(
        ens,
        left=shift(ens.left[lo:hi]),
        right=shift(ens.right[lo:hi]),
        feature=ens.feature[lo:hi],
        threshold=ens.threshold[lo:hi],
        default_left=ens.default_left[lo:hi],
        is_categorical=ens.is_categorical[lo:hi],
        cat_offsets=ens.cat_offsets[lo : hi + 1] - c0,
        cat_values=ens.cat_values[c0:c1],
        value=ens.value[lo:hi],
        cover=ens.cover[lo:hi],
        tree_offsets=np.array([0, hi - lo], dtype=np.int64),
        tree_group=ens.tree_group[t : t + 1],
        base_score=np.zeros(ens.num_groups),
    ).validate()


def test_linearity_over_trees_and_groups():
    ens = RANDOM[(2, 5, 3, 5, 2, 0)]
    X = tiny.random_rows(2, ens, 4)
    total = naive.treeshap_recursive_rows(ens, X)
    inter_total = naive.brute_force_interactions_rows(ens, X)
    parts = np.zeros_like(total)
    inter_parts = np.zeros_like(inter_total)
    for t in range(ens.num_trees):
        one = _single_tree(ens, t)
        parts += naive.brute_force_shap_rows(one, X)
        inter_parts += naive.treeshap_interactions_recursive_rows(one, X)
    parts[..., -1] += ens.base_score
    inter_parts[..., -1, -1] += ens.base_score
    np.testing.assert_allclose(parts, total, atol=ATOL)
    np.testing.assert_allclose(inter_parts, inter_total, atol=ATOL)


def test_stump_values_in_closed_form():
    ens = TINY["stump"]
    mean = naive.expected_value(ens)[0]
    for x0 in (0.2, 0.7, np.nan):
        x = np.array([x0, 0.3])
        leaf = naive.tree_leaf(ens, 0, x.astype(np.float32))
        phi = naive.brute_force_shap(ens, x)
        np.testing.assert_allclose(phi[0], [ens.value[leaf] - mean, 0.0, mean], atol=ATOL)
        inter = naive.brute_force_interactions(ens, x)
        assert inter[0, 0, 0] == pytest.approx(phi[0, 0]) and inter[0, 0, 1] == 0


# --------------------------------------------------------------------------------------------
# Algorithm 1 internals
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("k", [1, 2, 4, 7])
def test_unwind_undoes_extend_in_any_order(k):
    rng = np.random.default_rng(k)
    elements = []
    for d in range(k):
        elements.append((float(rng.uniform(0.05, 1.0)), float(rng.integers(0, 2)), d))
    full = naive._extend([], 1.0, 1.0, -1)
    for z, o, d in elements:
        full = naive._extend(full, z, o, d)
    for i in range(1, k + 1):
        without = naive._extend([], 1.0, 1.0, -1)
        for z, o, d in elements[: i - 1] + elements[i:]:
            without = naive._extend(without, z, o, d)
        unwound = naive._unwind(full, i)
        assert [e[0] for e in unwound] == [e[0] for e in without]
        np.testing.assert_allclose([e[3] for e in unwound], [e[3] for e in without], atol=1e-14)
        assert naive._unwound_sum(full, i) == pytest.approx(sum(e[3] for e in without), abs=1e-14)


def test_path_weights_sum_to_subset_probabilities():
    # after extending k elements, sum(w) is the Shapley-weighted probability that the path is
    # followed: with every z = o = 1 it is exactly 1
    m = naive._extend([], 1.0, 1.0, -1)
    for d in range(5):
        m = naive._extend(m, 1.0, 1.0, d)
    assert sum(e[3] for e in m) == pytest.approx(1.0)


# --------------------------------------------------------------------------------------------
# input checking
# --------------------------------------------------------------------------------------------


def test_errors_name_the_problem():
    ens = TINY["multiclass"]
    with pytest.raises(ValueError, match="features \\[0"):
        naive.brute_force_shap(ens, np.zeros(4), features=[1, 2, 3])
    with pytest.raises(ValueError, match="4 features"):
        naive.treeshap_recursive(ens, np.zeros(3))
    with pytest.raises(ValueError, match="2-D"):
        naive.brute_force_shap_rows(ens, np.zeros(4))


# --------------------------------------------------------------------------------------------
# the oracles reproduce XGBoost's own pred_contribs / pred_interactions
# --------------------------------------------------------------------------------------------


def _load(booster):
    try:
        from distshap.models import load_model

        return load_model(booster)
    except (ImportError, NotImplementedError) as err:  # loader not written yet
        pytest.skip(f"distshap.models.load_model cannot load XGBoost models yet: {err}")


def _xgb_case(kind: str):
    xgb = pytest.importorskip("xgboost")
    rng = np.random.default_rng(7)
    n = 300
    if kind == "categorical":
        pd = pytest.importorskip("pandas")
        codes = rng.integers(0, 6, n)
        x1 = rng.random(n).astype(np.float32)
        x1[rng.random(n) < 0.1] = np.nan
        y = np.isin(codes, [1, 3, 4]) + np.nan_to_num(x1) + 0.1 * rng.normal(size=n)
        df = pd.DataFrame({"c": pd.Categorical(codes, categories=range(6)), "x1": x1})
        dtrain = xgb.DMatrix(df, y, enable_categorical=True)
        params = {"max_depth": 3, "tree_method": "hist", "max_cat_to_onehot": 1}
        X = np.column_stack([codes, x1]).astype(np.float64)[:10]
        dtest = xgb.DMatrix(df.iloc[:10], enable_categorical=True)
    else:
        X = rng.random((n, 5)).astype(np.float32)
        X[rng.random(X.shape) < 0.1] = np.nan
        Z = np.nan_to_num(X)
        if kind == "multiclass":
            y = (Z[:, 0] * 3).astype(int) % 3
            params = {"objective": "multi:softprob", "num_class": 3, "max_depth": 3}
        else:
            y = 2 * Z[:, 0] + Z[:, 1] * Z[:, 2] + 0.1 * rng.normal(size=n)
            params = {"max_depth": 4}
        dtrain = xgb.DMatrix(X, y)
        X = X[:10].astype(np.float64)
        dtest = xgb.DMatrix(X)
    booster = xgb.train({**params, "eta": 0.5}, dtrain, 4)
    return booster, X, dtest


@pytest.mark.parametrize("kind", ["regression", "multiclass", "categorical"])
def test_oracles_match_xgboost(kind):
    booster, X, dtest = _xgb_case(kind)
    ens = _load(booster)
    contribs = booster.predict(dtest, pred_contribs=True)
    inter = booster.predict(dtest, pred_interactions=True)
    shap = naive.brute_force_shap_rows(ens, X)
    brute_inter = naive.brute_force_interactions_rows(ens, X)
    np.testing.assert_allclose(shap.reshape(contribs.shape), contribs, atol=1e-5)
    np.testing.assert_allclose(brute_inter.reshape(inter.shape), inter, atol=1e-5)
    np.testing.assert_allclose(naive.treeshap_recursive_rows(ens, X), shap, atol=ATOL)
