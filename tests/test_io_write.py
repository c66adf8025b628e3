"""Outputs never lose data (issue 12 items 7 and 8).

An output is written under a temporary name and renamed into place when complete: a failure
midway (an exception, a full disk, SIGTERM, SIGKILL) leaves the previous output byte for byte
and nothing under the output's name that opens as valid. ``-o`` never replaces, contains or
lies inside an input; an existing output is replaced only with ``--overwrite`` and only when
distshap could have written it; nothing distshap did not write is deleted.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import textwrap
import types

import numpy as np
import pandas as pd
import pytest

from distshap import io
from distshap.cli import main
from distshap.explainer import TreeExplainer
from distshap.io import staging as io_staging
from distshap.io import write as io_write

from xgb_models import build_regression

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> dict:
    booster, X = build_regression()
    d = tmp_path_factory.mktemp("safety")
    path = str(d / "model.json")
    booster.save_model(path)
    return {
        "path": path,
        "X": X,
        "phi": TreeExplainer(path, layout="xgboost", backend="cpu").shap_values(X),
    }


def _snapshot(root) -> dict:
    """Every file under ``root`` (a file or directory) -> its bytes."""
    root = str(root)
    if os.path.isfile(root):
        return {"": open(root, "rb").read()}
    out = {}
    for base, _dirs, names in os.walk(root):
        for name in names:
            full = os.path.join(base, name)
            out[os.path.relpath(full, root)] = open(full, "rb").read()
    return out


def _staged_names(directory) -> list[str]:
    return sorted(n for n in os.listdir(directory) if ".distshap-" in n)


def _refused(capsys, argv: list[str], *needles: str) -> None:
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1, err
    for needle in needles:
        assert needle in err, err


# ------------------------------------------------------------------------------------------
# item 8: inputs are never overwritten, existing outputs only with --overwrite
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]])
def test_output_equal_to_input_is_refused(model, tmp_path, capsys, overwrite):
    data = tmp_path / "rows.npy"
    np.save(data, model["X"])
    before = data.read_bytes()
    _refused(capsys, ["explain", model["path"], str(data), "-o", str(data), *overwrite],
             "rows.npy", "is the input")  # fmt: skip
    assert data.read_bytes() == before


def test_zarr_output_on_an_input_directory_is_refused(model, tmp_path, capsys):
    """A directory named ``in.zarr`` holding the input Parquet is never wiped."""
    pytest.importorskip("zarr")
    d = tmp_path / "in.zarr"
    d.mkdir()
    pd.DataFrame(model["X"]).rename(columns=str).to_parquet(d / "rows.parquet")
    before = _snapshot(d)
    for data in (str(d), str(d / "rows.parquet"), str(d / "*.parquet")):
        for extra in ([], ["--overwrite"]):
            argv = ["explain", model["path"], data, "-o", str(d), *extra]
            _refused(capsys, argv, "in.zarr", "input")
    assert _snapshot(d) == before


def test_output_inside_input_directory_or_glob_is_refused(model, tmp_path, capsys):
    d = tmp_path / "parts"
    d.mkdir()
    np.save(d / "a.npy", model["X"])
    _refused(capsys, ["explain", model["path"], str(d), "-o", str(d / "shap.npy")],
             "inside the input directory")  # fmt: skip
    _refused(capsys, ["explain", model["path"], str(d / "*.npy"), "-o", str(d / "shap.npy")],
             "matches the input glob")  # fmt: skip
    assert sorted(os.listdir(d)) == ["a.npy"]


@pytest.mark.parametrize("fmt", ["npy", "parquet", "zarr"])
def test_existing_output_needs_overwrite_and_is_replaced_whole(model, tmp_path, capsys, fmt):
    if fmt == "zarr":
        zarr = pytest.importorskip("zarr")
    data = tmp_path / "rows.npy"
    np.save(data, model["X"][:50])
    out = tmp_path / f"shap.{fmt}"
    argv = ["explain", model["path"], str(data), "-o", str(out), "--no-progress"]
    assert main(argv) == 0
    first = _snapshot(out)
    _refused(capsys, argv, f"shap.{fmt}", "already exists", "--overwrite")
    assert _snapshot(out) == first
    np.save(data, model["X"])  # more rows now: the replacement must be whole
    assert main([*argv, "--overwrite"]) == 0
    if fmt == "npy":
        got = np.load(out)
    elif fmt == "parquet":
        got = pd.read_parquet(out).to_numpy()
    else:
        got = zarr.open_array(str(out), mode="r")[:]
    np.testing.assert_array_equal(got, model["phi"])
    assert _staged_names(tmp_path) == []


@pytest.mark.parametrize("fmt", ["npy", "parquet", "zarr"])
def test_overwrite_never_replaces_what_distshap_did_not_write(model, tmp_path, capsys, fmt):
    data = tmp_path / "rows.npy"
    np.save(data, model["X"])
    out = tmp_path / f"notes.{fmt}"
    if fmt == "zarr":
        pytest.importorskip("zarr")
        out.mkdir()  # looks like a Zarr array, but holds a file Zarr did not write
        (out / "zarr.json").write_text("{}")
        (out / "my_notes.txt").write_text("keep me")
        needle = "my_notes.txt"
    else:
        out.write_text("a text file the user keeps under this name\n")
        needle = "not a"
    before = _snapshot(out)
    argv = ["explain", model["path"], str(data), "-o", str(out)]
    for extra in ([], ["--overwrite"]):
        _refused(capsys, [*argv, *extra], f"notes.{fmt}", needle)
    assert _snapshot(out) == before


def test_plot_output_follows_the_same_rules(model, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    data = tmp_path / "rows.npy"
    np.save(data, model["X"])
    out = tmp_path / "summary.png"
    argv = ["plot", "summary", model["path"], str(data), "-o", str(out), "--dpi", "30"]
    assert main(argv) == 0
    png = out.read_bytes()
    assert png.startswith(b"\x89PNG")
    _refused(capsys, argv, "summary.png", "already exists")
    assert out.read_bytes() == png
    assert main([*argv, "--overwrite", "--kind", "bar"]) == 0
    assert out.read_bytes().startswith(b"\x89PNG") and out.read_bytes() != png
    assert _staged_names(tmp_path) == []


# ------------------------------------------------------------------------------------------
# item 7: a failed write keeps the previous output and leaves nothing valid behind
# ------------------------------------------------------------------------------------------


class _SyncClient:
    """Stands in for a distributed Client: computes in this thread."""

    def compute(self, collection):
        return types.SimpleNamespace(result=lambda: collection.compute(scheduler="sync"))


def _failing_result(values: np.ndarray, fail_block: int):
    """A dask array of ``values`` in 4-row chunks whose chunk ``fail_block`` raises ENOSPC."""
    import dask.array as da

    def block(x, block_info=None):
        if block_info[0]["chunk-location"][0] == fail_block:
            raise OSError(errno.ENOSPC, "No space left on device (injected)")
        return x

    chunks = (4,) + values.shape[1:]
    return da.from_array(values, chunks=chunks).map_blocks(block, dtype=values.dtype)


@pytest.mark.parametrize("fmt", ["npy", "parquet", "zarr"])
def test_failure_midway_keeps_previous_output(model, tmp_path, fmt):
    if fmt == "zarr":
        pytest.importorskip("zarr")
    out = str(tmp_path / f"shap.{fmt}")
    names = [f"f{j}" for j in range(model["X"].shape[1])]
    io.write_array(model["phi"], out, fmt, names, 1, expected_value=0.5)
    before = _snapshot(out)
    new = model["phi"] * 2
    with pytest.raises(OSError, match="No space left"):
        io.write_dask(
            _failing_result(new, fail_block=5), out, fmt, names, 1, _SyncClient(),
            expected_value=0.5, overwrite=True,
        )  # fmt: skip
    assert _snapshot(out) == before
    assert _staged_names(tmp_path) == []


def test_npy_writer_failing_in_a_write_keeps_previous_output(model, tmp_path, monkeypatch):
    out = str(tmp_path / "shap.npy")
    io.write_array(model["phi"], out, "npy", ["a"] * 6, 1)
    before = _snapshot(out)
    calls = []
    real = io_write._NpyWriter.write

    def full_disk(self, block):
        calls.append(len(block))
        if len(calls) == 3:
            raise OSError(errno.ENOSPC, "No space left on device (injected)")
        real(self, block)

    monkeypatch.setattr(io_write._NpyWriter, "write", full_disk)
    with pytest.raises(OSError, match="No space left"):
        io.write_array(model["phi"] + 1, out, "npy", ["a"] * 6, 1, block_rows=50, overwrite=True)
    assert len(calls) == 3
    assert _snapshot(out) == before
    assert _staged_names(tmp_path) == []


def test_an_error_naming_another_file_is_not_called_a_failed_write(model, tmp_path):
    """An input a block could not read (e.g. on a worker) is named as it is, not as OUT."""
    out = str(tmp_path / "shap.npy")

    def blocks():
        yield model["phi"][:4]
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", "rows-7.csv")

    with pytest.raises(FileNotFoundError) as info:
        io_write.write_blocks(blocks(), out, "npy", len(model["phi"]), model["phi"].shape[1:])
    assert info.value.filename == "rows-7.csv" and "writing OUT" not in str(info.value)
    assert _staged_names(tmp_path) == [] and not (tmp_path / "shap.npy").exists()


def test_cli_failure_keeps_previous_output(model, tmp_path, capsys, monkeypatch):
    data = tmp_path / "rows.npy"
    np.save(data, model["X"])
    out = tmp_path / "shap.parquet"
    argv = ["explain", model["path"], str(data), "-o", str(out), "--no-progress"]
    assert main(argv) == 0
    before = _snapshot(out)

    def broken(self, block):
        raise OSError(errno.EIO, "Input/output error (injected)")

    monkeypatch.setattr(io_write._ParquetWriter, "write", broken)
    assert main([*argv, "--overwrite"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Input/output error" in err and "shap.parquet" in err
    assert _snapshot(out) == before
    assert _staged_names(tmp_path) == []


_SLOW_WRITER = """
import sys, time
import numpy as np
from distshap.io import write as w

real = w._NpyWriter.write
def slow(self, block):
    real(self, block)
    self.fh.flush()
    print("wrote", flush=True)
    time.sleep(60)
w._NpyWriter.write = slow
from distshap.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _start_slow_cli(tmp_path, argv: list[str]) -> subprocess.Popen:
    script = tmp_path / "slow_cli.py"
    script.write_text(textwrap.dedent(_SLOW_WRITER))
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen(
        [sys.executable, str(script), *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=env,
    )  # fmt: skip
    assert proc.stdout.readline().strip() == "wrote", proc.stderr.read()
    return proc


def test_sigterm_mid_write_keeps_previous_output_and_cleans_up(model, tmp_path):
    data = tmp_path / "rows.npy"
    np.save(data, model["X"])
    out = tmp_path / "shap.npy"
    np.save(out, np.zeros((3, 7), np.float32))  # a previous output
    before = _snapshot(out)
    argv = ["explain", model["path"], str(data), "-o", str(out), "--overwrite", "--no-progress"]
    proc = _start_slow_cli(tmp_path, argv)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert "terminated" in err
    assert _snapshot(out) == before
    assert _staged_names(tmp_path) == []


def test_sigkill_mid_write_leaves_nothing_valid_and_next_run_cleans_up(model, tmp_path):
    data = tmp_path / "rows.npy"
    np.save(data, model["X"])
    out = tmp_path / "shap.npy"
    np.save(out, np.zeros((3, 7), np.float32))
    before = _snapshot(out)
    argv = ["explain", model["path"], str(data), "-o", str(out), "--overwrite", "--no-progress"]
    proc = _start_slow_cli(tmp_path, argv)
    proc.kill()
    proc.communicate(timeout=60)
    assert _snapshot(out) == before
    left = _staged_names(tmp_path)
    assert len(left) == 1 and str(proc.pid) in left[0]
    with pytest.raises(ValueError):  # its header is written last: not a NumPy file
        np.load(tmp_path / left[0])
    assert main(argv) == 0  # the next write to the same output removes the leftover
    np.testing.assert_array_equal(np.load(out), model["phi"])
    assert _staged_names(tmp_path) == []


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_stale_cleanup_puts_back_an_output_moved_aside(tmp_path):
    """A run killed between moving the old Zarr aside and renaming the new one in."""
    final = tmp_path / "shap.zarr"
    stem = f".shap.zarr.distshap-{_dead_pid()}-0123abcd-{io_staging._HOST}"
    old = tmp_path / (stem + ".old")
    old.mkdir()
    (old / "zarr.json").write_text("{}")
    new = tmp_path / (stem + ".tmp")
    new.mkdir()
    (new / "zarr.json").write_text("{}")
    other = tmp_path / ".shap.zarr.distshap-1-0123abcd-otherhost.tmp"  # another host's: kept
    other.write_text("")
    assert sorted(io_staging.remove_stale(str(final))) == sorted([old.name, new.name])
    assert (final / "zarr.json").read_text() == "{}"
    assert sorted(os.listdir(tmp_path)) == sorted(["shap.zarr", other.name])


def test_stale_cleanup_spares_a_running_writer(tmp_path):
    """A temporary of a process that still runs (this one) is not touched."""
    live = tmp_path / f".o.npy.distshap-{os.getpid()}-0123abcd-{io_staging._HOST}.tmp"
    live.write_bytes(b"x")
    with io_staging.staged_output(str(tmp_path / "o.npy"), "npy") as tmp, open(tmp, "wb") as fh:
        np.save(fh, np.ones(2))
    assert live.exists() and np.load(tmp_path / "o.npy").tolist() == [1.0, 1.0]
