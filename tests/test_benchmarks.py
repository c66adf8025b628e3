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
