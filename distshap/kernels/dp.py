"""The TreeShap path dynamic program (paper Algorithms 2 and 3) as scalar Numba functions.

Shared by the CPU kernel and the host-side pattern-table builder, so both compute exactly the
same arithmetic. ``w`` holds the permutation weights of a path; a path of ``k`` features has
``k + 1`` weights (the bias element first).
"""

from __future__ import annotations

from numba import njit

__all__ = ["extend", "unwound_sum", "path_weights"]


@njit(inline="always", nogil=True, cache=True)
def extend(w, length, zero_fraction, one_fraction):
    """Append one element to a path of ``length`` elements whose weights are ``w[:length]``."""
    w[length] = 1.0 if length == 0 else 0.0
    scale = 1.0 / (length + 1)
    for i in range(length - 1, -1, -1):
        w[i + 1] += one_fraction * w[i] * (i + 1) * scale
        w[i] = zero_fraction * w[i] * (length - i) * scale


@njit(inline="always", nogil=True, cache=True)
def unwound_sum(w, depth, zero_fraction, one_fraction):
    """Sum of the weights of a path of ``depth + 1`` elements with one element removed.

    ``zero_fraction`` / ``one_fraction`` are those of the removed element; the caller multiplies
    the result by ``(one_fraction - zero_fraction) * leaf_value``.
    """
    total = 0.0
    if one_fraction != 0.0:
        next_one = w[depth]
        for j in range(depth - 1, -1, -1):
            tmp = next_one * (depth + 1) / ((j + 1) * one_fraction)
            total += tmp
            next_one = w[j] - tmp * zero_fraction * (depth - j) / (depth + 1)
    elif zero_fraction != 0.0:
        for j in range(depth - 1, -1, -1):
            total += w[j] * (depth + 1) / (zero_fraction * (depth - j))
    return total


@njit(inline="always", nogil=True, cache=True)
def path_weights(w, zero, one, start, stop, skip):
    """Extend the bias element, then elements ``start..stop-1`` except ``skip``; return depth."""
    extend(w, 0, 1.0, 1.0)
    depth = 0
    for e in range(start, stop):
        if e == skip:
            continue
        depth += 1
        extend(w, depth, zero[e], one[e])
    return depth
