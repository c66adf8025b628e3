"""Host policy (distshap.plan.tables, plan.launches), the packed model without tables, the CPU
kernel's tables."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from distshap import packed as packed_module
from distshap.kernels import cpu
from distshap.packed import build_packed_model
from distshap.paths import extract_paths
from distshap.plan import tables
from distshap.plan.launches import quadrature_launches

import naive
import tiny


@pytest.mark.parametrize("per", ["k", "k*k"])
@pytest.mark.parametrize("budget", [0, 100, 2000, 1 << 20])
def test_choose_tables_shortest_first_within_budget(per, budget):
    rng = np.random.default_rng(budget)
    lengths = rng.integers(0, 16, size=200)
    offsets = tables.choose_tables(lengths, budget, max_features=12, values_per_pattern=per)
    chosen = offsets >= 0
    size = (1 << lengths) * (lengths * lengths if per == "k*k" else lengths)
    assert 4 * int(size[chosen].sum()) <= budget
    assert (lengths[chosen] >= 1).all() and (lengths[chosen] <= 12).all()
    if chosen.any() and (~chosen & (lengths >= 1) & (lengths <= 12)).any():
        assert lengths[chosen].max() <= lengths[~chosen & (lengths >= 1)].min()
    # laid out in path order, back to back
    ids = np.flatnonzero(chosen)
    starts = np.concatenate([[0], np.cumsum(size[ids])])[: ids.size]
    assert np.array_equal(offsets[ids], starts)
    assert tables.table_values(lengths, offsets, per) == int(size[chosen].sum())


def test_choose_tables_refuses_bad_policies():
    with pytest.raises(ValueError, match="max_table_features=25"):
        tables.choose_tables(np.array([3]), 1 << 20, max_features=25)
    with pytest.raises(ValueError, match="values_per_pattern"):
        tables.choose_tables(np.array([3]), 1 << 20, values_per_pattern="k**3")
    ens = tiny.random_ensemble(1, n_features=5, n_trees=3, depth=3)
    with pytest.raises(ValueError, match="too large"):
        build_packed_model(extract_paths(ens), max_table_features=30)


def test_interaction_tables_only_where_a_shap_table_is():
    lengths = np.array([1, 2, 3, 4, 5, 6])
    shap = tables.choose_tables(lengths, 4 * (2 + 8 + 24), 12)  # the first three
    inter = tables.interaction_table_offsets(lengths, shap, 1 << 30, 10)
    assert np.array_equal(shap >= 0, [True, True, True, False, False, False])
    assert np.array_equal(inter >= 0, shap >= 0)


def test_quadrature_launches_group_paths_by_exact_node_count():
    lengths = np.array([1, 2, 3, 4, 5, 9, 16, 2])
    group = np.array([0, 1, 0, 1, 0, 1, 0, 0])
    launches = quadrature_launches(lengths, group, np.ones(8, bool), (2, 4, 8), 2)
    assert [launch["n_nodes"] for launch in launches] == [2, 4, 8]
    for launch in launches:
        paths = launch["paths"]
        n = launch["n_nodes"]
        assert (2 * n >= lengths[paths]).all()
        for c in range(launch["n_chunks"]):
            part = paths[launch["offsets"][c] : launch["offsets"][c + 1]]
            assert 1 <= part.size <= 2 and (group[part] == launch["group"][c]).all()
    with pytest.raises(ValueError, match="fallback"):
        quadrature_launches(np.array([17]), np.zeros(1), np.ones(1, bool), (2, 4, 8), 2)


def test_packed_model_holds_no_tables_and_its_digest_names_the_policy():
    ens = tiny.random_ensemble(2, n_features=6, n_trees=5, depth=4, n_groups=2)
    paths = extract_paths(ens)
    packed = build_packed_model(paths)
    assert not hasattr(packed, "tables") and not hasattr(packed, "table_offsets")
    assert packed.digest == build_packed_model(paths).digest  # content-based
    assert packed.digest != build_packed_model(paths, table_budget_bytes=0).digest
    assert packed.digest != build_packed_model(paths, max_table_features=5).digest
    clone = pickle.loads(pickle.dumps(packed))
    assert clone.digest == packed.digest and clone.table_budget_bytes == packed.table_budget_bytes
    k = tables.path_features(packed.path_offsets)
    offsets = tables.choose_tables(k, packed.table_budget_bytes, packed.max_table_features)
    assert packed.stats["table_paths"] == int((offsets >= 0).sum())
    assert packed.stats["table_bytes"] == 4 * tables.table_values(k, offsets)


def test_cpu_tables_built_on_first_use_and_kept_per_digest():
    ens = tiny.random_ensemble(4, n_features=6, n_trees=6, depth=4, n_groups=1)
    X = tiny.random_rows(4, ens, 30, 0.1)
    packed = build_packed_model(extract_paths(ens), table_budget_bytes=3000)
    cpu.clear_cache()
    assert ("shap tables", packed.digest) not in packed_module._HOST_FORMS  # nothing filled yet
    got = cpu.shap_values(packed, X)
    offsets, tables = cpu.shap_tables(packed)
    assert cpu.shap_tables(packed)[1] is tables  # kept, not rebuilt
    assert tables.nbytes == packed.stats["table_bytes"] and (offsets >= 0).any()
    assert not (offsets >= 0).all()  # some paths run the DP
    clone = pickle.loads(pickle.dumps(packed))  # same digest: the same tables
    assert cpu.shap_tables(clone)[1] is tables
    ref = naive.treeshap_recursive_rows(ens, X).reshape(got.shape)
    np.testing.assert_allclose(got, ref, rtol=0, atol=2e-6 * max(1.0, np.abs(ref).max()))
    assert np.array_equal(cpu.shap_values(clone, X), got)
    cpu.clear_cache()
    assert np.array_equal(cpu.shap_values(packed, X), got)  # rebuilt: the same bits
