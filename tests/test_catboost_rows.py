"""CatBoost categorical models explained on rows as users pass them to CatBoost.

A list of rows, a NumPy array of text or objects: the categorical columns are coded exactly as
a DataFrame's, the numeric ones read as CatBoost reads them (numbers, decimal text, its texts of
a missing value), checked against the DataFrame route bit for bit and against CatBoost's own
ShapValues on the same rows. ``Explanation.data`` holds the values given, as shap's does.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from distshap import TreeExplainer
from distshap.inputs import model_matrix

cb = pytest.importorskip("catboost")
pd = pytest.importorskip("pandas")

NAMES = ["x", "c", "k"]
CATS = [1, 2]


def _rows(n: int, seed: int) -> list[list]:
    """Rows as Python lists: a float, a text category, an integer category."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n).round(3)
    c = rng.choice(["a", "b", "cc", "é e"], n)
    k = rng.integers(-2, 4, n)
    return [[float(x[i]), str(c[i]), int(k[i])] for i in range(n)]


@pytest.fixture(scope="module")
def model():
    rows = _rows(200, 1)
    y = [r[0] + (r[1] == "a") - 0.7 * (r[1] == "cc") + 0.5 * (r[2] % 3) for r in rows]
    params = {"one_hot_max_size": 4, "max_ctr_complexity": 1}  # c: CTRs, k: one-hot
    booster = cb.CatBoostRegressor(iterations=5, depth=3, verbose=0, thread_count=1,
                                   random_seed=0, allow_writing_files=False, **params)  # fmt: skip
    return booster.fit(rows, y, cat_features=CATS)


def _catboost_shap(model, rows) -> np.ndarray:
    pool = cb.Pool(rows, cat_features=CATS)
    return np.asarray(model.get_feature_importance(pool, type="ShapValues"))[:, :-1]


def _test_rows() -> list[list]:
    rows = _rows(12, 2)
    rows[0][1] = "never seen"
    rows[1][2] = 99
    return rows


def test_a_list_of_rows_reads_as_the_frame_and_as_catboost(model):
    rows = _test_rows()
    explainer = TreeExplainer(model)
    frame = pd.DataFrame(rows, columns=NAMES)
    expected = explainer.shap_values(frame)
    for array in (np.asarray(rows), np.array(rows, dtype=object)):  # bit for bit
        assert model_matrix(array, explainer.packed).tobytes() == (
            model_matrix(frame, explainer.packed).tobytes()
        )
    for given in (rows, np.asarray(rows), np.array(rows, dtype=object)):
        np.testing.assert_array_equal(explainer.shap_values(given), expected)
    np.testing.assert_array_equal(explainer.shap_values(rows[3]), expected[3])  # one row
    np.testing.assert_allclose(expected, _catboost_shap(model, rows), rtol=0, atol=2e-6)


def test_numeric_text_and_missing_values_read_as_catboost_reads_them(model):
    rows = _test_rows()[:6]
    numbers = [1.25, np.nan, np.nan, np.nan, np.nan, 5.0]
    for row, text in zip(rows, ["1.25", "nan", "", None, "NA", "+.5e1"], strict=True):
        row[0] = text
    rows[0][2] = "3"  # an integer category as text
    explainer = TreeExplainer(model)
    ours = explainer.shap_values(rows)
    as_numbers = [[v, r[1], int(r[2])] for v, r in zip(numbers, rows, strict=True)]
    np.testing.assert_array_equal(ours, explainer.shap_values(pd.DataFrame(as_numbers)))
    np.testing.assert_allclose(ours, _catboost_shap(model, rows), rtol=0, atol=2e-6)
    raw = model.predict(rows, prediction_type="RawFormulaVal")
    total = ours.sum(axis=1) + explainer.expected_value
    np.testing.assert_allclose(total, raw, rtol=0, atol=2e-6)


def test_values_numpy_would_make_text_are_read_as_the_objects_they_are(model):
    rows = _test_rows()[:5]
    rows[0][0], rows[1][0], rows[2][0] = True, False, float("inf")  # NumPy: 'True', ..., 'inf'
    rows[3][2], rows[4][2] = True, np.int64(2)  # a boolean category: CatBoost reads 1
    explainer = TreeExplainer(model)
    ours = explainer.shap_values(rows)
    as_read = [[float(r[0]), r[1], int(r[2])] for r in rows]
    np.testing.assert_array_equal(ours, explainer.shap_values(pd.DataFrame(as_read)))
    np.testing.assert_allclose(ours, _catboost_shap(model, rows), rtol=0, atol=2e-6)
    assert explainer(rows).data.tolist() == [[float(r[0]), r[1], r[2]] for r in rows]


def test_blanks_before_a_number_are_skipped_alone_zero_after_it_refused(model):
    rows = _test_rows()[:4]
    for row, text in zip(rows, [" 0.5", "\t-1", "\n +.5e1", "  "], strict=True):
        row[0] = text
    explainer = TreeExplainer(model)
    ours = explainer.shap_values(rows)
    as_numbers = [[v, r[1], r[2]] for v, r in zip([0.5, -1.0, 5.0, 0.0], rows, strict=True)]
    np.testing.assert_array_equal(ours, explainer.shap_values(as_numbers))
    np.testing.assert_allclose(ours, _catboost_shap(model, rows), rtol=0, atol=2e-6)
    rows[1][0] = "0.5 "
    with pytest.raises(cb.CatBoostError, match="Cannot convert '0.5 ' to float"):
        _catboost_shap(model, rows)
    with pytest.raises(ValueError, match="numeric column .* holds '0.5 ', which CatBoost"):
        explainer.shap_values(rows)


@pytest.mark.parametrize("value", [1.0, np.float32(2.0), np.float64(-1.0)])
def test_a_float_category_is_refused_in_one_line_as_catboost_refuses_it(model, value):
    rows = _test_rows()
    rows[3][2] = value
    with pytest.raises(cb.CatBoostError, match="cat_features must be integer or string"):
        _catboost_shap(model, rows)
    frame = pd.DataFrame(_test_rows(), columns=NAMES).astype({"k": object})
    frame.loc[3, "k"] = value  # among integers, one of which pandas counts as equal
    held = re.escape(repr(value))
    floats = frame.astype({"k": float})  # every value a float: the first one is named
    for given, name in ((rows, f"2 holds {held}"), (frame, f"'k' holds {held}"),
                        (floats, f"'k' holds {float(floats.k[0])!r}")):  # fmt: skip
        with pytest.raises(TypeError, match=f"categorical column {name}: CatBoost") as err:
            TreeExplainer(model).shap_values(given)
        assert "\n" not in str(err.value)


@pytest.mark.parametrize("value", ["x", "inf", "1,5", object()])
def test_a_value_of_no_number_in_a_numeric_column_is_refused_in_one_line(model, value):
    rows = _test_rows()
    rows[4][0] = value
    with pytest.raises(
        ValueError, match=f"X's numeric column 0 holds {re.escape(repr(value))}"
    ) as err:
        TreeExplainer(model).shap_values(rows)
    assert "\n" not in str(err.value)


def test_ragged_rows_and_numeric_models_keep_their_errors(model):
    with pytest.raises(ValueError, match="X is a ragged list"):
        TreeExplainer(model).shap_values([["a", 1.0, 2], ["b", 2.0]])
    numeric = cb.CatBoostRegressor(iterations=2, depth=2, verbose=0, thread_count=1,
                                   allow_writing_files=False)  # fmt: skip
    numeric.fit([[0.0], [1.0]] * 4, [0, 1] * 4)
    with pytest.raises(TypeError, match="X has dtype object; SHAP values need numeric input"):
        TreeExplainer(numeric).shap_values([["a"]])


def test_explanation_data_holds_the_values_given(model):
    rows = _test_rows()
    explainer = TreeExplainer(model)
    frame = pd.DataFrame(rows, columns=NAMES)
    from_frame = explainer(frame).data
    assert from_frame.dtype == object
    assert from_frame.tolist() == rows
    assert explainer(rows).data.tolist() == rows
    assert explainer(np.array(rows, dtype=object)).data.tolist() == rows
    assert explainer(frame.iloc[2]).data.tolist() == rows[2]
    categories = frame.astype({"c": "category"})
    assert explainer(categories).data.tolist() == rows
    codes_as_numbers = frame.assign(c=frame.c.map({"a": 0, "b": 1, "cc": 2}).fillna(3).astype(int))
    numbers = explainer(codes_as_numbers)
    assert numbers.data.dtype == np.float64  # numeric rows: as given, as before
    shap = pytest.importorskip("shap")
    assert explainer(frame).data.tolist() == shap.TreeExplainer(model)(frame).data.tolist()


def test_explanation_of_text_categories_plots():
    pytest.importorskip("matplotlib")
    shap = pytest.importorskip("shap")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = _rows(40, 3)
    model = cb.CatBoostRegressor(iterations=3, depth=2, verbose=0, thread_count=1,
                                 allow_writing_files=False)  # fmt: skip
    model.fit(rows, [r[0] for r in rows], cat_features=CATS)
    explanation = TreeExplainer(model)(pd.DataFrame(rows, columns=NAMES))
    shap.plots.beeswarm(explanation, show=False)
    shap.plots.scatter(explanation[:, "c"], color=explanation[:, "x"], show=False)
    shap.plots.waterfall(explanation[0], show=False)
    plt.close("all")
