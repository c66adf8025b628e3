"""Banzhaf values: distshap on the CPU against WOODELF, and on the GPU against distshap's own
SHAP values, on a model of :mod:`benchmarks.shapes`.

CPU (``--threads``, default 2: distshap's ``DISTSHAP_NUM_THREADS``; ``OMP_NUM_THREADS`` and
the BLAS thread counts for WOODELF, set before NumPy is imported): ``TreeExplainer
.banzhaf_values`` and ``WoodelfExplainer.banzhaf_values`` on the same ``--cpu-rows`` rows (a
pandas DataFrame, float32 values), path-dependent and over ``--background`` background rows,
side by side in one process. Each timing is the median of ``--repeats`` calls after a warm-up
call; ``first s`` is each library's first call (compilation or Numba's cache, pattern tables,
WOODELF's model parsing). The largest difference between the two results is reported.

GPU (when CUDA is usable): ``banzhaf_values`` and ``shap_values`` of distshap
(``backend="cuda"``, XGBoost layout, the additivity check of the SHAP values on, as users call
them) on ``--gpu-rows`` rows (CuPy input), path-dependent, and ``banzhaf_values`` over the
``--background`` rows; rows/s of each, and the largest difference between the GPU's Banzhaf
values and the CPU kernels' on the first 2000 rows.

Usage::

    python -m benchmarks.banzhaf                                   # cal_housing-med, 2 threads
    python -m benchmarks.banzhaf --cpu-rows 5000 --gpu-rows 1000000 --skip-cpu
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time


def _median(fn, repeats: int) -> tuple[float, float, object]:
    """Seconds of the first call, median seconds of ``repeats`` more, the last result."""
    t0 = time.perf_counter()
    out = fn()
    first = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return first, statistics.median(times), out


def _cpu(booster, X, background, repeats: int) -> list[dict]:
    import numpy as np
    import pandas as pd
    from woodelf import WoodelfExplainer

    from distshap import TreeExplainer

    cols = [f"f{i}" for i in range(X.shape[1])]
    booster.feature_names = cols
    frame = pd.DataFrame(X.astype(np.float32), columns=cols)
    bg = pd.DataFrame(background.astype(np.float32), columns=cols)
    out = []
    for game, data in (("path-dependent", None), ("background", bg)):
        ours = TreeExplainer(booster, data, layout="shap", backend="cpu")
        theirs = WoodelfExplainer(booster, data)
        f1, t1, v1 = _median(lambda e=ours: e.banzhaf_values(frame), repeats)
        f2, t2, v2 = _median(lambda w=theirs: w.banzhaf_values(frame, verbose=False), repeats)
        scale = float(np.abs(v2).max())
        out.append({
            "game": game, "rows": len(frame), "distshap_s": t1, "distshap_first_s": f1,
            "woodelf_s": t2, "woodelf_first_s": f2, "speedup": t2 / t1,
            "max_abs_diff": float(np.abs(np.asarray(v1) - v2).max()), "scale": scale,
        })  # fmt: skip
    return out


def _gpu(booster, X, background, repeats: int) -> list[dict]:
    import cupy

    from distshap import TreeExplainer

    rows = cupy.asarray(X.astype("float32"))
    explainer = TreeExplainer(booster, layout="xgboost", backend="cuda")
    with_background = TreeExplainer(booster, background, layout="xgboost", backend="cuda")
    out = []
    calls = {
        "banzhaf_values": lambda: explainer.banzhaf_values(rows),
        "shap_values": lambda: explainer.shap_values(rows),
        "banzhaf_values background": lambda: with_background.banzhaf_values(rows),
    }
    for name, fn in calls.items():

        def timed(fn=fn):
            result = fn()
            cupy.cuda.Device().synchronize()
            return result

        first, t, _ = _median(timed, repeats)
        out.append({"call": name, "rows": len(X), "s": t, "first_s": first,
                    "rows_per_s": len(X) / t})  # fmt: skip
    head = X[:2000].astype("float32")
    for r, data in ((out[0], None), (out[2], background)):
        cpu = TreeExplainer(booster, data, layout="xgboost", backend="cpu").banzhaf_values(head)
        gpu = explainer if data is None else with_background
        diff = cupy.asnumpy(gpu.banzhaf_values(cupy.asarray(head))) - cpu
        r["max_abs_diff_cpu"] = float(abs(diff).max())
        r["scale"] = float(abs(cpu).max())
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shape", default="cal_housing-med")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--cpu-rows", type=int, default=2000)
    parser.add_argument("--gpu-rows", type=int, default=1_000_000)
    parser.add_argument("--background", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-cpu", action="store_true")
    parser.add_argument("--json", help="write the results to this file")
    args = parser.parse_args(argv)
    threads = str(args.threads)
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(name, threads)
    os.environ["DISTSHAP_NUM_THREADS"] = threads

    from benchmarks.shapes import make_data, train_model
    from distshap.kernels import cuda_available

    name, size = args.shape.rsplit("-", 1)
    booster = train_model(name, size)
    X, _ = make_data(name, max(args.cpu_rows, args.gpu_rows) + args.background, seed=1)
    result: dict = {"shape": args.shape, "threads": args.threads}
    if not args.skip_cpu:
        result["cpu"] = _cpu(booster, X[: args.cpu_rows], X[-args.background :], args.repeats)
        for r in result["cpu"]:
            print(f"CPU {r['game']:15s} {r['rows']} rows: distshap {r['distshap_s']:.3f} s "
                  f"(first {r['distshap_first_s']:.2f}), WOODELF {r['woodelf_s']:.3f} s "
                  f"(first {r['woodelf_first_s']:.2f}), {r['speedup']:.1f}x, max |diff| "
                  f"{r['max_abs_diff']:.2e} of {r['scale']:.2f}", flush=True)  # fmt: skip
    if cuda_available():
        bg = X[-args.background :]
        result["gpu"] = _gpu(booster, X[: args.gpu_rows], bg, args.repeats)
        for r in result["gpu"]:
            diff = ""
            if "scale" in r:
                diff = f", max |GPU - CPU| {r['max_abs_diff_cpu']:.2e} of {r['scale']:.2f}"
            print(
                f"GPU {r['call']:26s} {r['rows']} rows: {r['s']:.3f} s "
                f"({r['rows_per_s']:,.0f} rows/s, first {r['first_s']:.2f} s){diff}",
                flush=True,
            )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=1)
    return result


if __name__ == "__main__":
    main()
