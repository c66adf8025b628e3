"""The tree-path-dependent pair methods of :class:`~distshap.TreeExplainer`.

Interactions at scale (:meth:`~PairMethods.top_interactions`,
:meth:`~PairMethods.interaction_summary`: the kernels of :mod:`distshap.pair_interactions`
accumulate only pairs that share a tree path, never the ``(F+1)**2`` matrix) and the
Shapley-Taylor interaction index (:mod:`distshap.taylor`). They explain the
tree-path-dependent game only, so they are a base class of the explainer of their own.
"""

from __future__ import annotations

from typing import Any

from distshap.inputs import ExplainInput, is_dask, model_matrix
from distshap.layouts import check_output_fits, layout_values
from distshap.packed import PackedModel
from distshap.shap_compat import check_dmatrix_sentinel, explain_input

__all__ = ["PairMethods"]


class PairMethods:
    """Top interaction pairs, interaction summaries and Shapley-Taylor values of an explainer
    (its ``background``, ``backend``, ``client`` and ``_model(tree_limit, iteration_range)``).
    """

    background: Any
    backend: str
    client: Any

    def _path_dependent_input(
        self, X: Any, what: str, tree_limit: int | None, iteration_range: Any
    ) -> tuple[ExplainInput, PackedModel]:
        if self.background is not None:
            raise ValueError(
                f"{what} are computed for the tree-path-dependent game only; this explainer "
                "is interventional (it has background data): build one without data, "
                "TreeExplainer(model), for them"
            )
        inp = explain_input(X)
        if not is_dask(inp.rows) and inp.rows.shape[0] == 0:
            raise ValueError("X has no rows: nothing to explain")  # as shap_values says
        packed = self._model(tree_limit, iteration_range).packed
        check_dmatrix_sentinel(inp, packed)
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
        :meth:`shap_interaction_values` (either layout), with the same bits. Order: ``|phi_ij|``
        descending, ties by ``(i, j)`` ascending: exactly what sorting the whole upper triangle
        gives (a row with fewer than ``k`` non-zero pairs continues with its zero pairs in
        ``(i, j)`` order).
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
            column 0: the mean of :meth:`shap_interaction_values` in XGBoost's layout
            (``layout="xgboost"``; absolute values unless ``signed``). Values are summed as
            exact integers, so the bits do not depend on batches, Dask chunks, the reduction
            tree or the number of GPUs (they do on the backend). For Dask input, a lazy
            one-chunk Dask array.
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
        check_output_fits(raw.shape[0], packed, True)
        out = shap_taylor_values(packed, raw, self.backend, check=check_additivity)
        return layout_values(out, inp.one_row, "xgboost", True)
