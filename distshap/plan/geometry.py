"""Tile geometry of the CUDA kernels, as host arithmetic: what fits a block's shared memory.

The planner, the cost model and the launchers all need the same answers (how many warps a
quadrature block runs, whether a row's sums fit shared memory, how many rows a table tile
holds), so they are computed here once, from :func:`~distshap.plan.config.get_config`, and the
kernel modules read them. Nothing here touches a GPU.
"""

from __future__ import annotations

import numpy as np

from distshap.packed import MAX_TABLE_FEATURES_LIMIT
from distshap.plan.config import get_config

__all__ = [
    "AUTO_TILE_MAX",
    "AUTO_TILE_MIN",
    "REGULAR_MAX_K",
    "SHAP_TABLE_MAX_FEATURES",
    "gauss_legendre",
    "interaction_tile_fits",
    "local_tile_model",
    "local_tiles",
    "quadrature_node_index",
    "quadrature_shared",
    "quadrature_tile_columns",
    "quadrature_warps",
    "shared_tile_rows",
    "slot_rows_shape",
    "tile_bound",
]

#: Most features of a path in a regular bin (one warp of 32 lanes, the bias lane included).
REGULAR_MAX_K = 31
#: The default chunk-local tile (``quadrature_tile_features=0``): models of more features than
#: their longest quadrature path has get tiles, each launch's of its own longest path's
#: features, at least ``AUTO_TILE_MIN`` and at most ``AUTO_TILE_MAX`` (:func:`tile_bound`).
AUTO_TILE_MIN, AUTO_TILE_MAX = 8, 16
#: Longest path with a SHAP pattern table (the table fill kernel's local arrays have this size).
SHAP_TABLE_MAX_FEATURES = MAX_TABLE_FEATURES_LIMIT


def gauss_legendre(n_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights of the ``n_nodes``-point Gauss-Legendre rule on ``[0, 1]`` (float64).

    Exact for polynomials of degree up to ``2 * n_nodes - 1``.
    """
    x, w = np.polynomial.legendre.leggauss(int(n_nodes))
    return (x + 1.0) / 2.0, w / 2.0


def quadrature_node_index(lengths: np.ndarray, nodes: tuple[int, ...]) -> np.ndarray:
    """Index into ``nodes`` (increasing) of the smallest node count exact for each path.

    ``n`` Gauss-Legendre nodes integrate polynomials of degree ``2 n - 1`` exactly and a path of
    ``k`` features needs degree ``k - 1``: ``n >= ceil(k / 2)``. ``len(nodes)``: none is enough.
    """
    return np.searchsorted(np.asarray(nodes), (np.asarray(lengths) + 1) // 2)


def quadrature_warps(num_features: int, rows: int = 1) -> int:
    """Warps per block of the SHAP quadrature kernels for ``num_features`` columns and ``rows``
    rows a thread (0: too wide for per-row accumulators in shared memory; such models add to
    global memory); at most ``shap_quadrature_warps`` of the configuration."""
    config = get_config()
    most = int(config.shap_quadrature_warps)
    if not 1 <= most <= 32:
        raise ValueError(f"shap_quadrature_warps must be in 1..32, got {most}")
    per_warp = 8 * 32 * max(num_features, 1) * max(int(rows), 1)
    return min(most, config.quadrature_shared_bytes // per_warp)


def tile_bound(longest: int = AUTO_TILE_MAX) -> int:
    """Features of a chunk-local tile at most: ``quadrature_tile_features``, or for its default
    0 the longest path's features ``longest`` within ``AUTO_TILE_MIN`` and ``AUTO_TILE_MAX``.
    Asked of a model's longest quadrature path, it decides whether the model gets tiles
    (:func:`local_tile_model`); asked of each quadrature launch's longest path, it bounds that
    launch's tiles, so a launch of short paths gets narrow tiles (more blocks an SM) beside
    a launch of long ones. A path of more features than the tile gets a chunk of its own, so
    the tile is never below a launch's usual path."""
    bound = int(get_config().quadrature_tile_features)
    return bound if bound != 0 else min(AUTO_TILE_MAX, max(AUTO_TILE_MIN, int(longest)))


def local_tile_model(num_features: int, longest: int = AUTO_TILE_MAX) -> bool:
    """Whether SHAP plans of a model of ``num_features`` features, its longest quadrature path
    of ``longest``, get chunk-local feature tiles: more features than :func:`tile_bound` of
    ``longest`` allows a tile. A tile narrower than a column per feature leaves room for more
    blocks an SM."""
    return int(num_features) > tile_bound(longest)


def local_tiles(plan) -> bool:
    """Whether the SHAP quadrature launches of ``plan`` run with chunk-local feature tiles: the
    plan has them (its model had more than ``quadrature_tile_features`` features)."""
    return getattr(plan, "lane_column", None) is not None


def quadrature_tile_columns(num_features: int, longest: int = AUTO_TILE_MAX) -> int:
    """Int64 columns a thread of the SHAP quadrature kernel sums a row in at most: the model's
    features, or with chunk-local feature tiles (:func:`local_tile_model` of ``longest``) the
    tile bound, or the longest regular path's features where they exceed it (such a path gets a
    chunk of its own), whichever is fewer than the model's."""
    F = int(num_features)
    if not local_tile_model(F, longest):
        return F
    return min(F, max(tile_bound(longest), REGULAR_MAX_K))


def quadrature_shared(num_features: int) -> bool:
    """Whether the SHAP quadrature kernels sum a row in shared memory (else global atomics):
    :func:`quadrature_warps` of the widest tile (:func:`quadrature_tile_columns`) > 0."""
    return quadrature_warps(quadrature_tile_columns(num_features)) > 0


def interaction_tile_fits(F1: int) -> bool:
    """Whether a row's ``F1 x F1`` interaction matrix fits a quadrature block's shared memory
    (``quadrature_shared_bytes``, one int64 a value): the full-matrix kernel then sums a
    (chunk, row) in a shared tile, else it adds every value to global memory."""
    return F1 * F1 * 8 <= get_config().quadrature_shared_bytes


def slot_rows_shape(num_features: int, max_tile_slots: int) -> tuple[int, bool, int]:
    """``(rows, cache_x, tile_capacity)`` of the slot quadrature kernel's blocks: rows per block
    (at most ``slot_quadrature_rows``, fewer where a row's tile of the largest chunk would not
    fit beside the rows' features), whether the rows' features sit in shared memory (when they
    take at most half of ``quadrature_shared_bytes``) and the slots of a row's tile (chunks
    with more add to the rows' slots directly)."""
    config = get_config()
    budget = max(0, int(config.quadrature_shared_bytes))
    F = max(int(num_features), 1)
    rows = max(1, int(config.slot_quadrature_rows))
    while True:
        cache_x = rows * F * 4 <= budget // 2
        left = budget - (rows * F * 4 if cache_x else 0)
        capacity = min(int(max_tile_slots), left // (8 * rows))
        if capacity >= max_tile_slots or rows == 1:
            return rows, cache_x, max(capacity, 0)
        rows -= 1


def shared_tile_rows(width: int) -> int:
    """Rows of the table kernel's shared-memory tile for ``width`` outputs per row (0: none)."""
    config = get_config()
    rows = min(config.tile_rows, config.shared_tile_values // max(width, 1))
    return rows if rows >= config.min_tile_rows else 0
