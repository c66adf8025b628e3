"""An explainer's GPU preparation in background threads (``distshap/kernels/prepare.py``, its
stages' work in ``distshap/kernels/cuda/runtime/prepare.py``).

The stages run in order, each in its own thread, under the configuration of the explainer's
construction; a CUDA call waits for them; an error ends them and is kept, the call then making
and raising what it makes and raises without them. Nothing starts where the explainer runs no
CUDA itself. Under the CUDA simulator the stages' own work makes the device model the first
call then finds, with the same bits as without; on a GPU the explainer's first call after a
preparation gives the bits of one without.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from distshap import build_cache, compile_cache
from distshap.kernels import cuda_available, prepare
from distshap.models import _threaded
from distshap.plan.config import config_context, get_config

from cudasim import assert_simulator_ok

_RUNS: list[tuple] = []  # (stage, thread name, args, a configuration value): the fake work


def context(backend, path_dependent):
    _RUNS.append(("context", threading.current_thread().name, (backend, path_dependent),
                  get_config().few_rows))  # fmt: skip
    prepare.wait()  # in a stage: no wait (it would wait for itself)


def kernels(ensemble):
    _RUNS.append(("kernels", threading.current_thread().name, (ensemble,), get_config().few_rows))
    if ensemble == "fail":
        raise ValueError("kernels failed")


def device_model(packed):
    _RUNS.append(("device_model", threading.current_thread().name, (packed,),
                  get_config().few_rows))  # fmt: skip


@pytest.fixture
def fake_work(monkeypatch):
    """The stages run this module's functions above instead of the CUDA work."""
    monkeypatch.setattr(prepare, "_WORK", __name__)
    monkeypatch.setattr(prepare, "_driver_context", lambda: None)
    _RUNS.clear()
    yield _RUNS
    prepare.wait()


def _large_file(tmp_path) -> str:
    path = tmp_path / "model.ubj"
    path.write_bytes(b"{" * 200)
    return str(path)


def test_stages_run_in_order_in_their_threads_under_the_construction_config(fake_work, tmp_path):
    with config_context(large_model_file_bytes=100, few_rows=7):
        preparation = prepare.start(_large_file(tmp_path), "cuda", None, "tree_path_dependent")
        assert preparation.active and preparation.path_dependent
        assert preparation.loaded("ensemble") == "ensemble"
        preparation.packed("packed")
    before = prepare.waited()
    assert prepare.wait() >= 0.0 and prepare.waited() >= before
    assert [r[0] for r in fake_work] == ["context", "kernels", "device_model"]
    assert [r[2] for r in fake_work] == [("cuda", True), ("ensemble",), ("packed",)]
    assert all(r[3] == 7 for r in fake_work)  # the construction's configuration, in each thread
    assert len({r[1] for r in fake_work}) == 3 and threading.current_thread().name not in {
        r[1] for r in fake_work
    }
    assert preparation.error is None and set(preparation.seconds) == {
        "context", "kernels", "device_model"
    }  # fmt: skip
    assert preparation not in prepare._PENDING  # waited for: later calls wait no more


def test_an_error_ends_the_stages_and_is_kept(fake_work, tmp_path):
    with config_context(large_model_file_bytes=100):
        preparation = prepare.start(_large_file(tmp_path), "cuda", None, "tree_path_dependent")
        preparation.loaded("fail")
        preparation.packed("packed")
    prepare.wait()
    assert [r[0] for r in fake_work] == ["context", "kernels"]  # device_model skipped
    assert isinstance(preparation.error, ValueError) and "kernels failed" in str(preparation.error)


def test_interventional_explainers_get_the_context_only(fake_work, tmp_path):
    with config_context(large_model_file_bytes=100):
        preparation = prepare.start(_large_file(tmp_path), "cuda", None, "interventional")
        preparation.loaded("ensemble")
        preparation.packed("packed")
    prepare.wait()
    assert [(r[0], r[2]) for r in fake_work] == [("context", ("cuda", False))]


def test_nothing_starts_where_the_explainer_runs_no_cuda_here(fake_work, tmp_path):
    large = _large_file(tmp_path)
    with config_context(large_model_file_bytes=100):
        for model, backend, client in [
            (large, "cpu", None),  # the CPU backend
            (large, "auto", None),  # "auto": CUDA untouched until a call (a fork may follow)
            (large, "cuda", object()),  # a Dask client: its workers run the kernels
            (str(tmp_path / "missing.ubj"), "cuda", None),  # the loader's error
            (np.zeros(3), "cuda", None),  # an in-memory model
        ]:
            preparation = prepare.start(model, backend, client, "tree_path_dependent")
            assert not preparation.active
            preparation.loaded("ensemble")
            preparation.packed("packed")
    with config_context(large_model_file_bytes=200):  # not larger
        assert not prepare.start(large, "cuda", None, "tree_path_dependent").active
    with config_context(large_model_file_bytes=100, gpu_preparation=0):  # turned off
        assert not prepare.start(large, "cuda", None, "tree_path_dependent").active
    prepare.wait()
    assert fake_work == []


def test_the_cli_on_a_cluster_prepares_no_gpu_here(tmp_path, monkeypatch):
    """``distshap explain`` on a cluster: its workers run the kernels, so the explainers it
    builds in this process start no preparation (it decides before building them)."""
    import xgboost as xgb

    from distshap import cli_commands
    from distshap.cli import main

    rng = np.random.default_rng(0)
    X = rng.normal(size=(50, 3)).astype(np.float32)
    model, data = str(tmp_path / "m.json"), str(tmp_path / "X.npy")
    xgb.train({"max_depth": 2}, xgb.DMatrix(X, label=X[:, 0]), 3).save_model(model)
    np.save(data, X)
    seen = []
    start = prepare.start

    def recorded(*args):
        seen.append(get_config().gpu_preparation)
        return start(*args)

    class Stop(Exception):
        pass

    def no_cluster(args):
        raise Stop

    monkeypatch.setattr(prepare, "start", recorded)
    monkeypatch.setattr(cli_commands, "_start_client", no_cluster)
    out = str(tmp_path / "out.npy")
    assert main(["explain", model, data, "-o", out, "--workers", "1"]) != 0  # Stop, reported
    assert seen and all(v == 0 for v in seen)
    seen.clear()
    assert main(["explain", model, data, "-o", str(tmp_path / "local.npy")]) == 0
    assert seen and all(v == 1 for v in seen)


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="no CUDA GPU visible (run on the GPU host)")
def test_gpu_a_fork_after_an_auto_explainer_of_a_large_file_runs_on_the_gpu(tmp_path):
    """A process builds an ``"auto"`` explainer of a large model file, then forks (a prefork
    server): CUDA must still be untouched, so the child's call runs on the GPU."""
    script = f"""
import os, numpy as np, xgboost as xgb, distshap
X = np.random.default_rng(0).random((200, 6)).astype(np.float32)
path = {str(tmp_path / "m.ubj")!r}
xgb.train({{"max_depth": 6}}, xgb.DMatrix(X, label=X[:, 0]), 30).save_model(path)
distshap.set_config(large_model_file_bytes=0)
explainer = distshap.TreeExplainer(path)
pid = os.fork()
if pid == 0:
    explainer.shap_values(X[:5])
    os._exit(0)
assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0, "the forked child failed"
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_the_explainer_hands_its_ensemble_and_packed_model(monkeypatch, tmp_path):
    import xgboost as xgb

    import distshap

    seen = {}

    class Recorder(prepare.Preparation):
        def loaded(self, ensemble):
            seen["ensemble"] = ensemble
            return ensemble

        def packed(self, packed):
            seen["packed"] = packed

    def start(model, backend, client, feature_perturbation):
        seen["start"] = (model, backend, client, feature_perturbation)
        return Recorder()

    monkeypatch.setattr(prepare, "start", start)
    rng = np.random.default_rng(0)
    X = rng.random((50, 3)).astype(np.float32)
    booster = xgb.train({"max_depth": 2}, xgb.DMatrix(X, label=X[:, 0]), 2)
    explainer = distshap.TreeExplainer(booster, backend="cpu")
    assert seen["start"] == (booster, "cpu", None, "tree_path_dependent")
    assert seen["ensemble"] is explainer.ensemble and seen["packed"] is explainer.packed


def test_a_saved_build_is_told_by_the_file_and_skips_the_loader_warm_up(tmp_path, monkeypatch):
    from distshap.models import load_model

    started = []
    monkeypatch.setattr(_threaded, "_warm_up", lambda: started.append(1))
    monkeypatch.setattr(_threaded, "_warm_up_started", False)
    monkeypatch.setattr(compile_cache, "cache_dir", lambda: str(tmp_path / "cache"))
    import xgboost as xgb

    rng = np.random.default_rng(0)
    X = rng.random((50, 3)).astype(np.float32)
    path = str(tmp_path / "model.ubj")
    xgb.train({"max_depth": 2}, xgb.DMatrix(X, label=X[:, 0]), 2).save_model(path)
    assert not build_cache.saved(path)
    build_cache.load_ensemble(path, 0, load_model)
    build_cache.wait_stores()
    assert build_cache.saved(path)
    with config_context(large_model_file_bytes=10):
        _threaded.start_warm_up(path)  # a saved build: the loader will not run
        assert not _threaded._warm_up_started and started == []
        with config_context(saved_build_bytes=0):  # nothing saved is read: the loader runs
            assert not build_cache.saved(path)
        os.utime(path, ns=(1, 1))  # another file as far as its identity tells
        assert not build_cache.saved(path)
        _threaded.start_warm_up(path)
    for thread in threading.enumerate():
        if thread.name == "distshap-warm-up":
            thread.join()
    assert started == [1]


def test_longest_path_is_the_warm_up_bound():
    from distshap.kernels.cuda.runtime.prepare import longest_path
    from distshap.warmup import chain_ensemble, longest_path_bound

    import tiny

    ensembles = [chain_ensemble(3, 3), chain_ensemble(40, 45), chain_ensemble(10, 4),
                 tiny.random_ensemble(2, n_features=9, n_trees=5, depth=5)]  # fmt: skip
    for ensemble in ensembles:
        assert longest_path(ensemble) == longest_path_bound(ensemble)


_SIM_SCRIPT = r"""
import numpy as np
import tiny
from distshap.kernels import prepare
from distshap.kernels.cuda import shap_values
from distshap.kernels.cuda.runtime import caches
from distshap.kernels.cuda.runtime import model as km
from distshap.kernels.margin import margin_model
from distshap.packed import build_packed_model
from distshap.paths import extract_paths
from distshap.plan.config import config_context

ensemble = tiny.random_ensemble(3, n_features=5, n_trees=3, depth=3)
packed = build_packed_model(extract_paths(ensemble), margin=margin_model(ensemble))
X = tiny.random_rows(4, ensemble, n=6).astype(np.float32)

def prepared():
    p = prepare.Preparation("cuda", True, True)
    p._then("context", "cuda", True)
    p.loaded(ensemble)
    p.packed(packed)
    return p

with config_context(small_max_paths=0):  # the lane route (device model, plan, kernels)
    want = shap_values(packed, X)
    caches.clear_cache()
    p = prepared()
    prepare.wait()
    assert p.error is None, repr(p.error)
    assert set(p.seconds) == {"context", "kernels", "device_model"}, p.seconds
    assert len(caches._MODELS) == 1
    made = next(iter(caches._MODELS.values()))
    assert any(k[0] == "shap" for k in made._forms if isinstance(k, tuple)), list(made._forms)
    assert "margin" in made._forms
    assert km.device_model(packed) is made  # the call finds it
    got = shap_values(packed, X)
    assert got.tobytes() == want.tobytes()

    caches.clear_cache()  # a failure in the thread: the call meets and raises it itself
    real = km.lane_arrays
    def broken(*args, **kwargs):
        raise ValueError("lane arrays broken")
    km.lane_arrays = broken
    p = prepared()
    prepare.wait()
    assert isinstance(p.error, ValueError) and "broken" in str(p.error), repr(p.error)
    try:
        shap_values(packed, X)
    except ValueError as exc:
        assert "lane arrays broken" in str(exc)
    else:
        raise AssertionError("the call did not raise")
    km.lane_arrays = real
    assert shap_values(packed, X).tobytes() == want.tobytes()
print("SIMULATOR-OK")
"""


def test_stages_make_the_device_model_the_call_uses_under_cuda_simulator():
    assert_simulator_ok(_SIM_SCRIPT, timeout=600)


# ---- on the GPU: the explainer's first call after a preparation ----------------------------


def _model_file(tmp_path, rounds: int = 30):
    import xgboost as xgb

    rng = np.random.default_rng(3)
    X = rng.random((400, 6)).astype(np.float32)
    y = X[:, 0] * 2 + X[:, 1] * X[:, 2] + rng.normal(0, 0.1, 400)
    booster = xgb.train({"max_depth": 6, "eta": 0.3}, xgb.DMatrix(X, label=y), rounds)
    path = str(tmp_path / "model.ubj")
    booster.save_model(path)
    return path, X


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="no CUDA GPU visible (run on the GPU host)")
def test_first_call_after_preparation_gives_the_bits_of_one_without(tmp_path):
    import distshap
    from distshap.kernels.cuda import clear_cache
    from distshap.kernels.cuda.runtime import caches

    path, X = _model_file(tmp_path)
    small = os.path.getsize(path) - 1
    with config_context(small_max_paths=0, saved_build_bytes=0):
        clear_cache()
        plain = distshap.TreeExplainer(path, backend="cuda")  # not larger: no preparation
        want = plain.shap_values(X).copy()
        clear_cache()
        with config_context(large_model_file_bytes=small):
            prepared = distshap.TreeExplainer(path, backend="cuda")
            prepare.wait()
            assert len(caches._MODELS) == 1  # the device model, made by the preparation
            got = prepared.shap_values(X)
    assert want.tobytes() == got.tobytes()


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="no CUDA GPU visible (run on the GPU host)")
def test_an_error_in_the_preparation_is_raised_by_the_first_call(tmp_path, monkeypatch):
    import distshap
    from distshap.kernels.cuda import clear_cache
    from distshap.kernels.cuda.runtime import model as km

    path, X = _model_file(tmp_path)

    def broken(*args, **kwargs):
        raise ValueError("lane arrays broken")

    monkeypatch.setattr(km, "lane_arrays", broken)
    seen = []
    start = prepare.start
    monkeypatch.setattr(prepare, "start", lambda *a: seen.append(start(*a)) or seen[-1])
    with config_context(small_max_paths=0, saved_build_bytes=0,
                        large_model_file_bytes=os.path.getsize(path) - 1):  # fmt: skip
        clear_cache()
        explainer = distshap.TreeExplainer(path, backend="cuda")
        with pytest.raises(ValueError, match="lane arrays broken"):
            explainer.shap_values(X)
    assert seen and seen[0].active and isinstance(seen[0].error, ValueError)


def test_saved_margin_arrays_are_compared_bit_for_bit_in_pieces():
    a = np.arange(5 * (1 << 20), dtype=np.float64)  # 40 MB: three pieces, the last short
    for where in (0, a.size // 2, a.size - 1):
        b = a.copy()
        b[where] = -b[where] if b[where] else -0.0  # -0.0 == 0.0, but not its bits
        assert not build_cache._same({"x": a}, {"x": b})
    assert build_cache._same({"x": a, "y": a[:3]}, {"x": a.copy(), "y": a[:3].copy()})
    assert not build_cache._same({"x": a}, {"x": a.astype(np.float32)})
