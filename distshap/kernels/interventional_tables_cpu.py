"""Background pattern tables of interventional SHAP on the CPU (model output ``"raw"``).

With the raw margin a merged path's background mean depends on the explained row ``x`` only
through its pattern ``mx``, the bit mask of the path's elements ``x`` follows
(:mod:`distshap.kernels.interventional_math`). So for each path of at most a few features
(:func:`distshap.plan.interventional.cpu_table_plan`) this module counts once per background
how many background rows follow each of the ``2**k`` patterns, and fills a table over ``mx``:
``k`` float64 values a pattern (each element's SHAP value, times the leaf value) and, for
interaction values, ``k * k`` more (half the interaction index times the leaf value, off the
diagonal). An explained row then costs one test per element and one table entry per element
(``k`` per element for interactions), whatever the background's size.

Bits: a table entry is the float64 sum the grouped-mask route of
:mod:`distshap.kernels.interventional_cpu` forms for that pattern, term for term in the same
order (the contributing background patterns ascending: the submasks of ``mx`` enumerated
upwards), times the leaf value as that route scales it; so both routes add the same float64
values to a row's accumulators. The counts come from one small kernel; the sums are NumPy,
vectorised over the paths of one length and the patterns, one submask rank at a time
(:func:`_fill_group`), so the tables add no kernel to a first call's compilation.

The tables are kept with the background (:func:`background_tables`): the last few, keyed by
the background's digest (which covers the packed model's), within the table budget.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from numba import njit

import distshap.kernels.interventional_math as im
import distshap.kernels.treeshap as treeshap
from distshap.kernels.interventional_math import IR_RR, IR_XR, IR_XX, SHAP_R, SHAP_X, Background
from distshap.packed import PackedModel
from distshap.parallel import num_threads, run_ranges
from distshap.plan.config import get_config
from distshap.plan.interventional import cpu_table_plan

__all__ = [
    "FILL_BYTES",
    "MAX_KEPT",
    "BackgroundTables",
    "add_pair",
    "background_tables",
    "element_follows",
    "follows",
    "popcount",
    "table_rows",
]

#: Backgrounds whose tables are kept (least recently used dropped; the table budget too).
MAX_KEPT = 4
#: Bytes of the temporaries of one batch of paths filled together (NumPy).
FILL_BYTES = 1 << 26

_inline = njit(inline="always", nogil=True, cache=True)
follows = _inline(treeshap.follows)


@njit(inline="always", nogil=True, cache=True)
def popcount(v):
    """Set bits of a non-negative int64."""
    count = 0
    while v:
        v &= v - 1
        count += 1
    return count


@njit(inline="always", nogil=True, cache=True)
def element_follows(row, e, feature, lower, upper, missing, cat_offsets, cat_nbits, cat_other,
                    cat_words):  # fmt: skip
    """Whether ``row`` follows packed element ``e``."""
    return follows(row[feature[e]], lower[e], upper[e], missing[e], cat_other[e],
                    cat_offsets[e], cat_nbits[e], cat_words)  # fmt: skip


@njit(inline="always", nogil=True, cache=True)
def add_pair(w, a, b, xr, k, weights, interactions, loc_phi, loc_int, cxr, totals):
    """One contributing (x, background pattern) pair of a path: ``X = xr`` (``a`` elements),
    ``R`` the ``b`` elements ``x`` does not follow; ``w`` the pair's weight.

    ``loc_phi[i]`` (element ``i`` in ``X``), ``totals[0]`` (subtracted from every element of
    ``R``), and for interactions ``loc_int`` (pairs in ``X``), ``cxr`` (an ``X`` element with
    every ``R`` one), ``totals[1]`` (pairs in ``R``); all without the leaf value.
    """
    if b > 0:
        totals[0] += w * weights[im.SHAP_R, a, b]
    if a > 0:
        wx = w * weights[im.SHAP_X, a, b]
        for i in range(k):
            if (xr >> i) & 1:
                loc_phi[i] += wx
    if interactions:
        if b > 1:
            totals[1] += w * weights[im.IR_RR, a, b]
        if a > 0 and b > 0:
            wxr = w * weights[im.IR_XR, a, b]
            for i in range(k):
                if (xr >> i) & 1:
                    cxr[i] += wxr
        if a > 1:
            wxx = w * weights[im.IR_XX, a, b]
            for i in range(k):
                if (xr >> i) & 1:
                    for j in range(k):
                        if j != i and (xr >> j) & 1:
                            loc_int[i, j] += wxx


@njit(nogil=True, cache=True)
def table_rows(Xt, r0, nb, start, k, g, feature, lower, upper, missing, cat_offsets, cat_nbits,
                cat_other, cat_words, s0, shap_tables, i0, inter_tables, interactions, xbs,
                local, acc_t, local_int, acc_ti, acc_phi, acc_int):  # fmt: skip
    """Rows ``r0 .. r0 + nb - 1`` (``Xt``: the block's rows, transposed) through one path's
    pattern tables (SHAP at ``s0``, interactions at ``i0``): the pattern ``xbs[i]`` of each
    row, one element at a time (its test's arguments held in registers), then one entry per
    element (and ``k - 1`` more per element for interactions). SHAP values go to ``acc_t``
    (the block's ``acc_phi`` transposed, ``local``) or ``acc_phi``, interaction values to
    ``acc_ti`` (``local_int``) or ``acc_int``; a path adds to each
    (row, output) entry once, so the order of its elements does not change the bits."""
    xbs[:nb] = 0
    for e in range(k):
        el = start + 1 + e
        col = Xt[feature[el]]
        lo, up, miss = lower[el], upper[el], missing[el]
        other, off, nbits = cat_other[el], cat_offsets[el], cat_nbits[el]
        bit = np.int64(1) << e
        if off < 0:  # numeric: the test of treeshap.follows without branches (it vectorises)
            top = up == np.inf
            for i in range(nb):
                x = col[i]
                o = (miss & (x != x)) | ((lo <= x) & ((x < up) | top))
                xbs[i] |= bit * o
        else:
            for i in range(nb):
                if follows(col[i], lo, up, miss, other, off, nbits, cat_words):
                    xbs[i] |= bit
    for e in range(k):
        f = feature[start + 1 + e]
        if local:
            dst = acc_t[g, f]
            for i in range(nb):
                dst[i] += shap_tables[s0 + xbs[i] * k + e]
        else:
            for i in range(nb):
                acc_phi[r0 + i, g, f] += shap_tables[s0 + xbs[i] * k + e]
    if interactions:
        for e in range(k):
            fi = feature[start + 1 + e]
            for j in range(k):
                if j != e:
                    fj = feature[start + 1 + j]
                    at = i0 + e * k + j
                    if local_int:
                        dst = acc_ti[g, fi, fj]
                        for i in range(nb):
                            dst[i] += inter_tables[at + xbs[i] * k * k]
                    else:
                        for i in range(nb):
                            acc_int[r0 + i, g, fi, fj] += inter_tables[at + xbs[i] * k * k]


@njit(nogil=True, cache=True)  # compiled within the kernel's announced seconds
def _count_patterns(R, feature, lower, upper, missing, cat_offsets, cat_nbits, cat_other,
                    cat_words, path_offsets, paths, counts, lo, hi):  # fmt: skip
    """``counts[t, m]``: the background rows of ``R`` whose pattern of path ``paths[t]``'s
    elements is ``m``, for ``t`` in ``lo .. hi - 1``."""
    for t in range(lo, hi):
        p = paths[t]
        start = path_offsets[p]
        k = path_offsets[p + 1] - start - 1
        for r in range(R.shape[0]):
            bits = np.int64(0)
            for i in range(k):
                if element_follows(R[r], start + 1 + i, feature, lower, upper, missing,
                                   cat_offsets, cat_nbits, cat_other, cat_words):  # fmt: skip
                    bits |= np.int64(1) << i
            counts[t, bits] += 1


@lru_cache(maxsize=16)
def _submasks(k: int) -> tuple:
    """For ``j = 0 .. 2**k - 1``: the patterns ``mx`` with at least ``j + 1`` submasks and
    their ``j``-th submask in ascending order (the bits of ``j`` deposited on those of
    ``mx``), as int64 array pairs."""
    out = []
    mx = np.arange(1 << k, dtype=np.int64)
    ones = _popcounts(mx)
    for j in range(1 << k):
        sel = mx[(np.int64(1) << ones) > j]
        sub = np.zeros(sel.size, np.int64)
        for t, m in enumerate(sel.tolist()):
            rest, at, bits = j, 0, 0
            while rest:
                while not (m >> at) & 1:
                    at += 1
                bits |= (rest & 1) << at
                rest >>= 1
                at += 1
            sub[t] = bits
        out.append((sel, sub))
    return tuple(out)


def _popcounts(v: np.ndarray) -> np.ndarray:
    return np.array([bin(int(x)).count("1") for x in v.ravel()], np.int64).reshape(v.shape)


def _fill_group(counts: np.ndarray, k: int, B: int, value: np.ndarray, weights: np.ndarray,
                interactions: bool) -> tuple:  # fmt: skip
    """The tables of paths of ``k`` features with pattern ``counts`` ``(P, 2**k)``: ``(P,
    2**k, k)`` SHAP entries and ``(P, 2**k, k, k)`` interaction entries (or None).

    Each (path, ``mx``) sum runs over the submasks of ``mx`` ascending, one float64 add a
    step (a step whose pattern no row follows adds an exact 0), as :func:`add_pair` sums;
    the leaf value scales each sum as the grouped-mask route does."""
    M = 1 << k
    P = counts.shape[0]
    mx = np.arange(M, dtype=np.int64)
    nx = (M - 1) & ~mx
    b = _popcounts(nx)
    bit = (mx[:, None] >> np.arange(k)) & 1  # (M, k): does x follow element i
    phi = np.zeros((P, M, k))
    tot = np.zeros((P, M, 2))
    cxr = np.zeros((P, M, k)) if interactions else None
    pair = np.zeros((P, M, k, k)) if interactions else None
    off_diag = 1.0 - np.eye(k)
    for sel, sub in _submasks(k):
        xr = sel & ~sub
        a, bb = _popcounts(xr), b[sel]
        w = counts[:, nx[sel] | sub] / B  # (P, S)
        xbits = bit[xr]  # (S, k)
        tot[:, sel, 0] += w * weights[SHAP_R, a, bb]
        phi[:, sel] += (w * weights[SHAP_X, a, bb])[:, :, None] * xbits
        if interactions:
            tot[:, sel, 1] += w * weights[IR_RR, a, bb]
            cxr[:, sel] += (w * weights[IR_XR, a, bb])[:, :, None] * xbits
            both = xbits[:, :, None] * xbits[:, None, :] * off_diag
            pair[:, sel] += (w * weights[IR_XX, a, bb])[:, :, None, None] * both
    v = value[:, None, None]
    shap = v * np.where(bit[None] == 1, phi, -tot[:, :, :1])
    if not interactions:
        return shap, None
    xi = bit[None, :, :, None] == 1
    xj = bit[None, :, None, :] == 1
    val = np.where(xi & xj, pair, np.where(xi, -cxr[:, :, :, None],
                   np.where(xj, -cxr[:, :, None, :], tot[:, :, 1, None, None])))  # fmt: skip
    return shap, (0.5 * value)[:, None, None, None] * val * off_diag


@dataclass(frozen=True, eq=False)
class BackgroundTables:
    """The pattern tables of one background against one model.

    Attributes
    ----------
    shap_off : int64 (n_paths,)
        Offset of each path's SHAP table in ``shap`` (``2**k * k`` values); -1: none.
    inter_off : int64 (n_paths,)
        Offset of each path's interaction table in ``inter`` (``2**k * k * k``); -1: none.
    shap, inter : float64
        The tables (length at least 1).
    interactions : bool
        Whether the interaction tables were filled.
    """

    shap_off: np.ndarray
    inter_off: np.ndarray
    shap: np.ndarray
    inter: np.ndarray
    interactions: bool

    @property
    def nbytes(self) -> int:
        return int(self.shap.nbytes + self.inter.nbytes)


def _build(packed: PackedModel, background: Background, interactions: bool) -> BackgroundTables:
    plan = cpu_table_plan(packed, interactions)
    shap_off = plan.shap
    inter_off = plan.interactions if interactions else np.full_like(plan.shap, -1)
    k = plan.k
    has = shap_off >= 0
    sizes = np.where(has, np.int64(1) << np.minimum(k, 62), 0) * k
    inter_sizes = np.where(inter_off >= 0, np.int64(1) << np.minimum(k, 62), 0) * k * k
    shap = np.zeros(max(int(sizes.sum()), 1), np.float64)
    inter = np.zeros(max(int(inter_sizes.sum()), 1), np.float64)
    R = np.ascontiguousarray(background.rows, dtype=np.float32)
    model = (packed.feature, packed.lower, packed.upper, packed.missing, packed.cat_offsets,
             packed.cat_nbits, packed.cat_other, packed.cat_words)  # fmt: skip
    for kk in np.unique(k[has]).tolist():
        for with_inter in (False, True) if interactions else (False,):
            paths = np.flatnonzero(has & (k == kk) & ((inter_off >= 0) == with_inter))
            per_path = (8 << kk) * (4 * kk + 2 + 5 * kk * kk * with_inter)  # temporaries
            step = max(1, FILL_BYTES // max(per_path, 1))
            for t0 in range(0, paths.size, step):
                part = paths[t0 : t0 + step]
                counts = np.zeros((part.size, 1 << kk), np.int64)
                run_ranges(_count_patterns, part.size, 4 * num_threads(), R, *model,
                           packed.path_offsets, part, counts)  # fmt: skip
                values, pairs = _fill_group(counts, kk, R.shape[0], packed.path_value[part],
                                            im.weight_tables(kk), with_inter)  # fmt: skip
                span = np.arange(kk << kk)
                shap[shap_off[part][:, None] + span] = values.reshape(part.size, -1)
                if with_inter:
                    span = np.arange((kk * kk) << kk)
                    inter[inter_off[part][:, None] + span] = pairs.reshape(part.size, -1)
    for a in (shap, inter):
        a.setflags(write=False)
    return BackgroundTables(shap_off=shap_off, inter_off=inter_off, shap=shap, inter=inter,
                            interactions=interactions)  # fmt: skip


class _Kept:
    """The last :data:`MAX_KEPT` backgrounds' tables, within the table budget together."""

    def __init__(self) -> None:
        self.entries: OrderedDict = OrderedDict()
        self.lock = threading.Lock()

    def get(self, key: tuple, build) -> BackgroundTables:  # noqa: ANN001
        with self.lock:
            hit = self.entries.get(key)
            if hit is not None:
                self.entries.move_to_end(key)
                return hit
        out = build()  # outside the lock: other backgrounds' calls go on meanwhile
        with self.lock:
            self.entries[key] = out
            self.entries.move_to_end(key)
            budget = get_config().interventional_table_budget_bytes
            while len(self.entries) > 1 and (
                len(self.entries) > MAX_KEPT
                or sum(e.nbytes for e in self.entries.values()) > budget
            ):
                self.entries.popitem(last=False)
        return out


_KEPT = _Kept()


def _reset_after_fork() -> None:
    global _KEPT
    _KEPT = _Kept()  # a lock held by a parent's thread would never be released in the child


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_reset_after_fork)


def background_tables(packed: PackedModel, background: Background,
                      interactions: bool) -> BackgroundTables:  # fmt: skip
    """The pattern tables of ``background`` against ``packed`` (interaction tables too with
    ``interactions``), built on first use and kept by the background's digest."""
    if not (packed.digest and background.digest):
        return _build(packed, background, interactions)
    cfg = get_config()
    key = (str(background.digest), str(packed.digest), bool(interactions),
           cfg.interventional_table_budget_bytes, cfg.interventional_table_max_features,
           cfg.interventional_interaction_table_budget_bytes,
           cfg.interventional_interaction_table_max_features)  # fmt: skip
    return _KEPT.get(key, lambda: _build(packed, background, interactions))
