"""The cold routes: NumPy where a large model's compiled passes are not compiled yet.

The loader's node reader and checks (``distshap/models/_threaded.py``) and BFD packing with its
grouping by bin (``distshap/packing.py``) run in NumPy for sizes up to the configuration's
``loader_cold_max_nodes`` and ``packing_cold_max_items`` while their compiled functions are neither
compiled in the process nor in Numba's disk cache. Both routes must give the same arrays bit for bit
(and the same flags and answers), and the cold route must ask a helper to compile the kernels for
later processes.
"""

from __future__ import annotations

import dataclasses
import os
import sys

import numpy as np
import pytest

from distshap import compile_cache, config_context, packing
from distshap.models import _threaded
from distshap.models._ubjson import decode_ubjson_views
from distshap.models.xgboost import ensemble_from_ubjson

import tiny
from xgb_models import MODEL_KINDS


def _broken(raw: bytes, name: str, value: int) -> bytes:
    """``raw`` with the first int32 of tree 1's ``name`` array set to ``value``."""
    views = decode_ubjson_views(raw)
    arr = views.value["learner"]["gradient_booster"]["model"]["trees"][1][name]
    at = views.offsets[id(arr)]
    return raw[:at] + np.array([value], ">i4").tobytes() + raw[at + 4 :]


def _cold(monkeypatch) -> None:
    """The compiled loader passes are not in the cache, and would fail if called."""
    monkeypatch.setattr(compile_cache, "compile_later", lambda m, n: None)
    monkeypatch.setattr(compile_cache, "compiled", lambda *d: False)
    monkeypatch.setattr(_threaded, "_xgboost_trees", None)
    monkeypatch.setattr(_threaded, "_check_trees", None)


def _load(raw: bytes):
    """The ensemble of ``raw``, validated, or the loader's error message."""
    try:
        return ensemble_from_ubjson(decode_ubjson_views(raw)).validate()
    except ValueError as err:
        return str(err)


def _same(a, b) -> None:
    assert type(a) is type(b), (a, b)
    if isinstance(a, str):
        assert a == b
        return
    for field in dataclasses.fields(a):
        x, y = getattr(a, field.name), getattr(b, field.name)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and x.shape == y.shape, field.name
            assert x.tobytes() == y.tobytes(), field.name  # NaN payloads and -0.0 included


@pytest.mark.parametrize("kind", ["regression", "multiclass", "dart", "categorical", "missing"])
def test_cold_loader_reads_the_compiled_loaders_bits(kind, monkeypatch):
    raw = bytes(MODEL_KINDS[kind]()[0].save_raw(raw_format="ubj"))
    models = [raw]
    if kind == "regression":  # flagged trees: a child outside, a bad feature, an unnamed node
        models += [_broken(raw, "left_children", 10_000), _broken(raw, "split_indices", -2)]
        right = decode_ubjson_views(raw).value["learner"]["gradient_booster"]["model"]["trees"]
        models.append(_broken(raw, "right_children", int(right[1]["left_children"][0])))
    with config_context(loader_threaded_min_nodes=0, loader_cold_max_nodes=0):
        compiled = [_load(model) for model in models]  # every size compiled
    _cold(monkeypatch)
    with config_context(loader_threaded_min_nodes=0, loader_cold_max_nodes=1 << 30):
        for model, want in zip(models, compiled, strict=True):
            _same(_load(model), want)
    if kind == "regression":
        assert isinstance(compiled[-1], str)  # the last one was refused


def _ensembles():
    yield from tiny.tiny_ensembles().values()
    for seed in range(3):
        yield tiny.random_ensemble(seed, n_trees=4, depth=5, n_categorical=seed % 2)
    tree = tiny.Split(0, 0.5, tiny.Leaf(1.0), tiny.Split(0, 0.7, tiny.Leaf(2.0), tiny.Leaf(3.0)))
    ens = tiny.build_ensemble([tree, tree], num_features=1).validate()
    for name, i, v in [
        ("left", 2, 6), ("right", 2, 10), ("left", 2, 1), ("right", 0, 5), ("left", 5, 5),
        ("feature", 0, 1), ("feature", 0, -1), ("right", 0, -1), ("cover", 1, np.nan),
        ("cover", 3, -1.0), ("cover", 5, 0.0), ("tree_offsets", 1, 0),
    ]:  # fmt: skip
        array = getattr(ens, name).copy()
        array[i] = v
        yield dataclasses.replace(ens, **{name: array})


def _validated(ens) -> bool | str:
    try:
        return ens.validate() is ens
    except ValueError as err:
        return str(err)


def test_cold_node_checks_answer_as_the_compiled_ones(monkeypatch):
    ensembles = list(_ensembles())
    with config_context(loader_threaded_min_nodes=0, loader_cold_max_nodes=0):
        answers = [_validated(ens) for ens in ensembles]  # every size compiled
    _cold(monkeypatch)
    with config_context(loader_threaded_min_nodes=0, loader_cold_max_nodes=1 << 30):
        assert [_validated(ens) for ens in ensembles] == answers
    assert True in answers and any(isinstance(a, str) for a in answers)


def test_cold_sizes_take_numpy_and_ask_for_a_helper(monkeypatch):
    later = []
    monkeypatch.setattr(compile_cache, "compile_later", lambda m, n: later.append((m, n)))
    monkeypatch.setattr(compile_cache, "compiled", lambda *d: False)
    with config_context(loader_threaded_min_nodes=0, loader_cold_max_nodes=100):
        assert not _threaded.compiled_route(100) and _threaded.compiled_route(101)
    assert _threaded.compiled_route(100)  # the defaults: up to 2**19 nodes never cold
    assert later == [(_threaded.__name__, _threaded.AHEAD_NAME)]
    monkeypatch.setattr(_threaded, "_check_trees", None)  # would fail if called
    monkeypatch.setattr(_threaded, "run_ranges", None)
    ens = tiny.random_ensemble(0, n_trees=4, depth=5)
    with config_context(loader_threaded_min_nodes=0, loader_cold_max_nodes=1 << 30):
        assert not _threaded.nodes_valid(  # declined: validate's NumPy checks answer
            ens.left, ens.right, ens.feature, ens.cover, ens.tree_offsets, ens.num_features
        )
        assert ens.validate() is ens


def test_cold_packing_is_the_compiled_packing(monkeypatch):
    sizes = np.random.default_rng(3).integers(1, 40, size=3000)  # some oversize items
    with config_context(packing_numpy_max_items=10, packing_cold_max_items=0):
        compiled = packing.pack(sizes)  # nothing cold: 3000 items compiled
        compiled_order = packing.bin_order(compiled, sizes)
    later = []
    monkeypatch.setattr(packing, "compiled", lambda *d: False)
    monkeypatch.setattr(packing, "compile_later", lambda m, n: later.append((m, n)))
    monkeypatch.setattr(packing, "_bfd_compiled", None)  # would fail if called
    monkeypatch.setattr(packing, "_group_by_bin_compiled", None)
    with config_context(packing_numpy_max_items=10, packing_cold_max_items=3000):
        cold = packing.pack(sizes)
        cold_order = packing.bin_order(cold, sizes)
    assert cold.num_bins == compiled.num_bins and cold.num_oversize == compiled.num_oversize
    np.testing.assert_array_equal(cold.bin_of_item, compiled.bin_of_item)
    for a, b in zip(cold_order, compiled_order, strict=True):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    assert set(later) == {(packing.__name__, packing.AHEAD_NAME)}


def test_compile_later_starts_one_low_priority_helper_once(monkeypatch, tmp_path):
    started = []
    monkeypatch.setattr(compile_cache, "_LATER", set())
    monkeypatch.setattr(compile_cache, "_start_helper", lambda m, later: started.append(later))
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    assert not compile_cache.compile_later("distshap.packing", "packing")  # no cache directory
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    assert not compile_cache.compile_later("distshap.packing", "packing")  # no process
    assert not compile_cache.compile_later("distshap.packing", "packing")  # asked once
    assert started == [True]


def test_compile_later_is_claimed_once_by_processes_sharing_a_cache(monkeypatch, tmp_path):
    started = []
    monkeypatch.setattr(compile_cache, "_start_helper", lambda m, later: started.append(later))
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(compile_cache, "_LATER", set())
    compile_cache.compile_later("distshap.packing", "packing")
    monkeypatch.setattr(compile_cache, "_LATER", set())  # as another process sees it
    compile_cache.compile_later("distshap.packing", "packing")
    assert started == [True]  # one helper for both
    (claim,) = (tmp_path / "distshap-later").iterdir()
    os.utime(claim, (0, 0))  # a claim of a helper long gone
    monkeypatch.setattr(compile_cache, "_LATER", set())
    compile_cache.compile_later("distshap.packing", "packing")
    assert started == [True, True]


def test_no_helper_is_started_from_a_frozen_application(monkeypatch):
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    assert compile_cache._start_helper("distshap.packing", later=True) is None
