"""The CUDA kernels a SHAP call of a model's shape launches, as the helpers compile them ahead
(:func:`distshap.kernels.cuda.runtime.ptx.shap_kernel_names`); no GPU needed."""

from __future__ import annotations

import pytest

pytest.importorskip("numba.cuda")

from distshap.kernels.cuda.runtime import ptx  # noqa: E402
from distshap.plan.config import config_context  # noqa: E402


def test_a_narrow_deep_model_gets_its_node_counts_and_no_fallback() -> None:
    names = ptx.shap_kernel_names(8, 1, 16)
    assert names[:2] == ["lane_fill_kernel", "fill_shap_tables_kernel"]
    assert names[-4:] == ["finish_kernel", *ptx.MARGIN_KERNELS]
    quadrature = [n for n in names if n.startswith("shap_quadrature")]
    assert quadrature == ["shap_quadrature_kernel_2_2rows_shared_pairs",
                          "shap_quadrature_kernel_4_2rows_shared_pairs"]  # fmt: skip
    assert "oversize_kernel" not in names
    assert set(names) <= set(ptx._kernels()) | set(ptx.MARGIN_KERNELS)


def test_wide_models_get_local_tiles_and_long_paths_the_fallback() -> None:
    names = ptx.shap_kernel_names(784, 10, 40)
    assert "oversize_kernel" in names
    quadrature = [n for n in names if n.startswith("shap_quadrature")]
    assert quadrature and all("_local_2rows" in n for n in quadrature)
    assert len(quadrature) == len(ptx.get_config().quadrature_nodes)
    # the launches that can head sibling units of more than two paths: the general fold
    general = [n for n in quadrature if not n.endswith("_pairs")]
    assert general and all(2 * int(n.split("_")[3]) >= 9 for n in general)
    with config_context(quadrature_nodes=(4, 16)):
        names = ptx.shap_kernel_names(6, 1, 6)
    assert [n for n in names if n.startswith("shap_quadrature")] == [
        "shap_quadrature_kernel_4_2rows_shared_pairs"
    ]


def test_kernels_sharing_a_cache_index_go_to_one_helper() -> None:
    names = ptx.shap_kernel_names(54, 8, 16)
    groups = ptx.ahead_groups(names)
    assert sorted(n for g in groups for n in g) == sorted(names)
    quadrature = [g for g in groups if g[0].startswith("shap_quadrature")]
    assert len(quadrature) == 1 and len(quadrature[0]) == 4  # one factory's closures
    assert ("finish_kernel",) in groups


def test_only_two_row_kernels_have_builds_without_the_general_fold() -> None:
    """A node count whose launches can only head pairs gets the two-row kernels' lean builds
    (``_pairs``); the one-row kernels have one build; with units of two paths at most every
    node count's two-row kernels are lean, and all are known to the helpers."""
    with config_context(quadrature_tile_features=512):  # one row a thread: no lean build
        names = ptx.shap_kernel_names(150, 1, 8)
    quadrature = [n for n in names if n.startswith("shap_quadrature")]
    assert quadrature == ["shap_quadrature_kernel_2_shared", "shap_quadrature_kernel_4_shared"]
    with config_context(quadrature_unit_levels=1):
        names = ptx.shap_kernel_names(54, 8, 16)
        known = ptx._ahead_kernels()
    quadrature = [n for n in names if n.startswith("shap_quadrature")]
    assert len(quadrature) == 4 and all(n.endswith("_pairs") for n in quadrature), quadrature
    assert set(quadrature) <= set(known)
