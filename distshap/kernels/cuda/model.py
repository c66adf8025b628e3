"""The device model: a packed model's arrays on one GPU, its plans, and the cache keeping them.

:func:`device_model` copies a :class:`~distshap.packed.PackedModel` to the current device once
per ``(digest, device)``: the lane arrays (columns named in :mod:`.device`, assembled on the
device from the packed model's own arrays by :func:`.upload.lane_columns`), the paths of the
oversize bins and the fixed-point shifts. The two :class:`Plan` s are built on the first call
that needs them, tables filled on the device:

* SHAP values (:func:`shap_plan`, ``model.shap``): the regular paths that
  :func:`_shap_table_offsets` gives a SHAP table run in the table kernel, the other regular
  paths in the quadrature kernels, oversize paths in the fallback kernel. The choice is one
  function, so a cost model can make it; with ``table_budget_bytes=0`` every regular path runs
  in the quadrature kernels. Models of more than :data:`config.QUADRATURE_TILE_FEATURES`
  features also get chunk-local feature tiles (:func:`local_chunks`): the quadrature paths
  chunked again so that a chunk touches at most that many distinct features, for the SHAP
  kernel's per-row sums in shared memory.
* Interaction values (:func:`interaction_plan`): interaction tables for the short paths
  (:func:`interaction_table_offsets`; none on models whose interaction matrix is too wide for
  a block's shared memory, :func:`interaction_tables_too_wide`), the quadrature kernels for
  the others.

Which path goes where is host policy (:mod:`distshap.strategy`); :func:`strategy_stats`
reports it without a GPU.

Pair slots (:func:`slot_arrays`, on the first call that needs them): the host
:class:`~distshap.pair_slots.PairSlots` maps and the quadrature kernel's chunk tiles
(:func:`chunk_tiles`), kept on the device model.

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
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, TypeVar

import numpy as np
from numba import cuda, njit

from distshap import strategy
from distshap.kernels.cuda import config, device
from distshap.kernels.cuda.caches import cached_model
from distshap.kernels.cuda.device import device_id, stream
from distshap.kernels.cuda.fallback import FALLBACK_MAX_FEATURES
from distshap.kernels.cuda.quadrature import interaction_tile_fits, local_tiles, quadrature_warps
from distshap.kernels.cuda.tables import (
    SHAP_TABLE_MAX_FEATURES,
    TABLE_MAX_FEATURES,
    fill_interaction_tables,
    fill_shap_tables,
    shared_tile_rows,
)
from distshap.kernels.cuda.upload import lane_columns
from distshap.packed import PackedModel
from distshap.parallel import run_ranges
from distshap.plan.config import Config, get_config

__all__ = [
    "DeviceModel", "Plan", "QuadratureLaunch", "SlotArrays", "chunk_tiles",
    "device_model", "local_chunks",
    "fixed_point_shift", "interaction_plan", "interaction_table_offsets",
    "interaction_tables_too_wide", "lane_arrays",
    "plan_arrays", "shap_plan", "shap_table_policy", "slot_arrays", "strategy_stats",
]  # fmt: skip


@dataclass(eq=False)
class QuadratureLaunch:
    """The paths of one quadrature kernel (``n_nodes`` nodes), in chunks of one output group.

    Chunk ``c`` is ``paths[offsets[c]:offsets[c + 1]]``, all of group ``group[c]``.

    Chunk-local feature tiles (SHAP plans of models wider than
    :data:`config.QUADRATURE_TILE_FEATURES`, else ``None``; :func:`local_chunks`): the same
    ``paths`` chunked again, local chunk ``c`` is ``paths[local_offsets[c]:local_offsets[c +
    1]]`` of group ``local_group[c]``, touching the features
    ``local_features[local_feature_offsets[c]:local_feature_offsets[c + 1]]`` (increasing);
    ``local_columns`` is the most features of one local chunk (the tile's columns) and the
    plan's ``lane_column`` gives each lane its feature's position in its chunk's list.
    """

    n_nodes: int
    paths: object
    offsets: object
    group: object
    n_chunks: int
    local_offsets: object = None
    local_group: object = None
    local_features: object = None
    local_feature_offsets: object = None
    n_local: int = 0
    local_columns: int = 0


@dataclass(eq=False)
class Plan:
    """Device arrays of one output kind (SHAP or interactions): which path runs where.

    ``lane_table`` (int64, per lane) is the table offset of the lane's path (-1: none);
    ``table_bins`` are the regular bins holding a table path and ``table_maxk`` (per bin) the
    largest ``k`` of those paths; ``quadrature`` the launches of the other regular paths.
    ``per_pattern`` says what the tables hold a pattern (:func:`distshap.strategy.choose_tables`):
    ``"k"`` SHAP values, ``"k*k"`` interaction values. ``lane_column`` (int16 per lane, SHAP
    plans with chunk-local feature tiles, else ``None``): the column of a quadrature lane's
    feature in its local chunk's tile (:class:`QuadratureLaunch`), -1 for other lanes.
    """

    lane_table: object
    tables: object
    table_bins: object
    table_maxk: object
    n_table_bins: int
    table_paths: int
    table_bytes: int
    quadrature: tuple = ()
    per_pattern: str = "k*k"
    lane_column: object = None


@dataclass(eq=False)
class SlotArrays:
    """A model's pair slots on the device (:mod:`distshap.pair_slots`), for the slot kernels.

    ``path_map`` / ``map_offsets`` address the slots of each path's element pairs,
    ``lane_map`` is the ``map_offsets`` entry of each lane's path, ``group_slots`` the slot
    range of each group (``slot_offsets``), ``num_pairs`` its pair slots, ``slot_i`` /
    ``slot_j`` the features of each slot. Chunk tiles of the quadrature kernel
    (:func:`chunk_tiles`): ``local_map`` (laid out as ``path_map``) numbers each quadrature
    path's slots within its chunk; ``tiles[q] = (offsets, slots)`` of launch ``q`` of the
    interaction plan: chunk ``c`` touches the slots ``slots[offsets[c]:offsets[c + 1]]``.
    """

    path_map: object
    map_offsets: object
    lane_map: object
    group_slots: object
    num_pairs: object
    slot_i: object
    slot_j: object
    num_slots: int
    max_group_slots: int
    local_map: object = None
    tiles: tuple = ()
    max_tile_slots: int = 0


T = TypeVar("T")


@dataclass(eq=False)
class DeviceModel:
    """Every form a packed model takes on one device, under one configuration.

    The fields are the lane arrays and launch constants, copied when the model is made
    (:func:`device_model`). Every other form (plans and their tables, pair slots, small-model
    arrays, background tables) is built on first use by :meth:`form` and kept as long as the
    device model: ``shap`` is the SHAP :class:`Plan` (:func:`shap_plan`), :func:`interaction_plan`
    and :func:`slot_arrays` the interaction forms. ``packed`` is the model the arrays came
    from, ``device`` the device id and ``config`` the configuration they were made under.
    """

    lane_f: object
    lane_i: object
    lane_cat: object
    lane_d: object
    cat_words: object
    bin_offsets: object
    path_offsets: object
    oversize_paths: object  # paths of oversize bins, run by the fallback kernel
    expected_value: object
    n_oversize: int
    num_features: int
    num_groups: int
    shap_shift: int
    interaction_shift: int
    packed: PackedModel | None = None
    device: int = 0
    config: Config = field(default_factory=get_config)
    _forms: dict = field(default_factory=dict, repr=False)
    _lock: Any = field(default_factory=threading.RLock, repr=False)

    def form(self, key: Hashable, build: Callable[[], T]) -> T:
        """The form ``key`` of this model: ``build()`` on first use (once, under the model's
        lock, so a build may ask for other forms), then kept as long as the model."""
        hit = self._forms.get(key)
        if hit is not None:
            return hit
        with self._lock:
            hit = self._forms.get(key)
            if hit is None:
                hit = self._forms[key] = build()
            return hit

    @property
    def shap(self) -> Plan:
        """The SHAP :class:`Plan` (built on first use: :func:`shap_plan`)."""
        return shap_plan(self.packed, self)


def fixed_point_shift(bound: float) -> int:
    """Fixed-point fraction bits ``s`` for outputs bounded by ``bound`` (module docstring)."""
    s = 62 - math.ceil(math.log2(float(bound) + 1.0)) - 1
    return int(min(60, max(-60, s)))


def _path_bounds(packed: PackedModel) -> tuple[float, float]:
    k = _path_info(packed)[0]
    v = np.abs(np.asarray(packed.path_value, np.float64))
    g = np.asarray(packed.path_group)  # np.bincount casts it (int32) to intp itself
    G = packed.num_groups
    shap = np.bincount(g, weights=v, minlength=G) if g.size else np.zeros(1)
    inter = np.bincount(g, weights=v * np.maximum(k, 1), minlength=G) if g.size else np.zeros(1)
    return float(shap.max(initial=0.0)), float(inter.max(initial=0.0))


_PATH_INFO: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_PATH_INFO_LOCK = threading.Lock()


def _path_info(packed: PackedModel) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(k, path_bin, regular)`` of ``packed``'s paths (:func:`strategy.path_features`,
    :func:`strategy.regular_paths`), computed once a model object and shared by the device
    model and its plans (read-only arrays)."""
    with _PATH_INFO_LOCK:
        hit = _PATH_INFO.get(packed)
    if hit is not None:
        return hit
    k = strategy.path_features(packed.path_offsets)
    path_bin, regular = strategy.regular_paths(packed.bin_offsets, packed.path_offsets, lanes=32)
    for a in (k, path_bin, regular):
        a.flags.writeable = False
    with _PATH_INFO_LOCK:
        _PATH_INFO[packed] = (k, path_bin, regular)
    return k, path_bin, regular


def _regular(packed: PackedModel) -> tuple[np.ndarray, np.ndarray]:
    return _path_info(packed)[1:]


def shap_table_policy(packed: PackedModel) -> np.ndarray:
    """SHAP table offset of each path (-1: none) by the packed model's table policy alone.

    :func:`distshap.strategy.choose_tables` (``"k"`` values a pattern) over the regular paths
    (oversize paths never get one), within ``table_budget_bytes``, up to
    ``max_table_features`` (capped at the fill kernel's :data:`~.tables.SHAP_TABLE_MAX_FEATURES`),
    shortest paths first: a table on every eligible path that fits.
    """
    k = strategy.path_features(packed.path_offsets)
    _, regular = _regular(packed)
    lengths = np.where(regular, k, 0)  # k = 0: no table
    max_features = min(int(packed.max_table_features), SHAP_TABLE_MAX_FEATURES)
    return strategy.choose_tables(lengths, packed.table_budget_bytes, max_features, "k")


def _shap_table_offsets(packed: PackedModel, costs=None) -> np.ndarray:
    """SHAP table offset of each path (-1: none), in the layout of
    :func:`distshap.strategy.choose_tables` with ``"k"`` values a pattern.

    The one place that decides which regular paths of the GPU's SHAP plan run on pattern tables
    (the others run the quadrature kernels; oversize paths never get one): the cost model's
    choice (:func:`distshap.strategy.gpu_shap_table_offsets`: tables where they are predicted
    to save time) within the packed model's table policy (``table_budget_bytes``,
    ``max_table_features`` capped at the fill kernel's :data:`~.tables.SHAP_TABLE_MAX_FEATURES`;
    :func:`shap_table_policy` gives every eligible path a table), from the constants ``costs``
    (default: the current device kind's, :func:`distshap.cost_model.device_costs`, never
    calibrated here; under the simulator or without a GPU, every eligible path). A
    deterministic function of the model, the device kind and settings: the bits depend on it.
    """
    from distshap import cost_model

    k, path_bin, regular = _path_info(packed)
    lengths = np.where(regular, k, 0)  # k = 0: no table
    max_features = min(int(packed.max_table_features), SHAP_TABLE_MAX_FEATURES)
    if costs is None:
        costs = cost_model.device_costs()
    return strategy.gpu_shap_table_offsets(
        lengths, packed.path_group, packed.table_budget_bytes, max_features, costs,
        num_features=packed.num_features, num_groups=packed.num_groups, path_bin=path_bin,
    )  # fmt: skip


def interaction_tables_too_wide(packed: PackedModel) -> bool:
    """Whether ``packed`` has more output columns ``F + 1`` than
    :data:`config.INTERACTION_TABLE_MAX_COLUMNS`: a row's interaction matrix is then too wide
    for a quadrature block's shared memory, the table and full-matrix kernels both add every
    value to global memory, and interaction tables do not pay (so it gets none)."""
    return packed.num_features + 1 > config.INTERACTION_TABLE_MAX_COLUMNS


def interaction_table_offsets(packed: PackedModel) -> np.ndarray:
    """Interaction table offset of each path (-1: none), by the host policy and the budget of
    :mod:`.config` (paths without a SHAP table under the model's table policy get none).

    Models of more than :data:`config.INTERACTION_TABLE_MAX_COLUMNS` output columns get no
    interaction tables (:func:`interaction_tables_too_wide`).
    """
    k = strategy.path_features(packed.path_offsets)
    if interaction_tables_too_wide(packed):
        return np.full(k.shape[0], -1, dtype=np.int64)
    shap_offsets = strategy.choose_tables(k, packed.table_budget_bytes, packed.max_table_features)
    max_features = min(config.INTERACTION_TABLE_MAX_FEATURES, TABLE_MAX_FEATURES)  # compiled
    return strategy.interaction_table_offsets(
        k, shap_offsets, config.INTERACTION_TABLE_BUDGET_BYTES, max_features
    )


def plan_arrays(packed: PackedModel, path_table: np.ndarray, local: bool = False) -> dict:
    """Host arrays of a :class:`Plan` (tables, ``table_bytes`` and ``per_pattern`` aside) for
    per-path table offsets ``path_table``: the regular paths without a table go to the
    quadrature kernels (an oversize path's offset is ignored: the fallback kernel runs it).
    ``local``: with chunk-local feature tiles (:func:`local_chunks`, of at most
    :data:`config.QUADRATURE_TILE_FEATURES` features) where the model has more features."""
    k, path_bin, regular = _path_info(packed)
    has_table = path_table >= 0
    is_t = has_table & regular
    launches = strategy.quadrature_launches(
        k, packed.path_group, ~has_table & regular, config.QUADRATURE_NODES,
        config.QUADRATURE_CHUNK_PATHS,
    )  # fmt: skip
    table_maxk = _table_maxk(max(packed.num_bins, 1), path_bin, k, is_t)
    table_bins = np.flatnonzero(table_maxk > 0).astype(np.int32)
    if not packed.num_paths:
        lane_table = np.full(1, -1, np.int64)
    elif not has_table.any():  # no tables: no gather over the lanes
        lane_table = np.full(packed.lane_path.shape[0], -1, np.int64)
    else:
        lane_table = path_table[packed.lane_path]
    lane_column = None
    max_features = int(config.QUADRATURE_TILE_FEATURES)
    if local and packed.num_features > max_features and launches:
        lane_column = np.full(max(int(packed.feature.shape[0]), 1), -1, np.int16)
        for launch in launches:
            launch.update(local_chunks(packed, launch["paths"], max_features,
                                       config.QUADRATURE_CHUNK_PATHS, lane_column,
                                       config.QUADRATURE_TILE_WINDOW))  # fmt: skip
    return dict(
        lane_table=np.ascontiguousarray(lane_table, np.int64),
        table_bins=_nonempty(table_bins, np.int32),
        table_maxk=table_maxk,
        n_table_bins=int(table_bins.size),
        table_paths=int(is_t.sum()),
        quadrature=launches,
        lane_column=lane_column,
    )


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
    lane of ``packed``).

    ``window`` > 0 (:data:`config.QUADRATURE_TILE_WINDOW`): the paths are first reordered
    within each group (:func:`_window_order`): each chunk takes, while one fits, the path of
    the next ``window`` not yet taken adding the fewest new features, so paths sharing
    features share a chunk (fewer chunks, fewer flushes); the result then holds ``paths`` too,
    the launch's paths in that order (the launch's all-features chunks stay within a group).

    Which chunk sums a contribution does not change its value (each is truncated to int64 on
    its own and integer addition is associative), so the SHAP values keep their bits.
    """
    if int(max_features) < 1:
        raise ValueError(f"config.QUADRATURE_TILE_FEATURES must be at least 1, got {max_features}")
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
        local_group=_nonempty(group, np.int32),
        local_features=_nonempty(features, np.int32),
        local_feature_offsets=feature_offsets,
        n_local=int(offsets.size - 1),
        local_columns=int(np.diff(feature_offsets).max(initial=0)),
    )


def _nonempty(a, dtype) -> np.ndarray:
    a = np.ascontiguousarray(a, dtype=dtype)
    return a if a.size else np.zeros(1, dtype)


def lane_arrays(packed: PackedModel, columns: bool = True) -> dict:
    """Host arrays of the device model (lane columns: :mod:`.device`).

    ``columns=False``: all but the lane columns ``lane_f``, ``lane_i``, ``lane_d`` and
    ``lane_cat``, which :func:`.upload.lane_columns` assembles on the device, bit for bit
    (:func:`device_model`).
    """
    if packed.capacity != 32:
        raise ValueError(
            f"the CUDA kernels need a model packed with capacity=32 (one warp), got "
            f"capacity={packed.capacity}: rebuild it with build_packed_model(paths, capacity=32)"
        )
    k, _, regular = _path_info(packed)
    lanes = _host_lane_columns(packed, k) if columns else {}
    oversize_paths = np.flatnonzero(~regular).astype(np.int32)
    longest = min(config.MAX_FALLBACK_FEATURES, FALLBACK_MAX_FEATURES)  # the compiled size
    if oversize_paths.size and int(k[oversize_paths].max()) > longest:
        raise ValueError(
            f"a path has {int(k[oversize_paths].max())} distinct features; the CUDA backend "
            f"handles at most {longest}: use backend='cpu' for this model"
        )
    shap_bound, inter_bound = _path_bounds(packed)
    return dict(
        **lanes,
        cat_words=_nonempty(packed.cat_words, np.uint32),
        bin_offsets=np.ascontiguousarray(packed.bin_offsets, np.int64),
        path_offsets=np.ascontiguousarray(packed.path_offsets, np.int64),
        oversize_paths=_nonempty(oversize_paths, np.int32),
        expected_value=np.ascontiguousarray(packed.expected_value, np.float64),
        n_oversize=int(oversize_paths.size),
        shap_shift=fixed_point_shift(shap_bound),
        interaction_shift=fixed_point_shift(inter_bound),
    )


def _host_lane_columns(packed: PackedModel, k: np.ndarray) -> dict:
    """``lane_f``, ``lane_i``, ``lane_d`` and ``lane_cat`` built on the host (``k``: features
    of each path)."""
    n_lanes = int(packed.feature.shape[0])
    lane_path = packed.lane_path.astype(np.int64)
    bin_of_lane = np.repeat(np.arange(packed.num_bins, dtype=np.int64), np.diff(packed.bin_offsets))
    flags = (packed.missing.astype(np.int32) * device.MISSING_FLAG) | (
        packed.cat_other.astype(np.int32) * device.CAT_OTHER_FLAG
    )
    lane_i = np.zeros((max(n_lanes, 1), device.LI_COLUMNS), np.int32)
    lane_i[:n_lanes, device.LI_FEATURE] = packed.feature
    lane_i[:n_lanes, device.LI_POSITION] = np.arange(n_lanes) - packed.path_offsets[lane_path]
    lane_i[:n_lanes, device.LI_START] = (
        packed.path_offsets[lane_path] - packed.bin_offsets[bin_of_lane]
    )
    lane_i[:n_lanes, device.LI_FEATURES] = k[lane_path]
    lane_i[:n_lanes, device.LI_GROUP] = packed.path_group[lane_path]
    lane_i[:n_lanes, device.LI_FLAGS] = flags
    lane_i[:n_lanes, device.LI_NBITS] = packed.cat_nbits
    lane_f = np.zeros((max(n_lanes, 1), 4), np.float32)
    lane_f[:n_lanes, device.LF_LOWER] = packed.lower
    lane_f[:n_lanes, device.LF_UPPER] = packed.upper
    lane_f[:n_lanes, device.LF_ZERO] = packed.zero_fraction
    lane_f[:n_lanes, device.LF_VALUE] = packed.path_value[lane_path]
    lane_d = np.zeros((max(n_lanes, 1), 2), np.float64)
    lane_d[:n_lanes, device.LD_ZERO] = packed.zero_fraction
    lane_d[:n_lanes, device.LD_VALUE] = packed.path_value[lane_path]
    return dict(
        lane_f=lane_f,
        lane_i=lane_i,
        lane_cat=_nonempty(packed.cat_offsets, np.int64),
        lane_d=lane_d,
    )


def _to_device(host: dict) -> dict:
    out = {}
    for name, a in host.items():
        if isinstance(a, np.ndarray):
            a = cuda.to_device(a)
        elif name == "quadrature":
            a = tuple(QuadratureLaunch(**_to_device(launch)) for launch in a)
        out[name] = a
    return out


def device_model(packed: PackedModel) -> DeviceModel:
    """The :class:`DeviceModel` of ``packed`` on the current device under the configuration in
    force (:func:`distshap.plan.config.get_config`): made once, then kept in the one cache
    (:mod:`.caches`, keyed by ``(packed.digest, device id, configuration)``); a model without a
    digest is copied on every call."""
    if not isinstance(packed, PackedModel):
        raise TypeError(f"expected a PackedModel, got {type(packed).__name__}")
    device, config = device_id(), get_config()

    def build() -> DeviceModel:
        host = lane_arrays(packed, columns=False)  # checks the model before any copy
        return DeviceModel(**_to_device(host), **lane_columns(packed),
                           num_features=packed.num_features, num_groups=packed.num_groups,
                           packed=packed, device=device, config=config)  # fmt: skip

    if not packed.digest:
        return build()
    return cached_model((packed.digest, device, config), build)


def _filled_plan(packed: PackedModel, model: DeviceModel, offsets, fill, per_pattern: str):
    """A :class:`Plan` whose tables (at ``offsets``) ``fill`` computes on the device (SHAP
    plans, ``per_pattern`` ``"k"``, with chunk-local feature tiles: :func:`plan_arrays`)."""
    plan = plan_arrays(packed, offsets, local=per_pattern == "k")
    tables, total = fill(
        model.lane_d, model.path_offsets, strategy.path_features(packed.path_offsets), offsets,
        stream(),
    )  # fmt: skip
    plan.update(tables=tables, table_bytes=4 * total, per_pattern=per_pattern)
    return Plan(**_to_device(plan))


def shap_plan(packed: PackedModel, model: DeviceModel) -> Plan:
    """The SHAP :class:`Plan` of ``model``: SHAP tables (:func:`_shap_table_offsets`, filled
    on the device on first use) and the quadrature kernels for the other regular paths."""
    return model.form("shap", lambda: _filled_plan(
        packed, model, _shap_table_offsets(packed), fill_shap_tables, "k"
    ))  # fmt: skip


def interaction_plan(packed: PackedModel, model: DeviceModel) -> Plan:
    """The interaction :class:`Plan` of ``model`` (tables filled on the device on first use)."""
    return model.form("interactions", lambda: _filled_plan(
        packed, model, interaction_table_offsets(packed), fill_interaction_tables, "k*k"
    ))  # fmt: skip


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


def slot_arrays(packed: PackedModel, model: DeviceModel, slots, plan: Plan) -> SlotArrays:
    """The :class:`SlotArrays` of ``model`` from the host ``slots``
    (:func:`distshap.pair_slots.pair_slots` of ``packed``) and its interaction ``plan``, copied
    on first use and kept."""
    return model.form("slots", lambda: _slot_arrays(packed, slots, plan))


def _slot_arrays(packed: PackedModel, slots, plan: Plan) -> SlotArrays:
    lane_path = packed.lane_path.astype(np.int64)
    lane_map = slots.map_offsets[lane_path] if lane_path.size else np.zeros(1, np.int64)
    launches = [(_host(q.paths), _host(q.offsets)) for q in plan.quadrature]
    local_map, tiles, most = chunk_tiles(slots, launches)
    host = dict(
        path_map=_nonempty(slots.path_map, np.int32),
        map_offsets=np.ascontiguousarray(slots.map_offsets, np.int64),
        lane_map=np.ascontiguousarray(lane_map, np.int64),
        group_slots=np.ascontiguousarray(slots.slot_offsets, np.int64),
        num_pairs=np.ascontiguousarray(slots.num_pairs, np.int64),
        slot_i=_nonempty(slots.slot_i, np.int32),
        slot_j=_nonempty(slots.slot_j, np.int32),
        local_map=local_map,
    )
    tiles = tuple((cuda.to_device(o), cuda.to_device(_nonempty(t, np.int64))) for o, t in tiles)
    return SlotArrays(
        **_to_device(host), num_slots=slots.num_slots, max_group_slots=slots.max_group_slots,
        tiles=tiles, max_tile_slots=most,
    )  # fmt: skip


def _host(a) -> np.ndarray:
    """A device (or host) array's values on the host."""
    return a.copy_to_host() if hasattr(a, "copy_to_host") else np.asarray(a)


def strategy_stats(packed: PackedModel, costs=None) -> dict:
    """How the CUDA kernels will evaluate ``packed`` (host arithmetic only, no GPU needed).

    ``costs`` (:class:`~distshap.cost_model.KernelCosts`) choose the SHAP tables
    (:func:`_shap_table_offsets`; default: the current device kind's).

    Returns a dict with ``shap_table_paths``, ``shap_table_lanes`` and ``shap_table_bytes`` (SHAP
    values: the regular paths on SHAP tables, :func:`_shap_table_offsets`, filled on the device on
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
    tiles as launched (:func:`.quadrature.launch_quadrature`): ``quadrature_tiles`` (``"local"``:
    every launch with chunk-local feature tiles, :func:`local_chunks`; ``"all"``: none, a column per
    feature or global atomics; ``"mixed"``; ``"none"``: no quadrature paths), ``quadrature_chunks``
    (blocks of a row tile, over the launches: local chunks where they run),
    ``quadrature_tile_columns`` (int64 sums a thread in the widest tile, 0 where every launch adds
    to global memory), ``quadrature_warps`` (the fewest warps a block over the launches, 0: a launch
    adds to global memory), and
    ``fixed_point_shift`` (SHAP, interactions).
    """
    lanes = np.diff(packed.path_offsets)
    k = lanes - 1
    _, regular = _regular(packed)
    shap_offsets = _shap_table_offsets(packed, costs)
    stab = (shap_offsets >= 0) & regular
    quad = regular & ~stab
    itab = (interaction_table_offsets(packed) >= 0) & regular
    shap_bound, inter_bound = _path_bounds(packed)
    F1 = packed.num_features + 1
    G = packed.num_groups
    nodes = config.QUADRATURE_NODES
    kernel_of = strategy.quadrature_node_index(k[quad], nodes)
    per_node = {int(nodes[q]): int((kernel_of == q).sum()) for q in np.unique(kernel_of)}
    tiles = _shap_tiles(packed, shap_offsets)
    return {
        "shap_table_paths": int(stab.sum()),
        "shap_table_lanes": int(lanes[stab].sum()),
        "shap_table_bytes": 4 * strategy.table_values(k, np.where(stab, 0, -1), "k"),
        "quadrature_paths": int(quad.sum()),
        "quadrature_lanes": int(lanes[quad].sum()),
        "quadrature_nodes": per_node,
        "oversize_paths": int((~regular).sum()),
        "oversize_lanes": int(lanes[~regular].sum()),
        "interaction_table_paths": int(itab.sum()),
        "interaction_table_bytes": 4 * strategy.table_values(k, np.where(itab, 0, -1), "k*k"),
        "interaction_tables_too_wide": interaction_tables_too_wide(packed),
        "shared_tile_rows": (shared_tile_rows(G * F1), shared_tile_rows(G * F1 * F1)),
        "quadrature_shared": (tiles.pop("shared"), interaction_tile_fits(F1)),
        **tiles,
        "fixed_point_shift": (fixed_point_shift(shap_bound), fixed_point_shift(inter_bound)),
    }


def _shap_tiles(packed: PackedModel, shap_offsets: np.ndarray) -> dict:
    """The SHAP quadrature launches' tiles as :func:`.quadrature.launch_quadrature` runs them
    (host arithmetic): a launch takes chunk-local feature tiles where :func:`local_tiles` and
    its widest tile fits shared memory, else a column per feature (or global atomics)."""
    plan = plan_arrays(packed, shap_offsets, local=True)
    local = local_tiles(SimpleNamespace(lane_column=plan["lane_column"]))
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
    }
