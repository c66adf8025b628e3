"""benchmarks/sparse_input.py at a small scale: its measurements run and compare what they claim."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("xgboost")


def test_narrow_case_compares_equal_bits_and_the_peer():
    from benchmarks.sparse_input import main

    report = main(["--cases", "narrow", "--scale", "0.002", "--trees", "5", "--repeats", "1"])
    narrow = report["narrow"]
    assert narrow["bits_equal"] and narrow["rows"] == 200 and narrow["features"] == 50
    assert narrow["max_abs_diff_xgboost"] < 1e-4  # the peer explains the same rows


def test_wide_child_measures_the_used_features_call(tmp_path):
    import scipy.sparse as sp

    from benchmarks.sparse_input import make_csr, train, wide_child

    X, y = make_csr(300, 400, 0.01, seed=3)
    assert X.has_canonical_format and X.shape == (300, 400)
    train(X, y, 300, 5, 3, 1).save_model(str(tmp_path / "m.json"))
    sp.save_npz(tmp_path / "X.npz", X)
    out = wide_child(str(tmp_path / "X.npz"), str(tmp_path / "m.json"))
    assert out["rows"] == 300 and out["stored"] == X.nnz and out["finite"]
    assert 0 < out["used_features"] < 400
    assert out["output_mb"] == pytest.approx(300 * out["used_features"] * 4 / 1e6)
    assert np.isfinite(out["peak_over_input_plus_output"])
