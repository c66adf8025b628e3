"""Shapley-Taylor interaction index of order 2, exact, on the CPU (Numba, parallel over rows).

The index (Sundararajan, Dhamdhere & Agarwal, "The Shapley Taylor Interaction Index", ICML
2020) of the path-dependent game TreeSHAP explains. A merged path ``p`` (features ``P``, ``|P| =
k``, leaf value ``v``; per element ``o_e`` = 1 when the row follows it, ``z_e`` its zero
fraction) plays ``v_p(S) = v prod_{e in P} (o_e if e in S else z_e)``; the model's game is the
sum over paths. With ``d_e = o_e - z_e`` and ``q_e(t) = z_e + t d_e``:

* main effect (the discrete derivative at the empty set) ``I_i = v_p({i}) - v_p(∅) = v d_i
  prod_{e != i} z_e``;
* pair ``I_ij = (2 / n) sum_{T ⊆ N \\ {i, j}} delta_ij(T) / C(n - 1, |T|)`` over the ``n``
  players ``N``. These weights are the law of ``T`` = the players before the first of ``i``,
  ``j`` in a uniformly random order:
  with independent uniform arrival times, the first of the two arrives at ``t`` with density
  ``2 (1 - t)`` and every other player precedes it with probability ``t``. So players outside
  the path drop out and ``I_ij = 2 v d_i d_j integral_0^1 (1 - t) prod_{e != i, j} q_e(t) dt``,
  a polynomial of degree ``k - 1`` in ``t``: Gauss-Legendre with ``ceil(k / 2)`` nodes is exact
  (the idea of :mod:`distshap.kernels.cuda.shap_quadrature`). Every term is non-negative (``q_e >=
  0`` on ``[0, 1]``, positive weights), so float64 keeps its relative precision at any length.

Output: XGBoost's ``pred_interactions`` layout, float32 ``(n, G, F + 1, F + 1)``: ``I_i`` on
the diagonal, ``I_ij / 2`` at ``[i, j]`` and at ``[j, i]``, the expected value (``v(∅)`` plus
the base score) at ``[F, F]``, zeros elsewhere in the bias row and column. Efficiency: a row's
entries sum to its margin ``v(N)``.

The products excluding one or two elements are formed from prefix and suffix products, never by
division, so zero fractions of 0 (zero-cover branches) need no special case. Each row is
processed on its own, paths in packed order, sums in float64 (results do not depend on the
thread count or the chunking).

Cost per row, with ``T`` trees of ``L`` leaves and merged paths of at most ``D`` features: a path
of ``k`` features has ``k`` main effects (``O(k)`` with prefix products) and ``k (k - 1) / 2``
pairs of ``ceil(k / 2)`` node terms each (a multiply-add for the sum and a multiply for the
running product), plus ``3 k ceil(k / 2)`` to form the node products: ``O(T L D^2)`` pairs and
``O(T L D^2 ceil(D / 2))`` work, ``~k^3 / 2`` multiplications per path, no division. The SHAP
interaction values of :mod:`distshap.kernels.cpu` condition on each of the ``k`` features of a
path (paper §3.5) and run EXTEND (``~k^2 / 2`` steps) and ``k - 1`` UNWOUND_SUMs (``k`` steps
each, with divisions) each time: ``~1.5 k^3`` steps of several operations per path, ``O(T L
D^3)`` per row. Both are cubic in the depth, Shapley-Taylor with the smaller constant; both
fill the same ``O(G F^2)`` output per row (the full matrix: what dominates for wide models),
and enumerating the definition would cost ``O(2^D D^2)`` per path.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import njit, prange

from distshap.kernels import treeshap
from distshap.packed import PackedModel
from distshap.parallel import run_parallel

__all__ = ["gauss_legendre_table", "node_count", "taylor_values"]

_follows = njit(inline="always", nogil=True, cache=True)(treeshap.follows)


def node_count(k: int) -> int:
    """Gauss-Legendre nodes that integrate the pair polynomial of a ``k``-feature path exactly
    (degree ``k - 1``): ``ceil(k / 2)``, at least 1."""
    return max(1, (int(k) + 1) // 2)


@functools.lru_cache(maxsize=8)
def gauss_legendre_table(max_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Legendre rules on ``[0, 1]`` of 1 to ``max_nodes`` nodes, concatenated (float64).

    The ``n``-node rule sits at ``[n (n - 1) / 2, n (n + 1) / 2)`` of both arrays (nodes,
    weights); it is exact for polynomials of degree up to ``2 n - 1``. Read-only arrays.
    """
    max_nodes = int(max_nodes)
    if max_nodes < 1:
        raise ValueError(f"max_nodes must be >= 1, got {max_nodes}")
    nodes = np.empty(max_nodes * (max_nodes + 1) // 2)
    weights = np.empty_like(nodes)
    for n in range(1, max_nodes + 1):
        x, w = np.polynomial.legendre.leggauss(n)
        base = n * (n - 1) // 2
        nodes[base : base + n] = (x + 1.0) / 2.0
        weights[base : base + n] = w / 2.0
    nodes.flags.writeable = weights.flags.writeable = False
    return nodes, weights


@njit(nogil=True, cache=True)
def _max_features(path_offsets):
    longest = 1
    for p in range(path_offsets.shape[0] - 1):
        longest = max(longest, path_offsets[p + 1] - path_offsets[p] - 1)
    return longest


@njit(parallel=True, nogil=True, cache=True)
def _taylor_kernel(X, feature, lower, upper, missing, zero_fraction, cat_offsets, cat_nbits,
                   cat_other, cat_words, path_offsets, path_value, path_group, expected_value,
                   gl_nodes, gl_weights, out):  # fmt: skip
    n_rows = X.shape[0]
    n_paths = path_offsets.shape[0] - 1
    n_groups = out.shape[1]
    n_cols = out.shape[2]
    kmax = _max_features(path_offsets)
    nmax = (kmax + 1) // 2 + 1
    for r in prange(n_rows):
        row = X[r]
        acc = np.zeros((n_groups, n_cols, n_cols), np.float64)
        z = np.empty(kmax, np.float64)
        d = np.empty(kmax, np.float64)
        col = np.empty(kmax, np.int64)
        zpre = np.empty(kmax + 1, np.float64)
        zsuf = np.empty(kmax + 1, np.float64)
        # per node m: q[e, m] = z_e + t_m d_e; pre[e, m] = c_m prod_{e' < e} q[e', m] with
        # c_m = w_m (1 - t_m); suf[e, m] = prod_{e' >= e} q[e', m]
        q = np.empty((kmax, nmax), np.float64)
        pre = np.empty((kmax + 1, nmax), np.float64)
        suf = np.empty((kmax + 1, nmax), np.float64)
        run = np.empty(nmax, np.float64)
        for p in range(n_paths):
            start = path_offsets[p] + 1  # the first feature element (after the bias lane)
            k = path_offsets[p + 1] - start
            g = path_group[p]
            v = path_value[p]
            any_d = False
            for i in range(k):
                e = start + i
                f = feature[e]
                o = _follows(row[f], lower[e], upper[e], missing[e], cat_other[e],
                             cat_offsets[e], cat_nbits[e], cat_words)  # fmt: skip
                z[i] = zero_fraction[e]
                d[i] = (1.0 if o else 0.0) - z[i]
                col[i] = f
                any_d = any_d or d[i] != 0.0
            if not any_d:
                continue  # every main effect and pair of the path is 0
            # main effects: v d_i prod_{e != i} z_e
            zpre[0] = 1.0
            for i in range(k):
                zpre[i + 1] = zpre[i] * z[i]
            zsuf[k] = 1.0
            for i in range(k - 1, -1, -1):
                zsuf[i] = zsuf[i + 1] * z[i]
            for i in range(k):
                if d[i] != 0.0:
                    acc[g, col[i], col[i]] += v * d[i] * (zpre[i] * zsuf[i + 1])
            if k < 2:
                continue
            # pairs: v d_i d_j sum_m c_m prod_{e != i, j} q_e(t_m), at [i, j] and [j, i]
            n_nodes = (k + 1) // 2
            base = n_nodes * (n_nodes - 1) // 2
            for m in range(n_nodes):
                t = gl_nodes[base + m]
                pre[0, m] = gl_weights[base + m] * (1.0 - t)
                for i in range(k):
                    q[i, m] = z[i] + t * d[i]
                    pre[i + 1, m] = pre[i, m] * q[i, m]
                suf[k, m] = 1.0
                for i in range(k - 1, -1, -1):
                    suf[i, m] = suf[i + 1, m] * q[i, m]
            for i in range(k - 1):
                if d[i] == 0.0:
                    continue
                for m in range(n_nodes):
                    run[m] = pre[i, m]  # c_m prod_{e < j, e != i} q_e as j moves right
                for j in range(i + 1, k):
                    if d[j] != 0.0:
                        s = 0.0
                        for m in range(n_nodes):
                            s += run[m] * suf[j + 1, m]
                        half = v * d[i] * d[j] * s
                        acc[g, col[i], col[j]] += half
                        acc[g, col[j], col[i]] += half
                    for m in range(n_nodes):
                        run[m] *= q[j, m]
        for g in range(n_groups):
            acc[g, n_cols - 1, n_cols - 1] = expected_value[g]
            for i in range(n_cols):
                for j in range(n_cols):
                    out[r, g, i, j] = acc[g, i, j]


def taylor_values(packed: PackedModel, X: np.ndarray) -> np.ndarray:
    """Order-2 Shapley-Taylor interaction index of every row: float32 ``(n, G, F + 1, F + 1)``.

    Parameters
    ----------
    packed : PackedModel
    X : array (n, F)
        Kernel input: :func:`distshap.inputs.prepare_rows` of the user's rows (the model's
        encoding applied).

    Returns
    -------
    ndarray
        Main effects on the diagonal, each pair's index split equally between ``[i, j]`` and
        ``[j, i]``, the expected value at ``[F, F]`` (module docstring).
    """
    if not isinstance(packed, PackedModel):
        raise TypeError(f"expected a PackedModel, got {type(packed).__name__}")
    X = np.ascontiguousarray(X, dtype=np.float32)
    if X.ndim != 2 or X.shape[1] != packed.num_features:
        raise ValueError(f"X must have shape (n_rows, {packed.num_features}), got {X.shape}")
    f1 = packed.num_features + 1
    out = np.empty((X.shape[0], packed.num_groups, f1, f1), np.float32)
    k = np.diff(packed.path_offsets) - 1
    nodes, weights = gauss_legendre_table(node_count(int(k.max(initial=1))))
    run_parallel(
        _taylor_kernel, X, packed.feature, packed.lower, packed.upper, packed.missing,
        packed.zero_fraction, packed.cat_offsets, packed.cat_nbits, packed.cat_other,
        packed.cat_words, packed.path_offsets, packed.path_value, packed.path_group,
        packed.expected_value, nodes, weights, out,
    )  # fmt: skip
    return out
