"""What exactness costs: the float64 comparison path and the additivity check, side by side.

One process, one model, the same rows; every time is the median of ``--repeats`` calls after a
warm-up call, GPU work synchronized:

* ``float32``: the model as XGBoost compares it (float32 inputs), additivity check off;
* ``float32+check``: the same with the additivity check on (the default);
* ``float64``: the same trees declared as comparing float64 inputs (``threshold64`` set, so
  every numeric feature is rank-encoded, :mod:`distshap.encoding`), float64 inputs holding the
  same float32-exact values: the values must be bit-identical to ``float32``;
* ``hgb-float64`` / ``hgb-as-float32`` (``--hgb``): a scikit-learn HistGradientBoosting model of
  the same shape (a real float64 model), exact, against the same trees with ``threshold64``
  dropped (the float32 comparison distshap made before, which misroutes rows).

Usage::

    python3 -m benchmarks.trust_costs --shape cal_housing-med --rows 1000000 --backend cuda --hgb
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace

import numpy as np

from benchmarks.shapes import make_data, train_model
from benchmarks.throughput import _host, _median_seconds
from distshap import TreeExplainer
from distshap.models import load_model


def _timed(explainer, X, backend: str, repeats: int, check: bool) -> tuple[float, np.ndarray]:
    seconds, out, _ = _median_seconds(
        lambda: explainer.shap_values(X, check_additivity=check), repeats, backend
    )
    return seconds, _host(out)


def _device(X: np.ndarray, backend: str):
    if backend == "cuda":
        import cupy

        return cupy.asarray(X)
    return X


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="cal_housing-med")
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--backend", default="cuda", choices=("cpu", "cuda"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--hgb", action="store_true", help="also a HistGradientBoosting model")
    parser.add_argument("--json", help="append the record to this JSON-lines file")
    args = parser.parse_args(argv)
    name, size = args.shape.rsplit("-", 1)
    X, _ = make_data(name, args.rows, seed=1)
    X32 = np.ascontiguousarray(X, dtype=np.float32)
    ensemble = load_model(train_model(name, size))
    float64_model = replace(ensemble, threshold64=ensemble.threshold.astype(np.float64))
    rec = {"shape": args.shape, "rows": args.rows, "backend": args.backend, "when": time.ctime()}

    plain = TreeExplainer(ensemble, layout="xgboost", backend=args.backend)
    rec["float32_s"], base = _timed(plain, _device(X32, args.backend), args.backend,
                                    args.repeats, False)  # fmt: skip
    rec["float32+check_s"], _ = _timed(plain, _device(X32, args.backend), args.backend,
                                       args.repeats, True)  # fmt: skip
    wide = TreeExplainer(float64_model, layout="xgboost", backend=args.backend)
    X64 = _device(X32.astype(np.float64), args.backend)
    rec["float64_s"], values = _timed(wide, X64, args.backend, args.repeats, False)
    rec["float64_bit_identical"] = bool(np.array_equal(values, base))
    rec["check_cost"] = rec["float32+check_s"] / rec["float32_s"] - 1
    rec["float64_cost"] = rec["float64_s"] / rec["float32_s"] - 1

    if args.hgb:
        from sklearn.ensemble import HistGradientBoostingRegressor

        Xt, yt = make_data(name, 20_000, seed=0)
        hgb = HistGradientBoostingRegressor(max_iter=100, max_depth=8, max_leaf_nodes=255,
                                            early_stopping=False, random_state=0)  # fmt: skip
        hgb.fit(np.asarray(Xt, np.float64), np.asarray(yt, np.float64))
        exact = load_model(hgb)
        Xh = _device(np.asarray(X, np.float64), args.backend)
        rec["hgb_paths"] = int((exact.left < 0).sum())
        explainer = TreeExplainer(exact, layout="xgboost", backend=args.backend)
        rec["hgb-float64_s"], phi = _timed(explainer, Xh, args.backend, args.repeats, False)
        rounded = TreeExplainer(replace(exact, threshold64=None), layout="xgboost",
                                backend=args.backend)  # fmt: skip
        rec["hgb-as-float32_s"], phi32 = _timed(rounded, Xh, args.backend, args.repeats, False)
        predict = hgb.predict(np.asarray(X, np.float64))
        rec["hgb_max_abs_diff_vs_predict"] = float(np.abs(phi.sum(axis=1) - predict).max())
        rec["hgb-as-float32_rows_wrong"] = int(
            (np.abs(phi32.sum(axis=1) - predict) > 1e-4 * np.abs(predict).max()).sum()
        )
        rec["hgb_float64_cost"] = rec["hgb-float64_s"] / rec["hgb-as-float32_s"] - 1
    for key, value in rec.items():
        shown = f"{value:.4f}" if isinstance(value, float) else value
        print(f"{key:28s} {shown}", flush=True)
    if args.json:
        with open(args.json, "a") as fh:
            fh.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
