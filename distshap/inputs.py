"""Input validation: user rows -> the C-contiguous float32 matrix the kernels take.

:func:`model_matrix` is the one conversion of the rows every entry point explains (the
explainer's in-memory rows, each Dask block, the CLI's): it selects and orders DataFrame columns
by the model's feature names, codes category columns and refuses what the model's own library
would refuse (a category column on a numeric feature, a wrong feature count, no rows); its
values, never rounded to float32, are what the additivity check traverses the trees with.
:func:`distshap.dispatch.run_request` then applies the model's
:class:`~distshap.encoding.InputEncoding` (its missing-value sentinel; float64 comparisons kept
exact for models that compare in float64); :func:`prepare_rows` does both at once.

What users pass to ``shap.TreeExplainer`` is first brought to those forms here
(:func:`explain_input`, :func:`background_input`): one row (a 1-D array or a pandas Series)
becomes a one-row matrix whose outputs lose the row axis again; an ``xgboost.DMatrix`` becomes
the rows it stores (unstored entries are missing, as XGBoost reads them), with its feature
names, its category labels and its labels; a shap masker or ``shap.kmeans`` summary gives its
rows.
"""

from __future__ import annotations

import functools
import os
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from distshap.frames import model_frame_matrix, native_frame, select_model_columns
from distshap.sparse_blocks import SparseRows, is_cupy_sparse, sparse_chunks
from distshap.sparse_blocks import is_sparse as _is_sparse
from distshap.sparse_blocks import sparse_matrix as _sparse_matrix

__all__ = [
    "ExplainInput",
    "array_module",
    "background_input",
    "dmatrix_input",
    "explain_input",
    "is_cupy",
    "on_gpu",
    "is_dask",
    "model_matrix",
    "prepare_rows",
]


def is_dask(X: Any) -> bool:
    return type(X).__module__.split(".")[0] in ("dask", "dask_expr", "dask_cudf")


def is_cupy(X: Any) -> bool:
    return type(X).__module__.split(".")[0] == "cupy"


def on_gpu(X: Any) -> bool:
    """Rows that live on the GPU: a CuPy array, a cupyx.scipy.sparse matrix, or
    :class:`~distshap.sparse_blocks.SparseRows` made from one (they need the CUDA backend)."""
    return is_cupy(X) or is_cupy_sparse(X) or (isinstance(X, SparseRows) and X.on_gpu)


def array_module(X: Any) -> Any:
    """``cupy`` for a CuPy array, ``numpy`` otherwise (imports CuPy only when given its data)."""
    if is_cupy(X):
        import cupy

        return cupy
    return np


def is_frame(X: Any) -> bool:
    """A pandas (or cuDF) DataFrame: has dtypes and columns."""
    return hasattr(X, "dtypes") and hasattr(X, "columns")


def _numeric_array(X: Any, what: str, text: bool = False) -> np.ndarray:
    """``np.asarray(X)``, refusing what is no table of numbers in one line (``text``: an array
    of text or objects passes, for :func:`model_matrix` to read or refuse)."""
    rows = (
        "rows (a 2-D array or DataFrame of the model's features, or one row as a 1-D array or "
        "pandas Series)"
    )
    if X is None:
        raise TypeError(f"{what} is None: pass {rows}")
    if isinstance(X, (str, bytes, os.PathLike)):
        raise TypeError(
            f"{what} is a file name or text ({str(X)[:60]!r}), not rows: read the file first "
            "(pandas.read_parquet, read_csv, numpy.load), or use `distshap explain MODEL DATA`"
        )
    if isinstance(X, dict):
        raise TypeError(f"{what} is a dict: pass pandas.DataFrame({what.split()[0]}) or {rows}")
    try:
        X = np.asarray(X)
    except ValueError as err:  # a ragged nested list
        if isinstance(X, (list, tuple)):
            sizes = sorted({len(r) if hasattr(r, "__len__") else 1 for r in X})
            raise ValueError(
                f"{what} is a ragged list: its rows hold {sizes} values; every row needs one "
                "value per feature (NaN where one is missing)"
            ) from None
        raise ValueError(f"{what} cannot be read as an array ({err})") from None
    if X.dtype.kind not in ("biufUSO" if text else "biuf"):
        raise TypeError(
            f"{what} has dtype {X.dtype}; SHAP values need numeric input: convert strings "
            "to numbers, or pass a pandas DataFrame with category columns"
        )
    return X


def _scalar_message(X: np.ndarray, what: str) -> str:
    return (
        f"{what} is a single number ({X.item()!r}), not rows: pass one row as a 1-D array of "
        "the model's features, or a 2-D array of rows"
    )


def prepare_rows(X: Any, packed: Any, allow_empty: bool = False) -> Any:
    """User rows -> the C-contiguous float32 matrix ``packed``'s kernels compare.

    Parameters
    ----------
    X : ndarray, cupy.ndarray or pandas DataFrame
        ``(n, F)`` rows (a DataFrame may hold more columns: the model's are selected by name).
    packed : PackedModel
        The model; its ``encoding`` says how values are compared.
    allow_empty : bool
        Accept zero rows (a Dask block may be empty); user calls refuse them.

    Returns
    -------
    ndarray or cupy.ndarray
        float32 ``(n, F)``, C-contiguous, same array module as ``X`` (NumPy for DataFrames).

    Raises
    ------
    TypeError
        Non-numeric data, or a category column on a feature the model splits numerically.
    ValueError
        Not 2-D, no rows, or a feature count / names that do not match the model.
    """
    return packed.encoding.apply(model_matrix(X, packed, allow_empty))


def model_matrix(
    X: Any, packed: Any, allow_empty: bool = False, *, what: str = "X", blocks: bool = False
) -> Any:
    """User rows -> a validated ``(n, F)`` matrix of the model's raw feature values.

    Like :func:`prepare_rows` without the encoding: float64 when the model compares in float64
    (else float32), columns in the model's order, category columns coded. Its values are the
    ones the model's own library compares, which the additivity check traverses the trees with.
    ``what`` names the argument in error messages (``"data"`` for a background). ``blocks``:
    a scipy.sparse ``X`` stays sparse, as :class:`~distshap.sparse_blocks.SparseRows` (dense a
    block of rows at a time, each block's values those of the dense matrix).
    """
    encoding = packed.encoding
    dtype = encoding.input_dtype
    F = packed.num_features
    X = native_frame(X, what)
    if encoding.library == "catboost" and packed.feature_categories and not is_frame(X):
        from distshap.models.catboost_categorical import rows_frame  # text or integer values

        X = rows_frame(X, packed.feature_names, what, packed.feature_categories)
    if encoding.library == "sklearn" and _label_features(packed) and not is_frame(X):
        X = _labelled_frame(X, packed, what)
    if is_frame(X):
        columns = select_model_columns(X, F, packed.feature_names, encoding.name_style, what=what)
        X = model_frame_matrix(X[columns], packed, what)
    elif (_is_sparse(X) or is_cupy_sparse(X)) and blocks and X.ndim == 2:
        X = SparseRows(X, encoding.library, dtype, _categorize(encoding))
    elif _is_sparse(X):
        X = _sparse_matrix(X, encoding.library, dtype, what)
    elif is_cupy_sparse(X):  # dense on the host as scipy's would be, then back on the GPU
        import cupy

        X = cupy.asarray(_sparse_matrix(X.get(), encoding.library, dtype, what))
    elif is_cupy(X):
        import cupy

        if X.dtype.kind not in "biuf":
            raise TypeError(f"{what} has dtype {X.dtype}; SHAP values need numeric input")
        X = cupy.ascontiguousarray(X, dtype=dtype)
    else:
        X = _numeric_array(X, what)
        if X.ndim == 0:
            raise ValueError(_scalar_message(X, what))
        X = np.ascontiguousarray(X, dtype=dtype)
    if X.ndim != 2:
        raise ValueError(
            f"{what} must be 2-D (n_rows, n_features), got {X.ndim}-D shape {X.shape}; "
            "TreeExplainer also takes one row as a 1-D array or a pandas Series"
        )
    if X.shape[0] == 0 and not allow_empty:
        raise ValueError(
            f"{what} has no rows (shape {X.shape}): "
            + ("give at least one background row" if what != "X" else "nothing to explain")
        )
    if X.shape[1] != F:
        raise ValueError(
            f"{what} has {X.shape[1]} features but the model expects {F}: pass the "
            "columns the model was trained on, in the same order"
        )
    if encoding.categorical_rule is not None and not isinstance(X, SparseRows):
        X = _library_categories(X, encoding.categorical, encoding.categorical_rule)
    return X


def _label_features(packed: Any) -> list[int]:
    """Features whose training labels the model stores (not ``"values"``)."""
    return [j for j, v in (packed.feature_categories or {}).items() if not isinstance(v, str)]


def _labelled_frame(X: Any, packed: Any, what: str) -> Any:
    """Rows that are no DataFrame, for a scikit-learn model with stored labels -> a DataFrame.

    scikit-learn's histogram gradient boosting encodes such a feature by its training labels,
    by value, whatever the input's type: a 2-D NumPy array's values are labels, not codes, so
    its columns go through the frame conversion, which codes them by the labels.
    """
    import pandas as pd

    if not isinstance(X, np.ndarray) or X.ndim != 2:
        kind = f"{type(X).__module__.split('.')[0]}.{type(X).__name__}"
        shape = f" of {X.ndim} dimensions" if isinstance(X, np.ndarray) else ""
        names = [packed.feature_names[j] if packed.feature_names else j for j in
                 _label_features(packed)]  # fmt: skip
        raise TypeError(
            f"{what} is a {kind}{shape}, but the model encodes feature(s) {names} by their "
            "training categories: pass a pandas DataFrame (or a 2-D NumPy array) whose columns "
            "hold the category values"
        )
    if X.shape[1] != packed.num_features:  # no names to look the columns up by
        raise ValueError(
            f"{what} has {X.shape[1]} features but the model expects {packed.num_features}: "
            "pass the columns the model was trained on, in the same order"
        )
    names = packed.feature_names
    return pd.DataFrame(X, columns=list(names) if names else None)


def _categorize(encoding: Any) -> Any:
    """:func:`_library_categories` of ``encoding``'s rule for each dense block, or ``None``."""
    if encoding.categorical_rule is None:
        return None
    return functools.partial(
        _library_categories, categorical=encoding.categorical, rule=encoding.categorical_rule
    )


def _library_categories(X: Any, categorical: np.ndarray, rule: str) -> Any:
    """Categorical values that are no category code, as the model's library reads them
    (:attr:`~distshap.encoding.InputEncoding.categorical_rule`); ``X`` itself is not written."""
    xp = array_module(X)
    columns = categorical.tolist()
    block = X[:, columns]  # one pass and one device-to-host flag a call, whatever the columns
    if rule == "truncate":  # LightGBM: int(x), towards zero
        odd, value = (block > -1) & (block < 0), 0.0
    else:  # scikit-learn: not an integer -> an unknown category -> missing
        odd, value = xp.isfinite(block) & (block != xp.floor(block)), np.nan
    if not bool(odd.any()):
        return X
    out = X.copy()
    out[:, columns] = xp.where(odd, value, block)
    return out


# ------------------------------------------------------------------------------------------
# What users pass to shap.TreeExplainer -> the forms above
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExplainInput:
    """Rows to explain, brought to a form :func:`model_matrix` (or the Dask path) takes.

    Attributes
    ----------
    rows
        A 2-D ndarray, CuPy array, pandas DataFrame, scipy.sparse matrix or Dask collection.
    one_row : bool
        The user passed one row (a 1-D array or a pandas Series): outputs drop the row axis.
    labels : ndarray or None
        float64 ``(n,)`` labels the input carries (an ``xgboost.DMatrix``'s), else ``None``.
    columns : list of str or None
        The input's column names (DataFrame columns, Series index, DMatrix feature names).
    stored : ndarray or None
        For a DMatrix: its stored values (float32), which XGBoost reads as values whatever
        missing-value sentinel the model has.
    base_margin : ndarray or None
        For a DMatrix with a ``base_margin``: float32 ``(n, G)`` or ``(n,)`` per-row margins,
        which XGBoost's predictions start from instead of the model's ``base_score``.
    given : ndarray or None
        For a list of rows holding text: its values as given, the object array that is
        ``rows`` too (a model reads each value as the object it is: NumPy's text array of
        them would turn ``True`` into ``'True'``), for ``Explanation.data``.
    """

    rows: Any
    one_row: bool = False
    labels: np.ndarray | None = None
    columns: list[str] | None = None
    stored: np.ndarray | None = None
    base_margin: np.ndarray | None = None
    given: np.ndarray | None = None


def explain_input(X: Any, what: str = "X") -> ExplainInput:
    """User rows, as shap's ``TreeExplainer`` takes them, -> :class:`ExplainInput`.

    A 1-D array of ``F`` values (NumPy, CuPy, a list, a polars Series, ...) or a pandas Series
    (index = feature names) is one row; an ``xgboost.DMatrix`` gives its stored rows
    (:func:`dmatrix_input`); a DataFrame of another library becomes a pandas one
    (:func:`~distshap.frames.native_frame`); other array-likes become NumPy arrays (a list of
    rows holding text: an object array of the values as given, also kept as ``given``, for a
    model with CatBoost categorical features). The values are checked later by :func:`model_matrix`.
    ``what`` names the argument in errors.

    Raises
    ------
    TypeError
        For an ``xgboost.QuantileDMatrix`` (it holds bins, not values) or a DMatrix whose data
        cannot be read back; ``None``, a path, a dict or anything else that is no table.
    ValueError
        A single number, or a ragged list.
    """
    X = native_frame(X, what)
    if _is_dmatrix(X):
        return dmatrix_input(X)
    if type(X).__module__.startswith("xgboost") and "DMatrix" in type(X).__name__:
        raise TypeError(
            f"X is an {type(X).__module__}.{type(X).__name__}, whose rows distshap cannot read "
            "back (nor add its base_margin to the bias): pass the Dask array or DataFrame it "
            "was built from (Dask rows are explained chunk by chunk on the cluster)"
        )
    if is_dask(X):  # scipy.sparse chunks: dense on their workers, as in memory
        return ExplainInput(sparse_chunks(X), columns=_column_names(X))
    if _is_series(X):
        # object columns: labels on categorical features (a row keeps no dtypes), else values
        frame = X.astype(object).to_frame().T
        return ExplainInput(frame, one_row=True, columns=[str(c) for c in X.index])
    if is_frame(X):
        return ExplainInput(X, columns=_column_names(X))
    if _is_sparse(X) or is_cupy(X) or is_cupy_sparse(X):
        if getattr(X, "ndim", 2) == 1 and is_cupy(X):
            return ExplainInput(X.reshape(1, -1), one_row=True)
        return ExplainInput(X)
    given = None
    if not isinstance(X, np.ndarray):  # rows holding text: the model reads or refuses them
        listed, X = X, _numeric_array(X, what, text=True)
        if X.dtype.kind in "US":
            given = np.array(listed, dtype=object)
            given, X = (given, given) if given.shape == X.shape else (None, X)
    if X.ndim == 0:
        raise ValueError(_scalar_message(X, what))
    if X.ndim == 1 and X.size == 0:
        raise ValueError(f"{what} is empty: pass at least one row of the model's features")
    if X.ndim == 1:
        given = None if given is None else given.reshape(1, -1)
        return ExplainInput(X.reshape(1, -1), one_row=True, given=given)
    return ExplainInput(X, given=given)


def background_input(data: Any) -> Any:
    """A background data set as shap's ``TreeExplainer(model, data)`` takes it -> rows.

    NumPy / CuPy arrays, pandas DataFrames and scipy.sparse matrices pass unchanged (a 1-D
    array or a Series is one row); ``shap.maskers.Independent`` gives its ``data`` (the rows
    shap itself integrates over: at most its ``max_samples``); a ``shap.kmeans`` summary
    (``DenseData``) its ``data`` rows, each counted once, as shap's TreeExplainer counts them
    (a UserWarning says so when their weights differ); an ``xgboost.DMatrix`` its rows.

    Raises
    ------
    TypeError
        For other shap maskers (``Partition``, ...; shap's TreeExplainer refuses them too),
        Dask collections (a background is held in memory: ``data.compute()``), a
        ``QuantileDMatrix``, or anything that is no table.
    """
    module = type(data).__module__
    name = type(data).__name__
    if module.startswith("shap."):
        if name == "Independent":
            return data.data
        if name == "DenseData":
            weights = np.asarray(getattr(data, "weights", []), dtype=np.float64).ravel()
            if weights.size and not np.allclose(weights, weights[0]):
                warnings.warn(
                    "the background is a weighted summary (shap.kmeans): TreeExplainer counts "
                    "each of its rows once and ignores the weights, as shap's TreeExplainer "
                    "does; pass the rows themselves (or shap.utils.sample(data, k)) for an "
                    "unweighted background",
                    UserWarning,
                    stacklevel=3,
                )
            return data.data
        raise TypeError(
            f"data is a shap {name} masker: TreeExplainer integrates over background rows "
            "(shap's TreeExplainer refuses this masker too); pass the rows (a NumPy array or "
            "DataFrame) or shap.maskers.Independent(rows)"
        )
    if is_dask(data):
        raise TypeError(
            "data (the background) is a Dask collection: it is held in memory and sent to "
            "every worker; pass data.compute() (typically 100 to 1,000 rows, e.g. "
            "shap.utils.sample(rows, 100))"
        )
    rows = explain_input(data, "data (the background)")
    if rows.base_margin is not None:
        raise ValueError(
            "data (the background) is an xgboost.DMatrix with a base_margin, which a "
            "background cannot use (its rows stand for the model's own base_score): pass a "
            "DMatrix without base_margin, or the rows themselves"
        )
    return rows.rows


def dmatrix_input(dmatrix: Any) -> ExplainInput:
    """An ``xgboost.DMatrix`` -> its rows, feature names and labels, as XGBoost reads them.

    The stored entries are the values (``get_data()``); an entry the DMatrix does not store is
    missing (the DMatrix left out NaN and its own ``missing`` value), as XGBoost predicts. With
    feature names the rows become a DataFrame (columns then match the model's by name); a
    categorical feature whose category labels the DMatrix exports (XGBoost >= 3.1, pyarrow)
    becomes a pandas category column, so its codes are re-coded to the model's training
    categories as XGBoost does. Labels (``get_label()``) are returned when there is one per row,
    and the ``base_margin`` when it has one.

    Raises
    ------
    TypeError
        For a ``QuantileDMatrix`` or a DMatrix whose data cannot be read back.
    """
    import xgboost

    if isinstance(dmatrix, getattr(xgboost, "QuantileDMatrix", ())):
        raise TypeError(
            f"X is an xgboost.{type(dmatrix).__name__}: it keeps quantile bins, not the "
            "feature values SHAP values need; pass the data it was built from (array or "
            "DataFrame), or an xgboost.DMatrix"
        )
    try:
        csr = dmatrix.get_data()
    except Exception as err:  # external-memory and other DMatrix kinds cannot export
        raise TypeError(
            f"cannot read the rows of this xgboost.DMatrix back ({err}); pass the data it was "
            "built from (array or DataFrame)"
        ) from err
    dense = _sparse_matrix(csr, "xgboost", np.float32)  # unstored -> NaN (missing)
    labels = np.asarray(dmatrix.get_label(), dtype=np.float64).ravel()
    labels = labels if labels.size == dense.shape[0] and dense.shape[0] > 0 else None
    names = dmatrix.feature_names
    types = list(dmatrix.feature_types or [])
    labels_of = _dmatrix_categories(dmatrix) if "c" in types else {}
    stored = np.asarray(csr.data, dtype=np.float32)
    margin = np.asarray(dmatrix.get_base_margin(), dtype=np.float32)
    margin = margin if margin.size else None
    if names is None and not labels_of:
        return ExplainInput(dense, labels=labels, stored=stored, base_margin=margin)
    import pandas as pd

    columns = [str(n) for n in names] if names is not None else [str(j) for j in range(len(types))]
    frame = pd.DataFrame(dense, columns=columns)
    for j, cats in labels_of.items():
        codes = dense[:, j]
        known = ~np.isnan(codes)
        if np.any(known & ((codes < 0) | (codes >= len(cats)) | (codes != np.round(codes)))):
            raise ValueError(
                f"DMatrix feature {columns[j]!r} holds category codes outside its {len(cats)} "
                "categories: pass the DataFrame it was built from"
            )
        frame[columns[j]] = pd.Categorical.from_codes(
            np.where(known, codes, -1).astype(np.int64), categories=list(cats)
        )
    columns = columns if names is not None else None
    return ExplainInput(frame, labels=labels, columns=columns, stored=stored, base_margin=margin)


def _dmatrix_categories(dmatrix: Any) -> dict[int, list]:
    """Category labels of a DMatrix's categorical features, where it exports them."""
    try:
        exported = dmatrix.get_categories(export_to_arrow=True).to_arrow()
    except Exception:  # older XGBoost, no pyarrow, or codes given as numbers: codes stay
        return {}
    out = {}
    for j, (_, arr) in enumerate(exported or []):
        if arr is not None:
            out[j] = arr.to_pylist()
    return out


def _is_dmatrix(X: Any) -> bool:
    if type(X).__module__.split(".")[0] != "xgboost":
        return False
    import xgboost

    return isinstance(X, xgboost.DMatrix)


def _is_series(X: Any) -> bool:
    return type(X).__module__.split(".")[0] == "pandas" and type(X).__name__ == "Series"


def _column_names(X: Any) -> list[str] | None:
    columns = getattr(X, "columns", None)
    return None if columns is None else [str(c) for c in columns]
