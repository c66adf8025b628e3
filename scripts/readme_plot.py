"""Regenerate the README's command-line example and its summary plot (docs/summary.png).

Trains a small XGBoost regression on synthetic, housing-like data with named features, writes
the model and the rows to a temporary directory, then runs the real ``distshap`` command line
(``python -m distshap.cli``) on them: ``info``, ``explain`` and ``plot summary``. The outputs of
``info`` and ``explain`` are printed (they are what the README shows); the plot is written to
``docs/summary.png`` (committed: the README shows it).

Usage, from the repository root (needs xgboost, pyarrow and matplotlib)::

    python scripts/readme_plot.py                 # -> docs/summary.png
    python scripts/readme_plot.py --out other.png --rows 20000
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
FEATURES = ["income", "house_age", "rooms", "bedrooms", "population", "occupancy", "lat", "lon"]


def make_data(n: int, seed: int = 0):
    """Synthetic rows with a non-linear, interacting target (deterministic)."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    X = pd.DataFrame(
        {
            "income": rng.lognormal(1.2, 0.5, n),
            "house_age": rng.integers(1, 52, n).astype(np.float64),
            "rooms": rng.normal(5.4, 1.2, n).clip(1),
            "bedrooms": rng.normal(1.1, 0.2, n).clip(0.5),
            "population": rng.lognormal(7.0, 0.7, n),
            "occupancy": rng.normal(3.0, 0.8, n).clip(1),
            "lat": rng.uniform(32.5, 42.0, n),
            "lon": rng.uniform(-124.3, -114.3, n),
        }
    )
    coast = np.exp(-((X["lon"] + 122.0) ** 2) / 4.0)
    y = (
        0.45 * X["income"]
        + 0.8 * coast * (X["lat"] > 36)
        + 0.01 * X["house_age"]
        - 0.15 * X["occupancy"]
        + 0.05 * X["rooms"] * (X["income"] > 4)
        + rng.normal(0, 0.2, n)
    )
    X.loc[rng.random(n) < 0.05, "bedrooms"] = np.nan  # some missing values
    return X, y.to_numpy()


def cli(*args: str) -> str:
    """Run ``distshap ARGS`` and return its stdout (raises with stderr on failure)."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, "-m", "distshap.cli", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"`distshap {' '.join(args)}` failed:\n{proc.stderr}")
    return proc.stdout


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "summary.png")
    parser.add_argument("--rows", type=int, default=5000, help="rows to train on and explain")
    parser.add_argument("--kind", choices=("beeswarm", "bar"), default="beeswarm")
    args = parser.parse_args(argv)

    import xgboost as xgb

    X, y = make_data(args.rows)
    params = {"objective": "reg:squarederror", "max_depth": 6, "eta": 0.1, "seed": 0}
    booster = xgb.train(params, xgb.DMatrix(X, label=y), num_boost_round=100)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        model, data = os.path.join(tmp, "model.json"), os.path.join(tmp, "rows.parquet")
        booster.save_model(model)
        X.to_parquet(data)
        print("$ distshap info model.json")
        print(cli("info", model).replace(model, "model.json"))
        out = os.path.join(tmp, "shap.parquet")
        print("$ distshap explain model.json rows.parquet -o shap.parquet")
        print(cli("explain", model, data, "-o", out).replace(out, "shap.parquet"))
        cli("plot", "summary", model, data, "-o", str(args.out), "--kind", args.kind, "--overwrite")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
