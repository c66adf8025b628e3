"""scikit-learn models saved with skops (``skops.io.dump(model, 'model.skops')``).

skops stores an object as a zip archive of a JSON schema (``schema.json``) and NumPy arrays,
and rebuilds it from types it is told to trust instead of unpickling it, so a ``.skops`` file is
the safe way to hand a scikit-learn model to the command line. :func:`load_skops_bytes` reads
one only when

* its top-level object is a scikit-learn tree model :func:`distshap.models.sklearn.load_sklearn`
  converts (checked in the schema, before anything is built), and
* every type skops does not trust by default is in :data:`TRUSTED_TYPES`: the tree structures
  of those models (``sklearn.tree._tree.Tree``, histogram gradient boosting's ``TreePredictor``
  and the ``functools.partial`` of ``check_array`` its categorical preprocessor holds).

Anything else is refused with a one-line error naming the file, the types and the fix; the
file is then never loaded. Reading it needs the ``skops`` package (``pip install skops`` or
``distshap[skops]``).
"""

from __future__ import annotations

import io
import zipfile
from typing import Any

from distshap.models._files import parse_json
from distshap.models.ensemble import Ensemble, UnsupportedModelError
from distshap.models.sklearn import SKLEARN_MODELS

__all__ = ["TRUSTED_TYPES", "load_skops_bytes"]


#: Types beyond skops' default trust that those models are made of: the only ones passed as
#: ``trusted=`` (never ``trusted=True``).
TRUSTED_TYPES = (
    "sklearn.tree._tree.Tree",
    "sklearn.ensemble._hist_gradient_boosting.predictor.TreePredictor",
    "functools.partial",
    "sklearn.utils.validation.check_array",
)

_FIX = (
    "save the fitted tree model itself with skops.io.dump(model, 'model.skops') (not a "
    "Pipeline or other wrapper), or pass the model object to distshap.TreeExplainer"
)


def _schema(data: bytes) -> Any:
    """The parsed ``schema.json`` of a skops archive, ``None`` for other content."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            if "schema.json" not in archive.namelist():
                return None
            raw = archive.read("schema.json")
    except (zipfile.BadZipFile, OSError, EOFError, ValueError):
        return None
    return parse_json(raw)


def _check_root(schema: Any) -> str:
    """The top-level class of the archive, refused unless it is a supported sklearn model."""
    if not isinstance(schema, dict):
        raise UnsupportedModelError(f"the skops archive has no object schema: {_FIX}")
    module, name = str(schema.get("__module__", "")), str(schema.get("__class__", ""))
    if module.split(".")[0] != "sklearn" or name not in SKLEARN_MODELS:
        raise UnsupportedModelError(
            f"the skops file holds a {module}.{name}, which distshap does not explain "
            f"(supported: scikit-learn {', '.join(SKLEARN_MODELS)}): {_FIX}"
        )
    return name


def load_skops_bytes(data: bytes) -> Ensemble:
    """The :class:`Ensemble` of a scikit-learn tree model saved with ``skops.io.dump``.

    Parameters
    ----------
    data : bytes
        The content of the ``.skops`` file.

    Returns
    -------
    Ensemble
        Validated; the same as :func:`~distshap.models.sklearn.load_sklearn` of the model.

    Raises
    ------
    UnsupportedModelError
        When the file holds no supported scikit-learn model or needs a type outside
        :data:`TRUSTED_TYPES`: it is not loaded.
    ImportError
        When the ``skops`` package is not installed.
    """
    name = _check_root(_schema(data))
    try:
        import skops.io as sio
    except ImportError:
        raise ImportError(
            f"reading a skops file ({name}) needs the skops package: pip install skops "
            "(or distshap[skops])"
        ) from None
    untrusted = [t for t in sio.get_untrusted_types(data=data) if t not in TRUSTED_TYPES]
    if untrusted:
        raise UnsupportedModelError(
            f"the skops file's {name} needs types distshap does not trust: "
            f"{', '.join(untrusted)}; {_FIX}"
        )
    model = sio.loads(data, trusted=list(TRUSTED_TYPES))
    from distshap.models.sklearn import load_sklearn

    return load_sklearn(model).validate()
