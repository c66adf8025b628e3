"""SHAP values of Dask arrays and DataFrames: row chunks through the single-device path.

:func:`explain_dask` validates the call once on the client (a :class:`~distshap.request.Request`,
its backend resolved from the chunk kind), ships the model and any background once per client
and digest (:mod:`distshap.cluster.shipping`: recoverable tasks) and maps the request over the
row chunks (:func:`distshap.cluster.graph.map_rows`: balanced over the workers, each task inside
the client's configuration). Each chunk (one column chunk; a DataFrame partition becomes a
block of the model's raw values, float64 for models that compare in float64) runs
:func:`distshap.dispatch.run_request` on its worker. The result is a lazy Dask array, chunked
like the rows of ``X``, float32, with chunks of ``X``'s array type (NumPy in, NumPy out; CuPy
in, CuPy out). Rows are computed one by one in a fixed order, so the values do not depend on the
chunking or the number of workers. Labels ``y`` for ``model_output="log_loss"`` are chunked like
the rows and travel with each row chunk.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from typing import Any

import dask.array as da
import numpy as np
from dask.array.utils import meta_from_array

from distshap import kernels
from distshap.cluster.graph import InConfig, map_rows, unique_name
from distshap.cluster.shipping import _get_client, model_future
from distshap.cluster.staging import run_host_rows, staged_blocks
from distshap.cluster.watch import result_of, wait_for
from distshap.dispatch import run_request
from distshap.frames import select_model_columns
from distshap.inputs import is_cupy, model_matrix
from distshap.interventional import check_labels
from distshap.plan.config import get_config
from distshap.request import Request, make_request

__all__ = ["MAX_OUTPUT_CHUNK_BYTES", "compute", "explain_dask", "warm_up"]

#: Largest output chunk (bytes) of an interaction result; bigger row chunks are split.
MAX_OUTPUT_CHUNK_BYTES = 1 << 30


def _is_dask_frame(X: Any) -> bool:
    if "dask.dataframe" not in sys.modules:  # a dask DataFrame cannot exist without it
        return False
    import dask.dataframe as dd

    return isinstance(X, (dd.DataFrame, dd.Series))


def _frame_block(partition: Any, packed: Any) -> np.ndarray:
    """A pandas partition -> the model's raw feature values (runs on a worker)."""
    return model_matrix(partition, packed, allow_empty=True)


def _frame_rows(X: Any, packed: Any, model: Any, client: Any) -> da.Array:
    """A dask DataFrame -> a dask array of the model's raw values, with known row chunks.

    The in-memory rules (column selection by name, category columns, dtypes) are checked on the
    frame's meta before anything runs; the row count of each partition is then computed.
    """
    import dask.dataframe as dd
    import pandas as pd

    F = packed.num_features
    if isinstance(X, dd.Series):
        raise ValueError(
            f"X is a 1-D dask Series: pass a DataFrame with one column per feature ({F}), "
            "e.g. s.to_frame()"
        )
    X = X[select_model_columns(X, F, packed.feature_names, packed.encoding.name_style)]
    for column in X.columns:
        if isinstance(X.dtypes[column], pd.CategoricalDtype) and not X[column].cat.known:
            raise ValueError(
                f"column {column!r} has unknown categories, so its codes may differ between "
                "partitions: call X = X.categorize() (or X[col].cat.as_known()) first"
            )
    model_matrix(X._meta, packed, allow_empty=True)  # the same errors as for a pandas frame
    lengths = tuple(int(n) for n in client.compute(X.map_partitions(len), sync=True))
    meta = np.empty((0, F), dtype=packed.encoding.input_dtype)
    values = X.map_partitions(
        _frame_block,
        model,
        meta=meta,
        enforce_metadata=False,
        token=unique_name("distshap-rows"),
    )
    return da.Array(values.dask, values.name, (lengths, (F,)), meta=meta)


def _chunk_kind(meta: Any) -> str:
    """``"numpy"`` or ``"cupy"`` from a dask array's meta; TypeError otherwise."""
    if isinstance(meta, np.ndarray) and type(meta) is np.ndarray:
        return "numpy"
    if is_cupy(meta):
        return "cupy"
    raise TypeError(
        f"X has chunks of type {type(meta).__module__}.{type(meta).__name__}: distshap "
        "explains NumPy or CuPy chunks; convert them, e.g. X.map_blocks(np.asarray)"
    )


def _rows_array(X: Any, packed: Any, model: Any, client: Any) -> tuple[da.Array, str]:
    """Validate ``X`` -> known row chunks, one column chunk.

    Nothing is computed but the row counts of a DataFrame's partitions, or of an array's
    chunks where they are unknown (the output chunks and interaction splits need them).
    """
    F = packed.num_features
    if _is_dask_frame(X):
        X = _frame_rows(X, packed, model, client)
    elif not isinstance(X, da.Array):
        raise TypeError(
            f"X is a {type(X).__name__}: explain_dask takes a dask.array.Array or a "
            "dask.dataframe.DataFrame (use the single-device backends for in-memory data)"
        )
    kind = _chunk_kind(X._meta)
    if X.ndim != 2:
        raise ValueError(
            f"X has {X.ndim} dimension(s), shape {X.shape}: pass a 2-D array of shape "
            f"(n_rows, {F}), e.g. X.reshape(-1, {F})"
        )
    if X.shape[1] != F:
        raise ValueError(
            f"X has {X.shape[1]} columns but the model has {F} features: pass the columns "
            "the model was trained on"
        )
    model_matrix(np.empty_like(X._meta, shape=(0, F)), packed, allow_empty=True)  # dtype
    if any(math.isnan(size) for size in X.chunks[0]):  # e.g. frame.to_dask_array()
        import dask

        first_columns = X.to_delayed()[:, 0]
        lengths = client.compute([dask.delayed(len)(block) for block in first_columns], sync=True)
        X = da.Array(X.dask, X.name, (tuple(lengths), X.chunks[1]), meta=X._meta)
    if X.numblocks[1] != 1:
        X = X.rechunk({1: -1})
    return X, kind


def _block_values(
    block: Any,
    packed: Any,
    request: Request,
    background: Any = None,
    converted: bool = False,
    labels: Any = None,
    row_offset: int = 0,
    block_info: dict | None = None,
) -> Any:
    """One row chunk -> float32 values of ``request``, same array type as the chunk.

    Runs on a worker (``request.backend`` ``"auto"``: its own device decides). The request
    travels without its background, which is a recoverable task of its own
    (:func:`~distshap.cluster.shipping.model_future`) handed in as ``background``.
    ``converted``: the block holds the model's values already (a DataFrame partition's,
    :func:`_frame_block`); else they are taken here (:func:`~distshap.inputs.model_matrix`),
    once. ``labels`` is the chunk's ``(n, 1)`` block of ``y`` (or None). ``row_offset`` + the
    block's position is the row number of its first row (for error messages). Device work is
    finished before it returns (the result is synchronised, or copied to the host for NumPy
    chunks), so task timings are real.
    """
    n = block.shape[0]
    width = packed.num_features + 1
    shape = (n, packed.num_groups, width) + ((width,) if request.interactions else ())
    if n == 0:
        return meta_from_array(block, ndim=len(shape), dtype=np.float32).reshape(shape)
    if background is not None:
        request = dataclasses.replace(request, background=background)
    first_row = row_offset + (block_info[0]["array-location"][0][0] if block_info else 0)
    raw = block if converted else model_matrix(block, packed, allow_empty=True)
    y = check_labels(None if labels is None else labels[:, 0], n, request.transform)
    if not is_cupy(raw) and staged_blocks(n, request.backend):  # copies behind the kernels
        out = run_host_rows(packed, raw, request, y, first_row)
    else:
        out = run_request(packed, raw, request, y, first_row)
    if is_cupy(out):
        import cupy

        cupy.cuda.Device().synchronize()  # a launch returns at once: finish before returning
    out = out.astype(np.float32, copy=False)
    if out.shape != shape:
        raise RuntimeError(
            f"the kernel returned shape {out.shape} for a block of {n} rows; expected "
            f"{shape} (a distshap bug: please report it)"
        )
    return out


def _limit_output_chunks(X: da.Array, bytes_per_row: int) -> da.Array:
    """Split row chunks whose output would exceed :data:`MAX_OUTPUT_CHUNK_BYTES`.

    Interaction values grow as (F+1)**2 per row (``G (F+1)**2 * 4`` bytes),
    so a row chunk sized for the input can produce an output chunk no worker can hold.
    """
    rows = max(1, MAX_OUTPUT_CHUNK_BYTES // bytes_per_row)
    if max(X.chunks[0], default=0) <= rows:
        return X
    split = []
    for size in X.chunks[0]:
        split.extend([rows] * (size // rows) + ([size % rows] if size % rows else []))
    return X.rechunk({0: tuple(split)})


def _check_backend(backend: str, kind: str) -> None:
    """What the client can tell: the name, and CuPy chunks with ``"cpu"``.

    Workers resolve ``backend`` themselves (a client need not have a GPU to send work to GPU
    workers); CuPy chunks mean this process has CuPy, and :func:`~distshap.kernels.resolve_backend`
    then checks all.
    """
    if backend not in kernels.BACKENDS or kind == "cupy":
        kernels.resolve_backend(backend, cupy_data=kind == "cupy")


def _labels_array(y: Any, X: da.Array, transform: int) -> da.Array:
    """``y`` (n,) -> a dask array ``(n, 1)`` chunked like the rows of ``X``.

    In-memory labels are checked here (:func:`~distshap.interventional.check_labels`, before
    any chunk runs) and become in-memory chunks (no task of their own: each travels inside its
    rows' task); a Dask array's are checked chunk by chunk on the workers.
    """
    if _is_dask_frame(y):
        y = y.to_dask_array(lengths=True)
    elif not isinstance(y, da.Array):
        y = np.asarray(y)
        if y.ndim == 1 and y.shape[0] == X.shape[0] and not math.isnan(X.shape[0]):
            y = check_labels(y, X.shape[0], transform)
            return da.from_array(y.reshape(-1, 1), chunks=(X.chunks[0], 1))
    if y.ndim != 1 or (not math.isnan(y.shape[0]) and y.shape[0] != X.shape[0]):
        raise ValueError(
            f"y has shape {y.shape} but X has {X.shape[0]:,} rows: pass one label per row, "
            "a 1-D array (a Dask array, Series or in-memory array)"
        )
    if any(math.isnan(c) for c in y.chunks[0]):
        raise ValueError("y has unknown chunk sizes: pass y.compute_chunk_sizes() or an array")
    if y.chunks[0] != X.chunks[0]:
        y = y.rechunk({0: X.chunks[0]})
    return y.reshape(y.shape[0], 1)


def explain_dask(
    packed: Any,
    X: Any,
    interactions: bool = False,
    backend: str = "auto",
    client: Any = None,
    check_additivity: bool = True,
    background: Any = None,
    model_output: str = "raw",
    y: Any = None,
    balance: bool = True,
    method: str = "shap",
) -> da.Array:
    """SHAP values (or SHAP interaction values) of a Dask collection, lazily.

    Parameters
    ----------
    packed : distshap.packed.PackedModel
        The bin-packed model (sent to the cluster once per client and digest).
    X : dask.array.Array or dask.dataframe.DataFrame
        Rows to explain, ``(n, F)``; NumPy or CuPy chunks. Any column chunking (rechunked to
        one column chunk); row chunks are kept (unknown sizes are computed here). A DataFrame
        follows the rules of a pandas one (:func:`distshap.inputs.model_matrix`: columns by name,
        category columns only on the model's categorical features); its partitions' row counts
        are computed here.
    interactions : bool
        Interaction values ``(n, G, F+1, F+1)`` instead of SHAP values ``(n, G, F+1)``.
        ``method="banzhaf"``: Banzhaf (interaction) values instead (raw margin, unchecked).
    backend : {"auto", "cpu", "cuda"}
        Kernel run by the workers. ``"auto"``: CUDA for CuPy chunks, and for NumPy chunks on a
        worker that has a GPU; the CPU kernel otherwise.
    client : distributed.Client, optional
        Default: the current client (``distributed.get_client()``).
    check_additivity : bool
        Each chunk's rows must sum to the model's margin (an independent tree traversal on the
        worker); a chunk that does not fails the computation with ``AdditivityError``.
    background : distshap.interventional.Background, optional
        Interventional SHAP over these background rows (built for ``packed``); sent to the
        cluster once per client and digest, like the model.
    model_output : {"raw", "probability", "log_loss"}
        What interventional values explain (:func:`distshap.interventional.transform_id`).
    y : dask array, dask Series or array (n,), optional
        Labels for ``model_output="log_loss"``, one per row of ``X`` (rechunked like ``X``'s
        rows); ignored otherwise.
    balance : bool
        When ``X``'s chunks are already in the cluster's memory (persisted), give every worker
        an equal share of the rows whatever their placement (see the module docstring): the
        surplus rows of over-full workers are copied now, in the background, to the others.
        ``False``: every chunk runs where the scheduler puts it (usually where it sits).

    Returns
    -------
    dask.array.Array
        Lazy, float32, chunks ``(X.chunks[0], (G,), (F+1,)[, (F+1,)])`` (for interactions, row
        chunks whose output would exceed :data:`MAX_OUTPUT_CHUNK_BYTES` are split), chunk type of
        ``X`` (NumPy for DataFrames); pieces of a chunk that ran on several workers are merged
        back. Each call has its own graph name, so computing it always runs the kernels. Bias in
        the last column, margin space. The same bits whatever the placement or balancing.

    Raises
    ------
    ValueError
        ``X`` not 2-D, or its columns do not match the model's features; unknown ``backend``;
        no client.
    TypeError
        ``X`` neither a dask array nor DataFrame, chunks neither NumPy nor CuPy, non-numeric
        data, a category column on a numeric feature, or CuPy chunks with ``backend="cpu"``.
    """
    request = make_request(packed, interactions=interactions, backend=backend,
                           check=check_additivity, background=background,
                           model_output=model_output, cupy_data=None, method=method)  # fmt: skip
    if request.needs_labels and y is None:
        raise ValueError("model_output='log_loss' needs the label of each row: pass y (n_rows,)")
    client = _get_client(client)
    model = model_future(client, packed)
    converted = _is_dask_frame(X)  # its partitions become the model's values
    X, kind = _rows_array(X, packed, model, client)
    request = request.for_chunks(kind)
    shipped = None if background is None else model_future(client, background)
    groups, width = packed.num_groups, packed.num_features + 1
    split_rows = None
    if interactions:

        def split_rows(rows: da.Array) -> da.Array:
            return _limit_output_chunks(rows, groups * width * width * 4)

        tail = ((groups,), (width,), (width,))
    else:
        tail = ((groups,), (width,))
    labels = _labels_array(y, X, request.transform) if request.needs_labels else None
    meta = meta_from_array(X._meta, ndim=len(tail) + 1, dtype=np.float32)
    label = ("" if method == "shap" else "banzhaf-") + ("interactions" if interactions else "shap")
    if background is not None:
        label = "interventional-" + label
    travelling = dataclasses.replace(request, background=None)  # the background is `shipped`
    return map_rows(
        client, X, _block_values, (model, travelling, shipped, converted),
        tail, meta, unique_name(f"distshap-{label}"), balance,
        labels=labels, split_rows=split_rows,
    )  # fmt: skip


def compute(result: da.Array, client: Any = None, progress: bool = False) -> Any:
    """Compute a lazy result on the cluster and gather it, optionally with a progress bar.

    Parameters
    ----------
    result : dask.array.Array
        E.g. the output of :func:`explain_dask`.
    client : distributed.Client, optional
    progress : bool
        Show :func:`distributed.progress` (a text bar in a terminal, a widget in a notebook)
        while the chunks run.

    Returns
    -------
    numpy.ndarray or cupy.ndarray
        The whole result on the client. A failed task raises; a worker that dies mid-run has
        its chunks (and the model, when it held the only copy) rerun elsewhere, so a result is
        never partial; a job no worker can run fails
        (:func:`distshap.cluster.watch.wait_for`).
    """
    from distributed import progress as show_progress

    client = _get_client(client)
    persisted = client.persist(result)
    if progress:
        show_progress(persisted)
    wait_for(persisted, client)
    return result_of(client.compute(persisted), client)


def _warm_block(block: np.ndarray, packed: Any, request: Request) -> tuple[str, float]:
    """Run one tiny block; return the worker's address and the seconds it took."""
    import time

    from distributed import get_worker

    start = time.perf_counter()
    _block_values(block, packed, request, converted=True)  # the model's values: zeros are valid
    return get_worker().address, time.perf_counter() - start


def warm_up(
    client: Any, packed: Any, backend: str = "auto", interactions: bool = False, rows: int = 64
) -> dict[str, float]:
    """Compile the kernels and cache the model on every worker of ``client``.

    Runs one tiny NumPy block of zeros in the model's own values (valid for every model: its
    category columns hold codes) on each worker, inside the client's configuration, so the first
    real chunks pay no JIT or model-upload time. Call it before timing. A block whose worker is
    gone runs on another (a restarted worker has another address); no worker left for
    ``$DISTSHAP_NO_WORKER_TIMEOUT`` seconds raises :class:`~distshap.cluster.ClusterError`.

    Returns
    -------
    dict
        Worker address -> seconds its warm-up block took (JIT compilation included).
    """
    request = make_request(packed, interactions=interactions, backend=backend, cupy_data=None)
    model = model_future(client, packed)
    block = np.zeros((rows, packed.num_features), dtype=packed.encoding.input_dtype)
    warm = InConfig(_warm_block, get_config())  # the kernels the client's settings compile
    futures = [
        client.submit(
            warm,
            block,
            model,
            request,
            workers=[worker],
            allow_other_workers=True,
            pure=False,
        )
        for worker in client.ncores()
    ]
    wait_for(futures, client)
    return dict(client.gather(futures))
