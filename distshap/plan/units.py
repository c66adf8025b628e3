"""Sibling units: up to ``2**L`` quadrature paths that the SHAP kernels run as one.

The leaves of a small subtree have paths that share every element but a few: those of the
subtree's own splits (each merged with any earlier split on its feature). With ``C`` the
elements all of them share, member ``m`` of value ``v_m`` is ``C`` plus its *tail* ``T_m`` (at
most ``L`` elements), and ``g_j(t) = z_j + t (o_j - z_j)``, the members' SHAP values are

* element ``a`` of ``C``: ``(o_a - z_a) integral_0^1 prod_{C - a}(t) h(t) dt`` with
  ``h(t) = sum_m v_m prod_{T_m} g(t)``, the integrand of one path: the longest member's
  Gauss-Legendre nodes stay exact;
* tail element ``e`` of member ``m``: ``v_m (o_e - z_e) integral_0^1 prod_C(t)
  prod_{T_m - e}(t) dt``.

So a unit costs about one path of ``|C|`` elements: the kernels run its *head* (its longest
member) with the tails folded in, and the other members are left out of the launches. Units
are built level by level: a level merges two *items* (paths, or units of the level before)
whose common elements have the same features in the same order and differ in exactly one
element, so sibling subtrees join: a pair at level one, a leaf beside a pair at level two. Two
items join only where the head's path holds every tail feature of the other's members (so the
head's chunk-local feature tile keeps its width): a subtree of height two joins whole where its
two children split on one feature, else as a pair and a leaf, or two pairs.
Which paths join depends on the model and on which of its paths the plan runs in the
quadrature kernels (not on rows or chunks), so every route of the SHAP plan runs the same units
and gives the same bits. Any members sharing ``C`` this way are exact, siblings or not.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass

import numpy as np
from numba import njit

from distshap.packed import PackedModel
from distshap.parallel import run_ranges

__all__ = [
    "UNIT_LEVELS",
    "SiblingUnits",
    "sibling_units",
    "tail_columns",
]

#: Tail elements a member has at most (the kernels pad every tail to this many factors).
UNIT_LEVELS = 3
#: Items of one feature list compared with each other at most this far apart in the sorted
#: order (siblings sit next to each other; items of one list from many trees form long runs).
_WINDOW = 8
#: Runs of one key are matched in segments of at most this many items, in threads (a fixed
#: cut: the same units on any thread count).
_SEGMENT = 4096
_KEEP = 4  # selections kept a model (the plans of a few cost models, e.g. ``distshap info``)
_KEPT: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # packed -> [(key, units)]
_KEPT_LOCK = threading.Lock()


@dataclass(frozen=True)
class SiblingUnits:
    """The units of a model's selected paths (read-only arrays).

    Attributes
    ----------
    offsets : int32 (max(n_paths, 1) + 1,)
        Entries ``offsets[p]:offsets[p + 1]`` of head ``p``: its members, the head first (at
        least two); empty for every other path.
    value : float64 (max(E, 1),)
        Each entry's leaf value.
    lanes : int32 (max(E, 1), UNIT_LEVELS)
        Each entry's tail lanes, -1 padded: lanes of any path with the element's contents (a
        head's are lanes of its own path); ``lanes[e, 0]`` is a lane of the member's own path.
    path : int32 (max(E, 1),)
        Each entry's member path (``path[offsets[p]] == p``).
    members : bool (n_paths,)
        The paths run inside another path's unit (left out of the launches).
    """

    offsets: np.ndarray
    value: np.ndarray
    lanes: np.ndarray
    path: np.ndarray
    members: np.ndarray

    @property
    def num_units(self) -> int:
        """Heads (units of two members or more)."""
        return int(np.count_nonzero(np.diff(self.offsets)))


def sibling_units(packed: PackedModel, selected: np.ndarray, levels: int,
                  min_features: int = 0) -> SiblingUnits:  # fmt: skip
    """The sibling units of ``packed``'s ``selected`` paths, of at most ``levels`` levels
    (0: none; 1: pairs), units of more than two paths only where the head has at least
    ``min_features`` features; kept with ``packed`` for its last few selections.

    Parameters
    ----------
    packed : PackedModel
        The model.
    selected : bool (n_paths,)
        The paths that may join (the quadrature paths of a plan); every member is selected.
    levels : int
        0 to :data:`UNIT_LEVELS`.
    min_features : int
        The fewest features of a head of more than two members (the GPU kernels run a pair's
        fold faster than the general fold: ``quadrature_unit_min_features``).
    """
    levels = int(levels)
    if not 0 <= levels <= UNIT_LEVELS:
        raise ValueError(
            f"quadrature_unit_levels must be 0 to {UNIT_LEVELS}, got {levels}: choose one in range"
        )
    selected = np.asarray(selected, bool)
    with _KEPT_LOCK:
        kept = list(_KEPT.get(packed, ()))
    key = (levels, int(min_features))
    for was, was_key, units in kept:
        if was_key == key and np.array_equal(was, selected):
            return units
    units = _sibling_units(packed, selected, levels, int(min_features))
    for a in (units.offsets, units.value, units.lanes, units.path, units.members):
        a.flags.writeable = False
    with _KEPT_LOCK:
        old = _KEPT.get(packed, ())[-(_KEEP - 1) :]
        _KEPT[packed] = [*old, (selected.copy(), key, units)]
    return units


def _lane_arrays(packed: PackedModel) -> tuple:
    """The lane arrays :func:`_same_lane` compares."""
    return (
        np.asarray(packed.feature), np.asarray(packed.lower), np.asarray(packed.upper),
        np.asarray(packed.zero_fraction), np.asarray(packed.missing),
        np.asarray(packed.cat_other), np.asarray(packed.cat_offsets, np.int64),
        np.asarray(packed.cat_nbits, np.int64), np.asarray(packed.cat_words, np.uint32),
    )  # fmt: skip


def _sibling_units(packed: PackedModel, selected: np.ndarray, levels: int,
                   min_features: int) -> SiblingUnits:  # fmt: skip
    n_paths = int(packed.path_value.shape[0])
    offsets = np.asarray(packed.path_offsets, np.int64)
    group = np.asarray(packed.path_group, np.int64)
    heads = np.flatnonzero(selected[:n_paths]).astype(np.int64)
    masked = np.zeros(max(int(packed.feature.shape[0]), 1), np.bool_)  # heads' tail lanes
    tail = np.full((max(n_paths, 1), UNIT_LEVELS), -1, np.int32)
    ntail = np.zeros(max(n_paths, 1), np.int32)
    nxt = np.full(max(n_paths, 1), -1, np.int64)  # members of a unit, a linked list from its head
    last = np.arange(max(n_paths, 1), dtype=np.int64)
    lanes = _lane_arrays(packed)
    lane_hash = np.zeros(max(int(packed.feature.shape[0]), 1), np.uint64)
    if heads.size >= 2 and levels > 0:
        bits = [np.ascontiguousarray(a).view(np.uint32 if a.itemsize == 4 else np.uint64)
                for a in lanes[1:4]]  # fmt: skip
        run_ranges(_hash_lanes, heads.size, min(heads.size // 4096 + 1, 64), heads, offsets,
                   lanes[0], *bits, *lanes[4:], lane_hash)  # fmt: skip
    for _ in range(levels if heads.size >= 2 else 0):
        key = _item_keys(heads, masked, offsets, lanes[0], group)
        perm = np.argsort(key, kind="stable")  # by key, then head (heads increase)
        key = key[perm]
        cut = np.r_[True, key[1:] != key[:-1]]
        cut[::_SEGMENT] = True
        run_starts = np.flatnonzero(np.r_[cut, True]).astype(np.int64)
        n_runs = run_starts.size - 1
        order = heads[perm]
        partner = np.full(order.size, -1, np.int64)
        diff = np.full((order.size, 2), -1, np.int64)
        run_ranges(_match_runs, n_runs, min(n_runs, 64), order, run_starts, masked, offsets, group,
                   lane_hash, tail, ntail, nxt, min_features, *lanes, partner, diff)  # fmt: skip
        if not (partner >= 0).any():
            break
        heads = _merge(order, partner, diff, offsets, masked, tail, ntail, nxt, last)
    return _units(n_paths, heads, nxt, tail, np.asarray(packed.path_value, np.float64))


@njit(nogil=True, cache=True)
def _hash_lanes(heads, offsets, feature, lower, upper, zero, missing, other, cat_offsets, cat_nbits,
                cat_words, out, lo, hi):  # fmt: skip
    """A 64-bit hash (FNV-1a) of the contents of each feature lane of the paths
    ``heads[lo:hi]`` (``lower``, ``upper``, ``zero``: the bits of those lane arrays)."""
    prime = np.uint64(1099511628211)
    for i in range(lo, hi):
        p = heads[i]
        for li in range(offsets[p] + 1, offsets[p + 1]):
            h = (np.uint64(14695981039346656037) ^ np.uint64(feature[li] + 7)) * prime
            h = (h ^ np.uint64(lower[li])) * prime
            h = (h ^ np.uint64(upper[li])) * prime
            h = (h ^ np.uint64(zero[li])) * prime
            h = (h ^ np.uint64(2 * np.int64(missing[li]) + np.int64(other[li]))) * prime
            if cat_offsets[li] >= 0:
                for w in range((cat_nbits[li] + 31) // 32):
                    h = (h ^ np.uint64(cat_words[cat_offsets[li] + w])) * prime
            out[li] = h


@njit(nogil=True, cache=True)
def _one_hash_apart(p, q, masked, offsets, lane_hash):
    """Whether items ``p`` and ``q`` (of one key) differ in exactly one lane's hash, their
    unmasked lanes taken in order (a quick test before :func:`_differ`)."""
    s = offsets[p] + 1
    t = offsets[q] + 1
    a = s
    b = t
    found = 0
    while True:
        while a < offsets[p + 1] and masked[a]:
            a += 1
        while b < offsets[q + 1] and masked[b]:
            b += 1
        if a >= offsets[p + 1] or b >= offsets[q + 1]:
            return found == 1
        if lane_hash[a] != lane_hash[b]:
            found += 1
            if found > 1:
                return False
        a += 1
        b += 1


@njit(nogil=True, cache=True)
def _item_keys(heads, masked, offsets, feature, group):
    """A 64-bit hash of each item (a head and its masked lanes): its group and the
    features of its unmasked lanes in order (FNV-1a; items that may merge share it)."""
    prime = np.uint64(1099511628211)
    out = np.empty(heads.size, np.uint64)
    for i in range(heads.size):
        p = heads[i]
        s = offsets[p] + 1
        h = (np.uint64(14695981039346656037) ^ np.uint64(group[p] + 1)) * prime
        count = 0
        for li in range(s, offsets[p + 1]):
            if not masked[li]:
                h = (h ^ np.uint64(feature[li] + 7)) * prime
                count += 1
        out[i] = (h ^ np.uint64(count)) * prime
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
def _differ(p, q, masked, offsets, feature, lower, upper, zero, missing, other, cat_offsets,
            cat_nbits, cat_words):  # fmt: skip
    """The lanes ``(of p, of q)`` where items ``p`` and ``q`` (heads) differ, their unmasked
    lanes taken in order, if they differ in exactly one lane of one feature; else ``(-1, -1)``."""
    s = offsets[p] + 1
    t = offsets[q] + 1
    a = s
    b = t
    found_a = -1
    found_b = -1
    while True:
        while a < offsets[p + 1] and masked[a]:
            a += 1
        while b < offsets[q + 1] and masked[b]:
            b += 1
        if a >= offsets[p + 1] or b >= offsets[q + 1]:
            break
        if not _same_lane(a, b, feature, lower, upper, zero, missing, other, cat_offsets,
                          cat_nbits, cat_words):  # fmt: skip
            if found_a >= 0 or feature[a] != feature[b]:
                return -1, -1
            found_a = a
            found_b = b
        a += 1
        b += 1
    if a < offsets[p + 1] or b < offsets[q + 1]:  # of different lengths: a key collision
        return -1, -1
    return found_a, found_b


@njit(nogil=True, cache=True)
def _match_runs(order, run_starts, masked, offsets, group, lane_hash, tail, ntail, nxt,
                min_features, feature, lower, upper, zero, missing, other, cat_offsets,
                cat_nbits, cat_words, partner, diff, lo, hi):  # fmt: skip
    """Match the items of runs ``lo .. hi - 1`` of ``order`` (one key a run, or a segment of
    one): each item not yet taken with the first later one of its run within ``_WINDOW`` that
    may join it (:func:`_may_join`) and differs from it in exactly one lane
    (:func:`_one_hash_apart`, then :func:`_differ`); ``partner[i] = j`` (``partner[j] = -2``)
    and ``diff[i]`` the two lanes.
    Runs are independent (:func:`~distshap.parallel.run_ranges`)."""
    for r in range(lo, hi):
        a = run_starts[r]
        b = run_starts[r + 1]
        for i in range(a, b):
            if partner[i] != -1:
                continue
            p = order[i]
            for j in range(i + 1, min(b, i + 1 + _WINDOW)):
                if partner[j] != -1:
                    continue
                q = order[j]
                if group[q] != group[p] or not _one_hash_apart(p, q, masked, offsets, lane_hash):
                    continue
                if not _may_join(p, q, offsets, feature, tail, ntail, nxt, min_features):
                    continue
                la, lb = _differ(p, q, masked, offsets, feature, lower, upper, zero, missing,
                                 other, cat_offsets, cat_nbits, cat_words)  # fmt: skip
                if la >= 0:
                    partner[i] = j
                    partner[j] = -2  # taken
                    diff[i, 0] = la
                    diff[i, 1] = lb
                    break


@njit(nogil=True, cache=True)
def _merge(order, partner, diff, offsets, masked, tail, ntail, nxt, last):
    """Merge every matched pair of items into one (in place); returns the next level's heads
    (in path order). The head of a merged item is the longer of the two heads (the first on a
    tie), and every member of each side gets that side's differing lane as a tail lane."""
    keep = np.ones(order.size, np.bool_)
    for i in range(order.size):
        j = partner[i]
        if j < 0:
            continue
        p = order[i]
        q = order[j]
        lp = diff[i, 0]
        lq = diff[i, 1]
        m = p
        while m >= 0:
            tail[m, ntail[m]] = lp
            ntail[m] += 1
            m = nxt[m]
        m = q
        while m >= 0:
            tail[m, ntail[m]] = lq
            ntail[m] += 1
            m = nxt[m]
        if offsets[q + 1] - offsets[q] > offsets[p + 1] - offsets[p]:
            p, q = q, p
            lp = lq
            keep[i] = False
        else:
            keep[j] = False
        masked[lp] = True
        nxt[last[p]] = q  # the head's members first
        last[p] = last[q]
    heads = order[keep]
    heads.sort()
    return heads


@njit(nogil=True, cache=True)
def _may_join(p, q, offsets, feature, tail, ntail, nxt, min_features):
    """Whether items ``p`` and ``q`` may form one unit: the head (the longer) has at least
    ``min_features`` features where the unit would be more than a pair, and its path holds
    every tail feature of the other's members (so its chunk-local feature tile keeps its width:
    wider tiles leave fewer blocks an SM)."""
    head, other = p, q
    if offsets[q + 1] - offsets[q] > offsets[p + 1] - offsets[p]:
        head, other = q, p
    if (nxt[p] >= 0 or nxt[q] >= 0) and offsets[head + 1] - offsets[head] - 1 < min_features:
        return False
    return _tails_within(head, other, offsets, feature, tail, ntail, nxt)


@njit(nogil=True, cache=True)
def _tails_within(head, other, offsets, feature, tail, ntail, nxt):
    """Whether every tail lane of the members of item ``other`` has a feature of ``head``'s
    path (so a head's chunk-local tile holds its unit's tail features)."""
    m = other
    while m >= 0:
        for i in range(ntail[m]):
            f = feature[tail[m, i]]
            found = False
            for li in range(offsets[head] + 1, offsets[head + 1]):
                if feature[li] == f:
                    found = True
                    break
            if not found:
                return False
        m = nxt[m]
    return True


def _units(n_paths: int, heads: np.ndarray, nxt: np.ndarray, tail: np.ndarray,
           value: np.ndarray) -> SiblingUnits:  # fmt: skip
    """The :class:`SiblingUnits` of the final items ``heads`` and their member lists."""
    counts = np.zeros(max(n_paths, 1), np.int64)
    entries = _member_lists(heads, nxt, counts)
    offsets = np.zeros(max(n_paths, 1) + 1, np.int32)
    np.cumsum(counts, out=offsets[1:])
    members = np.zeros(n_paths, bool)
    members[entries] = True
    members[heads[counts[heads] > 0]] = False
    E = max(int(entries.size), 1)
    out_lanes = np.full((E, UNIT_LEVELS), -1, np.int32)
    out_path = np.zeros(E, np.int32)
    out_value = np.zeros(E, np.float64)
    if entries.size:
        out_lanes[:] = tail[entries]
        out_path[:] = entries
        out_value[:] = value[entries]
    return SiblingUnits(offsets, out_value, out_lanes, out_path, members)


@njit(nogil=True, cache=True)
def _member_lists(heads, nxt, counts):
    """The members of every head of two members or more, heads in path order, each head's
    list from the head; ``counts[head]`` set to its member count."""
    total = 0
    for p in heads:
        if nxt[p] >= 0:
            m = p
            while m >= 0:
                total += 1
                m = nxt[m]
    out = np.empty(total, np.int64)
    at = 0
    for p in heads:
        if nxt[p] >= 0:
            m = p
            c = 0
            while m >= 0:
                out[at] = m
                at += 1
                c += 1
                m = nxt[m]
            counts[p] = c
    return out


def tail_columns(packed: PackedModel, units: SiblingUnits, lane_column: np.ndarray) -> None:
    """Write into ``lane_column`` (int16 a lane, the launched lanes' columns in their chunk-local
    tiles written) each tail lane's column: that of its head's lane of the same feature (a
    head's path holds every tail feature of its unit, :func:`_tails_within`)."""
    _tail_columns(np.asarray(packed.path_offsets, np.int64), np.asarray(packed.feature),
                  units.offsets, units.lanes, lane_column)  # fmt: skip


@njit(nogil=True, cache=True)
def _tail_columns(offsets, feature, unit_offsets, unit_lanes, lane_column):
    for p in range(offsets.size - 1):
        for e in range(unit_offsets[p], unit_offsets[p + 1]):
            for i in range(unit_lanes.shape[1]):
                lane = unit_lanes[e, i]
                if lane < 0:
                    continue
                for li in range(offsets[p] + 1, offsets[p + 1]):
                    if feature[li] == feature[lane]:
                        lane_column[lane] = lane_column[li]
                        break
