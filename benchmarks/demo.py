"""The README's main job: train a small XGBoost model, explain rows, print throughput.

Usage: ``python benchmarks/demo.py [--rows N]``
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import xgboost as xgb

import distshap


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000, help="rows to explain")
    parser.add_argument("--backend", default="auto", choices=["auto", "cpu", "cuda"])
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    X = rng.normal(size=(20_000, 8)).astype(np.float32)
    y = X[:, 0] * 2 + np.sin(X[:, 1] * 3) + X[:, 2] * X[:, 3] + rng.normal(0, 0.1, 20_000)
    booster = xgb.train(
        {"max_depth": 8, "eta": 0.1, "tree_method": "hist"}, xgb.DMatrix(X, y), 100
    )
    t0 = time.perf_counter()
    explainer = distshap.TreeExplainer(booster, backend=args.backend)
    print(f"preprocessing: {time.perf_counter() - t0:.2f} s, {explainer.packed.stats}")
    rows = rng.normal(size=(args.rows, 8)).astype(np.float32)
    explainer.shap_values(rows[:1000])  # warm-up (compiles or loads the kernels)
    t0 = time.perf_counter()
    phi = explainer.shap_values(rows)
    seconds = time.perf_counter() - t0
    margin = booster.predict(xgb.DMatrix(rows), output_margin=True)
    err = np.abs(phi.sum(axis=1) - margin).max()
    print(f"explained {args.rows} rows in {seconds:.2f} s: {args.rows / seconds:,.0f} rows/s")
    print(f"additivity: max |sum(phi) - margin| = {err:.2e}")


if __name__ == "__main__":
    main()
