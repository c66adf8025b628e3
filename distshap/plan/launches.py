"""Quadrature launches and their chunks: which paths one thread block of a quadrature kernel runs.

:func:`quadrature_launches` groups the paths without a table by the smallest compiled node
count that is exact for them, then by output group, in chunks of a fixed number of paths.
Models wider than ``quadrature_tile_features`` also get chunk-local feature tiles
(:func:`local_chunks`): the paths chunked again so that a chunk touches at most that many
distinct features, for the SHAP kernel's per-row sums in shared memory. :func:`chunk_tiles`
numbers the pair slots each chunk of an interaction launch touches. Host arithmetic only;
which chunk sums a contribution never changes a bit (integer sums are associative).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from distshap.packed import PackedModel
from distshap.parallel import run_ranges
from distshap.plan.geometry import quadrature_node_index

__all__ = ["chunk_tiles", "local_chunks", "nonempty", "quadrature_launches"]


def nonempty(a, dtype) -> np.ndarray:
    """``a`` as a contiguous array of ``dtype``, one zero where it is empty (a device array
    needs a size)."""
    a = np.ascontiguousarray(a, dtype=dtype)
    return a if a.size else np.zeros(1, dtype)


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
    lengths = np.asarray(lengths)
    path_group = np.asarray(path_group)
    ids_all = np.flatnonzero(selected)
    sel_len = lengths[ids_all].astype(np.int64)
    sel_group = path_group[ids_all].astype(np.int64)
    if sel_len.size and int(sel_len.min()) >= 0:  # node index a length, gathered
        kernel_of = quadrature_node_index(np.arange(int(sel_len.max()) + 1), nodes)[sel_len]
    else:
        kernel_of = quadrature_node_index(sel_len, nodes)
    if kernel_of.size and int(kernel_of.max()) >= len(nodes):
        raise ValueError(f"paths of more than {2 * nodes[-1]} features need the fallback kernel")
    # by node count, group, length, then path index: one stable sort of a combined key where
    # they are all >= 0 (a radix sort where the key fits 16 bits), else np.lexsort; the node
    # count grows with the length, so each launch's paths come out by group, then length
    n = int(sel_len.size)
    span = int(sel_len.max(initial=0)) + 1
    combined = n and int(sel_len.min()) >= 0 and int(sel_group.min()) >= 0
    if combined:
        groups = int(sel_group.max()) + 1
        key = (kernel_of * groups + sel_group) * span + sel_len
        key = key.astype(np.uint16 if int(key.max()) < 1 << 16 else np.int64)
        if not bool(np.all(key[1:] >= key[:-1])):  # else in order already
            order = np.argsort(key, kind="stable")
            ids_all, kernel_of, sel_group = ids_all[order], kernel_of[order], sel_group[order]
    elif n:
        order = np.lexsort((sel_len, sel_group, kernel_of))
        ids_all, kernel_of, sel_group = ids_all[order], kernel_of[order], sel_group[order]
    # chunks: runs of one node count and group, cut every chunk_paths paths
    change = np.flatnonzero((kernel_of[1:] != kernel_of[:-1]) | (sel_group[1:] != sel_group[:-1]))
    seg_start = np.r_[0, change + 1] if n else np.zeros(0, np.int64)
    seg_len = np.diff(np.r_[seg_start, n])
    per_seg = -(-seg_len // chunk_paths)
    first = np.cumsum(per_seg) - per_seg  # each run's first chunk
    step = np.arange(int(per_seg.sum())) - np.repeat(first, per_seg)  # a chunk's place in its run
    starts = np.repeat(seg_start, per_seg) + step * chunk_paths  # each chunk's first path
    bounds = np.searchsorted(kernel_of, np.arange(len(nodes) + 1))  # each node count's paths
    chunk_bounds = np.searchsorted(starts, bounds)
    launches = []
    for q in range(len(nodes)):
        lo, hi = int(bounds[q]), int(bounds[q + 1])
        if lo == hi:
            continue
        at = starts[chunk_bounds[q] : chunk_bounds[q + 1]]
        launches.append(dict(
            n_nodes=int(nodes[q]),
            paths=ids_all[lo:hi].astype(np.int32),
            offsets=np.r_[at - lo, hi - lo].astype(np.int64),
            group=sel_group[at].astype(np.int32),
            n_chunks=int(at.size),
        ))  # fmt: skip
    return launches


@njit(nogil=True, cache=True)
def _greedy_chunks(paths, path_offsets, feature, path_group, max_features, chunk_paths,
                   num_features, lane_column):  # fmt: skip
    """:func:`local_chunks` (``lane_column`` written in place): ``(offsets, features,
    feature_offsets)``."""
    P = paths.size
    stamp = np.full(max(num_features, 1), -1, np.int64)  # the last chunk holding a feature
    offsets = np.zeros(P + 1, np.int64)
    c = 0
    start = 0
    distinct = 0
    for j in range(P):
        p = paths[j]
        new = 0
        for li in range(path_offsets[p] + 1, path_offsets[p + 1]):
            if stamp[feature[li]] != c:
                new += 1
        if j > start and (path_group[p] != path_group[paths[start]] or j - start >= chunk_paths
                          or distinct + new > max_features):  # fmt: skip
            c += 1
            offsets[c] = j
            start = j
            distinct = 0
            new = path_offsets[p + 1] - path_offsets[p] - 1  # a path's features are distinct
        for li in range(path_offsets[p] + 1, path_offsets[p + 1]):
            stamp[feature[li]] = c
        distinct += new
    n = c + 1 if P else 0
    offsets[n] = P
    # each chunk's features in increasing order, and each lane's position among them
    total = 0
    for j in range(P):
        total += path_offsets[paths[j] + 1] - path_offsets[paths[j]] - 1
    features = np.empty(total, np.int32)
    feature_offsets = np.zeros(n + 1, np.int64)
    column = np.zeros(max(num_features, 1), np.int64)
    stamp[:] = -1
    at = 0
    for c in range(n):
        first = at
        for j in range(offsets[c], offsets[c + 1]):
            p = paths[j]
            for li in range(path_offsets[p] + 1, path_offsets[p + 1]):
                f = feature[li]
                if stamp[f] != c:
                    stamp[f] = c
                    features[at] = f
                    at += 1
        features[first:at].sort()
        for e in range(first, at):
            column[features[e]] = e - first
        for j in range(offsets[c], offsets[c + 1]):
            p = paths[j]
            for li in range(path_offsets[p] + 1, path_offsets[p + 1]):
                lane_column[li] = column[feature[li]]
        feature_offsets[c + 1] = at
    return offsets[: n + 1], features[:at], feature_offsets


@njit(nogil=True, cache=True)
def _window_order(paths, path_offsets, feature, max_features, chunk_paths, num_features,
                  window, run_starts, order, lo, hi):  # fmt: skip
    """:func:`local_chunks` with a ``window``: writes into ``order`` the ``paths`` of each run
    ``lo .. hi - 1`` (``paths[run_starts[k]:run_starts[k + 1]]``, one group's) reordered so
    that the greedy chunking takes, for each chunk, the path of the next ``window`` ones (not
    yet taken) adding the fewest new features to it (the first of those on a tie) while one
    fits. Runs are independent (no chunk spans two groups), so they run in threads
    (:func:`~distshap.parallel.run_ranges`) with the order of one serial pass."""
    stamp = np.full(max(num_features, 1), -1, np.int64)
    c = 0  # the current chunk's stamp (increasing over this call's runs)
    for k in range(lo, hi):
        s0 = run_starts[k]
        P = run_starts[k + 1]
        nxt = np.arange(1, P - s0 + 1) + s0  # the next path not yet taken (P: none)
        head = s0  # the first path not yet taken
        at = s0
        while head < P:
            distinct = 0
            size = 0
            while size < chunk_paths:
                best = -1
                best_new = 1 << 30
                prev_best = -1
                prev = -1
                j = head
                seen = 0
                while j < P and seen < window:
                    p = paths[j]
                    new = 0
                    for li in range(path_offsets[p] + 1, path_offsets[p + 1]):
                        if stamp[feature[li]] != c:
                            new += 1
                    if new < best_new and (distinct + new <= max_features or size == 0):
                        best, best_new, prev_best = j, new, prev
                        if new == 0:
                            break
                    prev = j
                    j = nxt[j - s0]
                    seen += 1
                if best < 0:
                    break
                p = paths[best]
                for li in range(path_offsets[p] + 1, path_offsets[p + 1]):
                    stamp[feature[li]] = c
                distinct += best_new
                size += 1
                order[at] = p
                at += 1
                if prev_best < 0:
                    head = nxt[best - s0]
                else:
                    nxt[prev_best - s0] = nxt[best - s0]
                if head >= P:
                    break
            c += 1


def _group_runs(paths: np.ndarray, path_group: np.ndarray) -> np.ndarray:
    """Starts of the runs of one group in ``paths`` (and ``paths.size`` at the end)."""
    g = path_group[paths]
    return np.concatenate(([0], np.flatnonzero(g[1:] != g[:-1]) + 1, [paths.size])).astype(np.int64)


def local_chunks(packed: PackedModel, paths: np.ndarray, max_features: int, chunk_paths: int,
                 lane_column: np.ndarray, window: int = 0) -> dict:  # fmt: skip
    """Chunk-local feature tiles of one quadrature launch's ``paths`` (host arrays).

    Greedy over ``paths`` in their order (by group, then length): a chunk is closed where the
    next path is of another group, where it has ``chunk_paths`` paths, or where the next path
    would take its distinct features beyond ``max_features`` (a path of more features than
    that gets a chunk of its own). Returns the :class:`QuadratureLaunch` fields
    ``local_offsets``, ``local_group``, ``local_features``, ``local_feature_offsets``,
    ``n_local`` and ``local_columns``, and writes each of the paths' feature lanes' column
    (its feature's position in its chunk's increasing list) into ``lane_column`` (int16, per
    lane of ``packed``; anything with its ``path_offsets``, ``feature``, ``path_group`` and
    ``num_features`` will do).

    ``window`` > 0 (``quadrature_tile_window`` of the configuration): the paths are first reordered
    within each group (:func:`_window_order`): each chunk takes, while one fits, the path of
    the next ``window`` not yet taken adding the fewest new features, so paths sharing
    features share a chunk (fewer chunks, fewer flushes); the result then holds ``paths`` too,
    the launch's paths in that order (the launch's all-features chunks stay within a group).

    Which chunk sums a contribution does not change its value (each is truncated to int64 on
    its own and integer addition is associative), so the SHAP values keep their bits.
    """
    if int(max_features) < 1:
        raise ValueError(
            f"quadrature_tile_features must be at least 1 (or 0: chosen per model), got "
            f"{max_features}"
        )
    paths = np.ascontiguousarray(paths, np.int64)
    out = {}
    if int(window) > 0 and paths.size:
        runs = _group_runs(paths, np.asarray(packed.path_group))
        order = np.empty_like(paths)
        run_ranges(
            _window_order, runs.size - 1, runs.size - 1, paths,
            np.ascontiguousarray(packed.path_offsets, np.int64),
            np.ascontiguousarray(packed.feature, np.int64), int(max_features),
            int(chunk_paths), int(packed.num_features), int(window), runs, order,
        )  # fmt: skip
        paths = order
        out["paths"] = paths.astype(np.int32)
    offsets, features, feature_offsets = _greedy_chunks(
        paths, np.ascontiguousarray(packed.path_offsets, np.int64),
        np.ascontiguousarray(packed.feature, np.int64),
        np.ascontiguousarray(packed.path_group, np.int64), int(max_features), int(chunk_paths),
        int(packed.num_features), lane_column,
    )  # fmt: skip
    group = packed.path_group[paths[offsets[:-1]]] if paths.size else np.zeros(0, np.int64)
    return dict(
        out,
        local_offsets=offsets,
        local_group=nonempty(group, np.int32),
        local_features=nonempty(features, np.int32),
        local_feature_offsets=feature_offsets,
        n_local=int(offsets.size - 1),
        local_columns=int(np.diff(feature_offsets).max(initial=0)),
    )


def chunk_tiles(slots, launches: list[tuple[np.ndarray, np.ndarray]]) -> tuple:
    """Chunk-local slot numbers of the quadrature launches (host arrays).

    ``launches`` holds ``(paths, offsets)`` of each quadrature launch. A chunk's paths touch few
    distinct slots (the same feature pairs recur on many paths), so the interaction kernel sums
    a block's contributions in a shared-memory tile of those slots and adds each to the row's
    slots once. Returns ``local_map`` (int32, laid out as ``slots.path_map``: the chunk-local
    number of each upper or diagonal entry of a quadrature path, -1 elsewhere), the ``(offsets,
    chunk_slots)`` of each launch, and the most slots of one chunk.
    """
    local_map = np.full(max(slots.path_map.size, 1), -1, np.int32)
    tiles, most = [], 0
    S = max(slots.num_slots, 1)
    for paths, offsets in launches:
        paths = np.asarray(paths, np.int64)
        chunk = np.repeat(np.arange(offsets.size - 1, dtype=np.int64), np.diff(offsets))
        size = slots.map_offsets[paths + 1] - slots.map_offsets[paths]
        at = np.repeat(slots.map_offsets[paths] - np.cumsum(size) + size, size)
        at += np.arange(int(size.sum()), dtype=np.int64)  # every map entry of the paths
        of = np.repeat(chunk, size)
        slot = slots.path_map[at].astype(np.int64)
        keep = slot >= 0
        at, of, slot = at[keep], of[keep], slot[keep]
        keys = np.unique(of * S + slot)  # per chunk, its distinct slots in increasing order
        starts = np.searchsorted(keys, np.arange(offsets.size) * S)
        local_map[at] = (np.searchsorted(keys, of * S + slot) - starts[of]).astype(np.int32)
        tiles.append((starts.astype(np.int64), (keys % S).astype(np.int64)))
        most = max(most, int(np.diff(starts).max(initial=0)))
    return local_map, tuple(tiles), most
