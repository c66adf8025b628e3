"""CPU interventional pattern tables: the grouped-mask route's bits, the plan, the cache.

With the raw margin, paths of a few features go through background pattern tables
(:mod:`distshap.kernels.interventional_tables_cpu`); every other path keeps the grouped
background masks. The tables hold the same float64 sums, so the values must be bit-identical
with tables off, on for some paths only, or on for every path, and equal to the oracle.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_interventional import close, pack

from distshap.dispatch import explain_rows
from distshap.interventional import build_background
from distshap.kernels import interventional_tables_cpu as tables_cpu
from distshap.plan.config import config_context
from distshap.plan.interventional import CPU_TABLE_MAX_FEATURES, cpu_table_plan

import naive
import tiny

MODELS = {
    "categorical_3_groups": tiny.random_ensemble(
        11, n_features=5, n_trees=6, depth=3, n_groups=3, n_categorical=2
    ),
    "deep": tiny.random_ensemble(4, n_features=6, n_trees=3, depth=5),
}


def _values(packed, X, background, interactions, **changes):
    with config_context(**changes):
        return explain_rows(packed, X, interactions, "cpu", background=background)


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("interactions", [False, True], ids=["shap", "interactions"])
def test_tables_give_the_grouped_mask_bits(name, interactions):
    ens = MODELS[name]
    packed = pack(ens)
    X = tiny.random_rows(1, ens, n=12)
    background = build_background(packed, tiny.random_rows(2, ens, n=9))
    k = np.diff(packed.path_offsets) - 1
    limit = int(np.median(k))  # some paths with a table, some without
    assert (k <= limit).any() and (k > limit).any()
    off = dict(interventional_table_max_features=0,
               interventional_interaction_table_max_features=0)  # fmt: skip
    some = dict(interventional_table_max_features=limit,
                interventional_interaction_table_max_features=limit)  # fmt: skip
    masks = _values(packed, X, background, interactions, **off)
    mixed = _values(packed, X, background, interactions, **some)
    tables = _values(packed, X, background, interactions)
    assert (cpu_table_plan(packed, interactions).shap >= 0).all()  # every path, by default
    np.testing.assert_array_equal(mixed, masks)
    np.testing.assert_array_equal(tables, masks)
    B = tiny.random_rows(2, ens, n=9)
    oracle = naive.interventional_interactions_rows if interactions else (
        naive.interventional_shap_rows)  # fmt: skip
    close(tables, oracle(ens, X, B))


def test_plan_limits_features_budget_and_interaction_tables():
    ens = MODELS["deep"]
    packed = pack(ens)
    k = np.diff(packed.path_offsets) - 1
    plan = cpu_table_plan(packed, interactions=True)
    assert (plan.shap >= 0).all() and (plan.interactions >= 0).all()
    assert not (cpu_table_plan(packed).interactions >= 0).any()  # only when asked for
    with config_context(interventional_table_max_features=int(k.min())):
        plan = cpu_table_plan(packed, interactions=True)
    assert ((plan.shap >= 0) == (k <= k.min())).all()
    assert not ((plan.interactions >= 0) & (plan.shap < 0)).any()
    one = 8 * int(k.min()) << int(k.min())  # the float64 bytes of one shortest path's table
    with config_context(interventional_table_budget_bytes=one):
        assert (cpu_table_plan(packed).shap >= 0).sum() == 1


def test_plan_caps_the_features_of_a_cpu_table():
    from distshap.warmup import chain_ensemble

    n = CPU_TABLE_MAX_FEATURES + 1
    packed = pack(chain_ensemble(n, n))
    k = np.diff(packed.path_offsets) - 1
    assert k.max() == n
    with config_context(interventional_table_max_features=n + 1):
        plan = cpu_table_plan(packed)
    assert ((plan.shap >= 0) == (k <= CPU_TABLE_MAX_FEATURES)).all()


def test_tables_are_kept_per_background_and_model():
    ens = MODELS["categorical_3_groups"]
    packed = pack(ens)
    first = build_background(packed, tiny.random_rows(2, ens, n=9))
    again = build_background(packed, tiny.random_rows(2, ens, n=9))
    other = build_background(packed, tiny.random_rows(3, ens, n=9))
    kept = tables_cpu.background_tables(packed, first, False)
    assert tables_cpu.background_tables(packed, again, False) is kept  # same digest
    assert not kept.shap.flags.writeable
    fresh = tables_cpu.background_tables(packed, other, False)
    assert fresh is not kept and not np.array_equal(fresh.shap, kept.shap)
    with config_context(interventional_table_max_features=1):
        assert tables_cpu.background_tables(packed, first, False) is not kept


@pytest.mark.parametrize("interactions", [False, True], ids=["shap", "interactions"])
def test_a_bare_leaf_tree_and_two_groups_keep_the_bits(interactions):
    ens = tiny.multiclass_ensemble()  # tree 4 is a bare leaf (the bias's alone)
    packed = pack(ens)
    X = tiny.random_rows(1, ens, n=10)
    B = tiny.random_rows(2, ens, n=7)
    background = build_background(packed, B)
    off = dict(interventional_table_max_features=0,
               interventional_interaction_table_max_features=0)  # fmt: skip
    tables = _values(packed, X, background, interactions)
    np.testing.assert_array_equal(tables, _values(packed, X, background, interactions, **off))
    oracle = naive.interventional_interactions_rows if interactions else (
        naive.interventional_shap_rows)  # fmt: skip
    close(tables, oracle(ens, X, B))
