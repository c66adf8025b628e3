"""Writing SHAP outputs so that no result is ever lost: checked first, staged, renamed last.

The checks and the staging are :mod:`distshap.io.staging`'s; here are the writers of ``.npy``,
Parquet, Zarr and figures, each inside :func:`~distshap.io.staging.staged_output`. A staged
``.npy`` gets its header last, so a half-written one is not a NumPy file even if the process is
killed.
"""

from __future__ import annotations

import contextlib
import io as _bytes_io
import os
import time
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from distshap.cluster.watch import result_of
from distshap.io.staging import require_zarr, staged_output
from distshap.layouts import distinct_names

__all__ = [
    "STOP_WAIT_SECONDS",
    "output_columns",
    "save_figure",
    "write_array",
    "write_blocks",
    "write_dask",
]


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


def _to_zarr(array: Any, tmp: str, attrs: dict, compute: Any) -> None:
    """Write a dask ``array`` to a new Zarr array at ``tmp``; ``compute`` runs the graph."""
    import dask.array as da

    zarr = require_zarr()
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
        require_zarr()
        sizes = result.chunks[0]
        if len(set(sizes[:-1])) > 1 or (len(sizes) > 1 and sizes[-1] > sizes[0]):
            result = result.rechunk({0: max(sizes)})
        attrs = _zarr_attrs(feature_names, expected_value, num_groups, interactions, space)
        with staged_output(path, fmt, overwrite) as tmp:
            _to_zarr(result, tmp, attrs, _stoppable(client))
        return n
    columns = output_columns(feature_names, num_groups) if fmt == "parquet" else ()
    blocks = (
        result_of(client.compute(result.blocks[i]), client) for i in range(result.numblocks[0])
    )
    write_blocks(blocks, path, fmt, n, tail, columns, overwrite)
    return n


#: Seconds a stopped Zarr write waits for the tasks its workers are running to end.
STOP_WAIT_SECONDS = 30.0


def _stoppable(client: Any) -> Any:
    """``compute`` of a graph on ``client`` that, stopped (an error, Ctrl-C, SIGTERM), cancels
    the graph's tasks and waits (at most :data:`STOP_WAIT_SECONDS`) for the ones the workers
    are running: a running chunk write would otherwise recreate the staged store removed."""

    def compute(graph: Any) -> Any:
        future = client.compute(graph)
        try:
            return result_of(future, client)
        except BaseException:
            names = {_key_name(key) for key in graph.__dask_graph__()}
            with contextlib.suppress(Exception):
                client.cancel(future, force=True)
                deadline = time.monotonic() + STOP_WAIT_SECONDS
                while time.monotonic() < deadline and sum(client.run(_busy, names).values()):
                    time.sleep(0.05)
            raise

    return compute


def _key_name(key: Any) -> str:
    return str(key[0] if isinstance(key, tuple) else key)


def _busy(names: set[str], dask_worker: Any = None) -> int:
    """Tasks of the layers ``names`` a worker is running (cancelled ones still run)."""
    running = ("executing", "long-running", "cancelled", "resumed")
    tasks = dask_worker.state.tasks.values()
    return sum(1 for ts in tasks if ts.state in running and _key_name(ts.key) in names)


def save_figure(fig: Any, path: str, fmt: str, overwrite: bool = False, **kwargs: Any) -> None:
    """``fig.savefig(path, ...)``, staged and renamed into place like the other outputs."""
    with staged_output(path, fmt, overwrite) as tmp:
        fig.savefig(tmp, format="jpeg" if fmt == "jpg" else fmt, **kwargs)
