"""Boosting iterations of an :class:`Ensemble`: which trees form each round, and sub-models.

A boosted model adds, at every iteration (round), the same number of trees: one per output
group, times ``num_parallel_tree`` for XGBoost's boosted forests. Loaders that know the rounds
record them as ``Ensemble.extra["iteration_indptr"]`` (int64 ``(rounds + 1,)``: the first tree
of each round, in the ensemble's tree order); models without boosting rounds (random forests,
single trees, CatBoost, LightGBM's random-forest mode whose leaves are already divided by the
number of trees) record none, and selecting iterations of them is refused.

:func:`select_iterations` cuts whole rounds out of an ensemble, as XGBoost's
``predict(iteration_range=(begin, end))`` and LightGBM's ``num_iteration`` select trees: the
base score stays, the trees of other rounds are dropped.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from distshap.models.ensemble import Ensemble

__all__ = [
    "iteration_indptr",
    "iterations_indptr",
    "resolve_iteration_range",
    "select_iterations",
    "tree_limit_range",
]


def iterations_indptr(num_trees: int, trees_per_iteration: int) -> np.ndarray:
    """``[0, k, 2k, ..., num_trees]`` for rounds of ``k`` trees (the loaders' record)."""
    if trees_per_iteration < 1 or num_trees % trees_per_iteration:
        raise ValueError(
            f"{num_trees} trees do not make whole iterations of {trees_per_iteration} trees"
        )
    return np.arange(0, num_trees + 1, trees_per_iteration, dtype=np.int64)


def iteration_indptr(ensemble: Ensemble) -> np.ndarray:
    """The first tree of each boosting round of ``ensemble`` (int64 ``(rounds + 1,)``).

    Raises
    ------
    ValueError
        When the model records no boosting rounds (a random forest, a single tree, CatBoost,
        LightGBM's random-forest mode, an :class:`Ensemble` built by hand), or records
        rounds that do not cover its trees.
    """
    indptr = ensemble.extra.get("iteration_indptr")
    if indptr is None:
        raise ValueError(
            f"the model ({ensemble.model_kind}) records no boosting iterations, so "
            "tree_limit / iteration_range cannot select trees of it: they apply to boosted "
            "XGBoost, LightGBM and scikit-learn gradient boosting models; explain all trees "
            "(tree_limit=None)"
        )
    indptr = np.asarray(indptr, dtype=np.int64)
    if (
        indptr.ndim != 1
        or indptr.size < 2
        or indptr[0] != 0
        or indptr[-1] != ensemble.num_trees
        or np.any(np.diff(indptr) < 1)
    ):
        raise ValueError(
            f"the model's iteration_indptr {indptr.tolist()[:8]} does not cover its "
            f"{ensemble.num_trees} trees in rounds"
        )
    return indptr


def resolve_iteration_range(
    ensemble: Ensemble, iteration_range: tuple[int, int]
) -> tuple[int, int]:
    """``(begin, end)`` checked against the model's rounds; ``end == 0`` means all (XGBoost).

    Raises
    ------
    TypeError
        When ``iteration_range`` is no pair of integers.
    ValueError
        When it is outside ``0 <= begin < end <= rounds``, or the model has no rounds.
    """
    try:
        begin, end = iteration_range
    except (TypeError, ValueError):
        raise TypeError(
            f"iteration_range={iteration_range!r} must be a pair (begin, end) of boosting rounds"
        ) from None
    for v in (begin, end):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TypeError(
                f"iteration_range={iteration_range!r} must hold integers (boosting rounds)"
            )
    begin, end = int(begin), int(end)
    rounds = iteration_indptr(ensemble).size - 1
    if end == 0 and begin == 0:
        end = rounds
    if not 0 <= begin < end <= rounds:
        raise ValueError(
            f"iteration_range=({begin}, {end}) is outside the model's {rounds} boosting "
            f"rounds: use 0 <= begin < end <= {rounds} ((0, 0) for all)"
        )
    return begin, end


def tree_limit_range(ensemble: Ensemble, tree_limit: int) -> tuple[int, int]:
    """shap's ``tree_limit`` (a number of trees, whole rounds) -> ``(0, rounds)``.

    ``tree_limit`` counts trees as shap does for XGBoost: ``rounds x trees per round`` (trees
    per round = output groups x parallel trees), so it must be a multiple of the trees per
    round. ``-1`` selects all trees.

    Raises
    ------
    TypeError
        For a non-integer.
    ValueError
        For 0, a value below -1, more trees than the model has, or a partial round.
    """
    if isinstance(tree_limit, bool) or not isinstance(tree_limit, (int, np.integer)):
        raise TypeError(f"tree_limit={tree_limit!r} must be an integer number of trees (or -1)")
    indptr = iteration_indptr(ensemble)
    rounds = indptr.size - 1
    if tree_limit == -1:
        return 0, rounds
    sizes = np.unique(np.diff(indptr))
    per_round = int(sizes[0]) if sizes.size == 1 else None
    if tree_limit < 1 or tree_limit > ensemble.num_trees:
        raise ValueError(
            f"tree_limit={tree_limit} is outside the model's {ensemble.num_trees} trees: use "
            f"1..{ensemble.num_trees} (a multiple of the {per_round or '?'} trees per round), "
            "or -1 / None for all"
        )
    hit = np.flatnonzero(indptr == tree_limit)
    if hit.size == 0:
        raise ValueError(
            f"tree_limit={tree_limit} ends inside a boosting round of {per_round or 'several'} "
            f"trees (output groups x parallel trees): use a multiple of {per_round}, or "
            "iteration_range=(begin, end) in rounds"
        )
    return 0, int(hit[0])


def select_iterations(ensemble: Ensemble, begin: int, end: int) -> Ensemble:
    """The sub-ensemble of boosting rounds ``[begin, end)`` (checked with
    :func:`resolve_iteration_range` first); the base score is kept."""
    indptr = iteration_indptr(ensemble)
    if not 0 <= begin < end <= indptr.size - 1:
        raise ValueError(f"rounds [{begin}, {end}) outside [0, {indptr.size - 1})")
    if begin == 0 and end == indptr.size - 1:
        return ensemble
    t0, t1 = int(indptr[begin]), int(indptr[end])
    n0, n1 = int(ensemble.tree_offsets[t0]), int(ensemble.tree_offsets[t1])
    c0, c1 = int(ensemble.cat_offsets[n0]), int(ensemble.cat_offsets[n1])

    def child(index: np.ndarray) -> np.ndarray:
        part = index[n0:n1]
        return np.where(part >= 0, part - n0, -1).astype(np.int32)

    extra = dict(ensemble.extra)
    extra["iteration_indptr"] = indptr[begin : end + 1] - indptr[begin]
    extra["iteration_range"] = (begin, end)
    sub = replace(
        ensemble,
        left=child(ensemble.left),
        right=child(ensemble.right),
        feature=ensemble.feature[n0:n1].copy(),
        threshold=ensemble.threshold[n0:n1].copy(),
        default_left=ensemble.default_left[n0:n1].copy(),
        is_categorical=ensemble.is_categorical[n0:n1].copy(),
        cat_offsets=ensemble.cat_offsets[n0 : n1 + 1] - c0,
        cat_values=ensemble.cat_values[c0:c1].copy(),
        value=ensemble.value[n0:n1].copy(),
        cover=ensemble.cover[n0:n1].copy(),
        tree_offsets=ensemble.tree_offsets[t0 : t1 + 1] - n0,
        tree_group=ensemble.tree_group[t0:t1].copy(),
        threshold64=None if ensemble.threshold64 is None else ensemble.threshold64[n0:n1].copy(),
        extra=extra,
    )
    return sub.validate()
