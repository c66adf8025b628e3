"""Input files -> lazy rows for :class:`distshap.TreeExplainer`, checked against the model.

:func:`read_data` opens Parquet, CSV or ``.npy`` files lazily; :func:`select_features` matches
their columns to the model (naming the file in every error) and :func:`model_rows` returns the
collection to explain. Values are converted exactly once, by
:func:`distshap.inputs.prepare_rows` inside the explainer; this module only restores what a
file cannot store (a feature's training categories), so the command line reads a file as the
Python API reads the same rows.
"""

from __future__ import annotations

import glob as globmod
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from distshap.io.errors import InputError

__all__ = [
    "DEFAULT_NPY_CHUNK_ROWS",
    "Dataset",
    "first_rows",
    "model_rows",
    "read_data",
    "select_features",
]

#: Rows per chunk for ``.npy`` inputs when ``chunk_rows`` is not given.
DEFAULT_NPY_CHUNK_ROWS = 262_144

_FORMATS = {
    ".parquet": "parquet",
    ".pq": "parquet",
    ".csv": "csv",
    ".csv.gz": "csv",
    ".tsv": "csv",
    ".tsv.gz": "csv",
    ".npy": "npy",
}


@dataclass
class Dataset:
    """Lazily read rows.

    Attributes
    ----------
    data : dask.dataframe.DataFrame or dask.array.Array
        The rows (a DataFrame for Parquet / CSV, an array of the files' dtype for ``.npy``).
    format : {"parquet", "csv", "npy"}
    files : list of str
        The files read, sorted.
    columns : tuple of str or None
        Column names (``None`` for ``.npy``).
    nbytes : int
        Total size of the files on disk.
    label : str
        How to name the input in messages (the path or glob the user gave).
    dropped : tuple of str
        Columns left out by :func:`select_features`.
    chunk_rows : int or None
        As given to :func:`read_data`.
    """

    data: Any
    format: str
    files: list[str]
    columns: tuple[str, ...] | None
    nbytes: int
    label: str
    dropped: tuple[str, ...] = field(default_factory=tuple)
    chunk_rows: int | None = None

    @property
    def where(self) -> str:
        """The file, or the path / glob given, for messages."""
        return self.files[0] if len(self.files) == 1 else self.label


def _format_of(path: str) -> str | None:
    lower = path.lower()
    for ext, fmt in _FORMATS.items():
        if lower.endswith(ext):
            return fmt
    return None


def resolve(spec: str) -> tuple[str, list[str]]:
    """``spec`` (file, directory or glob) -> (format, sorted files, absolute: a worker of a
    remote cluster, started in another directory, opens the same files).

    Raises
    ------
    InputError
        A missing path, no file of a known format, or files of several formats.
    """
    if os.path.isdir(spec):
        files = sorted(
            os.path.join(spec, name)
            for name in os.listdir(spec)
            if not name.startswith((".", "_")) and os.path.isfile(os.path.join(spec, name))
        )
        where = f"directory {spec!r}"
    elif any(ch in spec for ch in "*?["):
        files = sorted(f for f in globmod.glob(spec) if os.path.isfile(f))
        where = f"glob {spec!r}"
    elif os.path.exists(spec):
        files = [spec]
        where = f"file {spec!r}"
    else:
        raise InputError(f"DATA {spec!r} does not exist: give a file, a directory or a glob")
    formats = {f: _format_of(f) for f in files}
    known = sorted({fmt for fmt in formats.values() if fmt is not None})
    if not known:
        raise InputError(
            f"no Parquet (.parquet/.pq), CSV (.csv/.tsv) or NumPy (.npy) file in {where}: "
            "name the data files by their format"
        )
    if len(known) > 1:
        raise InputError(
            f"{where} mixes formats ({', '.join(known)}): point DATA at files of one format, "
            "e.g. a glob like 'data/*.parquet'"
        )
    # joined to the working folder, not normalised: "link/../x" stays what the system opens
    return known[0], [os.path.join(os.getcwd(), f) for f in files if formats[f] is not None]


def _first_line(err: BaseException) -> str:
    """First line of the innermost error's message (dask wraps reader errors)."""
    seen = {id(err)}
    while err.__cause__ is not None and id(err.__cause__) not in seen:
        err = err.__cause__
        seen.add(id(err))
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def read_data(spec: str, chunk_rows: int | None = None) -> Dataset:
    """Open ``spec`` (a file, directory or glob of Parquet / CSV / ``.npy``) lazily.

    Parameters
    ----------
    spec : str
        Path, directory or glob.
    chunk_rows : int, optional
        Rows per Dask chunk for ``.npy`` (default :data:`DEFAULT_NPY_CHUNK_ROWS`) and, roughly,
        for CSV. Parquet partitions follow the files and row groups.

    Raises
    ------
    InputError
        Missing path, no or mixed formats, an unreadable file, a ``.npy`` that is not a 2-D
        numeric array, ``.npy`` files with different column counts, a CSV without a header row
        or without rows.
    """
    if chunk_rows is not None and chunk_rows < 1:
        raise InputError(f"--chunk-rows {chunk_rows} must be >= 1")
    fmt, files = resolve(spec)
    nbytes = sum(os.path.getsize(f) for f in files)
    if fmt == "npy":
        data = _read_npy(files, chunk_rows or DEFAULT_NPY_CHUNK_ROWS)
        return Dataset(data, fmt, files, None, nbytes, spec, chunk_rows=chunk_rows)
    if fmt == "parquet":
        data = _read_parquet(files)
    else:
        from distshap.io.csvfile import read_csv

        data = read_csv(files, chunk_rows)
    columns = tuple(str(c) for c in data.columns)
    return Dataset(data, fmt, files, columns, nbytes, spec, chunk_rows=chunk_rows)


def _npy_header(path: str) -> tuple[tuple[int, ...], np.dtype]:
    try:
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
    except Exception as err:
        raise InputError(
            f"cannot read {path!r} as a NumPy .npy file ({_first_line(err)}): write it with "
            "numpy.save(path, X) for a 2-D numeric array X"
        ) from err
    return arr.shape, arr.dtype


def _npy_rows(path: str, start: int, stop: int) -> np.ndarray:
    """Rows ``start:stop`` of a ``.npy`` file, in the file's dtype (runs on a worker)."""
    arr = np.load(path, mmap_mode="r", allow_pickle=False)
    return np.array(arr[start:stop])


def _read_npy(files: list[str], chunk_rows: int) -> Any:
    import dask
    import dask.array as da

    pieces = []
    width = None
    for path in files:
        shape, dtype = _npy_header(path)
        if len(shape) != 2:
            raise InputError(
                f"{path!r} holds a {len(shape)}-D array of shape {shape}: save a 2-D "
                "(n_rows, n_features) array"
            )
        if dtype.kind not in "biuf":
            raise InputError(
                f"{path!r} holds dtype {dtype}: SHAP values need a numeric array (convert it "
                "with X.astype(np.float64))"
            )
        if width is not None and shape[1] != width:
            raise InputError(
                f"{path!r} has {shape[1]} columns but {files[0]!r} has {width}: every .npy "
                "file must have the same columns"
            )
        width = shape[1]
        load = dask.delayed(_npy_rows, pure=True)
        for start in range(0, shape[0], chunk_rows):
            stop = min(start + chunk_rows, shape[0])
            pieces.append(
                da.from_delayed(load(path, start, stop), shape=(stop - start, width), dtype=dtype)
            )
    if not pieces:
        raise InputError(f"the .npy file(s) {files[:3]} hold no rows: nothing to explain")
    return da.concatenate(pieces, axis=0) if len(pieces) > 1 else pieces[0]


def _read_parquet(files: list[str]) -> Any:
    import dask.dataframe as dd

    try:
        return dd.read_parquet(files if len(files) > 1 else files[0])
    except ImportError as err:
        raise ImportError(
            f"reading Parquet needs pyarrow ({_first_line(err)}): `pip install pyarrow` "
            "(or distshap[io])"
        ) from err
    except Exception as err:
        raise InputError(
            f"cannot read {files[0] if len(files) == 1 else files[:3]} as Parquet "
            f"({_first_line(err)}): check that the file(s) are Parquet and share one schema"
        ) from err


# ------------------------------------------------------------------------------------------
# matching columns to the model
# ------------------------------------------------------------------------------------------


def _preview(names: Iterable[Any], limit: int = 8) -> str:
    names = list(names)
    shown = ", ".join(repr(n) for n in names[:limit])
    return f"[{shown}{', ...' if len(names) > limit else ''}]"


class _Columns:
    """Column names alone, for :func:`distshap.frames.select_model_columns`."""

    def __init__(self, columns: Iterable[Any]) -> None:
        self.columns = list(columns)


def select_features(ds: Dataset, packed: Any, drop: Iterable[str] = ()) -> Dataset:
    """Match the columns of ``ds`` to the model's features, as the Python API does.

    Parameters
    ----------
    ds : Dataset
    packed : distshap.packed.PackedModel
        The model (``TreeExplainer.packed``): its feature names, categorical features, stored
        categories and name convention.
    drop : iterable of str
        Columns to leave out first (e.g. a label column), DataFrame inputs only.

    Returns
    -------
    Dataset
        Exactly the model's features, in its order. Its DataFrame's dtypes have passed
        :func:`distshap.inputs.prepare_rows` (on no rows), so a column the API refuses (a
        category column on a numeric feature, strings) is refused here, naming the file.

    Raises
    ------
    InputError
        A dropped or named column that is missing, a column count that differs from the
        model's, or a column the model cannot take.
    """
    from distshap.frames import lightgbm_generated_names, select_model_columns

    drop = tuple(drop)
    num_features = packed.num_features
    if ds.columns is None:
        if drop:
            raise InputError(
                f"--drop {drop[0]!r} needs named columns, but {ds.label!r} is a .npy array: "
                "slice the array before saving it instead"
            )
        width = ds.data.shape[1]
        if width != num_features:
            raise InputError(
                f"{ds.label!r} has {width} columns but the model expects {num_features} "
                "features: pass the columns the model was trained on, in the same order"
            )
        return ds
    columns = list(ds.columns)
    for name in drop:
        if name not in columns:
            raise InputError(
                f"--drop {name!r}: {ds.label!r} has no such column (columns: {_preview(columns)})"
            )
    kept = [c for c in columns if c not in drop]
    names = packed.feature_names
    style = packed.encoding.name_style
    if style == "lightgbm" and lightgbm_generated_names(names, num_features):
        if not all(n in kept for n in names):
            names = None  # made-up names of a model trained without any: by position
    if names is not None and len(names) == num_features:
        try:
            selected = select_model_columns(_Columns(kept), num_features, names, style)
        except ValueError as err:
            raise InputError(_missing_columns_message(ds, kept, list(names), style)) from err
    else:
        if len(kept) != num_features:
            raise InputError(
                f"{ds.label!r} has {len(kept)} columns but the model expects {num_features} "
                f"features (columns: {_preview(kept)}): pass the columns the model was trained "
                "on, in order, or leave others out with --drop COLUMN"
            )
        selected = kept
    plan = _category_plan(tuple(selected), packed)
    data = ds.data
    text = [n for n, cats in plan.items() if cats and any(isinstance(c, str) for c in cats)]
    if ds.format == "csv" and text:  # labels such as "01" must stay text
        from distshap.io.csvfile import read_csv

        data = read_csv(ds.files, ds.chunk_rows, text)
    df = data[selected] if selected != columns else data
    out = Dataset(df, ds.format, ds.files, tuple(selected), ds.nbytes, ds.label, drop,
                  ds.chunk_rows)  # fmt: skip
    if ds.format == "parquet":
        _check_parquet_categories(out, [n for n, stored in plan.items() if stored is None])
    try:
        from distshap.inputs import prepare_rows

        prepare_rows(_restore_types(df._meta, plan, ""), packed, allow_empty=True)
    except (TypeError, ValueError) as err:
        raise InputError(f"{ds.where!r}: {err}") from err
    return out


def _missing_columns_message(ds: Dataset, kept: list[str], names: list[str], style: str) -> str:
    from distshap.frames import select_model_columns

    def found(name: str) -> bool:  # by the API's own matching rule (LightGBM's names too)
        try:
            select_model_columns(_Columns(kept), 1, (name,), style, generated_by_position=False)
        except ValueError:
            return False
        return True

    missing = [n for n in names if not found(n)]
    if ds.format == "csv" and len(missing) == len(names):
        return (
            f"the header of {ds.where!r} ({_preview(kept, 5)}) matches none of the model's "
            f"feature names {_preview(names, 5)}: if the file has no header row, add one with "
            "the model's feature names; otherwise rename the columns to them"
        )
    more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
    return (
        f"{ds.where!r} lacks the model's feature column {missing[0]!r}{more}: its columns are "
        f"{_preview(kept)}; the model needs {_preview(names)}"
    )


def _category_plan(columns: tuple[str, ...], packed: Any) -> dict[str, list | None]:
    """Column -> the model's training categories (a list), or ``None`` (read category values).

    For the model's categorical features only. A file does not keep pandas types: a CSV
    column of such a feature holds labels, and a Parquet category column's order is not the
    training order. With stored training categories (XGBoost >= 3.1) a column is coded by them,
    by label; otherwise a category column's numeric values are the codes (what
    ``pandas.read_parquet`` returns for it, and what XGBoost reads for categories ``0..k-1``).
    """
    stored = packed.feature_categories or {}
    categorical = {int(j) for j in np.asarray(packed.encoding.categorical).ravel()}
    plan: dict[str, list | None] = {}
    for j, name in enumerate(columns):
        cats = stored.get(j)
        if cats is not None and not isinstance(cats, str):
            plan[name] = list(cats)
        elif j in categorical:
            plan[name] = None
    return plan


def _string_category_message(name: Any) -> str:
    return (
        f"column {name!r} holds non-numeric categories: their codes at training time cannot "
        "be recovered from a file; write the integer codes the model was trained with "
        "(df[col].cat.codes, -1 -> NaN) instead"
    )


def _restore_types(frame: Any, plan: dict[str, list | None], where: str) -> Any:
    """Apply :func:`_category_plan` to one partition (or the empty meta frame)."""
    import pandas as pd

    if not plan:
        return frame
    frame = frame.copy(deep=False)
    for name, cats in plan.items():
        column = frame[name]
        is_category = isinstance(column.dtype, pd.CategoricalDtype)
        if cats is not None:  # coded by label, so every partition's dtype is the same
            frame[name] = _recode(column, cats)
        elif is_category:
            if "__UNKNOWN_CATEGORIES__" in column.dtype.categories:  # Dask meta: no values
                frame[name] = pd.Series(dtype=np.float64, index=column.index)
                continue
            if column.dtype.categories.dtype.kind not in "biuf":
                prefix = f"{where!r}: " if where else ""
                raise InputError(prefix + _string_category_message(name))
            frame[name] = column.astype(np.float64)
        elif column.dtype.kind not in "biuf":  # text in a CSV: labels without their codes
            prefix = f"{where!r}: " if where else ""
            raise InputError(prefix + _string_category_message(name))
    return frame


def _recode(column: Any, cats: list) -> Any:
    """``column`` (labels, or a category column) as a category column coded by label.

    Its categories are the model's ``cats`` first (so every partition codes them alike), then
    any label the model never saw, left for :func:`distshap.inputs.prepare_rows` to treat as
    the Python API treats it.
    """
    import pandas as pd

    if isinstance(column.dtype, pd.CategoricalDtype):
        labels = column.cat.categories
        if "__UNKNOWN_CATEGORIES__" in labels:  # Dask meta: no values
            labels = labels[:0]
        codes = column.cat.codes.to_numpy()
    else:
        labels, codes = pd.Index(column.dropna().unique()), None
    index = pd.Index(cats)
    extra = [label for label in labels if index.get_indexer([label])[0] < 0]
    dtype = pd.CategoricalDtype(list(cats) + extra)
    if codes is None:
        new = dtype.categories.get_indexer(column)
    else:  # a code of -1 (missing) picks the appended -1
        new = np.append(dtype.categories.get_indexer(labels), -1)[codes]
    values = pd.Categorical.from_codes(new, dtype=dtype)
    return pd.Series(values, index=column.index, name=column.name)


def _check_parquet_categories(ds: Dataset, names: list[str]) -> None:
    """Fail early on dictionary (category) columns of strings in the first Parquet file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not names:
        return
    schema = pq.read_schema(ds.files[0])
    for name in names:
        index = schema.get_field_index(name)
        if index < 0:
            continue
        kind = schema.field(index).type
        if pa.types.is_dictionary(kind) and not (
            pa.types.is_integer(kind.value_type) or pa.types.is_floating(kind.value_type)
        ):
            raise InputError(f"{ds.files[0]!r}: " + _string_category_message(name))


def model_rows(ds: Dataset, packed: Any) -> Any:
    """The rows of ``ds`` (after :func:`select_features`) for ``TreeExplainer``, lazily.

    A Dask DataFrame (its categorical features restored by :func:`_category_plan`) or the
    ``.npy`` files' Dask array, values untouched: the explainer converts them.
    """
    if ds.columns is None:
        return ds.data
    plan = _category_plan(ds.columns, packed)
    if not plan:
        return ds.data
    meta = _restore_types(ds.data._meta, plan, "")
    return ds.data.map_partitions(_restore_types, plan, ds.where, meta=meta)


def first_rows(rows: Any, max_rows: int | None) -> Any:
    """The first ``max_rows`` rows (all when ``None``) of a Dask array or DataFrame, in memory.

    Reads only the partitions that hold them.
    """
    if max_rows is None:
        return rows.compute(scheduler="threads")
    frames = hasattr(rows, "columns")
    parts, count = [], 0
    blocks = rows.to_delayed()
    for block in blocks if frames else blocks.ravel():
        part = block.compute(scheduler="threads")
        parts.append(part)
        count += len(part)
        if count >= max_rows:
            break
    if frames:
        import pandas as pd

        return pd.concat(parts).iloc[:max_rows]
    return np.concatenate(parts)[:max_rows]
