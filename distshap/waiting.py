"""Work a thread does while it waits for a GPU, in place of blocking.

A GPU call that ends in a wait for its stream (a replayed CUDA graph,
:mod:`distshap.kernels.cuda.replay`) asks :func:`wait_for_stream`; within
:func:`while_waiting`, that calls the block's work over and over until the stream is done.
A server's device process reads and answers its pipes there, on the one thread it has, while
the GPU computes. Nothing here touches CUDA: the stream is only asked ``done`` and
``synchronize()``.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["wait_for_stream", "while_waiting"]

#: The work of this thread's :func:`while_waiting` (``work``), where one is open.
_WAITING = threading.local()


@contextlib.contextmanager
def while_waiting(work: Callable[[], object]) -> Iterator[None]:
    """Within the block, a GPU call on this thread calls ``work()`` over and over while it
    waits for its stream, instead of blocking until the stream is done.

    ``work`` must return quickly (each return lets the call look at its stream again) and
    raise nothing: an exception would end the call that runs it.
    """
    before = getattr(_WAITING, "work", None)
    _WAITING.work = work
    try:
        yield
    finally:
        _WAITING.work = before


def wait_for_stream(stream: Any) -> None:
    """Return once ``stream`` (a ``cupy.cuda.Stream``) is done; :func:`while_waiting`'s work
    runs meanwhile, where a block of it is open on this thread."""
    work = getattr(_WAITING, "work", None)
    if work is not None:
        while not stream.done:
            work()
    stream.synchronize()
