"""LightGBM's process-wide thread limit around writing out a booster, and ``fork``.

:func:`distshap.models.lightgbm._one_thread` holds a lock and sets LightGBM's limit to one thread
while a booster is written out. A child forked meanwhile from another thread has neither the
thread that releases the lock nor the one that restores the limit: its fork handler frees the
one and restores the other, so the child's own explainers neither wait for ever nor run
LightGBM on one thread.
"""

import ctypes

import pytest

pytest.importorskip("lightgbm")
from lightgbm.basic import _LIB  # noqa: E402

from distshap.models import lightgbm as loader  # noqa: E402


def _limit() -> int:
    value = ctypes.c_int(0)
    if not hasattr(_LIB, "LGBM_GetMaxThreads"):
        pytest.skip("LightGBM < 4 has no thread limit")
    assert _LIB.LGBM_GetMaxThreads(ctypes.byref(value)) == 0
    return value.value


def test_a_child_forked_during_a_save_gets_the_lock_and_the_limit_back():
    before = _limit()
    with loader._one_thread():
        assert _limit() == 1
        held = loader._MAX_THREADS_LOCK
        assert held.locked()
        loader._after_fork_in_child()  # what the child runs after os.fork
        assert _limit() == before
        assert not loader._MAX_THREADS_LOCK.locked()
        with loader._one_thread():  # a save in the child neither waits nor keeps the limit
            assert _limit() == 1
        assert _limit() == before
    assert _limit() == before and not held.locked()
