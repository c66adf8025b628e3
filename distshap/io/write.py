"""Writing SHAP outputs so that no result is ever lost: checked first, staged, renamed last.

:func:`check_output` refuses an output that is an input, lies inside an input directory or
contains an input, and an existing output unless ``overwrite`` is given (and then only one
distshap could have written: a file of that format, or a Zarr array). Every writer stages its
output under a hidden temporary name in the same directory and renames it into place once it
is complete, so a failure (an exception, a full disk, a lost worker, Ctrl-C or SIGTERM) leaves
the previous output untouched and nothing under the output's name. A staged ``.npy`` gets its
header last, so a half-written one is not a NumPy file even if the process is killed; the
temporaries a killed run leaves are removed by the next write to the same output.
"""

from __future__ import annotations

import contextlib
import fnmatch
import io as _bytes_io
import os
import re
import shutil
import socket
import uuid
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from distshap.io.errors import InputError
from distshap.layouts import distinct_names

__all__ = [
    "check_output",
    "check_replaceable",
    "image_format",
    "output_columns",
    "output_format",
    "remove_stale",
    "save_figure",
    "staged_output",
    "write_array",
    "write_blocks",
    "write_dask",
]

_IMAGES = {".png": "png", ".svg": "svg", ".pdf": "pdf", ".jpg": "jpg", ".jpeg": "jpg"}
_MAGIC = {
    "npy": (b"\x93NUMPY",),
    "parquet": (b"PAR1",),
    "png": (b"\x89PNG\r\n\x1a\n",),
    "pdf": (b"%PDF",),
    "jpg": (b"\xff\xd8\xff",),
    "svg": (b"<?xml", b"<svg"),
}
_WHAT = {"npy": "a .npy file", "parquet": "a Parquet file", "zarr": "a Zarr array"}


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
    _check_parent(path)
    return fmt


def image_format(path: str) -> str:
    """``"png"``, ``"svg"``, ``"pdf"`` or ``"jpg"`` from the extension of ``path``."""
    ext = os.path.splitext(path.lower())[1]
    if ext not in _IMAGES:
        raise InputError(f"cannot tell the image format of {path!r}: use .png/.svg/.pdf")
    _check_parent(path)
    return _IMAGES[ext]


def _check_parent(path: str) -> None:
    parent = os.path.dirname(os.path.abspath(path.rstrip("/\\")))
    if not os.path.isdir(parent):
        raise InputError(f"the directory of OUT {path!r} does not exist: create {parent!r} first")


# ------------------------------------------------------------------------------------------
# what may be written where
# ------------------------------------------------------------------------------------------


def _inside(child: str, parent: str) -> bool:
    return child.startswith(parent.rstrip(os.sep) + os.sep)


def check_output(path: str, fmt: str, inputs: Iterable[str] = (), overwrite: bool = False) -> None:
    """Refuse to write ``path`` where it would lose data.

    Parameters
    ----------
    path : str
        The output.
    fmt : str
        Its format (:func:`output_format` or an image format).
    inputs : iterable of str
        What the run reads: files, input directories and globs (the data spec, its files, the
        model file).
    overwrite : bool
        Replace an existing output (``--overwrite``).

    Raises
    ------
    InputError
        ``path`` is an input, contains one (a directory holding an input), lies inside an input
        directory or matches an input glob (a later run would read it); or it exists and
        ``overwrite`` is false, or it exists but is not what distshap writes in ``fmt``.
    """
    out = os.path.realpath(path.rstrip("/\\") or path)
    for spec in inputs:
        _check_not_input(path, out, spec)
    if os.path.lexists(path.rstrip("/\\") or path):
        check_replaceable(path, fmt)
        if not overwrite:
            raise InputError(
                f"OUT {path!r} already exists: pass --overwrite to replace it (the old output "
                "stays until the new one is complete), or choose another name"
            )


def _check_not_input(path: str, out: str, spec: str) -> None:
    if any(ch in spec for ch in "*?[") and not os.path.exists(spec):
        if fnmatch.fnmatch(os.path.abspath(path), os.path.abspath(spec)):
            raise InputError(
                f"OUT {path!r} matches the input glob {spec!r}, so a later run would read it as "
                "input: write the output elsewhere"
            )
        return
    target = os.path.realpath(spec)
    if out == target:
        raise InputError(
            f"OUT {path!r} is the input {spec!r}: distshap never overwrites an input; write "
            "the output to another name"
        )
    if _inside(target, out):
        raise InputError(
            f"OUT {path!r} contains the input {spec!r}: distshap never deletes or replaces an "
            "input; write the output to another name"
        )
    if os.path.isdir(target) and _inside(out, target):
        raise InputError(
            f"OUT {path!r} is inside the input directory {spec!r}, so a later run would read it "
            "as input: write the output to another directory"
        )


def check_replaceable(path: str, fmt: str) -> None:
    """Refuse to replace ``path`` unless it is what distshap writes in ``fmt``.

    A regular file starting with the format's signature, or for Zarr a directory holding a
    Zarr array and nothing else, so that replacing it deletes nothing distshap did not write.
    """
    path = path.rstrip("/\\") or path
    what = _WHAT.get(fmt, f"a .{fmt} image")
    if os.path.islink(path):
        raise InputError(
            f"OUT {path!r} is a symbolic link: distshap replaces only {what} it could have "
            "written; remove the link or choose another name"
        )
    if fmt == "zarr":
        foreign = _foreign_zarr_entry(path)
        if foreign is not None:
            raise InputError(
                f"OUT {path!r} exists and is not a Zarr array ({foreign}): distshap deletes "
                "nothing it did not write; move it away or choose another name"
            )
        return
    head = b""
    if os.path.isfile(path):
        with open(path, "rb") as fh:
            head = fh.read(16)
    if not any(head.lstrip().startswith(magic) for magic in _MAGIC[fmt]):
        raise InputError(
            f"OUT {path!r} exists and is not {what}: distshap replaces only {what}, never "
            "another file; move it away or choose another name"
        )


_ZARR_META = {".zarray", ".zattrs", "zarr.json"}
_ZARR_CHUNK = re.compile(r"^(c|\d+(\.\d+)*)$")


def _foreign_zarr_entry(path: str) -> str | None:
    """Why ``path`` is not a Zarr array distshap may replace, or ``None`` when it is one."""
    if not os.path.isdir(path):
        return "not a directory"
    top = set(os.listdir(path))
    if not top & {".zarray", "zarr.json"}:
        return "no .zarray or zarr.json in it"
    for root, dirs, names in os.walk(path):
        for name in dirs + names:
            ok = _ZARR_CHUNK.match(name) or (root == path and name in _ZARR_META)
            if not ok or os.path.islink(os.path.join(root, name)):
                return f"it holds {os.path.relpath(os.path.join(root, name), path)!r}"
    return None


# ------------------------------------------------------------------------------------------
# staging: a temporary name beside the output, renamed into place on success
# ------------------------------------------------------------------------------------------

_HOST = re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname()) or "host"
_STAGED = re.compile(
    r"^\.(?P<base>.+)\.distshap-(?P<pid>\d+)-[0-9a-f]{8}-(?P<host>.+)\.(?P<kind>tmp|old)$"
)


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)


def remove_stale(path: str) -> list[str]:
    """Clean up after a killed run writing ``path``: returns the names removed or restored.

    Only names distshap stages (``.NAME.distshap-PID-TOKEN-HOST.tmp`` / ``.old``) of processes
    of this host that no longer run. A staged new output is removed; a previous output moved
    aside (``.old``) is put back when the new one never arrived, removed otherwise.
    """
    directory, base = os.path.split(os.path.abspath(path.rstrip("/\\") or path))
    done = []
    for name in sorted(os.listdir(directory)):
        m = _STAGED.match(name)
        if not m or m["base"] != base or m["host"] != _HOST or _pid_alive(int(m["pid"])):
            continue
        staged = os.path.join(directory, name)
        final = os.path.join(directory, base)
        if m["kind"] == "old" and not os.path.lexists(final):
            os.rename(staged, final)
        else:
            _remove(staged)
        done.append(name)
    return done


def _fsync_directory(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def staged_output(path: str, fmt: str, overwrite: bool = False) -> Iterator[str]:
    """Yield a temporary path beside ``path``; rename it to ``path`` when the block succeeds.

    On any exception (``KeyboardInterrupt`` and ``SystemExit`` too) the temporary is removed
    and ``path`` is left as it was. An existing ``path`` is replaced only with ``overwrite``
    and only when :func:`check_replaceable` accepts it; a Zarr directory is moved aside, the
    new one renamed into place, and the old one deleted last.
    """
    final = path.rstrip("/\\") or path
    directory, base = os.path.split(os.path.abspath(final))
    remove_stale(final)
    stem = os.path.join(directory, f".{base}.distshap-{os.getpid()}-{uuid.uuid4().hex[:8]}-{_HOST}")
    tmp = stem + ".tmp"
    try:
        yield tmp
        if not os.path.lexists(tmp):
            raise RuntimeError(
                f"nothing was written for {path!r} (a distshap bug: please report it)"
            )
        if os.path.lexists(final):
            if not overwrite:
                raise InputError(
                    f"OUT {path!r} appeared while distshap was writing it: pass --overwrite to "
                    "replace it, or choose another name"
                )
            check_replaceable(final, fmt)
        if os.path.isdir(tmp) and os.path.lexists(final):
            old = stem + ".old"
            os.rename(final, old)
            try:
                os.rename(tmp, final)
            except BaseException:
                os.rename(old, final)
                raise
            _remove(old)
        else:
            os.replace(tmp, final)
        _fsync_directory(directory)
    except OSError as err:
        _remove(tmp)
        if path in str(err):
            raise
        raise OSError(
            err.errno,
            f"writing OUT {path!r} failed ({err.strerror or err}); the previous output, if any, "
            "is untouched: free space or choose another directory",
        ) from err
    except BaseException:
        _remove(tmp)
        raise


# ------------------------------------------------------------------------------------------
# writers
# ------------------------------------------------------------------------------------------


def output_columns(feature_names: Sequence[str], num_groups: int) -> list[str]:
    """Parquet column names of SHAP values: features then ``"bias"``, per class when G > 1.

    ``["a", "b", "bias"]`` for one output; ``["a[class 0]", "b[class 0]", "bias[class 0]",
    "a[class 1]", ...]`` for ``num_groups`` classes (the row-major order of ``(G, F+1)``).
    Names are made distinct first (:func:`~distshap.layouts.distinct_names`): with a feature
    named ``bias`` the bias column is ``bias_1``; the class suffix keeps them distinct.
    """
    base = distinct_names([*feature_names, "bias"])
    if num_groups == 1:
        return base
    return [f"{name}[class {k}]" for k in range(num_groups) for name in base]


def _layout(num_groups: int, interactions: bool) -> str:
    dims = ["row"] + (["class"] if num_groups > 1 else []) + ["feature (bias last)"]
    if interactions:
        dims.append("feature (bias last)")
    return "(" + ", ".join(dims) + ")"


class _NpyWriter:
    """Streams float32 row blocks to a new ``.npy`` file; its header is written last.

    Until :meth:`finish`, the first bytes are zeros, so an unfinished file is not a NumPy file.
    """

    def __init__(self, path: str, shape: tuple[int, ...]) -> None:
        from numpy.lib.format import write_array_header_1_0

        buf = _bytes_io.BytesIO()
        write_array_header_1_0(buf, {"descr": "<f4", "fortran_order": False, "shape": shape})
        self.header = buf.getvalue()
        self.fh = open(path, "xb")
        self.fh.write(bytes(len(self.header)))

    def write(self, block: np.ndarray) -> None:
        data = np.ascontiguousarray(block, dtype="<f4")
        self.fh.write(data.reshape(-1).view(np.uint8))

    def finish(self) -> None:
        self.fh.seek(0)
        self.fh.write(self.header)
        self.fh.flush()
        os.fsync(self.fh.fileno())
        self.fh.close()

    def abort(self) -> None:
        self.fh.close()


class _ParquetWriter:
    """Streams float32 row blocks to a new Parquet file, one row group per block."""

    def __init__(self, path: str, columns: Sequence[str]) -> None:
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError as err:
            raise ImportError(
                "writing Parquet needs pyarrow: `pip install pyarrow` (or distshap[io])"
            ) from err
        self.pa, self.path, self.columns = pa, path, list(columns)
        schema = pa.schema([(c, pa.float32()) for c in self.columns])
        self.target = pq.ParquetWriter(path, schema)

    def write(self, block: np.ndarray) -> None:
        flat = np.asarray(block, dtype=np.float32).reshape(block.shape[0], -1)
        arrays = [self.pa.array(flat[:, j]) for j in range(flat.shape[1])]
        self.target.write_table(self.pa.Table.from_arrays(arrays, names=self.columns))

    def finish(self) -> None:
        self.target.close()
        with open(self.path, "rb+") as fh:
            os.fsync(fh.fileno())

    def abort(self) -> None:
        self.target.close()


def write_blocks(
    blocks: Iterable[np.ndarray],
    path: str,
    fmt: str,
    n_rows: int,
    tail: tuple[int, ...],
    columns: Sequence[str] = (),
    overwrite: bool = False,
) -> None:
    """Write row blocks (in row order, ``n_rows`` in all) to a ``.npy`` or Parquet file.

    Staged by :func:`staged_output`: ``path`` appears, complete, only if every block arrives.
    """
    if fmt not in ("npy", "parquet"):
        raise ValueError(f"write_blocks writes 'npy' or 'parquet', not {fmt!r}")
    with staged_output(path, fmt, overwrite) as tmp:
        writer: Any = (
            _NpyWriter(tmp, (n_rows, *tail)) if fmt == "npy" else _ParquetWriter(tmp, columns)
        )
        rows = 0
        try:
            for block in blocks:
                block = np.asarray(block)
                if block.shape[0]:
                    writer.write(block)
                    rows += block.shape[0]
            if rows != n_rows:
                raise RuntimeError(f"got {rows} rows for {path!r} but expected {n_rows}")
        except BaseException:
            writer.abort()
            raise
        writer.finish()


def _zarr_attrs(
    feature_names: Sequence[str],
    expected_value: Any,
    num_groups: int,
    interactions: bool,
    space: str = "margin (raw score)",
) -> dict:
    ev = None  # None: no one bias (a log loss's depends on each row's label)
    if expected_value is not None:
        ev = np.atleast_1d(np.asarray(expected_value, dtype=np.float64)).tolist()
    return {
        "feature_names": distinct_names(feature_names),
        "expected_value": ev,
        "layout": _layout(num_groups, interactions),
        "values": "SHAP interaction values" if interactions else "SHAP values",
        "space": space,
        "producer": "distshap",
    }


def _require_zarr() -> Any:
    try:
        import zarr
    except ImportError as err:
        raise ImportError(
            "writing .zarr needs the zarr package: `pip install zarr` (or distshap[io]), "
            "or write .npy / .parquet instead"
        ) from err
    return zarr


def _to_zarr(array: Any, tmp: str, attrs: dict, compute: Any) -> None:
    """Write a dask ``array`` to a new Zarr array at ``tmp``; ``compute`` runs the graph."""
    import dask.array as da

    zarr = _require_zarr()
    compute(da.to_zarr(array, tmp, overwrite=False, compute=False))
    zarr.open_array(tmp, mode="r+").attrs.update(attrs)


def write_array(
    values: np.ndarray,
    path: str,
    fmt: str,
    feature_names: Sequence[str],
    num_groups: int,
    expected_value: Any = None,
    interactions: bool = False,
    block_rows: int = 65536,
    overwrite: bool = False,
    space: str = "margin (raw score)",
) -> None:
    """Write in-memory SHAP (interaction) values in the layout of :mod:`distshap.io`.

    Staged and renamed into place (:func:`staged_output`); an existing ``path`` is replaced
    only with ``overwrite``.
    """
    values = np.asarray(values, dtype=np.float32)
    n, tail = values.shape[0], values.shape[1:]
    if fmt == "zarr":
        import dask.array as da

        attrs = _zarr_attrs(feature_names, expected_value, num_groups, interactions, space)
        chunks = (min(max(n, 1), block_rows),) + tail
        with staged_output(path, fmt, overwrite) as tmp:
            _to_zarr(da.from_array(values, chunks=chunks), tmp, attrs, lambda s: s.compute())
        return
    columns = output_columns(feature_names, num_groups) if fmt == "parquet" else ()
    blocks = (values[i : i + block_rows] for i in range(0, n, block_rows))
    write_blocks(blocks, path, fmt, n, tail, columns, overwrite)


def write_dask(
    result: Any,
    path: str,
    fmt: str,
    feature_names: Sequence[str],
    num_groups: int,
    client: Any,
    expected_value: Any = None,
    interactions: bool = False,
    overwrite: bool = False,
    space: str = "margin (raw score)",
) -> int:
    """Write a *persisted* Dask result; returns the number of rows.

    ``.npy`` / Parquet: the client gathers one row chunk at a time, in row order. Zarr: the
    workers write their chunks in parallel (rechunked to equal row chunks, as Zarr needs).
    Staged and renamed into place like :func:`write_array`.
    """
    if any(np.isnan(c) for c in result.chunks[0]):
        result = result.compute_chunk_sizes()  # cheap: the blocks are in cluster memory
    n, tail = int(result.shape[0]), tuple(int(s) for s in result.shape[1:])
    if fmt == "zarr":
        _require_zarr()
        sizes = result.chunks[0]
        if len(set(sizes[:-1])) > 1 or (len(sizes) > 1 and sizes[-1] > sizes[0]):
            result = result.rechunk({0: max(sizes)})
        attrs = _zarr_attrs(feature_names, expected_value, num_groups, interactions, space)
        with staged_output(path, fmt, overwrite) as tmp:
            _to_zarr(result, tmp, attrs, lambda s: client.compute(s).result())
        return n
    columns = output_columns(feature_names, num_groups) if fmt == "parquet" else ()
    blocks = (client.compute(result.blocks[i]).result() for i in range(result.numblocks[0]))
    write_blocks(blocks, path, fmt, n, tail, columns, overwrite)
    return n


def save_figure(fig: Any, path: str, fmt: str, overwrite: bool = False, **kwargs: Any) -> None:
    """``fig.savefig(path, ...)``, staged and renamed into place like the other outputs."""
    with staged_output(path, fmt, overwrite) as tmp:
        fig.savefig(tmp, format="jpeg" if fmt == "jpg" else fmt, **kwargs)
