"""How much path work could exact top-k pruning by bounds save? (a CPU probe)

For a few rows of a model, every path's exact contribution to every pair it holds is
computed (float64 Gauss-Legendre quadrature, as the kernels do; checked against the library's
slot values), with:

* ``tau``: each row and group's k-th largest ``|phi_ij|`` (pairs ``i < j``, as
  :func:`distshap.pair_interactions.top_interactions` ranks them);
* **A** - row-independent bounds ``B_ij = sum_p max_pattern |c_p(ij)|``: the share of path
  element pairs on which ``B_ij >= tau``;
* **B** - the per-row sums of absolute contributions ``P_ij = sum_p |c_p(ij)|`` (the best any
  bound that ignores signs can do): the share with ``P_ij >= tau``;
* **C** - per-feature sums ``A_i = sum_j P_ij``: pairs with both ``A_i, A_j >= tau``;
* **D** - light/heavy paths with a cheap per-row bound (``O(k)`` a path from the row's
  pattern: ``f_j <= 1`` for followed elements, ``f_j = z_j (1 - t)`` else): paths whose bound
  is ``>= theta`` computed exactly, the others' per-element bounds added to per-feature
  slacks; pairs whose upper bound ``|partial| + min(slack_i, slack_j)`` reaches the k-th
  largest lower bound ``|partial| - min(...)`` are computed again over all their paths. Work
  = heavy pairs + candidate pairs, for ``theta = tau / 2**s``; also with per-tree slacks
  (``sum_T min(slack_Ti, slack_Tj)``) and, as a ceiling, with each path's exact maxima as its
  bounds (``--exact-bounds``).
* ``--timing FRACTION``: the same scalar per-row code over every path and with D (``theta =
  FRACTION`` x the per-group median tau), alternating, the minimum of 3 runs each.

Findings (fashion_mnist-med, 2026-11-23): A keeps 82% of the pair work, D 45% at its best
theta, and the timing gives 0.9-1.05x: pruning by these bounds does not pay (the pattern and
bound of every path, and the candidate pass, cost what the pairs saved).

Usage::

    python -m benchmarks.topk_bounds --shape fashion_mnist-med --rows 100
    NUMBA_NUM_THREADS=1 python -m benchmarks.topk_bounds --rows 20 --timing 0.00390625
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from numba import njit, prange

from benchmarks.shapes import make_data, train_model
from distshap import TreeExplainer
from distshap.inputs import model_matrix
from distshap.kernels import get_backend, treeshap
from distshap.kernels.taylor_cpu import gauss_legendre_table
from distshap.pair_slots import pair_slots

_follows = njit(inline="always", nogil=True, cache=True)(treeshap.follows)

ROWS = {
    "fashion_mnist-med": 70_000,
    "cal_housing-med": 20_640,
    "adult-med": 48_842,
    "covtype-med": 581_012,
}


@njit(nogil=True, cache=True)
def _pairs_of_path(ones_or_max, use_max, p, feature, lower, upper, missing, zf, cat_offsets,
                   cat_nbits, cat_other, cat_words, path_offsets, path_value, gl_t, gl_w, x,
                   d, f, pre, suf, out):  # fmt: skip
    """Exact contributions of path p's upper pairs (i < c) into out[i * k + c] (row x), or the
    pattern maxima (use_max)."""
    start = path_offsets[p] + 1
    k = path_offsets[p + 1] - start
    v = path_value[p]
    for i in range(k):
        el = start + i
        z = zf[el]
        if use_max:
            ones_or_max[i] = True
            d[i] = max(z, 1.0 - z)
        else:
            o = _follows(x[feature[el]], lower[el], upper[el], missing[el], cat_other[el],
                         cat_offsets[el], cat_nbits[el], cat_words)  # fmt: skip
            ones_or_max[i] = o
            d[i] = (1.0 if o else 0.0) - z
    for e in range(k * k):
        out[e] = 0.0
    m = (k + 1) // 2
    for q in range(m * (m - 1) // 2, m * (m + 1) // 2):
        t = gl_t[q]
        for i in range(k):
            z = zf[start + i]
            if use_max:
                f[i] = z + t * (1.0 - z)
            else:
                f[i] = z + t * d[i]
        pre[0] = gl_w[q]
        for i in range(k):
            pre[i + 1] = pre[i] * f[i]
        suf[k] = 1.0
        for i in range(k - 1, -1, -1):
            suf[i] = suf[i + 1] * f[i]
        for i in range(k):
            run = pre[i]
            for c in range(i + 1, k):
                out[i * k + c] += run * suf[c + 1]
                run *= f[c]
    for i in range(k):
        for c in range(i + 1, k):
            out[i * k + c] *= 0.5 * v * d[i] * d[c]
    return k


@njit(nogil=True, cache=True)
def _cheap_bounds(ones, k, start, zf, v, s):
    """Per-element bounds s[i] >= max_c |c_p(i, c)| from the row's pattern (O(k)); returns
    the path bound max_i s[i]."""
    Z = 1.0
    n0 = 0
    a1 = -1.0
    a2 = -1.0
    for i in range(k):
        z = zf[start + i]
        if ones[i]:
            a = 1.0 - z
            if a > a1:
                a2 = a1
                a1 = a
            elif a > a2:
                a2 = a
        else:
            Z *= z
            n0 += 1
    h = 0.5 * abs(v) * Z
    best = 0.0
    for i in range(k):
        z = zf[start + i]
        b = 0.0
        if ones[i]:
            a = 1.0 - z
            other = a2 if a == a1 else a1  # the largest a among the other sat elements
            if n0 >= 1:
                b = max(b, a / n0)
            if other >= 0.0:
                b = max(b, a * other / (n0 + 1))
        else:
            if n0 >= 2:
                b = max(b, 1.0 / (n0 - 1))
            if a1 >= 0.0:
                b = max(b, a1 / n0)
        s[i] = h * b
        best = max(best, s[i])
    return best


@njit(parallel=True, nogil=True, cache=True)
def _exact_rows(X, feature, lower, upper, missing, zf, cat_offsets, cat_nbits, cat_other,
                cat_words, path_offsets, path_value, path_group, map_offsets, path_map,
                gl_t, gl_w, max_k, S, num_groups, num_features, phi, absum, featsum,
                ustar, ucheap):  # fmt: skip
    n = X.shape[0]
    n_paths = path_value.shape[0]
    for r in prange(n):
        x = X[r]
        ones = np.empty(max_k, np.bool_)
        d = np.empty(max_k)
        f = np.empty(max_k)
        pre = np.empty(max_k + 1)
        suf = np.empty(max_k + 1)
        out = np.empty(max_k * max_k)
        s = np.empty(max_k)
        for p in range(n_paths):
            k = _pairs_of_path(ones, False, p, feature, lower, upper, missing, zf, cat_offsets,
                               cat_nbits, cat_other, cat_words, path_offsets, path_value,
                               gl_t, gl_w, x, d, f, pre, suf, out)  # fmt: skip
            start = path_offsets[p] + 1
            g = path_group[p]
            mo = map_offsets[p]
            best = 0.0
            for i in range(k):
                for c in range(i + 1, k):
                    val = out[i * k + c]
                    slot = path_map[mo + i * k + c]
                    phi[r, slot] += val
                    absum[r, slot] += abs(val)
                    featsum[r, g, feature[start + i]] += abs(val)
                    featsum[r, g, feature[start + c]] += abs(val)
                    best = max(best, abs(val))
            ustar[r, p] = best
            ucheap[r, p] = _cheap_bounds(ones, k, start, zf, path_value[p], s)


@njit(nogil=True, cache=True)
def _max_bounds(feature, lower, upper, missing, zf, cat_offsets, cat_nbits, cat_other,
                cat_words, path_offsets, path_value, map_offsets, path_map, gl_t, gl_w, max_k,
                S):  # fmt: skip
    B = np.zeros(S)
    ones = np.empty(max_k, np.bool_)
    d = np.empty(max_k)
    f = np.empty(max_k)
    pre = np.empty(max_k + 1)
    suf = np.empty(max_k + 1)
    out = np.empty(max_k * max_k)
    x = np.zeros(1, np.float32)
    for p in range(path_value.shape[0]):
        k = _pairs_of_path(ones, True, p, feature, lower, upper, missing, zf, cat_offsets,
                           cat_nbits, cat_other, cat_words, path_offsets, path_value, gl_t,
                           gl_w, x, d, f, pre, suf, out)  # fmt: skip
        mo = map_offsets[p]
        for i in range(k):
            for c in range(i + 1, k):
                B[path_map[mo + i * k + c]] += abs(out[i * k + c])
    return B


@njit(parallel=True, nogil=True, cache=True)
def _work_by_slot_bound(bound, tau, path_offsets, path_group, map_offsets, path_map, res):
    """res[r] = element pairs (i < c) on paths whose slot bound[r or 0, slot] >= tau[r, g]."""
    n = tau.shape[0]
    per_row = bound.shape[0] > 1
    for r in prange(n):
        br = bound[r] if per_row else bound[0]
        w = 0
        for p in range(path_group.shape[0]):
            k = path_offsets[p + 1] - path_offsets[p] - 1
            t = tau[r, path_group[p]]
            mo = map_offsets[p]
            for i in range(k):
                for c in range(i + 1, k):
                    if br[path_map[mo + i * k + c]] >= t:
                        w += 1
        res[r] = w


@njit(parallel=True, nogil=True, cache=True)
def _work_by_features(featsum, tau, feature, path_offsets, path_group, res):
    n = tau.shape[0]
    for r in prange(n):
        w = 0
        for p in range(path_group.shape[0]):
            start = path_offsets[p] + 1
            k = path_offsets[p + 1] - start
            g = path_group[p]
            t = tau[r, g]
            m = 0
            for i in range(k):
                if featsum[r, g, feature[start + i]] >= t:
                    m += 1
            w += m * (m - 1) // 2
        res[r] = w


@njit(nogil=True, cache=True)
def _kth_lower_bounds(low, slot_group, slot_i, slot_j, num_groups, kk):
    """Per group, the ``kk``-th largest of ``low`` over the group's pair slots (not below 0;
    0 where the group has fewer than ``kk`` pair slots): a lower bound of its top-k threshold."""
    out = np.zeros(num_groups)
    S = low.shape[0]
    for g in range(num_groups):
        cnt = 0
        for e in range(S):
            if slot_group[e] == g and slot_i[e] != slot_j[e]:
                cnt += 1
        vals = np.empty(cnt)
        cnt = 0
        for e in range(S):
            if slot_group[e] == g and slot_i[e] != slot_j[e]:
                vals[cnt] = low[e]
                cnt += 1
        if cnt >= kk:
            vals.sort()
            out[g] = max(0.0, vals[cnt - kk])
    return out


@njit(parallel=True, nogil=True, cache=True)
def _light_heavy(X, feature, lower, upper, missing, zf, cat_offsets, cat_nbits, cat_other,
                 cat_words, path_offsets, path_value, path_group, map_offsets, path_map,
                 gl_t, gl_w, max_k, S, slot_group, slot_i, slot_j, num_groups, num_features,
                 tau, fractions, kk, exact_bounds, path_tree, n_trees, tp_tree, tp_slot,
                 res):  # fmt: skip
    """res[r, a] = (heavy pairs, candidate pairs, heavy paths, candidate-pair-paths, tau_low
    / tau) for theta = tau * fractions[a]."""
    n = X.shape[0]
    n_paths = path_value.shape[0]
    for r in prange(n):
        x = X[r]
        ones = np.empty(max_k, np.bool_)
        d = np.empty(max_k)
        f = np.empty(max_k)
        pre = np.empty(max_k + 1)
        suf = np.empty(max_k + 1)
        out = np.empty(max_k * max_k)
        s = np.empty(max_k)
        part = np.zeros(S)
        slack = np.zeros((num_groups, num_features))
        cand = np.zeros(S, np.bool_)
        low = np.empty(S)
        use_trees = tp_tree.shape[0] > 0
        slack_t = np.zeros((n_trees if use_trees else 1, num_features))
        err_t = np.zeros(S)
        for a in range(fractions.shape[0]):
            part[:] = 0.0
            slack[:] = 0.0
            slack_t[:] = 0.0
            heavy_pairs = 0
            heavy_paths = 0
            for p in range(n_paths):
                start = path_offsets[p] + 1
                k = path_offsets[p + 1] - start
                g = path_group[p]
                for i in range(k):
                    el = start + i
                    ones[i] = _follows(x[feature[el]], lower[el], upper[el], missing[el],
                                       cat_other[el], cat_offsets[el], cat_nbits[el],
                                       cat_words)  # fmt: skip
                if exact_bounds:  # the ceiling: each path's exact maxima as its bounds
                    _pairs_of_path(ones, False, p, feature, lower, upper, missing, zf,
                                   cat_offsets, cat_nbits, cat_other, cat_words, path_offsets,
                                   path_value, gl_t, gl_w, x, d, f, pre, suf,
                                   out)  # fmt: skip
                    for i in range(k):
                        s[i] = 0.0
                    for i in range(k):
                        for c in range(i + 1, k):
                            av = abs(out[i * k + c])
                            s[i] = max(s[i], av)
                            s[c] = max(s[c], av)
                    u = 0.0
                    for i in range(k):
                        u = max(u, s[i])
                else:
                    u = _cheap_bounds(ones, k, start, zf, path_value[p], s)
                theta = tau[r, g] * fractions[a]
                if u >= theta:
                    heavy_paths += 1
                    heavy_pairs += k * (k - 1) // 2
                    _pairs_of_path(ones, False, p, feature, lower, upper, missing, zf,
                                   cat_offsets, cat_nbits, cat_other, cat_words, path_offsets,
                                   path_value, gl_t, gl_w, x, d, f, pre, suf,
                                   out)  # fmt: skip
                    mo = map_offsets[p]
                    for i in range(k):
                        for c in range(i + 1, k):
                            part[path_map[mo + i * k + c]] += out[i * k + c]
                else:
                    for i in range(k):
                        slack[g, feature[start + i]] += s[i]
                        if use_trees:
                            slack_t[path_tree[p], feature[start + i]] += s[i]
            # lower bound of tau per group: k-th largest of |part| - err over pair slots
            for e in range(S):
                g = slot_group[e]
                err = min(slack[g, slot_i[e]], slack[g, slot_j[e]])
                low[e] = abs(part[e]) - err
            tau_low = _kth_lower_bounds(low, slot_group, slot_i, slot_j, num_groups, kk)
            for e in range(S):
                g = slot_group[e]
                err = min(slack[g, slot_i[e]], slack[g, slot_j[e]])
                cand[e] = slot_i[e] != slot_j[e] and abs(part[e]) + err >= tau_low[g]
            cand_pairs = 0
            cand_paths = 0
            cand_light = 0
            oracle = 0
            for p in range(n_paths):
                start = path_offsets[p] + 1
                k = path_offsets[p + 1] - start
                g = path_group[p]
                mo = map_offsets[p]
                m = 0
                for i in range(k):
                    for c in range(i + 1, k):
                        e = path_map[mo + i * k + c]
                        if cand[e]:
                            m += 1
                        err = min(slack[g, slot_i[e]], slack[g, slot_j[e]])
                        if abs(part[e]) + err >= tau[r, g]:
                            oracle += 1
                cand_pairs += m
                if m > 0:
                    cand_paths += 1
                    for i in range(k):
                        el = start + i
                        ones[i] = _follows(x[feature[el]], lower[el], upper[el], missing[el],
                                           cat_other[el], cat_offsets[el], cat_nbits[el],
                                           cat_words)  # fmt: skip
                    if exact_bounds:
                        _pairs_of_path(ones, False, p, feature, lower, upper, missing, zf,
                                       cat_offsets, cat_nbits, cat_other, cat_words,
                                       path_offsets, path_value, gl_t, gl_w, x, d, f, pre, suf,
                                       out)  # fmt: skip
                        u = 0.0
                        for i in range(k):
                            for c in range(i + 1, k):
                                u = max(u, abs(out[i * k + c]))
                    else:
                        u = _cheap_bounds(ones, k, start, zf, path_value[p], s)
                    if u < tau[r, g] * fractions[a]:
                        cand_light += m
            ratio = 0.0
            for g in range(num_groups):
                if tau[r, g] > 0:
                    ratio += tau_low[g] / tau[r, g]
            if use_trees:  # errors by trees: sum_T min(slack_T[i], slack_T[j])
                err_t[:] = 0.0
                for q in range(tp_tree.shape[0]):
                    e = tp_slot[q]
                    t = tp_tree[q]
                    err_t[e] += min(slack_t[t, slot_i[e]], slack_t[t, slot_j[e]])
                for e in range(S):
                    low[e] = abs(part[e]) - err_t[e]
                tl = _kth_lower_bounds(low, slot_group, slot_i, slot_j, num_groups, kk)
                ratio_t = 0.0
                for g in range(num_groups):
                    if tau[r, g] > 0:
                        ratio_t += tl[g] / tau[r, g]
                for e in range(S):
                    g = slot_group[e]
                    cand[e] = slot_i[e] != slot_j[e] and abs(part[e]) + err_t[e] >= tl[g]
                ct = 0
                for p in range(n_paths):
                    k = path_offsets[p + 1] - path_offsets[p] - 1
                    mo = map_offsets[p]
                    for i in range(k):
                        for c in range(i + 1, k):
                            if cand[path_map[mo + i * k + c]]:
                                ct += 1
                res[r, a, 7] = ct
                res[r, a, 8] = ratio_t / num_groups
            res[r, a, 0] = heavy_pairs
            res[r, a, 1] = cand_pairs
            res[r, a, 2] = heavy_paths
            res[r, a, 3] = cand_paths
            res[r, a, 4] = ratio / num_groups
            res[r, a, 5] = cand_light
            res[r, a, 6] = oracle


def _trees(explainer, packed, slots):
    """Each packed path's tree, and the distinct (tree, pair slot) entries."""
    from distshap.encoding import encode_ensemble
    from distshap.packed import _packed_order
    from distshap.paths import extract_paths

    encoded, _ = encode_ensemble(explainer.ensemble)
    paths = extract_paths(encoded)
    _, order, _, _ = _packed_order(paths.lengths, packed.capacity, "bfd")
    if not np.array_equal(paths.path_value[order], packed.path_value):
        raise RuntimeError("could not recover the packed order")
    tree = paths.path_tree[order].astype(np.int64)
    kk = np.diff(packed.path_offsets) - 1
    keys = []
    for p in range(packed.num_paths):
        k = kk[p]
        mo = slots.map_offsets[p]
        m = slots.path_map[mo : mo + k * k].reshape(k, k)
        keys.append(tree[p] * slots.num_slots + m[np.triu_indices(k, 1)].astype(np.int64))
    keys = np.unique(np.concatenate(keys))
    return tree, int(tree.max()) + 1, keys // slots.num_slots, keys % slots.num_slots


def probe(
    shape: str, n_rows: int, k: int = 10, light_heavy: bool = True, exact_bounds: bool = False
) -> dict:
    name, size = shape.rsplit("-", 1)
    booster = train_model(name, size, n_rows=ROWS.get(shape))
    X_host, _ = make_data(name, n_rows, seed=1)
    booster_ex = TreeExplainer(booster, backend="cpu")
    packed = booster_ex.packed
    slots = pair_slots(packed)
    rows = packed.encoding.apply(model_matrix(X_host, packed, allow_empty=True))
    rows = np.ascontiguousarray(rows)
    G, F, S = packed.num_groups, packed.num_features, slots.num_slots
    kk = np.diff(packed.path_offsets) - 1
    max_k = int(kk.max())
    gl_t, gl_w = gauss_legendre_table((max_k + 1) // 2)
    arrays = (packed.feature, packed.lower, packed.upper, packed.missing,
              packed.zero_fraction, packed.cat_offsets, packed.cat_nbits, packed.cat_other,
              packed.cat_words, packed.path_offsets, packed.path_value)  # fmt: skip
    n = rows.shape[0]
    t0 = time.perf_counter()
    phi = np.zeros((n, S))
    absum = np.zeros((n, S))
    featsum = np.zeros((n, G, F))
    ustar = np.zeros((n, packed.num_paths))
    ucheap = np.zeros((n, packed.num_paths))
    _exact_rows(rows, *arrays, packed.path_group, slots.map_offsets, slots.path_map, gl_t, gl_w,
                max_k, S, G, F, phi, absum, featsum, ustar, ucheap)  # fmt: skip
    t_exact = time.perf_counter() - t0
    # check against the library's slot values
    ref = get_backend("cpu").interaction_slot_values(packed, rows, slots)
    pair_mask = slots.slot_i != slots.slot_j
    err = np.abs(phi[:, pair_mask].astype(np.float32) - ref[:, pair_mask]).max()
    scale = np.abs(ref[:, pair_mask]).max()
    slot_group = np.repeat(np.arange(G), np.diff(slots.slot_offsets)).astype(np.int64)
    tau = np.zeros((n, G))
    ntie = 0
    for g in range(G):
        a, b = slots.pair_range(g)
        av = np.abs(ref[:, a:b]).astype(np.float64)
        if b - a >= k:
            tau[:, g] = -np.partition(-av, k - 1, axis=1)[:, k - 1]
        ntie += int((tau[:, g] == 0).sum())
    total_pairs = int((kk * (kk - 1) // 2).sum())
    total_k2 = int((kk * kk).sum())
    # A: row-independent bounds
    B = _max_bounds(*arrays, slots.map_offsets, slots.path_map, gl_t, gl_w, max_k, S)
    res = np.zeros(n, np.int64)
    _work_by_slot_bound(B[None], tau, packed.path_offsets, packed.path_group, slots.map_offsets,
                        slots.path_map, res)  # fmt: skip
    work_A = res.astype(float) / total_pairs
    cnt_A = np.array([sum(int((B[slots.pair_range(g)[0]:slots.pair_range(g)[1]] >= tau[r, g])
                              .sum()) for g in range(G)) for r in range(n)])  # fmt: skip
    # B: per-row sum of |c|
    _work_by_slot_bound(absum, tau, packed.path_offsets, packed.path_group, slots.map_offsets,
                        slots.path_map, res)  # fmt: skip
    work_B = res.astype(float) / total_pairs
    cnt_B = np.array(
        [
            sum(
                int((absum[r, slots.pair_range(g)[0] : slots.pair_range(g)[1]] >= tau[r, g]).sum())
                for g in range(G)
            )
            for r in range(n)
        ]
    )
    # C: per-feature sums
    _work_by_features(featsum, tau, packed.feature, packed.path_offsets, packed.path_group, res)
    work_C = res.astype(float) / total_pairs
    # path-level: paths whose exact max |c| >= tau (any bound on a whole path needs these)
    tp = tau[:, packed.path_group]
    paths_star = (ustar >= tp).mean(axis=1)
    pairs_w = (kk * (kk - 1) // 2).astype(float)
    work_star = ((ustar >= tp) * pairs_w).sum(1) / total_pairs
    rec = {
        "shape": shape, "rows": n, "k": k, "paths": packed.num_paths, "features": F,
        "groups": G, "slots": S, "pair_slots": int(pair_mask.sum()),
        "path_pairs_per_row": total_pairs, "path_k2_per_row": total_k2,
        "exact_s": t_exact, "max_err_vs_library": float(err), "max_abs": float(scale),
        "zero_tau": ntie,
        "A_rowindep_work": float(work_A.mean()), "A_pairs_ge_tau": float(cnt_A.mean()),
        "B_absum_work": float(work_B.mean()), "B_pairs_ge_tau": float(cnt_B.mean()),
        "C_feature_work": float(work_C.mean()),
        "paths_exact_max_ge_tau": float(paths_star.mean()),
        "work_paths_exact_max_ge_tau": float(work_star.mean()),
    }  # fmt: skip
    # how tight is the cheap path bound against the path's exact max
    ok = ustar > 0
    # the bounds hold (float64 slack of 1e-12 relative)
    rec["A_bound_violations"] = int((np.abs(phi) > B[None] * (1 + 1e-12) + 1e-300).sum())
    rec["B_bound_violations"] = int((np.abs(phi) > absum * (1 + 1e-12) + 1e-300).sum())
    rec["cheap_over_exact_median"] = float(np.median(ucheap[ok] / ustar[ok]))
    rec["cheap_below_exact"] = int((ucheap < ustar * (1 - 1e-9)).sum())
    for s in (0, 2, 4, 6, 8, 10):
        rec[f"paths_cheap_ge_tau/2^{s}"] = float((ucheap >= tp / 2**s).mean())
    if light_heavy:
        fractions = 2.0 ** -np.array([3, 5, 7, 8, 9, 10, 11, 12, 14])
        path_tree, n_trees, tp_tree, tp_slot = _trees(booster_ex, packed, slots)
        rec["tree_pairs_per_row"] = int(tp_tree.size)
        out = np.zeros((n, fractions.size, 9))
        t0 = time.perf_counter()
        _light_heavy(rows, *arrays, packed.path_group, slots.map_offsets, slots.path_map, gl_t,
                     gl_w, max_k, S, slot_group, slots.slot_i.astype(np.int64),
                     slots.slot_j.astype(np.int64), G, F, tau, fractions, k, exact_bounds,
                     path_tree, n_trees, tp_tree, tp_slot, out)  # fmt: skip
        rec["light_heavy_s"] = time.perf_counter() - t0
        lh = []
        for a, fr in enumerate(fractions):
            m = out[:, a].mean(0)
            lh.append(
                {
                    "theta/tau": float(fr),
                    "heavy_work": m[0] / total_pairs,
                    "cand_work": m[1] / total_pairs,
                    "total_work": (m[0] + m[1]) / total_pairs,
                    "heavy_paths": m[2] / packed.num_paths,
                    "cand_paths": m[3] / packed.num_paths,
                    "tau_low/tau": m[4],
                    "cand_light_work": m[5] / total_pairs,
                    "oracle_tau_cand_work": m[6] / total_pairs,
                    "trees_cand_work": m[7] / total_pairs,
                    "trees_tau_low/tau": m[8],
                }
            )
        rec["D_light_heavy"] = lh
    return rec


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="fashion_mnist-med")
    ap.add_argument("--rows", type=int, default=100)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--no-light-heavy", action="store_true")
    ap.add_argument(
        "--exact-bounds",
        action="store_true",
        help="light/heavy with each path's exact maxima as bounds (a ceiling)",
    )
    ap.add_argument(
        "--timing",
        type=float,
        default=None,
        metavar="FRACTION",
        help="time the scalar code without and with pruning, theta = FRACTION * "
        "the per-group median tau",
    )
    args = ap.parse_args(argv)
    if args.timing is not None:
        print(timing(args.shape, args.rows, args.k, args.timing))
        return
    rec = probe(args.shape, args.rows, args.k, not args.no_light_heavy, args.exact_bounds)
    for key, val in rec.items():
        if key == "D_light_heavy":
            for row in val:
                print("  ", {a: round(b, 4) for a, b in row.items()})
        else:
            print(f"{key}: {val}")


# ------------------------------------------------------------------------------------------
# Timing: the same scalar per-row code with and without pruning (``--timing``)
# ------------------------------------------------------------------------------------------


@njit(nogil=True, cache=True)
def _pattern(ones, p, x, feature, lower, upper, missing, cat_offsets, cat_nbits, cat_other,
             cat_words, path_offsets):  # fmt: skip
    start = path_offsets[p] + 1
    k = path_offsets[p + 1] - start
    for i in range(k):
        el = start + i
        ones[i] = _follows(x[feature[el]], lower[el], upper[el], missing[el], cat_other[el],
                           cat_offsets[el], cat_nbits[el], cat_words)  # fmt: skip
    return k


@njit(nogil=True, cache=True)
def _one_pair(ones, start, k, i, c, zf, v, gl_t, gl_w):
    """Contribution of elements i < c of a path directly, O(k m)."""
    m = (k + 1) // 2
    total = 0.0
    for q in range(m * (m - 1) // 2, m * (m + 1) // 2):
        t = gl_t[q]
        prod = gl_w[q]
        for j in range(k):
            if j != i and j != c:
                z = zf[start + j]
                prod *= z + t * ((1.0 if ones[j] else 0.0) - z)
        total += prod
    di = (1.0 if ones[i] else 0.0) - zf[start + i]
    dc = (1.0 if ones[c] else 0.0) - zf[start + c]
    return total * 0.5 * v * di * dc


@njit(parallel=True, nogil=True, cache=True)
def _timed_rows(X, feature, lower, upper, missing, zf, cat_offsets, cat_nbits, cat_other,
                cat_words, path_offsets, path_value, path_group, map_offsets, path_map,
                gl_t, gl_w, max_k, S, slot_offsets, num_pairs, slot_i, slot_j, num_groups,
                num_features, theta, kk, prune, out_top, counts):  # fmt: skip
    """Top-kk |value| per (row, group) of pair slots, all paths exact (``prune`` False) or by
    light/heavy pruning with path bounds >= theta[g] exact (module docstring, D)."""
    n = X.shape[0]
    n_paths = path_value.shape[0]
    for r in prange(n):
        x = X[r]
        ones = np.empty(max_k, np.bool_)
        d = np.empty(max_k)
        f = np.empty(max_k)
        pre = np.empty(max_k + 1)
        suf = np.empty(max_k + 1)
        out = np.empty(max_k * max_k)
        s = np.empty(max_k)
        part = np.zeros(S)
        slack = np.zeros((num_groups, num_features))
        heavy = np.zeros(n_paths, np.bool_)
        for p in range(n_paths):
            start = path_offsets[p] + 1
            g = path_group[p]
            if prune:
                k = _pattern(ones, p, x, feature, lower, upper, missing, cat_offsets,
                             cat_nbits, cat_other, cat_words, path_offsets)  # fmt: skip
                u = _cheap_bounds(ones, k, start, zf, path_value[p], s)
                if u < theta[g]:
                    for i in range(k):
                        slack[g, feature[start + i]] += s[i]
                    continue
                heavy[p] = True
            k = _pairs_of_path(ones, False, p, feature, lower, upper, missing, zf, cat_offsets,
                               cat_nbits, cat_other, cat_words, path_offsets, path_value,
                               gl_t, gl_w, x, d, f, pre, suf, out)  # fmt: skip
            mo = map_offsets[p]
            for i in range(k):
                for c in range(i + 1, k):
                    part[path_map[mo + i * k + c]] += out[i * k + c]
        if prune:
            cand = np.zeros(S, np.bool_)
            cfeat = np.zeros((num_groups, num_features), np.bool_)
            for g in range(num_groups):
                a = slot_offsets[g]
                b = a + num_pairs[g]
                if b - a < kk:
                    for e in range(a, b):
                        cand[e] = True
                    continue
                low = np.empty(b - a)
                for e in range(a, b):
                    err = min(slack[g, slot_i[e]], slack[g, slot_j[e]])
                    low[e - a] = abs(part[e]) - err
                tau_low = max(0.0, np.partition(low, b - a - kk)[b - a - kk])
                for e in range(a, b):
                    err = min(slack[g, slot_i[e]], slack[g, slot_j[e]])
                    if abs(part[e]) + err >= tau_low:
                        cand[e] = True
                        cfeat[g, slot_i[e]] = True
                        cfeat[g, slot_j[e]] = True
            n_cand = 0
            for p in range(n_paths):
                if heavy[p]:
                    continue
                start = path_offsets[p] + 1
                k = path_offsets[p + 1] - start
                g = path_group[p]
                m = 0
                for i in range(k):
                    if cfeat[g, feature[start + i]]:
                        m += 1
                if m < 2:
                    continue
                _pattern(ones, p, x, feature, lower, upper, missing, cat_offsets, cat_nbits,
                         cat_other, cat_words, path_offsets)  # fmt: skip
                mo = map_offsets[p]
                for i in range(k):
                    if not cfeat[g, feature[start + i]]:
                        continue
                    for c in range(i + 1, k):
                        e = path_map[mo + i * k + c]
                        if cand[e]:
                            part[e] += _one_pair(ones, start, k, i, c, zf, path_value[p],
                                                 gl_t, gl_w)  # fmt: skip
                            n_cand += 1
            counts[r] = n_cand
            for e in range(S):
                if not cand[e]:
                    part[e] = 0.0
        for g in range(num_groups):
            a = slot_offsets[g]
            b = a + num_pairs[g]
            if b - a < kk:
                continue
            av = np.abs(part[a:b])
            out_top[r, g] = np.partition(av, b - a - kk)[b - a - kk]


def timing(
    shape: str, n_rows: int, k: int = 10, fraction: float = 1 / 256, repeats: int = 3
) -> dict:
    """Seconds of :func:`_timed_rows` without and with pruning (theta = per-group median tau
    of the rows times ``fraction``), and whether both give the same k-th values."""
    name, size = shape.rsplit("-", 1)
    booster = train_model(name, size, n_rows=ROWS.get(shape))
    X_host, _ = make_data(name, n_rows, seed=1)
    packed = TreeExplainer(booster, backend="cpu").packed
    slots = pair_slots(packed)
    rows = np.ascontiguousarray(packed.encoding.apply(model_matrix(X_host, packed)))
    G, F, S = packed.num_groups, packed.num_features, slots.num_slots
    max_k = int((np.diff(packed.path_offsets) - 1).max())
    gl_t, gl_w = gauss_legendre_table((max_k + 1) // 2)
    arrays = (packed.feature, packed.lower, packed.upper, packed.missing,
              packed.zero_fraction, packed.cat_offsets, packed.cat_nbits, packed.cat_other,
              packed.cat_words, packed.path_offsets, packed.path_value, packed.path_group,
              slots.map_offsets, slots.path_map, gl_t, gl_w, max_k, S, slots.slot_offsets,
              slots.num_pairs, slots.slot_i.astype(np.int64), slots.slot_j.astype(np.int64),
              G, F)  # fmt: skip
    n = rows.shape[0]
    counts = np.zeros(n, np.int64)
    top_full = np.zeros((n, G))
    top_pruned = np.zeros((n, G))
    theta = np.zeros(G)
    _timed_rows(rows[:2], *arrays, theta, k, False, top_full[:2], counts[:2])  # compile
    _timed_rows(rows[:2], *arrays, theta, k, True, top_pruned[:2], counts[:2])
    _timed_rows(rows, *arrays, theta, k, False, top_full, counts)
    theta = np.median(top_full, axis=0) * fraction
    t_full = t_pruned = np.inf
    for _ in range(repeats):  # alternating, the minimum of each (a shared machine)
        t0 = time.perf_counter()
        _timed_rows(rows, *arrays, theta, k, False, top_full, counts)
        t_full = min(t_full, time.perf_counter() - t0)
        t0 = time.perf_counter()
        _timed_rows(rows, *arrays, theta, k, True, top_pruned, counts)
        t_pruned = min(t_pruned, time.perf_counter() - t0)
    return {"shape": shape, "rows": n, "theta/median_tau": fraction, "full_s": t_full,
            "pruned_s": t_pruned, "speedup": t_full / t_pruned,
            "same_kth_values": bool(np.array_equal(top_full, top_pruned)),
            "max_kth_diff": float(np.abs(top_full - top_pruned).max())}  # fmt: skip


if __name__ == "__main__":
    main()
