"""The two-row SHAP quadrature kernel's variants side by side, in one process (issue #15).

``"old"`` is the kernel before the lean variant, ``"lean"`` the one that runs
(:func:`distshap.kernels.cuda.quadrature._make_two_row_shap_kernel`'s ``variant``). For each
model, SHAP values of the same CuPy rows through :func:`distshap.kernels.cuda.shap_values`
(the library's plan and defaults), each variant in turn (old, lean, old, lean: drifts of the
clock show as a gap between a variant's two rounds), median of ``--repeats`` synchronized calls
after a warm-up; every output compared bit for bit with the first (``bits same`` or the number
of differing values). Printed: rows/s per variant and round, lean / old, and XGBoost's GPU
``pred_contribs`` (``--xgboost``).

Models: ``--shapes`` of :mod:`benchmarks.shapes` (trained on first use, kept under
``benchmarks/.models``), and ``--deep N``: an XGBoost model of depth 16 trained here on ``N``
synthetic fashion_mnist rows (784 features, 10 classes, ``--deep-rounds`` rounds, 5% missing
values): paths of up to 16 features, the 8-node kernel of fashion_mnist-large.

Usage (GPU)::

    DISTSHAP_BENCH_DEVICE=cuda python3 -m benchmarks.two_row_variants \\
        --shapes fashion_mnist-med:100000 --deep 20000 --rows 50000 --xgboost
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from benchmarks.shapes import make_data, train_model
from benchmarks.throughput import _median_seconds
from distshap.models import load_model
from distshap.packed import build_packed_model
from distshap.paths import extract_paths

__all__ = ["deep_model", "main", "measure"]


def deep_model(n_rows: int, rounds: int, seed: int = 0):
    """An XGBoost booster of depth 16 on ``n_rows`` synthetic fashion_mnist rows (5% NaN)."""
    import xgboost as xgb

    X, y = make_data("fashion_mnist", n_rows, seed=seed)
    rng = np.random.default_rng(seed)
    X = X.copy()
    X[rng.random(X.shape) < 0.05] = np.nan
    params = {"max_depth": 16, "objective": "multi:softprob", "num_class": 10, "eta": 0.3,
              "tree_method": "hist", "device": "cuda", "max_bin": 64}  # fmt: skip
    booster = xgb.train(params, xgb.DMatrix(X, label=y), num_boost_round=rounds)
    booster.set_param({"device": "cpu"})
    return booster


def _variant(quadrature, name: str) -> None:
    """Make the two-row SHAP kernel factory build ``name`` (kernels built anew)."""
    original = getattr(quadrature, "_two_row_original", quadrature._make_two_row_shap_kernel)
    quadrature._two_row_original = original
    quadrature._make_two_row_shap_kernel = lambda n, mode: original(n, mode, variant=name)
    quadrature._KERNELS.clear()


def measure(label: str, booster, X: np.ndarray, repeats: int, xgboost: bool) -> dict:
    """Time old and lean (two rounds each) on ``X``; compare every output's bits."""
    import cupy

    from distshap.kernels import cuda as kc
    from distshap.kernels.cuda import quadrature

    Xd = cupy.asarray(X, dtype=cupy.float32)
    packed = build_packed_model(extract_paths(load_model(booster)))
    k = np.diff(packed.path_offsets) - 1
    record = {"model": label, "rows": int(X.shape[0]), "paths": int(packed.num_paths),
              "max_features": int(k.max()), "mean_features": float(k.mean()),
              "rounds": []}  # fmt: skip
    ref = None
    try:
        kc.clear_cache()
        t0 = time.perf_counter()
        kc.device_model(packed).shap  # noqa: B018 - the plan built before the clock
        record["plan_s"] = time.perf_counter() - t0
        for name in ("old", "lean", "old", "lean"):
            _variant(quadrature, name)
            s, out, first = _median_seconds(lambda: kc.shap_values(packed, Xd), repeats, "cuda")
            if ref is None:
                ref = out
            diff = int(cupy.count_nonzero(out.view(cupy.uint32) != ref.view(cupy.uint32)))
            record["rounds"].append({"variant": name, "rows_s": X.shape[0] / s, "first_s": first,
                                     "bits": "same" if diff == 0 else diff})  # fmt: skip
    finally:
        if hasattr(quadrature, "_two_row_original"):
            quadrature._make_two_row_shap_kernel = quadrature._two_row_original
            del quadrature._two_row_original
        quadrature._KERNELS.clear()
        kc.clear_cache()
    if xgboost:
        import xgboost as xgb

        booster.set_param({"device": "cuda"})
        dm = xgb.DMatrix(Xd)
        s, contribs, _ = _median_seconds(lambda: booster.predict(dm, pred_contribs=True),
                                         repeats, "cuda")  # fmt: skip
        record["xgboost_gpu_rows_s"] = X.shape[0] / s
        got = cupy.asnumpy(ref).reshape(np.shape(contribs))
        record["max_abs_diff_xgboost"] = float(np.nanmax(np.abs(got - cupy.asnumpy(contribs))))
        booster.set_param({"device": "cpu"})
    return record


def _print(r: dict) -> None:
    print(
        f"{r['model']}: {r['rows']:,} rows, {r['paths']:,} paths, features a path: max "
        f"{r['max_features']}, mean {r['mean_features']:.1f}; plan {r['plan_s']:.1f}s"
    )
    best = {}
    for x in r["rounds"]:
        best.setdefault(x["variant"], []).append(x["rows_s"])
        print(f"  {x['variant']:5s} {x['rows_s']:>12,.0f} rows/s  bits {x['bits']}  "
              f"first {x['first_s']:.2f}s")  # fmt: skip
    old, lean = np.median(best["old"]), np.median(best["lean"])
    line = f"  lean / old: {lean / old:.3f}"
    if "xgboost_gpu_rows_s" in r:
        xg = r["xgboost_gpu_rows_s"]
        line += (f"   xgboost_gpu {xg:,.0f} rows/s: old {old / xg:.2f}x, lean {lean / xg:.2f}x"
                 f"  (max |diff| {r['max_abs_diff_xgboost']:.1e})")  # fmt: skip
    print(line, flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="two-row SHAP kernel: old vs lean")
    parser.add_argument("--shapes", default="", help="comma list of SHAPE:ROWS")
    parser.add_argument("--deep", type=int, default=0, help="train a depth-16 model on N rows")
    parser.add_argument("--deep-rounds", type=int, default=20)
    parser.add_argument("--rows", type=int, default=50_000, help="rows explained (--deep)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--xgboost", action="store_true", help="time pred_contribs too")
    args = parser.parse_args(argv)
    for item in [s for s in args.shapes.split(",") if s]:
        shape, _, rows = item.partition(":")
        name, size = shape.rsplit("-", 1)
        X, _ = make_data(name, int(rows or 100_000), seed=1)
        _print(measure(shape, train_model(name, size), X, args.repeats, args.xgboost))
    if args.deep:
        t0 = time.perf_counter()
        booster = deep_model(args.deep, args.deep_rounds)
        print(f"deep model trained in {time.perf_counter() - t0:.1f}s", flush=True)
        X, _ = make_data("fashion_mnist", args.rows, seed=2)
        X[np.random.default_rng(3).random(X.shape) < 0.05] = np.nan
        label = f"deep16-fashion_mnist-{args.deep}x{args.deep_rounds}"
        _print(measure(label, booster, X, args.repeats, args.xgboost))


if __name__ == "__main__":
    main()
