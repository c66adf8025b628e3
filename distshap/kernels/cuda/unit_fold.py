"""The SHAP quadrature kernels' step for a sibling unit (:mod:`distshap.plan.units`).

A unit is up to ``2**L`` paths of one output group that share a set ``C`` of elements, each
member ``m`` (value ``v_m``) with at most ``L`` elements of its own, its tail ``T_m``, padded to
three factors with the identity factor. A kernel runs the unit's head with its leaf value left
out and its own tail positions skipped, so that ``prod[n]`` holds ``w_n P(t_n)``, the common
product at node ``n``. Writing each factor as ``a (1 - t) + b t`` (``a`` the zero fraction,
``b`` whether the row follows the element; padding ``a = b = 1``):

* :func:`unit_moments` gives ``M_j = sum_n prod[n] (1 - t_n)^(2 - j) t_n^j``;
* :func:`unit_entry` gives one member's three tail contributions, ``v (b_i - a_i) (a_p a_q M_0
  + (a_p b_q + b_p a_q) M_1 + b_p b_q M_2)`` with ``p``, ``q`` its other two factors (zero for a
  padding factor), as int64 fixed point, and its terms of ``h(t) = sum_m v_m prod_{T_m} g(t)``
  in the degree-3 basis ``(1 - t)^(3 - j) t^j``;
* :func:`unit_scale` multiplies ``prod[n]`` by ``h(t_n)``, after which every common element's
  contribution is the same quotient sum as a single path's.

A unit of two paths with one tail element each (a sibling pair, :func:`unit_is_pair`) takes the
shorter :func:`fold_pair` instead: the split feature's contribution ``(v_1 d_1 + v_2 d_2) sum_n
prod[n]`` and ``prod[n] *= v_1 g_1(t_n) + v_2 g_2(t_n)``, a few operations a node where the
general fold's moments, entries and degree-3 ``h`` cost more than a short path's elements.

Every sum is of non-negative terms but for the signs of ``v`` and ``b - a``. One set of device
functions for every SHAP quadrature kernel: the same float32 operations in the same order, so
the same bits on every route.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from distshap.kernels.cuda.runtime.device import (
    CAT_OTHER_FLAG,
    LF_LOWER,
    LF_UPPER,
    LF_VALUE,
    LF_ZERO,
    LI_FEATURE,
    LI_FLAGS,
    LI_NBITS,
    LI_POSITION,
    MISSING_FLAG,
    follows,
    lane_follows,
)
from distshap.plan.geometry import gauss_legendre

__all__ = [
    "fold_pair", "unit_bases", "unit_entry", "unit_factors", "unit_is_pair", "unit_moments",
    "unit_scale", "unit_skip", "unit_terms",
]  # fmt: skip


def unit_bases(n_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """The Bernstein-like bases at the ``n_nodes`` Gauss-Legendre nodes, float32:
    ``basis2[j, n] = (1 - t_n)^(2 - j) t_n^j`` (3, n_nodes) and ``basis3[j, n] = (1 - t_n)^(3 -
    j) t_n^j`` (4, n_nodes), formed in float64 and rounded once."""
    t = gauss_legendre(n_nodes)[0]
    basis2 = np.stack([(1.0 - t) ** (2 - j) * t**j for j in range(3)])
    basis3 = np.stack([(1.0 - t) ** (3 - j) * t**j for j in range(4)])
    return (np.ascontiguousarray(basis2, np.float32), np.ascontiguousarray(basis3, np.float32))


@cuda.jit(device=True)
def unit_skip(unit_lanes, lane_i, e0, e1):
    """The elements a kernel skips in a path's common product and quotients, a bit an element
    (bit ``e``: element ``e``, from 0): a unit head's own tail elements (entries ``e0 ..
    e1 - 1``; the first is the head's); 0 for a path that heads no unit."""
    skip = np.uint32(0)
    if e1 > e0:
        for i in range(3):
            lt = unit_lanes[e0, i]
            if lt >= 0:
                skip = np.uint32(skip | (np.uint32(1) << np.uint32(lane_i[lt, LI_POSITION] - 1)))
    return skip


@cuda.jit(device=True)
def unit_moments(prod, basis2):
    """``(M_0, M_1, M_2)``: the moments of the common product ``prod`` (float32, one a node,
    the weights in) against ``basis2`` (:func:`unit_bases`)."""
    m0 = np.float32(0.0)
    m1 = np.float32(0.0)
    m2 = np.float32(0.0)
    for n in range(basis2.shape[1]):
        m0 += prod[n] * basis2[0, n]
        m1 += prod[n] * basis2[1, n]
        m2 += prod[n] * basis2[2, n]
    return m0, m1, m2


@cuda.jit(device=True)
def unit_factors(lane_f, lane_i, lane_cat, cat_words, lane, xa, xb):
    """``(a, b_a, b_b)`` of a tail slot: the zero fraction of lane ``lane`` and whether rows
    ``xa`` and ``xb`` (values by feature) follow it; ``(1, 1, 1)`` for padding (``lane < 0``)."""
    one = np.float32(1.0)
    a = one
    ba = one
    bb = one
    if lane >= 0:
        li = np.uint64(lane)  # unsigned indices: no negative-index wraparound
        a = lane_f[li, LF_ZERO]
        lower = lane_f[li, LF_LOWER]
        upper = lane_f[li, LF_UPPER]
        flags = lane_i[li, LI_FLAGS]
        missing = (flags & MISSING_FLAG) != 0
        other = (flags & CAT_OTHER_FLAG) != 0
        nbits = lane_i[li, LI_NBITS]
        cat = lane_cat[li]
        f = np.uint64(np.uint32(lane_i[li, LI_FEATURE]))
        if cat < 0:  # numeric: the compiler drops follows' categorical branch here
            on_a = follows(xa[f], lower, upper, missing, other, cat, nbits, cat_words)
            on_b = follows(xb[f], lower, upper, missing, other, cat, nbits, cat_words)
        else:
            on_a = follows(xa[f], lower, upper, missing, other, cat, nbits, cat_words)
            on_b = follows(xb[f], lower, upper, missing, other, cat, nbits, cat_words)
        if not on_a:
            ba = np.float32(0.0)
        if not on_b:
            bb = np.float32(0.0)
    return a, ba, bb


@cuda.jit(device=True)
def _tail(v, a, b, ap, bp, aq, bq, m0, m1, m2, scale32):
    """One tail factor's contribution (int64 fixed point); 0 for padding (``b - a == 0``)."""
    s = ap * aq * m0 + (ap * bq + bp * aq) * m1 + bp * bq * m2
    return np.int64(v * (b - a) * s * scale32)


@cuda.jit(device=True)
def unit_terms(v, a0, b0, a1, b1, a2, b2, m0, m1, m2, scale32, single):
    """An entry's float32 math: ``((c_0, c_1, c_2), (h_0, h_1, h_2, h_3))``, the contributions
    of its three tail slots (int64 fixed point at ``scale32``; 0 for padding) and its terms of
    ``h`` in the degree-3 basis, for its value ``v`` and slots ``(a_i, b_i)``. ``single``: slots
    1 and 2 are padding; the same sums then without their factors of one (every product they
    drop is exact: the same bits)."""
    if single:
        s = m0 + np.float32(2.0) * m1 + m2
        zero = np.int64(0)
        c = (np.int64(v * (b0 - a0) * s * scale32), zero, zero)
        return c, (v * a0, v * (b0 + a0 + a0), v * (a0 + b0 + b0), v * b0)
    c0 = _tail(v, a0, b0, a1, b1, a2, b2, m0, m1, m2, scale32)
    c1 = _tail(v, a1, b1, a0, b0, a2, b2, m0, m1, m2, scale32)
    c2 = _tail(v, a2, b2, a0, b0, a1, b1, m0, m1, m2, scale32)
    h0 = v * (a0 * a1 * a2)
    h1 = v * (b0 * a1 * a2 + a0 * b1 * a2 + a0 * a1 * b2)
    h2 = v * (a0 * b1 * b2 + b0 * a1 * b2 + b0 * b1 * a2)
    h3 = v * (b0 * b1 * b2)
    return (c0, c1, c2), (h0, h1, h2, h3)


@cuda.jit(device=True)
def unit_entry(lane_f, lane_i, lane_cat, cat_words, unit_value, unit_lanes, e, x, m0, m1, m2,
               scale32):  # fmt: skip
    """Entry ``e`` of a unit on the row ``x`` (float32 values by feature): :func:`unit_terms`
    of its value and tail slots (``m0``, ``m1``, ``m2``: :func:`unit_moments`); the
    contributions go to each real slot's feature."""
    ue = np.uint64(e)
    l1 = unit_lanes[ue, 1]
    l2 = unit_lanes[ue, 2]
    a0, b0, _ = unit_factors(lane_f, lane_i, lane_cat, cat_words, unit_lanes[ue, 0], x, x)
    a1, b1, _ = unit_factors(lane_f, lane_i, lane_cat, cat_words, l1, x, x)
    a2, b2, _ = unit_factors(lane_f, lane_i, lane_cat, cat_words, l2, x, x)
    single = l1 < 0 and l2 < 0
    return unit_terms(unit_value[ue], a0, b0, a1, b1, a2, b2, m0, m1, m2, scale32, single)


@cuda.jit(device=True)
def unit_scale(prod, h0, h1, h2, h3, basis3):
    """``prod[n] *= h(t_n)``, ``h = sum_j h_j basis3[j]`` (:func:`unit_bases`), in place."""
    for n in range(basis3.shape[1]):
        prod[n] *= h0 * basis3[0, n] + h1 * basis3[1, n] + h2 * basis3[2, n] + h3 * basis3[3, n]


@cuda.jit(device=True)
def unit_is_pair(unit_lanes, e0, e1):
    """Whether the unit of entries ``e0 .. e1 - 1`` is a sibling pair: two entries of one tail
    element each (run by :func:`fold_pair`)."""
    return e1 - e0 == 2 and unit_lanes[e0, 1] < 0 and unit_lanes[e0 + 1, 1] < 0


@cuda.jit(device=True)
def fold_pair(prod, nodes, lane_f, lane_i, lane_cat, cat_words, head, other, head_follows, x,
              scale32):  # fmt: skip
    """Fold a pair's split element into ``prod`` (in place); returns its contribution (int64
    fixed point at ``scale32``). ``head``: the head's tail lane, ``head_follows`` whether the
    row follows it; ``other``: the other path's tail lane (the same feature), ``x`` the row's
    value of that feature; ``nodes``: the kernel's Gauss-Legendre nodes (one a ``prod`` entry).
    The leaf values are the lanes' own (every lane holds its path's)."""
    one = np.float32(1.0)
    z1 = lane_f[head, LF_ZERO]
    d1 = -z1
    if head_follows:
        d1 = one - z1
    z2 = lane_f[other, LF_ZERO]
    d2 = -z2
    if lane_follows(x, lane_f, lane_i, lane_cat, cat_words, other):
        d2 = one - z2
    v1 = lane_f[head, LF_VALUE]
    v2 = lane_f[other, LF_VALUE]
    common = np.float32(0.0)
    for m in range(nodes.shape[0]):
        common += prod[m]
    iv = np.int64((v1 * d1 + v2 * d2) * common * scale32)
    for m in range(nodes.shape[0]):
        prod[m] *= v1 * (z1 + nodes[m] * d1) + v2 * (z2 + nodes[m] * d2)
    return iv
