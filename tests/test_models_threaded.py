"""The threaded load of large models (``distshap/models/_threaded.py``) against the NumPy code.

Models of more than ``loader_threaded_min_nodes`` nodes (the configuration) read their node arrays
straight from the UBJSON bytes and check their structure in one compiled pass, in threads over
trees. Here that bound is 0, so tiny models take that route: the Ensemble must be the NumPy route's
bit for bit, for one and two threads and any ranges of trees, and anything the NumPy code refuses
must be refused with the same error.
"""

from __future__ import annotations

import dataclasses
import threading

import numba
import numpy as np
import pytest
import xgboost as xgb

from distshap import config_context, parallel
from distshap.models import _threaded, load_model
from distshap.models._ubjson import decode_ubjson, decode_ubjson_views
from distshap.models.xgboost import (
    ensemble_from_ubjson,
    ensemble_from_xgboost_document,
    load_xgboost,
)

import tiny
from xgb_models import MODEL_KINDS

_FIELDS = (
    "left", "right", "feature", "threshold", "default_left", "is_categorical", "cat_offsets",
    "cat_values", "value", "cover", "tree_offsets", "tree_group", "base_score",
)  # fmt: skip


@pytest.fixture
def threaded(monkeypatch):
    """Every model takes the threaded route; the calls into the node reader are counted."""
    calls = []
    reader = _threaded.xgboost_node_arrays

    def counted(*args, **kwargs):
        calls.append(1)
        return reader(*args, **kwargs)

    monkeypatch.setattr(_threaded, "xgboost_node_arrays", counted)
    with config_context(loader_threaded_min_nodes=0):
        yield calls


def _same(a, b) -> None:
    for name in _FIELDS:
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and x.shape == y.shape, name
        assert x.tobytes() == y.tobytes(), name  # bits: NaN payloads and -0.0 included
    for name in ("num_features", "num_groups", "feature_names", "feature_types", "model_kind"):
        assert getattr(a, name) == getattr(b, name), name
    assert a.extra.keys() == b.extra.keys()


def _pruned():
    rng = np.random.default_rng(0)
    X = rng.random((300, 5)).astype(np.float32)
    y = X[:, 0] + rng.normal(0, 0.3, 300)
    params = {"tree_method": "exact", "gamma": 0.5, "max_depth": 6, "eta": 0.3}
    return xgb.train(params, xgb.DMatrix(X, label=y), 4)


def _raw(booster) -> bytes:
    return bytes(booster.save_raw(raw_format="ubj"))


@pytest.mark.parametrize("kind", ["regression", "multiclass", "dart", "categorical", "missing"])
def test_threaded_read_equals_numpy(kind, threaded):
    booster = MODEL_KINDS[kind]()[0]
    raw = _raw(booster)
    expected = ensemble_from_xgboost_document(decode_ubjson(raw))
    for threads in (1, 2):
        previous = numba.get_num_threads()
        numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
        try:
            _same(ensemble_from_ubjson(decode_ubjson_views(raw)), expected)
        finally:
            numba.set_num_threads(previous)
    _same(load_xgboost(booster), expected)  # a bytearray, read in place
    _same(ensemble_from_ubjson(decode_ubjson_views(raw), iteration_range=(1, 3)),
          ensemble_from_xgboost_document(decode_ubjson(raw), iteration_range=(1, 3)))  # fmt: skip
    assert len(threaded) == 4


def test_pruned_nodes_and_files(threaded, tmp_path):
    booster = _pruned()
    raw = _raw(booster)
    doc = decode_ubjson(raw)
    trees = doc["learner"]["gradient_booster"]["model"]["trees"]
    assert any(int(t["tree_param"]["num_deleted"]) for t in trees)
    expected = ensemble_from_xgboost_document(doc)
    _same(ensemble_from_ubjson(decode_ubjson_views(raw)), expected)
    path = tmp_path / "model.ubj"
    path.write_bytes(raw)
    _same(load_model(str(path)), expected.validate())
    assert len(threaded) == 2


def test_ranges_do_not_matter(threaded, monkeypatch):
    raw = _raw(MODEL_KINDS["multiclass"]()[0])
    expected = ensemble_from_xgboost_document(decode_ubjson(raw))
    run = parallel.run_ranges
    for pieces in (1, 3, 1000):
        monkeypatch.setattr(
            _threaded, "run_ranges", lambda f, n, _p, *a, pieces=pieces: run(f, n, pieces, *a)
        )
        _same(ensemble_from_ubjson(decode_ubjson_views(raw)), expected)


def _broken(raw: bytes, tree: int, name: str, node: int, value: int) -> bytes:
    """``raw`` with one big-endian int32 of tree ``tree``'s ``name`` array set to ``value``."""
    views = decode_ubjson_views(raw)
    arr = views.value["learner"]["gradient_booster"]["model"]["trees"][tree][name]
    at = views.offsets[id(arr)] + 4 * node
    return raw[:at] + np.array([value], ">i4").tobytes() + raw[at + 4 :]


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("left_children", 10_000, "child index outside the tree"),
        ("right_children", -3, "child index outside the tree"),
        ("split_indices", 99, "uses feature 99"),
        ("split_indices", -2, "uses feature -2"),
    ],
)
def test_refusals_are_the_numpy_errors(name, value, message, threaded):
    raw = _broken(_raw(MODEL_KINDS["regression"]()[0]), 1, name, 0, value)
    with pytest.raises(ValueError, match=message):
        ensemble_from_xgboost_document(decode_ubjson(raw))
    with pytest.raises(ValueError, match=message):
        ensemble_from_ubjson(decode_ubjson_views(raw))
    assert len(threaded) == 1  # read, flagged, then refused by the NumPy code


def test_unreached_nodes_take_the_reachability_walk(threaded):
    # the root's right child points at its left one: a node nobody names, and one named twice
    raw = _raw(MODEL_KINDS["regression"]()[0])
    doc = decode_ubjson(raw)
    left = int(doc["learner"]["gradient_booster"]["model"]["trees"][0]["left_children"][0])
    broken = _broken(raw, 0, "right_children", 0, left)
    with pytest.raises(ValueError) as numpy_error:
        ensemble_from_xgboost_document(decode_ubjson(broken))
    with pytest.raises(ValueError) as threaded_error:
        ensemble_from_ubjson(decode_ubjson_views(broken))
    assert str(threaded_error.value) == str(numpy_error.value)


def test_views_are_read_only_big_endian_and_located():
    raw = _raw(MODEL_KINDS["regression"]()[0])
    views = decode_ubjson_views(raw)
    tree = views.value["learner"]["gradient_booster"]["model"]["trees"][0]
    copied = decode_ubjson(raw)["learner"]["gradient_booster"]["model"]["trees"][0]
    for name in ("left_children", "split_conditions", "default_left"):
        arr = tree[name]
        assert not arr.flags.writeable and arr.dtype.str in (">i4", ">f4", "|u1")
        assert np.array_equal(arr, copied[name])
        at = views.offsets[id(arr)]
        assert raw[at : at + arr.nbytes] == arr.tobytes()
    assert views.buffer is raw  # bytes are read in place


def _ensembles():
    yield from tiny.tiny_ensembles().values()
    for seed in range(3):
        yield tiny.random_ensemble(seed, n_trees=4, depth=5, n_categorical=seed % 2)


def test_compiled_node_checks_accept_valid_ensembles():
    for ens in _ensembles():
        assert _threaded.nodes_valid(
            ens.left, ens.right, ens.feature, ens.cover, ens.tree_offsets, ens.num_features
        )


def _with(ens, **changes):
    arrays = {name: getattr(ens, name).copy() for name in changes}
    for name, (i, v) in changes.items():
        arrays[name][i] = v
    return dataclasses.replace(ens, **arrays)


@pytest.mark.parametrize(
    "changes",
    [
        {"left": (2, 6)},  # a child in the next tree
        {"right": (2, 10)},  # outside the nodes
        {"left": (2, 1)},  # two parents
        {"right": (0, 5)},  # a child of tree 0 is tree 1's root
        {"left": (5, 5)},  # a root its own child
        {"feature": (0, 1)},  # beyond num_features
        {"feature": (0, -1)},
        {"right": (0, -1)},
        {"cover": (1, np.nan)},
        {"cover": (3, -1.0)},
        {"cover": (5, 0.0)},  # a root of zero cover
        {"tree_offsets": (1, 0)},  # an empty tree
    ],
)
def test_validate_refuses_as_the_numpy_checks(changes):
    tree = tiny.Split(0, 0.5, tiny.Leaf(1.0), tiny.Split(0, 0.7, tiny.Leaf(2.0), tiny.Leaf(3.0)))
    ens = tiny.build_ensemble([tree, tree], num_features=1).validate()
    bad = _with(ens, **changes)
    assert not _threaded.nodes_valid(
        bad.left, bad.right, bad.feature, bad.cover, bad.tree_offsets, bad.num_features
    )
    with pytest.raises((ValueError, IndexError)) as numpy_error:
        bad.validate()
    with (
        config_context(loader_threaded_min_nodes=0),
        pytest.raises(type(numpy_error.value)) as threaded_error,
    ):
        bad.validate()
    assert str(threaded_error.value) == str(numpy_error.value)
    assert ens.validate() is ens


def test_warm_up_calls_with_the_loaders_types(threaded, monkeypatch, tmp_path):
    path = tmp_path / "model.ubj"
    path.write_bytes(_raw(MODEL_KINDS["missing"]()[0]))
    calls = []
    run = _threaded.run_ranges

    def spy(function, n, pieces, *args):
        calls.append((function, tuple(numba.typeof(a) for a in (*args, 0, 1))))
        run(function, n, pieces, *args)

    monkeypatch.setattr(_threaded, "run_ranges", spy)
    load_model(str(path))  # the threaded read and check
    warm = [(f, tuple(numba.typeof(a) for a in args)) for f, args in _threaded._warm_up_calls()]
    assert calls == warm
    _threaded._warm_up()


def test_warm_up_starts_once_for_large_files(monkeypatch, tmp_path):
    started = []
    monkeypatch.setattr(_threaded, "_warm_up", lambda: started.append(1))
    monkeypatch.setattr(_threaded, "_warm_up_started", False)
    path = tmp_path / "model.ubj"
    path.write_bytes(b"{" * 100)
    with config_context(large_model_file_bytes=100):
        _threaded.start_warm_up(path)  # not larger: no thread
        _threaded.start_warm_up(tmp_path / "missing.ubj")
    assert not _threaded._warm_up_started
    with config_context(large_model_file_bytes=99):
        _threaded.start_warm_up(path)
        _threaded.start_warm_up(path)  # once a process
    for thread in threading.enumerate():
        if thread.name == "distshap-warm-up":
            thread.join()
    assert started == [1]


def test_category_values_are_native_copies(tmp_path):
    """A categorical model's category values are read from the file's bytes as copies in native
    byte order: no big-endian view keeping the whole model file alive while an explainer lives."""
    import pandas as pd

    from distshap import TreeExplainer
    from distshap.models import load_model_file

    rng = np.random.default_rng(0)
    df = pd.DataFrame({"a": rng.random(300), "c": pd.Categorical(rng.integers(0, 5, 300))})
    y = df["a"] + (df["c"].cat.codes == 2)
    dtrain = xgb.DMatrix(df, y, enable_categorical=True)
    booster = xgb.train({"max_depth": 3, "max_cat_to_onehot": 1}, dtrain, 5)
    path = tmp_path / "m.ubj"
    booster.save_model(path)
    values = load_model_file(str(path)).extra["category_values"][1]
    assert values.dtype.isnative and values.base is None, (values.dtype, type(values.base))
    cats = TreeExplainer(booster).packed.feature_categories[1]
    assert np.asarray(cats).dtype.isnative
