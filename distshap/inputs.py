"""Input validation: user data -> a C-contiguous float32 row matrix the kernels take.

XGBoost compares float32 feature values with its float32 split values, so every input is
converted to float32 first; pandas category columns become their integer codes (missing -> NaN).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["frame_to_float32", "is_cupy", "is_dask", "select_model_columns", "to_float32_matrix"]


def is_dask(X: Any) -> bool:
    return type(X).__module__.split(".")[0] in ("dask", "dask_expr", "dask_cudf")


def is_cupy(X: Any) -> bool:
    return type(X).__module__.split(".")[0] == "cupy"


def to_float32_matrix(
    X: Any,
    num_features: int,
    feature_names: tuple[str, ...] | None = None,
    categories: dict[int, Any] | None = None,
) -> np.ndarray:
    """Validate ``X`` and return a C-contiguous float32 NumPy (or CuPy) matrix.

    pandas DataFrames are selected and ordered by the model's feature names when both are
    known (other columns are ignored); category columns become codes (missing -> NaN): codes of
    the model's training categories when the model stores them (``categories``, XGBoost >= 3.1),
    the DataFrame's own codes otherwise.

    Raises
    ------
    TypeError
        Non-numeric data.
    ValueError
        Not 2-D, no rows, or a feature count / names that do not match the model.
    """
    if hasattr(X, "dtypes") and hasattr(X, "columns"):
        X = frame_to_float32(X[select_model_columns(X, num_features, feature_names)], categories)
    elif is_cupy(X):
        import cupy

        if X.dtype.kind not in "biuf":
            raise TypeError(f"X has dtype {X.dtype}; SHAP values need numeric input")
        X = cupy.ascontiguousarray(X, dtype=cupy.float32)
    else:
        X = np.asarray(X)
        if X.dtype.kind not in "biuf":
            raise TypeError(
                f"X has dtype {X.dtype}; SHAP values need numeric input: convert strings "
                "to numbers, or pass a pandas DataFrame with category columns"
            )
        X = np.ascontiguousarray(X, dtype=np.float32)
    if X.ndim != 2:
        raise ValueError(
            f"X must be 2-D (n_rows, n_features), got {X.ndim}-D shape {X.shape}; "
            "for one row use X.reshape(1, -1)"
        )
    if X.shape[0] == 0:
        raise ValueError("X has no rows: nothing to explain")
    if X.shape[1] != num_features:
        raise ValueError(
            f"X has {X.shape[1]} features but the model expects {num_features}: pass the "
            "columns the model was trained on, in the same order"
        )
    return X


def select_model_columns(frame: Any, num_features: int, names: tuple[str, ...] | None) -> list[Any]:
    """The DataFrame columns that feed the model, in the model's feature order.

    By name when the model has feature names and the frame's columns differ from them (extra
    columns, such as a label, are ignored); by position otherwise.

    Raises
    ------
    ValueError
        When a named feature is missing from the frame.
    """
    columns = list(frame.columns)
    if names is None or len(names) != num_features or [str(c) for c in columns] == list(names):
        return columns
    by_name = {str(c): c for c in columns}
    missing = [n for n in names if n not in by_name]
    if missing:
        raise ValueError(
            f"X lacks the model's feature column(s) {missing[:5]}: pass a DataFrame with "
            f"the columns {list(names)[:10]}{'...' if len(names) > 10 else ''}"
        )
    return [by_name[n] for n in names]


def frame_to_float32(frame: Any, categories: dict[int, Any] | None = None) -> np.ndarray:
    """A pandas DataFrame (partition) -> C-contiguous float32 array of shape ``(n, F)``.

    Numeric and boolean columns (nullable and Arrow-backed too) become float32 with NaN where
    missing; ``category`` columns become their integer codes as float32, with NaN for a
    missing value (code -1). ``categories`` maps a column position to the model's training
    categories: such a column is coded by them (a category the model never saw -> NaN,
    i.e. missing), so the codes do not depend on the frame's own category order; or to the
    string ``"values"``: the column's category values are used as numbers (scikit-learn's
    HistGradientBoosting lists category values in its splits).

    Raises
    ------
    TypeError
        For a column of any other dtype (object, string, datetime, ...).
    """
    import pandas as pd
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    n_rows, n_cols = frame.shape
    out = np.empty((n_rows, n_cols), dtype=np.float32)
    for j, (name, column) in enumerate(frame.items()):
        dtype = column.dtype
        if isinstance(dtype, pd.CategoricalDtype) and _as_values(categories, j):
            values = column.astype(np.float64).to_numpy(dtype=np.float32, na_value=np.nan)
        elif isinstance(dtype, pd.CategoricalDtype):
            if categories is not None and j in categories:
                column = pd.Series(pd.Categorical(column, categories=list(categories[j])))
            codes = column.cat.codes.to_numpy()
            values = codes.astype(np.float32)
            values[codes < 0] = np.nan
        elif is_numeric_dtype(dtype) or is_bool_dtype(dtype):
            values = column.to_numpy(dtype=np.float32, na_value=np.nan)
        else:
            raise TypeError(
                f"column {name!r} has dtype {dtype}: distshap needs numeric, boolean or "
                "'category' columns; convert it, e.g. df[col].astype('category')"
            )
        out[:, j] = values
    return out


def _as_values(categories: dict[int, Any] | None, j: int) -> bool:
    return categories is not None and isinstance(categories.get(j), str)
