"""Differential fuzzing of distshap on edge input values (a tool, not run by pytest or CI).

Each seed trains a tiny model (LightGBM, XGBoost, scikit-learn HistGradientBoosting or
RandomForest; numeric and categorical features, NaN, zero-as-missing, ``missing=`` sentinels)
and explains rows that hold the values where split semantics differ between libraries: every
threshold and its float64 / float32 neighbours, LightGBM's zero region ``[-1e-35f, 1e-35f]``,
``-0.0``, subnormals, values beyond the float32 range, infinities, NaN, and for categorical
features negative, non-integer and huge codes. The row sums of distshap's SHAP values must equal
the library's own margin, and the values LightGBM's ``pred_contrib`` / XGBoost's
``pred_contribs`` (on the rows XGBoost's DMatrix accepts).

Usage::

    python tools/fuzz_edge_values.py [N_SEEDS] [FIRST_SEED]

prints one line per mismatch (seed, family, configuration, what differs) and a total; exit
status 1 when anything differs. It found the LightGBM zero-region and categorical-truncation
cases and the HistGradientBoosting non-integer category case of
``tests/test_models_fuzz_regressions.py``.
"""

from __future__ import annotations

import sys
import warnings

import numpy as np

from distshap import TreeExplainer

ZERO = float(np.float32(1e-35))  # LightGBM's kZeroThreshold
FAMILIES = ("lightgbm", "xgboost", "hgb", "forest")


def _edge_rows(rng, X, thresholds, categorical, specials, n_rows=40):
    E = X[rng.integers(0, X.shape[0], n_rows)].copy()
    odd_codes = [-1.0, -0.5, -1e-36, 0.5, 2.5, 1e9, 2.0**31, np.nan, np.inf, 1e300]
    for i in range(n_rows):
        for j in range(X.shape[1]):
            r = rng.random()
            if j in categorical:
                if r < 0.3:
                    E[i, j] = rng.choice(odd_codes)
            elif r < 0.3:
                E[i, j] = rng.choice(specials)
            elif r < 0.7 and len(thresholds):
                t = float(rng.choice(thresholds))
                t32 = np.float32(t)
                E[i, j] = rng.choice([t, np.nextafter(t, np.inf), np.nextafter(t, -np.inf),
                                      float(t32), float(np.nextafter(t32, np.float32(np.inf))),
                                      float(np.nextafter(t32, np.float32(-np.inf)))])  # fmt: skip
    return E


def _lightgbm(rng, X, y):
    import lightgbm as lgb

    params = {
        "objective": "regression",
        "num_leaves": int(rng.integers(2, 16)),
        "min_data_in_leaf": int(rng.integers(1, 5)),
        "min_data_in_bin": 1,
        "min_data_per_group": 1,
        "cat_smooth": 1,
        "max_cat_to_onehot": int(rng.choice([1, 32])),
        "verbose": -1,
    }
    if rng.random() < 0.3:
        params["zero_as_missing"] = True
    if rng.random() < 0.2:
        params["use_missing"] = False
    cats = []
    if X.shape[1] >= 2 and rng.random() < 0.5:
        cats = [X.shape[1] - 1]
        X[:, -1] = rng.integers(0, int(rng.integers(2, 40)), X.shape[0])
    data = lgb.Dataset(X, y, categorical_feature=cats or "auto", params={"verbose": -1})
    booster = lgb.train(params, data, int(rng.integers(1, 5)))
    thresholds = []

    def walk(node):
        if node.get("decision_type") == "<=":
            thresholds.append(float(node["threshold"]))
        for child in ("left_child", "right_child"):
            if child in node:
                walk(node[child])

    for tree in booster.dump_model()["tree_info"]:
        walk(tree["tree_structure"])
    specials = [0.0, -0.0, ZERO, -ZERO, np.nextafter(ZERO, 1), -np.nextafter(ZERO, 1), 1e-36,
                -1e-36, np.inf, -np.inf, np.nan, 1e300, -1e300]  # fmt: skip
    E = _edge_rows(rng, X, thresholds, cats, specials)
    return (
        booster,
        E,
        booster.predict(E, raw_score=True),
        booster.predict(E, pred_contrib=True),
        params,
    )


def _xgboost(rng, X, y):
    import xgboost as xgb

    missing = np.nan if rng.random() < 0.7 else float(rng.choice([0.0, -1.0, -999.0]))
    model = xgb.XGBRegressor(n_estimators=3, max_depth=3, missing=missing,
                             tree_method=str(rng.choice(["hist", "exact", "approx"])))  # fmt: skip
    model.fit(X, y)
    booster = model.get_booster()
    thresholds = booster.trees_to_dataframe()["Split"].dropna().to_numpy()
    specials = [0.0, -0.0, np.nan, 1e-45, -1e-45, 3.4028235e38, 3.5e38, -3.5e38, np.inf, -np.inf]
    if not np.isnan(missing):
        specials += [missing, float(np.nextafter(missing, 1.0))]
    E = _edge_rows(rng, X, thresholds, [], specials)
    margin = booster.inplace_predict(E, predict_type="margin", missing=missing)
    storable = np.all(np.isnan(E) | np.isfinite(E.astype(np.float32)), axis=1)
    contribs = np.full((E.shape[0], E.shape[1] + 1), np.nan)
    contribs[storable] = booster.predict(xgb.DMatrix(E[storable], missing=missing),
                                         pred_contribs=True)  # fmt: skip
    return model, E, margin, contribs, {"missing": missing}


def _sklearn(rng, X, y, family):
    from sklearn.ensemble import HistGradientBoostingRegressor, RandomForestRegressor

    cats = []
    if family == "hgb":
        kw = {}
        if X.shape[1] >= 2 and rng.random() < 0.4:
            cats = [0]
            X[:, 0] = rng.integers(0, int(rng.integers(2, 20)), X.shape[0])
            kw["categorical_features"] = cats
        model = HistGradientBoostingRegressor(max_iter=3, max_depth=3, **kw).fit(X, y)
        thresholds = np.concatenate([p.nodes["num_threshold"][~p.nodes["is_leaf"].astype(bool)]
                                     for stage in model._predictors for p in stage])  # fmt: skip
    else:
        model = RandomForestRegressor(n_estimators=3, max_depth=3, random_state=0).fit(X, y)
        thresholds = np.concatenate([e.tree_.threshold[e.tree_.feature >= 0]
                                     for e in model.estimators_])  # fmt: skip
    specials = [0.0, -0.0, np.nan, 1e-45, -1e-45, 1e38, -1e38]
    E = _edge_rows(rng, X, thresholds, cats, specials)
    E[:, cats] = np.where(np.isinf(E[:, cats]) | (np.abs(E[:, cats]) > 1e30), np.nan, E[:, cats])
    E = np.clip(E, -1e38, 1e38)  # scikit-learn refuses values beyond float32
    margin = model.predict(E)
    return model, E, margin, None, {"categorical": cats}


def fuzz_one(seed: int) -> list[tuple]:
    """Mismatches of one seed's model: ``(seed, family, config, what, difference)``."""
    rng = np.random.default_rng(seed)
    family = FAMILIES[seed % len(FAMILIES)]
    F = int(rng.integers(1, 5))
    X = rng.normal(size=(300, F)) * rng.choice([1e-30, 1e-6, 1.0, 1e8])
    X[rng.random(X.shape) < 0.3] = 0.0
    if family != "forest" or rng.random() < 0.5:
        X[rng.random(X.shape) < 0.1] = np.nan
    y = rng.normal(size=300) + np.nan_to_num(X[:, 0] > 0)
    if family == "lightgbm":
        model, E, margin, contribs, cfg = _lightgbm(rng, X, y)
    elif family == "xgboost":
        model, E, margin, contribs, cfg = _xgboost(rng, X, y)
    else:
        model, E, margin, contribs, cfg = _sklearn(rng, X, y, family)
    phi = np.asarray(TreeExplainer(model, layout="xgboost", backend="cpu").shap_values(E))
    out = []
    scale = max(1.0, float(np.abs(margin).max()))
    diff = float(np.abs(phi.sum(-1) - margin).max())
    if diff > 1e-5 * scale:
        out.append((seed, family, cfg, "row sums vs the model's margin", diff))
    if contribs is not None:
        diff = float(np.nanmax(np.abs(phi - contribs)))
        if diff > 1e-4 * scale:
            out.append((seed, family, cfg, "values vs the library's contributions", diff))
    return out


def main(argv: list[str]) -> int:
    n = int(argv[1]) if len(argv) > 1 else 100
    first = int(argv[2]) if len(argv) > 2 else 0
    warnings.filterwarnings("ignore")
    found = []
    for seed in range(first, first + n):
        try:
            found += fuzz_one(seed)
        except Exception as exc:  # a crash is a finding too
            found.append((seed, FAMILIES[seed % len(FAMILIES)], {}, "error", repr(exc)[:300]))
    for item in found:
        print(*item)
    print(f"{len(found)} mismatches in {n} models")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
