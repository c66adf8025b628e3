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
which compiles every kernel ahead (:func:`distshap.warmup.warm_up`). The CUDA kernels have one
such line for all of them (:func:`listen_cuda`, :func:`cuda_compiling`): the first time in a
process that Numba's CUDA target starts compiling one of them (it found no entry in the cache).

Compiling ahead in helper processes. Numba compiles one function at a time in a process (its
compiler lock), mostly in Python (typing and lowering hold the GIL), so a cold start's
compilations run one after another however many cores there are. :func:`start_helpers`
starts processes that import a module (and run its ``ahead_prepare()``, e.g. a CUDA context)
and wait; :func:`compile_ahead` hands them names, each compiled by the module's
``ahead_compile(name)`` into the disk cache; :func:`wait_ahead`, called where the compiled
function is first needed, waits for the helper that compiles it, so Numba then loads it from
the cache. Nothing here changes what is compiled: a helper that fails, or a name no helper
compiles, leaves the compilation to this process, as without helpers. Without a cache
directory set (:func:`cache_dir`) nothing is started.
"""

from __future__ import annotations

import importlib
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

__all__ = [
    "ahead_waits", "announce", "cache_dir", "cached_on_disk",
    "compile_ahead", "compile_later", "compiled", "configure", "cuda_compiling",
    "default_cache_dir", "listen_cuda", "logger", "pending", "read_only", "start_helpers",
    "wait_ahead",
]  # fmt: skip

logger = logging.getLogger("distshap.compile")

_ANNOUNCED: dict[Any, tuple[str, float]] = {}  # py_func -> (what, rough seconds)
_SAID: set[Any] = set()  # py_funcs already announced in this process
_LOCK = threading.Lock()
_listening = False
_CUDA_MODULES = "distshap.kernels.cuda."  # the package of every CUDA kernel of distshap
_CUDA_SAID = "cuda"  # in _SAID once the CUDA line was said
_cuda_listening = False


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


def _where(path: str | None = None) -> str:
    """Where a compiled kernel goes, for the compile line: ``path`` (the directory Numba chose
    for the function), else :func:`cache_dir`; "not cached" where it cannot be written."""
    path = path or cache_dir()
    if path is None:
        return "cached in __pycache__ beside distshap's modules"
    existing = os.path.abspath(path)
    while not os.path.exists(existing) and os.path.dirname(existing) != existing:
        existing = os.path.dirname(existing)  # the directory Numba would create it under
    if os.path.isdir(existing) and os.access(existing, os.W_OK):
        return f"cached in {path}"
    return (f"not cached: {path} cannot be written (set NUMBA_CACHE_DIR to a writable "
            "directory)")  # fmt: skip


def _notice(py_func: Any, path: str | None = None) -> None:
    with _LOCK:
        entry = _ANNOUNCED.get(py_func)
        if entry is None or py_func in _SAID:
            return
        _SAID.add(py_func)
    what, seconds = entry
    logger.warning(
        "distshap: compiling %s for this machine, about %.0f s once (more on a busy CPU); "
        "%s (`distshap compile` compiles every kernel ahead)",
        what, seconds, _where(path),
    )  # fmt: skip


def _listen() -> None:
    """Register the listener of Numba's ``numba:compile`` events (a compilation, not a cache
    load, is starting)."""
    from numba.core import event

    class _Listener(event.Listener):
        def on_start(self, ev: Any) -> None:
            dispatcher = (ev.data or {}).get("dispatcher")
            if dispatcher is not None:  # the directory Numba caches this function in
                path = getattr(getattr(dispatcher, "stats", None), "cache_path", None)
                _notice(getattr(dispatcher, "py_func", None), path)

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


def cuda_compiling(module: str | None) -> bool:
    """Say the CUDA kernels' compile line if ``module`` (the module of a function Numba's CUDA
    target starts compiling: never one loaded from the disk cache) holds distshap's CUDA
    kernels, the first time in this process; True when the line was said."""
    if not module or not module.startswith(_CUDA_MODULES):
        return False
    with _LOCK:
        if _CUDA_SAID in _SAID:
            return False
        _SAID.add(_CUDA_SAID)
    logger.warning(
        "distshap: compiling the CUDA kernels for this GPU, about 1 s each (5 to 10 s for the "
        "first call, more on a busy CPU); %s (`distshap compile --backend cuda` "
        "compiles them ahead)",
        _where(),
    )
    return True


def listen_cuda() -> None:
    """Register the listener of the compiler passes Numba's CUDA target runs (each pass of a
    compilation, not of a cache load), which calls :func:`cuda_compiling`: on Numba's own
    events (``numba:run_pass``), and on numba-cuda's where it has its own compiler
    (``numba-cuda:run_pass``). Idempotent; run by :mod:`distshap.kernels.cuda.runtime.device`."""
    global _cuda_listening
    with _LOCK:
        if _cuda_listening:
            return
        _cuda_listening = True
    for name, kind in (("numba.core.event", "numba:run_pass"),
                       ("numba.cuda.core.event", "numba-cuda:run_pass")):  # fmt: skip
        try:
            event = importlib.import_module(name)
        except ImportError:
            continue

        class _Passes(event.Listener):
            def on_start(self, ev: Any) -> None:
                if _CUDA_SAID not in _SAID:
                    cuda_compiling((ev.data or {}).get("module"))

            def on_end(self, ev: Any) -> None:
                pass

        try:
            event.register(kind, _Passes())
        except ValueError:  # a kind this version does not know
            continue


# --------------------------------------------------------------------------------------------
# Compiling ahead in helper processes
# --------------------------------------------------------------------------------------------

#: Seconds :func:`wait_ahead` waits for one helper at most (then this process compiles).
AHEAD_TIMEOUT_S = 300.0
_HELPERS_LOCK = threading.Lock()
_IDLE: dict[str, list[subprocess.Popen]] = {}  # module -> helpers waiting for names
_PENDING: dict[str, tuple[str, subprocess.Popen]] = {}  # name -> (module, its helper)
_WAITED: dict[str, float] = {}  # name -> seconds this process waited for it
_RUNS: dict[str, str] = {}  # module -> the module its helpers import (start_helpers' runs)


def _start_helper(module: str, later: bool = False) -> subprocess.Popen | None:
    if getattr(sys, "frozen", False):  # a frozen app's executable is the app, not Python
        return None
    code = f"from distshap.compile_cache import _helper; _helper({module!r}, {later!r})"
    try:
        return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    except OSError:
        return None


def start_helpers(module: str, count: int, runs: str | None = None) -> None:
    """Start ``count`` helper processes that import ``module`` (and run its
    ``ahead_prepare()``), then wait for :func:`compile_ahead` to give them names.

    ``runs``: the module the helpers import instead (its ``ahead_prepare`` and
    ``ahead_compile``), from now on for every helper of ``module``; their names are still
    given and waited for as ``module``'s (:func:`wait_ahead`). Nothing is started without a
    cache directory (:func:`cache_dir`). A helper given no names exits when this process does,
    or when :func:`compile_ahead` releases it.
    """
    if cache_dir() is None or count <= 0:
        return
    if runs is not None:
        _RUNS[module] = runs
    runs = _RUNS.get(module, module)
    started = [p for p in (_start_helper(runs) for _ in range(count)) if p is not None]
    with _HELPERS_LOCK:
        _IDLE.setdefault(module, []).extend(started)


def compile_ahead(module: str, names: Iterable[str | tuple[str, ...]], processes: int = 1) -> None:
    """Have helpers of ``module`` compile ``names`` (its ``ahead_compile(name)`` each) into
    the disk cache: the idle ones :func:`start_helpers` started, else up to ``processes`` new
    ones. A tuple of names goes to one helper, in order: functions that share a cache index
    (closures of one factory) must, as Numba rewrites a whole index file to add an entry.
    Idle helpers left without a name are released.
    """
    with _HELPERS_LOCK:
        idle = _IDLE.pop(module, [])
        todo = [(n,) if isinstance(n, str) else tuple(n) for n in names]
        todo = [t for t in (tuple(n for n in t if n not in _PENDING) for t in todo) if t]
    if todo and cache_dir() is not None and not idle:
        runs = _RUNS.get(module, module)
        idle = [p for p in (_start_helper(runs) for _ in range(processes)) if p is not None]
    shares: list[list[str]] = [[] for _ in idle]
    for names_of_one in sorted(todo, key=len, reverse=True):  # the largest groups first
        min(shares, key=len).extend(names_of_one)
    given = {}
    for proc, group in zip(idle, shares, strict=True):
        try:
            proc.stdin.write("".join(f"{n}\n" for n in group).encode())
            proc.stdin.close()
        except OSError:
            continue  # a helper that died: this process compiles its names
        given.update(dict.fromkeys(group, (module, proc)))
    with _HELPERS_LOCK:
        _PENDING.update(given)


def wait_ahead(
    names: Iterable[str] | None = None, module: str | None = None, timeout: float | None = None
) -> float:
    """Wait for the helpers compiling ``names`` (or every name given to helpers of
    ``module``; a name no helper has: no wait), at most ``timeout`` seconds each (default
    :data:`AHEAD_TIMEOUT_S`; a helper still busy then is ended, its names compiled here); the
    seconds waited (also in :func:`ahead_waits`)."""
    timeout = AHEAD_TIMEOUT_S if timeout is None else timeout
    if not _PENDING:
        return 0.0
    if names is None:
        with _HELPERS_LOCK:
            names = [n for n, (m, _) in _PENDING.items() if m == module]
    total = 0.0
    for name in names:
        with _HELPERS_LOCK:
            _, proc = _PENDING.pop(name, (None, None))
        if proc is None:
            continue
        t0 = time.perf_counter()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:  # compiled here instead: its other names too
            proc.kill()
            proc.wait()
        waited = time.perf_counter() - t0
        _WAITED[name] = _WAITED.get(name, 0.0) + waited
        total += waited
    return total


def cached_on_disk(dispatcher: Any) -> bool:
    """Whether Numba's disk cache holds an index of ``dispatcher`` (a jit function, CPU or
    CUDA): compiled or loaded before on this machine (an entry may still be stale: then the
    first call compiles). True where that cannot be told, so nothing is compiled ahead."""
    try:
        return os.path.exists(dispatcher._cache._cache_file._index_path)
    except (AttributeError, TypeError):
        return True


def compiled(*dispatchers: Any) -> bool:
    """Whether calling each of ``dispatchers`` (Numba CPU jit functions) compiles nothing:
    it has a specialisation in this process or an index in the disk cache
    (:func:`cached_on_disk`)."""
    return all(bool(d.signatures) or cached_on_disk(d) for d in dispatchers)


def pending(name: str) -> bool:
    """Whether a helper compiles ``name`` for this process (:func:`compile_ahead`; not yet
    waited for): :func:`wait_ahead` then loads it from the disk cache."""
    with _HELPERS_LOCK:
        return name in _PENDING


_LATER: set[tuple[str, str]] = set()  # (module, name) given to a helper for later processes


def compile_later(module: str, name: str) -> bool:
    """Have one helper process compile ``name`` of ``module`` (its ``ahead_compile(name)``)
    into the disk cache for later processes, while this one goes on without it (its NumPy
    route); nothing waits for it, and it exits when done. The helper runs at the lowest CPU
    priority, so on a busy machine it takes only cores this process leaves idle. Once per
    name and process, and only with a cache directory; processes that start together (a
    server's fronts, Dask workers) start one for all: the first claims the name in the cache
    directory for :data:`LATER_CLAIM_S`. True when started."""
    key = (module, name)
    with _HELPERS_LOCK:
        if key in _LATER or name in _PENDING or cache_dir() is None:
            return False
        _LATER.add(key)
    if not _claim(f"{module}.{name}"):
        return False
    proc = _start_helper(module, later=True)
    if proc is None:
        return False
    try:
        proc.stdin.write(f"{name}\n".encode())
        proc.stdin.close()
    except OSError:
        return False
    return True


#: Seconds a claim of :func:`compile_later` holds (a helper that died leaves one this old).
LATER_CLAIM_S = 3600.0


def _claim(what: str) -> bool:
    """Whether this process claimed ``what`` in the cache directory: no other process did in
    the last :data:`LATER_CLAIM_S` seconds (an exclusive create of a claim file)."""
    folder = os.path.join(cache_dir() or "", "distshap-later")
    path = os.path.join(folder, what + ".claim")
    try:
        os.makedirs(folder, exist_ok=True)
        if os.path.exists(path) and time.time() - os.stat(path).st_mtime > LATER_CLAIM_S:
            os.remove(path)  # a claim of a helper long gone
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    except OSError:
        return True  # no place for claims: as before, one helper a process
    return True


def ahead_waits() -> dict[str, float]:
    """Seconds this process waited for each name compiled ahead (:func:`wait_ahead`)."""
    return dict(_WAITED)


def _helper(module_name: str, later: bool = False) -> None:
    """A helper process: import the module, prepare, then compile every name read from stdin
    (until this process's parent closes it); ``later`` (:func:`compile_later`): at the lowest
    CPU priority, nothing prepared."""
    if later and hasattr(os, "nice"):
        try:
            os.nice(19)
        except OSError:
            pass
    module = importlib.import_module(module_name)
    prepare = None if later else getattr(module, "ahead_prepare", None)
    if prepare is not None:
        prepare()
    for name in sys.stdin.read().split():
        module.ahead_compile(name)
