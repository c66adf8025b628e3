"""SHA-256 digests of SHAP and interaction values on fixed models: bits before and after a change.

Trains small deterministic XGBoost models (regression, multiclass with NaN, categorical, a deep
one on 40 features) and prints one line per (model, backend, output) with the digest of the
float32 result bytes. Run it on two checkouts on the same machine (e.g. the GPU machine, where
the CUDA kernels run) and compare the lines::

    python3 -m benchmarks.result_digests --backends cpu,cuda > after.txt

It uses only the public API, so it also runs against an older checkout on ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import hashlib

import numpy as np
import pandas as pd
import xgboost as xgb

import distshap


def _models() -> dict[str, tuple[xgb.Booster, object]]:
    rng = np.random.default_rng(7)
    X = rng.normal(size=(400, 8)).astype(np.float32)
    y = X[:, 0] + np.sin(3 * X[:, 1]) * X[:, 2] + 0.1 * rng.normal(size=400)
    Xn = X.copy()
    Xn[rng.random(Xn.shape) < 0.15] = np.nan
    cls = (X[:, 0] > 0).astype(int) + (X[:, 3] > 0.5).astype(int)
    Xd = rng.normal(size=(600, 40)).astype(np.float32)
    Xd[rng.random(Xd.shape) < 0.05] = np.nan
    Z = np.nan_to_num(Xd)
    yd = (Z[:, :10] ** 2).sum(axis=1) + Z[:, 10:20].prod(axis=1)
    frame = pd.DataFrame({"a": X[:, 0], "b": X[:, 1]})
    frame["c"] = pd.Categorical(rng.integers(0, 5, 400), categories=list(range(5)))
    frame["d"] = pd.Categorical(rng.integers(0, 3, 400), categories=list(range(3)))
    codes = frame["c"].cat.codes.to_numpy(), frame["d"].cat.codes.to_numpy()
    yc = X[:, 0] + (codes[0] % 2) - (codes[1] == 1)
    params = {"tree_method": "hist", "nthread": 1, "seed": 0}

    def fit(data, label, rounds, **extra):
        return xgb.train({**params, **extra}, data, num_boost_round=rounds)

    return {
        "regression": (fit(xgb.DMatrix(X, y), None, 40, max_depth=6), X),
        "multiclass-nan": (
            fit(xgb.DMatrix(Xn, cls), None, 20, max_depth=5, objective="multi:softprob",
                num_class=3),
            Xn,
        ),
        "categorical": (
            fit(xgb.DMatrix(frame, yc, enable_categorical=True), None, 30, max_depth=5,
                max_cat_to_onehot=1),
            frame,
        ),
        "deep": (fit(xgb.DMatrix(Xd, yd), None, 20, max_depth=12), Xd),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="cpu,cuda")
    args = parser.parse_args(argv)
    for name, (booster, X) in _models().items():
        for backend in args.backends.split(","):
            explainer = distshap.TreeExplainer(booster, backend=backend)
            for output, fn in (
                ("shap", explainer.shap_values),
                ("interactions", explainer.shap_interaction_values),
            ):
                values = np.ascontiguousarray(np.asarray(fn(X)), dtype=np.float32)
                digest = hashlib.sha256(values.tobytes()).hexdigest()[:16]
                print(f"{name:15s} {backend:5s} {output:12s} {values.shape} {digest}", flush=True)


if __name__ == "__main__":
    main()
