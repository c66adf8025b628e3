"""Reading rows to explain from files, and writing SHAP outputs to files (the CLI's I/O).

Inputs (:func:`read_data`) are Parquet, CSV or ``.npy`` files, given as one file, a directory
or a glob, read lazily with Dask:

* Parquet: :func:`dask.dataframe.read_parquet` (partitions follow files / row groups). A file
  does not keep the category order of the frame it was written from, so categorical features
  are coded by the model's stored training categories when it has them (XGBoost >= 3.1), by
  label; otherwise category (dictionary) columns with numeric categories are read as their
  *values*, used as the codes (right for integer categories ``0..k-1``), and category columns
  of strings are refused: write the integer codes the model was trained with instead.
* CSV: :func:`dask.dataframe.read_csv` with a header row; integer columns are read as floats
  so that a missing value in a later block does not break the parse.
* ``.npy``: a 2-D numeric array per file, memory-mapped and read in row chunks by the workers
  (``np.load(mmap_mode="r")`` inside each task), never through the client.

Columns are matched to the model (:func:`select_features`): by name when the model has feature
names (extra columns are ignored, order follows the model), otherwise by position after leaving
out ``drop`` columns.

Outputs (:func:`output_format`, :func:`write_array`, :func:`write_dask`):

* ``.npy``: the array exactly as :meth:`distshap.TreeExplainer.shap_values` returns it —
  ``(n, F+1)``, ``(n, G, F+1)``, ``(n, F+1, F+1)`` or ``(n, G, F+1, F+1)``, float32, bias last.
* ``.parquet``: one float32 column per feature plus ``"bias"`` (:func:`output_columns`); for
  ``G > 1`` output groups, ``"<feature>[class k]"`` and ``"bias[class k]"``, class by class.
  SHAP values only (interaction values are 3-D: write them to ``.npy`` or ``.zarr``).
* ``.zarr``: a Zarr array of the ``.npy`` layout with ``feature_names``, ``expected_value``,
  ``layout`` attributes, written in parallel by the Dask workers (needs ``pip install zarr``).

``.npy`` and Parquet files are written by the client, one row chunk at a time in row order,
so they need no filesystem shared with the workers; Zarr is written by the workers.
Every user error raises :class:`InputError` (a ``ValueError``) naming the file and the fix.
"""

from __future__ import annotations

import glob as globmod
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "DEFAULT_NPY_CHUNK_ROWS",
    "Dataset",
    "InputError",
    "output_columns",
    "output_format",
    "read_data",
    "select_features",
    "to_float32_dask",
    "write_array",
    "write_blocks",
    "write_dask",
]

#: Rows per chunk for ``.npy`` inputs when ``chunk_rows`` is not given.
DEFAULT_NPY_CHUNK_ROWS = 262_144

_FORMATS = {
    ".parquet": "parquet",
    ".pq": "parquet",
    ".csv": "csv",
    ".csv.gz": "csv",
    ".tsv": "csv",
    ".npy": "npy",
}


class InputError(ValueError):
    """Bad input or output files (the message names the file and what to do)."""


@dataclass
class Dataset:
    """Lazily read rows.

    Attributes
    ----------
    data : dask.dataframe.DataFrame or dask.array.Array
        The rows (a DataFrame for Parquet / CSV, a float32 array for ``.npy``).
    format : {"parquet", "csv", "npy"}
    files : list of str
        The files read, sorted.
    columns : tuple of str or None
        Column names (``None`` for ``.npy``).
    nbytes : int
        Total size of the files on disk.
    label : str
        How to name the input in messages (the path or glob the user gave).
    """

    data: Any
    format: str
    files: list[str]
    columns: tuple[str, ...] | None
    nbytes: int
    label: str
    dropped: tuple[str, ...] = field(default_factory=tuple)


def _format_of(path: str) -> str | None:
    lower = path.lower()
    for ext, fmt in _FORMATS.items():
        if lower.endswith(ext):
            return fmt
    return None


def _resolve(spec: str) -> tuple[str, list[str]]:
    """``spec`` (file, directory or glob) -> (format, sorted files)."""
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
            f"no Parquet (.parquet/.pq), CSV (.csv) or NumPy (.npy) file in {where}: "
            "name the data files by their format"
        )
    if len(known) > 1:
        raise InputError(
            f"{where} mixes formats ({', '.join(known)}): point DATA at files of one format, "
            "e.g. a glob like 'data/*.parquet'"
        )
    return known[0], [f for f in files if formats[f] is not None]


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
        Rows per Dask chunk for ``.npy`` (default :data:`DEFAULT_NPY_CHUNK_ROWS`) and, roughly
        (from the bytes per row of the first file), for CSV. Parquet partitions follow the
        files and row groups.

    Raises
    ------
    InputError
        Missing path, no or mixed formats, an unreadable file, a ``.npy`` that is not a 2-D
        numeric array, ``.npy`` files with different column counts.
    """
    if chunk_rows is not None and chunk_rows < 1:
        raise InputError(f"--chunk-rows {chunk_rows} must be >= 1")
    fmt, files = _resolve(spec)
    nbytes = sum(os.path.getsize(f) for f in files)
    if fmt == "npy":
        data = _read_npy(files, chunk_rows or DEFAULT_NPY_CHUNK_ROWS)
        return Dataset(data, fmt, files, None, nbytes, spec)
    if fmt == "parquet":
        data = _read_parquet(files)
    else:
        data = _read_csv(files, chunk_rows)
    return Dataset(data, fmt, files, tuple(str(c) for c in data.columns), nbytes, spec)


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
    """Rows ``start:stop`` of a ``.npy`` file as float32 (runs on a worker)."""
    arr = np.load(path, mmap_mode="r", allow_pickle=False)
    return np.ascontiguousarray(arr[start:stop], dtype=np.float32)


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
                "with X.astype(np.float32))"
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
                da.from_delayed(
                    load(path, start, stop), shape=(stop - start, width), dtype=np.float32
                )
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


def _read_csv(files: list[str], chunk_rows: int | None) -> Any:
    import dask.dataframe as dd

    kwargs: dict[str, Any] = {"assume_missing": True}
    if files[0].lower().endswith(".tsv"):
        kwargs["sep"] = "\t"
    if any(f.lower().endswith(".gz") for f in files):
        kwargs["blocksize"] = None  # gzip cannot be split
    elif chunk_rows is not None:
        kwargs["blocksize"] = max(1 << 16, int(chunk_rows * _csv_bytes_per_row(files[0])))
    try:
        return dd.read_csv(files, **kwargs)
    except Exception as err:
        raise InputError(
            f"cannot read {files[0] if len(files) == 1 else files[:3]} as CSV "
            f"({_first_line(err)}): the files need a header row of column names"
        ) from err


def _csv_bytes_per_row(path: str, sample: int = 1000) -> float:
    with open(path, "rb") as fh:
        fh.readline()  # header
        lines = [fh.readline() for _ in range(sample)]
    lines = [line for line in lines if line]
    return max(1.0, sum(map(len, lines)) / max(1, len(lines)))


def select_features(
    ds: Dataset,
    num_features: int,
    feature_names: Sequence[str] | None = None,
    drop: Iterable[str] = (),
) -> Dataset:
    """Match the columns of ``ds`` to the model's features.

    Parameters
    ----------
    ds : Dataset
    num_features : int
        Features the model expects.
    feature_names : sequence of str, optional
        The model's feature names: when given, DataFrame columns are selected and ordered by
        them (other columns are ignored).
    drop : iterable of str
        Columns to leave out first (e.g. a label column), DataFrame inputs only.

    Returns
    -------
    Dataset
        With exactly ``num_features`` columns, in the model's order.

    Raises
    ------
    InputError
        A dropped or named column that is missing, a column count that differs from
        ``num_features``, or a non-numeric column.
    """
    drop = tuple(drop)
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
    df = ds.data
    columns = list(ds.columns)
    for name in drop:
        if name not in columns:
            raise InputError(
                f"--drop {name!r}: {ds.label!r} has no such column (columns: {_preview(columns)})"
            )
    kept = [c for c in columns if c not in drop]
    names = list(feature_names) if feature_names is not None else None
    if names is not None and len(names) == num_features:
        missing = [n for n in names if n not in kept]
        if missing:
            raise InputError(
                f"{ds.label!r} lacks the model's feature column {missing[0]!r}"
                + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
                + f": its columns are {_preview(kept)}; the model needs {_preview(names)}"
            )
        selected = names
    else:
        if len(kept) != num_features:
            raise InputError(
                f"{ds.label!r} has {len(kept)} columns but the model expects {num_features} "
                f"features (columns: {_preview(kept)}): pass the columns the model was trained "
                "on, in order, or leave others out with --drop COLUMN"
            )
        selected = kept
    for name in selected:
        _check_column_dtype(ds, name, df.dtypes[name])
    if ds.format == "parquet":
        _check_parquet_categories(ds, selected)
    if selected != columns:
        df = df[selected]
    return Dataset(
        df, ds.format, ds.files, tuple(selected), ds.nbytes, ds.label, dropped=tuple(drop)
    )


def _preview(names: Sequence[str], limit: int = 8) -> str:
    shown = ", ".join(repr(n) for n in list(names)[:limit])
    return f"[{shown}{', ...' if len(names) > limit else ''}]"


def _check_column_dtype(ds: Dataset, name: str, dtype: Any) -> None:
    import pandas as pd
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    if isinstance(dtype, pd.CategoricalDtype) or is_numeric_dtype(dtype) or is_bool_dtype(dtype):
        return
    where = ds.files[0] if len(ds.files) == 1 else ds.label
    raise InputError(
        f"column {name!r} of {where!r} is not numeric (dtype {dtype}): SHAP values need numbers; "
        "convert it to numbers (or a Parquet category column), or leave it out with --drop"
    )


def _frame_block(frame: Any, categories: dict | None = None) -> np.ndarray:
    """One partition -> float32 rows.

    A feature whose training categories the model stores (XGBoost >= 3.1) is coded by them,
    whatever the column's type (category, numbers or strings read from CSV). Other category
    columns must hold numbers, which are used as the codes (what ``pandas.read_parquet``
    returns and XGBoost reads for categories ``0..k-1``).
    """
    import pandas as pd

    from distshap.inputs import frame_to_float32

    converted = {}
    for j, (name, column) in enumerate(frame.items()):
        if categories is not None and not isinstance(categories.get(j, ""), str):
            converted[name] = pd.Categorical(column, categories=list(categories[j]))
        elif isinstance(column.dtype, pd.CategoricalDtype):
            if column.dtype.categories.dtype.kind not in "biuf":
                raise TypeError(_string_category_message(name))
            converted[name] = column.astype(np.float64)
    if converted:
        frame = frame.assign(**{str(k): v for k, v in converted.items()})
    return frame_to_float32(frame)


def _string_category_message(name: Any) -> str:
    return (
        f"column {name!r} holds non-numeric categories: their codes at training time cannot "
        "be recovered from a file; write the integer codes the model was trained with "
        "(df[col].cat.codes, -1 -> NaN) instead"
    )


def _check_parquet_categories(ds: Dataset, names: Sequence[str]) -> None:
    """Fail early on dictionary (category) columns of strings in the first Parquet file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

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


def to_float32_dask(ds: Dataset, categories: dict | None = None) -> Any:
    """The rows of ``ds`` as a float32 dask array with one column chunk.

    ``categories``: the model's training categories per feature position
    (``PackedModel.feature_categories``); those columns are coded by them.

    Row chunk sizes of DataFrame inputs stay unknown (NaN) until computed: no extra pass over
    the files is made here.
    """
    import dask.array as da

    if ds.columns is None:
        arr = ds.data
    else:
        width = len(ds.columns)
        meta = np.empty((0, width), dtype=np.float32)
        arr = ds.data.map_partitions(_frame_block, categories, meta=meta)
        if not isinstance(arr, da.Array):  # older dask: convert explicitly
            arr = arr.to_dask_array()
    if arr.dtype != np.float32:
        arr = arr.astype(np.float32)
    if arr.numblocks[1] != 1:
        arr = arr.rechunk({1: -1})
    return arr


# ------------------------------------------------------------------------------------------
# outputs
# ------------------------------------------------------------------------------------------


def output_format(path: str, interactions: bool = False) -> str:
    """``"npy"``, ``"parquet"`` or ``"zarr"`` from the extension of ``path``.

    Raises
    ------
    InputError
        Unknown extension, Parquet for interaction values, or a path whose parent directory
        does not exist.
    """
    lower = path.lower().rstrip("/\\")
    if lower.endswith(".npy"):
        fmt = "npy"
    elif lower.endswith((".parquet", ".pq")):
        fmt = "parquet"
    elif lower.endswith(".zarr"):
        fmt = "zarr"
    else:
        raise InputError(
            f"cannot tell the output format of {path!r}: end OUT with .npy, .parquet or .zarr"
        )
    if fmt == "parquet" and interactions:
        raise InputError(
            f"interaction values are (n, F+1, F+1) per output, which Parquet columns cannot hold: "
            f"write them to .npy or .zarr instead of {path!r}"
        )
    parent = os.path.dirname(os.path.abspath(path.rstrip("/\\")))
    if not os.path.isdir(parent):
        raise InputError(f"the directory of OUT {path!r} does not exist: create {parent!r} first")
    if fmt != "zarr" and os.path.isdir(path):
        raise InputError(f"OUT {path!r} is a directory: give a file name ending in .{fmt}")
    return fmt


def output_columns(feature_names: Sequence[str], num_groups: int) -> list[str]:
    """Parquet column names of SHAP values: features then ``"bias"``, per class when G > 1.

    ``["a", "b", "bias"]`` for one output; ``["a[class 0]", "b[class 0]", "bias[class 0]",
    "a[class 1]", ...]`` for ``num_groups`` classes (the row-major order of ``(G, F+1)``).
    """
    base = [str(n) for n in feature_names] + ["bias"]
    if num_groups == 1:
        return base
    return [f"{name}[class {k}]" for k in range(num_groups) for name in base]


def _layout(shape_tail: tuple[int, ...], num_groups: int, interactions: bool) -> str:
    dims = ["row"] + (["class"] if num_groups > 1 else []) + ["feature (bias last)"]
    if interactions:
        dims.append("feature (bias last)")
    return "(" + ", ".join(dims) + ")"


class _Writer:
    """Streams row blocks to one ``.npy`` or Parquet file, in row order."""

    def __init__(
        self, path: str, fmt: str, n_rows: int, tail: tuple[int, ...], columns: Sequence[str]
    ) -> None:
        self.path, self.fmt, self.row = path, fmt, 0
        if fmt == "npy":
            from numpy.lib.format import open_memmap

            self.target = open_memmap(path, mode="w+", dtype=np.float32, shape=(n_rows, *tail))
        else:
            try:
                import pyarrow as pa
                import pyarrow.parquet as pq
            except ImportError as err:
                raise ImportError(
                    "writing Parquet needs pyarrow: `pip install pyarrow` (or distshap[io])"
                ) from err
            self.columns = list(columns)
            schema = pa.schema([(c, pa.float32()) for c in self.columns])
            self.target = pq.ParquetWriter(path, schema)

    def write(self, block: np.ndarray) -> None:
        n = block.shape[0]
        if n == 0:
            return
        if self.fmt == "npy":
            self.target[self.row : self.row + n] = block
        else:
            import pyarrow as pa

            flat = np.asarray(block, dtype=np.float32).reshape(n, -1)
            table = pa.Table.from_arrays(
                [pa.array(flat[:, j]) for j in range(flat.shape[1])], names=self.columns
            )
            self.target.write_table(table)
        self.row += n

    def close(self) -> None:
        if self.fmt == "npy":
            self.target.flush()
            del self.target
        else:
            self.target.close()


def write_blocks(
    blocks: Iterable[np.ndarray],
    path: str,
    fmt: str,
    n_rows: int,
    tail: tuple[int, ...],
    columns: Sequence[str] = (),
) -> None:
    """Write row blocks (in row order, ``n_rows`` in all) to a ``.npy`` or Parquet file."""
    if fmt not in ("npy", "parquet"):
        raise ValueError(f"write_blocks writes 'npy' or 'parquet', not {fmt!r}")
    writer = _Writer(path, fmt, n_rows, tail, columns)
    try:
        for block in blocks:
            writer.write(np.asarray(block))
    finally:
        writer.close()
    if writer.row != n_rows:
        raise RuntimeError(f"wrote {writer.row} rows to {path!r} but expected {n_rows}")


def _zarr_attrs(
    feature_names: Sequence[str], expected_value: Any, num_groups: int, interactions: bool, tail
) -> dict:
    return {
        "feature_names": [str(n) for n in feature_names],
        "expected_value": np.atleast_1d(np.asarray(expected_value, dtype=np.float64)).tolist(),
        "layout": _layout(tuple(tail), num_groups, interactions),
        "values": "SHAP interaction values" if interactions else "SHAP values",
        "space": "margin (raw score)",
        "producer": "distshap",
    }


def _set_zarr_attrs(path: str, attrs: dict) -> None:
    import zarr

    zarr.open_array(path, mode="r+").attrs.update(attrs)


def _require_zarr() -> None:
    try:
        import zarr  # noqa: F401
    except ImportError as err:
        raise ImportError(
            "writing .zarr needs the zarr package: `pip install zarr` (or distshap[io]), "
            "or write .npy / .parquet instead"
        ) from err


def write_array(
    values: np.ndarray,
    path: str,
    fmt: str,
    feature_names: Sequence[str],
    num_groups: int,
    expected_value: Any = None,
    interactions: bool = False,
    block_rows: int = 65536,
) -> None:
    """Write in-memory SHAP (interaction) values in the layout of this module's docstring."""
    values = np.asarray(values, dtype=np.float32)
    n, tail = values.shape[0], values.shape[1:]
    if fmt == "zarr":
        import dask.array as da

        _require_zarr()
        chunks = (min(max(n, 1), block_rows),) + tail
        da.to_zarr(da.from_array(values, chunks=chunks), path, overwrite=True, compute=True)
        _set_zarr_attrs(
            path, _zarr_attrs(feature_names, expected_value, num_groups, interactions, tail)
        )
        return
    columns = output_columns(feature_names, num_groups) if fmt == "parquet" else ()
    blocks = (values[i : i + block_rows] for i in range(0, n, block_rows))
    write_blocks(blocks, path, fmt, n, tail, columns)


def write_dask(
    result: Any,
    path: str,
    fmt: str,
    feature_names: Sequence[str],
    num_groups: int,
    client: Any,
    expected_value: Any = None,
    interactions: bool = False,
) -> int:
    """Write a *persisted* Dask result; returns the number of rows.

    ``.npy`` / Parquet: the client gathers one row chunk at a time, in row order. Zarr: the
    workers write their chunks in parallel (rechunked to equal row chunks, as Zarr needs).
    """
    import dask.array as da

    if any(np.isnan(c) for c in result.chunks[0]):
        result = result.compute_chunk_sizes()  # cheap: the blocks are in cluster memory
    n, tail = int(result.shape[0]), tuple(int(s) for s in result.shape[1:])
    if fmt == "zarr":
        _require_zarr()
        sizes = result.chunks[0]
        if len(set(sizes[:-1])) > 1 or (len(sizes) > 1 and sizes[-1] > sizes[0]):
            result = result.rechunk({0: max(sizes)})
        store = da.to_zarr(result, path, overwrite=True, compute=False)
        client.compute(store).result()
        _set_zarr_attrs(
            path, _zarr_attrs(feature_names, expected_value, num_groups, interactions, tail)
        )
        return n
    columns = output_columns(feature_names, num_groups) if fmt == "parquet" else ()
    blocks = (client.compute(result.blocks[i]).result() for i in range(result.numblocks[0]))
    write_blocks(blocks, path, fmt, n, tail, columns)
    return n
