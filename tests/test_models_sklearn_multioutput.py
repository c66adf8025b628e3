"""scikit-learn trees and forests fitted on a 2-D target: one output group per target.

A regressor fitted on ``K`` targets holds ``K`` values per leaf; the loader makes each tree
``K`` scalar-leaf trees, one per output, as shap explains it. Checked against shap's values
(path-dependent and interventional, shap's layout ``(n, F, K)``), the model's own
``predict`` (margins and additivity) and the brute-force oracle of ``tests/naive.py``.
Multi-output classifiers are refused: shap's values for them sum to each output's
probabilities divided by the number of outputs, which no output of the model is.
"""

from __future__ import annotations

import numpy as np
import pytest

import naive
from conftest import to_host

pytest.importorskip("sklearn")
from sklearn import ensemble, tree  # noqa: E402

from distshap import TreeExplainer, UnsupportedModelError, load_model  # noqa: E402
from distshap.kernels.margin import predict_margin  # noqa: E402

REGRESSORS = {
    "DecisionTreeRegressor": lambda: tree.DecisionTreeRegressor(max_depth=5, random_state=0),
    "ExtraTreeRegressor": lambda: tree.ExtraTreeRegressor(max_depth=5, random_state=0),
    "RandomForestRegressor": lambda: ensemble.RandomForestRegressor(4, max_depth=4, random_state=0),
    "ExtraTreesRegressor": lambda: ensemble.ExtraTreesRegressor(4, max_depth=4, random_state=0),
}


def _data(n: int = 200, f: int = 5) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    X = rng.normal(size=(n, f))
    Y = np.column_stack([X[:, 0] + X[:, 1] * (X[:, 2] > 0), 2 * X[:, 3], -(X[:, 4] ** 2)])
    return X, Y


def _fit(name: str):
    X, Y = _data()
    return REGRESSORS[name]().fit(X, Y), X


def _close(got, ref, tol: float = 1e-5) -> None:
    got, ref = to_host(got).astype(np.float64), np.asarray(ref, dtype=np.float64)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    np.testing.assert_allclose(got, ref, rtol=0, atol=tol * max(1.0, np.abs(ref).max()))


@pytest.mark.parametrize("name", sorted(REGRESSORS))
def test_one_group_per_target_margins_and_brute_force(name):
    model, X = _fit(name)
    ens = load_model(model)
    n_trees = len(getattr(model, "estimators_", [model]))
    assert ens.num_groups == 3 and ens.num_trees == 3 * n_trees
    assert ens.tree_group.tolist() == [0, 1, 2] * n_trees
    explainer = TreeExplainer(model, backend="cpu", layout="xgboost")
    _close(predict_margin(explainer.packed, X.astype(np.float32)), model.predict(X))
    values = explainer.shap_values(X[:6])
    _close(values.sum(axis=-1), model.predict(X[:6]))
    _close(values, naive.brute_force_shap_rows(ens, X[:6].astype(np.float32)))
    inter = explainer.shap_interaction_values(X[:3])
    _close(inter, naive.brute_force_interactions_rows(ens, X[:3].astype(np.float32)))


@pytest.mark.parametrize("name", sorted(REGRESSORS))
def test_values_equal_shap(name, backend):
    shap = pytest.importorskip("shap")
    model, X = _fit(name)
    ours = TreeExplainer(model, backend=backend, layout="shap")
    theirs = shap.TreeExplainer(model)
    _close(ours.shap_values(X[:50]), theirs.shap_values(X[:50]))
    _close(ours.shap_interaction_values(X[:10]), theirs.shap_interaction_values(X[:10]))
    np.testing.assert_allclose(ours.expected_value, theirs.expected_value, rtol=0, atol=1e-9)


def test_interventional_values_equal_shap(backend):
    shap = pytest.importorskip("shap")
    model, X = _fit("RandomForestRegressor")
    background = X[:20]
    ours = TreeExplainer(model, data=background, feature_perturbation="interventional",
                         backend=backend, layout="shap")  # fmt: skip
    theirs = shap.TreeExplainer(model, data=background, feature_perturbation="interventional")
    _close(ours.shap_values(X[30:45]), theirs.shap_values(X[30:45]))


@pytest.mark.parametrize(
    "model",
    [tree.DecisionTreeClassifier(max_depth=3), ensemble.RandomForestClassifier(3, max_depth=3)],
    ids=["tree", "forest"],
)
def test_multi_output_classifiers_are_refused(model):
    X, Y = _data()
    model.fit(X, np.column_stack([Y[:, 0] > 0, np.digitize(Y[:, 1], [-1.0, 1.0])]))
    with pytest.raises(UnsupportedModelError, match="2 outputs: multi-output classifiers"):
        TreeExplainer(model, backend="cpu")
