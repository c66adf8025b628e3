"""Runs a test script under Numba's CUDA simulator in a fresh Python (no GPU needed).

``NUMBA_ENABLE_CUDASIM`` must be set before Numba is imported, so the simulator tests run their
script in a subprocess with ``tests/`` and the repository root on ``PYTHONPATH``.
"""

from __future__ import annotations

import os
import subprocess
import sys

__all__ = ["assert_simulator_ok", "nvvm_available", "poll_blocks_gently"]

HERE = os.path.dirname(os.path.abspath(__file__))


#: Prepended to a script: SHAP calls of few rows take the row kernels and the usual plan's
#: chunks (for more than ``few_rows`` rows, whatever the model's size), which the scripts (a few
#: rows each, the simulator being slow) were written to exercise.
ROW_KERNELS = (
    "from distshap.plan.config import set_config\n"
    "set_config(path_thread_rows=0, few_rows_blocks=0)\n"
)


#: Prepended to every script: the simulator's blocks polled by :func:`poll_blocks_gently`.
GENTLE_POLLS = "import cudasim\ncudasim.poll_blocks_gently()\n"

#: Seconds the host thread sleeps between two looks at a simulated block's threads.
POLL_SECONDS = 1e-4


def poll_blocks_gently() -> None:
    """Run the simulator's blocks with a host thread that sleeps between its looks.

    Numba's simulator runs each thread of a block as a Python thread, and the host thread
    waits for them by looking at every thread's state again and again without a pause (to
    release a barrier once every live thread has reached it): it holds the interpreter lock
    the threads it waits for need. Here the host thread does the same checks, in the same
    order of consequences (a thread's exception stops the block and is raised; a barrier is
    released when every live thread waits at it), then sleeps :data:`POLL_SECONDS`, handing
    the lock to the simulated threads. The threads and their barriers are the simulator's.
    """
    import time

    import numpy as np
    from numba.cuda.simulator import kernel as sim_kernel

    def run_block(manager, grid_point, *args) -> None:
        def body():
            manager._f(*args)

        threads = [
            sim_kernel.BlockThread(body, manager, grid_point, point, manager._debug)
            for point in np.ndindex(*manager._block_dim)
        ]
        for thread in threads:
            thread.start()
        while True:
            live = [t for t in threads if t.is_alive()]
            # (after the look at who lives: a thread that failed and ended meanwhile is seen)
            failed = next((t for t in threads if t.exception), None)
            if failed is not None:
                for thread in threads:  # wake the others out of their barriers, to stop
                    thread.abort = True
                    thread.syncthreads_blocked = False
                    thread.syncthreads_event.set()
                raise failed.exception[0].with_traceback(failed.exception[1])
            if not live:
                return
            if all(t.syncthreads_blocked for t in live):  # every live thread at the barrier
                for thread in live:
                    thread.syncthreads_blocked = False
                    thread.syncthreads_event.set()
            time.sleep(POLL_SECONDS)

    sim_kernel.BlockManager.run = run_block


def assert_simulator_ok(script: str, timeout: float, row_kernels: bool = True) -> None:
    """Runs ``script`` with ``NUMBA_ENABLE_CUDASIM=1``; it must exit 0 and print
    ``SIMULATOR-OK`` (the end of its stderr is the failure message). ``row_kernels``: with
    :data:`ROW_KERNELS` first (else the default configuration, where calls of few rows run a
    thread a path)."""
    if row_kernels:
        script = ROW_KERNELS + script
    script = GENTLE_POLLS + script
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
