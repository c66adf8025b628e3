"""Input files through the command line: read as the Python API reads the same rows, or refused.

Issue 12 items 2, 6 and 11 (CLI side): a CSV without a header row, short and long rows, a
header-only CSV, a category column on a numeric feature, float64 models (LightGBM) whose rows
must reach :func:`distshap.inputs.prepare_rows` unrounded, and interaction values on a Dask
cluster from Parquet / CSV input. Every CLI result is compared exactly with
:class:`distshap.TreeExplainer` on the same rows; every refusal is one line on stderr with exit
code 2. The CLI runs in this process (``main``) except where its process is the point.
"""

from __future__ import annotations

import csv
import os

import numpy as np
import pandas as pd
import pytest

from distshap.cli import main
from distshap.explainer import TreeExplainer

from xgb_models import build_multiclass, build_regression, stored_categories_model

NAMES = ["age", "bmi", "bp", "s1", "s2", "s3"]


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("inputs")
    booster, X = build_regression()
    out = {"dir": d, "X": X.astype(np.float64)}
    out["plain"] = str(d / "plain.json")
    booster.save_model(out["plain"])
    named = booster.copy()
    named.feature_names = NAMES
    out["named"] = str(d / "named.json")
    named.save_model(out["named"])
    mc, X_mc = build_multiclass()
    out["mc"] = str(d / "mc.json")
    mc.save_model(out["mc"])
    out["X_mc"] = X_mc
    return out


def _refused(capsys, argv: list[str], *needles: str) -> str:
    """Run the CLI, expect exit 2 with one stderr line holding every needle; return it."""
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err
    return err


# ------------------------------------------------------------------------------------------
# CSV (item 6)
# ------------------------------------------------------------------------------------------


def test_csv_without_header_is_refused_not_shortened(models, tmp_path, capsys):
    data = tmp_path / "noheader.csv"
    np.savetxt(data, models["X"], delimiter=",")  # no header row: the first line is data
    out = tmp_path / "out.npy"
    _refused(capsys, ["explain", models["plain"], str(data), "-o", str(out)],
             "noheader.csv", "no header row", "Add a header")  # fmt: skip
    assert not out.exists()


def test_csv_without_header_and_missing_values_is_refused(models, tmp_path, capsys):
    X = models["X"].copy()
    X[0, 2] = np.nan  # an empty first-row field must not make the line pass as a header
    data = tmp_path / "noheader_nan.csv"
    pd.DataFrame(X).to_csv(data, index=False, header=False)
    assert ",," in data.read_text().splitlines()[0]
    _refused(capsys, ["explain", models["plain"], str(data), "-o", str(tmp_path / "o.npy")],
             "noheader_nan.csv", "no header row")  # fmt: skip


def test_csv_with_pandas_integer_column_names_is_read(models, tmp_path):
    data = tmp_path / "intnames.csv"
    pd.DataFrame(models["X"]).to_csv(data, index=False)  # header "0,1,2,3,4,5"
    out = tmp_path / "out.npy"
    assert main(["explain", models["plain"], str(data), "-o", str(out), "--no-progress"]) == 0
    want = TreeExplainer(models["plain"], layout="xgboost", backend="cpu").shap_values(models["X"])
    np.testing.assert_array_equal(np.load(out), want)


def test_csv_header_matching_no_model_name_says_so(models, tmp_path, capsys):
    data = tmp_path / "strange.csv"
    pd.DataFrame(models["X"], columns=list("uvwxyz")).to_csv(data, index=False)
    _refused(capsys, ["explain", models["named"], str(data), "-o", str(tmp_path / "o.npy")],
             "strange.csv", "matches none of the model's feature names", "'age'")  # fmt: skip


def test_header_only_csv_has_no_rows(models, tmp_path, capsys):
    data = tmp_path / "empty.csv"
    data.write_text(",".join(NAMES) + "\n")
    _refused(capsys, ["explain", models["named"], str(data), "-o", str(tmp_path / "o.npy")],
             "empty.csv", "no rows")  # fmt: skip


@pytest.mark.parametrize("fields, what", [(4, "fewer"), (7, "more")])
def test_short_or_long_csv_row_is_refused_with_its_line(models, tmp_path, capsys, fields, what):
    frame = pd.DataFrame(models["X"], columns=NAMES)
    data = tmp_path / f"rows{fields}.csv"
    lines = frame.to_csv(index=False).splitlines()
    bad = 250  # a line well past the first blocks of --chunk-rows 40
    cells = lines[bad - 1].split(",")
    lines[bad - 1] = ",".join((cells + ["1.5"])[:fields])
    data.write_text("\n".join(lines) + "\n")
    out = tmp_path / "o.npy"
    argv = ["explain", models["named"], str(data), "-o", str(out), "--chunk-rows", "40"]
    _refused(capsys, argv, f"rows{fields}.csv", f"line {bad}", f"has {fields} fields", what)
    assert not out.exists()


def test_non_number_in_a_later_block_names_its_line(models, tmp_path, capsys):
    frame = pd.DataFrame(np.tile(models["X"], (5, 1)), columns=NAMES).astype(object)
    frame.iloc[1300, 3] = "n/a?"  # past the first rows, which set the column types
    data = tmp_path / "word.csv"
    frame.to_csv(data, index=False)
    argv = ["explain", models["named"], str(data), "-o", str(tmp_path / "o.npy")]
    _refused(capsys, [*argv, "--chunk-rows", "40"], "word.csv", "line 1302", "'s1'", "n/a?")
    frame.iloc[10, 3] = "n/a?"  # among the first rows: the column is text, refused as the API does
    frame.to_csv(data, index=False)
    _refused(capsys, argv, "word.csv", "'s1'", "dtype")


def test_a_bad_later_block_on_a_local_cluster_is_one_line_on_stderr(models, tmp_path):
    """The workers' log of the failed task stays out of the way (``--verbose`` shows it)."""
    import subprocess
    import sys

    frame = pd.DataFrame(np.tile(models["X"], (5, 1)), columns=NAMES).astype(object)
    frame.iloc[1300, 3] = "n/a?"
    data = tmp_path / "word.csv"
    frame.to_csv(data, index=False)
    argv = [sys.executable, "-m", "distshap", "explain", models["named"], str(data), "-o",
            str(tmp_path / "o.npy"), "--chunk-rows", "40", "--cluster", "--gpus", "0",
            "--workers", "1", "--backend", "cpu", "--no-progress"]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert all(line.startswith("distshap explain: ") for line in lines), proc.stderr
    assert "line 1302" in lines[-1] and "Traceback" not in proc.stderr, proc.stderr
    assert not (tmp_path / "o.npy").exists()


def test_quoted_fields_with_line_separators_and_line_breaks(models, tmp_path, capsys):
    """A quoted text field holding U+2028 or U+0085 is one field of its line; one holding a line
    break is refused, saying so."""
    frame = pd.DataFrame(models["X"], columns=NAMES)
    frame.insert(0, "note", [f'row {i}, "q"\u2028\u0085' for i in range(len(frame))])
    data, out = tmp_path / "notes.csv", tmp_path / "o.npy"
    frame.to_csv(data, index=False, encoding="utf-8")
    assert main(["explain", models["named"], str(data), "-o", str(out), "--no-progress"]) == 0
    want = TreeExplainer(models["named"], layout="xgboost", backend="cpu").shap_values(frame[NAMES])
    np.testing.assert_array_equal(np.load(out), want)
    frame["note"] = 'TV 5" screen'  # a quote inside an unquoted field: text, as pandas reads it
    frame.loc[3, "note"] = 'a "quoted", note'
    frame.to_csv(data, index=False, encoding="utf-8", quoting=csv.QUOTE_MINIMAL)
    data.write_text(data.read_text().replace('"TV 5"" screen"', 'TV 5" screen'))
    assert 'TV 5" screen' in data.read_text()
    assert main(["explain", models["named"], str(data), "-o", str(out), "--overwrite"]) == 0
    np.testing.assert_array_equal(np.load(out), want)
    frame.loc[5, "note"] = "two\nlines"
    frame.to_csv(data, index=False, encoding="utf-8")
    argv = ["explain", models["named"], str(data), "-o", str(tmp_path / "o2.npy")]
    _refused(capsys, argv, "notes.csv", "line 7", "line break")
    lines = data.read_text().split("\n")
    lines[3] = lines[3].replace('"', "").replace("screen", "scr\ren")  # a lone carriage return
    del lines[6:8]
    data.write_text("\n".join(lines))
    _refused(capsys, argv, "notes.csv", "line 4", "carriage return")


def test_csv_empty_fields_are_missing_values(models, tmp_path):
    """``1.5,,2`` is a missing value (NaN), as in the API; blank lines are skipped."""
    X = models["X"].copy()
    X[::7, 1] = np.nan
    X[3, :] = np.nan
    frame = pd.DataFrame(X, columns=NAMES)
    text = frame.to_csv(index=False).replace("\n", "\n\n", 3)  # blank lines after the header
    data = tmp_path / "gaps.csv"
    data.write_text(text)
    out = tmp_path / "o.npy"
    assert main(["explain", models["named"], str(data), "-o", str(out), "--no-progress"]) == 0
    want = TreeExplainer(models["named"], layout="xgboost", backend="cpu").shap_values(frame)
    np.testing.assert_array_equal(np.load(out), want)


def test_csv_files_with_different_headers_are_refused(models, tmp_path, capsys):
    d = tmp_path / "parts"
    d.mkdir()
    pd.DataFrame(models["X"][:10], columns=NAMES).to_csv(d / "a.csv", index=False)
    pd.DataFrame(models["X"][10:], columns=NAMES[::-1]).to_csv(d / "b.csv", index=False)
    _refused(capsys, ["explain", models["named"], str(d), "-o", str(tmp_path / "o.npy")],
             "b.csv", "different header")  # fmt: skip


# ------------------------------------------------------------------------------------------
# category columns (item 2): the CLI refuses what the API refuses
# ------------------------------------------------------------------------------------------


def test_category_column_on_numeric_feature_refused_like_the_api(models, tmp_path, capsys):
    frame = pd.DataFrame(models["X"], columns=NAMES)
    frame["bp"] = pd.Categorical(np.round(frame["bp"]).astype(int))
    explainer = TreeExplainer(models["named"], layout="xgboost", backend="cpu")
    with pytest.raises(TypeError, match="'bp'"):
        explainer.shap_values(frame)
    data = tmp_path / "cat.parquet"
    frame.to_parquet(data)
    out = tmp_path / "o.npy"
    argv = ["explain", models["named"], str(data), "-o", str(out)]
    _refused(capsys, argv, "cat.parquet", "'bp'", "category")
    _refused(capsys, [*argv, "--cluster", "--scheduler", "tcp://127.0.0.1:9"], "cat.parquet")
    assert not out.exists()


def test_csv_labels_of_stored_string_categories_stay_text(tmp_path):
    """Labels "01", "02", "10" (XGBoost >= 3.1 stores them): read as text, coded by label."""
    rng = np.random.default_rng(7)
    labels = ["01", "02", "10"]
    frame = pd.DataFrame(
        {
            "x": rng.normal(size=300),
            "c": pd.Categorical(rng.choice(labels, 300), categories=labels),
        }
    )
    y = frame["x"] + frame["c"].cat.codes.to_numpy()
    model_path = tmp_path / "m.json"
    explainer, _ = stored_categories_model(frame, y, model_path)
    data, out = tmp_path / "d.csv", tmp_path / "o.npy"
    frame.to_csv(data, index=False)
    assert "\n01," in data.read_text() or ",01\n" in data.read_text()
    assert main(["explain", str(model_path), str(data), "-o", str(out), "--no-progress"]) == 0
    np.testing.assert_array_equal(np.load(out), explainer.shap_values(frame))
    # a label the model never saw: the CLI does what the API does with it
    unseen = frame.assign(c=frame["c"].cat.add_categories(["99"]))
    unseen.loc[::10, "c"] = "99"
    unseen.to_csv(data, index=False)
    try:
        want = explainer.shap_values(unseen)
    except (TypeError, ValueError) as err:
        code = main(["explain", str(model_path), str(data), "-o", str(out), "--overwrite"])
        assert code == 2, f"the API refuses ({err}) but the CLI does not"
    else:
        argv = ["explain", str(model_path), str(data), "-o", str(out), "--overwrite"]
        assert main([*argv, "--no-progress"]) == 0
        np.testing.assert_array_equal(np.load(out), want)


def test_csv_labels_that_pandas_reads_as_missing_stay_labels(tmp_path):
    """Labels "NA", "None", "null", "nan" of a stored text category are labels; an empty field
    is a missing value, and "NA" in a numeric column still is one."""
    rng = np.random.default_rng(9)
    labels = ["FR", "NA", "None", "US", "nan", "null"]
    frame = pd.DataFrame(
        {
            "x": rng.normal(size=360),
            "c": pd.Categorical(rng.choice(labels, 360), categories=labels),
        }
    )
    y = frame["x"] + frame["c"].cat.codes.to_numpy() * 0.5
    model_path = tmp_path / "m.json"
    explainer, _ = stored_categories_model(frame, y, model_path, max_depth=4,
                                           max_cat_to_onehot=1)  # fmt: skip
    frame.loc[::7, "c"] = None  # empty fields: missing values
    frame.loc[::11, "x"] = np.nan
    data, out = tmp_path / "d.csv", tmp_path / "o.npy"
    frame.to_csv(data, index=False, na_rep="")
    text = data.read_text().replace("\n,", "\nNA,", 3)  # numeric "NA": a missing value too
    data.write_text(text)
    want = explainer.shap_values(frame)
    for chunks in ([], ["--chunk-rows", "50"]):
        argv = ["explain", str(model_path), str(data), "-o", str(out), "--overwrite", *chunks]
        assert main([*argv, "--no-progress"]) == 0
        np.testing.assert_array_equal(np.load(out), want)


def test_csv_codes_and_labels_of_a_categorical_feature_without_stored_categories(tmp_path, capsys):
    """Codes are read as the codes; text labels cannot be coded and are refused."""
    xgb = pytest.importorskip("xgboost")
    rng = np.random.default_rng(11)
    X = np.column_stack([rng.normal(size=300), rng.integers(0, 4, size=300)]).astype(np.float64)
    y = X[:, 0] + np.array([0.0, 2.0, -1.0, 0.5])[X[:, 1].astype(int)]
    dm = xgb.DMatrix(X, y, feature_types=["q", "c"], enable_categorical=True)
    booster = xgb.train({"max_depth": 3, "max_cat_to_onehot": 1, "nthread": 1}, dm, 6)
    model = tmp_path / "m.json"
    booster.save_model(model)
    explainer = TreeExplainer(str(model), layout="xgboost", backend="cpu")
    assert explainer.packed.feature_categories is None
    data, out = tmp_path / "codes.csv", tmp_path / "o.npy"
    pd.DataFrame(X, columns=["a", "b"]).to_csv(data, index=False)
    assert main(["explain", str(model), str(data), "-o", str(out), "--no-progress"]) == 0
    np.testing.assert_array_equal(np.load(out), explainer.shap_values(X))
    labels = pd.DataFrame({"a": X[:, 0], "b": np.array(list("wxyz"))[X[:, 1].astype(int)]})
    labels.to_csv(tmp_path / "labels.csv", index=False)
    argv = ["explain", str(model), str(tmp_path / "labels.csv"), "-o", str(tmp_path / "p.npy")]
    _refused(capsys, argv, "labels.csv", "'b'", "integer codes")


# ------------------------------------------------------------------------------------------
# float64 models: rows reach prepare_rows unrounded (CSV, Parquet, .npy)
# ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lightgbm_model(tmp_path_factory):
    """A LightGBM model whose float64 thresholds lie between values float32 cannot tell apart.

    ``x0`` takes 100 values ``1 + k * 1e-9`` (one float32), so rows rounded to float32 before
    the model's comparisons would all take one branch of the first split.
    """
    lgb = pytest.importorskip("lightgbm")
    rng = np.random.default_rng(3)
    X = rng.normal(size=(400, 4))
    X[:, 0] = 1 + rng.integers(0, 100, size=400) * 1e-9
    y = 2.0 * (X[:, 0] > 1 + 50e-9) + X[:, 1] + 0.1 * rng.normal(size=400)
    frame = pd.DataFrame(X, columns=["x0", "x1", "x2", "x3"])
    params = {"objective": "regression", "min_data_in_leaf": 5, "verbose": -1, "num_threads": 1}
    booster = lgb.train(params, lgb.Dataset(frame, y), num_boost_round=20)
    path = tmp_path_factory.mktemp("lgb") / "model.txt"
    booster.save_model(str(path))
    rounded = TreeExplainer(str(path), layout="xgboost", backend="cpu").shap_values(
        X.astype(np.float32)
    )
    exact = booster.predict(X, pred_contrib=True)
    assert np.abs(rounded - exact).max() > 0.5  # the data do tell rounding apart
    return str(path), booster, frame


@pytest.mark.parametrize("fmt", ["csv", "parquet", "npy"])
def test_float64_model_rows_are_not_rounded(lightgbm_model, tmp_path, fmt):
    path, booster, frame = lightgbm_model
    data = tmp_path / f"rows.{fmt}"
    if fmt == "csv":
        frame.to_csv(data, index=False)
    elif fmt == "parquet":
        frame.to_parquet(data)
    else:
        np.save(data, frame.to_numpy())
    out = tmp_path / "o.npy"
    assert main(["explain", path, str(data), "-o", str(out), "--no-progress"]) == 0
    got = np.load(out)
    want = TreeExplainer(path, layout="xgboost", backend="cpu").shap_values(frame)
    np.testing.assert_array_equal(got, want)
    contrib = booster.predict(frame, pred_contrib=True)
    np.testing.assert_allclose(got, contrib, rtol=0, atol=1e-5)


def test_lightgbm_names_with_spaces_match_as_in_the_api(tmp_path, capsys):
    """LightGBM stores ``"mean radius"`` as ``mean_radius``; the file's own header matches."""
    lgb = pytest.importorskip("lightgbm")
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer(as_frame=True)
    frame = data.frame.drop(columns="target").iloc[:, :6]
    assert all(" " in c for c in frame.columns)
    params = {"objective": "binary", "verbose": -1, "num_threads": 1}
    booster = lgb.train(params, lgb.Dataset(frame, data.target), num_boost_round=10)
    model, csv, out = tmp_path / "m.txt", tmp_path / "d.csv", tmp_path / "o.npy"
    booster.save_model(str(model))
    frame.assign(label=data.target).to_csv(csv, index=False)
    assert main(["explain", str(model), str(csv), "-o", str(out), "--no-progress"]) == 0
    np.testing.assert_array_equal(
        np.load(out), TreeExplainer(str(model), layout="xgboost").shap_values(frame)
    )
    frame.drop(columns="mean area").to_csv(csv, index=False)
    argv = ["explain", str(model), str(csv), "-o", str(tmp_path / "p.npy")]
    _refused(capsys, argv, "d.csv", "lacks the model's feature column 'mean_area'")


# ------------------------------------------------------------------------------------------
# interaction values on Dask from DataFrame inputs (item 11)
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_interactions_on_dask_from_dataframe_input(models, tmp_path, scheduler, fmt):
    frame = pd.DataFrame(models["X_mc"], columns=[f"c{j}" for j in range(6)])
    data = tmp_path / f"rows.{fmt}"
    frame.to_parquet(data) if fmt == "parquet" else frame.to_csv(data, index=False)
    out = tmp_path / "o.npy"
    argv = ["explain", models["mc"], str(data), "-o", str(out), "--interactions"]
    assert main([*argv, "--scheduler", scheduler, "--chunk-rows", "70", "--no-progress"]) == 0
    want = TreeExplainer(models["mc"], layout="xgboost", backend="cpu").shap_interaction_values(
        frame
    )
    np.testing.assert_array_equal(np.load(out), want)


def test_interactions_on_a_local_cpu_cluster(models, tmp_path):
    """``--gpus 0 --workers 1``: the local cluster distshap starts itself (worker processes)."""
    frame = pd.DataFrame(models["X"], columns=NAMES)
    data = tmp_path / "rows.parquet"
    frame.to_parquet(data)
    out = tmp_path / "o.zarr"
    argv = ["explain", models["named"], str(data), "-o", str(out), "--interactions"]
    assert main([*argv, "--gpus", "0", "--workers", "1", "--no-progress"]) == 0
    zarr = pytest.importorskip("zarr")
    want = TreeExplainer(models["named"], layout="xgboost", backend="cpu").shap_interaction_values(
        frame
    )
    np.testing.assert_array_equal(zarr.open_array(str(out), mode="r")[:], want)
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".")]
