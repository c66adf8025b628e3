"""Saved builds of large model files (``distshap/build_cache.py``).

A model file's loaded ensemble and packed model are kept in the compile cache's directory and
mapped back by a later build of the same file: the same arrays bit for bit, the same SHAP
values; an entry whose bytes were damaged is removed and built again. The size bound of the
explainer's use (``large_model_file_bytes``: large model files only) is lowered here for a
small model.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from distshap import build_cache
from distshap.encoding import encode_ensemble
from distshap.kernels.margin import margin_model
from distshap.models import load_model
from distshap.packed import pack_ensemble
from distshap.plan.config import config_context

from xgb_models import MODEL_KINDS

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def model_file(tmp_path, monkeypatch):
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "model.ubj"
    path.write_bytes(bytes(MODEL_KINDS["categorical"]()[0].save_raw(raw_format="ubj")))
    return path


def _counted(calls: list):
    def load(model):
        calls.append(model)
        return load_model(model)

    return load


def _same_arrays(a, b) -> None:
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and x.shape == y.shape, f.name
            assert x.tobytes() == y.tobytes(), f.name


def _pack(ensemble):
    encoded, encoding = encode_ensemble(ensemble)
    options = dict(encoding=encoding, margin=margin_model(ensemble), model_kind="k")
    return pack_ensemble(encoded, **options)


def test_a_build_is_found_again_bit_for_bit(model_file):
    calls: list = []
    first = build_cache.load_ensemble(model_file, 0, _counted(calls))
    packed = _pack(first)
    build_cache.wait_stores()
    assert len(calls) == 1 and len(os.listdir(build_cache.directory())) == 2
    again = build_cache.load_ensemble(model_file, 0, _counted(calls))
    assert len(calls) == 1 and again is not first  # mapped back, not loaded
    _same_arrays(again, first)
    assert again.left.flags.writeable and again.extra.keys() == first.extra.keys()
    packed_again = _pack(again)
    _same_arrays(packed_again, packed)
    assert packed_again.digest == packed.digest and packed_again.stats == packed.stats
    assert build_cache.key_of(dataclasses.replace(again)) is None  # a copy: built, not found
    assert build_cache.load_ensemble(model_file, os.path.getsize(model_file), load_model)
    assert build_cache.file_key(model_file, os.path.getsize(model_file)) is None  # too small


def test_other_options_or_margins_are_built(model_file, monkeypatch):
    ensemble = build_cache.load_ensemble(model_file, 0, load_model)
    packed = _pack(ensemble)
    build_cache.wait_stores()
    built = []
    monkeypatch.setattr(build_cache, "store", lambda name, value: built.append(name))
    margin = {k: v.copy() for k, v in packed.margin.items()}
    margin["value"][0] += 1.0
    other = pack_ensemble(ensemble, encoding=packed.encoding, margin=margin, model_kind="k")
    assert built and other.digest != packed.digest
    other = pack_ensemble(ensemble, encoding=packed.encoding, margin=packed.margin,
                          model_kind="k", capacity=16)  # fmt: skip
    assert len(built) == 2 and other.capacity == 16


def test_damaged_entries_are_removed_and_built_again(model_file):
    calls: list = []
    build_cache.load_ensemble(model_file, 0, _counted(calls))
    build_cache.wait_stores()
    (entry,) = Path(build_cache.directory()).iterdir()
    raw = bytearray(entry.read_bytes())
    raw[len(raw) // 3] ^= 0x40  # one bit of an array
    entry.write_bytes(bytes(raw))
    build_cache.load_ensemble(model_file, 0, _counted(calls))
    assert len(calls) == 2  # not trusted: removed, loaded again (and saved again)
    build_cache.wait_stores()
    entry.write_bytes(entry.read_bytes()[:-100])  # truncated
    build_cache.load_ensemble(model_file, 0, _counted(calls))
    assert len(calls) == 3
    build_cache.wait_stores()
    build_cache.load_ensemble(model_file, 0, _counted(calls))
    assert len(calls) == 3  # the saved one again


def test_saving_is_announced_once_and_turned_off_by_the_configuration(model_file, caplog):
    calls: list = []
    with config_context(saved_build_bytes=0):
        assert build_cache.file_key(model_file, 0) is None
        build_cache.load_ensemble(model_file, 0, _counted(calls))
        build_cache.wait_stores()
    assert not Path(build_cache.directory()).exists()  # nothing saved
    build_cache._ANNOUNCED.clear()
    with caplog.at_level("WARNING", logger="distshap.compile"):
        build_cache.load_ensemble(model_file, 0, _counted(calls))
        build_cache.wait_stores()
    said = [r.getMessage() for r in caplog.records if "build" in r.getMessage()]
    assert len(said) == 1 and "saved_build_bytes=0" in said[0], said
    build_cache.load_ensemble(model_file, 0, _counted(calls))
    assert len(calls) == 2  # the second build of the file was mapped back


def test_old_entries_and_left_temporary_files_are_removed(model_file):
    build_cache.load_ensemble(model_file, 0, load_model)
    build_cache.wait_stores()
    folder = Path(build_cache.directory())
    (entry,) = folder.iterdir()
    old, new = folder / "old.bin.1.x.tmp", folder / "new.bin.2.y.tmp"
    for path in (old, new):
        path.write_bytes(b"partial")
    os.utime(old, (0, 0))
    (folder / "older.bin").write_bytes(b"x")
    os.utime(folder / "older.bin", (0, 0))
    with config_context(saved_build_bytes=entry.stat().st_size):
        build_cache._evict()
    assert sorted(p.name for p in folder.iterdir()) == sorted([entry.name, new.name])


def test_a_note_outlives_an_eviction_while_its_entry_is_written(model_file, monkeypatch):
    """An entry written meanwhile (here or by another process) evicts while the ensemble's own
    entry is still on its way: its note stays; a note an hour old naming no entry goes."""
    real, gate = build_cache._write, threading.Event()

    def held(name, value, limit):
        if name.endswith(".ensemble"):
            gate.wait()
        real(name, value, limit)

    monkeypatch.setattr(build_cache, "_write", held)
    build_cache.load_ensemble(model_file, 0, load_model)  # its entry's write held back
    real("other", {"a": np.arange(3)}, 1 << 30)  # written and evicted meanwhile
    gate.set()
    build_cache.wait_stores()
    assert build_cache.saved(model_file)
    (note,) = Path(build_cache._notes()).iterdir()
    os.remove(build_cache._path(f"{note.read_text()}.ensemble"))
    build_cache._evict()
    assert note.exists()  # young: its entry may be on its way
    os.utime(note, (0, 0))
    build_cache._evict()
    assert not note.exists() and not build_cache.saved(model_file)


def test_an_entry_being_written_elsewhere_is_not_written_again(model_file):
    key = build_cache.file_key(model_file, 0)
    folder = Path(build_cache.directory())
    folder.mkdir(parents=True)
    (folder / f"{key}.ensemble.bin.1.x.tmp").write_bytes(b"partial")  # another process's
    build_cache.load_ensemble(model_file, 0, load_model)
    build_cache.wait_stores()
    assert [p.name for p in folder.iterdir()] == [f"{key}.ensemble.bin.1.x.tmp"]


def test_a_changed_file_has_another_key(model_file):
    key = build_cache.file_key(model_file, 0)
    model_file.write_bytes(model_file.read_bytes() + b"N")  # a UBJSON no-op: the same model
    assert build_cache.file_key(model_file, 0) not in (None, key)


_EXPLAIN = """
import hashlib, sys
import numpy as np
import distshap
from distshap import warmup

distshap.set_config(large_model_file_bytes=0)  # a small file taken as a large one
loads = []
load_model = warmup.load_model
warmup.load_model = lambda model: loads.append(1) or load_model(model)
X = np.random.default_rng(0).integers(0, 3, (20, 4)).astype(np.float32)  # category codes
values = distshap.TreeExplainer(sys.argv[1], backend="cpu").shap_values(X)
print(len(loads), hashlib.sha256(np.ascontiguousarray(values).tobytes()).hexdigest())
"""


def test_a_second_process_finds_the_build_and_explains_the_same(model_file, tmp_path):
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache")}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    out = []
    for _ in range(2):
        proc = subprocess.run([sys.executable, "-c", _EXPLAIN, str(model_file)], env=env,
                              cwd=ROOT, capture_output=True, text=True, timeout=300)  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        out.append(proc.stdout.split())
    assert out[0][0] == "1" and out[1][0] == "0"  # loaded, then found
    assert out[0][1] == out[1][1]
    assert len(list((tmp_path / "cache" / "distshap-builds").iterdir())) == 2


def test_an_entry_that_cannot_be_touched_is_still_used_and_kept(model_file, monkeypatch):
    """A cache directory shared read-only (or an entry of another user): the entry's use time
    cannot be set, yet it is read, not removed."""
    calls: list = []
    build_cache.load_ensemble(model_file, 0, _counted(calls))
    build_cache.wait_stores()

    def refuse(*args, **kwargs):
        raise PermissionError("read-only")

    monkeypatch.setattr(build_cache.os, "utime", refuse)
    build_cache.load_ensemble(model_file, 0, _counted(calls))
    assert len(calls) == 1 and len(os.listdir(build_cache.directory())) == 1


def test_a_file_replaced_while_it_loads_is_not_saved_under_its_first_bytes(model_file):
    """The key is of the bytes hashed before the load: a file replaced in between (a new
    model deployed at the same path) must not have its new model saved under the old key."""
    old = model_file.read_bytes()
    new = bytes(MODEL_KINDS["regression"]()[0].save_raw(raw_format="ubj"))
    calls: list = []

    def replaced_then_loaded(model):
        model_file.write_bytes(new)
        return _counted(calls)(model)

    build_cache.load_ensemble(model_file, 0, replaced_then_loaded)
    build_cache.wait_stores()
    model_file.write_bytes(old)
    again = build_cache.load_ensemble(model_file, 0, _counted(calls))
    assert len(calls) == 2  # the first bytes loaded again, not the new model mapped back
    _same_arrays(again, load_model(model_file))
