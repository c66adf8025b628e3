"""Banzhaf values and Banzhaf interaction values: against the brute-force float64 oracle
(:func:`naive.brute_force_banzhaf`) on small models of every loader, against WOODELF where it is
installed, and their identities (rows of interactions sum to the values; chunking and thread
count do not change a bit)."""

from __future__ import annotations

import numpy as np
import pytest

from distshap import TreeExplainer
from distshap.interventional import bias_values, build_background
from distshap.kernels import banzhaf_cpu, banzhaf_rows
from distshap.request import make_request

from conftest import to_host
from naive import brute_force_banzhaf_rows
from tiny import random_ensemble, random_rows, tiny_ensembles

TOL = dict(rtol=2e-5, atol=2e-6)


def _check(explainer, X, background=None):
    """Both methods of ``explainer`` (XGBoost layout) against the oracle, and the identities."""
    ens = explainer.ensemble
    values = to_host(explainer.banzhaf_values(X))
    inter = to_host(explainer.banzhaf_interaction_values(X))
    G = ens.num_groups
    ref = brute_force_banzhaf_rows(ens, X, background)
    ref_int = brute_force_banzhaf_rows(ens, X, background, interactions=True)
    if G == 1:
        ref, ref_int = ref[:, 0], ref_int[:, 0]
    np.testing.assert_allclose(values, ref, **TOL)
    np.testing.assert_allclose(inter, ref_int, **TOL)
    F = ens.num_features
    np.testing.assert_allclose(inter[..., :F, :].sum(-1), values[..., :F], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(inter, np.swapaxes(inter, -1, -2))
    return values, inter


@pytest.mark.parametrize("name", sorted(tiny_ensembles()))
def test_tiny_models_path_dependent_and_interventional(name, backend):
    """Repeated features, NaN defaults, categorical splits, several groups, zero covers."""
    ens = tiny_ensembles()[name]
    X = random_rows(1, ens, n=6)
    _check(TreeExplainer(ens, layout="xgboost", backend=backend), X)
    R = random_rows(2, ens, n=9)
    _check(TreeExplainer(ens, R, layout="xgboost", backend=backend), X, R)


@pytest.mark.parametrize("seed", [0, 1])
def test_random_models_with_categorical_features_and_groups(seed, backend):
    ens = random_ensemble(seed, n_features=6, n_trees=6, depth=4, n_groups=2, n_categorical=2)
    X = random_rows(seed + 10, ens, n=5)
    R = random_rows(seed + 20, ens, n=12)
    _check(TreeExplainer(ens, layout="xgboost", backend=backend), X)
    _check(TreeExplainer(ens, R, layout="xgboost", backend=backend), X, R)


def _regression(n=300, f=5, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, f))
    y = X[:, 0] * X[:, 1] + X[:, 2] - (X[:, 3] > 0.5)
    X[rng.random(X.shape) < 0.1] = np.nan
    return X, y


def test_xgboost_multiclass_and_missing_values(backend):
    xgb = pytest.importorskip("xgboost")
    X, y = _regression()
    labels = (np.nan_to_num(X[:, 0]) > 0).astype(int) + (np.nan_to_num(X[:, 2]) > 0.7)
    model = xgb.XGBClassifier(n_estimators=3, max_depth=3).fit(X, labels)
    _check(TreeExplainer(model, layout="xgboost", backend=backend), X[:4])
    _check(TreeExplainer(model, X[100:120], layout="xgboost", backend=backend), X[:4], X[100:120])


def test_lightgbm_and_sklearn(backend):
    lgb = pytest.importorskip("lightgbm")
    from sklearn.ensemble import RandomForestRegressor

    X, y = _regression()
    X = np.nan_to_num(X)
    forest = RandomForestRegressor(n_estimators=3, max_depth=4, random_state=0).fit(X, y)
    booster = lgb.LGBMRegressor(n_estimators=4, num_leaves=8, verbose=-1).fit(X, y)
    for model in (forest, booster):
        _check(TreeExplainer(model, layout="xgboost", backend=backend), X[:4])
        _check(TreeExplainer(model, X[50:60], layout="xgboost", backend=backend), X[:4], X[50:60])


def test_layout_shap_and_one_row():
    xgb = pytest.importorskip("xgboost")
    X, y = _regression()
    model = xgb.XGBRegressor(n_estimators=3, max_depth=3).fit(X, y)
    ours = TreeExplainer(model, layout="xgboost")
    theirs = TreeExplainer(model, layout="shap")
    np.testing.assert_array_equal(theirs.banzhaf_values(X[:5]), ours.banzhaf_values(X[:5])[:, :-1])
    inter = theirs.banzhaf_interaction_values(X[:5])
    np.testing.assert_array_equal(inter, ours.banzhaf_interaction_values(X[:5])[:, :-1, :-1])
    np.testing.assert_array_equal(ours.banzhaf_values(X[0]), ours.banzhaf_values(X[:1])[0])
    assert ours.banzhaf_values(X[:2])[0, -1] == np.float32(ours.expected_value)
    first = TreeExplainer(model.get_booster()[0:2], layout="xgboost").banzhaf_values(X[:5])
    np.testing.assert_array_equal(ours.banzhaf_values(X[:5], iteration_range=(0, 2)), first)
    margin = np.arange(5, dtype=np.float32)
    shifted = ours.banzhaf_values(xgb.DMatrix(X[:5], base_margin=margin))
    np.testing.assert_array_equal(shifted[:, :-1], ours.banzhaf_values(X[:5])[:, :-1])
    base = float(ours.ensemble.base_score[0])
    np.testing.assert_allclose(shifted[:, -1], margin + ours.expected_value - base, rtol=1e-6)


def test_chunks_and_threads_do_not_change_a_bit():
    """Each row is one task's: any row range and thread count gives the same bits."""
    import numba

    ens = random_ensemble(4, n_features=6, n_trees=8, depth=5, n_groups=2)
    X = random_rows(5, ens, n=40).astype(np.float32)
    R = random_rows(6, ens, n=30)
    packed = TreeExplainer(ens).packed
    background = build_background(packed, R)
    rows = packed.encoding.apply(X)
    for interactions in (False, True):
        whole = banzhaf_cpu.banzhaf_values(packed, rows, interactions)
        inter = banzhaf_cpu.interventional_banzhaf_values(
            packed, background, rows, interactions=interactions
        )
        threads = numba.get_num_threads()
        try:
            numba.set_num_threads(1)
            np.testing.assert_array_equal(
                banzhaf_cpu.banzhaf_values(packed, rows[13:29], interactions), whole[13:29]
            )
            part = banzhaf_cpu.interventional_banzhaf_values(
                packed, background, rows[7:], interactions=interactions
            )
            np.testing.assert_array_equal(part, inter[7:])
        finally:
            numba.set_num_threads(threads)


def test_paths_without_tables_and_the_row_kernels():
    """Paths without a pattern table (path-dependent: no table budget; interventional: longer
    than ``table_bits``) and the row-by-row kernels give the tables' values."""
    ens = random_ensemble(7, n_features=7, n_trees=5, depth=6, n_groups=1, repeat_prob=0.1)
    X = random_rows(8, ens, n=5).astype(np.float32)
    R = random_rows(9, ens, n=12)
    packed = TreeExplainer(ens).packed
    background = build_background(packed, R)
    rows = packed.encoding.apply(X)
    bias = bias_values(background, 0)
    for interactions in (False, True):
        tables = banzhaf_cpu.interventional_banzhaf_values(
            packed, background, rows, bias=bias, interactions=interactions
        )
        direct = banzhaf_cpu.interventional_banzhaf_values(
            packed, background, rows, bias=bias, interactions=interactions, table_bits=2
        )
        np.testing.assert_allclose(direct, tables, rtol=1e-6, atol=1e-7)
        ref = brute_force_banzhaf_rows(ens, X, R, interactions=interactions)
        np.testing.assert_allclose(direct, ref, **TOL)
    ref = brute_force_banzhaf_rows(ens, X)
    no_tables = TreeExplainer(ens, table_budget_bytes=0).packed
    np.testing.assert_allclose(banzhaf_cpu.banzhaf_values(no_tables, rows), ref, **TOL)
    np.testing.assert_allclose(banzhaf_rows.banzhaf_values(packed, rows), ref, **TOL)
    rows_route = banzhaf_rows.interventional_banzhaf_values(packed, background, rows, bias=bias)
    np.testing.assert_allclose(rows_route, brute_force_banzhaf_rows(ens, X, R), **TOL)


def test_banzhaf_differs_from_shap_and_agrees_on_two_feature_paths():
    """Up to two features per path the Banzhaf and Shapley values coincide (and sum to the
    margin minus v(∅)); deeper paths make them differ."""
    shallow = random_ensemble(11, n_features=4, n_trees=4, depth=2, repeat_prob=0.0)
    deep = random_ensemble(12, n_features=5, n_trees=4, depth=4, repeat_prob=0.0)
    X = random_rows(13, shallow, n=6)
    e = TreeExplainer(shallow, layout="xgboost")
    np.testing.assert_allclose(e.banzhaf_values(X), e.shap_values(X), rtol=1e-5, atol=1e-6)
    e = TreeExplainer(deep, layout="xgboost")
    X = random_rows(13, deep, n=6)
    assert np.abs(e.banzhaf_values(X) - e.shap_values(X)).max() > 1e-3


def test_errors_and_request():
    xgb = pytest.importorskip("xgboost")
    X, y = _regression()
    model = xgb.XGBClassifier(n_estimators=2, max_depth=2).fit(X, y > 0)
    explainer = TreeExplainer(model, X[:20], model_output="probability")
    with pytest.raises(ValueError, match="raw margin only"):
        explainer.banzhaf_values(X[:3])
    packed = explainer.packed
    with pytest.raises(ValueError, match="method='owen' is unknown"):
        make_request(packed, method="owen")
    request = make_request(packed, method="banzhaf", check=True, interactions=True)
    assert not request.check and request.what == "Banzhaf interaction values"


def test_woodelf_agrees():
    """WOODELF's banzhaf_values and banzhaf_interaction_values (its diagonal is 0; ours holds
    phi_i - sum_{j != i} phi_ij), path-dependent and with background data."""
    woodelf = pytest.importorskip("woodelf")
    xgb = pytest.importorskip("xgboost")
    import pandas as pd

    X, y = _regression(seed=3)
    frame = pd.DataFrame(np.nan_to_num(X), columns=[f"c{i}" for i in range(X.shape[1])])
    model = xgb.XGBRegressor(n_estimators=6, max_depth=4).fit(frame, y)
    rows, background = frame.iloc[:8], frame.iloc[100:140]
    for data in (None, background):
        theirs = woodelf.WoodelfExplainer(model, data)
        ours = TreeExplainer(model, data, layout="shap")
        values = theirs.banzhaf_values(rows, verbose=False)
        np.testing.assert_allclose(ours.banzhaf_values(rows), values, rtol=1e-4, atol=1e-5)
        inter = theirs.banzhaf_interaction_values(rows, verbose=False)
        mine = ours.banzhaf_interaction_values(rows)
        off = ~np.eye(X.shape[1], dtype=bool)
        np.testing.assert_allclose(mine[:, off], inter[:, off], rtol=1e-4, atol=1e-5)


def test_dask_equals_in_memory(scheduler):
    da = pytest.importorskip("dask.array")
    from distributed import Client

    ens = random_ensemble(14, n_features=5, n_trees=5, depth=4, n_groups=2)
    X = random_rows(15, ens, n=30)
    R = random_rows(16, ens, n=10)
    with Client(scheduler):
        for explainer in (TreeExplainer(ens), TreeExplainer(ens, R)):
            lazy = explainer.banzhaf_values(da.from_array(X, chunks=(7, 5)))
            np.testing.assert_array_equal(lazy.compute(), explainer.banzhaf_values(X))
            lazy = explainer.banzhaf_interaction_values(da.from_array(X, chunks=(11, 5)))
            np.testing.assert_array_equal(lazy.compute(), explainer.banzhaf_interaction_values(X))
