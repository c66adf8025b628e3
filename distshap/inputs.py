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

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "ExplainInput",
    "array_module",
    "background_input",
    "dmatrix_input",
    "explain_input",
    "frame_to_matrix",
    "is_cupy",
    "is_dask",
    "lightgbm_generated_names",
    "model_matrix",
    "prepare_rows",
    "select_model_columns",
]


def is_dask(X: Any) -> bool:
    return type(X).__module__.split(".")[0] in ("dask", "dask_expr", "dask_cudf")


def is_cupy(X: Any) -> bool:
    return type(X).__module__.split(".")[0] == "cupy"


def array_module(X: Any) -> Any:
    """``cupy`` for a CuPy array, ``numpy`` otherwise (imports CuPy only when given its data)."""
    if is_cupy(X):
        import cupy

        return cupy
    return np


def is_frame(X: Any) -> bool:
    """A pandas (or cuDF) DataFrame: has dtypes and columns."""
    return hasattr(X, "dtypes") and hasattr(X, "columns")


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


def model_matrix(X: Any, packed: Any, allow_empty: bool = False) -> Any:
    """User rows -> a validated ``(n, F)`` matrix of the model's raw feature values.

    Like :func:`prepare_rows` without the encoding: float64 when the model compares in float64
    (else float32), columns in the model's order, category columns coded. Its values are the
    ones the model's own library compares, which the additivity check traverses the trees with.
    """
    encoding = packed.encoding
    dtype = encoding.input_dtype
    F = packed.num_features
    if is_frame(X):
        columns = select_model_columns(X, F, packed.feature_names, encoding.name_style)
        X = _frame_matrix(X[columns], packed)
    elif _is_sparse(X):
        X = _sparse_matrix(X, encoding.library, dtype)
    elif is_cupy(X):
        import cupy

        if X.dtype.kind not in "biuf":
            raise TypeError(f"X has dtype {X.dtype}; SHAP values need numeric input")
        X = cupy.ascontiguousarray(X, dtype=dtype)
    else:
        X = np.asarray(X)
        if X.dtype.kind not in "biuf":
            raise TypeError(
                f"X has dtype {X.dtype}; SHAP values need numeric input: convert strings "
                "to numbers, or pass a pandas DataFrame with category columns"
            )
        X = np.ascontiguousarray(X, dtype=dtype)
    if X.ndim != 2:
        raise ValueError(
            f"X must be 2-D (n_rows, n_features), got {X.ndim}-D shape {X.shape}; "
            "TreeExplainer also takes one row as a 1-D array or a pandas Series"
        )
    if X.shape[0] == 0 and not allow_empty:
        raise ValueError("X has no rows: nothing to explain")
    if X.shape[1] != F:
        raise ValueError(
            f"X has {X.shape[1]} features but the model expects {F}: pass the "
            "columns the model was trained on, in the same order"
        )
    if encoding.categorical_rule is not None:
        X = _library_categories(X, encoding.categorical, encoding.categorical_rule)
    return X


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


def _frame_matrix(frame: Any, packed: Any) -> np.ndarray:
    """A frame in the model's column order -> its matrix, by the model library's conventions."""
    encoding = packed.encoding
    categories, categorical = packed.feature_categories, encoding.categorical
    if encoding.category_lists is not None:
        # LightGBM codes the k-th category column of a frame by its k-th stored list, whatever
        # feature the column feeds, and refuses a frame with another number of them
        import pandas as pd

        positions = [
            j for j, (_, c) in enumerate(frame.items()) if isinstance(c.dtype, pd.CategoricalDtype)
        ]
        if len(positions) != len(encoding.category_lists):
            raise TypeError(
                f"X has {len(positions)} pandas 'category' column(s) but the LightGBM model was "
                f"trained on a frame with {len(encoding.category_lists)}: give the columns the "
                "dtypes of the training frame (LightGBM refuses this frame too)"
            )
        categories, categorical = dict(zip(positions, encoding.category_lists, strict=True)), None
    unseen = "error" if encoding.library == "xgboost" else "missing"
    return frame_to_matrix(frame, categories, categorical, encoding.input_dtype, unseen)


def _is_sparse(X: Any) -> bool:
    return type(X).__module__.split(".")[0] == "scipy" and hasattr(X, "tocoo")


def _sparse_matrix(X: Any, library: str, dtype: Any) -> np.ndarray:
    """A scipy.sparse matrix, dense: unstored entries are missing for XGBoost (as its DMatrix
    reads them), zeros for the other libraries (as LightGBM and scikit-learn read them)."""
    coo = X.tocoo()
    coo.sum_duplicates()  # a non-canonical matrix's repeated entries add up, as in scipy
    if coo.ndim != 2:
        raise ValueError(f"X is a {coo.ndim}-D sparse array; pass a 2-D (n_rows, n_features) one")
    dense = np.full(coo.shape, np.nan if library == "xgboost" else 0.0, dtype=dtype)
    dense[coo.row, coo.col] = coo.data
    return dense


def lightgbm_generated_names(names: tuple[str, ...] | None, num_features: int) -> bool:
    """Whether ``names`` are the ones LightGBM makes up for unnamed training data.

    A LightGBM model trained on an array (or a list) stores ``Column_0 ... Column_{F-1}``:
    names of positions, not of columns. LightGBM and shap take a DataFrame by position for it.
    """
    return names is not None and tuple(names) == tuple(f"Column_{j}" for j in range(num_features))


def select_model_columns(
    frame: Any,
    num_features: int,
    names: tuple[str, ...] | None,
    name_style: str = "exact",
    *,
    generated_by_position: bool = True,
) -> list[Any]:
    """The DataFrame columns that feed the model, in the model's feature order.

    By name when the model has feature names and the frame's columns differ from them (extra
    columns, such as a label, are ignored); by position otherwise. With ``name_style
    "lightgbm"`` a column also matches the name LightGBM stores for it (whitespace becomes
    ``_``), so the frame a LightGBM model was trained on is accepted as LightGBM accepts it;
    and LightGBM's generated names (:func:`lightgbm_generated_names`: a model trained without
    names) count as no names, every column by position, unless the frame holds all of them
    (then by name: a frame named so was meant by name). ``generated_by_position=False`` keeps
    even those names (for probing whether single names match).

    Raises
    ------
    ValueError
        When a named feature is missing from the frame.
    """
    columns = list(frame.columns)
    if names is None or len(names) != num_features or [str(c) for c in columns] == list(names):
        return columns
    by_name = {str(c): c for c in columns}
    if name_style == "lightgbm":
        from distshap.models.lightgbm import lightgbm_feature_name

        if (
            generated_by_position
            and lightgbm_generated_names(names, num_features)
            and not all(n in by_name for n in names)
        ):
            return columns
        for c in columns:  # an exact name wins over a converted one
            by_name.setdefault(lightgbm_feature_name(c), c)
    missing = [n for n in names if n not in by_name]
    if missing:
        raise ValueError(
            f"X lacks the model's feature column(s) {missing[:5]}: pass a DataFrame with "
            f"the columns {list(names)[:10]}{'...' if len(names) > 10 else ''}"
        )
    return [by_name[n] for n in names]


def frame_to_matrix(
    frame: Any,
    categories: dict[int, Any] | None = None,
    categorical: Any = None,
    dtype: Any = np.float32,
    unseen: str = "missing",
) -> np.ndarray:
    """A pandas DataFrame (partition) -> C-contiguous ``dtype`` array of shape ``(n, F)``.

    Numeric and boolean columns (nullable and Arrow-backed too) become ``dtype`` with NaN where
    missing; ``category`` columns become their integer codes, with NaN for a missing value
    (code -1). ``categories`` maps a column position to the model's training categories: such
    a column is coded by them (a category the model never saw -> NaN, i.e. missing), so the
    codes do not depend on the frame's own category order; or to the string ``"values"``: the
    column's category values are used as numbers (scikit-learn's HistGradientBoosting lists
    category values in its splits). ``categorical`` (positions), when given, lists the features
    the model treats as categorical: a category column elsewhere is refused, as XGBoost,
    LightGBM and scikit-learn refuse it (its codes are not the values the model splits on). A
    numeric column on a feature with training categories is refused too (its numbers are not
    the model's codes), and with ``unseen="error"`` a label the model never saw (XGBoost's
    rule; ``"missing"``: such a label is a missing value, LightGBM's).

    Raises
    ------
    TypeError
        For a column of any other dtype (object, string, datetime, ...), a category column on a
        numeric feature, or a numeric column on a feature with training categories.
    ValueError
        A label the model never saw, with ``unseen="error"``.
    """
    import pandas as pd
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    allowed = None if categorical is None else {int(j) for j in np.asarray(categorical).ravel()}
    n_rows, n_cols = frame.shape
    out = np.empty((n_rows, n_cols), dtype=dtype)
    for j, (name, column) in enumerate(frame.items()):
        kind = column.dtype
        is_category = isinstance(kind, pd.CategoricalDtype)
        if is_category and allowed is not None and j not in allowed:
            raise TypeError(
                f"column {name!r} is a pandas 'category' column but the model splits feature "
                f"{j} numerically: its category codes are not the values the model was trained "
                f"on. Pass the numeric values (df[{name!r}].astype(float)) or a model trained "
                "with this column as categorical"
            )
        if is_category and _as_values(categories, j):
            values = column.astype(np.float64).to_numpy(dtype=dtype, na_value=np.nan)
        elif is_category:
            codes = column.cat.codes.to_numpy()
            if categories is not None and j in categories:
                # the model's code of each of the frame's labels (-1: a label it never saw)
                model_codes = pd.Index(list(categories[j])).get_indexer(column.cat.categories)
                codes = np.where(codes >= 0, np.append(model_codes, -1)[codes], -1)
                if unseen == "error" and np.any((codes < 0) & column.notna().to_numpy()):
                    new = sorted({str(v) for v in column[(codes < 0) & column.notna()]})
                    raise ValueError(
                        f"column {name!r} holds categories the model never saw in training "
                        f"{new[:5]}: XGBoost refuses them as well; map them to a known category "
                        "or to a missing value (NaN) first"
                    )
            values = codes.astype(dtype)
            values[codes < 0] = np.nan
        elif (is_numeric_dtype(kind) or is_bool_dtype(kind)) and _has_labels(categories, j):
            raise TypeError(
                f"column {name!r} is numeric but the model was trained on it as a pandas "
                "'category' column: its numbers are not the model's category codes. Pass it as "
                f"a category column with the training labels (df[{name!r}].astype('category'))"
            )
        elif is_numeric_dtype(kind) or is_bool_dtype(kind):
            values = column.to_numpy(dtype=dtype, na_value=np.nan)
        else:
            what = (
                "'category' column (df[col].astype('category'))"
                if allowed is None or j in allowed
                else "numeric column (the model splits this feature numerically)"
            )
            raise TypeError(
                f"column {name!r} has dtype {kind}: distshap needs numeric, boolean or "
                f"'category' columns; convert it to a {what}"
            )
        out[:, j] = values
    return out


def _has_labels(categories: dict[int, Any] | None, j: int) -> bool:
    """Whether the model stores training labels for feature ``j`` (codes must come from them)."""
    return categories is not None and j in categories and not _as_values(categories, j)


def _as_values(categories: dict[int, Any] | None, j: int) -> bool:
    return categories is not None and isinstance(categories.get(j), str)


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
    """

    rows: Any
    one_row: bool = False
    labels: np.ndarray | None = None
    columns: list[str] | None = None
    stored: np.ndarray | None = None


def explain_input(X: Any) -> ExplainInput:
    """User rows, as shap's ``TreeExplainer`` takes them, -> :class:`ExplainInput`.

    A 1-D NumPy / CuPy array of ``F`` values or a pandas Series (index = feature names) is one
    row; an ``xgboost.DMatrix`` gives its stored rows (:func:`dmatrix_input`); anything else is
    passed on unchanged (checked later by :func:`model_matrix`).

    Raises
    ------
    TypeError
        For an ``xgboost.QuantileDMatrix`` (it holds bins, not values) or a DMatrix whose data
        cannot be read back.
    """
    if isinstance(X, (list, tuple)):
        X = np.asarray(X)
    if _is_dmatrix(X):
        return dmatrix_input(X)
    if is_dask(X):
        return ExplainInput(X, columns=_column_names(X))
    if _is_series(X):
        frame = X.to_frame().T.infer_objects()
        return ExplainInput(frame, one_row=True, columns=[str(c) for c in X.index])
    if is_frame(X):
        return ExplainInput(X, columns=_column_names(X))
    if _is_sparse(X) or is_cupy(X):
        if getattr(X, "ndim", 2) == 1 and is_cupy(X):
            return ExplainInput(X.reshape(1, -1), one_row=True)
        return ExplainInput(X)
    if isinstance(X, np.ndarray) and X.ndim == 1:
        return ExplainInput(X.reshape(1, -1), one_row=True)
    return ExplainInput(X)


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
    if isinstance(data, (list, tuple)):
        data = np.asarray(data)
    rows = explain_input(data)
    return rows.rows


def dmatrix_input(dmatrix: Any) -> ExplainInput:
    """An ``xgboost.DMatrix`` -> its rows, feature names and labels, as XGBoost reads them.

    The stored entries are the values (``get_data()``); an entry the DMatrix does not store is
    missing (the DMatrix left out NaN and its own ``missing`` value), as XGBoost predicts. With
    feature names the rows become a DataFrame (columns then match the model's by name); a
    categorical feature whose category labels the DMatrix exports (XGBoost >= 3.1, pyarrow)
    becomes a pandas category column, so its codes are re-coded to the model's training
    categories as XGBoost does. Labels (``get_label()``) are returned when there is one per row.

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
    if names is None and not labels_of:
        return ExplainInput(dense, labels=labels, stored=stored)
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
    return ExplainInput(frame, labels=labels, columns=columns, stored=stored)


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
