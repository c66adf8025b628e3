"""Where an output may be written, and writing it whole or not at all.

Checked before any work: the format from the output's name (and the package that writes it),
a directory that exists and a name its file system holds (:func:`output_format`,
:func:`image_format`); :func:`check_output` refuses an output that is an input, lies inside an
input directory or contains an input, and an existing output unless ``overwrite`` is given (and
then only one distshap could have written: a file of that format, or a Zarr array). Every
writer stages its output under a hidden temporary name in the same directory
(:func:`staged_output`) and renames it into place once it is complete, Ctrl-C and SIGTERM held
back for the rename, so a failure (an exception, a full disk, a lost worker, Ctrl-C or
SIGTERM) leaves the previous output untouched and nothing under the output's name; the
temporaries a killed run leaves are removed by the next write to the same output
(:func:`remove_stale`).
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import os
import re
import shutil
import signal
import socket
import threading
import uuid
from collections.abc import Iterable, Iterator
from typing import Any

from distshap.io.errors import InputError

__all__ = [
    "check_output",
    "check_replaceable",
    "image_format",
    "output_format",
    "remove_stale",
    "require_zarr",
    "staged_output",
]

_IMAGES = {".png": "png", ".svg": "svg", ".pdf": "pdf", ".jpg": "jpg", ".jpeg": "jpg"}
_MAGIC = {
    "npy": (b"\x93NUMPY",),
    "parquet": (b"PAR1",),
    "png": (b"\x89PNG\r\n\x1a\n",),
    "pdf": (b"%PDF",),
    "jpg": (b"\xff\xd8\xff",),
    "svg": (b"<?xml", b"<svg"),
}
_WHAT = {"npy": "a .npy file", "parquet": "a Parquet file", "zarr": "a Zarr array"}


def output_format(path: str, interactions: bool = False) -> str:
    """``"npy"``, ``"parquet"`` or ``"zarr"`` from the extension of ``path``.

    Raises
    ------
    InputError
        Unknown extension, Parquet for interaction values, or a path whose parent directory
        does not exist.
    """
    lower = path.lower().rstrip("/\\")
    if lower.endswith(".npy"):
        fmt = "npy"
    elif lower.endswith((".parquet", ".pq")):
        fmt = "parquet"
    elif lower.endswith(".zarr"):
        fmt = "zarr"
    else:
        raise InputError(
            f"cannot tell the output format of {path!r}: end OUT with .npy, .parquet or .zarr"
        )
    if fmt == "parquet" and interactions:
        raise InputError(
            f"interaction values are (n, F+1, F+1) per output, which Parquet columns cannot hold: "
            f"write them to .npy or .zarr instead of {path!r}"
        )
    _check_parent(path)
    if fmt == "zarr":
        require_zarr()
    elif fmt == "parquet":
        _require_pyarrow()
    return fmt


def image_format(path: str) -> str:
    """``"png"``, ``"svg"``, ``"pdf"`` or ``"jpg"`` from the extension of ``path``."""
    ext = os.path.splitext(path.lower())[1]
    if ext not in _IMAGES:
        raise InputError(f"cannot tell the image format of {path!r}: use .png/.svg/.pdf")
    _check_parent(path)
    return _IMAGES[ext]


def _check_parent(path: str) -> None:
    """The directory of ``path`` exists and can hold its name (checked before any work)."""
    parent, base = os.path.split(os.path.abspath(path.rstrip("/\\")))
    if not os.path.isdir(parent):
        raise InputError(f"the directory of OUT {path!r} does not exist: create {parent!r} first")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(
            f"the directory of OUT {path!r} is not writable by this user: choose another one, "
            f"or change the permissions of {parent!r}"
        )
    limit = _name_max(parent)
    if len(os.fsencode(base)) > limit:
        raise InputError(
            f"OUT {base[:40]!r}... is a name of {len(os.fsencode(base))} bytes but the file "
            f"system of {parent!r} allows {limit}: choose a shorter name"
        )


# ------------------------------------------------------------------------------------------
# what may be written where
# ------------------------------------------------------------------------------------------


def _inside(child: str, parent: str) -> bool:
    return child.startswith(parent.rstrip(os.sep) + os.sep)


def check_output(path: str, fmt: str, inputs: Iterable[str] = (), overwrite: bool = False) -> None:
    """Refuse to write ``path`` where it would lose data.

    Parameters
    ----------
    path : str
        The output.
    fmt : str
        Its format (:func:`output_format` or an image format).
    inputs : iterable of str
        What the run reads: files, input directories and globs (the data spec, its files, the
        model file).
    overwrite : bool
        Replace an existing output (``--overwrite``).

    Raises
    ------
    InputError
        ``path`` is an input, contains one (a directory holding an input), lies inside an input
        directory or matches an input glob (a later run would read it); or it exists and
        ``overwrite`` is false, or it exists but is not what distshap writes in ``fmt``.
    """
    out = os.path.realpath(path.rstrip("/\\") or path)
    for spec in inputs:
        _check_not_input(path, out, spec)
    if os.path.lexists(path.rstrip("/\\") or path):
        check_replaceable(path, fmt)
        if not overwrite:
            raise InputError(
                f"OUT {path!r} already exists: pass --overwrite to replace it (the old output "
                "stays until the new one is complete), or choose another name"
            )


def _check_not_input(path: str, out: str, spec: str) -> None:
    if any(ch in spec for ch in "*?[") and not os.path.exists(spec):
        if fnmatch.fnmatch(os.path.abspath(path), os.path.abspath(spec)):
            raise InputError(
                f"OUT {path!r} matches the input glob {spec!r}, so a later run would read it as "
                "input: write the output elsewhere"
            )
        return
    target = os.path.realpath(spec)
    if out == target:
        raise InputError(
            f"OUT {path!r} is the input {spec!r}: distshap never overwrites an input; write "
            "the output to another name"
        )
    if _inside(target, out):
        raise InputError(
            f"OUT {path!r} contains the input {spec!r}: distshap never deletes or replaces an "
            "input; write the output to another name"
        )
    if os.path.isdir(target) and _inside(out, target):
        raise InputError(
            f"OUT {path!r} is inside the input directory {spec!r}, so a later run would read it "
            "as input: write the output to another directory"
        )


def check_replaceable(path: str, fmt: str) -> None:
    """Refuse to replace ``path`` unless it is what distshap writes in ``fmt``.

    A regular file starting with the format's signature, or for Zarr a directory holding a
    Zarr array and nothing else, so that replacing it deletes nothing distshap did not write.
    """
    path = path.rstrip("/\\") or path
    what = _WHAT.get(fmt, f"a .{fmt} image")
    if os.path.islink(path):
        raise InputError(
            f"OUT {path!r} is a symbolic link: distshap replaces only {what} it could have "
            "written; remove the link or choose another name"
        )
    if fmt == "zarr":
        foreign = _foreign_zarr_entry(path)
        if foreign is not None:
            raise InputError(
                f"OUT {path!r} exists and is not a Zarr array ({foreign}): distshap deletes "
                "nothing it did not write; move it away or choose another name"
            )
        return
    head = b""
    if os.path.isfile(path):
        with open(path, "rb") as fh:
            head = fh.read(16)
    if not any(head.lstrip().startswith(magic) for magic in _MAGIC[fmt]):
        raise InputError(
            f"OUT {path!r} exists and is not {what}: distshap replaces only {what}, never "
            "another file; move it away or choose another name"
        )


_ZARR_META = {".zarray", ".zattrs", "zarr.json"}
_ZARR_CHUNK = re.compile(r"^(c|\d+(\.\d+)*)$")


def _foreign_zarr_entry(path: str) -> str | None:
    """Why ``path`` is not a Zarr array distshap may replace, or ``None`` when it is one."""
    if not os.path.isdir(path):
        return "not a directory"
    top = set(os.listdir(path))
    if not top & {".zarray", "zarr.json"}:
        return "no .zarray or zarr.json in it"
    for root, dirs, names in os.walk(path):
        for name in dirs + names:
            ok = _ZARR_CHUNK.match(name) or (root == path and name in _ZARR_META)
            if not ok or os.path.islink(os.path.join(root, name)):
                return f"it holds {os.path.relpath(os.path.join(root, name), path)!r}"
    return None


# ------------------------------------------------------------------------------------------
# staging: a temporary name beside the output, renamed into place on success
# ------------------------------------------------------------------------------------------

_HOST = re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname()) or "host"
# what a staged name adds to the output's name: "." ".distshap-" PID(<=10) "-" TOKEN "-" HOST ".tmp"
_STAGE_EXTRA = 1 + 10 + 10 + 1 + 8 + 1 + len(_HOST) + 4


def _name_max(directory: str) -> int:
    try:
        return int(os.pathconf(directory, "PC_NAME_MAX"))
    except (OSError, ValueError, AttributeError):
        return 255


def _stage_base(directory: str, base: str) -> str:
    """``base`` as it appears in staged names: shortened, with a digest of the whole name,
    where the staged name would be too long for the file system (an output of any valid name
    is staged)."""
    room = _name_max(directory) - _STAGE_EXTRA
    if len(os.fsencode(base)) <= room:
        return base
    digest = hashlib.sha256(os.fsencode(base)).hexdigest()[:16]
    head = os.fsencode(base)[: max(room - 17, 0)].decode(errors="ignore")
    return f"{head}~{digest}"


_STAGED = re.compile(
    r"^\.(?P<base>.+)\.distshap-(?P<pid>\d+)-[0-9a-f]{8}-(?P<host>.+)\.(?P<kind>tmp|old)$"
)


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)


def remove_stale(path: str) -> list[str]:
    """Clean up after a killed run writing ``path``: returns the names removed or restored.

    Only names distshap stages (``.NAME.distshap-PID-TOKEN-HOST.tmp`` / ``.old``) of processes
    of this host that no longer run. A staged new output is removed; a previous output moved
    aside (``.old``) is put back when the new one never arrived, removed otherwise.
    """
    directory, base = os.path.split(os.path.abspath(path.rstrip("/\\") or path))
    staged_base = _stage_base(directory, base)
    done = []
    for name in sorted(os.listdir(directory)):
        m = _STAGED.match(name)
        if not m or m["base"] != staged_base or m["host"] != _HOST or _pid_alive(int(m["pid"])):
            continue
        staged = os.path.join(directory, name)
        final = os.path.join(directory, base)
        if m["kind"] == "old" and not os.path.lexists(final):
            os.rename(staged, final)
        else:
            _remove(staged)
        done.append(name)
    return done


def _fsync_directory(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """SIGINT and SIGTERM held back for the block, then delivered (main thread only).

    Their handlers are swapped for ones that only note the signal: whichever thread the
    kernel delivers it to, Python runs handlers in the main thread, between two steps of the
    block, which must not be cut in two.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    held = (signal.SIGINT, signal.SIGTERM)
    previous = {s: signal.signal(s, lambda signum, frame: caught.append(signum)) for s in held}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, signal.SIG_DFL if handler is None else handler)
        for s in dict.fromkeys(caught):
            signal.raise_signal(s)


def _is_output(name: str, stem: str, final: str) -> bool:
    """Whether file ``name`` is the output being written: its temporary (or a file inside it,
    for Zarr) or its final path."""
    name = os.path.abspath(name)
    return name.startswith(stem) or name == os.path.abspath(final)


@contextlib.contextmanager
def staged_output(path: str, fmt: str, overwrite: bool = False) -> Iterator[str]:
    """Yield a temporary path beside ``path``; rename it to ``path`` when the block succeeds.

    On any exception (``KeyboardInterrupt`` and ``SystemExit`` too) the temporary is removed
    and ``path`` is left as it was. An existing ``path`` is replaced only with ``overwrite``
    and only when :func:`check_replaceable` accepts it; a Zarr directory is moved aside, the
    new one renamed into place, and the old one deleted last.
    """
    final = path.rstrip("/\\") or path
    directory, base = os.path.split(os.path.abspath(final))
    remove_stale(final)
    token = f"distshap-{os.getpid()}-{uuid.uuid4().hex[:8]}-{_HOST}"
    stem = os.path.join(directory, f".{_stage_base(directory, base)}.{token}")
    tmp = stem + ".tmp"
    try:
        yield tmp
        if not os.path.lexists(tmp):
            raise RuntimeError(
                f"nothing was written for {path!r} (a distshap bug: please report it)"
            )
        if os.path.lexists(final):
            if not overwrite:
                raise InputError(
                    f"OUT {path!r} appeared while distshap was writing it: pass --overwrite to "
                    "replace it, or choose another name"
                )
            check_replaceable(final, fmt)
        with _signals_deferred():  # Ctrl-C / SIGTERM: the old output or the new, whole
            if os.path.isdir(tmp) and os.path.lexists(final):
                old = stem + ".old"
                os.rename(final, old)
                try:
                    os.rename(tmp, final)
                except BaseException:
                    os.rename(old, final)
                    raise
                _remove(old)
            else:
                os.replace(tmp, final)
        _fsync_directory(directory)
    except OSError as err:
        _remove(tmp)
        named = getattr(err, "filename", None)
        if path in str(err) or (named is not None and not _is_output(str(named), stem, final)):
            raise  # it names its file already (OUT, or another: e.g. an input a worker read)
        raise OSError(
            err.errno,
            f"writing OUT {path!r} failed ({err.strerror or err}); the previous output, if any, "
            "is untouched: free space or choose another directory",
        ) from err
    except BaseException:
        _remove(tmp)
        raise


def require_zarr() -> Any:
    try:
        import zarr
    except ImportError as err:
        raise ImportError(
            "writing .zarr needs the zarr package: `pip install zarr` (or distshap[io]), "
            "or write .npy / .parquet instead"
        ) from err
    return zarr


def _require_pyarrow() -> None:
    try:
        import pyarrow  # noqa: F401
        import pyarrow.parquet  # noqa: F401
    except ImportError as err:
        raise ImportError(
            "writing Parquet needs pyarrow: `pip install pyarrow` (or distshap[io]), or write "
            ".npy / .zarr instead"
        ) from err
