"""Row chunks over workers: the balance plan and the graph every Dask result is built from.

:func:`map_rows` runs a block function over the row chunks of a Dask array: one ``map_blocks``,
or, for rows already in the cluster's memory, the pieces of :func:`balance_plan`, which give
every worker an equal share whatever the chunks' placement (only surplus rows travel). Every
task runs inside the configuration the client had when the graph was built
(:func:`distshap.plan.config.get_config`, applied with ``config_context`` on the worker), so a
setting changed on the client changes the workers' computation. :func:`then_blocks` moves a
per-block step (e.g. an output layout) into the tasks of a :func:`map_rows` result, so that it
adds no layer (:func:`blocks_then`: one layer on top, built by hand), and :func:`unique_name`
names each call's graph.
"""

from __future__ import annotations

import inspect
import itertools
import os
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import dask.array as da
import numpy as np

from distshap.cluster.shipping import _identity, worker_copy
from distshap.inputs import is_cupy
from distshap.plan.config import Config, config_context, get_config

try:  # the task spec of dask >= 2024.12
    from dask._task_spec import DataNode, Task, TaskRef
except ImportError:  # older dask: tuples, literals and keys as they are
    DataNode = Task = TaskRef = None

__all__ = ["InConfig", "balance_plan", "blocks_then", "map_rows", "then_blocks", "unique_name"]

_NAME_COUNTER = itertools.count()
_PROCESS_TOKEN = uuid.uuid4().hex


def _new_process_token() -> None:
    global _PROCESS_TOKEN
    _PROCESS_TOKEN = uuid.uuid4().hex


os.register_at_fork(after_in_child=_new_process_token)  # a forked child draws its own


def unique_name(prefix: str) -> str:
    """``prefix-<token>-<n>``: a graph name no other call makes, in this process or another.

    The token is drawn at random once a process (again in a forked child), ``n`` counts this
    process's names: one draw of the system's random source a process, not one a call.
    """
    return f"{prefix}-{_PROCESS_TOKEN}-{next(_NAME_COUNTER)}"


class InConfig:
    """``func`` run inside ``config`` (a picklable task function; keeps ``func``'s signature,
    so Dask passes ``block_info`` where ``func`` takes it)."""

    def __init__(self, func: Any, config: Config) -> None:
        self.func = func
        self.config = config

    @property
    def __signature__(self) -> inspect.Signature:
        return inspect.signature(self.func)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with config_context(self.config):
            return self.func(*args, **kwargs)


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
    if not _persisted(X):  # nothing in memory to place: no scheduler round trip
        return None
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


class _Then:
    """``first(*args, **kwargs)``, then ``then`` of its result: one picklable task function."""

    def __init__(self, first: Any, then: Any) -> None:
        self.first = first
        self.then = then

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.then(self.first(*args, **kwargs))


def _task(key: Any, func: Any, *args: Any) -> Any:
    """A graph task ``func(*args)`` (``key`` None: one nested in another task's arguments);
    keys in ``args`` made by :func:`_ref`, Futures as they are (dependencies either way)."""
    return (func, *args) if Task is None else Task(key, func, *args)


def _ref(key: Any) -> Any:
    """``key`` as a task argument that is replaced by its value."""
    return key if TaskRef is None else TaskRef(key)


def _literal_block(node: Any) -> Any:
    """``node`` (a graph value) as the array it holds, or None when it is not plain data."""
    if DataNode is not None and isinstance(node, DataNode):
        node = node.value
    if isinstance(node, np.ndarray) or is_cupy(node):
        return node
    return None


def _held_array(graph: Any, name: str) -> Any:
    """The array that layer ``name`` of ``graph`` holds as its only value, else None."""
    mapping = getattr(graph.layers.get(name), "mapping", None)
    if not isinstance(mapping, Mapping) or len(mapping) != 1:
        return None
    return _literal_block(mapping.get(name))


def _sliced_chunks(X: da.Array) -> dict:
    """Chunks of ``X`` that slice an in-memory array of its graph: key -> the slice, taken here.

    ``da.from_array`` of an array that dask does not slice at once (CuPy) makes a task holding
    the array and one slicing task a chunk; the slices (views) taken here travel inside the
    kernels' tasks instead, two scheduler-to-worker hand-overs fewer a call. Empty when the
    chunks are anything else (nothing else runs here).
    """
    from dask.array.optimization import GETTERS

    graph = X.dask
    held = {dep: _held_array(graph, dep) for dep in graph.dependencies.get(X.name, ())}
    if Task is None or any(value is None for value in held.values()):
        return {}
    sliced = {}
    for key, node in graph.layers[X.name].items():
        if not (
            isinstance(node, Task)
            and node.func in GETTERS
            and not node.kwargs.get("lock")
            and node.dependencies <= held.keys()
        ):
            return {}
        try:
            value = node({dep: held[dep] for dep in node.dependencies})
        except Exception:  # e.g. a conversion only the workers can make: they do it
            return {}
        if _literal_block(value) is None:
            return {}
        sliced[key] = value
    return sliced


def _chunk_pieces(X: da.Array) -> list[tuple]:
    """One piece (as :func:`_planned_pieces` gives them) per row chunk of ``X``, no worker.

    A chunk that ``X``'s own graph layer holds as data (``da.from_array`` of an in-memory NumPy
    array), or a slice of an array held in ``X``'s graph (:func:`_sliced_chunks`), is the
    piece's source itself, so the kernel's task reads it without a task in front (one
    scheduler-to-worker hand-over fewer a call); otherwise the source is its key.
    """
    layer = X.dask.layers.get(X.name)
    mapping = getattr(layer, "mapping", None)
    sliced = _sliced_chunks(X) if not isinstance(mapping, Mapping) else {}
    pieces = []
    for chunk, size in enumerate(X.chunks[0]):
        key = (X.name, chunk) + (0,) * (X.ndim - 1)
        data = _literal_block(mapping.get(key)) if isinstance(mapping, Mapping) else None
        data = sliced.get(key) if data is None else data
        pieces.append((key if data is None else data, None, None, None, chunk, 0, size))
    return pieces


def _persisted(X: da.Array) -> bool:
    """Every row chunk of ``X`` (one column chunk) is a Future: ``X`` was persisted."""
    from distributed import Future

    mapping = getattr(X.dask.layers.get(X.name), "mapping", None)
    if not isinstance(mapping, Mapping):
        return False
    keys = [(X.name, chunk, 0) for chunk in range(X.numblocks[0])]
    return all(isinstance(mapping.get(key), Future) for key in keys)


def map_rows(
    client: Any,
    X: da.Array,
    func: Any,
    args: tuple,
    tail_chunks: tuple,
    meta: Any,
    name: str,
    balance: bool,
    labels: da.Array | None = None,
    split_rows: Any = None,
    per_chunk: tuple | None = None,
) -> da.Array:
    """``func(block, *args[, labels], row_offset=...)`` over the row chunks of ``X``, lazily.

    One hand-built graph layer, one task a piece, each task running ``func`` inside the
    configuration in force here (:class:`InConfig`). With ``balance`` and ``X`` persisted, the
    pieces are those of :func:`_planned_pieces`, each task reading the :func:`worker_copy` of
    every Future in ``args`` on its piece's worker, so that all its inputs sit on one worker
    (no alias tasks in front of the kernels, so the scheduler sees each worker's whole queue at
    once and has nothing to steal); the output is merged back to ``X``'s row chunks. Otherwise
    one piece a row chunk (:func:`_chunk_pieces`: in-memory chunks travel inside their task).
    Row chunks are ``split_rows(X)``'s when given (a function that splits row chunks, e.g. for
    output size limits). ``per_chunk``: output chunks of one task instead of its rows (e.g.
    ``(1,)`` for a partial sum per task; no merge then).
    """
    from dask.highlevelgraph import HighLevelGraph
    from distributed import Future

    func = InConfig(func, get_config())
    target = X if split_rows is None else split_rows(X)
    max_rows = None if split_rows is None else max(target.chunks[0], default=None)
    pieces = _planned_pieces(client, X, max_rows) if balance else None
    source_rows = X
    if pieces is None:
        pieces, source_rows = _chunk_pieces(target), target
        if labels is not None and labels.chunks[0] != target.chunks[0]:
            labels = labels.rechunk({0: target.chunks[0]})
    starts = np.cumsum((0,) + source_rows.chunks[0])
    dsk: dict = {}
    tail_index = (0,) * len(tail_chunks)
    reads_keys = reads_labels = False
    # each chunk of ``labels``: its data when held in memory (it travels inside the task)
    label_blocks = [] if labels is None else [piece[0] for piece in _chunk_pieces(labels)]
    for p, (source, start, stop, worker, chunk, lo, hi) in enumerate(pieces):
        copies = [  # Futures stay Futures: dependencies from outside the graph
            worker_copy(client, arg, worker) if isinstance(arg, Future) and worker else arg
            for arg in args
        ]
        reads_keys = reads_keys or _literal_block(source) is None
        if isinstance(source, tuple):  # a chunk's key
            source = _ref(source)
        label_rows = None
        if labels is not None and _literal_block(label_blocks[chunk]) is not None:
            label_rows = label_blocks[chunk][lo:hi]
        elif labels is not None:
            label_rows = _task(None, _rows_slice, _ref(label_blocks[chunk]), lo, hi)
            reads_labels = True
        first = int(starts[chunk]) + lo
        key = (name, p) + tail_index
        dsk[key] = _task(key, _piece_values, func, source, start, stop, label_rows, *copies, first)
    sizes = tuple(hi - lo for *_, lo, hi in pieces)
    lead = per_chunk * len(pieces) if per_chunk else sizes
    deps = ([source_rows] if reads_keys else []) + ([labels] if reads_labels else [])
    graph = HighLevelGraph.from_collections(name, dsk, dependencies=deps)
    out = da.Array(graph, name, (lead,) + tail_chunks, meta=meta)
    if per_chunk is None and sizes != target.chunks[0]:
        out = out.rechunk({0: target.chunks[0]})
    return out


def then_blocks(values: da.Array, then: Any, tail_chunks: tuple, meta: Any, suffix: str) -> Any:
    """``values`` (a :func:`map_rows` result) with ``then`` applied to each block in its task.

    The task that computes a block returns ``then(block)`` instead: no layer (and no task) on
    top of the kernels', as a Dask operation on ``values`` would add.

    Parameters
    ----------
    values : dask.array.Array
        As :func:`map_rows` returns it.
    then : callable
        A block -> the new block, the same rows (a picklable function).
    tail_chunks : tuple
        Chunks of the new blocks' axes after the rows.
    meta : array
        The new array's meta.
    suffix : str
        Names the new array, ``values``' name + ``"-" + suffix``: one suffix per ``then``.

    Returns
    -------
    dask.array.Array or None
        Chunked like ``values``' rows. None where ``values`` is not one layer of
        :func:`map_rows` tasks (e.g. pieces merged back to the row chunks, or an older dask):
        the caller then puts ``then`` in a layer on top (:func:`blocks_then`).
    """
    from dask.highlevelgraph import HighLevelGraph, MaterializedLayer

    graph = values.dask
    mapping = getattr(graph.layers.get(values.name), "mapping", None)
    if Task is None or not isinstance(mapping, Mapping):
        return None
    name = f"{values.name}-{suffix}"
    tail_index = (0,) * len(tail_chunks)
    dsk = {}
    for key, node in mapping.items():
        if not (isinstance(node, Task) and node.func is _piece_values and not node.kwargs):
            return None
        func, *rest = node.args
        new_key = (name, key[1]) + tail_index
        dsk[new_key] = Task(new_key, _piece_values, _Then(func, then), *rest)
    layers = {k: v for k, v in graph.layers.items() if k != values.name}
    dependencies = {k: v for k, v in graph.dependencies.items() if k != values.name}
    layers[name] = MaterializedLayer(dsk)
    dependencies[name] = graph.dependencies.get(values.name, set())
    out_graph = HighLevelGraph(layers, dependencies)
    return da.Array(out_graph, name, (values.chunks[0],) + tuple(tail_chunks), meta=meta)


def blocks_then(values: da.Array, then: Any, tail_chunks: tuple, meta: Any, suffix: str) -> Any:
    """A layer on top of ``values``: a task a row chunk, ``then`` of its block.

    For blocks that feed more than one array (e.g. an explanation's values and base values),
    or arrays :func:`then_blocks` cannot change: one layer made here, without the tokenizing
    and index handling of a Dask operation.

    Parameters
    ----------
    values : dask.array.Array
        One chunk on every axis after the rows.
    then, tail_chunks, meta, suffix
        As for :func:`then_blocks`.

    Returns
    -------
    dask.array.Array or None
        Chunked like ``values``' rows; None where ``values`` has several chunks on another axis.
    """
    from dask.highlevelgraph import HighLevelGraph

    if Task is None or any(len(c) != 1 for c in values.chunks[1:]):
        return None
    name = f"{values.name}-{suffix}"
    inner, tail_index = (0,) * (values.ndim - 1), (0,) * len(tail_chunks)
    dsk = {}
    for i in range(values.numblocks[0]):
        key = (name, i) + tail_index
        dsk[key] = Task(key, then, TaskRef((values.name, i) + inner))
    graph = HighLevelGraph.from_collections(name, dsk, dependencies=[values])
    return da.Array(graph, name, (values.chunks[0],) + tuple(tail_chunks), meta=meta)
