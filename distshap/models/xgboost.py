"""XGBoost models -> :class:`~distshap.models.ensemble.Ensemble`.

There is one code path: a saved model document (XGBoost's JSON schema, read from ``.json`` text
or from ``.ubj`` Universal Binary JSON) is turned into flat node arrays with NumPy, one Python
step per *tree* and none per node. :func:`load_xgboost` serialises an in-memory ``Booster`` to
UBJSON bytes (``Booster.save_raw("ubj")``) and goes through the same parser;
:func:`load_xgboost_file` needs no ``xgboost`` installation at all (Dask workers need not have
it).

What is converted:

* ``gbtree`` and ``dart`` boosters (DART tree weights ``weight_drop`` are folded into the leaf
  values), random forests (``num_parallel_tree > 1``), any number of output groups (tree ``t``
  belongs to group ``tree_info[t]``);
* numeric splits (XGBoost sends ``x < split_condition`` left, as the Ensemble does), the default
  direction of missing values, and categorical splits (XGBoost sends the listed categories
  right, which is the Ensemble convention, so no children are swapped);
* ``base_score``, converted from the objective's output space to margin space (logit for
  logistic objectives, log for Poisson / gamma / Tweedie / Cox / AFT, identity otherwise). It
  may be stored as a number, a numeric string, a bracketed string vector (``"[5E-1]"``, XGBoost
  >= 3.1) or an array; one value is broadcast to every group.

Refused with :class:`UnsupportedModelError`: ``gblinear``, vector-leaf trees
(``multi_strategy="multi_output_tree"``), and boosters or documents of any other kind.
"""

from __future__ import annotations

import json
import os
import struct
import warnings
from typing import Any

import numpy as np

from distshap.models.ensemble import Ensemble, UnsupportedModelError

__all__ = [
    "UBJSONError",
    "decode_ubjson",
    "ensemble_from_xgboost_document",
    "load_xgboost",
    "load_xgboost_file",
    "read_xgboost_document",
]

# Objectives whose base_score is stored in output space and reaches margin space through
# logit / log. Every other known objective stores it in margin space already.
_LOGIT_OBJECTIVES = frozenset({"binary:logistic", "reg:logistic"})
_LOG_OBJECTIVES = frozenset(
    {"count:poisson", "reg:gamma", "reg:tweedie", "survival:cox", "survival:aft"}
)
_IDENTITY_OBJECTIVES = frozenset(
    {
        "reg:squarederror",
        "reg:linear",
        "reg:squaredlogerror",
        "reg:pseudohubererror",
        "reg:absoluteerror",
        "reg:quantileerror",
        "reg:expectileerror",
        "binary:logitraw",
        "binary:hinge",
        "multi:softmax",
        "multi:softprob",
        "rank:pairwise",
        "rank:ndcg",
        "rank:map",
    }
)


# --------------------------------------------------------------------------------------------
# UBJSON
# --------------------------------------------------------------------------------------------


class UBJSONError(ValueError):
    """Bytes that are not valid (or not supported) Universal Binary JSON."""


# Big-endian NumPy dtypes of the fixed-size UBJSON number markers.
_UBJ_NUMBER = {
    0x69: np.dtype(">i1"),  # i int8
    0x55: np.dtype(">u1"),  # U uint8
    0x49: np.dtype(">i2"),  # I int16
    0x6C: np.dtype(">i4"),  # l int32
    0x4C: np.dtype(">i8"),  # L int64
    0x64: np.dtype(">f4"),  # d float32
    0x44: np.dtype(">f8"),  # D float64
}
_UBJ_STRUCT = {
    m: struct.Struct(">" + code)
    for m, code in zip(_UBJ_NUMBER, "bBhiqfd", strict=True)  # same order as _UBJ_NUMBER
}
_UBJ_INTEGER = frozenset({0x69, 0x55, 0x49, 0x6C, 0x4C})
_NOOP = 0x4E  # N


class _UBJReader:
    """Cursor over a UBJSON buffer. Typed numeric arrays become NumPy arrays (native order)."""

    def __init__(self, data: bytes | bytearray | memoryview) -> None:
        self.buf = bytes(data)
        self.pos = 0

    def fail(self, what: str) -> UBJSONError:
        return UBJSONError(f"invalid UBJSON at byte {self.pos}: {what}")

    def take(self, k: int) -> int:
        start = self.pos
        if k < 0 or start + k > len(self.buf):
            raise self.fail(f"truncated input (needs {k} more bytes, {len(self.buf) - start} left)")
        self.pos = start + k
        return start

    def byte(self) -> int:
        return self.buf[self.take(1)]

    def marker(self) -> int:
        """Next type marker, skipping ``N`` no-ops."""
        m = self.byte()
        while m == _NOOP:
            m = self.byte()
        return m

    def peek(self) -> int:
        if self.pos >= len(self.buf):
            raise self.fail("truncated input (container not closed)")
        return self.buf[self.pos]

    def integer(self, m: int) -> int:
        if m not in _UBJ_INTEGER:
            raise self.fail(f"expected an integer marker for a length or count, got {chr(m)!r}")
        s = _UBJ_STRUCT[m]
        return int(s.unpack_from(self.buf, self.take(s.size))[0])

    def string_body(self) -> str:
        n = self.integer(self.marker())
        if n < 0:
            raise self.fail(f"negative string length {n}")
        start = self.take(n)
        try:
            return self.buf[start : start + n].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise self.fail(f"string is not UTF-8 ({exc})") from None

    def value(self, m: int) -> Any:
        s = _UBJ_STRUCT.get(m)
        if s is not None:
            v = s.unpack_from(self.buf, self.take(s.size))[0]
            return float(v) if m in (0x64, 0x44) else int(v)
        if m == 0x53:  # S string
            return self.string_body()
        if m == 0x7B:  # {
            return self.object()
        if m == 0x5B:  # [
            return self.array()
        if m == 0x54:  # T
            return True
        if m == 0x46:  # F
            return False
        if m == 0x5A:  # Z null
            return None
        if m == 0x43:  # C char
            return chr(self.byte())
        if m == 0x48:  # H high-precision number, as a decimal string
            text = self.string_body()
            try:
                return int(text)
            except ValueError:
                try:
                    return float(text)
                except ValueError:
                    raise self.fail(f"high-precision number {text!r} is not a number") from None
        raise self.fail(f"unknown type marker {chr(m)!r} (0x{m:02x})")

    def container_header(self) -> tuple[int | None, int | None]:
        """Optional ``$type`` and ``#count`` after ``[`` or ``{``."""
        typ = None
        count = None
        if self.peek() == 0x24:  # $
            self.pos += 1
            typ = self.byte()
            if typ in (0x5B, 0x7B, _NOOP):
                raise self.fail(f"container element type {chr(typ)!r} is not allowed")
            if self.peek() != 0x23:
                raise self.fail("a '$' element type must be followed by a '#' count")
        if self.peek() == 0x23:  # #
            self.pos += 1
            count = self.integer(self.marker())
            if count < 0:
                raise self.fail(f"negative container count {count}")
        return typ, count

    def array(self) -> Any:
        typ, count = self.container_header()
        if typ is not None:
            assert count is not None
            dt = _UBJ_NUMBER.get(typ)
            if dt is not None:
                start = self.take(count * dt.itemsize)
                arr = np.frombuffer(self.buf, dtype=dt, count=count, offset=start)
                return arr.astype(dt.newbyteorder("="))
            return [self.value(typ) for _ in range(count)]
        if count is not None:
            return [self.value(self.marker()) for _ in range(count)]
        out = []
        while True:
            m = self.marker()
            if m == 0x5D:  # ]
                return out
            out.append(self.value(m))

    def object(self) -> dict[str, Any]:
        typ, count = self.container_header()
        out: dict[str, Any] = {}
        if count is not None:
            for _ in range(count):
                key = self.string_body()
                out[key] = self.value(typ if typ is not None else self.marker())
            return out
        while True:
            while self.peek() == _NOOP:
                self.pos += 1
            if self.peek() == 0x7D:  # }
                self.pos += 1
                return out
            key = self.string_body()
            out[key] = self.value(self.marker())


def decode_ubjson(data: bytes | bytearray | memoryview) -> Any:
    """Decode Universal Binary JSON (the subset XGBoost writes, and a little more).

    Supported: objects and arrays, plain or optimised with ``$`` element type and ``#`` count;
    ``i U I l L`` integers, ``d D`` floats, ``H`` high-precision numbers, ``S`` strings, ``C``
    chars, ``T F Z`` and ``N`` no-ops. Numbers are big-endian, as the format requires.

    Parameters
    ----------
    data
        The encoded bytes of one value.

    Returns
    -------
    Any
        ``dict`` / ``list`` / ``str`` / ``int`` / ``float`` / ``bool`` / ``None``; an
        optimised array of a fixed-size number type becomes a NumPy array in native byte order.

    Raises
    ------
    UBJSONError
        On truncated input, unknown markers or trailing bytes.
    """
    reader = _UBJReader(data)
    value = reader.value(reader.marker())
    while reader.pos < len(reader.buf) and reader.buf[reader.pos] == _NOOP:
        reader.pos += 1
    if reader.pos != len(reader.buf):
        raise reader.fail(f"{len(reader.buf) - reader.pos} trailing bytes after the value")
    return value


# --------------------------------------------------------------------------------------------
# Reading documents
# --------------------------------------------------------------------------------------------


def _looks_like_json(data: bytes) -> bool:
    head = data[:64].lstrip()
    if head[:1] != b"{":
        return False
    rest = head[1:].lstrip()
    return rest[:1] in (b'"', b"}")


def read_xgboost_document(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a saved XGBoost model file (``.json`` or ``.ubj``; the content decides) into a dict.

    Parameters
    ----------
    path
        File written by ``Booster.save_model`` / ``XGBModel.save_model``.

    Returns
    -------
    dict
        The model document (the JSON schema's top-level object).

    Raises
    ------
    UnsupportedModelError
        For XGBoost's deprecated binary format (re-save the model as ``.json`` or ``.ubj``).
    ValueError
        For a file that is neither JSON nor UBJSON.
    """
    path = os.fspath(path)
    with open(path, "rb") as fh:
        data = fh.read()
    if _looks_like_json(data):
        try:
            return json.loads(data)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path!r} is not a valid XGBoost JSON model: {exc}") from None
    if data[:1] == b"{":
        try:
            return decode_ubjson(data)
        except UBJSONError as exc:
            raise ValueError(f"{path!r} is not a valid XGBoost UBJSON model: {exc}") from None
    raise UnsupportedModelError(
        f"{path!r} is neither an XGBoost JSON nor a UBJSON model (perhaps XGBoost's deprecated "
        "binary format): load it with xgboost and save it again with "
        "booster.save_model('model.json') or 'model.ubj'"
    )


def load_xgboost_file(
    path: str | os.PathLike[str], *, iteration_range: tuple[int, int] | None = None
) -> Ensemble:
    """Load a saved XGBoost ``.json`` / ``.ubj`` model without importing xgboost.

    Parameters
    ----------
    path
        The model file.
    iteration_range
        ``(begin, end)`` boosting rounds to keep, as in ``Booster.predict``; all when ``None``.

    Returns
    -------
    Ensemble
    """
    return ensemble_from_xgboost_document(
        read_xgboost_document(path), iteration_range=iteration_range
    )


def load_xgboost(model: Any, *, iteration_range: tuple[int, int] | None = None) -> Ensemble:
    """Convert an ``xgboost.Booster`` or XGBoost scikit-learn estimator into an Ensemble.

    The booster is serialised to UBJSON in memory and parsed by the same code as
    :func:`load_xgboost_file`. All trees of a ``Booster`` are kept unless ``iteration_range``
    says otherwise; a scikit-learn estimator fitted with early stopping keeps the rounds up to
    its ``best_iteration``, as its ``predict`` does.

    Parameters
    ----------
    model
        ``xgboost.Booster``, or a fitted ``XGBRegressor`` / ``XGBClassifier`` / ``XGBRanker`` /
        ``XGBRF*`` (anything with ``get_booster()``).
    iteration_range
        ``(begin, end)`` boosting rounds to keep; all when ``None``.

    Returns
    -------
    Ensemble

    Raises
    ------
    TypeError
        If ``model`` is no XGBoost model.
    ValueError
        If a scikit-learn estimator is not fitted.
    UnsupportedModelError
        For gblinear and vector-leaf (multi_output_tree) models.
    """
    import xgboost

    booster = model
    if not isinstance(model, xgboost.Booster):
        get_booster = getattr(model, "get_booster", None)
        if get_booster is None:
            raise TypeError(
                f"load_xgboost needs an xgboost.Booster or an XGBoost scikit-learn estimator, "
                f"got {type(model).__module__}.{type(model).__name__}"
            )
        try:
            booster = get_booster()
        except Exception as exc:  # xgboost raises NotFittedError (a ValueError)
            raise ValueError(
                f"cannot get the booster of {type(model).__name__} ({exc}): fit it first"
            ) from exc
        if not isinstance(booster, xgboost.Booster):
            raise TypeError(
                f"{type(model).__name__}.get_booster() returned {type(booster).__name__}, "
                "not an xgboost.Booster"
            )
        if iteration_range is None:
            try:  # set only after early stopping
                best = int(model.best_iteration)
            except (AttributeError, TypeError, ValueError):
                best = None
            if best is not None:
                iteration_range = (0, best + 1)
    raw = booster.save_raw(raw_format="ubj")
    return ensemble_from_xgboost_document(decode_ubjson(raw), iteration_range=iteration_range)


# --------------------------------------------------------------------------------------------
# Document -> Ensemble
# --------------------------------------------------------------------------------------------


def _get(obj: Any, key: str, where: str) -> Any:
    if not isinstance(obj, dict) or key not in obj:
        raise UnsupportedModelError(
            f"not a recognised XGBoost model document: {where} lacks {key!r} (save the model "
            "with booster.save_model('model.json') from XGBoost >= 1.0)"
        )
    return obj[key]


def _parse_numbers(raw: Any) -> np.ndarray:
    """base_score as stored: number, "0.5", "[5E-1]", "[a,b]", or an array of either."""
    if isinstance(raw, str):
        text = raw.strip()
        if text.startswith("[") and text.endswith("]"):
            parts = [p for p in text[1:-1].split(",") if p.strip()]
        else:
            parts = [text]
        try:
            return np.array([float(p) for p in parts], dtype=np.float64)
        except ValueError:
            raise UnsupportedModelError(f"cannot read base_score {raw!r} as numbers") from None
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        return np.array([float(raw)], dtype=np.float64)
    if isinstance(raw, (list, tuple, np.ndarray)):
        try:
            return np.array([float(v) for v in raw], dtype=np.float64).reshape(-1)
        except (TypeError, ValueError):
            raise UnsupportedModelError(f"cannot read base_score {raw!r} as numbers") from None
    raise UnsupportedModelError(f"cannot read base_score {raw!r} as numbers")


def _base_margin(raw: Any, objective: str, num_groups: int) -> np.ndarray:
    values = _parse_numbers(raw)
    if values.size == 1:
        values = np.repeat(values, num_groups)
    elif values.size != num_groups:
        raise UnsupportedModelError(
            f"base_score holds {values.size} values but the model has {num_groups} output groups"
        )
    # XGBoost keeps base_score as float32.
    values = values.astype(np.float32).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        if objective in _LOGIT_OBJECTIVES:
            out = np.log(values) - np.log1p(-values)
        elif objective in _LOG_OBJECTIVES:
            out = np.log(values)
        else:
            if objective not in _IDENTITY_OBJECTIVES:
                warnings.warn(
                    f"unknown XGBoost objective {objective!r}: assuming its base_score is "
                    "stored in margin space; check the bias column against "
                    "predict(output_margin=True)",
                    UserWarning,
                    stacklevel=4,
                )
            out = values
    if not np.all(np.isfinite(out)):
        raise UnsupportedModelError(
            f"base_score {raw!r} has no finite margin under objective {objective!r}"
        )
    return out


def _ragged_gather(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Indices ``concat(arange(s, s + n) for s, n in zip(starts, lengths))``, vectorised."""
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    ends = np.cumsum(lengths)
    shift = np.repeat(starts - (ends - lengths), lengths)
    return np.arange(total, dtype=np.int64) + shift


def _int_param(obj: dict, key: str, default: int) -> int:
    raw = obj.get(key, default)
    try:
        return int(raw)
    except (TypeError, ValueError):
        raise UnsupportedModelError(f"cannot read {key}={raw!r} as an integer") from None


def _category_values(cats: Any) -> dict[int, Any]:
    """Training categories per feature (XGBoost >= 3.1 stores its category encoder)."""
    out: dict[int, Any] = {}
    if not isinstance(cats, dict):
        return out
    enc = cats.get("enc")
    if not isinstance(enc, list):
        return out
    for f, entry in enumerate(enc):
        if not isinstance(entry, dict):
            continue
        values = entry.get("values")
        if values is None or len(values) == 0:
            continue
        offsets = entry.get("offsets")
        if offsets is not None and len(offsets) > 0:
            blob = bytes(np.asarray(values, dtype=np.uint8))
            offs = np.asarray(offsets, dtype=np.int64)
            out[f] = [blob[a:b].decode("utf-8") for a, b in zip(offs[:-1], offs[1:], strict=True)]
        else:
            out[f] = np.asarray(values)
    return out


def _iteration_trees(
    model: dict, num_trees: int, trees_per_round: int, iteration_range: tuple[int, int] | None
) -> np.ndarray:
    """Indices of the trees of boosting rounds ``[begin, end)``."""
    if iteration_range is None:
        return np.arange(num_trees)
    begin, end = (int(v) for v in iteration_range)
    indptr = model.get("iteration_indptr")
    if indptr is not None and len(indptr) > 0:
        indptr = np.asarray(indptr, dtype=np.int64)
    else:
        indptr = np.arange(0, num_trees + 1, max(trees_per_round, 1), dtype=np.int64)
    rounds = indptr.size - 1
    if end == 0:
        end = rounds
    if not 0 <= begin < end <= rounds:
        raise ValueError(
            f"iteration_range=({begin}, {end}) is outside the model's {rounds} boosting rounds: "
            f"use 0 <= begin < end <= {rounds}"
        )
    return np.arange(indptr[begin], indptr[end])


def ensemble_from_xgboost_document(
    doc: dict[str, Any], *, iteration_range: tuple[int, int] | None = None
) -> Ensemble:
    """Convert a decoded XGBoost model document (JSON schema) into an :class:`Ensemble`.

    Parameters
    ----------
    doc
        The top-level object of a saved model, from JSON or UBJSON.
    iteration_range
        ``(begin, end)`` boosting rounds to keep; all when ``None``.

    Returns
    -------
    Ensemble
        Not yet validated (the dispatcher calls :meth:`Ensemble.validate`).

    Raises
    ------
    UnsupportedModelError
        For gblinear, vector-leaf trees, or a document of an unknown shape.
    """
    learner = _get(doc, "learner", "the document")
    booster = _get(learner, "gradient_booster", "learner")
    booster_name = _get(booster, "name", "gradient_booster")
    mparam = _get(learner, "learner_model_param", "learner")
    objective_obj = learner.get("objective", {})
    objective = str(objective_obj.get("name", "reg:squarederror")) if objective_obj else ""
    objective = objective or "reg:squarederror"

    if booster_name == "gblinear":
        raise UnsupportedModelError(
            "this XGBoost model uses booster='gblinear' (a linear model, not trees): distshap "
            "explains tree ensembles only; retrain with booster='gbtree', or use linear SHAP "
            "values coef * (x - mean(x))"
        )
    weight_drop = None
    if booster_name == "dart":
        weight_drop = np.asarray(
            _get(booster, "weight_drop", "dart booster"), dtype=np.float32
        ).astype(np.float64)
        booster = _get(booster, "gbtree", "dart booster")
    elif booster_name != "gbtree":
        raise UnsupportedModelError(
            f"unknown XGBoost booster {booster_name!r}: distshap supports 'gbtree' and 'dart'"
        )
    model = _get(booster, "model", "gbtree booster")
    if weight_drop is None and "weight_drop" in model:
        # XGBoost >= 3.3 saves DART models as booster "gbtree" with the tree weights inside
        weight_drop = np.asarray(model["weight_drop"], dtype=np.float32).astype(np.float64)
    trees = _get(model, "trees", "gbtree model")
    num_trees = len(trees)
    tree_info = np.asarray(model.get("tree_info", np.zeros(num_trees)), dtype=np.int64)
    if tree_info.shape != (num_trees,):
        raise UnsupportedModelError(f"tree_info has {tree_info.size} entries for {num_trees} trees")
    if weight_drop is not None and weight_drop.shape != (num_trees,):
        raise UnsupportedModelError(
            f"DART weight_drop has {weight_drop.size} entries for {num_trees} trees"
        )

    num_feature = _int_param(mparam, "num_feature", 0)
    num_class = _int_param(mparam, "num_class", 0)
    num_target = _int_param(mparam, "num_target", 1)
    num_groups = num_class if num_class > 0 else max(num_target, 1)
    if num_trees and int(tree_info.max()) >= num_groups:
        raise UnsupportedModelError(
            f"tree_info names output group {int(tree_info.max())} but the model declares "
            f"{num_groups} outputs"
        )
    gbparam = model.get("gbtree_model_param", {})
    num_parallel_tree = _int_param(gbparam, "num_parallel_tree", 1) if gbparam else 1

    keep = _iteration_trees(model, num_trees, num_parallel_tree * num_groups, iteration_range)

    # Per-tree arrays (one Python step per tree), then one concatenation per field.
    lefts, rights, feats, conds, dlefts, stypes, hess = [], [], [], [], [], [], []
    cat_nodes, cat_segs, cat_sizes, cat_vals = [], [], [], []
    sizes = np.zeros(keep.size, dtype=np.int64)
    node_base = 0
    cat_base = 0
    for k, t in enumerate(keep.tolist()):
        tree = trees[t]
        tparam = tree.get("tree_param", {})
        leaf_size = _int_param(tparam, "size_leaf_vector", 1)
        if leaf_size > 1 or "leaf_weights" in tree:
            raise UnsupportedModelError(
                f"XGBoost tree {t} has vector leaves (size_leaf_vector={leaf_size}, "
                "multi_strategy='multi_output_tree'): distshap cannot explain multi-target "
                "trees; retrain with multi_strategy='one_output_per_tree' (the default)"
            )
        left = np.asarray(_get(tree, "left_children", f"tree {t}"), dtype=np.int32)
        n = left.shape[0]
        if n == 0:
            raise UnsupportedModelError(f"XGBoost tree {t} has no nodes")
        fields = {
            "right_children": np.int32,
            "split_indices": np.int32,
            "split_conditions": np.float32,
            "default_left": np.bool_,
            "sum_hessian": np.float32,  # stored as float32: JSON text and UBJ agree
        }
        arrays = {}
        for name, dtype in fields.items():
            arr = np.asarray(_get(tree, name, f"tree {t}"), dtype=dtype)
            if arr.shape != (n,):
                raise UnsupportedModelError(
                    f"XGBoost tree {t}: {name} has shape {arr.shape}, expected ({n},)"
                )
            arrays[name] = arr
        stype = tree.get("split_type")
        stype = (
            np.zeros(n, dtype=np.int8)
            if stype is None or len(stype) == 0
            else np.asarray(stype, dtype=np.int8)
        )
        if stype.shape != (n,):
            raise UnsupportedModelError(
                f"XGBoost tree {t}: split_type has shape {stype.shape}, expected ({n},)"
            )
        lefts.append(left)
        rights.append(arrays["right_children"])
        feats.append(arrays["split_indices"])
        conds.append(arrays["split_conditions"])
        dlefts.append(arrays["default_left"])
        stypes.append(stype)
        hess.append(arrays["sum_hessian"])
        sizes[k] = n
        cnodes = tree.get("categories_nodes")
        if cnodes is not None and len(cnodes) > 0:
            cnodes = np.asarray(cnodes, dtype=np.int64)
            csegs = np.asarray(_get(tree, "categories_segments", f"tree {t}"), dtype=np.int64)
            csizes = np.asarray(_get(tree, "categories_sizes", f"tree {t}"), dtype=np.int64)
            cvals = np.asarray(_get(tree, "categories", f"tree {t}"), dtype=np.int64)
            if not (cnodes.shape == csegs.shape == csizes.shape) or np.any(
                csegs + csizes > cvals.size
            ):
                raise UnsupportedModelError(f"XGBoost tree {t}: inconsistent category arrays")
            cat_nodes.append(cnodes + node_base)
            cat_segs.append(csegs + cat_base)
            cat_sizes.append(csizes)
            cat_vals.append(cvals)
            cat_base += cvals.size
        node_base += n

    if keep.size == 0:
        raise UnsupportedModelError("the XGBoost model has no trees: nothing to explain")
    tree_offsets = np.zeros(keep.size + 1, dtype=np.int64)
    np.cumsum(sizes, out=tree_offsets[1:])
    num_nodes = int(tree_offsets[-1])
    if num_nodes >= np.iinfo(np.int32).max:
        raise UnsupportedModelError(f"the model has {num_nodes} nodes: more than int32 indexes")
    base = np.repeat(tree_offsets[:-1].astype(np.int32), sizes)
    end = np.repeat(tree_offsets[1:].astype(np.int32), sizes)

    left = np.concatenate(lefts)
    leaf = left < 0
    internal = ~leaf
    left += base
    right = np.concatenate(rights)
    right += base
    if np.any(internal & ((left >= end) | (right < base) | (right >= end))):
        raise UnsupportedModelError("an XGBoost tree has a child index outside the tree")
    left[leaf] = -1
    right[leaf] = -1
    del end
    cond = np.concatenate(conds)
    is_cat = np.concatenate(stypes) == 1
    is_cat &= internal
    feature = np.concatenate(feats)
    feature[leaf] = -1
    if np.any(internal & ((feature < 0) | (feature >= max(num_feature, 1)))):
        raise UnsupportedModelError(f"an XGBoost split uses a feature outside [0, {num_feature})")

    value = np.where(leaf, cond.astype(np.float64), 0.0)
    if weight_drop is not None:
        value *= np.repeat(weight_drop[keep], sizes)

    # Category sets, ordered by global node index.
    counts = np.zeros(num_nodes, dtype=np.int64)
    if cat_nodes:
        all_nodes = np.concatenate(cat_nodes)
        all_segs = np.concatenate(cat_segs)
        all_sizes = np.concatenate(cat_sizes)
        all_vals = np.concatenate(cat_vals)
        if np.any((all_nodes < 0) | (all_nodes >= num_nodes)) or not np.all(is_cat[all_nodes]):
            raise UnsupportedModelError(
                "XGBoost categories_nodes names a node that is no categorical split"
            )
        order = np.argsort(all_nodes, kind="stable")
        counts[all_nodes] = all_sizes
        cat_values = all_vals[_ragged_gather(all_segs[order], all_sizes[order])]
    else:
        cat_values = np.zeros(0, dtype=np.int64)
    if np.any(cat_values < 0) or np.any(cat_values > np.iinfo(np.int32).max):
        raise UnsupportedModelError("an XGBoost categorical split lists a negative category")
    cat_offsets = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(counts, out=cat_offsets[1:])

    base_score = _base_margin(
        _get(mparam, "base_score", "learner_model_param"), objective, num_groups
    )

    names = learner.get("feature_names") or None
    types = learner.get("feature_types") or None
    feature_names = tuple(str(v) for v in names) if names is not None else None
    feature_types = tuple("c" if v == "c" else "q" for v in types) if types is not None else None
    for label, seq in (("feature_names", feature_names), ("feature_types", feature_types)):
        if seq is not None and num_feature and len(seq) != num_feature:
            raise UnsupportedModelError(
                f"the model has {len(seq)} {label} for {num_feature} features"
            )

    version = doc.get("version")
    extra = {
        "booster": "dart" if weight_drop is not None else booster_name,
        "objective": objective,
        "num_parallel_tree": num_parallel_tree,
        "xgboost_version": tuple(int(v) for v in version) if version is not None else None,
        "xgboost_feature_types": tuple(str(v) for v in types) if types is not None else None,
    }
    categories = _category_values(model.get("cats"))
    if categories:
        extra["category_values"] = categories

    return Ensemble(
        left=left,
        right=right,
        feature=feature,
        threshold=np.where(leaf | is_cat, np.float32(0.0), cond),
        default_left=internal & np.concatenate(dlefts),
        is_categorical=is_cat,
        cat_offsets=cat_offsets,
        cat_values=cat_values.astype(np.int32),
        value=value,
        cover=np.concatenate(hess).astype(np.float64),
        tree_offsets=tree_offsets,
        tree_group=tree_info[keep].astype(np.int32),
        num_features=num_feature,
        num_groups=num_groups,
        base_score=base_score,
        feature_names=feature_names,
        feature_types=feature_types,
        model_kind=f"xgboost:{objective}",
        extra=extra,
    )
