"""Saved builds of large model files: the loaded ensemble and its packed model, on disk.

Loading a model file of millions of nodes and packing its paths takes seconds even with every
kernel compiled. For a model file of more than ``large_model_file_bytes`` bytes
(:class:`~distshap.plan.config.Config`), the explainer's build is kept in the
compile cache's directory (``distshap-builds`` in :func:`distshap.compile_cache.cache_dir`),
and a later process with the same file maps it back instead of building it again:

* the key of a file is the SHA-256 of its bytes (hashed in pieces, in threads), of distshap's
  own source files, and of the NumPy and Python versions: any change to the file or to the code
  that builds from it gives a new key. :func:`load_ensemble` keys the loaded ensemble by it;
  :func:`load_packed` keys a packed model by it, the packing options and the input encoding;
* an entry is one file: the object pickled with its arrays out of band, each array's bytes
  aligned and checked (a CRC-32 of each piece of 16 MB), written to a temporary file and
  renamed into place, in a background thread (:func:`store`), so a partly written entry is
  never seen; entries beyond the configuration's ``saved_build_bytes`` in all are removed, the
  least recently used first (0: nothing is saved or read); the first entry a process saves is
  announced in one line (logger ``distshap.compile``) with its size, its place and how to turn
  saving off;
* a read maps the file copy-on-write, checks every array's bytes and only then unpickles, so the
  arrays are the saved ones bit for bit, writable (private pages), and read from the page cache
  only where used. An entry that fails any check (truncated, corrupted, unreadable) is removed
  and the build runs as without it.

A loaded or mapped ensemble's key is also noted under its file's identity (device, inode,
size, times) and the code's key (in ``distshap-build-notes`` beside the entries), so
:func:`saved` tells whether a file has a saved ensemble without reading it (the loader's
warm-up, :mod:`distshap.models._threaded`, is then skipped).

The packed model of an ensemble is taken from the cache only for the very ensemble object
:func:`load_ensemble` returned (not a copy with other covers or missing value), with the same
options, encoding and margin arrays as saved.

What is computed from such a packed model alone (the host arrays of its device model and plans)
is kept beside it by :func:`load_derived`: keyed by the code, the packed model's digest and the
inputs the caller names (the configuration fields it depends on), saved by the first process
that computes it, mapped back and checked like the rest by the later ones.
"""

from __future__ import annotations

import functools
import hashlib
import mmap
import os
import pickle
import sys
import threading
import time
import uuid
import weakref
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np

from distshap import compile_cache
from distshap.parallel import run_ranges

__all__ = [
    "directory", "file_key", "key_of", "load", "load_derived", "load_ensemble", "load_packed",
    "max_bytes", "saved", "store", "wait_stores",
]  # fmt: skip

_PIECE = 1 << 24  # bytes hashed per piece, in threads
_MAGIC = b"distshap-build-1"
_KEYS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # ensemble -> its file's key
_PACKED: weakref.WeakSet = weakref.WeakSet()  # packed models of saved builds (load_packed)
_STORES: list[threading.Thread] = []
_ANNOUNCED: list[bool] = []  # the first save of this process was announced


def max_bytes() -> int:
    """Entries kept in all, bytes (the configuration's ``saved_build_bytes``): the least
    recently used are removed beyond it, an entry larger is not written; 0: none is kept."""
    from distshap.plan.config import get_config

    return max(int(get_config().saved_build_bytes), 0)


def directory() -> str | None:
    """Where entries are kept: ``distshap-builds`` in the compile cache's directory (None
    without one: nothing is kept)."""
    root = compile_cache.cache_dir()
    return None if root is None else os.path.join(root, "distshap-builds")


def _pieces(buffer: Any, check: Any, threads: bool) -> list:
    """``check`` of each piece of :data:`_PIECE` bytes of ``buffer``, in threads (or in this
    one: the same list)."""
    raw = memoryview(buffer).cast("B")
    pieces = [raw[lo : lo + _PIECE] for lo in range(0, max(len(raw), 1), _PIECE)]
    out = [None] * len(pieces)

    def check_pieces(lo: int, hi: int) -> None:
        for j in range(lo, hi):
            out[j] = check(pieces[j])

    if threads:
        run_ranges(check_pieces, len(pieces), len(pieces))
    else:
        check_pieces(0, len(pieces))
    return out


def _sha256(buffer: Any) -> bytes:
    """SHA-256 of ``buffer``'s bytes, as the digest of its pieces' digests (in threads)."""
    digests = _pieces(buffer, lambda piece: hashlib.sha256(piece).digest(), True)
    return hashlib.sha256(b"".join(digests)).digest()


def _crcs(buffer: Any, threads: bool = True) -> list[int]:
    """CRC-32 of each piece of ``buffer``: what an entry's arrays are checked by (a check for
    damaged bytes, at memory speed; the key, not this, tells files apart)."""
    return _pieces(buffer, zlib.crc32, threads)


@functools.cache
def _code_key() -> bytes:
    """SHA-256 of distshap's source files, NumPy's and Python's versions."""
    root = os.path.dirname(os.path.abspath(__file__))
    h = hashlib.sha256(f"{np.__version__} {sys.version} {sys.byteorder}".encode())
    for folder, dirs, files in sorted(os.walk(root)):
        dirs.sort()
        for name in sorted(f for f in files if f.endswith(".py")):
            path = os.path.join(folder, name)
            h.update(os.path.relpath(path, root).encode())
            with open(path, "rb") as fh:
                h.update(hashlib.sha256(fh.read()).digest())
    return h.digest()


def file_key(model: Any, min_bytes: int) -> str | None:
    """The key of the model file ``model`` (:mod:`distshap.build_cache`), or None: not a path
    of a file of more than ``min_bytes`` bytes, or no cache directory."""
    if directory() is None or not isinstance(model, (str, os.PathLike)) or not max_bytes():
        return None
    try:
        with open(model, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size <= min_bytes:
                return None
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
                digest = _sha256(data)
    except (OSError, ValueError):
        return None  # the loader says what is wrong with it
    return hashlib.sha256(_code_key() + digest).hexdigest()


def key_of(ensemble: Any) -> str | None:
    """The file key of an ensemble :func:`load_ensemble` returned (None for any other)."""
    try:
        return _KEYS.get(ensemble)
    except TypeError:
        return None


def _path(name: str) -> str:
    return os.path.join(directory() or "", name + ".bin")


def load(name: str) -> Any:
    """The object of the entry ``name``, its arrays checked bit for bit; None where there is
    none, or it fails a check (then it is removed)."""
    path = _path(name)
    try:
        with open(path, "rb") as fh:
            data = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY)
    except (OSError, ValueError):
        return None
    try:
        if data[: len(_MAGIC)] != _MAGIC:
            raise ValueError("not an entry")
        n = int.from_bytes(data[-8:], "little")
        spans, checks, head = pickle.loads(data[len(data) - 8 - n : len(data) - 8])
        view = memoryview(data)
        buffers = [view[at : at + size] for at, size in spans]
        if [_crcs(b) for b in buffers] != checks:
            raise ValueError("an array's bytes differ from the ones saved")
        value = pickle.loads(head, buffers=buffers)
    except Exception:  # noqa: BLE001 - any failure: not to be trusted, built again
        _remove(path)
        return None
    try:
        os.utime(path)  # recently used
    except OSError:  # a read-only directory, another user's entry: still sound
        pass
    return value


def store(name: str, value: Any) -> None:
    """Write ``value`` as the entry ``name``, in a background thread (the process waits for it
    at exit; :func:`wait_stores`); then remove the least recently used entries beyond
    the configuration's ``saved_build_bytes``."""
    thread = threading.Thread(target=_write, args=(name, value, max_bytes()),
                              name="distshap-build-cache")  # fmt: skip
    _STORES.append(thread)
    thread.start()


def wait_stores() -> None:
    """Wait for the entries :func:`store` is writing."""
    while _STORES:
        _STORES.pop().join()


def _writing(path: str) -> bool:
    """Whether the entry at ``path`` exists, or another process is writing it (a temporary file
    of it less than an hour old): processes that start on one model together write it once."""
    folder, base = os.path.split(path)
    try:
        if os.path.exists(path):
            return True
        for name in os.listdir(folder):
            if name.startswith(base + ".") and name.endswith(".tmp"):
                if time.time() - os.stat(os.path.join(folder, name)).st_mtime < 3600:
                    return True
    except OSError:
        pass
    return False


def _write(name: str, value: Any, limit: int) -> None:
    """The entry ``name`` of ``value`` written (in the background: hashed in this thread, the
    thread pool being shut down at exit), then :func:`_evict`."""
    buffers: list[pickle.PickleBuffer] = []
    temporary = ""
    try:
        head = pickle.dumps(value, protocol=5, buffer_callback=buffers.append)
        raws = [b.raw() for b in buffers]
        size = sum(r.nbytes for r in raws)
        if size > limit:
            return
        os.makedirs(directory() or "", exist_ok=True)
        path = _path(name)
        if _writing(path):
            return
        _announce(size)
        temporary = f"{path}.{os.getpid()}.{uuid.uuid4().hex}.tmp"
        spans = []
        with open(temporary, "wb") as fh:
            fh.write(_MAGIC)
            for raw in raws:
                fh.write(b"\0" * (-fh.tell() % 64))  # aligned arrays
                spans.append((fh.tell(), raw.nbytes))
                fh.write(raw)
            checks = [_crcs(r, threads=False) for r in raws]
            footer = pickle.dumps((spans, checks, head), protocol=5)
            fh.write(footer)
            fh.write(len(footer).to_bytes(8, "little"))
        os.replace(temporary, path)
    except Exception:  # noqa: BLE001 - nothing saved: a later process builds again
        _remove(temporary)
        return
    _evict(limit)


def _announce(size: int) -> None:
    """One line, the first time this process saves an entry: what, how large, where, and how
    to turn it off."""
    if _ANNOUNCED:
        return
    _ANNOUNCED.append(True)
    compile_cache.logger.warning(
        "distshap: saving this model file's build (%.1f GB) in %s, so that later processes "
        "map it back instead of loading and packing it again; "
        "distshap.set_config(saved_build_bytes=0) turns this off",
        size / 1e9, directory(),
    )  # fmt: skip


def _evict(limit: int | None = None) -> None:
    """Remove the least recently used entries beyond ``limit`` bytes in all (default
    :func:`max_bytes`), and temporary files a day old (left by a process ended while
    writing)."""
    folder = directory()
    try:
        names = os.listdir(folder)
        for name in (n for n in names if n.endswith(".tmp")):
            path = os.path.join(folder, name)
            if time.time() - os.stat(path).st_mtime > 86400:
                _remove(path)
        _forget(set(names))
        entries = [os.path.join(folder, n) for n in names if n.endswith(".bin")]
        stats = sorted(((os.stat(p).st_mtime, os.stat(p).st_size, p) for p in entries),
                       reverse=True)  # fmt: skip
    except (OSError, TypeError):
        return
    total, limit = 0, max_bytes() if limit is None else limit
    for _, size, path in stats:
        total += size
        if total > limit:
            _remove(path)


def _forget(names: set[str]) -> None:
    """Remove the notes (:func:`_note`) of entries not among ``names``, noted more than an
    hour ago: a note is made as its entry starts to be written (in the background, and maybe
    by another process), so a younger one may name an entry still on its way (:func:`saved`
    checks the entry itself)."""
    folder = _notes()
    try:
        notes = os.listdir(folder) if folder is not None else []
    except OSError:
        return
    for name in notes:
        path = os.path.join(folder, name)
        key = _noted(path)
        if key is None or f"{key}.ensemble.bin" not in names:
            try:
                if time.time() - os.stat(path).st_mtime < 3600:
                    continue
            except OSError:
                continue
            _remove(path)


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


def _identity(model: Any) -> tuple | None:
    """The file ``model`` as the system tells it apart: device, inode, size and times."""
    try:
        st = os.stat(model)
    except (OSError, TypeError, ValueError):
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def load_ensemble(model: Any, min_bytes: int, load_model: Any) -> Any:
    """``load_model(model)``, or the ensemble saved for the same file (and code) before; the
    ensemble is keyed by its file for :func:`load_packed`, and saved when it was loaded (not
    where the file changed between its key and its load: the key would not be of its bytes).
    Its key is noted under the file's identity (:func:`saved`)."""
    before = _identity(model)
    key = file_key(model, min_bytes)
    ensemble = None if key is None else load(f"{key}.ensemble")
    if ensemble is None:
        ensemble = load_model(model)
        if key is not None and _identity(model) != before:
            key = None
        if key is not None:
            store(f"{key}.ensemble", ensemble)
    if key is not None:
        _KEYS[ensemble] = key
        _note(before, key)
    return ensemble


def _note_path(identity: tuple | None) -> str | None:
    """The note of a file identity (:func:`_identity`) under this code: where :func:`saved`
    finds the key of the file's entry without reading the file."""
    folder = _notes()
    if identity is None or folder is None:
        return None
    name = hashlib.sha256(repr(identity).encode() + _code_key()).hexdigest()[:32]
    return os.path.join(folder, f"{name}.key")


def _notes() -> str | None:
    """Where the notes of :func:`_note` are kept: ``distshap-build-notes`` beside
    :func:`directory`."""
    root = compile_cache.cache_dir()
    return None if root is None else os.path.join(root, "distshap-build-notes")


def _note(identity: tuple | None, key: str) -> None:
    """Note ``key`` as the key of the file of ``identity`` (once; nothing where it cannot be
    written)."""
    path = _note_path(identity)
    if path is None or _noted(path) == key:
        return
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        temporary = f"{path}.{os.getpid()}.{uuid.uuid4().hex}.tmp"
        with open(temporary, "w") as fh:
            fh.write(key)
        os.replace(temporary, path)
    except OSError:
        pass


def _noted(path: str) -> str | None:
    try:
        with open(path) as fh:
            return fh.read(100).strip() or None
    except OSError:
        return None


def saved(model: Any) -> bool:
    """Whether the model file ``model`` has a saved ensemble, told without reading the file:
    by the key :func:`load_ensemble` noted for the file as it is now (device, inode, size and
    times) under this code, and that key's entry on disk (not checked yet: :func:`load` checks
    it, and a model whose entry fails its checks is loaded as without it)."""
    if directory() is None or not max_bytes():
        return False
    path = _note_path(_identity(model))
    key = None if path is None else _noted(path)
    return key is not None and os.path.exists(_path(f"{key}.ensemble"))


def _same(a: Any, b: Any) -> bool:
    """Whether two values are equal, arrays bit for bit (dtype, shape and bytes)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
            return False
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        bits = [np.ascontiguousarray(x).reshape(-1).view(np.uint8) for x in (a, b)]
        return _equal_bytes(*bits)
    if isinstance(a, float) and isinstance(b, float) and a != a and b != b:
        return True  # NaN: the same missing-value sentinel
    return bool(a == b)


def _equal_bytes(x: np.ndarray, y: np.ndarray) -> bool:
    """Whether two uint8 arrays of one length hold the same bytes, compared in pieces of
    :data:`_PIECE` bytes in threads (NumPy compares without the GIL)."""
    n = x.shape[0]
    los = list(range(0, max(n, 1), _PIECE))
    same = [True] * len(los)

    def compare(i: int, j: int) -> None:
        for k in range(i, j):
            same[k] = bool(np.array_equal(x[los[k] : los[k] + _PIECE], y[los[k] : los[k] + _PIECE]))

    run_ranges(compare, len(los), len(los))
    return all(same)


def load_packed(ensemble: Any, options: dict, build: Any) -> Any:
    """``build()``, or the packed model saved for the same file, options and inputs before.

    ``options``: :func:`distshap.packed.pack_ensemble`'s arguments; the margin arrays and the
    encoding must equal the saved model's, bit for bit. Only for an ensemble
    :func:`load_ensemble` keyed; the packed model it builds is saved.
    """
    key = key_of(ensemble)
    if key is None:
        return build()
    plain = {k: v for k, v in sorted(options.items()) if k not in ("margin", "encoding")}
    name = f"{key}.packed.{hashlib.sha256(repr(plain).encode()).hexdigest()[:32]}"
    packed = load(name)
    if packed is not None and _same(packed.margin, options.get("margin")):
        encoding = options.get("encoding")
        if encoding is None or _same(vars(packed.encoding), vars(encoding)):
            _PACKED.add(packed)
            return packed
    packed = build()
    store(name, packed)
    _PACKED.add(packed)
    return packed


def load_derived(packed: Any, part: str, inputs: Any, build: Callable[[], Any]) -> Any:
    """``build()``, or the value saved for ``packed`` under ``part`` and ``inputs`` before.

    For a packed model :func:`load_packed` returned (a saved build's): the value is keyed by
    distshap's code, ``packed.digest`` (its every array), ``part`` and ``repr(inputs)``, so
    other code, another model or other inputs never reuse it; where none is saved, the value
    ``build()`` gives is saved (:func:`store`). Any other packed model: ``build()``.

    Parameters
    ----------
    packed : PackedModel
        The model the value is computed from.
    part : str
        What the value is (one name per kind of value).
    inputs : object
        Everything else the value depends on (configuration fields, cost constants), by its
        ``repr``.
    build : callable
        Computes the value: a picklable object of NumPy arrays and plain values, the same
        bits for the same ``packed`` and ``inputs``.
    """
    digest = getattr(packed, "digest", "")
    try:
        known = packed in _PACKED
    except TypeError:
        known = False
    if not known or not digest or directory() is None or not max_bytes():
        return build()
    h = hashlib.sha256(_code_key() + f"{digest} {part} {inputs!r}".encode()).hexdigest()
    name = f"{h[:40]}.{part}"
    value = load(name)
    if value is None:
        value = build()
        store(name, value)
    return value
