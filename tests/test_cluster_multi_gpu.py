"""Bits across GPU counts: one and two GPU workers give the same values (device machines only).

Every CUDA kernel adds int64 fixed-point contributions with integer atomics, so a row's values
do not depend on the order work is done in, hence not on how the rows are chunked or how many
GPUs share them. Checked here on a real ``LocalCUDACluster`` of one, then two GPUs, for
path-dependent and interventional values (raw and probability), the per-row top pairs and the
data-set summary, each against the in-memory CUDA result. Needs two visible GPUs.
"""

from __future__ import annotations

import numpy as np
import pytest

from distshap import TreeExplainer, kernels
from distshap.cluster import explain_dask, start_cluster
from distshap.cluster.local import count_gpus

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not kernels.cuda_available() or count_gpus() < 2, reason="needs two visible GPUs"
    ),
]

xgb = pytest.importorskip("xgboost")
da = pytest.importorskip("dask.array")


@pytest.fixture(scope="module")
def binary():
    rng = np.random.default_rng(11)
    X = rng.normal(size=(4000, 7)).astype(np.float32)
    X[rng.random(X.shape) < 0.05] = np.nan
    y = (np.nan_to_num(X[:, 0] * X[:, 1] + X[:, 2]) > 0).astype(np.float32)
    booster = xgb.train(
        {"max_depth": 6, "eta": 0.3, "objective": "binary:logistic"}, xgb.DMatrix(X, label=y), 30
    )
    return booster, X


def _on_workers(n_gpus: int, fn) -> list:
    with start_cluster(n_workers=n_gpus, gpus=True, dashboard_address=":0") as client:
        return fn(client)


def test_one_and_two_gpus_give_the_same_bits(binary):
    booster, X = binary
    # XGBoost's layout: explain_dask's, bias last
    path_dependent = TreeExplainer(booster, backend="cuda", layout="xgboost")
    interventional = TreeExplainer(booster, X[:100], backend="cuda", layout="xgboost")
    probability = TreeExplainer(booster, X[:100], "probability", backend="cuda", layout="xgboost")
    expected = {
        "path": np.asarray(path_dependent.shap_values(X)),  # NumPy in, NumPy out
        "interventional": np.asarray(interventional.shap_values(X)),
        "probability": np.asarray(probability.shap_values(X)),
    }
    expected_pairs = path_dependent.top_interactions(X, k=3)
    expected_summary = path_dependent.interaction_summary(X)

    def run(client):
        Xd = da.from_array(X, chunks=(333, 7))
        out = {
            "path": explain_dask(path_dependent.packed, Xd, client=client, backend="cuda"),
            "interventional": explain_dask(
                interventional.packed, Xd, client=client, backend="cuda",
                background=interventional.background,
            ),
            "probability": explain_dask(
                probability.packed, Xd, client=client, backend="cuda",
                background=probability.background, model_output="probability",
            ),
        }  # fmt: skip
        values = {name: client.compute(a, sync=True)[:, 0] for name, a in out.items()}
        explainer = TreeExplainer(booster, backend="cuda", client=client)
        pairs = client.compute(list(explainer.top_interactions(Xd, k=3)), sync=True)
        summary = client.compute(explainer.interaction_summary(Xd), sync=True)
        return values, pairs, summary

    results = [_on_workers(n, run) for n in (1, 2)]
    for values, pairs, summary in results:
        for name, reference in expected.items():
            np.testing.assert_array_equal(values[name], reference, err_msg=name)
        np.testing.assert_array_equal(pairs[0], np.asarray(expected_pairs[0]))
        np.testing.assert_array_equal(pairs[1], np.asarray(expected_pairs[1]))
        np.testing.assert_array_equal(summary, expected_summary)
