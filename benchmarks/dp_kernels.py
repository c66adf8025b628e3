"""The CUDA kernels with and without pattern tables, beside XGBoost, side by side.

For each model shape, SHAP values (or ``--interactions``), on the same CuPy rows in one process
(median of ``--repeats`` timed calls after a warm-up call, synchronized):

* ``library``      what the library runs: SHAP values by the SHAP tables that
                   ``cuda.runtime.model._shap_table_offsets`` picks and the quadrature
                   kernels for the other paths, interaction values by the interaction tables
                   (short paths, 1 GiB) and the quadrature kernels for the other paths;
* ``quadrature``   no tables (``table_budget_bytes=0``): every path in the quadrature kernels;
* ``tables``       SHAP values only: a SHAP pattern table on every eligible path (regular, at
                   most 12 features, within 2 GiB: the table policy alone, whatever
                   ``model._shap_table_offsets`` picks), the quadrature kernels for the rest;
* ``tables_global`` as ``tables``, the table kernel adding to global memory directly (no
                   shared-memory row tile: ``min_tile_rows`` raised);
* ``xgboost_gpu``  XGBoost's ``pred_contribs`` (``pred_interactions``) with ``device="cuda"`` on
                   a CuPy DMatrix.

Every variant's largest absolute difference to XGBoost is recorded too. The previous kernels
measured here before (warp DP, SHAP table kernels) were removed from the package; their
numbers stay in ``benchmarks/RESULTS.md`` and their code in the git history.

Usage (GPU)::

    DISTSHAP_BENCH_DEVICE=cuda python3 -m benchmarks.dp_kernels --shapes adult-large --rows 2000
    DISTSHAP_BENCH_DEVICE=cuda python3 -m benchmarks.dp_kernels --repeats 3 --rows 100000 \
        --shapes covtype-med,fashion_mnist-med,cal_housing-med
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from benchmarks.shapes import make_data, train_model
from benchmarks.throughput import _host, _median_seconds
from distshap.models import load_model
from distshap.packed import build_packed_model
from distshap.paths import extract_paths

VARIANTS = ("library", "quadrature", "tables", "tables_global")


def _variants(interactions: bool) -> tuple[str, ...]:
    return VARIANTS[:2] if interactions else VARIANTS


def measure(shape: str, rows: int, repeats: int, interactions: bool = False) -> dict:
    """Time every variant and XGBoost on one shape; return a result record."""
    import cupy
    import xgboost as xgb

    from distshap.kernels import cuda as kc
    from distshap.plan.config import config_context
    from distshap.plan.costs import tables_everywhere, use_costs
    from distshap.plan.gpu import shap_table_policy, strategy_stats

    name, size = shape.rsplit("-", 1)
    booster = train_model(name, size)
    X, _ = make_data(name, rows, seed=1)
    Xd = cupy.asarray(X)
    paths = extract_paths(load_model(booster))
    packed = {
        "tables": build_packed_model(paths),
        "none": build_packed_model(paths, table_budget_bytes=0),
        "all": build_packed_model(paths, table_budget_bytes=2 << 30),  # its own device model
    }
    fn = kc.interaction_values if interactions else kc.shap_values

    def every_table():  # every eligible path, whatever the cost model would pick
        with use_costs(tables_everywhere()):
            return fn(packed["all"], Xd)

    def every_table_global():
        with config_context(min_tile_rows=1 << 30):
            return every_table()

    calls = {
        "library": lambda: fn(packed["tables"], Xd),
        "quadrature": lambda: fn(packed["none"], Xd),
        "tables": every_table,
        "tables_global": every_table_global,
    }
    st = strategy_stats(packed["tables"])
    record = {"shape": shape, "rows": rows, "kind": "interactions" if interactions else "shap",
              "paths": packed["tables"].num_paths,
              "table_paths": packed["tables"].stats["table_paths"],
              "library_shap_table_paths": st.get("shap_table_paths", 0),
              "tables_shap_table_paths": int((shap_table_policy(packed["all"]) >= 0).sum()),
              "interaction_table_paths": st["interaction_table_paths"]}  # fmt: skip
    booster.set_param({"device": "cuda"})
    dm = xgb.DMatrix(Xd)
    kw = {"pred_interactions": True} if interactions else {"pred_contribs": True}
    s, ref, _ = _median_seconds(lambda: booster.predict(dm, **kw), repeats, "cuda")
    record["xgboost_gpu_rows_s"] = rows / s
    ref = _host(ref)
    for variant in _variants(interactions):
        s, out, first = _median_seconds(calls[variant], repeats, "cuda")
        out = _host(out).reshape(ref.shape)
        record[f"{variant}_rows_s"] = rows / s
        record[f"{variant}_first_s"] = first
        record[f"{variant}_vs_xgboost"] = (
            record["xgboost_gpu_rows_s"] and (rows / s) / record["xgboost_gpu_rows_s"]
        )
        record[f"{variant}_max_abs_diff"] = float(np.abs(out - ref).max())
    record["output_scale"] = float(np.abs(ref).max())
    booster.set_param({"device": "cpu"})
    return record


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="CUDA kernels with and without tables vs XGBoost")
    parser.add_argument("--shapes", required=True, help="comma list like adult-large")
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--interactions", action="store_true")
    parser.add_argument("--json", help="append JSON lines of the results to this file")
    args = parser.parse_args(argv)
    for shape in args.shapes.split(","):
        record = measure(shape, args.rows, args.repeats, args.interactions)
        variants = _variants(args.interactions)
        line = "  ".join(
            f"{v} {record[f'{v}_rows_s']:,.0f} ({record[f'{v}_vs_xgboost']:.2f}x)" for v in variants
        )
        tables = f"{record['table_paths']:,}/{record['interaction_table_paths']:,}"
        if not args.interactions:  # SHAP table paths of the library's plan and of "tables"
            tables += (f" shap_tables={record['library_shap_table_paths']:,}"
                       f"/{record['tables_shap_table_paths']:,}")  # fmt: skip
        head = (
            f"{shape} {record['kind']} rows={args.rows} paths={record['paths']:,} tables={tables}"
        )
        print(f"{head}: xgboost {record['xgboost_gpu_rows_s']:,.0f}  {line}", flush=True)
        diffs = ", ".join(f"{v} {record[f'{v}_max_abs_diff']:.2e}" for v in variants)
        print(
            f"  max abs diff vs xgboost: {diffs} (scale {record['output_scale']:.3g})", flush=True
        )
        if args.json:
            with open(args.json, "a") as fh:
                fh.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
