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


def test_command_line_prints_the_warning_as_one_line(tmp_path, capsys):
    from distshap.cli import main

    from xgb_models import build_regression

    booster, X = build_regression()
    model, rows, background = tmp_path / "m.json", tmp_path / "X.npy", tmp_path / "bg.npy"
    booster.save_model(model)
    np.save(rows, np.asarray(X[:3], dtype=np.float32))
    big = np.resize(np.asarray(X, dtype=np.float32), (LARGE_BACKGROUND_ROWS + 1, X.shape[1]))
    np.save(background, big)
    out = tmp_path / "v.npy"
    args = ["explain", str(model), str(rows), "-o", str(out), "--background", str(background)]
    assert main([*args, "--backend", "cpu"]) == 0
    err = capsys.readouterr().err
    assert err.startswith("distshap explain: warning: the background has 1,001 rows")
    assert err.count("\n") == 1
