"""The model on the cluster: one recoverable task per client and digest, and pinned copies.

The packed model (or an interventional background) enters the cluster once per (client,
digest) as a *task* whose input, the pickled model, the scheduler keeps: a worker that dies
takes its copy with it, and the scheduler recomputes the model on a survivor (or on the worker
its nanny restarts) like any lost result, so the job finishes. A scattered model would have no
task to rerun. Every later call reuses the task's Future; each row chunk's task depends on it,
so a worker gets the model once. The price is one pickled copy of the model on the scheduler
while its Future is held: once none of the objects shipped under a digest is alive (every
explainer of that model gone), the next shipment to that client forgets its Future, and the
cluster frees the model (unless a graph not yet computed still holds it).
"""

from __future__ import annotations

import pickle
import threading
import uuid
import warnings
import weakref
from typing import Any

__all__ = ["clear_model_cache", "model_future", "worker_copy"]

# client -> {digest: Future of the model task}; a Future refers to its client, so entries of
# closed clients are removed on the next call (or by clear_model_cache), not by the weak key.
_MODEL_FUTURES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# client -> {(key of a shipped Future, worker address): Future of its copy pinned there}
_WORKER_COPIES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# client -> {digest: WeakSet of the objects (packed models, backgrounds) shipped under it}
_SHIPPED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
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
        for cache in (_MODEL_FUTURES, _WORKER_COPIES, _SHIPPED):
            for stale in [c for c in cache if c.status in ("closed", "closing")]:
                del cache[stale]
        per_client = _MODEL_FUTURES.setdefault(client, {})
        shipped = _SHIPPED.setdefault(client, {})
        for gone in [d for d, users in shipped.items() if not users and d != digest]:
            del shipped[gone]  # nothing shipped under it is alive: the cluster may free it
            _forget(client, per_client.pop(gone, None))
        shipped.setdefault(digest, weakref.WeakSet()).add(packed)
        future = per_client.get(digest)
        if future is not None and future.status in _LIVE:
            return future
        _forget(client, future)
        blob = pickle.dumps(packed, protocol=pickle.HIGHEST_PROTOCOL)
        with warnings.catch_warnings():
            # the model is sent once per client and digest, not with every graph
            warnings.filterwarnings("ignore", message="Sending large graph", category=UserWarning)
            future = client.submit(
                _unpickle_model, blob, key=f"distshap-model-{digest[:32]}-{uuid.uuid4().hex[:8]}"
            )
        per_client[digest] = future
        return future


def _forget(client: Any, future: Any) -> None:
    """Drop the worker copies of model ``future`` (None: nothing), the cache lock held."""
    if future is not None:
        copies = _WORKER_COPIES.get(client, {})
        for pair in [pair for pair in copies if pair[0] == future.key]:
            del copies[pair]


def clear_model_cache(client: Any = None) -> None:
    """Forget the model Futures of ``client`` (of every client when ``None``).

    The cluster frees a model's memory (and the scheduler its pickled copy) once no Future of
    it is held.
    """
    with _CACHE_LOCK:
        for cache in (_MODEL_FUTURES, _WORKER_COPIES, _SHIPPED):
            if client is None:
                cache.clear()
            else:
                cache.pop(client, None)


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
