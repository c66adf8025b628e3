"""Calls of few rows on the GPU: a thread a path, graphs replayed, beside XGBoost.

For each shape and row count, under each setting ``P:R`` (``path_thread_rows`` P, 0: the row
kernels only; ``replay_rows`` R, 0: the launches one by one, no CUDA graph): the median wall
time of ``TreeExplainer.shap_values`` on NumPy rows (values back in host memory, as a server's
batch) and the GPU time a call of the kernels alone
(:func:`benchmarks.call_profile.kernel_split`: what a busy device spends a call), the values'
bits compared with the first setting's; and XGBoost's ``predict(DMatrix(rows),
pred_contribs=True)`` on the GPU in the same process::

    DISTSHAP_BENCH_DEVICE=cuda python3 -m benchmarks.few_rows --shapes cal_housing-med \\
        --rows 1,4,16,64 --settings 0:0,16:0,16:16 --calls 50
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from benchmarks.call_profile import kernel_split
from benchmarks.shapes import make_data, train_model

__all__ = ["main", "median_us"]


def median_us(fn, calls: int) -> float:
    """Median wall time of ``fn()`` in microseconds over ``calls`` calls, after three."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e6 * statistics.median(times)


def _shape(shape: str, rows: list[int], settings: list[tuple], calls: int) -> None:
    import cupy
    import xgboost as xgb

    from distshap import TreeExplainer
    from distshap.plan.config import config_context

    name, size = shape.rsplit("-", 1)
    booster = train_model(name, size)
    booster.set_param({"device": "cuda"})
    X, _ = make_data(name, max(rows), seed=1)
    X = np.ascontiguousarray(X, np.float32)
    explainer = TreeExplainer(booster, layout="xgboost", backend="cuda")
    head = "".join(f"{f'{p}:{r} wall/GPU us':>20}" for p, r in settings)
    print(f"\n== {shape}: {explainer.packed.num_features} features")
    print(f"{'rows':>6}{head}{'XGBoost us':>13}{'best vs XGBoost':>17}  bits")
    for n in rows:
        Xn = X[:n]
        times, gpu, values = [], [], []
        for p, r in settings:
            with config_context(path_thread_rows=p, replay_rows=r):
                times.append(median_us(lambda Xn=Xn: explainer.shap_values(Xn), calls))
                values.append(np.asarray(explainer.shap_values(Xn)))
                gpu.append(kernel_split(explainer.packed, cupy.asarray(Xn), "shap", calls)[1])
        same = all(np.array_equal(v.view(np.uint32), values[0].view(np.uint32)) for v in values)
        peer = median_us(lambda Xn=Xn: booster.predict(xgb.DMatrix(Xn), pred_contribs=True), calls)
        cells = "".join(f"{f'{t:.0f} / {g:.0f}':>20}" for t, g in zip(times, gpu, strict=True))
        print(f"{n:6d}{cells}{peer:13.0f}{peer / min(times):16.1f}x  "
              f"{'equal' if same else 'DIFFER'}")  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    """Command line (module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shapes", default="cal_housing-med")
    parser.add_argument("--rows", default="1,2,4,8,16,32,64,128")
    parser.add_argument("--settings", default="0:0,16:0,16:16")
    parser.add_argument("--calls", type=int, default=50)
    args = parser.parse_args(argv)
    rows = [int(v) for v in args.rows.split(",")]
    settings = [tuple(int(v) for v in (s + ":0").split(":")[:2]) for s in args.settings.split(",")]
    for shape in args.shapes.split(","):
        _shape(shape, rows, settings, args.calls)


if __name__ == "__main__":
    main()
