"""The warning for a background of more than 1,000 rows (as shap's TreeExplainer warns)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from distshap import TreeExplainer
from distshap.background_size import LARGE_BACKGROUND_ROWS

from tiny import stump


def _rows(n: int) -> np.ndarray:
    return np.random.default_rng(0).random((n, 2)).astype(np.float32)


def test_large_background_warns_once_naming_rows_cost_and_sampling():
    n = LARGE_BACKGROUND_ROWS + 1
    with pytest.warns(UserWarning) as record:
        explainer = TreeExplainer(stump(), _rows(n), feature_perturbation="interventional")
    ours = [w for w in record if "background" in str(w.message)]
    assert len(ours) == 1
    message = str(ours[0].message)
    assert f"{n:,} rows" in message and "linear" in message and "shap.sample(X, 100)" in message
    assert ours[0].filename == __file__  # points at the caller, not at distshap
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # explaining warns no more
        explainer.shap_values(_rows(3))
    assert explainer.data.shape[0] == n  # used whole


def test_background_at_the_threshold_and_path_dependent_covers_do_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        TreeExplainer(stump(), _rows(LARGE_BACKGROUND_ROWS), feature_perturbation="interventional")
        TreeExplainer(
            stump(), _rows(LARGE_BACKGROUND_ROWS + 1), feature_perturbation="tree_path_dependent"
        )
