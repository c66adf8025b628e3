"""The exact TreeSHAP building blocks, written once as plain Python and compiled per target.

:func:`follows` is the split rule (does a feature value follow a path element?),
:func:`extend_path` the EXTEND recursion over a path's elements (paper Algorithm 2) and
:func:`unwound_sum` the UNWOUND_SUM of one element (Algorithm 3); :func:`leaf` walks a row
down one tree by the model's split rule (the margin traversal). Nothing here imports Numba:
the CPU backend wraps these functions with ``njit`` and the CUDA backend with
``cuda.jit(device=True)``, so both run the same arithmetic in the same order (and the CUDA
simulator runs them as they are). ``w`` holds the permutation weights of a path: a path of
``k`` features has ``k + 1`` weights, the bias element first.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["extend_path", "follows", "leaf", "unwound_sum"]


def follows(x, lower, upper, missing, cat_other, cat_offset, cat_nbits, cat_words):
    """Whether the value ``x`` follows a path element.

    A numeric element (``cat_offset < 0``) takes ``lower <= x < upper`` (an element unbounded
    above, ``upper = +inf``, takes ``x = +inf`` too) and NaN where ``missing``. A categorical
    element takes NaN where ``missing``, ``0 <= x < cat_nbits`` where bit ``int(x)`` of its
    category set (``cat_words[cat_offset:]``, 32 bits a word) is set, and any other value where
    ``cat_other``. A numeric test branches only on ``cat_offset`` (the same for every row),
    so a loop over rows vectorises.
    """
    nan = math.isnan(x)
    if cat_offset < 0 or nan:
        return (missing & nan) | ((lower <= x) & ((x < upper) | (upper == math.inf)))
    if x < 0.0 or x >= cat_nbits:
        return cat_other
    c = np.int64(x)
    return ((cat_words[cat_offset + (c >> 5)] >> np.uint32(c & 31)) & np.uint32(1)) != 0


def extend_path(w, zero, one, start, stop, skip):
    """EXTEND the bias element, then elements ``start..stop-1`` except ``skip``; return the depth.

    ``zero`` / ``one`` are the elements' zero and one fractions; afterwards ``w[:depth + 1]``
    holds the path's permutation weights.
    """
    w[0] = 1.0
    depth = 0
    for e in range(start, stop):
        if e == skip:
            continue
        depth += 1
        zero_fraction = zero[e]
        one_fraction = one[e]
        w[depth] = 0.0
        scale = 1.0 / (depth + 1)
        for i in range(depth - 1, -1, -1):
            w[i + 1] += one_fraction * w[i] * (i + 1) * scale
            w[i] = zero_fraction * w[i] * (depth - i) * scale
    return depth


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


def leaf(X, r, node, left, right, feature, threshold, default_left, is_categorical,
          cat_offsets, cat_values, missing):  # fmt: skip
    """The leaf row ``r`` of ``X`` reaches from ``node`` (a tree's root) by the model's own
    split rule (the margin traversal of :mod:`distshap.kernels.margin`, independent of the
    path elements); ``missing`` is the model's float32 missing value."""
    while left[node] >= 0:
        x = X[r, feature[node]]
        if math.isnan(x) or np.float32(x) == missing:
            go_left = default_left[node]
        elif is_categorical[node]:
            # listed categories go right; other values (and negative codes) go left
            go_left = True
            if x >= 0.0:
                code = int(x)
                for i in range(cat_offsets[node], cat_offsets[node + 1]):
                    if cat_values[i] == code:
                        go_left = False
        else:
            go_left = x < threshold[node]
        node = left[node] if go_left else right[node]
    return node
