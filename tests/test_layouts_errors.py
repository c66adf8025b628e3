"""A lazy explanation whose client is gone: one clear line instead of a missing dependency."""

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
