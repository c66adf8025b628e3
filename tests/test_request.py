"""The request object (validated once, run unchanged) and the configuration shipped to Dask tasks.

A :class:`~distshap.request.Request` states what a call asks for; :func:`make_request` refuses
what cannot be asked, once. A setting changed on the client (``distshap.config_context``) is
what every Dask task of a graph built under it computes with, on an in-process CPU cluster whose
worker threads do not share the client's context.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import distshap
from distshap.request import Request, make_request
from tests import tiny

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def packed():
    from distshap.packed import build_packed_model
    from distshap.paths import extract_paths

    ens = tiny.random_ensemble(3, n_features=4, n_trees=3, depth=3)
    return build_packed_model(extract_paths(ens))


@pytest.fixture(scope="module")
def client():
    with distshap.start_cluster(
        n_workers=1, processes=False, gpus=False, dashboard_address=":0"
    ) as dask_client:
        yield dask_client


def test_config_is_exported():
    for name in ("Config", "config_context", "get_config", "reset_config", "set_config"):
        assert name in distshap.__all__ and hasattr(distshap, name)
    default = distshap.get_config().small_max_paths
    with distshap.config_context(small_max_paths=0) as config:
        assert isinstance(config, distshap.Config) and distshap.get_config().small_max_paths == 0
    assert distshap.get_config().small_max_paths == default


def test_request_is_validated_once(packed):
    request = make_request(packed, interactions=True, backend="cpu", check=False)
    assert request == Request(True, "cpu", False, "raw", 0, None)
    assert request.what == "interaction values" and not request.needs_labels
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.backend = "cuda"
    with pytest.raises(ValueError, match="interventional SHAP only"):
        make_request(packed, model_output="probability")
    with pytest.raises(ValueError, match="unknown model_output"):
        make_request(packed, model_output="margin")
    with pytest.raises(ValueError, match="unknown backend"):
        make_request(packed, backend="tpu")
    with pytest.raises(ValueError, match="unknown backend"):
        make_request(packed, backend="tpu", cupy_data=None)  # Dask: the name, on the client
    with pytest.raises(TypeError, match="CuPy"):
        make_request(packed, backend="cpu", cupy_data=True)
    with pytest.raises(TypeError, match="Background"):
        make_request(packed, background=np.zeros((3, 4)))
    # Dask NumPy chunks keep "auto": each worker resolves it for its own device
    lazy = make_request(packed, cupy_data=None)
    assert lazy.backend == "auto" and lazy.for_chunks("numpy") is lazy


def test_interactions_explain_the_margin_only():
    from distshap.interventional import build_background
    from tests.test_interventional import pack

    ens = tiny.random_ensemble(5, n_features=5, n_trees=2, depth=2)

    binary = pack(ens, "xgboost:binary:logistic")
    bg = build_background(binary, tiny.random_rows(2, ens, n=3))
    request = make_request(binary, background=bg, model_output="probability", backend="cpu")
    assert request.what == "interventional SHAP values"
    for pattern in ("interaction values explain the margin", "raw margin only"):
        with pytest.raises(ValueError, match=pattern):
            make_request(binary, interactions=True, background=bg, model_output="probability")


def _config_block(block, *args, row_offset=0):
    """A block function the chunk path runs: each row holds the worker's configuration."""
    config = distshap.get_config()
    out = np.empty((block.shape[0], 2), np.float64)
    out[:, 0] = config.small_max_paths
    out[:, 1] = config.tile_rows
    return out


def _map(client, X, balance):
    from distshap.cluster.graph import map_rows

    return map_rows(client, X, _config_block, (), ((2,),), np.empty((0, 2)),
                    f"config-{balance}-{id(X)}", balance)  # fmt: skip


@pytest.mark.parametrize("balance", [False, True])
def test_client_config_reaches_the_workers(client, balance):
    default = distshap.get_config()
    X = da.from_array(np.zeros((40, 3)), chunks=(10, 3))
    if balance:
        X = X.persist()
        distributed.wait(X)
    with distshap.config_context(small_max_paths=0, tile_rows=64):
        lazy = _map(client, X, balance)  # the configuration is captured here
        plain = X.map_blocks(_config_block, chunks=(X.chunks[0], (2,)), dtype=np.float64)
    got = client.compute(lazy, sync=True)
    assert got.shape == (40, 2) and (got == [0, 64]).all()
    # a task outside map_rows runs with the worker's own (default) configuration
    assert (client.compute(plain, sync=True) == [default.small_max_paths, default.tile_rows]).all()
    # built outside the block: the defaults again
    again = client.compute(_map(client, X, balance), sync=True)
    assert (again == [default.small_max_paths, default.tile_rows]).all()


def test_explain_dask_chunks_run_under_the_client_config(client, monkeypatch):
    """Every chunk task of explain_dask sees the settings of the client that built the graph."""
    import distshap.cluster.dask_explain as dx
    from distshap.dispatch import explain_rows
    from distshap.interventional import build_background
    from tests.test_interventional import pack

    ens = tiny.random_ensemble(3, n_features=4, n_trees=3, depth=3)
    packed = pack(ens)
    X = tiny.random_rows(4, ens, n=30).astype(np.float32)
    _SEEN.clear()
    monkeypatch.setattr(_recording, "__wrapped_original__", dx._block_values, raising=False)
    monkeypatch.setattr(dx, "_block_values", _recording)
    background = build_background(packed, X[:5])
    for bg in (None, background):
        expected = explain_rows(packed, X, backend="cpu", background=bg)
        with distshap.config_context(small_max_paths=0):
            lazy = dx.explain_dask(packed, da.from_array(X, chunks=10), backend="cpu",
                                   client=client, background=bg)  # fmt: skip
        np.testing.assert_array_equal(lazy.compute(), expected)
    assert _SEEN == [0] * 6
    default = distshap.get_config().small_max_paths
    assert client.submit(_seen_config, pure=False).result() == default  # a plain task


_SEEN: list[int] = []


def _recording(block, *args, **kwargs):
    """explain_dask's chunk function, noting the configuration its worker thread sees
    (module-level: tasks are serialised by reference even in process)."""
    import distshap.cluster.dask_explain as dx

    _SEEN.append(distshap.get_config().small_max_paths)
    return dx._block_values.__wrapped_original__(block, *args, **kwargs)


def _seen_config():
    return distshap.get_config().small_max_paths
