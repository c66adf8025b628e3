"""What a Dask call leaves behind and what it checks first: a model none of whose explainers is
alive is let go by the cluster at the next shipment; in-memory labels are checked at the call,
before any chunk runs; a numeric DataFrame's ``Explanation.data`` is its own values, as in
memory."""

from __future__ import annotations

import gc

import dask.array as da
import numpy as np
import pandas as pd
import pytest

from distshap import TreeExplainer, start_cluster

xgb = pytest.importorskip("xgboost")
dd = pytest.importorskip("dask.dataframe")


@pytest.fixture(scope="module")
def client():
    with start_cluster(n_workers=1, processes=False, gpus=False, dashboard_address=":0") as c:
        yield c


def _booster(seed: int, X: np.ndarray, objective: str = "reg:squarederror"):
    y = (X[:, 0] + X[:, 1] * X[:, 2] > 0).astype(np.float32)
    params = {"max_depth": 3, "seed": seed, "subsample": 0.8, "objective": objective}
    return xgb.train(params, xgb.DMatrix(X, label=y), 8)


def _models_held(client) -> int:
    """Model tasks the scheduler still holds (each a pickled model and a worker copy)."""

    def count(dask_scheduler) -> int:
        return sum(1 for key in dask_scheduler.tasks if str(key).startswith("distshap-model"))

    return client.run_on_scheduler(count)


def test_models_of_explainers_gone_are_let_go(client):
    X = np.random.default_rng(1).normal(size=(200, 4)).astype(np.float32)
    rows = da.from_array(X, chunks=100)
    kept = TreeExplainer(_booster(0, X), backend="cpu", client=client)
    kept.shap_values(rows).compute()
    for seed in range(1, 5):  # a loop over models, each explainer dropped after its call
        explainer = TreeExplainer(_booster(seed, X), backend="cpu", client=client)
        want = explainer.shap_values(X)
        np.testing.assert_array_equal(explainer.shap_values(rows).compute(), want)
        del explainer
        gc.collect()
        assert _models_held(client) <= 2  # the kept one and the last one shipped
    np.testing.assert_array_equal(kept.shap_values(rows).compute(), kept.shap_values(X))


def test_bad_in_memory_labels_are_refused_at_the_call(client):
    X = np.random.default_rng(2).normal(size=(120, 4)).astype(np.float32)
    booster = _booster(0, X, "binary:logistic")
    explainer = TreeExplainer(booster, X[:20], model_output="log_loss", backend="cpu",
                              client=client)  # fmt: skip
    y = (np.arange(120) % 2).astype(float)
    y[-1] = np.nan
    with pytest.raises(ValueError, match=r"y holds values outside \[0, 1\]"):
        explainer.shap_values(da.from_array(X, chunks=30), y=y)  # no graph is built


def test_a_numeric_frames_data_is_its_own_values(client):
    rng = np.random.default_rng(3)
    X = rng.normal(size=(90, 4))
    frame = pd.DataFrame(X, columns=list("abcd")).assign(d=np.arange(90) % 7)  # float64, int64
    explainer = TreeExplainer(_booster(0, X.astype(np.float32)), backend="cpu", client=client)
    here = explainer(frame)
    there = explainer(dd.from_pandas(frame, npartitions=3)).compute()
    assert there.data.dtype == here.data.dtype == np.float64
    np.testing.assert_array_equal(there.data, here.data)
    np.testing.assert_array_equal(there.values, here.values)
