"""TreeExplainer: the public entry point tying loader, paths, packing and kernels together.

The model is converted and bin-packed once, when the explainer is built; every call then only
runs kernels. Inputs may be NumPy, pandas, CuPy or Dask; the backend is chosen per explainer.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from distshap.inputs import is_cupy, is_dask, to_float32_matrix
from distshap.kernels import cuda_available, get_backend
from distshap.models import load_model
from distshap.packed import PackedModel, build_packed_model
from distshap.paths import extract_paths
from distshap.tables import DEFAULT_MAX_TABLE_FEATURES, DEFAULT_TABLE_BUDGET_BYTES

__all__ = ["TreeExplainer"]


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
        return "cuda" if (is_cupy(X) or cuda_available()) else "cpu"

    def _explain(self, X: Any, interactions: bool) -> Any:
        if is_dask(X):
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
            if backend == "cuda" and not is_cupy(X):
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
