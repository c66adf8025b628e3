"""Paths -> the bin-packed model every kernel consumes (CPU, CUDA, and Dask workers).

Layout (struct of arrays, all NumPy, picklable, with a content digest):

* **Lanes.** Paths are bin-packed into bins of at most ``capacity`` (32) lanes. Each path
  occupies ``k + 1`` contiguous lanes: lane 0 of the path is the bias element (feature -1,
  always followed, zero fraction 1), then its ``k`` merged feature elements sorted by feature.
  Lanes of bin ``b`` are ``bin_offsets[b]:bin_offsets[b + 1]``. A path longer than
  ``capacity - 1`` features sits alone in an *oversize* bin (``bin_offsets`` range > capacity).
* **Paths** (packed order, only paths with k >= 1; paths without features only add to
  ``expected_value``): ``path_offsets`` gives each path's lane range (first lane = bias).
* **Table policy.** ``table_budget_bytes`` and ``max_table_features`` say which paths get
  pattern tables (:func:`distshap.plan.tables.choose_tables`); the tables themselves are built by
  the backend that uses them, on first use (the CPU kernel's SHAP tables, the CUDA backend's
  interaction tables), so a model explained on the GPU never fills host tables; the packed
  model only counts the plan's paths and bytes for its statistics.

Building is linear in the lanes: :func:`build_packed_model` lays the lanes out from
:class:`~distshap.paths.Paths` in NumPy for models of up to :data:`NUMPY_MAX_PATHS` paths
(nothing to compile) and by a compiled loop in threads beyond; :func:`pack_ensemble` (what the
explainer calls) gives the same model from an ensemble, and for large ensembles has the
compiled path walk write the lanes itself, in threads, after packing on its counts. The digest
hashes pieces of the arrays in threads.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import numba
import numpy as np

from distshap import build_cache
from distshap import paths as paths_module
from distshap.encoding import InputEncoding
from distshap.models.ensemble import Ensemble
from distshap.packing import Packing, bin_order, pack
from distshap.pages import page_array
from distshap.parallel import run_ranges
from distshap.path_walk import bias_lane
from distshap.paths import Paths

__all__ = [
    "DEFAULT_MAX_TABLE_FEATURES",
    "DEFAULT_TABLE_BUDGET_BYTES",
    "MAX_TABLE_FEATURES_LIMIT",
    "PackedModel",
    "build_packed_model",
    "clear_host_forms",
    "host_form",
    "pack_ensemble",
]

T = TypeVar("T")

#: The pattern-table policy a packed model carries by default: tables of paths of at most this
#: many features, within this many bytes (:func:`distshap.plan.tables.choose_tables`).
DEFAULT_MAX_TABLE_FEATURES = 12
DEFAULT_TABLE_BUDGET_BYTES = 1 << 30
#: Longest path a pattern table can serve (its pattern is an int64 bit mask of ``k`` bits,
#: and ``2**k`` entries grow fast).
MAX_TABLE_FEATURES_LIMIT = 24


@dataclass(frozen=True, eq=False)
class PackedModel:
    """A bin-packed model.

    Attributes
    ----------
    bin_offsets : int64 (n_bins + 1,)
        Lane range of each bin.
    feature : int32 (n_lanes,)
        Feature of each lane (-1 for a path's bias lane).
    lower, upper : float32 (n_lanes,)
    missing : bool (n_lanes,)
    zero_fraction : float64 (n_lanes,)
    cat_offsets : int64 (n_lanes,)
    cat_nbits : int32 (n_lanes,)
    cat_other : bool (n_lanes,)
        Categorical tests, as in :class:`distshap.paths.Paths`.
    lane_path : int32 (n_lanes,)
        Packed path index of each lane.
    path_offsets : int64 (n_paths + 1,)
        Lane range of each packed path (first lane = bias lane).
    path_value : float64 (n_paths,)
    path_group : int32 (n_paths,)
    cat_words : uint32 (n_words,)
    num_features, num_groups : int
    expected_value : float64 (num_groups,)
        Bias column of SHAP outputs (base score + mean prediction).
    capacity : int
        Lanes per bin (32: one warp).
    table_budget_bytes, max_table_features : int
        Pattern-table policy (:func:`distshap.plan.tables.choose_tables`): which paths the
        backends give tables, once they build them.
    digest : str
        SHA-256 of every array and scalar above, the feature names and categories, the
        encoding and the margin arrays; identifies the model on workers.
    stats : dict
        Packing and table statistics (algorithm, bins, utilisation, seconds, table bytes, ...).
    feature_names : tuple of str or None
    feature_categories : dict or None
        Training categories per feature position, when the model stores them (XGBoost >= 3.1):
        DataFrame category columns are coded by them.
    margin : dict of ndarray or None
        The ensemble's node arrays for the additivity check's independent traversal
        (:func:`distshap.kernels.margin.margin_model`), shipped with the model so that every
        backend and Dask worker can check its rows.
    encoding : InputEncoding
        How raw inputs become the float32 values the lanes compare (:mod:`distshap.encoding`):
        the model's missing-value sentinel, and ranks for features compared in float64.
    model_kind : str
        :attr:`distshap.models.Ensemble.model_kind` (library and objective): what the margin
        means, which interventional ``model_output`` transforms need
        (:func:`distshap.interventional.transform_id`); part of the digest.
    """

    bin_offsets: np.ndarray
    feature: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    missing: np.ndarray
    zero_fraction: np.ndarray
    cat_offsets: np.ndarray
    cat_nbits: np.ndarray
    cat_other: np.ndarray
    lane_path: np.ndarray
    path_offsets: np.ndarray
    path_value: np.ndarray
    path_group: np.ndarray
    cat_words: np.ndarray
    num_features: int
    num_groups: int
    expected_value: np.ndarray
    capacity: int = 32
    table_budget_bytes: int = DEFAULT_TABLE_BUDGET_BYTES
    max_table_features: int = DEFAULT_MAX_TABLE_FEATURES
    digest: str = ""
    stats: dict = field(default_factory=dict)
    feature_names: tuple[str, ...] | None = None
    feature_categories: dict | None = None
    encoding: InputEncoding = field(default_factory=InputEncoding)
    margin: dict | None = None
    model_kind: str = "unknown"

    @property
    def num_bins(self) -> int:
        return int(self.bin_offsets.shape[0] - 1)

    @property
    def num_paths(self) -> int:
        return int(self.path_offsets.shape[0] - 1)


_ARRAY_FIELDS = (
    "bin_offsets", "feature", "lower", "upper", "missing", "zero_fraction", "cat_offsets",
    "cat_nbits", "cat_other", "lane_path", "path_offsets", "path_value", "path_group",
    "cat_words", "expected_value",
)  # fmt: skip


def build_packed_model(
    paths: Paths,
    algorithm: str = "bfd",
    capacity: int = 32,
    table_budget_bytes: int = DEFAULT_TABLE_BUDGET_BYTES,
    max_table_features: int = DEFAULT_MAX_TABLE_FEATURES,
    feature_names: tuple[str, ...] | None = None,
    feature_categories: dict | None = None,
    encoding: InputEncoding | None = None,
    margin: dict | None = None,
    model_kind: str = "unknown",
) -> PackedModel:
    """Bin-pack ``paths`` into warps.

    Parameters
    ----------
    paths : Paths
        Merged paths from :func:`distshap.paths.extract_paths`.
    algorithm : {"bfd", "ffd", "nf", "none"}
        Bin-packing heuristic (Best-Fit-Decreasing by default).
    capacity : int
        Lanes per bin (32 = one warp).
    table_budget_bytes, max_table_features : int
        Pattern-table policy (:func:`distshap.plan.tables.choose_tables`); ``table_budget_bytes=0``
        disables tables (every path uses the DP). The stats report the plan; no table is built.
    feature_names : tuple of str, optional
        Carried along for outputs.
    feature_categories : dict, optional
        Training categories per feature position, carried along for input conversion.
    encoding : InputEncoding, optional
        How inputs are encoded for this model's lanes (:func:`distshap.encoding.encode_ensemble`);
        part of the digest.
    margin : dict of ndarray, optional
        The node arrays of the additivity check (carried along; part of the digest).
    model_kind : str
        The ensemble's ``model_kind`` (carried along; part of the digest).
    """
    t0 = time.perf_counter()
    packing, order, bin_offsets, path_offsets = _packed_order(paths.lengths, capacity, algorithm)
    fields = dict(
        bin_offsets=bin_offsets,
        **_lanes(paths, order, path_offsets),
        path_offsets=path_offsets,
        path_value=paths.path_value[order],
        path_group=paths.path_group[order],
        cat_words=paths.cat_words,
        expected_value=paths.expected_value,
    )
    return _packed_model(
        fields, packing, t0, paths.num_features, paths.num_groups, capacity,
        table_budget_bytes, max_table_features, feature_names, feature_categories, encoding,
        margin, model_kind,
    )  # fmt: skip


def pack_ensemble(
    ensemble: Ensemble,
    algorithm: str = "bfd",
    capacity: int = 32,
    table_budget_bytes: int = DEFAULT_TABLE_BUDGET_BYTES,
    max_table_features: int = DEFAULT_MAX_TABLE_FEATURES,
    feature_names: tuple[str, ...] | None = None,
    feature_categories: dict | None = None,
    encoding: InputEncoding | None = None,
    margin: dict | None = None,
    model_kind: str = "unknown",
) -> PackedModel:
    """``build_packed_model(extract_paths(ensemble), ...)``, the same model bit for bit.

    Ensembles of up to :data:`distshap.paths.NUMPY_MAX_NODES` nodes take exactly that route
    (NumPy, nothing compiled). Larger ones take the compiled walk's two passes
    (:class:`~distshap.paths.PathWalk`) with the packing between them: the first pass counts
    each path's elements, which is all the packing needs, and the second writes every path
    straight into its packed lanes, bias lane and ``lane_path`` included. The paths' element
    arrays in node order, and the gather of the lanes from them (random reads of every array
    for every path), are never made. An ensemble loaded from a large model file by
    :func:`distshap.build_cache.load_ensemble` has its packed model saved, and found again by
    a later process (:mod:`distshap.build_cache`).

    Parameters
    ----------
    ensemble : Ensemble
        A validated (and encoded: :func:`distshap.encoding.encode_ensemble`) ensemble.
    algorithm, capacity, table_budget_bytes, max_table_features, feature_names,
    feature_categories, encoding, margin, model_kind
        As :func:`build_packed_model`.

    Raises
    ------
    ValueError
        As :func:`~distshap.paths.extract_paths` and :func:`build_packed_model`.
    """
    options = dict(
        algorithm=algorithm, capacity=capacity, table_budget_bytes=table_budget_bytes,
        max_table_features=max_table_features, feature_names=feature_names,
        feature_categories=feature_categories, encoding=encoding, margin=margin,
        model_kind=model_kind,
    )  # fmt: skip
    return build_cache.load_packed(ensemble, options, lambda: _pack(ensemble, options))


def _pack(ensemble: Ensemble, options: dict) -> PackedModel:
    """:func:`pack_ensemble` itself (``options``: its keyword arguments)."""
    algorithm, capacity = options["algorithm"], options["capacity"]
    if ensemble.num_nodes <= paths_module.NUMPY_MAX_NODES:
        return build_packed_model(paths_module.extract_paths(ensemble), **options)
    walk = paths_module.walk_paths(ensemble)  # first pass: each path's element count
    t0 = time.perf_counter()
    packing, order, bin_offsets, path_offsets = _packed_order(walk.lengths, capacity, algorithm)
    starts, rank = _starts_and_ranks(walk.num_paths, order, path_offsets)
    filled = walk.fill(starts, int(path_offsets[-1]), rank)  # second pass: the lanes
    fields = dict(
        bin_offsets=bin_offsets,
        **{name: filled[name] for name in _LANE_FIELDS},
        path_offsets=path_offsets,
        path_value=filled["path_value"],
        path_group=filled["path_group"],
        cat_words=filled["cat_words"],
        expected_value=walk.expected_value(filled["node_group"], filled["mean_value"]),
    )
    return _packed_model(
        fields, packing, t0, ensemble.num_features, ensemble.num_groups, capacity,
        options["table_budget_bytes"], options["max_table_features"], options["feature_names"],
        options["feature_categories"], options["encoding"], options["margin"],
        options["model_kind"],
    )  # fmt: skip


_HOST_FORMS: OrderedDict = OrderedDict()  # (kind, digest) -> the form
_HOST_LOCKS: dict = {}  # kind -> the lock its builds hold
_HOST_LOCK = threading.Lock()


def host_form(packed: PackedModel, kind: str, build: Callable[[], T], keep: int) -> T:
    """The host form ``kind`` of ``packed`` (CPU pattern tables, pair slots): ``build()`` on
    first use, kept for the last ``keep`` model digests of that kind (a model without a digest
    is built every call). Builds of one kind run one at a time, so none is built twice."""
    digest = getattr(packed, "digest", "")
    if not digest:
        return build()
    key = (kind, digest)
    with _HOST_LOCK:
        lock = _HOST_LOCKS.setdefault(kind, threading.Lock())
    with lock:
        with _HOST_LOCK:
            hit = _HOST_FORMS.get(key)
            if hit is not None:
                _HOST_FORMS.move_to_end(key)
                return hit
        value = build()
        with _HOST_LOCK:
            _HOST_FORMS[key] = value
            same = [k for k in _HOST_FORMS if k[0] == kind]
            for old in same[: max(len(same) - keep, 0)]:
                del _HOST_FORMS[old]
        return value


def clear_host_forms(*kinds: str) -> None:
    """Drop the kept host forms of these kinds (:func:`host_form`)."""
    with _HOST_LOCK:
        for key in [k for k in _HOST_FORMS if k[0] in kinds]:
            del _HOST_FORMS[key]


#: The lane arrays, in the order of :class:`PackedModel`.
_LANE_FIELDS = ("feature", "lower", "upper", "missing", "zero_fraction", "cat_offsets",
                "cat_nbits", "cat_other", "lane_path")  # fmt: skip


def _packed_order(
    k_all: np.ndarray, capacity: int, algorithm: str
) -> tuple[Packing, np.ndarray, np.ndarray, np.ndarray]:
    """The packing of the paths with features, their packed order (path indices), the bins'
    and the packed paths' lane offsets (a bias lane then ``k`` lanes a path)."""
    every = k_all.size == 0 or int(k_all.min()) > 0  # usual: every path has a feature
    keep = None if every else np.flatnonzero(k_all > 0)
    kept = k_all if every else k_all[keep]
    sizes = np.add(kept, 1, out=page_array(kept.shape[0], kept.dtype))
    packing = pack(sizes, capacity=capacity, algorithm=algorithm)
    item_order, bin_offsets = bin_order(packing, sizes)
    order = item_order if every else keep[item_order]
    path_offsets = page_array(order.shape[0] + 1, np.int64)
    path_offsets[0] = 0
    np.cumsum(sizes[item_order], out=path_offsets[1:])
    return packing, order, bin_offsets, path_offsets


def _starts_and_ranks(
    n_paths: int, order: np.ndarray, path_offsets: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Each path's first element lane (0 where not packed) and packed index (-1: not packed),
    for :meth:`~distshap.path_walk.PathWalk.fill`."""
    starts = page_array(n_paths, np.int64)
    starts.fill(0)
    starts[order] = path_offsets[:-1] + 1
    rank = page_array(n_paths, np.int32)
    rank.fill(-1)
    rank[order] = np.arange(order.shape[0], dtype=np.int32)
    return starts, rank


def _packed_model(
    fields: dict, packing: Packing, t0: float, num_features: int, num_groups: int,
    capacity: int, table_budget_bytes: int, max_table_features: int,
    feature_names: tuple[str, ...] | None, feature_categories: dict | None,
    encoding: InputEncoding | None, margin: dict | None, model_kind: str,
) -> PackedModel:  # fmt: skip
    """The :class:`PackedModel` of the packed arrays ``fields``: statistics and digest."""
    encoding = InputEncoding() if encoding is None else encoding
    lengths = np.diff(fields["path_offsets"]) - 1
    # the table plan's size, for the statistics (and to refuse a bad policy here, not in a kernel)
    table_paths, table_total = _table_plan_size(lengths, table_budget_bytes, max_table_features)
    n_paths = int(lengths.shape[0])
    stats = {
        "algorithm": packing.algorithm,
        "paths": n_paths,
        "lanes": int(fields["path_offsets"][-1]),
        "bins": packing.num_bins,
        "oversize_bins": packing.num_oversize,
        "utilisation": packing.utilisation,
        "packing_seconds": packing.seconds,
        "max_path_features": int(lengths.max()) if lengths.size else 0,
        "mean_path_features": float(lengths.mean()) if lengths.size else 0.0,
        "table_paths": table_paths,
        "dp_paths": n_paths - table_paths,
        "table_bytes": 4 * table_total,
        "build_seconds": time.perf_counter() - t0,
    }
    return PackedModel(
        **fields,
        num_features=num_features,
        num_groups=num_groups,
        capacity=capacity,
        table_budget_bytes=int(table_budget_bytes),
        max_table_features=int(max_table_features),
        digest=_digest(
            {**fields, **encoding.arrays(), **_prefixed("margin.", margin or {})},
            (num_features, num_groups, capacity, table_budget_bytes, max_table_features),
            _labels(feature_names, feature_categories, model_kind),
        ),
        stats=stats,
        feature_names=feature_names,
        feature_categories=feature_categories,
        encoding=encoding,
        margin=margin,
        model_kind=str(model_kind),
    )


def _table_plan_size(k: np.ndarray, budget_bytes: int, max_features: int) -> tuple[int, int]:
    """Paths with a table and the tables' float32 values under
    :func:`distshap.plan.tables.choose_tables`.

    The same numbers as laying the tables out, by counting: tables go to the shortest paths
    first (ties in path order) while the running total fits the budget, so the chosen paths
    are every path of the shortest lengths and a prefix of one more length.
    """
    if max_features > MAX_TABLE_FEATURES_LIMIT:
        raise ValueError(f"max_table_features={max_features} is too large: tables grow as 2**k")
    counts = np.bincount(k, minlength=2)[1 : max_features + 1] if k.size else np.zeros(0, int)
    paths = values = 0
    for length, count in enumerate(counts.tolist(), start=1):
        size = (1 << length) * length  # float32 values of one table
        take = min(count, max(0, (budget_bytes - 4 * values) // (4 * size)))
        paths += take
        values += take * size
        if take < count:
            break
    return int(paths), int(values)


#: Models of up to this many packed paths lay out their lanes in NumPy (nothing to compile: a
#: short first call), larger ones in a compiled loop over paths, in threads.
NUMPY_MAX_PATHS = 1 << 18


def _lanes(paths: Paths, order: np.ndarray, path_offsets: np.ndarray) -> dict:
    """The lane arrays: path ``order[q]`` of ``paths`` at lanes ``path_offsets[q]:``, after
    a bias lane (feature -1, always followed, zero fraction 1)."""
    n_paths = order.shape[0]
    n_lanes = int(path_offsets[-1])
    out = {
        "feature": np.empty(n_lanes, np.int32),
        "lower": np.empty(n_lanes, np.float32),
        "upper": np.empty(n_lanes, np.float32),
        "missing": np.empty(n_lanes, np.bool_),
        "zero_fraction": np.empty(n_lanes, np.float64),
        "cat_offsets": np.empty(n_lanes, np.int64),
        "cat_nbits": np.empty(n_lanes, np.int32),
        "cat_other": np.empty(n_lanes, np.bool_),
    }
    source = [np.ascontiguousarray(getattr(paths, name), out[name].dtype) for name in out]
    if n_paths > NUMPY_MAX_PATHS:
        lane_path = np.empty(n_lanes, np.int32)
        pieces = 8 * numba.get_num_threads()
        run_ranges(_fill_lanes, n_paths, pieces, order, paths.path_offsets, path_offsets,
                   *source, *out.values(), lane_path)  # fmt: skip
        return {**out, "lane_path": lane_path}
    starts = path_offsets[:-1]
    k = np.diff(path_offsets) - 1
    # source element of every lane (a bias lane's, one before its path's first, is overwritten)
    src = np.repeat(paths.path_offsets[order] - starts - 1, k + 1) + np.arange(n_lanes)
    for (name, lanes), values in zip(out.items(), source, strict=True):
        if n_lanes:
            np.take(values, src, out=lanes, mode="wrap")  # wrap: the first bias lane's -1
        lanes[starts] = _BIAS[name]
    lane_path = np.repeat(np.arange(n_paths, dtype=np.int32), k + 1)
    return {**out, "lane_path": lane_path}


#: A bias lane's value of each lane array.
_BIAS = {
    "feature": -1,
    "lower": -np.inf,
    "upper": np.inf,
    "missing": True,
    "zero_fraction": 1.0,
    "cat_offsets": -1,
    "cat_nbits": 0,
    "cat_other": True,
}


@numba.njit(cache=True, nogil=True)
def _fill_lanes(
    order, src_offsets, path_offsets, feature, lower, upper, missing, zero_fraction,
    cat_offsets, cat_nbits, cat_other, l_feature, l_lower, l_upper, l_missing, l_zero, l_cat,
    l_nbits, l_other, lane_path, lo, hi,
):  # fmt: skip
    """The lanes of packed paths ``lo .. hi - 1`` (as :func:`_lanes` lays them out)."""
    for q in range(lo, hi):
        a = path_offsets[q]
        bias_lane(a, l_feature, l_lower, l_upper, l_missing, l_zero, l_cat, l_nbits, l_other)
        lane_path[a] = q
        shift = src_offsets[order[q]] - a - 1
        for i in range(a + 1, path_offsets[q + 1]):
            s = shift + i
            l_feature[i] = feature[s]
            l_lower[i] = lower[s]
            l_upper[i] = upper[s]
            l_missing[i] = missing[s]
            l_zero[i] = zero_fraction[s]
            l_cat[i] = cat_offsets[s]
            l_nbits[i] = cat_nbits[s]
            l_other[i] = cat_other[s]
            lane_path[i] = q


def _prefixed(prefix: str, arrays: dict) -> dict:
    return {prefix + name: value for name, value in sorted(arrays.items())}


def _labels(
    feature_names: tuple[str, ...] | None,
    feature_categories: dict | None,
    model_kind: str = "unknown",
) -> bytes:
    """Feature names, training categories and model kind, for the digest: they decide which
    column feeds which feature, how labels are coded and what the margin means, so models
    differing only in them differ in digest (a Dask worker reuses the model of a digest)."""
    categories = sorted(
        (int(j), v if isinstance(v, str) else np.asarray(v, dtype=object).tolist())
        for j, v in (feature_categories or {}).items()
    )
    names = None if feature_names is None else tuple(feature_names)
    return repr((names, categories, str(model_kind))).encode()


#: Bytes hashed per piece of :func:`_digest` (pieces are hashed in threads).
_DIGEST_PIECE = 1 << 24


def _digest(fields: dict, scalars: tuple[int, ...], labels: bytes = b"") -> str:
    """SHA-256 over the scalars, the labels, and each array's name, dtype, shape and bytes.

    An array's bytes enter as the SHA-256 digests of their pieces of :data:`_DIGEST_PIECE`
    bytes (a hash list), so that the pieces are hashed in threads (``hashlib`` releases the
    GIL); the pieces do not depend on the thread count, nor does the digest.
    """
    margin = [name for name in fields if name.startswith("margin.")]
    names = (*_ARRAY_FIELDS, *InputEncoding().arrays(), *margin)
    arrays = [np.ascontiguousarray(fields[name]) for name in names]
    pieces = []  # (array, its bytes lo .. lo + _DIGEST_PIECE)
    for i, arr in enumerate(arrays):
        raw = memoryview(arr).cast("B")
        pieces += [
            (i, raw[lo : lo + _DIGEST_PIECE]) for lo in range(0, max(len(raw), 1), _DIGEST_PIECE)
        ]
    digests: list[bytes] = [b""] * len(pieces)

    def hash_pieces(lo: int, hi: int) -> None:
        for j in range(lo, hi):
            digests[j] = hashlib.sha256(pieces[j][1]).digest()

    run_ranges(hash_pieces, len(pieces), len(pieces))
    h = hashlib.sha256()
    h.update(",".join(str(int(v)) for v in scalars).encode())
    h.update(labels)
    j = 0
    for i, (name, arr) in enumerate(zip(names, arrays, strict=True)):
        h.update(f"{name}:{arr.dtype.str}:{arr.shape}".encode())
        while j < len(pieces) and pieces[j][0] == i:
            h.update(digests[j])
            j += 1
    return h.hexdigest()
