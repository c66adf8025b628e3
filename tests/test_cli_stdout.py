"""The command line's stdout: a reader that closes the pipe early, and ``info`` without a GPU.

Each case is a real ``python -m distshap.cli`` process: the pipe's read end is closed before
the command writes, and CUDA is hidden from the process that must see no GPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from xgb_models import build_regression

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("cli_stdout")
    booster, X = build_regression()
    out = {"model": str(root / "model.json"), "npy": str(root / "X.npy"), "dir": root}
    booster.save_model(out["model"])
    np.save(out["npy"], np.asarray(X[:50], dtype=np.float32))
    return out


def _env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    env["DISTSHAP_KERNEL_COSTS"] = "none"
    return {**env, **extra}


def _closed_stdout(*args: str) -> subprocess.CompletedProcess:
    """Run the command with stdout a pipe whose reader has already gone."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(
            [sys.executable, "-m", "distshap.cli", *args],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(),
            timeout=300,
        )
    finally:
        os.close(write_end)


@pytest.mark.parametrize("extra", [[], ["--json"]])
def test_info_into_a_closed_pipe_exits_quietly(files, extra):
    proc = _closed_stdout("info", files["model"], *extra)
    assert proc.returncode in (0, 141), proc.stderr
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr
    assert "Broken pipe" not in proc.stderr and "Exception ignored" not in proc.stderr


def test_explain_into_a_closed_pipe_exits_quietly_with_its_output_written(files):
    out = files["dir"] / "values.npy"
    proc = _closed_stdout("explain", files["model"], files["npy"], "-o", str(out), "--local")
    assert proc.returncode in (0, 141), proc.stderr
    assert "Traceback" not in proc.stderr and "Broken" not in proc.stderr
    assert np.load(out).shape[0] == 50  # the values were complete before the summary line


def _info(model: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "distshap.cli", "info", model, *extra],
        capture_output=True,
        text=True,
        env=_env(CUDA_VISIBLE_DEVICES=""),
        timeout=300,
    )


def test_info_without_a_gpu_predicts_only_for_a_named_device_kind(files):
    plain = _info(files["model"])
    assert plain.returncode == 0, plain.stderr
    assert "rows/s" not in plain.stdout and "no speed predicted" in plain.stdout
    assert json.loads(_info(files["model"], "--json").stdout)["cost_model"] is None
    named = _info(files["model"], "--device-kind", "H200", "--rows", "5000")
    assert named.returncode == 0, named.stderr
    assert "SHAP strategy   H200" in named.stdout and "rows/s at 5,000 rows" in named.stdout
