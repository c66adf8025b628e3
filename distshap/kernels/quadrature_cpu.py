"""CPU SHAP values: pattern tables for short paths, Gauss-Legendre quadrature for the others.

*Quadrature.* The SHAP value of feature element ``i`` of a path of ``k`` features with leaf
value ``v``, zero fractions ``z`` and one fractions ``o`` (0 or 1) is

    phi_i = v (o_i - z_i) integral_0^1 prod_{j != i} (z_j + t (o_j - z_j)) dt

(the Shapley weights ``s! (k-1-s)! / k!`` are Beta integrals), a polynomial of degree ``k - 1``
in ``t``: ``ceil(k / 2)`` Gauss-Legendre nodes give it exactly. At each node a block of rows
forms the prefix products ``prod_{j < i}`` forwards and the suffix products ``prod_{j > i}``
backwards, so every ``prod_{j != i}`` costs two multiplications, no division, and a factor of
0 (``z = 0`` on a branch the row does not take) needs no special case. Every factor and
weight is non-negative and the sums are float64, so nothing cancels and the result keeps its
accuracy at any path length, where the EXTEND / UNWOUND_SUM dynamic program loses it.

*Units.* Quadrature paths of one group that share a set ``C`` of elements lane for lane, each
with at most three elements of its own, its tail (:mod:`distshap.plan.units`), run as one: the
head walks ``C`` with ``h(t) = sum_m v_m prod_{e in T_m} (z_e + t d_e)`` (the members' values
and tails, tails padded to three factors ``a (1 - t) + b t`` with ``a = b = 1``) in the common
product in place of its own value, and each tail element's value comes from moments of the
common product, ``sum_q w_q P(t_q) (1 - t_q)^(D - 1 - s) t_q^s`` (``D``: the unit's longest
tail); the members are skipped. The head has the most elements, so its nodes stay exact; the
sums are float64 of non-negative factors (only values and ``o - z`` carry signs), so the values
are those of the paths apart to float64 rounding.

*Tables.* A path with a SHAP pattern table (:func:`distshap.plan.tables.choose_tables`: the short
paths, within a memory budget) costs one interval test per element and one table row per row.
The table of a path of ``k`` features is its SHAP values at the ``2**k`` corners of its pattern
cube: :func:`fill_tables` runs the kernel itself, by quadrature, on a model of such paths alone
(element ``i`` on feature ``i``, followed when the value is 1) and the ``2**k`` 0/1 rows.

*Rule* (:func:`shap_values`): a path with a table uses it, every other path the quadrature,
which the CPU backend runs instead of the DP for SHAP values (``benchmarks/RESULTS.md`` compares
them, and the table limit).

*Layout.* Rows are processed in blocks, features-major within a block: each path's elements
are read once per block, every inner loop runs over the block's rows (contiguous, vectorised),
and the block's float64 sums are kept as ``acc[group * (F + 1) + feature, row]`` so a path's
contribution to one feature is one contiguous add. Each row sums its paths in packed order, so
the result does not depend on the thread count, the block size or the chunking.

*Compilation.* One serial ``nogil`` function (:func:`_shap_rows`) does all of it, run over row
ranges in threads by :func:`distshap.parallel.run_ranges`: a ``parallel=True`` loop
would recompile the body in its parfor passes, and a separate table filler would be a second
copy of the quadrature (``benchmarks/cold_start.py`` times the first call in a fresh
environment).
"""

from __future__ import annotations

import numba
import numpy as np
from numba import njit

from distshap.compile_cache import announce, read_only
from distshap.kernels import treeshap
from distshap.kernels.taylor_cpu import gauss_legendre_table, node_count
from distshap.parallel import run_ranges
from distshap.plan.units import UNIT_LEVELS

__all__ = [
    "block_rows",
    "element_ones",
    "fill_tables",
    "no_units",
    "pattern_model",
    "pattern_rows",
    "shap_values",
    "unit_arrays",
]

#: Float64 sums of one row block: about 2 MiB, and at most 1,024 rows (larger blocks read each
#: path's lanes and table fewer times).
_ACC_BYTES = 1 << 21
_MAX_BLOCK_ROWS = 1024
_MIN_BLOCK_ROWS = 16
#: :func:`fill_tables`: corner rows per kernel call, and float32 values of one call's output.
_FILL_ROWS = 1 << 12
_FILL_VALUES = 1 << 23

_follows = njit(inline="always", nogil=True, cache=True)(treeshap.follows)


@njit(inline="always", nogil=True, cache=True)
def element_ones(oi, col, n, e, lower, upper, missing, cat_offsets, cat_nbits, cat_other,
                 cat_words):  # fmt: skip
    """``oi[r]``: whether row ``r`` of a block (its values of the element's feature in
    ``col``) follows path element ``e``, for ``r < n``."""
    lo_, hi_, miss, other = lower[e], upper[e], missing[e], cat_other[e]
    if cat_offsets[e] < 0:  # a numeric test alone: a loop that vectorises
        for r in range(n):
            oi[r] = _follows(col[r], lo_, hi_, miss, other, -1, 0, cat_words)
    else:
        co, nbits = cat_offsets[e], cat_nbits[e]
        for r in range(n):
            oi[r] = _follows(col[r], lo_, hi_, miss, other, co, nbits, cat_words)


@njit(inline="always", nogil=True, cache=True)
def _unit_factors(tb, ta, tl, tr, nt, hc, XT, n, u0, u1, unit_value, unit_lanes, feature,
                  lower, upper, missing, zero_fraction, cat_offsets, cat_nbits, cat_other,
                  cat_words):  # fmt: skip
    """The real tail factors ``a (1 - t) + b t`` of the entries ``u0 .. u1 - 1`` of a unit:
    entry ``j`` has ``nt[j]`` of them, factor ``i`` of lane ``tl[3 j + i]`` with ``a`` in
    ``ta[3 j + i]`` and each row's ``b`` (does it follow the lane) in ``tb[tr[3 j + i]]`` (a
    lane of several entries is tested once); and ``h``
    in the basis ``(1 - t)^(3 - s) t^s`` (the padding factors ``(1 - t) + t`` multiplied out):
    ``hc[s - 1]`` per row for ``s = 1, 2, 3``. Returns the constant ``H_0`` and the most real
    factors of an entry."""
    h0 = 0.0
    deg = 1
    for s in range(3):
        for r in range(n):
            hc[s, r] = 0.0
    for j in range(u1 - u0):
        f = UNIT_LEVELS * j
        c = 0
        for i in range(UNIT_LEVELS):
            ln = unit_lanes[u0 + j, i]
            if ln >= 0:
                tl[f + c] = ln
                ta[f + c] = zero_fraction[ln]
                tr[f + c] = f + c
                for g in range(f):  # the earlier entries' factors
                    if g % UNIT_LEVELS < nt[g // UNIT_LEVELS] and tl[g] == ln:
                        tr[f + c] = tr[g]
                        break
                if tr[f + c] == f + c:
                    element_ones(tb[f + c], XT[feature[ln]], n, ln, lower, upper, missing,
                                 cat_offsets, cat_nbits, cat_other, cat_words)  # fmt: skip
                c += 1
        nt[j] = c
        deg = max(deg, c)
        v = unit_value[u0 + j]
        a0, a1, a2 = ta[f], ta[f + 1], ta[f + 2]
        o0, o1, o2 = tb[tr[f]], tb[tr[f + 1]], tb[tr[f + 2]]
        if c == 1:  # v (a0 (1 - t) + b0 t) ((1 - t) + t)^2
            h0 += v * a0
            for r in range(n):
                b0 = v if o0[r] else 0.0
                hc[0, r] += v * (2.0 * a0) + b0
                hc[1, r] += v * a0 + 2.0 * b0
                hc[2, r] += b0
        elif c == 2:  # v (a0 a1 (1 - t)^2 + m t (1 - t) + b0 b1 t^2) ((1 - t) + t)
            aa = a0 * a1
            h0 += v * aa
            for r in range(n):
                b0 = 1.0 if o0[r] else 0.0
                b1 = 1.0 if o1[r] else 0.0
                m = a0 * b1 + b0 * a1
                bb = b0 * b1
                hc[0, r] += v * (aa + m)
                hc[1, r] += v * (m + bb)
                hc[2, r] += v * bb
        else:
            h0 += v * (a0 * a1 * a2)
            for r in range(n):
                b0 = 1.0 if o0[r] else 0.0
                b1 = 1.0 if o1[r] else 0.0
                b2 = 1.0 if o2[r] else 0.0
                hc[0, r] += v * (b0 * a1 * a2 + a0 * b1 * a2 + a0 * a1 * b2)
                hc[1, r] += v * (a0 * b1 * b2 + b0 * a1 * b2 + b0 * b1 * a2)
                hc[2, r] += v * (b0 * b1 * b2)
    return h0, deg


@njit(inline="always", nogil=True, cache=True)
def _unit_tails(acc, base, tb, ta, tl, tr, nt, mom, deg, n, u0, u1, unit_value, feature):
    """Each real tail factor's contribution ``v (b_i - a_i) integral P(t) prod_{f != i} (a_f
    (1 - t) + b_f t) dt`` from the moments ``mom[s] = sum w P(t) (1 - t)^(deg - 1 - s) t^s``,
    ``s < deg`` (``deg``: the most real factors of an entry); an entry of fewer factors takes
    the moments of its own degree, sums of these (``(1 - t) + t = 1``)."""
    low = False
    for j in range(u1 - u0):
        low = low or nt[j] < deg
    ia, ib, i1 = 0, 1, 0  # rows of the degree-1 moments (1 - t, t) and of the degree-0 one
    if low and deg == 3:
        for r in range(n):
            mom[3, r] = mom[0, r] + mom[1, r]
            mom[4, r] = mom[1, r] + mom[2, r]
        ia, ib = 3, 4
    if low and deg >= 2:
        for r in range(n):
            mom[5, r] = mom[ia, r] + mom[ib, r]
        i1 = 5
    for j in range(u1 - u0):
        v = unit_value[u0 + j]
        f = UNIT_LEVELS * j
        c = nt[j]
        for i in range(c):
            ai = ta[f + i]
            oi = tb[tr[f + i]]
            a = acc[base + feature[tl[f + i]]]
            if c == 1:
                for r in range(n):
                    a[r] += (v * ((1.0 if oi[r] else 0.0) - ai)) * mom[i1, r]
            elif c == 2:  # the other factor p
                ap = ta[f + 1 - i]
                op = tb[tr[f + 1 - i]]
                for r in range(n):
                    d = (1.0 if oi[r] else 0.0) - ai
                    a[r] += (v * d) * (ap * mom[ia, r] + (1.0 if op[r] else 0.0) * mom[ib, r])
            else:  # the other two p, q: a_p a_q M_0 + (a_p b_q + b_p a_q) M_1 + b_p b_q M_2
                p = f + (i + 1) % 3
                q = f + (i + 2) % 3
                ap, aq = ta[p], ta[q]
                op, oq = tb[tr[p]], tb[tr[q]]
                for r in range(n):
                    d = (1.0 if oi[r] else 0.0) - ai
                    bp = 1.0 if op[r] else 0.0
                    bq = 1.0 if oq[r] else 0.0
                    a[r] += (v * d) * (ap * aq * mom[0, r] + (ap * bq + bp * aq) * mom[1, r]
                                       + bp * bq * mom[2, r])  # fmt: skip


@announce("the CPU SHAP kernel", 2)
@njit(nogil=True, cache=True)
def _shap_rows(X, feature, lower, upper, missing, zero_fraction, cat_offsets, cat_nbits,
               cat_other, cat_words, path_offsets, path_value, path_group, table_offsets,
               tables, unit_offsets, unit_value, unit_lanes, members, gl_t, gl_w,
               expected_value, max_k, max_entries, block_rows, out, lo, hi):  # fmt: skip
    """SHAP values of rows ``lo .. hi - 1`` of ``X`` into ``out``, ``block_rows`` at a time.
    Sibling units (:mod:`distshap.plan.units`): a head ``p`` (``unit_offsets[p + 1] >
    unit_offsets[p]``) runs its unit's entries, at most ``max_entries``, with its own path; a
    member (``members[p]``) is skipped."""
    n_features = X.shape[1]
    n_paths = path_offsets.shape[0] - 1
    n_groups = out.shape[1]
    n_cols = out.shape[2]
    size = min(block_rows, hi - lo)
    XT = np.empty((n_features, size), np.float32)
    acc = np.empty((n_groups * n_cols, size), np.float64)
    ones = np.empty((max_k, size), np.bool_)  # does row r follow feature element i
    index = np.empty(size, np.int64)  # a table path: the start of each row's table row
    d = np.empty((max_k, size), np.float64)  # o - z
    pre = np.empty((max_k, size), np.float64)
    phi = np.empty((max_k, size), np.float64)
    suf = np.empty(size, np.float64)
    pos = np.empty(max_k, np.int64)  # the positions of the common elements
    tail = np.zeros(max_k, np.bool_)  # a head's own tail positions
    ta = np.empty(UNIT_LEVELS * max_entries, np.float64)  # tail factors a (1 - t) + b t
    tb = np.empty((UNIT_LEVELS * max_entries, size), np.bool_)  # b: does row r follow it
    tl = np.empty(UNIT_LEVELS * max_entries, np.int64)  # their lanes
    tr = np.zeros(UNIT_LEVELS * max_entries, np.int64)  # their rows of tb
    nt = np.empty(max_entries, np.int64)  # real tail factors of each entry
    hc = np.empty((3, size), np.float64)  # h = H_0 (1 - t)^3 + hc[0] t (1 - t)^2 + ...
    mom = np.empty((6, size), np.float64)  # sum w P(t) (1 - t)^(deg - 1 - s) t^s, and lower
    for r0 in range(lo, hi, size):
        n = min(hi, r0 + size) - r0
        for r in range(n):
            for f in range(n_features):
                XT[f, r] = X[r0 + r, f]
        acc[:] = 0.0
        for p in range(n_paths):
            if members[p]:  # run inside its head's unit
                continue
            start = path_offsets[p] + 1  # the first feature element (after the bias lane)
            k = path_offsets[p + 1] - start
            base = path_group[p] * n_cols
            off = table_offsets[p]
            u0, u1 = unit_offsets[p], unit_offsets[p + 1]
            unit = off < 0 and u1 > u0
            if unit:  # the head's tail positions leave the common product (h(t) takes them)
                for i in range(UNIT_LEVELS):
                    if start <= unit_lanes[u0, i] < start + k:  # lanes of the head's own path
                        tail[unit_lanes[u0, i] - start] = True
            for i in range(k):
                e = start + i
                if not tail[i]:
                    element_ones(ones[i], XT[feature[e]], n, e, lower, upper, missing,
                                 cat_offsets, cat_nbits, cat_other, cat_words)  # fmt: skip
            if off >= 0:  # k <= 24 (choose_tables): the pattern is an int64 bit mask
                for r in range(n):
                    index[r] = 0
                for i in range(k):
                    oi = ones[i]
                    for r in range(n):
                        index[r] |= np.int64(oi[r]) << i
                for r in range(n):
                    index[r] = off + index[r] * k
                for i in range(k):
                    a = acc[base + feature[start + i]]
                    for r in range(n):
                        a[r] += tables[index[r] + i]
                continue
            # quadrature: phi_i = v d_i sum_q w_q prod_{j < i} f_j(t_q) prod_{j > i} f_j(t_q)
            h0 = 0.0
            deg = 0
            if unit:  # h(t) enters the common product in place of the head's value
                h0, deg = _unit_factors(tb, ta, tl, tr, nt, hc, XT, n, u0, u1, unit_value,
                                        unit_lanes, feature, lower, upper, missing,
                                        zero_fraction, cat_offsets, cat_nbits, cat_other,
                                        cat_words)  # fmt: skip
                for s in range(deg):
                    for r in range(n):
                        mom[s, r] = 0.0
            nc = 0
            for i in range(k):
                if not tail[i]:
                    pos[nc] = i
                    nc += 1
                tail[i] = False
            for c in range(nc):
                i = pos[c]
                z = zero_fraction[start + i]
                oi = ones[i]
                for r in range(n):
                    d[i, r] = (1.0 if oi[r] else 0.0) - z
                    phi[c, r] = 0.0
            m = (k + 1) // 2  # nodes: the rule of m nodes sits at m (m - 1) / 2
            wv = path_value[p]
            for q in range(m * (m - 1) // 2, m * (m + 1) // 2):
                t = gl_t[q]
                if unit:  # pre[0] = w; suf starts at h(t); pre[nc] = w P(t)
                    s1 = 1.0 - t
                    wv = gl_w[q]
                    c1, c2, c3 = t * s1 * s1, t * t * s1, t * t * t
                    h0t = h0 * (s1 * s1 * s1)
                    for r in range(n):
                        suf[r] = h0t + hc[0, r] * c1 + hc[1, r] * c2 + hc[2, r] * c3
                else:
                    wv = gl_w[q] * path_value[p]
                    for r in range(n):
                        suf[r] = 1.0
                for r in range(n):
                    pre[0, r] = wv
                last = nc + 1 if unit else nc
                for c in range(1, last):  # pre[c] = w v prod_{j < c} (z_j + t d_j)
                    i = pos[c - 1]
                    z = zero_fraction[start + i]
                    for r in range(n):
                        pre[c, r] = pre[c - 1, r] * (z + t * d[i, r])
                for c in range(nc - 1, -1, -1):  # suf = prod_{j > c} (z_j + t d_j)
                    i = pos[c]
                    z = zero_fraction[start + i]
                    for r in range(n):
                        phi[c, r] += pre[c, r] * suf[r]
                    for r in range(n):
                        suf[r] *= z + t * d[i, r]
                if deg == 1:  # the moments of the unit's degree
                    for r in range(n):
                        mom[0, r] += pre[nc, r]
                elif deg == 2:
                    for r in range(n):
                        mom[0, r] += pre[nc, r] * s1
                        mom[1, r] += pre[nc, r] * t
                elif deg == 3:
                    c0, c1, c2 = s1 * s1, t * s1, t * t
                    for r in range(n):
                        mom[0, r] += pre[nc, r] * c0
                        mom[1, r] += pre[nc, r] * c1
                        mom[2, r] += pre[nc, r] * c2
            for c in range(nc):
                i = pos[c]
                a = acc[base + feature[start + i]]
                for r in range(n):
                    a[r] += phi[c, r] * d[i, r]
            if unit:
                _unit_tails(acc, base, tb, ta, tl, tr, nt, mom, deg, n, u0, u1, unit_value,
                            feature)  # fmt: skip
        for r in range(n):
            for g in range(n_groups):
                for c in range(n_cols - 1):
                    out[r0 + r, g, c] = acc[g * n_cols + c, r]
                out[r0 + r, g, n_cols - 1] = expected_value[g]


def _run(
    X: np.ndarray,
    lanes: tuple,
    path_offsets: np.ndarray,
    path_value: np.ndarray,
    path_group: np.ndarray,
    table_offsets: np.ndarray,
    tables: np.ndarray,
    expected_value: np.ndarray,
    out: np.ndarray,
    units: tuple | None = None,
) -> None:
    """:func:`_shap_rows` over every row of ``X``, in threads; ``units``: its
    ``(unit_offsets, unit_value, unit_lanes, members)`` (:func:`unit_arrays`), none by
    default."""
    k = np.diff(path_offsets) - 1
    max_k = max(int(k.max()), 1) if k.size else 1
    gl_t, gl_w = gauss_legendre_table(node_count(max_k))
    rows = block_rows(out.shape[1], out.shape[2] - 1)
    threads = numba.get_num_threads()  # ranges of whole blocks, a few per thread when many
    pieces = max(threads, min(4 * threads, -(-X.shape[0] // rows)))
    if units is None:
        units = no_units(path_offsets.shape[0] - 1)
    units = tuple(read_only(a) for a in units)  # one specialisation, cached or built here
    max_entries = max(int(np.diff(units[0]).max()), 1)
    run_ranges(_shap_rows, X.shape[0], pieces, read_only(X), *lanes, path_offsets,
               path_value, path_group, table_offsets, tables, *units, gl_t, gl_w,
               expected_value, max_k, max_entries, rows, out)  # fmt: skip


def no_units(n_paths: int) -> tuple:
    """:func:`unit_arrays` of ``n_paths`` paths that all run apart."""
    return (
        np.zeros(max(n_paths, 1) + 1, np.int64),
        np.zeros(1, np.float64),
        np.full((1, UNIT_LEVELS), -1, np.int64),
        np.zeros(max(n_paths, 1), np.bool_),
    )


def unit_arrays(units) -> tuple:
    """Sibling units (:class:`~distshap.plan.units.SiblingUnits`) as :func:`_shap_rows` takes
    them: ``(unit_offsets, unit_value, unit_lanes, members)``, int64 / float64 / int64
    ``(E, 3)`` / bool."""
    members = np.zeros(max(units.members.shape[0], 1), np.bool_)
    members[: units.members.shape[0]] = units.members
    return (
        np.ascontiguousarray(units.offsets, np.int64),
        np.ascontiguousarray(units.value, np.float64),
        np.ascontiguousarray(units.lanes, np.int64),
        members,
    )


def block_rows(num_groups: int, num_features: int) -> int:
    """Rows per block: the block's float64 sums ``(G * (F + 1), rows)`` stay cache-sized."""
    per_row = 8 * num_groups * (num_features + 1)
    return int(np.clip(_ACC_BYTES // per_row, _MIN_BLOCK_ROWS, _MAX_BLOCK_ROWS))


def pattern_model(path_offsets: np.ndarray, zero_fraction: np.ndarray, part: np.ndarray, k: int):
    """The paths ``part`` (``k`` features each) as a model of their own, for filling tables.

    Element ``i`` of each path tests feature ``i`` for ``x >= 0.5`` and keeps its path's zero
    fraction, so the input row of :func:`pattern_rows` for pattern ``b`` makes exactly the
    elements of ``b``'s bits follow. Returns the kernels' lane arrays and the path offsets.
    """
    n_paths = part.shape[0]
    lanes = (path_offsets[part][:, None] + np.arange(k + 1)).ravel()
    feature = np.tile(np.r_[-1, np.arange(k)].astype(np.int32), n_paths)
    model = (
        feature, np.full(feature.shape, 0.5, np.float32),
        np.full(feature.shape, np.inf, np.float32), np.zeros(feature.shape, np.bool_),
        zero_fraction[lanes], np.full(feature.shape, -1, np.int64),
        np.zeros(feature.shape, np.int32), np.ones(feature.shape, np.bool_),
        np.zeros(0, np.uint32),
    )  # fmt: skip
    return model, np.arange(n_paths + 1, dtype=np.int64) * (k + 1)


def pattern_rows(patterns: np.ndarray, k: int) -> np.ndarray:
    """Input rows of :func:`pattern_model`: row ``r`` holds the ``k`` bits of ``patterns[r]``."""
    return ((np.asarray(patterns)[:, None] >> np.arange(k)) & 1).astype(np.float32)


def fill_tables(
    path_offsets: np.ndarray,
    zero_fraction: np.ndarray,
    path_value: np.ndarray,
    table_offsets: np.ndarray,
    total: int,
) -> np.ndarray:
    """Every pattern's SHAP contributions of every path with a table: float32 ``(total,)``.

    Entry ``[table_offsets[p] + pattern * k + i]`` is ``phi_i`` of feature element ``i``
    (0-based, after the bias lane) of path ``p`` when the one fractions are the bits of
    ``pattern`` (bit ``i``: element ``i`` follows), computed in float64 by quadrature.

    Paths of ``k`` features are evaluated together, as one model of such paths alone, each in
    its own output group: element ``i`` tests feature ``i`` for ``x >= 0.5``, and row ``b`` of
    the input holds the bits of pattern ``b``.
    """
    tables = np.empty(int(total), np.float32)
    lengths = np.diff(path_offsets) - 1
    with_table = np.asarray(table_offsets) >= 0
    for k in np.unique(lengths[with_table]).tolist():
        ids = np.flatnonzero(with_table & (lengths == k))
        patterns = 1 << k
        n_rows = min(patterns, _FILL_ROWS)
        chunk = max(1, _FILL_VALUES // (n_rows * (k + 1)))
        for c in range(0, ids.shape[0], chunk):
            part = ids[c : c + chunk]
            n_paths = part.shape[0]
            model, offsets = pattern_model(path_offsets, zero_fraction, part, k)
            for first in range(0, patterns, n_rows):
                rows = first + np.arange(min(n_rows, patterns - first))
                X = pattern_rows(rows, k)
                out = np.empty((rows.shape[0], n_paths, k + 1), np.float32)
                groups = np.arange(n_paths, dtype=np.int32)
                _run(X, model, offsets, path_value[part], groups, np.full(n_paths, -1, np.int64),
                     tables[:0], np.zeros(n_paths), out)  # fmt: skip
                dest = table_offsets[part][:, None] + first * k + np.arange(rows.shape[0] * k)
                tables[dest] = out[:, :, :k].transpose(1, 0, 2).reshape(n_paths, -1)
    return tables


def shap_values(packed, X: np.ndarray, table_offsets: np.ndarray, tables: np.ndarray,
                units: tuple | None = None) -> np.ndarray:  # fmt: skip
    """SHAP values of the rows of ``X``: float32 ``(n, G, F + 1)``, bias last.

    Parameters
    ----------
    packed : PackedModel
    X : float32 array (n, F), C-contiguous
        Kernel input (:func:`distshap.inputs.prepare_rows` of the user's rows).
    table_offsets : int64 array (n_paths,)
        Start of each path's table in ``tables``, -1 where the path has none (quadrature).
    tables : float32 array
        The tables (:func:`fill_tables`).
    units : tuple, optional
        The sibling units of the paths without a table (:func:`unit_arrays`); none: every
        path apart.
    """
    out = np.empty((X.shape[0], packed.num_groups, packed.num_features + 1), np.float32)
    if X.shape[0]:
        lanes = (
            packed.feature, packed.lower, packed.upper, packed.missing, packed.zero_fraction,
            packed.cat_offsets, packed.cat_nbits, packed.cat_other, packed.cat_words,
        )  # fmt: skip
        _run(X, lanes, packed.path_offsets, packed.path_value, packed.path_group, table_offsets,
             tables, packed.expected_value, out, units)  # fmt: skip
    return out
