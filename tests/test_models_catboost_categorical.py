"""CatBoost categorical features (one-hot and one-feature CTR splits) against their oracles.

Each kind is checked against CatBoost itself (the leaf every row reaches, ShapValues, raw
margins), against the brute-force oracle of ``naive.py`` on the coded rows, against shap where
installed, and once under the CUDA simulator.
"""

from __future__ import annotations

import json
import os
import tempfile

import numpy as np
import pytest

from distshap import TreeExplainer
from distshap.inputs import model_matrix
from distshap.models import UnsupportedModelError, load_model
from distshap.models.catboost import load_catboost_json

import naive
from conftest import to_host
from cudasim import assert_simulator_ok

cb = pytest.importorskip("catboost")
pd = pytest.importorskip("pandas")

CATS = ["c", "k"]


def _frame(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "x": rng.normal(size=n).astype(np.float32),
            "c": rng.choice(["a", "b", "cc", "d", "é e"], n),  # text categories
            "k": rng.integers(-2, 5, n),  # integer categories
        }
    )


def _target(df: pd.DataFrame, task: str) -> np.ndarray:
    y = df.x + (df.c == "a") - 0.7 * (df.c == "cc") + 0.5 * (df.k % 3)
    if task == "binary":
        return (y > y.median()).astype(int).to_numpy()
    if task == "multiclass":
        return np.digitize(y, np.quantile(y, [0.33, 0.66]))
    return y.to_numpy()


CASES = {  # name: (task, parameters)
    "one_hot": ("regression", {"one_hot_max_size": 255}),
    "ctr": ("regression", {"one_hot_max_size": 1, "max_ctr_complexity": 1}),
    "ctr_counter_prior": (
        "regression",
        {"one_hot_max_size": 1, "max_ctr_complexity": 1, "simple_ctr": ["Counter:Prior=0.3"]},
    ),
    "ctr_binary": ("binary", {"one_hot_max_size": 1, "max_ctr_complexity": 1}),
    "mixed_binary": ("binary", {"one_hot_max_size": 5, "max_ctr_complexity": 1}),
    "ctr_multiclass": ("multiclass", {"one_hot_max_size": 1, "max_ctr_complexity": 1}),
    "depthwise": ("regression", {"one_hot_max_size": 6, "grow_policy": "Depthwise"}),
}


def _fit(case: str):
    task, params = CASES[case]
    df = _frame(300, 1)
    cls = cb.CatBoostRegressor if task == "regression" else cb.CatBoostClassifier
    model = cls(iterations=6, depth=3, verbose=0, thread_count=1, random_seed=0, **params)
    model.fit(df, _target(df, task), cat_features=CATS)
    rows = _frame(24, 2)
    rows.loc[0, "c"] = "never seen"  # unknown categories
    rows.loc[1, "k"] = 99
    return model, rows


def _reference(model, rows, shape) -> np.ndarray:
    """CatBoost's ShapValues of the model's JSON export (which distshap reads: for non-symmetric
    trees it keeps other leaf weights than the fitted model), in distshap's layout."""
    with tempfile.TemporaryDirectory() as tmp:
        model.save_model(os.path.join(tmp, "m.json"), format="json")
        model = cb.CatBoost().load_model(os.path.join(tmp, "m.json"), format="json")
    ref = np.asarray(model.get_feature_importance(cb.Pool(rows, cat_features=CATS), "ShapValues"))
    if ref.ndim == 3:  # (n, classes, F + 1) -> (n, F, classes)
        return np.moveaxis(ref[:, :, :-1], 1, -1).reshape(shape)
    return ref[:, :-1].reshape(shape)


@pytest.mark.parametrize("case", list(CASES))
def test_shap_values_match_catboost_and_add_up_to_its_margin(case, backend):
    model, rows = _fit(case)
    explainer = TreeExplainer(model, backend=backend)
    ours = to_host(explainer.shap_values(rows))
    ours = np.stack(ours, axis=-1) if isinstance(ours, list) else ours
    np.testing.assert_allclose(ours, _reference(model, rows, ours.shape), rtol=0, atol=2e-6)
    raw = np.asarray(model.predict(rows, prediction_type="RawFormulaVal"))
    total = ours.sum(axis=1) + np.asarray(explainer.expected_value)
    np.testing.assert_allclose(total, raw.reshape(total.shape), rtol=0, atol=2e-6)


@pytest.mark.parametrize("case", ["mixed_binary", "ctr_multiclass"])
def test_interaction_values_match_catboost(case):
    model, rows = _fit(case)
    ours = to_host(TreeExplainer(model).shap_interaction_values(rows))
    pool = cb.Pool(rows, cat_features=CATS)
    ref = np.asarray(model.get_feature_importance(pool, "ShapInteractionValues"))
    ref = ref[:, :-1, :-1] if ref.ndim == 3 else np.moveaxis(ref[:, :, :-1, :-1], 1, -1)
    np.testing.assert_allclose(ours, ref, rtol=0, atol=2e-6)


@pytest.mark.parametrize("case", ["one_hot", "ctr", "ctr_multiclass"])
def test_every_row_reaches_catboosts_leaf(case):
    """The leaf of each oblivious tree fixes every split's outcome, categorical ones too."""
    model, rows = _fit(case)
    explainer = TreeExplainer(model)
    ens, coded = explainer.ensemble, model_matrix(rows, explainer.packed)
    leaves = np.asarray(model.calc_leaf_indexes(cb.Pool(rows, cat_features=CATS)))
    dim = ens.num_groups
    for t in range(leaves.shape[1]):
        tree = t * dim  # each CatBoost tree is copied once per output
        n_inner = (ens.tree_offsets[tree + 1] - ens.tree_offsets[tree]) // 2
        first_leaf = ens.tree_offsets[tree] + n_inner
        ours = [naive.tree_leaf(ens, tree, row) - first_leaf for row in coded]
        np.testing.assert_array_equal(ours, leaves[:, t])


@pytest.mark.parametrize("case", ["one_hot", "ctr_binary"])
def test_shap_values_match_the_brute_force_oracle(case):
    model, rows = _fit(case)
    explainer = TreeExplainer(model)
    coded = model_matrix(rows[:6], explainer.packed).astype(np.float64)
    ref = naive.brute_force_shap_rows(explainer.ensemble, coded)[:, 0, :-1]
    ours = to_host(explainer.shap_values(rows[:6]))
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-6)


def test_interventional_values_match_the_oracle():
    model, rows = _fit("mixed_binary")
    background = _frame(5, 3)
    explainer = TreeExplainer(model, background, feature_perturbation="interventional")
    ours = to_host(explainer.shap_values(rows[:4]))
    coded = model_matrix(rows[:4], explainer.packed).astype(np.float64)
    bg = model_matrix(background, explainer.packed, what="data").astype(np.float64)
    ref = naive.interventional_shap_rows(explainer.ensemble, coded, bg)[:, 0, :-1]
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-6)


def test_shap_values_match_shap():
    shap = pytest.importorskip("shap")
    model, rows = _fit("mixed_binary")
    ref = np.asarray(shap.TreeExplainer(model).shap_values(rows))
    ours = to_host(TreeExplainer(model).shap_values(rows))
    np.testing.assert_allclose(ours, ref.reshape(ours.shape), rtol=0, atol=2e-6)


def test_arrays_of_objects_and_one_row_read_as_the_frame():
    model, rows = _fit("ctr")
    explainer = TreeExplainer(model)
    ours = to_host(explainer.shap_values(rows))
    np.testing.assert_array_equal(to_host(explainer.shap_values(rows.to_numpy(object))), ours)
    np.testing.assert_array_equal(to_host(explainer.shap_values(rows.iloc[3])), ours[3])


@pytest.mark.parametrize("value, held", [(None, "a missing value"), (1.5, "1.5")])
def test_a_missing_or_fractional_category_is_refused_in_one_line(value, held):
    model, rows = _fit("one_hot")
    rows["c"] = rows["c"].astype(object)
    rows.loc[2, "c"] = value
    with pytest.raises(TypeError, match=f"column 'c' holds {held}: CatBoost") as err:
        TreeExplainer(model).shap_values(rows)
    assert "\n" not in str(err.value)


def test_an_edited_one_hot_value_is_refused(tmp_path):
    model, _ = _fit("one_hot")
    model.save_model(str(tmp_path / "m.json"), format="json")
    doc = json.loads((tmp_path / "m.json").read_text())
    listed = [c for c in doc["features_info"]["categorical_features"] if c.get("values")]
    listed[0]["values"] = listed[0]["values"][1:]
    with pytest.raises(ValueError, match="tests the value .* which features_info does not list"):
        load_catboost_json(doc)


def test_a_combination_ctr_is_refused_naming_its_features():
    rng = np.random.default_rng(0)
    df = pd.DataFrame(
        {
            "x": rng.normal(size=500).astype(np.float32),
            "c": rng.choice(["a", "b", "cc", "d", "e"], 500),
            "k": rng.integers(0, 6, 500),
        }
    )
    y = df.x + (df.c == "a") - 0.7 * (df.c == "cc") + 0.5 * (df.k % 3) + rng.normal(size=500) / 10
    model = cb.CatBoostRegressor(
        iterations=12, depth=4, verbose=0, thread_count=1, random_seed=1, one_hot_max_size=1,
        max_ctr_complexity=2,
    )  # fmt: skip
    model.fit(df, y, cat_features=CATS)  # its CTRs include one over ('c', 'x')
    with pytest.raises(UnsupportedModelError, match=r"combination \[.*'c'.*max_ctr_complexity=1"):
        load_model(model)


SIMULATED = r"""
import numpy as np
from test_models_catboost_categorical import _fit, _reference
from distshap import TreeExplainer
from distshap.inputs import prepare_rows
from distshap.kernels import cuda as kc

model, rows = _fit("mixed_binary")
rows = rows[:6]
explainer = TreeExplainer(model)
X = prepare_rows(rows, explainer.packed)
ours = np.asarray(kc.shap_values(explainer.packed, X))[:, 0, :-1]
np.testing.assert_allclose(ours, _reference(model, rows, ours.shape), rtol=0, atol=2e-6)
inter = np.asarray(kc.interaction_values(explainer.packed, X))[:, 0, :-1, :-1]
np.testing.assert_allclose(inter, explainer.shap_interaction_values(rows), rtol=0, atol=1e-6)
print("SIMULATOR-OK")
"""


def test_cuda_simulator_matches_catboost():
    assert_simulator_ok(SIMULATED, timeout=300)


def test_category_hashes_are_asked_of_catboost_once_a_value(monkeypatch):
    from distshap.models import catboost_categorical as cc

    monkeypatch.setattr(cc, "_HASHES", {})
    asked = []
    real = cc._hash_batch
    monkeypatch.setattr(cc, "_hash_batch", lambda texts: asked.append(list(texts)) or real(texts))
    first = cc.catboost_hashes(["red", "green"])
    again = cc.catboost_hashes(["green", "blue", "red"])
    assert asked == [["red", "green"], ["blue"]]
    np.testing.assert_array_equal(again[[0, 2]], first[[1, 0]])
    np.testing.assert_array_equal(again[1:2], real(["blue"])["blue"])


def test_a_dask_frame_explanation_holds_the_values_given(scheduler):
    """``explainer(ddf).compute().data``, as in memory: the categories as given, not codes."""
    dd = pytest.importorskip("dask.dataframe")
    from distributed import Client

    model, rows = _fit("ctr")
    explainer = TreeExplainer(model)
    in_memory = explainer(rows)
    with Client(scheduler) as client:
        explainer.client = client
        got = explainer(dd.from_pandas(rows, npartitions=3)).compute()
    assert got.data.dtype == object and got.data.shape == in_memory.data.shape
    assert list(got.data[:, 1]) == list(rows["c"]) and list(got.data[:, 2]) == list(rows["k"])
    np.testing.assert_array_equal(got.data[:, 0].astype(np.float64), rows["x"].to_numpy(float))
    np.testing.assert_array_equal(got.values, in_memory.values)
