"""shap's ``TreeExplainer`` interface: its arguments, checked, and the inputs it takes.

What a drop-in for ``shap.TreeExplainer`` accepts and refuses, kept apart from what distshap
computes: the argument checks (``model_output``, ``feature_perturbation``, ``feature_names``,
the ignored ``approximate`` / ``link``), a ``catboost.Pool`` (its rows and labels), an
``xgboost.DMatrix`` that stores the model's missing-value sentinel, shap's ``tree_limit`` as
boosting rounds (:mod:`distshap.models.iterations`), and the labels of the log loss.
"""

from __future__ import annotations

import warnings
from dataclasses import replace
from typing import Any

import numpy as np

from distshap.inputs import ExplainInput, is_cupy, is_dask
from distshap.inputs import explain_input as _rows_input
from distshap.models import Ensemble
from distshap.models.iterations import resolve_iteration_range, tree_limit_range
from distshap.packing import ALGORITHMS

__all__ = [
    "FEATURE_PERTURBATIONS",
    "MODEL_OUTPUTS",
    "UNSET",
    "add_base_margin",
    "check_approximate",
    "check_build_options",
    "check_client",
    "check_dmatrix_sentinel",
    "check_feature_names",
    "check_flags",
    "check_ignored_arguments",
    "check_model_output",
    "check_shap_layout_margin",
    "check_perturbation",
    "explain_input",
    "label_values",
    "pool_rows",
    "resolve_perturbation",
    "rounds",
]

#: shap's ``feature_perturbation`` values.
FEATURE_PERTURBATIONS = ("auto", "interventional", "tree_path_dependent")
#: The ``model_output`` values distshap explains (shap's, less model method names).
MODEL_OUTPUTS = ("raw", "probability", "log_loss")

UNSET = object()  # shap's constructor ``approximate``: given or not


def check_perturbation(feature_perturbation: Any) -> None:
    """Refuse a ``feature_perturbation`` that is none of shap's."""
    if not isinstance(feature_perturbation, str) or (
        feature_perturbation not in FEATURE_PERTURBATIONS
    ):
        raise ValueError(
            f"feature_perturbation={feature_perturbation!r}: use one of "
            f"{', '.join(map(repr, FEATURE_PERTURBATIONS))}"
        )


def resolve_perturbation(feature_perturbation: str, has_data: bool, model_output: str) -> str:
    """shap's ``feature_perturbation`` (checked) with ``"auto"`` replaced, refusing what shap
    refuses."""
    if feature_perturbation == "auto":
        feature_perturbation = "interventional" if has_data else "tree_path_dependent"
    if feature_perturbation == "interventional" and not has_data:
        raise ValueError(
            "feature_perturbation='interventional' integrates over background rows: pass "
            "them as data (TreeExplainer(model, X_background); 100 to 1,000 rows, e.g. "
            "shap.utils.sample(X_train, 100)), or use 'tree_path_dependent'"
        )
    if feature_perturbation == "tree_path_dependent" and model_output != "raw":
        raise ValueError(
            f"model_output={model_output!r} needs feature_perturbation='interventional' "
            "and background data (shap refuses it for 'tree_path_dependent' too): "
            f"TreeExplainer(model, X_background, model_output={model_output!r})"
        )
    return feature_perturbation


def rounds(ensemble: Ensemble, tree_limit: Any, iteration_range: Any) -> tuple[int, int] | None:
    """The boosting rounds ``[begin, end)`` that shap's ``tree_limit`` or XGBoost's
    ``iteration_range`` selects; ``None`` for all of them."""
    if tree_limit is not None and iteration_range is not None:
        raise ValueError(
            f"tree_limit={tree_limit} and iteration_range={iteration_range!r} both select "
            "trees: pass one"
        )
    if iteration_range is not None:
        key = resolve_iteration_range(ensemble, iteration_range)
    elif tree_limit is not None and ensemble.model_kind.startswith("lightgbm"):
        key = _lightgbm_tree_limit(ensemble, tree_limit)
    elif tree_limit is not None:
        key = tree_limit_range(ensemble, tree_limit)
    else:
        return None
    return None if key == (0, ensemble.extra["iteration_indptr"].size - 1) else key


def label_values(y: Any, inp: ExplainInput) -> Any:
    """The labels of the log loss as given (``y``, else the input's own), in memory as an
    array (one row: one label); checking them is :func:`distshap.interventional.check_labels`."""
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
    return y.reshape(1) if inp.one_row and y.ndim == 0 else y


def check_model_output(model_output: Any) -> None:
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


def check_ignored_arguments(approximate: Any, link: Any, linearize_link: Any) -> None:
    """shap's constructor takes ``approximate``, ``link`` and ``linearize_link`` and ignores
    them; so does distshap, with a warning where they ask for something it does not do."""
    if approximate is not UNSET:
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


def check_feature_names(names: Any, num_features: int) -> tuple[str, ...] | None:
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


def _whole_number(name: str, value: Any, fix: str) -> int:
    """``value`` as an int >= 0 (an integral float such as ``1e9`` too), else one line."""
    ok = isinstance(value, (int, np.integer, float, np.floating)) and not isinstance(
        value, (bool, np.bool_)
    )
    if ok and np.isfinite(value) and value >= 0 and float(value).is_integer():
        return int(value)
    error = ValueError if ok else TypeError
    raise error(f"{name}={value!r}: pass a whole number >= 0 ({fix})")


def check_build_options(
    algorithm: Any, table_budget_bytes: Any, max_table_features: Any, missing: Any
) -> dict[str, Any]:
    """distshap's own constructor options, checked before the model is read.

    Returns
    -------
    dict
        ``algorithm``, ``table_budget_bytes``, ``max_table_features`` (ints) and ``missing``
        (a float or ``None``).
    """
    if not isinstance(algorithm, str) or algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm={algorithm!r}: use one of {', '.join(map(repr, ALGORITHMS))}")
    budget = _whole_number(
        "table_budget_bytes", table_budget_bytes, "bytes of pattern tables, e.g. 1 << 30; 0: none"
    )
    features = _whole_number(
        "max_table_features", max_table_features, "the longest path given a table; 0: none"
    )
    real = isinstance(missing, (int, np.integer, float, np.floating)) and not isinstance(
        missing, (bool, np.bool_)
    )
    if missing is not None and not real:
        raise TypeError(
            f"missing={missing!r}: pass the number read as missing besides NaN (as "
            "xgboost.DMatrix(missing=...) takes it), or None for the model's own"
        )
    return {
        "algorithm": algorithm,
        "table_budget_bytes": budget,
        "max_table_features": features,
        "missing": None if missing is None else float(missing),
    }


def check_client(client: Any) -> None:
    """``client``: ``None`` or a ``distributed.Client`` (refused in one line otherwise, not when
    the first Dask input reaches it)."""
    if client is not None and not callable(getattr(client, "submit", None)):
        raise TypeError(
            f"client={client!r}: pass a distributed.Client (distshap.start_cluster(address=...) "
            "connects one to a scheduler), or None for the current client"
        )


def check_flags(**flags: Any) -> None:
    """Each flag a bool (or 0 / 1): a string such as ``"no"`` would silently mean True."""
    for name, value in flags.items():
        whole = isinstance(value, (int, np.integer)) and value in (0, 1)
        if not (isinstance(value, (bool, np.bool_)) or whole):
            raise TypeError(f"{name}={value!r}: pass True or False")


def check_approximate(approximate: bool) -> None:
    if approximate:
        raise ValueError(
            "approximate=True (shap's Saabas approximation) is not offered: distshap computes "
            "exact values, fast; drop approximate"
        )


def _is_catboost_pool(X: Any) -> bool:
    return type(X).__module__.split(".")[0] == "catboost" and type(X).__name__ == "Pool"


def pool_rows(X: Any) -> tuple[Any, np.ndarray | None]:
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
    if np.asarray(X.get_baseline()).size:
        raise ValueError(
            "X is a catboost.Pool with a baseline (per-row starting margins), which distshap "
            "does not add to the bias: pass a Pool without baseline, or the rows themselves, "
            "and add the baseline to the bias column yourself"
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


def explain_input(X: Any, base_margin: bool = False) -> ExplainInput:
    """:func:`~distshap.inputs.explain_input`, taking a ``catboost.Pool`` too.

    An ``xgboost.DMatrix`` with a ``base_margin`` is refused unless ``base_margin`` says the
    caller adds it to the bias (:func:`add_base_margin`).
    """
    rows, labels = pool_rows(X)
    inp = _rows_input(rows)
    if inp.base_margin is not None and not base_margin:
        raise ValueError(
            "X is an xgboost.DMatrix with a base_margin (per-row starting margins), which only "
            "shap_values, shap_interaction_values and explainer(X) of the tree-path-dependent "
            "algorithm add to the bias: use one of those, or a DMatrix without base_margin"
        )
    if labels is not None and labels.size == inp.rows.shape[0]:
        inp = replace(inp, labels=labels)
    return inp


def add_base_margin(
    out: np.ndarray, inp: ExplainInput, base_score: np.ndarray, start: int, interactions: bool
) -> np.ndarray:
    """Values ``(n, G, F+1)`` / ``(n, G, F+1, F+1)`` of rows ``start:start+n`` of ``inp``, whose
    bias starts from the DMatrix's ``base_margin`` instead of the model's ``base_score``.

    XGBoost's ``pred_contribs`` / ``pred_interactions`` do the same: a row's ``base_margin``
    replaces ``base_score`` in its bias (the ``[F, F]`` entry for interactions), and its
    prediction starts from it. The values are checked against the margin without it first.
    """
    if inp.base_margin is None:
        return out
    n, G = out.shape[0], out.shape[1]
    margin = inp.base_margin.reshape(inp.rows.shape[0], -1)
    if margin.shape[1] != G:
        raise ValueError(
            f"the DMatrix's base_margin has {margin.shape[1]} column(s) but the model has {G} "
            f"output(s): give it shape (n_rows, {G})" + ("" if G > 1 else " or (n_rows,)")
        )
    shift = margin[start : start + n].astype(np.float64) - base_score.reshape(1, G)
    out = np.array(out, copy=True)
    F = out.shape[2] - 1
    at = (slice(None), slice(None), F, F) if interactions else (slice(None), slice(None), F)
    out[at] = (out[at].astype(np.float64) + shift).astype(out.dtype)
    return out


def check_dmatrix_sentinel(inp: ExplainInput, packed: Any) -> None:
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


def check_shap_layout_margin(inp: Any, layout: str) -> None:
    """shap's layout has no bias column: a DMatrix ``base_margin`` (a bias per row) cannot go
    anywhere, so it is refused rather than dropped."""
    if layout == "shap" and inp.base_margin is not None:
        raise ValueError(
            "X is an xgboost.DMatrix with a base_margin, which goes into each row's bias, and "
            "layout='shap' has no bias column: use layout='xgboost' (the bias is the last "
            "column) or explainer(X) (an Explanation whose base_values hold it)"
        )
