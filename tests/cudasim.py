"""Runs a test script under Numba's CUDA simulator in a fresh Python (no GPU needed).

``NUMBA_ENABLE_CUDASIM`` must be set before Numba is imported, so the simulator tests run their
script in a subprocess with ``tests/`` and the repository root on ``PYTHONPATH``.
"""

from __future__ import annotations

import os
import subprocess
import sys

__all__ = ["assert_simulator_ok", "nvvm_available"]

HERE = os.path.dirname(os.path.abspath(__file__))


#: Prepended to a script: SHAP calls of few rows take the row kernels and the usual plan's
#: chunks (for more than ``few_rows`` rows, whatever the model's size), which the scripts (a few
#: rows each, the simulator being slow) were written to exercise.
ROW_KERNELS = (
    "from distshap.plan.config import set_config\n"
    "set_config(path_thread_rows=0, few_rows_blocks=0)\n"
)


def assert_simulator_ok(script: str, timeout: float, row_kernels: bool = True) -> None:
    """Runs ``script`` with ``NUMBA_ENABLE_CUDASIM=1``; it must exit 0 and print
    ``SIMULATOR-OK`` (the end of its stderr is the failure message). ``row_kernels``: with
    :data:`ROW_KERNELS` first (else the default configuration, where calls of few rows run a
    thread a path)."""
    if row_kernels:
        script = ROW_KERNELS + script
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
