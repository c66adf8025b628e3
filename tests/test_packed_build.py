"""Host steps of the packed model and the SHAP plan against plain reference formulas.

The shortcuts (no category bits without categorical splits, each path's tree by counting,
the packing without the selection of paths that have features when all have, the quadrature
launches by one sort) must give the arrays of the plain formulas, dtypes included.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import plan_reference as ref
import pytest

from distshap import packed, paths
from distshap.packing import bin_order, pack
from distshap.plan.launches import quadrature_launches

import tiny


def _ensembles():
    yield from tiny.tiny_ensembles().values()  # a bare leaf, a zero cover, categories, ...
    for seed in range(4):
        yield tiny.random_ensemble(seed, 6, 5, 4, 1 + seed % 3, n_categorical=seed % 2)


def _same(a, b) -> None:
    assert isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(a, b)


def test_category_bits_without_categorical_splits():
    for ens in _ensembles():
        _same(paths._checked_category_bits(ens), paths._category_bits_per_feature(ens))
    ens = tiny.stump()
    assert not ens.is_categorical.any()
    bad = dataclasses.replace(
        ens,
        cat_values=np.array([-1], np.int32),
        cat_offsets=np.r_[0, np.ones(ens.num_nodes, np.int64)],
    )
    with pytest.raises(ValueError, match="negative category code"):
        paths._checked_category_bits(bad)


def test_path_arrays_by_counting():
    for ens in _ensembles():
        walk = paths.walk_paths(ens)
        got = walk.path_arrays()
        leaves = np.flatnonzero((ens.left < 0) & (ens.value != 0.0))
        node_tree = np.repeat(np.arange(ens.num_trees, dtype=np.int32), np.diff(ens.tree_offsets))
        _same(got["path_tree"], node_tree[leaves])
        _same(got["path_group"], ens.tree_group[node_tree[leaves]].astype(np.int32))
        _same(got["path_value"], ens.value[leaves])


@pytest.mark.parametrize("zero", [False, True])
def test_packed_order_as_the_selection_of_paths_with_features(zero):
    rng = np.random.default_rng(3)
    k_all = rng.integers(1, 12, 5000).astype(np.int64)
    if zero:
        k_all[rng.random(5000) < 0.1] = 0
    packing, order, bins, offsets = packed._packed_order(k_all, 32, "bfd")
    keep = np.flatnonzero(k_all > 0)
    items, bin_offsets = bin_order(pack(k_all[keep] + 1, 32, "bfd"), k_all[keep] + 1)
    _same(order, keep[items])
    _same(bins, bin_offsets)
    _same(offsets, np.r_[0, np.cumsum(k_all[keep[items]] + 1)].astype(np.int64))
    assert packing.num_items == keep.size


def _launches_equal(new, old) -> None:
    assert len(new) == len(old)
    for a, b in zip(new, old, strict=True):
        assert a.keys() == b.keys()
        for key in a:
            if isinstance(a[key], np.ndarray):
                _same(a[key], b[key])
            else:
                assert type(a[key]) is type(b[key]) and a[key] == b[key]


@pytest.mark.parametrize("seed", range(3))
def test_quadrature_launches_with_negative_keys_and_edges(seed):
    rng = np.random.default_rng(seed)
    nodes = (1, 2, 4, 8, 16)
    for n in (0, 1, 2, 700):
        k = rng.integers(-3, 31, n)  # negative lengths and groups: the lexsort route
        group = rng.integers(-2, 4, n).astype(np.int32)
        for selected in (rng.random(n) < 0.6, np.ones(n, bool)):
            for chunk in (1, 5, 1000):
                _launches_equal(
                    quadrature_launches(k, group, selected, nodes, chunk),
                    ref.quadrature_launches(k, group, selected, nodes, chunk),
                )
    # in order already (no sort): one group, increasing lengths
    k = np.sort(rng.integers(0, 31, 400))
    group = np.zeros(400, np.int32)
    _launches_equal(
        quadrature_launches(k, group, np.ones(400, bool), nodes, 64),
        ref.quadrature_launches(k, group, np.ones(400, bool), nodes, 64),
    )


def test_compiled_walk_packs_a_model_without_paths(monkeypatch):
    ens = tiny.random_ensemble(1, 5, 4, 4, 2)
    bare = dataclasses.replace(ens, value=np.zeros_like(ens.value))  # no leaf makes a path
    expected = packed.pack_ensemble(bare)  # NumPy
    monkeypatch.setattr(paths, "NUMPY_MAX_NODES", 0)
    got = packed.pack_ensemble(bare)
    assert got.num_paths == 0 and got.digest == expected.digest
    _same(got.expected_value, bare.base_score.astype(np.float64))
