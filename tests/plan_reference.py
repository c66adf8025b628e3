"""Frozen copies of the SHAP plan's host functions as they were before their speed-up
(strategy.py and kernels/cuda/model.py at commit e070de4): the reference that
tests/test_plan_gpu.py compares the current functions against, array for array."""

from __future__ import annotations

import numpy as np

from distshap.plan.tables import TABLE_MIN_SAVING

_PER_PATTERN = ("k", "k*k")


def _table_sizes(lengths: np.ndarray, values_per_pattern: str) -> np.ndarray:
    if values_per_pattern not in _PER_PATTERN:
        raise ValueError(f"values_per_pattern must be 'k' or 'k*k', got {values_per_pattern!r}")
    per = lengths * lengths if values_per_pattern == "k*k" else lengths
    return (np.int64(1) << np.minimum(lengths, 62)) * per


def _layout(sizes: np.ndarray, chosen: np.ndarray, n: int) -> np.ndarray:
    """Offsets of the ``chosen`` paths' tables (sizes in values), laid out in path order."""
    chosen = np.sort(chosen)
    offsets = np.full(n, -1, dtype=np.int64)
    starts = np.zeros(chosen.shape[0], dtype=np.int64)
    np.cumsum(sizes[chosen][:-1], out=starts[1:])
    offsets[chosen] = starts
    return offsets


def gpu_shap_table_offsets(
    lengths: np.ndarray,
    path_group: np.ndarray,
    budget_bytes: int,
    max_features: int,
    costs,
    *,
    num_features: int | None = None,
    num_groups: int | None = None,
    path_bin: np.ndarray | None = None,
) -> np.ndarray:
    """SHAP table offset of each path on the GPU (-1: quadrature), by the cost model.

    Candidates are the paths of ``1..max_features`` features whose predicted table cost per
    row is below their quadrature cost (:mod:`distshap.plan.costs`). They are taken greedily by
    saving per table byte (ties: lower path index first) while the tables fit ``budget_bytes``;
    of those prefixes the one of least predicted time wins, counting the table bins it opens
    and the L2 misses its total size brings. A pure function of its arguments, so every GPU of
    one kind makes the same choice.

    Parameters
    ----------
    lengths : int array (n_paths,)
        Features ``k`` of each path (packed order).
    path_group : int array (n_paths,)
        Output group of each path.
    budget_bytes : int
        Largest total size of the float32 tables (``2**k * k`` values a path).
    max_features : int
        Paths with more features get no table (at most 24).
    costs : KernelCosts
        The device kind's constants (:func:`distshap.plan.costs.costs_for`).
    num_features, num_groups : int, optional
        Output width ``num_groups * (num_features + 1)`` (whether sums fit shared memory);
        default: the largest group + 1 and the largest feature count of any path.
    path_bin : int array (n_paths,), optional
        Bin of each path (:func:`regular_paths`): counts the table bins exactly; without it each
        path is charged its share ``(k + 1) / 32`` of a bin.

    Returns
    -------
    int64 array (n_paths,)
        As :func:`choose_tables`: start of each path's table (in float32 values), tables laid
        out in path order; -1 for the paths that run the quadrature kernels.
    """
    from distshap.plan import costs as cost_model

    if not isinstance(costs, cost_model.KernelCosts):
        raise TypeError(f"costs must be distshap.plan.costs.KernelCosts, got {type(costs)!r}")
    k = np.asarray(lengths)
    if k.ndim != 1 or not np.issubdtype(k.dtype, np.integer):
        raise ValueError(f"lengths must be a 1-D integer array, got {k.dtype} {k.shape}")
    k = k.astype(np.int64)
    group = np.asarray(path_group)
    if group.shape != k.shape:
        raise ValueError(f"path_group has shape {group.shape}, lengths {k.shape}")
    if isinstance(budget_bytes, bool) or int(budget_bytes) != budget_bytes or budget_bytes < 0:
        raise ValueError(f"budget_bytes must be an integer >= 0, got {budget_bytes!r}")
    if isinstance(max_features, bool) or int(max_features) != max_features:
        raise ValueError(f"max_features must be an integer, got {max_features!r}")
    if max_features > 24:
        raise ValueError(f"max_table_features={max_features} is too large: tables grow as 2**k")
    if k.size and int(k.min()) < 0:
        raise ValueError("lengths must be >= 0")
    n = k.shape[0]
    G = int(group.max()) + 1 if num_groups is None and n else int(num_groups or 1)
    F = int(k.max(initial=0)) if num_features is None else int(num_features)
    if path_bin is not None:
        path_bin = np.asarray(path_bin, np.int64)
        if path_bin.shape != k.shape:
            raise ValueError(f"path_bin has shape {path_bin.shape}, lengths {k.shape}")
    eligible = (k >= 1) & (k <= max_features)
    size = np.where(eligible, _table_sizes(np.minimum(k, 24), "k"), 0)
    quad = cost_model.quadrature_path_seconds(costs, k, F)
    lane = cost_model.table_lane_seconds(costs, G * (F + 1))
    gain = quad - k * lane  # per row, bins and misses aside
    share = costs.table_bin * (k + 1) / 32.0
    cand = np.flatnonzero(eligible & (gain - share > 0))
    if cand.size == 0 or budget_bytes == 0:
        return np.full(n, -1, dtype=np.int64)
    density = (gain - share)[cand] / (4.0 * size[cand])
    order = cand[np.lexsort((cand, -density))]  # best saving per byte first, then path index
    cum_bytes = 4 * np.cumsum(size[order])
    order = order[cum_bytes <= budget_bytes]
    if order.size == 0:
        return np.full(n, -1, dtype=np.int64)
    cum_bytes = cum_bytes[: order.size].astype(np.float64)
    if path_bin is None:
        bins = np.cumsum(share[order]) / max(costs.table_bin, 1e-300)
    else:  # a bin counts once, from its first table path on
        b = path_bin[order]
        first = np.zeros(order.size, bool)
        first[np.unique(b, return_index=True)[1]] = True
        bins = np.cumsum(first)
    miss = np.maximum(0.0, 1.0 - costs.l2_bytes / cum_bytes)
    total = (
        -np.cumsum(gain[order])
        + bins * costs.table_bin
        + miss * costs.table_miss_lane * np.cumsum(k[order])
    )
    best = int(np.argmin(total))
    # Tables only where the predicted saving is clearly beyond the model's error: a smaller one
    # is as likely a loss (TABLE_MIN_SAVING).
    margin = TABLE_MIN_SAVING if costs.min_saving is None else costs.min_saving
    if -total[best] <= margin * float(quad[k >= 1].sum()):
        return np.full(n, -1, dtype=np.int64)
    return _layout(size, order[: best + 1], n)


def regular_paths(
    bin_offsets: np.ndarray, path_offsets: np.ndarray, lanes: int = 32
) -> tuple[np.ndarray, np.ndarray]:
    """Bin of each path, and whether that bin is regular (at most ``lanes`` lanes: one warp).

    A path longer than a warp sits alone in an *oversize* bin.
    """
    if path_offsets.shape[0] <= 1:
        return np.zeros(0, np.int64), np.zeros(0, bool)
    bin_sizes = np.diff(bin_offsets)
    path_bin = np.searchsorted(bin_offsets, path_offsets[:-1], side="right") - 1
    return path_bin, bin_sizes[path_bin] <= lanes


def quadrature_node_index(lengths: np.ndarray, nodes: tuple[int, ...]) -> np.ndarray:
    """Index into ``nodes`` (increasing) of the smallest node count exact for each path.

    ``n`` Gauss-Legendre nodes integrate polynomials of degree ``2 n - 1`` exactly and a path of
    ``k`` features needs degree ``k - 1``: ``n >= ceil(k / 2)``. ``len(nodes)``: none is enough.
    """
    return np.searchsorted(np.asarray(nodes), (np.asarray(lengths) + 1) // 2)


def quadrature_launches(
    lengths: np.ndarray,
    path_group: np.ndarray,
    selected: np.ndarray,
    nodes: tuple[int, ...],
    chunk_paths: int,
) -> list[dict]:
    """The ``selected`` paths, one launch per node count, in chunks of one output group.

    Returns one dict per node count used: ``n_nodes``; ``paths`` (int32, sorted by group, then
    length); ``offsets`` (int64, chunk ``c`` is ``paths[offsets[c]:offsets[c + 1]]``, at most
    ``chunk_paths`` paths); ``group`` (int32, the group of each chunk); ``n_chunks``.
    """
    kernel_of = quadrature_node_index(lengths, nodes)
    if selected.any() and int(kernel_of[selected].max()) >= len(nodes):
        raise ValueError(f"paths of more than {2 * nodes[-1]} features need the fallback kernel")
    launches = []
    for q in np.unique(kernel_of[selected]):
        ids = np.flatnonzero(selected & (kernel_of == q))
        ids = ids[np.lexsort((lengths[ids], path_group[ids]))]  # by group, then length
        group = path_group[ids].astype(np.int64)
        seg_start = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
        seg_of = np.repeat(np.arange(seg_start.size), np.diff(np.r_[seg_start, ids.size]))
        pos = np.arange(ids.size) - seg_start[seg_of]
        starts = np.flatnonzero(pos % chunk_paths == 0)
        launches.append(dict(
            n_nodes=int(nodes[q]),
            paths=ids.astype(np.int32),
            offsets=np.r_[starts, ids.size].astype(np.int64),
            group=group[starts].astype(np.int32),
            n_chunks=int(starts.size),
        ))  # fmt: skip
    return launches


def shap_table_offsets(packed, costs) -> np.ndarray:
    """plan.gpu.shap_table_offsets (``costs`` given)."""
    from distshap.plan.geometry import SHAP_TABLE_MAX_FEATURES

    k = np.diff(np.asarray(packed.path_offsets, dtype=np.int64)) - 1
    path_bin, regular = regular_paths(packed.bin_offsets, packed.path_offsets, lanes=32)
    lengths = np.where(regular, k, 0)
    max_features = min(int(packed.max_table_features), SHAP_TABLE_MAX_FEATURES)
    return gpu_shap_table_offsets(
        lengths, packed.path_group, packed.table_budget_bytes, max_features, costs,
        num_features=packed.num_features, num_groups=packed.num_groups, path_bin=path_bin,
    )  # fmt: skip


def plan_core(packed, path_table: np.ndarray) -> dict:
    """plan.gpu.plan_arrays without the chunk-local tiles (``local=False``)."""
    from distshap.plan.config import get_config

    config = get_config()
    k = np.diff(np.asarray(packed.path_offsets, dtype=np.int64)) - 1
    path_bin, regular = regular_paths(packed.bin_offsets, packed.path_offsets, lanes=32)
    is_t = (path_table >= 0) & regular
    launches = quadrature_launches(
        k, packed.path_group, (path_table < 0) & regular, config.quadrature_nodes,
        config.quadrature_chunk_paths,
    )  # fmt: skip
    table_maxk = np.zeros(max(packed.num_bins, 1), np.int32)
    np.maximum.at(table_maxk, path_bin[is_t], k[is_t])
    table_bins = np.flatnonzero(table_maxk > 0).astype(np.int32)
    lane_table = path_table[packed.lane_path] if packed.num_paths else np.full(1, -1, np.int64)
    return dict(
        lane_table=np.ascontiguousarray(lane_table, np.int64),
        table_bins=table_bins if table_bins.size else np.zeros(1, np.int32),
        table_maxk=table_maxk,
        n_table_bins=int(table_bins.size),
        table_paths=int(is_t.sum()),
        quadrature=launches,
    )
