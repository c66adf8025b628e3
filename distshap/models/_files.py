"""Model files: tell the format from the content, parse safely, name the file in every error.

A model file is parsed, never unpickled (unpickling runs arbitrary code). The content decides
the loader, not the file name: XGBoost JSON / UBJSON, LightGBM's text format, CatBoost's
JSON export and scikit-learn models saved with skops (:mod:`distshap.models.skops_file`, a zip
archive holding ``schema.json``) are read; pickles, compressed files, CatBoost's binary format
and unknown content get a one-line error saying what the file is and how to save the model in
a format distshap reads. JSON nested too deeply for Python's parser is refused the same way.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import zipfile
from collections.abc import Iterator
from typing import Any

__all__ = [
    "in_file",
    "is_skops_bytes",
    "parse_json",
    "read_model_bytes",
    "refusal",
    "sniff_model_bytes",
]

_SAVE_HINT = (
    "save the model with booster.save_model('model.json') (XGBoost), "
    "booster.save_model('model.txt') (LightGBM) or model.save_model('model.json', "
    "format='json') (CatBoost), skops.io.dump(model, 'model.skops') (scikit-learn), or pass "
    "the fitted model object itself"
)

# Leading bytes of formats that are no model distshap reads.
_COMPRESSED = {
    b"\x1f\x8b": "gzip-compressed",
    b"BZh": "bzip2-compressed",
    b"\xfd7zXZ\x00": "xz-compressed",
    b"\x28\xb5\x2f\xfd": "zstd-compressed",
    b"PK\x03\x04": "a zip archive",
    b"ZF": "zlib-compressed (joblib)",
}


@contextlib.contextmanager
def in_file(path: str | os.PathLike[str]) -> Iterator[None]:
    """Re-raise a ``ValueError`` met while loading ``path`` with the file's name in front.

    The exception keeps its class (``UnsupportedModelError`` stays one) when that class takes
    a single message; the original is chained for debugging. A ``RecursionError`` (content
    nested absurdly deep) becomes a ``ValueError`` too.
    """
    name = os.fspath(path)
    try:
        yield
    except RecursionError:
        raise ValueError(
            f"model file {name!r}: the content nests deeper than any model does; the file is "
            "corrupt or is no model"
        ) from None
    except ValueError as exc:
        msg = str(exc)
        if name in msg:
            raise
        msg = f"model file {name!r}: {msg}"
        try:
            new = type(exc)(msg)
        except Exception:  # classes with other constructors (json.JSONDecodeError, ...)
            new = ValueError(msg)
        raise new from exc


def read_model_bytes(path: str | os.PathLike[str]) -> bytes:
    """The file's bytes; ``FileNotFoundError`` / ``IsADirectoryError`` name the file."""
    name = os.fspath(path)
    if not os.path.exists(name):
        raise FileNotFoundError(f"model file {name!r} does not exist")
    if os.path.isdir(name):
        raise IsADirectoryError(f"model file {name!r} is a directory, not a model file")
    with open(name, "rb") as fh:
        return fh.read()


def _looks_like_json(data: bytes) -> bool:
    head = data[:64].lstrip()
    if head[:1] != b"{":
        return False
    return head[1:].lstrip()[:1] in (b'"', b"}")


def is_skops_bytes(data: bytes) -> bool:
    """Whether ``data`` is a skops archive (a zip file holding ``schema.json``)."""
    if not data.startswith(b"PK\x03\x04"):
        return False
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            return "schema.json" in archive.namelist()
    except (zipfile.BadZipFile, OSError, EOFError, ValueError):
        return False


def sniff_model_bytes(data: bytes) -> str:
    """The format of a model file's content.

    Returns
    -------
    str
        ``"json"``, ``"ubjson"``, ``"lightgbm"`` (LightGBM's text format), ``"skops"`` (a
        skops archive); or, for content
        distshap refuses, ``"pickle"``, ``"catboost-binary"``, ``"compressed"``, ``"empty"``,
        ``"unknown"``.
    """
    if not data.strip():
        return "empty"
    if data[:1] == b"\x80" and len(data) > 1 and 2 <= data[1] <= 5:
        return "pickle"  # protocol 2+ pickles (joblib.dump / pickle.dump) start with PROTO
    if is_skops_bytes(data):
        return "skops"
    if any(data.startswith(magic) for magic in _COMPRESSED):
        return "compressed"
    if data.startswith(b"CBM1"):
        return "catboost-binary"
    if _looks_like_json(data):
        return "json"
    if data[:1] == b"{":
        return "ubjson"
    head = data[:4096].lstrip(b"\xef\xbb\xbf")
    if head.startswith((b"tree\n", b"tree\r\n")) or b"\nTree=" in head:
        return "lightgbm"
    return "unknown"


def refusal(kind: str, data: bytes) -> str:
    """The one-line reason a file of format ``kind`` (from :func:`sniff_model_bytes`) is refused."""
    if kind == "pickle":
        return (
            "this is a Python pickle; distshap parses model files and never unpickles them "
            f"(unpickling runs arbitrary code): {_SAVE_HINT}"
        )
    if kind == "compressed":
        what = next(v for k, v in _COMPRESSED.items() if data.startswith(k))
        return f"this file is {what}; distshap reads uncompressed model files: {_SAVE_HINT}"
    if kind == "catboost-binary":
        return (
            "this is CatBoost's binary model format (.cbm); distshap reads CatBoost's JSON "
            "export: save it with model.save_model('model.json', format='json')"
        )
    if kind == "empty":
        return "the file is empty"
    if kind == "skops":
        return (
            "this is a skops file (a scikit-learn model): load it with distshap.load_model(path) "
            "or TreeExplainer(path), which read scikit-learn tree models from it"
        )
    return (
        "the content is no model format distshap reads (XGBoost .json/.ubj, LightGBM text, "
        "CatBoost JSON, scikit-learn .skops; an old XGBoost binary model must be loaded with "
        f"xgboost and saved again as .json or .ubj): {_SAVE_HINT}"
    )


def parse_json(data: bytes | str) -> Any:
    """``json.loads`` with one-line ``ValueError`` messages for bad or too deeply nested JSON."""
    try:
        return json.loads(data)
    except RecursionError:
        raise ValueError(
            "the JSON nests containers deeper than Python's parser allows: no model file "
            "nests that deep; the file is corrupt or is no model"
        ) from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"the file is not UTF-8 JSON ({exc.reason} at byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno}, column {exc.colno}"
        raise ValueError(
            f"invalid JSON ({exc.msg} at {where}): the file is truncated or no model"
        ) from None
