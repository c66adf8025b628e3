"""A cluster started as a multi-host one is: ``dask scheduler`` and ``dask worker`` processes.

:func:`benchmarks.multihost.separate_cluster` starts them (127.0.0.1 only); distshap reaches
them through ``start_cluster(address)`` and the CLI's ``--scheduler``, and both give the bits
of the in-process explainer. The processes end when the block is left by an exception.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import dask.array as da
import numpy as np
import psutil
import pytest

from benchmarks.multihost import host_commands, separate_cluster
from distshap import TreeExplainer, start_cluster

from xgb_models import build_regression

REPO = Path(__file__).resolve().parents[1]


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie left to a parent that does not reap it does not)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _explain_cli(address: str, model: Path, data: Path, out: Path) -> np.ndarray:
    """The CLI run in ``data``'s folder, naming it relative to there: the workers run in
    another folder (the repository's), so they must be given where the file is."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    argv = [sys.executable, "-m", "distshap.cli", "explain", str(model), data.name, "-o",
            str(out), "--scheduler", address, "--chunk-rows", "70", "--no-progress",
            "--backend", "cpu"]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120,
                          cwd=data.parent)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "on 1 Dask worker(s)" in proc.stdout
    return np.load(out)


def test_host_commands_split_workers_and_gpus_over_hosts(monkeypatch):
    cpu = host_commands("tcp://127.0.0.1:1", 3, 2, gpu=False, threads=2)
    assert [argv[argv.index("--nworkers") + 1] for argv, _ in cpu] == ["2", "1"]
    assert all(env["DISTSHAP_NUM_THREADS"] == "2" for _, env in cpu)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    gpu = host_commands("tcp://127.0.0.1:1", 3, 2, gpu=True)
    assert [env["CUDA_VISIBLE_DEVICES"] for _, env in gpu] == ["0,1", "2"]
    assert all(argv[3:5] == ["cuda", "worker"] for argv, _ in gpu)
    assert all(argv[argv.index("--host") + 1] == "127.0.0.1" for argv, _ in cpu + gpu)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,7,9")  # this process's GPUs, not 0, 1, 2
    hosts = host_commands("tcp://127.0.0.1:1", 3, 2, gpu=True)
    assert [env["CUDA_VISIBLE_DEVICES"] for _, env in hosts] == ["5,7", "9"]
    with pytest.raises(ValueError, match="CUDA_VISIBLE_DEVICES"):
        host_commands("tcp://127.0.0.1:1", 4, 2, gpu=True)


def test_separate_processes_give_the_in_process_bits_and_end_on_error(tmp_path):
    booster, X = build_regression()
    model, data = tmp_path / "model.json", tmp_path / "rows.npy"
    booster.save_model(str(model))
    np.save(data, X)
    expected = TreeExplainer(str(model), layout="xgboost", backend="cpu").shap_values(X)
    pids = []
    with pytest.raises(RuntimeError, match="leaving the block"):
        with separate_cluster(1, 1, gpu=False, start_timeout=60) as address:
            assert address.startswith("tcp://127.0.0.1:")
            with start_cluster(address=address) as client:
                pids = [client.run_on_scheduler(os.getpid), *client.run(os.getpid).values()]
                assert len(pids) == 2 and os.getpid() not in pids
                threads = client.run(lambda: os.environ.get("DISTSHAP_NUM_THREADS"))
                assert list(threads.values()) == ["1"]
                explainer = TreeExplainer(
                    str(model), layout="xgboost", backend="cpu", client=client
                )
                values = explainer.shap_values(da.from_array(X, chunks=(70, -1))).compute()
                assert values.tobytes() == expected.tobytes()
            cli = _explain_cli(address, model, data, tmp_path / "out.npy")
            assert cli.tobytes() == expected.tobytes()
            raise RuntimeError("leaving the block")
    assert pids and not any(_alive(pid) for pid in pids)
    host, port = address.removeprefix("tcp://").rsplit(":", 1)
    with pytest.raises(OSError), socket.create_connection((host, int(port)), timeout=2):
        pass
