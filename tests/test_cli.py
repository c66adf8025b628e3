"""The ``distshap`` command line, run as a real process, on files these tests write.

Every output is compared exactly with :class:`distshap.TreeExplainer` on the same rows. Dask
runs use one in-process CPU cluster for the whole module (``--scheduler``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

import distshap
from distshap.cli import main
from distshap.explainer import TreeExplainer

from xgb_models import (
    build_categorical,
    build_multiclass,
    build_regression,
    stored_categories_model,
)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAMES = ["age", "bmi", "bp", "s1", "s2", "s3"]


def run_cli(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """``python -m distshap.cli ARGS`` with the repository on ``PYTHONPATH``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run(
        [sys.executable, "-m", "distshap.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}\nstdout:\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict:
    """Models (plain, named features, multiclass) and data files in every input format."""
    d = tmp_path_factory.mktemp("cli")
    booster, X = build_regression()
    out = {"dir": d, "X": X}
    out["reg"] = str(d / "reg.json")
    booster.save_model(out["reg"])
    named = booster.copy()
    named.feature_names = NAMES
    out["named"] = str(d / "named.json")
    named.save_model(out["named"])
    mc_booster, X_mc = build_multiclass()
    out["mc"] = str(d / "mc.json")
    mc_booster.save_model(out["mc"])
    out["X_mc"] = X_mc

    out["npy"] = str(d / "X.npy")
    np.save(out["npy"], X)
    parts = d / "parts"
    parts.mkdir()
    for i, start in enumerate(range(0, len(X), 120)):  # 3 files: 120, 120, 60 rows
        np.save(parts / f"part{i}.npy", X[start : start + 120].astype(np.float64))
    out["npy_glob"] = str(parts / "part*.npy")
    # named columns in another order plus a label column: selected and ordered by name
    frame = pd.DataFrame(X, columns=NAMES)[NAMES[::-1]]
    frame.insert(2, "label", np.arange(len(X), dtype=np.float64))
    out["parquet"] = str(d / "named.parquet")
    frame.to_parquet(out["parquet"])
    out["frame"] = frame
    mc_frame = pd.DataFrame(X_mc, columns=[f"c{j}" for j in range(X_mc.shape[1])])
    out["csv"] = str(d / "mc.csv")
    mc_frame.to_csv(out["csv"], index=False)
    return out


def test_explain_npy_in_process_matches_explainer(files):
    out = str(files["dir"] / "reg_out.npy")
    proc = run_cli("explain", files["reg"], files["npy"], "-o", out)
    got = np.load(out)
    want = TreeExplainer(files["reg"], layout="xgboost", backend="cpu").shap_values(files["X"])
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    n = len(files["X"])
    assert proc.stdout.startswith(f"{n} rows, ") and "rows/s" in proc.stdout


def test_explain_parquet_columns_by_model_names(files):
    out = str(files["dir"] / "named_out.parquet")
    run_cli("explain", files["named"], files["parquet"], "-o", out, "--local")
    got = pd.read_parquet(out)
    assert list(got.columns) == NAMES + ["bias"]
    explainer = TreeExplainer(files["named"], layout="xgboost", backend="cpu")
    want = explainer.shap_values(files["frame"][NAMES].to_numpy(np.float32))
    np.testing.assert_array_equal(got.to_numpy(), want)
    assert got.dtypes.eq(np.float32).all()


def test_explain_multiclass_csv_to_parquet_and_zarr_on_cluster(files, scheduler):
    out = str(files["dir"] / "mc_out.parquet")
    run_cli("explain", files["mc"], files["csv"], "-o", out, "--scheduler", scheduler)
    got = pd.read_parquet(out)
    explainer = TreeExplainer(files["mc"], layout="xgboost", backend="cpu")
    want = explainer.shap_values(files["X_mc"])  # (n, G, F+1)
    n, groups, width = want.shape
    assert groups == 3
    names = [f"c{j}" for j in range(width - 1)] + ["bias"]
    assert list(got.columns) == [f"{c}[class {k}]" for k in range(groups) for c in names]
    np.testing.assert_array_equal(got.to_numpy().reshape(n, groups, width), want)

    zarr = pytest.importorskip("zarr")
    out = str(files["dir"] / "mc_inter.zarr")
    args = ["--scheduler", scheduler, "--chunk-rows", "70", "--interactions"]
    run_cli("explain", files["mc"], files["npy_glob"], "-o", out, *args)
    stored = zarr.open_array(out, mode="r")
    np.testing.assert_array_equal(stored[:], explainer.shap_interaction_values(files["X"]))
    assert stored.attrs["feature_names"] == [f"f{j}" for j in range(width - 1)]
    np.testing.assert_allclose(stored.attrs["expected_value"], explainer.expected_value)


def test_explain_glob_of_npy_on_cluster_keeps_row_order(files, scheduler):
    out = str(files["dir"] / "glob_out.npy")
    args = ["--scheduler", scheduler, "--chunk-rows", "50", "--no-progress"]
    proc = run_cli("explain", files["reg"], files["npy_glob"], "-o", out, *args)
    want = TreeExplainer(files["reg"], layout="xgboost", backend="cpu").shap_values(files["X"])
    np.testing.assert_array_equal(np.load(out), want)
    assert "1 Dask worker" in proc.stdout


def _assert_one_line_error(proc: subprocess.CompletedProcess, *needles: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_bad_file_is_one_line_error(files):
    bad = files["dir"] / "garbage.parquet"
    bad.write_text("this is not parquet\n")
    out = str(files["dir"] / "never.npy")
    proc = run_cli("explain", files["reg"], str(bad), "-o", out, check=False)
    _assert_one_line_error(proc, "garbage.parquet", "Parquet")
    assert not os.path.exists(out)


def test_feature_count_mismatch_is_one_line_error(files):
    narrow = str(files["dir"] / "narrow.npy")
    np.save(narrow, files["X"][:, :5])
    proc = run_cli("explain", files["reg"], narrow, "-o", str(files["dir"] / "x.npy"), check=False)
    _assert_one_line_error(proc, "narrow.npy", "5 columns", "6 features")


def test_missing_column_is_one_line_error_and_verbose_shows_traceback(files, capsys):
    lacking = str(files["dir"] / "lacking.parquet")
    files["frame"].drop(columns=["s1"]).to_parquet(lacking)
    args = ["explain", files["named"], lacking, "-o", str(files["dir"] / "x.parquet")]
    _assert_one_line_error(run_cli(*args, check=False), "lacking.parquet", "'s1'")
    assert main([*args, "--verbose"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and "'s1'" in err.strip().splitlines()[-1]


def test_interactions_to_parquet_is_usage_error(files, capsys):
    code = main(["explain", files["reg"], files["npy"], "-o", "x.parquet", "--interactions"])
    assert code == 2
    assert ".npy or .zarr" in capsys.readouterr().err


def test_info_json_matches_model(files):
    proc = run_cli("info", files["mc"], "--json")
    info = json.loads(proc.stdout)
    booster, _ = build_multiclass()
    dump = booster.get_dump()
    assert info["model"]["trees"] == len(dump)
    assert info["model"]["leaves"] == sum(tree.count("leaf=") for tree in dump)
    assert info["model"]["output_groups"] == 3 and info["model"]["features"] == 6
    assert info["model"]["max_depth"] <= 3
    hist = info["paths"]["length_histogram"]
    assert sum(hist.values()) == info["paths"]["unique_paths"]
    explainer = TreeExplainer(files["mc"], backend="cpu")
    assert info["tables"]["table_paths"] + info["tables"]["dp_paths"] == explainer.packed.num_paths
    assert info["packing"]["bfd"]["bins"] == explainer.packed.num_bins
    for row in info["packing"].values():
        assert 0 < row["utilisation"] <= 1
    assert info["packing"]["bfd"]["bins"] <= info["packing"]["nf"]["bins"]


def test_info_text(files, capsys):
    assert main(["info", files["named"]]) == 0
    text = capsys.readouterr().out
    for word in ("trees", "unique paths", "NF", "FFD", "BFD", "pattern tables", "age"):
        assert word in text


@pytest.mark.parametrize("model, kind", [("named", "beeswarm"), ("mc", "bar")])
def test_plot_summary_writes_png(files, model, kind, capsys):
    pytest.importorskip("matplotlib")
    out = files["dir"] / f"summary-{model}.png"
    data = files["parquet"] if model == "named" else files["csv"]
    args = ["plot", "summary", files[model], data, "-o", str(out), "--kind", kind, "--dpi", "40"]
    assert main(args) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert capsys.readouterr().out.startswith(f"{len(files['X'])} rows")


def test_progress_batches_give_identical_values(files, monkeypatch):
    import distshap.explainer as explainer_module

    monkeypatch.setattr(explainer_module, "PROGRESS_BATCH_ROWS", 64)
    explainer = TreeExplainer(files["mc"], backend="cpu")
    X = files["X_mc"]
    np.testing.assert_array_equal(explainer.shap_values(X, progress=True), explainer.shap_values(X))
    np.testing.assert_array_equal(
        explainer.shap_interaction_values(X[:100], progress=True),
        explainer.shap_interaction_values(X[:100]),
    )


def test_cli_without_a_bar_runs_batches_with_the_bits_of_one_call(files, monkeypatch):
    """Without a progress bar the CLI still explains a batch of rows at a time (a signal is
    acted on between batches); the file holds the values of one call."""
    import distshap.explainer as explainer_module

    monkeypatch.setattr(explainer_module, "PROGRESS_BATCH_ROWS", 64)
    explainer = TreeExplainer(files["mc"], layout="xgboost", backend="cpu")
    calls = []
    real = TreeExplainer.shap_values

    def counted(self, X, *args, **kwargs):
        calls.append(len(X))
        return real(self, X, *args, **kwargs)

    monkeypatch.setattr(TreeExplainer, "shap_values", counted)
    out = files["dir"] / "batched.npy"
    argv = ["explain", files["mc"], files["csv"], "-o", str(out), "--no-progress", "--overwrite"]
    assert main(argv) == 0
    n = len(files["X_mc"])
    assert calls == [64] * (n // 64) + [n % 64] and n % 64  # (the warm-up is no public call)
    np.testing.assert_array_equal(np.load(out), real(explainer, files["X_mc"]))


def test_cli_batches_refuse_an_output_too_large_for_memory_first(files, monkeypatch, capsys):
    """The whole output's size is checked before the batches run (one batch would fit)."""
    import distshap.explainer as explainer_module
    from distshap import layouts

    monkeypatch.setattr(explainer_module, "PROGRESS_BATCH_ROWS", 64)
    real = layouts.check_output_fits

    def small_machine(n_rows, *args, **kwargs):
        if n_rows > 64:
            raise ValueError(f"{n_rows} rows need more than half of this machine's memory")
        return real(n_rows, *args, **kwargs)

    monkeypatch.setattr(layouts, "check_output_fits", small_machine)
    out = files["dir"] / "too_large.npy"
    argv = ["explain", files["mc"], files["csv"], "-o", str(out), "--no-progress", "--overwrite"]
    assert main(argv) == 2
    assert "more than half of this machine's memory" in capsys.readouterr().err


def test_data_paths_keep_what_the_system_opens(tmp_path, monkeypatch):
    """``link/../rows.npy`` names the file beside the link's target, as the system opens it."""
    from distshap.io.read import resolve

    (tmp_path / "real" / "sub").mkdir(parents=True)
    np.save(tmp_path / "real" / "rows.npy", np.ones((7, 2)))
    np.save(tmp_path / "rows.npy", np.ones((3, 2)))
    (tmp_path / "link").symlink_to(tmp_path / "real" / "sub")
    monkeypatch.chdir(tmp_path)
    fmt, [path] = resolve(os.path.join("link", "..", "rows.npy"))
    assert fmt == "npy" and os.path.isabs(path) and np.load(path).shape == (7, 2)


def test_explain_returns_shap_explanation(files):
    shap = pytest.importorskip("shap")
    explainer = TreeExplainer(files["mc"], backend="cpu")
    frame = pd.DataFrame(files["X_mc"], columns=[f"x{j}" for j in range(6)])
    ex = explainer.explain(frame)
    assert isinstance(ex, shap.Explanation)
    assert ex.values.shape == (len(frame), 6, 3) and ex.base_values.shape == (len(frame), 3)
    np.testing.assert_array_equal(ex.values, explainer.shap_values(files["X_mc"]))
    phi = TreeExplainer(files["mc"], layout="xgboost", backend="cpu").shap_values(files["X_mc"])
    np.testing.assert_array_equal(ex.values, phi[:, :, :-1].transpose(0, 2, 1))
    np.testing.assert_array_equal(ex.base_values, phi[:, :, -1])
    assert list(ex.feature_names) == list(frame.columns)
    named = distshap.TreeExplainer(files["named"], backend="cpu").explain(files["X"])
    assert list(named.feature_names) == NAMES and named.values.shape == files["X"].shape


def test_parquet_category_columns_read_as_values(files):
    booster, frame = build_categorical()  # integer categories 0..k-1: value == training code
    model, data = str(files["dir"] / "cat.json"), files["dir"] / "cat.parquet"
    booster.save_model(model)
    # another category order in the file than at training: codes would be wrong, values are not
    shuffled = frame.copy()
    shuffled["c8"] = shuffled["c8"].cat.reorder_categories([7, 6, 5, 4, 3, 2, 1, 0])
    shuffled.to_parquet(data)
    out = str(files["dir"] / "cat_out.npy")
    run_cli("explain", model, str(data), "-o", out)
    want = TreeExplainer(model, layout="xgboost", backend="cpu").shap_values(frame)
    np.testing.assert_array_equal(np.load(out), want)


def test_first_rows_reads_only_the_chunks_it_needs():
    import dask.array as da

    from distshap.io import first_rows

    data = np.arange(100, dtype=np.float32).reshape(50, 2)
    calls = []

    def tracked(block, block_info=None):
        calls.append(block_info[None]["chunk-location"][0])
        return block

    X = da.from_array(data, chunks=(10, 2)).map_blocks(tracked, dtype=np.float32)
    np.testing.assert_array_equal(first_rows(X, 15), data[:15])
    assert sorted(set(calls)) == [0, 1]
    np.testing.assert_array_equal(first_rows(X, None), data)


def test_categories_coded_by_the_models_training_categories(tmp_path, scheduler):
    """Categories 10/20/30/40 (not 0..k-1): the model's stored encoder gives the codes."""
    rng = np.random.default_rng(5)
    frame = pd.DataFrame(
        {
            "x": rng.normal(size=300).astype(np.float32),
            "c": pd.Categorical(rng.choice([10, 20, 30, 40], 300), categories=[10, 20, 30, 40]),
        }
    )
    y = frame["x"] + frame["c"].astype(float) / 10
    model_path = tmp_path / "m.json"
    explainer, model = stored_categories_model(frame, y, model_path, n_estimators=10)
    frame.to_parquet(tmp_path / "d.parquet")
    out = tmp_path / "o.npy"
    result = run_cli("explain", str(model_path), str(tmp_path / "d.parquet"), "-o", str(out))
    assert result.returncode == 0, result.stderr
    phi = np.load(out)
    margin = model.predict(frame, output_margin=True)
    np.testing.assert_allclose(phi.sum(axis=1), margin, atol=1e-4, rtol=0)
    np.testing.assert_array_equal(phi, explainer.shap_values(frame))
    # the same file as CSV (labels as text) and on a Dask cluster: the same values
    frame.to_csv(tmp_path / "d.csv", index=False)
    out = tmp_path / "o_dask.npy"
    args = ["--scheduler", scheduler, "--chunk-rows", "100", "--no-progress"]
    for data in ("d.parquet", "d.csv"):
        assert main(["explain", str(model_path), str(tmp_path / data), "-o", str(out), *args,
                     "--overwrite"]) == 0  # fmt: skip
        np.testing.assert_array_equal(np.load(out), phi)


def test_catboost_text_categories_in_process_and_on_cluster(tmp_path, scheduler):
    """A CatBoost model with a text category column: the warm-up calls run on values the model
    takes (zeros in its own values), so both routes explain the file."""
    catboost = pytest.importorskip("catboost")
    rng = np.random.default_rng(8)
    frame = pd.DataFrame({"x": rng.normal(size=200), "c": rng.choice(["a", "b", "c"], 200)})
    y = frame["x"] + (frame["c"] == "a") * 2.0
    model = catboost.CatBoostRegressor(iterations=10, depth=3, verbose=False, random_seed=0,
                                       thread_count=1)  # fmt: skip
    model.fit(frame, y, cat_features=[1])
    model_path = str(tmp_path / "cat.json")
    model.save_model(model_path, format="json")
    frame.to_parquet(tmp_path / "d.parquet")
    want = TreeExplainer(model_path, layout="xgboost", backend="cpu").shap_values(frame)
    out = tmp_path / "o.npy"
    run_cli("explain", model_path, str(tmp_path / "d.parquet"), "-o", str(out))
    np.testing.assert_array_equal(np.load(out), want)
    args = ["--scheduler", scheduler, "--no-progress", "--overwrite"]
    assert main(["explain", model_path, str(tmp_path / "d.parquet"), "-o", str(out), *args]) == 0
    np.testing.assert_array_equal(np.load(out), want)
