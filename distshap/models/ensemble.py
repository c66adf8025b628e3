"""The canonical flat tree ensemble every loader produces and every later stage consumes.

All trees are concatenated into one struct of node arrays (the shap / pynndescent style):
node ``i`` is a leaf when ``left[i] == -1``. Child indices are *global* node indices.

Split semantics (the one convention all loaders convert to):

* numeric split on ``feature[i]``: a non-missing value ``x`` goes left when
  ``x < threshold[i]`` (float32 comparison, as XGBoost does), right otherwise;
* categorical split (``is_categorical[i]``): the categories
  ``cat_values[cat_offsets[i]:cat_offsets[i + 1]]`` go **right**; every other non-missing value
  (other categories, negative or out-of-range codes) goes left (XGBoost's convention; a loader
  whose library sends the listed set left swaps the children and ``default_left``);
* a missing value (NaN) goes left when ``default_left[i]``, right otherwise.

Comparison precision: XGBoost, CatBoost and scikit-learn's DecisionTree/forests compare float32
inputs, and ``threshold`` (float32) is exact for them. LightGBM and HistGradientBoosting compare
float64 inputs with float64 thresholds: their loaders also set ``threshold64`` (float64, same
``x < t`` convention), and :mod:`distshap.encoding` then keeps their comparisons exact in float64.

Leaf values are in margin (raw score) space and already include the learning rate and any tree
weight (DART); ``base_score`` is the per-group margin offset added to every prediction.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from distshap.models import _threaded
from distshap.models._common import check_num_features
from distshap.plan.config import get_config

__all__ = ["Ensemble", "UnsupportedModelError"]


class UnsupportedModelError(ValueError):
    """A model distshap cannot explain exactly (the message says why and what to do)."""


@dataclass(frozen=True, eq=False)
class Ensemble:
    """A tree ensemble as flat node arrays.

    Attributes
    ----------
    left, right : int32 (n_nodes,)
        Global index of the left / right child, ``-1`` at leaves.
    feature : int32 (n_nodes,)
        Split feature, ``-1`` at leaves.
    threshold : float32 (n_nodes,)
        Numeric split value: ``x < threshold`` goes left. Unused for categorical splits.
    default_left : bool (n_nodes,)
        Whether a missing value (NaN) goes left.
    is_categorical : bool (n_nodes,)
        Whether the split is categorical.
    cat_offsets : int64 (n_nodes + 1,)
        Offsets into ``cat_values``; empty ranges for numeric splits and leaves.
    cat_values : int32 (n_cat_values,)
        Category codes that go right at each categorical split.
    value : float64 (n_nodes,)
        Leaf value (margin space, learning rate and tree weight included); 0 at internal nodes.
    cover : float64 (n_nodes,)
        Training cover of each node (hessian sum or sample count); must be > 0 at every root.
    tree_offsets : int64 (n_trees + 1,)
        Node index range of each tree; the root of tree ``t`` is ``tree_offsets[t]``.
    tree_group : int32 (n_trees,)
        Output group (class) of each tree.
    num_features : int
        Number of input features the model expects.
    num_groups : int
        Number of outputs (1 for regression / binary, n_classes for multiclass).
    base_score : float64 (num_groups,)
        Margin offset of each group.
    feature_names : tuple of str or None
    feature_types : tuple of str or None
        ``"q"`` numeric / ``"c"`` categorical per feature when known.
    model_kind : str
        Short description of the source (``"xgboost:binary:logistic"``, ...).
    threshold64 : float64 (n_nodes,) or None
        For models that compare float64 inputs with float64 thresholds (LightGBM,
        HistGradientBoosting): ``x < threshold64`` goes left, compared in float64. ``None`` for
        models that compare in float32 (``threshold`` is then exact).
    missing_value : float
        An input value read as missing besides NaN (XGBoost's ``missing=`` parameter, compared
        in float32 as XGBoost does); NaN when only NaN is missing.
    """

    left: np.ndarray
    right: np.ndarray
    feature: np.ndarray
    threshold: np.ndarray
    default_left: np.ndarray
    is_categorical: np.ndarray
    cat_offsets: np.ndarray
    cat_values: np.ndarray
    value: np.ndarray
    cover: np.ndarray
    tree_offsets: np.ndarray
    tree_group: np.ndarray
    num_features: int
    num_groups: int
    base_score: np.ndarray
    feature_names: tuple[str, ...] | None = None
    feature_types: tuple[str, ...] | None = None
    model_kind: str = "unknown"
    extra: dict = field(default_factory=dict)
    threshold64: np.ndarray | None = None
    missing_value: float = float("nan")

    @property
    def num_nodes(self) -> int:
        return int(self.left.shape[0])

    @property
    def num_trees(self) -> int:
        return int(self.tree_offsets.shape[0] - 1)

    def is_leaf(self) -> np.ndarray:
        """Boolean mask of leaf nodes."""
        return self.left < 0

    def validate(self) -> Ensemble:
        """Check array shapes, dtypes and tree structure; raise ``ValueError`` if broken.

        Ensembles of more than ``loader_threaded_min_nodes`` nodes
        (:class:`~distshap.plan.config.Config`) have their per-node checks made by one compiled
        pass in threads over trees; the NumPy checks then run only for an ensemble that fails
        it, to say what is wrong.
        """
        check_num_features(self.num_features, "the ensemble")
        n = self.num_nodes
        expected = {
            "left": np.int32,
            "right": np.int32,
            "feature": np.int32,
            "threshold": np.float32,
            "default_left": np.bool_,
            "is_categorical": np.bool_,
            "value": np.float64,
            "cover": np.float64,
        }
        for name, dtype in expected.items():
            arr = getattr(self, name)
            if arr.dtype != dtype or arr.shape != (n,):
                raise ValueError(
                    f"Ensemble.{name} must be {np.dtype(dtype).name} of shape ({n},), "
                    f"got {arr.dtype} {arr.shape}"
                )
        if self.threshold64 is not None and (
            self.threshold64.dtype != np.float64 or self.threshold64.shape != (n,)
        ):
            raise ValueError(f"Ensemble.threshold64 must be float64 of shape ({n},) or None")
        if self.cat_offsets.shape != (n + 1,) or self.cat_offsets.dtype != np.int64:
            raise ValueError("Ensemble.cat_offsets must be int64 of shape (n_nodes + 1,)")
        if self.cat_values.dtype != np.int32:
            raise ValueError("Ensemble.cat_values must be int32")
        if self.tree_offsets.dtype != np.int64 or self.tree_offsets[0] != 0:
            raise ValueError("Ensemble.tree_offsets must be int64 starting at 0")
        if self.tree_offsets[-1] != n:
            raise ValueError("Ensemble.tree_offsets must end at n_nodes")
        if self.tree_group.shape != (self.num_trees,) or self.tree_group.dtype != np.int32:
            raise ValueError("Ensemble.tree_group must be int32 of shape (n_trees,)")
        if self.num_trees == 0:
            raise ValueError("the model has no trees: nothing to explain")
        if self.base_score.shape != (self.num_groups,):
            raise ValueError("Ensemble.base_score must have shape (num_groups,)")
        if np.any((self.tree_group < 0) | (self.tree_group >= self.num_groups)):
            raise ValueError("Ensemble.tree_group holds a group outside [0, num_groups)")
        self._check_finite()
        if n > get_config().loader_threaded_min_nodes and self._nodes_valid():
            return self  # every check below passes (one compiled pass, in threads over trees)
        internal = ~self.is_leaf()
        if np.any((self.right[internal] < 0) | (self.feature[internal] < 0)):
            raise ValueError("an internal node lacks a right child or a split feature")
        self._validate_structure(internal)
        if np.any(self.feature[internal] >= self.num_features):
            bad = int(self.feature[internal].max())
            raise ValueError(
                f"a split uses feature {bad} but the model declares {self.num_features} features"
            )
        bad = np.flatnonzero(~np.isfinite(self.cover) | (self.cover < 0))
        if bad.size:
            raise ValueError(
                f"{self._node_name(int(bad[0]))} has the cover {self.cover[bad[0]]}: a node's "
                "training cover must be finite and non-negative; retrain or fix the saved file"
            )
        if np.any(self.cover[self.tree_offsets[:-1]] <= 0):
            raise ValueError(
                "a tree root has zero cover: the model lacks the training statistics "
                "(cover / hessian sums) that path-dependent SHAP needs"
            )
        return self

    def _check_finite(self) -> None:
        """Refuse a NaN or infinite leaf value or base score, and a NaN numeric threshold.

        Such a model predicts NaN / infinity, or (a NaN threshold: every value goes right)
        sends rows where no comparison of values can place them; its SHAP values would be
        meaningless, so it is refused at load, naming the first tree and node. Infinite
        thresholds stay: they are legitimate (scikit-learn's HistGradientBoosting splits
        missing values from all others at +inf) and compare as any other value.
        """
        bad = np.flatnonzero(~np.isfinite(self.base_score))
        if bad.size:
            g = int(bad[0])
            raise UnsupportedModelError(
                f"the model's base score of output {g} is {self.base_score[g]}, not a finite "
                "number: the model predicts no number; retrain it or fix the saved file"
            )
        bad = np.flatnonzero(~np.isfinite(self.value))
        if bad.size:
            raise UnsupportedModelError(
                f"{self._node_name(int(bad[0]))} has the value {self.value[bad[0]]} (NaN or "
                "infinite: an overflow in training or an edited file), so the model predicts "
                f"no number ({bad.size} such node(s)); retrain it or fix the saved file"
            )
        numeric = (self.left >= 0) & ~self.is_categorical
        for name in ("threshold", "threshold64"):
            thresholds = getattr(self, name)
            if thresholds is None:
                continue
            bad = np.flatnonzero(numeric & np.isnan(thresholds))
            if bad.size:
                raise UnsupportedModelError(
                    f"{self._node_name(int(bad[0]))} splits at a NaN threshold, which no value "
                    f"is below ({bad.size} such split(s): an edited or corrupted file); "
                    "retrain the model or fix the saved file"
                )

    def _node_name(self, node: int) -> str:
        """``"tree 3, node 5 (a leaf)"``: trees in the model's order, nodes in the tree's."""
        t = int(np.searchsorted(self.tree_offsets, node, side="right") - 1)
        kind = "a leaf" if self.left[node] < 0 else "a split"
        return f"tree {t}, node {node - int(self.tree_offsets[t])} ({kind})"

    def _nodes_valid(self) -> bool:
        """Whether the per-node checks pass, by the compiled pass in threads over trees."""
        return _threaded.nodes_valid(
            self.left, self.right, self.feature, self.cover, self.tree_offsets, self.num_features
        )

    def _validate_structure(self, internal: np.ndarray) -> None:
        """Children inside their own tree; every node but the roots has exactly one parent."""
        n = self.num_nodes
        node_tree = np.repeat(np.arange(self.num_trees, dtype=np.int32), np.diff(self.tree_offsets))
        parents = np.flatnonzero(internal)
        left, right = self.left[parents], self.right[parents]
        for children in (left, right):
            if children.size and (children.min() < 0 or children.max() >= n):
                raise ValueError("a child index points outside the ensemble's nodes")
        own = node_tree[parents]
        if np.any(node_tree[left] != own) or np.any(node_tree[right] != own):
            raise ValueError("a child index points into another tree")
        n_parents = np.bincount(left, minlength=n)
        n_parents += np.bincount(right, minlength=n)
        n_parents[self.tree_offsets[:-1]] += 1  # a root has none: count it as one
        if np.any(n_parents != 1):
            raise ValueError(
                "the trees are not trees: every node except a tree's root needs exactly one parent"
            )
