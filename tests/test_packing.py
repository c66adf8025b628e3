"""Tests of distshap.packing: validity, pure-Python references, and the algorithms' theorems."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distshap.packing import ALGORITHMS, Packing, bin_order, pack

# --------------------------------------------------------------------------------------------
# Pure-Python references (no Numba). Oversize items (size > capacity) get bins of their own
# after the regular bins, in item order, as the module documents.
# --------------------------------------------------------------------------------------------


def _decreasing(sizes, capacity):
    regular = [i for i in range(len(sizes)) if sizes[i] <= capacity]
    return sorted(regular, key=lambda i: -sizes[i])  # Python's sort is stable


def _finish(sizes, capacity, labels, num_regular):
    nxt = num_regular
    for i, s in enumerate(sizes):
        if s > capacity:
            labels[i] = nxt
            nxt += 1
    return labels


def ref_next_fit(sizes, capacity):
    labels = [-1] * len(sizes)
    bins = 0
    load = None
    for i, s in enumerate(sizes):
        if s > capacity:
            continue
        if load is None or load + s > capacity:
            bins += 1
            load = 0
        load += s
        labels[i] = bins - 1
    return _finish(sizes, capacity, labels, bins)


def ref_first_fit_decreasing(sizes, capacity):
    labels = [-1] * len(sizes)
    residual = []
    for i in _decreasing(sizes, capacity):
        s = sizes[i]
        b = 0
        while b < len(residual) and residual[b] < s:  # linear scan: leftmost bin with room
            b += 1
        if b == len(residual):
            residual.append(capacity)
        residual[b] -= s
        labels[i] = b
    return _finish(sizes, capacity, labels, len(residual))


def ref_best_fit_decreasing(sizes, capacity, ties="recent"):
    """Best fit; among bins of equal residual the most recently filled (or the lowest index)."""
    labels = [-1] * len(sizes)
    residual = []
    stamp = []
    for t, i in enumerate(_decreasing(sizes, capacity)):
        s = sizes[i]
        fits = [b for b in range(len(residual)) if residual[b] >= s]
        if fits:
            if ties == "recent":
                b = min(fits, key=lambda b: (residual[b], -stamp[b]))
            else:
                b = min(fits, key=lambda b: (residual[b], b))
        else:
            residual.append(capacity)
            stamp.append(-1)
            b = len(residual) - 1
        residual[b] -= s
        stamp[b] = t
        labels[i] = b
    return _finish(sizes, capacity, labels, len(residual))


REFERENCES = {
    "nf": ref_next_fit,
    "ffd": ref_first_fit_decreasing,
    "bfd": ref_best_fit_decreasing,
}


def optimum(sizes, capacity):
    """Exact minimum number of bins (subset DP; tiny inputs, all sizes <= capacity)."""
    n = len(sizes)
    best = [(math.inf, 0)] * (1 << n)
    best[0] = (1, 0)  # (bins used, load of the last bin)
    for mask in range(1 << n):
        bins, load = best[mask]
        if bins == math.inf:
            continue
        for i in range(n):
            if mask >> i & 1:
                continue
            s = sizes[i]
            cand = (bins, load + s) if load + s <= capacity else (bins + 1, s)
            nxt = mask | (1 << i)
            if cand < best[nxt]:
                best[nxt] = cand
    return best[(1 << n) - 1][0] if n else 0


def check_valid(p: Packing, sizes: np.ndarray, capacity: int) -> None:
    """Every item placed once, no empty bins, loads within capacity, oversize items alone."""
    sizes = np.asarray(sizes, dtype=np.int64)
    n = sizes.shape[0]
    assert p.bin_of_item.shape == (n,)
    assert p.bin_of_item.dtype == np.int32
    assert p.capacity == capacity
    if n == 0:
        assert p.num_bins == 0 and p.utilisation == 0.0
        return
    assert p.bin_of_item.min() >= 0 and p.bin_of_item.max() < p.num_bins
    count = np.bincount(p.bin_of_item, minlength=p.num_bins)
    load = np.bincount(p.bin_of_item, weights=sizes, minlength=p.num_bins)
    assert np.all(count >= 1), "a bin is empty"
    oversize = sizes > capacity
    assert p.num_oversize == int(oversize.sum())
    assert np.all(count[p.bin_of_item[oversize]] == 1), "an oversize item shares its bin"
    regular_bins = np.unique(p.bin_of_item[~oversize])
    assert np.all(load[regular_bins] <= capacity), f"loads {load[regular_bins]} > {capacity}"
    assert p.utilisation == pytest.approx(sizes.sum() / (capacity * p.num_bins))


sizes_strategy = st.lists(st.integers(1, 40), min_size=0, max_size=60)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@settings(max_examples=60, deadline=None)
@given(sizes=sizes_strategy, capacity=st.integers(1, 32))
def test_valid_packing(algorithm, sizes, capacity):
    arr = np.array(sizes, dtype=np.int64)
    p = pack(arr, capacity, algorithm)
    assert p.algorithm == algorithm
    check_valid(p, arr, capacity)
    if algorithm == "none":
        assert p.num_bins == len(sizes)
        np.testing.assert_array_equal(p.bin_of_item, np.arange(len(sizes)))


@pytest.mark.parametrize("algorithm", ["nf", "ffd", "bfd"])
@settings(max_examples=80, deadline=None)
@given(sizes=sizes_strategy, capacity=st.integers(1, 32))
def test_matches_reference_bin_for_bin(algorithm, sizes, capacity):
    p = pack(np.array(sizes, dtype=np.int64), capacity, algorithm)
    expected = REFERENCES[algorithm](sizes, capacity)
    np.testing.assert_array_equal(p.bin_of_item, expected)
    assert p.num_bins == (max(expected) + 1 if sizes else 0)


@settings(max_examples=80, deadline=None)
@given(sizes=st.lists(st.integers(1, 32), min_size=1, max_size=60), capacity=st.integers(1, 32))
def test_bfd_bin_count_does_not_depend_on_ties(sizes, capacity):
    # Bins of equal residual are interchangeable for the future, so any tie rule gives the
    # same number of bins.
    lowest = ref_best_fit_decreasing(sizes, capacity, ties="lowest")
    assert pack(np.array(sizes), capacity, "bfd").num_bins == max(lowest) + 1


@settings(max_examples=100, deadline=None)
@given(sizes=st.lists(st.integers(1, 32), min_size=1, max_size=80), capacity=st.integers(1, 32))
def test_bounds_against_volume(sizes, capacity):
    sizes = [min(s, capacity) for s in sizes]  # no oversize items: the theorems are about these
    arr = np.array(sizes)
    lower = math.ceil(sum(sizes) / capacity)
    big = sum(1 for s in sizes if 2 * s > capacity)  # no two such items share a bin
    nf = pack(arr, capacity, "nf").num_bins
    # Next-Fit: two consecutive bins hold more than `capacity`, so nf <= 2 * lower - 1.
    assert max(lower, big) <= nf <= 2 * lower - 1
    for algorithm in ("ffd", "bfd"):
        k = pack(arr, capacity, algorithm).num_bins
        # Any-Fit: at most one bin is at most half full, so k < 2 * sum / capacity + 1.
        assert max(lower, big) <= k
        assert k * capacity < 2 * sum(sizes) + capacity


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(1, 12), min_size=1, max_size=8), capacity=st.integers(4, 12))
def test_approximation_ratios_against_optimum(sizes, capacity):
    sizes = [min(s, capacity) for s in sizes]
    opt = optimum(sizes, capacity)
    arr = np.array(sizes)
    assert opt <= pack(arr, capacity, "nf").num_bins <= 2 * opt - 1
    ffd = pack(arr, capacity, "ffd").num_bins
    bfd = pack(arr, capacity, "bfd").num_bins
    assert opt <= ffd and opt <= bfd
    assert 9 * ffd <= 11 * opt + 6  # FFD <= 11/9 OPT + 6/9 (Dosa 2007, tight)
    assert 9 * bfd <= 11 * opt + 36  # BFD <= 11/9 OPT + 4 (Johnson et al. 1974)
    assert 2 * ffd <= 3 * opt and 2 * bfd <= 3 * opt  # absolute ratio 3/2 (Simchi-Levi 1994)


def test_ffd_and_bfd_differ_on_a_contrived_case():
    # capacity 17, sizes 12 7 6 4 3 2 (sum 34, so 2 bins are optimal: {12,3,2} {7,6,4}).
    # FFD: 12->A(5 left), 7->B(10), 6->B(4), 4->A (leftmost with room, 1 left), 3->B(1),
    #      2 fits nowhere -> C: 3 bins.
    # BFD: 12->A(5), 7->B(10), 6->B(4), 4->B (tightest: 4 < 5, 0 left), 3->A(2), 2->A(0): 2 bins.
    sizes = np.array([3, 12, 2, 7, 4, 6])  # any order: both sort decreasingly
    ffd = pack(sizes, 17, "ffd")
    bfd = pack(sizes, 17, "bfd")
    assert ffd.num_bins == 3 and bfd.num_bins == 2
    assert bfd.utilisation == 1.0
    # The 4 goes to the 12's bin under FFD and to the 7's bin under BFD.
    assert ffd.bin_of_item[4] == ffd.bin_of_item[1]
    assert bfd.bin_of_item[4] == bfd.bin_of_item[3]


def test_paper_like_case_all_algorithms_agree():
    # Ten depth-3 paths (4 lanes each) per 32-lane warp: 8 items fill a warp exactly, so every
    # algorithm but "none" uses ceil(n / 8) bins.
    sizes = np.full(80, 4)
    for algorithm in ("nf", "ffd", "bfd"):
        p = pack(sizes, 32, algorithm)
        assert p.num_bins == 10 and p.utilisation == 1.0
    assert pack(sizes, 32, "none").utilisation == 4 / 32


def test_next_fit_keeps_item_order():
    # NF never looks back: 20 then 20 cannot share, 10 joins the second 20.
    p = pack(np.array([20, 20, 10, 30]), 32, "nf")
    np.testing.assert_array_equal(p.bin_of_item, [0, 1, 1, 2])


def test_oversize_items_get_own_bins_after_regular_ones():
    sizes = np.array([40, 5, 33, 7, 50])
    for algorithm in ("nf", "ffd", "bfd"):
        p = pack(sizes, 32, algorithm)
        assert p.num_oversize == 3
        assert p.num_bins == 4
        assert p.bin_of_item[1] == p.bin_of_item[3] == 0
        np.testing.assert_array_equal(p.bin_of_item[[0, 2, 4]], [1, 2, 3])


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_large_random_input(algorithm):
    rng = np.random.default_rng(0)
    sizes = rng.integers(1, 18, size=200_000)
    p = pack(sizes, 32, algorithm)
    check_valid(p, sizes, 32)
    assert p.seconds >= 0.0
    if algorithm != "none":
        assert p.num_bins <= 2 * math.ceil(sizes.sum() / 32)


@pytest.mark.parametrize("algorithm", ["nf", "ffd", "bfd"])
def test_large_input_matches_reference(algorithm):
    rng = np.random.default_rng(1)
    sizes = rng.integers(1, 33, size=3_000)
    expected = REFERENCES[algorithm](sizes.tolist(), 32)
    np.testing.assert_array_equal(pack(sizes, 32, algorithm).bin_of_item, expected)


@pytest.mark.parametrize("capacity", [100, 300, 40_000])
def test_wide_capacities(capacity):
    # int8 / int16 / int32 residual trees in FFD.
    rng = np.random.default_rng(capacity)
    sizes = rng.integers(1, capacity + 1, size=500)
    for algorithm in ("ffd", "bfd"):
        p = pack(sizes, capacity, algorithm)
        check_valid(p, sizes, capacity)
        expected = REFERENCES[algorithm](sizes.tolist(), capacity)
        np.testing.assert_array_equal(p.bin_of_item, expected)


@settings(max_examples=40, deadline=None)
@given(sizes=sizes_strategy, algorithm=st.sampled_from(ALGORITHMS))
def test_bin_order(sizes, algorithm):
    arr = np.array(sizes, dtype=np.int64)
    p = pack(arr, 32, algorithm)
    order, offsets = bin_order(p, arr)
    assert sorted(order.tolist()) == list(range(len(sizes)))
    assert offsets.shape == (p.num_bins + 1,)
    assert offsets[0] == 0 and offsets[-1] == arr.sum()
    bins = p.bin_of_item[order]
    assert np.all(np.diff(bins) >= 0), "bins not in increasing order"
    same = np.diff(bins) == 0
    assert np.all(np.diff(order)[same] > 0), "items of a bin not in increasing order"
    loads = np.bincount(p.bin_of_item, weights=arr, minlength=p.num_bins)
    np.testing.assert_array_equal(np.diff(offsets), loads)


def test_errors_name_the_bad_value():
    with pytest.raises(ValueError, match="'best'"):
        pack(np.array([1, 2]), 32, "best")
    with pytest.raises(ValueError, match=r"sizes\[1\] = 0"):
        pack(np.array([1, 0]), 32)
    with pytest.raises(TypeError, match="float64"):
        pack(np.array([1.0, 2.0]), 32)
    with pytest.raises(ValueError, match="1-D"):
        pack(np.ones((2, 2), dtype=int), 32)
    with pytest.raises(ValueError, match="capacity"):
        pack(np.array([1]), 0)
    p = pack(np.array([1, 2]), 32)
    with pytest.raises(ValueError, match="3 items"):
        bin_order(p, np.array([1, 2, 3]))


# --------------------------------------------------------------------------------------------
# The packed model: table statistics by counting, the digest's hash list
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(40))
def test_table_statistics_count_what_choose_tables_lays_out(seed):
    from distshap.packed import _table_plan_size
    from distshap.plan.tables import choose_tables, table_values

    rng = np.random.default_rng(seed)
    k = rng.integers(1, int(rng.integers(2, 20)), size=int(rng.integers(0, 400)))
    budget = int(rng.choice([0, 3, 4, 64, 1000, 10**5, 1 << 30, -1])) + int(rng.integers(0, 9))
    max_features = int(rng.integers(0, 25))
    offsets = choose_tables(k, budget, max_features)
    assert _table_plan_size(k, budget, max_features) == (
        int((offsets >= 0).sum()),
        table_values(k, offsets),
    )
    with pytest.raises(ValueError, match="too large"):
        _table_plan_size(k, budget, 25)


def test_digest_hashes_every_piece_and_not_the_threads(monkeypatch):
    from distshap import packed
    from distshap.paths import extract_paths

    import tiny

    p = extract_paths(tiny.random_ensemble(3, n_features=5, n_trees=4, depth=5))
    monkeypatch.setattr(packed, "_DIGEST_PIECE", 64)  # many pieces per array
    threaded = packed.build_packed_model(p)
    monkeypatch.setattr(packed, "run_ranges", lambda f, n, pieces, *a: f(*a, 0, n))
    assert packed.build_packed_model(p).digest == threaded.digest  # one thread: the same
    upper = p.upper.copy()
    last = np.flatnonzero(np.isfinite(upper))[-1]
    upper[last] = np.nextafter(upper[last], np.float32(np.inf))  # one bit of one piece
    moved = packed.build_packed_model(dataclasses.replace(p, upper=upper))
    assert moved.digest != threaded.digest
