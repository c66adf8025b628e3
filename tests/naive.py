"""Plain float64 oracles (no Numba): every backend is tested against these.

They work on the canonical :class:`distshap.models.ensemble.Ensemble`, one tree at a time, and
follow the split semantics documented there (``goes_left``).

Two independent references for path-dependent ("tree_path_dependent") SHAP values:

* **Brute force** (:func:`brute_force_shap`, :func:`brute_force_interactions`): the value
  function ``v(S) = E[f(x) | x_S]`` is computed for *every* subset ``S`` of the players by one
  recursive descent per tree, vectorised over subsets: a node splitting on a feature in ``S``
  follows ``x`` (NaN -> default direction, categorical -> :func:`goes_left`), any other node
  averages its children weighted by ``cover(child) / cover(node)``. Shapley values and Shapley
  interaction indices then follow from their definitions. Exponential in the number of
  features the model uses: keep it to about 12.
* **Recursive TreeShap** (:func:`treeshap_recursive`, :func:`treeshap_interactions_recursive`):
  Algorithm 1 of the GPUTreeShap paper (Lundberg et al.'s TreeShap, with EXTEND, UNWIND and
  UNWOUND_SUM and the undo/redo of a feature repeated on a path); interactions by conditioning
  on each feature on / off, ``phi_ij = (phi_j | i on - phi_j | i off) / 2``.

Output layout (XGBoost's ``pred_contribs`` / ``pred_interactions``, margin space): SHAP values
``(G, F + 1)`` per row with the bias (expected value + base score) in the last column;
interactions ``(G, F + 1, F + 1)`` with ``phi_ii = phi_i - sum_{j != i} phi_ij`` on the
diagonal, the expected value at ``[F, F]`` and zeros elsewhere in the bias row and column.
Features the model never splits on get zeros. The ``*_rows`` helpers stack rows into
``(n, G, F + 1)`` / ``(n, G, F + 1, F + 1)``.

Cover convention: the fraction of a child is ``cover(child) / cover(node)``, taken as 0 when
``cover(node) == 0`` (a zero-cover subtree contributes nothing to any expectation).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from decimal import Context, Decimal

import numpy as np

from distshap.models.ensemble import Ensemble

__all__ = [
    "brute_force_interactions",
    "brute_force_interactions_rows",
    "brute_force_shap",
    "brute_force_shap_rows",
    "child_fraction",
    "expected_value",
    "goes_left",
    "output_secant",
    "predict_margin",
    "subset_values",
    "tree_leaf",
    "treeshap_interactions_recursive",
    "treeshap_interactions_recursive_rows",
    "treeshap_recursive",
    "treeshap_recursive_rows",
    "used_features",
]


def goes_left(ens: Ensemble, node: int, x: float) -> bool:
    """Whether value ``x`` of the split feature goes to the left child of ``node``."""
    if np.isnan(x):
        return bool(ens.default_left[node])
    if ens.is_categorical[node]:
        cats = ens.cat_values[ens.cat_offsets[node] : ens.cat_offsets[node + 1]]
        if x < 0:
            return True
        return int(x) not in set(cats.tolist())
    return bool(np.float32(x) < ens.threshold[node])


def tree_leaf(ens: Ensemble, tree: int, row: np.ndarray) -> int:
    """Index of the leaf that ``row`` reaches in ``tree``."""
    node = int(ens.tree_offsets[tree])
    while ens.left[node] >= 0:
        x = row[ens.feature[node]]
        node = int(ens.left[node] if goes_left(ens, node, x) else ens.right[node])
    return node


def predict_margin(ens: Ensemble, X: np.ndarray) -> np.ndarray:
    """Margin prediction of every row, shape ``(n, num_groups)``, float64."""
    X = np.asarray(X, dtype=np.float32)
    out = np.tile(ens.base_score.astype(np.float64), (X.shape[0], 1))
    for t in range(ens.num_trees):
        g = ens.tree_group[t]
        for r in range(X.shape[0]):
            out[r, g] += ens.value[tree_leaf(ens, t, X[r])]
    return out


# ---------------------------------------------------------------------------------------------
# shared helpers
# ---------------------------------------------------------------------------------------------


def child_fraction(ens: Ensemble, child: int, node: int) -> float:
    """``cover(child) / cover(node)``, or 0 when ``node`` has zero cover."""
    parent = float(ens.cover[node])
    if parent == 0.0:
        return 0.0
    return float(ens.cover[child]) / parent


def used_features(ens: Ensemble) -> list[int]:
    """Sorted distinct features that some split of the model uses."""
    internal = ens.left >= 0
    return sorted(int(f) for f in np.unique(ens.feature[internal]))


def _tree_mean(ens: Ensemble, node: int) -> float:
    if ens.left[node] < 0:
        return float(ens.value[node])
    left, right = int(ens.left[node]), int(ens.right[node])
    return child_fraction(ens, left, node) * _tree_mean(ens, left) + child_fraction(
        ens, right, node
    ) * _tree_mean(ens, right)


def expected_value(ens: Ensemble) -> np.ndarray:
    """Bias column: base score plus the cover-weighted mean prediction, shape ``(G,)``."""
    out = ens.base_score.astype(np.float64).copy()
    for t in range(ens.num_trees):
        out[ens.tree_group[t]] += _tree_mean(ens, int(ens.tree_offsets[t]))
    return out


def _as_row(ens: Ensemble, x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 1 or x.shape[0] != ens.num_features:
        raise ValueError(
            f"expected one row of {ens.num_features} features (a 1-D array), got shape {x.shape}"
        )
    return x


def _stack(fn, ens: Ensemble, X: np.ndarray) -> np.ndarray:
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"expected a 2-D array of rows, got shape {X.shape}")
    return np.stack([fn(ens, X[r]) for r in range(X.shape[0])])


# ---------------------------------------------------------------------------------------------
# brute force: enumerate every subset of the players
# ---------------------------------------------------------------------------------------------


def _players(ens: Ensemble, features: Sequence[int] | None) -> list[int]:
    used = used_features(ens)
    if features is None:
        return used
    players = sorted({int(f) for f in features})
    missing = sorted(set(used) - set(players))
    if missing:
        raise ValueError(f"features {missing} are used by the model: add them to `features`")
    if players and (players[0] < 0 or players[-1] >= ens.num_features):
        raise ValueError(f"features must lie in [0, {ens.num_features}), got {players}")
    return players


def subset_values(ens: Ensemble, x: np.ndarray, players: Sequence[int]) -> np.ndarray:
    """``v(S) = E[f(x) | x_S]`` (without base score) for every subset ``S`` of ``players``.

    Returns ``(G, 2**M)``; bit ``k`` of the column index says whether ``players[k]`` is in
    ``S``. Computed by one recursive descent per tree carrying a weight per subset.
    """
    x = _as_row(ens, x)
    pos = {int(f): k for k, f in enumerate(players)}
    n_sub = 1 << len(players)
    masks = np.arange(n_sub, dtype=np.int64)
    values = np.zeros((ens.num_groups, n_sub))
    for t in range(ens.num_trees):
        g = int(ens.tree_group[t])
        stack = [(int(ens.tree_offsets[t]), np.ones(n_sub))]
        while stack:
            node, w = stack.pop()
            left = int(ens.left[node])
            if left < 0:
                values[g] += w * float(ens.value[node])
                continue
            right = int(ens.right[node])
            f = int(ens.feature[node])
            in_s = ((masks >> pos[f]) & 1).astype(bool)
            hot_left = goes_left(ens, node, float(x[f]))
            w_left = w * np.where(in_s, float(hot_left), child_fraction(ens, left, node))
            w_right = w * np.where(in_s, float(not hot_left), child_fraction(ens, right, node))
            stack.append((left, w_left))
            stack.append((right, w_right))
    return values


def _popcount(masks: np.ndarray) -> np.ndarray:
    return np.array([bin(int(m)).count("1") for m in masks], dtype=np.int64)


def brute_force_shap(
    ens: Ensemble, x: np.ndarray, *, features: Sequence[int] | None = None
) -> np.ndarray:
    """Exact path-dependent SHAP values of one row by enumerating feature subsets.

    Parameters
    ----------
    ens : Ensemble
    x : float array (F,)
        One row; NaN is missing.
    features : sequence of int, optional
        The players of the game; default the features the model uses (adding features the
        model never uses changes nothing: they are dummy players).

    Returns
    -------
    float64 array (G, F + 1)
        SHAP values, bias (expected value + base score) in the last column.
    """
    players = _players(ens, features)
    v = subset_values(ens, x, players)
    m = len(players)
    masks = np.arange(1 << m, dtype=np.int64)
    sizes = _popcount(masks)
    weight = np.array(
        [math.factorial(s) * math.factorial(m - s - 1) / math.factorial(m) for s in range(m)]
    )
    out = np.zeros((ens.num_groups, ens.num_features + 1))
    for k, f in enumerate(players):
        without = masks[((masks >> k) & 1) == 0]
        marginal = v[:, without | (1 << k)] - v[:, without]
        out[:, f] = marginal @ weight[sizes[without]]
    out[:, -1] = v[:, 0] + ens.base_score
    return out


def brute_force_interactions(
    ens: Ensemble, x: np.ndarray, *, features: Sequence[int] | None = None
) -> np.ndarray:
    """Exact SHAP interaction values of one row from the Shapley interaction index.

    ``phi_ij = sum_{S ⊆ N \\ {i, j}} |S|! (M - |S| - 2)! / (2 (M - 1)!) * delta_ij(S)`` with
    ``delta_ij(S) = v(S ∪ {i, j}) - v(S ∪ {i}) - v(S ∪ {j}) + v(S)`` for ``i != j``, and
    ``phi_ii = phi_i - sum_{j != i} phi_ij``. Parameters as in :func:`brute_force_shap`.

    Returns
    -------
    float64 array (G, F + 1, F + 1)
        Expected value + base score at ``[F, F]``, zeros elsewhere in the bias row / column.
    """
    players = _players(ens, features)
    shap = brute_force_shap(ens, x, features=players)
    v = subset_values(ens, x, players)
    m = len(players)
    masks = np.arange(1 << m, dtype=np.int64)
    sizes = _popcount(masks)
    f_total = ens.num_features
    out = np.zeros((ens.num_groups, f_total + 1, f_total + 1))
    if m >= 2:
        weight = np.array(
            [
                math.factorial(s) * math.factorial(m - s - 2) / (2.0 * math.factorial(m - 1))
                for s in range(m - 1)
            ]
        )
        for a in range(m):
            for b in range(a + 1, m):
                both = (1 << a) | (1 << b)
                rest = masks[(masks & both) == 0]
                delta = (
                    v[:, rest | both] - v[:, rest | (1 << a)] - v[:, rest | (1 << b)] + v[:, rest]
                )
                phi_ab = delta @ weight[sizes[rest]]
                out[:, players[a], players[b]] = phi_ab
                out[:, players[b], players[a]] = phi_ab
    for f in players:
        out[:, f, f] = shap[:, f] - (out[:, f, :f_total].sum(axis=1) - out[:, f, f])
    out[:, f_total, f_total] = shap[:, f_total]
    return out


def brute_force_shap_rows(ens: Ensemble, X: np.ndarray) -> np.ndarray:
    """:func:`brute_force_shap` of every row, shape ``(n, G, F + 1)``."""
    return _stack(brute_force_shap, ens, X)


def brute_force_interactions_rows(ens: Ensemble, X: np.ndarray) -> np.ndarray:
    """:func:`brute_force_interactions` of every row, shape ``(n, G, F + 1, F + 1)``."""
    return _stack(brute_force_interactions, ens, X)


# ---------------------------------------------------------------------------------------------
# recursive TreeShap (Algorithm 1)
# ---------------------------------------------------------------------------------------------
# A path ``m`` is a list of elements [d, z, o, w]: feature, zero fraction, one fraction and the
# weight of the subsets of size equal to the element's position. m[0] is the bias element.


def _extend(m: list[list], pz: float, po: float, pi: int) -> list[list]:
    """EXTEND: a copy of ``m`` with feature ``pi`` (fractions ``pz``, ``po``) appended."""
    depth = len(m)
    m = [e[:] for e in m]
    m.append([pi, pz, po, 1.0 if depth == 0 else 0.0])
    for i in range(depth - 1, -1, -1):
        m[i + 1][3] += po * m[i][3] * (i + 1) / (depth + 1)
        m[i][3] = pz * m[i][3] * (depth - i) / (depth + 1)
    return m


def _unwind(m: list[list], i: int) -> list[list]:
    """UNWIND: a copy of ``m`` with element ``i`` removed (undoes its EXTEND)."""
    last = len(m) - 1
    z, o = m[i][1], m[i][2]
    m = [e[:] for e in m]
    n = m[last][3]
    for j in range(last - 1, -1, -1):
        if o != 0.0:
            t = m[j][3]
            m[j][3] = n * (last + 1) / ((j + 1) * o)
            n = t - m[j][3] * z * (last - j) / (last + 1)
        else:
            m[j][3] = m[j][3] * (last + 1) / (z * (last - j))
    for j in range(i, last):
        m[j][0:3] = m[j + 1][0:3]
    m.pop()
    return m


def _unwound_sum(m: list[list], i: int) -> float:
    """UNWOUND_SUM: ``sum(UNWIND(m, i).w)`` without building the unwound path."""
    last = len(m) - 1
    z, o = m[i][1], m[i][2]
    n = m[last][3]
    total = 0.0
    for j in range(last - 1, -1, -1):
        if o != 0.0:
            tmp = n * (last + 1) / ((j + 1) * o)
            total += tmp
            n = m[j][3] - tmp * z * (last - j) / (last + 1)
        else:
            total += m[j][3] * (last + 1) / (z * (last - j))
    return total


def _tree_shap(
    ens: Ensemble,
    tree: int,
    x: np.ndarray,
    phi: np.ndarray,
    condition: int = 0,
    cond_feature: int = -1,
) -> None:
    """Add the SHAP values of one tree to ``phi`` (F + 1,), bias excluded.

    ``condition`` +1 / -1 conditions on ``cond_feature`` being present / absent: splits on it
    are not added to the path; present follows ``x``, absent weights both children by cover.
    """

    def recurse(node: int, m: list[list], pz: float, po: float, pi: int, cf: float) -> None:
        if cf == 0.0 or (pz == 0.0 and po == 0.0):
            return  # every subset's weight through this node is zero
        if condition == 0 or pi != cond_feature:
            m = _extend(m, pz, po, pi)
        left = int(ens.left[node])
        if left < 0:
            v = float(ens.value[node])
            for i in range(1, len(m)):
                d, z, o, _ = m[i]
                if o != z:
                    phi[d] += _unwound_sum(m, i) * (o - z) * v * cf
            return
        right = int(ens.right[node])
        d = int(ens.feature[node])
        if goes_left(ens, node, float(x[d])):
            hot, cold = left, right
        else:
            hot, cold = right, left
        z_hot = child_fraction(ens, hot, node)
        z_cold = child_fraction(ens, cold, node)
        iz = io = 1.0
        for k in range(1, len(m)):
            if m[k][0] == d:
                iz, io = m[k][1], m[k][2]
                m = _unwind(m, k)
                break
        cf_hot = cf_cold = cf
        if condition != 0 and d == cond_feature:
            if condition > 0:
                cf_cold = 0.0
            else:
                cf_hot *= z_hot
                cf_cold *= z_cold
        recurse(hot, m, iz * z_hot, io, d, cf_hot)
        recurse(cold, m, iz * z_cold, 0.0, d, cf_cold)

    recurse(int(ens.tree_offsets[tree]), [], 1.0, 1.0, -1, 1.0)


def treeshap_recursive(ens: Ensemble, x: np.ndarray) -> np.ndarray:
    """Path-dependent SHAP values of one row by recursive TreeShap (Algorithm 1).

    Returns
    -------
    float64 array (G, F + 1)
        Bias (expected value + base score) in the last column.
    """
    x = _as_row(ens, x)
    out = np.zeros((ens.num_groups, ens.num_features + 1))
    for t in range(ens.num_trees):
        _tree_shap(ens, t, x, out[ens.tree_group[t]])
    out[:, -1] = expected_value(ens)
    return out


def treeshap_interactions_recursive(ens: Ensemble, x: np.ndarray) -> np.ndarray:
    """SHAP interaction values of one row by conditioned recursive TreeShap.

    ``phi_ij = (phi_j | i present - phi_j | i absent) / 2`` for ``i != j`` (only trees that split
    on ``i`` contribute), ``phi_ii = phi_i - sum_{j != i} phi_ij``.

    Returns
    -------
    float64 array (G, F + 1, F + 1)
        Expected value + base score at ``[F, F]``, zeros elsewhere in the bias row / column.
    """
    x = _as_row(ens, x)
    f_total = ens.num_features
    shap = treeshap_recursive(ens, x)
    out = np.zeros((ens.num_groups, f_total + 1, f_total + 1))
    for i in used_features(ens):
        for t in range(ens.num_trees):
            lo, hi = int(ens.tree_offsets[t]), int(ens.tree_offsets[t + 1])
            splits = ens.feature[lo:hi][ens.left[lo:hi] >= 0]
            if not np.any(splits == i):
                continue
            on = np.zeros(f_total + 1)
            off = np.zeros(f_total + 1)
            _tree_shap(ens, t, x, on, condition=1, cond_feature=i)
            _tree_shap(ens, t, x, off, condition=-1, cond_feature=i)
            out[ens.tree_group[t], i, :f_total] += (on[:f_total] - off[:f_total]) / 2.0
        row = out[:, i, :f_total]
        out[:, i, i] = shap[:, i] - (row.sum(axis=1) - row[:, i])
    out[:, f_total, f_total] = shap[:, f_total]
    return out


def treeshap_recursive_rows(ens: Ensemble, X: np.ndarray) -> np.ndarray:
    """:func:`treeshap_recursive` of every row, shape ``(n, G, F + 1)``."""
    return _stack(treeshap_recursive, ens, X)


def treeshap_interactions_recursive_rows(ens: Ensemble, X: np.ndarray) -> np.ndarray:
    """:func:`treeshap_interactions_recursive` of every row, shape ``(n, G, F + 1, F + 1)``."""
    return _stack(treeshap_interactions_recursive, ens, X)


# ---------------------------------------------------------------------------------------------
# Shapley-Taylor interaction index of order 2 (brute force)
# ---------------------------------------------------------------------------------------------
# Sundararajan, Dhamdhere & Agarwal (2020): for a singleton I_i = v({i}) - v(∅) (the discrete
# derivative at the empty set); for a pair I_ij = (2 / n) sum_{T ⊆ N \ {i, j}} delta_ij(T) /
# C(n - 1, |T|). The game is the path-dependent one of :func:`subset_values`.


def brute_force_taylor(
    ens: Ensemble, x: np.ndarray, *, features: Sequence[int] | None = None
) -> np.ndarray:
    """Exact order-2 Shapley-Taylor interaction index of one row by enumerating subsets.

    ``I_i = v({i}) - v(∅)`` on the diagonal; ``I_ij = (2 / M) sum_{T ⊆ N \\ {i, j}}
    delta_ij(T) / C(M - 1, |T|)`` with ``delta_ij(T) = v(T ∪ {i, j}) - v(T ∪ {i}) - v(T ∪ {j})
    + v(T)``, split equally between ``[i, j]`` and ``[j, i]``. Parameters as in
    :func:`brute_force_shap` (the index does not depend on added dummy players).

    Returns
    -------
    float64 array (G, F + 1, F + 1)
        ``v(∅)`` + base score at ``[F, F]``, zeros elsewhere in the bias row / column; each
        row's entries sum to ``v(N)`` + base score (efficiency).
    """
    players = _players(ens, features)
    v = subset_values(ens, x, players)
    m = len(players)
    masks = np.arange(1 << m, dtype=np.int64)
    sizes = _popcount(masks)
    f_total = ens.num_features
    out = np.zeros((ens.num_groups, f_total + 1, f_total + 1))
    for a, f in enumerate(players):
        out[:, f, f] = v[:, 1 << a] - v[:, 0]
    if m >= 2:
        weight = np.array([2.0 / (m * math.comb(m - 1, s)) for s in range(m - 1)])
        for a in range(m):
            for b in range(a + 1, m):
                both = (1 << a) | (1 << b)
                rest = masks[(masks & both) == 0]
                delta = (
                    v[:, rest | both] - v[:, rest | (1 << a)] - v[:, rest | (1 << b)] + v[:, rest]
                )
                half = (delta @ weight[sizes[rest]]) / 2.0
                out[:, players[a], players[b]] = half
                out[:, players[b], players[a]] = half
    out[:, f_total, f_total] = v[:, 0] + ens.base_score
    return out


def brute_force_taylor_rows(ens: Ensemble, X: np.ndarray) -> np.ndarray:
    """:func:`brute_force_taylor` of every row, shape ``(n, G, F + 1, F + 1)``."""
    return _stack(brute_force_taylor, ens, X)


__all__ += ["brute_force_taylor", "brute_force_taylor_rows"]


def _leaf_paths(ens: Ensemble, tree: int, x: np.ndarray):
    """``(leaf value, {feature: [o, z]})`` of every root-to-leaf path of ``tree``: a repeated
    feature's one fractions ANDed and zero fractions multiplied (the merged path)."""
    stack = [(int(ens.tree_offsets[tree]), {})]
    while stack:
        node, elems = stack.pop()
        left = int(ens.left[node])
        if left < 0:
            yield float(ens.value[node]), elems
            continue
        right = int(ens.right[node])
        f = int(ens.feature[node])
        hot_left = goes_left(ens, node, float(x[f]))
        for child, hot in ((left, hot_left), (right, not hot_left)):
            o, z = elems.get(f, (1.0, 1.0))
            merged = dict(elems)
            merged[f] = (o * float(hot), z * child_fraction(ens, child, node))
            stack.append((child, merged))


def taylor_path_formula(ens: Ensemble, x: np.ndarray) -> np.ndarray:
    """The order-2 Shapley-Taylor index of one row from the per-path closed form, no quadrature.

    Per merged path (leaf value ``v``, ``d_e = o_e - z_e``): ``I_i = v d_i prod_{e != i} z_e``
    and ``I_ij = 2 v d_i d_j integral_0^1 (1 - t) prod_{e != i, j} (z_e (1 - t) + o_e t) dt``,
    the integral expanded in Bernstein form: ``sum_s e_s s! (r - s + 1)! / (r + 2)!`` with
    ``e_s`` the sum over ``s``-subsets ``S`` of the other ``r`` elements of ``prod_S o prod_{not
    S} z`` (a DP of non-negative terms, exact in float64). Polynomial cost: paths of any length
    (where :func:`brute_force_taylor` cannot enumerate). Layout as :func:`brute_force_taylor`.
    """
    x = _as_row(ens, x)
    f_total = ens.num_features
    out = np.zeros((ens.num_groups, f_total + 1, f_total + 1))
    for t in range(ens.num_trees):
        acc = out[int(ens.tree_group[t])]
        for v, elems in _leaf_paths(ens, t, x):
            feats = sorted(elems)
            o = np.array([elems[f][0] for f in feats])
            z = np.array([elems[f][1] for f in feats])
            d = o - z
            k = len(feats)
            for a in range(k):
                acc[feats[a], feats[a]] += v * d[a] * np.prod(np.delete(z, a))
            r = k - 2
            if r < 0:
                continue
            beta = np.array(
                [
                    math.factorial(s) * math.factorial(r - s + 1) / math.factorial(r + 2)
                    for s in range(r + 1)
                ]
            )
            for a in range(k):
                for b in range(a + 1, k):
                    if d[a] == 0.0 or d[b] == 0.0:
                        continue
                    e = np.zeros(r + 1)
                    e[0] = 1.0
                    for c in np.delete(np.arange(k), [a, b]):
                        e[1:] = e[1:] * z[c] + e[:-1] * o[c]
                        e[0] *= z[c]
                    half = v * d[a] * d[b] * float(e @ beta)
                    acc[feats[a], feats[b]] += half
                    acc[feats[b], feats[a]] += half
    out[:, f_total, f_total] = expected_value(ens)
    return out


def taylor_path_formula_rows(ens: Ensemble, X: np.ndarray) -> np.ndarray:
    """:func:`taylor_path_formula` of every row, shape ``(n, G, F + 1, F + 1)``."""
    return _stack(taylor_path_formula, ens, X)


__all__ += ["taylor_path_formula", "taylor_path_formula_rows"]


# ---------------------------------------------------------------------------------------------
# interventional SHAP (brute force over coalitions of hybrid rows)
# ---------------------------------------------------------------------------------------------
# For a background row r the game is v_r(S) = f(x_S, r_notS) (the model's margin of the hybrid
# row that takes x's values on S and r's elsewhere); values are averaged over the background
# rows. model_output "probability" / "log_loss" scale each pair's values by
# (T(f(x)) - T(f(r))) / (f(x) - f(r)) (1 when equal: output_secant) and average T(f(r)) into
# the bias, as shap's dense_independent does.


def _output_transform(m: np.ndarray, y: float, model_output: str) -> np.ndarray:
    if model_output == "raw":
        return m
    if model_output == "probability":
        return 1.0 / (1.0 + np.exp(-m))
    if model_output == "log_loss":
        return np.log(1.0 + np.exp(m)) - y * m
    raise ValueError(f"unknown model_output {model_output!r}")


def output_secant(mx: float, mr: float, y: float, model_output: str) -> float:
    """``(T(mx, y) - T(mr, y)) / (mx - mr)`` rounded once to float64; 1 when ``mx == mr``.

    1 at equal margins is shap's convention (the one discontinuity: the limit is ``T'``). The
    difference is taken in decimal arithmetic with enough digits for the two margins' ``T`` to
    differ exactly far beyond float64 (digits for ``|m| / ln 10`` leading digits that cancel
    when ``T`` saturates, for ``-log10 |mx - mr|`` more, and 40 spare): a float64 difference of
    two rounded ``T`` is rounding noise when the margins are a few ulps apart. Beyond ``|m| =
    760`` no more digits are added: such secants are below float64's smallest number.
    """
    if model_output == "raw" or mx == mr:
        return 1.0
    gap = abs(mx - mr)
    extra = 0 if gap >= 1.0 else 1 - math.floor(math.log10(gap))
    ctx = Context(prec=40 + int(min(max(abs(mx), abs(mr)), 760.0) / 2.3) + extra)
    a, b, yd = Decimal(mx), Decimal(mr), Decimal(y)  # exact
    if model_output == "probability":
        ta = ctx.divide(1, ctx.add(1, ctx.exp(ctx.minus(a))))
        tb = ctx.divide(1, ctx.add(1, ctx.exp(ctx.minus(b))))
    elif model_output == "log_loss":
        ta = ctx.subtract(ctx.ln(ctx.add(1, ctx.exp(a))), ctx.multiply(yd, a))
        tb = ctx.subtract(ctx.ln(ctx.add(1, ctx.exp(b))), ctx.multiply(yd, b))
    else:
        raise ValueError(f"unknown model_output {model_output!r}")
    return float(ctx.divide(ctx.subtract(ta, tb), ctx.subtract(a, b)))


def _hybrid_values(ens: Ensemble, x: np.ndarray, r: np.ndarray, players: list[int]) -> np.ndarray:
    """``f(x_S, r_notS)`` (base score included) for every subset ``S``: ``(G, 2**M)``."""
    masks = np.arange(1 << len(players), dtype=np.int64)
    Z = np.tile(np.asarray(r, dtype=np.float64), (masks.size, 1))
    for k, f in enumerate(players):
        take = ((masks >> k) & 1).astype(bool)
        Z[take, f] = x[f]
    return predict_margin(ens, Z).T


def _pair_scale(ens: Ensemble, x, r, y: float, model_output: str) -> tuple[np.ndarray, np.ndarray]:
    """Per group: the rescale factor of the pair and ``T(f(r))``."""
    mx = predict_margin(ens, x[None, :])[0]
    mr = predict_margin(ens, r[None, :])[0]
    tr = _output_transform(mr, y, model_output)
    pairs = zip(mx.tolist(), mr.tolist(), strict=True)
    scale = np.array([output_secant(a, b, y, model_output) for a, b in pairs])
    return scale, tr


def interventional_shap(
    ens: Ensemble,
    x: np.ndarray,
    background: np.ndarray,
    *,
    model_output: str = "raw",
    y: float = 0.0,
    features: Sequence[int] | None = None,
) -> np.ndarray:
    """Exact interventional SHAP values of one row over ``background`` rows, by enumeration.

    Returns
    -------
    float64 array (G, F + 1)
        Bias (``mean_r T(f(r), y)``) in the last column; each row sums to ``T(f(x), y)``.
    """
    x = _as_row(ens, x)
    background = np.asarray(background, dtype=np.float64)
    players = _players(ens, features)
    m = len(players)
    masks = np.arange(1 << m, dtype=np.int64)
    sizes = _popcount(masks)
    weight = np.array(
        [math.factorial(s) * math.factorial(m - s - 1) / math.factorial(m) for s in range(m)]
    )
    out = np.zeros((ens.num_groups, ens.num_features + 1))
    for r in background:
        v = _hybrid_values(ens, x, r, players)
        scale, tr = _pair_scale(ens, x, r, y, model_output)
        for k, f in enumerate(players):
            without = masks[((masks >> k) & 1) == 0]
            marginal = v[:, without | (1 << k)] - v[:, without]
            out[:, f] += scale * (marginal @ weight[sizes[without]])
        out[:, -1] += tr
    return out / background.shape[0]


def interventional_interactions(
    ens: Ensemble,
    x: np.ndarray,
    background: np.ndarray,
    *,
    features: Sequence[int] | None = None,
) -> np.ndarray:
    """Exact interventional SHAP interaction values of one row (raw margin), by enumeration.

    ``[i, j]`` (``i != j``) is half the Shapley interaction index of the hybrid game, averaged
    over the background rows; ``[i, i] = phi_i - sum_{j != i} [i, j]``; ``[F, F]`` the mean
    background margin; zeros elsewhere in the bias row / column.
    """
    x = _as_row(ens, x)
    background = np.asarray(background, dtype=np.float64)
    players = _players(ens, features)
    shap = interventional_shap(ens, x, background, features=players)
    m = len(players)
    masks = np.arange(1 << m, dtype=np.int64)
    sizes = _popcount(masks)
    f_total = ens.num_features
    out = np.zeros((ens.num_groups, f_total + 1, f_total + 1))
    if m >= 2:
        weight = np.array(
            [
                math.factorial(s) * math.factorial(m - s - 2) / (2.0 * math.factorial(m - 1))
                for s in range(m - 1)
            ]
        )
        for r in background:
            v = _hybrid_values(ens, x, r, players)
            for a in range(m):
                for b in range(a + 1, m):
                    both = (1 << a) | (1 << b)
                    rest = masks[(masks & both) == 0]
                    delta = (
                        v[:, rest | both]
                        - v[:, rest | (1 << a)]
                        - v[:, rest | (1 << b)]
                        + v[:, rest]
                    )
                    phi_ab = delta @ weight[sizes[rest]]
                    out[:, players[a], players[b]] += phi_ab
                    out[:, players[b], players[a]] += phi_ab
        out /= background.shape[0]
    for f in players:
        out[:, f, f] = shap[:, f] - (out[:, f, :f_total].sum(axis=1) - out[:, f, f])
    out[:, f_total, f_total] = shap[:, f_total]
    return out


def interventional_shap_rows(
    ens: Ensemble,
    X: np.ndarray,
    background: np.ndarray,
    *,
    model_output: str = "raw",
    y: np.ndarray | None = None,
) -> np.ndarray:
    """:func:`interventional_shap` of every row (``y[i]`` its label), ``(n, G, F + 1)``."""
    X = np.asarray(X, dtype=np.float64)
    labels = np.zeros(X.shape[0]) if y is None else np.asarray(y, dtype=np.float64)
    return np.stack(
        [
            interventional_shap(ens, X[i], background, model_output=model_output, y=labels[i])
            for i in range(X.shape[0])
        ]
    )


def interventional_interactions_rows(
    ens: Ensemble, X: np.ndarray, background: np.ndarray
) -> np.ndarray:
    """:func:`interventional_interactions` of every row, ``(n, G, F + 1, F + 1)``."""
    X = np.asarray(X, dtype=np.float64)
    return np.stack([interventional_interactions(ens, X[i], background) for i in range(X.shape[0])])


__all__ += [
    "interventional_interactions",
    "interventional_interactions_rows",
    "interventional_shap",
    "interventional_shap_rows",
]


# ---------------------------------------------------------------------------------------------
# Banzhaf values and Banzhaf interaction values (brute force over coalitions)
# ---------------------------------------------------------------------------------------------
# Every coalition of the other players weighs 1 / 2**(M - 1) (values) or 1 / 2**(M - 2)
# (interactions). Layout as for SHAP: the bias column holds v(∅) (the expected value + base
# score, or the mean background margin); interactions put the whole Banzhaf interaction index
# at [i, j] and [j, i], phi_i - sum_{j != i} [i, j] on the diagonal (rows sum to the values).


def _banzhaf_from_games(games: list[np.ndarray], m: int) -> tuple[np.ndarray, np.ndarray]:
    """Mean over ``games`` (each ``(G, 2**m)``) of the Banzhaf values ``(G, m)`` and the
    Banzhaf interaction indices ``(G, m, m)`` (zero diagonal)."""
    masks = np.arange(1 << m, dtype=np.int64)
    G = games[0].shape[0]
    values, pairs = np.zeros((G, m)), np.zeros((G, m, m))
    for v in games:
        for a in range(m):
            without = masks[((masks >> a) & 1) == 0]
            values[:, a] += (v[:, without | (1 << a)] - v[:, without]).sum(axis=1) / 2.0 ** (m - 1)
            for b in range(a + 1, m):
                both = (1 << a) | (1 << b)
                rest = masks[(masks & both) == 0]
                delta = v[:, rest | both] - v[:, rest | (1 << a)] - v[:, rest | (1 << b)]
                pairs[:, a, b] += (delta + v[:, rest]).sum(axis=1) / 2.0 ** (m - 2)
                pairs[:, b, a] = pairs[:, a, b]
    return values / len(games), pairs / len(games)


def _banzhaf_layout(ens: Ensemble, players: list[int], values, pairs, bias, interactions: bool):
    F = ens.num_features
    if not interactions:
        out = np.zeros((ens.num_groups, F + 1))
        out[:, players] = values
        out[:, F] = bias
        return out
    out = np.zeros((ens.num_groups, F + 1, F + 1))
    for a, fa in enumerate(players):
        for b, fb in enumerate(players):
            out[:, fa, fb] = pairs[:, a, b]
        out[:, fa, fa] = values[:, a] - pairs[:, a].sum(axis=1)
    out[:, F, F] = bias
    return out


def brute_force_banzhaf(
    ens: Ensemble,
    x: np.ndarray,
    background: np.ndarray | None = None,
    *,
    interactions: bool = False,
) -> np.ndarray:
    """Exact Banzhaf values ``(G, F + 1)`` (or interaction values ``(G, F + 1, F + 1)``) of one
    row by enumerating coalitions: of the path-dependent game :func:`subset_values` without
    ``background``, else of the hybrid games ``f(x_S, r_notS)`` averaged over its rows."""
    x = _as_row(ens, x)
    players = _players(ens, None)
    m = len(players)
    if background is None:
        games = [subset_values(ens, x, players)]
        bias = games[0][:, 0] + ens.base_score
    else:
        games = [_hybrid_values(ens, x, r, players) for r in np.asarray(background, np.float64)]
        bias = np.mean([v[:, 0] for v in games], axis=0)
    values, pairs = _banzhaf_from_games(games, m) if m else (np.zeros((ens.num_groups, 0)),) * 2
    return _banzhaf_layout(ens, players, values, pairs, bias, interactions)


def brute_force_banzhaf_rows(
    ens: Ensemble, X: np.ndarray, background: np.ndarray | None = None, *, interactions=False
) -> np.ndarray:
    """:func:`brute_force_banzhaf` of every row: ``(n, G, F + 1)`` / ``(n, G, F + 1, F + 1)``."""
    X = np.asarray(X, dtype=np.float64)
    rows = [brute_force_banzhaf(ens, x, background, interactions=interactions) for x in X]
    return np.stack(rows)


__all__ += ["brute_force_banzhaf", "brute_force_banzhaf_rows"]
