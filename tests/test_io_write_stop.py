"""A Dask Zarr write that stops (a failed chunk, Ctrl-C, SIGTERM) leaves nothing behind: the
workers' running chunk writes end before the staged store is removed."""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest

from distshap.io.write import write_dask

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")
pytest.importorskip("zarr")


class _Stopped(Exception):
    pass


def _slow(block: np.ndarray) -> np.ndarray:
    time.sleep(0.3)
    return block


def _fails_at_chunk_3(block: np.ndarray, block_info=None) -> np.ndarray:
    if block_info[0]["chunk-location"][0] == 3:
        raise ValueError("chunk 3 failed")
    time.sleep(0.3)
    return block


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(
        n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None
    )
    with distributed.Client(cluster) as c:
        yield c
    cluster.close()


def _rows() -> da.Array:
    return da.ones((3000, 5), chunks=(100, 5), dtype=np.float32)


def _settled(directory) -> list[str]:
    time.sleep(1.5)  # longer than a chunk: a write still running would have landed
    return os.listdir(directory)


def test_failed_chunk_leaves_no_staged_store(client, tmp_path):
    rows = _rows().map_blocks(_fails_at_chunk_3, dtype=np.float32)
    with pytest.raises(ValueError, match="chunk 3 failed"):
        write_dask(rows, str(tmp_path / "o.zarr"), "zarr", list("abcd"), 1, client)
    assert _settled(tmp_path) == []


def test_interrupted_write_leaves_no_staged_store(client, tmp_path):
    def stop(signum, frame):
        raise _Stopped()

    previous = signal.signal(signal.SIGUSR1, stop)  # as the CLI's SIGTERM handler raises
    timer = threading.Timer(0.8, os.kill, (os.getpid(), signal.SIGUSR1))
    try:
        timer.start()
        with pytest.raises(_Stopped):
            rows = _rows().map_blocks(_slow, dtype=np.float32)
            write_dask(rows, str(tmp_path / "o.zarr"), "zarr", list("abcd"), 1, client)
    finally:
        timer.cancel()
        signal.signal(signal.SIGUSR1, previous)
    assert _settled(tmp_path) == []
