"""The disk-cache keys of the CUDA kernels are the same in every process, checked without a GPU.

:mod:`test_cuda_runtime_disk_cache` runs the kernels in fresh processes on the GPU machine; the keys
themselves (a pickle of each kernel's closure) need no GPU, so this check runs everywhere. A
device function that uses an object pickling with a per-process id (a Numba intrinsic bound to
a global name, ``cuda.ballot_sync``) gives every kernel closing over it a new key in every
process: each run compiles again (see :mod:`distshap.kernels.cuda.runtime.nvvm`).
"""

from __future__ import annotations

import json

from test_cuda_runtime_disk_cache import _KEYS, _python


def test_kernel_cache_keys_do_not_move_between_processes(tmp_path):
    first = json.loads(_python(_KEYS, str(tmp_path)))
    second = json.loads(_python(_KEYS, str(tmp_path)))
    assert first.keys() == second.keys() and len(first) > 40, sorted(first)
    moving = sorted(name for name in first if first[name] != second[name])
    assert not moving, f"closures pickle differently per process (new cache key each run): {moving}"
