"""The SHAP quadrature kernels' step for a sibling pair (:mod:`distshap.plan.pairs`).

A kernel runs a pair's first path with its leaf value left out and the pair's differing element
skipped (a factor of one), so that ``prod[m]`` holds ``w_m prod_A(t_m)``, the common elements'
product at node ``m``. :func:`fold_pair` then gives the split feature's contribution,
``(v_1 d_1 + v_2 d_2) sum_m prod[m]`` as int64 fixed point, and multiplies each ``prod[m]`` by
``h(t_m) = v_1 (z_1 + t_m d_1) + v_2 (z_2 + t_m d_2)``, after which every common element's
contribution is the same quotient sum as a single path's. One device function for every SHAP
quadrature kernel: the same float32 operations in the same order, so the same bits on every
route.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from distshap.kernels.cuda.runtime.device import LF_VALUE, LF_ZERO, lane_follows

__all__ = ["fold_pair"]


@cuda.jit(device=True)
def fold_pair(prod, nodes, lane_f, lane_i, lane_cat, cat_words, head, other, head_follows, x,
              scale32):  # fmt: skip
    """Fold a pair's split element into ``prod`` (in place); returns its contribution.

    ``head``: the first path's differing lane, ``head_follows`` whether the row follows it;
    ``other``: the second path's differing lane (the same feature), ``x`` the row's value of
    that feature; ``nodes``: the kernel's Gauss-Legendre nodes (float32, one per ``prod``
    entry); ``scale32``: the fixed-point scale."""
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
