"""SHAP values of Dask arrays and DataFrames: row chunks through the single-device kernels.

The packed model is scattered to the cluster once per (client, model digest) — a Future of a
small wrapper object, reused by every later call — and each row chunk of ``X`` (one column
chunk) goes through ``distshap.kernels.get_backend(backend).shap_values`` (or
``interaction_values``) on whichever worker holds it. On a GPU worker the CUDA kernel module
caches the model's device arrays by digest, so the model crosses PCIe once per worker.

The result is a lazy Dask array, chunked like the rows of ``X``, of shape ``(n, G, F+1)`` (or
``(n, G, F+1, F+1)`` for interactions), float32, with chunks of the same type as ``X``'s
(NumPy chunks in, NumPy chunks out; CuPy in, CuPy out). The kernels compute each row on its
own in a fixed order, so the values do not depend on the chunking or the number of workers.
"""

from __future__ import annotations

import sys
import threading
import uuid
import weakref
from typing import Any

import dask.array as da
import numpy as np
from dask.array.utils import meta_from_array

from distshap import kernels
from distshap.inputs import frame_to_float32, select_model_columns

__all__ = [
    "clear_model_cache",
    "compute",
    "explain_dask",
    "model_future",
    "warm_up",
]

_BACKENDS = ("auto", "cpu", "cuda")


class _ModelHandle:
    """The packed model behind one scattered Future (scattering a bare dict splits it)."""

    __slots__ = ("packed",)

    def __init__(self, packed: Any) -> None:
        self.packed = packed

    def __getstate__(self) -> Any:
        return self.packed

    def __setstate__(self, state: Any) -> None:
        self.packed = state

    def __repr__(self) -> str:
        digest = getattr(self.packed, "digest", "")
        return f"_ModelHandle(digest={digest[:12]!r})"


# client -> {digest: Future of _ModelHandle}; a Future refers to its client, so entries of
# closed clients are removed on the next call (or by clear_model_cache), not by the weak key.
_MODEL_FUTURES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_CACHE_LOCK = threading.Lock()


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


def model_future(client: Any, packed: Any) -> Any:
    """The Future of ``packed`` on ``client``'s cluster, scattered on first use only.

    Parameters
    ----------
    client : distributed.Client
    packed : distshap.packed.PackedModel
        Must carry a non-empty ``digest`` (as :func:`distshap.packed.build_packed_model` sets).

    Returns
    -------
    distributed.Future
        Of a small wrapper object whose ``.packed`` is the model. A Future whose data were
        lost (its worker died) is replaced by a fresh scatter.
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
        if future is not None and future.status == "finished":
            return future
        future = client.scatter(_ModelHandle(packed), hash=False)
        per_client[digest] = future
        return future


def clear_model_cache(client: Any = None) -> None:
    """Forget the scattered models of ``client`` (of every client when ``None``).

    The cluster frees a model's memory once no Future of it is held.
    """
    with _CACHE_LOCK:
        if client is None:
            _MODEL_FUTURES.clear()
        else:
            _MODEL_FUTURES.pop(client, None)


def _float32_partition(frame: Any, categories: dict | None = None) -> Any:
    import pandas as pd

    values = frame_to_float32(frame, categories)
    return pd.DataFrame(values, index=frame.index, columns=frame.columns)


def _is_dask_frame(X: Any) -> bool:
    if "dask.dataframe" not in sys.modules:  # a dask DataFrame cannot exist without it
        return False
    import dask.dataframe as dd

    return isinstance(X, (dd.DataFrame, dd.Series))


def _frame_to_array(X: Any, packed: Any) -> da.Array:
    """A dask DataFrame -> float32 dask array with known row chunks."""
    import dask.dataframe as dd
    import pandas as pd

    if isinstance(X, dd.Series):
        raise ValueError(
            "X is a 1-D dask Series: pass a DataFrame with one column per feature "
            f"({packed.num_features}), e.g. s.to_frame()"
        )
    X = X[select_model_columns(X, packed.num_features, packed.feature_names)]
    columns = list(X.columns)
    if len(columns) != packed.num_features:
        raise ValueError(
            f"X has {len(columns)} columns but the model has {packed.num_features} features: "
            "pass the columns the model was trained on"
        )
    for column in columns:
        dtype = X.dtypes[column]
        if isinstance(dtype, pd.CategoricalDtype) and not X[column].cat.known:
            raise ValueError(
                f"column {column!r} has unknown categories, so its codes may differ between "
                "partitions: call X = X.categorize() (or X[col].cat.as_known()) first"
            )
    meta = pd.DataFrame({c: pd.Series([], dtype=np.float32) for c in columns})
    meta.columns = columns
    converted = X.map_partitions(_float32_partition, packed.feature_categories, meta=meta)
    return converted.to_dask_array(lengths=True)


def _chunk_kind(meta: Any) -> str:
    """``"numpy"`` or ``"cupy"`` from a dask array's meta; TypeError otherwise."""
    if isinstance(meta, np.ndarray) and type(meta) is np.ndarray:
        return "numpy"
    if type(meta).__module__.split(".")[0] == "cupy":
        return "cupy"
    raise TypeError(
        f"X has chunks of type {type(meta).__module__}.{type(meta).__name__}: distshap "
        "explains NumPy or CuPy chunks; convert them, e.g. X.map_blocks(np.asarray)"
    )


def _as_float32_array(X: Any, packed: Any) -> tuple[da.Array, str]:
    """Validate and convert ``X`` to a float32 dask array with one column chunk."""
    if _is_dask_frame(X):
        X = _frame_to_array(X, packed)
    elif not isinstance(X, da.Array):
        raise TypeError(
            f"X is a {type(X).__name__}: explain_dask takes a dask.array.Array or a "
            "dask.dataframe.DataFrame (use the single-device backends for in-memory data)"
        )
    kind = _chunk_kind(X._meta)
    if X.ndim != 2:
        raise ValueError(
            f"X has {X.ndim} dimension(s), shape {X.shape}: pass a 2-D array of shape "
            f"(n_rows, {packed.num_features}), e.g. X.reshape(-1, {packed.num_features})"
        )
    if X.shape[1] != packed.num_features:
        raise ValueError(
            f"X has {X.shape[1]} columns but the model has {packed.num_features} features: "
            "pass the columns the model was trained on"
        )
    if X.dtype != np.float32:
        X = X.astype(np.float32)
    if X.numblocks[1] != 1:
        X = X.rechunk({1: -1})
    return X, kind


def _worker_backend(backend: str, kind: str) -> str:
    if backend != "auto":
        return backend
    if kind == "cupy":
        return "cuda"
    return "cuda" if kernels.cuda_available() else "cpu"


def _explain_block(
    block: Any, handle: _ModelHandle, interactions: bool, backend: str, kind: str
) -> Any:
    """One row chunk -> float32 SHAP (or interaction) values, same array type as the chunk.

    Runs on a worker. Device work is finished before it returns (the CUDA kernel result is
    synchronised, or copied to the host for NumPy chunks), so task timings are real.
    """
    packed = handle.packed
    n = block.shape[0]
    width = packed.num_features + 1
    shape = (n, packed.num_groups, width) + ((width,) if interactions else ())
    if n == 0:
        return meta_from_array(block, ndim=len(shape), dtype=np.float32).reshape(shape)
    name = _worker_backend(backend, kind)
    module = kernels.get_backend(name)
    kernel = module.interaction_values if interactions else module.shap_values
    if kind == "numpy":
        x = np.ascontiguousarray(block, dtype=np.float32)
        out = kernel(packed, x)
        if name == "cuda":
            import cupy

            out = cupy.asnumpy(out)  # copies to the host: waits for the kernel
        out = np.asarray(out, dtype=np.float32)
    else:
        import cupy

        x = cupy.ascontiguousarray(block, dtype=cupy.float32)
        out = kernel(packed, x)
        out = cupy.asarray(out, dtype=cupy.float32)
        cupy.cuda.Device().synchronize()  # a launch returns at once: finish before returning
    if out.shape != shape:
        raise RuntimeError(
            f"the {name} kernel returned shape {out.shape} for a block of {n} rows; expected "
            f"{shape} (a distshap bug: please report it)"
        )
    return out


#: Largest output chunk (bytes) of an interaction result; bigger row chunks are split.
MAX_OUTPUT_CHUNK_BYTES = 1 << 30


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


def explain_dask(
    packed: Any,
    X: Any,
    interactions: bool = False,
    backend: str = "auto",
    client: Any = None,
) -> da.Array:
    """SHAP values (or SHAP interaction values) of a Dask collection, lazily.

    Parameters
    ----------
    packed : distshap.packed.PackedModel
        The bin-packed model (scattered to the cluster once per client and digest).
    X : dask.array.Array or dask.dataframe.DataFrame
        Rows to explain, ``(n, F)``; NumPy or CuPy chunks. Any column chunking (rechunked to
        one column chunk); row chunks are kept. A DataFrame's category columns become their
        codes (NaN where missing); its row chunk sizes are computed on conversion.
    interactions : bool
        Interaction values ``(n, G, F+1, F+1)`` instead of SHAP values ``(n, G, F+1)``.
    backend : {"auto", "cpu", "cuda"}
        Kernel run by the workers. ``"auto"``: CUDA for CuPy chunks, and for NumPy chunks on a
        worker that has a GPU; the CPU kernel otherwise.
    client : distributed.Client, optional
        Default: the current client (``distributed.get_client()``).

    Returns
    -------
    dask.array.Array
        Lazy, float32, chunks ``(X.chunks[0], (G,), (F+1,)[, (F+1,)])`` (for interactions, row
        chunks whose output would exceed :data:`MAX_OUTPUT_CHUNK_BYTES` are split), chunk type of
        ``X`` (NumPy or CuPy). Each call has its own graph name, so computing it always runs
        the kernels. Bias in the last column, margin space.

    Raises
    ------
    ValueError
        ``X`` not 2-D, or its number of columns differs from the model's features; unknown
        ``backend``; no client.
    TypeError
        ``X`` neither a dask array nor DataFrame, chunks neither NumPy nor CuPy, or CuPy chunks
        with ``backend="cpu"``.
    """
    if backend not in _BACKENDS:
        raise ValueError(f"unknown backend {backend!r}: use 'auto', 'cpu' or 'cuda'")
    X, kind = _as_float32_array(X, packed)
    if kind == "cupy" and backend == "cpu":
        raise TypeError(
            "X has CuPy chunks but backend='cpu': use backend='cuda' (or 'auto'), or move the "
            "chunks to the host with X.map_blocks(cupy.asnumpy)"
        )
    client = _get_client(client)
    future = model_future(client, packed)

    groups, width = packed.num_groups, packed.num_features + 1
    if interactions:
        X = _limit_output_chunks(X, groups * width * width * 4)
        chunks = (X.chunks[0], (groups,), (width,), (width,))
        new_axis = [2, 3]
    else:
        chunks = (X.chunks[0], (groups,), (width,))
        new_axis = [2]
    meta = meta_from_array(X._meta, ndim=len(chunks), dtype=np.float32)
    label = "interactions" if interactions else "shap"
    return da.map_blocks(
        _explain_block,
        X,
        future,
        interactions,
        backend,
        kind,
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
        its chunks rerun elsewhere, so a result is never partial.
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
    block: np.ndarray, handle: _ModelHandle, interactions: bool, backend: str
) -> tuple[str, float]:
    """Run one tiny block; return the worker's address and the seconds it took."""
    import time

    from distributed import get_worker

    start = time.perf_counter()
    _explain_block(block, handle, interactions, backend, "numpy")
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
    if backend not in _BACKENDS:
        raise ValueError(f"unknown backend {backend!r}: use 'auto', 'cpu' or 'cuda'")
    future = model_future(client, packed)
    block = np.zeros((rows, packed.num_features), dtype=np.float32)
    futures = [
        client.submit(
            _warm_block,
            block,
            future,
            interactions,
            backend,
            workers=[worker],
            allow_other_workers=False,
            pure=False,
        )
        for worker in client.ncores()
    ]
    return dict(client.gather(futures))
