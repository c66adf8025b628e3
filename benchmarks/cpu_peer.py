"""distshap on the CPU against XGBoost's own CPU ``pred_contribs`` / ``pred_interactions``.

XGBoost >= 3.3 computes CPU SHAP values by quadrature (and needs Python >= 3.12): the peer to
beat. Both run in one process at the same thread count (``--threads``: XGBoost's ``nthread``,
distshap's ``NUMBA_NUM_THREADS``, set before Numba is imported), on the same synthetic rows of
the model shapes of :mod:`benchmarks.shapes`. Row counts are chosen per library so that each
timed call takes about ``--seconds`` (a probe call on a few rows sets the rate), since the two
differ by several times; rows/s are compared. Each timing is the median of ``--repeats`` calls
after a warm-up call (compilation, tables); ``CPU ratio`` compares rows per process CPU second
(all threads) instead, which other jobs on a shared machine disturb less. distshap is timed as
users call it: ``TreeExplainer.shap_values`` on a NumPy array, input conversion and the
additivity check included; XGBoost's ``predict`` on a ``DMatrix`` built beforehand. The
largest difference between the two results (on the rows both explained) is reported against
the values' scale.
Interaction values are timed on at most ``--interaction-rows`` rows (their output is
``(F + 1)**2`` values a row and group). ``first s`` is distshap's first call in the process
(on the probe's rows: compilation, or loading it from Numba's cache, and the pattern tables
of that kind), which the warm timings leave out. ``--unit-levels`` runs distshap's SHAP
quadrature with sibling units of that many levels (``quadrature_unit_levels``; default the
configuration's), ``--apart`` also times it with every path apart and compares the values,
``--levels 0,1,3`` times it at each of those levels in turn (one round of levels a repeat);
``--table-budget 0`` runs every path by quadrature (no SHAP pattern tables, so every path can
join a unit).

Usage (Python 3.12 with XGBoost >= 3.3)::

    python -m benchmarks.cpu_peer                                  # 3 shapes, SHAP + interactions
    python -m benchmarks.cpu_peer --shapes cal_housing-med --kinds shap --seconds 2
    python -m benchmarks.cpu_peer --kinds interactions --interaction-rows 1000
    python -m benchmarks.cpu_peer --kinds shap --unit-levels 1 --apart   # pairs, and apart
    python -m benchmarks.cpu_peer --kinds shap --table-budget 0 --apart  # quadrature only
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

DEFAULT_SHAPES = ("cal_housing-med", "adult-med", "covtype-med")


def _median(fn, repeats: int) -> tuple[float, float, object]:
    """Median wall seconds and median process CPU seconds (all threads) of ``fn()``."""
    out = fn()  # warm-up
    times, cpu = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return statistics.median(times), statistics.median(cpu), out


def _rows_for(fn, probe_rows: int, seconds: float, cap: int) -> tuple[int, float]:
    """Rows so that ``fn(rows)`` takes about ``seconds`` (one warm probe call sets the rate),
    and the seconds of the first (cold) call."""
    t0 = time.perf_counter()
    fn(probe_rows)  # compilation, tables
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    fn(probe_rows)
    rate = probe_rows / max(time.perf_counter() - t0, 1e-6)
    return int(min(cap, max(probe_rows, rate * seconds))), first


def _levels(ours, rows: int, probe: int, args: argparse.Namespace) -> dict:
    """``{levels: (rows/s, values)}`` of distshap's SHAP call at each of ``args.levels``, the
    levels taken in turn within each of ``args.repeats`` rounds (median seconds)."""
    chosen = [int(x) for x in args.levels.split(",")]
    times: dict[int, list[float]] = {at: [] for at in chosen}
    values = {at: ours(probe, at) for at in chosen}  # warm-up: each level's units
    for _ in range(args.repeats):
        for at in chosen:
            t0 = time.perf_counter()
            values[at] = ours(rows, at)
            times[at].append(time.perf_counter() - t0)
    return {at: (rows / statistics.median(times[at]), values[at]) for at in chosen}


def measure(shape: str, kind: str, args: argparse.Namespace) -> dict:
    """One shape and kind: rows, seconds and rows/s of both, their ratio and the difference."""
    import numpy as np
    import xgboost as xgb

    from benchmarks.shapes import make_data, train_model
    from distshap import TreeExplainer
    from distshap.plan.config import config_context, get_config

    name, size = shape.rsplit("-", 1)
    booster = train_model(name, size)
    booster.set_param({"nthread": args.threads})
    budget = {} if args.table_budget is None else {"table_budget_bytes": args.table_budget}
    explainer = TreeExplainer(booster, layout="xgboost", backend="cpu", **budget)
    interactions = kind == "interactions"
    cap = min(args.max_rows, args.interaction_rows) if interactions else args.max_rows
    X, _ = make_data(name, cap, seed=1)

    levels = get_config().quadrature_unit_levels if args.unit_levels is None else args.unit_levels

    def ours(n: int, at: int = levels):
        fn = explainer.shap_interaction_values if interactions else explainer.shap_values
        with config_context(quadrature_unit_levels=at):
            return fn(X[:n])

    matrices: dict[int, xgb.DMatrix] = {}

    def theirs(n: int):
        if n not in matrices:
            matrices[n] = xgb.DMatrix(X[:n], nthread=args.threads)
        flag = "pred_interactions" if interactions else "pred_contribs"
        return booster.predict(matrices[n], **{flag: True})

    probe = 20 if interactions else 200
    n_ours, first_ours = _rows_for(ours, probe, args.seconds, cap)
    n_theirs, _ = _rows_for(theirs, probe, args.seconds, cap)
    t_ours, c_ours, v_ours = _median(lambda: ours(n_ours), args.repeats)
    t_theirs, c_theirs, v_theirs = _median(lambda: theirs(n_theirs), args.repeats)
    apart = None
    if args.apart and not interactions:  # the same call with every path apart
        ours(probe, 0)
        t_apart, _, v_apart = _median(lambda: ours(n_ours, 0), args.repeats)
        apart = (n_ours / t_apart, np.asarray(v_apart).astype(np.float64))
    by_level = _levels(ours, n_ours, probe, args) if args.levels and not interactions else {}
    common = min(n_ours, n_theirs)
    a = np.asarray(v_ours)[:common].reshape(common, -1).astype(np.float64)
    b = np.asarray(v_theirs)[:common].reshape(common, -1).astype(np.float64)
    scale = max(1.0, float(np.abs(b).max()))
    record = {
        "shape": shape,
        "kind": kind,
        "threads": args.threads,
        "paths": explainer.packed.num_paths,
        "unit_levels": levels,
        "table_paths": int(explainer.packed.stats["table_paths"]),
        "distshap_first_call_s": first_ours,
        "distshap_rows": n_ours,
        "distshap_s": t_ours,
        "distshap_rows_per_s": n_ours / t_ours,
        "xgboost_rows": n_theirs,
        "xgboost_s": t_theirs,
        "xgboost_rows_per_s": n_theirs / t_theirs,
        "ratio": (n_ours / t_ours) / (n_theirs / t_theirs),
        "distshap_cpu_s": c_ours,
        "xgboost_cpu_s": c_theirs,
        "cpu_ratio": (n_ours / c_ours) / (n_theirs / c_theirs),
        "max_abs_diff_over_scale": float(np.abs(a - b).max()) / scale,
    }
    if by_level:
        ours_all = np.asarray(v_ours).astype(np.float64)
        record["distshap_levels_rows_per_s"] = {str(k): r for k, (r, _) in by_level.items()}
        record["levels_max_abs_diff_over_scale"] = {
            str(k): float(np.abs(np.asarray(v, np.float64) - ours_all).max()) / scale
            for k, (_, v) in by_level.items()
        }
    if apart is not None:
        ours_all = np.asarray(v_ours).astype(np.float64)
        record["distshap_apart_rows_per_s"] = apart[0]
        record["units_vs_apart_max_abs_diff_over_scale"] = (
            float(np.abs(ours_all - apart[1]).max()) / scale
        )
        record["units_vs_apart_bits_differ"] = int(
            (
                np.asarray(v_ours).view(np.uint32)
                != np.asarray(apart[1], np.float32).view(np.uint32)
            ).sum()
        )
    return record


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default=",".join(DEFAULT_SHAPES))
    parser.add_argument("--kinds", default="shap,interactions")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=2.0, help="target seconds per call")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-rows", type=int, default=200_000)
    parser.add_argument("--interaction-rows", type=int, default=1_000, help="row cap")
    parser.add_argument("--json", help="write the records to this file")
    parser.add_argument(
        "--apart",
        action="store_true",
        help="also time distshap's SHAP with every path apart (quadrature_unit_levels=0)",
    )
    parser.add_argument(
        "--unit-levels",
        type=int,
        choices=range(4),
        help="distshap's quadrature_unit_levels (sibling units; default: the configuration's)",
    )
    parser.add_argument(
        "--levels",
        help="also time distshap's SHAP at each of these quadrature_unit_levels (e.g. 0,1,2,3), "
        "in turn within each repeat",
    )
    parser.add_argument(
        "--table-budget",
        type=int,
        help="distshap's table_budget_bytes (0: every path by quadrature; default the library's)",
    )
    parser.add_argument("--allow-old-xgboost", action="store_true")
    args = parser.parse_args(argv)
    os.environ["NUMBA_NUM_THREADS"] = str(args.threads)  # before Numba is imported
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))

    import platform

    import numba
    import xgboost as xgb

    if numba.config.NUMBA_NUM_THREADS != args.threads:
        raise RuntimeError(
            f"Numba was imported with {numba.config.NUMBA_NUM_THREADS} threads before this "
            f"benchmark could ask for {args.threads}: run it as its own process"
        )
    major, minor = (int(p) for p in xgb.__version__.split(".")[:2])
    if (major, minor) < (3, 3) and not args.allow_old_xgboost:
        raise SystemExit(
            f"XGBoost {xgb.__version__} is older than 3.3 (the quadrature TreeSHAP peer): "
            "install xgboost>=3.3 under Python >= 3.12, or pass --allow-old-xgboost"
        )
    print(
        f"Python {platform.python_version()}, XGBoost {xgb.__version__}, Numba "
        f"{numba.__version__}, {args.threads} threads",
        flush=True,
    )
    header = (
        f"{'shape':16s} {'kind':12s} {'distshap rows':>13s} {'rows/s':>9s} "
        f"{'xgboost rows':>12s} {'rows/s':>9s} {'ratio':>7s} {'diff/scale':>10s} {'first s':>7s} "
        f"{'CPU ratio':>9s}"
    )
    print(header, flush=True)
    records = []
    for kind in args.kinds.split(","):
        for shape in args.shapes.split(","):
            r = measure(shape, kind, args)
            records.append(r)
            print(
                f"{shape:16s} {kind:12s} {r['distshap_rows']:13,d} "
                f"{r['distshap_rows_per_s']:9,.0f} {r['xgboost_rows']:12,d} "
                f"{r['xgboost_rows_per_s']:9,.0f} {r['ratio']:6.2f}x "
                f"{r['max_abs_diff_over_scale']:10.1e} {r['distshap_first_call_s']:7.2f} "
                f"{r['cpu_ratio']:8.2f}x",
                flush=True,
            )
            for at, rate in r.get("distshap_levels_rows_per_s", {}).items():
                diff = r["levels_max_abs_diff_over_scale"][at]
                print(
                    f"{'':16s} {'  levels ' + at:12s} {'':13s} {rate:9,.0f}  "
                    f"(difference to levels {r['unit_levels']}: {diff:.1e} of the scale)",
                    flush=True,
                )
            if "distshap_apart_rows_per_s" in r:
                print(
                    f"{'':16s} {'  apart':12s} {'':13s} {r['distshap_apart_rows_per_s']:9,.0f}  "
                    f"(levels {r['unit_levels']} "
                    f"{r['distshap_rows_per_s'] / r['distshap_apart_rows_per_s']:.2f}x, "
                    f"{r['table_paths']:,d} of {r['paths']:,d} paths with tables; "
                    f"difference {r['units_vs_apart_max_abs_diff_over_scale']:.1e} of the scale, "
                    f"{r['units_vs_apart_bits_differ']:,d} values' bits)",
                    flush=True,
                )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(records, fh, indent=1)


if __name__ == "__main__":
    main()
