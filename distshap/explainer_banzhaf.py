"""Banzhaf values and Banzhaf interaction values of :class:`~distshap.TreeExplainer`.

The Banzhaf value of a feature averages its marginal contribution over every coalition of
the other features with the same weight, ``phi_i = sum_{S ⊆ N \\ {i}} (v(S ∪ {i}) - v(S)) /
2**(M - 1)``, where the Shapley value weighs coalitions by their size; the Banzhaf interaction
index of a pair likewise, ``phi_ij = sum_{S ⊆ N \\ {i, j}} (v(S ∪ {i, j}) - v(S ∪ {i}) - v(S ∪
{j}) + v(S)) / 2**(M - 2)``. The games are the SHAP values' own: the tree-path-dependent game
(cover-weighted, no background) or the interventional game (``f(x_S, r_notS)`` averaged over the
background rows), of the raw margin. Features a model never splits on get 0, and adding or
removing such features changes no value (the sums factorise per path:
:mod:`distshap.kernels.banzhaf_cpu`).

*What they sum to.* Not the margin: ``sum_i phi_i`` is the derivative at ``t = 1/2`` of the
game's multilinear extension along the diagonal, ``d/dt E[v(S_t)]`` with every feature in
``S_t`` with probability ``t``, which equals ``f(x) - v(∅)`` only when no path has more than two
features. No independent cheap traversal gives it, so the Banzhaf methods take no
``check_additivity``; their interaction values satisfy by construction that each row sums to
the Banzhaf value (the diagonal is ``phi_i - sum_{j != i} phi_ij``, as for SHAP interaction
values), and the tests check every backend against a brute-force enumeration.

*Layouts and bias.* As :meth:`~distshap.TreeExplainer.shap_values`: the explainer's ``layout``
(shap's: ``(n, F)`` / ``(n, F, F)``, groups last; XGBoost's: bias column last), the bias being
``v(∅)``, the explainer's :attr:`~distshap.TreeExplainer.expected_value` (base score included).
Off the diagonal ``[i, j]`` and ``[j, i]`` both hold the whole index ``phi_ij`` (SHAP interaction
values hold half the Shapley interaction index there), as WOODELF's
``banzhaf_interaction_values``, whose diagonal is 0.
"""

from __future__ import annotations

from typing import Any

from distshap.layouts import layout_values
from distshap.shap_compat import check_shap_layout_margin

__all__ = ["BanzhafMethods"]


class BanzhafMethods:
    """:meth:`banzhaf_values` and :meth:`banzhaf_interaction_values` of an explainer (its
    ``layout`` and ``_compute``, the route of its SHAP values with ``method="banzhaf"``)."""

    layout: str

    def _banzhaf(
        self, X: Any, interactions: bool, tree_limit: int | None, iteration_range: Any
    ) -> Any:
        out, inp, _ = self._compute(  # type: ignore[attr-defined]
            X, None, interactions, False, False, tree_limit, iteration_range, method="banzhaf"
        )
        check_shap_layout_margin(inp, self.layout)
        return layout_values(out, inp.one_row, self.layout, interactions)

    def banzhaf_values(
        self,
        X: Any,
        *,
        tree_limit: int | None = None,
        iteration_range: tuple[int, int] | None = None,
    ) -> Any:
        """Banzhaf values of the rows of ``X`` (raw margin), in the explainer's ``layout``.

        The game is the explainer's: tree-path-dependent without background data,
        interventional with it (the explainer's ``model_output`` must be ``"raw"``). What they
        sum to: the module :mod:`distshap.explainer_banzhaf` says (not the margin).

        Parameters
        ----------
        X : ndarray, DataFrame, Series, cupy.ndarray, scipy.sparse, xgboost.DMatrix, dask
            Rows, as for :meth:`~distshap.TreeExplainer.shap_values`.
        tree_limit, iteration_range
            As for :meth:`~distshap.TreeExplainer.shap_values`.

        Returns
        -------
        ndarray
            float32, the layout of :meth:`~distshap.TreeExplainer.shap_values`: shap's ``(n,
            F)`` / ``(n, F, G)``, or XGBoost's ``(n, F + 1)`` / ``(n, G, F + 1)`` with ``v(∅)``
            (:attr:`~distshap.TreeExplainer.expected_value`) last. One row: no row axis. Same
            array family as ``X`` (lazy for Dask).

        Raises
        ------
        ValueError
            An interventional explainer whose ``model_output`` is not ``"raw"``.
        """
        return self._banzhaf(X, False, tree_limit, iteration_range)

    def banzhaf_interaction_values(
        self,
        X: Any,
        *,
        tree_limit: int | None = None,
        iteration_range: tuple[int, int] | None = None,
    ) -> Any:
        """Banzhaf interaction values of the rows of ``X`` (raw margin), in the explainer's
        ``layout``.

        Parameters
        ----------
        X, tree_limit, iteration_range
            As for :meth:`banzhaf_values`.

        Returns
        -------
        ndarray
            float32, the layout of :meth:`~distshap.TreeExplainer.shap_interaction_values`:
            ``[i, j]`` and ``[j, i]`` the Banzhaf interaction index of the pair, ``[i, i] =
            phi_i - sum_{j != i} phi_ij`` (row ``i`` sums to the Banzhaf value of feature
            ``i``); XGBoost's layout has ``v(∅)`` at ``[F, F]`` and zeros elsewhere in the bias
            row and column.
        """
        return self._banzhaf(X, True, tree_limit, iteration_range)
