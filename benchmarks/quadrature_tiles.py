"""The SHAP quadrature kernel with chunk-local feature tiles against the all-features kernel.

For each model shape, SHAP values on the same CuPy rows in one process, through
:func:`distshap.kernels.cuda.shap_values` (the library's plan: SHAP tables where the cost
model puts them, the quadrature kernels for the other regular paths; no additivity check),
median of ``--repeats`` synchronized calls after a warm-up call:

* ``all``      a column per feature of the model in shared memory (global atomics where those
               do not fit): ``quadrature_tile_features`` above the model's features;
* ``local-C``  ``quadrature_tile_features = C`` (a device model per ``C``): chunks of at most
               ``C`` distinct features, ``C`` columns a thread (models of at most ``C``
               features keep the all-features tile: the same kernel as ``all``);
* ``--variants`` (instead of ``--tiles``): a comma list of variants, each ``+``-joined
  tokens: ``all`` (the all-features tile), ``cN`` (local tiles, ``C = N``), ``wN``
  (``quadrature_tile_window = N``: windowed chunks), ``kN`` (``shap_quadrature_warps = N``),
  e.g. ``c16,c16+w256,c16+w256+k8``; the first is the baseline (``x ... of base``). Tokens
  left out take :data:`_DEFAULTS` (C = 16, no window, 4 warps), not the library's defaults:
  what ``shap_values`` runs is ``c16+w256``. On a model of at most ``C`` features ``cN`` and
  ``wN`` change nothing: such repeats of an earlier variant are skipped;
* ``xgboost_gpu`` (``--xgboost``) XGBoost's ``pred_contribs`` with ``device="cuda"``.

Every variant's output is compared bit for bit with ``all`` (``bits``: ``same`` or the number
of differing values; with ``--variants``, with the all-features kernel at 4 warps, always run
first). Printed per shape: rows/s of each variant, its ratio to ``all`` and to
XGBoost, and the SHAP plan's quadrature chunks (all-features / local), the widest local tile
and the warps a block.

Usage (GPU)::

    DISTSHAP_BENCH_DEVICE=cuda python3 -m benchmarks.quadrature_tiles --tiles 8,16,24,32 \\
        --shapes cal_housing-med:1000000,adult-med:1000000,covtype-med:100000 --xgboost
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from benchmarks.shapes import make_data, train_model
from benchmarks.throughput import _median_seconds
from distshap.models import load_model
from distshap.packed import build_packed_model
from distshap.paths import extract_paths
from distshap.plan.config import config_context

__all__ = ["main", "measure", "measure_variants", "parse_variant"]


def _plan_info(kc, packed) -> dict:
    """Chunks of the SHAP plan's quadrature launches: all-features and local (those the
    kernel runs), widest tile, warps a block."""
    from distshap.plan.geometry import local_tiles, quadrature_warps

    plan = kc.device_model(packed).shap
    widest = max((int(q.local_columns) for q in plan.quadrature), default=0)
    local = local_tiles(plan)
    return {
        "chunks": sum(int(q.n_chunks) for q in plan.quadrature),
        "local_chunks": sum(int(q.n_local) for q in plan.quadrature) if local else 0,
        "local_columns": widest if local else 0,
        "warps": quadrature_warps(widest if local else packed.num_features, 2),
    }


def measure(shape: str, rows: int, repeats: int, tiles: list[int], xgboost: bool) -> dict:
    """Time the all-features kernel and the local tiles of each ``tiles`` bound on one shape."""
    import cupy

    from distshap.kernels import cuda as kc

    name, size = shape.rsplit("-", 1)
    booster = train_model(name, size)
    X, _ = make_data(name, rows, seed=1)
    Xd = cupy.asarray(X, dtype=cupy.float32)
    packed = build_packed_model(extract_paths(load_model(booster)))
    record = {"shape": shape, "rows": rows, "paths": packed.num_paths,
              "features": packed.num_features, "groups": packed.num_groups,
              "variants": {}}  # fmt: skip
    try:
        kc.clear_cache()
        with config_context(quadrature_tile_features=_ALL):
            s, ref, first = _median_seconds(lambda: kc.shap_values(packed, Xd), repeats, "cuda")
            info = _plan_info(kc, packed)
        record["variants"]["all"] = {"rows_s": rows / s, "first_s": first, "bits": "same", **info}
        for c in tiles:
            with config_context(quadrature_tile_features=int(c)):
                s, out, first = _median_seconds(lambda: kc.shap_values(packed, Xd), repeats,
                                                "cuda")  # fmt: skip
                diff = int(cupy.count_nonzero(out.view(cupy.uint32) != ref.view(cupy.uint32)))
                record["variants"][f"local-{c}"] = {
                    "rows_s": rows / s, "first_s": first, "bits": "same" if diff == 0 else diff,
                    **_plan_info(kc, packed),
                }  # fmt: skip
            del out
    finally:
        kc.clear_cache()
    if xgboost:
        import xgboost as xgb

        booster.set_param({"device": "cuda"})
        dm = xgb.DMatrix(Xd)
        s, contribs, _ = _median_seconds(lambda: booster.predict(dm, pred_contribs=True),
                                         repeats, "cuda")  # fmt: skip
        record["xgboost_gpu_rows_s"] = rows / s
        got = cupy.asnumpy(ref).reshape(np.shape(contribs))
        record["max_abs_diff_xgboost"] = float(np.abs(got - cupy.asnumpy(contribs)).max())
        booster.set_param({"device": "cpu"})
    return record


_ALL = 1 << 20  # quadrature_tile_features above any model's features: the all-features tile
_TOKENS = {"c": "quadrature_tile_features", "w": "quadrature_tile_window",
           "k": "shap_quadrature_warps"}  # fmt: skip
_DEFAULTS = {"quadrature_tile_features": 16, "quadrature_tile_window": 0,
             "shap_quadrature_warps": 4}  # fmt: skip


def parse_variant(spec: str) -> dict:
    """The configuration settings of one ``--variants`` entry (module docstring)."""
    settings = dict(_DEFAULTS)
    for token in spec.split("+"):
        if token == "all":
            settings["quadrature_tile_features"] = _ALL
        elif token[:1] in _TOKENS and token[1:].isdigit():
            settings[_TOKENS[token[0]]] = int(token[1:])
        else:
            raise ValueError(f"bad variant token {token!r} in {spec!r}: use all, cN, wN, kN")
    return settings


def _effective(settings: dict, num_features: int) -> tuple:
    """The settings that change anything on a model of ``num_features`` features."""
    local = num_features > settings["quadrature_tile_features"]
    tile = (settings["quadrature_tile_features"], settings["quadrature_tile_window"])
    return (local, tile if local else None, settings["shap_quadrature_warps"])


def measure_variants(shape: str, rows: int, repeats: int, specs: list[str],
                     xgboost: bool) -> dict:  # fmt: skip
    """Time each ``--variants`` entry (the first: the baseline) against the all-features
    reference, bit for bit, on one shape."""
    import time

    import cupy

    from distshap.kernels import cuda as kc

    name, size = shape.rsplit("-", 1)
    booster = train_model(name, size)
    X, _ = make_data(name, rows, seed=1)
    Xd = cupy.asarray(X, dtype=cupy.float32)
    packed = build_packed_model(extract_paths(load_model(booster)))
    record = {"shape": shape, "rows": rows, "paths": packed.num_paths,
              "features": packed.num_features, "groups": packed.num_groups,
              "variants": {}, "base": specs[0]}  # fmt: skip
    seen = {}
    try:
        ref = None
        for spec in ["reference", *specs]:
            settings = parse_variant("all" if spec == "reference" else spec)
            key = _effective(settings, packed.num_features)
            if spec != "reference" and key in seen:
                record["variants"][spec] = dict(record["variants"][seen[key]], same_as=seen[key])
                continue
            seen.setdefault(key, spec)
            kc.clear_cache()
            with config_context(**settings):
                start = time.perf_counter()
                kc.device_model(packed).shap  # noqa: B018 - the plan (windowed chunks) built
                plan_s = time.perf_counter() - start
                s, out, first = _median_seconds(lambda: kc.shap_values(packed, Xd), repeats,
                                                "cuda")  # fmt: skip
                info = _plan_info(kc, packed)
            if ref is None:
                ref = out
            diff = int(cupy.count_nonzero(out.view(cupy.uint32) != ref.view(cupy.uint32)))
            record["variants"][spec] = {
                "rows_s": rows / s, "first_s": first, "plan_s": plan_s,
                "bits": "same" if diff == 0 else diff, **info,
            }  # fmt: skip
            if out is not ref:
                del out
    finally:
        kc.clear_cache()
    if xgboost:
        _xgboost(record, booster, Xd, ref, repeats, rows)
    return record


def _xgboost(record, booster, Xd, ref, repeats, rows) -> None:
    import cupy
    import xgboost as xgb

    booster.set_param({"device": "cuda"})
    dm = xgb.DMatrix(Xd)
    s, contribs, _ = _median_seconds(lambda: booster.predict(dm, pred_contribs=True),
                                     repeats, "cuda")  # fmt: skip
    record["xgboost_gpu_rows_s"] = rows / s
    got = cupy.asnumpy(ref).reshape(np.shape(contribs))
    record["max_abs_diff_xgboost"] = float(np.abs(got - cupy.asnumpy(contribs)).max())
    booster.set_param({"device": "cpu"})


def _print(record: dict) -> None:
    base_name = record.get("base", "all")
    base = record["variants"][base_name]["rows_s"]
    xgb_rows = record.get("xgboost_gpu_rows_s")
    head = (f"{record['shape']} ({record['rows']:,} rows, {record['paths']:,} paths, "
            f"{record['features']} features, {record['groups']} groups)")  # fmt: skip
    if xgb_rows:
        head += (f"  xgboost_gpu {xgb_rows:,.0f} rows/s, max |diff| "
                 f"{record['max_abs_diff_xgboost']:.2e}")  # fmt: skip
    print(head)
    for name, v in record["variants"].items():
        if "same_as" in v:
            print(f"  {name:18s} (the same kernels and plan as {v['same_as']} here)")
            continue
        line = (f"  {name:18s} {v['rows_s']:>12,.0f} rows/s  x{v['rows_s'] / base:5.2f} of "
                f"{base_name}"
                + (f"  {v['rows_s'] / xgb_rows:5.2f}x xgboost" if xgb_rows else "")
                + f"  bits {v['bits']}  chunks {v['chunks']}/{v['local_chunks']}"
                f"  columns {v['local_columns']}  warps {v['warps']}"
                f"  first {v['first_s']:.2f}s"
                + (f"  plan {v['plan_s']:.2f}s" if "plan_s" in v else ""))  # fmt: skip
        print(line, flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="SHAP quadrature: local vs all-features tiles")
    parser.add_argument("--shapes", required=True,
                        help="comma list of SHAPE:ROWS, e.g. covtype-med:100000")  # fmt: skip
    parser.add_argument("--tiles", default="8,16,24,32", help="comma list of tile bounds C")
    parser.add_argument("--variants", help="comma list of variants (module docstring); "
                        "replaces --tiles")  # fmt: skip
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--xgboost", action="store_true", help="time pred_contribs too")
    parser.add_argument("--json", help="append JSON lines of the results to this file")
    args = parser.parse_args(argv)
    tiles = [int(c) for c in args.tiles.split(",") if c]
    for item in args.shapes.split(","):
        shape, _, rows = item.partition(":")
        if args.variants:
            specs = [v for v in args.variants.split(",") if v]
            for spec in specs:
                parse_variant(spec)  # bad tokens refused before any work
            record = measure_variants(shape, int(rows or 100_000), args.repeats, specs,
                                      args.xgboost)  # fmt: skip
        else:
            record = measure(shape, int(rows or 100_000), args.repeats, tiles, args.xgboost)
        _print(record)
        if args.json:
            with open(args.json, "a") as fh:
                fh.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
