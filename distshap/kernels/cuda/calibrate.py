"""Calibration: measure the cost model's constants on the current GPU (``distshap calibrate``).

:func:`calibrate` builds small synthetic packed models whose paths all have one length (and
chosen feature and group counts), times SHAP calls through the public entry point
:func:`distshap.kernels.cuda.shap_values` at two row counts per model, once with every path in
the quadrature kernels (``table_budget_bytes=0``) and once with every eligible path on a
pattern table (a large budget under :func:`distshap.plan.costs.tables_everywhere`), and fits
the per-row constants of :class:`~distshap.plan.costs.KernelCosts` by non-negative least
squares on the per-row slopes (relative errors, with a weak pull towards the shipped values), the
per-call ones on the intercepts. The
rounded constants are written to the user's cost cache (:func:`distshap.plan.costs.save_costs`)
under the device's name. It takes well under a minute; it never runs by itself during an
explain call (the strategy must not change between calls or across GPUs of one kind).

Experiments (:data:`EXPERIMENTS`) separate the terms: quadrature paths of 2-28 features
(every compiled node count) on a narrow output, then a wide one (global sums); table paths of
2-12 features with tables in L2, one set of tables several times the L2 size, one wide
output, bins shared by table and quadrature paths (and their all-quadrature twin); oversize
paths (fallback kernel); a one-path model of a very wide output (finish pass); two models
small enough for the one-launch route (:mod:`.small`). A constant that no experiment
exercises keeps its shipped value.
"""

from __future__ import annotations

import datetime
import time
from dataclasses import dataclass, field, replace

import numpy as np

from distshap.packed import PackedModel, build_packed_model
from distshap.paths import Paths
from distshap.plan.config import config_context
from distshap.plan.costs import (
    COST_FIELDS,
    SHIPPED,
    KernelCosts,
    current_device_name,
    device_kind,
    round_costs,
    save_costs,
    tables_everywhere,
    use_costs,
)
from distshap.plan.predict import launches_per_batch, model_shape, row_terms

__all__ = ["EXPERIMENTS", "Calibration", "Experiment", "calibrate", "synthetic_packed"]


#: Weight of the pull of each fitted constant towards its shipped value, against one
#: experiment's relative error (small: the measurements decide what they determine).
PRIOR_WEIGHT = 0.01


@dataclass(frozen=True)
class Experiment:
    """One synthetic model: ``n_paths`` paths of ``k`` features over ``num_features``
    features and ``num_groups`` groups, timed with ``variant`` "quadrature" or "tables" at
    ``rows`` and ``4 * rows`` rows (scaled by the calibration's ``scale``). With ``k_alt``, as
    many paths again of ``k_alt`` features, which get no table (bins shared by table and
    quadrature paths: the table kernel's cost per bin apart from its cost per lane)."""

    name: str
    variant: str
    k: int
    n_paths: int
    num_features: int = 32
    num_groups: int = 1
    rows: int = 1 << 14
    k_alt: int = 0  # > k: as many paths again of k_alt features, never on a table


#: The calibration set (about 60k feature lanes a model; see the module docstring).
EXPERIMENTS: tuple[Experiment, ...] = (
    Experiment("quad-k2", "quadrature", 2, 30_000),
    Experiment("quad-k4", "quadrature", 4, 15_000),
    Experiment("quad-k8", "quadrature", 8, 7_500),
    Experiment("quad-k12", "quadrature", 12, 5_000),
    Experiment("quad-k16", "quadrature", 16, 3_750),
    Experiment("quad-k24", "quadrature", 24, 2_500),
    Experiment("quad-k28", "quadrature", 28, 2_000, num_features=64),
    Experiment("quad-k6-g8", "quadrature", 6, 10_000, num_features=8, num_groups=8),
    Experiment("quad-k8-wide", "quadrature", 8, 7_500, num_features=1024),
    Experiment("table-k2", "tables", 2, 30_000),
    Experiment("table-k4", "tables", 4, 15_000),
    Experiment("table-k6", "tables", 6, 10_000),
    Experiment("table-k8", "tables", 8, 3_000),  # 25 MB of tables: in L2
    Experiment("table-k12", "tables", 12, 200, rows=1 << 16),  # 39 MB
    Experiment("table-k10-big", "tables", 10, 12_000),  # 492 MB of tables: beyond L2
    Experiment("table-k8-wide", "tables", 8, 7_500, num_features=1024),
    Experiment("table-k2-mixed", "tables", 2, 4_000, k_alt=25),  # a k=25 path + 2 tables a bin
    Experiment("quad-k2-mixed", "quadrature", 2, 4_000, k_alt=25),  # its quadrature twin
    Experiment("fallback-k40", "quadrature", 40, 200, num_features=64, rows=1 << 12),
    Experiment("small-k3", "quadrature", 3, 80, num_features=8),  # the one-launch route
    Experiment("small-k8", "quadrature", 8, 240, num_features=40),
    Experiment("finish-wide", "quadrature", 2, 1, num_features=4096, rows=1 << 12),
)


def synthetic_paths(n_paths: int, k: int, num_features: int, num_groups: int = 1,
                    seed: int = 0) -> Paths:  # fmt: skip
    """``n_paths`` paths of ``k`` distinct features each (random intervals that about half of
    uniform ``[0, 1)`` rows follow, random zero fractions and leaf values)."""
    if not 1 <= k <= num_features:
        raise ValueError(f"need 1 <= k <= num_features, got k={k}, num_features={num_features}")
    rng = np.random.default_rng(seed)
    feats = np.empty((n_paths, k), np.int32)
    for p0 in range(0, n_paths, 4096):  # distinct features per path, in increasing order
        p1 = min(n_paths, p0 + 4096)
        keys = rng.random((p1 - p0, num_features))
        feats[p0:p1] = np.sort(np.argsort(keys, axis=1)[:, :k], axis=1)
    t = rng.uniform(0.25, 0.75, (n_paths, k)).astype(np.float32)
    left = rng.random((n_paths, k)) < 0.5
    n_el = n_paths * k
    return Paths(
        path_offsets=np.arange(n_paths + 1, dtype=np.int64) * k,
        path_value=rng.normal(size=n_paths),
        path_group=(np.arange(n_paths) % num_groups).astype(np.int32),
        path_tree=np.arange(n_paths, dtype=np.int32),
        feature=feats.ravel(),
        lower=np.where(left, -np.inf, t).astype(np.float32).ravel(),
        upper=np.where(left, t, np.inf).astype(np.float32).ravel(),
        missing=np.zeros(n_el, bool),
        zero_fraction=rng.uniform(0.2, 0.8, n_el),
        cat_offsets=np.full(n_el, -1, np.int64),
        cat_nbits=np.zeros(n_el, np.int32),
        cat_other=np.zeros(n_el, bool),
        cat_words=np.zeros(0, np.uint32),
        num_features=int(num_features),
        num_groups=int(num_groups),
        expected_value=np.zeros(num_groups),
    )


def synthetic_packed(e: Experiment, scale: float = 1.0, seed: int = 0) -> PackedModel:
    """The packed model of experiment ``e`` (``scale`` times its paths, at least one)."""
    n = max(1, int(round(e.n_paths * scale)))
    paths = synthetic_paths(n, e.k, e.num_features, e.num_groups, seed)
    if e.k_alt:
        paths = _concat(paths, synthetic_paths(n, e.k_alt, e.num_features, e.num_groups, seed + 1))
    if e.variant == "tables":
        return build_packed_model(paths, table_budget_bytes=1 << 40,
                                  max_table_features=min(e.k, 24) if e.k_alt else 24)  # fmt: skip
    return build_packed_model(paths, table_budget_bytes=0)


def _concat(a: Paths, b: Paths) -> Paths:
    """The paths of ``a`` then those of ``b`` (same features and groups)."""
    out = {}
    for name in ("path_value", "path_group", "path_tree", "feature", "lower", "upper", "missing",
                 "zero_fraction", "cat_offsets", "cat_nbits", "cat_other"):  # fmt: skip
        out[name] = np.concatenate([getattr(a, name), getattr(b, name)])
    out["path_offsets"] = np.concatenate([a.path_offsets, b.path_offsets[1:] + a.path_offsets[-1]])
    return Paths(**out, cat_words=a.cat_words, num_features=a.num_features,
                 num_groups=a.num_groups, expected_value=a.expected_value)  # fmt: skip


@dataclass
class Calibration:
    """What :func:`calibrate` measured and fitted.

    ``costs`` the fitted (rounded) constants; ``measurements`` one dict per experiment (rows,
    seconds, per-row slope, intercept, the fit's per-row prediction); ``path`` the cache file
    written (None: not written); ``notes`` what could not be measured; ``seconds`` the time it
    took; ``device`` the device's name.
    """

    device: str
    costs: KernelCosts
    measurements: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    seconds: float = 0.0
    path: str | None = None

    def to_dict(self) -> dict:
        return {"device": self.device, "costs": self.costs.to_dict(),
                "measurements": self.measurements, "notes": self.notes,
                "seconds": self.seconds, "path": self.path}  # fmt: skip


def _sync() -> None:
    from numba import cuda

    cuda.synchronize()


def _time_call(packed: PackedModel, X, repeats: int) -> float:
    from distshap.kernels.cuda.launch import shap_values

    best = float("inf")
    for _ in range(repeats):
        _sync()
        t0 = time.perf_counter()
        shap_values(packed, X)
        _sync()
        best = min(best, time.perf_counter() - t0)
    return best


def _device_rows(n: int, num_features: int, seed: int):
    from distshap.kernels.cuda.runtime.device import SIM, xp

    X = np.random.default_rng(seed).random((n, num_features), dtype=np.float32)
    return X if SIM else xp().asarray(X)


def _plan_offsets(packed: PackedModel) -> np.ndarray:
    """Per-path table offsets of the SHAP plan the device model actually built."""
    from distshap.kernels.cuda.runtime.model import device_model

    lane_table = device_model(packed).shap.lane_table
    lane_table = lane_table.copy_to_host() if hasattr(lane_table, "copy_to_host") else lane_table
    lane_table = np.asarray(lane_table)
    if packed.num_paths == 0:
        return np.zeros(0, np.int64)
    return lane_table[packed.path_offsets[:-1]].astype(np.int64)


def _l2_bytes(default: int) -> int:
    from distshap.kernels.cuda.runtime.device import SIM

    if SIM:
        return default
    try:
        import cupy

        return int(cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["l2CacheSize"])
    except Exception:  # no CuPy, or the simulator: the kind's value
        return default


def _nnls(A: np.ndarray, b: np.ndarray) -> np.ndarray:
    try:
        from scipy.optimize import nnls

        return nnls(A, b)[0]
    except ImportError:  # least squares, negative constants clipped (then refitted)
        x = np.linalg.lstsq(A, b, rcond=None)[0]
        keep = x > 0
        out = np.zeros_like(x)
        if keep.any():
            out[keep] = np.maximum(np.linalg.lstsq(A[:, keep], b, rcond=None)[0], 0)
        return out


def calibrate(
    scale: float = 1.0,
    repeats: int = 3,
    write: bool = True,
    cache: str | None = None,
    experiments: tuple[Experiment, ...] = EXPERIMENTS,
    progress=None,
) -> Calibration:
    """Measure the cost constants of the current GPU and (``write``) cache them.

    Parameters
    ----------
    scale : float
        Scales every experiment's paths and rows (1.0: the calibration set, under a minute on
        an H100; tiny values for tests under the CUDA simulator).
    repeats : int
        Timed calls per (model, row count); the fastest counts.
    write : bool
        Write the constants to the cost cache (``cache``, default
        :func:`distshap.plan.costs.cache_file`).
    experiments : tuple of Experiment
        The calibration set (default :data:`EXPERIMENTS`).
    progress : callable, optional
        Called with one line of text per experiment.
    """
    if not isinstance(scale, (int, float)) or not 0 < scale <= 16:
        raise ValueError(f"scale must be a number in (0, 16], got {scale!r}")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be an integer >= 1, got {repeats!r}")
    t_start = time.perf_counter()
    name = current_device_name()
    kind = device_kind(name)
    base = SHIPPED["generic" if kind == "simulator" else kind]  # the fit's prior
    base = replace(base, kind=kind, l2_bytes=_l2_bytes(base.l2_bytes))
    forced = tables_everywhere(base)
    records, icept_rows, notes = [], [], []
    for i, e in enumerate(experiments):
        measured = _measure(e, i, scale, repeats, forced, base, notes)
        if measured is None:
            continue
        records.append(measured[0])
        icept_rows.append(measured[1])
        if progress is not None:
            n2, t2 = measured[0]["rows"][1], measured[0]["seconds"][1]
            progress(f"{e.name:<16} {n2 / t2:>14,.0f} rows/s at {n2:,} rows "
                     f"({1e9 * measured[0]['slope']:.2f} ns a row)")  # fmt: skip
    if not records:
        raise RuntimeError("no calibration experiment ran")
    fitted = _fit_rows(records, base, notes)
    call = np.array([base.launch, base.call, base.small_call])
    IA = np.asarray(icept_rows)
    seen = IA.any(axis=0)
    call[seen] = _nnls(IA[:, seen], np.asarray([r["intercept"] for r in records]))
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    costs = round_costs(replace(
        base, source=f"calibrated {stamp} on {name}", launch=float(call[0]), call=float(call[1]),
        small_call=float(call[2]), **fitted,
    ))  # fmt: skip
    for rec in records:
        rec["fit_slope"] = sum(rec["terms"][f] * getattr(costs, f) for f in COST_FIELDS)
        rec["fit_error"] = rec["fit_slope"] / rec["slope"] - 1.0
    out = Calibration(device=name, costs=costs, measurements=records, notes=notes)
    if write:
        out.path = str(save_costs(name, costs, cache))
    out.seconds = time.perf_counter() - t_start
    return out


def _measure(e: Experiment, i: int, scale: float, repeats: int, forced: KernelCosts,
             base: KernelCosts, notes: list) -> tuple[dict, list] | None:  # fmt: skip
    """Time experiment ``e`` (its ``i``-th): its record and the coefficients of its intercept
    (launches, calls, small calls), or ``None`` (a note says why) where it cannot be told."""
    from distshap.kernels.cuda.runtime.caches import clear_cache

    packed = synthetic_packed(e, scale, seed=i)
    n1 = max(2, int(round(e.rows * scale)))
    n2 = 4 * n1
    X = _device_rows(n2, e.num_features, seed=1000 + i)
    clear_cache()
    # the usual plan at both row counts (the cost model's chunks), not the few-rows plan a
    # call of a model this small would take where its usual chunks make few blocks
    with use_costs(forced), config_context(few_rows_blocks=0):
        _time_call(packed, X[:n1], 1)  # warm-up: compile, upload, fill the tables
        offsets = _plan_offsets(packed)
        if e.variant == "tables" and not (offsets >= 0).any():
            notes.append(f"{e.name}: the SHAP plan put no path on a table; skipped")
            clear_cache()
            return None
        t1 = _time_call(packed, X[:n1], repeats)
        t2 = _time_call(packed, X, repeats)
    clear_cache()
    if t2 < 1.2 * t1:  # the rows cost too little to tell from the per-call cost
        notes.append(f"{e.name}: {n2} rows took {t2:.2e} s, {n1} rows {t1:.2e} s: skipped")
        return None
    slope = (t2 - t1) / (n2 - n1)
    intercept = max(t1 - slope * n1, 0.0)
    shape = model_shape(packed)
    if shape.small:  # the one-launch route: its own two constants
        terms = dict.fromkeys(COST_FIELDS, 0.0)
        terms["small_lane2"] = float((shape.k.astype(np.float64) ** 2).sum())
        icept = [0.0, 0.0, 1.0]
    else:
        terms = row_terms(shape, offsets, base.l2_bytes)
        icept = [launches_per_batch(shape, offsets), 1.0, 0.0]
    record = {"name": e.name, "variant": e.variant, "k": e.k, "small": shape.small,
              "paths": packed.num_paths, "features": e.num_features,
              "groups": e.num_groups, "table_paths": int((offsets >= 0).sum()),
              "rows": [n1, n2], "seconds": [t1, t2], "slope": slope,
              "intercept": intercept, "terms": terms}  # fmt: skip
    return record, icept


def _fit_rows(records: list, base: KernelCosts, notes: list) -> dict:
    """The per-row constants fitted to the records' slopes (relative errors, non-negative,
    a weak pull towards ``base``); those no experiment exercises keep ``base``'s value."""
    A = np.asarray([[r["terms"][f] for f in COST_FIELDS] for r in records])
    b = np.asarray([r["slope"] for r in records])
    used = A.any(axis=0)
    w = 1.0 / b  # relative errors: every experiment counts alike
    # a weak pull towards the shipped constants keeps those the experiments hardly tell apart
    # near them rather than anywhere along a flat valley (PRIOR_WEIGHT of one experiment)
    prior = np.array([getattr(base, f) for f in COST_FIELDS])[used]
    P = np.diag(np.where(prior > 0, PRIOR_WEIGHT / np.where(prior > 0, prior, 1.0), 0.0))
    keep = prior > 0
    x = np.zeros(A.shape[1])
    x[used] = _nnls(
        np.vstack([A[:, used] * w[:, None], P[keep]]),
        np.concatenate([b * w, np.full(int(keep.sum()), PRIOR_WEIGHT)]),
    )
    fitted = {f: (float(x[j]) if used[j] else getattr(base, f))
              for j, f in enumerate(COST_FIELDS)}  # fmt: skip
    for j, f in enumerate(COST_FIELDS):
        if not used[j]:
            notes.append(f"{f}: not exercised; the shipped value is kept")
    return fitted
