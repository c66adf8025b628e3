"""Summary plots of SHAP values with matplotlib alone (for users without the shap package).

:func:`interaction_heatmap` draws the strongest feature pairs of an interaction summary
(:func:`distshap.pair_interactions.interaction_summary`) as a heat map.

:func:`summary_plot` takes the arrays :meth:`distshap.TreeExplainer.shap_values` returns (shap's
layout by default, XGBoost's with ``layout="xgboost"``) and draws either the mean |SHAP| per
feature as a horizontal bar chart (stacked by class for multiclass models) or a beeswarm-like
scatter: one row per feature, one dot per explained row at its SHAP value, coloured by the
feature's value. It builds a
:class:`matplotlib.figure.Figure` directly (no pyplot, no GUI backend), so it works headless;
save it with ``fig.savefig("summary.png")``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = [
    "MAX_IMAGE_PIXELS",
    "check_image_size",
    "heatmap_size",
    "interaction_heatmap",
    "mean_abs_shap",
    "summary_plot",
    "summary_size",
]

#: Pixels along a side of a saved figure: matplotlib's raster backend draws less than 2**16
#: (a vector format's heat map image is drawn at the same resolution).
MAX_IMAGE_PIXELS = (1 << 16) - 1


def summary_size(n_features: int, max_display: int) -> tuple[float, float]:
    """Figure size (inches) of :func:`summary_plot` for ``n_features`` features."""
    rows = min(n_features, max_display) + (1 if n_features > max_display else 0)
    return 8.0, 0.4 * rows + 1.5


def heatmap_size(n_features: int, max_display: int) -> tuple[float, float]:
    """Largest figure size (inches) of :func:`interaction_heatmap` for ``n_features``."""
    size = 1.6 + 0.38 * min(n_features, max_display)
    return size + 1.4, size


def check_image_size(size: tuple[float, float], dpi: Any, what: str = "dpi") -> None:
    """Refuse a ``dpi`` (``what`` names it) that is no positive number, or that would make an
    image of ``size`` inches (one more for labels) too large to save."""
    if isinstance(dpi, bool) or not isinstance(dpi, (int, float, np.integer, np.floating)):
        raise TypeError(f"{what} {dpi!r}: pass a number of dots per inch, e.g. 150")
    if not dpi > 0:
        raise ValueError(f"{what} {dpi} must be > 0 (dots per inch, e.g. 150)")
    largest = max(size) + 1.0
    if largest * dpi > MAX_IMAGE_PIXELS:
        raise ValueError(
            f"{what} {dpi} makes an image of about {largest * dpi:,.0f} pixels along a side of "
            f"{largest:.1f} inches; matplotlib saves at most {MAX_IMAGE_PIXELS:,}: use "
            f"{what} {int(MAX_IMAGE_PIXELS // largest)} or less"
        )


def _as_groups(shap_values: Any, layout: str = "shap") -> np.ndarray:
    """SHAP values in ``layout`` -> float64 ``(n, G, F)`` without a bias column.

    ``"shap"``: ``(n, F)`` / ``(n, F, G)``; ``"xgboost"``: ``(n, F+1)`` / ``(n, G, F+1)``, the
    bias last.
    """
    from distshap.layouts import check_layout

    check_layout(layout)
    phi = np.asarray(shap_values.get() if hasattr(shap_values, "get") else shap_values)
    if phi.ndim == 2:
        phi = phi[:, None, :] if layout == "xgboost" else phi[:, :, None]
    smallest = 2 if layout == "xgboost" else 1
    if phi.ndim != 3 or phi.shape[2 if layout == "xgboost" else 1] < smallest:
        want = "(n, F+1) or (n, G, F+1)" if layout == "xgboost" else "(n, F) or (n, F, G)"
        raise ValueError(
            f"shap_values has shape {phi.shape}: pass the {want} array "
            f"TreeExplainer(..., layout={layout!r}).shap_values returns"
        )
    if layout == "xgboost":
        return phi[:, :, :-1].astype(np.float64)
    return phi.transpose(0, 2, 1).astype(np.float64)


def mean_abs_shap(shap_values: Any, layout: str = "shap") -> np.ndarray:
    """Mean |SHAP value| per output group and feature, ``(G, F)`` (no bias column)."""
    return np.abs(_as_groups(shap_values, layout)).mean(axis=0)


def _check_width(n_features: int, data: Any, feature_names: Any, layout: str) -> None:
    """The values' feature count agrees with ``data`` and ``feature_names`` (else the layout
    was misread: a bias column taken for a feature, or the last feature for the bias)."""
    widths = {
        "data": None if data is None else np.shape(data)[-1],
        "feature_names": None if feature_names is None else len(feature_names),
    }
    for what, width in widths.items():
        if width is not None and width != n_features:
            other = "xgboost" if layout == "shap" else "shap"
            raise ValueError(
                f"shap_values read in layout={layout!r} has {n_features} features but {what} "
                f"has {width}: pass layout={other!r} if the values are in that layout"
            )


def _swarm_offsets(x: np.ndarray, n_bins: int = 80, width: float = 0.4) -> np.ndarray:
    """Vertical offsets spreading dots of similar x like a beeswarm (deterministic)."""
    n = x.shape[0]
    if n == 0:
        return np.zeros(0)
    lo, hi = float(np.min(x)), float(np.max(x))
    span = hi - lo if hi > lo else 1.0
    bins = np.minimum(((x - lo) / span * n_bins).astype(np.int64), n_bins - 1)
    order = np.argsort(bins, kind="stable")
    counts = np.bincount(bins, minlength=n_bins)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n) - starts[bins[order]]
    # alternate above / below the centre line: 0, +1, -1, +2, -2, ...
    signed = np.where(rank % 2 == 1, (rank + 1) // 2, -(rank // 2)).astype(np.float64)
    scale = width / max(1.0, float(counts.max()) / 2)
    return signed * scale


def _figure_class(what: str) -> Any:
    """matplotlib's ``Figure``, or an ImportError that says how to install it."""
    try:
        from matplotlib.figure import Figure
    except ImportError as err:
        raise ImportError(
            f"{what} plots need matplotlib: `pip install matplotlib` (or distshap[plot])"
        ) from err
    return Figure


def _names(feature_names: Sequence[str] | None, n_features: int) -> list[str]:
    """The feature names as strings (default ``f0, f1, ...``), one per feature."""
    names = [str(f) for f in feature_names] if feature_names is not None else None
    if names is None:
        names = [f"f{j}" for j in range(n_features)]
    if len(names) != n_features:
        raise ValueError(
            f"{len(names)} feature names for {n_features} features: pass one name per column"
        )
    return names


def _draw_bars(
    ax: Any,
    importance: np.ndarray,
    groups: list[int],
    shown: np.ndarray,
    rest: np.ndarray,
    y: np.ndarray,
    class_names: Sequence[str] | None,
) -> None:
    """Mean |SHAP| bars, one row per shown feature (plus the rest summed), stacked by group."""
    rows = y.shape[0]
    left = np.zeros(rows)
    cmap = _colormap("tab10")
    for i, g in enumerate(groups):
        vals = importance[i, shown]
        if rest.size:
            vals = np.append(vals, importance[i, rest].sum())
        label = None
        if len(groups) > 1:
            label = class_names[g] if class_names is not None else f"class {g}"
        ax.barh(y, vals, left=left, color=cmap(i % 10), label=label)
        left += vals
    ax.set_xlabel("mean |SHAP value| (margin)")
    if len(groups) > 1:
        ax.legend(loc="lower right", frameon=False)


def _draw_beeswarm(
    fig: Any,
    ax: Any,
    phi: np.ndarray,
    data: Any,
    shown: np.ndarray,
    rest: np.ndarray,
    y: np.ndarray,
    max_points: int,
) -> None:
    """One swarm of dots per shown feature (``phi``: ``(n, F)`` of one group), coloured by
    the feature's value (the rest summed, grey)."""
    n, n_features = phi.shape
    X = np.asarray(data.get() if hasattr(data, "get") else data, dtype=np.float64)
    if X.shape != (n, n_features):
        raise ValueError(f"data has shape {X.shape} but the SHAP values need ({n}, {n_features})")
    take = np.linspace(0, n - 1, min(n, max_points)).astype(np.int64)
    cmap = _colormap("coolwarm")
    points = None
    for row, j in zip(y, list(shown) + ([None] if rest.size else []), strict=True):
        if j is None:
            x_vals = phi[take][:, rest].sum(axis=1)
            colour = np.full(take.size, np.nan)
        else:
            x_vals = phi[take, j]
            colour = _normalise(X[take, j])
        offsets = _swarm_offsets(x_vals)
        nan = np.isnan(colour)
        ax.scatter(x_vals[nan], row + offsets[nan], s=6, color="#999999", linewidths=0)
        points = ax.scatter(
            x_vals[~nan], row + offsets[~nan], s=6, c=colour[~nan], cmap=cmap,
            vmin=0.0, vmax=1.0, linewidths=0,
        )  # fmt: skip
    ax.axvline(0.0, color="#666666", linewidth=0.8, zorder=0)
    ax.set_xlabel("SHAP value (impact on the margin)")
    if points is not None:
        bar = fig.colorbar(points, ax=ax, ticks=[0, 1], aspect=40, pad=0.02)
        bar.ax.set_yticklabels(["low", "high"])
        bar.set_label("feature value")


def summary_plot(
    shap_values: Any,
    data: Any = None,
    feature_names: Sequence[str] | None = None,
    kind: str = "auto",
    max_display: int = 20,
    group: int | None = None,
    class_names: Sequence[str] | None = None,
    title: str | None = None,
    max_points: int = 20_000,
    layout: str = "shap",
) -> Any:
    """A summary plot of SHAP values.

    Parameters
    ----------
    shap_values : ndarray
        As :meth:`TreeExplainer.shap_values` returns: ``(n, F)`` / ``(n, F, G)`` (shap's
        layout) or ``(n, F+1)`` / ``(n, G, F+1)`` (``layout="xgboost"``).
    data : ndarray, optional
        ``(n, F)`` feature values, colouring the beeswarm dots (grey where NaN).
    feature_names : sequence of str, optional
        Default ``f0, f1, ...``.
    kind : {"auto", "bar", "beeswarm"}
        ``"auto"``: beeswarm when ``data`` is given and there is one output group (or
        ``group`` is chosen), bar chart otherwise.
    max_display : int
        Features shown, by decreasing mean |SHAP| (the rest are summed into one row).
    group : int, optional
        Output group (class) to show; default all groups (bar chart, stacked) or group 0.
    class_names : sequence of str, optional
        Legend labels of the groups (default ``class 0, class 1, ...``).
    title : str, optional
    max_points : int
        The beeswarm draws at most this many rows (an evenly spaced subset).
    layout : {"shap", "xgboost"}
        The layout of ``shap_values`` (the explainer's ``layout``).

    Returns
    -------
    matplotlib.figure.Figure
    """
    Figure = _figure_class("summary")
    if kind not in ("auto", "bar", "beeswarm"):
        raise ValueError(f"unknown kind {kind!r}: use 'auto', 'bar' or 'beeswarm'")
    if max_display < 1:
        raise ValueError(f"max_display={max_display} must be >= 1")
    phi = _as_groups(shap_values, layout)
    n, n_groups, n_features = phi.shape
    _check_width(n_features, data, feature_names, layout)
    names = _names(feature_names, n_features)
    if group is not None and not 0 <= group < n_groups:
        raise ValueError(f"group={group} but the values have {n_groups} output group(s)")
    if kind == "auto":
        kind = "beeswarm" if data is not None and (n_groups == 1 or group is not None) else "bar"
    if kind == "beeswarm" and data is None:
        raise ValueError("a beeswarm colours dots by feature value: pass data=X (or kind='bar')")

    groups = [group] if group is not None else list(range(n_groups))
    if kind == "beeswarm":
        groups = groups[:1]
    importance = np.abs(phi[:, groups, :]).mean(axis=0)  # (len(groups), F)
    order = np.argsort(-importance.sum(axis=0), kind="stable")
    shown = order[:max_display]
    rest = order[max_display:]
    rows = len(shown) + (1 if rest.size else 0)
    labels = [names[j] for j in shown] + (
        [f"sum of {rest.size} other features"] if rest.size else []
    )
    y = np.arange(rows)[::-1]  # most important on top

    fig = Figure(figsize=summary_size(n_features, max_display))
    ax = fig.add_subplot()
    if kind == "bar":
        _draw_bars(ax, importance, groups, shown, rest, y, class_names)
    else:
        _draw_beeswarm(fig, ax, phi[:, groups[0]], data, shown, rest, y, max_points)
    ax.set_yticks(y)
    ax.set_yticklabels(labels)
    ax.set_ylim(-0.7, rows - 0.3)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    if title is None and n_groups > 1 and kind == "beeswarm":
        title = class_names[groups[0]] if class_names is not None else f"class {groups[0]}"
    if title:
        ax.set_title(title)
    fig.tight_layout()
    return fig


def _strongest_features(strength: np.ndarray, max_display: int) -> list[int]:
    """Features of the strongest pairs (``strength`` symmetric, zero diagonal), in the order
    their first pair appears (pairs by strength descending, ties by ``(i, j)``), at most
    ``max_display``."""
    iu, ju = np.triu_indices(strength.shape[0], 1)
    vals = strength[iu, ju]
    order = np.lexsort((ju, iu, -vals))
    chosen: list[int] = []
    for o in order[vals[order] > 0]:
        for f in (int(iu[o]), int(ju[o])):
            if f not in chosen and len(chosen) < max_display:
                chosen.append(f)
        if len(chosen) >= max_display:
            break
    return chosen


def _summary_groups(summary: Any) -> np.ndarray:
    """An interaction summary as float64 ``(G, F+1, F+1)``, checked."""
    M = np.asarray(summary.get() if hasattr(summary, "get") else summary, dtype=np.float64)
    if M.ndim == 2:
        M = M[None]
    if M.ndim != 3 or M.shape[1] != M.shape[2] or M.shape[1] < 3:
        raise ValueError(
            f"summary has shape {M.shape}: pass the (F+1, F+1) or (G, F+1, F+1) array "
            "interaction_summary returns (bias last)"
        )
    return M


def _annotate(ax: Any, shown: np.ndarray, top: float) -> None:
    """Each finite value written in its cell (white on the darker ones)."""
    m = shown.shape[0]
    for a in range(m):
        for b in range(m):
            if np.isfinite(shown[a, b]):
                dark = abs(shown[a, b]) > 0.6 * top
                ax.text(b, a, f"{shown[a, b]:.3g}", ha="center", va="center", fontsize=7,
                        color="white" if dark else "black")  # fmt: skip


def interaction_heatmap(
    summary: Any,
    feature_names: Sequence[str] | None = None,
    max_display: int = 20,
    group: int | None = None,
    class_names: Sequence[str] | None = None,
    title: str | None = None,
    show_diagonal: bool = False,
    annotate: bool | None = None,
) -> Any:
    """A heat map of the strongest feature pairs of an interaction summary.

    Parameters
    ----------
    summary : ndarray
        ``(F+1, F+1)`` or ``(G, F+1, F+1)`` as
        :func:`distshap.pair_interactions.interaction_summary` returns (mean ``|phi_ij|``, or
        mean ``phi_ij`` with ``signed=True``; bias last).
    feature_names : sequence of str, optional
        Default ``f0, f1, ...``.
    max_display : int
        Features shown at most: those of the strongest pairs (off-diagonal ``|value|``), taken
        pair by pair; shown in order of their total interaction with the others shown.
    group : int, optional
        Output group (class); default the sum over groups.
    class_names : sequence of str, optional
        Name of the shown group in the title.
    title : str, optional
    show_diagonal : bool
        Colour the diagonal (main effects ``phi_ii``, often far larger) too; default grey.
    annotate : bool, optional
        Write each value in its cell (default: when at most 12 features are shown).

    Returns
    -------
    matplotlib.figure.Figure
    """
    Figure = _figure_class("interaction")
    M = _summary_groups(summary)
    if isinstance(max_display, bool) or not isinstance(max_display, (int, np.integer)):
        raise TypeError(f"max_display must be an integer, got {type(max_display).__name__}")
    if max_display < 2:
        raise ValueError(f"max_display={max_display} must be >= 2 (a pair)")
    n_groups, n_features = M.shape[0], M.shape[1] - 1
    if group is not None and not 0 <= group < n_groups:
        raise ValueError(f"group={group} but the summary has {n_groups} output group(s)")
    names = _names(feature_names, n_features)
    values = (M[group] if group is not None else M.sum(axis=0))[:-1, :-1]
    strength = np.abs(values)
    np.fill_diagonal(strength, 0.0)
    chosen = _strongest_features(strength, int(max_display))
    if len(chosen) < 2:
        raise ValueError("the summary has no non-zero feature pair to show")
    sub = strength[np.ix_(chosen, chosen)]
    chosen = [chosen[i] for i in np.argsort(-sub.sum(axis=1), kind="stable")]
    shown = values[np.ix_(chosen, chosen)].copy()
    if not show_diagonal:
        np.fill_diagonal(shown, np.nan)
    signed = bool((values < 0).any())
    finite = np.abs(shown[np.isfinite(shown)])
    top = float(finite.max()) if finite.size and finite.max() > 0 else 1.0
    cmap = _colormap("coolwarm" if signed else "Reds").with_extremes(bad="#dddddd")
    m = len(chosen)
    fig = Figure(figsize=heatmap_size(m, m))
    ax = fig.add_subplot()
    image = ax.imshow(np.ma.masked_invalid(shown), cmap=cmap, vmin=-top if signed else 0.0,
                      vmax=top, interpolation="nearest")  # fmt: skip
    labels = [names[j] for j in chosen]
    ax.set_xticks(range(m))
    ax.set_yticks(range(m))
    ax.set_xticklabels(labels, rotation=90)
    ax.set_yticklabels(labels)
    if annotate is None:
        annotate = m <= 12
    if annotate:
        _annotate(ax, shown, top)
    bar = fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    bar.set_label(("mean SHAP interaction value" if signed else "mean |SHAP interaction value|")
                  + " (margin)")  # fmt: skip
    if title is None:
        if group is not None and n_groups > 1:
            title = class_names[group] if class_names is not None else f"class {group}"
        elif n_groups > 1:
            title = f"summed over {n_groups} classes"
    if title:
        ax.set_title(title)
    fig.tight_layout()
    return fig


def _colormap(name: str) -> Any:
    from matplotlib import colormaps

    return colormaps[name]


def _normalise(values: np.ndarray) -> np.ndarray:
    """Feature values -> [0, 1] between their 5th and 95th percentiles (NaN stays NaN)."""
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return np.full(values.shape, np.nan)
    lo, hi = np.percentile(finite, [5, 95])
    if hi <= lo:
        lo, hi = float(finite.min()), float(finite.max())
    if hi <= lo:
        return np.where(np.isnan(values), np.nan, 0.5)
    return np.clip((values - lo) / (hi - lo), 0.0, 1.0)
