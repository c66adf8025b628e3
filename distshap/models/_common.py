"""Helpers every loader shares: threshold conversions, node-array assembly, model-wide bounds.

Loaders convert each library's split rule to the :class:`~distshap.models.ensemble.Ensemble`
convention ``x < t`` goes left. Libraries that send ``x <= thr`` left need a converted
threshold: in float64 for models that compare float64 inputs (LightGBM, HistGradientBoosting,
kept in ``threshold64``) and in float32 for the float32 kernels (``threshold``). Both
conversions are exact, and they live here once so that every loader rounds the same way.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

__all__ = [
    "EMPTY_CATS",
    "MAX_FEATURES",
    "assemble_trees",
    "malformed_is_value_error",
    "check_num_features",
    "le_threshold_to_lt64",
    "le_threshold_to_lt_float32",
    "lt64_to_float32",
]

#: The empty category list of numeric splits and leaves (never written to).
EMPTY_CATS = np.zeros(0, dtype=np.int32)
EMPTY_CATS.setflags(write=False)

#: Most input features a model may declare: one row of SHAP values then holds 2**24 + 1
#: float64 values (128 MiB). A larger count is a corrupt file or a model no dense input fits.
MAX_FEATURES = 1 << 24


def check_num_features(num_features: int, what: str = "the model") -> int:
    """Return ``num_features`` if ``0 <= num_features <= MAX_FEATURES``, else raise ValueError."""
    n = int(num_features)
    if not 0 <= n <= MAX_FEATURES:
        raise ValueError(
            f"{what} declares {n:,} input features; distshap supports 0 to {MAX_FEATURES:,} "
            "(a larger count is a corrupt file, or a model for sparse inputs, which distshap "
            "does not take)"
        )
    return n


F = TypeVar("F", bound=Callable[..., Any])


def malformed_is_value_error(what: str, fix: str) -> Callable[[F], F]:
    """Decorate a document converter: structure errors become one ``ValueError``.

    A document of the right kind but the wrong shape (a number where a list belongs, a missing
    key deep inside, an infinite count) raises ``TypeError`` / ``KeyError`` / ``IndexError`` /
    ``AttributeError`` / ``OverflowError`` somewhere in a converter; the caller gets a
    ``ValueError`` saying the ``what`` is malformed and the ``fix``, with the cause chained.
    """

    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def inner(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except (TypeError, KeyError, IndexError, AttributeError, OverflowError) as exc:
                raise ValueError(f"malformed {what} ({type(exc).__name__}: {exc}); {fix}") from exc

        return inner  # type: ignore[return-value]

    return wrap


def le_threshold_to_lt64(threshold: np.ndarray | float) -> np.ndarray:
    """``t`` (float64) with ``x <= threshold  <=>  x < t`` for every non-NaN float64 ``x``.

    ``t`` is the next float64 above ``threshold``. The one exception is ``threshold = +inf``
    (``t = +inf``), where ``x = +inf`` is sent right instead of left.
    """
    thr = np.asarray(threshold, dtype=np.float64)
    return np.nextafter(thr, np.inf)


def lt64_to_float32(t64: np.ndarray | float) -> np.ndarray:
    """``t`` (float32) with ``x < t64  <=>  x < t`` for every non-NaN float32 ``x``.

    ``t`` is the smallest float32 not below ``t64`` (``+inf`` above the float32 range).
    """
    t64 = np.asarray(t64, dtype=np.float64)
    with np.errstate(over="ignore"):
        f = np.atleast_1d(t64.astype(np.float32))
        up = f.astype(np.float64) < np.atleast_1d(t64)
        f[up] = np.nextafter(f[up], np.float32(np.inf))
    return f.reshape(t64.shape)


def le_threshold_to_lt_float32(threshold: np.ndarray | float) -> np.ndarray:
    """Convert ``x <= threshold`` (double comparison) into ``x < t`` on float32 inputs.

    Parameters
    ----------
    threshold : array_like of float64
        Thresholds of splits that send ``x <= threshold`` left, compared in double precision.

    Returns
    -------
    numpy.ndarray of float32
        ``t`` such that for every non-NaN float32 ``x``: ``x <= threshold  <=>  x < t``
        (``x = +inf`` at ``threshold = +inf`` excepted); ``t`` is the successor of the largest
        float32 not above ``threshold``.
    """
    return lt64_to_float32(le_threshold_to_lt64(threshold))


def assemble_trees(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Concatenate per-tree node arrays (local child indices) into :class:`Ensemble` fields.

    Parameters
    ----------
    parts : list of dict
        One dict per tree with ``left``, ``right`` (local indices, -1 at leaves), ``feature``,
        ``threshold``, ``default_left``, ``is_categorical``, ``cat_sizes`` (number of listed
        categories per node), ``cat_values`` (the listed categories, node after node),
        ``value`` and ``cover``; and ``threshold64`` in every part or in none.

    Returns
    -------
    dict
        The node fields of :class:`Ensemble` plus ``tree_offsets`` (and ``threshold64``
        when the parts carry it).
    """
    sizes = np.array([p["left"].shape[0] for p in parts], dtype=np.int64)
    tree_offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)

    def cat(key: str) -> np.ndarray:
        return np.concatenate([np.asarray(p[key]) for p in parts])

    shift = np.repeat(tree_offsets[:-1], sizes)
    left = cat("left").astype(np.int64)
    right = cat("right").astype(np.int64)
    left = np.where(left >= 0, left + shift, -1).astype(np.int32)
    right = np.where(right >= 0, right + shift, -1).astype(np.int32)
    cat_offsets = np.concatenate([[0], np.cumsum(cat("cat_sizes"))]).astype(np.int64)
    out = {
        "left": left,
        "right": right,
        "feature": cat("feature").astype(np.int32),
        "threshold": cat("threshold").astype(np.float32),
        "default_left": cat("default_left").astype(bool),
        "is_categorical": cat("is_categorical").astype(bool),
        "cat_offsets": cat_offsets,
        "cat_values": cat("cat_values").astype(np.int32),
        "value": cat("value").astype(np.float64),
        "cover": cat("cover").astype(np.float64),
        "tree_offsets": tree_offsets,
    }
    with64 = sum("threshold64" in p for p in parts)
    if with64 not in (0, len(parts)):
        raise ValueError("assemble_trees: threshold64 must be given for every tree or for none")
    if with64:
        out["threshold64"] = cat("threshold64").astype(np.float64)
    return out
