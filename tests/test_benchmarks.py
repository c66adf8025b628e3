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
