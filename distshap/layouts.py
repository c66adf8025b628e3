"""What the explainer returns: output layouts, ``shap.Explanation`` and its lazy Dask twin.

The kernels give ``(n, G, F+1)`` / ``(n, G, F+1, F+1)`` (XGBoost's ``pred_contribs`` /
``pred_interactions`` with the groups axis kept). Here they become shap's layout (the default:
no bias column, groups last, as ``shap.TreeExplainer.shap_values`` returns them), XGBoost's
(``layout="xgboost"``: bias last, groups before features; groups axis dropped for one group,
row axis for one row), or a ``shap.Explanation`` (:class:`DaskExplanation` for Dask input) with
shap's feature names and ``data``.
"""

from __future__ import annotations

import functools
import os
import time
from typing import Any

import numpy as np

from distshap.frames import select_model_columns
from distshap.inputs import ExplainInput, is_cupy, is_dask, is_frame, model_matrix
from distshap.sparse_blocks import has_sparse_chunks, used_features

__all__ = [
    "DEFAULT_LAYOUT",
    "LAYOUTS",
    "DaskExplanation",
    "base_block",
    "check_layout",
    "check_output_fits",
    "distinct_names",
    "explanation",
    "explanation_names",
    "import_shap",
    "layout_block",
    "layout_values",
    "shap_layout",
]

#: Layouts of :meth:`~distshap.TreeExplainer.shap_values` and
#: :meth:`~distshap.TreeExplainer.shap_interaction_values`: ``"xgboost"`` (``pred_contribs``:
#: bias last, groups before features) or ``"shap"`` (shap's ``shap_values``: no bias column,
#: groups last).
LAYOUTS = ("xgboost", "shap")
#: The layout a TreeExplainer gets when none is given: shap's, so that code written for
#: ``shap.TreeExplainer`` runs unchanged.
DEFAULT_LAYOUT = "shap"


def layout_values(out: Any, one_row: bool, layout: str, interactions: bool) -> Any:
    """``(n, G, F+1[, F+1])`` -> the arrays ``shap_values`` / ``shap_interaction_values``
    return in ``layout``.

    A lazy result of :func:`distshap.cluster.explain_dask` gets its layout inside the tasks
    that compute its blocks (:func:`_dask_layout`), not from Dask operations on top.
    """
    if is_dask(out) and not one_row:
        fused = _dask_layout(out, layout, interactions)
        if fused is not None:
            return fused
    if layout == "xgboost":
        out = out[:, 0] if out.shape[1] == 1 else out
        return out[0] if one_row else out
    values, _ = shap_layout(out, interactions)
    return values[0] if one_row else values


def layout_block(block: Any, layout: str, interactions: bool) -> Any:
    """A block ``(n, G, F+1[, F+1])`` -> the same rows in ``layout`` (views: no copy).

    XGBoost's: the groups axis dropped for one group. shap's: no bias column (nor row), groups
    last; for interactions ``[n, j, i, g]`` = ``block[n, g, i, j]``, shap's XGBoost layout.
    NumPy, CuPy or Dask.
    """
    groups = block.shape[1]
    if layout == "xgboost":
        return block[:, 0] if groups == 1 else block
    F = block.shape[2] - 1
    if interactions:
        values = block[:, :, :F, :F]
        return values[:, 0] if groups == 1 else values.swapaxes(1, 3)
    values = block[:, :, :F]
    return values[:, 0] if groups == 1 else values.transpose(0, 2, 1)


def _layout_step(out: Any, layout: str, interactions: bool) -> tuple[Any, tuple, Any]:
    """:func:`layout_block` as a per-block step of a lazy result ``out``: the step, the chunks
    of its blocks' axes after the rows, and its meta."""
    from dask.array.utils import meta_from_array

    groups, width = out.shape[1], out.shape[2]
    columns = width if layout == "xgboost" else width - 1
    tail = ((columns,),) * (2 if interactions else 1)
    tail += ((groups,),) if groups > 1 else ()
    then = functools.partial(layout_block, layout=layout, interactions=interactions)
    return then, tail, meta_from_array(out._meta, ndim=len(tail) + 1, dtype=out.dtype)


def _dask_layout(out: Any, layout: str, interactions: bool) -> Any:
    """:func:`layout_block` of each block of a lazy result, inside the task computing it
    (:func:`~distshap.cluster.graph.then_blocks`), else in a layer on top
    (:func:`~distshap.cluster.graph.blocks_then`); None where neither can be done."""
    if layout == "xgboost" and out.shape[1] > 1:
        return out
    from distshap.cluster.graph import blocks_then, then_blocks

    then, tail, meta = _layout_step(out, layout, interactions)
    fused = then_blocks(out, then, tail, meta, layout)
    return blocks_then(out, then, tail, meta, layout) if fused is None else fused


def explanation(
    out: Any, inp: ExplainInput, packed: Any, names: Any, interactions: bool, start: float
) -> Any:
    """Values ``(n, G, F+1[, F+1])`` -> a ``shap.Explanation`` in shap's layouts (a
    :class:`DaskExplanation` for Dask input); ``start``: ``time.perf_counter()`` of the call."""
    if is_dask(inp.rows):
        values, base = _dask_shap_layout(out, interactions)
        return DaskExplanation(values, base, dask_data(inp.rows, packed), names)
    values, base = shap_layout(out, interactions)
    if is_cupy(values):
        values, base = values.get(), base.get()
    data = explanation_data(inp, packed)
    if inp.one_row:
        values, base, data = values[0], base[0], data[0]
    shap = import_shap()
    return shap.Explanation(
        values=values,
        base_values=base,
        data=data,
        feature_names=names,
        compute_time=time.perf_counter() - start,
    )


def distinct_names(names: Any) -> list[str]:
    """``names`` as strings, each distinct: a repeat gets the first free ``"_1"``, ``"_2"``, ...

    The first occurrence keeps its name and a suffix is never a name already in the list, so
    ``["a", "bias", "bias"]`` (a feature named ``bias`` and the bias column) gives
    ``["a", "bias", "bias_1"]``: output columns (Parquet, Zarr attributes, a
    ``shap.Explanation``'s feature names) never share a name.
    """
    names = [str(n) for n in names]
    taken = set(names)
    out: list[str] = []
    emitted: set[str] = set()
    for name in names:
        if name in emitted:
            k = 1
            while f"{name}_{k}" in taken:
                k += 1
            name = f"{name}_{k}"
            taken.add(name)
        emitted.add(name)
        out.append(name)
    return out


def explanation_names(inp: ExplainInput, packed: Any, data_names: Any) -> list[str] | None:
    """shap's feature names: the input's columns, else the background frame's (or the user's,
    ``data_names``); then the model's own names (where shap sets none); made distinct
    (:func:`distinct_names`)."""
    F = packed.num_features
    names = None
    if inp.columns is not None and is_frame(inp.rows):
        names = select_model_columns(inp.rows, F, packed.feature_names, packed.encoding.name_style)
    elif inp.columns is not None and len(inp.columns) == F:
        names = inp.columns
    elif data_names is not None:
        names = data_names
    elif packed.feature_names is not None and len(packed.feature_names) == F:
        names = packed.feature_names
    return None if names is None else distinct_names(names)


def check_layout(layout: Any) -> None:
    if not (isinstance(layout, str) and layout in LAYOUTS):
        raise ValueError(
            f"layout={layout!r}: use 'shap' (shap_values as shap returns them: (n, F), "
            "(n, F, G)) or 'xgboost' (XGBoost's pred_contribs: (n, F+1), (n, G, F+1), bias last)"
        )


def check_output_fits(
    n_rows: int, packed: Any, interactions: bool, columns: int | None = None
) -> None:
    """Refuse an in-memory result larger than half of this machine's memory, with a way out
    (``columns``: output columns a group, ``F + 1`` when ``None``)."""
    width = packed.num_features + 1 if columns is None else columns
    per_row = packed.num_groups * width * (width if interactions else 1) * 4
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not available on this platform
        return
    if n_rows * per_row > memory // 2:
        what = "interaction values" if interactions else "SHAP values"
        raise ValueError(
            f"{what} of {n_rows:,} rows need {n_rows * per_row / 2**30:.1f} GiB "
            f"({per_row:,} bytes a row), more than half of this machine's "
            f"{memory / 2**30:.0f} GiB: explain fewer rows at a time, or a Dask array "
            "(distshap.start_cluster) and write the result with .to_zarr(...)"
            + _used_hint(packed, interactions, width)
        )


def _used_hint(packed: Any, interactions: bool, width: int) -> str:
    """The used-features way out of a too-large SHAP values output, where it is narrower."""
    used = len(used_features(packed))
    if interactions or used + 1 >= width:
        return ""
    return f"; or shap_values(X, features='used'): the {used:,} features the model splits on"


class DaskExplanation:
    """The lazy ``explainer(X)`` of a Dask collection: shap's fields as Dask arrays.

    ``shap.Explanation`` holds NumPy arrays (its slicing and plots index them eagerly), so a
    Dask input's explanation stays this light container until it is computed.

    Attributes
    ----------
    values, base_values, data : dask.array.Array
        shap's layouts (see :meth:`TreeExplainer.__call__`).
    feature_names : list of str or None
    output_names : None
        Unset, as shap's TreeExplainer leaves them (``shap.Explanation`` names multiple
        outputs ``"Output 0"``, ... itself).
    """

    def __init__(self, values: Any, base_values: Any, data: Any, feature_names: Any) -> None:
        self.values = values
        self.base_values = base_values
        self.data = data
        self.feature_names = feature_names
        self.output_names = None

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.values.shape)

    def compute(self, **kwargs: Any) -> Any:
        """Compute the arrays (``dask.compute(**kwargs)``) -> a ``shap.Explanation``."""
        import dask

        shap = import_shap()
        self._check_client()
        values, base, data = dask.compute(self.values, self.base_values, self.data, **kwargs)
        values, base, data = (host(a) for a in (values, base, data))
        return shap.Explanation(
            values=values, base_values=base, data=data, feature_names=self.feature_names
        )

    def persist(self, **kwargs: Any) -> DaskExplanation:
        """The same explanation with its arrays persisted (``dask.persist(**kwargs)``)."""
        import dask

        self._check_client()
        values, base, data = dask.persist(self.values, self.base_values, self.data, **kwargs)
        return DaskExplanation(values, base, data, self.feature_names)

    def _check_client(self) -> None:
        """Refuse, in one line, arrays whose model lives only on a client no longer running.

        Their tasks depend on keys outside their graph (the model shipped through the
        explainer's client): without that client, Dask would fail chunk by chunk on a missing
        dependency.
        """
        graph = self.values.__dask_graph__()
        needed = set()
        for task in graph.values():
            needed.update(getattr(task, "dependencies", ()))
        outside = needed - set(graph.keys())
        if not outside:
            return
        try:
            from distributed import default_client

            client = default_client()
        except (ImportError, ValueError):  # no distributed, or no client running
            client = None
        held = client is not None and client.status == "running"
        if held and all(key in client.futures for key in outside):
            return
        raise RuntimeError(
            "this DaskExplanation was made through a Dask client that is closed (or is not the "
            "current one), and the model it needs lived on that client's cluster: compute it "
            "before closing the client, or call the explainer again with a running one "
            "(explainer.client = distributed.Client(...); explainer(X))"
        )

    def __repr__(self) -> str:
        return f"DaskExplanation(values={self.values!r})"


def import_shap() -> Any:
    try:
        import shap
    except ImportError as err:
        raise ImportError(
            "calling a TreeExplainer returns a shap.Explanation and needs the shap package: "
            "`pip install shap`, or use explainer.shap_values(X) for a plain array"
        ) from err
    return shap


def host(a: Any) -> np.ndarray:
    return a.get() if is_cupy(a) else np.asarray(a)


def shap_layout(out: Any, interactions: bool) -> tuple[Any, Any]:
    """``(n, G, F+1[, F+1])`` -> shap's ``values`` and ``base_values`` (NumPy, CuPy or Dask)."""
    values = layout_block(out, "shap", interactions)
    base = base_block(out, interactions)
    if not is_dask(values):
        xp = np if not is_cupy(values) else __import__("cupy")
        values = xp.ascontiguousarray(values)
        base = xp.ascontiguousarray(base)
    return values, base


def base_block(block: Any, interactions: bool) -> Any:
    """A block ``(n, G, F+1[, F+1])`` -> its rows' bias, float64 ``(n,)`` / ``(n, G)``."""
    F = block.shape[2] - 1
    base = block[:, :, F, F] if interactions else block[:, :, F]
    return (base[:, 0] if block.shape[1] == 1 else base).astype(np.float64)


def _dask_shap_layout(out: Any, interactions: bool) -> tuple[Any, Any]:
    """:func:`shap_layout` of a lazy result: two layers on top of it, a task a block each
    (:func:`~distshap.cluster.graph.blocks_then`), or Dask's operations where they cannot be."""
    from dask.array.utils import meta_from_array

    from distshap.cluster.graph import blocks_then

    groups = out.shape[1]
    group_tail = ((groups,),) if groups > 1 else ()
    values = blocks_then(out, *_layout_step(out, "shap", interactions), "explanation-values")
    base = blocks_then(
        out, functools.partial(base_block, interactions=interactions), group_tail,
        meta_from_array(out._meta, ndim=len(group_tail) + 1, dtype=np.float64),
        "explanation-base",
    )  # fmt: skip
    if values is None or base is None:
        return shap_layout(out, interactions)
    return values, base


def _own_numbers(frame: Any) -> np.ndarray | None:
    """A pandas frame's own values where every column holds numbers (not booleans), else None
    (for a Dask frame's empty ``_meta``: the values' dtype)."""
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    if all(is_numeric_dtype(t) and not is_bool_dtype(t) for t in frame.dtypes):
        values = frame.to_numpy()
        if values.dtype.kind in "biuf":
            return values
    return None


def explanation_data(inp: ExplainInput, packed: Any) -> np.ndarray:
    """``Explanation.data``: the input's own values where it is plain numbers, else the values
    the model reads (category codes; NaN for missing, sparse and DMatrix inputs); for CatBoost
    categorical features the values given (an object array)."""
    rows = inp.rows
    if isinstance(rows, np.ndarray) and rows.dtype.kind in "biuf":
        return rows
    if is_frame(rows):
        cols = select_model_columns(
            rows, packed.num_features, packed.feature_names, packed.encoding.name_style
        )
        frame = rows[cols].infer_objects()  # a Series row arrives as an object-typed frame
        values = _own_numbers(frame)
        if values is not None:
            return values
    if packed.encoding.library == "catboost" and packed.feature_categories:
        from distshap.models.catboost_categorical import user_values  # values, not codes

        given = frame if is_frame(rows) else rows if inp.given is None else inp.given
        return user_values(given, packed.feature_categories)
    raw = model_matrix(rows, packed)
    return raw.get() if is_cupy(raw) else np.asarray(raw)


def _frame_block_values(partition: Any, packed: Any) -> Any:
    """A Dask DataFrame partition -> the model's values of its rows (on a worker)."""
    return model_matrix(partition, packed, allow_empty=True)


def _given_block_values(partition: Any, packed: Any) -> Any:
    """A Dask DataFrame partition of a CatBoost model with categorical features -> its values
    as given (an object array, :func:`explanation_data`'s in memory; on a worker)."""
    from distshap.models.catboost_categorical import user_values

    return user_values(partition, packed.feature_categories)


def _numeric_block_values(partition: Any) -> Any:
    """A Dask DataFrame partition of numbers only -> its own values (on a worker)."""
    return partition.to_numpy()


def dask_data(X: Any, packed: Any) -> Any:
    """The lazy ``data`` of a Dask input, as :func:`explanation_data` in memory: an array as
    given, a frame of numbers its own values, another frame its model values (for CatBoost
    categorical features the values given, an object array)."""
    import dask.array as da

    if isinstance(X, da.Array) and not has_sparse_chunks(X):
        return X
    if isinstance(X, da.Array):  # scipy.sparse chunks: their model values, as in memory
        meta = np.empty((0, packed.num_features), dtype=packed.encoding.input_dtype)
        return X.rechunk({1: -1}).map_blocks(_frame_block_values, packed, meta=meta)
    cols = select_model_columns(
        X, packed.num_features, packed.feature_names, packed.encoding.name_style
    )
    own = _own_numbers(X[cols]._meta)
    if own is not None:
        meta = np.empty((0, packed.num_features), dtype=own.dtype)
        return X[cols].map_partitions(_numeric_block_values, meta=meta, enforce_metadata=False)
    if packed.encoding.library == "catboost" and packed.feature_categories:
        meta = np.empty((0, packed.num_features), dtype=object)
        return X[cols].map_partitions(_given_block_values, packed, meta=meta,
                                      enforce_metadata=False)  # fmt: skip
    meta = np.empty((0, packed.num_features), dtype=packed.encoding.input_dtype)
    return X[cols].map_partitions(_frame_block_values, packed, meta=meta, enforce_metadata=False)


def progress_bar(total: int, desc: str) -> Any:
    """A ``tqdm`` bar over rows, or ``None`` when tqdm is not installed."""
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc=desc, unit="rows", unit_scale=True, leave=False)
