"""scipy.sparse rows, densified one block of rows at a time; the features a model uses.

A wide sparse matrix (say 10^5 x 5 * 10^4 at 0.2% density) holds a few tens of MB, its dense
form tens of GB. The kernels take dense float rows, so :class:`SparseRows` keeps the matrix as
it is (in CSR form: a CSR or CSC matrix once converted, any other format through its COO form)
and hands out dense blocks of consecutive rows: the whole input is never dense at once.

A block holds exactly the values the dense route (:func:`sparse_matrix` of the whole matrix)
gives those rows: an unstored entry is missing (NaN) for XGBoost models and ``0.0`` for the
others, a stored NaN is NaN, and repeated entries of a non-canonical matrix add up in the order
they are stored, as ``scipy``'s ``sum_duplicates`` adds them (rows are independent, so every
value keeps its bits).
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

__all__ = [
    "DEFAULT_BLOCK_BYTES",
    "SparseRows",
    "block_rows",
    "dense_rows",
    "has_sparse_chunks",
    "is_cupy_sparse",
    "is_sparse",
    "sparse_chunks",
    "sparse_matrix",
    "used_features",
    "used_model",
    "used_rows",
]

#: Bytes of one block's dense rows (twice: their encoded copy) and output, at most (at least
#: one row); the kernels' accumulators and the additivity check's float64 sums come beside it.
DEFAULT_BLOCK_BYTES = 32 * 2**20


def is_sparse(X: Any) -> bool:
    """A scipy.sparse matrix or array."""
    return type(X).__module__.split(".")[0] == "scipy" and hasattr(X, "tocoo")


def is_cupy_sparse(X: Any) -> bool:
    """A ``cupyx.scipy.sparse`` matrix (CuPy's sparse rows, on the GPU)."""
    return type(X).__module__.startswith("cupyx.scipy.sparse") and hasattr(X, "get")


def sparse_matrix(X: Any, library: str, dtype: Any, what: str = "X") -> np.ndarray:
    """A scipy.sparse matrix, dense: unstored entries are missing for XGBoost (as its DMatrix
    reads them), zeros for the other libraries (as LightGBM and scikit-learn read them)."""
    indices, indptr = getattr(X, "indices", None), getattr(X, "indptr", None)
    if indices is not None and indptr is not None and indices.dtype != indptr.dtype:
        # int64 indptr with int32 indices (LightGBM, XGBoost and toarray() take it; scipy's
        # tocoo() does not): one index type for both
        X = X.copy()
        X.indices, X.indptr = indices.astype(np.int64), indptr.astype(np.int64)
    coo = X.tocoo()
    if coo is X:  # tocoo() of a COO matrix is the matrix itself: never sum the caller's
        coo = X.copy()
    coo.sum_duplicates()  # a non-canonical matrix's repeated entries add up, as in scipy
    if coo.ndim != 2:
        raise ValueError(
            f"{what} is a {coo.ndim}-D sparse array; pass a 2-D (n_rows, n_features) one"
        )
    dense = np.full(coo.shape, np.nan if library == "xgboost" else 0.0, dtype=dtype)
    dense[coo.row, coo.col] = coo.data
    return dense


def _row_grouped(X: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(indptr, indices, data)`` of ``X``'s rows, each row's entries in the order
    ``X.tocoo()`` lists them (what :func:`sparse_matrix` sums repeated entries in).

    A CSR matrix's arrays are used as they are; a CSC matrix is transposed by a stable
    counting sort (``tocsr``, which keeps repeated entries); any other format goes through
    its COO form, its entries stably sorted by row.
    """
    fmt = getattr(X, "format", "")
    if fmt == "csr":
        return X.indptr, X.indices, X.data
    if fmt == "csc":
        csr = X.tocsr()
        return csr.indptr, csr.indices, csr.data
    coo = X.tocoo()
    order = np.argsort(coo.row, kind="stable")
    counts = np.bincount(coo.row, minlength=X.shape[0])
    indptr = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    return indptr, coo.col[order], coo.data[order]


class SparseRows:
    """Rows of a 2-D scipy.sparse (or cupyx.scipy.sparse) matrix, made dense a block of rows
    at a time.

    A CuPy sparse matrix is copied to the host once (its own size: the stored entries) and
    each dense block goes back to the GPU as a CuPy array, so its values are CuPy like those
    of any CuPy rows, with the bits of the same matrix from scipy.

    Parameters
    ----------
    X : scipy.sparse or cupyx.scipy.sparse matrix or array
        ``(n, F)`` rows (any format; not written).
    library : str
        The model's library: unstored entries are NaN for ``"xgboost"``, ``0.0`` otherwise.
    dtype : numpy dtype
        The dense blocks' dtype (the model's input dtype).
    categorize : callable, optional
        Applied to each dense block (the model library's reading of odd category values).
    block_bytes : int
        :func:`block_rows`' budget for one block's dense rows and output.

    Attributes
    ----------
    shape : (int, int)
    ndim : int
        2.
    on_gpu : bool
        Whether ``X`` was a CuPy matrix (blocks are then CuPy arrays).
    """

    ndim = 2

    def __init__(
        self,
        X: Any,
        library: str,
        dtype: Any,
        categorize: Any = None,
        block_bytes: int = DEFAULT_BLOCK_BYTES,
    ) -> None:
        self.on_gpu = is_cupy_sparse(X)
        if self.on_gpu:
            X = X.get()  # the stored entries, on the host: blocks are made dense here
        self.shape = (int(X.shape[0]), int(X.shape[1]))
        self.indptr, self.indices, self.data = _row_grouped(X)
        self.library = library
        self.dtype = np.dtype(dtype)
        self.categorize = categorize
        self.block_bytes = int(block_bytes)
        self.start = 0

    def __getitem__(self, rows: slice) -> np.ndarray:
        """Dense rows ``rows`` (a slice of step 1), as :func:`sparse_matrix` gives them."""
        start, stop, step = rows.indices(self.shape[0])
        if step != 1:
            raise ValueError(f"rows {rows!r}: SparseRows takes slices of consecutive rows")
        return self.block(start, max(start, stop))

    def block(self, start: int, stop: int, columns: np.ndarray | None = None) -> np.ndarray:
        """Dense float ``(stop - start, F)`` rows ``start:stop``; with ``columns`` (increasing
        feature indices) ``(stop - start, len(columns))``, those columns only."""
        import scipy.sparse as sp

        lo, hi = int(self.indptr[start]), int(self.indptr[stop])
        indptr = np.asarray(self.indptr[start : stop + 1]) - lo
        data, indices, width = self.data[lo:hi], self.indices[lo:hi], self.shape[1]
        if columns is not None:  # the entries of those columns, in their order
            position = np.full(width, -1, dtype=np.int64)
            position[columns] = np.arange(len(columns))
            at = position[indices]
            keep = at >= 0
            indptr = np.concatenate(([0], np.cumsum(keep)))[indptr]
            data, indices, width = data[keep], at[keep], len(columns)
        part = sp.csr_matrix((data, indices, indptr), shape=(stop - start, width))
        dense = sparse_matrix(part, self.library, self.dtype)
        dense = dense if self.categorize is None else self.categorize(dense)
        if self.on_gpu:
            import cupy

            return cupy.asarray(dense)
        return dense

    def dense(self) -> np.ndarray:
        """All rows dense (for callers that take a block of rows at a time)."""
        return self.block(0, self.shape[0])

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays held (the input's size)."""
        return int(self.indptr.nbytes + self.indices.nbytes + self.data.nbytes)


def dense_rows(raw: Any) -> Any:
    """``raw`` dense: a :class:`SparseRows`' rows, anything else as it is."""
    return raw.dense() if isinstance(raw, SparseRows) else raw


def block_rows(num_features: int, out_per_row: int, itemsize: int, block_bytes: int) -> int:
    """Rows of one block: its dense rows (and their encoded copy) and full-width output
    (``out_per_row`` values, float32) within ``block_bytes``, at least one row."""
    per_row = 2 * num_features * itemsize + 4 * out_per_row
    return max(1, int(block_bytes) // per_row)


def used_features(packed: Any) -> np.ndarray:
    """int64 indices of the features ``packed``'s trees split on, increasing (every other
    feature's SHAP and interaction values are 0 in every row)."""
    lanes = np.asarray(packed.feature)
    return np.unique(lanes[lanes >= 0]).astype(np.int64)


#: Name prefix of a Dask array whose NumPy-labelled chunks are scipy.sparse (:func:`sparse_chunks`).
SPARSE_CHUNKS = "distshap-sparse-chunks-"


def _csr_chunk(block: Any) -> Any:
    return block.tocsr() if is_sparse(block) else block


def sparse_chunks(X: Any) -> Any:
    """A Dask array of scipy.sparse chunks -> the same rows, chunks CSR, labelled as NumPy.

    The explainer's Dask route takes NumPy (or CuPy) chunks; each worker makes its chunk's
    model values with :func:`~distshap.inputs.model_matrix`, which reads a sparse chunk as the
    in-memory route reads a sparse matrix (the same bits). So a sparse chunk is dense only on
    its worker, one chunk at a time. Other arrays are returned as they are.
    """
    meta = getattr(X, "_meta", None)
    if not is_sparse(meta) or getattr(X, "ndim", 0) != 2:
        return X
    from dask.base import tokenize

    return X.map_blocks(
        _csr_chunk,
        dtype=X.dtype,
        meta=np.empty((0, 0), dtype=X.dtype),
        name=SPARSE_CHUNKS + tokenize(X),
    )


def has_sparse_chunks(X: Any) -> bool:
    """Whether ``X`` is a :func:`sparse_chunks` array (its chunks are not what its meta says)."""
    return str(getattr(X, "name", "")).startswith(SPARSE_CHUNKS)


def used_model(packed: Any, background: Any = None) -> Any:
    """``packed`` over its used features only (feature ``features[k]`` becomes ``k``), or
    ``None`` where that is not offered (a background, categorical or float64-ranked features).

    The paths, bins and every value are ``packed``'s: the kernels do the same arithmetic and
    write column ``k`` where ``packed`` writes column ``features[k]``, so its values are the
    used columns of ``packed``'s, bit for bit, and its rows need only those columns.
    """
    encoding = packed.encoding
    if background is not None or encoding.categorical.size or encoding.rank_features.size:
        return None
    key = packed.digest
    if key and key in _USED_MODELS:
        return _USED_MODELS[key]
    import dataclasses
    import hashlib

    used = used_features(packed)
    # [-1]: a bias lane's -1; a split on a feature no path keeps (every leaf under it is 0)
    # reads column 0, which exists whenever there is a split
    position = np.zeros(packed.num_features + 1, dtype=np.int32)
    position[-1] = -1
    position[used] = np.arange(len(used), dtype=np.int32)
    margin = packed.margin
    if margin is not None:
        margin = {**margin, "feature": position[margin["feature"]].astype(np.int32)}
    names = packed.feature_names
    digest = hashlib.sha256(f"{packed.digest}:used".encode()).hexdigest() if key else ""
    out = dataclasses.replace(
        packed,
        feature=position[packed.feature].astype(packed.feature.dtype),
        num_features=len(used),
        feature_names=None if names is None else tuple(names[j] for j in used),
        margin=margin,
        digest=digest,
    )
    if key:
        with _USED_LOCK:  # server slots explain in threads
            while len(_USED_MODELS) >= 4:
                _USED_MODELS.pop(next(iter(_USED_MODELS)), None)
            _USED_MODELS[key] = out
    return out


#: The last few :func:`used_model` results, by the full model's digest.
_USED_MODELS: dict[str, Any] = {}
_USED_LOCK = threading.Lock()


def used_rows(raw: Any, start: int, stop: int, features: np.ndarray) -> Any:
    """Rows ``start:stop`` of ``raw`` (:class:`SparseRows`, NumPy or CuPy), columns
    ``features`` only."""
    if isinstance(raw, SparseRows):
        return raw.block(start, stop, features)
    rows = raw[start:stop]
    if not isinstance(rows, np.ndarray):  # CuPy rows: a CuPy index
        import cupy

        features = cupy.asarray(features)
    return rows[:, features]
