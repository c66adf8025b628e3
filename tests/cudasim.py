"""Runs a test script under Numba's CUDA simulator in a fresh Python (no GPU needed).

``NUMBA_ENABLE_CUDASIM`` must be set before Numba is imported, so the simulator tests run their
script in a subprocess with ``tests/`` and the repository root on ``PYTHONPATH``.
"""

from __future__ import annotations

import os
import subprocess
import sys

__all__ = [
    "assert_simulator_ok", "nvvm_available", "run_blocks", "run_blocks_by_events",
    "run_blocks_by_greenlets",
]  # fmt: skip

HERE = os.path.dirname(os.path.abspath(__file__))


#: Prepended to a script: SHAP calls of few rows take the row kernels and the usual plan's
#: chunks (for more than ``few_rows`` rows, whatever the model's size), which the scripts (a few
#: rows each, the simulator being slow) were written to exercise.
ROW_KERNELS = (
    "from distshap.plan.config import set_config\n"
    "set_config(path_thread_rows=0, few_rows_blocks=0)\n"
)


#: Prepended to a script: the simulator's blocks run by :func:`run_blocks` (or, for the
#: scripts that ask for threads, by :func:`run_blocks_by_events`).
RUN_BLOCKS = "import cudasim\ncudasim.run_blocks()\n"
THREAD_BLOCKS = "import cudasim\ncudasim.run_blocks_by_events()\n"


def run_blocks() -> None:
    """Run the simulator's blocks by :func:`run_blocks_by_greenlets` where ``greenlet`` is
    installed, else by :func:`run_blocks_by_events`."""
    try:
        import greenlet  # noqa: F401
    except ImportError:
        run_blocks_by_events()
    else:
        run_blocks_by_greenlets()


def run_blocks_by_greenlets() -> None:
    """Run each simulated block's threads as greenlets of the launching thread.

    The threads of a block run one after another, each until it waits at a barrier or ends;
    once every live thread waits, the barrier is released and they run again in the order
    they reached it (the order of :func:`run_blocks_by_events` where no thread is preempted),
    without an operating-system thread switch for each thread at each barrier. The
    consequences are the simulator's: a thread's exception stops the block and is raised (the
    others, aborted, raise at their barrier); ``syncthreads_count``, ``_and`` and ``_or`` are
    its own, on these barriers. ``threading.current_thread()`` is the simulated thread inside
    a block (the simulator and distshap's simulator code ask it which thread runs).
    """
    import threading

    import greenlet
    import numpy as np
    from numba.cuda.simulator import kernel as sim_kernel

    real_current_thread = threading.current_thread

    def current_thread():
        return getattr(greenlet.getcurrent(), "sim_thread", None) or real_current_thread()

    threading.current_thread = current_thread

    class SimThread(sim_kernel.BlockThread):
        """A simulated thread of one position in blocks of one shape, never started: each
        block runs it in a new greenlet."""

        def __init__(self, manager, thread_point) -> None:
            super().__init__(None, manager, (0, 0, 0), thread_point, False)
            self.glet = None

        def run_block(self, args) -> None:
            manager = self._manager
            try:
                if manager._debug:
                    with np.errstate(divide="raise"):
                        manager._f(*args)
                else:
                    manager._f(*args)
            except Exception as e:  # worded as BlockThread.run words it
                tid, ctaid = f"tid={list(self.threadIdx)}", f"ctaid={list(self.blockIdx)}"
                msg = f"{tid} {ctaid}" if str(e) == "" else f"{tid} {ctaid}: {e}"
                self.exception = (type(e)(msg), sys.exc_info()[2])

        def syncthreads(self) -> None:
            if self.abort:
                raise RuntimeError("abort flag set on syncthreads call")
            self.glet.parent.switch()
            if self.abort:
                raise RuntimeError("abort flag set on syncthreads clear")

    kept: dict[tuple, list] = {}  # block shape -> its threads

    def run_block(manager, grid_point, *args) -> None:
        shape = tuple(manager._block_dim)
        threads = kept.get(shape)
        if threads is None:
            threads = kept[shape] = [SimThread(manager, p) for p in np.ndindex(*shape)]
        block_idx = sim_kernel.Dim3(*grid_point)
        for thread in threads:
            thread._manager, thread.blockIdx = manager, block_idx
            thread.exception, thread.abort = None, False
            thread.glet = greenlet.greenlet(thread.run_block)
            thread.glet.sim_thread = thread
        ready, failed = threads, None
        while ready and failed is None:
            waiting = []  # in the order they reach the barrier
            for thread in ready:
                thread.glet.switch(args)
                if thread.exception is not None:
                    failed = thread
                    break
                if not thread.glet.dead:
                    waiting.append(thread)
            ready = waiting
        if failed is not None:
            for thread in threads:
                thread.abort = True
            for thread in threads:  # those waiting at a barrier raise there and end
                while thread.glet.gr_frame is not None:
                    thread.glet.switch()
            raise failed.exception[0].with_traceback(failed.exception[1])

    sim_kernel.BlockManager.run = run_block


def run_blocks_by_events() -> None:
    """Run the simulator's blocks on kept threads whose barriers release themselves.

    Numba's simulator starts a Python thread for each thread of each block, and the host thread
    waits for them by looking at every thread's state again and again (to release a barrier
    once every live thread has reached it), holding the interpreter lock the threads need.
    Here the threads of a block shape are started once and given block after block, and the
    last live thread to reach a barrier (or to end while the others wait at one) releases it;
    the host thread sleeps until the block's threads have ended or one has failed. The
    consequences are the simulator's: a thread's exception stops the block and is raised (the
    others, aborted, raise at their next barrier); a barrier is released when every live
    thread waits at it; ``syncthreads_count``, ``_and`` and ``_or`` are its own, on these
    barriers.
    """
    import queue
    import threading

    import numpy as np
    from numba.cuda.simulator import kernel as sim_kernel

    class Block:
        """One block's run: its threads still live, those waiting at the barrier, the first
        thread that failed."""

        def __init__(self, manager, threads: list) -> None:
            self.manager = manager
            self.threads = threads
            self.lock = threading.Lock()
            self.released = threading.Condition(self.lock)
            self.ended = threading.Condition(self.lock)
            self.live = len(threads)
            self.waiting = 0
            self.generation = 0
            self.failed = None

        def release_if_all_wait(self) -> None:  # under self.lock
            if self.waiting and self.waiting == self.live:
                self.waiting = 0
                self.generation += 1
                self.released.notify_all()

    class KeptThread(sim_kernel.BlockThread):
        """A simulated thread of one position in blocks of one shape, run block after block."""

        def __init__(self, manager, thread_point) -> None:
            super().__init__(None, manager, (0, 0, 0), thread_point, False)
            self.jobs: queue.SimpleQueue = queue.SimpleQueue()
            self.block = None

        def run(self) -> None:
            while True:
                job = self.jobs.get()
                if job is None:
                    return
                self.block, grid_point, args = job
                self._manager = self.block.manager
                self.blockIdx = sim_kernel.Dim3(*grid_point)
                self.exception, self.abort = None, False
                self.run_block(args)

        def run_block(self, args) -> None:
            block = self.block
            try:
                if block.manager._debug:
                    with np.errstate(divide="raise"):
                        block.manager._f(*args)
                else:
                    block.manager._f(*args)
            except Exception as e:  # worded as BlockThread.run words it
                tid, ctaid = f"tid={list(self.threadIdx)}", f"ctaid={list(self.blockIdx)}"
                msg = f"{tid} {ctaid}" if str(e) == "" else f"{tid} {ctaid}: {e}"
                self.exception = (type(e)(msg), sys.exc_info()[2])
                with block.lock:
                    if block.failed is None:
                        block.failed = self
                        for thread in block.threads:
                            thread.abort = True
                        block.released.notify_all()
            finally:
                with block.lock:
                    block.live -= 1
                    block.release_if_all_wait()
                    if block.live == 0 or block.failed is not None:
                        block.ended.notify_all()

        def syncthreads(self) -> None:
            if self.abort:
                raise RuntimeError("abort flag set on syncthreads call")
            block = self.block
            with block.lock:
                block.waiting += 1
                generation = block.generation
                block.release_if_all_wait()
                while generation == block.generation and not self.abort:
                    block.released.wait()
            if self.abort:
                raise RuntimeError("abort flag set on syncthreads clear")

    kept: dict[tuple, list] = {}  # block shape -> its threads, idle between blocks

    def run_block(manager, grid_point, *args) -> None:
        shape = tuple(manager._block_dim)
        threads = kept.pop(shape, None)
        if threads is None:
            threads = [KeptThread(manager, point) for point in np.ndindex(*shape)]
            for thread in threads:
                thread.start()
        block = Block(manager, threads)
        for thread in threads:
            thread.jobs.put((block, grid_point, args))
        with block.lock:
            while block.live and block.failed is None:
                block.ended.wait()
        failed = block.failed
        if failed is not None:  # the aborted threads end on their own: these are not kept
            for thread in threads:
                thread.jobs.put(None)
            raise failed.exception[0].with_traceback(failed.exception[1])
        kept[shape] = threads

    sim_kernel.BlockManager.run = run_block


def assert_simulator_ok(
    script: str, timeout: float, row_kernels: bool = True, threads: bool = False
) -> None:
    """Runs ``script`` with ``NUMBA_ENABLE_CUDASIM=1``; it must exit 0 and print
    ``SIMULATOR-OK`` (the end of its stderr is the failure message). ``row_kernels``: with
    :data:`ROW_KERNELS` first (else the default configuration, where calls of few rows run a
    thread a path). ``threads``: the blocks on operating-system threads, which the interpreter
    may switch at any point (:func:`run_blocks_by_events`), for scripts that test the
    simulator's own thread safety."""
    if row_kernels:
        script = ROW_KERNELS + script
    script = (THREAD_BLOCKS if threads else RUN_BLOCKS) + script
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    env["PYTHONPATH"] = os.pathsep.join([HERE, os.path.dirname(HERE), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0 and "SIMULATOR-OK" in proc.stdout, proc.stderr[-4000:]


def nvvm_available() -> bool:
    """Whether NVVM (the CUDA toolkit's compiler) loads: PTX checks need it, not a GPU."""
    try:
        from numba.cuda.cudadrv.nvvm import NVVM

        NVVM()
        return True
    except Exception:
        return False
