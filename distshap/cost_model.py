"""A cost model of the CUDA SHAP kernels: predicted time per row, from constants per device kind.

No single kernel wins everywhere (``benchmarks/RESULTS.md``): the quadrature kernels cost about
``k`` loads and ``k * n`` multiply-adds per path and row (``n`` Gauss-Legendre nodes), the
pattern-table kernel one warp step per bin and row plus a table load per element (cheap while
the tables stay in the L2 cache, dearer beyond), and an output too wide for shared memory turns
every contribution into a global atomic. As in Tahoe (Xie et al., EuroSys 2021), each kernel's
time is predicted from a few measured constants and the host picks the fastest mix
(:func:`distshap.strategy.gpu_shap_table_offsets`).

The model, per row (seconds of the whole device; ``k`` features of a path, ``n`` the node count
of its quadrature kernel, ``F`` features, ``G`` output groups)::

    quadrature  sum over its paths of  quad_path + k (quad_lane + n quad_lane_node
                                       + [no shared sums] quad_global_lane)
                + tile columns * quad_chunk_col                (shared sums: zeroed, flushed)
    tables      table_bins * table_bin + table_lanes * (table_lane + miss * table_miss_lane
                + [no shared tile] table_global_lane),  miss = max(0, 1 - l2_bytes / table_bytes)
    fallback    sum over oversize paths of  k**2 fallback_lane2
    finish      G (F + 1) out_value

plus ``launch`` per kernel launch and ``call`` per call. The SHAP quadrature kernel sums a row in
shared memory, one int64 column per feature of the model (``tile columns = chunks * F``), or,
for models of more than :data:`~distshap.kernels.cuda.config.QUADRATURE_TILE_FEATURES` features
with chunk-local feature tiles (:data:`~distshap.kernels.cuda.config.SHAP_QUADRATURE_TILES`
``"local"``), one per feature of each chunk (``tile columns`` = the chunks' features, summed:
:func:`distshap.kernels.cuda.model.local_chunks`); it adds to global memory (``quad_global_lane``)
only where the tile does not fit :data:`~distshap.kernels.cuda.config.QUADRATURE_SHARED_BYTES`
(:func:`quadrature_tile_columns`). Models small enough for the one-launch
route (:func:`distshap.kernels.cuda.small.fits`) cost ``sum of k**2 * small_lane2`` a row and
``small_call`` a call instead. :class:`KernelCosts` holds the
constants; :func:`costs_for` gives those of a device: shipped defaults per device kind
(:data:`SHIPPED`), overridden by the user's cache that ``distshap calibrate``
(:mod:`distshap.kernels.cuda.calibrate`) writes (:func:`cache_file`). Nothing is ever
calibrated implicitly: the choice is a function of (model, device kind, cache file, settings),
so every GPU of one kind makes the same choice and gives the same bits.

The shipped constants are rough, derived from the measurements in ``benchmarks/RESULTS.md``
(see :data:`SHIPPED`); ``distshap calibrate`` replaces them with measured ones.

Use::

    distshap calibrate                          # once per machine (under a minute)
    distshap info MODEL                         # the choice and predicted rows/s on this GPU
    distshap info MODEL --device-kind H200      # ... for another kind, without a GPU
    DISTSHAP_KERNEL_COSTS=/path/costs.json ...  # another cache file ("none": shipped only)

The cache is keyed by the full device name: GPUs of one name share the constants, hence the
choice and the bits; hosts of a multi-node cluster should share the file (or none).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import math
import os
import threading
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "CACHE_ENV",
    "CACHE_FILE_NAME",
    "COST_FIELDS",
    "KernelCosts",
    "ModelShape",
    "Prediction",
    "SHIPPED",
    "cache_file",
    "costs_for",
    "current_device_name",
    "device_costs",
    "device_kind",
    "load_cache",
    "model_shape",
    "predict",
    "quadrature_path_seconds",
    "quadrature_tile_columns",
    "round_costs",
    "save_costs",
    "shipped_literal",
    "table_lane_seconds",
    "tables_everywhere",
    "use_costs",
]

#: Environment variable naming the cost cache file (``none``: shipped defaults only).
CACHE_ENV = "DISTSHAP_KERNEL_COSTS"
CACHE_FILE_NAME = "kernel_costs.json"
_CACHE_VERSION = 1

#: Per-row constants (seconds) of :class:`KernelCosts`, and the per-call ones.
COST_FIELDS = (
    "quad_path", "quad_lane", "quad_lane_node", "quad_global_lane", "quad_chunk_col",
    "table_bin", "table_lane", "table_miss_lane", "table_global_lane",
    "fallback_lane2", "out_value", "small_lane2",
)  # fmt: skip
CALL_FIELDS = ("launch", "call", "small_call")


@dataclass(frozen=True)
class KernelCosts:
    """Measured cost constants of the CUDA SHAP kernels on one device kind (module docstring).

    Every cost is in seconds of the whole device: per row and unit (path, lane, lane x node,
    bin, output value, ...) for the :data:`COST_FIELDS`, per launch (``launch``) and per call
    (``call``). ``l2_bytes`` is the device's L2 cache size; ``kind`` the device kind the
    constants belong to and ``source`` where they came from ("shipped ..." or "calibrated ...").
    """

    kind: str
    source: str
    quad_path: float
    quad_lane: float
    quad_lane_node: float
    quad_global_lane: float
    quad_chunk_col: float
    table_bin: float
    table_lane: float
    table_miss_lane: float
    table_global_lane: float
    fallback_lane2: float
    out_value: float
    small_lane2: float
    launch: float
    call: float
    small_call: float
    l2_bytes: int = 50 << 20
    #: Least predicted saving (share of the all-quadrature time) for SHAP tables; None:
    #: :data:`distshap.strategy.TABLE_MIN_SAVING`.
    min_saving: float | None = None

    def __post_init__(self) -> None:
        for name in COST_FIELDS + CALL_FIELDS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float, np.floating)):
                raise TypeError(f"KernelCosts.{name} must be a number, got {value!r}")
            if not math.isfinite(float(value)) or float(value) < 0:
                raise ValueError(
                    f"KernelCosts.{name} must be finite and >= 0 (seconds), got {value!r}: "
                    "re-run `distshap calibrate` or delete the cost cache"
                )
            object.__setattr__(self, name, float(value))
        if isinstance(self.l2_bytes, bool) or int(self.l2_bytes) != self.l2_bytes:
            raise TypeError(f"KernelCosts.l2_bytes must be an integer, got {self.l2_bytes!r}")
        if int(self.l2_bytes) <= 0:
            raise ValueError(f"KernelCosts.l2_bytes must be > 0, got {self.l2_bytes!r}")
        object.__setattr__(self, "l2_bytes", int(self.l2_bytes))
        if self.min_saving is not None and not 0.0 <= float(self.min_saving) < 1.0:
            raise ValueError(f"KernelCosts.min_saving must be in [0, 1), got {self.min_saving!r}")
        for name in ("kind", "source"):
            if not isinstance(getattr(self, name), str):
                raise TypeError(f"KernelCosts.{name} must be a str, got {getattr(self, name)!r}")

    def to_dict(self) -> dict:
        """The constants as a JSON-serialisable dict (:meth:`from_dict` reads it back)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> KernelCosts:
        """The :class:`KernelCosts` of a :meth:`to_dict` dict; unknown or missing keys are
        refused."""
        if not isinstance(data, dict):
            raise TypeError(f"kernel costs must be a dict, got {type(data).__name__}")
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - names)
        missing = sorted(n for n in names - set(data) if n not in ("l2_bytes", "min_saving"))
        if unknown or missing:
            raise ValueError(
                f"kernel costs: unknown keys {unknown}, missing keys {missing}: re-run "
                "`distshap calibrate` to rewrite the cache"
            )
        return cls(**data)


def _costs(kind: str, source: str, l2_mib: int, speed: float = 1.0, **per_row) -> KernelCosts:
    """Shipped constants: ``per_row`` in picoseconds, ``launch`` / ``call`` in microseconds,
    all row costs divided by ``speed`` (relative to the H100's)."""
    row = {k: v * 1e-12 / speed for k, v in per_row.items() if k in COST_FIELDS}
    call = {k: v * 1e-6 for k, v in per_row.items() if k in CALL_FIELDS}
    return KernelCosts(kind=kind, source=source, l2_bytes=l2_mib << 20, **row, **call)


# How the shipped constants were derived (benchmarks/RESULTS.md, models of benchmarks/shapes.py;
# path-length histograms from the same shapes' cached models, scaled to the path counts given
# there). They are rough: two or three measurements per kernel fit more constants than they
# determine, so the splits below are assumptions; `distshap calibrate` measures them.
# * Quadrature, SHARED sums (H100, 200k rows): cal_housing-med 1,219,333 rows/s (23,413 paths,
#   ~102.7k feature lanes, ~323k lane-nodes) and adult-med 1,172,262 (18,566 paths, ~105.4k
#   lanes, ~410k lane-nodes): 820 and 853 ns a row. With quad_path = 2 ps assumed, least squares
#   gives ~7.0 ps a lane and ~0.12 ps a lane-node. (H200, 1M rows: 1.23M and 1.18M: the same.)
# * Quadrature, GLOBAL sums: fashion_mnist-med (784 features, 129,571 paths, ~0.99M lanes,
#   ~3.9M lane-nodes) 99,285 rows/s on the H200 (10.1 us a row): ~2.6 ps a lane above the
#   shared-sum constants. With chunk-local feature tiles (fifth session) such models sum in
#   shared memory and no longer pay it: fashion_mnist-med 118.4k rows/s on the H200 (8.4 us a
#   row, predicted 126k), covtype-med 210.6k (its 54 columns a thread took 143k before,
#   occupancy the model does not price; predicted 214k).
# * Tables (the previous table kernel, second session, H100, 1M rows, tables in L2, shared
#   tile): cal_housing-med 1,052,959 rows/s (4,132 bins), adult-med 1,075,141 (4,188 bins):
#   ~0.23 ns a bin-row; the lane term cannot be told apart from it (equal lanes): 1 ps assumed.
# * Tables beyond L2 with global atomics: fashion_mnist-med, 711 MB of tables, 67,329 rows/s
#   (H100, 20k rows, ~38.7k bins, ~0.99M lanes): 14.9 us a row, 8.9 us of it bins; the rest,
#   ~6 ps a lane, split as 3 ps miss + 3 ps global atomics (assumed).
# * Finish pass, launches: small models take ~0.5 ms a call (RESULTS: "a few kernel launches and
#   the fixed-point finish pass (about 0.5 ms)"): 60 us a call + 20 us a launch assumed; the
#   finish pass at ~1 TB/s for 16 bytes (int64 read + reset, float32 write) a value: 16 ps.
# * Fallback (float64 DP, paths of 32+ features, rare): no measurement; ~10 ps per k**2 assumed.
# * The one-launch small-model route (a warp per row, float64 DP): no measurement yet; 70 ps
#   per k**2 a row (cal_housing-small, 80 paths of ~3 features: ~50 ns a row) and 30 us a call
#   assumed.
# * The H200 differs from the H100 mainly in memory bandwidth; the SHAP kernels measured the same
#   on both within noise (RESULTS: cal_housing-med 1.22M / 1.23M), so the H200 uses the H100's
#   constants. Unknown kinds ("generic") take them at half speed.
# * Check against numbers not used above (RESULTS, fourth session, H200, version-3 models,
#   through TreeExplainer): cal_housing-med 1,449,013 rows/s (predicted 1.45M), adult-med
#   1,596,983 (1.63M), fashion_mnist-med 90,863 (95k).
_BASE = dict(
    quad_path=2.0, quad_lane=7.0, quad_lane_node=0.12, quad_global_lane=2.6, quad_chunk_col=0.1,
    table_bin=230.0, table_lane=1.0, table_miss_lane=3.0, table_global_lane=3.0,
    fallback_lane2=10.0, out_value=16.0, small_lane2=70.0, launch=20.0, call=60.0,
    small_call=30.0,
)  # fmt: skip

# Per kind: (source, L2 MiB, constants in the units of `shipped_literal`, which prints a
# calibration's constants in this form: to ship measured ones, paste its line here).
_PER_KIND = {
    "H100": ("shipped (derived from benchmarks/RESULTS.md)", 50, _BASE),
    # Not the constants `distshap calibrate` measured on an H200 this session: fitted on its
    # synthetic models, they predicted the real shapes worse (fashion_mnist-med's quadrature
    # at 27k rows/s where it runs 91k, which would have put every path on tables predicted at
    # 75k; RESULTS.md, fourth session). The derived ones predicted those shapes within 5%.
    "H200": ("shipped (derived from benchmarks/RESULTS.md)", 50, _BASE),
}

#: Shipped constants per device kind (``benchmarks/RESULTS.md``; derivation in the source).
SHIPPED: dict[str, KernelCosts] = {
    kind: _costs(kind, source, l2, **values) for kind, (source, l2, values) in _PER_KIND.items()
}
SHIPPED["generic"] = _costs("generic", "shipped generic defaults (unknown device)", 40, 0.5,
                            **_BASE)  # fmt: skip
# The CUDA simulator (and host-side planning without a GPU) has no timings to go by: every
# eligible path gets a table (the shortest-first budget policy), so tests exercise the tables.
SHIPPED["simulator"] = replace(
    SHIPPED["generic"], kind="simulator", quad_path=1.0, table_bin=0.0, table_lane=0.0,
    table_miss_lane=0.0, table_global_lane=0.0,
    source="simulator / no GPU: every eligible path on a table (no timings to go by)",
)  # fmt: skip


def device_kind(device_name: str) -> str:
    """The device kind of a CUDA device name ("NVIDIA H100 80GB HBM3" -> "H100"); "simulator"
    for the CUDA simulator; "generic" for a device without shipped constants."""
    if _name(device_name).lower() == "simulator":
        return "simulator"
    name = _name(device_name).upper()
    for kind in ("H200", "H100"):
        if kind in name:
            return kind
    return "generic"


def _name(device_name: Any) -> str:
    if isinstance(device_name, bytes):
        device_name = device_name.decode("utf-8", "replace")
    if not isinstance(device_name, str):
        raise TypeError(f"device_name must be a str, got {type(device_name).__name__}")
    return device_name.strip()


# --------------------------------------------------------------------------------------------
# The user's cache of calibrated constants
# --------------------------------------------------------------------------------------------


def cache_file() -> Path | None:
    """Where calibrated constants are kept: ``$DISTSHAP_KERNEL_COSTS`` (``none``: no cache),
    else ``$XDG_CACHE_HOME/distshap/kernel_costs.json`` (``~/.cache/distshap/...``)."""
    env = os.environ.get(CACHE_ENV)
    if env is not None:
        return None if env.strip().lower() in ("", "none") else Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "distshap" / CACHE_FILE_NAME


_LOADED: dict = {}
_LOAD_LOCK = threading.Lock()


def load_cache(path: str | os.PathLike | None = None) -> dict[str, KernelCosts]:
    """Calibrated constants per device name from the cache file (``{}`` when there is none).

    A file that is not a cost cache of this version is refused with its name and the fix.
    """
    path = cache_file() if path is None else Path(path)
    if path is None or not path.exists():
        return {}
    stat = path.stat()
    key = (str(path), stat.st_mtime_ns, stat.st_size)
    with _LOAD_LOCK:
        hit = _LOADED.get(key)
    if hit is not None:
        return dict(hit)
    fix = f"delete {path} or re-run `distshap calibrate`"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ValueError(f"the kernel cost cache {path} is unreadable ({err}): {fix}") from None
    if not isinstance(data, dict) or data.get("version") != _CACHE_VERSION:
        raise ValueError(f"the kernel cost cache {path} is not of version {_CACHE_VERSION}: {fix}")
    devices = data.get("devices")
    if not isinstance(devices, dict):
        raise ValueError(f"the kernel cost cache {path} has no 'devices' mapping: {fix}")
    try:
        out = {str(name): KernelCosts.from_dict(c) for name, c in devices.items()}
    except (TypeError, ValueError) as err:
        raise ValueError(f"the kernel cost cache {path} is invalid ({err}): {fix}") from None
    with _LOAD_LOCK:
        _LOADED.clear()
        _LOADED[key] = out
    return dict(out)


def save_costs(device_name: str, costs: KernelCosts, path: str | os.PathLike | None = None) -> Path:
    """Store ``costs`` for ``device_name`` in the cache file (other devices' entries kept);
    written to a temporary name and renamed. Returns the file."""
    if not isinstance(costs, KernelCosts):
        raise TypeError(f"costs must be KernelCosts, got {type(costs).__name__}")
    path = cache_file() if path is None else Path(path)
    if path is None:
        raise ValueError(f"{CACHE_ENV}=none: there is no cost cache to write; set it to a file")
    entries = {name: c.to_dict() for name, c in load_cache(path).items()}
    entries[_name(device_name)] = costs.to_dict()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"version": _CACHE_VERSION, "devices": entries}, indent=1))
    os.replace(tmp, path)
    return path


def costs_for(device_name: str, cache: str | os.PathLike | None = None) -> KernelCosts:
    """The cost constants of the device named ``device_name``.

    The user's cache (``cache``, default :func:`cache_file`) entry of exactly that name when
    there is one (``distshap calibrate``), else the shipped constants of its kind
    (:func:`device_kind`; "generic" for kinds without any).
    """
    name = _name(device_name)
    calibrated = load_cache(cache).get(name)
    if calibrated is not None:
        return calibrated
    return SHIPPED[device_kind(name)]


_OVERRIDE: contextvars.ContextVar = contextvars.ContextVar("distshap_kernel_costs", default=None)


@contextlib.contextmanager
def use_costs(costs: KernelCosts) -> Iterator[KernelCosts]:
    """Within the block, :func:`device_costs` returns ``costs`` (calibration and benchmarks
    force a strategy this way; clear the device model cache around it)."""
    if not isinstance(costs, KernelCosts):
        raise TypeError(f"costs must be KernelCosts, got {type(costs).__name__}")
    token = _OVERRIDE.set(costs)
    try:
        yield costs
    finally:
        _OVERRIDE.reset(token)


def current_device_name() -> str:
    """Name of the current CUDA device ("simulator" under the CUDA simulator, "" where no GPU
    is available). Touches CUDA: call it only where a kernel is about to run (or in a CLI)."""
    from numba import cuda

    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        return "simulator"
    if not cuda.is_available():
        return ""
    return _name(cuda.get_current_device().name)


def device_costs() -> KernelCosts:
    """The constants that choose the strategy on the current device: those of
    :func:`use_costs` inside such a block, else :func:`costs_for` of the device's name (the
    simulator's, every eligible path on a table, where no GPU is available)."""
    forced = _OVERRIDE.get()
    if forced is not None:
        return forced
    name = current_device_name()
    return costs_for(name) if name else SHIPPED["simulator"]


def tables_everywhere(base: KernelCosts | None = None) -> KernelCosts:
    """Constants under which every eligible path is worth a table (benchmarks, calibration,
    tests of the table kernels): :func:`distshap.strategy.gpu_shap_table_offsets` then gives
    :func:`distshap.strategy.choose_tables`' shortest-first choice within the budget."""
    base = SHIPPED["generic"] if base is None else base
    zero = {name: 0.0 for name in ("table_bin", "table_lane", "table_miss_lane",
                                   "table_global_lane")}  # fmt: skip
    return replace(base, source="forced: tables everywhere", quad_path=1.0, min_saving=0.0,
                   **zero)  # fmt: skip


def shipped_literal(costs: KernelCosts) -> str:
    """``costs`` in the units of the shipped table (:data:`SHIPPED`: per-row constants in
    picoseconds, per-launch and per-call ones in microseconds), as a Python ``dict(...)``, to
    ship measured constants for a device kind."""
    parts = [f"{n}={getattr(costs, n) * 1e12:.4g}" for n in COST_FIELDS]
    parts += [f"{n}={getattr(costs, n) * 1e6:.4g}" for n in CALL_FIELDS]
    return f"dict({', '.join(parts)})  # l2_bytes={costs.l2_bytes}"


def round_costs(costs: KernelCosts, digits: int = 3) -> KernelCosts:
    """``costs`` with every constant rounded to ``digits`` significant digits (so that a
    re-calibration that measures the same within noise writes the same numbers)."""

    def r(x: float) -> float:
        return 0.0 if x == 0 else float(f"{x:.{digits}g}")

    return replace(costs, **{n: r(getattr(costs, n)) for n in COST_FIELDS + CALL_FIELDS})


# --------------------------------------------------------------------------------------------
# Predictions
# --------------------------------------------------------------------------------------------


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
    from distshap import strategy
    from distshap.packed import PackedModel

    if not isinstance(model, PackedModel):
        raise TypeError(f"expected a PackedModel or ModelShape, got {type(model).__name__}")
    k = strategy.path_features(model.path_offsets)
    path_bin, regular = strategy.regular_paths(model.bin_offsets, model.path_offsets, lanes=32)
    return ModelShape(
        k=k, group=np.asarray(model.path_group, np.int64), path_bin=path_bin, regular=regular,
        num_features=int(model.num_features), num_groups=int(model.num_groups),
        max_table_features=int(model.max_table_features),
        table_budget_bytes=int(model.table_budget_bytes), small=_small_route(model),
        lane_feature=np.asarray(model.feature), path_offsets=np.asarray(model.path_offsets),
    )  # fmt: skip


def _small_route(packed: Any) -> bool:
    """Whether SHAP calls of ``packed`` take the one-launch small-model route."""
    try:
        from distshap.kernels.cuda import small
    except ImportError:  # no such route in this build
        return False
    return bool(small.fits(packed, False))


def _quadrature_config() -> tuple[tuple[int, ...], int, int, int]:
    from distshap.kernels.cuda import config

    return (tuple(config.QUADRATURE_NODES), int(config.QUADRATURE_CHUNK_PATHS),
            int(config.QUADRATURE_SHARED_BYTES), int(config.BATCH_BUDGET_BYTES))  # fmt: skip


#: Most features of a path in a regular bin (one warp of 32 lanes, the bias lane included).
_REGULAR_MAX_K = 31


def _local_tiles(num_features: int) -> bool:
    """Whether SHAP plans of a model of ``num_features`` features get chunk-local feature tiles
    (:func:`distshap.kernels.cuda.model.plan_arrays`, launched where
    :func:`distshap.kernels.cuda.quadrature.local_tiles`)."""
    from distshap.kernels.cuda import config

    return (config.SHAP_QUADRATURE_TILES == "local"
            and int(num_features) > int(config.QUADRATURE_TILE_FEATURES))  # fmt: skip


def quadrature_tile_columns(num_features: int) -> int:
    """Int64 columns a thread of the SHAP quadrature kernel sums a row in at most: the model's
    features, or with chunk-local feature tiles (more features than
    :data:`~distshap.kernels.cuda.config.QUADRATURE_TILE_FEATURES`, tiles ``"local"``) that
    bound, or the longest regular path's features where they exceed it (such a path gets a
    chunk of its own), whichever is fewer than the model's."""
    from distshap.kernels.cuda import config

    F = int(num_features)
    if not _local_tiles(F):
        return F
    return min(F, max(int(config.QUADRATURE_TILE_FEATURES), _REGULAR_MAX_K))


def quadrature_shared(num_features: int) -> bool:
    """Whether the SHAP quadrature kernels sum a row in shared memory (else global atomics):
    :func:`distshap.kernels.cuda.quadrature.quadrature_warps` of the widest tile
    (:func:`quadrature_tile_columns`) > 0."""
    from distshap.kernels.cuda.quadrature import quadrature_warps

    return quadrature_warps(quadrature_tile_columns(num_features)) > 0


def table_shared(width: int) -> bool:
    """Whether the table kernel sums a tile of rows in shared memory for ``width`` outputs per
    row (:func:`distshap.kernels.cuda.tables.shared_tile_rows` > 0)."""
    from distshap.kernels.cuda.tables import shared_tile_rows

    return shared_tile_rows(width) > 0


def quadrature_path_seconds(
    costs: KernelCosts, k: np.ndarray, num_features: int, nodes: tuple[int, ...] | None = None
) -> np.ndarray:
    """Seconds per row of each path of ``k`` features in the quadrature kernels (float64;
    the chunk term aside). Paths longer than the largest kernel get ``inf``."""
    if nodes is None:
        nodes = _quadrature_config()[0]
    k = np.asarray(k, np.int64)
    idx = np.searchsorted(np.asarray(nodes), (k + 1) // 2)
    n = np.asarray(tuple(nodes) + (0,), np.float64)[np.minimum(idx, len(nodes))]
    lane = costs.quad_lane + (0.0 if quadrature_shared(num_features) else costs.quad_global_lane)
    out = costs.quad_path + k * (lane + n * costs.quad_lane_node)
    return np.where(idx < len(nodes), out, np.inf)


def table_lane_seconds(costs: KernelCosts, width: int) -> float:
    """Seconds per row of one table element (tables in L2; bins and misses aside)."""
    return costs.table_lane + (0.0 if table_shared(width) else costs.table_global_lane)


def miss_fraction(table_bytes: float, l2_bytes: int) -> float:
    """Share of table loads assumed to miss the L2 cache: ``max(0, 1 - l2 / tables)``."""
    return max(0.0, 1.0 - l2_bytes / table_bytes) if table_bytes > 0 else 0.0


@dataclass(frozen=True)
class Prediction:
    """Predicted time of one SHAP call of ``n_rows`` rows, with a breakdown per kernel.

    ``seconds`` (total), ``rows_per_second``; ``breakdown`` seconds per part ("quadrature",
    "tables", "fallback", "finish", "launches"; "small" on the one-launch route); the plan:
    ``table_paths``, ``table_bins``, ``table_bytes``, ``quadrature_paths``, ``oversize_paths``
    (all 0 on the small route); ``kind`` and ``source`` of the constants; ``route`` "regular"
    or "small" (:func:`distshap.kernels.cuda.small.fits`).
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
    nodes, chunk_paths, _, _ = _quadrature_config()
    k, F, G = shape.k, shape.num_features, shape.num_groups
    table_offsets = np.asarray(table_offsets, np.int64)
    if table_offsets.shape != k.shape:
        raise ValueError(f"table offsets have shape {table_offsets.shape}, paths {k.shape}")
    is_t = (table_offsets >= 0) & shape.regular
    is_q = (table_offsets < 0) & shape.regular
    over = ~shape.regular
    idx = np.searchsorted(np.asarray(nodes), (k[is_q] + 1) // 2)
    if idx.size and int(idx.max()) >= len(nodes):
        raise ValueError(f"paths of more than {2 * nodes[-1]} features need the fallback kernel")
    n = np.asarray(nodes, np.float64)[idx]
    tshared = table_shared(G * (F + 1))
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
    :func:`distshap.kernels.cuda.quadrature.launch_quadrature` runs them."""
    from distshap.kernels.cuda.quadrature import quadrature_warps

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
    if not _local_tiles(F):
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
    chunks :func:`~distshap.kernels.cuda.model.local_chunks` forms, launch by launch (one
    whose widest tile does not fit shared memory runs the all-features kernel)."""
    from types import SimpleNamespace

    from distshap import strategy
    from distshap.kernels.cuda import config
    from distshap.kernels.cuda.model import local_chunks
    from distshap.kernels.cuda.quadrature import quadrature_warps

    F = int(shape.num_features)
    lanes = SimpleNamespace(
        path_offsets=np.asarray(shape.path_offsets, np.int64),
        feature=np.asarray(shape.lane_feature, np.int64), path_group=shape.group,
        num_features=F,
    )  # fmt: skip
    column = np.full(max(lanes.feature.size, 1), -1, np.int16)  # scratch
    window = int(getattr(config, "QUADRATURE_TILE_WINDOW", 0))  # as plan_arrays chunks them
    extra = {"window": window} if window else {}
    global_lanes = tile_columns = 0.0
    for launch in strategy.quadrature_launches(shape.k, shape.group, is_q, nodes, chunk_paths):
        tiles = local_chunks(lanes, launch["paths"], int(config.QUADRATURE_TILE_FEATURES),
                             chunk_paths, column, **extra)  # fmt: skip
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
    nodes = _quadrature_config()[0]
    table_offsets = np.asarray(table_offsets, np.int64)
    is_q = (table_offsets < 0) & shape.regular
    n_over = int((~shape.regular).sum())
    used = np.unique(np.searchsorted(np.asarray(nodes), (shape.k[is_q] + 1) // 2)).size
    tables = int(bool(((table_offsets >= 0) & shape.regular).any()))
    return tables + int(used) + -(-n_over // 65535) + 1


def _choice_offsets(shape: ModelShape, choice: Any, costs: KernelCosts) -> np.ndarray:
    from distshap import strategy

    if isinstance(choice, str):
        if choice == "quadrature":
            return np.full(shape.k.shape, -1, np.int64)
        if choice == "auto":
            return strategy.gpu_shap_table_offsets(
                shape.k, shape.group, shape.table_budget_bytes, shape.max_table_features, costs,
                num_features=shape.num_features, num_groups=shape.num_groups,
                path_bin=shape.path_bin,
            )  # fmt: skip
        if choice == "tables":
            return strategy.choose_tables(
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
        batch_budget = _quadrature_config()[3]
    return max(1, min(n_rows, 1 << 24, batch_budget // (8 * max(1, width))))


def predict(
    model: Any, choice: Any = "auto", costs: KernelCosts | None = None, n_rows: int = 1_000_000
) -> Prediction:
    """Predicted time of explaining ``n_rows`` rows of ``model`` on the CUDA backend.

    Parameters
    ----------
    model : PackedModel or ModelShape
    choice : {"auto", "quadrature", "tables"} or int array (n_paths,)
        "auto": the cost model's choice (:func:`distshap.strategy.gpu_shap_table_offsets`);
        "quadrature": no tables; "tables": every path a table within the model's budget and
        feature limit, shortest first (:func:`distshap.strategy.choose_tables`); or per-path
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
