"""Host rows on a GPU worker: the copies to and from the device overlap the kernels.

A NumPy chunk explained on a GPU is otherwise copied whole to the device, explained, and copied
back, each step waiting for the one before, so a GPU fed host chunks idles through copies that
CuPy chunks never make. Here a large chunk runs in row blocks (:func:`row_blocks`): a helper
thread copies the blocks to the device in order on an upload stream while the worker's thread
runs each block's kernels on a compute stream as soon as its rows are there, and each block's
values go back on a download stream into pinned host memory while the next block computes
(events order each copy after what it needs; the additivity check, which waits for its
block's kernels, does not hold up the copies). Every block runs
:func:`distshap.dispatch.run_request` on its rows and rows are independent, so the values are
those of one call on the whole chunk, bit for bit; an error names the row of the whole input.

:func:`overlapped` is the order of the steps, free of CUDA (tested with stand-ins on the CPU);
:func:`run_host_rows` gives it CuPy streams, events and pinned memory. Only NumPy chunks on a
GPU worker come here (:func:`staged_blocks`); the CPU path and CuPy chunks never do.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from distshap.dispatch import run_request
from distshap.request import Request

__all__ = ["overlapped", "row_blocks", "run_host_rows", "staged_blocks"]

#: Blocks a chunk is split into when its rows allow; fewer for smaller chunks.
BLOCKS_PER_CHUNK = 4
#: Fewest rows of a block: below this a block's kernels are too short to hide a copy behind.
MIN_BLOCK_ROWS = 1 << 16

_STREAMS: dict = {}  # (process id, device id, thread id) -> the streams of run_host_rows
_STREAMS_LOCK = threading.Lock()


def _streams(device_id: int) -> tuple:
    """Upload, compute and download streams of this thread on ``device_id``.

    Made once per process (a forked child makes its own), as the kernels' launch caches are
    keyed by stream. They wait for the legacy default stream, where a model's upload may still
    be in flight.
    """
    import cupy

    key = (os.getpid(), device_id, threading.get_ident())
    streams = _STREAMS.get(key)
    if streams is None:
        streams = tuple(cupy.cuda.Stream() for _ in range(3))
        with _STREAMS_LOCK:
            _STREAMS[key] = streams
    return streams


def row_blocks(n: int, min_rows: int = MIN_BLOCK_ROWS) -> list[tuple[int, int]]:
    """``[(start, stop), ...]`` covering ``n`` rows in order: up to :data:`BLOCKS_PER_CHUNK`
    blocks of at least ``min_rows`` rows (one block when ``n < 2 * min_rows``)."""
    count = max(1, min(BLOCKS_PER_CHUNK, n // max(1, min_rows)))
    cuts = [n * k // count for k in range(count + 1)]
    return list(zip(cuts[:-1], cuts[1:], strict=True))


def staged_blocks(n: int, backend: str, min_rows: int = MIN_BLOCK_ROWS) -> bool:
    """Whether ``n`` host rows run in overlapped blocks (:func:`run_host_rows`) here: more than
    one block, and ``backend`` (``"auto"`` resolved on this worker) is a real GPU's."""
    if backend == "cpu" or len(row_blocks(n, min_rows)) < 2:
        return False
    from distshap import kernels

    if kernels.resolve_backend(backend) != "cuda":  # a CPU worker stops here, CUDA untouched
        return False
    from distshap.kernels.cuda.runtime.device import SIM

    return not SIM


def overlapped(
    count: int,
    upload: Callable[[int], Any],
    compute: Callable[[int, Any], Any],
    download: Callable[[int, Any], None],
) -> None:
    """Blocks ``0 .. count - 1``: every upload on a helper thread, in order, each block's
    compute on this thread as soon as its upload returned, then its download.

    ``upload(i)`` starts block ``i``'s copy to the device and returns its handle;
    ``compute(i, handle)`` runs its kernels after that copy and returns its values;
    ``download(i, values)`` starts their copy back. An upload's error is raised here when its
    block's turn comes (the blocks before it are computed, none after).
    """
    handles: list[Any] = []  # block i's upload handle, once it returned
    ready = [threading.Event() for _ in range(count)]
    failed: list[BaseException] = []
    stop = threading.Event()

    def uploads() -> None:
        try:
            for i in range(count):
                if stop.is_set():
                    return
                handles.append(upload(i))
                ready[i].set()
        except BaseException as error:  # raised by the computing thread at that block
            failed.append(error)
            for event in ready:
                event.set()

    helper = threading.Thread(target=uploads, name="distshap-upload", daemon=True)
    helper.start()
    try:
        for i in range(count):
            ready[i].wait()
            if i >= len(handles):
                raise failed[0]
            download(i, compute(i, handles[i]))
    finally:
        stop.set()
        helper.join()


def run_host_rows(
    packed: Any,
    raw: np.ndarray,
    request: Request,
    y: Any = None,
    first_row: int = 0,
    min_rows: int = MIN_BLOCK_ROWS,
) -> np.ndarray:
    """:func:`~distshap.dispatch.run_request` of host rows on this worker's GPU, in overlapped
    blocks: the values of one call on all of ``raw``, as a NumPy array (copied out of the
    pinned buffer the blocks were downloaded into, which CuPy's pinned pool keeps for reuse).

    Parameters
    ----------
    packed : PackedModel
    raw : numpy.ndarray (n, F)
        The model's raw values (:func:`distshap.inputs.model_matrix`).
    request : Request
        Its backend ``"cuda"`` (or ``"auto"`` on a worker with a GPU).
    y : numpy.ndarray (n,), optional
        Checked labels, as :func:`~distshap.dispatch.run_request` takes them.
    first_row : int
        Row number of ``raw[0]`` in the whole input (for error messages).
    min_rows : int
        Fewest rows of a block (:func:`row_blocks`).
    """
    import cupy
    import cupyx

    blocks = row_blocks(raw.shape[0], min_rows)
    device = cupy.cuda.Device()
    device.synchronize()  # nothing earlier on this device still uses memory the pool hands out
    up, compute_stream, down = _streams(device.id)
    source = np.ascontiguousarray(raw)
    device_rows = cupy.empty(source.shape, source.dtype)
    out: list[Any] = [None]
    kept: list[Any] = []  # device values stay alive until their copy back is done

    def upload(i: int) -> Any:
        a, b = blocks[i]
        with device:  # the helper thread's device is this worker's
            device_rows[a:b].set(source[a:b], stream=up)
            return up.record()

    def compute(i: int, uploaded: Any) -> Any:
        a, b = blocks[i]
        compute_stream.wait_event(uploaded)
        with compute_stream:
            labels = None if y is None else y[a:b]
            values = run_request(packed, device_rows[a:b], request, labels, first_row + a)
            return cupy.ascontiguousarray(values)

    def download(i: int, values: Any) -> None:
        a, b = blocks[i]
        if out[0] is None:
            out[0] = cupyx.empty_pinned((source.shape[0],) + values.shape[1:], values.dtype)
        down.wait_event(compute_stream.record())
        try:
            values.get(stream=down, out=out[0][a:b], blocking=False)
        except TypeError:  # CuPy before 13: a copy given a stream is asynchronous already
            values.get(stream=down, out=out[0][a:b])
        kept.append(values)

    try:
        overlapped(len(blocks), upload, compute, download)
    finally:  # no copy or kernel may outlive the buffers it uses (on an error too)
        for stream in (up, compute_stream, down):
            stream.synchronize()
        kept.clear()
    # An ordinary array: Dask may hold a result long, and page-locked memory held by results
    # would grow with them; the pinned block goes back to CuPy's pool for the next chunk.
    result = np.array(out[0])
    out.clear()
    return result
