"""CatBoost models on the CUDA kernels, checked against CatBoost's own exported results.

The GPU machine has no ``catboost`` package, so the models travel as CatBoost's JSON export:
where catboost is installed, ``python tests/test_models_catboost_gpu.py DIR`` writes, for each
case of ``tests/test_models_catboost.py``, the model JSON, the rows, CatBoost's ``ShapValues`` and
its raw margins to ``DIR``; the GPU test reads them from ``$DISTSHAP_CATBOOST_FIXTURES`` and skips
when that directory is absent (nothing in git: the fixtures are generated).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

from distshap.kernels import cuda_available

from conftest import to_host

CASES = ("regression", "nan_mode_max", "binary", "multiclass", "depthwise")
FIXTURES = Path(os.environ.get("DISTSHAP_CATBOOST_FIXTURES", "tests/.catboost_fixtures"))


def exported_shap_values(path: Path, X: np.ndarray) -> np.ndarray:
    """CatBoost's ShapValues of the model *as exported* to JSON (reloaded from ``path``).

    For non-symmetric trees (Depthwise, Lossguide) the fitted model's ShapValues differ from
    those of its JSON export reloaded into CatBoost (the export keeps other leaf weights); distshap
    reads the export, so that is the reference.
    """
    import catboost as cb

    model = cb.CatBoost()
    model.load_model(str(path), format="json")
    return np.asarray(model.get_feature_importance(cb.Pool(X), type="ShapValues"))


def export_fixtures(out: Path) -> None:
    """Write every case's JSON model, rows, ShapValues and raw margins (needs catboost)."""
    from test_models_catboost import _fit

    for case in CASES:
        model, Xt = _fit(case)
        d = out / case
        d.mkdir(parents=True, exist_ok=True)
        model.save_model(str(d / "model.json"), format="json")
        np.save(d / "rows.npy", Xt)
        np.save(d / "shap.npy", exported_shap_values(d / "model.json", Xt))
        raw = model.predict(Xt, prediction_type="RawFormulaVal")
        np.save(d / "raw.npy", np.asarray(raw).reshape(len(Xt), -1))


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="no CUDA GPU visible (run on the GPU host)")
@pytest.mark.skipif(not FIXTURES.is_dir(), reason="no CatBoost fixtures (see module docstring)")
@pytest.mark.parametrize("case", CASES)
def test_catboost_export_on_gpu_matches_catboost(case):
    from distshap import TreeExplainer
    from distshap.models.catboost import load_catboost_json

    d = FIXTURES / case
    ens = load_catboost_json(str(d / "model.json"))
    Xt, ref, raw = (np.load(d / f"{name}.npy") for name in ("rows", "shap", "raw"))
    gpu = TreeExplainer(ens, layout="xgboost", backend="cuda")
    ours = to_host(gpu.shap_values(Xt)).astype(np.float64)
    scale = np.abs(raw).max()
    np.testing.assert_allclose(ours, ref.reshape(ours.shape), rtol=0, atol=1e-4 * scale)
    np.testing.assert_allclose(ours.sum(axis=-1).reshape(raw.shape), raw, rtol=0,
                               atol=1e-5 * scale)  # fmt: skip
    inter = to_host(gpu.shap_interaction_values(Xt)).astype(np.float64)
    cpu = TreeExplainer(ens, layout="xgboost", backend="cpu").shap_interaction_values(Xt)
    np.testing.assert_allclose(inter, cpu, rtol=0, atol=2e-6 * max(1.0, np.abs(cpu).max()))
    np.testing.assert_allclose(inter.sum(axis=-1), ours, rtol=0, atol=1e-5 * scale)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    export_fixtures(Path(sys.argv[1]))
