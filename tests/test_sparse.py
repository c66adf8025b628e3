"""scipy.sparse rows explained a block at a time, and ``shap_values(X, features="used")``.

Every sparse format, explained block by block, gives the bits of its dense form (unstored
entries missing for XGBoost, 0.0 for other libraries; stored NaN missing; repeated entries
summed); ``features="used"`` gives the used columns of the full values (the others are 0) with
their indices, in both layouts; only one block is ever dense.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp

from distshap import TreeExplainer
from distshap.dispatch import run_request
from distshap.inputs import model_matrix
from distshap.kernels import cuda_available
from distshap.layouts import check_output_fits
from distshap.request import make_request
from distshap.row_blocks import UsedFeatureValues, run_blocks
from distshap.sparse_blocks import SparseRows, block_rows, used_features
from tests.tiny import Leaf, Split, build_ensemble, random_ensemble

xgb = pytest.importorskip("xgboost")


def _odd_matrix(n: int = 60, F: int = 12, seed: int = 0) -> sp.coo_matrix:
    """Random entries with explicit zeros, stored NaN and repeated (row, column) entries."""
    rng = np.random.default_rng(seed)
    nnz = n * F // 3
    row, col = rng.integers(0, n, nnz), rng.integers(0, F, nnz)
    data = rng.normal(size=nnz)
    data[::17] = 0.0
    data[5::23] = np.nan
    row = np.concatenate([row, row[:40], row[:40]])  # each repeated entry stored 3 times
    col = np.concatenate([col, col[:40], col[:40]])
    data = np.concatenate([data, rng.normal(size=80) * 1e-3])
    return sp.coo_matrix((data, (row, col)), shape=(n, F))


@pytest.fixture(scope="module")
def xgb_model():
    X = _odd_matrix(200, 12, seed=1).tocsr()
    y = np.random.default_rng(2).normal(size=200)
    return xgb.train({"max_depth": 4, "nthread": 1}, xgb.DMatrix(X, y), 15)


def _noncanonical(coo: sp.coo_matrix) -> sp.csr_matrix:
    """``coo`` as a CSR matrix with each row's entries in reverse column order and every
    entry stored twice, as two halves (scipy sums duplicates; halves of a float add exactly)."""
    csr = coo.tocsr()
    data, indices, indptr = [], [], [0]
    for r in range(csr.shape[0]):
        a, b = csr.indptr[r], csr.indptr[r + 1]
        values, cols = csr.data[a:b][::-1], csr.indices[a:b][::-1]
        data += [v / 2 for v in values for _ in range(2)]
        indices += [c for c in cols for _ in range(2)]
        indptr.append(len(data))
    out = sp.csr_matrix((np.array(data, csr.dtype), np.array(indices, np.int32), indptr),
                        shape=csr.shape)  # fmt: skip
    assert not out.has_canonical_format
    return out


def _formats(coo: sp.coo_matrix) -> dict:
    csr = coo.tocsr()
    mixed = csr.copy()
    mixed.indptr = mixed.indptr.astype(np.int64)  # int64 indptr, int32 indices
    return {
        "coo": coo,
        "csr-noncanonical": _noncanonical(coo),
        "csr": csr,
        "csc": coo.tocsc(),
        "csr-mixed-index": mixed,
        "lil": coo.tolil(),
        "csr_array": sp.csr_array(coo),
    }


def _blocked(packed, X, interactions: bool, block_bytes: int, backend: str):
    """Values of sparse ``X`` through run_blocks, in blocks of few rows."""
    raw = model_matrix(X, packed, blocks=True)
    raw.block_bytes = block_bytes
    request = make_request(packed, interactions=interactions, backend=backend)

    def run(start: int, stop: int):
        rows = raw if (start, stop) == (0, raw.shape[0]) else raw[start:stop]
        return run_request(packed, rows, request, None, start)

    return run_blocks(run, raw.shape[0], packed, interactions, raw)


@pytest.mark.parametrize("interactions", [False, True])
def test_every_format_in_blocks_has_the_bits_of_the_dense_route(xgb_model, backend, interactions):
    explainer = TreeExplainer(xgb_model, backend=backend)
    packed = explainer.packed
    coo = _odd_matrix()
    dense = model_matrix(coo, packed)  # the whole-matrix route
    assert np.isnan(dense).sum() > np.isnan(coo.data).sum()  # unstored -> missing (XGBoost)
    request = make_request(packed, interactions=interactions, backend=backend)
    want = np.asarray(run_request(packed, dense, request))
    width = packed.num_features + 1
    per_row = packed.num_groups * width * (width if interactions else 1)
    small = 7 * (2 * packed.num_features * 4 + 4 * per_row)  # 7 rows a block
    assert block_rows(packed.num_features, per_row, 4, small) == 7
    for name, X in _formats(coo).items():
        got = _blocked(packed, X, interactions, small, backend)
        np.testing.assert_array_equal(got, want, err_msg=name)
    assert coo.nnz == coo.data.size and not coo.has_canonical_format  # the input is not summed


def test_sparse_rows_keep_zero_for_other_libraries_and_the_explainer_route():
    ens = random_ensemble(3, n_features=6, n_trees=4, depth=3)
    explainer = TreeExplainer(ens, layout="xgboost")
    coo = _odd_matrix(40, 6, seed=4)
    dense = coo.toarray()  # scipy sums repeats; unstored entries are 0.0 for this library
    raw = model_matrix(coo.tocsr(), explainer.packed, blocks=True)
    assert isinstance(raw, SparseRows) and raw.shape == (40, 6)
    np.testing.assert_array_equal(raw[3:17], dense[3:17].astype(np.float32))
    np.testing.assert_array_equal(explainer.shap_values(coo), explainer.shap_values(dense))
    np.testing.assert_array_equal(
        explainer.shap_interaction_values(coo.tocsc()), explainer.shap_interaction_values(dense)
    )


def test_sparse_rows_refuse_what_dense_rows_refuse(xgb_model):
    explainer = TreeExplainer(xgb_model)
    with pytest.raises(ValueError, match="has 11 features but the model expects 12"):
        explainer.shap_values(sp.random(5, 11, density=0.3, format="csr"))
    with pytest.raises(ValueError, match="has no rows"):
        explainer.shap_values(sp.csr_matrix((0, 12)))


# ------------------------------------------------------------------------------------------
# features="used"
# ------------------------------------------------------------------------------------------


def _wide_model(F: int, groups: int = 1):
    """Trees on features 3, F // 2 and F - 1 of ``F``."""
    a, b, c = 3, F // 2, F - 1
    trees = [
        Split(a, 0.5, Split(b, 0.25, Leaf(1.0, 10), Leaf(-2.0, 30)), Leaf(0.5, 60)),
        Split(c, 0.75, Leaf(-1.0, 50), Split(a, 0.8, Leaf(3.0, 20), Leaf(0.0, 30))),
    ] * groups
    return build_ensemble(trees, F, num_groups=groups)


@pytest.mark.parametrize("layout", ["shap", "xgboost"])
@pytest.mark.parametrize("groups", [1, 3])
def test_used_features_are_the_used_columns_of_the_full_values(layout, groups):
    F = 40
    explainer = TreeExplainer(_wide_model(F, groups), layout=layout)
    X = sp.random(30, F, density=0.2, format="csr", random_state=5)
    full = explainer.shap_values(X)
    got = explainer.shap_values(X, features="used")
    assert isinstance(got, UsedFeatureValues)
    np.testing.assert_array_equal(got.features, [3, F // 2, F - 1])
    np.testing.assert_array_equal(got.dense(), full)
    unused = np.setdiff1d(np.arange(F), got.features)
    axis = -1 if layout == "xgboost" or groups == 1 else -2
    assert not np.take(full, unused, axis=axis).any()  # what was left out is exactly 0
    assert got.values.shape[axis] == 3 + (layout == "xgboost")
    one = explainer.shap_values(X.toarray()[4], features="used")
    np.testing.assert_array_equal(one.values, got.values[4])


@pytest.mark.parametrize("sparse", [False, True])
def test_used_features_run_a_block_of_used_columns_at_a_time(sparse):
    F = 50
    explainer = TreeExplainer(_wide_model(F), layout="xgboost")
    packed = explainer.packed
    X = np.random.default_rng(6).random((45, F)).astype(np.float32)
    X[X < 0.3] = 0.0
    raw = model_matrix(sp.csr_matrix(X), packed, blocks=True) if sparse else X
    request = make_request(packed)
    calls = []

    def run(start: int, stop: int, rows=None, model=packed):
        calls.append((stop - start, rows.shape[1], model.num_features))
        return run_request(model, rows, request, None, start)

    block = 8 * (2 * 3 * 4 + 4 * 4)  # 8 rows of the 3 used features
    got = run_blocks(run, 45, packed, False, raw, False, "used", 65536, block)
    assert calls == [(8, 3, 3)] * 5 + [(5, 3, 3)]
    want = explainer.shap_values(X)[:, [3, F // 2, F - 1, F]]
    np.testing.assert_array_equal(got[:, 0], want)
    assert explainer.shap_values(X, features="used").feature_names is None


def test_progress_runs_batches_of_its_rows_and_the_same_values():
    explainer = TreeExplainer(_wide_model(20), layout="xgboost")
    X = np.random.default_rng(7).random((40, 20)).astype(np.float32)
    request = make_request(explainer.packed)
    calls = []

    def run(start: int, stop: int):
        calls.append(stop - start)
        return run_request(explainer.packed, X[start:stop], request, None, start)

    got = run_blocks(run, 40, explainer.packed, False, X, True, "all", 16)
    assert calls == [16, 16, 8]
    np.testing.assert_array_equal(got[:, 0], explainer.shap_values(X))
    calls.clear()
    run_blocks(run, 40, explainer.packed, False, X, False, "all", 16)
    assert calls == [40]  # no progress bar: one call


def test_used_features_of_a_real_model_have_the_full_values_bits(xgb_model, backend):
    explainer = TreeExplainer(xgb_model, layout="xgboost", backend=backend)
    coo = _odd_matrix(70, 12, seed=9)
    full = explainer.shap_values(coo)
    inputs = [coo.tocsr(), model_matrix(coo, explainer.packed)]
    if backend == "cuda":
        import cupy

        inputs.append(cupy.asarray(inputs[1]))
    for X in inputs:
        got = explainer.shap_values(X, features="used")
        dense = got.dense()
        np.testing.assert_array_equal(dense.get() if hasattr(dense, "get") else dense, full)
    names = TreeExplainer(xgb_model, feature_names=[f"c{j}" for j in range(12)])
    assert names.packed.feature_names is None  # the model's own names only


def test_features_argument_and_the_too_large_output_name_the_way_out():
    explainer = TreeExplainer(_wide_model(1000))
    with pytest.raises(ValueError, match="features='everything': use 'all'"):
        explainer.shap_values(np.zeros((2, 1000)), features="everything")
    with pytest.raises(ValueError, match=r"features='used'\): the 3 features the model splits"):
        check_output_fits(10**9, explainer.packed, False)
    check_output_fits(10**6, explainer.packed, False, columns=4)  # 16 MB: fits
    with pytest.raises(ValueError) as err:
        check_output_fits(10**9, explainer.packed, True)
    assert "features=" not in str(err.value)  # interaction values have no such option


def test_a_wide_sparse_matrix_is_never_dense_at_once():
    F, n = 20_000, 1000
    explainer = TreeExplainer(_wide_model(F))
    packed = explainer.packed
    X = sp.random(n, F, density=0.002, format="csr", random_state=7, dtype=np.float32)
    dense_bytes = n * F * 4  # 80 MB, and as much again for full-width values
    request = make_request(packed)
    head = explainer.shap_values(X[:50], features="used")  # the model's plans built first
    tracemalloc.start()
    try:
        raw = model_matrix(X, packed, blocks=True)
        raw.block_bytes = 8 * 2**20  # 34 rows a block

        def run(start: int, stop: int, rows=None, model=packed):
            rows = raw[start:stop] if rows is None else rows
            return run_request(model, rows, request, None, start)

        got = run_blocks(run, n, packed, False, raw, False, "used")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert got.shape == (n, 1, 4)
    full = run_blocks(run, n, packed, False, raw, False, "all")[:, :, [3, F // 2, F - 1, F]]
    np.testing.assert_array_equal(got, full)  # in blocks of the full width too
    assert peak < dense_bytes // 4  # about one block (8 MiB: dense twice, and its values)
    np.testing.assert_array_equal(got[:50, 0, :3], head.values)
    assert used_features(packed).tolist() == [3, F // 2, F - 1]


# ------------------------------------------------------------------------------------------
# Dask arrays of scipy.sparse chunks
# ------------------------------------------------------------------------------------------


def test_dask_sparse_chunks_have_the_in_memory_bits(xgb_model):
    da = pytest.importorskip("dask.array")
    pytest.importorskip("distributed")
    pytest.importorskip("shap")
    from distshap import start_cluster

    coo = _odd_matrix(90, 12, seed=8)
    csr = coo.tocsr()
    X = da.from_array(csr, chunks=(25, 5), asarray=False)  # ragged rows, columns split
    with start_cluster(n_workers=1, processes=False, gpus=False, dashboard_address=":0") as c:
        explainer = TreeExplainer(xgb_model, layout="xgboost", client=c)
        want = explainer.shap_values(coo)
        np.testing.assert_array_equal(explainer.shap_values(X).compute(), want)
        used = explainer.shap_values(X, features="used")
        np.testing.assert_array_equal(used.values.compute(), want[:, list(used.features) + [12]])
        data = explainer(X).compute().data
        np.testing.assert_array_equal(data, model_matrix(coo, explainer.packed))


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="needs a GPU and CuPy")
@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
def test_cupy_sparse_rows_have_the_bits_of_scipy_rows_and_stay_on_the_gpu(xgb_model, fmt):
    import cupy
    import cupyx.scipy.sparse as cusp

    explainer = TreeExplainer(xgb_model, backend="cuda", layout="xgboost")
    coo = _odd_matrix(50, 12, seed=5)
    coo.sum_duplicates()  # cupyx's own conversions may sum repeats in another order
    want = explainer.shap_values(coo.tocsr())
    X = {"csr": cusp.csr_matrix, "csc": cusp.csc_matrix, "coo": cusp.coo_matrix}[fmt](
        getattr(coo, "to" + fmt)()
    )
    got = explainer.shap_values(X)
    assert isinstance(got, cupy.ndarray)
    np.testing.assert_array_equal(got.get(), want)
    raw = model_matrix(X, explainer.packed, blocks=True)
    assert isinstance(raw, SparseRows) and raw.on_gpu
    assert isinstance(raw[2:9], cupy.ndarray)
    small = explainer.packed
    request = make_request(small, interactions=True, backend="cuda")
    raw.block_bytes = 7 * (2 * small.num_features * 4 + 4 * (small.num_features + 1) ** 2)

    def run(start: int, stop: int):
        rows = raw if (start, stop) == (0, raw.shape[0]) else raw[start:stop]
        return run_request(small, rows, request, None, start)

    blocked = run_blocks(run, raw.shape[0], small, True, raw)
    assert isinstance(blocked, cupy.ndarray)
    whole = run_request(small, model_matrix(coo.tocsr(), small), request)
    np.testing.assert_array_equal(blocked.get(), np.asarray(whole))


def test_host_rows_are_not_on_the_gpu_whatever_their_columns():
    pd = pytest.importorskip("pandas")
    from distshap.inputs import on_gpu

    frame = pd.DataFrame({"on_gpu": [1.0, 2.0], "b": [0.0, 1.0]})  # a column of that name
    assert not on_gpu(frame) and not on_gpu(frame.to_numpy())
    assert not on_gpu(SparseRows(sp.csr_matrix(np.eye(3, dtype=np.float32)), "xgboost", np.float32))
