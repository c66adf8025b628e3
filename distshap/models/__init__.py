"""Model loaders: every supported library's model -> one canonical :class:`Ensemble`."""

from __future__ import annotations

import os
from typing import Any

from distshap.models.ensemble import Ensemble, UnsupportedModelError

__all__ = ["Ensemble", "UnsupportedModelError", "load_model"]


def load_model(model: Any) -> Ensemble:
    """Convert ``model`` into an :class:`Ensemble`.

    Parameters
    ----------
    model
        An ``xgboost.Booster`` or XGBoost sklearn estimator; a saved XGBoost model file
        (``.json`` / ``.ubj``, parsed without xgboost); a LightGBM ``Booster``, sklearn
        estimator or saved text model (``.txt``); a scikit-learn tree ensemble; a CatBoost
        model; or an :class:`Ensemble` (returned unchanged).

    Raises
    ------
    UnsupportedModelError
        For a model kind distshap cannot explain exactly.
    TypeError
        For an object that is no known tree model.
    """
    if isinstance(model, Ensemble):
        return model.validate()
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if not os.path.exists(path):
            raise FileNotFoundError(f"model file {path!r} does not exist")
        lower = path.lower()
        if lower.endswith((".json", ".ubj")):
            from distshap.models.xgboost import load_xgboost_file

            return load_xgboost_file(path).validate()
        if lower.endswith((".txt", ".lgb", ".model")):
            from distshap.models.lightgbm import load_lightgbm_file

            return load_lightgbm_file(path).validate()
        raise ValueError(
            f"cannot tell the format of model file {path!r}: use an XGBoost .json/.ubj file "
            "or a LightGBM .txt model file"
        )
    module = type(model).__module__.split(".")[0]
    if module == "xgboost":
        from distshap.models.xgboost import load_xgboost

        return load_xgboost(model).validate()
    if module == "lightgbm":
        from distshap.models.lightgbm import load_lightgbm

        return load_lightgbm(model).validate()
    if module == "sklearn":
        from distshap.models.sklearn import load_sklearn

        return load_sklearn(model).validate()
    if module == "catboost":
        from distshap.models.catboost import load_catboost

        return load_catboost(model).validate()
    raise TypeError(
        f"cannot explain a {type(model).__module__}.{type(model).__name__}: pass an XGBoost, "
        "LightGBM, scikit-learn or CatBoost tree model, or a saved XGBoost .json/.ubj file"
    )
