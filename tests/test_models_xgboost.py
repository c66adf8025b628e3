"""XGBoost loader: Booster / sklearn / .json / .ubj -> Ensemble, checked against xgboost."""

from __future__ import annotations

import json
import math
import struct
import sys

import numpy as np
import pandas as pd
import pytest
import xgboost as xgb
from hypothesis import given, settings
from hypothesis import strategies as st

from distshap.models import UnsupportedModelError, load_model
from distshap.models._ubjson import UBJSONError, decode_ubjson
from distshap.models.xgboost import (
    ensemble_from_xgboost_document,
    load_xgboost,
    load_xgboost_file,
)

import naive
from xgb_models import MODEL_KINDS, as_array, build_objective, dmatrix

KINDS = sorted(MODEL_KINDS)
ARRAY_FIELDS = (
    "left",
    "right",
    "feature",
    "threshold",
    "default_left",
    "is_categorical",
    "cat_offsets",
    "cat_values",
    "value",
    "cover",
    "tree_offsets",
    "tree_group",
    "base_score",
)


def xgb_margin(booster: xgb.Booster, X, **kwargs) -> np.ndarray:
    out = booster.predict(dmatrix(X), output_margin=True, **kwargs)
    return np.asarray(out, dtype=np.float64).reshape(len(X), -1)


def assert_margin_matches(ens, booster, X, **kwargs) -> None:
    got = naive.predict_margin(ens, as_array(X))
    want = xgb_margin(booster, X, **kwargs)
    assert got.shape == want.shape == (len(X), ens.num_groups)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def assert_same_ensemble(a, b) -> None:
    for name in ARRAY_FIELDS:
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype, name
        np.testing.assert_array_equal(x, y, err_msg=name)
    for name in ("num_features", "num_groups", "feature_names", "feature_types", "model_kind"):
        assert getattr(a, name) == getattr(b, name), name


def model_doc(booster: xgb.Booster) -> dict:
    return json.loads(bytes(booster.save_raw(raw_format="json")))


# ------------------------------------------------------------------------------------------
# Predictions against xgboost
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_margin_matches_xgboost(kind):
    booster, X = MODEL_KINDS[kind]()
    ens = load_model(booster)
    assert ens.model_kind.startswith("xgboost:")
    assert ens.num_trees == len(booster.get_dump())
    assert_margin_matches(ens, booster, X)


@pytest.mark.parametrize("kind", KINDS)
def test_json_and_ubj_files_equal_booster(kind, tmp_path):
    booster, _ = MODEL_KINDS[kind]()
    ref = load_model(booster)
    for suffix in (".json", ".ubj"):
        path = tmp_path / f"model{suffix}"
        booster.save_model(str(path))
        assert_same_ensemble(load_model(str(path)), ref)
        assert_same_ensemble(load_model(path), ref)  # PathLike


def test_file_loader_does_not_import_xgboost(tmp_path, monkeypatch):
    booster, X = MODEL_KINDS["categorical"]()
    ref = load_model(booster)
    for suffix in (".json", ".ubj"):
        path = tmp_path / f"m{suffix}"
        booster.save_model(str(path))
        monkeypatch.setitem(sys.modules, "xgboost", None)  # any `import xgboost` now fails
        ens = load_xgboost_file(path)
        monkeypatch.undo()
        assert_same_ensemble(ens, ref)


def test_multiclass_groups():
    booster, X = MODEL_KINDS["multiclass"]()
    ens = load_model(booster)
    assert ens.num_groups == 3
    np.testing.assert_array_equal(np.bincount(ens.tree_group), [ens.num_trees // 3] * 3)
    np.testing.assert_array_equal(ens.tree_group[:6], [0, 1, 2, 0, 1, 2])


def test_missing_values_use_both_default_directions():
    booster, X = MODEL_KINDS["missing"]()
    ens = load_model(booster)
    internal = ~ens.is_leaf()
    assert np.isnan(as_array(X)).mean() > 0.1
    assert ens.default_left[internal].any() and not ens.default_left[internal].all()
    assert not ens.default_left[ens.is_leaf()].any()


def test_categorical_splits_and_metadata():
    booster, X = MODEL_KINDS["categorical"]()
    ens = load_model(booster)
    assert ens.feature_names == ("a", "c3", "b", "c8")
    assert ens.feature_types == ("q", "c", "q", "c")
    cat_nodes = np.flatnonzero(ens.is_categorical)
    sizes = np.diff(ens.cat_offsets)[cat_nodes]
    assert (sizes == 1).any(), "expected one-hot splits on c3"
    assert (sizes > 1).any(), "expected partition splits on c8"
    assert set(np.unique(ens.feature[cat_nodes])) <= {1, 3}
    assert np.all(np.diff(ens.cat_offsets)[~ens.is_categorical] == 0)
    # the listed categories go right: flipping the convention changes predictions
    assert_margin_matches(ens, booster, X)
    codes = as_array(X)
    row_cats = codes[:, 3]
    assert np.isnan(row_cats).any()
    enc = ens.extra.get("category_values")
    if enc is not None:  # XGBoost >= 3.1 stores its category encoder
        np.testing.assert_array_equal(np.asarray(enc[3], dtype=float), np.arange(8))


def test_categorical_string_categories():
    rng = np.random.default_rng(0)
    X = pd.DataFrame(
        {
            "x": rng.normal(size=200).astype(np.float32),
            "s": pd.Categorical(rng.choice(["lo", "mid", "hi", "top"], 200)),
        }
    )
    y = X["x"].to_numpy() + X["s"].cat.codes.to_numpy() % 2
    params = {"max_cat_to_onehot": 1, "max_depth": 3, "nthread": 1}
    booster = xgb.train(params, dmatrix(X, y), 5)
    ens = load_model(booster)
    got = naive.predict_margin(ens, np.column_stack([X["x"], X["s"].cat.codes]))
    np.testing.assert_allclose(got, xgb_margin(booster, X), rtol=1e-5, atol=1e-5)
    enc = ens.extra.get("category_values")
    if enc is not None:
        assert enc[1] == list(X["s"].cat.categories)


def _dart_parts(doc: dict) -> tuple[np.ndarray, dict]:
    """DART tree weights and gbtree model of a model document, in either saved layout.

    XGBoost < 3.3 saves booster "dart" with ``weight_drop`` beside a nested "gbtree"; 3.3 and
    later save booster "gbtree" with ``weight_drop`` inside its model.
    """
    gb = doc["learner"]["gradient_booster"]
    if gb["name"] == "dart":
        return np.asarray(gb["weight_drop"]), gb["gbtree"]["model"]
    return np.asarray(gb["model"]["weight_drop"]), gb["model"]


def test_dart_weights_are_folded_into_leaves():
    booster, X = MODEL_KINDS["dart"]()
    doc = model_doc(booster)
    weights, model = _dart_parts(doc)
    assert not np.allclose(weights, 1.0), "the DART model should have dropped trees"
    ens = load_model(booster)
    raw = model["trees"][0]
    leaves = np.asarray(raw["left_children"]) == -1
    np.testing.assert_allclose(
        ens.value[: ens.tree_offsets[1]][leaves],
        np.asarray(raw["split_conditions"])[leaves] * weights[0],
        rtol=1e-6,
    )
    assert_margin_matches(ens, booster, X)


def test_dart_in_both_saved_layouts_gives_one_ensemble():
    booster, _ = MODEL_KINDS["dart"]()
    doc = model_doc(booster)
    weights, model = _dart_parts(doc)
    old = json.loads(json.dumps(doc))
    old["learner"]["gradient_booster"] = {
        "name": "dart",
        "gbtree": {
            "name": "gbtree",
            "model": {k: v for k, v in model.items() if k != "weight_drop"},
        },
        "weight_drop": weights.tolist(),
    }
    new = json.loads(json.dumps(doc))
    new["learner"]["gradient_booster"] = {
        "name": "gbtree",
        "model": {**model, "weight_drop": weights.tolist()},
    }
    a = ensemble_from_xgboost_document(old)
    b = ensemble_from_xgboost_document(new)
    np.testing.assert_array_equal(a.value, b.value)
    assert not np.array_equal(a.value, ensemble_from_xgboost_document(_without_weights(new)).value)


def _without_weights(doc: dict) -> dict:
    doc = json.loads(json.dumps(doc))
    doc["learner"]["gradient_booster"]["model"].pop("weight_drop")
    return doc


def test_random_forest_trees_per_round():
    booster, X = MODEL_KINDS["random_forest"]()
    ens = load_model(booster)
    assert ens.extra["num_parallel_tree"] == 3
    assert ens.num_trees == 3 * booster.num_boosted_rounds()
    assert_margin_matches(ens, booster, X)


OBJECTIVES = [
    ("reg:squarederror", {}),
    ("reg:squaredlogerror", {}),
    ("reg:pseudohubererror", {}),
    ("reg:absoluteerror", {}),
    ("reg:quantileerror", {"quantile_alpha": [0.2, 0.8]}),
    ("binary:logistic", {}),
    ("binary:logistic", {"base_score": 0.3}),
    ("reg:logistic", {"base_score": 0.7}),
    ("binary:logitraw", {"base_score": 0.3}),
    ("binary:hinge", {}),
    ("multi:softmax", {}),
    ("multi:softprob", {"base_score": 0.3}),
    ("count:poisson", {}),
    ("count:poisson", {"base_score": 2.0}),
    ("reg:gamma", {}),
    ("reg:tweedie", {"base_score": 3.0}),
    ("survival:cox", {"base_score": 2.0}),
    ("survival:aft", {}),
    ("rank:pairwise", {"base_score": 0.3}),
    ("rank:ndcg", {}),
]


@pytest.mark.parametrize(
    "objective,params", OBJECTIVES, ids=[f"{o}-{sorted(p)}" for o, p in OBJECTIVES]
)
def test_base_score_in_margin_space(objective, params):
    booster, X = build_objective(objective, **params)
    ens = load_model(booster)
    assert ens.model_kind == f"xgboost:{objective}"
    assert_margin_matches(ens, booster, X)


# ------------------------------------------------------------------------------------------
# base_score storage formats (XGBoost 1.x-2.x scalar, 3.x bracketed strings, arrays)
# ------------------------------------------------------------------------------------------


def _with_base_score(doc: dict, raw) -> dict:
    doc["learner"]["learner_model_param"]["base_score"] = raw
    return doc


@pytest.mark.parametrize("form", ["plain", "bracket_str", "number_list", "string_list", "num"])
def test_base_score_storage_formats(form):
    booster, X = build_objective("multi:softprob", base_score=0.3)
    doc = model_doc(booster)
    stored = doc["learner"]["learner_model_param"]["base_score"]
    values = [float(v) for v in stored.strip("[]").split(",")]
    assert len(values) == 3
    raw = {
        "plain": "0.3",  # XGBoost < 3.1: one number, broadcast over groups
        "bracket_str": "[" + ",".join(f"{v:E}" for v in values) + "]",
        "number_list": values,
        "string_list": [repr(v) for v in values],
        "num": 0.3,
    }[form]
    ens = ensemble_from_xgboost_document(_with_base_score(doc, raw)).validate()
    np.testing.assert_allclose(ens.base_score, [0.3] * 3, rtol=1e-6)
    assert_margin_matches(ens, booster, X)


def test_base_score_logistic_scalar_string():
    booster, X = build_objective("binary:logistic", base_score=0.3)
    doc = _with_base_score(model_doc(booster), "3E-1")
    ens = ensemble_from_xgboost_document(doc)
    np.testing.assert_allclose(ens.base_score, [math.log(0.3 / 0.7)], rtol=1e-6)
    assert_margin_matches(ens, booster, X)


def test_base_score_bad_values():
    booster, _ = build_objective("multi:softprob")
    with pytest.raises(UnsupportedModelError, match="3 output groups"):
        ensemble_from_xgboost_document(_with_base_score(model_doc(booster), "[0.1,0.2]"))
    with pytest.raises(UnsupportedModelError, match="base_score"):
        ensemble_from_xgboost_document(_with_base_score(model_doc(booster), "abc"))
    booster, _ = build_objective("binary:logistic")
    for bad in ("[1.5E0]", "[-1E-3]", "[NaN]"):  # XGBoost refuses them too
        with pytest.raises(UnsupportedModelError, match="no probability"):
            ensemble_from_xgboost_document(_with_base_score(model_doc(booster), bad))
    booster, _ = build_objective("count:poisson")
    with pytest.raises(UnsupportedModelError, match="finite margin"):
        ensemble_from_xgboost_document(_with_base_score(model_doc(booster), "[0E0]"))


def test_unknown_objective_warns():
    booster, X = build_objective("reg:squarederror")
    doc = model_doc(booster)
    doc["learner"]["objective"]["name"] = "reg:brandnew"
    with pytest.warns(UserWarning, match="reg:brandnew"):
        ens = ensemble_from_xgboost_document(doc)
    assert_margin_matches(ens, booster, X)


# ------------------------------------------------------------------------------------------
# scikit-learn estimators, iteration ranges
# ------------------------------------------------------------------------------------------


def test_sklearn_estimators():
    booster, X = MODEL_KINDS["multiclass"]()
    y = booster.predict(dmatrix(X)).argmax(axis=1)
    kw = {"n_estimators": 6, "max_depth": 3, "n_jobs": 1, "random_state": 0}
    for est in (
        xgb.XGBRegressor(**kw).fit(X, X[:, 0] * 2 + X[:, 1]),
        xgb.XGBClassifier(**kw).fit(X, y == 1),
        xgb.XGBClassifier(**kw).fit(X, y),
        xgb.XGBRFRegressor(**kw).fit(X, X[:, 0]),
    ):
        ens = load_model(est)
        assert_same_ensemble(ens, load_xgboost(est.get_booster()))
        assert_margin_matches(ens, est.get_booster(), X)
        want = np.asarray(est.predict(X, output_margin=True)).reshape(len(X), -1)
        got = naive.predict_margin(ens, X)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_unfitted_estimator_is_a_value_error():
    with pytest.raises(ValueError, match="fit it first"):
        load_xgboost(xgb.XGBRegressor())


@pytest.mark.parametrize("kind", ["multiclass", "random_forest"])
def test_iteration_range(kind):
    booster, X = MODEL_KINDS[kind]()
    rounds = booster.num_boosted_rounds()
    full = load_xgboost(booster)
    part = load_xgboost(booster, iteration_range=(1, rounds - 1))
    assert part.num_trees == full.num_trees * (rounds - 2) // rounds
    assert_margin_matches(part, booster, X, iteration_range=(1, rounds - 1))
    assert_same_ensemble(load_xgboost(booster, iteration_range=(0, rounds)), full)
    with pytest.raises(ValueError, match="iteration_range"):
        load_xgboost(booster, iteration_range=(0, rounds + 1))


# ------------------------------------------------------------------------------------------
# Refusals
# ------------------------------------------------------------------------------------------


def test_gblinear_is_refused(tmp_path):
    _, X = MODEL_KINDS["regression"]()
    booster = xgb.train({"booster": "gblinear", "nthread": 1}, dmatrix(X, X[:, 0]), 3)
    with pytest.raises(UnsupportedModelError, match="gblinear"):
        load_model(booster)
    path = tmp_path / "linear.ubj"
    booster.save_model(str(path))
    with pytest.raises(UnsupportedModelError, match="gblinear"):
        load_model(str(path))


def test_multi_output_tree_is_one_tree_per_output():
    _, X = MODEL_KINDS["regression"]()
    Y = np.column_stack([X[:, 0], X[:, 1]])
    params = {"multi_strategy": "multi_output_tree", "tree_method": "hist", "nthread": 1}
    booster = xgb.train(params, dmatrix(X, Y), 2)
    ens = load_model(booster)
    assert ens.num_groups == 2 and ens.num_trees == 4
    assert ens.tree_group.tolist() == [0, 1, 0, 1]
    assert_margin_matches(ens, booster, X)


def test_multi_target_one_tree_per_output_is_supported():
    _, X = MODEL_KINDS["regression"]()
    Y = np.column_stack([X[:, 0], X[:, 1] - X[:, 2]])
    params = {"tree_method": "hist", "nthread": 1, "max_depth": 3}
    booster = xgb.train(params, dmatrix(X, Y), 3)
    ens = load_model(booster)
    assert ens.num_groups == 2
    assert_margin_matches(ens, booster, X)


def test_unknown_objects_are_type_errors():
    with pytest.raises(TypeError):
        load_model(object())
    with pytest.raises(TypeError, match="xgboost.Booster"):
        load_xgboost([1, 2, 3])


def test_unknown_booster_and_broken_documents():
    booster, _ = MODEL_KINDS["regression"]()
    doc = model_doc(booster)
    doc["learner"]["gradient_booster"]["name"] = "gbmystery"
    with pytest.raises(UnsupportedModelError, match="gbmystery"):
        ensemble_from_xgboost_document(doc)
    with pytest.raises(UnsupportedModelError, match="learner"):
        ensemble_from_xgboost_document({"version": [3, 2, 0]})
    doc = model_doc(booster)
    doc["learner"]["gradient_booster"]["model"]["trees"][0]["right_children"].pop()
    with pytest.raises(ValueError, match="right_children"):
        ensemble_from_xgboost_document(doc)
    doc = model_doc(booster)
    doc["learner"]["gradient_booster"]["model"]["trees"][0]["left_children"][0] = 10**6
    with pytest.raises(ValueError, match="child index"):
        ensemble_from_xgboost_document(doc)


def test_bad_files(tmp_path):
    legacy = tmp_path / "old.json"
    legacy.write_bytes(b"binf\x00\x00\x00?")
    with pytest.raises(UnsupportedModelError, match="save_model"):
        load_model(str(legacy))
    broken = tmp_path / "broken.json"
    broken.write_text('{"learner": ')
    with pytest.raises(ValueError, match="JSON"):
        load_model(str(broken))
    booster, _ = MODEL_KINDS["regression"]()
    cut = tmp_path / "cut.ubj"
    cut.write_bytes(bytes(booster.save_raw(raw_format="ubj"))[:-40])
    with pytest.raises(ValueError, match="UBJSON"):
        load_model(str(cut))


# ------------------------------------------------------------------------------------------
# UBJSON decoder
# ------------------------------------------------------------------------------------------

_BE = {"i": ">i1", "U": ">u1", "I": ">i2", "l": ">i4", "L": ">i8", "d": ">f4", "D": ">f8"}


def _int(v: int) -> bytes:
    for m, fmt, lo, hi in (
        ("i", ">b", -128, 127),
        ("U", ">B", 0, 255),
        ("I", ">h", -(2**15), 2**15 - 1),
        ("l", ">i", -(2**31), 2**31 - 1),
    ):
        if lo <= v <= hi:
            return m.encode() + struct.pack(fmt, v)
    return b"L" + struct.pack(">q", v)


def _str(s: str) -> bytes:
    raw = s.encode("utf-8")
    return _int(len(raw)) + raw


def encode(v) -> bytes:
    """Reference UBJSON encoder for the tests (plain containers; NumPy arrays typed)."""
    if v is None:
        return b"Z"
    if v is True:
        return b"T"
    if v is False:
        return b"F"
    if isinstance(v, int):
        return _int(v)
    if isinstance(v, float):
        return b"D" + struct.pack(">d", v)
    if isinstance(v, str):
        return b"S" + _str(v)
    if isinstance(v, np.ndarray):
        marker = {np.dtype(d).newbyteorder("="): m for m, d in _BE.items()}[v.dtype]
        return b"[$" + marker.encode() + b"#" + _int(v.size) + v.astype(_BE[marker]).tobytes()
    if isinstance(v, list):
        return b"[" + b"".join(encode(x) for x in v) + b"]"
    if isinstance(v, dict):
        return b"{" + b"".join(_str(k) + encode(x) for k, x in v.items()) + b"}"
    raise TypeError(type(v))


def _equal(a, b) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (
            isinstance(a, np.ndarray)
            and isinstance(b, np.ndarray)
            and a.dtype == b.dtype
            and np.array_equal(a, b, equal_nan=True)
        )
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(map(_equal, a, b))
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    return type(a) is type(b) and a == b


@pytest.mark.parametrize(
    "data,expected",
    [
        (b"i\x80", -128),
        (b"U\xff", 255),
        (b"I\x80\x00", -32768),
        (b"l\xff\xff\xff\xfe", -2),
        (b"L\x7f\xff\xff\xff\xff\xff\xff\xff", 2**63 - 1),
        (b"d" + struct.pack(">f", 1.5), 1.5),
        (b"D" + struct.pack(">d", -0.1), -0.1),
        (b"S" + _str("héllo ✓"), "héllo ✓"),
        (b"SU\x00", ""),
        (b"Ca", "a"),
        (b"HU\x0512345", 12345),
        (b"HU\x041E-3", 1e-3),
        (b"T", True),
        (b"F", False),
        (b"Z", None),
        (b"NNNi\x07N", 7),
        (b"[]", []),
        (b"{}", {}),
        (b"[#U\x00", []),
        (b"[#U\x03i\x01SU\x01xT", [1, "x", True]),
        (b"[i\x01NZ[i\x02]]", [1, None, [2]]),
        (b"[$T#i\x02", [True, True]),
        (b"[$S#U\x02U\x01aU\x02bc", ["a", "bc"]),
        (b"{U\x01ai\x01NU\x01b[i\x02]}", {"a": 1, "b": [2]}),
        (b"{#i\x02U\x01ai\x01U\x01bZ", {"a": 1, "b": None}),
        (b"{$l#i\x02U\x01a\x00\x00\x00\x01U\x01b\xff\xff\xff\xff", {"a": 1, "b": -1}),
    ],
)
def test_ubjson_scalars_and_containers(data, expected):
    assert _equal(decode_ubjson(data), expected)


@pytest.mark.parametrize("marker", list(_BE))
def test_ubjson_typed_numeric_arrays_are_native_numpy(marker):
    dt = np.dtype(_BE[marker])
    info = np.finfo(dt) if dt.kind == "f" else np.iinfo(dt)
    values = np.array([info.min, 0, 1, info.max], dtype=dt)
    for count in (_int(4), b"L" + struct.pack(">q", 4)):
        data = b"[$" + marker.encode() + b"#" + count + values.tobytes()
        out = decode_ubjson(data)
        assert isinstance(out, np.ndarray) and out.dtype.isnative
        assert out.dtype == dt.newbyteorder("=")
        np.testing.assert_array_equal(out, values.astype(out.dtype))
    empty = decode_ubjson(b"[$" + marker.encode() + b"#i\x00")
    assert isinstance(empty, np.ndarray) and empty.size == 0


@pytest.mark.parametrize(
    "data,message",
    [
        (b"", "truncated"),
        (b"l\x00\x00", "truncated"),
        (b"[i\x01", "truncated"),
        (b"{U\x01a", "truncated"),
        (b"[$d#i\x03" + b"\x00" * 8, "truncated"),
        (b"SU\x05abc", "truncated"),
        (b"Si\xff", "negative"),
        (b"[#i\xff", "negative"),
        (b"[$di\x01", "followed by a '#'"),
        (b"[$[#i\x01", "not allowed"),
        (b"[#dxxxx", "integer marker"),
        (b"X", "unknown type marker"),
        (b"i\x01i\x02", "trailing"),
        (b"SU\x01\xff", "UTF-8"),
        (b"HU\x02ab", "not a number"),
    ],
)
def test_ubjson_errors(data, message):
    with pytest.raises(UBJSONError, match=message):
        decode_ubjson(data)


_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=True)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=60, deadline=None)
@given(_json_values)
def test_ubjson_round_trip(value):
    assert _equal(decode_ubjson(encode(value)), value)


def test_ubjson_xgboost_bytes_match_json():
    booster, _ = MODEL_KINDS["categorical"]()
    from_ubj = decode_ubjson(bytes(booster.save_raw(raw_format="ubj")))
    from_json = model_doc(booster)

    def normalise(v):
        if isinstance(v, np.ndarray):
            return v.tolist()
        if isinstance(v, dict):
            return {k: normalise(x) for k, x in v.items()}
        if isinstance(v, list):
            return [normalise(x) for x in v]
        return v

    a, b = normalise(from_ubj), from_json
    trees_a = a["learner"]["gradient_booster"]["model"].pop("trees")
    trees_b = b["learner"]["gradient_booster"]["model"].pop("trees")
    assert a == b
    for ta, tb in zip(trees_a, trees_b, strict=True):
        for key in tb:
            if key in ("split_conditions", "base_weights", "sum_hessian", "loss_changes"):
                np.testing.assert_array_equal(np.float32(ta[key]), np.float32(tb[key]))
            else:
                assert ta[key] == tb[key], key
