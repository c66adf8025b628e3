"""Banzhaf values and Banzhaf interaction values on the CPU, row by row: serial ``nogil`` Numba
functions over ranges of rows, run in threads (:func:`distshap.parallel.run_ranges`).
:mod:`distshap.kernels.banzhaf_cpu` runs its values by pattern tables, its interaction values
here.

*The game of a path.* A merged path of ``k`` features with leaf value ``v`` contributes
``v prod_j (j in S ? o_j : z_j)`` to the value of a coalition ``S``: ``o_j`` (0 or 1) says whether
the row follows the path's elements on feature ``j``; ``z_j`` is their cover fraction
(path-dependent game) or whether the background row ``r`` follows them (interventional game,
averaged over the background rows). Banzhaf weighs every coalition of the other players
``1 / 2**(M - 1)``, so the sum over coalitions factorises per path, and features off the path
(dummies) drop out:

    phi_i  = v (o_i - z_i) prod_{j != i} (o_j + z_j) / 2
    phi_ij = v (o_i - z_i) (o_j - z_j) prod_{l != i, j} (o_l + z_l) / 2

(``phi_ij`` is the Banzhaf interaction index, with ``1 / 2**(M - 2)``).

*Path-dependent* (:func:`banzhaf_values`): for each row and path, the products of the others
by prefix and suffix products (no division, a zero factor needs no special case), float64 sums
over paths in packed order.

*Interventional* (:func:`interventional_banzhaf_values`): with 0/1 factors a background row
contributes only when it follows every element ``x`` does not (``rb ⊇ nx``, ``nx`` the
elements ``x`` does not follow, ``xb`` the others); then ``o + z`` is 2 on ``xb & rb``, 1 on the
rest, and with ``h(m) = (rows of mask m) 2**|m|`` and its superset sums ``Z(m) = sum_{m' ⊇ m}
h(m')`` (a zeta transform of ``2**k`` entries per path, built once per call):

    phi_i  = c (Z(nx) - Z(nx | i))                              i in xb
    phi_i  = -c Z(nx)                                           i in nx
    phi_ij = 2 c (Z(nx) - Z(nx | i) - Z(nx | j) + Z(nx | i | j)) i, j in xb
    phi_ij = -2 c (Z(nx) - Z(nx | i))                           i in xb, j in nx
    phi_ij = 2 c Z(nx)                                          i, j in nx

with ``c = v 2**(|xb| + 1 - 2 k) / B``. ``Z`` holds integers below ``2**53`` (exact in float64),
so the differences are exact and each explained row costs ``O(k)`` per path (``O(k**2)`` for
interactions) whatever the background size. Paths of more than :data:`ZETA_BITS` features test
each background row instead (``O(B k)`` per row and path).

Layouts as the SHAP kernels': ``(n, G, F + 1)`` with the bias (``v(∅)``) last; interactions
``(n, G, F + 1, F + 1)`` with ``phi_ij`` at ``[i, j]`` and ``[j, i]``, the diagonal
``phi_i - sum_{j != i} phi_ij`` (each row sums to the Banzhaf value) and the bias at ``[F, F]``.
Each row is one task's, so the bits depend on neither the thread count nor the chunking.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from distshap.compile_cache import announce, read_only
from distshap.kernels import treeshap
from distshap.kernels.interventional_math import check_background
from distshap.packed import PackedModel
from distshap.parallel import num_threads, run_ranges

__all__ = [
    "ZETA_BITS",
    "ZETA_BLOCK_ENTRIES",
    "background_masks",
    "banzhaf_values",
    "interventional_banzhaf_values",
]

#: Paths of at most this many features get a superset-sum table (``2**k`` float64 entries).
ZETA_BITS = 16
#: Table entries built at a time (paths are processed in blocks of at most this many).
ZETA_BLOCK_ENTRIES = 1 << 24
#: Largest float64 accumulator of a row block.
_ACCUMULATOR_BYTES = 1 << 27

_inline = njit(inline="always", nogil=True, cache=True)
_follows = _inline(treeshap.follows)


@_inline
def _element(row, e, feature, lower, upper, missing, cat_offsets, cat_nbits, cat_other,
             cat_words):  # fmt: skip
    return _follows(row[feature[e]], lower[e], upper[e], missing[e], cat_other[e],
                    cat_offsets[e], cat_nbits[e], cat_words)  # fmt: skip


@_inline
def _scatter(acc, row, g, feature, start, k, phi, pairs, interactions):
    """Add a path's ``phi`` (and ``pairs``) to row ``row``'s float64 sums of group ``g``."""
    for i in range(k):
        fi = feature[start + i]
        acc[row, g, fi, 0] += phi[i]
        if interactions:
            for j in range(k):
                if j != i:
                    acc[row, g, fi, 1 + feature[start + j]] += pairs[i, j]


@announce("the CPU Banzhaf row kernel (path-dependent)", 2)
@njit(nogil=True, cache=True)
def _path_dependent_rows(X, feature, lower, upper, missing, zero_fraction, cat_offsets,
                         cat_nbits, cat_other, cat_words, path_offsets, path_value, path_group,
                         max_k, interactions, acc, r0, lo, hi):  # fmt: skip
    """Path-dependent values of rows ``r0 + lo .. r0 + hi - 1`` into ``acc[lo:hi]``."""
    n_paths = path_offsets.shape[0] - 1
    f = np.empty(max_k + 1, np.float64)  # (o + z) / 2
    d = np.empty(max_k, np.float64)  # o - z
    pre = np.empty(max_k + 1, np.float64)  # pre[i] = prod_{j < i} f_j
    suf = np.empty(max_k + 1, np.float64)  # suf[i] = prod_{j >= i} f_j
    phi = np.empty(max_k, np.float64)
    pairs = np.empty((max_k, max_k) if interactions else (1, 1), np.float64)
    for row in range(lo, hi):
        x = X[r0 + row]
        for p in range(n_paths):
            start = path_offsets[p] + 1
            k = path_offsets[p + 1] - start
            v = path_value[p]
            pre[0] = 1.0
            for i in range(k):
                e = start + i
                o = 1.0 if _element(x, e, feature, lower, upper, missing, cat_offsets,
                                    cat_nbits, cat_other, cat_words) else 0.0  # fmt: skip
                z = zero_fraction[e]
                d[i] = o - z
                f[i] = 0.5 * (o + z)
                pre[i + 1] = pre[i] * f[i]
            suf[k] = 1.0
            for i in range(k - 1, -1, -1):
                phi[i] = v * d[i] * pre[i] * suf[i + 1]
                suf[i] = suf[i + 1] * f[i]
            if interactions:
                for i in range(k):
                    mid = v * d[i] * pre[i]  # v d_i prod_{l < i} f_l prod_{i < l < j} f_l
                    for j in range(i + 1, k):
                        pairs[i, j] = pairs[j, i] = mid * d[j] * suf[j + 1]
                        mid *= f[j]
            _scatter(acc, row, path_group[p], feature, start, k, phi, pairs, interactions)


@njit(nogil=True, cache=True)
def _zeta_tables(R, feature, lower, upper, missing, cat_offsets, cat_nbits, cat_other,
                 cat_words, path_offsets, p0, table_offsets, tables, lo, hi):  # fmt: skip
    """Superset sums ``Z`` of block paths ``lo .. hi - 1`` (path ``p0 + q``) with a table."""
    B = R.shape[0]
    for q in range(lo, hi):
        off = table_offsets[q]
        if off < 0:
            continue
        start = path_offsets[p0 + q] + 1
        k = path_offsets[p0 + q + 1] - start
        size = 1 << k
        z = tables[off : off + size]
        z[:] = 0.0
        for r in range(B):
            mask = 0
            weight = 1.0
            for i in range(k):
                if _element(R[r], start + i, feature, lower, upper, missing, cat_offsets,
                            cat_nbits, cat_other, cat_words):  # fmt: skip
                    mask |= 1 << i
                    weight *= 2.0
            z[mask] += weight
        for i in range(k):  # superset sums, one bit at a time
            bit = 1 << i
            for m in range(size):
                if not m & bit:
                    z[m] += z[m | bit]


@_inline
def _from_table(z, xb, k, c, interactions, phi, pairs):
    """A path's values for the explained mask ``xb`` from its superset sums ``z``."""
    full = (1 << k) - 1
    nx = full & ~xb
    base = z[nx]
    for i in range(k):
        if (xb >> i) & 1:
            phi[i] = c * (base - z[nx | (1 << i)])
        else:
            phi[i] = -c * base
    if interactions:
        c2 = 2.0 * c
        for i in range(k):
            ii = (xb >> i) & 1
            for j in range(i + 1, k):
                jj = (xb >> j) & 1
                if ii and jj:
                    val = base - z[nx | (1 << i)] - z[nx | (1 << j)] + z[nx | (1 << i) | (1 << j)]
                elif ii:
                    val = -(base - z[nx | (1 << i)])
                elif jj:
                    val = -(base - z[nx | (1 << j)])
                else:
                    val = base
                pairs[i, j] = pairs[j, i] = c2 * val


@njit(nogil=True, cache=True)
def _long_path(x, R, start, k, v, feature, lower, upper, missing, cat_offsets, cat_nbits,
               cat_other, cat_words, xf, interactions, phi, pairs):  # fmt: skip
    """A path without a table: every background row tested, in row order."""
    B = R.shape[0]
    phi[:k] = 0.0
    if interactions:
        pairs[:k, :k] = 0.0
    rf = np.empty(k, np.bool_)
    for r in range(B):
        ok = True
        m = 0  # features where exactly one of x and r follows
        for i in range(k):
            rf[i] = _element(R[r], start + i, feature, lower, upper, missing, cat_offsets,
                             cat_nbits, cat_other, cat_words)  # fmt: skip
            if not (xf[i] or rf[i]):
                ok = False
                break
            if xf[i] != rf[i]:
                m += 1
        if not ok or m == 0:
            continue
        w = v / B * 2.0 ** (1 - m)
        for i in range(k):
            if xf[i] != rf[i]:
                si = 1.0 if xf[i] else -1.0
                phi[i] += si * w
                if interactions:
                    for j in range(i + 1, k):
                        if xf[j] != rf[j]:
                            val = 2.0 * w * si * (1.0 if xf[j] else -1.0)
                            pairs[i, j] += val
                            pairs[j, i] += val


@announce("the CPU Banzhaf row kernel (interventional)", 2)
@njit(nogil=True, cache=True)
def _interventional_rows(X, R, feature, lower, upper, missing, cat_offsets, cat_nbits,
                         cat_other, cat_words, path_offsets, path_value, path_group, p0, p1,
                         table_offsets, tables, max_k, interactions, acc, r0, lo, hi):  # fmt: skip
    """Paths ``p0 .. p1 - 1`` of rows ``r0 + lo .. r0 + hi - 1``, added to ``acc[lo:hi]``."""
    B = R.shape[0]
    xf = np.empty(max_k, np.bool_)
    phi = np.empty(max_k, np.float64)
    pairs = np.empty((max_k, max_k) if interactions else (1, 1), np.float64)
    for row in range(lo, hi):
        x = X[r0 + row]
        for q in range(p1 - p0):
            p = p0 + q
            start = path_offsets[p] + 1
            k = path_offsets[p + 1] - start
            xb = 0
            count = 0
            for i in range(k):
                xf[i] = _element(x, start + i, feature, lower, upper, missing, cat_offsets,
                                 cat_nbits, cat_other, cat_words)  # fmt: skip
                if xf[i]:
                    xb |= 1 << i
                    count += 1
            off = table_offsets[q]
            if off >= 0:
                c = path_value[p] / B * 2.0 ** (count + 1 - 2 * k)
                _from_table(tables[off : off + (1 << k)], xb, k, c, interactions, phi, pairs)
            else:
                _long_path(x, R, start, k, path_value[p], feature, lower, upper, missing,
                           cat_offsets, cat_nbits, cat_other, cat_words, xf, interactions, phi,
                           pairs)  # fmt: skip
            _scatter(acc, row, path_group[p], feature, start, k, phi, pairs, interactions)


@njit(nogil=True, cache=True)
def _finish_values(acc, bias, out, r0, lo, hi):
    """float64 sums -> float32 values of rows ``r0 + lo .. r0 + hi - 1``, bias last."""
    G, C = acc.shape[1], acc.shape[2]
    for row in range(lo, hi):
        for g in range(G):
            for i in range(C - 1):
                out[r0 + row, g, i] = acc[row, g, i, 0]
            out[r0 + row, g, C - 1] = bias[0 if bias.shape[0] == 1 else r0 + row, g]


@njit(nogil=True, cache=True)
def _finish_interactions(acc, bias, out, r0, lo, hi):
    """float64 sums -> float32 interaction values of rows ``r0 + lo .. r0 + hi - 1``: the
    diagonal ``phi_i - sum_{j != i} phi_ij`` and the bias at ``[F, F]``."""
    G, C = acc.shape[1], acc.shape[2]
    for row in range(lo, hi):
        for g in range(G):
            for i in range(C - 1):
                diag = acc[row, g, i, 0]
                for j in range(C - 1):
                    if j != i:
                        diag -= acc[row, g, i, 1 + j]
                        out[r0 + row, g, i, j] = acc[row, g, i, 1 + j]
                out[r0 + row, g, i, i] = diag
                out[r0 + row, g, i, C - 1] = 0.0
                out[r0 + row, g, C - 1, i] = 0.0
            out[r0 + row, g, C - 1, C - 1] = bias[0 if bias.shape[0] == 1 else r0 + row, g]


def _lanes(packed: PackedModel) -> tuple:
    return (packed.feature, packed.lower, packed.upper, packed.missing)


def _categorical(packed: PackedModel) -> tuple:
    return (packed.cat_offsets, packed.cat_nbits, packed.cat_other, packed.cat_words)


def _rows(X: np.ndarray, packed: PackedModel) -> np.ndarray:
    X = np.ascontiguousarray(X, dtype=np.float32)
    if X.ndim != 2 or X.shape[1] != packed.num_features:
        raise ValueError(f"X must have shape (n_rows, {packed.num_features}), got {X.shape}")
    return read_only(X)


def _max_k(packed: PackedModel) -> int:
    k = np.diff(packed.path_offsets) - 1
    return max(int(k.max()), 1) if k.size else 1


def _run_blocks(
    n: int, packed: PackedModel, interactions: bool, bias: np.ndarray, add
) -> np.ndarray:
    """Rows in blocks of a bounded float64 accumulator: ``add(acc, r0)`` sums a block's paths,
    :func:`_finish_values` / :func:`_finish_interactions` store it."""
    G, C = packed.num_groups, packed.num_features + 1
    out = np.empty((n, G, C) + ((C,) if interactions else ()), np.float32)
    width = C if interactions else 1
    block = max(1, _ACCUMULATOR_BYTES // (8 * G * C * width))
    threads = num_threads()
    for r0 in range(0, n, block):
        rows = min(n, r0 + block) - r0
        acc = np.zeros((rows, G, C, width), np.float64)
        add(acc, r0, max(1, min(rows, 4 * threads)))
        finish = _finish_interactions if interactions else _finish_values
        run_ranges(finish, rows, threads, acc, bias, out, r0)
    return out


def banzhaf_values(packed: PackedModel, X: np.ndarray, interactions: bool = False) -> np.ndarray:
    """Path-dependent Banzhaf values of the rows of ``X``: float32 ``(n, G, F + 1)``, bias
    (``packed.expected_value``) last; ``interactions``: Banzhaf interaction values
    ``(n, G, F + 1, F + 1)``.

    Parameters
    ----------
    packed : PackedModel
    X : array (n, F)
        Kernel input: the rows through the model's encoding.
    interactions : bool
        Interaction values instead.
    """
    X = _rows(X, packed)
    bias = np.asarray(packed.expected_value, np.float64).reshape(1, -1)
    max_k = _max_k(packed)

    def add(acc: np.ndarray, r0: int, pieces: int) -> None:
        run_ranges(_path_dependent_rows, acc.shape[0], pieces, X, *_lanes(packed),
                   packed.zero_fraction, *_categorical(packed), packed.path_offsets,
                   packed.path_value, packed.path_group, max_k, bool(interactions), acc,
                   r0)  # fmt: skip

    return _run_blocks(X.shape[0], packed, interactions, bias, add)


def _path_blocks(packed: PackedModel, zeta_bits: int) -> list[tuple[int, int, np.ndarray, int]]:
    """Blocks of paths ``(p0, p1, table_offsets, entries)`` of at most
    :data:`ZETA_BLOCK_ENTRIES` table entries (a longer path alone)."""
    k = np.diff(packed.path_offsets) - 1
    size = np.where(k <= zeta_bits, np.left_shift(1, np.minimum(k, zeta_bits)), 0)
    blocks, p0 = [], 0
    while p0 < k.size:
        ends = np.cumsum(size[p0:])
        p1 = p0 + max(1, int(np.searchsorted(ends, ZETA_BLOCK_ENTRIES, side="right")))
        sizes = size[p0:p1]
        offsets = np.where(sizes > 0, np.cumsum(sizes) - sizes, -1).astype(np.int64)
        blocks.append((p0, p1, offsets, int(sizes.sum())))
        p0 = p1
    return blocks


def interventional_banzhaf_values(
    packed: PackedModel,
    background,
    X: np.ndarray,
    *,
    bias: np.ndarray | None = None,
    interactions: bool = False,
    zeta_bits: int = ZETA_BITS,
) -> np.ndarray:
    """Interventional Banzhaf values (raw margin) of the rows of ``X`` over ``background``.

    Parameters
    ----------
    packed : PackedModel
    background : distshap.kernels.interventional_math.Background
        Built for ``packed``.
    X : array (n, F)
        Kernel input: the rows through the model's encoding.
    bias : float64 (1, G) or (n, G), optional
        The bias column (``v(∅)``, the mean background margin); default zeros.
    interactions : bool
        Banzhaf interaction values instead.
    zeta_bits : int
        Paths with more features test each background row (a parameter so tests reach it).

    Returns
    -------
    ndarray
        float32 ``(n, G, F + 1)`` or ``(n, G, F + 1, F + 1)``.
    """
    check_background(background, packed)
    X = _rows(X, packed)
    G = packed.num_groups
    bias = np.zeros((1, G)) if bias is None else np.ascontiguousarray(bias, dtype=np.float64)
    if bias.ndim != 2 or bias.shape[1] != G or bias.shape[0] not in (1, X.shape[0]):
        raise ValueError(f"bias has shape {bias.shape}, expected (1, {G}) or ({X.shape[0]}, {G})")
    R = read_only(np.ascontiguousarray(background.rows, dtype=np.float32))
    max_k = _max_k(packed)
    threads = num_threads()
    blocks = _path_blocks(packed, min(int(zeta_bits), ZETA_BITS))
    built: dict[int, np.ndarray] = {}

    def tables(b: int) -> np.ndarray:
        if b in built:
            return built[b]
        p0, p1, offsets, entries = blocks[b]
        z = np.empty(entries, np.float64)
        run_ranges(_zeta_tables, p1 - p0, 4 * threads, R, *_lanes(packed), *_categorical(packed),
                   packed.path_offsets, p0, offsets, z)  # fmt: skip
        if len(blocks) == 1:
            built[b] = z
        return z

    def add(acc: np.ndarray, r0: int, pieces: int) -> None:
        for b, (p0, p1, offsets, _) in enumerate(blocks):
            run_ranges(_interventional_rows, acc.shape[0], pieces, X, R, *_lanes(packed),
                       *_categorical(packed), packed.path_offsets, packed.path_value,
                       packed.path_group, p0, p1, offsets, tables(b), max_k,
                       bool(interactions), acc, r0)  # fmt: skip

    return _run_blocks(X.shape[0], packed, interactions, bias, add)


@njit(nogil=True, cache=True)
def _masks(R, feature, lower, upper, missing, cat_offsets, cat_nbits, cat_other, cat_words,
           path_offsets, mask_offsets, masks, lo, hi):  # fmt: skip
    """``masks[mask_offsets[p] + r]``: bit ``i`` set when background row ``r`` follows element
    ``i`` of path ``p`` (paths ``lo .. hi - 1`` with an offset)."""
    for p in range(lo, hi):
        off = mask_offsets[p]
        if off < 0:
            continue
        start = path_offsets[p] + 1
        k = path_offsets[p + 1] - start
        for r in range(R.shape[0]):
            bits = np.int64(0)
            for i in range(k):
                if _element(R[r], start + i, feature, lower, upper, missing, cat_offsets,
                            cat_nbits, cat_other, cat_words):  # fmt: skip
                    bits |= np.int64(1) << i
            masks[off + r] = bits


def background_masks(
    packed: PackedModel, R: np.ndarray, which: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Background masks of the paths ``which`` (bool per path; default all) of at most 62
    features: ``(masks, mask_offsets)``, row ``r``'s mask of path ``p`` at ``masks[mask_offsets[p]
    + r]`` (``mask_offsets[p] = -1``: not built)."""
    k = np.diff(packed.path_offsets) - 1
    chosen = k <= 62 if which is None else (np.asarray(which, bool) & (k <= 62))
    B = R.shape[0]
    offsets = np.where(chosen, (np.cumsum(chosen) - 1) * B, -1).astype(np.int64)
    masks = np.zeros(max(1, int(chosen.sum()) * B), np.int64)
    R = np.ascontiguousarray(R, dtype=np.float32)
    run_ranges(_masks, k.size, 4 * num_threads(), R, *_lanes(packed), *_categorical(packed),
               packed.path_offsets, offsets, masks)  # fmt: skip
    return masks, offsets
