"""Universal Binary JSON (UBJSON) decoding: the format of XGBoost's ``.ubj`` model files.

A format parser of its own, apart from the loaders: it turns bytes into Python values and NumPy
arrays and knows nothing about models. Optimised typed arrays of fixed-size numbers (how XGBoost
stores node arrays) are read in one NumPy call each, so large models decode quickly; with
:func:`decode_ubjson_views` they are not even copied: each is a read-only view of the input in
the format's big-endian byte order, and its byte offset is recorded, so that a loader can read
the node arrays of every tree straight from the input bytes (in threads, for large models:
:mod:`distshap.models._threaded`). Containers may nest at most :data:`MAX_DEPTH` levels: a
hostile or corrupt file gets a clear error, never a ``RecursionError``.
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

import numpy as np

__all__ = ["MAX_DEPTH", "UBJSONError", "UBJSONViews", "decode_ubjson", "decode_ubjson_views"]

#: Deepest nesting of containers accepted (XGBoost's documents nest fewer than 10 levels).
MAX_DEPTH = 200


class UBJSONError(ValueError):
    """Bytes that are not valid (or not supported) Universal Binary JSON."""


# Big-endian NumPy dtypes of the fixed-size UBJSON number markers.
_UBJ_NUMBER = {
    0x69: np.dtype(">i1"),  # i int8
    0x55: np.dtype(">u1"),  # U uint8
    0x49: np.dtype(">i2"),  # I int16
    0x6C: np.dtype(">i4"),  # l int32
    0x4C: np.dtype(">i8"),  # L int64
    0x64: np.dtype(">f4"),  # d float32
    0x44: np.dtype(">f8"),  # D float64
}
_UBJ_STRUCT = {
    m: struct.Struct(">" + code)
    for m, code in zip(_UBJ_NUMBER, "bBhiqfd", strict=True)  # same order as _UBJ_NUMBER
}
_UBJ_INTEGER = frozenset({0x69, 0x55, 0x49, 0x6C, 0x4C})
_NOOP = 0x4E  # N
_ZERO_SIZE = frozenset({0x54, 0x46, 0x5A})  # T F Z: typed elements without payload
_MAX_ZERO_SIZE_COUNT = 1 << 24


class _UBJReader:
    """Cursor over a UBJSON buffer. Typed numeric arrays become NumPy arrays: copies in native
    byte order, or with ``views`` read-only big-endian views of the buffer, each one's byte
    offset in ``offsets`` (keyed by ``id``)."""

    def __init__(self, data: bytes | bytearray | memoryview, views: bool = False) -> None:
        # bytes and bytearray are read in place (a model of 281 MB is not copied again)
        self.buf = data if isinstance(data, (bytes, bytearray)) else bytes(data)
        self.pos = 0
        self.depth = 0
        self.views = views
        self.offsets: dict[int, int] = {}

    def fail(self, what: str) -> UBJSONError:
        return UBJSONError(f"invalid UBJSON at byte {self.pos}: {what}")

    def take(self, k: int) -> int:
        start = self.pos
        if k < 0 or start + k > len(self.buf):
            raise self.fail(f"truncated input (needs {k} more bytes, {len(self.buf) - start} left)")
        self.pos = start + k
        return start

    def byte(self) -> int:
        return self.buf[self.take(1)]

    def marker(self) -> int:
        """Next type marker, skipping ``N`` no-ops."""
        m = self.byte()
        while m == _NOOP:
            m = self.byte()
        return m

    def peek(self) -> int:
        if self.pos >= len(self.buf):
            raise self.fail("truncated input (container not closed)")
        return self.buf[self.pos]

    def integer(self, m: int) -> int:
        if m not in _UBJ_INTEGER:
            raise self.fail(f"expected an integer marker for a length or count, got {chr(m)!r}")
        s = _UBJ_STRUCT[m]
        return int(s.unpack_from(self.buf, self.take(s.size))[0])

    def string_body(self) -> str:
        n = self.integer(self.marker())
        if n < 0:
            raise self.fail(f"negative string length {n}")
        start = self.take(n)
        try:
            return self.buf[start : start + n].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self.fail(f"string is not UTF-8 ({exc})") from None

    def value(self, m: int) -> Any:
        s = _UBJ_STRUCT.get(m)
        if s is not None:
            v = s.unpack_from(self.buf, self.take(s.size))[0]
            return float(v) if m in (0x64, 0x44) else int(v)
        if m == 0x53:  # S string
            return self.string_body()
        if m in (0x7B, 0x5B):  # { [
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise self.fail(f"containers nested deeper than {MAX_DEPTH} levels")
            try:
                return self.object() if m == 0x7B else self.array()
            finally:
                self.depth -= 1
        if m == 0x54:  # T
            return True
        if m == 0x46:  # F
            return False
        if m == 0x5A:  # Z null
            return None
        if m == 0x43:  # C char
            return chr(self.byte())
        if m == 0x48:  # H high-precision number, as a decimal string
            text = self.string_body()
            try:
                return int(text)
            except ValueError:
                try:
                    return float(text)
                except ValueError:
                    raise self.fail(f"high-precision number {text!r} is not a number") from None
        raise self.fail(f"unknown type marker {chr(m)!r} (0x{m:02x})")

    def container_header(self) -> tuple[int | None, int | None]:
        """Optional ``$type`` and ``#count`` after ``[`` or ``{``."""
        typ = None
        count = None
        if self.peek() == 0x24:  # $
            self.pos += 1
            typ = self.byte()
            if typ in (0x5B, 0x7B, _NOOP):
                raise self.fail(f"container element type {chr(typ)!r} is not allowed")
            if self.peek() != 0x23:
                raise self.fail("a '$' element type must be followed by a '#' count")
        if self.peek() == 0x23:  # #
            self.pos += 1
            count = self.integer(self.marker())
            if count < 0:
                raise self.fail(f"negative container count {count}")
            if typ in _ZERO_SIZE:
                if count > _MAX_ZERO_SIZE_COUNT:
                    raise self.fail(f"container count {count:,} of {chr(typ)!r} is implausible")
            elif count > len(self.buf) - self.pos and _UBJ_NUMBER.get(typ) is None:
                # every other element takes at least one byte
                raise self.fail(f"container count {count:,} exceeds the bytes left")
        return typ, count

    def array(self) -> Any:
        typ, count = self.container_header()
        if typ is not None:
            assert count is not None
            dt = _UBJ_NUMBER.get(typ)
            if dt is not None:
                start = self.take(count * dt.itemsize)
                arr = np.frombuffer(self.buf, dtype=dt, count=count, offset=start)
                if not self.views:
                    return arr.astype(dt.newbyteorder("="))
                arr.flags.writeable = False  # a view of the input (of a bytearray: writable)
                self.offsets[id(arr)] = start
                return arr
            return [self.value(typ) for _ in range(count)]
        if count is not None:
            return [self.value(self.marker()) for _ in range(count)]
        out = []
        while True:
            m = self.marker()
            if m == 0x5D:  # ]
                return out
            out.append(self.value(m))

    def object(self) -> dict[str, Any]:
        typ, count = self.container_header()
        out: dict[str, Any] = {}
        if count is not None:
            for _ in range(count):
                key = self.string_body()
                out[key] = self.value(typ if typ is not None else self.marker())
            return out
        while True:
            while self.peek() == _NOOP:
                self.pos += 1
            if self.peek() == 0x7D:  # }
                self.pos += 1
                return out
            key = self.string_body()
            out[key] = self.value(self.marker())


def decode_ubjson(data: bytes | bytearray | memoryview) -> Any:
    """Decode Universal Binary JSON (the subset XGBoost writes, and a little more).

    Supported: objects and arrays, plain or optimised with ``$`` element type and ``#`` count;
    ``i U I l L`` integers, ``d D`` floats, ``H`` high-precision numbers, ``S`` strings, ``C``
    chars, ``T F Z`` and ``N`` no-ops. Numbers are big-endian, as the format requires.

    Parameters
    ----------
    data
        The encoded bytes of one value.

    Returns
    -------
    Any
        ``dict`` / ``list`` / ``str`` / ``int`` / ``float`` / ``bool`` / ``None``; an
        optimised array of a fixed-size number type becomes a NumPy array in native byte order.

    Raises
    ------
    UBJSONError
        On truncated input, unknown markers or trailing bytes.
    """
    return _decode(_UBJReader(data))


class UBJSONViews(NamedTuple):
    """What :func:`decode_ubjson_views` returns.

    Attributes
    ----------
    value
        The decoded value, as :func:`decode_ubjson` gives it, except that every optimised array
        of a fixed-size number type is a read-only view of ``buffer`` in big-endian byte order.
    buffer : bytes or bytearray
        The input the views look into (the input itself when it was ``bytes`` or ``bytearray``).
    offsets : dict of int to int
        Each view's byte offset in ``buffer``, keyed by ``id(view)``: valid while ``value``
        (which holds every view) lives and is not changed.
    """

    value: Any
    buffer: bytes | bytearray
    offsets: dict[int, int]


def decode_ubjson_views(data: bytes | bytearray | memoryview) -> UBJSONViews:
    """Decode like :func:`decode_ubjson`, typed number arrays as views of ``data`` (no copy).

    For readers that convert the arrays themselves: each optimised array of a fixed-size number
    type (XGBoost's node arrays) is a read-only NumPy view of the input in the format's
    big-endian byte order (NumPy reads such arrays correctly; Numba does not take them), and
    its byte offset in the input is recorded. A ``bytearray`` input must not change while the
    value is used.

    Parameters
    ----------
    data
        The encoded bytes of one value.

    Returns
    -------
    UBJSONViews

    Raises
    ------
    UBJSONError
        As :func:`decode_ubjson`.
    """
    reader = _UBJReader(data, views=True)
    return UBJSONViews(_decode(reader), reader.buf, reader.offsets)


def _decode(reader: _UBJReader) -> Any:
    """The one value of the reader's whole buffer (trailing ``N`` no-ops allowed)."""
    value = reader.value(reader.marker())
    while reader.pos < len(reader.buf) and reader.buf[reader.pos] == _NOOP:
        reader.pos += 1
    if reader.pos != len(reader.buf):
        raise reader.fail(f"{len(reader.buf) - reader.pos} trailing bytes after the value")
    return value
