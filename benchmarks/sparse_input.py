"""Sparse input at its own size: a wide CSR matrix's memory, a narrower one's time.

Two cases, each on an XGBoost model trained here on ``--train-rows`` rows of the data
(``--trees`` rounds of depth ``--depth``, ``hist`` with 64 bins, a fifth of the features a
tree; unstored entries are missing, as XGBoost reads a CSR matrix):

* ``wide`` (default 100,000 x 50,000 at 0.2% density: 10M stored float32 values, a dense form of
  20 GB): ``shap_values(X, features="used")`` on the CPU in a fresh subprocess, which loads the
  matrix (``.npz``) and the model file, warms the explainer on 100 rows, then explains all rows.
  Reported: seconds, the process's peak RSS during the call (``/proc/self/clear_refs`` resets the
  high-water mark before it; ``ru_maxrss`` where it cannot), the RSS before the matrix was
  loaded, the input's bytes (data, indices, indptr) and the output's, and the peak against
  ``2 x (input + output)``. No peer: XGBoost's ``pred_contribs`` would return the dense
  ``(n, F + 1)`` (20 GB).
* ``narrow`` (default 100,000 x 1,000 at 5%): ``shap_values`` of the CSR matrix against its
  dense form (the same values: NaN where unstored), best of ``--repeats`` alternating calls
  each after a warm-up, on the CPU in this process; the two results' bits compared; XGBoost's
  ``pred_contribs`` of the CSR matrix (a DMatrix, ``nthread`` = ``--threads``) on
  ``--peer-rows`` rows as the peer in the same run.

Usage::

    python -m benchmarks.sparse_input               # both cases, full size (< 3 min, 2 cores)
    python -m benchmarks.sparse_input --scale 0.01  # everything 100x smaller (the test's)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time


def make_csr(rows: int, features: int, density: float, seed: int):
    """float32 CSR ``(rows, features)``, ``round(density * features)`` entries a row (repeats
    summed) in ``[0.01, 1)``, and labels from a sparse linear model of 1,000 features."""
    import numpy as np
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    k = max(1, round(density * features))
    cols = np.sort(rng.integers(0, features, size=(rows, k), dtype=np.int32), axis=1)
    data = rng.uniform(0.01, 1.0, size=(rows, k)).astype(np.float32)
    indptr = np.arange(0, rows * k + 1, k, dtype=np.int64)
    X = sp.csr_matrix((data.ravel(), cols.ravel(), indptr), shape=(rows, features))
    X.sum_duplicates()
    weights = np.zeros(features, dtype=np.float32)
    chosen = rng.choice(features, size=min(1000, features), replace=False)
    weights[chosen] = rng.normal(size=chosen.size).astype(np.float32)
    y = X @ weights + 0.1 * rng.normal(size=rows).astype(np.float32)
    return X, y


def train(X, y, train_rows: int, trees: int, depth: int, threads: int):
    import xgboost as xgb

    params = {"max_depth": depth, "eta": 0.1, "tree_method": "hist", "max_bin": 64,
              "colsample_bytree": 0.2, "nthread": threads}  # fmt: skip
    return xgb.train(params, xgb.DMatrix(X[:train_rows], y[:train_rows]), trees)


def _rss() -> tuple[int, int]:
    """Current and peak resident bytes of this process (``/proc/self/status``)."""
    got = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                got[key] = int(value.split()[0]) * 1024
    return got["VmRSS"], got["VmHWM"]


def _reset_peak() -> bool:
    """Reset this process's peak RSS to its current RSS (Linux >= 4.0)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def wide_child(data_path: str, model_path: str) -> dict:
    """The wide case's measurement, in the process that runs it (a fresh one)."""
    import resource

    import numpy as np
    import scipy.sparse as sp

    from distshap import TreeExplainer

    explainer = TreeExplainer(model_path, backend="cpu")
    F = explainer.num_features
    explainer.shap_values(sp.random(100, F, density=0.01, format="csr", random_state=0),
                          features="used")  # fmt: skip
    rss_before_data, _ = _rss()
    X = sp.load_npz(data_path).tocsr()
    input_bytes = X.data.nbytes + X.indices.nbytes + X.indptr.nbytes
    reset = _reset_peak()
    rss_before, _ = _rss()
    t0 = time.perf_counter()
    got = explainer.shap_values(X, features="used")
    seconds = time.perf_counter() - t0
    _, peak = _rss()
    if not reset:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    output_bytes = got.values.nbytes
    return {
        "rows": X.shape[0], "features": F, "stored": int(X.nnz), "used_features": len(got.features),
        "seconds": seconds, "rows_per_s": X.shape[0] / seconds,
        "input_mb": input_bytes / 1e6, "output_mb": output_bytes / 1e6,
        "dense_input_mb": X.shape[0] * F * 4 / 1e6,
        "full_output_mb": X.shape[0] * (F + 1) * 4 / 1e6,
        "rss_before_data_mb": rss_before_data / 1e6, "rss_before_call_mb": rss_before / 1e6,
        "peak_rss_mb": peak / 1e6, "peak_reset": reset,
        "peak_over_input_plus_output": peak / (input_bytes + output_bytes),
        "call_peak_over_input_plus_output": (peak - rss_before_data) / (input_bytes + output_bytes),
        "finite": bool(np.isfinite(got.values).all()),
    }  # fmt: skip


def wide(args: argparse.Namespace, scale: float) -> dict:
    """Train, write the matrix and model, measure in a fresh subprocess."""
    import scipy.sparse as sp

    rows, features = int(args.wide_rows * scale), max(50, int(args.wide_features * scale))
    t0 = time.perf_counter()
    X, y = make_csr(rows, features, args.wide_density, seed=1)
    made = time.perf_counter() - t0
    t0 = time.perf_counter()
    booster = train(X, y, max(100, int(args.train_rows * scale)), args.trees, args.depth,
                    args.threads)  # fmt: skip
    trained = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        data_path, model_path = os.path.join(tmp, "X.npz"), os.path.join(tmp, "model.json")
        sp.save_npz(data_path, X, compressed=False)
        booster.save_model(model_path)
        del X, y
        env = {**os.environ, "DISTSHAP_NUM_THREADS": str(args.threads)}
        code = (
            "import json, sys; from benchmarks.sparse_input import wide_child; "
            "print(json.dumps(wide_child(sys.argv[1], sys.argv[2])))"
        )
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        done = subprocess.run([sys.executable, "-c", code, data_path, model_path], env=env,
                              cwd=root, capture_output=True, text=True, check=False)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"the wide case's subprocess failed:\n{done.stderr[-3000:]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    return {**out, "density": args.wide_density, "make_s": made, "train_s": trained}


def _best(calls: dict, repeats: int) -> dict:
    """Best seconds of each call over ``repeats`` rounds (the calls alternate, after a warm-up
    round), and its last result: ``{name: (seconds, result)}``."""
    out = {name: [float("inf"), fn()] for name, fn in calls.items()}
    for _ in range(repeats):
        for name, fn in calls.items():
            t0 = time.perf_counter()
            out[name][1] = fn()
            out[name][0] = min(out[name][0], time.perf_counter() - t0)
    return {name: tuple(v) for name, v in out.items()}


def narrow(args: argparse.Namespace, scale: float) -> dict:
    """CSR against its dense form on the CPU, and XGBoost on the CSR rows."""
    import numpy as np
    import xgboost as xgb

    from distshap import TreeExplainer

    rows, features = int(args.narrow_rows * scale), max(50, int(args.narrow_features * scale))
    X, y = make_csr(rows, features, args.narrow_density, seed=2)
    booster = train(X, y, max(100, int(args.train_rows * scale)), args.trees, args.depth,
                    args.threads)  # fmt: skip
    dense = np.full(X.shape, np.nan, dtype=np.float32)
    dense[X.nonzero()] = X.data  # canonical: one stored entry a position
    explainer = TreeExplainer(booster, layout="xgboost", backend="cpu")
    calls = {
        "sparse": lambda: explainer.shap_values(X),
        "dense": lambda: explainer.shap_values(dense),
    }
    timed = _best(calls, args.repeats)
    (sparse_s, got), (dense_s, want) = timed["sparse"], timed["dense"]
    peer_rows = min(rows, max(100, int(args.peer_rows * scale)))
    booster.set_param({"nthread": args.threads})
    part = xgb.DMatrix(X[:peer_rows])
    peer_s, theirs = _best({"xgboost": lambda: booster.predict(part, pred_contribs=True)}, 1)[
        "xgboost"
    ]
    return {
        "rows": rows, "features": features, "density": args.narrow_density, "stored": int(X.nnz),
        "sparse_s": sparse_s, "dense_s": dense_s, "sparse_over_dense": sparse_s / dense_s,
        "bits_equal": bool(np.array_equal(got, want)),
        "sparse_rows_per_s": rows / sparse_s, "dense_rows_per_s": rows / dense_s,
        "xgboost_rows": peer_rows, "xgboost_rows_per_s": peer_rows / peer_s,
        "max_abs_diff_xgboost": float(np.abs(got[:peer_rows] - theirs).max()),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", default="wide,narrow")
    parser.add_argument("--scale", type=float, default=1.0, help="rows and features times this")
    parser.add_argument("--wide-rows", type=int, default=100_000)
    parser.add_argument("--wide-features", type=int, default=50_000)
    parser.add_argument("--wide-density", type=float, default=0.002)
    parser.add_argument("--narrow-rows", type=int, default=100_000)
    parser.add_argument("--narrow-features", type=int, default=1_000)
    parser.add_argument("--narrow-density", type=float, default=0.05)
    parser.add_argument("--train-rows", type=int, default=5_000)
    parser.add_argument("--trees", type=int, default=200)
    parser.add_argument("--depth", type=int, default=6)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--peer-rows", type=int, default=5_000)
    parser.add_argument("--out", help="write the report (JSON) here")
    args = parser.parse_args(argv)
    os.environ.setdefault("DISTSHAP_NUM_THREADS", str(args.threads))
    report: dict = {"argv": sys.argv[1:] if argv is None else argv}
    for case in args.cases.split(","):
        report[case] = {"wide": wide, "narrow": narrow}[case](args, args.scale)
        print(case, json.dumps(report[case], indent=1), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)
    return report


if __name__ == "__main__":
    main()
