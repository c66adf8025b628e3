"""The one configuration of distshap's plans and kernels: a frozen :class:`Config`.

Every tunable of the planning and kernel layers is a field here, with one lifetime: a plan or a
kernel launch reads :func:`get_config` when it is made, and anything compiled into a kernel is
an argument of the factory that builds it (so a changed value builds, and caches, another
kernel). Device models are cached per configuration (a frozen, hashable :class:`Config` is
part of the cache key as it is), so a change needs no cache clearing.

Change it for a block of code with :func:`config_context` (the way tests and benchmarks set it),
or for the whole process with :func:`set_config`; :func:`reset_config` restores the defaults.
The Dask layer captures the client's configuration when it builds a graph and applies it inside
every task, so workers compute with the client's settings. Why each default is what it is:
``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import numbers
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["Config", "config_context", "get_config", "reset_config", "set_config"]


@dataclass(frozen=True)
class Config:
    """Tunables of the plans and kernels (sizes, budgets, thresholds; never a kernel variant).

    Attributes
    ----------
    quadrature_nodes : tuple of int
        Gauss-Legendre node counts of the quadrature kernels (one compiled kernel each). A path
        of ``k`` features needs ``ceil(k / 2)`` nodes and runs in the smallest kernel with enough.
    quadrature_chunk_paths : int
        Paths per chunk of the quadrature kernels (one thread block runs one chunk on its rows).
    quadrature_unit_levels : int
        0 to 3: the SHAP quadrature kernels run sibling units (up to ``2**L`` paths sharing
        all elements but ``L`` of each, the leaves of a small subtree) as one path
        (:mod:`distshap.plan.units`); 1: pairs only; 0: every path apart. A unit's common
        contributions are rounded once, not once a path, so their last bits differ between
        levels; every route of the SHAP plan runs the same units.
    quadrature_unit_min_features : int
        GPU SHAP plans: units of more than two paths only where the longest path has at least
        this many features; shorter ones run as pairs, whose fold costs a few operations a
        node where the general fold's moments, entries and degree-3 ``h`` cost more than the
        elements they save (the CPU kernel takes units at any length).
    few_rows, few_rows_chunk_paths, few_rows_blocks : int
        SHAP calls (a batch) of at most ``few_rows`` rows run quadrature chunks of
        ``few_rows_chunk_paths`` paths: each block's thread has few rows to share its paths
        with, so shorter chunks spread a call over more blocks. So do calls whose usual chunks
        would make fewer than ``few_rows_blocks`` thread blocks (models of few paths, calls of
        thousands of rows: the last wave of blocks would leave most of the GPU idle; 0: only
        ``few_rows``). The sums are integers: the bits do not depend on the chunks.
    path_thread_rows : int
        SHAP calls (a batch) of at most this many rows (at most 65,535) run the thread-a-path
        quadrature kernel (:mod:`distshap.kernels.cuda.path_threads`): a block a row and
        chunk, its threads over the chunk's paths, where the row kernels would keep one thread
        of each block busy. 0: never. The bits do not depend on it.
    replay_rows : int
        GPU SHAP calls of at most this many NumPy float32 rows, checked, replay a CUDA graph of
        the whole call (:mod:`distshap.kernels.cuda.replay`): one graph a row bucket (at most
        an eighth more rows than the call's, zeros; eight buckets an octave), captured on the
        first call of that bucket and kept with the device model, for a fraction of the host's
        time a call. Also at most the rows the check's block traversal takes
        (``margin_block_rows``, ``margin_block_rows_per_tree``). 0: never. The bits do not
        depend on it. A model's graphs together hold about twelve times its largest one's
        buffers (about half of it pinned host memory) for each of ``replay_graphs``.
    replay_graphs : int
        Graphs a row bucket keeps at most: each serves one call at a time, so this many calls
        (from as many threads, e.g. a server's device process) replay side by side on the GPU;
        a call that finds them all busy takes the launches. Each costs its buffers and one
        capture, made by the first call that finds the others busy (0 counts as 1).
    replay_graph_bytes : int
        A graph's buffers (rows and values, on the device and pinned) at most: calls of more
        rows than fit (and more than 16) take the launches, so wide models replay fewer rows.
    margin_block_rows : int
        The additivity check's margin traversal on the GPU: calls (a batch) of at most this
        many rows walk a block a row, its threads over the trees (each row's trees in
        parallel), more rows a thread a row (enough rows to fill the GPU by themselves, and
        each warp's rows in the same tree). 0: a thread a row always. The same bits either way.
    margin_block_rows_per_tree : int
        And at most this many rows a tree of the model (0: no such bound): a thread a row
        takes about as long as its trees' walk whatever the rows, a block a row grows with the
        rows, so the fewer the trees the sooner a thread a row is faster (and a block's threads
        beyond the trees sit idle).
    quadrature_shared_bytes : int
        Shared memory of a quadrature kernel's block at most (its per-row accumulators).
    quadrature_tile_features : int
        Distinct features of one chunk of the SHAP quadrature kernel at most (its shared tile's
        columns); models with at most this many features keep one column per feature. 0 (the
        default): chosen per model and launch (:func:`~distshap.plan.geometry.tile_bound`).
    quadrature_tile_window : int
        Paths a chunk looks ahead to find the one adding the fewest new features (0: greedy in
        plan order). Moves only which chunk sums a contribution, never a bit.
    shap_quadrature_warps : int
        Warps a block of the SHAP quadrature kernel at most.
    slot_quadrature_rows : int
        Rows a block of the pair-slot quadrature kernel at most.
    interaction_table_max_features, interaction_table_budget_bytes : int
        Interaction pattern tables (``2**k * k * k`` float32 a path, filled on the device): paths
        of at most this many features, shortest first, within this budget per model and device.
    interaction_table_max_columns : int
        Interaction tables only for models of at most this many output columns ``F + 1``.
    table_warps_per_block : int
        Warps (bins) per thread block of the table kernels (compiled in).
    shared_tile_values : int
        int64 values of the table kernels' shared-memory tile (compiled in).
    tile_rows, min_tile_rows : int
        Rows of a shared-memory tile at most, and at least (narrower: global atomics).
    rows_per_warp : int
        Rows a warp of the table kernels at most (fewer for small inputs, to fill the GPU).
    small_max_paths : int
        Models of at most this many paths take the one-launch small-model route (0: never).
    small_max_path_features, small_max_shap_columns, small_max_interaction_columns, \
small_max_groups : int
        Further limits of the small-model route (compiled into its kernels' local arrays).
    max_fallback_features : int
        Longest path (features) of the oversize kernel (compiled into its local arrays).
    batch_budget_bytes : int
        Output accumulator of one batch at most: ``min(this, free device memory / 4)``.
    cache_size : int
        Device models kept per process (per model digest, device and configuration).
    interventional_table_max_features, interventional_table_budget_bytes : int
        Interventional SHAP background pattern tables: paths of at most this many features,
        within this budget per model, background and device; the others run the direct kernel.
    interventional_interaction_table_max_features, \
interventional_interaction_table_budget_bytes : int
        The same for interventional interaction values.
    interventional_mask_budget_bytes : int
        Largest background masks (4 bytes per bin and background row) per model and background.
    interventional_warps_per_block : int
        Warps (bins) per block of the interventional mask and direct kernels (compiled in).
    compile_ahead_processes : int
        Helper processes that compile a large model file's kernels into Numba's disk cache
        while the explainer loads it (:func:`distshap.warmup.start_ahead`); 0 (the default,
        until a gain is measured on a GPU machine): none.
    saved_build_bytes : int
        Disk space the saved builds of large model files take at most
        (:mod:`distshap.build_cache`: a later process maps a file's loaded and packed model
        back instead of building it again); the least recently used go beyond it. 0: nothing
        is saved or read.
    gpu_preparation : int
        1: a CUDA explainer of a model file of more than ``large_model_file_bytes`` makes the
        GPU ready in background threads while it builds (:mod:`distshap.kernels.prepare`);
        0: its first call does that work (e.g. where the explainer only plans work for Dask
        workers and this process should make no CUDA context).
    loader_threaded_min_nodes : int
        Ensembles of more nodes than this have their node arrays read and checked by the
        loaders' compiled passes, in threads over trees (:mod:`distshap.models._threaded`); the
        others by NumPy code, which compiles nothing. The default is
        :data:`distshap.paths.NUMPY_MAX_NODES`: the models that take the compiled path walk.
    large_model_file_bytes : int
        Model files of more bytes than this are large: the warm-up of those compiled passes
        starts before they are read (:func:`~distshap.models._threaded.start_warm_up`), their
        kernels may be compiled ahead (:func:`distshap.warmup.start_ahead`) and their builds
        are saved (:mod:`distshap.build_cache`). An XGBoost UBJSON node takes about 34 bytes:
        ``2**19`` nodes are about 18 MB.
    loader_cold_max_nodes : int
        Ensembles of more than ``loader_threaded_min_nodes`` nodes and at most this many take
        the NumPy code too while those passes are not compiled here (not in this process, not
        in Numba's disk cache): NumPy costs less than compiling up to there.
    packing_numpy_max_items : int
        BFD packing and :func:`~distshap.packing.bin_order` run in NumPy up to this many items
        (nothing to compile), compiled beyond (:mod:`distshap.packing`).
    packing_cold_max_items : int
        Item counts above ``packing_numpy_max_items`` and up to this one run in NumPy too while
        the compiled kernels are not compiled here and no helper is compiling them.
    """

    quadrature_nodes: tuple[int, ...] = (2, 4, 6, 8, 12, 16)
    quadrature_chunk_paths: int = 256
    quadrature_unit_levels: int = 3
    quadrature_unit_min_features: int = 9
    few_rows: int = 512
    few_rows_chunk_paths: int = 32
    few_rows_blocks: int = 8192
    path_thread_rows: int = 16
    replay_rows: int = 16384
    replay_graph_bytes: int = 4 << 20
    replay_graphs: int = 2
    margin_block_rows: int = 1 << 15
    margin_block_rows_per_tree: int = 400
    quadrature_shared_bytes: int = 48 * 1024
    quadrature_tile_features: int = 0
    quadrature_tile_window: int = 256
    shap_quadrature_warps: int = 4
    slot_quadrature_rows: int = 2
    interaction_table_max_features: int = 10
    interaction_table_budget_bytes: int = 128 << 20
    interaction_table_max_columns: int = 78
    table_warps_per_block: int = 8
    shared_tile_values: int = 4096
    tile_rows: int = 128
    min_tile_rows: int = 8
    rows_per_warp: int = 1024
    small_max_paths: int = 256
    small_max_path_features: int = 8
    small_max_shap_columns: int = 64
    small_max_interaction_columns: int = 16
    small_max_groups: int = 16
    max_fallback_features: int = 127
    batch_budget_bytes: int = 1 << 30
    cache_size: int = 8
    interventional_table_max_features: int = 12
    interventional_table_budget_bytes: int = 1 << 30
    interventional_interaction_table_max_features: int = 10
    interventional_interaction_table_budget_bytes: int = 1 << 30
    interventional_mask_budget_bytes: int = 1 << 31
    interventional_warps_per_block: int = 4
    compile_ahead_processes: int = 0
    saved_build_bytes: int = 8 << 30
    gpu_preparation: int = 1
    loader_threaded_min_nodes: int = 1 << 19
    large_model_file_bytes: int = 1 << 24
    loader_cold_max_nodes: int = 1 << 24
    packing_numpy_max_items: int = 1 << 18
    packing_cold_max_items: int = 1 << 23

    def replace(self, **changes: Any) -> Config:
        """A copy with ``changes`` applied (unknown names refused, naming the valid ones)."""
        known = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise TypeError(
                f"unknown distshap configuration setting(s) {unknown}: use one of {sorted(known)}"
            )
        for name, value in changes.items():
            default = getattr(self, name)
            if isinstance(default, tuple):
                if not isinstance(value, (tuple, list)) or not all(
                    isinstance(v, numbers.Integral) and not isinstance(v, bool) and v > 0
                    for v in value
                ):
                    raise ValueError(f"{name}={value!r}: pass a tuple of positive ints")
                changes[name] = tuple(int(v) for v in value)
            elif isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
                raise ValueError(f"{name}={value!r}: pass a non-negative int")
            elif name in _MAXIMA and value > _MAXIMA[name]:
                raise ValueError(f"{name}={value!r}: pass at most {_MAXIMA[name]}")
            else:
                changes[name] = int(value)
        return dataclasses.replace(self, **changes)


#: Settings with an upper bound (the kernels' fixed sizes).
_MAXIMA = {"quadrature_unit_levels": 3}
_DEFAULTS = Config()
_process = _DEFAULTS
_current: contextvars.ContextVar[Config | None] = contextvars.ContextVar(
    "distshap_config", default=None
)


def get_config() -> Config:
    """The configuration in force here: the innermost :func:`config_context`, else the process's."""
    config = _current.get()
    return _process if config is None else config


def set_config(**changes: Any) -> Config:
    """Change the process-wide configuration; returns the previous one.

    Parameters
    ----------
    **changes
        Fields of :class:`Config` and their new values.
    """
    global _process
    previous = _process
    _process = _process.replace(**changes)
    return previous


def reset_config() -> None:
    """Restore the process-wide defaults."""
    global _process
    _process = _DEFAULTS


@contextlib.contextmanager
def config_context(config: Config | None = None, **changes: Any) -> Iterator[Config]:
    """Use ``config`` (default: the current one) with ``changes`` for the block, in this thread.

    Parameters
    ----------
    config : Config, optional
        A whole configuration, e.g. one captured on a Dask client with :func:`get_config`.
    **changes
        Fields of :class:`Config` and their values inside the block.

    Yields
    ------
    Config
        The configuration in force inside the block.
    """
    base = get_config() if config is None else config
    if not isinstance(base, Config):
        raise TypeError(f"config={base!r}: pass a distshap Config (from distshap.get_config())")
    new = base.replace(**changes) if changes else base
    token = _current.set(new)
    try:
        yield new
    finally:
        _current.reset(token)
