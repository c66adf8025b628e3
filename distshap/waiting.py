"""GPU calls that hand their thread's turn back while the GPU works.

A GPU call that ends in a wait for its stream (a replayed CUDA graph,
:mod:`distshap.kernels.cuda.replay`) asks :func:`wait_for_stream`. On a :class:`Handoff`'s
thread, that parks the call: the thread that started it gets its turn back and may read
pipes, write answers or start another call on another handoff, then resumes the call once
the stream is done. Only one of the threads runs at a time (each waits for the other's turn
on a semaphore), so they never compete for the interpreter. A server's device process runs
its calls this way, so that the next call's host work and launch overlap the running call's
GPU work. Elsewhere the wait blocks in ``synchronize()``. Nothing here touches CUDA: a stream
is only asked ``done`` and ``synchronize()``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

__all__ = ["Handoff", "wait_for_stream"]

#: The park of this thread's :class:`Handoff` (``park``), on a handoff's thread.
_WAITING = threading.local()


def wait_for_stream(stream: Any) -> None:
    """Return once ``stream`` (a ``cupy.cuda.Stream``) is done; on a :class:`Handoff`'s
    thread the call is parked meanwhile and its starter runs."""
    park = getattr(_WAITING, "park", None)
    if park is not None:
        park(stream)
    stream.synchronize()


class Handoff:
    """A helper thread that runs one call at a time, in turns with the thread that starts it.

    :meth:`start` runs ``job()`` on the helper until the job waits for a stream
    (:func:`wait_for_stream`: the job is *parked*) or ends; meanwhile the starter waits. The
    starter looks at :meth:`ready` (the parked job's stream is done, or the job ended) and
    calls :meth:`resume` to let a parked job run on until it ends or parks again, then
    :meth:`result` to take its value (or its exception, raised there) and free the helper.

    Parameters
    ----------
    name : str
        The helper thread's name.
    """

    def __init__(self, name: str) -> None:
        self._go, self._back = threading.Semaphore(0), threading.Semaphore(0)
        self._job: Callable[[], Any] | None = None
        self._outcome: tuple | None = None  # (value, error) once the job ended
        self._stream: Any = None  # what the parked job waits for
        #: Times the running (or ended) job parked: 0 for a job that never waited for a GPU.
        self.parks = 0
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    @property
    def busy(self) -> bool:
        """Whether a job was started and its result not taken yet."""
        return self._job is not None

    @property
    def ended(self) -> bool:
        """Whether the job ended (its result waits to be taken)."""
        return self._outcome is not None

    def start(self, job: Callable[[], Any]) -> None:
        """Run ``job()`` on the helper until it parks or ends (this thread waits)."""
        if self._job is not None or self._closed:
            raise RuntimeError("the handoff runs a job already, or is closed")
        self._job, self._outcome, self.parks = job, None, 0
        self._turn()

    def ready(self) -> bool:
        """Whether :meth:`resume` (or :meth:`result`) would not wait for the GPU (also where
        asking the stream fails: the job's own wait then raises the error, inside the job)."""
        if self._outcome is not None:
            return True
        if self._stream is None:
            raise RuntimeError("no job waits for its GPU: start one first")
        try:
            return bool(self._stream.done)
        except Exception:  # noqa: BLE001 - the job's synchronize() raises it where it belongs
            return True

    def resume(self) -> None:
        """Let the parked job run on until it ends or parks again (this thread waits)."""
        if self._outcome is None:
            self._turn()

    def result(self) -> Any:
        """The ended job's value, or its exception raised; the helper is free again."""
        if self._outcome is None:
            raise RuntimeError("the job has not ended: resume it first")
        (value, error), self._outcome, self._job = self._outcome, None, None
        if error is not None:
            raise error
        return value

    def close(self) -> None:
        """End the helper thread if it is free; one with a job not taken (parked, or its result
        not taken) is left to the process's exit (a daemon thread)."""
        self._closed = True
        if self._job is None:
            self._go.release()
            self._thread.join(10)

    def _turn(self) -> None:
        self._go.release()
        self._back.acquire()

    def _serve(self) -> None:
        _WAITING.park = self._park
        while True:
            self._go.acquire()
            if self._closed:
                return
            try:
                outcome = (self._job(), None)
            except BaseException as err:  # noqa: BLE001 - raised in the starter by result()
                outcome = (None, err)
            self._stream, self._outcome = None, outcome
            self._back.release()

    def _park(self, stream: Any) -> None:
        self._stream = stream
        self.parks += 1
        self._back.release()
        self._go.acquire()
        self._stream = None
