"""Host arrays of the device model kept with a saved build (``distshap/build_cache.py``,
``distshap/kernels/cuda/runtime/model.py`` and ``prepare.py``).

What the device model and its SHAP plan compute from the packed model of a large model file
(path features and bins, oversize paths, fixed-point bounds, table offsets, the plan's host
arrays, the additivity check's traversal arrays) is saved beside the build by the process that
computes it and mapped back by a later one: the same arrays bit for bit as computed without
the saved build, the same device model and SHAP values (under the CUDA simulator); a change of a
configuration field that shapes them computes (and saves) them anew, one that does not reuses
them.
"""

from __future__ import annotations

import dataclasses
import mmap
import os

import numpy as np
import pytest

import distshap
from distshap import build_cache
from distshap.kernels import cuda_available
from distshap.kernels.cuda.runtime import model as km
from distshap.plan import gpu
from distshap.plan.config import Config, config_context

from cudasim import assert_simulator_ok
from xgb_models import MODEL_KINDS


@pytest.fixture
def model_file(tmp_path, monkeypatch):
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "model.ubj"
    path.write_bytes(bytes(MODEL_KINDS["categorical"]()[0].save_raw(raw_format="ubj")))
    with config_context(large_model_file_bytes=0):
        yield str(path)


def _packed(path: str):
    """The packed model of an explainer of ``path`` (its saved build's, once saved)."""
    packed = distshap.TreeExplainer(path, backend="cpu").packed
    build_cache.wait_stores()
    return packed


def _mapped(a: np.ndarray) -> bool:
    """Whether ``a``'s memory is a mapped entry's (not computed in this process)."""
    while isinstance(a, np.ndarray) and a.base is not None:
        a = a.base
    return isinstance(a, memoryview) and isinstance(a.obj, mmap.mmap)


def _same(a, b, where: str = "") -> None:
    """``a`` and ``b`` equal, arrays bit for bit (dtype, shape and bytes)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        assert isinstance(a, np.ndarray) and isinstance(b, np.ndarray), where
        assert a.dtype == b.dtype and a.shape == b.shape, where
        assert a.tobytes() == b.tobytes(), where
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            _same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _same(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


def _entries() -> list[str]:
    return sorted(os.listdir(build_cache.directory()))


def _host(packed) -> tuple:
    """The host arrays the device-model stage computes from ``packed``."""
    return km.lane_arrays(packed, columns=False), km.shap_plan_host(packed)


def test_the_host_arrays_are_mapped_back_bit_for_bit(model_file):
    first = _packed(model_file)
    plain = dataclasses.replace(first)  # not a saved build's: computed, never saved
    want = _host(plain)
    assert len(_entries()) == 2  # the ensemble and the packed model
    _same(_host(first), want)  # computed by the first process, and saved
    build_cache.wait_stores()
    saved = _entries()
    assert len(saved) == 4 and not any(_mapped(a) for a in gpu.path_info(first))

    again = _packed(model_file)  # a later process: its build mapped back
    assert again is not first and again.digest == first.digest
    got = _host(again)
    _same(got, want)
    build_cache.wait_stores()
    assert _entries() == saved  # nothing written again
    assert all(_mapped(a) for a in gpu.path_info(again))  # the saved ones, kept as the model's
    assert not any(a.flags.writeable for a in gpu.path_info(again))
    assert _mapped(got[1][1]["lane_table"]) and _mapped(got[1][0])


def test_a_changed_configuration_field_computes_them_anew(model_file):
    _host(_packed(model_file))
    build_cache.wait_stores()
    saved = _entries()
    again = _packed(model_file)
    with config_context(quadrature_chunk_paths=8, quadrature_tile_window=16):
        want = km.shap_plan_host(dataclasses.replace(again))
        got = km.shap_plan_host(again)
        build_cache.wait_stores()
    _same(got, want)
    assert not _mapped(got[0])  # computed under the changed fields, not the saved ones
    assert len(_entries()) == len(saved) + 1  # and saved under their own key
    with config_context(gpu_preparation=0, saved_build_bytes=1 << 40, cache_size=3):
        assert _mapped(km.shap_plan_host(again)[0])  # fields that shape no array: reused
    shaping = {name for name, _ in km.saved_inputs()}
    fields = {f.name for f in dataclasses.fields(Config)}
    assert shaping == fields - km.NOT_SHAPING and km.NOT_SHAPING <= fields


def test_only_a_saved_builds_packed_model_keeps_them(model_file):
    packed = _packed(model_file)
    calls: list = []
    build = lambda: calls.append(1) or {"a": np.arange(3)}  # noqa: E731
    build_cache.load_derived(dataclasses.replace(packed), "part", (), build)
    build_cache.wait_stores()
    assert len(_entries()) == 2 and len(calls) == 1
    with config_context(saved_build_bytes=0):
        build_cache.load_derived(packed, "part", (), build)
    build_cache.wait_stores()
    assert len(_entries()) == 2 and len(calls) == 2
    build_cache.load_derived(packed, "part", (), build)
    build_cache.wait_stores()
    assert len(_entries()) == 3 and len(calls) == 3
    got = build_cache.load_derived(packed, "part", (), build)
    assert len(calls) == 3 and _mapped(got["a"]) and got["a"].tolist() == [0, 1, 2]
    assert build_cache.load_derived(packed, "part", (1,), build) is not None and len(calls) == 4


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="no CUDA GPU visible (run on the GPU host)")
def test_a_first_call_from_saved_arrays_gives_the_bits_of_one_without(model_file):
    from distshap.kernels import prepare
    from distshap.kernels.cuda import clear_cache

    X = MODEL_KINDS["categorical"]()[1]
    with config_context(small_max_paths=0):  # the lane route: device model, plan, margin check
        clear_cache()
        first = distshap.TreeExplainer(model_file, backend="cuda")
        prepare.wait()
        want = first.shap_values(X).copy()
        build_cache.wait_stores()
        saved = _entries()
        parts = {name.split(".")[1] for name in saved if ".device-" in name}
        assert parts == {"device-lanes", "device-shap", "device-margin"}, saved
        clear_cache()
        again = distshap.TreeExplainer(model_file, backend="cuda")  # its arrays mapped back
        prepare.wait()
        assert all(_mapped(a) for a in gpu.path_info(again.packed))
        got = again.shap_values(X)
        build_cache.wait_stores()
    assert want.tobytes() == got.tobytes() and _entries() == saved


_SIM_SCRIPT = """
import dataclasses, os, tempfile
import numpy as np
import tiny
from distshap import build_cache
from distshap.kernels.cuda import shap_values
from distshap.kernels.cuda import traversal
from distshap.kernels.cuda.runtime import caches
from distshap.kernels.cuda.runtime import model as km
from distshap.kernels.cuda.runtime import prepare as rp
from distshap.kernels.margin import margin_model
from distshap.packed import pack_ensemble
from distshap.plan.config import config_context

os.environ["NUMBA_CACHE_DIR"] = tempfile.mkdtemp()
ensemble = tiny.random_ensemble(5, n_features=9, n_trees=4, depth=4)
X = tiny.random_rows(6, ensemble, n=5).astype(np.float32)
path = os.path.join(os.environ["NUMBA_CACHE_DIR"], "model.bin")
with open(path, "wb") as fh:
    fh.write(b"a model file")

def host(a):
    return a.copy_to_host() if hasattr(a, "copy_to_host") else a

def same(a, b, where=""):
    if dataclasses.is_dataclass(a):
        skip = ("packed", "_forms", "_lock")
        names = [f.name for f in dataclasses.fields(a) if f.name not in skip]
        for n in names:
            same(getattr(a, n), getattr(b, n), where + "." + n)
    elif isinstance(a, (tuple, list)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{where}[{i}]")
    elif hasattr(a, "copy_to_host") or isinstance(a, np.ndarray):
        x, y = host(a), host(b)
        assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes(), where
    else:
        assert a == b, where

def made(packed):
    caches.clear_cache()
    rp.device_model(packed)  # the preparation's last stage
    build_cache.wait_stores()
    model = km.device_model(packed)
    few = km.few_rows_shap_plan(packed, model)  # the plan of calls of few rows: its own key
    build_cache.wait_stores()
    return model, model.shap, traversal.device_arrays(packed, model), few

hits = []  # the parts mapped back
read = build_cache.load

def counted(name):
    value = read(name)
    if value is not None:
        hits.append(name.rsplit(".", 1)[-1])
    return value

build_cache.load = counted

def build():
    loaded = build_cache.load_ensemble(path, 0, lambda model: ensemble)
    packed = pack_ensemble(loaded, max_table_features=2, margin=margin_model(loaded))
    build_cache.wait_stores()
    return packed

with config_context(small_max_paths=0, large_model_file_bytes=0, quadrature_tile_features=2):
    plain = build()
    without = made(dataclasses.replace(plain))  # no saved build: computed
    want = shap_values(plain, X)
    assert without[1].quadrature and without[1].n_table_bins, "tables and quadrature both"
    assert without[1].lane_column is not None, "chunk-local tiles"
    made(plain)  # computed, and saved
    n = len(os.listdir(build_cache.directory()))
    again = build()
    assert again is not plain
    hits.clear()
    got = made(again)  # mapped back
    assert sorted(hits) == ["device-lanes", "device-margin", "device-shap", "device-shap"], hits
    assert len(os.listdir(build_cache.directory())) == n == 6, n
    same(got, without)
    assert shap_values(again, X).tobytes() == want.tobytes()
print("SIMULATOR-OK")
"""


def test_the_device_model_from_saved_arrays_is_the_same_under_cuda_simulator():
    assert_simulator_ok(_SIM_SCRIPT, timeout=600)
