"""distshap's own summary plot reads both output layouts, and refuses values whose feature
count disagrees with the data (a bias column taken for a feature, or a feature for the bias)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("matplotlib")
pytest.importorskip("xgboost")

from distshap import TreeExplainer  # noqa: E402
from distshap.plots import mean_abs_shap, summary_plot  # noqa: E402

from xgb_models import build_multiclass  # noqa: E402


@pytest.fixture(scope="module")
def multiclass():
    booster, X = build_multiclass()
    X = np.asarray(X, dtype=np.float32)[:60]
    shap_layout = TreeExplainer(booster).shap_values(X)
    xgb_layout = TreeExplainer(booster, layout="xgboost").shap_values(X)
    return X, shap_layout, xgb_layout


def test_both_layouts_give_the_same_importances(multiclass):
    X, shap_layout, xgb_layout = multiclass
    ours = mean_abs_shap(shap_layout)
    theirs = mean_abs_shap(xgb_layout, layout="xgboost")
    assert ours.shape == (xgb_layout.shape[1], X.shape[1])
    np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=0)  # one mean, two memory orders
    summary_plot(shap_layout, X, kind="bar")
    summary_plot(xgb_layout, X, kind="bar", layout="xgboost")


def test_a_misread_layout_is_refused_in_one_line(multiclass):
    X, shap_layout, xgb_layout = multiclass
    with pytest.raises(ValueError, match="layout='xgboost'") as info:
        summary_plot(xgb_layout[:, 0], X)  # one group of XGBoost's layout read as shap's
    assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match="feature_names has"):
        summary_plot(shap_layout, feature_names=[f"f{j}" for j in range(X.shape[1] + 1)])
