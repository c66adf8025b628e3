"""Which features interact: per-row top pairs and a data-set ranking, without the full matrices.

SHAP interaction values are a ``(F+1, F+1)`` matrix per row and output group (fashion_mnist,
785 columns and 10 classes: 24.6 MB a row). Two features interact only through the paths they
share, so the kernels write each row's values into its *pair slots*
(:mod:`distshap.pair_slots`: the feature pairs that share a path of the group, and the
features on a path) and these functions reduce the slots batch by batch:

* :func:`top_interactions` - per row and output group, the ``k`` pairs ``i < j`` (features,
  bias excluded) of largest ``|phi_ij|``, ``phi_ij`` the entry ``[i, j]`` (upper triangle) of
  :func:`distshap.dispatch.explain_rows` ``(interactions=True)``, with the same bits. Order:
  ``|phi_ij|`` descending, ties by ``(i, j)`` ascending (lexicographic), so the result equals
  sorting the whole upper triangle with that rule: where a row has fewer than ``k`` non-zero
  pairs, the first zero pairs in ``(i, j)`` order follow.
* :func:`interaction_summary` - over all rows, the ``(G, F+1, F+1)`` mean of ``|phi_ij|`` (or
  of ``phi_ij``, ``signed=True``): off-diagonal ``[i, j]`` and ``[j, i]`` both hold the mean of
  the upper entry, the diagonal the mean of ``phi_ii``, ``[F, F]`` the bias (float32, as the
  rows hold it). Each value is added as the exact integer ``round(value * 2**s)`` (``s``:
  :func:`distshap.pair_slots.interaction_shift`; CUDA values are multiples of ``2**-s``, so
  there it is exact) in 32-bit halves summed in int64, so the sums, hence the result's bits,
  do not depend on batches, Dask chunks or GPUs.
  :func:`summary_partial` / :func:`combine_partials` / :func:`finish_summary` are the steps the
  Dask tree reduction takes (:mod:`distshap.cluster.dask_pairs`).
* :func:`top_pairs` - the strongest pairs of a summary as a table;
  :func:`top_interactions_frame` - per-row top pairs as a tidy table.

Cost against the full matrices, per row: the same path arithmetic (O(T L D**3) for the DP,
one table row per element pair for table paths), but ``S`` slots (:meth:`PairSlots.num_slots`)
instead of ``G (F+1)**2`` entries accumulated, converted and stored, then ``O(S)`` to select
(top-k) or add (summary) per row; memory is the output plus a batch of ``S`` values a row
(``batch_rows``), whatever the number of rows. The additivity check runs as for the full
matrices (each row's entries, a pair counted twice, plus the bias, sum to the margin).
Interventional (background) values are not supported here.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit, prange

from distshap.additivity import check_additivity
from distshap.inputs import array_module, is_cupy, is_dask, model_matrix
from distshap.kernels import get_backend, resolve_backend
from distshap.kernels.margin import predict_margin
from distshap.pair_slots import PairSlots, interaction_shift, pair_slots
from distshap.parallel import run_parallel

__all__ = [
    "CPU_BATCH_BYTES",
    "combine_partials",
    "finish_summary",
    "interaction_summary",
    "select_top_pairs",
    "summary_partial",
    "top_interactions",
    "top_interactions_frame",
    "top_pairs",
]

#: Slot values (float32) of one CPU row batch at most, in bytes.
CPU_BATCH_BYTES = 64 << 20


# ------------------------------------------------------------------------------------------
# Slot values -> top pairs, sums (CPU; the CUDA backend has kernels of its own)
# ------------------------------------------------------------------------------------------


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
            t = count
            i = 0
            j = 1
            e = a
            while t < k:
                while e < mid and (slot_i[e] < i or (slot_i[e] == i and slot_j[e] < j)):
                    e += 1
                if not (e < mid and slot_i[e] == i and slot_j[e] == j and values[r, e] != 0):
                    pairs[r, g, t, 0] = i
                    pairs[r, g, t, 1] = j
                    out[r, g, t] = 0.0
                    t += 1
                j += 1
                if j == num_features:
                    i += 1
                    j = i + 1


def _check_k(k: Any, num_features: int) -> int:
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

    Returns ``pairs`` int32 ``(n, G, k, 2)`` and ``values`` float32 ``(n, G, k)`` in the order of
    the module docstring.
    """
    k = _check_k(k, slots.num_features)
    values = np.ascontiguousarray(values, dtype=np.float32)
    n, G = values.shape[0], slots.num_groups
    pairs = np.empty((n, G, k, 2), np.int32)
    out = np.empty((n, G, k), np.float32)
    run_parallel(_select_kernel, values, slots.slot_offsets, slots.num_pairs, slots.slot_i,
                 slots.slot_j, slots.num_features, k, pairs, out)  # fmt: skip
    return pairs, out


@njit(parallel=True, nogil=True, cache=True)
def _summary_kernel(values, scale, signed, hi, lo, bad):
    n, S = values.shape
    block = 1024
    limit = 2.0**62
    for b in prange((S + block - 1) // block):
        e1 = min(S, (b + 1) * block)
        for r in range(n):
            for e in range(b * block, e1):
                v = values[r, e]
                if v == 0.0:
                    continue
                x = np.float64(v) * scale
                if not abs(x) < limit:  # NaN, or beyond the model's bound (a bug)
                    bad[0] = 1
                    continue
                q = np.int64(np.rint(x))
                if not signed and q < 0:
                    q = -q
                hi[e] += q >> 32
                lo[e] += q & 0xFFFFFFFF


@njit(parallel=True, nogil=True, cache=True)
def _row_sums_kernel(values, slot_offsets, num_pairs, expected_value, sums, scales):
    n = values.shape[0]
    G = num_pairs.shape[0]
    for r in prange(n):
        for g in range(G):
            a = slot_offsets[g]
            mid = a + num_pairs[g]
            total = 0.0
            absolute = 0.0
            for e in range(a, slot_offsets[g + 1]):
                v = np.float64(values[r, e])
                weight = 2.0 if e < mid else 1.0  # [i, j] and [j, i]
                total += weight * v
                absolute += weight * abs(v)
            sums[r, g] = total + expected_value[g]
            scales[r, g] = absolute + abs(expected_value[g])


def _row_sums(values: np.ndarray, slots: PairSlots, expected_value: np.ndarray):
    n = values.shape[0]
    sums = np.empty((n, slots.num_groups), np.float64)
    scales = np.empty_like(sums)
    run_parallel(_row_sums_kernel, values, slots.slot_offsets, slots.num_pairs,
                 np.asarray(expected_value, np.float64), sums, scales)  # fmt: skip
    return sums, scales


def _check_sums(sums: Any, scales: Any, margin: Any, first_row: int) -> None:
    """The additivity check on per-(row, group) sums: ``check_additivity`` sums its values and
    their absolute values, so two columns ``(t + a) / 2`` and ``(t - a) / 2`` (``a >= |t|``)
    stand for a row of total ``t`` and absolute sum ``a``."""
    xp = array_module(sums)
    columns = xp.stack([(sums + scales) / 2, (sums - scales) / 2], axis=-1)
    check_additivity(columns, margin, "interaction values", first_row)


# ------------------------------------------------------------------------------------------
# One device's rows
# ------------------------------------------------------------------------------------------


def _prepare(packed: Any, X: Any, backend: str) -> tuple[Any, Any, str]:
    raw = model_matrix(X, packed, allow_empty=True)
    rows = packed.encoding.apply(raw)
    return raw, rows, resolve_backend(backend, cupy_data=is_cupy(rows))


def _cpu_batches(n: int, slots: PairSlots, batch_rows: int | None) -> int:
    if batch_rows is None:
        batch_rows = CPU_BATCH_BYTES // (4 * max(1, slots.num_slots))
    batch_rows = int(batch_rows)
    if batch_rows < 1:
        raise ValueError(f"batch_rows must be >= 1, got {batch_rows}")
    return max(1, min(batch_rows, max(n, 1)))


def _check_margin(packed: Any, raw: Any, sums: Any, scales: Any, first_row: int) -> None:
    if packed.margin is None:
        return
    if is_cupy(sums) and not is_cupy(raw):
        import cupy

        raw = cupy.asarray(raw)
    _check_sums(sums, scales, predict_margin(packed.margin, raw), first_row)


def _cpu_slot_batches(packed: Any, raw: Any, rows: Any, slots: PairSlots,
                      batch_rows: int | None, check: bool, first_row: int):  # fmt: skip
    """``(r0, r1, slot values)`` of the CPU kernel batch by batch, each batch checked for
    additivity first (when ``check``)."""
    n = int(rows.shape[0])
    step = _cpu_batches(n, slots, batch_rows)
    cpu = get_backend("cpu")
    for r0 in range(0, n, step):
        r1 = min(n, r0 + step)
        slot_values = cpu.interaction_slot_values(packed, rows[r0:r1], slots)
        if check:
            _check_margin(packed, raw[r0:r1],
                          *_row_sums(slot_values, slots, packed.expected_value),
                          first_row + r0)  # fmt: skip
        yield r0, r1, slot_values


def _squeeze(a: Any, squeeze: bool, G: int, axis: int = 1) -> Any:
    return a.squeeze(axis) if squeeze and G == 1 else a


def top_interactions(
    packed: Any,
    X: Any,
    k: int = 10,
    backend: str = "auto",
    *,
    check_additivity: bool = True,
    batch_rows: int | None = None,
    squeeze: bool = False,
    first_row: int = 0,
    client: Any = None,
) -> tuple[Any, Any]:
    """The ``k`` strongest feature pairs of every row (and output group).

    Parameters
    ----------
    packed : PackedModel
    X : ndarray, DataFrame, cupy.ndarray, scipy.sparse, dask Array or dask DataFrame
        ``(n, F)`` rows, as :func:`distshap.inputs.prepare_rows` takes them.
    k : int
        Pairs per row and group, ``1 <= k <= F (F - 1) / 2``.
    backend : {"auto", "cpu", "cuda"}
    check_additivity : bool
        Each row's interaction values (all entries, bias included) must sum to the model's
        margin (:mod:`distshap.additivity`), as for the full matrices.
    batch_rows : int, optional
        Rows per batch (default: about 64 MiB of slot values on CPU, the CUDA batch budget on
        GPU); results do not depend on it.
    squeeze : bool
        Drop the group axis of single-output models.
    first_row : int
        Row index of ``X[0]`` in a larger input (error messages).
    client : distributed.Client, optional
        For Dask input (default: the current client).

    Returns
    -------
    pairs : ndarray
        int32 ``(n, G, k, 2)``: ``pairs[r, g, t] = (i, j)``, ``i < j < F``.
    values : ndarray
        float32 ``(n, G, k)``: ``phi_ij``, the matrix entry ``[i, j]``, in descending
        ``|phi_ij|`` (ties: ``(i, j)`` ascending). NumPy, or CuPy for CuPy input, or lazy Dask
        arrays for Dask input (:func:`distshap.cluster.dask_pairs.top_interactions_dask`).
    """
    if is_dask(X):
        from distshap.cluster.dask_pairs import top_interactions_dask

        pairs, values = top_interactions_dask(
            packed, X, k, backend, client=client, check_additivity=check_additivity,
            batch_rows=batch_rows,
        )  # fmt: skip
        G = packed.num_groups
        return _squeeze(pairs, squeeze, G), _squeeze(values, squeeze, G)
    k = _check_k(k, packed.num_features)
    raw, rows, name = _prepare(packed, X, backend)
    slots = pair_slots(packed)
    n, G = int(rows.shape[0]), packed.num_groups
    if name == "cuda":
        from distshap.kernels.cuda import pairs as cuda_pairs

        get_backend("cuda")  # a clear error where no GPU is usable
        pairs, values, sums = cuda_pairs.top_interactions(
            packed, rows, slots, k, batch_rows, with_sums=check_additivity
        )
        if check_additivity:
            _check_margin(packed, raw, *sums, first_row)
        if not is_cupy(rows):
            pairs, values = _host(pairs), _host(values)
    else:
        pairs = np.empty((n, G, k, 2), np.int32)
        values = np.empty((n, G, k), np.float32)
        for r0, r1, slot_values in _cpu_slot_batches(packed, raw, rows, slots, batch_rows,
                                                     check_additivity, first_row):  # fmt: skip
            pairs[r0:r1], values[r0:r1] = select_top_pairs(slot_values, slots, k)
    return _squeeze(pairs, squeeze, G), _squeeze(values, squeeze, G)


def summary_partial(
    packed: Any,
    X: Any,
    signed: bool = False,
    backend: str = "auto",
    *,
    check_additivity: bool = True,
    batch_rows: int | None = None,
    first_row: int = 0,
) -> np.ndarray:
    """Exact sums over the rows of ``X``, the unit of the data-set reduction.

    Returns
    -------
    ndarray
        int64 ``(2, S + 1)``: ``[0, :S]`` and ``[1, :S]`` the high and low parts of each slot's
        sum of ``round(|value| * 2**s)`` (``value`` when ``signed``), the sum being ``hi * 2**32
        + lo`` with ``0 <= lo < 2**32``; ``[0, S]`` the number of rows. Partials add as integers
        (:func:`combine_partials`), exactly, in any grouping.
    """
    raw, rows, name = _prepare(packed, X, backend)
    slots = pair_slots(packed)
    n, S = int(rows.shape[0]), slots.num_slots
    out = np.zeros((2, S + 1), np.int64)
    out[0, S] = n
    if n == 0:
        return out
    if name == "cuda":
        from distshap.kernels.cuda import pairs as cuda_pairs

        get_backend("cuda")
        hi, lo, sums = cuda_pairs.summary_sums(
            packed, rows, slots, signed, batch_rows, with_sums=check_additivity
        )
        if check_additivity:
            _check_margin(packed, raw, *sums, first_row)
        out[0, :S], out[1, :S] = _host(hi), _host(lo)
    else:
        scale = 2.0 ** interaction_shift(packed)
        hi = np.zeros(S, np.int64)
        lo = np.zeros(S, np.int64)
        bad = np.zeros(1, np.int64)
        for _, _, slot_values in _cpu_slot_batches(packed, raw, rows, slots, batch_rows,
                                                   check_additivity, first_row):  # fmt: skip
            run_parallel(_summary_kernel, slot_values, scale, bool(signed), hi, lo, bad)
        if bad[0]:
            raise RuntimeError(
                "an interaction value is NaN or beyond the model's bound: a distshap bug, "
                "please report it with the model"
            )
        out[0, :S], out[1, :S] = hi, lo
    return _normalise(out)


def _normalise(partial: np.ndarray) -> np.ndarray:
    """Carry the low parts' upper bits into the high parts (``0 <= lo < 2**32``)."""
    S = partial.shape[1] - 1
    carry = partial[1, :S] >> 32
    partial[0, :S] += carry
    partial[1, :S] -= carry << 32
    return partial


def combine_partials(*partials: np.ndarray) -> np.ndarray:
    """The partial of the union of the rows of ``partials`` (exact integer sums)."""
    total = np.sum(np.stack(partials), axis=0, dtype=np.int64)
    return _normalise(total)


def finish_summary(partial: np.ndarray, packed: Any, signed: bool = False) -> np.ndarray:
    """The ``(G, F+1, F+1)`` float64 summary of a (combined) partial (module docstring)."""
    slots = pair_slots(packed)
    S = slots.num_slots
    partial = _normalise(np.array(partial, dtype=np.int64, copy=True))
    if partial.shape != (2, S + 1):
        raise ValueError(
            f"a partial of this model has shape {(2, S + 1)}, got {partial.shape}: pass the "
            "output of summary_partial or combine_partials for the same model"
        )
    n = int(partial[0, S])
    if n <= 0:
        raise ValueError("the summary of zero rows is undefined: pass at least one row")
    total = partial[0, :S].astype(np.float64) * 2.0**32 + partial[1, :S].astype(np.float64)
    mean = total * 2.0 ** -interaction_shift(packed) / n
    G, F1 = slots.num_groups, slots.num_features + 1
    out = np.zeros((G, F1, F1), np.float64)
    group = np.repeat(np.arange(G), np.diff(slots.slot_offsets))
    out[group, slots.slot_i, slots.slot_j] = mean
    out[group, slots.slot_j, slots.slot_i] = mean
    ev = np.asarray(packed.expected_value, np.float32).astype(np.float64)  # as the rows hold it
    out[:, F1 - 1, F1 - 1] = ev if signed else np.abs(ev)
    return out


def interaction_summary(
    packed: Any,
    X: Any,
    signed: bool = False,
    backend: str = "auto",
    *,
    check_additivity: bool = True,
    batch_rows: int | None = None,
    squeeze: bool = False,
    client: Any = None,
    split_every: int | None = None,
) -> Any:
    """Mean ``|phi_ij|`` (``signed``: mean ``phi_ij``) over the rows of ``X``, in one pass.

    Parameters
    ----------
    packed : PackedModel
    X : ndarray, DataFrame, cupy.ndarray, scipy.sparse, dask Array or dask DataFrame
        ``(n, F)`` rows, at least one.
    signed : bool
        Mean of the signed values instead of their absolute values.
    backend, check_additivity, batch_rows, squeeze, client
        As for :func:`top_interactions`.
    split_every : int, optional
        Fan-in of the Dask tree reduction (the result does not depend on it).

    Returns
    -------
    ndarray
        float64 ``(G, F+1, F+1)`` (module docstring), NumPy; for Dask input a lazy one-chunk
        Dask array. Bits do not depend on batches, chunks or the number of GPUs (they do on the
        backend: CPU and CUDA values differ in their last bits).
    """
    if is_dask(X):
        from distshap.cluster.dask_pairs import interaction_summary_dask

        out = interaction_summary_dask(
            packed, X, signed, backend, client=client, check_additivity=check_additivity,
            batch_rows=batch_rows, split_every=split_every,
        )  # fmt: skip
        return out[0] if squeeze and packed.num_groups == 1 else out
    partial = summary_partial(
        packed, X, signed, backend, check_additivity=check_additivity, batch_rows=batch_rows
    )
    out = finish_summary(partial, packed, signed)
    return out[0] if squeeze and packed.num_groups == 1 else out


# ------------------------------------------------------------------------------------------
# Tables
# ------------------------------------------------------------------------------------------


def _names(feature_names: Any, F: int) -> list[str]:
    if feature_names is None:
        return [f"f{j}" for j in range(F)]
    names = [str(f) for f in feature_names]
    if len(names) != F:
        raise ValueError(f"{len(names)} feature names for {F} features: pass one name a feature")
    return names


def _host(a: Any) -> np.ndarray:
    return a.get() if hasattr(a, "get") else np.asarray(a)


def top_pairs(summary: Any, n: int = 20, feature_names: Any = None, group: int | None = None):
    """The ``n`` strongest pairs ``i < j`` of a summary, as a pandas DataFrame.

    Parameters
    ----------
    summary : ndarray
        ``(F+1, F+1)`` or ``(G, F+1, F+1)`` from :func:`interaction_summary`.
    n : int
        Pairs listed (per group), non-zero ones only.
    feature_names : sequence of str, optional
        Default ``f0, f1, ...``.
    group : int, optional
        One output group; default every group (a ``group`` column; ``n`` pairs each).

    Returns
    -------
    pandas.DataFrame
        Columns ``[group,] rank, i, j, feature_i, feature_j, value``, by ``|value|`` descending,
        ties by ``(i, j)``.
    """
    import pandas as pd

    S = np.asarray(_host(summary), dtype=np.float64)
    if S.ndim == 2:
        S = S[None]
    if S.ndim != 3 or S.shape[1] != S.shape[2] or S.shape[1] < 3:
        raise ValueError(
            f"summary has shape {S.shape}: pass the (F+1, F+1) or (G, F+1, F+1) array "
            "interaction_summary returns"
        )
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n={n!r} must be a positive integer")
    G, F = S.shape[0], S.shape[1] - 1
    names = _names(feature_names, F)
    if group is not None and not 0 <= group < G:
        raise ValueError(f"group={group} but the summary has {G} output group(s)")
    iu, ju = np.triu_indices(F, 1)
    rows = []
    for g in [group] if group is not None else range(G):
        vals = S[g][iu, ju]
        order = np.lexsort((ju, iu, -np.abs(vals)))
        order = order[vals[order] != 0][:n]
        for rank, o in enumerate(order):
            rows.append((g, rank, int(iu[o]), int(ju[o]), names[iu[o]], names[ju[o]], vals[o]))
    frame = pd.DataFrame(rows, columns=["group", "rank", "i", "j", "feature_i", "feature_j",
                                        "value"])  # fmt: skip
    frame = frame.astype({"group": np.int64, "rank": np.int64, "i": np.int64, "j": np.int64})
    return frame if G > 1 and group is None else frame.drop(columns="group")


def top_interactions_frame(pairs: Any, values: Any, feature_names: Any = None,
                           first_row: int = 0):  # fmt: skip
    """Per-row top pairs (:func:`top_interactions`) as a tidy pandas DataFrame.

    One line per (row, [group,] rank): columns ``row, [group,] rank, i, j, feature_i,
    feature_j, value`` (``group`` when ``pairs`` has a group axis, ``(n, G, k, 2)``). Rows are
    numbered from ``first_row``. Names default to ``f0, f1, ...``.
    """
    import pandas as pd

    P = _host(pairs)
    V = _host(values)
    grouped = P.ndim == 4
    if not grouped:
        P, V = P[:, None], V[:, None]
    if P.ndim != 4 or P.shape[-1] != 2 or V.shape != P.shape[:3]:
        raise ValueError(
            f"pairs {tuple(_host(pairs).shape)} and values {tuple(_host(values).shape)} are not "
            "the (n[, G], k, 2) / (n[, G], k) arrays top_interactions returns"
        )
    n, G, k = V.shape
    row, group, rank = np.meshgrid(np.arange(n) + first_row, np.arange(G), np.arange(k),
                                   indexing="ij")  # fmt: skip
    i = P[..., 0].ravel().astype(np.int64)
    j = P[..., 1].ravel().astype(np.int64)
    F = int(max(P.max(initial=0) + 1, 2)) if feature_names is None else len(feature_names)
    names = np.asarray(_names(feature_names, F), dtype=object)
    data = {"row": row.ravel(), "group": group.ravel(), "rank": rank.ravel(), "i": i, "j": j,
            "feature_i": names[i], "feature_j": names[j], "value": V.ravel()}  # fmt: skip
    frame = pd.DataFrame(data)
    return frame if grouped else frame.drop(columns="group")
