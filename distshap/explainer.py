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
return shap's layout by default (no bias, groups last: what shap's plots and code written for
``shap.TreeExplainer`` take), XGBoost's ``pred_contribs`` / ``pred_interactions`` (bias last)
with ``layout="xgboost"``; calling the explainer returns a ``shap.Explanation`` in shap's own
layouts, which shap's plots take. Inputs may be NumPy, pandas (a Series is one row), CuPy,
scipy.sparse, ``xgboost.DMatrix``, a numeric ``catboost.Pool`` or Dask (lazy values;
:class:`~distshap.layouts.DaskExplanation` for ``explainer(X)``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from distshap.background_size import warn_large_background
from distshap.dispatch import run_request
from distshap.encoding import encode_ensemble
from distshap.explainer_banzhaf import BanzhafMethods
from distshap.explainer_pairs import PairMethods
from distshap.frames import lightgbm_generated_names, select_model_columns
from distshap.inputs import (
    ExplainInput,
    background_input,
    is_cupy,
    is_dask,
    is_frame,
    model_matrix,
    on_gpu,
)
from distshap.interventional import check_labels
from distshap.kernels import prepare, resolve_backend
from distshap.kernels.margin import margin_model
from distshap.layouts import (
    DEFAULT_LAYOUT,
    check_layout,
    distinct_names,
    explanation,
    explanation_names,
    import_shap,
    layout_values,
)
from distshap.models import Ensemble
from distshap.models.iterations import select_iterations
from distshap.packed import (
    DEFAULT_MAX_TABLE_FEATURES,
    DEFAULT_TABLE_BUDGET_BYTES,
    PackedModel,
    pack_ensemble,
)
from distshap.request import make_request
from distshap.row_blocks import feature_values, output_columns, run_blocks, used_columns
from distshap.shap_compat import (
    UNSET,
    add_base_margin,
    check_approximate,
    check_build_options,
    check_client,
    check_dmatrix_sentinel,
    check_feature_names,
    check_flags,
    check_ignored_arguments,
    check_model_output,
    check_perturbation,
    check_shap_layout_margin,
    explain_input,
    label_values,
    pool_rows,
    resolve_perturbation,
    rounds,
)
from distshap.warmup import load_ahead

__all__ = ["PROGRESS_BATCH_ROWS", "TreeExplainer"]

#: Rows per batch when ``progress=True`` (a bar step; the values do not depend on it).
PROGRESS_BATCH_ROWS = 65536


@dataclass(frozen=True, eq=False)
class _Model:
    """The packed model of one range of boosting rounds, and its background."""

    packed: PackedModel
    background: Any = None  # distshap.interventional.Background, interventional only


class TreeExplainer(PairMethods, BanzhafMethods):
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
    layout : {"shap", "xgboost"}
        The layout of :meth:`shap_values` and :meth:`shap_interaction_values`: shap's
        (default: ``(n, F)``, ``(n, F, G)``, no bias; the bias is :attr:`expected_value`),
        which shap's plots (``summary_plot``, ``dependence_plot``, ``force_plot``,
        ``decision_plot``) and code written for ``shap.TreeExplainer`` expect; or XGBoost's
        ``pred_contribs`` / ``pred_interactions`` (``(n, F+1)``, ``(n, G, F+1)``, bias last).
        ``explainer(X)`` is shap's either way.
    backend : {"auto", "cpu", "cuda"}
        Kernel backend. ``"auto"`` uses the GPU when one is visible, the CPU otherwise.
    algorithm : {"bfd", "ffd", "nf", "none"}
        Bin-packing heuristic for the 32-lane warps.
    table_budget_bytes, max_table_features : int
        Pattern-table policy (:mod:`distshap.plan.tables`); 0 bytes disables tables.
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
        approximate: Any = UNSET,
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
        options = check_build_options(algorithm, table_budget_bytes, max_table_features, missing)
        missing = options.pop("missing")
        check_client(client)
        check_model_output(model_output)
        check_layout(layout)
        check_ignored_arguments(approximate, link, linearize_link)
        data = pool_rows(data)[0]
        check_perturbation(feature_perturbation)
        background = None if data is None else background_input(data)
        feature_perturbation = resolve_perturbation(
            feature_perturbation, background is not None, model_output
        )
        gpu = prepare.start(model, backend, client, feature_perturbation)  # GPU ready meanwhile
        self.ensemble: Ensemble = gpu.loaded(load_ahead(model, backend))  # kernels compiled ahead
        if missing is not None:
            self.ensemble = replace(self.ensemble, missing_value=float(missing))
        self._build_options = options
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
        self._user_feature_names = check_feature_names(feature_names, self.num_features)
        if self._user_feature_names is not None:
            self.data_feature_names = list(self._user_feature_names)
        self._models[None] = _Model(self.packed, self.background)
        gpu.packed(self.packed)  # its device model made in the background

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
            check_dmatrix_sentinel(explain_input(data), self.packed)
        matrix = model_matrix(rows, self.packed, what="data (the background)")
        self.data = matrix.get() if is_cupy(matrix) else matrix
        if self.feature_perturbation == "interventional":  # shap's warning above 1,000 rows
            warn_large_background(int(self.data.shape[0]))
        user_names = getattr(self, "_user_feature_names", None)  # unset while constructing
        self.data_feature_names = None if user_names is None else list(user_names)
        if is_frame(rows) and user_names is None:
            names, style = self.packed.feature_names, self.packed.encoding.name_style
            what = "data (the background)"
            cols = select_model_columns(rows, self.num_features, names, style, what=what)
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

        check_model_output(model_output)
        other = copy.copy(self)
        other.feature_perturbation = "interventional"
        other.model_output = model_output
        other._attach_background(background_input(data), data)
        other._models = {None: _Model(self.packed, other.background)}
        return other

    # ---- the model of a range of boosting rounds ----

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
        key = rounds(self.ensemble, tree_limit, iteration_range)
        model = self._models.get(key)
        if model is None:
            packed = self._build_packed(select_iterations(self.ensemble, *key))
            background = None
            if self._background_rows is not None:
                from distshap.interventional import build_background

                background = build_background(packed, self._background_rows)
            model = self._models[key] = _Model(packed, background)
        return model

    # ---- attributes ----

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
        """Names of the ``F`` feature columns of the outputs (the bias column excluded): the
        model's when it has them (but LightGBM's made-up ``Column_j`` beside a DataFrame ``X``
        of ``F`` columns), else those columns, else ``("f0", ...)``; made distinct."""
        names, F = self.feature_names, self.num_features
        columns = getattr(X, "columns", None)
        given = None if columns is None or len(columns) != F else [str(c) for c in columns]
        made_up = lightgbm_generated_names(names, F) and not set(names) <= set(given or names)
        if names is not None and len(names) == F and not (given and made_up):
            return tuple(distinct_names(names))  # (a frame of Column_j is matched by name)
        if given is not None:
            return tuple(distinct_names(columns))
        return tuple(f"f{j}" for j in range(F))

    # ---- computing ----

    def _compute(
        self,
        X: Any,
        y: Any,
        interactions: bool,
        check_additivity: bool,
        progress: bool,
        tree_limit: int | None,
        iteration_range: Any,
        features: str = "all",
        method: str = "shap",
        converted: bool = False,
    ) -> tuple[Any, ExplainInput, _Model]:
        """Values (n, G, F+1) / (n, G, F+1, F+1) of ``method`` (lazy for Dask), input, model
        (``converted``: in-memory ``X`` holds the model's own values, as ``model_matrix``'s)."""
        check_flags(check_additivity=check_additivity, progress=progress, interactions=interactions)
        inp = explain_input(X, base_margin=self.background is None)
        model = self._model(tree_limit, iteration_range)
        packed = model.packed
        check_dmatrix_sentinel(inp, packed)
        output_columns(packed, features)  # an unknown ``features`` refused before the rows
        ask = {"interactions": interactions, "background": model.background,
               "model_output": self.model_output, "method": method}  # fmt: skip
        if is_dask(inp.rows):
            from distshap.cluster import explain_dask

            y = label_values(y, inp) if self.model_output == "log_loss" else None
            out = explain_dask(packed, inp.rows, backend=self.backend, client=self.client,
                               check_additivity=check_additivity, y=y, **ask)  # fmt: skip
            return used_columns(out, packed, features, interactions), inp, model
        request = make_request(packed, backend=self.backend, check=check_additivity,
                               cupy_data=on_gpu(inp.rows), **ask)  # fmt: skip
        raw = inp.rows if converted else model_matrix(inp.rows, packed, blocks=True)
        n = raw.shape[0]
        labels = label_values(y, inp) if request.needs_labels else None
        labels = check_labels(labels, n, request.transform)

        def run(start: int, stop: int, rows: Any = None, packed: Any = packed) -> Any:
            whole = (start, stop) == (0, n)
            rows = (raw if whole else raw[start:stop]) if rows is None else rows
            y_rows = labels if labels is None or whole else labels[start:stop]
            out = run_request(packed, rows, request, y_rows, start)
            return add_base_margin(out, inp, self.ensemble.base_score, start, interactions)

        out = run_blocks(run, n, model, interactions, raw, progress, features, PROGRESS_BATCH_ROWS)
        return out, inp, model

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
        features: str = "all",
    ) -> Any:
        """SHAP values, in shap's layout (no bias column, groups last) or, for
        ``layout="xgboost"``, in XGBoost's ``pred_contribs`` layout (bias in the last column).

        shap's parameters in shap's order, and by default the arrays shap (>= 0.45) returns,
        the bias in :attr:`expected_value`; ``TreeExplainer(model, layout="xgboost")`` gives
        XGBoost's ``pred_contribs`` (``explainer(X).values`` has shap's layout either way).

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
        features : {"all", "used"}
            ``"used"``: only the features the model splits on (the others' values are 0): a
            :class:`~distshap.row_blocks.UsedFeatureValues` (``values`` (n, U), ``features``).

        Returns
        -------
        ndarray
            float32 ``(n, F)``, or ``(n, F, G)`` for ``G > 1`` output groups; ``(F,)`` /
            ``(F, G)`` for one row; the bias in :attr:`expected_value` (float32, where shap's
            are float64 but for XGBoost's tree-path-dependent values). ``layout="xgboost"``:
            ``(n, F + 1)`` / ``(n, G, F + 1)``, the bias the last column, ``(F + 1,)`` /
            ``(G, F + 1)`` for one row. Same array family as ``X`` (lazy for Dask).
        """
        check_approximate(approximate)
        out, inp, model = self._compute(
            X, y, False, check_additivity, progress, tree_limit, iteration_range, features
        )
        check_shap_layout_margin(inp, self.layout)
        return feature_values(out, inp.one_row, self.layout, features, model.packed)

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
        """SHAP interaction values, in shap's layout (or XGBoost's ``pred_interactions``).

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
            float32 ``(n, F, F)``, or ``(n, F, F, G)`` for ``G > 1`` groups (shap's layout, no
            bias); row ``i`` sums to the SHAP value of feature ``i``. ``layout="xgboost"``:
            ``(n, F + 1, F + 1)`` / ``(n, G, F + 1, F + 1)``, the bias at ``[F, F]`` (the rest
            of the bias row and column zero). Without the row axis for one row.
        """
        out, inp, _ = self._compute(
            X, y, True, check_additivity, progress, tree_limit, iteration_range
        )
        check_shap_layout_margin(inp, self.layout)
        return layout_values(out, inp.one_row, self.layout, True)

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
            (1-D input): no row axis. Dask input gives a
            :class:`~distshap.layouts.DaskExplanation` (lazy; ``.compute()`` is the
            ``shap.Explanation``).

        Raises
        ------
        ImportError
            When the ``shap`` package is not installed (Dask input needs it only to compute).
        """
        check_approximate(approximate)
        start = time.perf_counter()
        if not is_dask(X):
            import_shap()
        out, inp, model = self._compute(
            X, y, interactions, check_additivity, progress, tree_limit, iteration_range
        )
        names = explanation_names(inp, model.packed, self.data_feature_names)
        return explanation(out, inp, model.packed, names, interactions, start)

    def explain(self, X: Any, y: Any = None, interactions: bool = False, **kwargs: Any) -> Any:
        """Alias of calling the explainer: ``explainer.explain(X)`` is ``explainer(X)``."""
        return self(X, y, interactions, **kwargs)
