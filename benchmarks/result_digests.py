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
    Xw = (rng.random(size=(3000, 60)) < 0.06).astype(np.float32)  # paths of 40+ features:
    yw = np.where(Xw.any(axis=1), Xw.argmax(axis=1), 60).astype(np.float32)  # first 1's index
    params = {"tree_method": "hist", "nthread": 1, "seed": 0}

    def fit(data, label, rounds, **extra):
        extra = {key.rstrip("_"): value for key, value in extra.items()}
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
        "small": (fit(xgb.DMatrix(X, y), None, 8, max_depth=3), X),
        "binary": (
            fit(xgb.DMatrix(Xn, (cls > 0).astype(int)), None, 25, max_depth=6,
                objective="binary:logistic"),
            Xn,
        ),
        "oversize": (
            fit(xgb.DMatrix(Xw, yw), None, 2, max_depth=48, min_child_weight=0, lambda_=0,
                gamma=0, max_bin=1024),
            Xw,
        ),
    }  # fmt: skip


def _outputs(booster: xgb.Booster, X, backend: str, background) -> dict:
    """Every output of the public API on ``X``, by name (each a NumPy array or a tuple)."""
    explainer = distshap.TreeExplainer(booster, layout="xgboost", backend=backend)
    out = {
        "shap": lambda: explainer.shap_values(X),
        "interactions": lambda: explainer.shap_interaction_values(X),
        "top-pairs": lambda: explainer.top_interactions(X, k=3),
        "summary": lambda: explainer.interaction_summary(X),
        "taylor": lambda: explainer.shap_taylor_interaction_values(X),
        "rounds": lambda: explainer.shap_values(X, iteration_range=(0, 3)),
    }
    interventional = distshap.TreeExplainer(booster, background, layout="xgboost", backend=backend)
    out["interventional"] = lambda: interventional.shap_values(X)
    out["interventional-inter"] = lambda: interventional.shap_interaction_values(X)
    if booster.attr("objective") == "binary:logistic" or "binary" in str(booster.save_config()):
        proba = distshap.TreeExplainer(
            booster, background, model_output="probability", layout="xgboost", backend=backend
        )
        out["probability"] = lambda: proba.shap_values(X)
    return out


def _digest(value) -> str:
    parts = value if isinstance(value, tuple) else (value,)
    h = hashlib.sha256()
    for part in parts:
        a = np.asarray(getattr(part, "values", part))
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="cpu,cuda")
    parser.add_argument("--models", default="", help="comma-separated subset (default: all)")
    args = parser.parse_args(argv)
    chosen = [m for m in args.models.split(",") if m]
    for name, (booster, X) in _models().items():
        if chosen and name not in chosen:
            continue
        rows = X if isinstance(X, pd.DataFrame) else X[:200]
        background = X[:20] if not isinstance(X, pd.DataFrame) else X.iloc[:20]
        for backend in args.backends.split(","):
            for output, fn in _outputs(booster, rows, backend, background).items():
                try:
                    value = fn()
                    parts = value if isinstance(value, tuple) else (value,)
                    shape = ",".join(str(np.shape(getattr(a, "values", a))) for a in parts)
                    text = f"{shape} {_digest(value)}"
                except Exception as error:  # an output the model does not have is a line too
                    text = f"refused: {type(error).__name__}"
                print(f"{name:15s} {backend:5s} {output:20s} {text}", flush=True)


if __name__ == "__main__":
    main()
