"""Tunables of the CUDA backend, in one place (tests patch them here).

Values read at launch time take a patched value at once. Sizes compiled into a kernel
(shared or local array sizes, warps per block of the table kernels) are frozen when the kernel
module is imported; the host side reads the frozen copies kept beside those kernels, so host
and device always agree. Why each value is what it is: ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

__all__ = [
    "BATCH_BUDGET_BYTES",
    "CACHE_SIZE",
    "INTERACTION_TABLE_BUDGET_BYTES",
    "INTERACTION_TABLE_MAX_COLUMNS",
    "INTERACTION_TABLE_MAX_FEATURES",
    "INTERVENTIONAL_INTERACTION_TABLE_BUDGET_BYTES",
    "INTERVENTIONAL_INTERACTION_TABLE_MAX_FEATURES",
    "INTERVENTIONAL_MASK_BUDGET_BYTES",
    "INTERVENTIONAL_TABLE_BUDGET_BYTES",
    "INTERVENTIONAL_TABLE_MAX_FEATURES",
    "INTERVENTIONAL_WARPS_PER_BLOCK",
    "MAX_FALLBACK_FEATURES",
    "MIN_TILE_ROWS",
    "QUADRATURE_CHUNK_PATHS",
    "QUADRATURE_NODES",
    "QUADRATURE_SHARED_BYTES",
    "QUADRATURE_TILE_FEATURES",
    "QUADRATURE_TILE_WINDOW",
    "ROWS_PER_WARP",
    "SHAP_TABLE_ROWS_A_STEP",
    "SHAP_QUADRATURE_ROWS",
    "SHAP_QUADRATURE_TILES",
    "SHAP_QUADRATURE_WARPS",
    "SHARED_TILE_VALUES",
    "SLOT_QUADRATURE_CHUNKS",
    "SLOT_QUADRATURE_ROWS",
    "SLOT_QUADRATURE_VARIANT",
    "SLOT_TABLE_VARIANT",
    "SMALL_MAX_GROUPS",
    "SMALL_MAX_INTERACTION_COLUMNS",
    "SMALL_MAX_PATHS",
    "SMALL_MAX_PATH_FEATURES",
    "SMALL_MAX_SHAP_COLUMNS",
    "TABLE_TILE_WORDS",
    "TABLE_WARPS_PER_BLOCK",
    "TILE_ROWS",
]

#: Gauss-Legendre node counts of the quadrature kernels (one compiled kernel each). A path of
#: ``k`` features needs ``ceil(k / 2)`` nodes and runs in the smallest kernel with enough.
QUADRATURE_NODES = (2, 4, 6, 8, 12, 16)
#: Paths per chunk of the quadrature kernels (one thread block runs one chunk on its rows).
QUADRATURE_CHUNK_PATHS = 256
#: Shared memory of a quadrature kernel's block at most (its per-row accumulators).
QUADRATURE_SHARED_BYTES = 48 * 1024
#: SHAP quadrature kernel's per-row sums (same bits either way): ``"local"`` (chunk-local
#: feature tiles: a chunk's paths touch at most :data:`QUADRATURE_TILE_FEATURES` distinct
#: features, and each thread sums its row in that many int64 columns of shared memory) or
#: ``"all"`` (a column per feature of the model, or global atomics where those do not fit: the
#: kernel before chunk-local tiles). Read at launch time.
SHAP_QUADRATURE_TILES = "local"
#: Distinct features of one chunk of the SHAP quadrature kernel at most (its tile's columns;
#: models with at most this many features keep the all-features tile). Read when a device
#: model's SHAP plan is built (``clear_cache()`` after changing it). The kernel uses about 30
#: registers, so shared memory sets its occupancy: ``8 C`` bytes a thread, 16 columns about
#: 56 warps an SM against 16 for covtype-med's 54 columns. Chunk statistics of the benchmark
#: models (C = 16 / 24 / 32): covtype-med 3,016 / 455 / 364 chunks of up to 256 paths
#: (flush atomics a row 47k / 10k / 8k beside 2.1M lane-nodes); fashion_mnist-med 17,965 /
#: 9,955 / 6,674 chunks, 265k / 226k / 205k flush atomics a row where the all-features kernel
#: adds about 1M contributions to global memory. ``benchmarks.quadrature_tiles`` times them.
QUADRATURE_TILE_FEATURES = 16
#: Chunk-local tiles' path window (read when a SHAP plan is built; ``clear_cache()`` after a
#: change): 0 chunks the paths greedily in plan order; ``W > 0`` lets each chunk take, while
#: one fits, the path of the next ``W`` of its group adding the fewest new features to it
#: (:func:`~distshap.kernels.cuda.model.local_chunks`): paths sharing features share a chunk,
#: so fewer chunks and flushes (same bits: only which chunk sums a contribution changes).
#: On one H200 (C = 16, two rows a thread) W = 256 ran covtype-med 271k against 270k rows/s
#: and fashion_mnist-med 140k against 133k; the plan took 0.21-0.34 s against 0.07-0.12 s.
QUADRATURE_TILE_WINDOW = 256
#: Rows a thread of the SHAP quadrature kernels (1 or 2; same bits either way): with 2 each
#: path's lane data are loaded once for two rows (``t`` and ``t + blockDim``), two independent
#: products in flight (ILP), each row with its own columns of shared memory. Read at launch.
#: On one H200 against one row: adult-med 2.24M against 1.61M rows/s (1.39x), covtype-med
#: 1.28x, fashion_mnist-med 1.12x (``benchmarks.quadrature_tiles --variants``, RESULTS.md).
SHAP_QUADRATURE_ROWS = 2
#: Warps a block of the SHAP quadrature kernels at most (fewer where the per-row sums do not
#: fit :data:`QUADRATURE_SHARED_BYTES`; same bits either way). Read at launch time.
SHAP_QUADRATURE_WARPS = 4
#: Slot quadrature kernel (top pairs, summaries; same bits either way): ``"split"`` (the
#: gathered kernel adding each slot as two 32-bit words with native 32-bit shared atomics,
#: :mod:`.slot_quadrature`), ``"spread"`` / ``"spread64"`` (paths spread over a warp's lanes,
#: split or int64 words), ``"gathered"`` (paths gathered element-major, rows' features in
#: shared memory, several rows a block, int64 shared atomics) or ``"lanes"`` (each thread
#: reads its path's lanes, one row a block). On one H200, fashion_mnist-med, 20k rows: split
#: 0.505 s, spread 0.506 s, gathered 0.885 s (benchmarks/RESULTS.md).
SLOT_QUADRATURE_VARIANT = "split"
SLOT_QUADRATURE_ROWS = 2
#: Chunks of the quadrature plan one block of the gathered kernels runs at most, summed in one
#: tile of their slots (fewer where the tile would not fit): more chunks, fewer global atomics
#: a row but more lanes on one tile. Since the split kernel runs a block's rows two at a time,
#: one chunk is fastest: on one H200, fashion_mnist-med top pairs, 20k rows, quadrature 0.419 s
#: (1 chunk), 0.456 s (2), 0.521 s (4; 0.514 s for the one-row kernel). Same bits either way.
SLOT_QUADRATURE_CHUNKS = 1
#: Table kernel into pair slots: ``"tiled"`` (each block's slots summed in shared memory,
#: :mod:`.slot_tables`), ``"split"`` (tiled, 32-bit words) or ``"plain"`` (the table kernel);
#: same bits either way. On one H200, fashion_mnist-med, 20k rows: plain 0.565-0.576 s,
#: split 0.669 s, tiled 0.771 s (benchmarks/RESULTS.md).
SLOT_TABLE_VARIANT = "plain"

#: Interaction tables (``2**k * k * k`` float32 per path, filled on the device): paths of at
#: most this many features (frozen: the fill kernel's local arrays), shortest first, within
#: this many bytes per model and device (a fixed budget, so the choice and the bits do not
#: depend on the device). A table pays while the tables stay near the GPU's L2 cache: on an
#: H200 with a 1 GiB budget, fashion_mnist-med's 51,581 table paths (k <= 8) took 0.58 s for
#: 20k rows of top pairs, and the quadrature ran the same paths in about half that; with 128
#: MiB (19,547 paths, k <= 6) top-10 went from 17.5k to 21.4k rows/s. The cost: covtype-med
#: interaction matrices of 200 rows (904 MiB of tables before, 128 now) 29k -> 22k rows/s
#: (still 5.6-5.9x XGBoost); cal_housing-med and adult-med (28 and 105 MiB) are unchanged.
INTERACTION_TABLE_MAX_FEATURES = 10
INTERACTION_TABLE_BUDGET_BYTES = 128 << 20
#: Interaction tables only for models of at most this many output columns ``F + 1`` (a constant of
#: its own, not read from :data:`QUADRATURE_SHARED_BYTES`, so the plan and its bits do not move with
#: a launch tunable): 78 is the widest whose ``(F+1)**2`` int64 matrix fits a quadrature block's 48
#: KiB (:func:`.quadrature.interaction_tile_fits`). Wider, the table kernel and the full-matrix
#: quadrature kernel both add every value to global memory, so tables save nothing on full matrices,
#: and top pairs and summaries (whose quadrature sums in shared tiles) lose with them. On an H200,
#: fashion_mnist-med (785 columns) without its 128 MiB of tables ran top-10 at 36.9k rows/s (32.9k
#: with them), a ranking of 100k rows in 2.53 s (2.86 s) and full matrices + sort at 1,791 rows/s
#: (1,780).
INTERACTION_TABLE_MAX_COLUMNS = 78
#: Warps (bins) per thread block of the interaction-table kernels (frozen; they share a tile).
TABLE_WARPS_PER_BLOCK = 8
#: int64 values of the table kernels' shared-memory tile (frozen; 32 KiB per block).
SHARED_TILE_VALUES = 4096
#: How the table kernels' shared tile sums (read at launch): ``"split"``, two uint32 words an
#: entry with native 32-bit shared atomics and exact carries; ``"int64"``, int64 words (64-bit
#: shared atomics). The same bits either way.
TABLE_TILE_WORDS = "split"
#: Rows of a shared-memory tile at most, and at least (narrower tiles: global atomics).
TILE_ROWS = 128
MIN_TILE_ROWS = 8
#: Rows per warp of the table kernels at most (fewer for small inputs, to fill the GPU).
ROWS_PER_WARP = 1024
#: Rows a step of the SHAP table kernel (1 or 4: four rows' loads and atomics issued together).
SHAP_TABLE_ROWS_A_STEP = 4

#: Small models (:mod:`.small`): one launch computes a row's whole output in one warp (the
#: additivity check included) for models of at most this many paths (read at call time; 0
#: turns the route off), ...
SMALL_MAX_PATHS = 256
#: ... paths of at most this many features, ``F + 1`` of at most these many columns for SHAP
#: and for interaction values, and at most this many output groups (frozen: local arrays).
SMALL_MAX_PATH_FEATURES = 8
SMALL_MAX_SHAP_COLUMNS = 64
SMALL_MAX_INTERACTION_COLUMNS = 16
SMALL_MAX_GROUPS = 16

#: Longest path (features) of the oversize fallback kernel (frozen: its local arrays).
MAX_FALLBACK_FEATURES = 127
#: Output accumulator budget per batch at most (bytes): ``batch_rows = budget // (8 * width)``
#: with ``budget = min(this, free device memory / 4)``.
BATCH_BUDGET_BYTES = 1 << 30
#: Device models kept per process (keyed by model digest and device).
CACHE_SIZE = 8

#: Interventional values (:mod:`.interventional`): background pattern tables (int64, ``2**k *
#: k`` values per path for SHAP values, ``2**k * k * k`` for interaction values; model output
#: "raw" only) for regular paths of at most this many features (frozen: the fill kernels'
#: local arrays), shortest first within these budgets per model, background and device; the
#: other paths run the direct kernels (``B`` iterations per row and element).
INTERVENTIONAL_TABLE_MAX_FEATURES = 12
INTERVENTIONAL_TABLE_BUDGET_BYTES = 1 << 30
INTERVENTIONAL_INTERACTION_TABLE_MAX_FEATURES = 10
INTERVENTIONAL_INTERACTION_TABLE_BUDGET_BYTES = 1 << 30
#: Largest background masks (4 bytes per bin and background row) per model and background.
INTERVENTIONAL_MASK_BUDGET_BYTES = 1 << 31
#: Warps (bins) per thread block of the interventional mask and direct kernels (frozen).
INTERVENTIONAL_WARPS_PER_BLOCK = 4
