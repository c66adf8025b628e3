"""XGBoost's own SHAP tests, ported: distshap must give XGBoost's contributions and interactions.

Written in our own code from what XGBoost's test suite checks (path-dependent values in margin
space only):

* ``tests/python/test_shap.py``: ``TestSHAP.test_feature_importances`` (the AND function's
  exact values; one small and one larger random model against a brute-force Shapley oracle,
  values and interactions) and ``test_shap_values`` (regression and classification data,
  ``pred_contribs`` / ``pred_interactions`` and their sums).
* ``tests/python-gpu/test_gpu_prediction.py``: ``test_shap`` and ``test_shap_interactions``
  (depths 1..11, ``max_leaves``, ``num_parallel_tree`` 1 and 10, the cancer, sparse and
  L1-objective data sets, sample weights, an empty matrix) and ``test_shap_categorical``;
  we add the other objectives (Poisson, gamma, Tweedie, ranking, ...) the same way.
* ``xgboost/testing/ordinal.py``: ``run_cat_shap`` (a frame whose categories are re-coded)
  and ``run_cat_invalid`` (inputs XGBoost refuses: a numeric column on a categorical
  feature, a category never seen in training).
* ``tests/python/test_predict.py``: ``test_predict_shape`` (output layouts) and
  ``TestInplacePredict`` (a missing-value sentinel of 11, input dtypes, Fortran and pandas
  layouts, threaded prediction).

Our oracle is independent of distshap's loader: it reads the trees through XGBoost's own
``trees_to_dataframe`` and evaluates ``E[f(x) | x_S]`` for every subset ``S``.
"""

from __future__ import annotations

import itertools
import math
import threading

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import xgboost as xgb

from distshap import TreeExplainer

from conftest import to_host

TOL = 1e-5  # float32 outputs: differences relative to the output's scale


def assert_close(got, ref, tol: float = TOL) -> None:
    got, ref = to_host(got), np.asarray(ref)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    scale = max(1.0, float(np.nanmax(np.abs(ref))) if ref.size else 1.0)
    np.testing.assert_allclose(got, ref, rtol=0, atol=tol * scale)


def contribs(booster: xgb.Booster, X, **dmatrix_kw) -> np.ndarray:
    return booster.predict(xgb.DMatrix(X, **dmatrix_kw), pred_contribs=True)


def interactions(booster: xgb.Booster, X, **dmatrix_kw) -> np.ndarray:
    return booster.predict(xgb.DMatrix(X, **dmatrix_kw), pred_interactions=True)


def margin(booster: xgb.Booster, X, **dmatrix_kw) -> np.ndarray:
    return booster.predict(xgb.DMatrix(X, **dmatrix_kw), output_margin=True)


def check_against_xgboost(booster, X, backend: str, n_interaction_rows: int = 20, **kw) -> None:
    """Values and interactions equal XGBoost's; each sums to the margin."""
    explainer = TreeExplainer(booster, layout="xgboost", backend=backend, missing=kw.get("missing"))
    phi = explainer.shap_values(X)
    assert to_host(phi).dtype == np.float32
    assert_close(phi, contribs(booster, X, **kw))
    assert_close(to_host(phi).sum(axis=-1), margin(booster, X, **kw))
    rows = X[:n_interaction_rows]
    inter = explainer.shap_interaction_values(rows)
    assert_close(inter, interactions(booster, rows, **kw))
    assert_close(to_host(inter).sum(axis=-1), to_host(phi)[:n_interaction_rows])


# --- an oracle built from XGBoost's own view of its trees --------------------------------------


def xgboost_trees(booster: xgb.Booster) -> list[dict]:
    """Each tree as dicts of node id -> (feature, split, yes, no, missing, cover, value)."""
    frame = booster.trees_to_dataframe()
    trees = []
    for _, t in frame.groupby("Tree", sort=True):
        nodes = {}
        for row in t.itertuples():
            if row.Feature == "Leaf":
                nodes[row.Node] = {"leaf": float(row.Gain), "cover": float(row.Cover)}
            else:
                nodes[row.Node] = {
                    "feature": int(row.Feature.lstrip("f")),
                    "split": np.float32(row.Split),
                    "yes": int(row.Yes.split("-")[1]),
                    "no": int(row.No.split("-")[1]),
                    "missing": int(row.Missing.split("-")[1]),
                    "cover": float(row.Cover),
                }
        trees.append(nodes)
    return trees


def _conditional_mean(tree: dict, node: int, x: np.ndarray, known: set[int]) -> float:
    n = tree[node]
    if "leaf" in n:
        return n["leaf"]
    if n["feature"] in known:
        value = x[n["feature"]]
        child = n["missing"] if np.isnan(value) else (n["yes"] if value < n["split"] else n["no"])
        return _conditional_mean(tree, child, x, known)
    total = 0.0
    for child in (n["yes"], n["no"]):
        total += tree[child]["cover"] / n["cover"] * _conditional_mean(tree, child, x, known)
    return total


def brute_force(trees: list[dict], x: np.ndarray, base: float) -> tuple[np.ndarray, np.ndarray]:
    """Shapley values ``(F + 1,)`` and interaction values ``(F + 1, F + 1)`` of one row."""
    x = np.asarray(x, dtype=np.float32)
    F = x.shape[0]

    def v(subset) -> float:
        return sum(_conditional_mean(t, 0, x, set(subset)) for t in trees)

    cache = {s: v(s) for k in range(F + 1) for s in itertools.combinations(range(F), k)}

    def val(s) -> float:
        return cache[tuple(sorted(s))]

    phi = np.zeros(F + 1)
    for i in range(F):
        others = [j for j in range(F) if j != i]
        for k in range(F):
            w = math.factorial(k) * math.factorial(F - k - 1) / math.factorial(F)
            for s in itertools.combinations(others, k):
                phi[i] += w * (val(s + (i,)) - val(s))
    phi[F] = val(()) + base
    inter = np.zeros((F + 1, F + 1))
    for i, j in itertools.permutations(range(F), 2):
        others = [k for k in range(F) if k not in (i, j)]
        for k in range(F - 1):
            w = math.factorial(k) * math.factorial(F - k - 2) / math.factorial(F - 1)
            for s in itertools.combinations(others, k):
                delta = val(s + (i, j)) - val(s + (i,)) - val(s + (j,)) + val(s)
                inter[i, j] += w * delta / 2
    for i in range(F):
        inter[i, i] = phi[i] - inter[i, :F].sum()
    inter[F, F] = phi[F]
    return phi, inter


# --- tests/python/test_shap.py ------------------------------------------------------------------


def test_and_function_has_the_papers_values(backend):
    """One tree fitting AND(x0, x1): the row (1, 1) gets 0.375, 0.375 and a bias of 0.25."""
    X = np.array([[1, 1], [1, 0], [0, 1], [0, 0]], dtype=np.float32)
    y = np.array([1.0, 0.0, 0.0, 0.0])
    params = {"max_depth": 2, "base_score": 0.0, "eta": 1.0, "lambda": 0, "nthread": 1}
    booster = xgb.train(params, xgb.DMatrix(X, y), 1)
    explainer = TreeExplainer(booster, layout="xgboost", backend=backend)
    phi = to_host(explainer.shap_values(X[:1]))
    np.testing.assert_array_equal(phi, [[0.375, 0.375, 0.25]])
    phi_ref, inter_ref = brute_force(xgboost_trees(booster), X[0], base=0.0)
    assert_close(phi[0], phi_ref)
    assert_close(to_host(explainer.shap_interaction_values(X[:1]))[0], inter_ref)
    check_against_xgboost(booster, X, backend)


@pytest.mark.parametrize(
    "params, n_rows, n_features, rounds",
    [
        ({"max_depth": 2, "base_score": 0.0, "eta": 1.0, "lambda": 0}, 4, 2, 1),
        ({"max_depth": 5, "base_score": 1.0, "eta": 0.1, "gamma": 2.0}, 100, 5, 10),
    ],
    ids=["one-tree", "ten-trees-pruned"],
)
def test_random_models_match_brute_force(params, n_rows, n_features, rounds, backend):
    rng = np.random.RandomState(1994)
    X = rng.randn(n_rows, n_features).astype(np.float32)
    y = rng.randn(n_rows)
    booster = xgb.train(dict(params, nthread=1), xgb.DMatrix(X, y), rounds)
    explainer = TreeExplainer(booster, layout="xgboost", backend=backend)
    trees = xgboost_trees(booster)
    rows = X[:3]
    phi = to_host(explainer.shap_values(rows))
    inter = to_host(explainer.shap_interaction_values(rows))
    for r in range(len(rows)):
        phi_ref, inter_ref = brute_force(trees, rows[r], base=params["base_score"])
        assert_close(phi[r], phi_ref)
        assert_close(inter[r], inter_ref)
    check_against_xgboost(booster, X, backend)


def test_exact_method_with_pruned_nodes(backend):
    """XGBoost's larger random case with the exact method: pruning leaves deleted nodes."""
    rng = np.random.RandomState(1994)
    X = rng.randn(100, 5).astype(np.float32)
    y = rng.randn(100)
    params = {"tree_method": "exact", "max_depth": 5, "base_score": 1.0, "eta": 0.1}
    booster = xgb.train(dict(params, gamma=2.0, nthread=1), xgb.DMatrix(X, y), 10)
    check_against_xgboost(booster, X, backend)
    phi = to_host(TreeExplainer(booster, layout="xgboost", backend=backend).shap_values(X[:2]))
    for r in range(2):
        assert_close(phi[r], brute_force(xgboost_trees(booster), X[r], base=1.0)[0])


@pytest.mark.parametrize("task", ["regression", "classification"])
def test_sklearn_generated_data(task, backend):
    from sklearn.datasets import make_classification, make_regression

    make = make_regression if task == "regression" else make_classification
    X, y = make(n_samples=100, random_state=3)
    booster = xgb.train({"nthread": 1}, xgb.DMatrix(X, y), 4)
    check_against_xgboost(booster, X, backend)
    # a QuantileDMatrix-trained model: same trees, same values
    booster_q = xgb.train({"nthread": 1}, xgb.QuantileDMatrix(X, y), 4)
    check_against_xgboost(booster_q, X, backend)


# --- tests/python-gpu/test_gpu_prediction.py ----------------------------------------------------


def _cancer():
    from sklearn.datasets import load_breast_cancer

    return load_breast_cancer(return_X_y=True)


def _diabetes():
    from sklearn.datasets import load_diabetes

    return load_diabetes(return_X_y=True)


def _sparse():
    """Mostly-missing rows, as XGBoost's 'sparse' data set (absent entries are missing)."""
    rng = np.random.default_rng(5)
    X = rng.normal(size=(400, 10))
    X[rng.random(X.shape) < 0.8] = np.nan
    y = np.nansum(X[:, :3], axis=1) + rng.normal(size=400) * 0.1
    return X, y


DATASETS = {
    "diabetes": (_diabetes, "reg:squarederror"),
    "diabetes-l1": (_diabetes, "reg:absoluteerror"),
    "cancer": (_cancer, "binary:logistic"),
    "sparse": (_sparse, "reg:squarederror"),
    "sparse-l1": (_sparse, "reg:absoluteerror"),
}

TREE_SHAPES = [
    {"max_depth": 1},
    {"max_depth": 6, "num_parallel_tree": 10, "subsample": 0.7, "colsample_bynode": 0.7},
    {"max_depth": 11, "min_child_weight": 0},
    {"max_depth": 0, "max_leaves": 40, "grow_policy": "lossguide"},
    {"max_depth": 3, "max_leaves": 5, "num_parallel_tree": 10},
]


@pytest.mark.parametrize("shape", TREE_SHAPES, ids=lambda p: "-".join(map(str, p.values())))
@pytest.mark.parametrize("dataset", sorted(DATASETS))
def test_tree_shapes_and_data_sets(dataset, shape, backend):
    load, objective = DATASETS[dataset]
    X, y = load()
    weights = np.random.default_rng(0).uniform(0.1, 2.0, len(y))  # covers are weighted hessians
    params = dict(shape, objective=objective, tree_method="hist", nthread=1)
    booster = xgb.train(params, xgb.DMatrix(X, y, weight=weights), 3)
    check_against_xgboost(booster, X[:150], backend, n_interaction_rows=8)


OBJECTIVES = [
    "reg:squarederror",
    "reg:absoluteerror",
    "reg:pseudohubererror",
    "reg:squaredlogerror",
    "reg:quantileerror",
    "count:poisson",
    "reg:gamma",
    "reg:tweedie",
    "binary:logistic",
    "binary:logitraw",
    "binary:hinge",
    "multi:softprob",
    "rank:pairwise",
    "rank:ndcg",
    "survival:cox",
]


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_objectives(objective, backend):
    """Every objective's trees are explained in its margin (link) space."""
    rng = np.random.default_rng(8)
    X = rng.normal(size=(240, 5)).astype(np.float32)
    y = np.abs(X[:, 0] + X[:, 1] * X[:, 2] + rng.normal(size=240) * 0.3) + 0.1
    params = {"objective": objective, "max_depth": 4, "nthread": 1}
    if objective.startswith("binary"):
        y = (X[:, 0] > 0).astype(float)
    if objective.startswith("multi"):
        y, params["num_class"] = np.digitize(X[:, 0], [-0.5, 0.5]).astype(float), 3
    if objective == "reg:quantileerror":
        params["quantile_alpha"] = 0.3
    data = xgb.DMatrix(X, y)
    if objective.startswith("rank"):
        data.set_label(np.floor(y).clip(0, 3))
        data.set_group([24] * 10)
    booster = xgb.train(params, data, 8)
    check_against_xgboost(booster, X, backend)


def test_empty_input_is_refused_clearly():
    """XGBoost returns a (0, F + 1) array; distshap refuses an empty input by design."""
    X, y = _diabetes()
    booster = xgb.train({"nthread": 1}, xgb.DMatrix(X, y), 2)
    with pytest.raises(ValueError, match="no rows"):
        TreeExplainer(booster, layout="xgboost", backend="cpu").shap_values(
            np.empty((0, X.shape[1]))
        )


def _categorical_frame(n_rows: int, n_features: int, n_categories: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame(
        {f"c{j}": pd.Categorical(rng.integers(0, n_categories, n_rows)) for j in range(n_features)}
    )
    codes = frame.apply(lambda c: c.cat.codes).to_numpy()
    y = (codes[:, 0] % 3 == 1) * 2.0 + (codes[:, 1] > 3) - codes[:, 2] * 0.1
    return frame, y + rng.normal(size=n_rows) * 0.1


@pytest.mark.parametrize("max_cat_to_onehot", [1, 16], ids=["partition", "one-hot"])
def test_categorical_splits(max_cat_to_onehot, backend):
    frame, y = _categorical_frame(100, 20, 7)
    params = {"tree_method": "hist", "max_cat_to_onehot": max_cat_to_onehot, "nthread": 1}
    booster = xgb.train(params, xgb.DMatrix(frame, y, enable_categorical=True), 10)
    check_against_xgboost(booster, frame, backend, enable_categorical=True)


# --- xgboost/testing/ordinal.py -----------------------------------------------------------------


def test_recoded_categories_follow_the_training_categories(backend):
    """Training categories (abc, cdef, def); the frame explained has only (abc, def)."""
    train = pd.DataFrame({"c": pd.Categorical(["cdef", "abc", "def"])})
    booster = xgb.train(
        {"nthread": 1}, xgb.DMatrix(train, [0.0, 1.0, 2.0], enable_categorical=True), 4
    )
    recoded = pd.DataFrame({"c": pd.Categorical(["def", "abc"])})
    assert list(recoded["c"].cat.codes) == [1, 0]  # not the training codes 2, 0
    explainer = TreeExplainer(booster, layout="xgboost", backend=backend)
    for kind in ("values", "interactions"):
        fn = explainer.shap_values if kind == "values" else explainer.shap_interaction_values
        got = to_host(fn(recoded))
        ref = booster.predict(
            xgb.DMatrix(recoded, enable_categorical=True),
            pred_contribs=kind == "values",
            pred_interactions=kind == "interactions",
        )
        assert_close(got, ref)
        np.testing.assert_array_equal(got, to_host(fn(train.iloc[[2, 1]])))


def _two_category_model():
    frame = pd.DataFrame({"b": [2, 1, 3], "c": ["cdef", "abc", "def"]}, dtype="category")
    booster = xgb.train(
        {"nthread": 1}, xgb.DMatrix(frame, [0.0, 1.0, 2.0], enable_categorical=True), 4
    )
    return booster, frame


def test_numeric_column_on_a_categorical_feature_is_refused():
    """``run_cat_invalid``: the training frame's category column passed as integers."""
    booster, frame = _two_category_model()
    numeric = frame.assign(b=frame["b"].astype(np.int64))
    with pytest.raises(ValueError, match="data type"):
        booster.inplace_predict(numeric)  # what XGBoost does
    with pytest.raises((TypeError, ValueError)):
        TreeExplainer(booster, layout="xgboost", backend="cpu").shap_values(numeric)


def test_category_not_seen_in_training_is_refused():
    """``run_cat_invalid``: a frame with the category 'bbc' (and 4) the model never saw."""
    booster, _ = _two_category_model()
    unseen = pd.DataFrame({"b": [2, 1, 3, 4], "c": ["cdef", "abc", "def", "bbc"]}, dtype="category")
    with pytest.raises(ValueError, match="not in the training"):
        booster.inplace_predict(unseen)  # what XGBoost does
    with pytest.raises((TypeError, ValueError)):
        TreeExplainer(booster, layout="xgboost", backend="cpu").shap_values(unseen)


# --- tests/python/test_predict.py ---------------------------------------------------------------


def test_output_layouts(backend):
    from sklearn.datasets import load_iris

    X, y = _diabetes()
    one_tree = xgb.XGBRegressor(n_jobs=1, n_estimators=1).fit(X, y)
    explainer = TreeExplainer(one_tree, layout="xgboost", backend=backend)
    assert explainer.shap_values(X).shape == (len(X), X.shape[1] + 1)
    assert explainer.shap_interaction_values(X[:5]).shape == (5, X.shape[1] + 1, X.shape[1] + 1)
    assert isinstance(explainer.expected_value, float)
    Xi, yi = load_iris(return_X_y=True)
    multiclass = xgb.XGBClassifier(n_jobs=1, n_estimators=3).fit(Xi, yi)
    explainer = TreeExplainer(multiclass, layout="xgboost", backend=backend)
    assert explainer.shap_values(Xi).shape == (len(Xi), 3, Xi.shape[1] + 1)
    assert explainer.shap_interaction_values(Xi[:5]).shape == (5, 3, 5, 5)
    assert np.shape(explainer.expected_value) == (3,)


def _sentinel_data():
    rng = np.random.RandomState(1994)
    X = rng.randn(300, 10)
    X[:, ::4] = 11  # every fourth column is missing
    X[::7, 1] = 11
    return X, rng.randn(300)


def test_missing_value_sentinel(backend):
    X, y = _sentinel_data()
    booster = xgb.train({"tree_method": "hist", "nthread": 1}, xgb.DMatrix(X, y, missing=11), 10)
    check_against_xgboost(booster, X, backend, missing=11)
    estimator = xgb.XGBRegressor(n_jobs=1, n_estimators=10, missing=11).fit(X, y)
    phi = TreeExplainer(estimator, layout="xgboost", backend=backend).shap_values(
        X
    )  # the estimator records it
    assert_close(phi, contribs(estimator.get_booster(), X, missing=11))


def test_input_dtypes_and_layouts():
    rng = np.random.default_rng(9)
    X = rng.integers(-5, 6, size=(200, 4))
    booster = xgb.train({"max_depth": 3, "nthread": 1}, xgb.DMatrix(X, X[:, 0] + X[:, 1]), 10)
    explainer = TreeExplainer(booster, layout="xgboost", backend="cpu")
    expected = explainer.shap_values(X.astype(np.float32))
    assert_close(expected, contribs(booster, X.astype(np.float32)))
    for dtype in (np.int8, np.int16, np.int32, np.int64, np.float16, np.float64):
        np.testing.assert_array_equal(explainer.shap_values(X.astype(dtype)), expected)
    np.testing.assert_array_equal(explainer.shap_values(np.asfortranarray(X)), expected)
    frame = pd.DataFrame({f"f{j}": X[:, j] for j in range(X.shape[1])})  # column-major
    np.testing.assert_array_equal(explainer.shap_values(frame), expected)
    positive = np.abs(X).astype(np.uint8)
    assert_close(explainer.shap_values(positive), contribs(booster, positive.astype(np.float32)))
    flags = X > 0
    assert_close(explainer.shap_values(flags), contribs(booster, flags.astype(np.float32)))
    # XGBoost reads an object array of numbers; distshap asks for a numeric dtype
    with pytest.raises(TypeError, match="numeric"):
        explainer.shap_values(X.astype(object))


def test_threaded_calls_give_identical_values():
    X, y = _sentinel_data()
    booster = xgb.train({"max_depth": 5, "nthread": 1}, xgb.DMatrix(X, y), 20)
    explainer = TreeExplainer(booster, layout="xgboost", backend="cpu")
    expected = explainer.shap_values(X)
    results: dict[int, np.ndarray] = {}

    def work(i: int) -> None:
        results[i] = explainer.shap_values(X[i * 20 : i * 20 + 60])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == list(range(10))
    for i, got in results.items():
        np.testing.assert_array_equal(got, expected[i * 20 : i * 20 + 60])


def test_sparse_matrix_is_explained_as_xgboost_reads_it_or_refused_clearly():
    rng = np.random.default_rng(4)
    X = rng.normal(size=(200, 6))
    X[rng.random(X.shape) < 0.5] = 0.0
    csr = sp.csr_matrix(X)
    booster = xgb.train({"max_depth": 4, "nthread": 1}, xgb.DMatrix(csr, X[:, 0]), 10)
    explainer = TreeExplainer(booster, layout="xgboost", backend="cpu")
    try:
        got = explainer.shap_values(csr)
    except (TypeError, ValueError) as err:
        assert "sparse" in str(err)
    else:
        assert_close(got, contribs(booster, csr))
