"""LightGBM models -> :class:`~distshap.models.ensemble.Ensemble`.

The loader parses LightGBM's text model format (``Booster.model_to_string()`` or a saved ``.txt``
file), so :func:`load_lightgbm_file` does not need lightgbm installed.

Conversion of LightGBM's split semantics (``include/LightGBM/tree.h``, LightGBM 4.x):

* **Numeric splits.** LightGBM sends ``x <= threshold`` left, comparing the input as a double
  against a double threshold. distshap compares float32 inputs with ``x < t`` for a float32
  ``t``. With ``f`` the largest float32 not above the double threshold, ``t = nextafter(f, +inf)``
  gives, for every float32 ``x``: ``x <= threshold  <=>  x <= f  <=>  x < t``
  (:func:`le_threshold_to_lt_float32`). Predictions therefore agree exactly for inputs that are
  float32 values (distshap casts inputs to float32); an input of exactly ``+inf`` at a split whose
  double threshold is ``+inf`` is the one value that cannot be matched.
* **Missing values.** ``missing_type`` *NaN*: NaN follows ``default_left``. *None*: LightGBM
  replaces NaN by 0, so NaN goes left iff ``0 <= threshold``. *Zero* (``zero_as_missing``): NaN
  and every value in ``[-1e-35f, 1e-35f]`` follow ``default_left``. When the values going left
  then form one interval, this is one ordinary split. Otherwise the node is rebuilt as a small
  tree of splits on the same feature whose leaves are copies of the original children; the
  copies of one child share its cover equally, so every copy keeps the child's internal cover
  fractions and the total weight reaching each child is unchanged. Path-dependent SHAP values
  are a function of the conditional expectations ``E[f | x_S]`` only, and those are identical
  for the rebuilt tree, so SHAP values match LightGBM's ``pred_contrib`` exactly.
* **Categorical splits.** LightGBM sends the categories of the bitset left and everything else
  (other categories, negative codes, NaN) right. distshap lists categories that go right, so the
  children are swapped, and NaN goes to distshap's left (LightGBM's right).
* **Leaf values** in the text model already include shrinkage and the ``boost_from_average``
  init score; ``base_score`` is 0. Random-forest models (``average_output``) have their leaf
  values divided by the number of iterations, as LightGBM's predictions are.
* **Cover** is ``internal_count`` / ``leaf_count``, the sample counts LightGBM's own TreeSHAP
  (``pred_contrib=True``) weights by.
* **Multiclass:** tree ``i`` belongs to output group ``i % num_tree_per_iteration``.

Linear trees (``linear_tree=True``) are refused: their leaves are not constants.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from distshap.models.ensemble import Ensemble, UnsupportedModelError

__all__ = [
    "assemble_trees",
    "le_threshold_to_lt_float32",
    "load_lightgbm",
    "load_lightgbm_file",
    "load_lightgbm_string",
]

#: LightGBM's ``kZeroThreshold`` (``1e-35f``): values in ``[-z, z]`` count as zero.
_ZERO32 = np.float32(1e-35)
#: Growth limit for trees rebuilt because of zero-as-missing splits (nodes per original node).
_MAX_EXPANSION = 64


def le_threshold_to_lt_float32(threshold: np.ndarray | float) -> np.ndarray:
    """Convert ``x <= threshold`` (double comparison) into ``x < t`` on float32 inputs.

    Parameters
    ----------
    threshold : array_like of float64
        Thresholds of splits that send ``x <= threshold`` left, compared in double precision.

    Returns
    -------
    numpy.ndarray of float32
        ``t`` such that for every non-NaN float32 ``x``: ``x <= threshold  <=>  x < t``.
        ``t`` is the successor of the largest float32 not above ``threshold``.
    """
    thr = np.asarray(threshold, dtype=np.float64)
    with np.errstate(over="ignore"):
        f = np.atleast_1d(thr.astype(np.float32))
        down = f.astype(np.float64) > np.atleast_1d(thr)
        f[down] = np.nextafter(f[down], np.float32(-np.inf))
        out = np.nextafter(f, np.float32(np.inf))
    return out.reshape(thr.shape)


def assemble_trees(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Concatenate per-tree node arrays (local child indices) into :class:`Ensemble` fields.

    Parameters
    ----------
    parts : list of dict
        One dict per tree with ``left``, ``right`` (local indices, -1 at leaves), ``feature``,
        ``threshold``, ``default_left``, ``is_categorical``, ``cat_sizes`` (number of listed
        categories per node), ``cat_values`` (the listed categories, node after node),
        ``value`` and ``cover``.

    Returns
    -------
    dict
        The node fields of :class:`Ensemble` plus ``tree_offsets``.
    """
    sizes = np.array([p["left"].shape[0] for p in parts], dtype=np.int64)
    tree_offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)

    def cat(key: str) -> np.ndarray:
        return np.concatenate([np.asarray(p[key]) for p in parts])

    shift = np.repeat(tree_offsets[:-1], sizes)
    left = cat("left").astype(np.int64)
    right = cat("right").astype(np.int64)
    left = np.where(left >= 0, left + shift, -1).astype(np.int32)
    right = np.where(right >= 0, right + shift, -1).astype(np.int32)
    cat_offsets = np.concatenate([[0], np.cumsum(cat("cat_sizes"))]).astype(np.int64)
    return {
        "left": left,
        "right": right,
        "feature": cat("feature").astype(np.int32),
        "threshold": cat("threshold").astype(np.float32),
        "default_left": cat("default_left").astype(bool),
        "is_categorical": cat("is_categorical").astype(bool),
        "cat_offsets": cat_offsets,
        "cat_values": cat("cat_values").astype(np.int32),
        "value": cat("value").astype(np.float64),
        "cover": cat("cover").astype(np.float64),
        "tree_offsets": tree_offsets,
    }


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
    text = booster.model_to_string()
    return load_lightgbm_string(text, model_kind=f"lightgbm:{type(model).__name__}")


def load_lightgbm_file(path: str | os.PathLike) -> Ensemble:
    """Read a LightGBM text model file (``Booster.save_model``) without lightgbm.

    Parameters
    ----------
    path : str or os.PathLike
        The ``.txt`` model file.

    Returns
    -------
    Ensemble
    """
    with open(os.fspath(path), encoding="utf-8") as fh:
        text = fh.read()
    return load_lightgbm_string(text, model_kind="lightgbm:file")


def _split_blocks(text: str) -> tuple[dict[str, str], list[dict[str, str]]]:
    header: dict[str, str] = {}
    trees: list[dict[str, str]] = []
    current = header
    for raw in text.splitlines():
        line = raw.strip()
        if line == "end of trees":
            break
        if not line or "=" not in line:
            continue
        key, _, val = line.partition("=")
        if key == "Tree":
            current = {}
            trees.append(current)
            continue
        current[key] = val
    if "num_tree_per_iteration" not in header and "num_class" not in header:
        raise ValueError(
            "this text is no LightGBM model: it lacks the 'num_tree_per_iteration' header; "
            "pass Booster.model_to_string() or a file written by Booster.save_model()"
        )
    return header, trees


def _floats(block: dict[str, str], key: str) -> np.ndarray:
    s = block.get(key, "").strip()
    if not s:
        return np.zeros(0, dtype=np.float64)
    return np.array(s.split(), dtype=np.float64)


def _ints(block: dict[str, str], key: str) -> np.ndarray:
    s = block.get(key, "").strip()
    if not s:
        return np.zeros(0, dtype=np.int64)
    return np.array(s.split(), dtype=np.int64)


class _TreeOut:
    """Node lists of one converted tree (local indices)."""

    def __init__(self) -> None:
        self.left: list[int] = []
        self.right: list[int] = []
        self.feature: list[int] = []
        self.threshold: list[float] = []
        self.default_left: list[bool] = []
        self.is_cat: list[bool] = []
        self.cats: list[np.ndarray] = []
        self.value: list[float] = []
        self.cover: list[float] = []

    def add(self, feature: int, thr: float, dl: bool, is_cat: bool, cats, value, cover) -> int:
        self.left.append(-1)
        self.right.append(-1)
        self.feature.append(feature)
        self.threshold.append(thr)
        self.default_left.append(dl)
        self.is_cat.append(is_cat)
        self.cats.append(cats)
        self.value.append(value)
        self.cover.append(cover)
        return len(self.left) - 1


_EMPTY_CATS = np.zeros(0, dtype=np.int32)


def _zero_missing_intervals(t: np.float32, dl: bool) -> tuple[list[np.float32], list[bool], int]:
    """Split the float32 line for a zero-as-missing node into intervals.

    Returns the cuts ``c_0 < c_1 < ...`` (interval ``i`` is ``[c_{i-1}, c_i)``, unbounded at the
    ends), whether each interval goes to LightGBM's left child (adjacent equal labels merged),
    and the index of the interval holding the zero region ``[-1e-35f, 1e-35f]``.
    """
    a = np.float32(-_ZERO32)
    b = np.nextafter(_ZERO32, np.float32(np.inf))
    cuts = sorted({a, b, np.float32(t)} - {np.float32(-np.inf)})
    lows = [np.float32(-np.inf), *cuts]
    labels = [bool(dl) if a <= lo < b else bool(lo < t) for lo in lows]
    zero_idx = lows.index(a)
    m_cuts: list[np.float32] = []
    m_labels = [labels[0]]
    m_zero = 0
    for i in range(1, len(labels)):
        if labels[i] != m_labels[-1]:
            m_cuts.append(cuts[i - 1])
            m_labels.append(labels[i])
        if i == zero_idx:
            m_zero = len(m_labels) - 1
    return m_cuts, m_labels, m_zero


def _convert_tree(
    block: dict[str, str], tree_index: int, num_features: int, scale: float
) -> dict[str, np.ndarray]:
    """Convert one tree block into node arrays with local child indices."""
    if block.get("is_linear", "0").strip() not in ("0", ""):
        raise UnsupportedModelError(
            f"LightGBM tree {tree_index} is a linear tree (linear_tree=True): its leaves are "
            "linear models, which path-dependent TreeSHAP cannot explain exactly; retrain with "
            "linear_tree=False"
        )
    num_leaves = int(block["num_leaves"])
    leaf_value = _floats(block, "leaf_value") * scale
    leaf_count = _floats(block, "leaf_count")
    if num_leaves == 1:
        cover = float(leaf_count[0]) if leaf_count.size and leaf_count[0] > 0 else 1.0
        return {
            "left": np.array([-1], np.int32),
            "right": np.array([-1], np.int32),
            "feature": np.array([-1], np.int32),
            "threshold": np.zeros(1, np.float32),
            "default_left": np.zeros(1, bool),
            "is_categorical": np.zeros(1, bool),
            "cat_sizes": np.zeros(1, np.int64),
            "cat_values": _EMPTY_CATS,
            "value": leaf_value[:1].astype(np.float64),
            "cover": np.array([cover]),
        }
    ni = num_leaves - 1
    feature = _ints(block, "split_feature")
    thr = _floats(block, "threshold")
    dtype = _ints(block, "decision_type")
    lc = _ints(block, "left_child")
    rc = _ints(block, "right_child")
    internal_count = _floats(block, "internal_count")
    if internal_count.size != ni or leaf_count.size != num_leaves:
        raise UnsupportedModelError(
            f"LightGBM tree {tree_index} lacks internal_count/leaf_count: the model has no "
            "training statistics, which path-dependent SHAP needs"
        )
    if np.any(feature >= num_features) or np.any(feature < 0):
        raise ValueError(f"LightGBM tree {tree_index} splits on a feature outside the model")
    is_cat = (dtype & 1).astype(bool)
    dl_raw = ((dtype >> 1) & 1).astype(bool)
    mtype = (dtype >> 2) & 3
    t32 = le_threshold_to_lt_float32(np.where(is_cat, 0.0, thr))
    # categorical bitsets
    cat_sets: list[np.ndarray] = [_EMPTY_CATS] * ni
    if is_cat.any():
        bounds = _ints(block, "cat_boundaries")
        words = _ints(block, "cat_threshold").astype(np.uint64)
        for j in np.flatnonzero(is_cat):
            k = int(thr[j])
            w = words[bounds[k] : bounds[k + 1]]
            bits = np.unpackbits(w.astype("<u4").view(np.uint8), bitorder="little")
            cat_sets[j] = np.flatnonzero(bits).astype(np.int32)
    # missing directions for simple numeric nodes
    dl = np.where(mtype == 2, dl_raw, 0.0 <= thr)
    dl = np.where(is_cat, True, dl)
    zero_nodes = (~is_cat) & (mtype == 1)
    simple = np.ones(ni, dtype=bool)
    for j in np.flatnonzero(zero_nodes):
        cuts, labels, zidx = _zero_missing_intervals(t32[j], bool(dl_raw[j]))
        if len(labels) == 2 and labels[0]:
            t32[j] = cuts[0]
            dl[j] = bool(dl_raw[j])
        else:
            simple[j] = False
    leftl = np.where(lc >= 0, lc, ni + ~lc)
    rightl = np.where(rc >= 0, rc, ni + ~rc)
    # categorical: LightGBM's bitset goes left -> distshap lists it going right, swap children
    left_out = np.where(is_cat, rightl, leftl)
    right_out = np.where(is_cat, leftl, rightl)
    if simple.all():
        n = ni + num_leaves
        cat_sizes = np.zeros(n, np.int64)
        cat_sizes[:ni] = [c.size for c in cat_sets]
        return {
            "left": np.concatenate([left_out, -np.ones(num_leaves, np.int64)]).astype(np.int32),
            "right": np.concatenate([right_out, -np.ones(num_leaves, np.int64)]).astype(np.int32),
            "feature": np.concatenate([feature, -np.ones(num_leaves, np.int64)]).astype(np.int32),
            "threshold": np.concatenate([t32, np.zeros(num_leaves, np.float32)]),
            "default_left": np.concatenate([dl, np.zeros(num_leaves, bool)]),
            "is_categorical": np.concatenate([is_cat, np.zeros(num_leaves, bool)]),
            "cat_sizes": cat_sizes,
            "cat_values": np.concatenate(cat_sets) if is_cat.any() else _EMPTY_CATS,
            "value": np.concatenate([np.zeros(ni), leaf_value]),
            "cover": np.concatenate([internal_count, leaf_count]),
        }
    # slow path: rebuild zero-as-missing nodes whose left set is not one interval
    out = _TreeOut()
    limit = _MAX_EXPANSION * (ni + num_leaves)

    def build(node: int, cover_scale: float) -> int:
        if len(out.left) > limit:
            raise UnsupportedModelError(
                f"LightGBM tree {tree_index} has too many zero-as-missing splits to rewrite "
                f"exactly (more than {limit} nodes); retrain with zero_as_missing=False"
            )
        if node >= ni:
            leaf = node - ni
            return out.add(-1, 0.0, False, False, _EMPTY_CATS, leaf_value[leaf],
                           leaf_count[leaf] * cover_scale)  # fmt: skip
        if simple[node]:
            idx = out.add(int(feature[node]), float(t32[node]), bool(dl[node]),
                          bool(is_cat[node]), cat_sets[node], 0.0,
                          internal_count[node] * cover_scale)  # fmt: skip
            out.left[idx] = build(int(left_out[node]), cover_scale)
            out.right[idx] = build(int(right_out[node]), cover_scale)
            return idx
        cuts, labels, zidx = _zero_missing_intervals(t32[node], bool(dl_raw[node]))
        copies = {True: labels.count(True), False: labels.count(False)}
        child = {True: int(leftl[node]), False: int(rightl[node])}

        def build_range(lo: int, hi: int) -> int:
            # intervals lo..hi-1 (interval i lies between cuts[i-1] and cuts[i])
            if hi - lo == 1:
                lab = labels[lo]
                return build(child[lab], cover_scale / copies[lab])
            mid = (lo + hi) // 2
            idx = out.add(int(feature[node]), float(cuts[mid - 1]), zidx < mid, False,
                          _EMPTY_CATS, 0.0, 0.0)  # fmt: skip
            out.left[idx] = build_range(lo, mid)
            out.right[idx] = build_range(mid, hi)
            out.cover[idx] = out.cover[out.left[idx]] + out.cover[out.right[idx]]
            return idx

        return build_range(0, len(labels))

    build(0, 1.0)
    n = len(out.left)
    return {
        "left": np.array(out.left, np.int32),
        "right": np.array(out.right, np.int32),
        "feature": np.array(out.feature, np.int32),
        "threshold": np.array(out.threshold, np.float32),
        "default_left": np.array(out.default_left, bool),
        "is_categorical": np.array(out.is_cat, bool),
        "cat_sizes": np.array([c.size for c in out.cats], np.int64).reshape(n),
        "cat_values": np.concatenate(out.cats).astype(np.int32) if n else _EMPTY_CATS,
        "value": np.array(out.value, np.float64),
        "cover": np.array(out.cover, np.float64),
    }


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
    """
    header, blocks = _split_blocks(text)
    num_groups = int(header.get("num_tree_per_iteration", header.get("num_class", "1")))
    num_features = int(header["max_feature_idx"]) + 1
    if not blocks:
        raise ValueError("the LightGBM model has no trees: nothing to explain")
    scale = 1.0
    if "average_output" in header:
        num_iterations = len(blocks) // num_groups
        scale = 1.0 / max(num_iterations, 1)
    parts = [_convert_tree(b, i, num_features, scale) for i, b in enumerate(blocks)]
    nodes = assemble_trees(parts)
    names = header.get("feature_names", "").split()
    infos = header.get("feature_infos", "").split()
    feature_types = None
    if len(infos) == num_features:
        feature_types = tuple("q" if (s.startswith("[") or s == "none") else "c" for s in infos)
    extra: dict = {}
    marker = "\npandas_categorical:"
    if marker in text:
        line = text[text.index(marker) + len(marker) :].split("\n", 1)[0].strip()
        try:
            cats = json.loads(line)
        except ValueError:
            cats = None
        if cats:
            # the training frame's category lists, in order of the categorical columns:
            # inputs must carry the codes (positions in these lists), as LightGBM maps them
            extra["pandas_categorical"] = cats
            cat_positions = [i for i, t in enumerate(feature_types or ()) if t == "c"]
            if len(cat_positions) == len(cats):
                # DataFrame inputs are coded by these lists (distshap.inputs), as LightGBM does
                extra["category_values"] = dict(zip(cat_positions, cats, strict=True))
    objective = header.get("objective", "unknown").split()[0] if "objective" in header else "?"
    return Ensemble(
        **nodes,
        tree_group=(np.arange(len(blocks)) % num_groups).astype(np.int32),
        num_features=num_features,
        num_groups=num_groups,
        base_score=np.zeros(num_groups, dtype=np.float64),
        feature_names=tuple(names) if len(names) == num_features else None,
        feature_types=feature_types,
        model_kind=f"{model_kind}:{objective}",
        extra=extra,
    ).validate()
