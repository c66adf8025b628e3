"""scikit-learn's histogram gradient boosting on pandas category columns of any labels.

``categorical_features="from_dtype"`` (scikit-learn's default) encodes a DataFrame's category
columns by an internal ordinal encoder, by value: text labels, negative or fractional numbers
included. The explainer codes its inputs as that encoder does, whatever their type (a pandas
or polars frame, a 2-D NumPy array of the values, one row), and each row's values add up to
the model's own prediction.
"""

import numpy as np
import pandas as pd
import pytest

import distshap

sklearn_ensemble = pytest.importorskip("sklearn.ensemble")


def _frame(n: int = 160, seed: int = 0) -> pd.DataFrame:
    rng = np.random.RandomState(seed)
    X = pd.DataFrame(rng.randn(n, 2), columns=["p", "q"])
    X.insert(1, "city", pd.Categorical(rng.choice(["oslo", "rome", "lima", "kyiv"], n)))
    X["grade"] = pd.Categorical(rng.choice([2.5, -1.0, 7.0], n))
    X.loc[::13, "city"] = np.nan
    return X


def _target(X: pd.DataFrame) -> np.ndarray:
    city = X["city"].astype(object)
    return (
        X["p"].to_numpy()
        + 2.0 * (city == "oslo").to_numpy()
        - 1.0 * (city == "lima").to_numpy()
        + 1.5 * (X["grade"].astype(float) == 7.0).to_numpy()
    )


@pytest.fixture(scope="module")
def model_and_frame():
    X = _frame()
    model = sklearn_ensemble.HistGradientBoostingRegressor(
        max_iter=8, max_leaf_nodes=8, categorical_features="from_dtype"
    ).fit(X, _target(X))
    return model, X


def _check_sums(explainer, phi, model, X):
    got = phi.sum(axis=1) + explainer.expected_value
    np.testing.assert_allclose(got, model.predict(X), rtol=0, atol=1e-5)


def test_text_and_float_categories_add_up_to_predict(model_and_frame):
    model, X = model_and_frame
    explainer = distshap.TreeExplainer(model)
    phi = explainer.shap_values(X)
    _check_sums(explainer, phi, model, X)
    assert np.abs(phi[:, 1]).max() > 0.1  # the text feature carries its effect
    assert np.abs(phi[:, 3]).max() > 0.1  # so does the fractional one


def test_frame_category_order_and_unseen_labels(model_and_frame):
    model, X = model_and_frame
    explainer = distshap.TreeExplainer(model)
    X2 = X.copy()
    X2["city"] = X2["city"].cat.set_categories(["lima", "kyiv", "rome", "oslo", "nuuk"])
    X2.loc[4, "city"] = "nuuk"  # a label the model never saw: missing, as its encoder reads it
    phi = explainer.shap_values(X2)
    _check_sums(explainer, phi, model, X2)
    keep = np.arange(len(X)) != 4
    np.testing.assert_array_equal(phi[keep], explainer.shap_values(X)[keep])


def test_numpy_rows_hold_values_not_codes(model_and_frame):
    model, X = model_and_frame
    explainer = distshap.TreeExplainer(model)
    numeric = X.drop(columns="city")
    m2 = sklearn_ensemble.HistGradientBoostingRegressor(
        max_iter=8, max_leaf_nodes=8, categorical_features="from_dtype"
    ).fit(numeric, _target(X))
    ex2 = distshap.TreeExplainer(m2)
    A = numeric.to_numpy(dtype=np.float64)  # the grade column holds 2.5, -1.0, 7.0
    phi = ex2.shap_values(A)
    _check_sums(ex2, phi, m2, numeric)
    np.testing.assert_array_equal(phi, ex2.shap_values(numeric))
    np.testing.assert_array_equal(ex2.shap_values(A[5]), phi[5])
    objects = X.to_numpy(dtype=object)  # text labels in a NumPy array, as sklearn takes them
    np.testing.assert_array_equal(explainer.shap_values(objects), explainer.shap_values(X))
    with pytest.raises(ValueError, match="X has 3 features but the model expects 4"):
        explainer.shap_values(objects[:, :3])


def test_sparse_rows_refused_in_one_line(model_and_frame):
    scipy_sparse = pytest.importorskip("scipy.sparse")
    model, X = model_and_frame
    numeric = X.drop(columns="city")
    m2 = sklearn_ensemble.HistGradientBoostingRegressor(
        max_iter=4, categorical_features="from_dtype"
    ).fit(numeric, _target(X))
    rows = scipy_sparse.csr_matrix(numeric.to_numpy(dtype=np.float64))
    with pytest.raises(TypeError, match=r"feature\(s\) \['grade'\].*pass a pandas DataFrame"):
        distshap.TreeExplainer(m2).shap_values(rows)


def test_polars_frame(model_and_frame):
    pl = pytest.importorskip("polars")
    model, X = model_and_frame
    explainer = distshap.TreeExplainer(model)
    frame = pl.from_pandas(X)  # grade becomes Float64: polars has no numeric categories
    np.testing.assert_array_equal(explainer.shap_values(frame), explainer.shap_values(X))


def test_interventional_and_interactions_add_up(model_and_frame):
    model, X = model_and_frame
    interventional = distshap.TreeExplainer(model, X.iloc[:20])
    _check_sums(interventional, interventional.shap_values(X.iloc[:30]), model, X.iloc[:30])
    explainer = distshap.TreeExplainer(model)
    pairs = explainer.shap_interaction_values(X.iloc[:10])
    _check_sums(explainer, pairs.sum(axis=2), model, X.iloc[:10])


def test_text_labels_that_read_as_numbers_stay_distinct():
    rng = np.random.RandomState(1)
    X = pd.DataFrame({"p": rng.randn(120)})
    labels = rng.choice(["01", "1", "2"], 120)
    X["c"] = pd.Categorical(labels)
    y = X["p"].to_numpy() + 5.0 * (labels == "01") - 5.0 * (labels == "1")
    model = sklearn_ensemble.HistGradientBoostingRegressor(
        max_iter=4, max_leaf_nodes=4, categorical_features="from_dtype"
    ).fit(X, y)
    explainer = distshap.TreeExplainer(model)
    _check_sums(explainer, explainer.shap_values(X), model, X)


def test_numbers_on_text_labels_refused(model_and_frame):
    model, X = model_and_frame
    explainer = distshap.TreeExplainer(model)
    numbers = X.assign(city=np.arange(len(X)) % 4)  # codes, not the labels the model knows
    with pytest.raises(TypeError, match="column 'city' is numeric"):
        explainer.shap_values(numbers)
    with pytest.raises(TypeError, match="column 'city' is numeric"):
        explainer.shap_values(numbers.to_numpy(dtype=np.float64))
