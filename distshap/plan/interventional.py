"""Which paths run on which interventional SHAP kernel (host arithmetic, no GPU).

A regular path (its bin fits a warp) of ``k`` features may get a background pattern table: its
background mean over the ``2**k`` patterns of the elements an explained row follows, ``k``
int64 values a pattern for SHAP values and ``k * k`` for interaction values, filled on the
device from the background's pattern counts (one count per pattern and path with a SHAP table).
Paths are chosen shortest first within the configured budgets and feature limits; interaction
tables only for paths with a SHAP table. Regular paths without a table run the direct kernels;
paths longer than a warp run the oversize kernel, one launch position per (path, element).

The CPU (:func:`cpu_table_plan`) keeps float64 tables of the same sizes, for paths of at most
:data:`CPU_TABLE_MAX_FEATURES` features too (a table's fill visits ``3**k`` pattern pairs);
its other paths combine grouped background masks per explained row.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from distshap.packed import PackedModel
from distshap.plan.config import Config, get_config
from distshap.plan.tables import choose_tables, path_features, regular_paths

__all__ = [
    "CPU_TABLE_MAX_FEATURES",
    "CpuTablePlan",
    "TablePlan",
    "bins_maxk",
    "cpu_table_plan",
    "oversize_elements",
    "table_plan",
]

#: Longest paths with a CPU table (its fill costs ``3**k`` pattern pairs per path).
CPU_TABLE_MAX_FEATURES = 10


@dataclass(frozen=True, eq=False)
class TablePlan:
    """The background tables of one model under one configuration.

    Attributes
    ----------
    k : int64 (n_paths,)
        Features of each path.
    regular : bool (n_paths,)
        Whether the path's bin fits a warp (else: the oversize kernel).
    shap, interactions : int64 (n_paths,)
        Offset of the path's SHAP (interaction) table in int64 values; -1: none.
    count : int64 (n_paths,)
        Offset of the path's pattern counts (paths with a SHAP table); -1: none.
    n_counts : int
        Pattern counts of all paths together.
    shap_max_features, interaction_max_features : int
        The longest paths with tables (the fill kernels' local arrays are this long).
    """

    k: np.ndarray
    regular: np.ndarray
    shap: np.ndarray
    interactions: np.ndarray
    count: np.ndarray
    n_counts: int
    shap_max_features: int
    interaction_max_features: int


def table_plan(packed: PackedModel, config: Config | None = None) -> TablePlan:
    """Which regular paths of ``packed`` get background pattern tables.

    Parameters
    ----------
    packed : PackedModel
    config : Config, optional
        Its ``interventional_table_max_features``, ``interventional_table_budget_bytes`` and
        the interaction fields set the limits (int64 values count twice a float32's bytes in
        :func:`distshap.plan.tables.choose_tables`); default :func:`get_config`.
    """
    cfg = get_config() if config is None else config
    k = path_features(packed.path_offsets)
    _, regular = regular_paths(packed.bin_offsets, packed.path_offsets, lanes=32)
    shap_max = cfg.interventional_table_max_features
    inter_max = cfg.interventional_interaction_table_max_features
    shap = choose_tables(
        np.where(regular, k, 0), cfg.interventional_table_budget_bytes // 2, shap_max
    )
    inter = choose_tables(
        np.where(shap >= 0, k, 0),
        cfg.interventional_interaction_table_budget_bytes // 2,
        inter_max,
        values_per_pattern="k*k",
    )
    has = shap >= 0
    sizes = np.where(has, np.int64(1) << np.minimum(k, 62), 0)
    count = np.where(has, np.cumsum(sizes) - sizes, -1)
    return TablePlan(k=k, regular=regular, shap=shap, interactions=inter, count=count,
                     n_counts=int(sizes.sum()), shap_max_features=shap_max,
                     interaction_max_features=inter_max)  # fmt: skip


@dataclass(frozen=True, eq=False)
class CpuTablePlan:
    """The background tables of one model on the CPU.

    Attributes
    ----------
    k : int64 (n_paths,)
        Features of each path.
    shap : int64 (n_paths,)
        Offset of the path's SHAP table (``2**k * k`` float64 values); -1: none.
    interactions : int64 (n_paths,)
        Offset of the path's interaction table (``2**k * k * k`` float64 values), only for
        paths with a SHAP table; -1: none (all -1 unless asked for).
    """

    k: np.ndarray
    shap: np.ndarray
    interactions: np.ndarray


def cpu_table_plan(packed: PackedModel, interactions: bool = False,
                   config: Config | None = None) -> CpuTablePlan:  # fmt: skip
    """Which paths of ``packed`` get CPU background tables, shortest first.

    Parameters
    ----------
    packed : PackedModel
    interactions : bool
        Plan the interaction tables too.
    config : Config, optional
        The limits and budgets of :func:`table_plan` (float64 values count twice a float32's
        bytes), the features capped at :data:`CPU_TABLE_MAX_FEATURES`; default
        :func:`get_config`.
    """
    cfg = get_config() if config is None else config
    k = path_features(packed.path_offsets)
    shap = choose_tables(
        k,
        cfg.interventional_table_budget_bytes // 2,
        min(cfg.interventional_table_max_features, CPU_TABLE_MAX_FEATURES),
    )
    inter = np.full_like(shap, -1)
    if interactions:
        inter = choose_tables(
            np.where(shap >= 0, k, 0),
            cfg.interventional_interaction_table_budget_bytes // 2,
            min(cfg.interventional_interaction_table_max_features, CPU_TABLE_MAX_FEATURES),
            values_per_pattern="k*k",
        )
    return CpuTablePlan(k=k, shap=shap, interactions=inter)


def bins_maxk(packed: PackedModel, k: np.ndarray,
              selected: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:  # fmt: skip
    """Bins holding a ``selected`` path (int32, at least one entry), the largest ``k`` of the
    selected paths per bin (int32, every bin), and how many bins hold one."""
    path_bin, _ = regular_paths(packed.bin_offsets, packed.path_offsets, lanes=32)
    maxk = np.zeros(max(packed.num_bins, 1), np.int32)
    np.maximum.at(maxk, path_bin[selected], k[selected].astype(np.int32))
    bins = np.flatnonzero(maxk > 0).astype(np.int32)
    return (bins if bins.size else np.zeros(1, np.int32)), maxk, int(bins.size)


def oversize_elements(k: np.ndarray, regular: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The (path, element position ``1..k``) pairs of the paths longer than a warp, int32."""
    over = np.flatnonzero(~regular)
    elem_path = np.repeat(over, k[over]).astype(np.int32)
    elem_pos = (np.concatenate([np.arange(1, kk + 1) for kk in k[over]]) if over.size
                else np.zeros(0)).astype(np.int32)  # fmt: skip
    return elem_path, elem_pos
