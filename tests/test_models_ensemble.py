"""``Ensemble.validate``'s tree structure checks (children in their own tree, one parent)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tiny import Leaf, Split, build_ensemble


def _two_trees():
    tree = Split(0, 0.5, Leaf(1.0), Split(0, 0.7, Leaf(2.0), Leaf(3.0)))  # preorder 0..4
    return build_ensemble([tree, tree], num_features=1).validate()


def _with(ens, **changes):
    arrays = {name: getattr(ens, name).copy() for name in changes}
    for name, (i, v) in changes.items():
        arrays[name][i] = v
    return dataclasses.replace(ens, **arrays)


def test_structure_errors():
    ens = _two_trees()
    assert ens.left.tolist()[:5] == [1, -1, 3, -1, -1]
    with pytest.raises(ValueError, match="into another tree"):
        _with(ens, left=(2, 6)).validate()  # a child in the next tree
    with pytest.raises(ValueError, match="outside the ensemble's nodes"):
        _with(ens, right=(2, 10)).validate()
    with pytest.raises(ValueError, match="exactly one parent"):
        _with(ens, left=(2, 1)).validate()  # node 1 has two parents, node 3 none
    with pytest.raises(ValueError, match="into another tree"):
        _with(ens, right=(0, 5)).validate()  # a child of tree 0 is tree 1's root
    with pytest.raises(ValueError, match="exactly one parent"):
        _with(ens, left=(5, 5)).validate()  # tree 1's root its own child
    assert np.array_equal(_two_trees().left, ens.left)
