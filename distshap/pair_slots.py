"""Pair slots: the entries of a model's interaction matrices that can be non-zero.

Two features interact in a row only through the paths on which both appear (paper §3.5: a
path conditions only on its own features), and a feature has a main effect only where it is on
a path. So per output group ``g`` the interaction matrix ``(F+1, F+1)`` of every row is zero
outside

* the *pair slots*: the pairs ``i < j`` of features that share a path of group ``g``, and
* the *diagonal slots*: the features on some path of group ``g``,

plus the bias entry ``[F, F]`` (the expected value, the same for every row). The slots of all
groups are numbered ``0..S-1``, group by group: group ``g`` holds ``slot_offsets[g] ..
slot_offsets[g + 1] - 1``, first its ``num_pairs[g]`` pair slots in ``(i, j)`` order, then its
diagonal slots by feature. A row's ``S`` slot values replace its ``G (F+1)**2`` matrix entries;
entry ``[g, i, j]`` with ``i < j`` is the value of the pair slot ``(g, i, j)`` (the upper
triangle), ``[g, i, i]`` that of the diagonal slot.

The kernels address slots through a per-path map: path ``p`` of ``k`` features (sorted by
feature) owns ``path_map[map_offsets[p] : map_offsets[p] + k * k]``, and entry ``c * k + i``
(``c``, ``i``: 0-based feature elements) is the slot of ``[f_c, f_i]`` for ``c < i``, the
diagonal slot of ``f_i`` for ``c == i`` and ``-1`` for ``c > i`` (the lower triangle, which
the CPU kernel keeps in scratch only, at ``S + slot of [f_i, f_c]``). That costs ``4 k**2``
bytes per path; :func:`pair_slots` builds it with NumPy in path chunks (bounded memory).

The CPU kernel computes a diagonal entry as the full matrix's does, ``phi_i - sum_{j != i}
[i, j]`` in increasing ``j``; ``row_offsets`` / ``row_entries`` list, per diagonal slot, the
scratch indices of row ``i``'s non-zero entries in that order (the others are exact zeros, and
``x - 0.0 == x``), so the result has the same bits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import njit, prange

from distshap.packed import PackedModel, clear_host_forms, host_form
from distshap.parallel import run_parallel

__all__ = [
    "PairSlots", "build_pair_slots", "check_k", "clear_cache", "interaction_shift", "pair_slots",
    "select_top_pairs",
]  # fmt: skip

#: Path-map entries generated at once while building (bounds the builder's memory).
_BUILD_CHUNK_ENTRIES = 1 << 22
#: Models whose slots are kept.
SLOT_CACHE_SIZE = 4


@dataclass(frozen=True, eq=False)
class PairSlots:
    """The slots of one packed model (module docstring).

    Attributes
    ----------
    num_features, num_groups : int
    slot_offsets : int64 (G + 1,)
        Slots of group ``g``: ``slot_offsets[g] .. slot_offsets[g + 1] - 1``.
    num_pairs : int64 (G,)
        Pair slots of each group (they come first in its range; diagonal slots follow).
    slot_i, slot_j : int32 (S,)
        Features of each slot, ``slot_i < slot_j`` for pairs, equal for the diagonal.
    map_offsets : int64 (n_paths + 1,)
        Range of each packed path in ``path_map``.
    path_map : int32 (sum k**2,)
        Slot of each ordered pair of a path's elements (``-1``: lower triangle).
    diag_slots : int64 (D,)
        The diagonal slots, group by group.
    row_offsets : int64 (D + 1,)
    row_entries : int64
        Per diagonal slot, CPU scratch indices of its matrix row in increasing column order.
    digest : str
        The packed model's digest.
    """

    num_features: int
    num_groups: int
    slot_offsets: np.ndarray
    num_pairs: np.ndarray
    slot_i: np.ndarray
    slot_j: np.ndarray
    map_offsets: np.ndarray
    path_map: np.ndarray
    diag_slots: np.ndarray
    row_offsets: np.ndarray
    row_entries: np.ndarray
    digest: str = ""

    @property
    def num_slots(self) -> int:
        """``S``: slots of all groups."""
        return int(self.slot_offsets[-1])

    @property
    def total_pairs(self) -> int:
        """Pair slots of all groups."""
        return int(self.num_pairs.sum())

    @property
    def max_group_slots(self) -> int:
        """Most slots of one group."""
        return int(np.diff(self.slot_offsets).max(initial=0))

    @property
    def matrix_entries(self) -> int:
        """``G (F + 1)**2``: the entries of one row's full interaction matrices."""
        return self.num_groups * (self.num_features + 1) ** 2

    def pair_range(self, g: int) -> tuple[int, int]:
        """Slots ``[start, stop)`` of the pairs of group ``g``."""
        start = int(self.slot_offsets[g])
        return start, start + int(self.num_pairs[g])

    def nbytes(self) -> int:
        """Host bytes of the arrays."""
        return sum(
            a.nbytes for a in vars(self).values() if isinstance(a, np.ndarray)
        )  # fmt: skip


def _path_entries(packed: PackedModel, p0: int, p1: int) -> tuple[np.ndarray, ...]:
    """Every ordered element pair ``(c, i)`` of paths ``p0..p1-1``, c-major per path.

    Returns ``path, c, i, f_c, f_i, group`` (int64 arrays of length ``sum k**2``).
    """
    po = packed.path_offsets
    k = np.diff(po[p0 : p1 + 1]).astype(np.int64) - 1
    sizes = k * k
    path = np.repeat(np.arange(p0, p1, dtype=np.int64), sizes)
    local = np.arange(int(sizes.sum()), dtype=np.int64) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    kp = k[path - p0]
    c = local // kp
    i = local - c * kp
    first = po[path] + 1  # lane of the path's first feature element
    fc = packed.feature[first + c].astype(np.int64)
    fi = packed.feature[first + i].astype(np.int64)
    g = packed.path_group[path].astype(np.int64)
    return path, c, i, fc, fi, g


def _keys(c, i, fc, fi, g, F1: int) -> np.ndarray:
    """Sort key of the slot of each ``c <= i`` entry: group, pairs before diagonals, (i, j)."""
    diag = (c == i).astype(np.int64)
    return ((g * 2 + diag) * F1 + fc) * F1 + fi


def _chunks(packed: PackedModel) -> list[tuple[int, int]]:
    k = np.diff(packed.path_offsets) - 1
    cum = np.cumsum(k * k)
    bounds, p0 = [], 0
    n = packed.num_paths
    while p0 < n:
        base = cum[p0 - 1] if p0 else 0
        p1 = int(np.searchsorted(cum, base + _BUILD_CHUNK_ENTRIES, side="right"))
        p1 = min(n, max(p1, p0 + 1))
        bounds.append((p0, p1))
        p0 = p1
    return bounds


def interaction_shift(packed: PackedModel) -> int:
    """Fixed-point fraction bits ``s`` of the model's interaction values.

    The CUDA backend's (:func:`distshap.plan.gpu.fixed_point_shift` of the largest
    per-group sum of ``k |v|`` over paths, which bounds every entry): every CUDA interaction
    value is a multiple of ``2**-s``, and data-set sums count in units of ``2**-s`` on every
    backend. Host arithmetic only (no CUDA import).
    """
    k = np.diff(np.asarray(packed.path_offsets, np.int64)) - 1
    v = np.abs(np.asarray(packed.path_value, np.float64)) * np.maximum(k, 1)
    g = np.asarray(packed.path_group, np.int64)
    bound = float(np.bincount(g, weights=v, minlength=packed.num_groups).max(initial=0.0))
    s = 62 - math.ceil(math.log2(bound + 1.0)) - 1
    return int(min(60, max(-60, s)))


def build_pair_slots(packed: PackedModel) -> PairSlots:
    """The :class:`PairSlots` of ``packed`` (NumPy; use :func:`pair_slots` for the cached one)."""
    if not isinstance(packed, PackedModel):
        raise TypeError(f"expected a PackedModel, got {type(packed).__name__}")
    F1 = packed.num_features + 1
    G = packed.num_groups
    chunks = _chunks(packed)
    # pass 1: the distinct slot keys (sorted: group, pairs then diagonals, by (i, j))
    parts = [np.zeros(0, np.int64)]
    for p0, p1 in chunks:
        _, c, i, fc, fi, g = _path_entries(packed, p0, p1)
        upper = c <= i
        parts.append(np.unique(_keys(c[upper], i[upper], fc[upper], fi[upper], g[upper], F1)))
    keys = np.unique(np.concatenate(parts))
    diag = (keys // (F1 * F1)) % 2 == 1
    group = keys // (2 * F1 * F1)
    slot_i = ((keys // F1) % F1).astype(np.int32)
    slot_j = (keys % F1).astype(np.int32)
    slot_offsets = np.searchsorted(group, np.arange(G + 1)).astype(np.int64)
    num_pairs = np.bincount(group[~diag], minlength=G).astype(np.int64)
    # pass 2: the per-path map
    k = np.diff(packed.path_offsets).astype(np.int64) - 1
    map_offsets = np.zeros(packed.num_paths + 1, np.int64)
    np.cumsum(k * k, out=map_offsets[1:])
    path_map = np.full(int(map_offsets[-1]), -1, np.int32)
    for p0, p1 in chunks:
        path, c, i, fc, fi, g = _path_entries(packed, p0, p1)
        upper = c <= i
        at = map_offsets[path[upper]] + c[upper] * k[path[upper]] + i[upper]
        key = _keys(c[upper], i[upper], fc[upper], fi[upper], g[upper], F1)
        path_map[at] = np.searchsorted(keys, key).astype(np.int32)
    # CPU diagonal rows: entries [i, j], j != i, of each diagonal slot in increasing j
    S = int(keys.size)
    pairs = np.flatnonzero(~diag)
    pg, pa, pb = group[pairs], slot_i[pairs].astype(np.int64), slot_j[pairs].astype(np.int64)
    row_g = np.concatenate([pg, pg])
    row_f = np.concatenate([pa, pb])  # the matrix row
    col_f = np.concatenate([pb, pa])  # its column
    entry = np.concatenate([pairs, S + pairs])  # [a, b] upper slot; [b, a] its lower twin
    order = np.lexsort((col_f, row_f, row_g))
    diag_slots = np.flatnonzero(diag).astype(np.int64)
    row_key = (row_g * F1 + row_f)[order]
    diag_key = group[diag_slots] * F1 + slot_i[diag_slots]
    ends = np.r_[diag_key, np.iinfo(np.int64).max]
    row_offsets = np.searchsorted(row_key, ends).astype(np.int64)
    row_offsets[-1] = row_key.size
    return PairSlots(
        num_features=packed.num_features,
        num_groups=G,
        slot_offsets=slot_offsets,
        num_pairs=num_pairs,
        slot_i=slot_i,
        slot_j=slot_j,
        map_offsets=map_offsets,
        path_map=path_map,
        diag_slots=diag_slots,
        row_offsets=row_offsets,
        row_entries=entry[order].astype(np.int64),
        digest=packed.digest,
    )


def pair_slots(packed: PackedModel) -> PairSlots:
    """The :class:`PairSlots` of ``packed``, built once per model digest (the last
    :data:`SLOT_CACHE_SIZE` are kept; a model without a digest is built every call)."""
    return host_form(packed, "pair slots", lambda: build_pair_slots(packed), SLOT_CACHE_SIZE)


def clear_cache() -> None:
    """Drop every cached :class:`PairSlots`."""
    clear_host_forms("pair slots")


def zero_pairs(pairs, out, row, g, t, k, a, mid, slot_i, slot_j, acc, r, num_features):
    """Entries ``t .. k - 1`` of ``pairs[row, g]`` and ``out[row, g]``: the first pairs
    ``(i, j)``, ``i < j < num_features``, in ``(i, j)`` order whose value is zero (no slot among
    ``a .. mid - 1``, increasing by ``(i, j)``, or one whose ``acc[r, slot]`` is 0), values 0.0.

    The top-k selections' completion of a row with fewer than ``k`` non-zero pairs, compiled
    for the CPU (here) and the GPU (:func:`distshap.kernels.cuda.pairs.topk_kernel`).
    """
    i = 0
    j = 1
    e = a
    while t < k:
        while e < mid and (slot_i[e] < i or (slot_i[e] == i and slot_j[e] < j)):
            e += 1
        if not (e < mid and slot_i[e] == i and slot_j[e] == j and acc[r, e] != 0):
            pairs[row, g, t, 0] = i
            pairs[row, g, t, 1] = j
            out[row, g, t] = 0.0
            t += 1
        j += 1
        if j == num_features:
            i += 1
            j = i + 1


_zero_pairs = njit(inline="always", nogil=True, cache=True)(zero_pairs)


@njit(parallel=True, nogil=True, cache=True)
def _select_kernel(values, slot_offsets, num_pairs, slot_i, slot_j, num_features, k, pairs,
                   out):  # fmt: skip
    n = values.shape[0]
    G = num_pairs.shape[0]
    for r in prange(n):
        best_abs = np.empty(k, np.float32)
        best_slot = np.empty(k, np.int64)
        for g in range(G):
            a = slot_offsets[g]
            mid = a + num_pairs[g]
            count = 0
            for e in range(a, mid):  # increasing slots: an equal |value| never displaces
                av = abs(values[r, e])
                if av == 0.0 or (count == k and not av > best_abs[k - 1]):
                    continue
                pos = count if count < k else k - 1
                while pos > 0 and av > best_abs[pos - 1]:
                    best_abs[pos] = best_abs[pos - 1]
                    best_slot[pos] = best_slot[pos - 1]
                    pos -= 1
                best_abs[pos] = av
                best_slot[pos] = e
                if count < k:
                    count += 1
            for t in range(count):
                e = best_slot[t]
                pairs[r, g, t, 0] = slot_i[e]
                pairs[r, g, t, 1] = slot_j[e]
                out[r, g, t] = values[r, e]
            # fewer non-zero pairs than k: the first zero pairs in (i, j) order
            _zero_pairs(pairs, out, r, g, count, k, a, mid, slot_i, slot_j, values, r,
                        num_features)  # fmt: skip


def check_k(k: Any, num_features: int) -> int:
    """``k`` as an int, refused unless ``1 <= k <= F (F - 1) / 2`` (the model's pairs)."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise TypeError(f"k must be an integer, got {type(k).__name__}")
    k = int(k)
    n_pairs = num_features * (num_features - 1) // 2
    if not 1 <= k <= n_pairs:
        raise ValueError(
            f"k={k}: a model of {num_features} features has {n_pairs} feature pairs; pass "
            f"1 <= k <= {n_pairs}"
        )
    return k


def select_top_pairs(values: np.ndarray, slots: PairSlots, k: int) -> tuple[np.ndarray, ...]:
    """The ``k`` top pairs of every row of slot ``values`` (float32 ``(n, S)``), per group.

    Returns ``pairs`` int32 ``(n, G, k, 2)`` and ``values`` float32 ``(n, G, k)``: per row and
    group the ``k`` pairs of largest ``|value|``, ties by ``(i, j)``, completed with the first
    zero pairs in ``(i, j)`` order where fewer are non-zero (sorting the whole upper triangle).
    """
    k = check_k(k, slots.num_features)
    values = np.ascontiguousarray(values, dtype=np.float32)
    n, G = values.shape[0], slots.num_groups
    pairs = np.empty((n, G, k, 2), np.int32)
    out = np.empty((n, G, k), np.float32)
    run_parallel(_select_kernel, values, slots.slot_offsets, slots.num_pairs, slots.slot_i,
                 slots.slot_j, slots.num_features, k, pairs, out)  # fmt: skip
    return pairs, out
