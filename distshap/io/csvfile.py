"""CSV and TSV input: a header row of column names, then one row per line, read in byte blocks.

Each file is split at line starts into blocks that Dask tasks parse with pandas. Before a block
is parsed, its fields are counted line by line: pandas fills a short row with NaN and would
explain it as missing values, so a row with more or fewer fields than the header is refused
with its file and line number. The header is checked when the files are opened: a first line
of numbers is a file without a header (reading it as names would drop a row of data and name
the columns after its values), and a file with a header but no rows has nothing to explain.
"""

from __future__ import annotations

import csv
import gzip
import io as _bytes_io
import os
from collections.abc import Iterable
from typing import Any

import numpy as np

from distshap.io.errors import InputError

__all__ = ["DEFAULT_CSV_BLOCK_BYTES", "read_csv"]

#: Bytes of CSV per Dask task when ``chunk_rows`` is not given.
DEFAULT_CSV_BLOCK_BYTES = 64 << 20

_SAMPLE_LINES = 1000


def _separator(path: str) -> str:
    name = path.lower()
    return "\t" if name.endswith((".tsv", ".tsv.gz")) else ","


def _open(path: str) -> Any:
    return gzip.open(path, "rb") if path.lower().endswith(".gz") else open(path, "rb")


def _head(path: str) -> tuple[bytes, list[bytes]]:
    """The first line of ``path`` and up to :data:`_SAMPLE_LINES` lines after it."""
    try:
        with _open(path) as fh:
            header = fh.readline()
            sample = []
            while len(sample) < _SAMPLE_LINES:
                line = fh.readline()
                if not line:
                    break
                sample.append(line)
    except OSError as err:
        raise InputError(f"cannot read {path!r} as CSV ({err}): check the file") from err
    return header, sample


def _cells(line: bytes, sep: str, path: str) -> list[str]:
    try:
        text = line.decode("utf-8-sig").rstrip("\r\n")
    except UnicodeDecodeError as err:
        raise InputError(
            f"the first line of {path!r} is not UTF-8 text ({err.reason}): CSV input must be "
            "UTF-8 text with a header row of column names"
        ) from err
    return next(csv.reader([text], delimiter=sep), [])


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def _looks_like_data(cells: list[str]) -> bool:
    """A first line of numbers, other than the names ``0, 1, ...`` pandas gives unnamed columns."""
    filled = [c.strip() for c in cells if c.strip()]
    if not filled or not all(_is_number(c) for c in filled):
        return False
    return filled != [str(k) for k in range(len(filled))]


def _check_header(path: str, header: bytes, sep: str) -> list[str]:
    cells = _cells(header, sep, path)
    if not header.strip() or not cells:
        raise InputError(
            f"{path!r} is empty or its first line is blank: CSV input needs a header row of "
            "column names, then one row per line"
        )
    if _looks_like_data(cells):
        shown = header.decode("utf-8", "replace").strip()
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        raise InputError(
            f"the first line of {path!r} holds numbers ({shown!r}), not column names: the "
            "file has no header row, and reading it as one would drop that row. Add a header "
            "line of column names (the model's feature names, or f0,f1,... in column order)"
        )
    return cells


def _csv_meta(
    path: str, header: bytes, sample: list[bytes], sep: str, columns: list, text: list[str]
) -> Any:
    """Empty DataFrame with the columns and dtypes of the first rows (integers as float64)."""
    import pandas as pd

    data = b"".join(sample)
    _check_fields(data, sep, len(columns), path, -1)  # the sample starts on line 2
    try:
        frame = pd.read_csv(_bytes_io.BytesIO(header + data), sep=sep, **_text(columns, text))
    except Exception as err:
        raise InputError(
            f"cannot read {path!r} as CSV ({_first_line(err)}): check the file"
        ) from err
    return _as_float(frame).iloc[:0]


#: Fields a numeric column reads as missing (pandas' defaults). A text column's only missing
#: field is an empty one, so that category labels such as "NA" or "None" stay labels.
_NUMERIC_MISSING = ("", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan",
                    "1.#IND", "1.#QNAN", "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan",
                    "null")  # fmt: skip


def _text(columns: Iterable[Any], text: list[str]) -> dict[str, Any]:
    """``pandas.read_csv`` options for a table of ``columns``: the ``text`` ones read as text,
    missing only where empty; the others as pandas reads them."""
    if not text:
        return {}
    missing = {c: ([""] if str(c) in text else list(_NUMERIC_MISSING)) for c in columns}
    return {"dtype": {c: str for c in text}, "keep_default_na": False, "na_values": missing}


def _as_float(frame: Any) -> Any:
    """Integer columns as float64, so that a missing value in a later block reads the same."""
    from pandas.api.types import is_integer_dtype

    ints = [c for c in frame.columns if is_integer_dtype(frame.dtypes[c])]
    return frame.astype(dict.fromkeys(ints, np.float64)) if ints else frame


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def read_csv(
    files: list[str], chunk_rows: int | None = None, text_columns: Iterable[str] = ()
) -> Any:
    """Open CSV / TSV ``files`` (same header each) as a lazy Dask DataFrame.

    Parameters
    ----------
    files : list of str
        ``.csv``, ``.tsv`` or their ``.gz`` (a compressed file is one block).
    chunk_rows : int, optional
        Rows per block, roughly (from the bytes per line of the first file's first lines);
        default blocks of :data:`DEFAULT_CSV_BLOCK_BYTES`.
    text_columns : iterable of str
        Columns read as text whatever they hold (category labels such as ``"01"``, which a
        number would not give back).

    Raises
    ------
    InputError
        A first line of numbers (no header), files with different headers, no rows in any file,
        and, when a block is read, a row whose field count differs from the header's (file and
        line named) or a non-number in a column whose first rows are numbers.
    """
    import dask.dataframe as dd

    sep = _separator(files[0])
    header, sample = _head(files[0])
    columns = _check_header(files[0], header, sep)
    text = [str(c) for c in text_columns]
    meta = None
    blocks = []
    for path in files:
        first, rows = (header, sample) if path == files[0] else _head(path)
        if _cells(first, sep, path) != columns:
            raise InputError(
                f"{path!r} and {files[0]!r} have different header rows: every file must have "
                "the same columns; point DATA at files of one table"
            )
        if any(line.strip() for line in rows) and meta is None:
            meta = _csv_meta(path, first, rows, sep, columns, text)
        blocks.extend(_blocks(path, len(first), chunk_rows, rows))
    if meta is None:
        where = repr(files[0]) if len(files) == 1 else f"{len(files)} files ({files[0]!r}, ...)"
        raise InputError(
            f"{where} has a header row but no rows: nothing to explain; add rows of data "
            "under the header"
        )
    paths, offsets, lengths = ([b[k] for b in blocks] for k in range(3))
    return dd.from_map(
        _parse_block, paths, offsets, lengths, args=(sep, meta, text), meta=meta,
        label="distshap-read-csv", enforce_metadata=False,
    )  # fmt: skip


def _blocks(
    path: str, data_start: int, chunk_rows: int | None, sample: list[bytes]
) -> list[tuple[str, int, int]]:
    """``(path, offset, length)`` byte ranges after the header (whole file for ``.gz``)."""
    if path.lower().endswith(".gz"):
        return [(path, -1, -1)]
    size = os.path.getsize(path)
    if size <= data_start:
        return []
    if chunk_rows is None:
        step = DEFAULT_CSV_BLOCK_BYTES
    else:
        per_line = sum(map(len, sample)) / max(1, len(sample)) if sample else 64.0
        step = max(1 << 16, int(chunk_rows * per_line))
    return [(path, start, min(step, size - start)) for start in range(data_start, size, step)]


def _line_start(fh: Any, pos: int) -> int:
    """The first line start at or after byte ``pos`` (``pos`` itself when a line starts there)."""
    fh.seek(pos - 1)
    fh.readline()
    return fh.tell()


def _read_block(path: str, offset: int, length: int) -> tuple[int, bytes]:
    """The lines that start in ``[offset, offset + length)``: (byte position of the first, bytes).

    ``offset`` is itself a line start when it is the first byte after the header; a block ends
    at the start of the line that crosses its end (that line belongs to the next block).
    """
    if offset < 0:
        with _open(path) as fh:
            fh.readline()
            return 0, fh.read()
    size = os.path.getsize(path)
    with open(path, "rb") as fh:
        fh.readline()
        data_start = fh.tell()
        start = offset if offset == data_start else _line_start(fh, offset)
        end = size if offset + length >= size else _line_start(fh, offset + length)
        end = max(start, end)
        fh.seek(start)
        return start, fh.read(end - start)


def _line_number(path: str, block_start: int, line_in_block: int) -> int:
    """1-based line number in ``path`` (the header is line 1) of a block's ``line_in_block``."""
    if block_start < 0:  # a compressed file: the block is everything after the header
        return line_in_block + 2
    newlines = 0
    with open(path, "rb") as fh:
        left = block_start
        while left > 0:
            chunk = fh.read(min(left, 16 << 20))
            if not chunk:
                break
            newlines += chunk.count(b"\n")
            left -= len(chunk)
    return newlines + line_in_block + 1


def _field_counts(data: bytes, sep: str) -> tuple[np.ndarray, np.ndarray]:
    """Fields per non-blank line of ``data`` and each line's index in ``data`` (0-based).

    Without quote characters, a count of separators per line (vectorised); with them, Python's
    ``csv`` module, which knows quoted separators. Lines end at ``\n`` only, as in the bytes;
    a line that leaves a quoted field open (a line break inside a field) counts -1, one the
    ``csv`` module cannot read (a carriage return inside a field) -2.
    """
    if b'"' in data:
        counts, lines = [], []
        text = data.decode("utf-8", "replace").split("\n")
        for index, line in enumerate(text):
            if line.strip():
                counts.append(_quoted_fields(line.rstrip("\r"), sep))
                lines.append(index)
        return np.asarray(counts, dtype=np.int64), np.asarray(lines, dtype=np.int64)
    buf = np.frombuffer(data, dtype=np.uint8)
    breaks = np.flatnonzero(buf == ord("\n"))
    starts = np.concatenate(([0], breaks + 1))
    ends = np.concatenate((breaks, [buf.size]))
    seps = np.concatenate(([0], np.cumsum(buf == ord(sep), dtype=np.int64)))
    counts = seps[ends] - seps[starts] + 1
    length = ends - starts
    cr = np.zeros(length.shape, dtype=bool)
    cr[length > 0] = buf[ends[length > 0] - 1] == ord("\r")
    filled = (length - cr) > 0
    index = np.flatnonzero(filled)
    return counts[index], index


#: A line the ``csv`` module reads after a CSV line: found inside a field, that field was open.
_AFTER = "\ue000distshap"


def _quoted_fields(line: str, sep: str) -> int:
    """Fields of one line with quote characters (-1: it leaves a quoted field open; -2: the
    ``csv`` module cannot read it)."""
    try:
        fields = next(csv.reader([line, _AFTER], delimiter=sep), [])
    except csv.Error:
        return -2
    return -1 if any(_AFTER in field for field in fields) else len(fields)


def _check_fields(data: bytes, sep: str, width: int, path: str, block_start: int) -> np.ndarray:
    """Refuse a line of ``data`` without ``width`` fields; return the non-blank lines' indices."""
    counts, lines = _field_counts(data, sep)
    bad = np.flatnonzero(counts != width)
    if bad.size:
        k = int(bad[0])
        line = _line_number(path, block_start, int(lines[k]))
        if counts[k] == -1:
            raise InputError(
                f"{path!r} line {line} opens a quoted field it does not close: a field holds a "
                "line break, and rows are read one a line; remove line breaks inside fields"
            )
        if counts[k] < 0:
            raise InputError(
                f"{path!r} line {line} cannot be read as CSV (a carriage return inside a field?): "
                "remove line breaks inside fields"
            )
        what = "fewer" if counts[k] < width else "more"
        raise InputError(
            f"{path!r} line {line} has {int(counts[k])} fields, {what} than the header's "
            f"{width}: every row needs one field per column (write an empty field for a "
            "missing value, e.g. '1.5,,2')"
        )
    return lines


def _parse_block(path: str, offset: int, length: int, sep: str, meta: Any, text: list[str]) -> Any:
    """One block -> a pandas DataFrame with ``meta``'s columns (runs in a Dask task)."""
    import pandas as pd

    start, data = _read_block(path, offset, length)
    block_start = start if offset >= 0 else -1
    lines = _check_fields(data, sep, len(meta.columns), path, block_start)
    if not lines.size:
        return meta.copy()
    frame = pd.read_csv(
        _bytes_io.BytesIO(data),
        sep=sep,
        header=None,
        names=list(meta.columns),
        index_col=False,
        **_text(meta.columns, text),
    )
    frame = _as_float(frame)
    for name in meta.columns:
        _check_numeric(frame[name], meta.dtypes[name], name, path, block_start, lines)
    return frame


def _check_numeric(
    column: Any, expected: Any, name: Any, path: str, block_start: int, lines: np.ndarray
) -> None:
    """A column whose first rows are numbers must hold numbers (or be empty) in every block."""
    import pandas as pd
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    if not is_numeric_dtype(expected) or is_bool_dtype(expected):
        return
    if is_numeric_dtype(column.dtype):
        return
    parsed = pd.to_numeric(column, errors="coerce")
    wrong = np.flatnonzero(parsed.isna().to_numpy() & column.notna().to_numpy())
    if not wrong.size:
        return
    row = int(wrong[0])
    line = _line_number(path, block_start, int(lines[row]))
    raise InputError(
        f"{path!r} line {line}: column {name!r} holds {column.iloc[row]!r}, not a number (its "
        "first rows are numbers): write numbers, or an empty field for a missing value"
    )
