"""Errors and data of the output layouts: a lazy explanation whose client is gone, a base_margin
shap's layout cannot hold, a Series row's own values."""

from __future__ import annotations

import numpy as np
import pytest

import distshap

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")
pytest.importorskip("shap")

from xgb_models import build_regression  # noqa: E402


def test_dask_explanation_after_its_client_closed():
    booster, X = build_regression()
    X = np.asarray(X[:200], dtype=np.float32)
    cluster = distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None
    )
    client = distributed.Client(cluster)
    try:
        explainer = distshap.TreeExplainer(booster, client=client)
        lazy = explainer(da.from_array(X, chunks=100))
        before = lazy.compute()  # with its client running: computed
        assert before.values.shape == X.shape
    finally:
        client.close()
        cluster.close()
    with pytest.raises(RuntimeError, match="made through a Dask client that is closed"):
        lazy.compute()
    with pytest.raises(RuntimeError, match="made through a Dask client that is closed"):
        lazy.persist()


def test_shap_layout_refuses_a_dmatrix_base_margin_it_cannot_hold():
    xgb = pytest.importorskip("xgboost")
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 4)).astype(np.float32)
    booster = xgb.train({"max_depth": 3}, xgb.DMatrix(X, X[:, 0]), 4)
    dm = xgb.DMatrix(X, base_margin=np.full(40, 0.3))
    with pytest.raises(ValueError, match="base_margin.*layout='xgboost'"):
        distshap.TreeExplainer(booster, layout="shap").shap_values(dm)
    want = booster.predict(dm, pred_contribs=True)
    assert (
        np.abs(distshap.TreeExplainer(booster, layout="xgboost").shap_values(dm) - want).max()
        < 1e-6
    )


def test_explanation_data_of_a_series_row_keeps_its_float64_values():
    pd = pytest.importorskip("pandas")
    xgb = pytest.importorskip("xgboost")
    rng = np.random.default_rng(1)
    frame = pd.DataFrame(rng.normal(size=(30, 3)), columns=["a", "b", "c"])
    booster = xgb.train({"max_depth": 2}, xgb.DMatrix(frame, frame["a"]), 3)
    data = distshap.TreeExplainer(booster)(frame.iloc[0]).data
    assert data.dtype == np.float64
    assert np.array_equal(np.ravel(data), frame.iloc[0].to_numpy())
