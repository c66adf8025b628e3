"""DataFrames -> the model's feature matrix: columns by name, category columns coded.

Every entry point that takes a DataFrame comes here (:func:`distshap.inputs.model_matrix`, the
Dask blocks, the command line's files): a frame of another library (polars, pyarrow, ...)
becomes a pandas one (:func:`native_frame`); the model's columns are selected by name, a
repeated name refused (:func:`select_model_columns`); columns become numbers as the model's
library reads them (:func:`frame_to_matrix`, :func:`model_frame_matrix`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = [
    "frame_to_matrix",
    "lightgbm_generated_names",
    "model_frame_matrix",
    "native_frame",
    "select_model_columns",
]


#: Libraries whose data :func:`native_frame` passes on unchanged.
_OWN_FORMS = ("numpy", "pandas", "cupy", "cudf", "dask", "dask_expr", "dask_cudf", "scipy",
              "xgboost", "catboost", "shap", "builtins")  # fmt: skip


def native_frame(X: Any, what: str = "X") -> Any:
    """A DataFrame of another library (polars, pyarrow, modin, ...) -> a pandas DataFrame.

    Through the frame's ``to_pandas()`` (category and enum columns stay category columns) or
    the dataframe interchange protocol; anything else is returned unchanged.

    Raises
    ------
    TypeError
        For a lazy frame (polars ``LazyFrame``): its rows do not exist until collected.
    """
    kind = type(X)  # attributes of the type: a lazy frame's columns cost a query plan
    if kind.__module__.split(".")[0] in _OWN_FORMS or not hasattr(kind, "columns"):
        return X
    if callable(getattr(X, "to_pandas", None)):
        return X.to_pandas()
    if hasattr(X, "__dataframe__"):
        import pandas as pd

        return pd.api.interchange.from_dataframe(X)
    if callable(getattr(X, "collect", None)):
        raise TypeError(
            f"{what} is a lazy {type(X).__module__.split('.')[0]} {type(X).__name__}: its rows "
            f"are not computed yet; pass {what.split()[0]}.collect()"
        )
    return X


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
    what: str = "X",
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
        When a named feature is missing from the frame, or a column it takes has a name
        another column repeats (which of them feeds the model would be a guess).
    """
    columns = list(frame.columns)
    if names is None or len(names) != num_features or [str(c) for c in columns] == list(names):
        return _distinct(columns, columns, what)
    by_name = {str(c): c for c in columns}
    if name_style == "lightgbm":
        from distshap.models.lightgbm import lightgbm_feature_name

        if (
            generated_by_position
            and lightgbm_generated_names(names, num_features)
            and not all(n in by_name for n in names)
        ):
            return _distinct(columns, columns, what)
        for c in columns:  # an exact name wins over a converted one
            by_name.setdefault(lightgbm_feature_name(c), c)
    missing = [n for n in names if n not in by_name]
    if missing:
        raise ValueError(
            f"{what} lacks the model's feature column(s) {missing[:5]}: pass a DataFrame with "
            f"the columns {list(names)[:10]}{'...' if len(names) > 10 else ''}"
        )
    return _distinct([by_name[n] for n in names], columns, what)


def _distinct(selected: list[Any], columns: list[Any], what: str) -> list[Any]:
    """``selected``, refused when a selected column's name is repeated among ``columns``."""
    seen: dict[str, int] = {}
    for c in columns:
        seen[str(c)] = seen.get(str(c), 0) + 1
    repeated = sorted({str(c) for c in selected if seen[str(c)] > 1})
    if repeated:
        raise ValueError(
            f"{what} has more than one column named {repeated[0]!r}"
            + (f" (and {repeated[1:5]})" if len(repeated) > 1 else "")
            + ": which one feeds the model would be a guess; rename or drop the repeated "
            "column(s) (column names must be distinct)"
        )
    return selected


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
                f"column {name!r} is a category column (pandas 'category', polars Categorical "
                f"or Enum) but the model splits feature {j} numerically: its category codes are "
                "not the values the model was trained on. Pass the numeric values (pandas "
                f"df[{name!r}].astype(float), polars pl.col({name!r}).cast(pl.Float64)) or a "
                "model trained with this column as categorical"
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
                f"column {name!r} is numeric but the model was trained on it as a category "
                "column: its numbers are not the model's category codes. Pass it as a category "
                f"column with the training labels (pandas df[{name!r}].astype('category'), "
                f"polars pl.col({name!r}).cast(pl.Categorical))"
            )
        elif is_numeric_dtype(kind) or is_bool_dtype(kind):
            values = column.to_numpy(dtype=dtype, na_value=np.nan)
        else:
            _refuse_decimals(name, column)
            what = (
                "category column (pandas astype('category'), polars cast(pl.Categorical))"
                if allowed is None or j in allowed
                else "numeric column (the model splits this feature numerically)"
            )
            raise TypeError(
                f"column {name!r} has dtype {kind}: distshap needs numeric, boolean or "
                f"'category' columns; convert it to a {what}"
            )
        out[:, j] = values
    return out


def _refuse_decimals(name: Any, column: Any) -> None:
    """Raise for an object column of ``decimal.Decimal`` values (a polars or pyarrow Decimal
    column, which pandas holds as objects): say what it is and how to convert it."""
    from decimal import Decimal

    first = column.dropna().head(1).tolist()
    if column.dtype == object and first and isinstance(first[0], Decimal):
        raise TypeError(
            f"column {name!r} holds decimal.Decimal values (a Decimal column): distshap needs "
            f"numbers; convert it to float first (pandas df[{name!r}].astype(float), polars "
            f"pl.col({name!r}).cast(pl.Float64))"
        )


def _has_labels(categories: dict[int, Any] | None, j: int) -> bool:
    """Whether the model stores training labels for feature ``j`` (codes must come from them)."""
    return categories is not None and j in categories and not _as_values(categories, j)


def _number_labels(categories: dict[int, Any] | None, j: int) -> bool:
    """Whether feature ``j``'s stored labels hold a number (a numeric column may name one; on
    text labels it is refused, as scikit-learn refuses it)."""
    labels = (categories or {}).get(j)
    return not isinstance(labels, str) and any(
        isinstance(v, (int, float, np.number)) and not isinstance(v, bool) for v in labels or ()
    )


def _as_values(categories: dict[int, Any] | None, j: int) -> bool:
    return categories is not None and isinstance(categories.get(j), str)


def model_frame_matrix(frame: Any, packed: Any, what: str = "X") -> np.ndarray:
    """A frame in the model's column order -> its matrix, by the model library's conventions."""
    encoding = packed.encoding
    categories, categorical = packed.feature_categories, encoding.categorical
    if encoding.library == "catboost" and categories:  # category values -> the model's codes
        from distshap.models.catboost_categorical import frame_codes

        frame, categories = frame_codes(frame, categories, what), None
    frame = _labels_as_categories(frame, packed).infer_objects()  # other object columns: values
    if encoding.category_lists is not None:
        # LightGBM codes the k-th category column of a frame by its k-th stored list, whatever
        # feature the column feeds, and refuses a frame with another number of them
        import pandas as pd

        positions = [
            j for j, (_, c) in enumerate(frame.items()) if isinstance(c.dtype, pd.CategoricalDtype)
        ]
        if len(positions) != len(encoding.category_lists):
            raise TypeError(
                f"{what} has {len(positions)} category column(s) but the LightGBM model "
                f"was trained on a frame with {len(encoding.category_lists)}: give the columns the "
                "dtypes of the training frame (LightGBM refuses this frame too)"
            )
        categories, categorical = dict(zip(positions, encoding.category_lists, strict=True)), None
    unseen = "error" if encoding.library == "xgboost" else "missing"
    return frame_to_matrix(frame, categories, categorical, encoding.input_dtype, unseen)


def _labels_as_categories(frame: Any, packed: Any) -> Any:
    """Text and object columns on categorical features whose labels the model stores ->
    category columns.

    A row taken from a frame (``df.iloc[i]``, a Series) keeps no column dtypes: it arrives as
    object columns, its category columns holding labels (text or numbers). The labels are the
    model's, so they are coded by the model's training categories exactly as a category column
    is (an unknown label as the library reads one); on a feature without stored labels a text
    column stays refused. scikit-learn's encoder maps numbers by value too: for its models a
    numeric column on such a feature holds labels as well (polars, e.g., has no numeric category
    columns).
    """
    import pandas as pd
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    encoding = packed.encoding
    cats = packed.feature_categories
    labelled = {
        j
        for j in (int(k) for k in np.ravel(encoding.categorical))
        if encoding.category_lists is not None or _has_labels(cats, j)
    }
    by_value = encoding.library == "sklearn"
    text = [
        j
        for j, (_, c) in enumerate(frame.items())
        if j in labelled
        and not isinstance(c.dtype, pd.CategoricalDtype)
        and (
            (by_value and _number_labels(cats, j))
            or not (is_numeric_dtype(c.dtype) or is_bool_dtype(c.dtype))
        )
    ]
    if not text:
        return frame
    frame = frame.copy()
    for j in text:
        frame.isetitem(j, frame.iloc[:, j].astype("category"))
    return frame
