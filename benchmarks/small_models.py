"""Small models on the GPU: where a call's time goes, one-launch route against the regular one.

For each shape (default ``cal_housing-small,adult-small``), SHAP values of ``--rows`` rows and
interaction values of ``--interaction-rows`` rows, the median microseconds of a call (after a
warm-up, GPU synchronized before the clock stops) of:

* ``public``: ``TreeExplainer.shap_values`` / ``shap_interaction_values`` on CuPy rows, the
  additivity check included (what :mod:`benchmarks.throughput` times);
* ``checked``: :func:`distshap.kernels.cuda.launch.checked_values` (the kernel with the fused
  check, no explainer);
* ``kernel``: :func:`distshap.kernels.cuda.shap_values` / ``interaction_values`` (no check);
* ``host``: the host's time in ``kernel`` (the GPU synchronized outside the clock: what the
  call costs before the kernel runs, the rest of ``kernel`` being the GPU's);
* ``numba host``: ``host`` with the kernel launched by Numba instead of through the driver
  (:mod:`distshap.kernels.cuda.runtime.rawlaunch`: the same kernel and bits, less host time);
* ``regular``: the public call with the one-launch route off (``small_max_paths=0``);
* ``xgboost``: XGBoost's GPU ``predict(pred_contribs / pred_interactions)`` on a CuPy DMatrix;

and rows/s of the public call against XGBoost's. Needs a GPU::

    DISTSHAP_BENCH_DEVICE=cuda python3 -m benchmarks.small_models
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from benchmarks.shapes import make_data, train_model


def _median_us(fn, repeats: int) -> float:
    import cupy

    fn()  # warm-up: compilation, device constants
    cupy.cuda.Device().synchronize()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        cupy.cuda.Device().synchronize()
        times.append(time.perf_counter() - t0)
    return 1e6 * statistics.median(times)


def _host_us(fn, repeats: int) -> float:
    """Median host microseconds of ``fn`` alone (the GPU synchronized outside the clock)."""
    import cupy

    fn()
    times = []
    for _ in range(repeats):
        cupy.cuda.Device().synchronize()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    cupy.cuda.Device().synchronize()
    return 1e6 * statistics.median(times)


def measure(name: str, size: str, rows: int, interactions: bool, repeats: int) -> dict:
    """Microseconds a call (module docstring) on one shape."""
    import cupy
    import xgboost as xgb

    from distshap import TreeExplainer
    from distshap.kernels import cuda as kc
    from distshap.kernels.cuda import launch
    from distshap.kernels.cuda.runtime import rawlaunch
    from distshap.plan.config import config_context
    from distshap.plan.routes import small_fits

    booster = train_model(name, size)
    X, _ = make_data(name, rows, seed=1)
    X = np.ascontiguousarray(X, np.float32)
    explainer = TreeExplainer(booster, layout="xgboost", backend="cuda")
    packed = explainer.packed
    Xd = cupy.asarray(X)
    public = explainer.shap_interaction_values if interactions else explainer.shap_values
    kernel = kc.interaction_values if interactions else kc.shap_values
    rec = {
        "shape": f"{name}-{size}", "kind": "interactions" if interactions else "shap",
        "rows": rows, "paths": packed.num_paths, "small": small_fits(packed, interactions),
        "public": _median_us(lambda: public(Xd), repeats),
        "checked": _median_us(lambda: launch.checked_values(packed, Xd, Xd, interactions),
                              repeats),  # fmt: skip
        "kernel": _median_us(lambda: kernel(packed, Xd), repeats),
    }  # fmt: skip
    rec["host"] = _host_us(lambda: kernel(packed, Xd), repeats)
    default_bits = kernel(packed, Xd).get()
    driver = rawlaunch.launch
    rawlaunch.launch = lambda *a, **k: False  # every launch through Numba
    try:
        rec["numba host"] = _host_us(lambda: kernel(packed, Xd), repeats)
        same = np.array_equal(kernel(packed, Xd).get(), default_bits)
    finally:
        rawlaunch.launch = driver
    rec["numba_same"] = bool(same)
    with config_context(small_max_paths=0):
        rec["regular"] = _median_us(lambda: public(Xd), repeats)
        regular = public(Xd).get()
    ours = public(Xd).get()
    booster.set_param({"device": "cuda"})
    dm = xgb.DMatrix(Xd)
    kw = {"pred_interactions": True} if interactions else {"pred_contribs": True}
    rec["xgboost"] = _median_us(lambda: booster.predict(dm, **kw), repeats)
    ref = cupy.asnumpy(booster.predict(dm, **kw)).reshape(ours.shape)
    scale = max(1.0, float(np.abs(ref).max()))
    rec["max_diff_xgboost"] = float(np.abs(ours - ref).max()) / scale
    rec["max_diff_regular"] = float(np.abs(ours - regular).max()) / scale
    rec["ratio"] = rec["xgboost"] / rec["public"]
    booster.set_param({"device": "cpu"})
    return rec


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="small models: per-call microseconds")
    parser.add_argument("--shapes", default="cal_housing-small,adult-small")
    parser.add_argument("--rows", type=int, default=10_000, help="rows of SHAP values")
    parser.add_argument("--interaction-rows", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=50)
    args = parser.parse_args(argv)
    cols = ("public", "checked", "kernel", "host", "numba host", "regular", "xgboost")
    print(f"{'shape':20} {'kind':12} {'rows':>6} {'paths':>5} {'small':>5} "
          + " ".join(f"{c + ' us':>13}" for c in cols)
          + f" {'x XGBoost':>9} {'diff xgb':>9} {'diff reg':>9} same", flush=True)  # fmt: skip
    for shape in args.shapes.split(","):
        name, size = shape.rsplit("-", 1)
        for interactions, rows in ((False, args.rows), (True, args.interaction_rows)):
            r = measure(name, size, rows, interactions, args.repeats)
            print(f"{r['shape']:20} {r['kind']:12} {rows:>6} {r['paths']:>5} {r['small']!s:>5} "
                  + " ".join(f"{r[c]:>13.1f}" for c in cols)
                  + f" {r['ratio']:>8.2f}x {r['max_diff_xgboost']:>9.1e}"
                  f" {r['max_diff_regular']:>9.1e}"
                  + f" {r['numba_same']}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
