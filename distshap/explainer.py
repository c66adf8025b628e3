"""TreeExplainer: the public entry point tying loader, paths, packing and kernels together.

The model is converted and bin-packed once, when the explainer is built; every call then only
runs kernels. Inputs may be NumPy, pandas, CuPy or Dask; the backend is chosen per explainer.
"""

from __future__ import annotations

import functools
import os
from dataclasses import replace
from typing import Any

import numpy as np

from distshap.dispatch import explain_rows
from distshap.encoding import encode_ensemble
from distshap.inputs import is_cupy, is_dask, model_matrix
from distshap.kernels import resolve_backend
from distshap.kernels.margin import margin_model
from distshap.models import load_model
from distshap.packed import PackedModel, build_packed_model
from distshap.paths import extract_paths
from distshap.strategy import DEFAULT_MAX_TABLE_FEATURES, DEFAULT_TABLE_BUDGET_BYTES

__all__ = ["PROGRESS_BATCH_ROWS", "TreeExplainer"]


def _check_output_fits(n_rows: int, packed: PackedModel, interactions: bool) -> None:
    """Refuse an in-memory result larger than half of this machine's memory, with a way out."""
    width = packed.num_features + 1
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
        )


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
        Pattern-table policy (:mod:`distshap.strategy`); 0 bytes disables tables.
    client : distributed.Client, optional
        Client used for Dask inputs (default: the current client).
    missing : float, optional
        An input value to read as missing besides NaN, as ``xgboost.DMatrix(missing=...)``
        does (compared in float32). Default: the model's own (XGBoost estimators and their
        saved models record it), else NaN only.

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
        *,
        missing: float | None = None,
    ) -> None:
        if backend != "auto":
            resolve_backend(backend)  # an unknown name, or CUDA without a GPU: fail early
        self.ensemble = load_model(model)
        if missing is not None:
            self.ensemble = replace(self.ensemble, missing_value=float(missing))
        encoded, encoding = encode_ensemble(self.ensemble)
        self.packed: PackedModel = build_packed_model(
            extract_paths(encoded),
            algorithm=algorithm,
            table_budget_bytes=table_budget_bytes,
            max_table_features=max_table_features,
            feature_names=self.ensemble.feature_names,
            feature_categories=self.ensemble.extra.get("category_values"),
            encoding=encoding,
            margin=margin_model(self.ensemble),
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

    def _explain(
        self, X: Any, interactions: bool, progress: bool = False, check_additivity: bool = True
    ) -> Any:
        if is_dask(X):
            from distshap.cluster import explain_dask

            out = explain_dask(
                self.packed,
                X,
                interactions=interactions,
                backend=self.backend,
                client=self.client,
                check_additivity=check_additivity,
            )
            return out[:, 0] if self.packed.num_groups == 1 else out
        raw = model_matrix(X, self.packed)
        _check_output_fits(raw.shape[0], self.packed, interactions)
        run = functools.partial(
            explain_rows, self.packed, interactions=interactions, backend=self.backend,
            check=check_additivity,
        )  # fmt: skip
        if progress and not is_cupy(raw) and raw.shape[0] > PROGRESS_BATCH_ROWS:
            out = _in_batches(run, raw, self.packed, interactions)
        else:
            out = run(raw)
        return out[:, 0] if self.packed.num_groups == 1 else out

    def shap_values(self, X: Any, progress: bool = False, check_additivity: bool = True) -> Any:
        """SHAP values in margin space, XGBoost's ``pred_contribs`` layout.

        Parameters
        ----------
        X : ndarray, DataFrame, cupy.ndarray, dask Array or dask DataFrame
            ``(n, F)`` rows to explain. NaN is a missing value.
        progress : bool
            For in-memory (NumPy / pandas) input: run in batches of
            :data:`PROGRESS_BATCH_ROWS` rows with a progress bar (``tqdm`` when installed, no
            bar otherwise). The values are identical either way (rows are independent). Dask
            input ignores it: use :func:`distshap.cluster.compute` with ``progress=True``.
        check_additivity : bool
            Check that each row's values sum to the model's margin from an independent tree
            traversal (:mod:`distshap.additivity`), raising ``AdditivityError`` otherwise, as
            shap does. For Dask input each chunk is checked on its worker when the result is
            computed (the error then surfaces from ``compute``).

        Returns
        -------
        ndarray
            float32 ``(n, F + 1)``, or ``(n, G, F + 1)`` for ``G > 1`` output groups; the bias
            is the last column. Same array family as ``X`` (lazy for Dask).
        """
        return self._explain(X, False, progress, check_additivity)

    def shap_interaction_values(
        self, X: Any, progress: bool = False, check_additivity: bool = True
    ) -> Any:
        """SHAP interaction values, XGBoost's ``pred_interactions`` layout.

        Parameters
        ----------
        X
            As for :meth:`shap_values`.
        progress, check_additivity : bool
            As for :meth:`shap_values` (every entry of a row sums to its margin).

        Returns
        -------
        ndarray
            float32 ``(n, F + 1, F + 1)``, or ``(n, G, F + 1, F + 1)`` for ``G > 1`` groups;
            row ``i`` sums to the SHAP value of feature ``i``; the bias is ``[F, F]``.
        """
        return self._explain(X, True, progress, check_additivity)

    def output_feature_names(self, X: Any = None) -> tuple[str, ...]:
        """Names of the ``F`` feature columns of the outputs (the bias column excluded).

        The model's feature names when it has them; else the columns of ``X`` when ``X`` is a
        (pandas or Dask) DataFrame with ``F`` columns; else ``("f0", "f1", ...)``.
        """
        if self.feature_names is not None and len(self.feature_names) == self.num_features:
            return tuple(self.feature_names)
        columns = getattr(X, "columns", None)
        if columns is not None and len(columns) == self.num_features:
            return tuple(str(c) for c in columns)
        return tuple(f"f{j}" for j in range(self.num_features))

    def explain(self, X: Any, progress: bool = False) -> Any:
        """SHAP values as a ``shap.Explanation``, for ``shap.plots.beeswarm`` / ``bar`` / ...

        Parameters
        ----------
        X : ndarray, DataFrame or cupy.ndarray
            ``(n, F)`` in-memory rows (for Dask collections use :meth:`shap_values`).
        progress : bool
            As for :meth:`shap_values`.

        Returns
        -------
        shap.Explanation
            ``values`` float32 ``(n, F)`` (``(n, F, G)`` for ``G > 1`` output groups, the layout
            shap's own TreeExplainer uses), ``base_values`` ``(n,)`` (``(n, G)``), ``data`` the
            ``(n, F)`` input as the model reads it (float32, or float64 for models that compare
            in float64; category codes for category columns) and
            ``feature_names`` from the model, else from the DataFrame columns.

        Raises
        ------
        ImportError
            When the ``shap`` package is not installed.
        TypeError
            For a Dask collection.
        """
        try:
            import shap
        except ImportError as err:
            raise ImportError(
                "TreeExplainer.explain() returns a shap.Explanation and needs the shap package: "
                "`pip install shap`, or use shap_values(X) for a plain array"
            ) from err
        if is_dask(X):
            raise TypeError(
                "explain() takes in-memory data (NumPy, pandas, CuPy); for a Dask collection use "
                "shap_values(X), or explain(X.compute()) when the rows fit in memory"
            )
        names = self.output_feature_names(X)
        data = model_matrix(X, self.packed)
        phi = self.shap_values(data, progress=progress)
        if is_cupy(data):
            data, phi = data.get(), phi.get()
        phi = np.asarray(phi)
        if phi.ndim == 2:
            values, base = phi[:, :-1], phi[:, -1]
        else:
            values = np.ascontiguousarray(phi[:, :, :-1].transpose(0, 2, 1))
            base = phi[:, :, -1]
        return shap.Explanation(
            values=values, base_values=base, data=np.asarray(data), feature_names=list(names)
        )


#: Rows per batch when ``progress=True`` (a bar step; the values do not depend on it).
PROGRESS_BATCH_ROWS = 65536


def _in_batches(run: Any, X: np.ndarray, packed: PackedModel, interactions: bool) -> np.ndarray:
    """``run(X[start:stop], first_row=start)`` over row batches into one output, with a bar."""
    n = X.shape[0]
    width = packed.num_features + 1
    shape = (n, packed.num_groups, width) + ((width,) if interactions else ())
    out = np.empty(shape, dtype=np.float32)
    bar = _progress_bar(n, "interaction values" if interactions else "SHAP values")
    try:
        for start in range(0, n, PROGRESS_BATCH_ROWS):
            stop = min(start + PROGRESS_BATCH_ROWS, n)
            out[start:stop] = run(X[start:stop], first_row=start)
            if bar is not None:
                bar.update(stop - start)
    finally:
        if bar is not None:
            bar.close()
    return out


def _progress_bar(total: int, desc: str) -> Any:
    """A ``tqdm`` bar over rows, or ``None`` when tqdm is not installed."""
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc=desc, unit="rows", unit_scale=True, leave=False)
