"""LightGBM models -> :class:`~distshap.models.ensemble.Ensemble`.

The loader parses LightGBM's text model format (``Booster.model_to_string()`` or a saved ``.txt``
file), so :func:`load_lightgbm_file` does not need lightgbm installed. An in-memory booster is
written out on one thread (LightGBM's OpenMP threads do not survive ``fork``: a forked child that
writes with them hangs).

Conversion of LightGBM's split semantics (``include/LightGBM/tree.h``, LightGBM 4.x):

* **Numeric splits.** LightGBM sends ``x <= threshold`` left, comparing the input as a double
  with a double threshold. The loader sets ``threshold64 = nextafter(threshold, +inf)``: for
  every double ``x``, ``x <= threshold  <=>  x < threshold64`` (float64 inputs keep LightGBM's
  comparisons exactly, through :mod:`distshap.encoding`); ``threshold`` (float32) is the
  smallest float32 not below ``threshold64``, exact for float32 inputs. A ``+inf`` input at a
  ``+inf`` threshold is the one value sent the other way. LightGBM reads every dense input in
  ``[-z, z]`` (``kZeroThreshold``, below) as 0, so a threshold in that region (its bins put one
  at ``-z``) becomes the edge of the region on 0's side: ``-z`` itself goes right of ``-z``.
* **Missing values.** ``missing_type`` *NaN*: NaN follows ``default_left``. *None*: LightGBM
  replaces NaN by 0, so NaN goes left iff ``0 <= threshold``. *Zero* (``zero_as_missing``): NaN
  and every double in ``[-z, z]`` follow ``default_left``, with ``z`` LightGBM's
  ``kZeroThreshold`` (the float ``1e-35f`` held in a double). When the values going left then
  form one interval, this is one ordinary split. Otherwise the node is rebuilt as a small tree of
  splits on the same feature (cut points in float64) whose leaves are copies of the original
  children; the copies of one child share its cover equally, so every copy keeps the child's
  internal cover fractions and the weight reaching each child is unchanged. Path-dependent SHAP
  values are a function of the conditional expectations ``E[f | x_S]`` only, and those are
  identical for the rebuilt tree, so SHAP values match LightGBM's ``pred_contrib`` exactly.
* **Categorical splits.** LightGBM sends the categories of the bitset left and everything else
  (other categories, negative codes, NaN) right. distshap lists categories that go right, so the
  children are swapped, and NaN goes to distshap's left (LightGBM's right).
* **Leaf values** in the text model already include shrinkage and the ``boost_from_average``
  init score; ``base_score`` is 0. Random-forest models (``average_output``) are explained as
  LightGBM's ``raw_score`` and ``pred_contrib`` report them: the *sum* over the trees (its
  ``predict`` transforms that sum divided by the number of iterations);
  ``extra["average_output"]`` records the flag.
* **Cover** is ``internal_count`` / ``leaf_count``, the sample counts LightGBM's own TreeSHAP
  (``pred_contrib=True``) weights by.
* **Multiclass:** tree ``i`` belongs to output group ``i % num_tree_per_iteration``.
* **Feature names** are stored as LightGBM rewrites them (:func:`lightgbm_feature_name`).

Every count the text records is checked (:mod:`distshap.models._lightgbm_text`); a truncated or
inconsistent model is refused with what is wrong. Linear trees (``linear_tree=True``) are
refused: their leaves are not constants.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

from distshap.models._common import (
    EMPTY_CATS,
    assemble_trees,
    le_threshold_to_lt64,
    lt64_to_float32,
)
from distshap.models._files import in_file, read_model_bytes, refusal, sniff_model_bytes
from distshap.models._lightgbm_text import LightGBMText, TreeArrays, parse_lightgbm_text
from distshap.models.ensemble import Ensemble, UnsupportedModelError
from distshap.models.iterations import iterations_indptr

__all__ = [
    "lightgbm_feature_name",
    "load_lightgbm",
    "load_lightgbm_bytes",
    "load_lightgbm_file",
    "load_lightgbm_string",
]

#: LightGBM's ``kZeroThreshold``: the float ``1e-35f`` held in a double; ``[-z, z]`` is zero.
_ZERO64 = float(np.float32(1e-35))
#: Growth limit for trees rebuilt because of zero-as-missing splits (nodes per original node).
_MAX_EXPANSION = 64


def lightgbm_feature_name(name: Any) -> str:
    """The name LightGBM stores for a training column named ``name``.

    LightGBM's Python package takes ``str(name)`` of each column (``feature_name='auto'``); its
    C++ side (``Dataset::set_feature_names``) replaces every ASCII space ``' '`` by ``'_'``
    (tabs, non-breaking and other Unicode spaces are kept) and, receiving C strings, ends a name
    at its first NUL character. Names holding a JSON special character (``" , : [ ] { }``) or
    a newline are refused by LightGBM at training, so no model stores them.

    Parameters
    ----------
    name
        A column label of the training frame.

    Returns
    -------
    str
        The name ``Booster.feature_name()`` reports for that column.
    """
    return str(name).split("\x00", 1)[0].replace(" ", "_")


def load_lightgbm(model: Any) -> Ensemble:
    """Convert a LightGBM ``Booster`` or fitted sklearn estimator (``LGBMRegressor``, ...).

    Parameters
    ----------
    model : lightgbm.Booster or lightgbm.LGBMModel
        A trained model. The best iteration is used when early stopping recorded one, as
        ``Booster.predict`` does.

    Returns
    -------
    Ensemble

    Raises
    ------
    UnsupportedModelError
        For linear trees.
    TypeError
        For an object that is no LightGBM model.
    """
    booster = model
    if not hasattr(booster, "model_to_string"):
        try:
            booster = model.booster_
        except AttributeError as exc:
            raise TypeError(
                f"cannot read a LightGBM model from a {type(model).__name__}: pass a "
                "lightgbm.Booster or a fitted LGBMRegressor/LGBMClassifier/LGBMRanker"
            ) from exc
        except Exception as exc:  # lightgbm raises LGBMNotFittedError
            raise TypeError(
                f"the {type(model).__name__} is not fitted: call fit() before explaining it"
            ) from exc
    with _one_thread():
        text = booster.model_to_string()
    return load_lightgbm_string(text, model_kind=f"lightgbm:{type(model).__name__}")


_MAX_THREADS_LOCK = threading.Lock()  # one save at a time restores the process-wide limit
_SAVING: list[Any] = []  # (the limit before, LGBM_SetMaxThreads) of the save in progress


def _after_fork_in_child() -> None:
    """A child forked while another thread saved: its lock free again, the limit given back
    (that thread, which would release and restore both, does not exist in the child)."""
    global _MAX_THREADS_LOCK
    _MAX_THREADS_LOCK = threading.Lock()
    if _SAVING:
        before, set_max = _SAVING.pop()
        set_max(before)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    """LightGBM runs on one thread inside (its process-wide maximum, restored after).

    A child forked from a process whose LightGBM OpenMP threads ran (training, predicting)
    waits for ever on those threads; on one thread the text is the same. LightGBM < 4 has no
    such limit: nothing changes there.
    """
    try:
        from lightgbm.basic import _LIB

        get_max, set_max = _LIB.LGBM_GetMaxThreads, _LIB.LGBM_SetMaxThreads
    except (ImportError, AttributeError):
        yield
        return
    with _MAX_THREADS_LOCK:
        before = ctypes.c_int(-1)
        if get_max(ctypes.byref(before)) != 0 or set_max(ctypes.c_int(1)) != 0:
            yield
            return
        _SAVING.append((before, set_max))
        try:
            yield
        finally:
            _SAVING.clear()
            set_max(before)


def load_lightgbm_file(path: str | os.PathLike) -> Ensemble:
    """Read a LightGBM text model file (``Booster.save_model``) without lightgbm.

    Parameters
    ----------
    path : str or os.PathLike
        The ``.txt`` model file.

    Returns
    -------
    Ensemble

    Raises
    ------
    ValueError
        For a truncated or inconsistent file, or one that is no LightGBM text model (the
        message names the file).
    """
    with in_file(path):
        data = read_model_bytes(path)
        kind = sniff_model_bytes(data)
        if kind not in ("lightgbm", "unknown"):
            raise UnsupportedModelError(refusal(kind, data))
        return load_lightgbm_bytes(data, model_kind="lightgbm:file").validate()


def load_lightgbm_bytes(data: bytes, model_kind: str = "lightgbm") -> Ensemble:
    """Convert the bytes of a LightGBM text model (UTF-8)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"not a LightGBM text model: byte {exc.start} is not UTF-8 text; save the model "
            "with booster.save_model('model.txt')"
        ) from None
    return load_lightgbm_string(text, model_kind=model_kind)


def _zero_missing_intervals(t64: float, dl: bool) -> tuple[list[float], list[bool], int]:
    """Split the float64 line for a zero-as-missing node into intervals.

    Returns the cuts ``c_0 < c_1 < ...`` (interval ``i`` is ``[c_{i-1}, c_i)``, unbounded at the
    ends), whether each interval goes to LightGBM's left child (adjacent equal labels merged),
    and the index of the interval holding the zero region ``[-z, z]``.
    """
    a = -_ZERO64
    b = float(np.nextafter(_ZERO64, np.inf))
    cuts = sorted({a, b, float(t64)} - {-np.inf})
    lows = [-np.inf, *cuts]
    labels = [bool(dl) if a <= lo < b else bool(lo < t64) for lo in lows]
    zero_idx = lows.index(a)
    m_cuts: list[float] = []
    m_labels = [labels[0]]
    m_zero = 0
    for i in range(1, len(labels)):
        if labels[i] != m_labels[-1]:
            m_cuts.append(cuts[i - 1])
            m_labels.append(labels[i])
        if i == zero_idx:
            m_zero = len(m_labels) - 1
    return m_cuts, m_labels, m_zero


def _leaf_only(tree: TreeArrays) -> dict[str, np.ndarray]:
    lc = tree.leaf_count
    cover = float(lc[0]) if lc.size and lc[0] > 0 else 1.0
    return {
        "left": np.array([-1], np.int32),
        "right": np.array([-1], np.int32),
        "feature": np.array([-1], np.int32),
        "threshold": np.zeros(1, np.float32),
        "threshold64": np.zeros(1, np.float64),
        "default_left": np.zeros(1, bool),
        "is_categorical": np.zeros(1, bool),
        "cat_sizes": np.zeros(1, np.int64),
        "cat_values": EMPTY_CATS,
        "value": tree.leaf_value[:1].copy(),
        "cover": np.array([cover]),
    }


def _convert_tree(tree: TreeArrays) -> dict[str, np.ndarray]:
    """Convert one (checked) tree into node arrays with local child indices."""
    num_leaves = tree.num_leaves
    if num_leaves == 1:
        return _leaf_only(tree)
    ni = num_leaves - 1
    leaf_value = tree.leaf_value
    thr, dtype = tree.threshold, tree.decision_type
    is_cat = (dtype & 1).astype(bool)
    dl_raw = ((dtype >> 1) & 1).astype(bool)
    mtype = (dtype >> 2) & 3
    t64 = np.where(is_cat, 0.0, le_threshold_to_lt64(np.where(is_cat, 0.0, thr)))
    # LightGBM reads every dense input in [-z, z] as 0: a threshold inside that region (its
    # bins put one at -z) splits it as 0 does, not as the raw value (-z goes right of -z)
    in_zero = ~is_cat & (thr >= -_ZERO64) & (thr < _ZERO64)
    t64 = np.where(in_zero & (thr < 0.0), -_ZERO64, t64)
    t64 = np.where(in_zero & (thr >= 0.0), np.nextafter(_ZERO64, np.inf), t64)
    # categorical bitsets
    cat_sets: list[np.ndarray] = [EMPTY_CATS] * ni
    for j in np.flatnonzero(is_cat):
        k = int(thr[j])
        w = tree.cat_threshold[tree.cat_boundaries[k] : tree.cat_boundaries[k + 1]]
        bits = np.unpackbits(w.astype("<u4").view(np.uint8), bitorder="little")
        cat_sets[j] = np.flatnonzero(bits).astype(np.int32)
    # missing directions for simple numeric nodes
    dl = np.where(mtype == 2, dl_raw, 0.0 <= thr)
    dl = np.where(is_cat, True, dl)
    zero_info: dict[int, tuple[list[float], list[bool], int]] = {}
    for j in np.flatnonzero((~is_cat) & (mtype == 1)):
        cuts, labels, zidx = _zero_missing_intervals(float(t64[j]), bool(dl_raw[j]))
        if len(labels) == 2 and labels[0]:
            t64[j] = cuts[0]
            dl[j] = bool(dl_raw[j])
        else:
            zero_info[int(j)] = (cuts, labels, zidx)
    lc, rc = tree.left_child, tree.right_child
    leftl = np.where(lc >= 0, lc, ni + ~lc)
    rightl = np.where(rc >= 0, rc, ni + ~rc)
    # categorical: LightGBM's bitset goes left -> distshap lists it going right, swap children
    left_out = np.where(is_cat, rightl, leftl)
    right_out = np.where(is_cat, leftl, rightl)
    if not zero_info:
        leaves = -np.ones(num_leaves, np.int64)
        t64_all = np.concatenate([t64, np.zeros(num_leaves)])
        return {
            "left": np.concatenate([left_out, leaves]).astype(np.int32),
            "right": np.concatenate([right_out, leaves]).astype(np.int32),
            "feature": np.concatenate([tree.split_feature, leaves]).astype(np.int32),
            "threshold": lt64_to_float32(t64_all),
            "threshold64": t64_all,
            "default_left": np.concatenate([dl, np.zeros(num_leaves, bool)]),
            "is_categorical": np.concatenate([is_cat, np.zeros(num_leaves, bool)]),
            "cat_sizes": np.array([c.size for c in cat_sets] + [0] * num_leaves, np.int64),
            "cat_values": np.concatenate(cat_sets) if is_cat.any() else EMPTY_CATS,
            "value": np.concatenate([np.zeros(ni), leaf_value]),
            "cover": np.concatenate([tree.internal_count, tree.leaf_count]),
        }
    return _rebuild(tree, leaf_value, t64, dl, is_cat, cat_sets, left_out, right_out,
                    leftl, rightl, zero_info)  # fmt: skip


def _rebuild(tree, leaf_value, t64, dl, is_cat, cat_sets, left_out, right_out, leftl, rightl,
             zero_info) -> dict[str, np.ndarray]:  # fmt: skip
    """Rebuild a tree whose zero-as-missing nodes send more than one interval left.

    Iterative (an explicit stack), so trees of any depth convert. Nodes come out in pre-order:
    a node's children follow it, which the bottom-up cover pass relies on.
    """
    ni = tree.num_leaves - 1
    limit = _MAX_EXPANSION * (ni + tree.num_leaves)
    feature = tree.split_feature
    cols: dict[str, list] = {k: [] for k in ("left", "right", "feature", "t64", "dl", "cat",
                                             "cats", "value", "cover")}  # fmt: skip
    synthetic: list[int] = []

    def add(f: int, t: float, d: bool, c: bool, cats: np.ndarray, v: float, cov: float) -> int:
        if len(cols["left"]) >= limit:
            raise UnsupportedModelError(
                f"LightGBM tree {tree.index} has too many zero-as-missing splits to rewrite "
                f"exactly (more than {limit} nodes); retrain with zero_as_missing=False"
            )
        for key, val in zip(cols, (-1, -1, f, t, d, c, cats, v, cov), strict=True):
            cols[key].append(val)
        return len(cols["left"]) - 1

    # task: (node or -1, lo, hi, origin, cover scale, parent, side); node -1: interval range
    stack: list[tuple[int, int, int, int, float, int, str]] = [(0, 0, 0, -1, 1.0, -1, "")]
    while stack:
        node, lo, hi, origin, scale, parent, side = stack.pop()
        if node >= ni:
            leaf = node - ni
            idx = add(-1, 0.0, False, False, EMPTY_CATS, leaf_value[leaf],
                      tree.leaf_count[leaf] * scale)  # fmt: skip
        elif node >= 0 and node not in zero_info:
            idx = add(int(feature[node]), float(t64[node]), bool(dl[node]), bool(is_cat[node]),
                      cat_sets[node], 0.0, tree.internal_count[node] * scale)  # fmt: skip
            stack.append((int(right_out[node]), 0, 0, -1, scale, idx, "right"))
            stack.append((int(left_out[node]), 0, 0, -1, scale, idx, "left"))
        else:
            if node >= 0:  # a zero-as-missing node: all of its intervals
                origin, lo, hi = node, 0, len(zero_info[node][1])
            cuts, labels, zidx = zero_info[origin]
            if hi - lo == 1:
                lab = labels[lo]
                child = int(leftl[origin] if lab else rightl[origin])
                stack.append((child, 0, 0, -1, scale / labels.count(lab), parent, side))
                continue
            mid = (lo + hi) // 2
            idx = add(int(feature[origin]), cuts[mid - 1], zidx < mid, False, EMPTY_CATS,
                      0.0, 0.0)  # fmt: skip
            synthetic.append(idx)
            stack.append((-1, mid, hi, origin, scale, idx, "right"))
            stack.append((-1, lo, mid, origin, scale, idx, "left"))
        if parent >= 0:
            cols[side][parent] = idx
    cover = cols["cover"]
    for idx in reversed(synthetic):  # children come after their parent
        cover[idx] = cover[cols["left"][idx]] + cover[cols["right"][idx]]
    t64_out = np.array(cols["t64"], np.float64)
    n = t64_out.size
    return {
        "left": np.array(cols["left"], np.int32),
        "right": np.array(cols["right"], np.int32),
        "feature": np.array(cols["feature"], np.int32),
        "threshold": np.where(np.array(cols["cat"], bool), np.float32(0), lt64_to_float32(t64_out)),
        "threshold64": t64_out,
        "default_left": np.array(cols["dl"], bool),
        "is_categorical": np.array(cols["cat"], bool),
        "cat_sizes": np.array([c.size for c in cols["cats"]], np.int64).reshape(n),
        "cat_values": np.concatenate(cols["cats"]).astype(np.int32),
        "value": np.array(cols["value"], np.float64),
        "cover": np.array(cover, np.float64),
    }


def _pandas_categorical(text: str, feature_types: tuple[str, ...] | None) -> dict:
    extra: dict = {}
    marker = "\npandas_categorical:"
    if marker not in text:
        return extra
    line = text[text.index(marker) + len(marker) :].split("\n", 1)[0].strip()
    try:
        cats = json.loads(line)
    except (ValueError, RecursionError):
        cats = None
    if cats and isinstance(cats, list):
        # the training frame's category lists, in order of the categorical columns:
        # inputs must carry the codes (positions in these lists), as LightGBM maps them
        extra["pandas_categorical"] = cats
        cat_positions = [i for i, t in enumerate(feature_types or ()) if t == "c"]
        if len(cat_positions) == len(cats):
            # DataFrame inputs are coded by these lists (distshap.inputs), as LightGBM does
            extra["category_values"] = dict(zip(cat_positions, cats, strict=True))
    return extra


def load_lightgbm_string(text: str, model_kind: str = "lightgbm") -> Ensemble:
    """Convert LightGBM's text model format (``Booster.model_to_string()``).

    Parameters
    ----------
    text : str
        The model text.
    model_kind : str
        Recorded in :attr:`Ensemble.model_kind`.

    Returns
    -------
    Ensemble

    Raises
    ------
    ValueError
        For a truncated or inconsistent model text (which count disagrees is said).
    UnsupportedModelError
        For linear trees, or models without the training counts SHAP needs.
    """
    model: LightGBMText = parse_lightgbm_text(text)
    num_groups = model.num_tree_per_iteration
    parts = [_convert_tree(tree) for tree in model.trees]
    objective = model.header.get("objective", "?").split(" ")[0] or "?"
    # a binary objective with sigmoid:k != 1 has probability 1 / (1 + exp(-k m)): say so
    objective += "".join(
        f" {p}" for p in model.header.get("objective", "").split(" ")[1:]
        if p.startswith("sigmoid:") and p != "sigmoid:1"
    )  # fmt: skip
    return Ensemble(
        **assemble_trees(parts),
        tree_group=(np.arange(len(parts)) % num_groups).astype(np.int32),
        num_features=model.num_features,
        num_groups=num_groups,
        base_score=np.zeros(num_groups, dtype=np.float64),
        feature_names=model.feature_names,
        feature_types=model.feature_types,
        model_kind=f"{model_kind}:{objective}",
        extra={
            **_pandas_categorical(text, model.feature_types),
            "average_output": model.average_output,
            # boosting rounds (none in random-forest mode: its leaves are divided by the
            # number of trees, so a subset of rounds is no model LightGBM predicts)
            **(
                {}
                if model.average_output
                else {"iteration_indptr": iterations_indptr(len(parts), num_groups)}
            ),
        },
    ).validate()
