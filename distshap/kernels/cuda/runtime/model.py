"""The device model: a packed model's arrays on one GPU, its plans, and the cache keeping them.

:func:`device_model` copies a :class:`~distshap.packed.PackedModel` to the current device once
per ``(digest, device)``: the lane arrays (columns named in :mod:`.device`, assembled on the
device from the packed model's own arrays by :func:`.upload.lane_columns`), the paths of the
oversize bins and the fixed-point shifts. The two :class:`Plan` s are built on the first call
that needs them, tables filled on the device:

* SHAP values (:func:`shap_plan`, ``model.shap``; for calls of few rows
  :func:`few_rows_shap_plan`, the same paths in shorter quadrature chunks; a call's choice:
  :func:`shap_plan_of_rows`) and interaction values
  (:func:`interaction_plan`): which path runs on the table, quadrature or fallback kernel is
  host policy (:mod:`distshap.plan.gpu`, which also reports it without a GPU:
  :func:`~distshap.plan.gpu.strategy_stats`); this module fills the tables and copies the plan.

The launchers pass these arrays as read-only hints made once and kept with the model
(:meth:`DeviceModel.read_only`); tables the device fills (CuPy) become Numba device arrays when
the plan is made, as the copied arrays are.

The host arrays of the model and of its SHAP plan (:func:`lane_host`, :func:`shap_plan_host`)
are deterministic functions of the packed model and the configuration: for the packed model of
a saved build (:mod:`distshap.build_cache`) they are kept with it
(:func:`~distshap.build_cache.load_derived`, keyed by the configuration fields that shape them,
:func:`saved_inputs`), so a later process maps them back instead of computing them.

Pair slots (:func:`slot_arrays`, on the first call that needs them): the host
:class:`~distshap.pair_slots.PairSlots` maps and the quadrature kernel's chunk tiles
(:func:`~distshap.plan.launches.chunk_tiles`), kept on the device model. Fixed-point shifts:
:func:`~distshap.plan.gpu.fixed_point_shift`.
"""

from __future__ import annotations

import dataclasses
import threading
import weakref
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import numpy as np
from numba import cuda

from distshap import build_cache
from distshap.compile_cache import wait_ahead
from distshap.kernels import prepare
from distshap.kernels.cuda.runtime import device
from distshap.kernels.cuda.runtime.caches import cached_model
from distshap.kernels.cuda.runtime.device import device_id, stream
from distshap.kernels.cuda.runtime.upload import lane_columns
from distshap.kernels.cuda.table_fill import fill_interaction_tables, fill_shap_tables
from distshap.packed import PackedModel
from distshap.plan.config import Config, config_context, get_config
from distshap.plan.costs import device_costs, forced_costs
from distshap.plan.geometry import local_tiles
from distshap.plan.gpu import (
    fixed_point_shift,
    interaction_table_offsets,
    keep_path_info,
    path_bounds,
    path_info,
    plan_arrays,
    shap_table_offsets,
)
from distshap.plan.launches import chunk_tiles
from distshap.plan.tables import path_features

__all__ = [
    "DeviceModel", "Plan", "QuadratureLaunch", "SlotArrays", "device_model",
    "interaction_plan", "lane_arrays", "lane_host", "saved_inputs", "shap_plan",
    "shap_plan_host", "shap_plan_of_rows", "slot_arrays",
]  # fmt: skip


@dataclass(eq=False)
class QuadratureLaunch:
    """The paths of one quadrature kernel (``n_nodes`` nodes), in chunks of one output group.

    Chunk ``c`` is ``paths[offsets[c]:offsets[c + 1]]``, all of group ``group[c]``.

    Chunk-local feature tiles (SHAP plans of models wider than
    ``quadrature_tile_features``, else ``None``; :func:`~distshap.plan.launches.local_chunks`):
    the same ``paths`` chunked again, local chunk ``c`` is
    ``paths[local_offsets[c]:local_offsets[c + 1]]`` of group ``local_group[c]``, touching the
    features
    ``local_features[local_feature_offsets[c]:local_feature_offsets[c + 1]]`` (increasing);
    ``local_columns`` is the most features of one local chunk (the tile's columns) and the
    plan's ``lane_column`` gives each lane its feature's position in its chunk's list.
    ``general_units`` (SHAP plans): whether a path heads a sibling unit other than a pair; if
    not, the kernels built without the general fold run the launch.
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
    general_units: bool = True


@dataclass(eq=False)
class Plan:
    """Device arrays of one output kind (SHAP or interactions): which path runs where.

    ``lane_table`` (int64, per lane) is the table offset of the lane's path (-1: none);
    ``table_bins`` are the regular bins holding a table path and ``table_maxk`` (per bin) the
    largest ``k`` of those paths; ``quadrature`` the launches of the other regular paths.
    ``per_pattern`` says what the tables hold a pattern
    (:func:`~distshap.plan.tables.choose_tables`):
    ``"k"`` SHAP values, ``"k*k"`` interaction values. ``lane_column`` (int16 per lane, SHAP
    plans with chunk-local feature tiles, else ``None``): the column of a quadrature lane's
    feature in its local chunk's tile (:class:`QuadratureLaunch`), -1 for other lanes.
    ``unit_offsets`` (int32, one more than paths), ``unit_value`` (float32 per entry) and
    ``unit_lanes`` (int32, three tail lanes an entry), SHAP plans: the sibling units the
    quadrature kernels run (:func:`~distshap.plan.units.sibling_units`; a head's entries are
    ``unit_offsets[p]:unit_offsets[p + 1]``) and ``unit_pair`` (int32 per path: a sibling
    pair's other tail lane, :func:`~distshap.plan.gpu.pair_partners`); None in interaction
    plans.
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
    unit_offsets: object = None
    unit_value: object = None
    unit_lanes: object = None
    unit_pair: object = None


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

#: The module whose helpers compile the CUDA kernels ahead (:func:`distshap.warmup.start_ahead`).
AHEAD_MODULE = "distshap.kernels.cuda.runtime.ptx"


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
        lock, so a build may ask for other forms; under the model's own :attr:`config`, so a
        form matches the cache key it hangs on), then kept as long as the model."""
        hit = self._forms.get(key)
        if hit is not None:
            return hit
        with self._lock:
            hit = self._forms.get(key)
            if hit is None:
                with config_context(self.config):
                    hit = self._forms[key] = build()
            return hit

    def read_only(self, key: Hashable, arrays: Callable[[], tuple]) -> tuple:
        """``arrays()`` as read-only argument hints (``numba.cuda.In``), made once per ``key``
        and kept with the model (:meth:`form`). ``arrays`` gives device arrays this model keeps
        (its own, its plans', its other forms'), so a key names the same arrays as long as the
        model lives. A launch hands a kept hint on as it is; a bare array is wrapped in a new
        hint (``InOut``, whose conversion also copies nothing for a device array) at every
        launch."""
        return self.form(("read_only", key), lambda: tuple(cuda.In(a) for a in arrays()))

    @property
    def shap(self) -> Plan:
        """The SHAP :class:`Plan` (built on first use: :func:`shap_plan`)."""
        return shap_plan(self.packed, self)


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
    derived = lane_host(packed)
    k = derived["path_info"][0]
    oversize_paths = derived["oversize_paths"]
    longest = get_config().max_fallback_features  # the fallback kernel's compiled size
    if oversize_paths.size and int(k[oversize_paths].max()) > longest:
        raise ValueError(
            f"a path has {int(k[oversize_paths].max())} distinct features; the CUDA backend "
            f"handles at most {longest}: use backend='cpu' for this model"
        )
    lanes = _host_lane_columns(packed, k) if columns else {}
    return dict(
        **lanes,
        cat_words=_nonempty(packed.cat_words, np.uint32),
        bin_offsets=np.ascontiguousarray(packed.bin_offsets, np.int64),
        path_offsets=np.ascontiguousarray(packed.path_offsets, np.int64),
        oversize_paths=_nonempty(oversize_paths, np.int32),
        expected_value=np.ascontiguousarray(packed.expected_value, np.float64),
        n_oversize=int(oversize_paths.size),
        shap_shift=fixed_point_shift(derived["shap_bound"]),
        interaction_shift=fixed_point_shift(derived["interaction_bound"]),
    )


#: Configuration fields that shape no host array of a device model (loading, packing, caches,
#: helper processes, call batching): left out of :func:`saved_inputs`, so that changing one
#: still finds the arrays kept with a saved build.
NOT_SHAPING = frozenset((
    "batch_budget_bytes", "cache_size", "compile_ahead_processes", "saved_build_bytes",
    "gpu_preparation", "loader_threaded_min_nodes", "large_model_file_bytes", "few_rows_blocks",
    "loader_cold_max_nodes", "packing_numpy_max_items", "packing_cold_max_items",
    "margin_block_rows", "margin_block_rows_per_tree",
))  # fmt: skip


def saved_inputs(costs: bool = False) -> tuple:
    """What host arrays of a device model depend on besides the packed model, as the key of
    the ones kept with a saved build (:func:`distshap.build_cache.load_derived`): every field
    of the configuration in force but those of :data:`NOT_SHAPING` and, with ``costs``, the
    constants choosing the SHAP tables (:func:`~distshap.plan.costs.device_costs`)."""
    config = get_config()
    fields = tuple((f.name, getattr(config, f.name)) for f in dataclasses.fields(config)
                   if f.name not in NOT_SHAPING)  # fmt: skip
    return (*fields, device_costs()) if costs else fields


def lane_host(packed: PackedModel) -> dict:
    """What the device model computes from ``packed`` on the host: ``path_info``
    (:func:`~distshap.plan.gpu.path_info`, kept as ``packed``'s), the paths run by the
    fallback kernel (``oversize_paths``, int32) and the fixed-point bounds (``shap_bound``,
    ``interaction_bound``: :func:`~distshap.plan.gpu.path_bounds`); mapped back where a saved
    build keeps them (module docstring), else computed (and kept there); made once a model
    object (none of it depends on the configuration)."""
    with _LANES_LOCK:
        hit = _LANES.get(packed)
    if hit is not None:
        return hit
    derived = build_cache.load_derived(packed, "device-lanes", (), lambda: _lane_host(packed))
    derived = dict(derived, path_info=keep_path_info(packed, derived["path_info"]))
    with _LANES_LOCK:
        return _LANES.setdefault(packed, derived)


_LANES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # packed -> lane_host's
_LANES_LOCK = threading.Lock()


def _lane_host(packed: PackedModel) -> dict:
    info = path_info(packed)
    shap_bound, interaction_bound = path_bounds(packed)
    return dict(
        path_info=info, oversize_paths=np.flatnonzero(~info[2]).astype(np.int32),
        shap_bound=shap_bound, interaction_bound=interaction_bound,
    )  # fmt: skip


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
    """``host``'s NumPy arrays copied to the device and its other device arrays (CuPy: the
    filled tables) as Numba device arrays, each made once: a launch types and converts a Numba
    device array from what it keeps, a CuPy array anew at every launch."""
    out = {}
    for name, a in host.items():
        if isinstance(a, np.ndarray):
            a = cuda.to_device(a)
        elif hasattr(a, "__cuda_array_interface__") and not hasattr(a, "__cuda_memory__"):
            a = cuda.as_cuda_array(a)  # a view that keeps ``a`` (freed with the model)
        elif name == "quadrature":
            a = tuple(QuadratureLaunch(**_to_device(launch)) for launch in a)
        out[name] = a
    return out


def device_model(packed: PackedModel) -> DeviceModel:
    """The :class:`DeviceModel` of ``packed`` on the current device under the configuration in
    force (:func:`distshap.plan.config.get_config`): made once, then kept in the one cache
    (:mod:`.caches`, keyed by ``(packed.digest, device id, configuration)``); a model without a
    digest is copied on every call. Waits first for the GPU preparations under way
    (:func:`distshap.kernels.prepare.wait`), which may have made it already."""
    if not isinstance(packed, PackedModel):
        raise TypeError(f"expected a PackedModel, got {type(packed).__name__}")
    prepare.wait()  # an explainer's GPU preparation under way: its model, kernels and context
    device, config = device_id(), get_config()

    def build() -> DeviceModel:
        wait_ahead(module=AHEAD_MODULE)  # kernels compiled ahead: the first launch loads them
        host = lane_arrays(packed, columns=False)  # checks the model before any copy
        return DeviceModel(**_to_device(host), **lane_columns(packed),
                           num_features=packed.num_features, num_groups=packed.num_groups,
                           packed=packed, device=device, config=config)  # fmt: skip

    if not packed.digest:
        return build()
    return cached_model((packed.digest, device, config), build)


def _filled_plan(packed: PackedModel, model: DeviceModel, offsets, fill, per_pattern: str,
                 host: dict | None = None):  # fmt: skip
    """A :class:`Plan` whose tables (at ``offsets``) ``fill`` computes on the device (SHAP
    plans, ``per_pattern`` ``"k"``, with chunk-local feature tiles: :func:`plan_arrays`, or
    ``host``, made by it before)."""
    local = per_pattern == "k"
    plan = plan_arrays(packed, offsets, local=local, units=local) if host is None else dict(host)
    tables, total = fill(
        model.lane_d, model.path_offsets, path_features(packed.path_offsets), offsets,
        stream(),
    )  # fmt: skip
    plan.update(tables=tables, table_bytes=4 * total, per_pattern=per_pattern)
    return Plan(**_to_device(plan))


def shap_plan_host(packed: PackedModel) -> tuple:
    """The host side of :func:`shap_plan`, which needs no device model: the table offsets
    (:func:`~distshap.plan.gpu.shap_table_offsets`) and the plan's host arrays
    (:func:`~distshap.plan.gpu.plan_arrays`), under the configuration in force; mapped back
    where a saved build keeps them (module docstring), else computed (and kept there)."""
    return build_cache.load_derived(packed, "device-shap", saved_inputs(costs=True),
                                    lambda: _shap_plan_host(packed))  # fmt: skip


def _shap_plan_host(packed: PackedModel) -> tuple:
    offsets = shap_table_offsets(packed)
    return offsets, plan_arrays(packed, offsets, local=True, units=True)


def shap_plan(packed: PackedModel, model: DeviceModel, host: tuple | None = None) -> Plan:
    """The SHAP :class:`Plan` of ``model``: SHAP tables
    (:func:`~distshap.plan.gpu.shap_table_offsets`, filled on the device on first use) and the
    quadrature kernels for the other regular paths; ``host``: :func:`shap_plan_host` of
    ``packed``, made before under the same configuration (a GPU preparation makes it while the
    device model is copied)."""

    def build() -> Plan:
        offsets, plan = shap_plan_host(packed) if host is None else host
        return _filled_plan(packed, model, offsets, fill_shap_tables, "k", plan)

    return model.form(("shap", forced_costs()), build)


def few_rows_shap_plan(packed: PackedModel, model: DeviceModel) -> Plan:
    """The SHAP :class:`Plan` of ``model`` for calls of few rows: :func:`shap_plan`'s tables
    and paths, its quadrature launches cut into chunks of ``few_rows_chunk_paths`` paths
    (:class:`~distshap.plan.config.Config`), so a call of a few rows still fills the GPU."""
    plan = model.shap

    def build() -> Plan:
        chunk = int(get_config().few_rows_chunk_paths)
        with config_context(quadrature_chunk_paths=chunk):
            host = shap_plan_host(packed)[1]  # its own key where a saved build keeps it
        quadrature = _to_device({"quadrature": host["quadrature"]})["quadrature"]
        column = host["lane_column"]
        column = None if column is None else cuda.to_device(column)
        names = ("unit_offsets", "unit_value", "unit_lanes", "unit_pair")
        units = {}  # the usual plan's units, unless the launches left out other members
        if any(not np.array_equal(host[n], getattr(plan, n).copy_to_host()) for n in names):
            units = {n: cuda.to_device(host[n]) for n in names}
        return replace(plan, quadrature=quadrature, lane_column=column, **units)

    return model.form(("shap few rows", forced_costs()), build)


def shap_plan_of_rows(packed: PackedModel, model: DeviceModel, n: int) -> Plan:
    """The SHAP :class:`Plan` a batch of ``n`` rows runs: :func:`few_rows_shap_plan` for at
    most ``few_rows`` rows, or where :func:`shap_plan`'s quadrature chunks would give the batch
    fewer than ``few_rows_blocks`` thread blocks (a model of few paths: too few waves to fill
    the GPU evenly; counted over all its quadrature launches, at two rows a thread and
    ``shap_quadrature_warps`` warps a block, an estimate of how the launches size their
    blocks), else :func:`shap_plan` (the same bits either way)."""
    config = get_config()
    if n <= config.few_rows:
        return few_rows_shap_plan(packed, model)
    plan = model.shap
    least = int(config.few_rows_blocks)
    if least > 0 and config.few_rows_chunk_paths < config.quadrature_chunk_paths:
        local = local_tiles(plan)
        chunks = sum(q.n_local if local else q.n_chunks for q in plan.quadrature)
        block_rows = 64 * int(config.shap_quadrature_warps)  # two rows a thread
        if 0 < chunks * -(-int(n) // block_rows) < least:
            return few_rows_shap_plan(packed, model)
    return plan


def interaction_plan(packed: PackedModel, model: DeviceModel) -> Plan:
    """The interaction :class:`Plan` of ``model`` (tables filled on the device on first use)."""
    return model.form("interactions", lambda: _filled_plan(
        packed, model, interaction_table_offsets(packed), fill_interaction_tables, "k*k"
    ))  # fmt: skip


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
