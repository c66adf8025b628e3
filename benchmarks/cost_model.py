"""The cost model against the GPU: predicted and measured SHAP rows/s, per shape and strategy.

For each model shape (``--shapes``, default all of :data:`benchmarks.shapes.SHAPES`), on the
same CuPy rows in one process (median of ``--repeats`` timed calls after a warm-up call,
synchronized), three SHAP strategies through :func:`distshap.kernels.cuda.shap_values`:

* ``quadrature``  every regular path in the quadrature kernels (``table_budget_bytes=0``);
* ``auto``        what the library runs: the cost model's mix
                  (:func:`distshap.plan.tables.gpu_shap_table_offsets`, default budget);
* ``tables``      every path of at most 12 features on a pattern table (1 GiB budget, forced
                  with :func:`distshap.plan.costs.tables_everywhere`);
* ``auto_shipped`` (only when the device's constants are calibrated ones) the cost model's mix
                  under the shipped constants of the kind: what calibrating changed;

each with its rows/s predicted by :func:`distshap.plan.predict.predict` (the device's constants:
the calibration cache, else the shipped ones; ``predicted_shipped`` under the shipped
constants of the kind) for the plan the device model actually built, and XGBoost's GPU
``pred_contribs`` on the same rows. One JSON line per shape on stdout (and ``--out``).

Usage (GPU; calibrate first so that the predictions use measured constants)::

    distshap calibrate
    DISTSHAP_BENCH_DEVICE=cuda python3 -m benchmarks.cost_model \\
        --shapes cal_housing-med,adult-med,covtype-med,fashion_mnist-med --out cost_model.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from benchmarks.shapes import SHAPES, make_data, train_model
from benchmarks.throughput import _host, _median_seconds
from distshap.models import load_model
from distshap.packed import build_packed_model
from distshap.paths import extract_paths
from distshap.plan import costs as cm
from distshap.plan.predict import predict

VARIANTS = ("quadrature", "auto", "tables")
#: Default rows per call by model size.
ROWS = {"small": 100_000, "med": 100_000, "large": 10_000}


def _packed(paths, variant: str):
    if variant == "quadrature":
        return build_packed_model(paths, table_budget_bytes=0)
    return build_packed_model(paths)  # default budget (1 GiB) and feature limit (12)


def measure(shape: str, rows: int, repeats: int, xgboost: bool = True) -> dict:
    """Predicted and measured rows/s of every variant on one shape; one result record."""
    from distshap.kernels import cuda as kc
    from distshap.kernels.cuda.calibrate import _plan_offsets
    from distshap.kernels.cuda.runtime.device import SIM, xp

    name, size = shape.rsplit("-", 1)
    booster = train_model(name, size)
    X, _ = make_data(name, rows, seed=1)
    Xd = np.ascontiguousarray(X, dtype=np.float32)
    Xd = Xd if SIM else xp().asarray(Xd)  # the CUDA simulator (plumbing tests) takes NumPy
    backend = "cpu" if SIM else "cuda"
    paths = extract_paths(load_model(booster))
    device = cm.current_device_name()
    costs = cm.costs_for(device)
    shipped = cm.SHIPPED[cm.device_kind(device)]
    record = {"shape": shape, "rows": rows, "device": device, "kind": costs.kind,
              "constants": costs.source, "paths": int(paths.num_paths)}  # fmt: skip
    ref = None
    if xgboost:
        import xgboost as xgb

        booster.set_param({"device": "cuda"})
        dm = xgb.DMatrix(Xd)
        s, ref, _ = _median_seconds(lambda: booster.predict(dm, pred_contribs=True), repeats,
                                    backend)  # fmt: skip
        record["xgboost_gpu_rows_s"] = rows / s
        ref = _host(ref)
    variants = VARIANTS + (("auto_shipped",) if costs != shipped else ())
    for variant in variants:
        packed = _packed(paths, variant)
        forced = {"tables": cm.tables_everywhere(costs), "auto_shipped": shipped}
        forced = forced.get(variant, costs)
        kc.clear_cache()
        with cm.use_costs(forced):
            s, out, first = _median_seconds(lambda p=packed: kc.shap_values(p, Xd), repeats,
                                            backend)  # fmt: skip
            offsets = _plan_offsets(packed)
        kc.clear_cache()
        pred = predict(packed, offsets, costs, rows)
        rec = {
            "measured_rows_s": rows / s,
            "predicted_rows_s": pred.rows_per_second,
            "measured_over_predicted": (rows / s) / pred.rows_per_second,
            "predicted_shipped_rows_s": predict(packed, offsets, shipped, rows).rows_per_second,
            "first_call_s": first,
            "route": pred.route,
            "table_paths": pred.table_paths,
            "table_bytes": pred.table_bytes,
            "quadrature_paths": pred.quadrature_paths,
            "oversize_paths": pred.oversize_paths,
            "predicted_breakdown_s": pred.breakdown,
        }
        if variant.startswith("auto"):  # the plan built on the device is the cost model's choice
            choice = predict(packed, "auto", forced, rows)
            rec["plan_is_cost_model_choice"] = bool(
                choice.table_paths == pred.table_paths and choice.table_bytes == pred.table_bytes
            )
        if ref is not None:
            out = _host(out).reshape(ref.shape)
            rec["max_abs_diff_xgboost"] = float(np.abs(out - ref).max())
            rec["vs_xgboost"] = (rows / s) / record["xgboost_gpu_rows_s"]
        record[variant] = rec
    if ref is not None:
        record["output_scale"] = float(np.abs(ref).max())
    best = max(VARIANTS, key=lambda v: record[v]["measured_rows_s"])
    record["fastest_measured"] = best
    record["auto_over_fastest"] = (
        record["auto"]["measured_rows_s"] / record[best]["measured_rows_s"]
    )
    return record


def _parse_shapes(text: str | None) -> list[str]:
    if not text:
        return [f"{d}-{s}" for d, s in SHAPES]
    out = []
    for item in text.split(","):
        item = item.strip()
        name, _, size = item.rpartition("-")
        if not name or size not in ROWS:
            raise SystemExit(f"--shapes: {item!r} is not NAME-SIZE (e.g. cal_housing-med)")
        out.append(item)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shapes", help="comma-separated NAME-SIZE (default: all 12 shapes)")
    parser.add_argument("--rows", help="rows per call, or several: N,N,... (default: 100k; 10k "
                        "for large shapes)")  # fmt: skip
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-xgboost", action="store_true", help="skip XGBoost's GPU peer")
    parser.add_argument("--out", help="also append the JSON lines to this file")
    args = parser.parse_args(argv)
    try:
        row_counts = [int(r) for r in args.rows.split(",")] if args.rows else None
    except ValueError:
        raise SystemExit(f"--rows: expected integers N[,N...], got {args.rows!r}") from None
    for shape in _parse_shapes(args.shapes):
        for rows in row_counts or [ROWS[shape.rsplit("-", 1)[1]]]:
            try:
                record = measure(shape, rows, args.repeats, xgboost=not args.no_xgboost)
            except Exception as err:  # one shape failing must not lose the others' lines
                record = {"shape": shape, "rows": rows, "error": f"{type(err).__name__}: {err}"}
            line = json.dumps(record)
            print(line, flush=True)
            if args.out:
                with open(args.out, "a") as f:
                    f.write(line + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
