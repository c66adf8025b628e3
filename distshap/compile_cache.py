"""Where distshap's compiled CPU kernels are kept, and the one line said before a long compile.

Numba compiles a kernel on its first call and keeps it in its disk cache; by default beside
the source, in ``site-packages/distshap/**/__pycache__``: lost when the package is reinstalled,
unwritable in read-only images. :func:`configure` (run by ``import distshap``, before distshap
imports Numba) points ``NUMBA_CACHE_DIR`` to a user cache directory instead when it is not set:
``$XDG_CACHE_HOME/distshap/numba`` (default ``~/.cache/distshap/numba``; ``~/Library/Caches``
on macOS, ``%LOCALAPPDATA%`` on Windows). A ``NUMBA_CACHE_DIR`` set by the user is kept. Numba
keys each entry by function, argument types and CPU, and checks it against the source file (by
its content from Numba 0.68, by its modification time before), so reinstalling the same version
reuses the cache.

:func:`announce` registers a kernel whose compilation takes noticeably long; when Numba is
about to compile it (no usable entry in the cache, never when the cache is warm) the logger
``distshap.compile`` says so in one line, with the cache directory and ``distshap compile``,
which compiles every kernel ahead (:func:`distshap.warmup.warm_up`).
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["announce", "cache_dir", "configure", "default_cache_dir", "logger", "read_only"]

logger = logging.getLogger("distshap.compile")

_ANNOUNCED: dict[Any, tuple[str, float]] = {}  # py_func -> (what, rough seconds)
_SAID: set[Any] = set()  # py_funcs already announced in this process
_LOCK = threading.Lock()
_listening = False


def default_cache_dir() -> str:
    """The user cache directory distshap gives Numba when ``NUMBA_CACHE_DIR`` is not set."""
    if sys.platform == "win32":
        root = os.environ.get("LOCALAPPDATA") or os.path.expanduser("~\\AppData\\Local")
    elif sys.platform == "darwin":
        root = os.path.expanduser("~/Library/Caches")
    else:
        root = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return os.path.join(root, "distshap", "numba")


def _writable(path: str) -> bool:
    try:
        os.makedirs(path, exist_ok=True)
        tempfile.TemporaryFile(dir=path).close()
    except OSError:
        return False
    return True


def configure() -> None:
    """Point ``NUMBA_CACHE_DIR`` to :func:`default_cache_dir` unless it is set (or not writable).

    Set in the environment, it reaches the processes distshap starts (Dask workers) too. When
    Numba was imported before distshap, its configuration is updated as well, so distshap's
    kernels (decorated later) use it.
    """
    if os.environ.get("NUMBA_CACHE_DIR"):
        return
    path = default_cache_dir()
    if not _writable(path):
        return  # Numba's own default: beside the source, or its user-wide directory
    os.environ["NUMBA_CACHE_DIR"] = path
    config = sys.modules.get("numba.core.config")
    if config is not None:
        config.CACHE_DIR = path


def cache_dir() -> str | None:
    """Where Numba caches distshap's kernels in this process: ``NUMBA_CACHE_DIR``, or None
    when Numba uses its default (``__pycache__`` beside each module of the package)."""
    return os.environ.get("NUMBA_CACHE_DIR") or None


def read_only(a: Any) -> Any:
    """A read-only view of the array ``a``: kernels take the rows they explain read-only, so a
    caller's read-only array (a memory-mapped file) and a writable one share one compiled
    specialisation (and one cache entry, the one ``distshap compile`` made)."""
    view = a.view()
    view.flags.writeable = False
    return view


def _notice(py_func: Any) -> None:
    with _LOCK:
        entry = _ANNOUNCED.get(py_func)
        if entry is None or py_func in _SAID:
            return
        _SAID.add(py_func)
    what, seconds = entry
    where = cache_dir() or "__pycache__ beside distshap's modules"
    logger.warning(
        "distshap: compiling %s for this machine, about %.0f s once (more on a busy CPU); "
        "cached in %s (`distshap compile` compiles every kernel ahead)",
        what, seconds, where,
    )  # fmt: skip


def _listen() -> None:
    """Register the listener of Numba's ``numba:compile`` events (a compilation, not a cache
    load, is starting)."""
    from numba.core import event

    class _Listener(event.Listener):
        def on_start(self, ev: Any) -> None:
            dispatcher = (ev.data or {}).get("dispatcher")
            if dispatcher is not None:
                _notice(getattr(dispatcher, "py_func", None))

        def on_end(self, ev: Any) -> None:
            pass

    event.register("numba:compile", _Listener())


def announce(what: str, seconds: float) -> Callable[[Any], Any]:
    """A decorator registering a Numba CPU dispatcher as taking about ``seconds`` to compile.

    When Numba is about to compile it (a cache miss), the first time in a process, the logger
    ``distshap.compile`` warns in one line naming ``what``::

        @announce("the CPU SHAP kernel", 2)
        @njit(nogil=True, cache=True)
        def _shap_rows(...): ...
    """

    def register(dispatcher: Any) -> Any:
        global _listening
        with _LOCK:
            _ANNOUNCED[dispatcher.py_func] = (what, float(seconds))
            if not _listening:
                _listen()
                _listening = True
        return dispatcher

    return register
