"""Shapley properties on random ensembles (hypothesis): additivity, symmetry, dummy, permutation."""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from distshap import TreeExplainer

import naive
import tiny

ensembles = st.builds(
    lambda seed, f, t, d, g: (seed, tiny.random_ensemble(seed, f, t, d, g)),
    st.integers(0, 10_000),
    st.integers(2, 8),
    st.integers(1, 6),
    st.integers(1, 6),
    st.integers(1, 3),
)
SETTINGS = settings(max_examples=25, deadline=None)


@SETTINGS
@given(ensembles, st.sampled_from([0, 1 << 30]))
def test_additivity(seeded, budget):
    seed, ens = seeded
    X = tiny.random_rows(seed, ens, 20, 0.1)
    phi = TreeExplainer(
        ens, layout="xgboost", backend="cpu", table_budget_bytes=budget
    ).shap_values(X)
    phi = phi.reshape(len(X), ens.num_groups, -1)
    margin = naive.predict_margin(ens, X)
    np.testing.assert_allclose(phi.sum(-1), margin, atol=1e-5 * max(1, np.abs(margin).max()))


@SETTINGS
@given(ensembles)
def test_interactions_symmetric_and_sum_to_shap(seeded):
    seed, ens = seeded
    X = tiny.random_rows(seed, ens, 8, 0.1)
    explainer = TreeExplainer(ens, layout="xgboost", backend="cpu")
    inter = explainer.shap_interaction_values(X)
    phi = explainer.shap_values(X)
    tol = 1e-5 * max(1.0, float(np.abs(inter).max()))
    np.testing.assert_allclose(inter, np.swapaxes(inter, -1, -2), atol=tol)
    np.testing.assert_allclose(inter.sum(-1), phi, atol=tol)


@SETTINGS
@given(ensembles)
def test_dummy_feature_gets_zero(seeded):
    seed, ens = seeded
    # declare one more feature that no split uses
    wider = dataclasses.replace(ens, num_features=ens.num_features + 1)
    rng = np.random.default_rng(seed)
    X = tiny.random_rows(seed, ens, 10, 0.1)
    X = np.hstack([X, rng.normal(size=(len(X), 1)).astype(np.float32)])
    explainer = TreeExplainer(wider, layout="xgboost", backend="cpu")
    phi = explainer.shap_values(X).reshape(len(X), ens.num_groups, -1)
    assert np.all(phi[..., ens.num_features] == 0)
    inter = explainer.shap_interaction_values(X).reshape(
        len(X), ens.num_groups, *phi.shape[-1:] * 2
    )
    assert np.all(inter[..., ens.num_features, :] == 0)
    assert np.all(inter[..., :, ens.num_features] == 0)


@SETTINGS
@given(ensembles, st.randoms())
def test_permuting_columns_permutes_values(seeded, random):
    seed, ens = seeded
    perm = list(range(ens.num_features))
    random.shuffle(perm)
    perm = np.array(perm)
    inverse = np.argsort(perm)
    # model on permuted columns: old feature f now lives in column inverse[f]
    moved = np.where(ens.feature >= 0, inverse[np.maximum(ens.feature, 0)], -1).astype(np.int32)
    permuted = dataclasses.replace(ens, feature=moved)
    X = tiny.random_rows(seed, ens, 15, 0.1)
    phi = (
        TreeExplainer(ens, layout="xgboost", backend="cpu")
        .shap_values(X)
        .reshape(len(X), ens.num_groups, -1)
    )
    phi_p = TreeExplainer(permuted, layout="xgboost", backend="cpu").shap_values(X[:, perm])
    phi_p = phi_p.reshape(phi.shape)
    np.testing.assert_allclose(phi_p[..., :-1], phi[..., perm], atol=1e-6)
    np.testing.assert_allclose(phi_p[..., -1], phi[..., -1], atol=1e-6)
