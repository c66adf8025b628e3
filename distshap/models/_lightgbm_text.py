"""LightGBM's text model format: parsed into checked arrays, every recorded count verified.

The format (``Booster.model_to_string()`` / ``save_model``) is a header of ``key=value`` lines,
one block per tree starting ``Tree=i``, then ``end of trees``. The header's ``tree_sizes`` lists
the byte size of every tree block (LightGBM itself seeks to the trees by these sizes). A file cut
short, a tree block removed or edited, or arrays whose lengths disagree with ``num_leaves`` /
``num_cat`` would otherwise load as a different model; each is refused here with what disagrees.
Only the format is read here; :mod:`distshap.models.lightgbm` gives the splits their meaning.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from distshap.models._common import check_num_features, malformed_is_value_error
from distshap.models.ensemble import UnsupportedModelError

__all__ = ["LightGBMText", "TreeArrays", "parse_lightgbm_text"]

_RESAVE = "save the model again with booster.save_model('model.txt')"
_TREE_LINE = re.compile(rb"^Tree=", re.MULTILINE)
_END_LINE = re.compile(rb"^end of trees[ \r]*$", re.MULTILINE)


@dataclass(frozen=True)
class TreeArrays:
    """One tree block's arrays, lengths checked against ``num_leaves`` and ``num_cat``."""

    index: int
    num_leaves: int
    split_feature: np.ndarray  # int64 (num_leaves - 1,)
    threshold: np.ndarray  # float64 (num_leaves - 1,)
    decision_type: np.ndarray  # int64 (num_leaves - 1,)
    left_child: np.ndarray  # int64 (num_leaves - 1,)
    right_child: np.ndarray  # int64 (num_leaves - 1,)
    internal_count: np.ndarray  # float64 (num_leaves - 1,)
    leaf_value: np.ndarray  # float64 (num_leaves,)
    leaf_count: np.ndarray  # float64 (num_leaves,) (may be empty for a one-leaf tree)
    cat_boundaries: np.ndarray  # int64 (num_cat + 1,)
    cat_threshold: np.ndarray  # int64 (cat_boundaries[-1],), 32-bit bitset words


@dataclass(frozen=True)
class LightGBMText:
    """A parsed LightGBM text model."""

    header: dict[str, str]
    trees: list[TreeArrays]
    num_features: int
    num_tree_per_iteration: int
    feature_names: tuple[str, ...] | None
    feature_types: tuple[str, ...] | None
    average_output: bool


def _fail(what: str) -> ValueError:
    return ValueError(f"inconsistent LightGBM model: {what}; {_RESAVE}")


def _header(raw: bytes) -> tuple[dict[str, str], set[str]]:
    header: dict[str, str] = {}
    flags: set[str] = set()
    for line in raw.decode("utf-8").split("\n"):
        line = line.rstrip("\r")
        if not line.strip(" "):
            continue
        key, eq, val = line.partition("=")
        if eq:
            header[key.strip(" ")] = val
        else:
            flags.add(line.strip(" "))
    return header, flags


def _int(header: dict[str, str], key: str, where: str, default: int | None = None) -> int:
    raw = header.get(key)
    if raw is None:
        if default is None:
            raise ValueError(f"not a LightGBM model: the {where} lacks {key!r}; {_RESAVE}")
        return default
    try:
        return int(raw.strip())
    except ValueError:
        raise _fail(f"the {where}'s {key}={raw.strip()!r} is no integer") from None


def _numbers(block: dict[str, str], key: str, dtype: type, tree: int, size: int) -> np.ndarray:
    text = block.get(key)
    if text is None:
        if size == 0:
            return np.zeros(0, dtype=dtype)
        raise _fail(f"tree {tree} lacks its {key} line")
    try:
        arr = np.array(text.split(), dtype=dtype)
    except (ValueError, OverflowError):
        raise _fail(f"tree {tree}'s {key} holds values that are no {np.dtype(dtype)}") from None
    if arr.size != size:
        raise _fail(f"tree {tree} has {arr.size} {key} values, its counts say {size}")
    return arr


def _tree_blocks(region: bytes, sizes: list[int] | None) -> list[bytes]:
    """Cut the trees' region into blocks, by ``tree_sizes`` when the header has it."""
    starts = [m.start() for m in _TREE_LINE.finditer(region)]
    if sizes is None:
        return [region[a:b] for a, b in zip(starts, [*starts[1:], len(region)], strict=True)]
    if len(starts) != len(sizes):
        raise _fail(
            f"the header's tree_sizes lists {len(sizes)} trees but the text holds {len(starts)} "
            "(the file was cut short or trees were removed)"
        )
    if sum(sizes) != len(region):
        raise _fail(
            f"the header's tree_sizes add up to {sum(sizes):,} bytes but the trees take "
            f"{len(region):,} (a tree was cut short or edited)"
        )
    offsets = np.concatenate([[0], np.cumsum(sizes)]).tolist()
    if offsets[:-1] != starts:
        i = next(i for i, (a, b) in enumerate(zip(offsets, starts, strict=False)) if a != b)
        raise _fail(f"tree {i} does not start where tree_sizes puts it (a tree was edited)")
    return [region[a:b] for a, b in zip(offsets[:-1], offsets[1:], strict=True)]


def _parse_tree(raw: bytes, index: int, num_features: int) -> TreeArrays:
    lines = raw.decode("utf-8").split("\n")
    head = lines[0].rstrip("\r ")
    if head != f"Tree={index}":
        raise _fail(f"tree block {index} starts {head[:40]!r}, not 'Tree={index}'")
    block: dict[str, str] = {}
    for line in lines[1:]:
        key, eq, val = line.rstrip("\r").partition("=")
        if eq:
            block[key.strip(" ")] = val
    if block.get("is_linear", "0").strip() not in ("0", ""):
        raise UnsupportedModelError(
            f"LightGBM tree {index} is a linear tree (linear_tree=True): its leaves are "
            "linear models, which path-dependent TreeSHAP cannot explain exactly; retrain with "
            "linear_tree=False"
        )
    num_leaves = _int(block, "num_leaves", f"tree {index}")
    num_cat = _int(block, "num_cat", f"tree {index}", default=0)
    if num_leaves < 1 or num_cat < 0:
        raise _fail(f"tree {index} has num_leaves={num_leaves}, num_cat={num_cat}")
    ni = num_leaves - 1

    def arr(key: str, dtype: type, size: int) -> np.ndarray:
        return _numbers(block, key, dtype, index, size)

    for key in ("split_gain", "internal_value", "internal_weight"):  # unused, but counted
        if block.get(key, "").strip():
            arr(key, np.float64, ni)
    if block.get("leaf_weight", "").strip():
        arr("leaf_weight", np.float64, num_leaves)
    leaf_count = block.get("leaf_count", "").strip()
    internal_count = block.get("internal_count", "").strip()
    if ni and (not leaf_count or not internal_count):
        raise UnsupportedModelError(
            f"LightGBM tree {index} lacks internal_count/leaf_count: the model has no "
            "training statistics, which path-dependent SHAP needs"
        )
    bounds = arr("cat_boundaries", np.int64, num_cat + 1 if num_cat else 0)
    if bounds.size and (bounds[0] != 0 or np.any(np.diff(bounds) < 0)):
        raise _fail(f"tree {index}'s cat_boundaries are not increasing from 0")
    tree = TreeArrays(
        index=index,
        num_leaves=num_leaves,
        split_feature=arr("split_feature", np.int64, ni),
        threshold=arr("threshold", np.float64, ni),
        decision_type=arr("decision_type", np.int64, ni),
        left_child=arr("left_child", np.int64, ni),
        right_child=arr("right_child", np.int64, ni),
        internal_count=arr("internal_count", np.float64, ni),
        leaf_value=arr("leaf_value", np.float64, num_leaves),
        leaf_count=arr("leaf_count", np.float64, num_leaves if leaf_count else 0),
        cat_boundaries=bounds,
        cat_threshold=arr("cat_threshold", np.int64, int(bounds[-1]) if bounds.size else 0),
    )
    _check_tree(tree, num_cat, num_features)
    return tree


def _check_tree(tree: TreeArrays, num_cat: int, nf: int) -> None:
    """Values in range: features, children, decision types, category bitsets."""
    i, ni = tree.index, tree.num_leaves - 1
    f = tree.split_feature
    if f.size and (f.min() < 0 or f.max() >= nf):
        bad = int(f.max() if f.max() >= nf else f.min())
        raise _fail(f"tree {i} splits on feature {bad} but max_feature_idx is {nf - 1}")
    for name, child in (("left_child", tree.left_child), ("right_child", tree.right_child)):
        if child.size and (child.min() < -tree.num_leaves or child.max() >= ni or 0 in child):
            raise _fail(f"tree {i}'s {name} names a node outside the tree")
    dtype = tree.decision_type
    if dtype.size and (dtype.min() < 0 or dtype.max() > 15 or np.any((dtype >> 2) & 3 == 3)):
        raise _fail(f"tree {i} has an unknown decision_type")
    words = tree.cat_threshold
    if words.size and (words.min() < 0 or words.max() >= 1 << 32):
        raise _fail(f"tree {i}'s cat_threshold holds a value that is no 32-bit word")
    k = tree.threshold[(dtype & 1).astype(bool)]
    if np.any((k < 0) | (k >= num_cat) | (k != np.floor(k))):
        raise _fail(f"tree {i} has a categorical split naming none of its {num_cat} category sets")


@malformed_is_value_error("LightGBM model text", _RESAVE)
def parse_lightgbm_text(text: str) -> LightGBMText:
    """Parse and check a LightGBM text model.

    Raises
    ------
    ValueError
        For text that is no LightGBM model, or whose counts disagree (truncated or edited).
    UnsupportedModelError
        For linear trees, or trees without the training counts SHAP needs.
    """
    raw = text.replace("\r\n", "\n").encode("utf-8")
    first = _TREE_LINE.search(raw)
    header, flags = _header(raw[: first.start()] if first else raw)
    if "num_tree_per_iteration" not in header and "num_class" not in header:
        raise ValueError(
            "this text is no LightGBM model: it lacks the 'num_tree_per_iteration' header; "
            "pass Booster.model_to_string() or a file written by Booster.save_model()"
        )
    sizes = None
    if header.get("tree_sizes", "").strip():
        try:
            sizes = [int(v) for v in header["tree_sizes"].split()]
        except ValueError:
            raise _fail("the header's tree_sizes are no integers") from None
    end = _END_LINE.search(raw, first.start() if first else 0)
    if end is None:
        listed = f" (tree_sizes lists {len(sizes)} trees)" if sizes else ""
        raise _fail(f"the text has no 'end of trees' line: it was cut short{listed}")
    if first is None:
        raise ValueError("the LightGBM model has no trees: nothing to explain")
    blocks = _tree_blocks(raw[first.start() : end.start()], sizes)

    per_iter = _int(header, "num_tree_per_iteration", "header", default=-1)
    num_class = _int(header, "num_class", "header", default=-1)
    if per_iter < 0:
        per_iter = num_class
    if per_iter < 1 or (num_class >= 0 and num_class != per_iter):
        raise _fail(f"the header has num_class={num_class}, num_tree_per_iteration={per_iter}")
    max_idx = _int(header, "max_feature_idx", "header")
    num_features = check_num_features(max_idx + 1, "the LightGBM header (max_feature_idx)")
    trees = [_parse_tree(b, i, num_features) for i, b in enumerate(blocks)]
    if len(blocks) % per_iter:
        raise _fail(
            f"{len(blocks)} trees do not make whole iterations of num_tree_per_iteration="
            f"{per_iter} (a tree is missing)"
        )

    names = None
    if "feature_names" in header:
        names = tuple(header["feature_names"].strip(" ").split(" "))
        if len(names) != num_features:
            raise _fail(f"the header lists {len(names)} feature_names for {num_features} features")
    feature_types = None
    if "feature_infos" in header:
        infos = header["feature_infos"].strip(" ").split(" ")
        if len(infos) != num_features:
            raise _fail(f"the header lists {len(infos)} feature_infos for {num_features} features")
        feature_types = tuple("q" if (s.startswith("[") or s == "none") else "c" for s in infos)
    return LightGBMText(
        header=header,
        trees=trees,
        num_features=num_features,
        num_tree_per_iteration=per_iter,
        feature_names=names,
        feature_types=feature_types,
        average_output="average_output" in flags,
    )
