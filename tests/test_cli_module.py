"""``python -m distshap`` runs the command line as the ``distshap`` script does."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str) -> subprocess.CompletedProcess:
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    )
    return subprocess.run(
        [sys.executable, "-m", "distshap", *args],
        capture_output=True, text=True, timeout=120, env=env, cwd=str(ROOT / "tests"),
    )  # fmt: skip


def test_python_m_distshap_runs_the_command_line():
    done = _run("--help")
    assert done.returncode == 0, done.stderr
    assert "usage: distshap" in done.stdout
    assert "explain" in done.stdout


def test_python_m_distshap_passes_the_exit_code():
    done = _run("explain", "no-such-model.json", "no-such-rows.csv", "-o", "out.npy")
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "does not exist" in done.stderr
