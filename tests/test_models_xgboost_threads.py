"""Reading an in-memory XGBoost booster leaves the calling thread's XGBoost settings alone.

The booster is written out on one OpenMP thread (:func:`distshap.models.xgboost.load_xgboost`),
in a thread of its own: XGBoost's ``nthread`` and OpenMP's thread count are per thread, and an
unset ``nthread`` is not given back by XGBoost's own context, so on the calling thread later
XGBoost and scikit-learn work would run on one thread.
"""

import numpy as np
import pytest

import distshap

xgb = pytest.importorskip("xgboost")


def test_the_calling_thread_keeps_its_xgboost_settings():
    if "nthread" not in xgb.get_config():
        pytest.skip("XGBoost < 2 has no nthread setting")
    rng = np.random.RandomState(0)
    X = rng.randn(60, 3)
    model = xgb.XGBRegressor(n_estimators=3, max_depth=2).fit(X, X[:, 0])
    before = xgb.get_config()
    with xgb.config_context(verbosity=0):
        explainer = distshap.TreeExplainer(model, backend="cpu")
        assert xgb.get_config()["verbosity"] == 0
    assert xgb.get_config() == before
    phi = explainer.shap_values(X[:5])
    np.testing.assert_allclose(
        phi.sum(axis=1) + explainer.expected_value, model.predict(X[:5]), rtol=0, atol=1e-5
    )
