"""The layouts of lazy Dask results: taken inside the kernels' tasks, no layer on top.

``shap_values`` / ``shap_interaction_values`` / ``banzhaf_values`` of a Dask array return the
array of one graph layer whose tasks compute each block in the explainer's layout
(:func:`distshap.cluster.graph.then_blocks`). Its shape, chunks, dtype and meta are those Dask's
own slicing of the kernels' ``(n, G, F+1[, F+1])`` result gives, and its bits are the
in-memory call's.
"""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest

import distshap.cluster.graph as graph
from distshap import TreeExplainer, kernels
from distshap.cluster import explain_dask, start_cluster
from distshap.layouts import layout_block, layout_values, shap_layout

xgb = pytest.importorskip("xgboost")

N_FEATURES = 4
CHUNKS = (25, 25, 10)


@pytest.fixture(scope="module")
def rows() -> np.ndarray:
    rng = np.random.default_rng(11)
    X = rng.normal(size=(sum(CHUNKS), N_FEATURES)).astype(np.float32)
    X[rng.random(X.shape) < 0.1] = np.nan
    return X


@pytest.fixture(scope="module")
def models(rows):
    """One output group (binary logistic) and three (softprob), depth 3, 3 rounds."""
    X = np.nan_to_num(rows)
    one = xgb.train({"max_depth": 3, "objective": "binary:logistic"},
                    xgb.DMatrix(rows, label=(X[:, 0] > 0).astype(np.float32)), 3)  # fmt: skip
    classes = (X[:, 0] > 0).astype(int) + (X[:, 1] > 0.5)
    many = xgb.train({"max_depth": 3, "objective": "multi:softprob", "num_class": 3},
                     xgb.DMatrix(rows, label=classes), 3)  # fmt: skip
    return {"one": one, "many": many}


@pytest.fixture(scope="module")
def client():
    with start_cluster(n_workers=1, processes=False, gpus=False, dashboard_address=":0") as c:
        yield c


def _calls(explainer):
    return {
        "shap": lambda X: explainer.shap_values(X),
        "interactions": lambda X: explainer.shap_interaction_values(X),
        "banzhaf": lambda X: explainer.banzhaf_values(X),
    }


def _structure(a: da.Array) -> tuple:
    return (a.shape, a.chunks, a.dtype, type(a._meta), a._meta.ndim, a._meta.dtype)


@pytest.mark.parametrize("layout", ["xgboost", "shap"])
@pytest.mark.parametrize("groups", ["one", "many"])
@pytest.mark.parametrize("background", [False, True])
def test_layout_in_the_kernels_tasks(client, models, rows, layout, groups, background):
    model = models[groups]
    data = np.nan_to_num(rows[:6]) if background else None
    explainer = TreeExplainer(model, data=data, backend="cpu", client=client, layout=layout)
    dX = da.from_array(rows, chunks=(CHUNKS, -1))
    calls = _calls(explainer)
    if background:  # interventional: SHAP values (and the probability for one group)
        calls = {"shap": calls["shap"]}
        if groups == "one":
            prob = TreeExplainer(model, data=data, model_output="probability", backend="cpu",
                                 client=client, layout=layout)  # fmt: skip
            calls["probability"] = lambda X: prob.shap_values(X)
    for kind, call in calls.items():
        lazy = call(dX)
        assert len(lazy.dask.layers) == 1, (kind, list(lazy.dask.layers))
        assert len(lazy.dask) == len(CHUNKS)  # one task a chunk: the kernels'
        interactions = kind == "interactions"
        raw = explain_dask(explainer.packed, dX, client=client, interactions=interactions,
                           method="banzhaf" if kind == "banzhaf" else "shap",
                           background=explainer.background,
                           model_output="probability" if kind == "probability" else "raw",
                           )  # fmt: skip
        sliced = layout_block(raw, layout, interactions)  # Dask's own operations
        assert _structure(lazy) == _structure(sliced), kind
        np.testing.assert_array_equal(lazy.compute(), call(rows), err_msg=kind)


def test_rows_from_a_computation_keep_their_layers(client, models, rows):
    """Rows that are a Dask computation's output: its layers stay below the one layer."""
    explainer = TreeExplainer(models["many"], backend="cpu", client=client)
    dX = da.from_array(rows, chunks=(CHUNKS, -1)) * 1
    lazy = explainer.shap_values(dX)
    assert set(lazy.dask.layers) == set(dX.dask.layers) | {lazy.name}
    assert lazy.dask.dependencies[lazy.name] == {dX.name}
    np.testing.assert_array_equal(lazy.compute(), explainer.shap_values(rows))


def test_other_arrays_get_the_layout_from_dask(client, models, rows):
    """A result with a layer on top of the kernels' (here a rechunk) gets one more layer."""
    explainer = TreeExplainer(models["many"], backend="cpu", client=client)
    dX = da.from_array(rows, chunks=(CHUNKS, -1))
    raw = explain_dask(explainer.packed, dX, client=client, interactions=True)
    merged = raw.rechunk({0: (10, 50)})
    assert graph.then_blocks(merged, np.negative, raw.chunks[1:], raw._meta, "x") is None
    values = layout_values(merged, False, "shap", True)
    assert values.chunks == ((10, 50), (N_FEATURES,), (N_FEATURES,), (3,))
    assert set(values.dask.layers) == set(merged.dask.layers) | {values.name}
    np.testing.assert_array_equal(values.compute(), explainer.shap_interaction_values(rows))


@pytest.mark.parametrize("interactions", [False, True])
@pytest.mark.parametrize("groups", ["one", "many"])
def test_explanation_values_and_base_on_one_kernel_task(client, models, rows, groups,
                                                        interactions):  # fmt: skip
    """``explainer(dask_X)``: values and base values, a layer each on top of the kernels'
    (one kernel task a chunk feeds both), structured as Dask's slicing gives them, with the
    in-memory explanation's bits."""
    explainer = TreeExplainer(models[groups], backend="cpu", client=client)
    dX = da.from_array(rows, chunks=(CHUNKS, -1))
    lazy = explainer(dX, interactions=interactions)
    kernel_layers = set(lazy.values.dask.layers) - {lazy.values.name}
    assert len(kernel_layers) == 1
    assert set(lazy.base_values.dask.layers) == kernel_layers | {lazy.base_values.name}
    raw = explain_dask(explainer.packed, dX, client=client, interactions=interactions)
    sliced_values, sliced_base = shap_layout(raw, interactions)
    assert _structure(lazy.values) == _structure(sliced_values)
    assert _structure(lazy.base_values) == _structure(sliced_base)
    expected = explainer(rows, interactions=interactions)
    got = lazy.compute()
    np.testing.assert_array_equal(got.values, expected.values)
    np.testing.assert_array_equal(got.base_values, expected.base_values)
    assert got.base_values.dtype == expected.base_values.dtype == np.float64


def test_unique_names():
    first, second = graph.unique_name("distshap-x"), graph.unique_name("distshap-x")
    assert first != second and first.startswith("distshap-x-")
    token = first.split("-")[2]
    graph._new_process_token()  # as in a forked child
    assert graph.unique_name("distshap-x").split("-")[2] != token


@pytest.mark.gpu
@pytest.mark.skipif(not kernels.cuda_available(), reason="no CUDA GPU visible")
@pytest.mark.parametrize("layout", ["xgboost", "shap"])
def test_cupy_chunks_in_either_layout(client, models, rows, layout):
    """CuPy chunks: CuPy blocks in the layout, the bits of the in-memory CuPy call."""
    cupy = pytest.importorskip("cupy")
    explainer = TreeExplainer(models["many"], backend="cuda", client=client, layout=layout)
    dX = da.from_array(cupy.asarray(rows), chunks=(CHUNKS, -1))
    for call in _calls(explainer).values():
        lazy = call(dX)
        assert len(lazy.dask.layers) == 1
        assert type(lazy._meta).__module__.split(".")[0] == "cupy"
        out = lazy.compute()
        assert isinstance(out, cupy.ndarray)
        np.testing.assert_array_equal(out.get(), call(cupy.asarray(rows)).get())
