"""TreeExplainer: the public entry point tying loader, paths, packing and kernels together.

The model is converted and bin-packed once, when the explainer is built; every call then only
runs kernels. Inputs may be NumPy, pandas, CuPy or Dask; the backend is chosen per explainer.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from distshap.kernels import cuda_available, get_backend
from distshap.models import load_model
from distshap.packed import PackedModel, build_packed_model
from distshap.paths import extract_paths
from distshap.tables import DEFAULT_MAX_TABLE_FEATURES, DEFAULT_TABLE_BUDGET_BYTES

__all__ = ["TreeExplainer", "to_float32_matrix"]


def _is_dask(X: Any) -> bool:
    return type(X).__module__.split(".")[0] in ("dask", "dask_expr", "dask_cudf")


def _is_cupy(X: Any) -> bool:
    return type(X).__module__.split(".")[0] == "cupy"


def to_float32_matrix(
    X: Any, num_features: int, feature_names: tuple[str, ...] | None = None
) -> np.ndarray:
    """Validate ``X`` and return a C-contiguous float32 NumPy (or CuPy) matrix.

    pandas DataFrames are reordered by the model's feature names when both are known;
    category columns become their codes (missing -> NaN), as XGBoost reads them.

    Raises
    ------
    TypeError
        Non-numeric data.
    ValueError
        Not 2-D, no rows, or a feature count / names that do not match the model.
    """
    if hasattr(X, "dtypes") and hasattr(X, "columns"):
        X = _frame_to_numpy(X, num_features, feature_names)
    elif _is_cupy(X):
        import cupy

        if X.dtype.kind not in "biuf":
            raise TypeError(f"X has dtype {X.dtype}; SHAP values need numeric input")
        X = cupy.ascontiguousarray(X, dtype=cupy.float32)
    else:
        X = np.asarray(X)
        if X.dtype.kind not in "biuf":
            raise TypeError(
                f"X has dtype {X.dtype}; SHAP values need numeric input: convert strings "
                "to numbers, or pass a pandas DataFrame with category columns"
            )
        X = np.ascontiguousarray(X, dtype=np.float32)
    if X.ndim != 2:
        raise ValueError(
            f"X must be 2-D (n_rows, n_features), got {X.ndim}-D shape {X.shape}; "
            "for one row use X.reshape(1, -1)"
        )
    if X.shape[0] == 0:
        raise ValueError("X has no rows: nothing to explain")
    if X.shape[1] != num_features:
        raise ValueError(
            f"X has {X.shape[1]} features but the model expects {num_features}: pass the "
            "columns the model was trained on, in the same order"
        )
    return X


def _frame_to_numpy(df: Any, num_features: int, names: tuple[str, ...] | None) -> np.ndarray:
    columns = [str(c) for c in df.columns]
    if names is not None and len(names) == num_features and columns != list(names):
        missing = [n for n in names if n not in columns]
        if missing:
            raise ValueError(
                f"X lacks the model's feature column(s) {missing[:5]}: pass a DataFrame with "
                f"the columns {list(names)[:10]}{'...' if len(names) > 10 else ''}"
            )
        df = df[list(names)]
    out = np.empty((len(df), df.shape[1]), dtype=np.float32)
    for j, (name, dtype) in enumerate(df.dtypes.items()):
        col = df.iloc[:, j]
        if str(dtype) == "category":
            codes = col.cat.codes.to_numpy().astype(np.float32)
            codes[codes < 0] = np.nan
            out[:, j] = codes
        elif getattr(dtype, "kind", "O") in "biuf":
            out[:, j] = col.to_numpy(dtype=np.float32, na_value=np.nan)
        else:
            raise TypeError(
                f"column {name!r} has dtype {dtype}: convert it to numbers or to a pandas "
                "'category' column"
            )
    return out


class TreeExplainer:
    """Exact SHAP values and SHAP interaction values of a tree ensemble.

    Parameters
    ----------
    model
        An XGBoost ``Booster`` or sklearn estimator, a saved XGBoost ``.json`` / ``.ubj``
        file, a LightGBM / scikit-learn / CatBoost tree model, or an ``Ensemble``.
    backend : {"auto", "cpu", "cuda"}
        Kernel backend. ``"auto"`` uses the GPU when one is visible, the CPU otherwise.
    algorithm : {"bfd", "ffd", "nf", "none"}
        Bin-packing heuristic for the 32-lane warps.
    table_budget_bytes, max_table_features : int
        Pattern-table cost model (:mod:`distshap.tables`); 0 bytes disables tables.
    client : distributed.Client, optional
        Client used for Dask inputs (default: the current client).

    Attributes
    ----------
    expected_value : float or ndarray
        The bias column: base score plus mean prediction (per output group).
    packed : PackedModel
        The preprocessed, bin-packed model shared by every backend.
    """

    def __init__(
        self,
        model: Any,
        backend: str = "auto",
        algorithm: str = "bfd",
        table_budget_bytes: int = DEFAULT_TABLE_BUDGET_BYTES,
        max_table_features: int = DEFAULT_MAX_TABLE_FEATURES,
        client: Any = None,
    ) -> None:
        if backend not in ("auto", "cpu", "cuda"):
            raise ValueError(f"unknown backend {backend!r}: use 'auto', 'cpu' or 'cuda'")
        if backend == "cuda":
            get_backend("cuda")  # fail early with a clear message
        self.ensemble = load_model(model)
        self.packed: PackedModel = build_packed_model(
            extract_paths(self.ensemble),
            algorithm=algorithm,
            table_budget_bytes=table_budget_bytes,
            max_table_features=max_table_features,
            feature_names=self.ensemble.feature_names,
        )
        self.backend = backend
        self.client = client

    @property
    def expected_value(self) -> float | np.ndarray:
        ev = self.packed.expected_value
        return float(ev[0]) if ev.shape[0] == 1 else ev.copy()

    @property
    def num_features(self) -> int:
        return self.packed.num_features

    @property
    def feature_names(self) -> tuple[str, ...] | None:
        return self.packed.feature_names

    def _local_backend(self, X: Any) -> str:
        if self.backend != "auto":
            return self.backend
        return "cuda" if (_is_cupy(X) or cuda_available()) else "cpu"

    def _explain(self, X: Any, interactions: bool) -> Any:
        if _is_dask(X):
            from distshap.cluster import explain_dask

            out = explain_dask(
                self.packed, X, interactions=interactions, backend=self.backend, client=self.client
            )
        else:
            X = to_float32_matrix(X, self.num_features, self.feature_names)
            backend = self._local_backend(X)
            kernels = get_backend(backend)
            fn = kernels.interaction_values if interactions else kernels.shap_values
            out = fn(self.packed, X)
            if backend == "cuda" and not _is_cupy(X):
                out = out.get()
        return out[:, 0] if self.packed.num_groups == 1 else out

    def shap_values(self, X: Any) -> Any:
        """SHAP values in margin space, XGBoost's ``pred_contribs`` layout.

        Parameters
        ----------
        X : ndarray, DataFrame, cupy.ndarray, dask Array or dask DataFrame
            ``(n, F)`` rows to explain. NaN is a missing value.

        Returns
        -------
        ndarray
            float32 ``(n, F + 1)``, or ``(n, G, F + 1)`` for ``G > 1`` output groups; the bias
            is the last column. Same array family as ``X`` (lazy for Dask).
        """
        return self._explain(X, interactions=False)

    def shap_interaction_values(self, X: Any) -> Any:
        """SHAP interaction values, XGBoost's ``pred_interactions`` layout.

        Returns
        -------
        ndarray
            float32 ``(n, F + 1, F + 1)``, or ``(n, G, F + 1, F + 1)`` for ``G > 1`` groups;
            row ``i`` sums to the SHAP value of feature ``i``; the bias is ``[F, F]``.
        """
        return self._explain(X, interactions=True)
