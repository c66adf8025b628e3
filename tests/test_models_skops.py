"""scikit-learn models in skops files: loaded with an explicit list of trusted types, explained
bit for bit as the model in memory (Python and the command line), anything else refused."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from distshap import TreeExplainer
from distshap.cli import main
from distshap.models import UnsupportedModelError, load_model

sio = pytest.importorskip("skops.io")
ensemble = pytest.importorskip("sklearn.ensemble")


class Gadget:
    """A type skops does not trust and distshap does not list."""

    def __init__(self) -> None:
        self.value = 1


def _data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    X = rng.random((120, 4))
    X[:, 3] = rng.integers(0, 4, 120)
    return X, X[:, 0] + X[:, 1] * X[:, 2] - 0.2 * X[:, 3]


def _models() -> dict:
    X, y = _data()
    return {
        "forest": ensemble.RandomForestRegressor(4, max_depth=3, random_state=0).fit(X, y),
        "gbc": ensemble.GradientBoostingClassifier(n_estimators=4, max_depth=2).fit(X, y > 0.3),
        "hgb_cat": ensemble.HistGradientBoostingRegressor(max_iter=4, categorical_features=[3]).fit(
            X, y
        ),
    }


@pytest.mark.parametrize("kind", ["forest", "gbc", "hgb_cat"])
def test_skops_file_explains_as_the_model_in_memory(tmp_path, kind, capsys):
    model = _models()[kind]
    path = tmp_path / "model.skops"
    sio.dump(model, path)
    X = _data()[0][:30]
    expected = TreeExplainer(model, layout="xgboost", backend="cpu").shap_values(X)
    from_file = TreeExplainer(str(path), layout="xgboost", backend="cpu").shap_values(X)
    assert np.array_equal(from_file, expected)
    assert load_model(str(path)).model_kind == load_model(model).model_kind
    if kind != "forest":
        return
    np.save(tmp_path / "X.npy", X)
    out = tmp_path / "values.npy"
    args = ["explain", str(path), str(tmp_path / "X.npy"), "-o", str(out), "--backend", "cpu"]
    assert main(args) == 0
    assert np.array_equal(np.load(out), expected)  # the command line writes XGBoost's layout
    assert main(["info", str(path)]) == 0
    assert "sklearn:RandomForestRegressor" in capsys.readouterr().out


def test_untrusted_type_is_refused_naming_file_types_and_fix(tmp_path, capsys):
    model = _models()["forest"]
    model.gadget = Gadget()
    path = tmp_path / "odd.skops"
    sio.dump(model, path)
    with pytest.raises(UnsupportedModelError) as err:
        load_model(str(path))
    message = str(err.value)
    assert str(path) in message and f"{__name__}.Gadget" in message
    assert "skops.io.dump(model, 'model.skops')" in message and "\n" not in message
    assert main(["info", str(path)]) == 2
    assert "Gadget" in capsys.readouterr().err


def test_other_objects_in_skops_files_are_refused_before_loading(tmp_path):
    pipeline = pytest.importorskip("sklearn.pipeline")
    path = tmp_path / "pipe.skops"
    sio.dump(pipeline.make_pipeline(_models()["forest"]), path)
    with pytest.raises(UnsupportedModelError, match=r"holds a sklearn\.pipeline\.Pipeline"):
        load_model(str(path))


def test_pickled_sklearn_model_stays_refused_and_points_at_skops(tmp_path):
    path = tmp_path / "model.pkl"
    path.write_bytes(pickle.dumps(_models()["forest"]))
    with pytest.raises(UnsupportedModelError, match="never unpickles") as err:
        load_model(str(path))
    assert "skops.io.dump" in str(err.value)
