"""Input encoding: raw input values -> the float32 values the kernels compare, exactly.

The kernels compare float32 values with float32 split values. That is exact for models whose
library compares in float32 (XGBoost, CatBoost, scikit-learn's trees and forests), but LightGBM
and HistGradientBoosting compare float64 inputs with float64 thresholds that are often training
values: rounding such an input to float32 can move it across a threshold.

For those models (``Ensemble.threshold64`` set) every numeric feature is encoded by its rank
among the model's own thresholds of that feature. With ``T`` the sorted distinct float64
thresholds of feature ``j`` and ``r(x) = #{t in T : t <= x}``, ``x < T[i]`` holds exactly when
``r(x) < i + 1``, so the split ``x < T[i]`` becomes ``r(x) < i + 1`` on small integers, which
float32 holds exactly: the float32 kernels then take every branch the float64 model takes, on
every backend, at the cost of one binary search per input value (:meth:`InputEncoding.apply`).

The encoding also reads the model's missing-value sentinel (XGBoost's ``missing=``, compared in
float32 as XGBoost does) as NaN, and records what the input side must know of the model's own
conventions: which features are categorical, and how its library stores column names.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from distshap.inputs import array_module
from distshap.models.ensemble import Ensemble, UnsupportedModelError

__all__ = ["InputEncoding", "encode_ensemble"]

#: Distinct thresholds a feature may have: ranks up to 2**24 are exact in float32.
MAX_RANKS = (1 << 24) - 1


@dataclass(frozen=True, eq=False)
class InputEncoding:
    """How raw input columns become the float32 values the kernels compare.

    Attributes
    ----------
    missing_value : float
        Input value read as missing besides NaN (compared in float32); NaN for none.
    rank_features : int32 (m,)
        Features encoded by their rank among ``rank_thresholds`` (compared in float64).
    rank_offsets : int64 (m + 1,)
        Range of each rank feature's sorted distinct thresholds in ``rank_thresholds``.
    rank_thresholds : float64 (n_thresholds,)
    categorical : int32 (c,)
        Features the model treats as categorical (a pandas category column is refused elsewhere).
    library : str
        The model's library (``"xgboost"``, ``"lightgbm"``, ``"sklearn"``, ``"catboost"``, ...):
        whose conventions DataFrame inputs follow (stored column names, unseen categories).
    category_lists : tuple of tuple or None
        LightGBM's ``pandas_categorical``: the category lists of the training frame's category
        columns, in column order. LightGBM codes the ``k``-th category column of any frame by
        the ``k``-th list, whatever feature it feeds; distshap does the same.
    """

    missing_value: float = math.nan
    rank_features: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    rank_offsets: np.ndarray = field(default_factory=lambda: np.zeros(1, np.int64))
    rank_thresholds: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float64))
    categorical: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    library: str = "other"
    category_lists: tuple | None = None

    @property
    def name_style(self) -> str:
        """``"lightgbm"`` where the library stores spaces in names as ``_``, else ``"exact"``."""
        return "lightgbm" if self.library == "lightgbm" else "exact"

    @property
    def float64(self) -> bool:
        """Whether inputs must reach :meth:`apply` in float64 (some feature compares in it)."""
        return bool(self.rank_features.size)

    @property
    def categorical_rule(self) -> str | None:
        """How the library reads a categorical value that is no category code, where the
        kernels' rule (``int(x)`` for ``x >= 0``, any negative value unknown) differs from it:
        ``"truncate"`` (LightGBM takes ``int(x)`` towards zero: ``(-1, 0)`` is category 0),
        ``"integers"`` (scikit-learn's encoder: a value that is no integer is an unknown
        category, read as missing) or ``None``. :func:`distshap.inputs.model_matrix` applies
        it: the margin of the additivity check reads the same values.
        """
        if not self.categorical.size:
            return None
        return {"lightgbm": "truncate", "sklearn": "integers"}.get(self.library)

    @property
    def identity(self) -> bool:
        """Whether :meth:`apply` is a plain cast to float32."""
        return not self.float64 and math.isnan(self.missing_value)

    @property
    def input_dtype(self) -> np.dtype:
        """The dtype inputs should keep until :meth:`apply` (float64 when any rank feature)."""
        return np.dtype(np.float64 if self.float64 else np.float32)

    def arrays(self) -> dict[str, np.ndarray]:
        """The arrays (and the sentinel as an array) that identify the encoding, for digests."""
        return {
            "missing_value": np.array([self.missing_value], np.float64),
            "rank_features": self.rank_features,
            "rank_offsets": self.rank_offsets,
            "rank_thresholds": self.rank_thresholds,
            "categorical": self.categorical,
            "library": np.frombuffer(self.library.encode(), np.uint8),
            "category_lists": np.frombuffer(repr(self.category_lists).encode(), np.uint8),
        }

    def apply(self, X: Any) -> Any:
        """Encode a 2-D NumPy or CuPy matrix of raw values into a C-contiguous float32 one.

        ``X`` keeps its array module (NumPy in, NumPy out; CuPy in, CuPy out). Pass float64
        inputs of a model where :attr:`float64` holds: a float32 copy has already lost what the
        model compares.
        """
        xp = array_module(X)
        if self.identity:
            return xp.ascontiguousarray(X, dtype=np.float32)
        out = xp.array(X, dtype=np.float32, order="C", copy=True)
        if not math.isnan(self.missing_value):
            out[out == np.float32(self.missing_value)] = np.nan
        every = xp.asarray(self.rank_thresholds)  # one copy per call (to the GPU for CuPy)
        for m, j in enumerate(self.rank_features.tolist()):
            lo, hi = int(self.rank_offsets[m]), int(self.rank_offsets[m + 1])
            thresholds = every[lo:hi]
            column = X[:, j].astype(np.float64, copy=False)
            ranks = xp.searchsorted(thresholds, column, side="right").astype(np.float32)
            out[:, j] = xp.where(xp.isnan(out[:, j]), np.float32(np.nan), ranks)
        return out


def encode_ensemble(ensemble: Ensemble) -> tuple[Ensemble, InputEncoding]:
    """The ensemble with float64 thresholds replaced by ranks, and the matching encoding.

    Models that compare in float32 (``threshold64`` is None) come back unchanged, with an
    encoding that only reads their missing-value sentinel.

    Raises
    ------
    UnsupportedModelError
        When a feature has more distinct thresholds than float32 ranks can hold (2**24 - 1).
    """
    conventions = dict(
        missing_value=float(ensemble.missing_value),
        categorical=_categorical_features(ensemble),
        library=ensemble.model_kind.split(":", 1)[0],
        category_lists=_category_lists(ensemble),
    )
    if ensemble.threshold64 is None:
        return ensemble, InputEncoding(**conventions)
    numeric = (ensemble.left >= 0) & ~ensemble.is_categorical
    nodes = np.flatnonzero(numeric)
    features = ensemble.feature[nodes].astype(np.int64)
    values = ensemble.threshold64[nodes]
    # sort by (feature, threshold); distinct pairs give each feature's sorted thresholds
    order = np.lexsort((values, features))
    f_sorted, v_sorted = features[order], values[order]
    new = np.ones(order.shape[0], dtype=bool)
    new[1:] = (f_sorted[1:] != f_sorted[:-1]) | (v_sorted[1:] != v_sorted[:-1])
    distinct = np.cumsum(new) - 1  # index of each sorted node's distinct (feature, value)
    rank_features, first = np.unique(f_sorted[new], return_index=True)
    rank_offsets = np.append(first, int(new.sum())).astype(np.int64)
    per_feature = np.diff(rank_offsets)
    if per_feature.size and per_feature.max() > MAX_RANKS:
        j = int(rank_features[np.argmax(per_feature)])
        raise UnsupportedModelError(
            f"feature {j} has {int(per_feature.max()):,} distinct split values; exact float64 "
            f"comparison supports at most {MAX_RANKS:,} per feature"
        )
    # rank of each node's threshold within its feature, 1-based: x < T[i] <=> r(x) < i + 1
    feature_start = rank_offsets[np.searchsorted(rank_features, f_sorted)]
    threshold = ensemble.threshold.copy()
    threshold[nodes[order]] = (distinct - feature_start + 1).astype(np.float32)
    encoding = InputEncoding(
        **conventions,
        rank_features=rank_features.astype(np.int32),
        rank_offsets=rank_offsets,
        rank_thresholds=np.ascontiguousarray(v_sorted[new]),
    )
    return replace(ensemble, threshold=threshold), encoding


def _categorical_features(ensemble: Ensemble) -> np.ndarray:
    """Features split categorically, declared categorical, or with stored training categories."""
    split = ensemble.feature[(ensemble.left >= 0) & ensemble.is_categorical]
    declared = [j for j, t in enumerate(ensemble.feature_types or ()) if t == "c"]
    stored = list((ensemble.extra.get("category_values") or {}).keys())
    both = np.concatenate([split, np.asarray(declared + stored, dtype=np.int64)])
    return np.unique(both).astype(np.int32)


def _category_lists(ensemble: Ensemble) -> tuple | None:
    lists = ensemble.extra.get("pandas_categorical")
    if not ensemble.model_kind.startswith("lightgbm") or not lists:
        return None
    return tuple(tuple(categories) for categories in lists)
