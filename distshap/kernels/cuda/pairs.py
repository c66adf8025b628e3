"""Interaction values in pair-slot form on the GPU: per-row top pairs and data-set sums.

The slot kernels (:mod:`.tables`, :mod:`.slot_quadrature` and :mod:`.fallback` with
``slots``) add the same int64 fixed-point contributions as the matrix kernels, but only those
of the upper triangle and the diagonal, and into a row's ``S`` slots
(:mod:`distshap.pair_slots`) instead of its ``G (F+1)**2`` entries; integer sums do not depend
on the order, so each slot holds the integer its matrix entry holds, and the conversion
``float32(acc * 2**-s)`` (the one :func:`~distshap.kernels.cuda.launch.finish_kernel` does)
gives the same float32 bits. After each row batch one of these kernels consumes the
accumulator (and zeroes it):

* :func:`topk_kernel` - one block per (row, group): each thread keeps the best ``k`` pair slots
  it sees (``|value|`` descending, ties by slot, i.e. by ``(i, j)``), then ``k`` rounds of a
  block-wide arg-max pick the row's ``k`` best; a row with fewer than ``k`` non-zero pairs is
  completed with the first zero pairs in ``(i, j)`` order, as sorting the whole matrix would.
  ``|value|`` is compared as the exact integer ``|value| * 2**s`` (every value is a multiple of
  ``2**-s``), so ties are ties of the float32 values.
* :func:`summary_kernel` - one thread per (slot, segment of rows): adds each row's float32
  value (``|value|`` or signed) as the exact integer ``value * 2**s``, split into 32-bit halves
  summed in two int64 arrays (integer atomics): exact, so the sums do not depend on the order,
  batches, chunks or devices.
* :func:`slot_sums_kernel` - per (row, group) the sum and absolute sum of the row's matrix
  entries (a pair counts twice), for the additivity check.
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda, types

from distshap.kernels.cuda.launch import finish_kernel, run_slot_batches
from distshap.kernels.cuda.runtime.device import xp
from distshap.pair_slots import select_top_pairs, zero_pairs

__all__ = [
    "TOPK_MAX_THREADS",
    "TOPK_SHARED_BYTES",
    "interaction_slot_values",
    "slot_sums_kernel",
    "summary_kernel",
    "summary_sums",
    "top_interactions",
    "topk_kernel",
    "topk_threads",
]

#: Dynamic shared memory of a top-k block at most: ``16 k`` bytes per thread.
TOPK_SHARED_BYTES = 44 * 1024  # beside 2.5 KiB of static shared arrays, within 48 KiB
#: Threads of a top-k block at most (a power of two, at most the compiled 128).
TOPK_MAX_THREADS = 128
_SUMMARY_SEGMENT_ROWS = 64  # rows per thread of summary_kernel
_SUM_THREADS = 128  # threads of a slot_sums_kernel block (its static shared arrays)
_TOPK_MAX_THREADS = 128  # size of the top-k kernel's static shared arrays


@cuda.jit(device=True)
def _slot_value(x, inv_scale):
    """The float32 value of an int64 slot sum (the finish kernel's conversion)."""
    return np.float32(np.float64(x) * inv_scale)


@cuda.jit(cache=True)
def slot_sums_kernel(acc, group_slots, num_pairs, inv_scale, expected_value, sums, scales, row0):
    """``sums[row0 + r, g]``: the row's matrix entries summed (bias included), ``scales``: their
    absolute values summed; one block of 128 threads per (row, group), fixed-order reduction."""
    r = cuda.blockIdx.x
    g = cuda.blockIdx.y
    tid = cuda.threadIdx.x
    a = group_slots[g]
    mid = a + num_pairs[g]
    b = group_slots[g + 1]
    total = 0.0
    absolute = 0.0
    for e in range(a + tid, b, cuda.blockDim.x):
        v = np.float64(_slot_value(acc[r, e], inv_scale))
        weight = 2.0 if e < mid else 1.0  # [i, j] and [j, i]
        total += weight * v
        absolute += weight * abs(v)
    red_t = cuda.shared.array(_SUM_THREADS, np.float64)
    red_a = cuda.shared.array(_SUM_THREADS, np.float64)
    red_t[tid] = total
    red_a[tid] = absolute
    cuda.syncthreads()
    step = _SUM_THREADS // 2
    while step > 0:
        if tid < step:
            red_t[tid] += red_t[tid + step]
            red_a[tid] += red_a[tid + step]
        cuda.syncthreads()
        step //= 2
    if tid == 0:
        ev = expected_value[g]
        sums[row0 + r, g] = red_t[0] + ev
        scales[row0 + r, g] = red_a[0] + abs(ev)


_zero_pairs = cuda.jit(device=True)(zero_pairs)


@cuda.jit(device=True)
def _better(u1, s1, u2, s2):
    """Whether candidate ``(u1, s1)`` ranks before ``(u2, s2)``: larger ``u``, then smaller slot."""
    return u1 > u2 or (u1 == u2 and s1 < s2)


@cuda.jit(cache=True)
def topk_kernel(acc, group_slots, num_pairs, slot_i, slot_j, inv_scale, scale, k, num_features,
                pairs, values, row0):  # fmt: skip
    """The ``k`` pairs of largest ``|value|`` of each (row, group); zeroes the row's slots.

    Launch: grid ``(rows, G)``, a power-of-two number of threads ``T``, ``16 T k`` bytes of
    dynamic shared memory (each thread's sorted candidates: ``|value| * 2**s`` and the slot).
    """
    r = cuda.blockIdx.x
    g = cuda.blockIdx.y
    tid = cuda.threadIdx.x
    T = cuda.blockDim.x
    a = group_slots[g]
    mid = a + num_pairs[g]
    cand = cuda.shared.array(0, types.int64)  # [tid * k + i]: |value| key; [T k + ...]: slot
    red_u = cuda.shared.array(_TOPK_MAX_THREADS, types.int64)
    red_s = cuda.shared.array(_TOPK_MAX_THREADS, types.int64)
    red_t = cuda.shared.array(_TOPK_MAX_THREADS, types.int32)
    base = tid * k
    sbase = T * k + base
    count = 0
    for e in range(a + tid, mid, T):  # increasing slots: an equal key never displaces
        x = acc[r, e]
        if x == 0:
            continue
        u = np.int64(np.float64(abs(_slot_value(x, inv_scale))) * scale)  # exact integer
        if count == k and not _better(u, e, cand[base + k - 1], cand[sbase + k - 1]):
            continue
        pos = count if count < k else k - 1
        while pos > 0 and _better(u, e, cand[base + pos - 1], cand[sbase + pos - 1]):
            cand[base + pos] = cand[base + pos - 1]
            cand[sbase + pos] = cand[sbase + pos - 1]
            pos -= 1
        cand[base + pos] = u
        cand[sbase + pos] = e
        if count < k:
            count += 1
    head = 0
    out_row = row0 + r
    found = 0
    for t in range(k):
        if head < count:
            red_u[tid] = cand[base + head]
            red_s[tid] = cand[sbase + head]
        else:
            red_u[tid] = -1
            red_s[tid] = 0
        red_t[tid] = tid
        cuda.syncthreads()
        step = T // 2
        while step > 0:
            if tid < step:
                o = tid + step
                if _better(red_u[o], red_s[o], red_u[tid], red_s[tid]):
                    red_u[tid] = red_u[o]
                    red_s[tid] = red_s[o]
                    red_t[tid] = red_t[o]
            cuda.syncthreads()
            step //= 2
        best = red_u[0]
        winner = red_t[0]
        slot = red_s[0]
        cuda.syncthreads()  # everyone has read the winner before the next round writes
        if best < 0:
            break
        found = t + 1
        if tid == winner:
            head += 1
        if tid == 0:
            pairs[out_row, g, t, 0] = slot_i[slot]
            pairs[out_row, g, t, 1] = slot_j[slot]
            values[out_row, g, t] = _slot_value(acc[r, slot], inv_scale)
    if tid == 0 and found < k:  # fewer non-zero pairs than k: the first zero pairs by (i, j)
        _zero_pairs(pairs, values, out_row, g, found, k, a, mid, slot_i, slot_j, acc, r,
                    num_features)  # fmt: skip
    cuda.syncthreads()
    for e in range(a + tid, group_slots[g + 1], T):
        acc[r, e] = 0


@cuda.jit(cache=True)
def summary_kernel(acc, inv_scale, scale, signed, hi, lo, segment_rows):
    """Per slot, add each row's value (``|value|`` unless ``signed``) as the exact integer
    ``value * 2**s``: its high 32 bits (arithmetic shift) to ``hi``, its low 32 bits to ``lo``;
    zeroes the accumulator. One thread per (slot, segment of ``segment_rows`` rows), one integer
    atomic per thread and array."""
    e = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
    if e >= acc.shape[1]:
        return
    r0 = cuda.blockIdx.y * segment_rows
    r1 = r0 + segment_rows
    if r1 > acc.shape[0]:
        r1 = acc.shape[0]
    h = np.int64(0)
    low = np.int64(0)
    for r in range(r0, r1):
        x = acc[r, e]
        if x != 0:
            q = np.int64(np.float64(_slot_value(x, inv_scale)) * scale)  # exact integer
            if not signed and q < 0:
                q = -q
            h += q >> 32
            low += q & 0xFFFFFFFF
            acc[r, e] = 0
    if h != 0:
        cuda.atomic.add(hi, e, h)
    if low != 0:
        cuda.atomic.add(lo, e, low)


def topk_threads(k: int) -> int:
    """Threads of a :func:`topk_kernel` block for ``k`` (0: ``k`` too large for its shared
    memory; the caller then selects from the slot values)."""
    per_thread = 16 * max(1, int(k))
    t = min(TOPK_MAX_THREADS, _TOPK_MAX_THREADS, TOPK_SHARED_BYTES // per_thread)
    return 1 << int(math.floor(math.log2(t))) if t >= 1 else 0


def _sums_launcher(sums):
    """A callback launching :func:`slot_sums_kernel` into ``sums = (totals, scales)``."""

    def launch(acc, r0, model, slots, inv_scale, stream):
        if sums is None:
            return
        grid = (int(acc.shape[0]), model.num_groups)
        slot_sums_kernel[grid, _SUM_THREADS, stream](
            acc, slots.group_slots, slots.num_pairs, inv_scale, model.expected_value, sums[0],
            sums[1], r0,
        )  # fmt: skip

    return launch


def _new_sums(n: int, G: int, with_sums: bool):
    if not with_sums:
        return None
    return xp().zeros((n, G), np.float64), xp().zeros((n, G), np.float64)


def interaction_slot_values(packed, X, slots, batch_rows: int | None = None):
    """Interaction values in slot form: float32 ``(n, S)`` (CuPy; NumPy under the simulator).

    Slot ``s`` has the bits of the matrix entry ``[g, slot_i[s], slot_j[s]]`` that
    :func:`~distshap.kernels.cuda.launch.interaction_values` gives.
    """
    n = int(X.shape[0])
    out = xp().empty((n, max(slots.num_slots, 1)), np.float32)

    def consume(acc, r0, model, dev, inv_scale, stream):
        nb, width = int(acc.shape[0]), int(acc.shape[1])
        blocks = int(min(-(-(nb * width) // 256), 65535))
        finish_kernel[blocks, 256, stream](
            acc, out[r0 : r0 + nb], inv_scale, model.expected_value, width, -1
        )

    run_slot_batches(packed, X, slots, consume, batch_rows)
    return out[:, : slots.num_slots]


def top_interactions(packed, X, slots, k: int, batch_rows: int | None = None,
                     with_sums: bool = False):  # fmt: skip
    """The ``k`` strongest pairs of every row and group.

    Returns ``pairs`` int32 ``(n, G, k, 2)`` and ``values`` float32 ``(n, G, k)`` (device
    arrays), plus ``(sums, scales)`` float64 ``(n, G)`` with ``with_sums`` (the additivity
    check's row sums). ``k`` at most ``F (F - 1) / 2``.
    """
    n = int(X.shape[0])
    G = packed.num_groups
    F = packed.num_features
    pairs = xp().zeros((n, G, k, 2), np.int32)
    values = xp().zeros((n, G, k), np.float32)
    sums = _new_sums(n, G, with_sums)
    threads = topk_threads(k)
    if threads:

        def consume(acc, r0, model, dev, inv_scale, stream):
            _sums_launcher(sums)(acc, r0, model, dev, inv_scale, stream)
            grid = (int(acc.shape[0]), G)
            topk_kernel[grid, threads, stream, 16 * threads * k](
                acc, dev.group_slots, dev.num_pairs, dev.slot_i, dev.slot_j, inv_scale,
                1.0 / inv_scale, k, F, pairs, values, r0,
            )  # fmt: skip

    else:  # k too large for the block's shared memory: select from the values on the host

        def consume(acc, r0, model, dev, inv_scale, stream):
            _sums_launcher(sums)(acc, r0, model, dev, inv_scale, stream)
            nb, width = int(acc.shape[0]), int(acc.shape[1])
            vals = xp().empty((nb, width), np.float32)
            blocks = int(min(-(-(nb * width) // 256), 65535))
            finish_kernel[blocks, 256, stream](acc, vals, inv_scale, model.expected_value,
                                               width, -1)  # fmt: skip
            host = vals.get() if hasattr(vals, "get") else np.asarray(vals)
            p, v = select_top_pairs(host[:, : slots.num_slots], slots, k)
            pairs[r0 : r0 + nb] = xp().asarray(p)
            values[r0 : r0 + nb] = xp().asarray(v)

    run_slot_batches(packed, X, slots, consume, batch_rows)
    return (pairs, values, sums) if with_sums else (pairs, values)


def summary_sums(packed, X, slots, signed: bool = False, batch_rows: int | None = None,
                 with_sums: bool = False):  # fmt: skip
    """Exact per-slot sums over the rows of ``X`` of ``|value| * 2**s`` (``value * 2**s`` when
    ``signed``), ``s`` the model's interaction fixed-point shift.

    Returns ``(hi, lo)`` int64 ``(S,)`` device arrays, the sum being ``hi * 2**32 + lo``, plus
    ``(sums, scales)`` with ``with_sums`` (see :func:`top_interactions`).
    """
    n = int(X.shape[0])
    width = max(slots.num_slots, 1)
    hi = xp().zeros(width, np.int64)
    lo = xp().zeros(width, np.int64)
    sums = _new_sums(n, packed.num_groups, with_sums)

    def consume(acc, r0, model, dev, inv_scale, stream):
        _sums_launcher(sums)(acc, r0, model, dev, inv_scale, stream)
        grid = (-(-width // 256), -(-int(acc.shape[0]) // _SUMMARY_SEGMENT_ROWS))
        summary_kernel[grid, 256, stream](acc, inv_scale, 1.0 / inv_scale, bool(signed), hi, lo,
                                          _SUMMARY_SEGMENT_ROWS)  # fmt: skip

    run_slot_batches(packed, X, slots, consume, batch_rows)
    hi, lo = hi[: slots.num_slots], lo[: slots.num_slots]
    return (hi, lo, sums) if with_sums else (hi, lo)
