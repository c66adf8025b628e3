"""In-memory rows explained whole or block by block, and values of the features used.

:meth:`~distshap.TreeExplainer.shap_values` runs its rows through :func:`run_blocks`: whole when
they fit, else in blocks of consecutive rows (rows are independent: the values are the same
bits either way). Blocks are taken for

* scipy.sparse rows (:class:`~distshap.sparse_blocks.SparseRows`): only one block is ever
  dense, so a matrix whose dense form would not fit in memory can be explained;
* ``features="used"``: the result is ``(n, G, U+1)``, the ``U`` features the model splits on
  and the bias, however wide the data (every other feature's value is exactly 0). The model
  over its used features (:func:`~distshap.sparse_blocks.used_model`: the same paths and bins,
  features renumbered) runs on those columns of each block, so no block is ever ``F`` wide;
  where it is not offered (interventional values), full-width blocks are cut to the columns;
* ``progress=True``: a progress bar step per block.

:class:`UsedFeatureValues` is what ``shap_values(X, features="used")`` returns: the values in
the explainer's layout over the used features, and those features' indices and names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from distshap.inputs import array_module, is_cupy
from distshap.layouts import check_output_fits, layout_values, progress_bar
from distshap.sparse_blocks import (
    DEFAULT_BLOCK_BYTES,
    SparseRows,
    block_rows,
    used_features,
    used_model,
    used_rows,
)

__all__ = [
    "FEATURES",
    "UsedFeatureValues",
    "feature_values",
    "output_columns",
    "run_blocks",
    "used_columns",
]

#: What ``shap_values(X, features=...)`` takes: every feature, or those the model splits on.
FEATURES = ("all", "used")


@dataclass(frozen=True)
class UsedFeatureValues:
    """SHAP values of the features a model splits on (``shap_values(X, features="used")``).

    Every feature no tree splits on has the value 0 in every row; these are the others.

    Attributes
    ----------
    values : ndarray, cupy.ndarray or dask.array.Array
        The explainer's layout with ``U`` feature columns instead of ``F``: shap's ``(n, U)``
        / ``(n, U, G)``; XGBoost's ``(n, U+1)`` / ``(n, G, U+1)``, the bias last. Without the
        row axis for one row. In shap's layout a strided view of the ``(n, G, U+1)`` result
        (the output is never copied: ``numpy.ascontiguousarray`` makes a contiguous copy).
    features : ndarray
        int64 ``(U,)``, increasing: column ``k`` of ``values`` is the model's feature
        ``features[k]`` (a column of ``X``).
    feature_names : tuple of str or None
        The model's names of those features, where it has names.
    num_features : int or None
        ``F``, the model's feature count.
    feature_axis : int
        The axis of ``values`` that runs over the features.
    """

    values: Any
    features: np.ndarray
    feature_names: tuple[str, ...] | None = None
    num_features: int | None = None
    feature_axis: int = -1

    def dense(self) -> Any:
        """The values over all ``F`` features (zeros where unused), as ``features="all"``
        gives them (in-memory values)."""
        F = len(self.features) if self.num_features is None else self.num_features
        return _spread(self.values, self.features, F, self.feature_axis)


def _spread(values: Any, features: np.ndarray, F: int, axis: int) -> Any:
    xp = array_module(values)
    U = len(features)
    bias = values.shape[axis] - U  # 1 in XGBoost's layout (bias last), else 0
    shape = list(values.shape)
    shape[axis] = F + bias
    out = xp.zeros(tuple(shape), dtype=values.dtype)
    moved_out, moved_in = xp.moveaxis(out, axis, 0), xp.moveaxis(values, axis, 0)
    moved_out[xp.asarray(features)] = moved_in[:U]
    if bias:
        moved_out[F] = moved_in[U]
    return out


def output_columns(packed: Any, features: Any) -> np.ndarray | None:
    """The output columns of ``features`` (``None``: all ``F + 1``; else the used features'
    indices and the bias ``F``), refusing an unknown value in one line."""
    if not (isinstance(features, str) and features in FEATURES):
        raise ValueError(
            f"features={features!r}: use 'all' (every feature, the default) or 'used' (only "
            "the features the model splits on, with their indices)"
        )
    if features == "all":
        return None
    return np.append(used_features(packed), packed.num_features).astype(np.int64)


def _select(part: Any, columns: np.ndarray | None, interactions: bool) -> Any:
    if columns is None:
        return part
    part = part[:, :, columns]
    return part[..., columns] if interactions else part


def used_columns(out: Any, packed: Any, features: Any, interactions: bool) -> Any:
    """``(n, G, F+1[, F+1])`` values (lazy Dask ones too) cut to ``features``' columns."""
    return _select(out, output_columns(packed, features), interactions)


def run_blocks(
    run: Any,
    n: int,
    model: Any,
    interactions: bool,
    raw: Any,
    progress: bool = False,
    features: str = "all",
    batch_rows: int = 65536,
    block_bytes: int = DEFAULT_BLOCK_BYTES,
) -> Any:
    """``run(start, stop)`` (values ``(b, G, F+1[, F+1])`` of rows ``start:stop``) over ``n`` rows.

    Parameters
    ----------
    run : callable
        ``run(start, stop)``: rows ``start:stop`` -> their full-width values;
        ``run(start, stop, rows, packed)``: the values of ``rows`` (those rows' used columns)
        under ``packed`` (the model over its used features, :func:`~distshap.sparse_blocks
        .used_model`).
    n : int
        Rows.
    model : PackedModel, or an object with ``packed`` and ``background`` attributes
        The model (with its background, interventional values are never cut short: they run
        at full width).
    interactions : bool
    raw : ndarray, cupy.ndarray or SparseRows
        The rows (their kind decides the blocks).
    progress : bool
        Blocks of at most ``batch_rows`` rows with a progress bar (host rows only).
    features : {"all", "used"}
        ``"used"``: only the used features' columns (and the bias): computed by the model over
        its used features, from those columns of the rows, where
        :func:`~distshap.sparse_blocks.used_model` offers it; else cut from full-width blocks.
    block_bytes : int
        For sparse rows and ``features="used"``: one block's dense rows and full-width output
        at most (:func:`~distshap.sparse_blocks.block_rows`; at least one row a block).

    Returns
    -------
    ndarray or cupy.ndarray
        float32 ``(n, G, C[, C])``, ``C`` = ``F + 1`` or ``U + 1``.

    Raises
    ------
    ValueError
        An unknown ``features``; an output larger than half of this machine's memory.
    """
    packed = getattr(model, "packed", model)
    columns = output_columns(packed, features)
    check_output_fits(n, packed, interactions, None if columns is None else len(columns))
    narrow = None if columns is None else used_model(packed, getattr(model, "background", None))
    sparse = isinstance(raw, SparseRows)
    step = n
    if sparse or columns is not None:
        F = packed.num_features if narrow is None else narrow.num_features
        width = F + 1
        per_row = packed.num_groups * width * (width if interactions else 1)
        budget = min(raw.block_bytes, block_bytes) if sparse else block_bytes
        step = block_rows(F, per_row, np.dtype(packed.encoding.input_dtype).itemsize, budget)
    if progress and not is_cupy(raw) and n > batch_rows:
        step = min(step, batch_rows)
    if step >= n and columns is None:
        return run(0, n)
    what = "interaction values" if interactions else "SHAP values"
    bar = progress_bar(n, what) if progress else None
    out = None
    try:
        for start in range(0, n, step):
            stop = min(start + step, n)
            if narrow is None:
                part = _select(run(start, stop), columns, interactions)
            else:
                part = run(start, stop, used_rows(raw, start, stop, columns[:-1]), narrow)
            if out is None:
                out = array_module(part).empty((n,) + part.shape[1:], dtype=part.dtype)
            out[start:stop] = part
            if bar is not None:
                bar.update(stop - start)
    finally:
        if bar is not None:
            bar.close()
    return out


def feature_values(out: Any, one_row: bool, layout: str, features: str, packed: Any) -> Any:
    """``shap_values``' return: :func:`~distshap.layouts.layout_values` of ``out``, as it is
    for ``features="all"``, a :class:`UsedFeatureValues` for ``"used"`` (its values views of
    ``out``: no copy of the output)."""
    if features == "all":
        return layout_values(out, one_row, layout, False)
    groups = out.shape[1]
    if layout == "xgboost":
        values = out[:, 0] if groups == 1 else out
    else:  # shap's: no bias column, groups last
        values = out[:, 0, :-1] if groups == 1 else out[:, :, :-1].transpose(0, 2, 1)
    values = values[0] if one_row else values
    used = used_features(packed)
    names = packed.feature_names
    names = None if names is None else tuple(str(names[j]) for j in used)
    # the features axis: last but for shap's layout of several groups (groups last)
    axis = -1 if layout == "xgboost" or packed.num_groups == 1 else -2
    return UsedFeatureValues(values, used, names, packed.num_features, axis)
