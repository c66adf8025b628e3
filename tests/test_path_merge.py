"""Model building in NumPy (small models) equals the compiled kernels (large models).

:func:`distshap.paths.extract_paths` takes NumPy up to ``NUMPY_MAX_NODES`` nodes, BFD
packing and :func:`distshap.packing.bin_order` up to ``packing_numpy_max_items`` items and the
packed model's lanes up to ``packed.NUMPY_MAX_PATHS`` paths (nothing to compile on a first
call), compiled kernels beyond; both must give the same arrays, bit for bit, so that the packed
model and its digest do not depend on the model's size class (nor on the thread count).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from distshap import config_context, packed, packing, path_walk, paths
from distshap.parallel import run_ranges

import tiny
from tiny import Leaf, Split, build_ensemble


def _both(ens):
    nbits = paths._category_bits_per_feature(ens)
    return paths._paths_numpy(ens, nbits), paths._paths_compiled(ens, nbits)


def _assert_same(a: paths.Paths, b: paths.Paths) -> None:
    for f in dataclasses.fields(paths.Paths):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and x.shape == y.shape, f.name
            assert np.array_equal(x, y), f.name  # bit for bit (no NaN in these arrays)
        else:
            assert x == y, f.name


@pytest.mark.parametrize("seed", range(12))
def test_numpy_equals_compiled_on_random_ensembles(seed):
    ens = tiny.random_ensemble(
        seed,
        n_features=3 + seed % 6,
        n_trees=1 + seed % 5,
        depth=2 + seed % 8,
        n_groups=1 + seed % 3,
        n_categorical=seed % 3,
        n_categories=4 + 30 * (seed % 2),  # one and two words of category bits
    )
    _assert_same(*_both(ens))


@pytest.mark.parametrize("name", sorted(tiny.tiny_ensembles()))
def test_numpy_equals_compiled_on_tiny_models(name):
    _assert_same(*_both(tiny.tiny_ensembles()[name]))
    _assert_same(*_both(tiny.zero_cover_subtree()))


def test_zero_leaves_make_no_paths_and_a_bare_leaf_an_empty_one():
    tree = Split(0, 0.5, Leaf(0.0, 2.0), Split(1, 0.5, Leaf(1.0, 1.0), Leaf(0.0, 1.0)))
    ens = build_ensemble([tree, Leaf(3.0)], num_features=2)
    got = paths.extract_paths(ens)
    _assert_same(got, _both(ens)[1])
    assert got.lengths.tolist() == [2, 0] and got.path_value.tolist() == [1.0, 3.0]


@pytest.mark.parametrize("seed", range(4))
def test_numpy_equals_compiled_on_deep_and_wide_ensembles(seed):
    # more than 64 features (several words of any per-feature bitset), deep paths that split
    # on one feature many times, two-word category sets
    ens = tiny.random_ensemble(
        100 + seed,
        n_features=70 + seed,
        n_trees=3,
        depth=11,
        n_groups=1 + seed % 2,
        n_categorical=2 * (seed % 2),
        n_categories=40,
        split_prob=0.95,
        repeat_prob=0.6 if seed < 2 else 0.05,
    )
    _assert_same(*_both(ens))


def test_compiled_walk_does_not_depend_on_the_tree_ranges(monkeypatch):
    ens = tiny.random_ensemble(7, n_features=6, n_trees=9, depth=6, n_groups=2, n_categorical=1)
    nbits = paths._category_bits_per_feature(ens)
    serial = []

    def one_range(function, n, pieces, *args):
        serial.append(n)
        function(*args, 0, n)

    monkeypatch.setattr(path_walk, "run_ranges", one_range)
    whole = paths._paths_compiled(ens, nbits)
    assert serial == [ens.num_trees, ens.num_trees]  # two passes: count, then fill
    monkeypatch.setattr(path_walk, "run_ranges", lambda f, n, pieces, *a: run_ranges(f, n, n, *a))
    _assert_same(whole, paths._paths_compiled(ens, nbits))  # one tree per range, in threads


def _bad(ens, **arrays):
    return dataclasses.replace(ens, **arrays)


def test_compiled_walk_refuses_what_is_not_a_tree():
    ens = tiny.stump()  # node 0 splits into leaves 1 and 2
    nbits = paths._category_bits_per_feature(ens)
    left, right, feature = ens.left.copy(), ens.right.copy(), ens.feature.copy()
    left[1], right[1], feature[1] = 1, 2, 0  # node 1 its own child: the walk would not end
    with pytest.raises(ValueError, match="cycle"):
        paths._paths_compiled(_bad(ens, left=left, right=right, feature=feature), nbits)
    # every node has one parent, but nodes 2 and 4 hang in a cycle the root does not reach
    tree = Split(0, 0.5, Leaf(1.0), Split(0, 0.7, Leaf(2.0), Leaf(3.0)))  # preorder 0..4
    ens = build_ensemble([tree], num_features=1)
    left = np.array([1, -1, 4, -1, -1], np.int32)
    right = np.array([3, -1, 2, -1, -1], np.int32)
    cyclic = _bad(ens, left=left, right=right).validate()
    for build in (paths._paths_compiled, paths._paths_numpy):
        with pytest.raises(ValueError, match="cycle"):
            build(cyclic, paths._category_bits_per_feature(cyclic))
    two = build_ensemble([tree, tree], num_features=1)
    left = two.left.copy()
    left[2] = 6  # a child in the next tree
    with pytest.raises(ValueError, match="outside its own nodes"):
        paths._paths_compiled(_bad(two, left=left), paths._category_bits_per_feature(two))


def test_packed_lanes_in_numpy_equal_the_compiled_loop(monkeypatch):
    ens = tiny.random_ensemble(5, n_features=6, n_trees=6, depth=6, n_groups=2, n_categorical=2)
    p = paths.extract_paths(ens)
    small = packed.build_packed_model(p)
    monkeypatch.setattr(packed, "NUMPY_MAX_PATHS", 0)
    large = packed.build_packed_model(p)
    for f in dataclasses.fields(packed.PackedModel):
        x, y = getattr(small, f.name), getattr(large, f.name)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and x.shape == y.shape, f.name
            assert np.array_equal(x, y), f.name
    assert small.digest == large.digest
    # lanes against their definition: a bias lane, then the path's elements
    for q in range(small.num_paths):
        lanes = slice(small.path_offsets[q], small.path_offsets[q + 1])
        assert small.feature[lanes][0] == -1 and small.zero_fraction[lanes][0] == 1.0
        assert np.all(small.lane_path[lanes] == q)


def test_size_decides_the_implementation(monkeypatch):
    ens = tiny.random_ensemble(3, n_features=5, n_trees=4, depth=5, n_categorical=1)
    calls = []

    def spy(name):
        real = getattr(paths, name)

        def run(e, n):
            calls.append(name)
            return real(e, n)

        monkeypatch.setattr(paths, name, run)

    spy("_paths_numpy")
    spy("_paths_compiled")
    small = paths.extract_paths(ens)
    monkeypatch.setattr(paths, "NUMPY_MAX_NODES", ens.num_nodes - 1)
    large = paths.extract_paths(ens)
    assert calls == ["_paths_numpy", "_paths_compiled"]
    _assert_same(small, large)


def test_mixed_categorical_and_numeric_splits_are_refused_by_both():
    tree = Split(0, 0.5, Leaf(1.0), Split(0, 0.0, Leaf(2.0), Leaf(3.0), categories=[1]))
    ens = build_ensemble([tree], num_features=1, feature_types=("c",))
    with pytest.raises(ValueError, match="both categorical and numeric"):
        paths.extract_paths(ens)


def test_a_cycle_is_refused():
    ens = tiny.stump()
    # node 1 (a leaf) becomes a split whose children are 1 and 2: not a tree any more
    left, right, feature = ens.left.copy(), ens.right.copy(), ens.feature.copy()
    left[1], right[1], feature[1] = 1, 2, 0
    bad = dataclasses.replace(ens, left=left, right=right, feature=feature)
    with pytest.raises(ValueError, match="cycle"):
        paths._paths_numpy(bad, paths._category_bits_per_feature(bad))


@pytest.mark.parametrize("capacity", [1, 5, 32, 300])
@pytest.mark.parametrize("seed", range(3))
def test_bfd_and_bin_order_in_numpy_equal_the_compiled_kernels(seed, capacity):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, capacity + 1 + capacity // 4, size=int(rng.integers(0, 3000)))
    sizes[rng.random(sizes.shape) < 0.3] = rng.integers(1, 4)  # long runs of one size
    numpy_labels = np.full(sizes.shape, -1, np.int32)
    compiled = np.full(sizes.shape, -1, np.int32)
    n_numpy = packing._best_fit_decreasing(sizes, capacity, numpy_labels)
    assert n_numpy == packing._bfd_compiled(sizes, capacity, compiled)
    np.testing.assert_array_equal(numpy_labels, compiled)
    p = packing.pack(sizes, capacity, "bfd")
    order, lanes = packing.bin_order(p, sizes)
    want = packing._group_by_bin_compiled(p.bin_of_item, sizes, p.num_bins)
    assert order.dtype == want[0].dtype and lanes.dtype == want[1].dtype
    np.testing.assert_array_equal(order, want[0])
    np.testing.assert_array_equal(lanes, want[1])


def test_item_count_decides_the_packing_implementation(monkeypatch):
    sizes = np.random.default_rng(4).integers(1, 20, size=500)
    small = packing.pack(sizes, 32, "bfd")
    small_order = packing.bin_order(small, sizes)
    monkeypatch.setattr(packing, "_best_fit_decreasing", None)  # would fail if called
    with config_context(packing_numpy_max_items=10, packing_cold_max_items=0):
        large = packing.pack(sizes, 32, "bfd")
        large_order = packing.bin_order(large, sizes)
    np.testing.assert_array_equal(small.bin_of_item, large.bin_of_item)
    for a, b in zip(small_order, large_order, strict=True):
        np.testing.assert_array_equal(a, b)


def _assert_same_packed(a: packed.PackedModel, b: packed.PackedModel) -> None:
    for f in dataclasses.fields(packed.PackedModel):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and x.shape == y.shape, f.name
            assert np.array_equal(x, y), f.name
    assert a.digest == b.digest


@pytest.mark.parametrize("seed", range(4))
def test_pack_ensemble_walks_into_the_lanes_as_paths_then_packing(seed, monkeypatch):
    # the large-model route (the walk writes each path into its packed lanes) against
    # build_packed_model(extract_paths(...)): categorical (one and two words), multi-group,
    # a bare leaf (a path of no features) and a zero leaf (no path)
    ens = tiny.random_ensemble(
        200 + seed, n_features=5 + seed, n_trees=3 + seed, depth=3 + 2 * seed,
        n_groups=1 + seed % 3, n_categorical=seed % 3, n_categories=4 + 30 * (seed % 2),
    )  # fmt: skip
    if seed == 0:
        ens = build_ensemble(
            [Split(0, 0.5, Leaf(0.0, 2.0), Split(1, 0.5, Leaf(1.0), Leaf(-2.0))), Leaf(3.0)],
            num_features=2,
        )
    want = packed.build_packed_model(paths.extract_paths(ens), table_budget_bytes=300)
    monkeypatch.setattr(paths, "NUMPY_MAX_NODES", 0)
    spied = []
    monkeypatch.setattr(packed, "build_packed_model", lambda *a, **k: spied.append(1))
    got = packed.pack_ensemble(ens, table_budget_bytes=300)
    assert not spied  # the walk's own route, not paths then packing
    _assert_same_packed(want, got)
    assert got.stats["paths"] == want.stats["paths"] and got.stats["bins"] == want.stats["bins"]
    assert got.stats["table_paths"] == want.stats["table_paths"]
