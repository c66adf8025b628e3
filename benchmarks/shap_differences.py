"""Where distshap and shap differ, and which one the definition agrees with.

Small models of each kind are trained here, on few features, so that SHAP values can be computed
by brute force over all ``2**F`` coalitions. For every model the script prints the largest
``|distshap - brute force|`` and ``|shap - brute force|``, over the feature values and over
the base value (expected value), in two settings:

* interventional (``feature_perturbation="interventional"`` over a background): the brute
  force evaluates the **model's own prediction function** (its library's raw output) on every
  hybrid row (``x`` on the coalition, a background row elsewhere), so it needs nothing of
  distshap's or shap's model conversion;
* tree-path-dependent (no background): the brute force walks distshap's converted trees
  (``E[f(x) | x_S]``, the features outside ``S`` integrated by the training covers); those
  trees are first checked to predict every explained row exactly as the library does.

Usage::

    python3 -m benchmarks.shap_differences                   # every model
    python3 -m benchmarks.shap_differences --models catboost --rows 5 --background 20

Needs shap, scikit-learn, xgboost, lightgbm and catboost (models whose library is missing are
skipped).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["MODELS", "brute_interventional", "brute_path_dependent", "compare", "make_model"]

MODELS = (
    "xgboost",
    "random_forest",
    "random_forest_classifier",
    "random_forest_nan",
    "random_forest_multioutput",
    "hist_gb_categorical",
    "lightgbm_multiclass",
    "catboost",
)


def _data(n: int, n_features: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows exactly representable in float32 and a non-linear, interacting target."""
    rng = np.random.default_rng(seed)
    X = rng.random((n, n_features)).astype(np.float32).astype(np.float64)
    y = X[:, 0] + 2 * X[:, 1] * X[:, 2] - X[:, 3] + 0.1 * rng.normal(size=n)
    return X, y


def make_model(kind: str, n_trees: int = 10, seed: int = 0) -> tuple[Any, np.ndarray, Callable]:
    """A small fitted model of ``kind`` (one of :data:`MODELS`), its training rows, and its
    raw output ``(n, G)`` float64 as the library computes it (the space distshap and shap
    explain: the margin, or a random forest classifier's probabilities)."""
    X, y = _data(400, 5, seed)
    if kind == "xgboost":
        import xgboost as xgb

        params = {"max_depth": 3, "eta": 0.3, "seed": seed, "nthread": 1}
        booster = xgb.train(params, xgb.DMatrix(X, label=y), n_trees)
        return booster, X, lambda Z: booster.predict(xgb.DMatrix(Z), output_margin=True)[:, None]
    if kind.startswith("random_forest"):
        from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor

        if kind == "random_forest_nan":  # missing values, which sklearn's trees route
            X[np.random.default_rng(seed + 1).random(X.shape) < 0.15] = np.nan
        if kind == "random_forest_multioutput":
            Y = np.c_[y, 3 * X[:, 4] - X[:, 0]]
            model = RandomForestRegressor(n_trees, max_depth=4, random_state=seed).fit(X, Y)
            return model, X, model.predict
        if kind != "random_forest_classifier":
            model = RandomForestRegressor(n_trees, max_depth=4, random_state=seed).fit(X, y)
            return model, X, lambda Z: model.predict(Z)[:, None]
        model = RandomForestClassifier(n_trees, max_depth=4, random_state=seed).fit(X, y > 0.6)
        return model, X, model.predict_proba
    if kind == "hist_gb_categorical":
        from sklearn.ensemble import HistGradientBoostingRegressor

        X[:, 4] = np.random.default_rng(seed + 1).integers(0, 5, len(X))
        y = y + np.array([0.0, 1.0, -1.0, 0.5, 2.0])[X[:, 4].astype(int)]
        model = HistGradientBoostingRegressor(
            max_iter=n_trees, max_depth=3, categorical_features=[4], random_state=seed
        ).fit(X, y)
        return model, X, lambda Z: model.predict(Z)[:, None]
    if kind == "lightgbm_multiclass":
        import lightgbm as lgb

        labels = np.digitize(y, np.quantile(y, [0.33, 0.66]))
        params = {"objective": "multiclass", "num_class": 3, "num_leaves": 8, "verbose": -1,
                  "seed": seed, "num_threads": 1, "min_data_in_leaf": 5}  # fmt: skip
        booster = lgb.train(params, lgb.Dataset(X, label=labels), n_trees)
        return booster, X, lambda Z: booster.predict(Z, raw_score=True)
    if kind == "catboost":
        from catboost import CatBoostRegressor

        model = CatBoostRegressor(iterations=n_trees, depth=3, random_seed=seed, verbose=False,
                                  thread_count=1, allow_writing_files=False)  # fmt: skip
        model.fit(X, 150.0 + 10 * y)
        return model, X, lambda Z: model.predict(Z, prediction_type="RawFormulaVal")[:, None]
    raise ValueError(f"kind {kind!r}: expected one of {', '.join(MODELS)}")


def _coalitions(n_features: int) -> tuple[np.ndarray, np.ndarray]:
    """Every coalition as a bool row ``(2**F, F)`` and the Shapley weight of its size."""
    masks = np.arange(1 << n_features)
    members = ((masks[:, None] >> np.arange(n_features)) & 1).astype(bool)
    f = n_features
    weight = np.array([math.factorial(s) * math.factorial(f - s - 1) / math.factorial(f)
                       for s in range(f)])  # fmt: skip
    return members, weight


def _shapley(v: np.ndarray, members: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """``(G, F + 1)``: Shapley values of the game ``v`` ``(2**F, G)``, ``v(empty)`` last."""
    n_features = members.shape[1]
    out = np.zeros((v.shape[1], n_features + 1))
    sizes = members.sum(axis=1)
    for i in range(n_features):
        without = np.flatnonzero(~members[:, i])
        out[:, i] = weight[sizes[without]] @ (v[without + (1 << i)] - v[without])
    out[:, -1] = v[0]
    return out


def brute_interventional(raw: Callable, X: np.ndarray, background: np.ndarray) -> np.ndarray:
    """Interventional SHAP values ``(n, G, F + 1)`` (base last) by the model's own predictions:
    ``v(S) = mean_r f(x_S, r_rest)`` over the background rows ``r``, every coalition ``S``."""
    members, weight = _coalitions(X.shape[1])
    out = []
    for x in X:
        hybrid = np.where(members[:, None, :], x[None, None, :], background[None, :, :])
        values = np.asarray(raw(hybrid.reshape(-1, X.shape[1])), dtype=np.float64)
        v = values.reshape(len(members), len(background), -1).mean(axis=1)
        out.append(_shapley(v, members, weight))
    return np.stack(out)


def _goes_left(ens: Any, node: int, x: float) -> bool:
    """The branch the converted model takes (:class:`distshap.models.Ensemble`'s semantics)."""
    if np.isnan(x):
        return bool(ens.default_left[node])
    if ens.is_categorical[node]:
        cats = ens.cat_values[ens.cat_offsets[node] : ens.cat_offsets[node + 1]]
        return x < 0 or int(x) not in set(cats.tolist())
    if ens.threshold64 is not None:
        return bool(x < ens.threshold64[node])
    return bool(np.float32(x) < ens.threshold[node])


def _tree_game(ens: Any, x: np.ndarray, members: np.ndarray) -> np.ndarray:
    """``(2**F, G)``: ``E[f(x) | x_S]`` of the converted model, covers weighting the rest."""
    v = np.tile(ens.base_score.astype(np.float64), (len(members), 1))
    for t in range(ens.num_trees):
        stack = [(int(ens.tree_offsets[t]), np.ones(len(members)))]
        while stack:
            node, w = stack.pop()
            left, right = int(ens.left[node]), int(ens.right[node])
            if left < 0:
                v[:, ens.tree_group[t]] += w * float(ens.value[node])
                continue
            cover = float(ens.cover[node])
            known = members[:, int(ens.feature[node])]
            hot = _goes_left(ens, node, float(x[ens.feature[node]]))
            share = float(ens.cover[left]) / cover if cover > 0 else 0.0
            stack.append((left, w * np.where(known, float(hot), share)))
            stack.append((right, w * np.where(known, float(not hot), 1.0 - share)))
    return v


def brute_path_dependent(ens: Any, X: np.ndarray) -> np.ndarray:
    """Tree-path-dependent SHAP values ``(n, G, F + 1)`` (base last) of a converted model."""
    members, weight = _coalitions(X.shape[1])
    return np.stack([_shapley(_tree_game(ens, x, members), members, weight) for x in X])


def _as_groups(values: Any, base: Any, n: int, n_groups: int) -> tuple[np.ndarray, str]:
    """shap's output (``(n, F)``, ``(n, F, G)`` or a list per class) as ``(n, G, F + 1)``, and
    a note where shap returns one output for a model of ``G > 1`` (it is then compared with
    every class, as a user reading it as each class's values would)."""
    if isinstance(values, list):
        values = np.stack(values, axis=-1)
    values = np.asarray(values, dtype=np.float64)
    base = np.asarray(base, dtype=np.float64).reshape(-1)
    note = ""
    if n_groups > 1 and values.size == n * values.shape[1] and base.size == 1:
        note = f"shap returns one output, the sum of the {n_groups} classes"
        values = np.repeat(values.reshape(n, -1, 1), n_groups, axis=2)
    values = values.reshape(n, -1, n_groups).transpose(0, 2, 1)
    base = np.broadcast_to(base, (n_groups,))
    full = np.concatenate([values, np.broadcast_to(base, (n, n_groups))[:, :, None]], axis=2)
    return full, note


def _errors(values: np.ndarray, truth: np.ndarray) -> tuple[float, float]:
    diff = np.abs(values - truth)
    return float(diff[:, :, :-1].max()), float(diff[:, :, -1].max())


def _shap_values(model: Any, X: np.ndarray, background: Any, n_groups: int) -> tuple:
    import warnings

    import shap

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if background is None:
            explainer = shap.TreeExplainer(model)
        else:
            explainer = shap.TreeExplainer(model, background, feature_perturbation="interventional")
        values = explainer.shap_values(X, check_additivity=False)
    return _as_groups(values, explainer.expected_value, len(X), n_groups)


def compare(
    kind: str, rows: int = 5, background: int = 20, n_trees: int = 10, with_shap: bool = True
) -> list[dict]:
    """The differences of one model kind: a dict per setting (interventional, path-dependent)
    with ``distshap`` / ``shap`` (largest |value - brute force|), ``*_base`` (the same for
    the base value) and ``note`` (shap's error or output shape); shap's entries are NaN with
    ``with_shap=False`` or where shap fails."""
    from distshap import TreeExplainer
    from distshap.models import load_model

    model, X_train, raw = make_model(kind, n_trees)
    X, B = X_train[-rows:], X_train[:background]
    ens = load_model(model)
    tree_game_of = brute_path_dependent(ens, X)
    full = tree_game_of[:, :, :-1].sum(axis=2) + tree_game_of[:, :, -1]
    mismatch = float(np.abs(full - raw(X)).max())  # the converted trees predict as the model
    results = []
    for setting, data in (("interventional", B), ("path-dependent", None)):
        truth = brute_interventional(raw, X, B) if data is not None else tree_game_of
        n_groups = truth.shape[1]
        perturbation = "interventional" if data is not None else "tree_path_dependent"
        ours = TreeExplainer(model, data, feature_perturbation=perturbation, layout="xgboost",
                             backend="cpu").shap_values(X)  # fmt: skip
        ours = np.asarray(ours, dtype=np.float64).reshape(truth.shape)
        row = {"model": kind, "setting": setting, "features": X.shape[1], "groups": n_groups,
               "trees_predict_as_model": mismatch}  # fmt: skip
        row["distshap"], row["distshap_base"] = _errors(ours, truth)
        row["shap"] = row["shap_base"] = float("nan")
        if with_shap:
            try:
                theirs, row["note"] = _shap_values(model, X, data, n_groups)
                row["shap"], row["shap_base"] = _errors(theirs, truth)
            except Exception as err:  # shap refuses some models: say so in the table
                row["note"] = f"shap fails: {type(err).__name__}: {str(err).splitlines()[0][:80]}"
        results.append(row)
    return results


def _table(rows: list[dict]) -> str:
    lines = ["| model | setting | F | G | distshap | distshap base | shap | shap base | note |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['setting']} | {r['features']} | {r['groups']} | "
            f"{r['distshap']:.2g} | {r['distshap_base']:.2g} | {r['shap']:.3g} | "
            f"{r['shap_base']:.3g} | {r.get('note', '')} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated kinds")
    parser.add_argument("--rows", type=int, default=5, help="explained rows per model")
    parser.add_argument("--background", type=int, default=20, help="background rows")
    parser.add_argument("--trees", type=int, default=10, help="trees (rounds) per model")
    args = parser.parse_args(argv)
    rows = []
    for kind in args.models.split(","):
        try:
            rows += compare(kind, args.rows, args.background, args.trees)
        except ImportError as err:
            print(f"{kind}: skipped ({err})")
    print(_table(rows))
    worst = max(r["trees_predict_as_model"] for r in rows)
    print(f"\nconverted trees vs the library's predictions on the explained rows: {worst:.2g}")


if __name__ == "__main__":
    main()
