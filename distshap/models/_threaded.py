"""Compiled passes over the trees of large models, in threads: the loaders' share of a cold start.

Loading a model of millions of nodes in NumPy is a chain of whole-array steps on one thread
(byte swaps, one concatenation per field, masks, rebased child indices, each a new array), and
its structure check (:meth:`~distshap.models.ensemble.Ensemble.validate`) is several more. For
ensembles of more than :attr:`~distshap.plan.config.Config.loader_threaded_min_nodes` nodes
two ``nogil`` compiled functions do that work in one pass each, in threads over ranges of trees
(:func:`distshap.parallel.run_ranges`):

* :func:`xgboost_node_arrays` reads every kept tree's node arrays straight from a UBJSON model's
  bytes (big-endian, at the offsets :func:`distshap.models._ubjson.decode_ubjson_views`
  records) into the :class:`~distshap.models.ensemble.Ensemble` arrays, with the loader's own
  checks (children inside their tree, split features in range) flagged per tree;
* :func:`nodes_valid` is ``validate``'s per-node checks (children in their own tree, one parent
  each, split features in range, covers finite and non-negative, roots of positive cover).

Both only *accept*: a model they flag, or cannot read, goes through the NumPy code, which
raises its own error for what is wrong. Every array they write is the NumPy code's bit for bit
(``tests/test_models_threaded.py``); no result depends on the ranges. Models of up to
``loader_threaded_min_nodes`` nodes never reach them, so loading a model of usual size compiles
nothing.

The first compiled call of a fresh process also initialises Numba (its typing and target
registries, importing ``scipy.linalg`` on the way, holding the GIL).
:func:`start_warm_up` does that, and loads both functions from Numba's cache, in a background
thread while the loader reads the file (a system call that releases the GIL).

Cold route. Where the two functions are not in Numba's disk cache yet (a fresh environment),
compiling them would cost more than the passes save for an ensemble of up to
:attr:`~distshap.plan.config.Config.loader_cold_max_nodes` nodes (:func:`compiled_route`): the
loader and ``validate`` then run their own NumPy code, as for a small model, and one helper
process compiles the two functions for later processes where a core is spare
(:func:`distshap.compile_cache.compile_later`).
"""

from __future__ import annotations

import os
import threading

import numba
import numpy as np
from numba import njit

from distshap import build_cache, compile_cache
from distshap.parallel import run_ranges
from distshap.plan.config import get_config

__all__ = [
    "AHEAD_NAME", "ahead_compile", "compiled_route", "nodes_valid", "start_warm_up",
    "xgboost_node_arrays",
]  # fmt: skip

#: The two functions' name for :func:`distshap.compile_cache.compile_later` (this module's
#: helpers).
AHEAD_NAME = "loader"

#: Columns of :func:`xgboost_node_arrays`' ``offsets``: byte offsets of each tree's arrays.
XGBOOST_FIELDS = (
    "left_children", "right_children", "split_indices", "split_conditions", "default_left",
    "split_type", "sum_hessian",
)  # fmt: skip

#: Flags of :func:`_xgboost_trees` (per tree).
CHILD_OUTSIDE = 1  # a child index outside its own tree
BAD_FEATURE = 2  # a split feature outside [0, max(num_feature, 1))
NOBODYS_CHILD = 4  # a node other than the root no split names (pruned, or not a tree)


def xgboost_node_arrays(
    buffer: bytes | bytearray,
    offsets: np.ndarray,
    tree_offsets: np.ndarray,
    weights: np.ndarray | None,
    num_feature: int,
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The node arrays of XGBoost trees read from UBJSON bytes, in threads over trees.

    Parameters
    ----------
    buffer
        The model's UBJSON bytes.
    offsets : int64 (n_trees, 7)
        Byte offset in ``buffer`` of each tree's big-endian arrays, in the order of
        :data:`XGBOOST_FIELDS`: ``left_children``, ``right_children``, ``split_indices`` (int32),
        ``split_conditions`` (float32), ``default_left`` (uint8), ``split_type`` (uint8; -1:
        none, every split numeric) and ``sum_hessian`` (float32).
    tree_offsets : int64 (n_trees + 1,)
        Node range of each tree in the output (sizes of the trees' arrays).
    weights : float64 (n_trees,) or None
        DART tree weights multiplying the leaf values.
    num_feature : int
        The model's feature count; split features must lie in ``[0, max(num_feature, 1))``.

    Returns
    -------
    nodes : dict
        ``left``, ``right`` (global indices, -1 at leaves), ``feature`` (-1 at leaves),
        ``threshold`` (0 at leaves and categorical splits), ``default_left`` and
        ``is_categorical`` (False at leaves), ``value`` (the leaf's ``split_conditions`` times
        its tree's weight; 0 times it elsewhere) and ``cover``: what the NumPy conversion in
        :func:`distshap.models.xgboost.ensemble_from_xgboost_document` makes of the same trees.
    flags : int8 (n_trees,)
        :data:`CHILD_OUTSIDE`, :data:`BAD_FEATURE`, :data:`NOBODYS_CHILD` per tree (the
        arrays of a flagged tree are not to be used).
    """
    n_trees = int(tree_offsets.shape[0] - 1)
    n = int(tree_offsets[-1])
    nodes = {
        "left": np.empty(n, np.int32),
        "right": np.empty(n, np.int32),
        "feature": np.empty(n, np.int32),
        "threshold": np.empty(n, np.float32),
        "default_left": np.empty(n, np.bool_),
        "is_categorical": np.empty(n, np.bool_),
        "value": np.empty(n, np.float64),
        "cover": np.empty(n, np.float64),
    }
    flags = np.zeros(n_trees, np.int8)
    data = np.frombuffer(buffer, np.uint8)
    data.flags.writeable = False  # bytes and bytearray: one compiled signature
    weights = np.zeros(0, np.float64) if weights is None else np.ascontiguousarray(weights, float)
    pieces = min(n_trees, 8 * numba.get_num_threads())  # trees differ in size
    run_ranges(_xgboost_trees, n_trees, pieces, data, np.ascontiguousarray(offsets, np.int64),
               np.ascontiguousarray(tree_offsets, np.int64), weights, int(num_feature),
               *nodes.values(), flags)  # fmt: skip
    return nodes, flags


def nodes_valid(
    left: np.ndarray,
    right: np.ndarray,
    feature: np.ndarray,
    cover: np.ndarray,
    tree_offsets: np.ndarray,
    num_features: int,
) -> bool:
    """Whether an ensemble's node arrays pass every per-node check of ``Ensemble.validate``.

    True when every tree is non-empty; every internal node (``left >= 0``) has a right child
    and a split feature in ``[0, num_features)``, and both children inside its own tree; every
    node but the roots has exactly one parent and a root none; covers are finite and
    non-negative, a root's positive. False says only that some check fails: the NumPy checks
    then say which. The arrays must have the dtypes and shapes ``validate`` checks first.
    """
    n_trees = int(tree_offsets.shape[0] - 1)
    if n_trees <= 0:
        return False
    if not compiled_route(left.shape[0]):
        return False  # not compiled here: validate's NumPy checks answer
    bad = np.zeros(n_trees, np.int8)
    n_parents = np.empty(left.shape[0], np.uint8)  # each range writes its own trees' nodes
    pieces = min(n_trees, 8 * numba.get_num_threads())
    run_ranges(_check_trees, n_trees, pieces, left, right, feature, cover,
               np.ascontiguousarray(tree_offsets, np.int64), int(num_features), n_parents,
               bad)  # fmt: skip
    return not bad.any()


def compiled_route(n_nodes: int) -> bool:
    """Whether an ensemble of ``n_nodes`` nodes takes the compiled passes: always, but for
    sizes above ``loader_threaded_min_nodes`` and up to ``loader_cold_max_nodes``
    (:class:`~distshap.plan.config.Config`) where they are not compiled here (not in this
    process, not in Numba's disk cache); such a call asks a helper to compile them for later
    processes (:func:`~distshap.compile_cache.compile_later`) and takes the NumPy route."""
    config = get_config()
    lo, hi = config.loader_threaded_min_nodes, config.loader_cold_max_nodes
    if not lo < n_nodes <= hi or compile_cache.compiled(_xgboost_trees, _check_trees):
        return True
    compile_cache.compile_later(__name__, AHEAD_NAME)
    return False


def ahead_compile(name: str) -> None:
    """Compile both functions (``name``: :data:`AHEAD_NAME`) into Numba's disk cache, a helper
    process's work (:func:`distshap.compile_cache.compile_later`)."""
    if name != AHEAD_NAME:
        raise ValueError(f"name={name!r}: this module compiles ahead only {AHEAD_NAME!r}")
    for function, args in _warm_up_calls():
        function(*args)


_warm_up_started = False
_warm_up_lock = threading.Lock()


def start_warm_up(path: str | os.PathLike[str] | None = None) -> None:
    """Initialise Numba and load this module's compiled functions in a background thread.

    Once a process, and only for a model file of more than ``large_model_file_bytes`` bytes
    (:class:`~distshap.plan.config.Config`) when ``path`` is given (smaller models never call the
    compiled functions), and not for a file whose build is saved
    (:func:`distshap.build_cache.saved`: the saved ensemble is mapped back, the loader does not
    run; if it runs after all, its own call here starts the thread). The loader goes on at once;
    its own first call waits for the thread where the two meet (Numba's compiler lock).
    Whatever fails here is left to that call, which raises it.
    """
    global _warm_up_started
    if path is not None:
        try:
            if os.path.getsize(path) <= get_config().large_model_file_bytes:
                return
        except (OSError, TypeError, ValueError):
            return  # not a file: the loader says what is wrong with it
        if build_cache.saved(path):
            return
    with _warm_up_lock:
        if _warm_up_started:
            return
        _warm_up_started = True
    threading.Thread(target=_warm_up, name="distshap-warm-up", daemon=True).start()


def _warm_up() -> None:
    """One call of each compiled function on a one-leaf model (:func:`_warm_up_calls`), if
    both are in Numba's disk cache (else the loader takes the NumPy route, not compiling)."""
    if not compile_cache.compiled(_xgboost_trees, _check_trees):
        return
    try:
        for function, args in _warm_up_calls():
            function(*args)
    except Exception:  # noqa: BLE001 - the loader's own call raises it
        pass


def _warm_up_calls() -> list[tuple]:
    """``(function, args)`` of a one-leaf model, with the types of the loaders' calls."""
    data = np.zeros(16, np.uint8)
    data.flags.writeable = False
    offsets = np.array([[0, 4, 8, 12, 0, -1, 4]], np.int64)
    tree_offsets = np.array([0, 1], np.int64)
    i32, f64 = np.full(1, -1, np.int32), np.ones(1, np.float64)
    nodes = [np.empty(1, d) for d in (np.int32, np.int32, np.int32, np.float32)]
    nodes += [np.empty(1, np.bool_), np.empty(1, np.bool_), np.empty(1), np.empty(1)]
    return [
        (_xgboost_trees,
         (data, offsets, tree_offsets, np.zeros(0), 1, *nodes, np.zeros(1, np.int8), 0, 1)),
        (_check_trees,
         (i32, i32, i32, f64, tree_offsets, 1, np.zeros(1, np.uint8), np.zeros(1, np.int8), 0, 1)),
    ]  # fmt: skip


@njit(cache=True, nogil=True)
def _word(data, at):
    """The big-endian 32-bit word at byte ``at``."""
    return (
        (np.uint32(data[at]) << np.uint32(24))
        | (np.uint32(data[at + 1]) << np.uint32(16))
        | (np.uint32(data[at + 2]) << np.uint32(8))
        | np.uint32(data[at + 3])
    )


@njit(cache=True, nogil=True)
def _xgboost_trees(
    data, offsets, tree_offsets, weights, num_feature, left, right, feature, threshold,
    default_left, is_categorical, value, cover, flags, t_lo, t_hi,
):  # fmt: skip
    """Trees ``t_lo .. t_hi - 1`` of :func:`xgboost_node_arrays`, serial (run in threads)."""
    most = 1
    for t in range(t_lo, t_hi):
        most = max(most, tree_offsets[t + 1] - tree_offsets[t])
    named = np.empty(most, np.bool_)  # whether a split names the node as its child
    word = np.empty(1, np.uint32)
    real = word.view(np.float32)  # the same four bytes as a float32
    max_feature = max(num_feature, 1)
    weighted = weights.shape[0] > 0
    for t in range(t_lo, t_hi):
        base = tree_offsets[t]
        n = tree_offsets[t + 1] - base
        o_left, o_right, o_feature = offsets[t, 0], offsets[t, 1], offsets[t, 2]
        o_cond, o_default, o_type = offsets[t, 3], offsets[t, 4], offsets[t, 5]
        o_hess = offsets[t, 6]
        bad = 0
        named[:n] = False
        named[0] = True  # the root
        for i in range(n):
            g = base + i
            word[0] = _word(data, o_cond + 4 * i)
            cond = real[0]
            word[0] = _word(data, o_hess + 4 * i)
            cover[g] = np.float64(real[0])
            lc = np.int32(_word(data, o_left + 4 * i))
            if lc < 0:  # a leaf
                left[g] = -1
                right[g] = -1
                feature[g] = -1
                threshold[g] = np.float32(0.0)
                default_left[g] = False
                is_categorical[g] = False
                v = np.float64(cond)
            else:
                rc = np.int32(_word(data, o_right + 4 * i))
                if lc >= n or rc < 0 or rc >= n:
                    bad |= CHILD_OUTSIDE
                else:
                    named[lc] = True
                    named[rc] = True
                left[g] = np.int32(base + lc)
                right[g] = np.int32(base + rc)
                f = np.int32(_word(data, o_feature + 4 * i))
                if f < 0 or f >= max_feature:
                    bad |= BAD_FEATURE
                feature[g] = f
                categorical = o_type >= 0 and data[o_type + i] == 1
                is_categorical[g] = categorical
                threshold[g] = np.float32(0.0) if categorical else cond
                default_left[g] = data[o_default + i] != 0
                v = 0.0
            if weighted:
                v *= weights[t]
            value[g] = v
        for i in range(n):
            if not named[i]:
                bad |= NOBODYS_CHILD
                break
        flags[t] = bad


@njit(cache=True, nogil=True)
def _check_trees(left, right, feature, cover, tree_offsets, num_features, n_parents, bad, t_lo,
                 t_hi):  # fmt: skip
    """Trees ``t_lo .. t_hi - 1`` of :func:`nodes_valid`: ``bad[t] = 1`` where one fails."""
    for t in range(t_lo, t_hi):
        a = tree_offsets[t]
        b = tree_offsets[t + 1]
        if b <= a or a < 0 or b > left.shape[0]:
            bad[t] = 1
            continue
        n_parents[a:b] = 0
        ok = cover[a] > 0
        for i in range(a, b):
            c = cover[i]
            if not (np.isfinite(c) and c >= 0):
                ok = False
            lc = left[i]
            if lc < 0:
                continue
            rc = right[i]
            f = feature[i]
            if lc < a or lc >= b or rc < a or rc >= b or f < 0 or f >= num_features:
                ok = False
                continue
            n_parents[lc] = min(n_parents[lc] + 1, 2)
            n_parents[rc] = min(n_parents[rc] + 1, 2)
        if ok and n_parents[a] != 0:  # a root is nobody's child
            ok = False
        for i in range(a + 1, b):
            if not ok:
                break
            if n_parents[i] != 1:
                ok = False
        if not ok:
            bad[t] = 1
