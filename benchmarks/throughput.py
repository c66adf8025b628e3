"""SHAP / interaction throughput of distshap side by side with XGBoost, in one run.

Reproduces the paper's Table 6 (SHAP values, 10,000 rows) and Table 7 (interaction values,
200 rows) on the model shapes of :mod:`benchmarks.shapes`, and rows/s at any row count.
Every measurement is the median of ``--repeats`` timed runs after a warm-up run; GPU work is
synchronized before the clock stops. Peers, each measured in the same process on the same rows:

* ``xgboost-cpu``: ``Booster.predict(DMatrix, pred_contribs=True)`` with ``nthread`` = all cores;
* ``xgboost-gpu``: the same with ``device="cuda"`` and a CuPy ``DMatrix``.

Usage::

    python -m benchmarks.throughput --shapes cal_housing-med --rows 10000 --backend cpu
    python -m benchmarks.throughput --table 6 --backend cuda      # all 12 shapes, GPU
    python -m benchmarks.throughput --table 7 --backend cuda
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import numpy as np

from benchmarks.shapes import SHAPES, SIZES, make_data, train_model
from distshap import TreeExplainer


def _sync(backend: str) -> None:
    if backend == "cuda":
        import cupy

        cupy.cuda.Device().synchronize()


def _median_seconds(fn, repeats: int, backend: str) -> tuple[float, object, float]:
    """Median seconds of ``repeats`` timed calls, the last output, and the first call's seconds."""
    t0 = time.perf_counter()
    out = fn()  # warm-up: compilation, device model upload (and tables), caches
    _sync(backend)
    first = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        _sync(backend)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out, first


def _host(a) -> np.ndarray:
    return a.get() if hasattr(a, "get") else np.asarray(a)


def measure(name: str, size: str, rows: int, backend: str, interactions: bool, repeats: int,
            peers: list[str], cpu_peer_rows: int | None = None) -> dict:  # fmt: skip
    """Time distshap and its peers on one shape; return a result record."""
    import xgboost as xgb

    booster = train_model(name, size)
    X, _ = make_data(name, rows, seed=1)
    t0 = time.perf_counter()
    explainer = TreeExplainer(booster, layout="xgboost", backend=backend)
    prep = time.perf_counter() - t0
    fn_name = "shap_interaction_values" if interactions else "shap_values"
    if backend == "cuda":
        import cupy

        Xb = cupy.asarray(X)
    else:
        Xb = X
    call = getattr(explainer, fn_name)
    seconds, ours, first = _median_seconds(lambda: call(Xb), repeats, backend)
    ours = _host(ours)
    record = {
        "shape": f"{name}-{size}", "rows": rows, "backend": backend,
        "kind": "interactions" if interactions else "shap",
        "paths": explainer.packed.stats["paths"], "bins": explainer.packed.stats["bins"],
        "table_paths": explainer.packed.stats["table_paths"],
        "table_mb": explainer.packed.stats["table_bytes"] / 2**20,
        "preprocess_s": prep, "first_call_s": first,
        "distshap_s": seconds, "distshap_rows_s": rows / seconds,
    }  # fmt: skip
    kw = {"pred_interactions": True} if interactions else {"pred_contribs": True}
    for peer in peers:
        if peer == "xgboost-gpu":
            import cupy

            booster.set_param({"device": "cuda"})
            dm = xgb.DMatrix(cupy.asarray(X))
            peer_backend = "cuda"
            n = rows
        else:
            # the CPU peer may take minutes on big models: time it on the first rows only
            n = min(rows, cpu_peer_rows or rows)
            booster.set_param({"device": "cpu", "nthread": os.cpu_count()})
            dm = xgb.DMatrix(X[:n])
            peer_backend = "cpu"
        s, ref, _ = _median_seconds(lambda dm=dm: booster.predict(dm, **kw), repeats, peer_backend)
        ref = _host(ref).reshape((n,) + ours.shape[1:])
        record[f"{peer}_rows"] = n
        record[f"{peer}_s"] = s
        record[f"{peer}_rows_s"] = n / s
        record[f"speedup_vs_{peer}"] = (n / s) and record["distshap_rows_s"] / (n / s)
        record[f"max_abs_diff_vs_{peer}"] = float(np.abs(ref - ours[:n]).max())
        record["output_scale"] = float(np.abs(ref).max())
    booster.set_param({"device": "cpu"})
    return record


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="distshap vs XGBoost throughput")
    parser.add_argument("--shapes", default="", help="comma list like cal_housing-med")
    parser.add_argument("--table", type=int, choices=[6, 7], help="paper table: all 12 shapes")
    parser.add_argument("--sizes", help=f"keep only these sizes ({','.join(SIZES)})")
    parser.add_argument("--rows", type=int, help="rows to explain (default 10000 / 200)")
    parser.add_argument(
        "--backend", default="auto", choices=["auto", "cpu", "cuda"], help="auto: the GPU if any"
    )
    parser.add_argument("--interactions", action="store_true")
    parser.add_argument(
        "--peers", default=None, help="xgboost-cpu,xgboost-gpu (default by backend)"
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cpu-peer-rows", type=int, help="time xgboost-cpu on this many rows")
    parser.add_argument("--json", help="append JSON lines of the results to this file")
    args = parser.parse_args(argv)
    if args.backend == "auto":
        from distshap.kernels import cuda_available

        args.backend = "cuda" if cuda_available() else "cpu"
    interactions = args.interactions or args.table == 7
    rows = args.rows or (200 if interactions else 10_000)
    shapes = [tuple(s.rsplit("-", 1)) for s in args.shapes.split(",") if s] or list(SHAPES)
    if args.sizes:
        shapes = [(d, s) for d, s in shapes if s in args.sizes.split(",")]
    if args.peers is None:
        peers = ["xgboost-gpu", "xgboost-cpu"] if args.backend == "cuda" else ["xgboost-cpu"]
    else:
        peers = [p for p in args.peers.split(",") if p]
    header = f"{'shape':24} {'rows':>9} {'distshap rows/s':>16}"
    header += "".join(f" {p + ' rows/s':>18} {'ratio':>7}" for p in peers) + "  max|diff|/scale"
    print(header, flush=True)
    for name, size in shapes:
        rec = measure(
            name, size, rows, args.backend, interactions, args.repeats, peers, args.cpu_peer_rows
        )
        line = f"{rec['shape']:24} {rows:>9} {rec['distshap_rows_s']:>16,.0f}"
        for p in peers:
            line += f" {rec[f'{p}_rows_s']:>18,.0f} {rec[f'speedup_vs_{p}']:>6.2f}x"
        if peers:
            line += f"  {rec[f'max_abs_diff_vs_{peers[0]}'] / max(rec['output_scale'], 1e-30):.1e}"
        print(line, flush=True)
        if args.json:
            with open(args.json, "a") as fh:
                fh.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
