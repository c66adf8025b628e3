"""Small hand-built and random :class:`Ensemble` models for tests (no model library needed).

Build a tree from nested :class:`Split` / :class:`Leaf` specs and turn a list of trees into a
valid ensemble with :func:`build_ensemble`. Canonical tiny models (each returns a validated
Ensemble; :func:`tiny_ensembles` maps names to all of them):

* :func:`stump` - one split, plus an unused (dummy) feature;
* :func:`repeated_feature_tree` - depth 3, feature 0 split twice on one path;
* :func:`nan_default_tree` - mixed default (missing-value) directions;
* :func:`categorical_tree` - a categorical split next to numeric ones;
* :func:`multiclass_ensemble` - 2 groups, several trees (one a bare leaf) and a base score;
* :func:`zero_cover_tree` - a node whose child has zero cover.

:func:`zero_cover_subtree` (an internal node of zero cover, children 0 / 0) is an edge case kept
out of :func:`tiny_ensembles`.

:func:`random_ensemble` draws random valid trees (covers consistent: parent = sum of children,
thresholds inside the interval the path still allows, so both sides of every split are
reachable, occasional repeated features, optional categorical features) and
:func:`random_rows` draws rows that reach both sides of splits, hit thresholds exactly and hold
NaNs. Values of numeric features lie in ``[0, 1)`` and are exactly representable in float32.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from distshap.models.ensemble import Ensemble

__all__ = [
    "Leaf",
    "Split",
    "build_ensemble",
    "categorical_tree",
    "chain_units_ensemble",
    "multiclass_ensemble",
    "nan_default_tree",
    "random_ensemble",
    "random_rows",
    "repeated_feature_tree",
    "stump",
    "tiny_ensembles",
    "zero_cover_subtree",
    "zero_cover_tree",
]


@dataclass(frozen=True)
class Leaf:
    """A leaf with its margin value and training cover."""

    value: float
    cover: float = 1.0


@dataclass(frozen=True)
class Split:
    """An internal node.

    Numeric: ``x < threshold`` goes left. Categorical when ``categories`` is given: the listed
    codes go right, every other non-missing value left. NaN goes left when ``default_left``.
    ``cover`` defaults to the sum of the children's covers.
    """

    feature: int
    threshold: float
    left: Split | Leaf
    right: Split | Leaf
    default_left: bool = True
    categories: Sequence[int] | None = None
    cover: float | None = None


def _node_cover(node: Split | Leaf) -> float:
    if isinstance(node, Leaf):
        return float(node.cover)
    if node.cover is not None:
        return float(node.cover)
    return _node_cover(node.left) + _node_cover(node.right)


def build_ensemble(
    trees: Sequence[Split | Leaf],
    num_features: int,
    *,
    num_groups: int = 1,
    tree_groups: Sequence[int] | None = None,
    base_score: float | Sequence[float] = 0.0,
    feature_types: Sequence[str] | None = None,
    model_kind: str = "tiny",
) -> Ensemble:
    """Flatten nested tree specs (preorder, root first) into a validated :class:`Ensemble`.

    ``tree_groups`` defaults to round robin (tree ``t`` -> group ``t % num_groups``, XGBoost's
    multiclass layout); a scalar ``base_score`` is used for every group.
    """
    cols: dict[str, list] = {
        k: []
        for k in (
            "left",
            "right",
            "feature",
            "threshold",
            "default_left",
            "is_categorical",
            "value",
            "cover",
        )
    }
    cat_offsets = [0]
    cat_values: list[int] = []
    tree_offsets = [0]

    def add(node: Split | Leaf) -> int:
        idx = len(cols["left"])
        for k in cols:
            cols[k].append(None)
        cols["cover"][idx] = _node_cover(node)
        if isinstance(node, Leaf):
            cols["left"][idx] = cols["right"][idx] = cols["feature"][idx] = -1
            cols["threshold"][idx] = 0.0
            cols["default_left"][idx] = cols["is_categorical"][idx] = False
            cols["value"][idx] = float(node.value)
            cat_offsets.append(cat_offsets[-1])
            return idx
        cols["feature"][idx] = int(node.feature)
        cols["threshold"][idx] = float(node.threshold)
        cols["default_left"][idx] = bool(node.default_left)
        cols["is_categorical"][idx] = node.categories is not None
        cols["value"][idx] = 0.0
        cats = sorted({int(c) for c in node.categories}) if node.categories is not None else []
        cat_values.extend(cats)
        cat_offsets.append(cat_offsets[-1] + len(cats))
        cols["left"][idx] = add(node.left)
        cols["right"][idx] = add(node.right)
        return idx

    for tree in trees:
        add(tree)
        tree_offsets.append(len(cols["left"]))
    n_trees = len(trees)
    groups = [t % num_groups for t in range(n_trees)] if tree_groups is None else list(tree_groups)
    base = np.broadcast_to(np.asarray(base_score, dtype=np.float64), (num_groups,)).copy()
    return Ensemble(
        left=np.asarray(cols["left"], dtype=np.int32),
        right=np.asarray(cols["right"], dtype=np.int32),
        feature=np.asarray(cols["feature"], dtype=np.int32),
        threshold=np.asarray(cols["threshold"], dtype=np.float32),
        default_left=np.asarray(cols["default_left"], dtype=np.bool_),
        is_categorical=np.asarray(cols["is_categorical"], dtype=np.bool_),
        cat_offsets=np.asarray(cat_offsets, dtype=np.int64),
        cat_values=np.asarray(cat_values, dtype=np.int32),
        value=np.asarray(cols["value"], dtype=np.float64),
        cover=np.asarray(cols["cover"], dtype=np.float64),
        tree_offsets=np.asarray(tree_offsets, dtype=np.int64),
        tree_group=np.asarray(groups, dtype=np.int32),
        num_features=int(num_features),
        num_groups=int(num_groups),
        base_score=base,
        feature_types=tuple(feature_types) if feature_types is not None else None,
        model_kind=model_kind,
    ).validate()


# ---------------------------------------------------------------------------------------------
# canonical tiny models
# ---------------------------------------------------------------------------------------------


def stump() -> Ensemble:
    """One split on feature 0 at 0.5; feature 1 is declared but never used."""
    return build_ensemble([Split(0, 0.5, Leaf(-1.0, 30.0), Leaf(2.0, 70.0))], num_features=2)


def repeated_feature_tree() -> Ensemble:
    """Depth 3 with feature 0 split at the root and again below (both orders of bounds)."""
    tree = Split(
        0,
        0.5,
        Split(1, 0.3, Split(0, 0.2, Leaf(1.0, 10.0), Leaf(-2.0, 15.0)), Leaf(0.5, 20.0)),
        Split(0, 0.8, Split(2, 0.6, Leaf(3.0, 5.0), Leaf(-1.5, 12.0)), Leaf(0.25, 8.0)),
        default_left=False,
    )
    return build_ensemble([tree], num_features=3)


def nan_default_tree() -> Ensemble:
    """Missing values go left at some splits and right at others."""
    tree = Split(
        0,
        0.4,
        Split(1, 0.5, Leaf(-0.7, 9.0), Leaf(1.3, 4.0), default_left=False),
        Split(1, 0.2, Leaf(0.9, 6.0), Split(2, 0.7, Leaf(-1.1, 3.0), Leaf(2.2, 7.0))),
        default_left=True,
    )
    return build_ensemble([tree], num_features=3)


def categorical_tree() -> Ensemble:
    """Feature 0 categorical (codes 1 and 3 go right), feature 1 numeric."""
    tree = Split(
        0,
        0.0,
        Split(1, 0.5, Leaf(0.4, 11.0), Leaf(-0.6, 5.0)),
        Split(1, 0.25, Leaf(1.7, 3.0), Leaf(-2.1, 8.0), default_left=False),
        categories=[1, 3],
        default_left=False,
    )
    return build_ensemble([tree], num_features=2, feature_types=("c", "q"))


def multiclass_ensemble() -> Ensemble:
    """Two groups, five trees (round robin; tree 4 is a bare leaf), base score per group."""
    trees = [
        Split(0, 0.5, Split(1, 0.5, Leaf(0.3, 4.0), Leaf(-0.2, 6.0)), Leaf(0.8, 10.0)),
        Split(2, 0.3, Leaf(-0.5, 7.0), Split(0, 0.7, Leaf(0.1, 5.0), Leaf(0.6, 8.0))),
        Split(1, 0.6, Leaf(0.2, 12.0), Leaf(-0.4, 8.0), default_left=False),
        Split(0, 0.2, Leaf(-0.3, 3.0), Split(3, 0.5, Leaf(0.9, 9.0), Leaf(-0.1, 8.0))),
        Leaf(0.05, 20.0),
    ]
    return build_ensemble(trees, num_features=4, num_groups=2, base_score=[0.5, -0.25])


def zero_cover_tree() -> Ensemble:
    """A split whose left child (a leaf) has zero cover, below a normal split."""
    tree = Split(
        0,
        0.5,
        Split(1, 0.5, Leaf(5.0, 0.0), Leaf(-1.0, 10.0)),
        Leaf(0.5, 6.0),
    )
    return build_ensemble([tree], num_features=2)


def zero_cover_subtree() -> Ensemble:
    """Edge case kept out of :func:`tiny_ensembles`: an *internal* node with zero cover.

    Its children's fractions are 0 / 0; the oracles take them as 0 (the subtree adds nothing to
    any expectation). Real libraries do not produce this; a backend may reject it instead.
    """
    tree = Split(
        0,
        0.5,
        Split(1, 0.5, Leaf(5.0, 0.0), Leaf(-3.0, 0.0)),
        Split(1, 0.25, Leaf(0.5, 6.0), Leaf(1.5, 2.0)),
    )
    return build_ensemble([tree], num_features=2)


def chain_units_ensemble() -> Ensemble:
    """Two chains of nine splits (features 0 to 8, a leaf on each right) ending in a subtree
    whose children split on one feature and in a leaf beside a pair: paths of 11 features whose
    sibling units (:mod:`distshap.plan.units`) are more than pairs."""

    def chain(i: int, end: Split, v: float) -> Split:
        return end if i == 9 else Split(i, 0.5, chain(i + 1, end, v), Leaf(v + i, 4.0))

    full = Split(9, 0.4, Split(10, 0.3, Leaf(1.0, 2.0), Leaf(2.0, 3.0)),
                 Split(10, 0.6, Leaf(3.0, 1.0), Leaf(4.0, 5.0)))  # fmt: skip
    side = Split(9, 0.6, Leaf(5.0, 2.0), Split(11, 0.5, Leaf(6.0, 1.0), Leaf(7.0, 3.0)))
    return build_ensemble([chain(0, full, 10.0), chain(0, side, 20.0)], num_features=12)


def tiny_ensembles() -> dict[str, Ensemble]:
    """Every canonical tiny model by name (for ``pytest.mark.parametrize``)."""
    return {
        "stump": stump(),
        "repeated_feature": repeated_feature_tree(),
        "nan_default": nan_default_tree(),
        "categorical": categorical_tree(),
        "multiclass": multiclass_ensemble(),
        "zero_cover": zero_cover_tree(),
    }


# ---------------------------------------------------------------------------------------------
# random models and rows
# ---------------------------------------------------------------------------------------------


def random_ensemble(
    seed: int,
    n_features: int = 5,
    n_trees: int = 3,
    depth: int = 3,
    n_groups: int = 1,
    *,
    n_categorical: int = 0,
    n_categories: int = 6,
    split_prob: float = 0.85,
    repeat_prob: float = 0.3,
) -> Ensemble:
    """Random valid ensemble.

    Parameters
    ----------
    seed : int
    n_features : int
        Declared features; the last ``n_categorical`` are categorical with codes
        ``0 .. n_categories - 1``.
    n_trees, depth, n_groups : int
        Trees (round robin over groups), maximum depth (0 gives bare leaves), outputs.
    split_prob : float
        Probability that a non-root node above ``depth`` splits (roots always split).
    repeat_prob : float
        Probability that a split reuses a feature already split on along its path.
    """
    if n_categorical > n_features:
        raise ValueError(f"n_categorical={n_categorical} exceeds n_features={n_features}")
    rng = np.random.default_rng(seed)
    first_cat = n_features - n_categorical

    def grow(level: int, bounds: dict) -> Split | Leaf:
        # bounds: feature -> (lo, hi) still reachable (numeric) or (codes, others) reachable
        # (categorical: listed codes, and whether unlisted / out-of-range codes still reach).
        if level >= depth or (level > 0 and rng.random() > split_prob):
            return Leaf(float(rng.normal()), float(rng.integers(1, 50)))
        on_path = list(bounds)
        if on_path and rng.random() < repeat_prob:
            f = int(rng.choice(on_path))
        else:
            f = int(rng.integers(n_features))
        default_left = bool(rng.random() < 0.5)
        if f >= first_cat:
            codes, others = bounds.get(f, (tuple(range(n_categories)), True))
            # right set: a non-empty subset of the reachable codes leaving the left side
            # something (another reachable code, or the unlisted codes)
            most = len(codes) - 1 if len(codes) > 1 else int(others)
            if most < 1 or not codes:
                return Leaf(float(rng.normal()), float(rng.integers(1, 50)))
            size = int(rng.integers(1, most + 1))
            cats = sorted(int(c) for c in rng.choice(codes, size=size, replace=False))
            rest = tuple(c for c in codes if c not in cats)
            return Split(
                f,
                0.0,
                grow(level + 1, {**bounds, f: (rest, others)}),
                grow(level + 1, {**bounds, f: (tuple(cats), False)}),
                default_left=default_left,
                categories=cats,
            )
        lo, hi = bounds.get(f, (0.0, 1.0))
        t = float(np.float32(lo + (hi - lo) * rng.uniform(0.1, 0.9)))
        return Split(
            f,
            t,
            grow(level + 1, {**bounds, f: (lo, t)}),
            grow(level + 1, {**bounds, f: (t, hi)}),
            default_left=default_left,
        )

    trees = [grow(0, {}) for _ in range(n_trees)]
    types = tuple("c" if f >= first_cat else "q" for f in range(n_features))
    return build_ensemble(
        trees,
        n_features,
        num_groups=n_groups,
        base_score=rng.normal(size=n_groups).tolist(),
        feature_types=types,
        model_kind=f"random:{seed}",
    )


def random_rows(seed: int, ens: Ensemble, n: int = 20, nan_fraction: float = 0.1) -> np.ndarray:
    """Random float64 rows for ``ens``, shape ``(n, num_features)``.

    Numeric features are uniform on ``[0, 1)`` (float32-exact), about 10% set exactly to one of
    the model's thresholds on that feature; categorical features (``feature_types == "c"``)
    are integer codes from -1 to two past the largest listed code; then a ``nan_fraction`` of
    all entries become NaN.
    """
    rng = np.random.default_rng(seed)
    f_total = ens.num_features
    X = rng.random((n, f_total)).astype(np.float32).astype(np.float64)
    internal = ens.left >= 0
    types = ens.feature_types or ("q",) * f_total
    for f in range(f_total):
        at_f = internal & (ens.feature == f)
        if types[f] == "c":
            top = int(ens.cat_values.max()) if ens.cat_values.size else 0
            X[:, f] = rng.integers(-1, top + 3, size=n)
            continue
        thresholds = ens.threshold[at_f & ~ens.is_categorical]
        if thresholds.size:
            hit = rng.random(n) < 0.1
            X[hit, f] = rng.choice(thresholds, size=int(hit.sum())).astype(np.float64)
    X[rng.random((n, f_total)) < nan_fraction] = np.nan
    return X
