"""Predicted time of a SHAP call on the CUDA backend, from the cost constants of a device kind.

The model, per row (seconds of the whole device; ``k`` features of a path, ``n`` the node count
of its quadrature kernel, ``F`` features, ``G`` output groups)::

    quadrature  sum over its paths of  quad_path + k (quad_lane + n quad_lane_node
                                       + [no shared sums] quad_global_lane)
                + tile columns * quad_chunk_col                (shared sums: zeroed, flushed)
    tables      table_bins * table_bin + table_lanes * (table_lane + miss * table_miss_lane
                + [no shared tile] table_global_lane),  miss = max(0, 1 - l2_bytes / table_bytes)
    fallback    sum over oversize paths of  k**2 fallback_lane2
    finish      G (F + 1) out_value

plus ``launch`` per kernel launch and ``call`` per call (constants:
:class:`~distshap.plan.costs.KernelCosts`). The SHAP quadrature kernel sums a row in shared
memory, one int64 column per feature of the model (``tile columns = chunks * F``), or, for
models of more than ``quadrature_tile_features`` features, with chunk-local feature tiles, one
per feature of each chunk (``tile columns`` = the chunks' features, summed:
:func:`~distshap.plan.launches.local_chunks`); it adds to global memory (``quad_global_lane``)
only where the tile does not fit ``quadrature_shared_bytes``
(:func:`~distshap.plan.geometry.quadrature_tile_columns`). Models small enough for the
one-launch route (:func:`~distshap.plan.routes.small_fits`) cost ``sum of k**2 * small_lane2``
a row and ``small_call`` a call instead.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np

from distshap.packed import PackedModel
from distshap.plan import tables
from distshap.plan.config import get_config
from distshap.plan.costs import COST_FIELDS, SHIPPED, KernelCosts, miss_fraction
from distshap.plan.geometry import (
    local_tile_model,
    quadrature_node_index,
    quadrature_shared,
    quadrature_warps,
    shared_tile_rows,
    tile_bound,
)
from distshap.plan.launches import local_chunks, quadrature_launches
from distshap.plan.routes import small_fits

__all__ = [
    "ModelShape",
    "Prediction",
    "batch_rows_for",
    "launches_per_batch",
    "model_shape",
    "predict",
    "row_terms",
]


@dataclass(frozen=True, eq=False)
class ModelShape:
    """What the cost model needs of a packed model: per-path features ``k`` (int64), output
    group and bin, whether the bin is regular (one warp), ``num_features``, ``num_groups``;
    optionally each lane's feature (``lane_feature``, ``path_offsets``: the chunk-local feature
    tiles' flushes counted exactly)."""

    k: np.ndarray
    group: np.ndarray
    path_bin: np.ndarray
    regular: np.ndarray
    num_features: int
    num_groups: int
    max_table_features: int = 12
    table_budget_bytes: int = 1 << 30
    small: bool = False
    #: Feature of each lane and lane offsets of each path (``PackedModel.feature`` /
    #: ``path_offsets``), for the chunk-local feature tiles' exact flush count; ``None``: the
    #: count is estimated (:func:`row_terms`).
    lane_feature: np.ndarray | None = None
    path_offsets: np.ndarray | None = None


def model_shape(model: Any) -> ModelShape:
    """The :class:`ModelShape` of a :class:`~distshap.packed.PackedModel` (or a ModelShape)."""
    if isinstance(model, ModelShape):
        return model
    if not isinstance(model, PackedModel):
        raise TypeError(f"expected a PackedModel or ModelShape, got {type(model).__name__}")
    k = tables.path_features(model.path_offsets)
    path_bin, regular = tables.regular_paths(model.bin_offsets, model.path_offsets)
    return ModelShape(
        k=k, group=np.asarray(model.path_group, np.int64), path_bin=path_bin, regular=regular,
        num_features=int(model.num_features), num_groups=int(model.num_groups),
        max_table_features=int(model.max_table_features),
        table_budget_bytes=int(model.table_budget_bytes), small=small_fits(model, False),
        lane_feature=np.asarray(model.feature), path_offsets=np.asarray(model.path_offsets),
    )  # fmt: skip


@dataclass(frozen=True)
class Prediction:
    """Predicted time of one SHAP call of ``n_rows`` rows, with a breakdown per kernel.

    ``seconds`` (total), ``rows_per_second``; ``breakdown`` seconds per part ("quadrature",
    "tables", "fallback", "finish", "launches"; "small" on the one-launch route); the plan:
    ``table_paths``, ``table_bins``, ``table_bytes``, ``quadrature_paths``, ``oversize_paths``
    (all 0 on the small route); ``kind`` and ``source`` of the constants; ``route`` "regular"
    or "small" (:func:`distshap.plan.routes.small_fits`).
    """

    n_rows: int
    seconds: float
    rows_per_second: float
    breakdown: dict = field(default_factory=dict)
    table_paths: int = 0
    table_bins: int = 0
    table_bytes: int = 0
    quadrature_paths: int = 0
    oversize_paths: int = 0
    kind: str = ""
    source: str = ""
    route: str = "regular"

    def to_dict(self) -> dict:
        """JSON-serialisable."""
        return asdict(self)


def row_terms(shape: ModelShape, table_offsets: np.ndarray, l2_bytes: int) -> dict[str, float]:
    """Coefficients of each per-row constant: seconds per row = ``sum(terms[n] * costs.n)``
    (linear in the constants once ``l2_bytes`` fixes the miss share); calibration fits on these.
    """
    config = get_config()
    nodes, chunk_paths = config.quadrature_nodes, config.quadrature_chunk_paths
    k, F, G = shape.k, shape.num_features, shape.num_groups
    table_offsets = np.asarray(table_offsets, np.int64)
    if table_offsets.shape != k.shape:
        raise ValueError(f"table offsets have shape {table_offsets.shape}, paths {k.shape}")
    is_t = (table_offsets >= 0) & shape.regular
    is_q = (table_offsets < 0) & shape.regular
    over = ~shape.regular
    idx = quadrature_node_index(k[is_q], nodes)
    if idx.size and int(idx.max()) >= len(nodes):
        raise ValueError(f"paths of more than {2 * nodes[-1]} features need the fallback kernel")
    n = np.asarray(nodes, np.float64)[idx]
    tshared = shared_tile_rows(G * (F + 1)) > 0
    kq, kt, ko = k[is_q].astype(np.float64), k[is_t].astype(np.float64), k[over].astype(float)
    global_lanes, tile_columns = _quadrature_sums(shape, is_q, idx, nodes, chunk_paths)
    table_bytes = 4.0 * float((np.ldexp(1.0, k[is_t]) * kt).sum())
    return {
        "quad_path": float(is_q.sum()),
        "quad_lane": float(kq.sum()),
        "quad_lane_node": float((kq * n).sum()),
        "quad_global_lane": global_lanes,
        "quad_chunk_col": tile_columns,
        "table_bin": float(np.unique(shape.path_bin[is_t]).size),
        "table_lane": float(kt.sum()),
        "table_miss_lane": miss_fraction(table_bytes, l2_bytes) * float(kt.sum()),
        "table_global_lane": 0.0 if tshared else float(kt.sum()),
        "fallback_lane2": float((ko * ko).sum()),
        "out_value": float(G * (F + 1)),
        "small_lane2": 0.0,
    }


def _quadrature_sums(shape: ModelShape, is_q: np.ndarray, idx: np.ndarray,
                     nodes: tuple[int, ...], chunk_paths: int) -> tuple[float, float]:  # fmt: skip
    """``(global lanes, tile columns)`` of the SHAP quadrature paths ``is_q`` (node index
    ``idx`` each) a row: the feature lanes whose contributions go to global memory, and the
    int64 columns of shared memory zeroed and flushed (module docstring), as
    :func:`distshap.kernels.cuda.shap_quadrature.launch_quadrature` runs them."""
    k, F, G = shape.k, int(shape.num_features), int(shape.num_groups)
    if not is_q.any():
        return 0.0, 0.0
    lanes = float(k[is_q].sum())
    # chunks of each (node count, group): chunk_paths paths at most
    key = idx.astype(np.int64) * (G + 1) + shape.group[is_q]
    counts = np.unique(key, return_counts=True)[1]
    chunks = int((-(-counts // chunk_paths)).sum())
    wide_shared = quadrature_warps(F) > 0  # the all-features tile fits
    all_features = (0.0, float(chunks * F)) if wide_shared else (lanes, 0.0)
    if not local_tile_model(F, int(k[is_q].max())):
        return all_features
    if shape.lane_feature is None or shape.path_offsets is None:
        # no lane features, an estimate: a column a feature of each all-features chunk (the
        # local chunks flush more where a feature recurs in several), at most one a lane
        if not quadrature_shared(F):
            return all_features
        return 0.0, float(min(chunks * F, lanes))
    return _local_sums(shape, is_q, nodes, chunk_paths, wide_shared)


def _local_sums(shape: ModelShape, is_q: np.ndarray, nodes: tuple[int, ...], chunk_paths: int,
                wide_shared: bool) -> tuple[float, float]:  # fmt: skip
    """:func:`_quadrature_sums` with chunk-local feature tiles, from the lanes' features: the
    chunks :func:`~distshap.plan.launches.local_chunks` forms, launch by launch (one
    whose widest tile does not fit shared memory runs the all-features kernel)."""
    config = get_config()
    F = int(shape.num_features)
    lanes = SimpleNamespace(
        path_offsets=np.asarray(shape.path_offsets, np.int64),
        feature=np.asarray(shape.lane_feature, np.int64), path_group=shape.group,
        num_features=F,
    )  # fmt: skip
    column = np.full(max(lanes.feature.size, 1), -1, np.int16)  # scratch
    window = int(config.quadrature_tile_window)  # as plan_arrays chunks them
    global_lanes = tile_columns = 0.0
    for launch in quadrature_launches(shape.k, shape.group, is_q, nodes, chunk_paths):
        bound = tile_bound(int(shape.k[launch["paths"]].max(initial=0)))  # as plan_arrays
        tiles = local_chunks(lanes, launch["paths"], bound, chunk_paths, column, window)
        if quadrature_warps(tiles["local_columns"]) > 0:
            tile_columns += float(tiles["local_feature_offsets"][-1])
        elif wide_shared:
            tile_columns += float(launch["n_chunks"] * F)
        else:
            global_lanes += float(shape.k[launch["paths"]].sum())
    return global_lanes, tile_columns


def launches_per_batch(shape: ModelShape, table_offsets: np.ndarray) -> int:
    """Kernel launches of one row batch: tables (one), quadrature (one per node count used),
    fallback (one per 65,535 oversize paths), finish (one)."""
    nodes = get_config().quadrature_nodes
    table_offsets = np.asarray(table_offsets, np.int64)
    is_q = (table_offsets < 0) & shape.regular
    n_over = int((~shape.regular).sum())
    used = np.unique(quadrature_node_index(shape.k[is_q], nodes)).size
    n_tables = int(bool(((table_offsets >= 0) & shape.regular).any()))
    return n_tables + int(used) + -(-n_over // 65535) + 1


def _choice_offsets(shape: ModelShape, choice: Any, costs: KernelCosts) -> np.ndarray:
    if isinstance(choice, str):
        if choice == "quadrature":
            return np.full(shape.k.shape, -1, np.int64)
        if choice == "auto":
            return tables.gpu_shap_table_offsets(
                shape.k, shape.group, shape.table_budget_bytes, shape.max_table_features, costs,
                num_features=shape.num_features, num_groups=shape.num_groups,
                path_bin=shape.path_bin,
            )  # fmt: skip
        if choice == "tables":
            return tables.choose_tables(
                np.where(shape.regular, shape.k, 0), shape.table_budget_bytes,
                shape.max_table_features,
            )  # fmt: skip
        raise ValueError(
            f"choice must be 'auto', 'quadrature', 'tables' or per-path table offsets, got "
            f"{choice!r}"
        )
    return np.asarray(choice, np.int64)


def batch_rows_for(width: int, n_rows: int, batch_budget: int | None = None) -> int:
    """Rows per batch of the launcher for ``width`` accumulator values a row (its budget,
    without the free-memory cap)."""
    if batch_budget is None:
        batch_budget = get_config().batch_budget_bytes
    return max(1, min(n_rows, 1 << 24, batch_budget // (8 * max(1, width))))


def predict(
    model: Any, choice: Any = "auto", costs: KernelCosts | None = None, n_rows: int = 1_000_000
) -> Prediction:
    """Predicted time of explaining ``n_rows`` rows of ``model`` on the CUDA backend.

    Parameters
    ----------
    model : PackedModel or ModelShape
    choice : {"auto", "quadrature", "tables"} or int array (n_paths,)
        "auto": the cost model's choice (:func:`distshap.plan.tables.gpu_shap_table_offsets`);
        "quadrature": no tables; "tables": every path a table within the model's budget and
        feature limit, shortest first (:func:`distshap.plan.tables.choose_tables`); or per-path
        table offsets (-1: none).
    costs : KernelCosts, optional
        Default: the shipped generic constants.
    n_rows : int
        Rows of the call (>= 1).
    """
    if costs is None:
        costs = SHIPPED["generic"]
    if not isinstance(costs, KernelCosts):
        raise TypeError(f"costs must be KernelCosts, got {type(costs).__name__}")
    if isinstance(n_rows, bool) or not isinstance(n_rows, (int, np.integer)) or n_rows < 1:
        raise ValueError(f"n_rows must be an integer >= 1, got {n_rows!r}")
    shape = model_shape(model)
    offsets = _choice_offsets(shape, choice, costs)
    n = int(n_rows)
    if shape.small:  # one launch, one warp a row: no tables, no quadrature
        lane2 = float((shape.k.astype(np.float64) ** 2).sum())
        breakdown = {"small": n * lane2 * costs.small_lane2, "launches": costs.small_call}
        seconds = float(sum(breakdown.values()))
        return Prediction(
            n_rows=n, seconds=seconds, rows_per_second=n / seconds if seconds > 0 else math.inf,
            breakdown=breakdown, kind=costs.kind, source=costs.source, route="small",
        )  # fmt: skip
    terms = row_terms(shape, offsets, costs.l2_bytes)
    per = {name: terms[name] * getattr(costs, name) for name in COST_FIELDS}
    width = shape.num_groups * (shape.num_features + 1)
    batches = -(-n // batch_rows_for(width, n))
    launches = batches * launches_per_batch(shape, offsets)
    breakdown = {
        "quadrature": n * sum(v for k, v in per.items() if k.startswith("quad_")),
        "tables": n * sum(v for k, v in per.items() if k.startswith("table_")),
        "fallback": n * per["fallback_lane2"],
        "finish": n * per["out_value"],
        "launches": launches * costs.launch + costs.call,
    }
    seconds = float(sum(breakdown.values()))
    is_t = (offsets >= 0) & shape.regular
    return Prediction(
        n_rows=n, seconds=seconds, rows_per_second=n / seconds if seconds > 0 else math.inf,
        breakdown=breakdown, table_paths=int(is_t.sum()), table_bins=int(terms["table_bin"]),
        table_bytes=int(4 * float((np.ldexp(1.0, shape.k[is_t]) * shape.k[is_t]).sum())),
        quadrature_paths=int(((offsets < 0) & shape.regular).sum()),
        oversize_paths=int((~shape.regular).sum()), kind=costs.kind, source=costs.source,
    )  # fmt: skip
