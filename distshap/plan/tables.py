"""Pattern-table policy: which paths get a table (NumPy arithmetic on path lengths).

A row enters a path only through the 0/1 pattern of its one-fractions, so a path of ``k``
features has ``2**k`` possible results; a table stores them all (``2**k * k`` float32 values
for SHAP values, ``2**k * k * k`` for interaction values). Computing a path costs about ``k**2``
operations per row while a table costs ``2**k`` times its values in memory, so the saving per
byte falls with ``k``: :func:`choose_tables` takes paths shortest first, up to a feature limit,
until a memory budget is spent (the CPU kernels' policy, and the GPU's for interaction tables:
:func:`interaction_table_offsets`). On the GPU the SHAP tables go where the cost model
predicts a saving (:func:`gpu_shap_table_offsets`).

The functions take arrays and tunables only, so every backend (and ``distshap info``) can ask
for a plan without building anything.
"""

from __future__ import annotations

import numpy as np

from distshap.packed import (
    DEFAULT_MAX_TABLE_FEATURES,
    DEFAULT_TABLE_BUDGET_BYTES,
    MAX_TABLE_FEATURES_LIMIT,
)
from distshap.plan.costs import KernelCosts, quadrature_path_seconds, table_lane_seconds
from distshap.plan.geometry import REGULAR_MAX_K

__all__ = [
    "TABLE_MIN_SAVING",
    "choose_tables",
    "gpu_shap_table_offsets",
    "interaction_table_offsets",
    "path_features",
    "regular_paths",
    "table_values",
]

#: Least predicted saving, as a share of the all-quadrature time, for which
#: :func:`gpu_shap_table_offsets` puts paths on SHAP tables: a saving below the cost model's
#: error is as likely a loss (the error's size: ``benchmarks/RESULTS.md``).
TABLE_MIN_SAVING = 0.25
_PER_PATTERN = ("k", "k*k")


def path_features(path_offsets: np.ndarray) -> np.ndarray:
    """Features ``k`` of each packed path (its lanes less the bias lane), int64."""
    return np.diff(np.asarray(path_offsets, dtype=np.int64)) - 1


def _table_sizes(lengths: np.ndarray, values_per_pattern: str) -> np.ndarray:
    if values_per_pattern not in _PER_PATTERN:
        raise ValueError(f"values_per_pattern must be 'k' or 'k*k', got {values_per_pattern!r}")
    per = lengths * lengths if values_per_pattern == "k*k" else lengths
    return (np.int64(1) << np.minimum(lengths, 62)) * per


def choose_tables(
    lengths: np.ndarray,
    budget_bytes: int = DEFAULT_TABLE_BUDGET_BYTES,
    max_features: int = DEFAULT_MAX_TABLE_FEATURES,
    values_per_pattern: str = "k",
) -> np.ndarray:
    """Start offset of each path's table (-1 = no table), shortest paths first within budget.

    Parameters
    ----------
    lengths : int array (n_paths,)
        Number of features ``k`` of each path (paths with ``k = 0`` get no table).
    budget_bytes : int
        Largest total size of the float32 tables.
    max_features : int
        Paths with more features than this get no table.
    values_per_pattern : {"k", "k*k"}
        Float32 values stored per pattern: ``k`` (SHAP values) or ``k * k`` (interaction
        values).

    Returns
    -------
    int64 array (n_paths,)
        Tables are laid out in path order, so neighbouring paths have neighbouring tables.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    if max_features > MAX_TABLE_FEATURES_LIMIT:
        raise ValueError(f"max_table_features={max_features} is too large: tables grow as 2**k")
    eligible = (lengths >= 1) & (lengths <= max_features)
    size = np.where(lengths <= max_features, _table_sizes(lengths, values_per_pattern), 0)
    order = np.argsort(np.where(eligible, lengths, np.iinfo(np.int64).max), kind="stable")
    order = order[: int(eligible.sum())]
    ends = np.cumsum(size[order])
    chosen = np.sort(order[ends * 4 <= budget_bytes])
    offsets = np.full(lengths.shape[0], -1, dtype=np.int64)
    starts = np.zeros(chosen.shape[0], dtype=np.int64)
    np.cumsum(size[chosen][:-1], out=starts[1:])
    offsets[chosen] = starts
    return offsets


def _layout(sizes: np.ndarray, chosen: np.ndarray, n: int) -> np.ndarray:
    """Offsets of the ``chosen`` paths' tables (sizes in values, distinct paths), laid out in
    path order."""
    mask = np.zeros(n, bool)
    mask[chosen] = True
    chosen = np.flatnonzero(mask)  # sorted, without a sort
    offsets = np.full(n, -1, dtype=np.int64)
    starts = np.zeros(chosen.shape[0], dtype=np.int64)
    np.cumsum(sizes[chosen][:-1], out=starts[1:])
    offsets[chosen] = starts
    return offsets


def _first_in_order(path_bin: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Whether ``order[j]`` is the first path of its bin in ``order`` (``order``: distinct
    paths). As ``np.unique(path_bin[order], return_index=True)``, without its sort where the
    bins are nondecreasing in path order (packed models): each bin's paths are then one run,
    and the least position in ``order`` of a run's paths is its bin's first."""
    first = np.zeros(order.size, bool)
    n = path_bin.shape[0]
    if n and bool(np.all(path_bin[1:] >= path_bin[:-1])):
        pos = np.full(n, order.size, np.int64)
        pos[order] = np.arange(order.size)
        runs = np.flatnonzero(np.r_[True, path_bin[1:] != path_bin[:-1]])
        least = np.minimum.reduceat(pos, runs)
        first[least[least < order.size]] = True
    else:
        first[np.unique(path_bin[order], return_index=True)[1]] = True
    return first


def gpu_shap_table_offsets(
    lengths: np.ndarray,
    path_group: np.ndarray,
    budget_bytes: int,
    max_features: int,
    costs: KernelCosts,
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
    k, group, path_bin = _checked(lengths, path_group, budget_bytes, max_features, costs, path_bin)
    n = k.shape[0]
    G = int(group.max()) + 1 if num_groups is None and n else int(num_groups or 1)
    F = int(k.max(initial=0)) if num_features is None else int(num_features)
    # Every per-path quantity below but the bin is a function of k alone: computed once a
    # length (the same float64 operations a value as on a per-path array) and gathered.
    kv = np.arange(int(k.max(initial=0)) + 1, dtype=np.int64)
    eligible = (kv >= 1) & (kv <= max_features)
    size = np.where(eligible, _table_sizes(np.minimum(kv, 24), "k"), 0)
    quad = quadrature_path_seconds(costs, kv, F)
    lane = table_lane_seconds(costs, G * (F + 1))
    gain = quad - kv * lane  # per row, bins and misses aside
    share = costs.table_bin * (kv + 1) / 32.0
    is_cand = eligible & (gain - share > 0)
    if budget_bytes == 0 or not is_cand.any():
        return np.full(n, -1, dtype=np.int64)
    cand = np.flatnonzero(is_cand[k])
    if cand.size == 0:
        return np.full(n, -1, dtype=np.int64)
    density = np.zeros(kv.size)
    density[is_cand] = (gain - share)[is_cand] / (4.0 * size[is_cand])
    # best saving per byte first, then path index: a stable sort of the (few) density ranks
    ranks = np.unique(-density[is_cand])
    rank = np.searchsorted(ranks, -density).astype(np.uint8 if ranks.size < 256 else np.int64)
    order = cand if ranks.size == 1 else cand[np.argsort(rank[k[cand]], kind="stable")]
    k_order = k[order]
    cum_bytes = 4 * np.cumsum(size[k_order])
    keep = cum_bytes <= budget_bytes
    order, k_order = order[keep], k_order[keep]
    if order.size == 0:
        return np.full(n, -1, dtype=np.int64)
    cum_bytes = cum_bytes[: order.size].astype(np.float64)
    if path_bin is None:
        bins = np.cumsum(share[k_order]) / max(costs.table_bin, 1e-300)
    else:  # a bin counts once, from its first table path on
        bins = np.cumsum(_first_in_order(path_bin, order))
    miss = np.maximum(0.0, 1.0 - costs.l2_bytes / cum_bytes)
    total = (
        -np.cumsum(gain[k_order])
        + bins * costs.table_bin
        + miss * costs.table_miss_lane * np.cumsum(k_order)
    )
    best = int(np.argmin(total))
    # Tables only where the predicted saving is clearly beyond the model's error: a smaller one
    # is as likely a loss (TABLE_MIN_SAVING).
    margin = TABLE_MIN_SAVING if costs.min_saving is None else costs.min_saving
    if -total[best] <= margin * float(quad[k[k >= 1]].sum()):
        return np.full(n, -1, dtype=np.int64)
    return _layout(size[k], order[: best + 1], n)


def _checked(lengths, path_group, budget_bytes, max_features, costs, path_bin):
    """The arguments of :func:`gpu_shap_table_offsets`, checked: ``(k, group, path_bin)``."""
    if not isinstance(costs, KernelCosts):
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
    if max_features > MAX_TABLE_FEATURES_LIMIT:
        raise ValueError(f"max_table_features={max_features} is too large: tables grow as 2**k")
    if k.size and int(k.min()) < 0:
        raise ValueError("lengths must be >= 0")
    if path_bin is not None:
        path_bin = np.asarray(path_bin, np.int64)
        if path_bin.shape != k.shape:
            raise ValueError(f"path_bin has shape {path_bin.shape}, lengths {k.shape}")
    return k, group, path_bin


def table_values(lengths: np.ndarray, offsets: np.ndarray, values_per_pattern: str = "k") -> int:
    """Float32 values of all the tables that ``offsets`` (from :func:`choose_tables`) lays out."""
    lengths = np.asarray(lengths, dtype=np.int64)[np.asarray(offsets) >= 0]
    return int(_table_sizes(lengths, values_per_pattern).sum())


def interaction_table_offsets(
    lengths: np.ndarray, shap_offsets: np.ndarray, budget_bytes: int, max_features: int
) -> np.ndarray:
    """Interaction table offset of each path (-1: none), :func:`choose_tables` over the paths
    that have a SHAP table (``shap_offsets >= 0``), shortest first within ``budget_bytes``."""
    eligible = np.where(np.asarray(shap_offsets) >= 0, np.asarray(lengths, dtype=np.int64), 0)
    return choose_tables(eligible, budget_bytes, max_features, values_per_pattern="k*k")


def regular_paths(
    bin_offsets: np.ndarray, path_offsets: np.ndarray, lanes: int = REGULAR_MAX_K + 1
) -> tuple[np.ndarray, np.ndarray]:
    """Bin of each path, and whether that bin is regular (at most ``lanes`` lanes: one warp).

    A path longer than a warp sits alone in an *oversize* bin. The bin of a path is the last one
    starting at or before the path's first lane (both offset arrays increase): the paths are
    counted bin by bin and the bins repeated, without a search a path.
    """
    if path_offsets.shape[0] <= 1:
        return np.zeros(0, np.int64), np.zeros(0, bool)
    n = path_offsets.shape[0] - 1
    bin_sizes = np.diff(bin_offsets)
    # paths starting before each bin offset; count[0]: before bin 0, count[-1]: after the end
    at = np.searchsorted(path_offsets[:-1], bin_offsets, side="left")
    count = np.diff(at, prepend=0, append=n)
    path_bin = np.repeat(np.arange(-1, bin_sizes.shape[0] + 1, dtype=np.int64), count)
    if count[0] or count[-1]:  # paths outside the bins: as a gather would index
        return path_bin, bin_sizes[path_bin] <= lanes
    return path_bin, np.repeat(bin_sizes <= lanes, count[1:-1])
