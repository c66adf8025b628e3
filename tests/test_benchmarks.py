"""The benchmark helpers that turn measurements into claims."""

from __future__ import annotations

import pytest

from benchmarks.scaling import predict_rows_per_s


def _report(times: dict[int, float], rows: int = 1_000_000) -> dict:
    return {
        "results": [
            {"workers": n, "rows": rows, "distshap_rows_per_s": rows / t} for n, t in times.items()
        ]
    }


def test_cost_model_recovers_its_own_law():
    law = {n: 10.0 / n + 0.5 for n in (1, 2, 4)}
    predicted = predict_rows_per_s(_report(law), 8)
    assert predicted == pytest.approx(1_000_000 / (10.0 / 8 + 0.5), rel=1e-9)


def test_cost_model_needs_two_counts():
    with pytest.raises(ValueError, match="two or more"):
        predict_rows_per_s(_report({1: 3.0}), 8)


@pytest.mark.parametrize("name", ["adult", "cal_housing", "covtype", "fashion_mnist"])
def test_synthetic_data_has_the_paper_shape_and_is_reproducible(name):
    import numpy as np

    from benchmarks.shapes import DATASETS, make_data

    X, y = make_data(name, 300, seed=3)
    assert X.shape == (300, DATASETS[name][1]) and X.dtype == np.float32
    assert y.shape == (300,)
    X2, y2 = make_data(name, 300, seed=3)
    assert np.array_equal(X, X2, equal_nan=True) and np.array_equal(y, y2)
    assert not np.array_equal(X, make_data(name, 300, seed=4)[0], equal_nan=True)
    classes = DATASETS[name][3]
    if classes > 2:
        assert y.min() >= 0 and y.max() < classes


def test_cpu_intercept_is_the_cpu_models_start():
    """The intercept given to GPU-trained multiclass models is the one a CPU-trained model of
    the same labels starts from (covtype: class 0 empty, held far below the others)."""
    import json

    import numpy as np
    import xgboost as xgb

    from benchmarks.shapes import cpu_intercept, make_data, params

    X, y = make_data("covtype", 2000, seed=1)
    p = params("covtype", "small")
    got = cpu_intercept(y, p)
    booster = xgb.train(p, xgb.DMatrix(X, label=y), 1)
    text = json.loads(booster.save_config())["learner"]["learner_model_param"]["base_score"]
    want = [float(v) for v in text.strip("[]").split(",")]
    assert len(got) == p["num_class"] and np.allclose(got, want, rtol=1e-6, atol=1e-6)
    assert got[0] < min(got[1:]) - 3  # class 0 has no rows


def test_paper_table3_tree_counts_match_the_shapes():
    from benchmarks.paper import PAPER_TABLE3
    from benchmarks.shapes import DATASETS, DEPTHS, ROUNDS, SHAPES

    assert set(PAPER_TABLE3) == set(SHAPES)
    for (name, size), (trees, _, depth) in PAPER_TABLE3.items():
        groups = DATASETS[name][3] if DATASETS[name][2].startswith("multi:") else 1
        assert trees == ROUNDS[size] * groups and depth == DEPTHS[size], (name, size)


def test_real_data_shapes_and_leaf_table(tmp_path, monkeypatch):
    import numpy as np
    from sklearn.datasets import load_diabetes

    from benchmarks import shapes

    X, y = shapes.make_data("diabetes")
    X_ref, y_ref = load_diabetes(return_X_y=True)
    assert np.array_equal(X, X_ref.astype(np.float32)) and np.array_equal(y, y_ref)
    Xs, _ = shapes.make_data("diabetes", 50, seed=1)
    assert Xs.shape == (50, 10) and not np.array_equal(Xs, X[:50])
    with pytest.raises(ValueError, match="unknown data set"):
        shapes.make_data("iris")

    monkeypatch.setattr(shapes, "MODEL_DIR", tmp_path)
    (row,) = shapes.leaf_table([("diabetes", "small")])
    assert row["trees"] == 10 and row["leaves"] == row["paths"] <= 80
    assert row["ratio"] is None and not row["estimated"]
    table = shapes.format_leaf_table([row])
    assert "| diabetes-small | 442 | 10 |" in table and "(real data)" in table
    est = shapes.estimate_leaves("diabetes", "med", step=40, probe=2)
    rounds = [r for r, _ in est["points"]]
    assert est["trees"] == 100 and rounds[0] == 0 and len(rounds) >= 2
    assert all(a < b < 100 for a, b in zip(rounds, rounds[1:], strict=False))
    assert 0 < est["leaves"] <= 100 * 2**8


def test_benchmark_scripts_shadow_no_module_the_libraries_import():
    """``python3 benchmarks/demo.py`` puts benchmarks/ first on sys.path: a script named like a
    module a library tries to import (``sparse``, which dask probes for) is imported in its
    place. The demo's imports must work with benchmarks/ first on the path."""
    import pathlib
    import subprocess
    import sys

    here = pathlib.Path(__file__).resolve().parent.parent / "benchmarks"
    code = (f"import sys; sys.path.insert(0, {str(here)!r}); "
            "import dask.array, dask.dataframe, distributed, numpy, scipy.sparse, xgboost; "
            "import distshap, distshap.cluster")  # fmt: skip
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
