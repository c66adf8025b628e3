"""XGBoost vector-leaf trees (``multi_strategy="multi_output_tree"``, ``tree_method="hist"``).

Every leaf of such a tree holds one value per output group (target or class); the loader makes
each tree one scalar-leaf tree per group. Checked against:

* oracles built here, node by node, from the model's own JSON document: one scalar-leaf
  Ensemble per output group, independent of the loader, explained by the brute-force
  Shapley values, interactions and interventional values of ``tests/naive.py``; and XGBoost's
  own ``predict(output_margin=True)`` (every XGBoost that trains these models: runs in CI);
* XGBoost >= 3.3's ``pred_contribs`` / ``pred_interactions`` (skipped, saying so, on older
  XGBoost, which cannot explain these models);
* the other public outputs: top pairs, Dask (bit-identical to in-process), saved files,
  boosting rounds, and the threaded read of large models (bit-identical to the NumPy one).
"""

from __future__ import annotations

import json

import dask.array as da
import numpy as np
import pandas as pd
import pytest

import naive
from conftest import to_host

xgb = pytest.importorskip("xgboost")

from distshap import TreeExplainer, config_context  # noqa: E402
from distshap.kernels.margin import predict_margin  # noqa: E402
from distshap.models import load_model  # noqa: E402
from distshap.models._ubjson import decode_ubjson_views  # noqa: E402
from distshap.models.ensemble import Ensemble  # noqa: E402
from distshap.models.xgboost import (  # noqa: E402
    ensemble_from_ubjson,
    ensemble_from_xgboost_document,
)

from xgb_models import (  # noqa: E402
    VECTOR_LEAF_KINDS,
    VECTOR_LEAF_KINDS_33,
    VECTOR_LEAF_SHAP,
    as_array,
    dmatrix,
)

KINDS = sorted(VECTOR_LEAF_KINDS) + sorted(VECTOR_LEAF_KINDS_33)
NEEDS_33 = "XGBoost < 3.3 explains no vector-leaf trees (nor trains DART or categorical ones)"


def _model(kind: str):
    if kind in VECTOR_LEAF_KINDS_33:
        if not VECTOR_LEAF_SHAP:
            pytest.skip(NEEDS_33)
        return VECTOR_LEAF_KINDS_33[kind]()
    return VECTOR_LEAF_KINDS[kind]()


def _head(X, n: int):
    return X.iloc[:n] if isinstance(X, pd.DataFrame) else X[:n]


def _close(got, ref, tol: float = 2e-5) -> None:
    got, ref = to_host(got).astype(np.float64), np.asarray(ref, dtype=np.float64)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    np.testing.assert_allclose(got, ref, rtol=0, atol=tol * max(1.0, np.abs(ref).max()))


def _tree_nodes(tree: dict, k: int, g: int, weight: float, base: int) -> dict:
    """One vector-leaf tree of the document as scalar-leaf node lists for output ``g``."""
    left, right = tree["left_children"], tree["right_children"]
    cats = dict(
        zip(
            tree.get("categories_nodes", []),
            zip(tree.get("categories_segments", []), tree.get("categories_sizes", []), strict=True),
            strict=True,
        )
    )
    out: dict = {key: [] for key in ("left", "right", "feature", "threshold", "dl", "cat",
                                       "cats", "value", "cover")}  # fmt: skip
    for i in range(len(left)):
        leaf = left[i] == -1
        split_cat = not leaf and bool(tree["split_type"] and tree["split_type"][i] == 1)
        out["left"].append(-1 if leaf else base + left[i])
        out["right"].append(-1 if leaf else base + right[i])
        out["feature"].append(-1 if leaf else tree["split_indices"][i])
        out["threshold"].append(0.0 if leaf or split_cat else tree["split_conditions"][i])
        out["dl"].append(not leaf and bool(tree["default_left"][i]))
        out["cat"].append(split_cat)
        seg, size = cats.get(i, (0, 0))
        out["cats"].append(tree["categories"][seg : seg + size] if split_cat else [])
        w = float(np.float32(tree["leaf_weights"][right[i] * k + g])) if leaf else 0.0
        out["value"].append(w * weight)
        out["cover"].append(float(np.float32(tree["sum_hessian"][i])))
    return out


def _oracle(booster) -> list[Ensemble]:
    """One scalar-leaf Ensemble per output group, read from the model's JSON node by node."""
    learner = json.loads(booster.save_raw("json"))["learner"]
    model = learner["gradient_booster"]["model"]
    param = learner["learner_model_param"]
    k = max(int(param["num_class"]), int(param["num_target"]))
    base = np.atleast_1d(np.asarray(json.loads(param["base_score"]), dtype=np.float32))
    base = np.broadcast_to(base.astype(np.float64), (k,))
    trees = model["trees"]
    weights = np.asarray(model.get("weight_drop", [1.0] * len(trees)), dtype=np.float32)
    out = []
    for g in range(k):
        lists: dict = {}
        offsets = [0]
        for t, tree in enumerate(trees):
            part = _tree_nodes(tree, k, g, float(weights[t]), offsets[-1])
            for key, seq in part.items():
                lists.setdefault(key, []).extend(seq)
            offsets.append(offsets[-1] + len(tree["left_children"]))
        sizes = [len(c) for c in lists["cats"]]
        out.append(
            Ensemble(
                left=np.array(lists["left"], np.int32),
                right=np.array(lists["right"], np.int32),
                feature=np.array(lists["feature"], np.int32),
                threshold=np.array(lists["threshold"], np.float32),
                default_left=np.array(lists["dl"], bool),
                is_categorical=np.array(lists["cat"], bool),
                cat_offsets=np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
                cat_values=np.array([c for cs in lists["cats"] for c in cs], np.int32),
                value=np.array(lists["value"], np.float64),
                cover=np.array(lists["cover"], np.float64),
                tree_offsets=np.array(offsets, np.int64),
                tree_group=np.zeros(len(trees), np.int32),
                num_features=int(param["num_feature"]),
                num_groups=1,
                base_score=base[g : g + 1].copy(),
            ).validate()
        )
    return out


@pytest.mark.parametrize("kind", KINDS)
def test_loader_margin_and_expected_value_equal_the_oracle(kind):
    booster, X = _model(kind)
    ens = load_model(booster)
    oracles = _oracle(booster)
    k = len(oracles)
    rounds = len(json.loads(booster.save_raw("json"))["learner"]["gradient_booster"]["model"]
                 ["iteration_indptr"]) - 1  # fmt: skip
    assert ens.num_groups == k and ens.num_trees == k * oracles[0].num_trees
    assert ens.tree_group.tolist() == list(range(k)) * oracles[0].num_trees
    indptr = ens.extra["iteration_indptr"]
    assert indptr[-1] == ens.num_trees and indptr.size == rounds + 1
    assert ens.num_features == X.shape[1]
    rows = as_array(X)
    margin = booster.predict(dmatrix(X), output_margin=True)
    ours = predict_margin(TreeExplainer(booster, backend="cpu").packed, rows)
    _close(ours, margin)
    for g, oracle in enumerate(oracles):
        _close(naive.predict_margin(oracle, rows[:20])[:, 0], margin[:20, g])
    explainer = TreeExplainer(booster, backend="cpu", layout="xgboost")
    expected = [naive.expected_value(o)[0] for o in oracles]
    np.testing.assert_allclose(explainer.expected_value, expected, rtol=0, atol=1e-9)


@pytest.mark.parametrize("kind", KINDS)
def test_shap_and_interaction_values_equal_brute_force(kind, backend):
    booster, X = _model(kind)
    rows, frame = as_array(X)[:5], _head(X, 5)
    explainer = TreeExplainer(booster, backend=backend, layout="xgboost")
    shap = explainer.shap_values(frame)
    inter = explainer.shap_interaction_values(_head(frame, 3))
    for g, oracle in enumerate(_oracle(booster)):
        _close(shap[:, g], naive.brute_force_shap_rows(oracle, rows)[:, 0])
        _close(inter[:, g], naive.brute_force_interactions_rows(oracle, rows[:3])[:, 0])


@pytest.mark.parametrize("kind", ["vector_regression", "vector_multiclass"])
def test_interventional_values_equal_the_oracle(kind, backend):
    booster, X = _model(kind)
    rows = as_array(X)
    background, explain = rows[:12], rows[40:46]
    explainer = TreeExplainer(booster, data=background, feature_perturbation="interventional",
                              backend=backend, layout="xgboost")  # fmt: skip
    got = explainer.shap_values(explain)
    for g, oracle in enumerate(_oracle(booster)):
        _close(got[:, g], naive.interventional_shap_rows(oracle, explain, background)[:, 0])


@pytest.mark.skipif(not VECTOR_LEAF_SHAP, reason=NEEDS_33)
@pytest.mark.parametrize("kind", KINDS)
def test_values_equal_xgboost_pred_contribs_and_interactions(kind, backend):
    booster, X = _model(kind)
    explainer = TreeExplainer(booster, backend=backend, layout="xgboost")
    got = explainer.shap_values(X)
    _close(got, booster.predict(dmatrix(X), pred_contribs=True), 1e-5)
    few = _head(X, 40)
    inter = explainer.shap_interaction_values(few)
    _close(inter, booster.predict(dmatrix(few), pred_interactions=True), 1e-5)


def test_top_pairs_are_the_sorted_interaction_matrices():
    booster, X = VECTOR_LEAF_KINDS["vector_regression"]()
    explainer = TreeExplainer(booster, backend="cpu", layout="xgboost")
    pairs, values = explainer.top_interactions(X[:20], k=3)
    full = explainer.shap_interaction_values(X[:20])
    G, F = full.shape[1], full.shape[2] - 1
    assert pairs.shape == (20, G, 3, 2) and values.shape == (20, G, 3)
    i, j = np.triu_indices(F, 1)
    for r in range(20):
        for g in range(G):
            upper = full[r, g][i, j]
            order = np.lexsort((j, i, -np.abs(upper)))[:3]
            np.testing.assert_array_equal(pairs[r, g], np.stack([i[order], j[order]], axis=1))
            np.testing.assert_array_equal(values[r, g], upper[order])


def test_dask_results_equal_in_memory(scheduler):
    from distributed import Client

    booster, X = VECTOR_LEAF_KINDS["vector_multiclass"]()
    with Client(scheduler) as client:
        explainer = TreeExplainer(booster, backend="cpu", layout="xgboost", client=client)
        lazy = da.from_array(X[:60], chunks=(23, X.shape[1]))
        for method in (explainer.shap_values, explainer.shap_interaction_values):
            expected = method(X[:60])
            got = method(lazy).compute()
            assert np.array_equal(got, expected), method.__name__


def test_saved_files_rounds_and_threaded_read_keep_the_bits(tmp_path, monkeypatch):
    booster, X = VECTOR_LEAF_KINDS["vector_forest"]()
    explainer = TreeExplainer(booster, backend="cpu", layout="xgboost")
    expected = explainer.shap_values(X)
    for suffix in ("json", "ubj"):
        path = tmp_path / f"model.{suffix}"
        booster.save_model(path)
        got = TreeExplainer(str(path), backend="cpu", layout="xgboost").shap_values(X)
        assert np.array_equal(got, expected), suffix
    # boosting rounds count vector-leaf trees: 2 parallel trees a round, as XGBoost counts
    first = explainer.shap_values(X[:30], iteration_range=(0, 2))
    sub = xgb.Booster(model_file=str(tmp_path / "model.json"))[0:2]
    _close(first.sum(axis=-1), sub.predict(dmatrix(X[:30]), output_margin=True))
    ens = load_model(booster)
    with config_context(loader_threaded_min_nodes=0):
        threaded = ensemble_from_ubjson(decode_ubjson_views(booster.save_raw("ubj"))).validate()
    for name in ("left", "right", "feature", "threshold", "value", "cover", "tree_offsets",
                 "tree_group", "cat_offsets", "cat_values", "base_score"):  # fmt: skip
        assert getattr(threaded, name).tobytes() == getattr(ens, name).tobytes(), name


def _drop_leaf_weight(doc):
    doc["learner"]["gradient_booster"]["model"]["trees"][1]["leaf_weights"].pop()


def _leaf_row_outside(doc):
    tree = doc["learner"]["gradient_booster"]["model"]["trees"][0]
    leaf = tree["left_children"].index(-1)
    tree["right_children"][leaf] = len(tree["leaf_weights"])


def _scalar_tree_among_vector_ones(doc):
    tree = doc["learner"]["gradient_booster"]["model"]["trees"][2]
    del tree["leaf_weights"]
    tree["tree_param"]["size_leaf_vector"] = "1"


def _wrong_leaf_size(doc):
    doc["learner"]["gradient_booster"]["model"]["trees"][0]["tree_param"]["size_leaf_vector"] = "2"


def _tree_info_group(doc):
    doc["learner"]["gradient_booster"]["model"]["tree_info"][1] = 2


def _short_base_weights(doc):
    doc["learner"]["gradient_booster"]["model"]["trees"][0]["base_weights"].pop()


@pytest.mark.parametrize(
    "edit, message",
    [
        (_drop_leaf_weight, r"tree 1 has \d+ leaf_weights, no multiple of its 3 values"),
        (
            _leaf_row_outside,
            r"a leaf of tree 0 names row \d+ of its leaf_weights, which hold",
        ),
        (_scalar_tree_among_vector_ones, "tree 2 differs from the trees before it"),
        (_wrong_leaf_size, "tree 0 has vector leaves of size_leaf_vector=2 but the model has 3"),
        (_tree_info_group, "tree_info gives some of them an output group other than 0"),
        (_short_base_weights, "tree 0's base_weights has shape"),
    ],
)
def test_edited_documents_are_refused(edit, message):
    booster, _ = VECTOR_LEAF_KINDS["vector_regression"]()
    doc = json.loads(booster.save_raw("json"))
    edit(doc)
    with pytest.raises(ValueError, match=message):
        ensemble_from_xgboost_document(doc)
