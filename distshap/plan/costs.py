"""Cost constants of the CUDA SHAP kernels per device kind, and the user's calibration cache.

No single kernel wins everywhere: the quadrature kernels cost about ``k`` loads and ``k * n``
multiply-adds per path and row (``n`` Gauss-Legendre nodes), the pattern-table kernel one warp
step per bin and row plus a table load per element (cheap while the tables stay in the L2
cache, dearer beyond), and an output too wide for shared memory turns every contribution into a
global atomic. As in Tahoe (Xie et al., EuroSys 2021), each kernel's time is predicted from a
few measured constants (:mod:`distshap.plan.predict`) and the host picks the fastest mix
(:func:`distshap.plan.tables.gpu_shap_table_offsets`).

:class:`KernelCosts` holds the constants; :func:`costs_for` gives those of a device: shipped
defaults per device kind (:data:`SHIPPED`, rough, derived from ``benchmarks/RESULTS.md``),
overridden by the user's cache that ``distshap calibrate`` (:mod:`distshap.kernels.cuda.calibrate`)
writes (:func:`cache_file`). Nothing is ever calibrated implicitly: the choice is a function of
(model, device kind, cache file, configuration), so every GPU of one kind makes the same choice
and gives the same bits.

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
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from distshap.plan.config import get_config
from distshap.plan.geometry import quadrature_node_index, quadrature_shared, shared_tile_rows

__all__ = [
    "CACHE_ENV",
    "CACHE_FILE_NAME",
    "CALL_FIELDS",
    "COST_FIELDS",
    "KernelCosts",
    "SHIPPED",
    "cache_file",
    "costs_for",
    "current_device_name",
    "device_costs",
    "device_kind",
    "forced_costs",
    "load_cache",
    "miss_fraction",
    "quadrature_path_seconds",
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
    #: :data:`distshap.plan.tables.TABLE_MIN_SAVING`.
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


# The shipped constants, in the units of `shipped_literal` (per-row constants in picoseconds,
# per-launch and per-call ones in microseconds). They are rough: fitted to a few measured
# throughputs of the benchmark shapes (benchmarks/RESULTS.md, "Cost model constants", gives the
# derivation), with the splits between constants those measurements cannot tell apart assumed;
# `distshap calibrate` measures them on the machine at hand.
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
    # The same constants as the H100's: its SHAP kernels measure the same within noise.
    "H200": ("shipped (derived from benchmarks/RESULTS.md)", 50, _BASE),
}

#: Shipped constants per device kind (derivation: ``benchmarks/RESULTS.md``).
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
    force a strategy this way)."""
    if not isinstance(costs, KernelCosts):
        raise TypeError(f"costs must be KernelCosts, got {type(costs).__name__}")
    token = _OVERRIDE.set(costs)
    try:
        yield costs
    finally:
        _OVERRIDE.reset(token)


def forced_costs() -> KernelCosts | None:
    """The constants of the innermost :func:`use_costs` block, or ``None`` outside one (part of
    the key a device model keeps its SHAP plan under, so a forced choice needs no cache
    clearing)."""
    return _OVERRIDE.get()


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
    forced = forced_costs()
    if forced is not None:
        return forced
    name = current_device_name()
    return costs_for(name) if name else SHIPPED["simulator"]


def tables_everywhere(base: KernelCosts | None = None) -> KernelCosts:
    """Constants under which every eligible path is worth a table (benchmarks, calibration,
    tests of the table kernels): :func:`distshap.plan.tables.gpu_shap_table_offsets` then gives
    :func:`distshap.plan.tables.choose_tables`' shortest-first choice within the budget."""
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
# Per-path and per-element costs
# --------------------------------------------------------------------------------------------


def quadrature_path_seconds(
    costs: KernelCosts, k: np.ndarray, num_features: int, nodes: tuple[int, ...] | None = None
) -> np.ndarray:
    """Seconds per row of each path of ``k`` features in the quadrature kernels (float64;
    the chunk term aside). Paths longer than the largest kernel get ``inf``."""
    if nodes is None:
        nodes = get_config().quadrature_nodes
    k = np.asarray(k, np.int64)
    idx = quadrature_node_index(k, nodes)
    n = np.asarray(tuple(nodes) + (0,), np.float64)[np.minimum(idx, len(nodes))]
    lane = costs.quad_lane + (0.0 if quadrature_shared(num_features) else costs.quad_global_lane)
    out = costs.quad_path + k * (lane + n * costs.quad_lane_node)
    return np.where(idx < len(nodes), out, np.inf)


def table_lane_seconds(costs: KernelCosts, width: int) -> float:
    """Seconds per row of one table element (tables in L2; bins and misses aside)."""
    return costs.table_lane + (0.0 if shared_tile_rows(width) > 0 else costs.table_global_lane)


def miss_fraction(table_bytes: float, l2_bytes: int) -> float:
    """Share of table loads assumed to miss the L2 cache: ``max(0, 1 - l2 / tables)``."""
    return max(0.0, 1.0 - l2_bytes / table_bytes) if table_bytes > 0 else 0.0
