"""Bin packing of path lengths into warps (paper §3.3, Table 5).

Each merged path is one *item* whose size is its number of lanes (``k + 1``: the bias lane
counts); a *bin* is one warp of ``capacity`` (32) lanes. Four algorithms are offered:

``"none"``
    One item per bin (the paper's baseline): item ``i`` goes to bin ``i``.
``"nf"``
    Next-Fit in the given item order: keep one open bin, open a new one when the item does
    not fit. At most twice the optimum.
``"ffd"``
    First-Fit-Decreasing: items in decreasing size (ties: increasing item index), each to the
    leftmost bin with room. A tournament (max segment) tree of residual capacities over the
    bins finds that bin in ``O(log n)`` (a finger search from the previous item's
    bin within a run of equal sizes). At most ``11/9 OPT + 6/9`` bins.
``"bfd"`` (default)
    Best-Fit-Decreasing: items in the same decreasing order, each to the bin it fits *most
    tightly* (smallest residual capacity that holds it), a new bin when none holds it. Sizes
    are integers, so there is no balanced tree: one stack of open bins per residual capacity
    ``0..capacity``; the first non-empty stack at or above the item size gives the bin, so an
    item costs ``O(capacity)`` and the whole packing ``O(capacity * n)``. Among bins of equal
    residual the one that reached that residual most recently is taken (the stack top); this
    choice does not change the number of bins, only which bin gets which label. Same
    ``11/9 OPT + 6/9`` guarantee as FFD. Up to ``packing_numpy_max_items`` items
    (:class:`~distshap.plan.config.Config`) it runs in NumPy, one run of equal sizes at a time
    (a run fills whole bins in a row; see :func:`_best_fit_decreasing`), so packing a model of
    usual size compiles nothing (a first call in a fresh environment saves about a second of
    Numba compilation); larger inputs, and ``"nf"`` and ``"ffd"``, run compiled kernels,
    compiled on their first use, except inputs of up to ``packing_cold_max_items`` items while
    the compiled BFD is not compiled here (a cold start): they run in NumPy too, and a helper
    process compiles the kernels for later processes
    (:func:`distshap.compile_cache.compile_later`).

The decreasing order is a stable counting (or radix) sort by size, not a comparison sort.
Items larger than ``capacity`` (possible only for paths of more than ``capacity - 1`` features)
cannot share a warp: each gets an *oversize* bin of its own. For ``"nf"``, ``"ffd"`` and
``"bfd"`` the regular bins come first (numbered in the order they were opened) and the
oversize bins after them, in item order.
"""

from __future__ import annotations

import bisect
import time
from dataclasses import dataclass

import numba
import numpy as np

from distshap.compile_cache import compile_later, compiled, pending, wait_ahead
from distshap.pages import page_array
from distshap.plan.config import get_config

__all__ = [
    "AHEAD_NAME", "ALGORITHMS", "MAX_CAPACITY", "Packing", "ahead_compile", "bin_order", "pack",
]  # fmt: skip

#: Names accepted by :func:`pack`.
ALGORITHMS: tuple[str, ...] = ("none", "nf", "ffd", "bfd")

#: Largest bin capacity :func:`pack` accepts (BFD keeps one stack per residual capacity).
MAX_CAPACITY = 65536


@dataclass(frozen=True, eq=False)
class Packing:
    """The result of :func:`pack`.

    Attributes
    ----------
    bin_of_item : int32 (n_items,)
        Bin of each item.
    num_bins : int
        Number of bins used, oversize bins included.
    num_oversize : int
        Number of oversize bins (items larger than ``capacity``, one per bin).
    capacity : int
        Bin capacity the packing was made for.
    utilisation : float
        ``sum(sizes) / (capacity * num_bins)`` (0.0 when there are no items).
    seconds : float
        Wall time of the packing itself (ordering included, compilation excluded).
    algorithm : str
        One of :data:`ALGORITHMS`.
    """

    bin_of_item: np.ndarray
    num_bins: int
    num_oversize: int
    capacity: int
    utilisation: float
    seconds: float
    algorithm: str

    @property
    def num_items(self) -> int:
        return int(self.bin_of_item.shape[0])


# --------------------------------------------------------------------------------------------
# Numba kernels. Every kernel writes bin labels into ``out`` and returns the number of regular
# bins it opened; oversize items (size > capacity) are skipped and labelled afterwards.
# --------------------------------------------------------------------------------------------


@numba.njit(cache=True, nogil=True)
def _decreasing_order(sizes, capacity):  # pragma: no cover - compiled
    """Indices of items with size <= capacity, by decreasing size, stable (counting sort)."""
    counts = np.zeros(capacity + 2, dtype=np.int64)
    n = sizes.shape[0]
    for i in range(n):
        s = sizes[i]
        if s <= capacity:
            counts[capacity - s] += 1  # bucket 0 holds the largest size
    total = 0
    for b in range(capacity + 1):
        c = counts[b]
        counts[b] = total
        total += c
    order = np.empty(total, dtype=np.int64)
    for i in range(n):
        s = sizes[i]
        if s <= capacity:
            b = capacity - s
            order[counts[b]] = i
            counts[b] += 1
    return order


@numba.njit(cache=True, nogil=True)
def _next_fit(sizes, capacity, out):  # pragma: no cover - compiled
    n = sizes.shape[0]
    current = -1
    load = capacity  # forces a new bin for the first regular item
    for i in range(n):
        s = sizes[i]
        if s > capacity:
            continue
        if load + s > capacity:
            current += 1
            load = 0
        load += s
        out[i] = current
    return current + 1


@numba.njit(cache=True, nogil=True)
def _first_fit_decreasing(sizes, capacity, out, tree):  # pragma: no cover - compiled
    # ``tree`` (filled with ``capacity``, length 2 * leaves, leaves a power of two >= the
    # number of regular items) is a max tournament tree of residual capacities: tree[1] is the
    # root, tree[leaves + b] the residual of bin b. Unopened bins hold ``capacity``, so the
    # leftmost bin with room is an opened one whenever one fits (and an unopened bin always
    # lies right of every opened one). Its dtype is the narrowest that holds ``capacity``.
    #
    # Finger search: within a run of equal sizes the first-fit bin never moves left (bins only
    # lose room), so the next item of the run starts at the previous item's leaf and climbs
    # only until a right sibling has room: O(log distance) instead of O(log n) per item. A new
    # size starts from the root.
    order = _decreasing_order(sizes, capacity)
    m = order.shape[0]
    leaves = tree.shape[0] // 2
    used = 0
    prev = -1
    leaf = 1
    for j in range(m):
        i = order[j]
        s = sizes[i]
        node = 1
        if s == prev:
            node = leaf
            if tree[node] < s:
                while True:
                    if node & 1 == 0 and tree[node + 1] >= s:
                        node += 1
                        break
                    node //= 2
        while node < leaves:  # branch-free descent to the leftmost leaf with room
            node = 2 * node + (tree[2 * node] < s)
        prev = s
        leaf = node
        b = leaf - leaves
        out[i] = b
        if b >= used:
            used = b + 1
        tree[leaf] -= s
        node = leaf // 2
        while node >= 1:
            left = tree[2 * node]
            right = tree[2 * node + 1]
            best = left if left > right else right
            if tree[node] == best:
                break
            tree[node] = best
            node //= 2
    return used


def _best_fit_decreasing(sizes: np.ndarray, capacity: int, out: np.ndarray) -> int:
    """Best-Fit-Decreasing of the regular items, one run of equal sizes at a time (NumPy).

    Item by item, BFD takes the top bin of the stack of the smallest residual ``r >= s`` that
    has bins. Within a run of items of size ``s`` that bin then takes ``r // s`` items in a row
    (after each one its residual ``r - j s``, if still ``>= s``, is the smallest non-empty one
    and the bin sits on top of its stack), and the next item goes to the next bin of the same
    stack, then of the next residual, then to new bins of ``capacity // s`` items each. So a
    run is labelled with a few ``np.repeat`` and list slices per residual, and the result is,
    bin for bin, the item-by-item algorithm's (``tests/test_packing.py`` checks it against a
    plain reference). The stacks hold the bins' labels, top last.
    """
    regular = np.flatnonzero(sizes <= capacity)
    # decreasing sizes, ties by index: a stable radix sort of 16-bit keys (capacity <= 65536)
    order = regular[np.argsort((capacity - sizes[regular]).astype(np.uint16), kind="stable")]
    run_counts = np.bincount(sizes[regular], minlength=capacity + 1)
    run_sizes = np.flatnonzero(run_counts)
    run_counts = run_counts[run_sizes]
    stacks: dict[int, list[int]] = {}
    residuals: list[int] = []  # residuals with a non-empty stack, increasing
    used = 0
    pos = 0
    for s, need in zip(run_sizes[::-1].tolist(), run_counts[::-1].tolist(), strict=True):
        pieces = []  # (bins in the order they take items, items per bin)
        pushes = []  # (residual, bins) in the order the item-by-item algorithm pushes them
        left = need
        i = bisect.bisect_left(residuals, s)
        while left > 0:
            if i < len(residuals):  # the top bins of the smallest fitting residual
                r = residuals[i]
                stack = stacks[r]
                nb = min(len(stack), -(-left // (r // s)))
                bins = stack[: len(stack) - nb - 1 : -1] if nb < len(stack) else stack[::-1]
                del stack[len(stack) - nb :]
                if not stack:
                    del residuals[i], stacks[r]
            else:  # new bins
                r = capacity
                nb = -(-left // (r // s))
                bins = list(range(used, used + nb))
                used += nb
            q = r // s
            pieces.append((bins, q))
            last = min(q, left - (nb - 1) * q)  # items of the last bin (q unless the run ends)
            if r - q * s > 0 and nb > 1:
                pushes.append((r - q * s, bins[:-1]))
            if r - last * s > 0:
                pushes.append((r - last * s, bins[-1:]))
            left -= min(left, nb * q)
        labels = np.concatenate([np.repeat(np.asarray(b, np.int64), q) for b, q in pieces])
        out[order[pos : pos + need]] = labels[:need]
        pos += need
        for r, bins in pushes:
            if r not in stacks:
                stacks[r] = []
                bisect.insort(residuals, r)
            stacks[r].extend(bins)
    return used


def _label_oversize(sizes: np.ndarray, capacity: int, out: np.ndarray, first: int) -> int:
    """Bins ``first, first + 1, ...`` for the oversize items, in item order; their count."""
    oversize = np.flatnonzero(sizes > capacity)
    out[oversize] = first + np.arange(oversize.shape[0])
    return int(oversize.shape[0])


@numba.njit(cache=True, nogil=True)
def _bfd_compiled(sizes, capacity, out):  # pragma: no cover - compiled
    order = _decreasing_order(sizes, capacity)
    m = order.shape[0]
    # head[r]: top bin of the stack of open bins with residual r (-1: empty);
    # below[b]: the bin under b in its stack. A bin's residual is the index of its stack.
    head = np.full(capacity + 1, -1, dtype=np.int32)
    below = np.empty(m, dtype=np.int32)
    used = 0
    for j in range(m):
        i = order[j]
        s = sizes[i]
        r = s
        while r <= capacity and head[r] < 0:
            r += 1
        if r <= capacity:
            b = head[r]
            head[r] = below[b]
        else:
            b = used
            used += 1
            r = capacity
        out[i] = b
        left = r - s
        if left > 0:
            below[b] = head[left]
            head[left] = b
    return used


@numba.njit(cache=True, nogil=True)
def _group_by_bin_compiled(bin_of_item, sizes, num_bins):  # pragma: no cover - compiled
    n = bin_of_item.shape[0]
    starts = np.zeros(num_bins + 1, dtype=np.int64)
    lanes = np.zeros(num_bins + 1, dtype=np.int64)
    for i in range(n):
        b = bin_of_item[i]
        starts[b + 1] += 1
        lanes[b + 1] += sizes[i]
    for b in range(num_bins):
        starts[b + 1] += starts[b]
        lanes[b + 1] += lanes[b]
    cursor = starts[:-1].copy()
    order = np.empty(n, dtype=np.int64)
    for i in range(n):
        b = bin_of_item[i]
        order[cursor[b]] = i
        cursor[b] += 1
    return order, lanes


def _tree_dtype(capacity: int) -> type:
    return np.int8 if capacity <= 127 else np.int16 if capacity <= 32767 else np.int32


def _ffd(sizes: np.ndarray, capacity: int, out: np.ndarray) -> int:
    m = int(np.count_nonzero(sizes <= capacity))
    leaves = 1
    while leaves < m:
        leaves *= 2
    tree = np.full(2 * leaves, capacity, dtype=_tree_dtype(capacity))
    return _first_fit_decreasing(sizes, capacity, out, tree)


def _bfd(sizes: np.ndarray, capacity: int, out: np.ndarray) -> int:
    if _numpy_route(sizes.shape[0]):
        return _best_fit_decreasing(sizes, capacity, out)
    return _bfd_compiled(sizes, capacity, out)


def _numpy_route(n: int) -> bool:
    """Whether BFD and :func:`bin_order` of ``n`` items run in NumPy: up to
    ``packing_numpy_max_items`` items, and up to ``packing_cold_max_items`` while the compiled
    kernels are not compiled here (then a helper compiles them for later processes)."""
    config = get_config()
    if n <= config.packing_numpy_max_items:
        return True
    if n > config.packing_cold_max_items or pending(AHEAD_NAME):
        return False
    if compiled(_bfd_compiled, _group_by_bin_compiled):
        return False
    compile_later(__name__, AHEAD_NAME)
    return True


_KERNELS = {"nf": _next_fit, "ffd": _ffd, "bfd": _bfd_compiled}
_warm: set = set()


def _warm_up(key: str, capacity: int = 32) -> None:
    """Compile (or load from Numba's cache) the kernel of ``key`` once, so timings exclude it.

    ``key``: "nf", "ffd", "bfd" (the compiled BFD, for more than ``packing_numpy_max_items``
    items) or "order" (the compiled grouping by bin).
    """
    if key == "ffd":
        key = f"ffd-{np.dtype(_tree_dtype(capacity)).name}"
    if key in _warm:
        return
    wait_ahead((AHEAD_NAME,))  # a helper compiling BFD and the grouping: load them instead
    tiny = np.array([3, 1, 2], dtype=np.int64)
    out = np.zeros(tiny.shape[0], dtype=np.int32)
    if key == "order":
        _group_by_bin_compiled(out, tiny, 1)
    else:
        _KERNELS[key.split("-")[0]](tiny, capacity, out)
    _warm.add(key)


#: The compiled BFD and grouping's name for :func:`distshap.compile_cache.compile_ahead` (this
#: module's helpers), the packing of a large model.
AHEAD_NAME = "packing"


def ahead_compile(name: str) -> None:
    """Compile the compiled BFD and grouping by bin (``name``: :data:`AHEAD_NAME`) into Numba's
    disk cache, a helper process's work (:func:`distshap.compile_cache.compile_ahead`)."""
    if name != AHEAD_NAME:
        raise ValueError(f"name={name!r}: this module compiles ahead only {AHEAD_NAME!r}")
    _warm_up("bfd")
    _warm_up("order")


def _check_sizes(sizes: np.ndarray) -> np.ndarray:
    arr = np.asarray(sizes)
    if arr.ndim != 1:
        raise ValueError(f"sizes must be a 1-D array of item sizes, got shape {arr.shape}")
    if arr.dtype.kind not in "iu":
        raise TypeError(
            f"sizes must hold integers (lanes per item), got dtype {arr.dtype}; "
            "convert with sizes.astype(np.int64)"
        )
    arr = np.ascontiguousarray(arr, dtype=np.int64)
    if arr.size and arr.min() < 1:
        bad = int(np.flatnonzero(arr < 1)[0])
        raise ValueError(
            f"item sizes must be >= 1, got sizes[{bad}] = {int(arr[bad])}; "
            "a path occupies k + 1 lanes (its bias lane included)"
        )
    return arr


def pack(sizes: np.ndarray, capacity: int = 32, algorithm: str = "bfd") -> Packing:
    """Pack items of integer ``sizes`` into bins of ``capacity``.

    Parameters
    ----------
    sizes : array of int, shape (n_items,)
        Item sizes, each >= 1 (lanes of a path: ``k + 1``). Items larger than ``capacity`` get
        an oversize bin each.
    capacity : int, default 32
        Bin capacity (lanes per warp).
    algorithm : {"bfd", "ffd", "nf", "none"}
        Packing heuristic; see the module docstring.

    Returns
    -------
    Packing

    Raises
    ------
    ValueError
        For an unknown algorithm, a capacity below 1, or a size below 1.
    TypeError
        For non-integer sizes.
    """
    if algorithm not in ALGORITHMS:
        raise ValueError(
            f"unknown packing algorithm {algorithm!r}: use one of {', '.join(ALGORITHMS)}"
        )
    if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)):
        raise TypeError(f"capacity must be an int, got {type(capacity).__name__}")
    capacity = int(capacity)
    if capacity < 1 or capacity > MAX_CAPACITY:
        raise ValueError(
            f"capacity must be in [1, {MAX_CAPACITY}] (lanes per bin, 32 for a warp), "
            f"got {capacity}"
        )
    arr = _check_sizes(sizes)
    n = arr.shape[0]
    if algorithm in ("nf", "ffd") or (algorithm == "bfd" and not _numpy_route(n)):
        _warm_up(algorithm, capacity)

    start = time.perf_counter()
    if algorithm == "none":
        bin_of_item = np.arange(n, dtype=np.int32)
        num_bins = n
        num_oversize = int(np.count_nonzero(arr > capacity))
    else:
        bin_of_item = page_array(n, np.int32)  # every item labelled below
        kernel = _bfd if algorithm == "bfd" else _KERNELS[algorithm]
        regular = int(kernel(arr, capacity, bin_of_item))
        num_oversize = int(_label_oversize(arr, capacity, bin_of_item, regular))
        num_bins = regular + num_oversize
    seconds = time.perf_counter() - start

    total = float(arr.sum())
    utilisation = total / (capacity * num_bins) if num_bins else 0.0
    return Packing(
        bin_of_item=bin_of_item,
        num_bins=int(num_bins),
        num_oversize=num_oversize,
        capacity=capacity,
        utilisation=utilisation,
        seconds=seconds,
        algorithm=algorithm,
    )


def bin_order(packing: Packing, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Item order grouped by bin, and each bin's lane range.

    Parameters
    ----------
    packing : Packing
        A packing of ``sizes``.
    sizes : array of int, shape (n_items,)
        The item sizes the packing was made from.

    Returns
    -------
    item_order : int64 (n_items,)
        Item indices, bins in increasing order; within a bin, increasing item index.
    bin_offsets : int64 (num_bins + 1,)
        Lane offsets: the items of bin ``b`` occupy lanes ``bin_offsets[b]:bin_offsets[b + 1]``
        when laid out in ``item_order``.
    """
    arr = _check_sizes(sizes)
    if arr.shape[0] != packing.num_items:
        raise ValueError(
            f"sizes has {arr.shape[0]} items but the packing has {packing.num_items}: "
            "pass the sizes the packing was made from"
        )
    if not _numpy_route(arr.shape[0]):
        _warm_up("order")
        bins = np.ascontiguousarray(packing.bin_of_item, dtype=np.int32)
        return _group_by_bin_compiled(bins, arr, packing.num_bins)
    bins = np.asarray(packing.bin_of_item, dtype=np.int64)
    # by bin, then item index: two stable radix passes of 16 bits (low, then high)
    order = np.argsort((bins & 0xFFFF).astype(np.uint16), kind="stable")
    if packing.num_bins > 0xFFFF:
        order = order[np.argsort((bins[order] >> 16).astype(np.uint16), kind="stable")]
    lanes = np.zeros(packing.num_bins + 1, dtype=np.int64)
    np.cumsum(np.bincount(bins, minlength=packing.num_bins), out=lanes[1:])
    lane_ends = np.zeros(arr.shape[0] + 1, dtype=np.int64)
    np.cumsum(arr[order], out=lane_ends[1:])
    return order.astype(np.int64), lane_ends[lanes]
