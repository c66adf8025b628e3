"""CatBoost's categorical features as category-set splits on codes fixed at load time.

CatBoost splits a categorical feature in two ways: a one-hot split (``value == v``) and a CTR
split (a statistic of the category's training targets, read from a table the model stores,
compared with a border). A split of either kind on one categorical feature alone is a function
of that feature's category, so it becomes an :class:`~distshap.models.ensemble.Ensemble`
categorical split over category *codes*:

* **Keys.** CatBoost hashes a category's text to 32 bits (integers as their decimal text); a
  CTR table is keyed by the hash of the one-feature projection of that hash
  (:func:`projection_keys`). A feature's known categories are the keys of its one-hot values and
  of every CTR table over it alone; code ``i`` is the ``i``-th of them in increasing order.
* **Outcomes.** A one-hot split sends the code of its value right. A CTR split sends right the
  codes whose CTR, computed from the table in float32 as CatBoost computes it, is above the
  border. A category the model does not know (no table entry) takes CatBoost's outcome for an
  empty entry; the input side reads it as missing (NaN), so ``default_left`` carries it.
* **Inputs.** :func:`frame_codes` turns each categorical column's values (text or integers, as
  CatBoost takes them) into codes: their hashes are CatBoost's own, read from the JSON export
  of a one-feature model (``save_model(..., pool=...)`` lists the hash of every value of the
  pool), so CatBoost must be installed where rows are converted.

CTRs over feature combinations depend on several features at once and are refused, naming the
combination; so are text and embedding features.
"""

from __future__ import annotations

import functools
import json
import os
import re
import tempfile
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from distshap.models.ensemble import UnsupportedModelError

__all__ = [
    "CategoricalSplits",
    "catboost_hashes",
    "frame_codes",
    "projection_keys",
    "number_column",
    "rows_frame",
    "user_values",
]

#: The multiplier of CatBoost's hash of a CTR projection.
_MAGIC = np.uint64(0x4906BA494954CB65)
#: A CTR table's key of an empty bucket (exported with the table's first counts).
_EMPTY_BUCKET = np.uint64(0xFFFFFFFFFFFFFFFF)
#: Most categories a feature may know: codes up to 2**24 are exact in float32.
_MAX_CODES = 1 << 24
_COUNTS = ("Counter", "FeatureFreq")
_TARGETS = ("Borders", "Buckets", "BinarizedTargetMeanValue", "FloatTargetMeanValue")


def projection_keys(hashes: Any) -> np.ndarray:
    """The CTR-table keys (uint64) of categories with CatBoost hashes ``hashes``.

    A hash is a 32-bit value, given signed (the JSON's one-hot values) or unsigned (its
    ``cat_features_hash``); CatBoost sign-extends it to 64 bits and hashes the one-feature
    projection as ``M * (0 + M * h)`` modulo ``2**64``.
    """
    h = np.asarray(hashes, dtype=np.int64) & 0xFFFFFFFF
    signed = h.astype(np.uint32).view(np.int32).astype(np.int64).view(np.uint64)
    with np.errstate(over="ignore"):
        return _MAGIC * (_MAGIC * signed)


def _fail(what: str) -> ValueError:
    return ValueError(
        f"inconsistent CatBoost model: {what}; save the model again with "
        "model.save_model('model.json', format='json')"
    )


def _combination_name(elements: list, names: dict[int, str], float_names: dict[int, str]) -> str:
    parts = []
    for e in elements:
        if e.get("combination_element") == "float_feature":
            parts.append(repr(float_names.get(int(e["float_feature_index"]), "?")))
        else:
            label = names.get(int(e["cat_feature_index"]), "?")
            if e.get("combination_element") == "cat_feature_exact_value":
                label += " == a value"
            parts.append(repr(label))
    return "[" + ", ".join(parts) + "]"


@dataclass(frozen=True)
class _Ctr:
    cat: int  # the categorical feature (CatBoost's categorical index)
    kind: str
    target_border: int
    prior_num: np.float32
    prior_denom: np.float32
    shift: np.float32
    scale: np.float32
    borders: np.ndarray  # float32
    table: str  # the ctr_data key


class CategoricalSplits:
    """Category codes and split outcomes of a CatBoost model's categorical features.

    Built from the JSON export's ``features_info`` and ``ctr_data``; :meth:`split` converts one
    ``OneHotFeature`` or ``OnlineCtr`` split.

    Attributes
    ----------
    keys : dict of int to ndarray
        Per flat feature position: the known categories' keys (uint64, increasing); code ``i``
        is ``keys[j][i]``.
    """

    def __init__(self, doc: dict, info: dict, n_float_bins: int) -> None:
        cats = info.get("categorical_features") or []
        self._flat = {int(c["feature_index"]): int(c["flat_feature_index"]) for c in cats}
        names = {
            int(c["feature_index"]): str(c.get("feature_id") or c["flat_feature_index"])
            for c in cats
        }
        float_names = {
            int(f["feature_index"]): str(f.get("feature_id") or f["feature_index"])
            for f in info.get("float_features") or []
        }
        self.names = names
        known: dict[int, list] = {c: [] for c in self._flat}
        self._one_hot_count = 0
        for c in cats:
            values = c.get("values") or []
            self._one_hot_count += len(values)
            known[int(c["feature_index"])].append(projection_keys(values))
        self._ctrs: list[_Ctr] = []
        tables = doc.get("ctr_data") or {}
        self._tables: dict[str, tuple[np.ndarray, np.ndarray, int]] = {}
        for ctr in info.get("ctrs") or []:
            elements = ctr.get("elements") or []
            if len(elements) != 1 or elements[0].get("combination_element") != "cat_feature_value":
                raise UnsupportedModelError(
                    f"the CatBoost model has a CTR over the feature combination "
                    f"{_combination_name(elements, names, float_names)}, whose splits depend on "
                    "several features at once: distshap explains CTRs of single categorical "
                    "features; train with max_ctr_complexity=1"
                )
            kind = str(ctr["ctr_type"])
            if kind not in _COUNTS + _TARGETS:
                raise UnsupportedModelError(
                    f"the CatBoost model has a CTR of type {kind!r}, which distshap does not "
                    f"know; train with simple_ctr among {list(_COUNTS + _TARGETS)}"
                )
            cat = int(elements[0]["cat_feature_index"])
            if cat not in self._flat:
                raise _fail(f"a CTR uses categorical feature {cat}, which is not listed")
            key = str(ctr["identifier"])
            if key not in tables:
                raise _fail(f"the CTR {key} has no table in ctr_data")
            self._ctrs.append(
                _Ctr(
                    cat,
                    kind,
                    int(ctr.get("target_border_idx", 0)),
                    np.float32(ctr["prior_numerator"]),
                    np.float32(ctr["prior_denomerator"]),
                    np.float32(ctr["shift"]),
                    np.float32(ctr["scale"]),
                    np.asarray(ctr["borders"], dtype=np.float32).reshape(-1),
                    key,
                )
            )
            if key not in self._tables:
                self._tables[key] = _read_table(tables[key], kind)
            known[cat].append(self._tables[key][0])
        self._first_ctr_bin = n_float_bins + self._one_hot_count
        self.keys = {}
        for cat, parts in known.items():
            keys = np.unique(np.concatenate(parts)) if parts else np.zeros(0, np.uint64)
            keys = keys[keys != _EMPTY_BUCKET]
            if keys.size > _MAX_CODES:
                raise UnsupportedModelError(
                    f"categorical feature {names[cat]!r} has {keys.size:,} known categories; "
                    f"distshap codes at most {_MAX_CODES:,}"
                )
            self.keys[self._flat[cat]] = keys

    def split(self, split: dict) -> tuple[int, np.ndarray, bool]:
        """``(flat feature, codes that go right, default_left)`` of one categorical split."""
        if split["split_type"] == "OneHotFeature":
            cat = int(split["cat_feature_index"])
            keys = self.keys[self._flat[cat]]
            key = projection_keys([int(split["value"])])
            code = np.searchsorted(keys, key)
            if code[0] >= keys.size or keys[code[0]] != key[0]:
                raise _fail(
                    f"a one-hot split on {self.names[cat]!r} tests the value {split['value']}, "
                    "which features_info does not list"
                )
            return self._flat[cat], code.astype(np.int32), True
        ctr, border = self._ctr_of(split)
        keys = self.keys[self._flat[ctr.cat]]
        table_keys, counts, denominator = self._tables[ctr.table]
        empty = _ctr_values(ctr, None, denominator)
        values = np.full(keys.size, empty, dtype=np.float32)
        if table_keys.size:
            found = np.minimum(np.searchsorted(table_keys, keys), table_keys.size - 1)
            inside = table_keys[found] == keys
            values[inside] = _ctr_values(ctr, counts[found[inside]], denominator)
        right = np.flatnonzero(values > border).astype(np.int32)
        return self._flat[ctr.cat], right, not bool(empty > border)

    def _ctr_of(self, split: dict) -> tuple[_Ctr, np.float32]:
        """The CTR and border of an ``OnlineCtr`` split, by its binary-feature index (float
        borders, then one-hot values, then CTR borders in the order ``features_info`` lists)."""
        k = int(split["split_index"]) - self._first_ctr_bin
        border = np.float32(split["border"])
        for ctr in self._ctrs:
            if 0 <= k < ctr.borders.size:
                if ctr.borders[k] != border or ctr.target_border != int(
                    split.get("ctr_target_border_idx", ctr.target_border)
                ):
                    break
                return ctr, border
            k -= ctr.borders.size
        raise _fail(
            f"a CTR split (split_index {split['split_index']}, border {float(border)}) matches "
            "no CTR border of features_info"
        )


def _read_table(table: dict, kind: str) -> tuple[np.ndarray, np.ndarray, int]:
    """A ``ctr_data`` table -> (keys sorted, float32 counts per key, counter denominator)."""
    stride = int(table["hash_stride"])
    flat = table["hash_map"]
    if stride < 2 or len(flat) % stride:
        raise _fail(f"a CTR table has {len(flat)} entries, not a multiple of {stride}")
    keys = np.array([int(k) for k in flat[::stride]], dtype=np.uint64)
    counts = np.array([flat[i::stride] for i in range(1, stride)], dtype=np.float64).T
    if kind in _COUNTS and stride != 2:
        raise _fail(f"a {kind} CTR table has stride {stride}, not 2")
    order = np.argsort(keys, kind="stable")
    denominator = int(table.get("counter_denominator", 0))
    return keys[order], counts[order].astype(np.float32), denominator


def _calc(ctr: _Ctr, good: Any, total: Any) -> np.ndarray:
    """CatBoost's CTR of counts, in float32 as it computes it."""
    good = np.asarray(good, dtype=np.float32)
    total = np.asarray(total, dtype=np.float32)
    value = (good + ctr.prior_num) / (total + ctr.prior_denom)
    return (value + ctr.shift) * ctr.scale


def _ctr_values(ctr: _Ctr, counts: np.ndarray | None, denominator: int) -> np.ndarray:
    """The CTR of table rows ``counts`` (``None``: of a category with no entry)."""
    if ctr.kind in _COUNTS:
        good = 0 if counts is None else counts[:, 0]
        return _calc(ctr, good, denominator)
    if counts is None:
        return _calc(ctr, 0, 0)
    if ctr.kind in ("BinarizedTargetMeanValue", "FloatTargetMeanValue"):
        return _calc(ctr, counts[:, 0], counts[:, 1])
    if ctr.kind == "Buckets":
        return _calc(ctr, counts[:, ctr.target_border], counts.sum(axis=1, dtype=np.float64))
    if counts.shape[1] > 2:  # Borders over several target classes
        good = counts[:, ctr.target_border + 1 :].sum(axis=1, dtype=np.float64)
        below = counts[:, : ctr.target_border + 1].sum(axis=1, dtype=np.float64)
        return _calc(ctr, good, below + good)
    return _calc(ctr, counts[:, 1], counts[:, 0] + counts[:, 1].astype(np.float64))


# ------------------------------------------------------------------------------------------
# The input side: category values -> codes
# ------------------------------------------------------------------------------------------

#: A one-feature CatBoost model (no splits): its JSON export with a pool lists hashes.
_HASHER_DOC = {
    "features_info": {
        "categorical_features": [{"feature_index": 0, "flat_feature_index": 0, "feature_id": "v"}]
    },
    "oblivious_trees": [{"leaf_values": [0.0], "leaf_weights": [1.0], "splits": []}],
    "scale_and_bias": [1.0, [0.0]],
    "model_info": {},
}
_HASHER_LOCK = threading.Lock()


@functools.lru_cache(maxsize=1)
def _hasher() -> Any:
    try:
        import catboost
    except ImportError:
        raise ImportError(
            "the model has CatBoost categorical features: install catboost, which distshap "
            "asks for the hashes of category values (pip install catboost)"
        ) from None
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "hasher.json")
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(_HASHER_DOC, fh)
        model = catboost.CatBoost()
        model.load_model(path, format="json")
    return model


def _hash_batch(texts: list[str]) -> dict[str, int]:
    import catboost

    pool = catboost.Pool([[t] for t in texts], cat_features=[0])
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "hashes.json")
        with _HASHER_LOCK:
            _hasher().save_model(path, format="json", pool=pool)
        with open(path, encoding="utf-8") as fh:
            listed = json.load(fh)["features_info"].get("cat_features_hash") or []
    return {str(e["value"]): int(e["hash"]) for e in listed}


#: Hashes asked of CatBoost so far in this process (a value's hash never changes), so a call
#: whose values were seen before exports nothing; emptied past ``_MOST_HASHES`` values.
_HASHES: dict[str, int] = {}
_MOST_HASHES = 1 << 20


def catboost_hashes(texts: list[str]) -> np.ndarray:
    """CatBoost's 32-bit hashes (uint32) of category values given as text, by CatBoost itself
    (once a value in a process)."""
    if not texts:
        return np.zeros(0, np.uint32)
    with _HASHER_LOCK:
        found = {t: _HASHES[t] for t in texts if t in _HASHES}
    new = [t for t in texts if t not in found]
    if new:
        found.update(_hash_batch(new))
        for t in new:  # two values of one hash: the export lists one of them
            if t not in found:
                found.update(_hash_batch([t]))
        with _HASHER_LOCK:
            if len(_HASHES) + len(new) > _MOST_HASHES:
                _HASHES.clear()
            _HASHES.update((t, found[t]) for t in new)
    return np.array([found[t] for t in texts], dtype=np.uint32)


def _as_text(value: Any, name: Any, what: str) -> str:
    """A category value as CatBoost reads it: text as is, an integer (a boolean: 1 or 0) as its
    decimal text; CatBoost refuses any other value, a float such as ``1.0`` included."""
    if isinstance(value, str):
        return value
    if isinstance(value, (bool, np.bool_, int, np.integer)):
        return str(int(value))
    held = "a missing value" if value is None or value != value else f"{value!r}"
    raise TypeError(
        f"{what}'s categorical column {name!r} holds {held}: CatBoost reads categories as text or "
        "integers; convert the column (missing values to a text such as 'nan', as CatBoost "
        "requires)"
    )


def frame_codes(frame: Any, keys: dict[int, Any], what: str = "X") -> Any:
    """The frame with each categorical column (position ``j`` in ``keys``) as float codes.

    A value's code is the position of its key among ``keys[j]`` (the model's known categories,
    increasing); a value the model does not know becomes NaN (CatBoost's outcome for an unknown
    category rides on ``default_left``). Other columns are returned unchanged.

    Raises
    ------
    TypeError
        For a missing value, or a value that is no text or integer, in a categorical column.
    """
    import pandas as pd

    plans = []
    texts: dict[str, None] = {}
    for j in sorted(keys):
        if j >= frame.shape[1]:
            continue  # a frame of the wrong width: refused later, naming the widths
        column = frame.iloc[:, j]
        inverse, uniques = pd.factorize(column, use_na_sentinel=True)
        if np.any(inverse < 0):
            _as_text(None, frame.columns[j], what)
        if column.dtype == object and not all(isinstance(u, str) for u in uniques):
            _no_float(column.to_numpy(), frame.columns[j], what)  # 1.0 is 1's key to pandas
        labels = [_as_text(v, frame.columns[j], what) for v in np.asarray(uniques, dtype=object)]
        texts.update(dict.fromkeys(labels))
        plans.append((j, inverse, labels))
    if not plans:
        return frame
    every = list(texts)
    hashed = dict(zip(every, projection_keys(catboost_hashes(every).astype(np.int64)), strict=True))
    out = frame.copy(deep=False)
    for j, inverse, labels in plans:
        known = np.asarray(keys[j], dtype=np.uint64)
        wanted = np.array([hashed[t] for t in labels], dtype=np.uint64)
        pos = np.minimum(np.searchsorted(known, wanted), max(known.size - 1, 0))
        hit = (known[pos] == wanted) if known.size else np.zeros(wanted.size, bool)
        codes = np.where(hit, pos, np.nan).astype(np.float64)
        out.isetitem(j, pd.Series(codes[inverse], index=frame.index, name=frame.columns[j]))
    return out


def _no_float(values: np.ndarray, name: Any, what: str) -> None:
    """Refuse (:func:`_as_text`) the first float among a categorical column's objects."""
    for v in values.tolist():
        if isinstance(v, (float, np.floating)):
            _as_text(v, name, what)


def rows_frame(
    X: Any, names: tuple[str, ...] | None, what: str = "X", categorical: Any = ()
) -> Any:
    """Rows that are no DataFrame (a 2-D NumPy array: numbers, text or objects) -> a pandas one.

    CatBoost takes category values as text or integers, which only a NumPy array of text or
    objects (what NumPy makes of a list of rows) or a DataFrame holds; its columns are named by
    the model's features (by position when the model has no names), so :func:`frame_codes`
    reads them as a frame's. A numeric feature's column that is not numbers already becomes the
    floats CatBoost reads from it (:func:`number_column`); ``categorical`` lists the positions
    of the categorical features.

    Raises
    ------
    TypeError
        For a CuPy array, a sparse matrix or other rows that hold no category values.
    ValueError
        For a value of a numeric feature that CatBoost reads as no number.
    """
    import pandas as pd

    if not isinstance(X, np.ndarray) or X.ndim != 2:
        kind = f"{type(X).__module__.split('.')[0]}.{type(X).__name__}"
        shape = f" of {X.ndim} dimensions" if isinstance(X, np.ndarray) else ""
        raise TypeError(
            f"{what} is a {kind}{shape}: the model has CatBoost categorical features, whose "
            "values are text or integers; pass a pandas DataFrame or a 2-D NumPy array"
        )
    columns = list(names) if names is not None and len(names) == X.shape[1] else None
    frame = pd.DataFrame(X, columns=columns)
    if X.dtype.kind in "biuf":
        return frame
    for j in sorted(set(range(X.shape[1])) - {int(c) for c in categorical}):
        frame.isetitem(j, number_column(X[:, j], frame.columns[j], what))
    return frame


#: Text CatBoost reads as a missing number (besides the empty text).
_MISSING_TEXT = frozenset(
    ("#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN",
     "N/A", "NA", "NULL", "NaN", "n/a", "nan", "null", "NAN", "Na", "na", "Null", "none",
     "None", "-")
)  # fmt: skip
#: Blanks CatBoost skips before a number (text of blanks only it reads as 0).
_BLANKS = " \t\n\v\f\r"
#: Text CatBoost reads as a number: a decimal numeral, after any blanks (none after it).
_NUMERAL = re.compile(rf"[{_BLANKS}]*[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")


def _number(value: Any, name: Any, what: str) -> float:
    """One value of a numeric feature as CatBoost reads it (float64; NaN for missing)."""
    if value is None:
        return float("nan")
    if isinstance(value, (bool, np.bool_, int, np.integer, float, np.floating)):
        return float(value)
    text = value.decode("ascii", "replace") if isinstance(value, (bytes, np.bytes_)) else value
    if isinstance(text, str):
        if not text or text in _MISSING_TEXT:
            return float("nan")
        if _NUMERAL.fullmatch(text):
            return float(text)
        if not text.strip(_BLANKS):
            return 0.0
    raise ValueError(
        f"{what}'s numeric column {name!r} holds {value!r}, which CatBoost reads as no number: "
        "pass numbers (or decimal text) there, NaN or None where a value is missing"
    )


def number_column(values: np.ndarray, name: Any, what: str = "X") -> np.ndarray:
    """A numeric feature's column of text or objects -> float64, as CatBoost reads it.

    Numbers (and booleans) are taken as they are, text as a decimal numeral (double precision,
    as CatBoost parses it; blanks before it are skipped, not after; text of blanks only is 0),
    ``None``, NaN and the text CatBoost reads as missing (``"nan"``, ``"NA"``, ``""``, ...) as
    NaN.

    Raises
    ------
    ValueError
        For any other value (such as ``"x"`` or ``"inf"``), naming the column and the value.
    """
    if values.dtype.kind in "biuf":
        return values.astype(np.float64)
    seen: dict[Any, float] = {}
    out = np.empty(values.shape[0], dtype=np.float64)
    for i, v in enumerate(values.tolist()):
        if isinstance(v, str):  # text repeats: read each once
            if v not in seen:
                seen[v] = _number(v, name, what)
            out[i] = seen[v]
        else:
            out[i] = _number(v, name, what)
    return out


def user_values(rows: Any, categories: dict[int, Any]) -> np.ndarray:
    """``Explanation.data`` of rows of a model with CatBoost categorical features: the values
    as given, not their codes.

    ``rows``: the model's columns in its order, a DataFrame or a 2-D array (already read as
    the model's input). A numeric array is returned as it is; otherwise an object array whose
    categorical columns hold the values given (text, integers, a category column's labels) and
    whose numeric columns hold the floats CatBoost reads (NaN where missing).
    """
    if isinstance(rows, np.ndarray) and rows.dtype.kind in "biuf":
        return rows
    if not isinstance(rows, np.ndarray):  # a DataFrame
        return rows.to_numpy(dtype=object)
    out = rows.astype(object)
    for j in sorted(set(range(rows.shape[1])) - set(categories)):
        out[:, j] = number_column(rows[:, j], j).tolist()
    return out
