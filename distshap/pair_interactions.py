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
  The steps (:func:`~distshap.pair_rows.summary_partial` per chunk,
  :func:`~distshap.pair_rows.combine_partials`, :func:`~distshap.pair_rows.finish_summary`)
  are those the Dask tree reduction takes (:mod:`distshap.cluster.dask_pairs`).
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

from distshap.inputs import is_dask
from distshap.pair_rows import finish_summary, summary_partial, top_interactions_rows

__all__ = ["interaction_summary", "top_interactions", "top_interactions_frame", "top_pairs"]


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
    else:
        pairs, values = top_interactions_rows(
            packed, X, k, backend, check_additivity=check_additivity, batch_rows=batch_rows,
            first_row=first_row,
        )  # fmt: skip
    G = packed.num_groups
    return _squeeze(pairs, squeeze, G), _squeeze(values, squeeze, G)


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
