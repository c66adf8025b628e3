"""Host policy: which table or kernel serves which path (NumPy arithmetic on path lengths).

*Pattern tables.* A row enters a path only through the 0/1 pattern of its one-fractions, so a
path of ``k`` features has ``2**k`` possible results; a table stores them all (``2**k * k``
float32 values for SHAP values, ``2**k * k * k`` for interaction values). Computing a path
costs about ``k**2`` operations per row while a table costs ``2**k`` times its values in
memory, so the saving per byte falls with ``k``: :func:`choose_tables` takes paths shortest
first, up to a feature limit, until a memory budget is spent. The CPU kernel uses SHAP tables
wherever this policy gives them (one CPU thread, 2,492 paths of 2-12 features: the quadrature
took 2.9x the time of tables on the paths of 9 or more features, 1.4x on those of 11 or more,
and tied on the 12-feature ones); the CUDA backend uses interaction tables for the paths that
have a SHAP table (:func:`interaction_table_offsets`).

*Quadrature.* A path of ``k`` features is evaluated exactly with ``ceil(k / 2)``
Gauss-Legendre nodes: on the CPU every path without a table
(:mod:`distshap.kernels.quadrature_cpu`, which also fills the tables); on the GPU
:func:`quadrature_launches` groups the paths by the smallest compiled node count that is exact,
then by output group, in chunks of a fixed number of paths.

The functions take arrays and tunables only, so every backend (and ``distshap info``) can ask
for a plan without building anything.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "DEFAULT_MAX_TABLE_FEATURES",
    "DEFAULT_TABLE_BUDGET_BYTES",
    "choose_tables",
    "interaction_table_offsets",
    "path_features",
    "quadrature_launches",
    "quadrature_node_index",
    "regular_paths",
    "table_values",
]

DEFAULT_TABLE_BUDGET_BYTES = 1 << 30
DEFAULT_MAX_TABLE_FEATURES = 12
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
    if max_features > 24:
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
