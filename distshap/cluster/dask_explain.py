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
from collections.abc import Sequence
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
    "balance_plan",
    "clear_model_cache",
    "compute",
    "explain_dask",
    "model_future",
    "warm_up",
    "worker_copy",
]

#: Largest output chunk (bytes) of an interaction result; bigger row chunks are split.
MAX_OUTPUT_CHUNK_BYTES = 1 << 30

# client -> {digest: Future of the model task}; a Future refers to its client, so entries of
# closed clients are removed on the next call (or by clear_model_cache), not by the weak key.
_MODEL_FUTURES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# client -> {(key of a shipped Future, worker address): Future of its copy pinned there}
_WORKER_COPIES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
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
        for cache in (_MODEL_FUTURES, _WORKER_COPIES):
            for stale in [c for c in cache if c.status in ("closed", "closing")]:
                del cache[stale]
        per_client = _MODEL_FUTURES.setdefault(client, {})
        future = per_client.get(digest)
        if future is not None and future.status in _LIVE:
            return future
        if future is not None:  # its worker copies go with it
            copies = _WORKER_COPIES.get(client, {})
            for pair in [pair for pair in copies if pair[0] == future.key]:
                del copies[pair]
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
            _WORKER_COPIES.clear()
        else:
            _MODEL_FUTURES.pop(client, None)
            _WORKER_COPIES.pop(client, None)


def _identity(value: Any) -> Any:
    """A copy task: the worker it runs on fetches ``value`` and keeps it under a new key."""
    return value


def worker_copy(client: Any, future: Any, worker: str) -> Any:
    """A Future of ``future``'s value held on ``worker``, made on first use only.

    A task pinned to ``worker`` (``allow_other_workers=True``) that returns its input: the
    worker fetches the value once and keeps it for as long as the copy's Future is held, which
    the Active Memory Manager would not do for a plain replica. If ``worker`` dies, the copy is
    recomputed elsewhere from ``future`` (itself recoverable, see :func:`model_future`).

    Parameters
    ----------
    client : distributed.Client
    future : distributed.Future
        E.g. the model's Future from :func:`model_future`.
    worker : str
        Worker address.

    Returns
    -------
    distributed.Future
    """
    with _CACHE_LOCK:
        per_client = _WORKER_COPIES.setdefault(client, {})
        copy = per_client.get((future.key, worker))
        if copy is not None and copy.status in _LIVE:
            return copy
        copy = client.submit(
            _identity,
            future,
            key=f"{future.key}-copy-{uuid.uuid4().hex[:8]}",
            workers=[worker],
            allow_other_workers=True,
            pure=False,
        )
        per_client[(future.key, worker)] = copy
        return copy


def balance_plan(
    sizes: Sequence[int],
    holders: Sequence[Sequence[str]],
    workers: Sequence[str],
    min_piece: int | None = None,
) -> list[tuple[int, int, int, str]]:
    """Row pieces that give every worker an equal share of the rows, moving as few as possible.

    Each worker keeps its own chunks (in row order) up to its share; the rows beyond go, in
    pieces, to the workers with the largest shortfall. A surplus smaller than ``min_piece``
    rows stays where it is (a tiny task costs more than the imbalance it removes).

    Parameters
    ----------
    sizes : sequence of int
        Rows of each chunk, in row order.
    holders : sequence of sequence of str
        Workers holding each chunk (a replicated chunk counts for the one with most room).
    workers : sequence of str
        The workers to share the rows between (equal shares: one worker per GPU).
    min_piece : int, optional
        Default ``total // (64 * len(workers))`` (at most ~1.6% of a share left uneven).

    Returns
    -------
    list of (chunk, start, stop, worker)
        In row order; ``start:stop`` are rows of chunk ``chunk``. A piece on a worker that does
        not hold its chunk is a move. Empty chunks stay as empty pieces.
    """
    workers = sorted(workers)
    if not workers:
        raise ValueError("balance_plan needs at least one worker")
    total = int(sum(sizes))
    base, extra = divmod(total, len(workers))
    quota = {w: base + (k < extra) for k, w in enumerate(workers)}
    load = dict.fromkeys(workers, 0)
    if min_piece is None:
        min_piece = max(1, total // (64 * len(workers)))
    kept = []
    for size, chunk_holders in zip(sizes, holders, strict=True):
        owner = min(chunk_holders, key=lambda w: (load[w] - quota[w], w))
        keep = min(size, max(0, quota[owner] - load[owner]))
        if size - keep < min_piece:
            keep = size
        kept.append((owner, keep))
        load[owner] += keep

    def short(k: int) -> int:
        return quota[workers[k]] - load[workers[k]]

    pieces = []
    for chunk, (size, (owner, keep)) in enumerate(zip(sizes, kept, strict=True)):
        if keep or size == 0:
            pieces.append((chunk, 0, keep, owner))
        start = keep
        while start < size:
            # the largest shortfall; ties to the first worker in sorted order
            receiver = workers[max(range(len(workers)), key=lambda k: (short(k), -k))]
            room = quota[receiver] - load[receiver]
            take = size - start if room <= 0 else min(size - start, room)
            if size - start - take < min_piece:
                take = size - start
            pieces.append((chunk, start, start + take, receiver))
            load[receiver] += take
            start += take
    return pieces


def _chunk_holders(client: Any, X: da.Array) -> list[list[str]] | None:
    """Workers holding each row chunk of ``X`` (one column chunk); None unless all are held."""
    keys = [(X.name, i, 0) for i in range(X.numblocks[0])]
    try:
        who_has = client.sync(client.scheduler.who_has, keys=keys)
    except Exception:  # an older or foreign scheduler: no placement to correct
        return None
    holders = [sorted(who_has.get(key) or ()) for key in keys]
    return holders if all(holders) else None


def _rows_slice(block: Any, start: int, stop: int) -> Any:
    return block[start:stop]


def _planned_pieces(client: Any, X: da.Array, max_rows: int | None) -> list | None:
    """``X`` (persisted) -> pieces ``(source, start, stop, worker, chunk, lo, hi)``, row order.

    A piece is rows ``lo:hi`` of chunk ``chunk`` of ``X``, run on ``worker``. ``source`` is
    what it reads: ``X``'s chunk key, or the Future of those rows copied to ``worker`` by the
    moves submitted here (only the surplus rows travel, sliced on their holder);
    ``start:stop`` are the rows to take of ``source`` (``None``: all of it). Pieces hold at
    most ``max_rows`` rows. None when ``X``'s placement is unknown (not every chunk in
    memory) or a single worker runs all.
    """
    workers = sorted(client.ncores())
    holders = _chunk_holders(client, X) if len(workers) > 1 else None
    if holders is None or any(h not in workers for hs in holders for h in hs):
        return None
    from distributed import Future

    pieces = []
    for chunk, a, b, worker in balance_plan(X.chunks[0], holders, workers):
        step = b - a if max_rows is None else max_rows
        cuts = list(range(a, b, max(1, step))) + [b] if b > a else [a, b]
        for lo, hi in zip(cuts[:-1], cuts[1:], strict=True):
            if worker in holders[chunk]:
                whole = lo == 0 and hi == X.chunks[0][chunk]
                bounds = (None, None) if whole else (lo, hi)
                pieces.append(((X.name, chunk, 0), *bounds, worker, chunk, lo, hi))
                continue
            # a move: slice the rows where the chunk is, copy only them to ``worker`` now
            part = client.submit(
                _rows_slice, Future((X.name, chunk, 0), client), lo, hi,
                workers=holders[chunk][:1], allow_other_workers=True, pure=False,
                key=f"distshap-rows-{uuid.uuid4().hex}",
            )  # fmt: skip
            moved = client.submit(
                _identity, part, workers=[worker], allow_other_workers=True, pure=False,
                key=f"distshap-moved-rows-{uuid.uuid4().hex}",
            )  # fmt: skip
            pieces.append((moved, None, None, worker, chunk, lo, hi))
    return pieces


def _piece_values(
    func: Any, source: Any, start: int | None, stop: int | None, labels: Any, *args: Any
) -> Any:
    """One planned piece: its rows of ``source`` (``labels``: theirs, or None) -> ``func``."""
    if start is not None:
        source = source[start:stop]
    *args, row_offset = args
    if labels is not None:
        return func(source, *args, labels, row_offset=row_offset)
    return func(source, *args, row_offset=row_offset)


def _map_rows(
    client: Any,
    X: da.Array,
    func: Any,
    args: tuple,
    tail_chunks: tuple,
    new_axis: list[int],
    dtype: Any,
    meta: Any,
    name: str,
    balance: bool,
    labels: da.Array | None = None,
    split_rows: Any = None,
    per_chunk: tuple | None = None,
) -> da.Array:
    """``func(block, *args[, labels], row_offset=...)`` over the row chunks of ``X``, lazily.

    With ``balance`` and ``X`` persisted, the rows run in the pieces of
    :func:`_planned_pieces`, each task reading the :func:`worker_copy` of every Future in
    ``args`` on its piece's worker, so that all its inputs sit on one worker (one hand-built
    graph layer: no alias tasks in front of the kernels, so the scheduler sees each worker's
    whole queue at once and has nothing to steal). The output is merged back to ``X``'s row
    chunks (``split_rows(X)``'s when given: a function that splits row chunks, e.g. for output
    size limits). ``per_chunk``: output chunks of one task instead of its rows (e.g. ``(1,)``
    for a partial sum per task; no merge then). Otherwise one ``map_blocks`` over ``X``.
    """
    from distributed import Future

    target = X if split_rows is None else split_rows(X)
    max_rows = None if split_rows is None else max(target.chunks[0], default=None)
    pieces = _planned_pieces(client, X, max_rows) if balance else None
    if pieces is None:
        extra = () if labels is None else (labels.rechunk({0: target.chunks[0]}),)
        lead = per_chunk * target.numblocks[0] if per_chunk else target.chunks[0]
        return da.map_blocks(
            func, target, *args, *extra, chunks=(lead,) + tail_chunks, new_axis=new_axis,
            dtype=dtype, meta=meta, name=name,
        )  # fmt: skip
    from dask.highlevelgraph import HighLevelGraph
    from dask.utils import apply

    starts = np.cumsum((0,) + X.chunks[0])
    dsk: dict = {}
    tail_index = (0,) * len(tail_chunks)
    for p, (source, start, stop, worker, chunk, lo, hi) in enumerate(pieces):
        copies = []
        for arg in args:
            if isinstance(arg, Future):
                arg = worker_copy(client, arg, worker)
                dsk[arg.key] = arg
                arg = arg.key
            copies.append(arg)
        if isinstance(source, Future):
            dsk[source.key] = source
            source = source.key
        label_rows = None
        if labels is not None:
            label_rows = (_rows_slice, (labels.name, chunk, 0), lo, hi)
        first = int(starts[chunk]) + lo
        dsk[(name, p) + tail_index] = (
            apply, _piece_values, [func, source, start, stop, label_rows, *copies, first]
        )  # fmt: skip
    sizes = tuple(hi - lo for *_, lo, hi in pieces)
    lead = per_chunk * len(pieces) if per_chunk else sizes
    deps = [X] if labels is None else [X, labels]
    graph = HighLevelGraph.from_collections(name, dsk, dependencies=deps)
    out = da.Array(graph, name, (lead,) + tail_chunks, meta=meta)
    if per_chunk is None and sizes != target.chunks[0]:
        out = out.rechunk({0: target.chunks[0]})
    return out


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
    row_offset: int = 0,
    block_info: dict | None = None,
) -> Any:
    """One row chunk -> float32 SHAP (or interaction) values, same array type as the chunk.

    Runs on a worker, which resolves ``backend`` (``"auto"``: its own GPU decides). With
    ``check``, the chunk's rows must sum to the model's margin (:mod:`distshap.additivity`).
    With a ``background``, interventional values of ``model_output``; ``labels`` is the chunk's
    ``(n, 1)`` block of ``y`` (or None). ``row_offset`` + the block's position is the row
    number of its first row (for error messages). Device work is finished before it returns
    (the result is synchronised, or copied to the host for NumPy chunks), so task timings are
    real.
    """
    n = block.shape[0]
    width = packed.num_features + 1
    shape = (n, packed.num_groups, width) + ((width,) if interactions else ())
    if n == 0:
        return meta_from_array(block, ndim=len(shape), dtype=np.float32).reshape(shape)
    first_row = row_offset + (block_info[0]["array-location"][0][0] if block_info else 0)
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
    balance: bool = True,
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
    split_rows = None
    if interactions:

        def split_rows(rows: da.Array) -> da.Array:
            return _limit_output_chunks(rows, groups * width * width * 4)

        tail, new_axis = ((groups,), (width,), (width,)), [2, 3]
    else:
        tail, new_axis = ((groups,), (width,)), [2]
    labels = _labels_array(y, X) if transform == LOG_LOSS else None
    meta = meta_from_array(X._meta, ndim=len(tail) + 1, dtype=np.float32)
    label = "interactions" if interactions else "shap"
    if background is not None:
        label = "interventional-" + label
    return _map_rows(
        client, X, _block_values,
        (model, interactions, backend, check_additivity, shipped, model_output),
        tail, new_axis, np.float32, meta, f"distshap-{label}-{uuid.uuid4().hex}", balance,
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
