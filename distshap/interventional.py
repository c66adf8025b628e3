"""Interventional SHAP: the background data set and the ``model_output`` transforms (host side).

Interventional ("marginal") SHAP values average, over the rows ``r`` of a background data set,
the Shapley values of the game ``S -> f(x_S, r_notS)`` (shap's
``feature_perturbation="interventional"``). The kernels
(``distshap.kernels.<backend>.interventional_values``) take a
:class:`~distshap.kernels.interventional_math.Background`: the background rows as the kernels
compare them and the model's margin of each, built once per model by :func:`build_background`
and shipped to Dask workers with the model.

``model_output`` (shap's definitions): ``"raw"`` explains the margin; ``"probability"``
``T(m) = 1 / (1 + exp(-m))`` and ``"log_loss"`` ``T(m, y) = log(1 + exp(m)) - y m`` explain a
binary logistic model's probability and its log loss for labels ``y``. Each pair ``(x, r)``'s
values are rescaled by ``(T(m_x, y) - T(m_r, y)) / (m_x - m_r)`` (1 when the margins are
equal), and the bias is ``mean_r T(m_r, y)``, so every row's values and bias sum to
``T(m_x, y)``. :func:`transform_id` decides from the model's kind (library and objective,
:attr:`distshap.packed.PackedModel.model_kind`) whether its margin is a log-odds; anything
else is refused with the reason, never approximated.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from distshap.inputs import array_module, is_cupy, is_dask, is_frame, model_matrix
from distshap.kernels.interventional_math import LOG_LOSS, PROBABILITY, RAW, Background
from distshap.kernels.margin import predict_margin

__all__ = [
    "MODEL_OUTPUTS",
    "apply_transform",
    "bias_values",
    "build_background",
    "check_labels",
    "transform_id",
]

#: The ``model_output`` values interventional SHAP explains.
MODEL_OUTPUTS = ("raw", "probability", "log_loss")


def build_background(packed: Any, data: Any) -> Background:
    """The :class:`~distshap.kernels.interventional_math.Background` of ``data`` for ``packed``.

    Parameters
    ----------
    packed : PackedModel
        Must carry its margin arrays (as :class:`~distshap.TreeExplainer` builds it).
    data : ndarray, pandas DataFrame, cupy.ndarray or scipy.sparse matrix
        ``(B, F)`` background rows, taken like rows to explain (DataFrame columns by name,
        category columns coded, the model's missing-value sentinel); NaN is missing.

    Raises
    ------
    ValueError
        No rows, a feature count other than the model's, or a model without margin arrays.
    TypeError
        A Dask collection (compute it first: a background is small) or non-numeric data.
    """
    F = packed.num_features
    if is_dask(data):
        raise TypeError(
            "the background data is a Dask collection: pass it in memory (data.compute()); "
            "a background set is small (shap suggests 100 to 1000 rows)"
        )
    if getattr(packed, "margin", None) is None:
        raise ValueError(
            "this packed model has no margin arrays, which interventional SHAP needs for the "
            "background rows' margins: build it with margin=margin_model(ensemble) (as "
            "TreeExplainer does)"
        )
    shape = getattr(data, "shape", None)
    if shape is None:
        data = np.asarray(data)
        shape = data.shape
    if len(shape) != 2:
        raise ValueError(
            f"the background data must be 2-D (n_rows, {F}), got shape {tuple(shape)}; for one "
            "row use data.reshape(1, -1)"
        )
    if shape[0] == 0:
        raise ValueError(
            "the background data has no rows: pass at least one background row (shap suggests "
            "100 to 1000 rows, e.g. a sample of the training data)"
        )
    if not is_frame(data) and shape[1] != F:
        raise ValueError(
            f"the background data has {shape[1]} features but the model expects {F}: pass "
            "rows with the columns the model was trained on, in the same order"
        )
    raw = model_matrix(data, packed, what="data (the background)")
    if is_cupy(raw):
        raw = raw.get()
    rows = np.ascontiguousarray(packed.encoding.apply(raw), dtype=np.float32)
    if np.may_share_memory(rows, raw):  # the caller's array: writing it must not change these
        rows = rows.copy()
    margin = np.ascontiguousarray(predict_margin(packed, raw), dtype=np.float64)
    h = hashlib.sha256()
    h.update(str(packed.digest).encode())
    for arr in (rows, margin):
        h.update(f"{arr.dtype.str}:{arr.shape}".encode())
        h.update(memoryview(arr).cast("B"))
    return Background(rows=rows, margin=margin, digest=h.hexdigest(), model_digest=packed.digest)


# Classifiers whose margin is already a class probability (each group one class).
_PROBABILITY_TREES = (
    "sklearn:DecisionTreeClassifier",
    "sklearn:ExtraTreeClassifier",
    "sklearn:RandomForestClassifier",
    "sklearn:ExtraTreesClassifier",
)
_XGBOOST_LOGISTIC = ("binary:logistic", "reg:logistic", "binary:logitraw")
_SKLEARN_LOGISTIC = (
    "sklearn:GradientBoostingClassifier:log_loss",
    "sklearn:GradientBoostingClassifier:deviance",  # scikit-learn < 1.3's name of log_loss
    "sklearn:HistGradientBoostingClassifier",
)


def _margin_kind(kind: str, groups: int) -> tuple[str, str]:
    """``("logistic" | "probability" | "", reason)``: what the model's margin is.

    ``"logistic"``: the margin of a binary model whose probability is ``1 / (1 + exp(-m))``;
    ``"probability"``: the margins are class probabilities; ``""``: neither, and why.
    """
    library = kind.split(":", 1)[0]
    if kind in _PROBABILITY_TREES:
        return "probability", ""
    if groups > 1:
        return "", (
            f"it has {groups} outputs, a multiclass model: each class's probability depends on "
            "every group's margin (a softmax), so no transform of one group's margin is its "
            "probability"
        )
    if library == "xgboost":
        logistic = kind.split(":", 1)[1] in _XGBOOST_LOGISTIC
    elif library == "lightgbm":
        if "sigmoid:" in kind:
            return "", (
                f"its objective ({kind.split(':', 2)[-1]}) sets the sigmoid parameter, so its "
                "probability is 1 / (1 + exp(-sigmoid * m)), not the logistic of the margin"
            )
        logistic = kind.endswith((":binary", ":cross_entropy"))
    elif library == "sklearn":
        if kind.startswith("sklearn:GradientBoostingClassifier:exponential"):
            return "", "its exponential loss makes the probability 1 / (1 + exp(-2 m))"
        logistic = kind.startswith(_SKLEARN_LOGISTIC)
    elif library == "catboost":
        if not kind.startswith("catboost:CatBoostClassifier"):
            return "", (
                "its loss is not recorded (a CatBoost model loaded from a file or a "
                "CatBoostRegressor): explain the CatBoostClassifier object itself"
            )
        logistic = True
    else:
        return "", "distshap does not know what its margin means"
    if not logistic:
        return "", "its margin is not the log-odds of a binary logistic model"
    return "logistic", ""


def transform_id(model_output: str, packed: Any) -> int:
    """The kernels' transform for ``model_output``: 0 raw, 1 probability, 2 log loss.

    ``"probability"`` and ``"log_loss"`` need a binary logistic model (XGBoost
    ``binary:logistic`` / ``reg:logistic`` / ``binary:logitraw``, LightGBM ``binary`` /
    ``cross_entropy``, scikit-learn's ``(Hist)GradientBoostingClassifier`` with the log loss,
    a ``CatBoostClassifier``), whose probability is ``1 / (1 + exp(-margin))``. For
    scikit-learn's classification trees and forests, whose outputs are class probabilities
    already, ``"probability"`` is the raw output (0), as in shap.

    Raises
    ------
    ValueError
        An unknown ``model_output``, or one the model's margin does not support (the message
        says why).
    """
    if model_output not in MODEL_OUTPUTS:
        raise ValueError(
            f"unknown model_output {model_output!r}: use one of {', '.join(MODEL_OUTPUTS)}"
        )
    if model_output == "raw":
        return RAW
    kind = str(getattr(packed, "model_kind", "unknown"))
    margin, reason = _margin_kind(kind, int(packed.num_groups))
    if margin == "probability":
        if model_output == "probability":
            return RAW  # the trees output the class probabilities themselves
        reason = (
            "its outputs are class probabilities, not log-odds, so the logistic log loss of "
            "them is not the model's loss"
        )
    elif margin == "logistic":
        return PROBABILITY if model_output == "probability" else LOG_LOSS
    raise ValueError(
        f"model_output={model_output!r} needs a binary logistic model (probability = "
        f"1 / (1 + exp(-margin))), but this model ({kind}) is not one: {reason}. Use "
        "model_output='raw' to explain its margin"
    )


def check_labels(y: Any, n_rows: int, transform: int) -> Any:
    """``y`` as float64 ``(n_rows,)`` labels for the log loss (``None`` for other transforms).

    Keeps ``y``'s array module (NumPy or CuPy).

    Raises
    ------
    ValueError
        ``y`` missing for the log loss, not 1-D of ``n_rows`` entries, or with values outside
        ``[0, 1]`` (NaN included).
    """
    if transform != LOG_LOSS:
        return None
    if y is None:
        raise ValueError(
            "model_output='log_loss' explains the loss of each row and needs its label: pass "
            "y (n_rows,) with values in [0, 1]"
        )
    xp = array_module(y)
    y = xp.asarray(y)  # a pandas Series or list too
    if y.ndim != 1 or y.shape[0] != n_rows:
        raise ValueError(
            f"y has shape {tuple(y.shape)} but {n_rows:,} rows are explained: pass one label "
            "per row, a 1-D array"
        )
    if y.dtype.kind not in "biuf":
        raise ValueError(f"y has dtype {y.dtype}: pass numeric labels in [0, 1]")
    y = xp.ascontiguousarray(y, dtype=xp.float64)
    if not bool(((y >= 0.0) & (y <= 1.0)).all()):
        raise ValueError(
            "y holds values outside [0, 1] (or NaN): the logistic log loss takes labels 0/1 "
            "(or probabilities); recode them, e.g. y = (labels == positive_class)"
        )
    return y


def apply_transform(margin: Any, transform: int, y: Any = None) -> Any:
    """``T(margin, y)`` elementwise: ``margin`` ``(n, G)`` (NumPy or CuPy), ``y`` ``(n,)``."""
    xp = array_module(margin)
    if transform == RAW:
        return margin
    if transform == PROBABILITY:
        return xp.exp(-xp.logaddexp(0.0, -margin))
    if transform == LOG_LOSS:
        return xp.logaddexp(0.0, margin) - xp.asarray(y, dtype=xp.float64)[:, None] * margin
    raise ValueError(f"unknown transform {transform}: use 0, 1 or 2")


def bias_values(background: Background, transform: int, y: Any = None) -> np.ndarray:
    """The bias entry of every row: ``mean_r T(m_r, y)``, float64 NumPy.

    Returns ``(1, G)`` for the raw margin and the probability (the same for every row), and
    ``(n, G)`` for the log loss of labels ``y`` ``(n,)``.
    """
    margin = background.margin
    if transform == RAW:
        return margin.mean(axis=0, keepdims=True)
    if transform == PROBABILITY:
        return apply_transform(margin, PROBABILITY).mean(axis=0, keepdims=True)
    if transform == LOG_LOSS:
        if y is None:
            raise ValueError("the log-loss bias needs the labels y")
        y = np.asarray(y.get() if is_cupy(y) else y, dtype=np.float64).reshape(-1)
        softplus = np.logaddexp(0.0, margin).mean(axis=0)
        return softplus[None, :] - y[:, None] * margin.mean(axis=0)[None, :]
    raise ValueError(f"unknown transform {transform}: use 0, 1 or 2")
