"""Who is off on large models: distshap's GPU and CPU values against XGBoost's GPU and CPU ones.

For each ``--shapes`` entry (``name-size`` of :mod:`benchmarks.shapes`), SHAP values of
``--rows`` rows: distshap on the GPU and on the CPU, XGBoost ``pred_contribs`` on the GPU and
on the CPU, and distshap on the GPU with every path apart (``quadrature_unit_levels=0``: no
sibling units, :mod:`distshap.plan.units`); prints the largest difference of each pair over the
largest |value| of XGBoost's CPU output. Needs a GPU::

    DISTSHAP_BENCH_DEVICE=cuda python3 -m benchmarks.agreement --shapes cal_housing-large
"""

from __future__ import annotations

import argparse

import numpy as np

from benchmarks.shapes import make_data, train_model

__all__ = ["agreement"]


def _diff(a: np.ndarray, ref: np.ndarray, scale: float) -> float:
    a, ref = np.asarray(a, np.float64), np.asarray(ref, np.float64)
    if a.shape != ref.shape:  # the explainer's layout keeps the bias apart
        ref = ref[:, : a.shape[1]]
    return float(np.abs(a - ref).max() / scale)


def agreement(shape: str, rows: int) -> dict:
    """The differences of one shape (module docstring)."""
    import cupy as cp
    import xgboost as xgb

    from distshap import TreeExplainer
    from distshap.plan.config import config_context

    name, size = shape.rsplit("-", 1)
    booster = train_model(name, size)
    X, _ = make_data(name, rows, seed=1)
    X = np.ascontiguousarray(X, np.float32)
    ours_cpu = TreeExplainer(booster, layout="xgboost", backend="cpu").shap_values(X)
    ours_gpu = cp.asnumpy(
        TreeExplainer(booster, layout="xgboost", backend="cuda").shap_values(cp.asarray(X))
    )
    with config_context(quadrature_unit_levels=0):
        apart = TreeExplainer(booster, layout="xgboost", backend="cuda")
        ours_apart = cp.asnumpy(apart.shap_values(cp.asarray(X)))
    booster.set_param({"device": "cuda"})
    xgb_gpu = booster.predict(xgb.DMatrix(X), pred_contribs=True)
    booster.set_param({"device": "cpu"})
    xgb_cpu = booster.predict(xgb.DMatrix(X), pred_contribs=True)
    scale = float(np.abs(xgb_cpu).max())
    return {
        "shape": shape,
        "ours GPU vs ours CPU": _diff(ours_gpu, ours_cpu, scale),
        "ours GPU vs XGBoost CPU": _diff(ours_gpu, xgb_cpu, scale),
        "XGBoost GPU vs XGBoost CPU": _diff(xgb_gpu, xgb_cpu, scale),
        "ours GPU vs XGBoost GPU": _diff(ours_gpu, xgb_gpu, scale),
        "ours GPU vs ours GPU paths apart": _diff(ours_gpu, ours_apart, scale),
        "ours GPU paths apart vs XGBoost GPU": _diff(ours_apart, xgb_gpu, scale),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="cal_housing-large,adult-large")
    parser.add_argument("--rows", type=int, default=64)
    args = parser.parse_args(argv)
    for shape in args.shapes.split(","):
        result = agreement(shape, args.rows)
        print(" | ".join(f"{k} {v:.2e}" if isinstance(v, float) else f"{k} {v}"
                         for k, v in result.items()))  # fmt: skip


if __name__ == "__main__":
    main()
