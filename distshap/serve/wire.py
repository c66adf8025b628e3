"""The wire format between a server group's fronts and its device processes.

A batch travels as a small fixed header (:data:`BATCH`: id, model, output, dtype, ``k``,
shape) then its rows' raw bytes, sent from the arrays that hold them (:func:`send_some`, one
``sendmsg`` of every part, never waiting) and read straight into the array that will hold them
(however many reads that takes); an answer as a header (:data:`ANSWER`)
naming its tensors (:data:`TENSOR`: name, dtype, shape) then each tensor's raw bytes, or an
error's type and message. No array is pickled; a front copies an answer's tensors once, out of
the bytes it reads.
"""

from __future__ import annotations

import itertools
import select
import socket
import struct
from collections import deque

import numpy as np

from distshap.serve.registry import OUTPUTS, PAIRS_OUTPUT

__all__ = [
    "ANSWER",
    "BATCH",
    "BYE",
    "DTYPES",
    "DTYPE_CODE",
    "IOV_PARTS",
    "OUTPUT_NAMES",
    "TENSOR",
    "TENSOR_NAMES",
    "answer_parts",
    "byte_views",
    "send_some",
    "write_parts",
]

#: Output names as their index in a header.
OUTPUT_NAMES = tuple(OUTPUTS)
#: Tensor names of an answer as their index in a header.
TENSOR_NAMES = (*OUTPUTS, PAIRS_OUTPUT)
#: Dtypes of rows and tensors as their index in a header.
DTYPES = tuple(np.dtype(t) for t in ("<f4", "<f8", "<i4", "<i8"))
DTYPE_CODE = {dtype: i for i, dtype in enumerate(DTYPES)}
#: A batch: id, model (its index in the group's specs), output, dtype, k, rows, features.
BATCH = struct.Struct("<QHBBIII")
#: An answer: id, status (0: values, 1: error), tensors, bytes of the tensors' descriptions
#: (or of the error) that follow, then the tensors' data.
ANSWER = struct.Struct("<QBBI")
#: A tensor of an answer: name, dtype, dimensions (then one uint32 a dimension).
TENSOR = struct.Struct("<BBB")
#: Parts a ``sendmsg`` takes at most (systems allow 1024 or more).
IOV_PARTS = 512
#: The id of the goodbye a front sends on closing (the device process answers it and drops
#: the pipe); batch ids start at 1.
BYE = 0


def byte_views(parts) -> list[memoryview]:
    """Byte views of ``parts`` (bytes, or C-contiguous arrays), the empty ones left out."""
    return [memoryview(p).cast("B") for p in parts if len(p) and getattr(p, "size", 1)]


def send_some(sock: socket.socket, views: deque) -> None:
    """Send what ``sock`` takes now of ``views`` (byte views, :data:`IOV_PARTS` a ``sendmsg``),
    never waiting: the views sent leave the deque, one sent in part is cut to its rest.
    OSError: the other end is gone."""
    try:
        while views:
            sent = sock.sendmsg(list(itertools.islice(views, IOV_PARTS)), [], socket.MSG_DONTWAIT)
            while sent:
                head = views[0]
                if sent < len(head):
                    views[0], sent = head[sent:], 0
                else:
                    sent -= len(head)
                    views.popleft()
    except BlockingIOError:  # full: the rest later
        pass


def write_parts(sock: socket.socket, parts) -> None:
    """Send every byte of ``parts`` (bytes, or C-contiguous arrays) on ``sock``, waiting for
    room whenever it is full (whether it blocks or not: an event loop that also watches it may
    have made it non-blocking, as uvloop does)."""
    views = deque(byte_views(parts))
    send_some(sock, views)
    while views:
        _wait_writable(sock.fileno())
        send_some(sock, views)


def _wait_writable(fd: int) -> None:
    """Until ``fd`` takes more bytes (or reports an error, which the next write raises)."""
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    poller.poll()


def answer_parts(
    ident: int, values: dict | None, err: BaseException | None, a: int, b: int
) -> list:
    """What answers one batch: rows ``a:b`` of ``values``, or ``err``."""
    if err is not None:
        text = f"{type(err).__name__}\n{str(err).strip()[:2000]}".encode("utf-8", "replace")
        return [ANSWER.pack(ident, 1, 0, len(text)) + text]
    head, arrays = [], []
    for name, array in values.items():
        part = np.ascontiguousarray(array[a:b])
        head.append(TENSOR.pack(TENSOR_NAMES.index(name), DTYPE_CODE[part.dtype], part.ndim))
        head.append(struct.pack(f"<{part.ndim}I", *part.shape))
        arrays.append(part)
    described = b"".join(head)
    return [ANSWER.pack(ident, 0, len(values), len(described)) + described, *arrays]
