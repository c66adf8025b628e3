"""Model loaders: every supported library's model -> one canonical :class:`Ensemble`.

One loader module per library (``xgboost``, ``lightgbm``, ``sklearn``, ``catboost``); format
parsers (``_ubjson``), file sniffing (``_files``) and helpers the loaders share (``_common``)
live apart; compiled passes that load large models in threads are in ``_threaded``. Nothing
here imports the kernels (threads come from :mod:`distshap.parallel`), the
cluster code or the front ends.
"""

from __future__ import annotations

import os
from typing import Any

from distshap.models.ensemble import Ensemble, UnsupportedModelError

__all__ = ["Ensemble", "UnsupportedModelError", "load_model", "load_model_file"]


def load_model(model: Any) -> Ensemble:
    """Convert ``model`` into an :class:`Ensemble`.

    Parameters
    ----------
    model
        An ``xgboost.Booster`` or XGBoost sklearn estimator; a LightGBM ``Booster`` or sklearn
        estimator; a scikit-learn tree ensemble; a CatBoost model; a model file
        (:func:`load_model_file`); or an :class:`Ensemble` (returned unchanged).

    Raises
    ------
    UnsupportedModelError
        For a model kind distshap cannot explain exactly, or a file in a format distshap
        does not read (a pickle, a compressed file, ...).
    ValueError
        For a truncated or inconsistent model file (the message names the file).
    TypeError
        For an object that is no known tree model.
    """
    if isinstance(model, Ensemble):
        return model.validate()
    if isinstance(model, (str, os.PathLike)):
        return load_model_file(model)
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


def load_model_file(path: str | os.PathLike[str]) -> Ensemble:
    """Load a saved model file; its content, not its name, decides the format.

    Read without the model's library: XGBoost JSON / UBJSON (``save_model('model.json')``),
    LightGBM text (``save_model('model.txt')``), CatBoost's JSON export
    (``save_model('model.json', format='json')``) and scikit-learn tree models saved with
    skops (``skops.io.dump(model, 'model.skops')``, loaded with an explicit list of trusted
    types). Files are parsed, never unpickled.

    Parameters
    ----------
    path
        The model file.

    Returns
    -------
    Ensemble
        Validated.

    Raises
    ------
    FileNotFoundError
        When ``path`` does not exist.
    UnsupportedModelError
        For a pickle, a compressed file, CatBoost's binary format, LightGBM's ``dump_model``
        JSON or unknown content: the message says how to save the model instead.
    ValueError
        For a truncated, inconsistent or invalid file. Every message names the file.
    """
    from distshap.models._files import (
        in_file,
        parse_json,
        read_model_bytes,
        refusal,
        sniff_model_bytes,
    )
    from distshap.models._threaded import start_warm_up

    start_warm_up(path)  # a large model: Numba starts while the file is read
    with in_file(path):
        data = read_model_bytes(path)
        kind = sniff_model_bytes(data)
        if kind == "lightgbm":
            from distshap.models.lightgbm import load_lightgbm_bytes

            return load_lightgbm_bytes(data, model_kind="lightgbm:file").validate()
        if kind == "skops":
            from distshap.models.skops_file import load_skops_bytes

            return load_skops_bytes(data)
        views = None
        if kind == "ubjson":
            from distshap.models._ubjson import UBJSONError, decode_ubjson, decode_ubjson_views

            try:
                views = decode_ubjson_views(data)  # node arrays read in place (no copies)
            except UBJSONError as exc:
                raise ValueError(f"not a valid XGBoost UBJSON model: {exc}") from None
            doc = views.value
        elif kind == "json":
            doc = parse_json(data)
        else:
            raise UnsupportedModelError(refusal(kind, data))
        if isinstance(doc, dict) and "learner" in doc:
            from distshap.models.xgboost import ensemble_from_ubjson, ensemble_from_xgboost_document

            if views is not None:
                return ensemble_from_ubjson(views).validate()
            return ensemble_from_xgboost_document(doc).validate()
        if views is not None:
            doc = decode_ubjson(data)  # other readers get arrays in native byte order
        from distshap.models.catboost import is_catboost_document, load_catboost_json

        if is_catboost_document(doc):
            return load_catboost_json(doc, model_kind="catboost:file")
        if isinstance(doc, dict) and "tree_info" in doc and "feature_names" in doc:
            raise UnsupportedModelError(
                "this is LightGBM's dump_model() JSON, which distshap does not read: save the "
                "model as text with booster.save_model('model.txt')"
            )
        keys = ", ".join(repr(k) for k in list(doc)[:5]) if isinstance(doc, dict) else ""
        raise UnsupportedModelError(
            f"this JSON is no model distshap reads (top-level keys {keys or 'none'}): expected "
            "an XGBoost model (booster.save_model('model.json')) or CatBoost's JSON export "
            "(model.save_model('model.json', format='json'))"
        )
