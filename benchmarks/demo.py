"""The README's main job: explain a Dask array on a local cluster and print throughput.

Trains a cal_housing-shaped XGBoost model (100 trees, depth 8), starts a local Dask cluster of
every visible GPU (one worker per GPU; CPU workers when there is none), generates the rows on
the workers, explains them with distshap, and prints rows/s (total and per worker) and the
additivity error (SHAP row sums against XGBoost's own margin on a sample of rows).

Usage: ``python3 benchmarks/demo.py [--rows N] [--chunks-per-worker K]``
"""

from __future__ import annotations

import argparse
import time

import dask.array as da
import numpy as np
import xgboost as xgb

import distshap
from distshap.cluster import compute


def _rows_block(seed: int, use_cupy: bool, block_info=None):
    """One chunk of rows, made on the worker that computes it."""
    loc = block_info[None]
    (start, stop), (_, n_cols) = loc["array-location"]
    rng = np.random.default_rng(seed + loc["chunk-location"][0])
    X = rng.normal(size=(stop - start, n_cols)).astype(np.float32)
    if use_cupy:
        import cupy

        return cupy.asarray(X)
    return X


def _train() -> xgb.Booster:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20_640, 8)).astype(np.float32)
    y = 2 * X[:, 0] + np.sin(3 * X[:, 1]) + X[:, 2] * X[:, 3] + rng.normal(0, 0.1, len(X))
    params = {"max_depth": 8, "eta": 0.1, "tree_method": "hist", "seed": 0}
    return xgb.train(params, xgb.DMatrix(X, y), num_boost_round=100)


def main() -> None:
    parser = argparse.ArgumentParser(description="explain a Dask array on a local cluster")
    parser.add_argument("--rows", type=int, help="rows (default 2M per GPU, 50k per CPU worker)")
    parser.add_argument("--chunks-per-worker", type=int, default=4)
    args = parser.parse_args()

    booster = _train()
    t0 = time.perf_counter()
    explainer = distshap.TreeExplainer(booster, layout="xgboost")
    stats = explainer.packed.stats
    print(
        f"model: {stats['paths']:,} paths in {stats['bins']:,} warps "
        f"(utilisation {stats['utilisation']:.3f}), preprocessed in "
        f"{time.perf_counter() - t0:.2f} s"
    )
    with distshap.start_cluster() as client:
        workers = client.scheduler_info()["workers"]
        n_workers = len(workers)
        gpu = distshap.cluster.count_gpus() > 0
        kind = "GPU" if gpu else "CPU"
        print(f"cluster: {n_workers} {kind} worker(s), dashboard {client.dashboard_link}")
        rows = args.rows or n_workers * (2_000_000 if gpu else 50_000)
        n_chunks = n_workers * args.chunks_per_worker
        chunk = -(-rows // n_chunks)
        if gpu:
            import cupy

            meta = cupy.empty((0, 8), dtype=np.float32)
        else:
            meta = np.empty((0, 8), dtype=np.float32)
        X = da.map_blocks(
            _rows_block, 1, gpu, chunks=(da.core.normalize_chunks(chunk, (rows,))[0], (8,)),
            dtype=np.float32, meta=meta,
        )  # fmt: skip
        # warm-up: compile kernels and place the model on every worker
        compute(explainer.shap_values(X[: min(rows, 1000)]), client=client)
        t0 = time.perf_counter()
        phi = explainer.shap_values(X)
        total = compute(phi.sum(axis=0), client=client, progress=rows >= 1_000_000)
        seconds = time.perf_counter() - t0
        sample = compute(X[:10_000], client=client)
        phi_sample = compute(phi[:10_000], client=client)
    sample = sample.get() if hasattr(sample, "get") else sample
    phi_sample = phi_sample.get() if hasattr(phi_sample, "get") else phi_sample
    margin = booster.predict(xgb.DMatrix(sample), output_margin=True)
    err = float(np.abs(phi_sample.sum(axis=1) - margin).max())
    assert np.isfinite(np.asarray(total.get() if hasattr(total, "get") else total)).all()
    print(f"explained {rows:,} rows in {seconds:.2f} s: {rows / seconds:,.0f} rows/s total, "
          f"{rows / seconds / n_workers:,.0f} rows/s per {kind} worker")  # fmt: skip
    print(f"additivity: max |sum(phi) - margin| = {err:.2e} (XGBoost margin, 10,000 rows)")


if __name__ == "__main__":
    main()
