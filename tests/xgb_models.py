"""Small, deterministic XGBoost models for the whole test suite.

Every builder returns ``(booster, X)``: a trained ``xgboost.Booster`` and the rows to explain
(a float32 NumPy array, or a pandas DataFrame for the categorical model, whose category columns
have the integer categories ``0..k-1`` so that ``np.asarray(X, dtype=np.float32)`` gives the
category codes XGBoost uses, with NaN for missing). Models are cached; each call returns a fresh
copy of ``X`` (do not mutate the booster).

Use :func:`dmatrix` to build the matching ``xgboost.DMatrix`` and :func:`as_array` to get the
float32 array the kernels take. ``MODEL_KINDS`` maps a name to each builder so tests can
parametrise over every kind::

    @pytest.mark.parametrize("kind", sorted(MODEL_KINDS))
    def test_something(kind):
        booster, X = MODEL_KINDS[kind]()
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import xgboost as xgb

__all__ = [
    "MODEL_KINDS",
    "VECTOR_LEAF_KINDS",
    "VECTOR_LEAF_KINDS_33",
    "VECTOR_LEAF_SHAP",
    "as_array",
    "build_binary",
    "build_categorical",
    "build_dart",
    "build_missing",
    "build_multiclass",
    "build_objective",
    "build_random_forest",
    "build_regression",
    "dmatrix",
    "stored_categories_model",
]

N_ROWS = 300
N_FEATURES = 6


def dmatrix(X: Any, label: Any = None) -> xgb.DMatrix:
    """``xgboost.DMatrix`` for ``X`` (categorical support on for DataFrames)."""
    return xgb.DMatrix(X, label=label, enable_categorical=isinstance(X, pd.DataFrame))


def as_array(X: Any) -> np.ndarray:
    """``X`` as a C-contiguous float32 array (category codes for categorical columns)."""
    return np.ascontiguousarray(np.asarray(X, dtype=np.float32))


def _features(seed: int, n: int = N_ROWS, f: int = N_FEATURES) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, f)).astype(np.float32)


def _signal(X: np.ndarray) -> np.ndarray:
    x = np.nan_to_num(X.astype(np.float64))
    return 1.5 * x[:, 0] - x[:, 1] * (x[:, 2] > 0) + 0.5 * x[:, 3] ** 2 + 0.3 * x[:, 4]


def _train(params: dict, X: Any, y: np.ndarray, rounds: int) -> xgb.Booster:
    base = {"max_depth": 4, "learning_rate": 0.3, "seed": 0, "nthread": 1, "tree_method": "hist"}
    base.update(params)
    return xgb.train(base, dmatrix(X, y), num_boost_round=rounds)


def _cached(fn: Callable[[], tuple[xgb.Booster, Any]]) -> Callable[[], tuple[xgb.Booster, Any]]:
    built = functools.lru_cache(maxsize=1)(fn)

    @functools.wraps(fn)
    def wrapper() -> tuple[xgb.Booster, Any]:
        booster, X = built()
        return booster, X.copy()

    return wrapper


@_cached
def build_regression() -> tuple[xgb.Booster, np.ndarray]:
    """Squared-error regression, 15 rounds of depth 4."""
    X = _features(1)
    y = _signal(X) + 0.1 * np.random.default_rng(11).normal(size=len(X))
    return _train({"objective": "reg:squarederror"}, X, y, 15), X


@_cached
def build_binary() -> tuple[xgb.Booster, np.ndarray]:
    """Binary logistic classification, 15 rounds of depth 4 (base_score fitted from labels)."""
    X = _features(2)
    y = (_signal(X) > 0.3).astype(np.float32)
    return _train({"objective": "binary:logistic"}, X, y, 15), X


@_cached
def build_multiclass() -> tuple[xgb.Booster, np.ndarray]:
    """Three-class softprob, 10 rounds of depth 3 (30 trees, one group per class)."""
    X = _features(3)
    s = _signal(X)
    y = np.digitize(s, np.quantile(s, [0.3, 0.7])).astype(np.float32)
    return _train({"objective": "multi:softprob", "num_class": 3, "max_depth": 3}, X, y, 10), X


@_cached
def build_missing() -> tuple[xgb.Booster, np.ndarray]:
    """Regression trained and explained with ~20% NaNs (default directions both ways)."""
    X = _features(4)
    rng = np.random.default_rng(14)
    X[rng.random(X.shape) < 0.2] = np.nan
    y = _signal(X) + np.isnan(X[:, 0]) * 2.0 - np.isnan(X[:, 1]) * 1.0
    return _train({"objective": "reg:squarederror", "max_depth": 5}, X, y, 15), X


@_cached
def build_categorical() -> tuple[xgb.Booster, pd.DataFrame]:
    """Regression on 2 numeric + 2 categorical columns (one-hot and partition splits, NaNs)."""
    rng = np.random.default_rng(5)
    n = N_ROWS
    a = rng.normal(size=n).astype(np.float32)
    b = rng.normal(size=n).astype(np.float32)
    c3 = rng.integers(0, 3, n).astype(np.float64)  # few categories: one-hot splits
    c8 = rng.integers(0, 8, n).astype(np.float64)  # many categories: partition splits
    c8[rng.random(n) < 0.1] = np.nan
    X = pd.DataFrame(
        {
            "a": a,
            "c3": pd.Categorical(c3, categories=list(range(3))),
            "b": b,
            "c8": pd.Categorical(c8, categories=list(range(8))),
        }
    )
    effect = np.array([0.0, 2.0, -1.0, 0.5, 3.0, -2.0, 1.0, -0.5])
    y = a + (c3 == 1) * 1.5 + np.where(np.isnan(c8), 0.7, effect[np.nan_to_num(c8).astype(int)])
    params = {"objective": "reg:squarederror", "max_cat_to_onehot": 4, "max_depth": 4}
    return _train(params, X, y.astype(np.float32), 15), X


@_cached
def build_dart() -> tuple[xgb.Booster, np.ndarray]:
    """DART booster (rate_drop 0.3, never skipped): tree weights differ from 1."""
    X = _features(6)
    y = _signal(X)
    params = {
        "booster": "dart",
        "objective": "reg:squarederror",
        "rate_drop": 0.3,
        "skip_drop": 0.0,
        "max_depth": 3,
    }
    return _train(params, X, y, 12), X


@_cached
def build_random_forest() -> tuple[xgb.Booster, np.ndarray]:
    """Boosted random forest: 4 rounds of ``num_parallel_tree=3`` subsampled trees."""
    X = _features(7)
    y = (_signal(X) > 0.3).astype(np.float32)
    params = {
        "objective": "binary:logistic",
        "num_parallel_tree": 3,
        "subsample": 0.8,
        "colsample_bynode": 0.8,
        "learning_rate": 1.0,
        "max_depth": 5,
    }
    return _train(params, X, y, 4), X


def build_objective(objective: str, **params: Any) -> tuple[xgb.Booster, np.ndarray]:
    """A small model (5 rounds, depth 3) for any objective, with labels that suit it."""
    X = _features(8, n=200)
    s = _signal(X)
    rng = np.random.default_rng(18)
    d = dmatrix(X)
    if objective.startswith(("binary:", "reg:logistic")):
        y = (s > 0.3).astype(np.float32)
    elif objective.startswith("multi:"):
        params.setdefault("num_class", 3)
        y = np.digitize(s, np.quantile(s, [0.3, 0.7])).astype(np.float32)
    elif objective in ("count:poisson", "reg:gamma", "reg:tweedie", "reg:squaredlogerror"):
        y = rng.poisson(np.exp(0.3 * s)).astype(np.float32) + (objective == "reg:gamma")
    elif objective == "survival:cox":
        y = np.exp(0.3 * s) * np.where(rng.random(len(s)) < 0.8, 1.0, -1.0)
    elif objective == "survival:aft":
        lower = np.exp(0.3 * s)
        d.set_float_info("label_lower_bound", lower)
        d.set_float_info("label_upper_bound", lower * 1.5)
        y = None
    elif objective.startswith("rank:"):
        y = (s > np.median(s)).astype(np.float32)
        d.set_group([50] * 4)
    else:
        y = s.astype(np.float32)
    if y is not None:
        d.set_label(y)
    base = {"objective": objective, "max_depth": 3, "seed": 0, "nthread": 1}
    base.update(params)
    return xgb.train(base, d, num_boost_round=5), X


MODEL_KINDS: dict[str, Callable[[], tuple[xgb.Booster, Any]]] = {
    "regression": build_regression,
    "binary": build_binary,
    "multiclass": build_multiclass,
    "missing": build_missing,
    "categorical": build_categorical,
    "dart": build_dart,
    "random_forest": build_random_forest,
}


# --- vector-leaf trees (multi_strategy="multi_output_tree") ------------------------------------

#: XGBoost 3.3 added pred_contribs / pred_interactions, DART and categorical splits for
#: vector-leaf trees; earlier versions train the numeric gbtree ones and predict margins.
VECTOR_LEAF_SHAP = tuple(int(v) for v in xgb.__version__.split(".")[:2]) >= (3, 3)


def _vector_leaf(params: dict, X: Any, y: np.ndarray, rounds: int) -> xgb.Booster:
    base = {"multi_strategy": "multi_output_tree", "max_depth": 3}
    base.update(params)
    return _train(base, X, y, rounds)


@_cached
def build_vector_leaf_regression() -> tuple[xgb.Booster, np.ndarray]:
    """Three targets, one vector-leaf tree per round (5 rounds, depth 4), ~15% NaNs."""
    X = _features(21, n=200)
    X[np.random.default_rng(22).random(X.shape) < 0.15] = np.nan
    x = np.nan_to_num(X.astype(np.float64))
    Y = np.column_stack([_signal(X), x[:, 2] * 2 - x[:, 3], np.isnan(X[:, 1]) + x[:, 4] ** 2])
    return _vector_leaf({"max_depth": 4}, X, Y.astype(np.float32), 5), X


@_cached
def build_vector_leaf_multiclass() -> tuple[xgb.Booster, np.ndarray]:
    """Three-class softprob with vector leaves: 5 trees of 3 values per leaf."""
    X = _features(23, n=200)
    s = _signal(X)
    y = np.digitize(s, np.quantile(s, [0.3, 0.7])).astype(np.float32)
    return _vector_leaf({"objective": "multi:softprob", "num_class": 3}, X, y, 5), X


@_cached
def build_vector_leaf_forest() -> tuple[xgb.Booster, np.ndarray]:
    """Two targets, 3 rounds of ``num_parallel_tree=2`` subsampled vector-leaf trees."""
    X = _features(24, n=200)
    Y = np.column_stack([_signal(X), X[:, 0] - X[:, 5]]).astype(np.float32)
    params = {"num_parallel_tree": 2, "subsample": 0.8, "colsample_bynode": 0.8}
    return _vector_leaf(params, X, Y, 3), X


@_cached
def build_vector_leaf_dart() -> tuple[xgb.Booster, np.ndarray]:
    """DART (XGBoost >= 3.3) with vector leaves: two targets, tree weights differ from 1."""
    X = _features(25, n=200)
    Y = np.column_stack([_signal(X), X[:, 1] * X[:, 2]]).astype(np.float32)
    params = {"booster": "dart", "rate_drop": 0.4, "skip_drop": 0.0}
    return _vector_leaf(params, X, Y, 5), X


@_cached
def build_vector_leaf_categorical() -> tuple[xgb.Booster, pd.DataFrame]:
    """Categorical splits (XGBoost >= 3.3) in vector-leaf trees: two targets."""
    rng = np.random.default_rng(26)
    n = 200
    a = rng.normal(size=n).astype(np.float32)
    c = rng.integers(0, 6, n).astype(np.float64)
    c[rng.random(n) < 0.1] = np.nan
    X = pd.DataFrame({"a": a, "c": pd.Categorical(c, categories=list(range(6)))})
    effect = np.array([0.0, 2.0, -1.0, 0.5, 3.0, -2.0])
    code = np.nan_to_num(c).astype(int)
    Y = np.column_stack([a + np.where(np.isnan(c), 0.7, effect[code]), (code % 2) - a])
    return _vector_leaf({"max_cat_to_onehot": 1}, X, Y.astype(np.float32), 4), X


#: Vector-leaf builders every XGBoost >= 2 trains, and those that need XGBoost >= 3.3.
VECTOR_LEAF_KINDS: dict[str, Callable[[], tuple[xgb.Booster, Any]]] = {
    "vector_regression": build_vector_leaf_regression,
    "vector_multiclass": build_vector_leaf_multiclass,
    "vector_forest": build_vector_leaf_forest,
}
VECTOR_LEAF_KINDS_33: dict[str, Callable[[], tuple[xgb.Booster, Any]]] = {
    "vector_dart": build_vector_leaf_dart,
    "vector_categorical": build_vector_leaf_categorical,
}


def stored_categories_model(frame: pd.DataFrame, y: Any, path: Any, **params: Any) -> tuple:
    """An ``XGBRegressor`` of ``frame`` (its category columns as categories) saved at ``path``
    -> (its explainer, ``layout="xgboost"`` on the CPU; the model); the test is skipped where
    this XGBoost stores no training categories."""
    import pytest

    from distshap import TreeExplainer

    model = xgb.XGBRegressor(**{"n_estimators": 8, "max_depth": 3, **params},
                             enable_categorical=True, n_jobs=1)  # fmt: skip
    model.fit(frame, y)
    explainer = TreeExplainer(model, layout="xgboost", backend="cpu")
    if explainer.packed.feature_categories is None:
        pytest.skip("this XGBoost does not store its training categories")
    model.save_model(path)
    return explainer, model


def serve_files(folder: Any) -> dict:
    """The server tests' files in ``folder``: the binary and multiclass models saved as JSON
    (``"bin"``, ``"mc"``), 40 background rows (``"bg"``, ``.npy``) and their rows (``"X"``,
    ``"Xm"``, float32)."""
    binary, X = build_binary()
    multi, Xm = build_multiclass()
    binary.save_model(str(folder / "bin.json"))
    multi.save_model(str(folder / "mc.json"))
    np.save(folder / "bg.npy", np.asarray(X[:40], dtype=np.float32))
    return {
        "bin": str(folder / "bin.json"),
        "mc": str(folder / "mc.json"),
        "bg": str(folder / "bg.npy"),
        "X": np.asarray(X, dtype=np.float32),
        "Xm": np.asarray(Xm, dtype=np.float32),
    }


def serve_specs(files: dict) -> list[str]:
    """``--model`` specs of :func:`serve_files`: ``bin`` with its background and probability
    output, ``mc`` at version 3."""
    return [f"bin={files['bin']},background={files['bg']},output=probability",
            f"mc:3={files['mc']}"]  # fmt: skip
