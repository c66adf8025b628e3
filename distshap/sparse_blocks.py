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

from typing import Any

import numpy as np

__all__ = [
    "DEFAULT_BLOCK_BYTES",
    "SparseRows",
    "block_rows",
    "dense_rows",
    "is_sparse",
    "sparse_matrix",
    "used_features",
]

#: Bytes of one block's dense rows plus its full-width output, at most (at least one row).
DEFAULT_BLOCK_BYTES = 128 * 2**20


def is_sparse(X: Any) -> bool:
    """A scipy.sparse matrix or array."""
    return type(X).__module__.split(".")[0] == "scipy" and hasattr(X, "tocoo")


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
    """Rows of a 2-D scipy.sparse matrix, made dense a block of rows at a time.

    Parameters
    ----------
    X : scipy.sparse matrix or array
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

    def block(self, start: int, stop: int) -> np.ndarray:
        """Dense float ``(stop - start, F)`` rows ``start:stop``."""
        import scipy.sparse as sp

        lo, hi = int(self.indptr[start]), int(self.indptr[stop])
        indptr = np.asarray(self.indptr[start : stop + 1]) - lo
        part = sp.csr_matrix(
            (self.data[lo:hi], self.indices[lo:hi], indptr), shape=(stop - start, self.shape[1])
        )
        dense = sparse_matrix(part, self.library, self.dtype)
        return dense if self.categorize is None else self.categorize(dense)

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
