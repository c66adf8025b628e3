"""TreeExplainer: the public entry point, a drop-in for ``shap.TreeExplainer``.

``TreeExplainer(model, data=None, model_output="raw", feature_perturbation="auto",
feature_names=None, approximate, link, linearize_link)`` takes shap's parameters in shap's order
(the last three ignored, as shap ignores them); distshap's own (``layout``, ``backend``,
``client``, ...) are keyword-only. The model is converted and bin-packed once, when the
explainer is built (and once more per boosting-round range asked for, lazily); every call then
only runs kernels.

Two algorithms, chosen as shap chooses them:

* ``"tree_path_dependent"`` (no background data): the training covers of the trees stand for
  the data distribution (GPUTreeShap); values in margin space. With background data (shap's
  ``feature_perturbation="tree_path_dependent"`` and ``data``), the count of rows reaching each
  node stands for it instead, as in shap (:mod:`distshap.explainer_covers`).
* ``"interventional"`` (``data`` given): values averaged over the background rows
  (:mod:`distshap.interventional`), of the margin (``model_output="raw"``), the probability
  (``"probability"``) or the log loss for labels ``y`` (``"log_loss"``) of a binary logistic
  model, as shap defines them.

Outputs: :meth:`TreeExplainer.shap_values` / :meth:`~TreeExplainer.shap_interaction_values`
keep XGBoost's ``pred_contribs`` / ``pred_interactions`` layout (bias in the last column) by
default, shap's (no bias, groups last; what shap's legacy plots such as ``summary_plot`` take)
with ``layout="shap"``; calling the explainer returns a ``shap.Explanation`` in shap's own
layouts, which shap's plots take. Inputs may be NumPy, pandas (a Series is one row), CuPy,
scipy.sparse, ``xgboost.DMatrix``, a numeric ``catboost.Pool`` or Dask (lazy values;
:class:`DaskExplanation` for ``explainer(X)``).
"""

from __future__ import annotations

import os
import time
import warnings
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from distshap.dispatch import explain_rows
from distshap.encoding import encode_ensemble
from distshap.inputs import (
    ExplainInput,
    background_input,
    explain_input,
    is_cupy,
    is_dask,
    is_frame,
    model_matrix,
    select_model_columns,
)
from distshap.kernels import resolve_backend
from distshap.kernels.margin import margin_model
from distshap.models import Ensemble, load_model
from distshap.models.iterations import (
    resolve_iteration_range,
    select_iterations,
    tree_limit_range,
)
from distshap.packed import PackedModel, pack_ensemble
from distshap.strategy import DEFAULT_MAX_TABLE_FEATURES, DEFAULT_TABLE_BUDGET_BYTES

__all__ = [
    "DEFAULT_LAYOUT",
    "FEATURE_PERTURBATIONS",
    "LAYOUTS",
    "MODEL_OUTPUTS",
    "PROGRESS_BATCH_ROWS",
    "DaskExplanation",
    "TreeExplainer",
]

#: shap's ``feature_perturbation`` values.
FEATURE_PERTURBATIONS = ("auto", "interventional", "tree_path_dependent")
#: The ``model_output`` values distshap explains (shap's, less model method names).
MODEL_OUTPUTS = ("raw", "probability", "log_loss")

#: Rows per batch when ``progress=True`` (a bar step; the values do not depend on it).
PROGRESS_BATCH_ROWS = 65536

#: Layouts of :meth:`TreeExplainer.shap_values` / :meth:`~TreeExplainer.shap_interaction_values`:
#: ``"xgboost"`` (``pred_contribs``: bias last, groups before features) or ``"shap"`` (shap's
#: ``shap_values``: no bias column, groups last).
LAYOUTS = ("xgboost", "shap")
#: The layout a TreeExplainer gets when none is given.
DEFAULT_LAYOUT = "xgboost"

_UNSET = object()  # shap's constructor ``approximate``: given or not


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


@dataclass(frozen=True, eq=False)
class _Model:
    """The packed model of one range of boosting rounds, and its background."""

    packed: PackedModel
    background: Any = None  # distshap.interventional.Background, interventional only


class TreeExplainer:
    """Exact SHAP values and SHAP interaction values of a tree ensemble (shap's interface).

    Parameters
    ----------
    model
        An XGBoost ``Booster`` or sklearn estimator, a saved XGBoost ``.json`` / ``.ubj``
        file, a LightGBM / scikit-learn / CatBoost tree model, or an ``Ensemble``.
    data : array-like, optional
        Background rows for ``feature_perturbation="interventional"``: a NumPy / CuPy array,
        pandas DataFrame (columns matched by name, as for the rows explained), scipy.sparse
        matrix, ``xgboost.DMatrix``, ``shap.maskers.Independent`` (its rows) or a
        ``shap.kmeans`` summary (its rows, unweighted, as shap's TreeExplainer takes them).
        Every row is used: shap's TreeExplainer keeps a random 100 of a larger background
        (``shap.utils.sample(data, 100)``); pass that sample (or the masker) for shap's numbers.
    model_output : {"raw", "probability", "log_loss"}
        What is explained: the margin (raw score); the probability ``1 / (1 + exp(-margin))``;
        or the log loss ``log(1 + exp(m)) - y m`` for labels ``y``. The latter two need
        ``data`` and a binary logistic model, as in shap (scikit-learn classification trees and
        forests output probabilities already: their ``"probability"`` is their raw output).
    feature_perturbation : {"auto", "interventional", "tree_path_dependent"}
        ``"auto"``: interventional when ``data`` is given, tree-path-dependent otherwise.
        ``"tree_path_dependent"`` with ``data``: the trees weighted by the number of ``data``
        rows reaching each node instead of their training covers (a node no row reaches
        weighs ``1e-6``), as shap weights them; every row counts (shap keeps a random 100 of
        a larger ``data``). Interaction values are weighted the same way (shap's, for
        XGBoost models, come from XGBoost's training covers there and do not add up to its
        SHAP values).
    feature_names : list of str, optional
        ``F`` names: the ``feature_names`` of ``explainer(X)`` when ``X`` is no DataFrame (as
        in shap), and :attr:`feature_names`.
    approximate, link, linearize_link
        shap's constructor takes them and ignores them (``approximate`` is deprecated there);
        so does distshap, warning when ``approximate`` is given (``DeprecationWarning``) or
        ``link`` is no identity (``UserWarning``: use ``model_output="probability"``).
    layout : {"xgboost", "shap"}
        The layout of :meth:`shap_values` and :meth:`shap_interaction_values`: XGBoost's
        ``pred_contribs`` / ``pred_interactions`` (default: ``(n, F+1)``, ``(n, G, F+1)``,
        bias last) or shap's (``(n, F)``, ``(n, F, G)``, no bias), which shap's legacy plots
        (``summary_plot``, ``dependence_plot``, ``force_plot``, ``decision_plot``) and code
        written for ``shap.TreeExplainer`` expect. ``explainer(X)`` is shap's either way.
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
    expected_value : float, ndarray or callable
        The bias: for tree-path-dependent values the base score plus the cover-weighted mean
        prediction; for interventional values the mean model output (in ``model_output``'s
        space) over the background rows; for ``"log_loss"`` a function of the label ``y``, as
        in shap. A float for one output group, ``(G,)`` for ``G`` (shap's is a float, a
        float32 or a ``(1,)`` array for one output depending on the model and on whether it
        was called yet, and changes after a ``tree_limit`` call; distshap's is fixed).
    feature_perturbation, model_output, layout : str
        As resolved (``"auto"`` replaced).
    feature_names : tuple of str or None
        The names given to the constructor, else the model's.
    data : ndarray or None
        The background rows as the model reads them (float, category codes), or ``None``.
    packed : PackedModel
        The preprocessed, bin-packed model shared by every backend (all boosting rounds
        loaded).
    background : distshap.interventional.Background or None
        The background as the kernels read it (interventional only).

    Raises
    ------
    ValueError
        An unknown ``feature_perturbation``, ``model_output`` or ``layout``;
        ``"interventional"`` without ``data`` (shap 0.51 warns and falls back to
        tree-path-dependent values, and says it will raise); ``"tree_path_dependent"`` with a
        ``model_output`` other than ``"raw"``; ``"probability"`` / ``"log_loss"`` for a model
        that is no binary logistic one; ``feature_names`` of another length than ``F``.
    TypeError
        An unsupported model or background (a shap ``Partition`` masker, a Dask collection, a
        ``catboost.Pool`` with categorical features); ``feature_names`` that is no list.
    """

    def __init__(
        self,
        model: Any,
        data: Any = None,
        model_output: str = "raw",
        feature_perturbation: str = "auto",
        feature_names: Any = None,
        approximate: Any = _UNSET,
        link: Any = None,
        linearize_link: Any = None,
        *,
        layout: str = DEFAULT_LAYOUT,
        backend: str = "auto",
        algorithm: str = "bfd",
        table_budget_bytes: int = DEFAULT_TABLE_BUDGET_BYTES,
        max_table_features: int = DEFAULT_MAX_TABLE_FEATURES,
        client: Any = None,
        missing: float | None = None,
    ) -> None:
        if backend != "auto":
            resolve_backend(backend)  # an unknown name, or CUDA without a GPU: fail early
        _check_model_output(model_output)
        _check_layout(layout)
        _check_ignored_arguments(approximate, link, linearize_link)
        data = _pool_rows(data)[0]
        if not isinstance(feature_perturbation, str) or (
            feature_perturbation not in FEATURE_PERTURBATIONS
        ):
            raise ValueError(
                f"feature_perturbation={feature_perturbation!r}: use one of "
                f"{', '.join(map(repr, FEATURE_PERTURBATIONS))}"
            )
        background = None if data is None else background_input(data)
        if feature_perturbation == "auto":
            feature_perturbation = "tree_path_dependent" if data is None else "interventional"
        if feature_perturbation == "interventional" and background is None:
            raise ValueError(
                "feature_perturbation='interventional' integrates over background rows: pass "
                "them as data (TreeExplainer(model, X_background); 100 to 1,000 rows, e.g. "
                "shap.utils.sample(X_train, 100)), or use 'tree_path_dependent'"
            )
        if feature_perturbation == "tree_path_dependent":
            if model_output != "raw":
                raise ValueError(
                    f"model_output={model_output!r} needs feature_perturbation='interventional' "
                    "and background data (shap refuses it for 'tree_path_dependent' too): "
                    f"TreeExplainer(model, X_background, model_output={model_output!r})"
                )
        self.ensemble: Ensemble = load_model(model)
        if missing is not None:
            self.ensemble = replace(self.ensemble, missing_value=float(missing))
        self._build_options = {
            "algorithm": algorithm,
            "table_budget_bytes": table_budget_bytes,
            "max_table_features": max_table_features,
        }
        self.feature_perturbation = feature_perturbation
        self.model_output = model_output
        self.layout = layout
        self.backend = backend
        self.client = client
        self._background_rows = None
        self._models: dict[tuple[int, int] | None, _Model] = {}
        self.packed: PackedModel = self._build_packed(self.ensemble)
        self.background = None
        self.data = None
        self.data_feature_names = None
        self._transform = 0
        if background is not None and feature_perturbation == "tree_path_dependent":
            self._count_covers(background, data)
        elif background is not None:
            self._attach_background(background, data)
        self._user_feature_names = _check_feature_names(feature_names, self.num_features)
        if self._user_feature_names is not None:
            self.data_feature_names = list(self._user_feature_names)
        self._models[None] = _Model(self.packed, self.background)

    def _count_covers(self, rows: Any, data: Any) -> None:
        """shap's tree-path-dependent explainer with data: the trees weighted by the rows
        (:mod:`distshap.explainer_covers`) instead of their training covers."""
        from distshap.explainer_covers import data_covers

        self._read_background(rows, data)
        self.ensemble = data_covers(self.ensemble, self.packed.margin, self.data)
        self.packed = self._build_packed(self.ensemble)

    def _read_background(self, rows: Any, data: Any) -> None:
        """``self.data``: the background ``rows`` as the model reads them (host memory), and
        ``self.data_feature_names``: the user's names, else a background DataFrame's columns."""
        if type(data).__name__ == "DMatrix":  # its stored values must not hit the sentinel
            _check_dmatrix_sentinel(explain_input(data), self.packed)
        matrix = model_matrix(rows, self.packed)
        self.data = matrix.get() if is_cupy(matrix) else matrix
        user_names = getattr(self, "_user_feature_names", None)  # unset while constructing
        self.data_feature_names = None if user_names is None else list(user_names)
        if is_frame(rows) and user_names is None:
            names = self.packed.feature_names
            style = self.packed.encoding.name_style
            cols = select_model_columns(rows, self.num_features, names, style)
            self.data_feature_names = [str(c) for c in cols]

    def _attach_background(self, rows: Any, data: Any = None) -> None:
        """Interventional over ``rows`` (:func:`~distshap.inputs.background_input` of
        ``data``) for ``self.model_output``."""
        from distshap.interventional import build_background, transform_id

        self._read_background(rows, data)
        self._transform = transform_id(self.model_output, self.packed)
        self._background_rows = rows
        self.background = build_background(self.packed, rows)

    def _with_background(self, data: Any, model_output: str = "raw") -> TreeExplainer:
        """This explainer made interventional over ``data`` (its packed model reused).

        For callers that need the packed model to read the background (the CLI selects a
        file's columns with it): the same as ``TreeExplainer(model, data, model_output)``
        without converting and packing the model again.
        """
        import copy

        _check_model_output(model_output)
        other = copy.copy(self)
        other.feature_perturbation = "interventional"
        other.model_output = model_output
        other._attach_background(background_input(data), data)
        other._models = {None: _Model(self.packed, other.background)}
        return other

    # --------------------------------------------------------------------------------------
    # the model of a range of boosting rounds
    # --------------------------------------------------------------------------------------

    def _build_packed(self, ensemble: Ensemble) -> PackedModel:
        encoded, encoding = encode_ensemble(ensemble)
        return pack_ensemble(  # build_packed_model(extract_paths(encoded), ...), bit for bit
            encoded,
            feature_names=ensemble.feature_names,
            feature_categories=ensemble.extra.get("category_values"),
            encoding=encoding,
            margin=margin_model(ensemble),
            model_kind=ensemble.model_kind,
            **self._build_options,
        )

    def _model(self, tree_limit: int | None, iteration_range: Any) -> _Model:
        """The packed model (and background) of the rounds asked for, built once per range."""
        if tree_limit is not None and iteration_range is not None:
            raise ValueError(
                f"tree_limit={tree_limit} and iteration_range={iteration_range!r} both select "
                "trees: pass one"
            )
        if iteration_range is not None:
            key = resolve_iteration_range(self.ensemble, iteration_range)
        elif tree_limit is not None and self.ensemble.model_kind.startswith("lightgbm"):
            key = _lightgbm_tree_limit(self.ensemble, tree_limit)
        elif tree_limit is not None:
            key = tree_limit_range(self.ensemble, tree_limit)
        else:
            return self._models[None]
        rounds = self.ensemble.extra["iteration_indptr"].size - 1
        if key == (0, rounds):
            return self._models[None]
        model = self._models.get(key)
        if model is None:
            packed = self._build_packed(select_iterations(self.ensemble, *key))
            background = None
            if self._background_rows is not None:
                from distshap.interventional import build_background

                background = build_background(packed, self._background_rows)
            model = self._models[key] = _Model(packed, background)
        return model

    # --------------------------------------------------------------------------------------
    # attributes
    # --------------------------------------------------------------------------------------

    @property
    def expected_value(self) -> Any:
        if self.background is None:
            ev = self.packed.expected_value
        elif self.model_output == "log_loss":
            return self._log_loss_expected_value
        else:
            from distshap.interventional import bias_values

            ev = bias_values(self.background, self._transform)[0]
        return float(ev[0]) if ev.shape[0] == 1 else np.array(ev, dtype=np.float64)

    def _log_loss_expected_value(self, y: Any) -> Any:
        """Mean log loss of the background rows for label(s) ``y`` (shap's callable)."""
        from distshap.interventional import bias_values

        labels = np.asarray(y, dtype=np.float64)
        ev = bias_values(self.background, self._transform, labels.reshape(-1))
        if labels.ndim == 0:
            ev = ev[0]
            return float(ev[0]) if ev.shape[0] == 1 else ev
        return ev[:, 0] if ev.shape[1] == 1 else ev

    @property
    def num_features(self) -> int:
        return self.packed.num_features

    @property
    def feature_names(self) -> tuple[str, ...] | None:
        """The ``feature_names`` given to the constructor, else the model's own (or ``None``)."""
        if self._user_feature_names is not None:
            return self._user_feature_names
        return self.packed.feature_names

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

    # --------------------------------------------------------------------------------------
    # computing
    # --------------------------------------------------------------------------------------

    def _labels(self, y: Any, inp: ExplainInput, n_rows: int | None) -> Any:
        """The labels of the log loss (``None`` for other outputs)."""
        if self.model_output != "log_loss":
            return None
        if y is None:
            y = inp.labels
        if y is None:
            raise ValueError(
                "model_output='log_loss' explains each row's loss and needs its label: pass "
                "explainer.shap_values(X, y) (or explainer(X, y)), one label in [0, 1] per row"
            )
        if is_dask(inp.rows):
            return y  # explain_dask aligns them with the rows' chunks once their sizes are known
        if is_dask(y):
            raise TypeError("y is a Dask collection but X is in memory: pass y.compute()")
        if hasattr(y, "to_numpy"):  # pandas Series
            y = y.to_numpy()
        y = y if is_cupy(y) else np.asarray(y)
        if inp.one_row and y.ndim == 0:
            y = y.reshape(1)
        from distshap.interventional import check_labels

        return check_labels(y, n_rows, self._transform)

    def _compute(
        self,
        X: Any,
        y: Any,
        interactions: bool,
        check_additivity: bool,
        progress: bool,
        tree_limit: int | None,
        iteration_range: Any,
    ) -> tuple[Any, ExplainInput, _Model]:
        """Values ``(n, G, F+1)`` / ``(n, G, F+1, F+1)`` (lazy for Dask), the input, the model."""
        if interactions and self.model_output != "raw":
            raise ValueError(
                f"SHAP interaction values explain the margin (model_output='raw'), not "
                f"{self.model_output!r}: shap has none of the {self.model_output} either; "
                "build a TreeExplainer with model_output='raw'"
            )
        inp = _explain_input(X)
        model = self._model(tree_limit, iteration_range)
        packed = model.packed
        _check_dmatrix_sentinel(inp, packed)
        options: dict[str, Any] = {}
        if model.background is not None:
            options = {"background": model.background, "model_output": self.model_output}
        if is_dask(inp.rows):
            from distshap.cluster import explain_dask

            labels = self._labels(y, inp, None)
            if labels is not None:
                options["y"] = labels
            out = explain_dask(
                packed,
                inp.rows,
                interactions=interactions,
                backend=self.backend,
                client=self.client,
                check_additivity=check_additivity,
                **options,
            )
            return out, inp, model
        raw = model_matrix(inp.rows, packed)
        labels = self._labels(y, inp, raw.shape[0])
        _check_output_fits(raw.shape[0], packed, interactions)

        def run(start: int, stop: int) -> Any:
            extra = dict(options)
            if labels is not None:
                extra["y"] = labels[start:stop]
            return explain_rows(
                packed,
                raw[start:stop] if (start, stop) != (0, raw.shape[0]) else raw,
                interactions=interactions,
                backend=self.backend,
                check=check_additivity,
                first_row=start,
                **extra,
            )

        if progress and not is_cupy(raw) and raw.shape[0] > PROGRESS_BATCH_ROWS:
            out = _in_batches(run, raw.shape[0], packed, interactions)
        else:
            out = run(0, raw.shape[0])
        return out, inp, model

    def _xgboost_layout(self, out: Any, inp: ExplainInput) -> Any:
        out = out[:, 0] if out.shape[1] == 1 else out
        return out[0] if inp.one_row else out

    def _layout(self, out: Any, inp: ExplainInput, interactions: bool) -> Any:
        """``(n, G, F+1[, F+1])`` -> the arrays :meth:`shap_values` /
        :meth:`shap_interaction_values` return in ``self.layout``."""
        if self.layout == "xgboost":
            return self._xgboost_layout(out, inp)
        values, _ = _shap_layout(out, interactions)
        return values[0] if inp.one_row else values

    def shap_values(
        self,
        X: Any,
        y: Any = None,
        tree_limit: int | None = None,
        approximate: bool = False,
        check_additivity: bool = True,
        from_call: bool = False,
        *,
        progress: bool = False,
        iteration_range: tuple[int, int] | None = None,
    ) -> Any:
        """SHAP values, in XGBoost's ``pred_contribs`` layout (bias in the last column) or, for
        ``layout="shap"``, in shap's.

        shap's parameters in shap's order. The default layout is XGBoost's, not shap's: shap's
        ``shap_values`` drops the bias and puts output groups last, as
        ``TreeExplainer(model, layout="shap")`` does (``explainer(X).values`` has shap's
        layout either way).

        Parameters
        ----------
        X : ndarray, DataFrame, Series, cupy.ndarray, scipy.sparse, xgboost.DMatrix, dask
            ``(n, F)`` rows to explain, or one row (a 1-D array of ``F`` values or a pandas
            Series): then the row axis is dropped from the output. NaN is a missing value;
            so is an entry a scipy.sparse matrix or DMatrix does not store, for XGBoost models
            (as XGBoost reads them). A DataFrame's columns are matched by name.
        y : array-like, optional
            Labels (0/1, or probabilities) for ``model_output="log_loss"``, one per row (a Dask
            array for Dask ``X``); a DMatrix's own labels are used when ``y`` is None.
            Ignored for other outputs, as in shap.
        tree_limit : int, optional
            Explain the first ``tree_limit`` trees, as shap counts them for XGBoost: whole
            boosting rounds of ``groups x num_parallel_tree`` trees (``-1``: all); for
            LightGBM, the first ``tree_limit`` boosting rounds (shap hands it to LightGBM's
            ``num_iteration``). Boosted XGBoost, LightGBM and scikit-learn gradient boosting
            models only.
        approximate : bool
            shap's Saabas approximation: not offered (distshap is exact); ``True`` raises.
        check_additivity : bool
            Check that each row's values sum to the model's output (margin, probability or
            loss) from an independent tree traversal (:mod:`distshap.additivity`), raising
            ``AdditivityError`` otherwise, as shap does. For Dask input each chunk is checked
            on its worker when the result is computed.
        from_call : bool
            Taken for shap's signature and ignored (shap uses it to silence a LightGBM
            warning).
        progress : bool
            For in-memory (NumPy / pandas) input: run in batches of
            :data:`PROGRESS_BATCH_ROWS` rows with a progress bar (``tqdm`` when installed, no
            bar otherwise). The values are identical either way (rows are independent). Dask
            input ignores it: use :func:`distshap.cluster.compute` with ``progress=True``.
        iteration_range : (int, int), optional
            Explain boosting rounds ``[begin, end)`` only, as XGBoost's
            ``predict(iteration_range=...)`` (``(0, 0)``: all). Excludes ``tree_limit``.

        Returns
        -------
        ndarray
            float32 ``(n, F + 1)``, or ``(n, G, F + 1)`` for ``G > 1`` output groups; the bias
            is the last column. ``(F + 1,)`` / ``(G, F + 1)`` for one row. ``layout="shap"``:
            ``(n, F)`` / ``(n, F, G)``, ``(F,)`` / ``(F, G)`` for one row, the bias in
            :attr:`expected_value` (float32, where shap's are float64 but for XGBoost's
            tree-path-dependent values). Same array family as ``X`` (lazy for Dask).
        """
        _check_approximate(approximate)
        out, inp, _ = self._compute(
            X, y, False, check_additivity, progress, tree_limit, iteration_range
        )
        return self._layout(out, inp, False)

    def shap_interaction_values(
        self,
        X: Any,
        y: Any = None,
        tree_limit: int | None = None,
        *,
        progress: bool = False,
        check_additivity: bool = True,
        iteration_range: tuple[int, int] | None = None,
    ) -> Any:
        """SHAP interaction values, XGBoost's ``pred_interactions`` layout (or shap's).

        Parameters
        ----------
        X, y, tree_limit, progress, iteration_range
            As for :meth:`shap_values` (``y`` is unused: interaction values explain the raw
            output only, as in shap).
        check_additivity : bool
            As for :meth:`shap_values` (every entry of a row sums to its margin).

        Returns
        -------
        ndarray
            float32 ``(n, F + 1, F + 1)``, or ``(n, G, F + 1, F + 1)`` for ``G > 1`` groups;
            row ``i`` sums to the SHAP value of feature ``i``; the bias is ``[F, F]``. Without
            the row axis for one row. ``layout="shap"``: ``(n, F, F)`` / ``(n, F, F, G)``, no
            bias (shap's layout).
        """
        out, inp, _ = self._compute(
            X, y, True, check_additivity, progress, tree_limit, iteration_range
        )
        return self._layout(out, inp, True)

    def __call__(
        self,
        X: Any,
        y: Any = None,
        interactions: bool = False,
        check_additivity: bool = True,
        approximate: bool = False,
        *,
        tree_limit: int | None = None,
        iteration_range: tuple[int, int] | None = None,
        progress: bool = False,
    ) -> Any:
        """Values as a ``shap.Explanation`` in shap's layouts, for ``shap.plots``.

        Parameters
        ----------
        X, y, check_additivity, approximate, tree_limit, iteration_range, progress
            As for :meth:`shap_values`.
        interactions : bool
            SHAP interaction values instead of SHAP values.

        Returns
        -------
        shap.Explanation or DaskExplanation
            ``values``: float32 ``(n, F)``, ``(n, F, G)`` for ``G`` output groups; interactions
            ``(n, F, F)`` / ``(n, F, F, G)`` (shap's layouts). ``base_values``: ``(n,)`` /
            ``(n, G)``, each row's bias. ``data``: the rows as a NumPy array (the input's own
            values for NumPy and numeric pandas input; for category columns, scipy.sparse and
            DMatrix input the values the model reads: category codes, NaN for missing).
            ``feature_names``: the DataFrame's (or Series') columns, else the background
            DataFrame's, else the model's (shap leaves them unset there), else unset. One row
            (1-D input): no row axis. Dask input gives a :class:`DaskExplanation` (lazy;
            ``.compute()`` is the ``shap.Explanation``).

        Raises
        ------
        ImportError
            When the ``shap`` package is not installed (Dask input needs it only to compute).
        """
        _check_approximate(approximate)
        start = time.perf_counter()
        if not is_dask(X):
            _import_shap()
        out, inp, model = self._compute(
            X, y, interactions, check_additivity, progress, tree_limit, iteration_range
        )
        names = self._explanation_names(inp, model.packed)
        values, base = _shap_layout(out, interactions)
        if is_dask(inp.rows):
            data = _dask_data(inp.rows, model.packed)
            return DaskExplanation(values, base, data, names)
        if is_cupy(values):
            values, base = values.get(), base.get()
        data = _explanation_data(inp, model.packed)
        if inp.one_row:
            values, base, data = values[0], base[0], data[0]
        shap = _import_shap()
        return shap.Explanation(
            values=values,
            base_values=base,
            data=data,
            feature_names=names,
            compute_time=time.perf_counter() - start,
        )

    def explain(self, X: Any, y: Any = None, interactions: bool = False, **kwargs: Any) -> Any:
        """Alias of calling the explainer: ``explainer.explain(X)`` is ``explainer(X)``."""
        return self(X, y, interactions, **kwargs)

    # --------------------------------------------------------------------------------------
    # interactions at scale and the Shapley-Taylor index (tree-path-dependent game)
    # --------------------------------------------------------------------------------------

    def _path_dependent_input(
        self, X: Any, what: str, tree_limit: int | None, iteration_range: Any
    ) -> tuple[ExplainInput, PackedModel]:
        if self.background is not None:
            raise ValueError(
                f"{what} are computed for the tree-path-dependent game only; this explainer "
                "is interventional (it has background data): build one without data, "
                "TreeExplainer(model), for them"
            )
        inp = _explain_input(X)
        if not is_dask(inp.rows) and inp.rows.shape[0] == 0:
            raise ValueError("X has no rows: nothing to explain")  # as shap_values says
        packed = self._model(tree_limit, iteration_range).packed
        _check_dmatrix_sentinel(inp, packed)
        return inp, packed

    def top_interactions(
        self,
        X: Any,
        k: int = 10,
        *,
        check_additivity: bool = True,
        batch_rows: int | None = None,
        tree_limit: int | None = None,
        iteration_range: tuple[int, int] | None = None,
    ) -> tuple[Any, Any]:
        """The ``k`` strongest feature pairs of every row, without the full interaction matrices.

        For each row (and output group), the feature pairs ``i < j`` (bias excluded) of largest
        ``|phi_ij|``, ``phi_ij`` being the entry ``[i, j]`` (upper triangle) of
        :meth:`shap_interaction_values`, with the same bits. Order: ``|phi_ij|`` descending,
        ties by ``(i, j)`` ascending: exactly what sorting the whole upper triangle gives (a row
        with fewer than ``k`` non-zero pairs continues with its zero pairs in ``(i, j)`` order).
        Only pairs that share a tree path can interact: the kernels accumulate those
        (:mod:`distshap.pair_slots`), never the ``(F+1)**2`` matrix, so memory is the output
        plus one batch of slot values.

        Parameters
        ----------
        X : ndarray, DataFrame, Series, cupy.ndarray, scipy.sparse, xgboost.DMatrix, dask
            Rows to explain, as for :meth:`shap_values` (one row: no row axis in the output).
        k : int
            Pairs per row (and group), ``1 <= k <= F (F - 1) / 2``.
        check_additivity : bool
            As for :meth:`shap_interaction_values`: each row's interaction values must sum to
            its margin.
        batch_rows : int, optional
            Rows per kernel batch; the results do not depend on it.
        tree_limit, iteration_range
            As for :meth:`shap_values`.

        Returns
        -------
        pairs : ndarray
            int32 ``(n, k, 2)``, or ``(n, G, k, 2)`` for ``G > 1`` groups: feature indices
            ``(i, j)``.
        values : ndarray
            float32 ``(n, k)`` or ``(n, G, k)``: ``phi_ij``. Same array family as ``X``; lazy
            for Dask input (compute both together: ``dask.compute(pairs, values)``).
            :func:`distshap.pair_interactions.top_interactions_frame` gives a tidy DataFrame.
        """
        from distshap import pair_interactions

        inp, packed = self._path_dependent_input(X, "top interactions", tree_limit,
                                                 iteration_range)  # fmt: skip
        pairs, values = pair_interactions.top_interactions(
            packed, inp.rows, k, self.backend, check_additivity=check_additivity,
            batch_rows=batch_rows, squeeze=True, client=self.client,
        )  # fmt: skip
        if inp.one_row:
            return pairs[0], values[0]
        return pairs, values

    def interaction_summary(
        self,
        X: Any,
        signed: bool = False,
        *,
        check_additivity: bool = True,
        batch_rows: int | None = None,
        split_every: int | None = None,
        tree_limit: int | None = None,
        iteration_range: tuple[int, int] | None = None,
    ) -> Any:
        """A data-set ranking of interactions: mean ``|phi_ij|`` of every feature pair over the
        rows of ``X``, in one streaming pass without the full interaction matrices.

        Parameters
        ----------
        X : ndarray, DataFrame, cupy.ndarray, scipy.sparse, xgboost.DMatrix, dask
            ``(n, F)`` rows, at least one.
        signed : bool
            Mean ``phi_ij`` instead of mean ``|phi_ij|``.
        check_additivity, batch_rows, tree_limit, iteration_range
            As for :meth:`top_interactions`.
        split_every : int, optional
            Fan-in of the Dask tree reduction (the result does not depend on it).

        Returns
        -------
        ndarray
            float64 ``(F+1, F+1)``, or ``(G, F+1, F+1)`` for ``G > 1`` groups: ``[i, j]`` and
            ``[j, i]`` the mean of ``|phi_ij|`` (``signed``: of ``phi_ij``) over the rows, the
            diagonal likewise of ``phi_ii``, ``[F, F]`` the bias, the rest of the bias row and
            column 0: the mean of :meth:`shap_interaction_values` (absolute values unless
            ``signed``). Values are summed as exact integers, so the bits do not depend on
            batches, Dask chunks, the reduction tree or the number of GPUs (they do on the
            backend). For Dask input, a lazy one-chunk Dask array.
            :func:`distshap.pair_interactions.top_pairs` lists its strongest pairs and
            :func:`distshap.plots.interaction_heatmap` draws them.
        """
        from distshap import pair_interactions

        inp, packed = self._path_dependent_input(X, "interaction summaries", tree_limit,
                                                 iteration_range)  # fmt: skip
        return pair_interactions.interaction_summary(
            packed, inp.rows, signed, self.backend, check_additivity=check_additivity,
            batch_rows=batch_rows, squeeze=True, client=self.client, split_every=split_every,
        )  # fmt: skip

    def shap_taylor_interaction_values(
        self,
        X: Any,
        *,
        check_additivity: bool = True,
        tree_limit: int | None = None,
        iteration_range: tuple[int, int] | None = None,
    ) -> Any:
        """Shapley-Taylor interaction index of order 2 (Sundararajan, Dhamdhere & Agarwal 2020),
        exact, in XGBoost's ``pred_interactions`` layout.

        Like SHAP interaction values, it splits each prediction (margin) into main effects and
        pairwise interactions that add up to it, under other axioms: a feature's main effect is
        its effect alone, ``v({i}) - v(∅)`` (the discrete derivative at the empty set), and a
        pair's index is its discrete second derivative averaged over the features that come
        before the first of the two in a random order, ``I_ij = (2 / n) sum_{T ⊆ N \\ {i, j}}
        delta_ij(T) / C(n - 1, |T|)``. The game is the path-dependent (cover-weighted) one
        TreeSHAP explains; features a tree does not split on drop out. Computed per path with
        Gauss-Legendre quadrature, exact (:mod:`distshap.kernels.taylor_cpu` derives it).

        Parameters
        ----------
        X
            In-memory rows, as for :meth:`shap_values` (Dask collections: not offered).
        check_additivity : bool
            Check that every row's entries sum to its margin (efficiency), raising
            ``AdditivityError`` otherwise.
        tree_limit, iteration_range
            As for :meth:`shap_values`.

        Returns
        -------
        ndarray
            float32 ``(n, F + 1, F + 1)``, or ``(n, G, F + 1, F + 1)`` for ``G > 1`` groups:
            main effects on the diagonal, each pair's index split equally between ``[i, j]``
            and ``[j, i]``, the expected value (base score included) at ``[F, F]``, zeros
            elsewhere in the bias row and column. Unlike :meth:`shap_interaction_values`, row
            ``i`` does not sum to the SHAP value of feature ``i``; the whole matrix sums to the
            margin. CuPy for CuPy input.
        """
        from distshap.taylor import shap_taylor_values

        inp, packed = self._path_dependent_input(X, "Shapley-Taylor values", tree_limit,
                                                 iteration_range)  # fmt: skip
        if is_dask(inp.rows):
            raise TypeError(
                "shap_taylor_interaction_values takes in-memory rows (NumPy, pandas, CuPy, "
                "scipy.sparse): compute the Dask collection first, or map it block by block"
            )
        raw = model_matrix(inp.rows, packed)
        _check_output_fits(raw.shape[0], packed, True)
        out = shap_taylor_values(packed, raw, self.backend, check=check_additivity)
        return self._xgboost_layout(out, inp)

    def _explanation_names(self, inp: ExplainInput, packed: PackedModel) -> list[str] | None:
        """shap's feature names: the input's columns, else the background frame's; then the
        model's own names (where shap sets none)."""
        F = packed.num_features
        if inp.columns is not None:
            if is_frame(inp.rows):
                cols = select_model_columns(
                    inp.rows, F, packed.feature_names, packed.encoding.name_style
                )
                return [str(c) for c in cols]
            if len(inp.columns) == F:
                return list(inp.columns)
        if self.data_feature_names is not None:
            return list(self.data_feature_names)
        if packed.feature_names is not None and len(packed.feature_names) == F:
            return list(packed.feature_names)
        return None


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

        shap = _import_shap()
        values, base, data = dask.compute(self.values, self.base_values, self.data, **kwargs)
        values, base, data = (_host(a) for a in (values, base, data))
        return shap.Explanation(
            values=values, base_values=base, data=data, feature_names=self.feature_names
        )

    def persist(self, **kwargs: Any) -> DaskExplanation:
        """The same explanation with its arrays persisted (``dask.persist(**kwargs)``)."""
        import dask

        values, base, data = dask.persist(self.values, self.base_values, self.data, **kwargs)
        return DaskExplanation(values, base, data, self.feature_names)

    def __repr__(self) -> str:
        return f"DaskExplanation(values={self.values!r})"


# ------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------


def _host(a: Any) -> np.ndarray:
    return a.get() if is_cupy(a) else np.asarray(a)


def _check_model_output(model_output: Any) -> None:
    if isinstance(model_output, str) and model_output in MODEL_OUTPUTS:
        return
    hint = ""
    if model_output in ("predict_proba", "predict"):
        hint = (
            ": for a binary classifier's predict_proba use 'probability' (with background "
            "data), for predict 'raw'"
        )
    raise ValueError(
        f"model_output={model_output!r} is not one distshap explains; use one of "
        f"{', '.join(map(repr, MODEL_OUTPUTS))}{hint}"
    )


def _check_layout(layout: Any) -> None:
    if not (isinstance(layout, str) and layout in LAYOUTS):
        raise ValueError(
            f"layout={layout!r}: use 'shap' (shap_values as shap returns them: (n, F), "
            "(n, F, G)) or 'xgboost' (XGBoost's pred_contribs: (n, F+1), (n, G, F+1), bias last)"
        )


def _check_ignored_arguments(approximate: Any, link: Any, linearize_link: Any) -> None:
    """shap's constructor takes ``approximate``, ``link`` and ``linearize_link`` and ignores
    them; so does distshap, with a warning where they ask for something it does not do."""
    if approximate is not _UNSET:
        warnings.warn(
            "TreeExplainer(approximate=...) is ignored (shap deprecated and ignores it too): "
            "values are exact; shap's approximation was an argument of shap_values",
            DeprecationWarning,
            stacklevel=3,
        )
    identity = link is None or link == "identity" or getattr(link, "__name__", "") == "identity"
    if not identity or not isinstance(linearize_link, (bool, type(None))):
        warnings.warn(
            f"TreeExplainer(link={link!r}) is ignored, as shap's TreeExplainer ignores it: "
            "values explain model_output; for probabilities use model_output='probability' "
            "with background data",
            UserWarning,
            stacklevel=3,
        )


def _check_feature_names(names: Any, num_features: int) -> tuple[str, ...] | None:
    """shap's ``feature_names``: ``F`` names, or ``None``."""
    if names is None:
        return None
    if isinstance(names, (str, bytes)) or not hasattr(names, "__len__"):
        raise TypeError(
            f"feature_names={names!r}: pass a list of {num_features} names, one per feature "
            "(distshap's own options, backend=... and others, are keyword-only)"
        )
    names = tuple(str(n) for n in names)
    if len(names) != num_features:
        raise ValueError(
            f"feature_names has {len(names)} names but the model has {num_features} features: "
            "pass one name per feature"
        )
    return names


def _is_catboost_pool(X: Any) -> bool:
    return type(X).__module__.split(".")[0] == "catboost" and type(X).__name__ == "Pool"


def _pool_rows(X: Any) -> tuple[Any, np.ndarray | None]:
    """A ``catboost.Pool`` (as shap takes it for CatBoost models) -> its rows and labels;
    anything else -> itself and ``None``."""
    if not _is_catboost_pool(X):
        return X, None
    special = [getattr(X, f"get_{kind}_feature_indices")() for kind in ("cat", "text", "embedding")]
    if any(len(s) for s in special):
        raise TypeError(
            "X is a catboost.Pool with categorical, text or embedding features, whose values "
            "it does not give back: pass the DataFrame (or array) the Pool was built from"
        )
    values = np.asarray(X.get_features(), dtype=np.float32)
    names = [str(n) for n in X.get_feature_names()]
    labels = None
    if X.has_label():
        labels = np.asarray(X.get_label(), dtype=np.float64).ravel()
    if any(names) and len(set(names)) == len(names):
        import pandas as pd

        return pd.DataFrame(values, columns=names), labels
    return values, labels


def _explain_input(X: Any) -> ExplainInput:
    """:func:`~distshap.inputs.explain_input`, taking a ``catboost.Pool`` too."""
    rows, labels = _pool_rows(X)
    inp = explain_input(rows)
    if labels is not None and labels.size == inp.rows.shape[0]:
        inp = replace(inp, labels=labels)
    return inp


def _check_dmatrix_sentinel(inp: ExplainInput, packed: PackedModel) -> None:
    """A DMatrix that stores the model's missing-value sentinel as a value: XGBoost predicts
    with it as a number, the model's encoding would read it as missing; refuse, saying why."""
    sentinel = packed.encoding.missing_value
    if inp.stored is None or np.isnan(sentinel):
        return
    if np.any(inp.stored == np.float32(sentinel)):
        raise ValueError(
            f"the DMatrix stores the value {sentinel} as a number, which this model reads as "
            f"missing (missing={sentinel}), while XGBoost's predict on that DMatrix reads it as "
            f"a value: build the DMatrix with missing={sentinel}, or pass the array itself"
        )


def _lightgbm_tree_limit(ensemble: Ensemble, tree_limit: int) -> tuple[int, int]:
    """shap's ``tree_limit`` of a LightGBM model: boosting rounds (shap hands it to LightGBM's
    ``predict(num_iteration=...)``), ``-1`` for all."""
    if isinstance(tree_limit, (int, np.integer)) and not isinstance(tree_limit, bool):
        if tree_limit == -1:
            return resolve_iteration_range(ensemble, (0, 0))
    try:
        return resolve_iteration_range(ensemble, (0, tree_limit))
    except (TypeError, ValueError) as err:
        raise type(err)(
            f"tree_limit={tree_limit!r}: for a LightGBM model it counts boosting rounds, as "
            f"LightGBM's num_iteration does in shap ({err})"
        ) from None


def _check_approximate(approximate: bool) -> None:
    if approximate:
        raise ValueError(
            "approximate=True (shap's Saabas approximation) is not offered: distshap computes "
            "exact values, fast; drop approximate"
        )


def _import_shap() -> Any:
    try:
        import shap
    except ImportError as err:
        raise ImportError(
            "calling a TreeExplainer returns a shap.Explanation and needs the shap package: "
            "`pip install shap`, or use explainer.shap_values(X) for a plain array"
        ) from err
    return shap


def _shap_layout(out: Any, interactions: bool) -> tuple[Any, Any]:
    """``(n, G, F+1[, F+1])`` -> shap's ``values`` and ``base_values`` (NumPy, CuPy or Dask)."""
    F = out.shape[2] - 1
    groups = out.shape[1]
    if interactions:
        base = out[:, :, F, F]
        values = out[:, :, :F, :F]
        # shap's XGBoost layout: [n, j, i, g] = pred_interactions[n, g, i, j]
        values = values[:, 0] if groups == 1 else values.swapaxes(1, 3)
    else:
        base = out[:, :, F]
        values = out[:, :, :F]
        values = values[:, 0] if groups == 1 else values.transpose(0, 2, 1)
    base = base[:, 0] if groups == 1 else base
    if not is_dask(values):
        xp = np if not is_cupy(values) else __import__("cupy")
        values = xp.ascontiguousarray(values)
        base = xp.ascontiguousarray(base, dtype=xp.float64)
    else:
        base = base.astype(np.float64)
    return values, base


def _explanation_data(inp: ExplainInput, packed: PackedModel) -> np.ndarray:
    """``Explanation.data``: the input's own values where it is plain numbers, else the values
    the model reads (category codes; NaN for missing, sparse and DMatrix inputs)."""
    rows = inp.rows
    if isinstance(rows, np.ndarray) and rows.dtype.kind in "biuf":
        return rows
    if is_frame(rows):
        cols = select_model_columns(
            rows, packed.num_features, packed.feature_names, packed.encoding.name_style
        )
        frame = rows[cols]
        from pandas.api.types import is_bool_dtype, is_numeric_dtype

        if all(is_numeric_dtype(t) and not is_bool_dtype(t) for t in frame.dtypes):
            values = frame.to_numpy()
            if values.dtype.kind in "biuf":
                return values
    raw = model_matrix(rows, packed)
    return raw.get() if is_cupy(raw) else np.asarray(raw)


def _frame_block_values(partition: Any, packed: Any) -> Any:
    """A Dask DataFrame partition -> the model's values of its rows (on a worker)."""
    return model_matrix(partition, packed, allow_empty=True)


def _dask_data(X: Any, packed: PackedModel) -> Any:
    """The lazy ``data`` of a Dask input: an array as given, a frame's model values."""
    import dask.array as da

    if isinstance(X, da.Array):
        return X
    cols = select_model_columns(
        X, packed.num_features, packed.feature_names, packed.encoding.name_style
    )
    meta = np.empty((0, packed.num_features), dtype=packed.encoding.input_dtype)
    return X[cols].map_partitions(_frame_block_values, packed, meta=meta, enforce_metadata=False)


def _in_batches(run: Any, n: int, packed: PackedModel, interactions: bool) -> np.ndarray:
    """``run(start, stop)`` over row batches into one output, with a progress bar."""
    width = packed.num_features + 1
    shape = (n, packed.num_groups, width) + ((width,) if interactions else ())
    out = np.empty(shape, dtype=np.float32)
    bar = _progress_bar(n, "interaction values" if interactions else "SHAP values")
    try:
        for start in range(0, n, PROGRESS_BATCH_ROWS):
            stop = min(start + PROGRESS_BATCH_ROWS, n)
            out[start:stop] = run(start, stop)
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
