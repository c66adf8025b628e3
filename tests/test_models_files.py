"""Loaders at the edges, against the model libraries on sklearn's bundled data sets.

float64 thresholds (LightGBM, HistGradientBoosting) and LightGBM's zero-as-missing cut points
taken exactly; XGBoost's ``missing=`` sentinel read where the model records it; truncated or
inconsistent model files refused with what is wrong; files distshap does not read refused in one
line naming the file; LightGBM's stored feature names. Tests work at the Ensemble level, with a
plain NumPy traversal (:func:`leaf_values`), so they do not depend on the kernels.
"""

from __future__ import annotations

import gzip
import json
import math
import pickle
import re

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import load_breast_cancer, load_diabetes, load_digits, load_iris

from distshap.encoding import encode_ensemble
from distshap.models import Ensemble, UnsupportedModelError, load_model, load_model_file
from distshap.models._common import MAX_FEATURES
from distshap.models._ubjson import MAX_DEPTH, UBJSONError, decode_ubjson
from distshap.models.lightgbm import lightgbm_feature_name, load_lightgbm_string

xgb = pytest.importorskip("xgboost")
lgb = pytest.importorskip("lightgbm")


@pytest.fixture(autouse=True)
def _one_thread():
    """OpenMP busy-waiting of LightGBM / HistGradientBoosting is slow on small shared boxes."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1):
        yield


def leaf_values(ens: Ensemble, rows: np.ndarray) -> np.ndarray:
    """``(n_rows, n_trees)``: the leaf value each row reaches in each tree.

    The Ensemble's own rule on float32 ``rows``: ``x < threshold`` goes left, NaN follows
    ``default_left``, listed categories go right.
    """
    rows = np.asarray(rows, dtype=np.float32)
    n = rows.shape[0]
    out = np.zeros((n, ens.num_trees))
    for t in range(ens.num_trees):
        node = np.full(n, ens.tree_offsets[t], dtype=np.int64)
        while True:
            active = np.flatnonzero(ens.left[node] >= 0)
            if active.size == 0:
                break
            i = node[active]
            x = rows[active, ens.feature[i]]
            left = x < ens.threshold[i]
            for k in np.flatnonzero(ens.is_categorical[i]):
                cats = ens.cat_values[ens.cat_offsets[i[k]] : ens.cat_offsets[i[k] + 1]]
                left[k] = x[k] not in cats
            left = np.where(np.isnan(x), ens.default_left[i], left)
            node[active] = np.where(left, ens.left[i], ens.right[i])
        out[:, t] = ens.value[node]
    return out


def margin(ens: Ensemble, rows: np.ndarray) -> np.ndarray:
    """``(n_rows, num_groups)`` margins of a plain traversal."""
    per_tree = leaf_values(ens, rows)
    out = np.tile(ens.base_score, (rows.shape[0], 1))
    for g in range(ens.num_groups):
        out[:, g] += per_tree[:, ens.tree_group == g].sum(axis=1)
    return out


def encoded_margin(ens: Ensemble, X: np.ndarray) -> np.ndarray:
    """Margins of the encoded ensemble on encoded float64 inputs (the kernels' view)."""
    encoded, encoding = encode_ensemble(ens)
    return margin(encoded, encoding.apply(np.asarray(X, dtype=np.float64)))


# --- float64 thresholds ------------------------------------------------------------------------


def test_histgradientboosting_diabetes_every_row_routed_as_sklearn():
    from sklearn.ensemble import HistGradientBoostingRegressor

    X, y = load_diabetes(return_X_y=True)
    model = HistGradientBoostingRegressor(max_iter=500, random_state=0).fit(X, y)
    ens = load_model(model)
    assert ens.threshold64 is not None
    raw = model._raw_predict(X)[:, 0]
    # rounding the inputs to float32 sends many training rows down other branches
    plain = margin(ens, X)[:, 0]
    assert np.sum(np.abs(plain - raw) > 1e-3) > 20
    np.testing.assert_allclose(encoded_margin(ens, X)[:, 0], raw, rtol=0, atol=1e-9)


def test_histgradientboosting_float64_with_nan():
    from sklearn.ensemble import HistGradientBoostingClassifier

    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 5))
    y = (X[:, 0] * 2 + X[:, 1] ** 2 + rng.normal(size=200) > 1).astype(int)
    X[rng.random(X.shape) < 0.1] = np.nan
    model = HistGradientBoostingClassifier(max_iter=200, random_state=0).fit(X, y)
    ens = load_model(model)
    np.testing.assert_allclose(
        encoded_margin(ens, X)[:, 0], model.decision_function(X), rtol=0, atol=1e-9
    )


def test_float32_sklearn_models_keep_threshold64_none():
    from sklearn.ensemble import GradientBoostingRegressor, RandomForestRegressor

    X, y = load_diabetes(return_X_y=True)
    for model in (
        RandomForestRegressor(n_estimators=3, max_depth=4, random_state=0),
        GradientBoostingRegressor(n_estimators=3, max_depth=3, random_state=0),
    ):
        ens = load_model(model.fit(X, y))
        assert ens.threshold64 is None
        np.testing.assert_allclose(margin(ens, X)[:, 0], model.predict(X), rtol=1e-9)


def test_lightgbm_breast_cancer_every_tree_reaches_lightgbms_leaf():
    X, y = load_breast_cancer(return_X_y=True)
    booster = lgb.train({"objective": "binary", "verbose": -1}, lgb.Dataset(X, y), 100)
    ens = load_model(booster)
    assert ens.threshold64 is not None and ens.threshold64.dtype == np.float64
    leaves = booster.predict(X, pred_leaf=True)
    expected = np.array(
        [[booster.get_leaf_output(t, int(leaf)) for t, leaf in enumerate(row)] for row in leaves]
    )
    encoded, encoding = encode_ensemble(ens)
    np.testing.assert_array_equal(leaf_values(encoded, encoding.apply(X)), expected)
    # and rows at the float64 thresholds themselves, just below and just above them
    numeric = np.flatnonzero((ens.left >= 0) & ~ens.is_categorical)
    rng = np.random.default_rng(0)
    probe = X[rng.integers(0, len(X), 300)].copy()
    for r, node in enumerate(rng.choice(numeric, 300)):
        thr = np.nextafter(ens.threshold64[node], -np.inf)  # LightGBM's own threshold
        probe[r, ens.feature[node]] = np.nextafter(thr, [-np.inf, 0, np.inf][r % 3] * 1.0)
    np.testing.assert_allclose(
        encoded_margin(ens, probe)[:, 0], booster.predict(probe, raw_score=True), atol=1e-12
    )


def _lgb_split(text: str) -> tuple[str, list[str], str]:
    """Header, tree blocks (each from its ``Tree=`` line) and the rest of a model text."""
    first = text.index("\nTree=") + 1
    end = text.index("end of trees")
    starts = [m.start() + first for m in re.finditer(r"(?m)^Tree=", text[first:end])]
    blocks = [text[a:b] for a, b in zip(starts, [*starts[1:], end], strict=True)]
    return text[:first], blocks, text[end:]


def _lgb_join(head: str, blocks: list[str], tail: str, sizes: bool = True) -> str:
    """Reassemble a model text, with ``tree_sizes`` recomputed unless ``sizes=False``."""
    if sizes:
        listed = " ".join(str(len(b.encode())) for b in blocks)
        head = re.sub(r"(?m)^tree_sizes=.*$", f"tree_sizes={listed}", head)
    return head + "".join(blocks) + tail


def _set_line(block: str, key: str, value: str) -> str:
    return re.sub(rf"(?m)^{key}=.*$", f"{key}={value}", block)


def test_lightgbm_zero_as_missing_cut_points_in_float64():
    """Zero-as-missing splits at thresholds around LightGBM's kZeroThreshold, exact in float64.

    Tree 0 of a breast-cancer model gets three zero-as-missing splits: one whose left set is
    two intervals (rebuilt with float64 cut points), one with the zero region on the other side
    of its threshold, and one at exactly ``z = double(1e-35f)``; LightGBM reads the same text.
    """
    X, y = load_breast_cancer(return_X_y=True)
    base = lgb.train({"objective": "binary", "verbose": -1, "num_leaves": 4}, lgb.Dataset(X, y), 3)
    z = float(np.float32(1e-35))
    head, blocks, tail = _lgb_split(base.model_to_string())
    thresholds = [5e-35, -1e-34, z]
    blocks[0] = _set_line(blocks[0], "threshold", " ".join(repr(t) for t in thresholds))
    blocks[0] = _set_line(blocks[0], "decision_type", "4 6 6")  # zero-missing; left, left
    text = _lgb_join(head, blocks, tail)
    booster = lgb.Booster(model_str=text)
    ens = load_lightgbm_string(text)
    assert ens.num_nodes > sum(2 * int(b.split("num_leaves=")[1].split()[0]) - 1 for b in blocks)

    features = [int(v) for v in re.search(r"split_feature=(.*)", blocks[0]).group(1).split()]
    near = [-z, z, 0.0, -0.0, 1e-36, -1e-36, 1.0, -1.0, math.nan, *thresholds]
    probes = np.array([w for v in near for w in (np.nextafter(v, -np.inf), v, np.nextafter(v, 1))])
    rng = np.random.default_rng(1)
    rows = X[rng.integers(0, len(X), 400)].copy()
    rows[:, features] = rng.choice(probes, size=(400, len(features)))
    np.testing.assert_allclose(
        encoded_margin(ens, rows)[:, 0], booster.predict(rows, raw_score=True), atol=1e-12
    )
    # float32 inputs through the float32 thresholds agree as well
    rows32 = rows.astype(np.float32)
    np.testing.assert_allclose(
        margin(ens, rows32)[:, 0],
        booster.predict(rows32.astype(np.float64), raw_score=True),
        atol=1e-12,
    )


# --- XGBoost missing= ----------------------------------------------------------------------------


def _sentinel_rows() -> tuple[np.ndarray, np.ndarray]:
    X, y = load_breast_cancer(return_X_y=True)
    X = X.astype(np.float32)
    X[np.random.default_rng(2).random(X.shape) < 0.2] = np.float32(1e-8)
    return X, y


def test_xgboost_estimator_missing_is_the_ensembles_missing_value():
    X, y = _sentinel_rows()
    model = xgb.XGBClassifier(n_estimators=30, max_depth=4, missing=1e-8).fit(X, y)
    ens = load_model(model)
    assert ens.missing_value == 1e-8 and ens.threshold64 is None
    want = model.predict(X, output_margin=True)
    np.testing.assert_allclose(encoded_margin(ens, X)[:, 0], want, rtol=1e-6, atol=1e-5)
    # read as a number, the sentinel gives other margins: the test could fail
    assert np.abs(margin(ens, X)[:, 0] - want).max() > 0.1
    assert math.isnan(load_model(model.get_booster()).missing_value)  # a Booster does not know
    assert math.isnan(load_model(xgb.XGBClassifier(n_estimators=2).fit(X, y)).missing_value)


def test_xgboost_saved_model_missing_value(tmp_path):
    X, y = _sentinel_rows()
    model = xgb.XGBClassifier(n_estimators=10, max_depth=3, missing=1e-8).fit(X, y)
    path = tmp_path / "model.json"
    model.save_model(path)
    attrs = json.loads(path.read_text())["learner"]["attributes"]
    if "missing" not in json.loads(attrs.get("scikit_learn", "{}")):
        # XGBoost >= 1.6 records only the estimator type: the file does not know the sentinel
        assert math.isnan(load_model(str(path)).missing_value)
    # XGBoost < 1.6 recorded every estimator parameter there (NaN as JSON's NaN)
    booster = model.get_booster()
    for raw, expect in (("1e-08", 1e-8), ("NaN", math.nan), ("-999.0", -999.0)):
        meta = '{"missing": ' + raw + ', "_estimator_type": "classifier"}'
        booster.set_attr(scikit_learn=meta)
        for name in ("old.json", "old.ubj"):
            booster.save_model(tmp_path / name)
            got = load_model(str(tmp_path / name)).missing_value
            assert (math.isnan(got) and math.isnan(expect)) or got == expect
    booster.set_attr(scikit_learn="{not json")
    booster.save_model(tmp_path / "bad.json")
    with pytest.raises(ValueError, match=r"bad\.json.*scikit_learn attribute is not JSON"):
        load_model(str(tmp_path / "bad.json"))


# --- counts of XGBoost documents -----------------------------------------------------------------


def _xgb_doc(**params) -> dict:
    X, y = load_diabetes(return_X_y=True)
    booster = xgb.train({"max_depth": 3, **params}, xgb.DMatrix(X, y), 6)
    return json.loads(booster.save_raw("json"))


def _model(doc: dict) -> dict:
    return doc["learner"]["gradient_booster"]["model"]


def _drop_tree(doc):
    _model(doc)["trees"].pop(2)


def _drop_tree_and_fix_num_trees(doc):
    m = _model(doc)
    m["trees"].pop()
    m["gbtree_model_param"]["num_trees"] = str(len(m["trees"]))


def _drop_tree_info(doc):
    _model(doc)["tree_info"].pop()


def _bad_indptr(doc):
    _model(doc)["iteration_indptr"][-1] -= 1


def _bad_num_nodes(doc):
    tree = _model(doc)["trees"][1]
    tree["tree_param"]["num_nodes"] = str(int(tree["tree_param"]["num_nodes"]) + 2)


def _short_array(doc):
    _model(doc)["trees"][3]["sum_hessian"].pop()


def _few_features(doc):
    doc["learner"]["learner_model_param"]["num_feature"] = "2"
    doc["learner"]["feature_names"] = []
    doc["learner"]["feature_types"] = []


def _few_features_everywhere(doc):
    _few_features(doc)
    for tree in _model(doc)["trees"]:
        tree["tree_param"]["num_feature"] = "2"


def _huge_num_feature(doc):
    doc["learner"]["learner_model_param"]["num_feature"] = str(10**12)


def _swap_trees(doc):
    trees = _model(doc)["trees"]
    trees[0], trees[1] = trees[1], trees[0]


def _classes_and_targets(doc):
    doc["learner"]["learner_model_param"].update(num_class="3", num_target="2")


def _more_classes(doc):
    doc["learner"]["learner_model_param"]["num_class"] = "3"


def _parallel_trees(doc):
    _model(doc)["gbtree_model_param"]["num_parallel_tree"] = "4"


def _feature_names(doc):
    doc["learner"]["feature_names"] = ["a", "b"]


XGB_BREAKS = {
    "tree removed": (_drop_tree, r"num_trees is 6 but the document holds 5"),
    "tree removed, num_trees fixed": (_drop_tree_and_fix_num_trees, r"tree_info has 6 entries"),
    "tree_info short": (_drop_tree_info, r"tree_info has 5 entries for 6 trees"),
    "iteration_indptr": (_bad_indptr, r"iteration_indptr runs from 0 to 5 for 6 trees"),
    "num_nodes": (_bad_num_nodes, r"tree 1 records num_nodes=\d+ but its arrays hold"),
    "short array": (_short_array, r"tree 3's sum_hessian has shape"),
    "num_feature": (_few_features, r"tree 0 records num_feature=10, more than the model's 2"),
    "num_feature everywhere": (
        _few_features_everywhere,
        r"split uses feature \d+ but num_feature is 2",
    ),
    "huge num_feature": (_huge_num_feature, r"1,000,000,000,000 input features.*16,777,216"),
    "tree ids": (_swap_trees, r"tree at position 0 has id 1"),
    "classes and targets": (_classes_and_targets, r"num_class=3, num_target=2"),
    "num_class": (_more_classes, r"rounds of other than 3 trees"),
    "num_parallel_tree": (_parallel_trees, r"rounds of other than 4 trees"),
    "feature_names": (_feature_names, r"2 feature_names for 10 features"),
}


@pytest.mark.parametrize("case", list(XGB_BREAKS))
def test_inconsistent_xgboost_files_are_refused(tmp_path, case):
    edit, message = XGB_BREAKS[case]
    doc = _xgb_doc()
    path = tmp_path / "model.json"
    path.write_text(json.dumps(doc))
    load_model(str(path))  # the intact document loads
    edit(doc)
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"model\.json'?: .*" + message):
        load_model(str(path))


def test_truncated_xgboost_ubj_is_refused(tmp_path):
    X, y = load_diabetes(return_X_y=True)
    raw = bytes(xgb.train({"max_depth": 3}, xgb.DMatrix(X, y), 4).save_raw("ubj"))
    (tmp_path / "cut.ubj").write_bytes(raw[: len(raw) // 2])
    with pytest.raises(ValueError, match=r"cut\.ubj.*UBJSON.*truncated"):
        load_model(str(tmp_path / "cut.ubj"))


@pytest.mark.parametrize("kind", ["multiclass_forest", "multi_target", "sliced"])
def test_xgboost_round_structures_pass_the_checks(kind):
    """Rounds of num_parallel_tree x groups trees, multi-target trees, sliced boosters."""
    if kind == "multiclass_forest":
        X, y = load_iris(return_X_y=True)
        params = {"objective": "multi:softprob", "num_class": 3, "num_parallel_tree": 2,
                  "subsample": 0.8, "max_depth": 3}  # fmt: skip
        booster = xgb.train(params, xgb.DMatrix(X, y), 4)
    else:
        X, y = load_diabetes(return_X_y=True)
        if kind == "multi_target":
            y = np.c_[y, -y, X[:, 0]]
        booster = xgb.train({"max_depth": 3, "tree_method": "hist"}, xgb.DMatrix(X, y), 6)
        if kind == "sliced":
            booster = booster[1:5]
    ens = load_model(booster)
    want = booster.predict(xgb.DMatrix(X), output_margin=True).reshape(len(X), -1)
    np.testing.assert_allclose(margin(ens, X), want, rtol=1e-5, atol=1e-4)


def test_xgboost_pruned_nodes_are_dropped_and_counted(tmp_path):
    """``tree_method='exact'`` pruned by ``gamma`` keeps deleted nodes, unreachable, in place."""
    X, y = load_diabetes(return_X_y=True)
    params = {"tree_method": "exact", "max_depth": 6, "gamma": 3000.0, "nthread": 1}
    booster = xgb.train(params, xgb.DMatrix(X, y), 8)
    doc = json.loads(booster.save_raw("json"))
    deleted = [int(t["tree_param"]["num_deleted"]) for t in _model(doc)["trees"]]
    assert sum(deleted) > 0  # the case this test is about
    ens = load_model(booster)
    nodes = sum(int(t["tree_param"]["num_nodes"]) for t in _model(doc)["trees"])
    assert ens.num_nodes == nodes - sum(deleted)
    want = booster.predict(xgb.DMatrix(X), output_margin=True)
    np.testing.assert_allclose(margin(ens, X)[:, 0], want, rtol=1e-6, atol=1e-3)
    t = int(np.argmax(deleted))
    _model(doc)["trees"][t]["tree_param"]["num_deleted"] = "0"
    (tmp_path / "pruned.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=rf"tree {t} has {deleted[t]} nodes no path reaches"):
        load_model(str(tmp_path / "pruned.json"))


# --- counts of LightGBM texts --------------------------------------------------------------------


def _lgb_text(**params) -> str:
    X, y = load_digits(return_X_y=True)
    params = {"objective": "multiclass", "num_class": 10, "num_leaves": 5, "verbose": -1,
              **params}  # fmt: skip
    return lgb.train(params, lgb.Dataset(X, y), 2).model_to_string()


def _cut_at_tree(text):  # the file ends where tree 7 would begin
    return text[: text.index("\nTree=7\n") + 1]


def _cut_and_close(text):  # ... and someone appended the end marker
    return _cut_at_tree(text) + "end of trees\n"


def _remove_tree(text):  # tree 4's block removed, tree_sizes kept
    head, blocks, tail = _lgb_split(text)
    return _lgb_join(head, blocks[:4] + blocks[5:], tail, sizes=False)


def _remove_tree_and_sizes(text):  # ... and tree_sizes updated: the numbering gives it away
    head, blocks, tail = _lgb_split(text)
    return _lgb_join(head, blocks[:4] + blocks[5:], tail)


def _remove_last_trees_renumbered(text):  # whole trees gone, consistently: not whole iterations
    head, blocks, tail = _lgb_split(text)
    return _lgb_join(head, blocks[:-3], tail)


def _edit_tree(text):  # a tree edited, tree_sizes not updated
    head, blocks, tail = _lgb_split(text)
    blocks[3] = blocks[3].replace("shrinkage=", "shrinkage=0")
    return _lgb_join(head, blocks, tail, sizes=False)


def _num_leaves(text):
    head, blocks, tail = _lgb_split(text)
    blocks[2] = re.sub(r"(?m)^num_leaves=\d+", "num_leaves=3", blocks[2])
    return _lgb_join(head, blocks, tail)


def _leaf_value_short(text):
    head, blocks, tail = _lgb_split(text)
    blocks[5] = re.sub(r"(?m)^(leaf_value=.*) \S+$", r"\1", blocks[5])
    return _lgb_join(head, blocks, tail)


def _max_feature_idx(text):
    return re.sub(r"(?m)^max_feature_idx=\d+", "max_feature_idx=9", text)


def _feature_names(text):
    return re.sub(r"(?m)^(feature_names=.*) \S+$", r"\1", text)


def _num_class(text):
    return re.sub(r"(?m)^num_class=\d+", "num_class=3", text)


def _not_a_number(text):
    head, blocks, tail = _lgb_split(text)
    blocks[1] = re.sub(r"(?m)^(threshold=\S+)", r"\1x", blocks[1])
    return _lgb_join(head, blocks, tail)


LGB_BREAKS = {
    "cut at a tree boundary": (_cut_at_tree, r"no 'end of trees'.*cut short \(tree_sizes lists 20"),
    "cut and closed": (_cut_and_close, r"tree_sizes lists 20 trees but the text holds 7"),
    "tree removed": (_remove_tree, r"tree_sizes lists 20 trees but the text holds 19"),
    "tree removed, sizes fixed": (_remove_tree_and_sizes, r"starts 'Tree=5', not 'Tree=4'"),
    "iterations": (_remove_last_trees_renumbered, r"17 trees do not make whole iterations"),
    "tree edited": (_edit_tree, r"tree_sizes add up to .* bytes but the trees take"),
    "num_leaves": (_num_leaves, r"tree 2 has \d+ \w+ values, its counts say 2"),
    "leaf_value": (_leaf_value_short, r"tree 5 has 4 leaf_value values, its counts say 5"),
    "max_feature_idx": (_max_feature_idx, r"splits on feature \d+ but max_feature_idx is 9"),
    "feature_names": (_feature_names, r"63 feature_names for 64 features"),
    "num_class": (_num_class, r"num_class=3, num_tree_per_iteration=10"),
    "not a number": (_not_a_number, r"tree 1's threshold holds values that are no float64"),
}


@pytest.mark.parametrize("case", list(LGB_BREAKS))
def test_inconsistent_lightgbm_files_are_refused(tmp_path, case):
    edit, message = LGB_BREAKS[case]
    text = _lgb_text()
    path = tmp_path / "model.txt"
    path.write_text(text)
    assert load_model(str(path)).num_trees == 20  # the intact file loads
    path.write_text(edit(text))
    with pytest.raises(ValueError, match=r"model\.txt'?: .*" + message):
        load_model(str(path))


def test_lightgbm_text_without_tree_sizes_and_with_crlf_loads(tmp_path):
    text = _lgb_text()
    ens = load_lightgbm_string(text)
    plain = re.sub(r"(?m)^tree_sizes=.*\n", "", text)
    crlf = text.replace("\n", "\r\n")
    for variant in (plain, crlf):
        other = load_lightgbm_string(variant)
        np.testing.assert_array_equal(other.value, ens.value)
        np.testing.assert_array_equal(other.threshold64, ens.threshold64)
    with pytest.raises(ValueError, match="no 'end of trees'"):
        load_lightgbm_string(_cut_at_tree(plain))


# --- counts of CatBoost JSON -------------------------------------------------------------------


def _catboost_doc(tmp_path, **params) -> dict:
    cb = pytest.importorskip("catboost")
    X, y = load_iris(return_X_y=True)
    model = cb.CatBoostClassifier(iterations=4, depth=3, verbose=0, thread_count=1, **params)
    model.fit(X, y).save_model(str(tmp_path / "cb.json"), format="json")
    return json.loads((tmp_path / "cb.json").read_text())


def _cb_leaf_values(doc):
    doc["oblivious_trees"][1]["leaf_values"].pop()


def _cb_leaf_weights(doc):
    doc["oblivious_trees"][2]["leaf_weights"].append(1.0)


def _cb_feature(doc):
    doc["oblivious_trees"][0]["splits"][0]["float_feature_index"] = 7


def _cb_bias(doc):
    doc["scale_and_bias"][1] = [0.0, 0.0]


CB_BREAKS = {
    "leaf_values": (_cb_leaf_values, r"tree 1 has 3 splits, so 8 leaves of 3 values, but 23"),
    "leaf_weights": (_cb_leaf_weights, r"tree 2 .* 9 leaf_weights"),
    "feature": (_cb_feature, r"float feature 7, which features_info does not list"),
    "bias": (_cb_bias, r"tree 0 has 3 splits, so 8 leaves of 2 values, but 24"),
}


@pytest.mark.parametrize("case", list(CB_BREAKS))
def test_inconsistent_catboost_files_are_refused(tmp_path, case):
    edit, message = CB_BREAKS[case]
    doc = _catboost_doc(tmp_path)
    path = tmp_path / "model.json"
    path.write_text(json.dumps(doc))
    assert load_model(str(path)).num_groups == 3
    edit(doc)
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"model\.json'?: .*" + message):
        load_model(str(path))


def test_catboost_json_file_loads_through_load_model(tmp_path):
    cb = pytest.importorskip("catboost")
    X, y = load_diabetes(return_X_y=True)
    for policy in ("SymmetricTree", "Lossguide"):
        model = cb.CatBoostRegressor(iterations=5, depth=4, verbose=0, thread_count=1,
                                     grow_policy=policy).fit(X, y)  # fmt: skip
        model.save_model(str(tmp_path / "m.json"), format="json")
        ens = load_model(str(tmp_path / "m.json"))
        want = model.predict(X.astype(np.float32), prediction_type="RawFormulaVal")
        np.testing.assert_allclose(margin(ens, X)[:, 0], want, rtol=1e-6, atol=1e-6)
    model.save_model(str(tmp_path / "m.cbm"))
    with pytest.raises(UnsupportedModelError, match=r"m\.cbm.*binary.*format='json'"):
        load_model(str(tmp_path / "m.cbm"))


# --- files distshap does not read ---------------------------------------------------------------


def test_pickle_named_model_is_refused_without_unpickling(tmp_path):
    X, y = load_diabetes(return_X_y=True)
    booster = xgb.train({"max_depth": 2}, xgb.DMatrix(X, y), 2)
    path = tmp_path / "xgb.model"
    path.write_bytes(pickle.dumps(booster))
    with pytest.raises(UnsupportedModelError) as info:
        load_model(str(path))
    message = str(info.value)
    assert "xgb.model" in message and "pickle" in message and "never unpickles" in message
    assert "save_model('model.json')" in message and "\n" not in message


def test_unreadable_files_get_one_line_naming_the_file(tmp_path):
    X, y = load_diabetes(return_X_y=True)
    text = lgb.train({"verbose": -1, "num_leaves": 4}, lgb.Dataset(X, y), 2).model_to_string()
    cases = {
        "m.txt.gz": (gzip.compress(text.encode()), UnsupportedModelError, "gzip-compressed"),
        "empty.json": (b"  \n", UnsupportedModelError, "empty"),
        "deep.json": (b"[" * 100_000 + b"]" * 100_000, UnsupportedModelError, "no model"),
        "deeper.json": (b'{"a":' * 100_000 + b"1" + b"}" * 100_000, ValueError, "deeper"),
        "deep.ubj": (b"{i\x01a" * (MAX_DEPTH + 5), ValueError, f"deeper than {MAX_DEPTH}"),
        "other.json": (b'{"weights": [1, 2]}', UnsupportedModelError, "'weights'"),
        "dump.json": (
            json.dumps(lgb.Booster(model_str=text).dump_model()).encode(),
            UnsupportedModelError,
            "dump_model",
        ),  # fmt: skip
        "bytes.bin": (bytes(range(256)), UnsupportedModelError, "no model format"),
    }
    for name, (data, error, fragment) in cases.items():
        (tmp_path / name).write_bytes(data)
        with pytest.raises(error) as info:
            load_model(str(tmp_path / name))
        message = str(info.value)
        assert name in message and fragment in message and "\n" not in message, message
        assert not isinstance(info.value, RecursionError)
    with pytest.raises(FileNotFoundError, match="absent.json"):
        load_model(str(tmp_path / "absent.json"))
    with pytest.raises(IsADirectoryError, match="is a directory"):
        load_model_file(tmp_path)


def test_ubjson_decoder_bounds():
    with pytest.raises(UBJSONError, match="nested deeper"):
        decode_ubjson(b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1))
    assert decode_ubjson(b"[" * MAX_DEPTH + b"]" * MAX_DEPTH) is not None
    with pytest.raises(UBJSONError, match="implausible"):
        decode_ubjson(b"[$Z#L" + (2**40).to_bytes(8, "big"))
    with pytest.raises(UBJSONError, match="exceeds the bytes left"):
        decode_ubjson(b"[#L" + (2**40).to_bytes(8, "big") + b"Z")


def _mutations(doc, seed: int, n: int):
    """``n`` copies of a JSON document, each with one or two values replaced or removed."""
    import copy
    import random

    values = [None, -1, 0, 10**12, "x", "", [], {}, [[1]], 1.5, math.nan, math.inf, True, [None]]

    def paths(obj, pre=()):
        yield pre
        if isinstance(obj, dict):
            items = list(obj.items())
        elif isinstance(obj, list):
            items = list(enumerate(obj[:3]))
        else:
            items = []
        for key, value in items:
            yield from paths(value, (*pre, key))

    rng = random.Random(seed)
    all_paths = list(paths(doc))[1:]
    for _ in range(n):
        out = copy.deepcopy(doc)
        for _ in range(rng.randint(1, 2)):
            path = rng.choice(all_paths)
            parent = out
            try:
                for key in path[:-1]:
                    parent = parent[key]
                if isinstance(parent, dict) and rng.random() < 0.25:
                    del parent[path[-1]]
                else:
                    parent[path[-1]] = rng.choice(values)
            except (KeyError, IndexError, TypeError):
                pass  # an earlier edit removed the path
        yield out


def test_malformed_documents_raise_value_errors_only(tmp_path):
    """Values of the wrong type or size anywhere: a ValueError, never another exception."""
    from distshap.models.catboost import load_catboost_json
    from distshap.models.xgboost import ensemble_from_xgboost_document

    X, y = load_iris(return_X_y=True)
    params = {"max_depth": 2, "objective": "multi:softprob", "num_class": 3}
    xgb_doc = json.loads(xgb.train(params, xgb.DMatrix(X, y), 2).save_raw("json"))
    docs = [(xgb_doc, lambda d: ensemble_from_xgboost_document(d).validate())]
    docs.append((_catboost_doc(tmp_path, grow_policy="Lossguide"), load_catboost_json))
    for doc, load in docs:
        refused = 0
        for bad in _mutations(doc, seed=0, n=300):
            try:
                load(bad)
            except ValueError:
                refused += 1
        assert refused > 100  # the mutations do break documents


def test_huge_num_feature_lightgbm_is_refused():
    text = _lgb_text()
    bad = re.sub(r"(?m)^max_feature_idx=\d+", f"max_feature_idx={MAX_FEATURES}", text)
    with pytest.raises(ValueError, match=r"16,777,217 input features; distshap supports"):
        load_lightgbm_string(bad)


# --- LightGBM feature names ---------------------------------------------------------------------

NAMES = ["a b", "  two  spaces ", "tab\there", "nbsp\u00a0x", "p=q", "ünï cødé", 7, "x\x00tail",
         "plain"]  # fmt: skip


def test_lightgbm_feature_name_is_what_lightgbm_stores():
    rng = np.random.default_rng(4)
    frame = pd.DataFrame(rng.normal(size=(200, len(NAMES))), columns=NAMES)
    booster = lgb.train({"verbose": -1, "num_leaves": 4}, lgb.Dataset(frame, frame.iloc[:, 0]), 2)
    stored = booster.feature_name()
    assert stored == [lightgbm_feature_name(c) for c in NAMES]
    assert stored[:3] == ["a_b", "__two__spaces_", "tab\there"]
    # the loader reads the names back as LightGBM does (split on spaces only)
    assert list(load_model(booster).feature_names) == stored
    assert lgb.Booster(model_str=booster.model_to_string()).feature_name() == stored
