"""SHAP values of Dask arrays and DataFrames: row chunks through the single-device kernels.

The packed model enters the cluster once per (client, model digest) as a *task* whose input,
the pickled model, the scheduler keeps: a worker that dies takes its copy with it, and the
scheduler recomputes the model on a survivor (or on the worker its nanny restarts) like any
lost result, so the job finishes. (A scattered model has no task to rerun: the job would fail.)
Every later call reuses the task's Future; each row chunk's task depends on it, so a worker
gets the model once, and the CUDA backend keeps its device arrays by digest. The price is one
pickled copy of the model on the scheduler while its Future is held; no call ships it again.

Each row chunk (one column chunk; a DataFrame partition becomes a block of the model's raw
values, float64 for models that compare in float64) goes through
:func:`distshap.inputs.prepare_rows` and the kernels of the backend the worker resolves
(:func:`distshap.kernels.resolve_backend`: ``"auto"`` follows the worker's own GPU). The
result is a lazy Dask array, chunked like the rows of ``X``, float32, with chunks of ``X``'s
array type (NumPy in, NumPy out; CuPy in, CuPy out). Rows are computed one by one in a fixed
order, so the values do not depend on the chunking or the number of workers.

Interventional SHAP: the :class:`~distshap.interventional.Background` enters the cluster like
the model (a recoverable task of its pickled bytes, one per client and digest, so each worker
holds one copy); labels ``y`` for ``model_output="log_loss"`` are chunked like the rows and
travel with each row chunk.
"""

from __future__ import annotations

import math
import pickle
import sys
import threading
import uuid
import warnings
import weakref
from typing import Any

import dask.array as da
import numpy as np
from dask.array.utils import meta_from_array

from distshap import kernels
from distshap.dispatch import explain_rows
from distshap.inputs import is_cupy, model_matrix, prepare_rows, select_model_columns
from distshap.interventional import check_background, transform_id
from distshap.kernels.interventional_math import LOG_LOSS, RAW

__all__ = [
    "MAX_OUTPUT_CHUNK_BYTES",
    "clear_model_cache",
    "compute",
    "explain_dask",
    "model_future",
    "warm_up",
]

#: Largest output chunk (bytes) of an interaction result; bigger row chunks are split.
MAX_OUTPUT_CHUNK_BYTES = 1 << 30

# client -> {digest: Future of the model task}; a Future refers to its client, so entries of
# closed clients are removed on the next call (or by clear_model_cache), not by the weak key.
_MODEL_FUTURES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_CACHE_LOCK = threading.Lock()
# Future states in which the model is, or is being recomputed, on the cluster
_LIVE = ("pending", "finished", "lost")


def _get_client(client: Any = None) -> Any:
    if client is not None:
        return client
    from distributed import get_client

    try:
        return get_client()
    except ValueError as err:
        raise ValueError(
            "explaining a Dask collection needs a Dask client: start one with "
            "`client = distshap.start_cluster()` (or distributed.Client(...)) and pass "
            "client=client"
        ) from err


def _unpickle_model(blob: bytes) -> Any:
    """The model task: the scheduler holds ``blob`` as its input, so it can run it again."""
    return pickle.loads(blob)


def model_future(client: Any, packed: Any) -> Any:
    """The Future of ``packed`` on ``client``'s cluster, submitted on first use only.

    The model is a task (unpickling its bytes, which the scheduler keeps), not scattered data:
    when the worker holding it dies, the scheduler reruns the task elsewhere.

    Parameters
    ----------
    client : distributed.Client
    packed : distshap.packed.PackedModel
        Must carry a non-empty ``digest`` (as :func:`distshap.packed.build_packed_model` sets).

    Returns
    -------
    distributed.Future
        Of the model. A Future that erred or was cancelled is replaced by a fresh task.
    """
    digest = getattr(packed, "digest", "")
    if not digest:
        raise ValueError(
            "the packed model has no digest, so workers cannot cache it: build it with "
            "distshap.packed.build_packed_model(paths)"
        )
    with _CACHE_LOCK:
        # a cached Future holds its client, so closed clients are dropped here explicitly
        for stale in [c for c in _MODEL_FUTURES if c.status in ("closed", "closing")]:
            del _MODEL_FUTURES[stale]
        per_client = _MODEL_FUTURES.setdefault(client, {})
        future = per_client.get(digest)
        if future is not None and future.status in _LIVE:
            return future
        blob = pickle.dumps(packed, protocol=pickle.HIGHEST_PROTOCOL)
        with warnings.catch_warnings():
            # the model is sent once per client and digest, not with every graph
            warnings.filterwarnings("ignore", message="Sending large graph", category=UserWarning)
            future = client.submit(
                _unpickle_model, blob, key=f"distshap-model-{digest[:32]}-{uuid.uuid4().hex[:8]}"
            )
        per_client[digest] = future
        return future


def clear_model_cache(client: Any = None) -> None:
    """Forget the model Futures of ``client`` (of every client when ``None``).

    The cluster frees a model's memory (and the scheduler its pickled copy) once no Future of
    it is held.
    """
    with _CACHE_LOCK:
        if client is None:
            _MODEL_FUTURES.clear()
        else:
            _MODEL_FUTURES.pop(client, None)


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
        token=f"distshap-rows-{uuid.uuid4().hex}",
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
    prepare_rows(np.empty_like(X._meta, shape=(0, F)), packed, allow_empty=True)  # dtype
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
    interactions: bool,
    backend: str,
    check: bool = True,
    background: Any = None,
    model_output: str = "raw",
    labels: Any = None,
    block_info: dict | None = None,
) -> Any:
    """One row chunk -> float32 SHAP (or interaction) values, same array type as the chunk.

    Runs on a worker, which resolves ``backend`` (``"auto"``: its own GPU decides). With
    ``check``, the chunk's rows must sum to the model's margin (:mod:`distshap.additivity`).
    With a ``background``, interventional values of ``model_output``; ``labels`` is the chunk's
    ``(n, 1)`` block of ``y`` (or None). Device work is finished before it returns (the result
    is synchronised, or copied to the host for NumPy chunks), so task timings are real.
    """
    n = block.shape[0]
    width = packed.num_features + 1
    shape = (n, packed.num_groups, width) + ((width,) if interactions else ())
    if n == 0:
        return meta_from_array(block, ndim=len(shape), dtype=np.float32).reshape(shape)
    first_row = block_info[0]["array-location"][0][0] if block_info else 0
    y = None if labels is None else labels[:, 0]
    out = explain_rows(packed, block, interactions, backend, check, first_row, allow_empty=True,
                       background=background, model_output=model_output, y=y)  # fmt: skip
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

    Interaction values grow as (F+1)**2 per row (fashion_mnist with 10 classes: 25 MB a row),
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


def _labels_array(y: Any, X: da.Array) -> da.Array:
    """``y`` (n,) -> a dask array ``(n, 1)`` chunked like the rows of ``X``."""
    if _is_dask_frame(y):
        y = y.to_dask_array(lengths=True)
    elif not isinstance(y, da.Array):
        y = np.asarray(y)
        if y.ndim == 1 and y.shape[0] == X.shape[0]:
            y = da.from_array(y, chunks=(X.chunks[0],))
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
) -> da.Array:
    """SHAP values (or SHAP interaction values) of a Dask collection, lazily.

    Parameters
    ----------
    packed : distshap.packed.PackedModel
        The bin-packed model (sent to the cluster once per client and digest).
    X : dask.array.Array or dask.dataframe.DataFrame
        Rows to explain, ``(n, F)``; NumPy or CuPy chunks. Any column chunking (rechunked to
        one column chunk); row chunks are kept (unknown sizes are computed here). A DataFrame
        follows the rules of a pandas one (:func:`distshap.inputs.prepare_rows`: columns by name,
        category columns only on the model's categorical features); its partitions' row counts
        are computed here.
    interactions : bool
        Interaction values ``(n, G, F+1, F+1)`` instead of SHAP values ``(n, G, F+1)``.
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

    Returns
    -------
    dask.array.Array
        Lazy, float32, chunks ``(X.chunks[0], (G,), (F+1,)[, (F+1,)])`` (for interactions, row
        chunks whose output would exceed :data:`MAX_OUTPUT_CHUNK_BYTES` are split), chunk type of
        ``X`` (NumPy for DataFrames). Each call has its own graph name, so computing it always
        runs the kernels. Bias in the last column, margin space.

    Raises
    ------
    ValueError
        ``X`` not 2-D, or its columns do not match the model's features; unknown ``backend``;
        no client.
    TypeError
        ``X`` neither a dask array nor DataFrame, chunks neither NumPy nor CuPy, non-numeric
        data, a category column on a numeric feature, or CuPy chunks with ``backend="cpu"``.
    """
    _check_backend(backend, "numpy")  # an unknown name, before anything is sent
    transform = RAW
    if background is not None:  # what can be refused before anything is sent
        check_background(background, packed)
        transform = transform_id(model_output, packed)
        if interactions and transform != RAW:
            raise ValueError(
                "interaction values explain the raw margin only, not "
                f"model_output={model_output!r}: use model_output='raw'"
            )
        if transform == LOG_LOSS and y is None:
            raise ValueError(
                "model_output='log_loss' needs the label of each row: pass y (n_rows,)"
            )
    elif model_output != "raw":
        raise ValueError(
            f"model_output={model_output!r} is defined for interventional SHAP only: pass "
            "background data, or use model_output='raw'"
        )
    client = _get_client(client)
    model = model_future(client, packed)
    X, kind = _rows_array(X, packed, model, client)
    _check_backend(backend, kind)
    shipped = None if background is None else model_future(client, background)

    groups, width = packed.num_groups, packed.num_features + 1
    if interactions:
        X = _limit_output_chunks(X, groups * width * width * 4)
        chunks = (X.chunks[0], (groups,), (width,), (width,))
        new_axis = [2, 3]
    else:
        chunks = (X.chunks[0], (groups,), (width,))
        new_axis = [2]
    labels = _labels_array(y, X) if transform == LOG_LOSS else None
    meta = meta_from_array(X._meta, ndim=len(chunks), dtype=np.float32)
    label = "interactions" if interactions else "shap"
    if background is not None:
        label = "interventional-" + label
    return da.map_blocks(
        _block_values,
        X,
        model,
        interactions,
        backend,
        check_additivity,
        shipped,
        model_output,
        labels,
        chunks=chunks,
        new_axis=new_axis,
        dtype=np.float32,
        meta=meta,
        name=f"distshap-{label}-{uuid.uuid4().hex}",
    )


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
        never partial.
    """
    from distributed import progress as show_progress
    from distributed import wait

    client = _get_client(client)
    persisted = client.persist(result)
    if progress:
        show_progress(persisted)
    wait(persisted)
    return client.compute(persisted).result()


def _warm_block(
    block: np.ndarray, packed: Any, interactions: bool, backend: str
) -> tuple[str, float]:
    """Run one tiny block; return the worker's address and the seconds it took."""
    import time

    from distributed import get_worker

    start = time.perf_counter()
    _block_values(block, packed, interactions, backend)
    return get_worker().address, time.perf_counter() - start


def warm_up(
    client: Any, packed: Any, backend: str = "auto", interactions: bool = False, rows: int = 64
) -> dict[str, float]:
    """Compile the kernels and cache the model on every worker of ``client``.

    Runs one tiny NumPy block on each worker (pinned there), so the first real chunks pay no
    JIT or model-upload time. Call it before timing.

    Returns
    -------
    dict
        Worker address -> seconds its warm-up block took (JIT compilation included).
    """
    _check_backend(backend, "numpy")
    model = model_future(client, packed)
    block = np.zeros((rows, packed.num_features), dtype=np.float32)
    futures = [
        client.submit(
            _warm_block,
            block,
            model,
            interactions,
            backend,
            workers=[worker],
            allow_other_workers=False,
            pure=False,
        )
        for worker in client.ncores()
    ]
    return dict(client.gather(futures))
