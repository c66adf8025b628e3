"""The GPU plan of a packed model, on the host: which path runs on which CUDA kernel.

SHAP values: the regular paths that :func:`shap_table_offsets` gives a SHAP table run in the
table kernel, the other regular paths in the quadrature kernels, oversize paths (longer than a
warp) in the fallback kernel. The choice is one function, so a cost model makes it
(:func:`distshap.plan.tables.gpu_shap_table_offsets`); with ``table_budget_bytes=0`` every
regular path runs in the quadrature kernels. Interaction values: interaction tables for the
short paths (:func:`interaction_table_offsets`; none on models whose interaction matrix is too
wide for a block's shared memory, :func:`interaction_tables_too_wide`), the quadrature kernels
for the others. :func:`plan_arrays` lays a plan out as host arrays (the device model copies
them); :func:`strategy_stats` reports it without a GPU.

Fixed point: every contribution is rounded or truncated to int64 at ``2**s`` and added with
integer atomics (associative, so bits do not depend on the order). A path's SHAP contribution
is at most ``|v|`` and an interaction entry at most ``k |v|``, so with ``B`` the largest sum of
those bounds over one output group, ``s = 62 - ceil(log2(B + 1)) - 1`` (clamped to ``[-60,
60]``) keeps every sum below ``2**61`` (:func:`fixed_point_shift`).
"""

from __future__ import annotations

import math
import threading
import weakref

import numpy as np

from distshap.packed import PackedModel
from distshap.plan import tables
from distshap.plan.config import get_config
from distshap.plan.costs import KernelCosts, device_costs
from distshap.plan.geometry import (
    REGULAR_MAX_K,
    SHAP_TABLE_MAX_FEATURES,
    interaction_tile_fits,
    local_tile_model,
    quadrature_node_index,
    quadrature_warps,
    shared_tile_rows,
    tile_bound,
)
from distshap.plan.launches import local_chunks, nonempty, quadrature_launches
from distshap.plan.units import sibling_units, tail_columns

__all__ = [
    "fixed_point_shift",
    "general_heads",
    "interaction_table_offsets",
    "interaction_tables_too_wide",
    "keep_path_info",
    "pair_partners",
    "path_bounds",
    "path_info",
    "plan_arrays",
    "shap_table_offsets",
    "shap_table_policy",
    "strategy_stats",
]


def fixed_point_shift(bound: float) -> int:
    """Fixed-point fraction bits ``s`` for outputs bounded by ``bound`` (module docstring)."""
    s = 62 - math.ceil(math.log2(float(bound) + 1.0)) - 1
    return int(min(60, max(-60, s)))


def path_bounds(packed: PackedModel) -> tuple[float, float]:
    """Largest sum over one output group of the paths' SHAP bounds ``|v|`` and interaction
    bounds ``k |v|`` (module docstring)."""
    k = path_info(packed)[0]
    v = np.abs(np.asarray(packed.path_value, np.float64))
    g = np.asarray(packed.path_group)  # np.bincount casts it (int32) to intp itself
    G = packed.num_groups
    shap = np.bincount(g, weights=v, minlength=G) if g.size else np.zeros(1)
    inter = np.bincount(g, weights=v * np.maximum(k, 1), minlength=G) if g.size else np.zeros(1)
    return float(shap.max(initial=0.0)), float(inter.max(initial=0.0))


_PATH_INFO: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_PATH_INFO_LOCK = threading.Lock()  # its own lock: plan builders hold theirs


def path_info(packed: PackedModel) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(k, path_bin, regular)`` of ``packed``'s paths
    (:func:`~distshap.plan.tables.path_features`, :func:`~distshap.plan.tables.regular_paths`),
    computed once a model object and shared by the device model and its plans (read-only)."""
    with _PATH_INFO_LOCK:
        hit = _PATH_INFO.get(packed)
    if hit is not None:
        return hit
    k = tables.path_features(packed.path_offsets)
    path_bin, regular = tables.regular_paths(
        packed.bin_offsets, packed.path_offsets, lanes=REGULAR_MAX_K + 1
    )
    for a in (k, path_bin, regular):
        a.flags.writeable = False
    with _PATH_INFO_LOCK:
        _PATH_INFO[packed] = (k, path_bin, regular)
    return k, path_bin, regular


def keep_path_info(packed: PackedModel, info: tuple) -> tuple:
    """Make ``info``, the value :func:`path_info` gives ``packed`` (mapped back with a saved
    build: the same arrays bit for bit), the one it returns from now on, unless one is kept
    already; the one kept (read-only)."""
    with _PATH_INFO_LOCK:
        hit = _PATH_INFO.get(packed)
        if hit is None:
            for a in info:
                a.flags.writeable = False
            hit = _PATH_INFO[packed] = tuple(info)
    return hit


def shap_table_policy(packed: PackedModel) -> np.ndarray:
    """SHAP table offset of each path (-1: none) by the packed model's table policy alone.

    :func:`distshap.plan.tables.choose_tables` (``"k"`` values a pattern) over the regular paths
    (oversize paths never get one), within ``table_budget_bytes``, up to
    ``max_table_features`` (capped at the fill kernel's
    :data:`~distshap.plan.geometry.SHAP_TABLE_MAX_FEATURES`),
    shortest paths first: a table on every eligible path that fits.
    """
    k, _, regular = path_info(packed)
    lengths = np.where(regular, k, 0)  # k = 0: no table
    max_features = min(int(packed.max_table_features), SHAP_TABLE_MAX_FEATURES)
    return tables.choose_tables(lengths, packed.table_budget_bytes, max_features, "k")


def shap_table_offsets(packed: PackedModel, costs: KernelCosts | None = None) -> np.ndarray:
    """SHAP table offset of each path (-1: none), in the layout of
    :func:`distshap.plan.tables.choose_tables` with ``"k"`` values a pattern.

    The one place that decides which regular paths of the GPU's SHAP plan run on pattern tables
    (the others run the quadrature kernels; oversize paths never get one): the cost model's
    choice (:func:`distshap.plan.tables.gpu_shap_table_offsets`: tables where they are predicted
    to save time) within the packed model's table policy (``table_budget_bytes``,
    ``max_table_features`` capped at the fill kernel's
    :data:`~distshap.plan.geometry.SHAP_TABLE_MAX_FEATURES`;
    :func:`shap_table_policy` gives every eligible path a table), from the constants ``costs``
    (default: the current device kind's, :func:`distshap.plan.costs.device_costs`, never
    calibrated here; under the simulator or without a GPU, every eligible path). A
    deterministic function of the model, the device kind and settings: the bits depend on it.
    """
    k, path_bin, regular = path_info(packed)
    lengths = np.where(regular, k, 0)  # k = 0: no table
    max_features = min(int(packed.max_table_features), SHAP_TABLE_MAX_FEATURES)
    if costs is None:
        costs = device_costs()
    return tables.gpu_shap_table_offsets(
        lengths, packed.path_group, packed.table_budget_bytes, max_features, costs,
        num_features=packed.num_features, num_groups=packed.num_groups, path_bin=path_bin,
    )  # fmt: skip


def interaction_tables_too_wide(packed: PackedModel) -> bool:
    """Whether ``packed`` has more output columns ``F + 1`` than
    ``interaction_table_max_columns``: a row's interaction matrix is then too wide
    for a quadrature block's shared memory, the table and full-matrix kernels both add every
    value to global memory, and interaction tables do not pay (so it gets none)."""
    return packed.num_features + 1 > get_config().interaction_table_max_columns


def interaction_table_offsets(packed: PackedModel) -> np.ndarray:
    """Interaction table offset of each path (-1: none), by the host policy and the
    configuration's budget (paths without a SHAP table under the model's table policy get none).

    Models of more than ``interaction_table_max_columns`` output columns get no
    interaction tables (:func:`interaction_tables_too_wide`).
    """
    k = tables.path_features(packed.path_offsets)
    config = get_config()
    if interaction_tables_too_wide(packed):
        return np.full(k.shape[0], -1, dtype=np.int64)
    shap_offsets = tables.choose_tables(k, packed.table_budget_bytes, packed.max_table_features)
    return tables.interaction_table_offsets(
        k, shap_offsets, config.interaction_table_budget_bytes,
        config.interaction_table_max_features,
    )  # fmt: skip


def plan_arrays(packed: PackedModel, path_table: np.ndarray, local: bool = False,
                units: bool = False) -> dict:  # fmt: skip
    """Host arrays of a :class:`~.runtime.model.Plan` (tables, ``table_bytes`` and
    ``per_pattern`` aside) for per-path table offsets ``path_table``: the regular paths without
    a table go to the quadrature kernels (an oversize path's offset is ignored: the fallback
    kernel runs it).
    ``local``: with chunk-local feature tiles (:func:`~distshap.plan.launches.local_chunks`,
    each launch's of at most :func:`~distshap.plan.geometry.tile_bound` of its longest path)
    where the model has more features than that bound of its longest path (a unit's head
    holds its tail features).
    ``units`` (SHAP plans): quadrature paths run as sibling units
    (:func:`~distshap.plan.units.sibling_units` of ``quadrature_unit_levels`` and
    ``quadrature_unit_min_features``: ``unit_offsets``,
    ``unit_value`` float32, ``unit_lanes``; ``unit_pair``, :func:`pair_partners`), the members
    left out of the launches; else those four are None. Each launch's ``general_units``:
    whether one of its paths heads a unit other than a sibling pair (:func:`general_heads`; a
    kernel without the general fold runs the others)."""
    config = get_config()
    k, path_bin, regular = path_info(packed)
    has_table = path_table >= 0
    is_t = has_table & regular
    is_q = ~has_table & regular
    found = None
    if units:
        found = sibling_units(packed, is_q, config.quadrature_unit_levels,
                              config.quadrature_unit_min_features)  # fmt: skip
        is_q = is_q & ~found.members
    launches = quadrature_launches(
        k, packed.path_group, is_q, config.quadrature_nodes, config.quadrature_chunk_paths,
    )  # fmt: skip
    unit_pair = None
    if found is not None:
        general = general_heads(found.offsets, found.lanes)
        unit_pair = pair_partners(found.offsets, found.lanes, general)
        for launch in launches:
            launch["general_units"] = bool(general[launch["paths"]].any())
    table_maxk = _table_maxk(max(packed.num_bins, 1), path_bin, k, is_t)
    table_bins = np.flatnonzero(table_maxk > 0).astype(np.int32)
    if not packed.num_paths:
        lane_table = np.full(1, -1, np.int64)
    elif not has_table.any():  # no tables: no gather over the lanes
        lane_table = np.full(packed.lane_path.shape[0], -1, np.int64)
    else:
        lane_table = path_table[packed.lane_path]
    lane_column = None
    longest = int(k[is_q].max()) if is_q.any() else 0
    if local and local_tile_model(packed.num_features, longest) and launches:
        lane_column = _local_tiles(packed, launches, k, found, config)
    return dict(
        lane_table=np.ascontiguousarray(lane_table, np.int64),
        table_bins=nonempty(table_bins, np.int32),
        table_maxk=table_maxk,
        n_table_bins=int(table_bins.size),
        table_paths=int(is_t.sum()),
        quadrature=launches,
        lane_column=lane_column,
        unit_offsets=None if found is None else found.offsets,
        unit_value=None if found is None else found.value.astype(np.float32),
        unit_lanes=None if found is None else found.lanes,
        unit_pair=unit_pair,
    )


def general_heads(unit_offsets: np.ndarray, unit_lanes: np.ndarray) -> np.ndarray:
    """Per path: whether it heads a sibling unit other than a pair (two entries of one tail
    lane each, which the kernels fold by the pair's own step,
    :func:`~distshap.kernels.cuda.unit_fold.unit_is_pair`)."""
    entries = np.diff(unit_offsets)
    if unit_lanes.shape[0] < 2:
        return entries > 0
    first = np.minimum(unit_offsets[:-1], unit_lanes.shape[0] - 2)  # a pair's first entry
    pair = (entries == 2) & (unit_lanes[first, 1] < 0) & (unit_lanes[first + 1, 1] < 0)
    return (entries > 0) & ~pair


def pair_partners(unit_offsets: np.ndarray, unit_lanes: np.ndarray,
                  general: np.ndarray) -> np.ndarray:  # fmt: skip
    """Per path (int32, at least one): where it heads a sibling pair, the other path's tail
    lane (of the same position as the head's own, the pair's split element), else -1; the
    kernels built without the general fold read it instead of the unit's entries (``general``:
    :func:`general_heads`)."""
    heads = np.flatnonzero((np.diff(unit_offsets) > 0) & ~general)
    out = np.full(max(int(general.size), 1), -1, np.int32)
    out[heads] = unit_lanes[unit_offsets[heads] + 1, 0]
    return out


def _local_tiles(packed: PackedModel, launches: list, k: np.ndarray, found, config) -> np.ndarray:
    """Chunk-local tiles of every launch (written into each launch) and ``lane_column``: each
    launch's tiles as narrow as its own paths allow; a unit's tail lanes take the columns of
    their head's lanes of the same features."""
    lane_column = np.full(max(int(packed.feature.shape[0]), 1), -1, np.int16)
    for launch in launches:
        bound = tile_bound(int(k[launch["paths"]].max(initial=0)))
        launch.update(local_chunks(packed, launch["paths"], bound, config.quadrature_chunk_paths,
                                   lane_column, config.quadrature_tile_window))  # fmt: skip
    if found is not None and found.num_units:
        tail_columns(packed, found, lane_column)
    return lane_column


def _table_maxk(n_bins: int, path_bin: np.ndarray, k: np.ndarray, is_t: np.ndarray) -> np.ndarray:
    """Largest ``k`` of the table paths (``is_t``) of each bin, int32 (0: none). The bins
    increase in path order (a packed model), so a bin's table paths are one run: a maximum a
    run (``np.maximum.at`` where they do not)."""
    table_maxk = np.zeros(n_bins, np.int32)
    ids = np.flatnonzero(is_t)
    if ids.size == 0:
        return table_maxk
    b = path_bin[ids]
    if int(b[0]) >= 0 and bool(np.all(b[1:] >= b[:-1])):
        runs = np.flatnonzero(np.r_[True, b[1:] != b[:-1]])
        table_maxk[b[runs]] = np.maximum(np.maximum.reduceat(k[ids], runs), 0)
    else:
        np.maximum.at(table_maxk, b, k[ids])
    return table_maxk


def strategy_stats(packed: PackedModel, costs: KernelCosts | None = None) -> dict:
    """How the CUDA kernels will evaluate ``packed`` (host arithmetic only, no GPU needed).

    ``costs`` (:class:`~distshap.plan.costs.KernelCosts`) choose the SHAP tables
    (:func:`shap_table_offsets`; default: the current device kind's).

    Returns a dict with ``shap_table_paths``, ``shap_table_lanes`` and ``shap_table_bytes`` (SHAP
    values: the regular paths on SHAP tables, :func:`shap_table_offsets`, filled on the device on
    the first SHAP call), ``quadrature_paths`` and ``quadrature_lanes`` (SHAP values: the other
    paths of regular bins, run by the quadrature kernels), ``quadrature_nodes`` (node count -> those
    paths), ``oversize_paths`` and ``oversize_lanes`` (fallback kernel), ``interaction_table_paths``
    and ``interaction_table_bytes`` (tables of interaction values, filled on the device on the first
    interaction call; the other paths run the interaction quadrature kernel),
    ``interaction_tables_too_wide`` (none for that reason: :func:`interaction_tables_too_wide`),
    ``shared_tile_rows`` (SHAP, interactions: rows of the table kernel's shared-memory tile, 0 =
    accumulation in global memory), ``quadrature_shared`` (SHAP: whether every SHAP quadrature
    launch sums its rows in shared memory, with chunk-local feature tiles or a column per feature;
    interactions: whether the interaction quadrature kernel does), the SHAP quadrature kernel's
    tiles as launched (:func:`distshap.kernels.cuda.shap_quadrature.launch_quadrature`):
    ``quadrature_tiles`` (``"local"``: every launch with chunk-local feature tiles,
    :func:`~distshap.plan.launches.local_chunks`; ``"all"``: none, a column per feature or
    global atomics; ``"mixed"``; ``"none"``: no quadrature paths), ``quadrature_chunks``
    (blocks of a row tile, over the launches: local chunks where they run),
    ``quadrature_tile_columns`` (int64 sums a thread in the widest tile, 0 where every launch adds
    to global memory), ``quadrature_warps`` (the fewest warps a block over the launches, 0: a launch
    adds to global memory), ``quadrature_units`` (sibling units run as one path,
    :mod:`~distshap.plan.units`), ``quadrature_unit_members`` (their paths left out of the
    launches; ``quadrature_paths`` counts them, ``quadrature_chunks`` only the launched ones), and
    ``fixed_point_shift`` (SHAP, interactions).
    """
    lanes = np.diff(packed.path_offsets)
    k = lanes - 1
    regular = path_info(packed)[2]
    shap_offsets = shap_table_offsets(packed, costs)
    stab = (shap_offsets >= 0) & regular
    quad = regular & ~stab
    itab = (interaction_table_offsets(packed) >= 0) & regular
    shap_bound, inter_bound = path_bounds(packed)
    F1 = packed.num_features + 1
    G = packed.num_groups
    nodes = get_config().quadrature_nodes
    kernel_of = quadrature_node_index(k[quad], nodes)
    per_node = {int(nodes[q]): int((kernel_of == q).sum()) for q in np.unique(kernel_of)}
    tiles = _shap_tiles(packed, shap_offsets)
    return {
        "shap_table_paths": int(stab.sum()),
        "shap_table_lanes": int(lanes[stab].sum()),
        "shap_table_bytes": 4 * tables.table_values(k, np.where(stab, 0, -1), "k"),
        "quadrature_paths": int(quad.sum()),
        "quadrature_lanes": int(lanes[quad].sum()),
        "quadrature_nodes": per_node,
        "oversize_paths": int((~regular).sum()),
        "oversize_lanes": int(lanes[~regular].sum()),
        "interaction_table_paths": int(itab.sum()),
        "interaction_table_bytes": 4 * tables.table_values(k, np.where(itab, 0, -1), "k*k"),
        "interaction_tables_too_wide": interaction_tables_too_wide(packed),
        "shared_tile_rows": (shared_tile_rows(G * F1), shared_tile_rows(G * F1 * F1)),
        "quadrature_shared": (tiles.pop("shared"), interaction_tile_fits(F1)),
        **tiles,
        "fixed_point_shift": (fixed_point_shift(shap_bound), fixed_point_shift(inter_bound)),
    }


def _shap_tiles(packed: PackedModel, shap_offsets: np.ndarray) -> dict:
    """The SHAP quadrature launches' tiles as
    :func:`distshap.kernels.cuda.shap_quadrature.launch_quadrature` runs them (host arithmetic): a
    launch takes chunk-local feature tiles where the plan has them and its widest tile fits
    shared memory, else a column per feature (or global atomics)."""
    plan = plan_arrays(packed, shap_offsets, local=True, units=True)
    entries = np.diff(plan["unit_offsets"])  # a unit's head: its members, itself first
    local = plan["lane_column"] is not None
    n_features = int(packed.num_features)
    kinds, chunks, columns, warps = set(), 0, 0, []
    for launch in plan["quadrature"]:
        w = quadrature_warps(launch["local_columns"]) if local else 0
        if w > 0:
            kinds.add("local")
            chunks += int(launch["n_local"])
            columns = max(columns, int(launch["local_columns"]))
        else:
            kinds.add("all")
            chunks += int(launch["n_chunks"])
            w = quadrature_warps(n_features)
            columns = max(columns, n_features if w > 0 else 0)
        warps.append(w)
    return {
        "shared": min(warps) > 0 if warps else quadrature_warps(n_features) > 0,
        "quadrature_tiles": kinds.pop() if len(kinds) == 1 else "mixed" if kinds else "none",
        "quadrature_chunks": chunks,
        "quadrature_tile_columns": columns,
        "quadrature_warps": min(warps) if warps else 0,
        "quadrature_units": int(np.count_nonzero(entries)),
        "quadrature_unit_members": int(entries.sum()) - int(np.count_nonzero(entries)),
    }
