"""Sibling pairs: two quadrature paths that the SHAP kernels run as one.

Two leaves under one split have paths that differ in one element only, the one of the split's
feature (merged with any earlier split on it); every other element is the same lane for lane.
With ``A`` the common elements, ``g_L(t) = z_L + t (o_L - z_L)`` the left leaf's element and
``v_L`` its value (``R`` the right's), the two paths' SHAP values are

* element ``a`` of ``A``: ``(o_a - z_a) integral_0^1 prod_{A - a}(t) h(t) dt`` with
  ``h(t) = v_L g_L(t) + v_R g_R(t)``, the integrand of one path of the same length (``h`` is
  linear in ``t``), so the same Gauss-Legendre nodes are exact;
* the split's feature: ``(v_L (o_L - z_L) + v_R (o_R - z_R)) integral_0^1 prod_A(t) dt``.

So a pair costs about one path: the kernels run the first path of a pair (its *head*) with the
second's differing lane (:func:`sibling_pairs`), and the second path is left out of the
launches. Which paths pair depends on the model and on which of its paths the plan runs in
the quadrature kernels (not on tables), never on rows or chunks, so every route of the SHAP
plan (row kernels, a thread a path, the few-rows chunks, any batch) runs the same pairs and
gives the same bits. Any two
paths of one output group that differ in exactly one element of the same feature pair this
way; siblings are the ones that do.
"""

from __future__ import annotations

import threading
import weakref

import numpy as np
from numba import njit

from distshap.packed import PackedModel
from distshap.parallel import run_ranges

__all__ = ["sibling_pairs"]

_KEPT: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # packed -> [(selected, pairs)]
_KEPT_LOCK = threading.Lock()
_KEEP = 4  # selections kept a model (the plans of a few cost models, e.g. ``distshap info``)
#: Paths of one feature list compared with each other at most this far apart in the sorted
#: order (siblings sit next to each other; paths of one list from many trees form long runs).
_WINDOW = 8


def sibling_pairs(packed: PackedModel, selected: np.ndarray) -> np.ndarray:
    """The second path's differing lane of each pair's head, -1 for every other path (kept
    with ``packed`` for its last few ``selected``: a model's plans share it; read-only).

    Parameters
    ----------
    packed : PackedModel
        The model.
    selected : bool (n_paths,)
        The paths that may pair (the quadrature paths of a plan); both paths of a pair are
        selected.

    Returns
    -------
    int32 (max(n_paths, 1),)
        For a head ``p``: the lane of its partner's element that differs from ``p``'s (the
        element at the same position; the partner is that lane's path). Partners and unpaired
        paths hold -1; the partners are the paths named by a head's lane
        (``packed.lane_path[pair_lane[pair_lane >= 0]]``).
    """
    selected = np.asarray(selected, bool)
    with _KEPT_LOCK:
        kept = list(_KEPT.get(packed, ()))
    for was, pair_lane in kept:
        if np.array_equal(was, selected):
            return pair_lane
    pair_lane = _sibling_pairs(packed, selected)
    pair_lane.flags.writeable = False
    with _KEPT_LOCK:
        _KEPT[packed] = [*_KEPT.get(packed, ())[-(_KEEP - 1) :], (selected.copy(), pair_lane)]
    return pair_lane


def _sibling_pairs(packed: PackedModel, selected: np.ndarray) -> np.ndarray:
    n_paths = int(packed.path_value.shape[0])
    pair_lane = np.full(max(n_paths, 1), -1, np.int32)
    ids = np.flatnonzero(selected[:n_paths])
    if ids.size < 2:
        return pair_lane
    offsets = np.asarray(packed.path_offsets, np.int64)
    feature = np.asarray(packed.feature, np.int64)
    # one key per path: its group, length and feature list (siblings share all three)
    start = offsets[ids] + 1
    k = offsets[ids + 1] - start
    key = _feature_keys(start, k, feature, np.asarray(packed.path_group, np.int64)[ids])
    perm = np.argsort(key, kind="stable")  # by key, then path (ids increase)
    key = key[perm]
    run_starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1], True]).astype(np.int64)
    n_runs = run_starts.size - 1
    group = np.asarray(packed.path_group, np.int64)
    run_ranges(_pair_runs, n_runs, min(n_runs, 64), ids[perm], run_starts, offsets, group, feature,
               np.asarray(packed.lower), np.asarray(packed.upper),
               np.asarray(packed.zero_fraction), np.asarray(packed.missing),
               np.asarray(packed.cat_other), np.asarray(packed.cat_offsets, np.int64),
               np.asarray(packed.cat_nbits, np.int64),
               np.asarray(packed.cat_words, np.uint32), pair_lane)  # fmt: skip
    return pair_lane


@njit(nogil=True, cache=True)
def _feature_keys(start, k, feature, group):
    """A 64-bit hash of each path's group, length and features (FNV-1a over the values)."""
    out = np.empty(start.size, np.uint64)
    prime = np.uint64(1099511628211)
    for j in range(start.size):
        h = np.uint64(14695981039346656037)
        h = (h ^ np.uint64(group[j] + 1)) * prime
        h = (h ^ np.uint64(k[j])) * prime
        for li in range(start[j], start[j] + k[j]):
            h = (h ^ np.uint64(feature[li] + 7)) * prime
        out[j] = h
    return out


@njit(nogil=True, cache=True)
def _same_lane(a, b, feature, lower, upper, zero, missing, other, cat_offsets, cat_nbits,
               cat_words):  # fmt: skip
    """Whether lanes ``a`` and ``b`` test the same thing with the same zero fraction."""
    if (feature[a] != feature[b] or lower[a] != lower[b] or upper[a] != upper[b]
            or zero[a] != zero[b] or missing[a] != missing[b] or other[a] != other[b]
            or cat_nbits[a] != cat_nbits[b]):  # fmt: skip
        return False
    if (cat_offsets[a] < 0) != (cat_offsets[b] < 0):
        return False
    if cat_offsets[a] >= 0:
        for w in range((cat_nbits[a] + 31) // 32):
            if cat_words[cat_offsets[a] + w] != cat_words[cat_offsets[b] + w]:
                return False
    return True


@njit(nogil=True, cache=True)
def _pair_runs(order, run_starts, offsets, group, feature, lower, upper, zero, missing, other,
               cat_offsets, cat_nbits, cat_words, pair_lane, lo, hi):  # fmt: skip
    """Pair the paths of runs ``lo .. hi - 1`` of ``order`` (run ``r``: the paths
    ``order[run_starts[r]:run_starts[r + 1]]``, one key): each path not yet taken with the first
    later one of its run within ``_WINDOW`` that differs from it in exactly one lane, written
    into ``pair_lane``. Runs are independent (:func:`~distshap.parallel.run_ranges`)."""
    taken = np.zeros(_WINDOW + 1, np.bool_)  # the run's next paths, relative to the first
    for r in range(lo, hi):
        a = run_starts[r]
        b = run_starts[r + 1]
        for i in range(a, b):
            if taken[(i - a) % (_WINDOW + 1)]:
                taken[(i - a) % (_WINDOW + 1)] = False
                continue
            p = order[i]
            s = offsets[p] + 1
            k = offsets[p + 1] - s
            for j in range(i + 1, min(b, i + 1 + _WINDOW)):
                if taken[(j - a) % (_WINDOW + 1)]:
                    continue
                q = order[j]
                t = offsets[q] + 1
                if group[q] != group[p] or offsets[q + 1] - t != k:  # a key collision
                    continue
                differ = -1
                for e in range(k):
                    if not _same_lane(s + e, t + e, feature, lower, upper, zero, missing, other,
                                      cat_offsets, cat_nbits, cat_words):  # fmt: skip
                        if differ >= 0 or feature[s + e] != feature[t + e]:
                            differ = -2
                            break
                        differ = e
                if differ >= 0:
                    pair_lane[p] = t + differ
                    taken[(j - a) % (_WINDOW + 1)] = True
                    break
        taken[:] = False
