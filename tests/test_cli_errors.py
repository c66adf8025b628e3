"""Command-line errors found before any value is computed, and exit codes that say what is on
disk when a run is stopped."""

from __future__ import annotations

import os
import signal
import sys

import numpy as np
import pytest

import distshap.io.staging as staging
from distshap.cli import main
from distshap.explainer import TreeExplainer

from xgb_models import build_regression

pytest.importorskip("matplotlib")


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("cli_errors")
    booster, X = build_regression()
    out = {"model": str(root / "model.json"), "npy": str(root / "X.npy")}
    booster.save_model(out["model"])
    np.save(out["npy"], np.asarray(X[:200], dtype=np.float32))
    return out


@pytest.fixture
def python_signals():
    """Python's own Ctrl-C handler (and the default SIGTERM one) for the test: the CLI's
    handling is under test, not whatever an earlier test in the same worker process left."""
    previous = {
        s: signal.signal(s, h)
        for s, h in ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, signal.SIG_DFL))
    }
    yield
    for sig, handler in previous.items():
        signal.signal(sig, handler)


@pytest.fixture
def no_computing(monkeypatch):
    """Any SHAP computation fails the test: the error must come before it."""

    def refuse(*args, **kwargs):
        raise AssertionError("values were computed before the error")

    import distshap.pair_interactions as pairs

    monkeypatch.setattr(TreeExplainer, "shap_values", refuse)
    monkeypatch.setattr(TreeExplainer, "shap_interaction_values", refuse)
    monkeypatch.setattr(pairs, "interaction_summary", refuse)


@pytest.mark.parametrize(
    "args, message",
    [
        (["plot", "summary", "--dpi", "100000"], "--dpi 100000 makes an image of about"),
        (["plot", "summary", "--dpi", "0"], "--dpi 0 must be > 0"),
        (["plot", "summary", "--max-display", "0"], "--max-display 0 must be >= 1"),
        (["plot", "summary", "--group", "1"], "--group 1: the model has 1 output group"),
        (["plot", "interactions", "--group", "7"], "--group 7: the model has 1 output group"),
        (["plot", "interactions", "--dpi", "100000"], "--dpi 100000"),
        (["plot", "interactions", "--max-display", "1"], "--max-display 1 must be >= 2"),
    ],
)
def test_plot_arguments_refused_before_computing(
    files, tmp_path, capsys, no_computing, args, message
):
    out = tmp_path / "plot.png"
    code = main([*args[:2], files["model"], files["npy"], "-o", str(out), *args[2:]])
    err = capsys.readouterr().err
    assert code == 2, err
    assert message in err and err.count("\n") == 1
    assert not out.exists()


def test_zarr_output_without_zarr(files, tmp_path, capsys, monkeypatch, no_computing):
    monkeypatch.setitem(sys.modules, "zarr", None)  # import zarr raises ImportError
    out = tmp_path / "out.zarr"
    code = main(["explain", files["model"], files["npy"], "-o", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and "pip install zarr" in err
    assert not out.exists()


def test_parquet_output_without_pyarrow(files, tmp_path, capsys, monkeypatch, no_computing):
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    code = main(["explain", files["model"], files["npy"], "-o", str(tmp_path / "o.parquet")])
    assert code == 2 and "needs pyarrow" in capsys.readouterr().err


def test_long_output_name_is_written(files, tmp_path, capsys):
    limit = os.pathconf(tmp_path, "PC_NAME_MAX")
    out = tmp_path / ("v" * (limit - 4) + ".npy")  # the longest name the directory holds
    assert main(["explain", files["model"], files["npy"], "-o", str(out), "--local"]) == 0
    values = np.load(out)
    assert values.shape == (200, np.load(files["npy"]).shape[1] + 1)
    assert sorted(os.listdir(tmp_path)) == [out.name]  # no staged name left behind
    # staged names of long outputs are still found and cleaned after a killed run
    stem = staging._stage_base(str(tmp_path), out.name)
    stale = tmp_path / f".{stem}.distshap-999999999-0123abcd-{staging._HOST}.tmp"
    stale.write_bytes(b"")
    assert staging.remove_stale(str(out)) == [stale.name]
    capsys.readouterr()


def test_too_long_output_name_refused_before_computing(files, tmp_path, capsys, no_computing):
    limit = os.pathconf(tmp_path, "PC_NAME_MAX")
    out = tmp_path / ("v" * limit + ".npy")
    code = main(["explain", files["model"], files["npy"], "-o", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and f"allows {limit}" in err and "choose a shorter name" in err


# ------------------------------------------------------------------------------------------
# SIGTERM / Ctrl-C: the exit code says whether the new output is in place
# ------------------------------------------------------------------------------------------


def _explain(files, out) -> list[str]:
    return ["explain", files["model"], files["npy"], "-o", str(out), "--local"]


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signal_before_the_rename_writes_nothing(
    files, tmp_path, capsys, monkeypatch, sig, code, python_signals
):
    real = staging.os.replace

    def stopped(src, dst):
        os.kill(os.getpid(), sig)  # delivered before the rename: nothing moves
        raise AssertionError("the signal did not stop the run")

    out = tmp_path / "o.npy"
    monkeypatch.setattr(staging, "_signals_deferred", _no_deferral)
    monkeypatch.setattr(staging.os, "replace", stopped)
    assert main(_explain(files, out)) == code
    monkeypatch.setattr(staging.os, "replace", real)
    assert "nothing was written" in capsys.readouterr().err
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_during_the_rename_keeps_the_new_output(
    files, tmp_path, capsys, monkeypatch, sig, python_signals
):
    real = os.replace

    def replace_signalled(src, dst):
        os.kill(os.getpid(), sig)  # arrives while the rename runs: held until it is done
        real(src, dst)

    out = tmp_path / "o.npy"
    monkeypatch.setattr(staging.os, "replace", replace_signalled)
    assert main(_explain(files, out)) == 0
    monkeypatch.setattr(staging.os, "replace", real)
    err = capsys.readouterr().err
    assert "it is complete" in err and "nothing was written" not in err
    assert np.load(out).shape[0] == 200
    assert os.listdir(tmp_path) == ["o.npy"]


def test_signal_after_the_output_is_in_place(files, tmp_path, capsys, monkeypatch, python_signals):
    import distshap.io as io

    real = io.write_array

    def then_terminated(*args, **kwargs):
        real(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGTERM)

    out = tmp_path / "o.npy"
    np.save(out, np.zeros(3, np.float32))  # a previous output, replaced
    monkeypatch.setattr(io, "write_array", then_terminated)
    assert main([*_explain(files, out), "--overwrite"]) == 0
    assert "it is complete" in capsys.readouterr().err
    assert np.load(out).shape[0] == 200


def _no_deferral():
    import contextlib

    return contextlib.nullcontext()


def test_unwritable_output_directory_refused_before_computing(
    files, tmp_path, capsys, monkeypatch, no_computing
):
    real = os.access
    monkeypatch.setattr(
        os, "access", lambda p, mode: False if str(p) == str(tmp_path) else real(p, mode)
    )
    code = main(["explain", files["model"], files["npy"], "-o", str(tmp_path / "o.npy")])
    assert code == 2 and "is not writable" in capsys.readouterr().err
