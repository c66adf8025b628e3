"""CPU kernels: serial ``nogil`` Numba functions run over row ranges in threads.

Each row is processed on its own, paths in packed order, contributions accumulated in float64
and stored as float32: results do not depend on the thread count, the batch or the chunking.
SHAP values (:mod:`distshap.kernels.quadrature_cpu`): paths with a SHAP pattern table cost an
interval test per element and one table row; the others are integrated exactly by
Gauss-Legendre quadrature, sibling units (:mod:`distshap.plan.units`) each as one path. The
tables are this backend's own: which paths get one is the packed model's policy
(:func:`distshap.plan.tables.choose_tables`), and they are filled in float64 on the first SHAP
call and kept per model digest (:func:`shap_tables`). Interaction values
(:mod:`distshap.kernels.interactions_cpu`) the same way: interaction pattern tables for short
paths, the quadrature of the pair integrands (degree ``k - 2``, the SHAP value's nodes) for the
others, each pair once and mirrored, the diagonal ``phi_i - sum_{j != i} phi_ij``. Both run
through :func:`distshap.parallel.run_ranges` (a serial function in threads: no parallel
region, so no threading-layer lock, and it compiles in about half the time of a parfor).
"""

from __future__ import annotations

import numpy as np

from distshap.kernels import interactions_cpu, quadrature_cpu
from distshap.kernels.interventional_cpu import interventional_values
from distshap.packed import PackedModel, clear_host_forms, host_form
from distshap.plan.config import get_config
from distshap.plan.tables import choose_tables, path_features, table_values
from distshap.plan.units import UNIT_LEVELS, sibling_units

__all__ = [
    "clear_cache",
    "interaction_slot_values",
    "interaction_values",
    "interventional_values",
    "shap_tables",
    "shap_units",
    "shap_values",
]

#: Models whose SHAP tables are kept (each up to ``packed.table_budget_bytes``).
TABLE_CACHE_SIZE = 4


def shap_tables(packed: PackedModel) -> tuple[np.ndarray, np.ndarray]:
    """The SHAP pattern tables of ``packed``: ``(table_offsets, tables)``, built on first use.

    ``table_offsets`` (int64, per path, -1: no table) follows the model's table policy
    (:func:`distshap.plan.tables.choose_tables`); ``tables`` holds the float32 values. Kept for the
    last :data:`TABLE_CACHE_SIZE` model digests (a model without a digest: built every call).
    """
    return host_form(packed, "shap tables", lambda: _shap_tables(packed), TABLE_CACHE_SIZE)


def _shap_tables(packed: PackedModel) -> tuple[np.ndarray, np.ndarray]:
    k = path_features(packed.path_offsets)
    offsets = choose_tables(k, packed.table_budget_bytes, packed.max_table_features)
    tables = quadrature_cpu.fill_tables(
        packed.path_offsets,
        packed.zero_fraction,
        packed.path_value,
        offsets,
        table_values(k, offsets),
    )
    return offsets, tables


def shap_units(packed: PackedModel, levels: int) -> tuple:
    """The sibling units of ``levels`` levels (1 to 3) of ``packed``'s paths without a SHAP
    table, as the kernel takes them (:func:`~distshap.kernels.quadrature_cpu.unit_arrays`),
    kept beside its tables."""
    selected = shap_tables(packed)[0] < 0
    return host_form(packed, f"shap units {int(levels)}",
                     lambda: quadrature_cpu.unit_arrays(sibling_units(packed, selected, levels)),
                     TABLE_CACHE_SIZE)  # fmt: skip


def clear_cache() -> None:
    """Drop every cached SHAP and interaction table and the SHAP units."""
    units = (f"shap units {levels}" for levels in range(1, UNIT_LEVELS + 1))
    clear_host_forms("shap tables", *units, "interaction tables")


def _as_rows(X: np.ndarray, packed: PackedModel) -> np.ndarray:
    X = np.ascontiguousarray(X, dtype=np.float32)
    if X.ndim != 2 or X.shape[1] != packed.num_features:
        raise ValueError(f"X must have shape (n_rows, {packed.num_features}), got {X.shape}")
    return X


def shap_values(packed: PackedModel, X: np.ndarray) -> np.ndarray:
    """SHAP values of every row of ``X``: float32 array ``(n, G, F + 1)``, bias last.

    Parameters
    ----------
    packed : PackedModel
        Its SHAP tables are filled on the first call (:func:`shap_tables`).
    X : array (n, F)
        Kernel input: :func:`distshap.inputs.prepare_rows` of the user's rows (it applies the
        model's encoding: raw rows of a float64 model would take other branches).
    """
    X = _as_rows(X, packed)
    table_offsets, tables = shap_tables(packed)  # paths without a table: quadrature
    levels = get_config().quadrature_unit_levels
    units = shap_units(packed, levels) if levels else None
    return quadrature_cpu.shap_values(packed, X, table_offsets, tables, units)


def interaction_values(packed: PackedModel, X: np.ndarray) -> np.ndarray:
    """SHAP interaction values of every row: float32 ``(n, G, F + 1, F + 1)``, bias last.

    Interaction pattern tables for short paths (filled on the first call and kept per model
    digest), Gauss-Legendre quadrature for the others (:mod:`distshap.kernels.interactions_cpu`).
    """
    return interactions_cpu.interaction_values(packed, _as_rows(X, packed))


def interaction_slot_values(packed: PackedModel, X: np.ndarray, slots) -> np.ndarray:
    """Interaction values of every row in slot form: float32 ``(n, S)``.

    ``slots`` is the model's :class:`distshap.pair_slots.PairSlots`; slot ``s`` holds the bits of
    the matrix entry ``[g, slot_i[s], slot_j[s]]`` that :func:`interaction_values` gives (the
    bias entry ``[F, F]``, the expected value, is not a slot).
    """
    return interactions_cpu.interaction_slot_values(packed, _as_rows(X, packed), slots)
