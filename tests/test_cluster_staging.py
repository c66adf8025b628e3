"""Host rows on a GPU worker in overlapped blocks: the order of the steps and the same bits.

The block driver is free of CUDA, so its order is tested here with stand-ins; the values of a
chunk run block by block are those of one call (rows are independent), checked on the CPU
kernels; the CuPy streams and pinned memory only on a GPU.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from distshap import kernels
from distshap.cluster.staging import overlapped, row_blocks, run_host_rows, staged_blocks
from distshap.dispatch import run_request
from distshap.request import make_request


@pytest.mark.parametrize("n, min_rows, count", [(0, 4, 1), (7, 4, 1), (8, 4, 2), (100, 4, 4)])
def test_row_blocks_cover_the_rows_in_order(n, min_rows, count):
    blocks = row_blocks(n, min_rows)
    assert len(blocks) == count
    assert blocks[0][0] == 0 and blocks[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(blocks, blocks[1:], strict=False))
    assert all(stop - start >= min(n, min_rows) for start, stop in blocks)


def test_small_chunks_and_the_cpu_are_never_staged():
    assert not staged_blocks(10**7, "cpu")
    assert not staged_blocks(1000, "cuda")
    assert not staged_blocks(1000, "auto")


def test_each_block_computes_after_its_upload_and_in_order():
    log, lock = [], threading.Lock()
    data = np.arange(40.0).reshape(10, 4)
    blocks = row_blocks(10, 2)
    out = np.empty_like(data)

    def upload(i):
        with lock:
            log.append(("up", i))
        a, b = blocks[i]
        return data[a:b].copy()

    def compute(i, rows):
        with lock:
            log.append(("compute", i))
        return rows * 2

    def download(i, values):
        a, b = blocks[i]
        out[a:b] = values

    overlapped(len(blocks), upload, compute, download)
    np.testing.assert_array_equal(out, data * 2)
    computed = [i for step, i in log if step == "compute"]
    assert computed == list(range(len(blocks)))
    for i in range(len(blocks)):
        assert log.index(("up", i)) < log.index(("compute", i))


def test_an_upload_error_is_raised_and_stops_the_blocks():
    computed = []

    def upload(i):
        if i == 2:
            raise MemoryError("no room on the device")
        return i

    with pytest.raises(MemoryError, match="no room"):
        overlapped(4, upload, lambda i, h: computed.append(i), lambda i, v: None)
    assert computed == [0, 1]


@pytest.fixture(scope="module")
def model_and_rows():
    xgb = pytest.importorskip("xgboost")
    from distshap import TreeExplainer

    rng = np.random.default_rng(3)
    X = rng.normal(size=(300, 5)).astype(np.float32)
    X[rng.random(X.shape) < 0.05] = np.nan
    y = np.nan_to_num(X[:, 0]) * 2 + np.nan_to_num(X[:, 1] > 0)
    booster = xgb.train({"max_depth": 4}, xgb.DMatrix(X, label=y), num_boost_round=6)
    return TreeExplainer(booster, backend="cpu").packed, X


@pytest.mark.parametrize("interactions", [False, True], ids=["shap", "interactions"])
def test_blocks_give_the_bits_of_one_call(model_and_rows, interactions):
    """The premise of the staging: a chunk run block by block equals one call, bit for bit."""
    packed, X = model_and_rows
    request = make_request(packed, interactions=interactions, backend="cpu", cupy_data=False)
    whole = run_request(packed, X, request, None, 0)
    blocks = row_blocks(len(X), 64)
    parts = [None] * len(blocks)

    def compute(i, rows):
        return run_request(packed, rows, request, None, blocks[i][0])

    def download(i, values):
        parts[i] = values

    overlapped(len(blocks), lambda i: X[slice(*blocks[i])], compute, download)
    assert len(blocks) == 4
    np.testing.assert_array_equal(np.concatenate(parts), whole)


@pytest.mark.gpu
@pytest.mark.skipif(not kernels.cuda_available(), reason="no CUDA GPU visible")
@pytest.mark.parametrize("interactions", [False, True], ids=["shap", "interactions"])
def test_staged_host_rows_equal_one_device_call(model_and_rows, interactions):
    packed, X = model_and_rows
    request = make_request(packed, interactions=interactions, backend="cuda", cupy_data=False)
    whole = run_request(packed, X, request, None, 0)
    staged = run_host_rows(packed, X, request, None, 0, min_rows=64)
    assert isinstance(staged, np.ndarray)
    np.testing.assert_array_equal(staged, whole)
