"""Top interaction pairs and interaction summaries of Dask collections.

The same shape as :mod:`distshap.cluster.dask_explain` (whose model shipping, input checks and
row chunking it reuses): the packed model enters the cluster once as a recoverable task, each
row chunk runs the single-device functions of :mod:`distshap.pair_rows` on its worker,
with the additivity check.

* :func:`top_interactions_dask` - lazy ``(pairs, values)``: one ``map_blocks`` whose chunks hold
  ``(i, j, value)`` as float64 (exact for both), viewed as int32 pairs and float32 values, so
  computing both together (``dask.compute(pairs, values)``) runs the kernels once.
* :func:`interaction_summary_dask` - each chunk's exact integer partial sums
  (:func:`~distshap.pair_rows.summary_partial`), added in a tree reduction
  (``split_every``) and finished once: integer sums, so the result's bits do not depend on the
  chunking, the reduction tree or the number of workers.
"""

from __future__ import annotations

from typing import Any

import dask.array as da
import numpy as np
from dask.array.utils import meta_from_array

from distshap.cluster.dask_explain import _check_backend, _rows_array
from distshap.cluster.graph import map_rows as _map_rows
from distshap.cluster.graph import unique_name
from distshap.cluster.shipping import _get_client, model_future
from distshap.inputs import is_cupy
from distshap.pair_rows import finish_summary, summary_partial, top_interactions_rows
from distshap.pair_slots import check_k

__all__ = ["interaction_summary_dask", "top_interactions_dask"]


def _first_row(block_info: dict | None, row_offset: int = 0) -> int:
    return row_offset + (block_info[0]["array-location"][0][0] if block_info else 0)


def _block_top(
    block: Any,
    packed: Any,
    k: int,
    backend: str,
    check: bool,
    batch_rows: int | None,
    row_offset: int = 0,
    block_info: dict | None = None,
) -> Any:
    """One row chunk -> float64 ``(n, G, k, 3)``: ``i, j, value`` of its top pairs."""
    n, G = block.shape[0], packed.num_groups
    if n == 0:
        return meta_from_array(block, ndim=4, dtype=np.float64).reshape((0, G, k, 3))
    pairs, values = top_interactions_rows(
        packed, block, k, backend, check_additivity=check, batch_rows=batch_rows,
        first_row=_first_row(block_info, row_offset),
    )  # fmt: skip
    if is_cupy(pairs):
        import cupy as xp

        out = xp.empty((n, G, k, 3), np.float64)
        out[..., :2] = pairs
        out[..., 2] = values
        xp.cuda.Device().synchronize()  # a launch returns at once: finish before returning
        return out
    out = np.empty((n, G, k, 3), np.float64)
    out[..., :2] = pairs
    out[..., 2] = values
    return out


def _as_pairs(block: Any) -> Any:
    return block[..., :2].astype(np.int32)


def _as_values(block: Any) -> Any:
    return block[..., 2].astype(np.float32)


def top_interactions_dask(
    packed: Any,
    X: Any,
    k: int = 10,
    backend: str = "auto",
    client: Any = None,
    check_additivity: bool = True,
    batch_rows: int | None = None,
    balance: bool = True,
) -> tuple[da.Array, da.Array]:
    """The ``k`` strongest pairs of every row and group of a Dask collection, lazily.

    Parameters are those of :func:`distshap.pair_interactions.top_interactions` (``X`` a Dask
    array or DataFrame as :func:`~distshap.cluster.explain_dask` takes it); ``balance`` as
    there: persisted rows are shared out evenly over the workers whatever their placement.

    Returns
    -------
    pairs, values : dask.array.Array
        int32 ``(n, G, k, 2)`` and float32 ``(n, G, k)``, chunked like the rows of ``X``, chunk
        type of ``X``; compute them together to run the kernels once.
    """
    k = check_k(k, packed.num_features)
    _check_backend(backend, "numpy")
    client = _get_client(client)
    model = model_future(client, packed)
    X, kind = _rows_array(X, packed, model, client)
    _check_backend(backend, kind)
    G = packed.num_groups
    meta = meta_from_array(X._meta, ndim=4, dtype=np.float64)
    both = _map_rows(
        client, X, _block_top, (model, k, backend, check_additivity, batch_rows),
        ((G,), (k,), (3,)), meta,
        unique_name("distshap-top-pairs"), balance,
    )  # fmt: skip
    pairs = both.map_blocks(
        _as_pairs, chunks=both.chunks[:3] + ((2,),), dtype=np.int32,
        meta=meta_from_array(X._meta, ndim=4, dtype=np.int32),
    )  # fmt: skip
    values = both.map_blocks(
        _as_values, chunks=both.chunks[:3], drop_axis=3, dtype=np.float32,
        meta=meta_from_array(X._meta, ndim=3, dtype=np.float32),
    )  # fmt: skip
    return pairs, values


def _block_partial(
    block: Any,
    packed: Any,
    signed: bool,
    backend: str,
    check: bool,
    batch_rows: int | None,
    row_offset: int = 0,
    block_info: dict | None = None,
) -> np.ndarray:
    """One row chunk -> its partial sums, int64 ``(1, 2, S + 1)`` (NumPy, whatever the chunk)."""
    partial = summary_partial(
        packed, block, signed, backend, check_additivity=check, batch_rows=batch_rows,
        first_row=_first_row(block_info, row_offset),
    )  # fmt: skip
    return partial[None]


def _finish(partial: np.ndarray, packed: Any, signed: bool) -> np.ndarray:
    return finish_summary(partial, packed, signed)


def interaction_summary_dask(
    packed: Any,
    X: Any,
    signed: bool = False,
    backend: str = "auto",
    client: Any = None,
    check_additivity: bool = True,
    batch_rows: int | None = None,
    split_every: int | None = None,
    balance: bool = True,
) -> da.Array:
    """Mean ``|phi_ij|`` (``signed``: mean ``phi_ij``) over the rows of a Dask collection.

    Parameters are those of :func:`distshap.pair_interactions.interaction_summary`;
    ``balance`` as in :func:`~distshap.cluster.explain_dask`.

    Returns
    -------
    dask.array.Array
        Lazy float64 ``(G, F+1, F+1)``, one NumPy chunk. A tree reduction of exact integer
        partials: its bits do not depend on the chunking, ``split_every`` or the workers.
    """
    from distshap.pair_slots import pair_slots

    _check_backend(backend, "numpy")
    client = _get_client(client)
    model = model_future(client, packed)
    X, kind = _rows_array(X, packed, model, client)
    _check_backend(backend, kind)
    width = pair_slots(packed).num_slots + 1
    parts = _map_rows(
        client, X, _block_partial, (model, bool(signed), backend, check_additivity, batch_rows),
        ((2,), (width,)), np.empty((0, 0, 0), np.int64),
        unique_name("distshap-pair-sums"), balance, per_chunk=(1,),
    )  # fmt: skip
    total = parts.sum(axis=0, split_every=split_every, dtype=np.int64)
    G, F1 = packed.num_groups, packed.num_features + 1
    return da.map_blocks(
        _finish, total, model, bool(signed), chunks=((G,), (F1,), (F1,)), new_axis=[0],
        dtype=np.float64, meta=np.empty((0, 0, 0), np.float64),
        name=unique_name("distshap-pair-summary"),
    )  # fmt: skip
