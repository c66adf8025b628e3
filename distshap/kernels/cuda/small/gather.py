"""Small models in thread blocks: quadrature per (row, path), then fixed gathers.

The warp-per-row kernels of :mod:`.small` run the float64 DP (EXTEND / UNWOUND_SUM, a
division per step) on each lane's paths and sum the lanes' local-memory accumulators with
butterflies: long dependent chains, per row. Here the work of a row is cut into independent
pieces that a thread block shares:

1. *Paths.* One thread per (row, path) evaluates the path's values by Gauss-Legendre
   quadrature (:mod:`distshap.kernels.quadrature_cpu`): with ``f_j(t) = z_j + t d_j``,
   ``d_j = o_j - z_j``, the SHAP value of element ``i`` is
   ``v d_i integral_0^1 prod_{j != i} f_j``, and for interaction values the pair ``i < c``
   is ``v d_i d_c / 2 integral prod_{j != i, c} f_j`` and the diagonal element
   ``phi_i - sum_{c != i} phi_ic`` (partners in increasing order), XGBoost's convention. The
   model's longest path ``K`` (at most ``small_max_path_features``) fixes the node
   count ``ceil(K / 2)`` (exact for every path of the model) and the unrolled loops: a
   shorter path is padded with factors ``f = 1`` (``z = 1, d = 0``), which multiply exactly.
   No division, float64, the path's elements in registers. Each value goes to the row's slot
   of that (path, element) or (path, pair) in shared memory. With the check on, one thread
   per (row, tree) walks the tree on the raw values (:func:`.small_kernels._leaf_merged`, the
   independent traversal of :mod:`distshap.kernels.margin`) into the row's tree slot.
2. *Entries.* One thread per output entry (row, group, column or matrix entry) adds the
   slots of that entry in a fixed order, read from a gather list built on the host from the
   model alone (:func:`gather_arrays`: each entry's (path, element) slots in path order), so
   no atomics and no shuffles; rounds the float64 sum to the model's fixed point
   (:func:`~distshap.plan.gpu.fixed_point_shift`, as :mod:`.small`) and writes
   ``fixed * 2**-s`` (+ the expected value at the bias entry) as float32.
3. *Check.* One thread per (row, group) sums the row's float32 values and its trees' leaves
   (+ the base score) in a fixed order and sets the mapped flag of :mod:`.small` where they
   differ by more than half the check's tolerance, as :mod:`.small` does.

The pair-slot kernel (:mod:`.pairs`, top pairs and summaries) runs steps 1 and 2 with the
row's slots as entries, storing the fixed-point integers the matrices are made of.

*Bits.* Every value of a row is computed by the same operations on the same constants in
the same order whatever block, grid, batch or GPU runs it, so the bits depend on the row
(and the model) only. They are not those of the warp-per-row kernels (another exact formula, another
summation); both are exact to float64 rounding before the fixed-point conversion.

*Shared memory.* A row takes ``C + T + W`` float64 slots (``C`` path values, ``T`` trees,
``W`` output entries); a block takes ``R`` rows (:func:`rows_per_block`; the bits do not
depend on it). A model whose row does not fit :data:`SHARED_BYTES` does not take this route
(:func:`.small.route` runs the warp-per-row kernels of :mod:`.small_kernels` instead): a
function of the model.
"""

from __future__ import annotations

import threading
import warnings
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
from numba import cuda, types

from distshap.kernels.cuda.runtime import rawlaunch
from distshap.kernels.cuda.runtime.device import SIM, fixed, follows
from distshap.kernels.cuda.runtime.model import device_model
from distshap.kernels.cuda.small.kernels import (
    _HALF_RTOL,
    _leaf_merged,
    _store_interaction,
    _store_shap,
)
from distshap.kernels.cuda.small.model import (
    H_BASE_SCORE,
    H_CAT_OFFSETS,
    H_CAT_OTHER,
    H_EXPECTED,
    H_FEATURE,
    H_LEAF_VALUE,
    H_LOWER,
    H_MISSING,
    H_MISSING_VALUE,
    H_NBITS,
    H_PATH_OFFSETS,
    H_ROOTS,
    H_SCALES,
    H_TREE_GROUP,
    H_UPPER,
    H_VALUE,
    H_WORDS,
    H_ZERO,
    check_flag,
    merged_arrays,
    small_stream,
)
from distshap.packed import PackedModel
from distshap.plan.config import get_config
from distshap.plan.geometry import gauss_legendre
from distshap.plan.routes import longest_path

__all__ = [
    "GatherModel", "SHARED_BYTES", "THREADS", "fits_shared", "gather_arrays",
    "gather_kernel", "gather_model", "launch_gather", "launch_gather_slots", "rows_per_block",
]  # fmt: skip

#: Shared memory of a block at most (bytes): the dynamic size a launch gets without opting in.
SHARED_BYTES = 48 * 1024
#: Threads a block (the simulator runs one warp a block: its threads are Python threads).
THREADS = 32 if SIM else 128
#: Blocks a launch aims at: rows a block ``ceil(n / TARGET_BLOCKS)``, within the shared memory.
TARGET_BLOCKS = 2048
_MAX_BLOCKS = 65535  # grid cap: more row blocks loop (grid-stride), the bits do not change

# The extra header, the last _E entries of the int64 constants (after :func:`.small_model.
# merged_arrays`' sections): starts of the sections added here, and two counts.
(X_COFF_SHAP, X_COFF_INTER, X_EOFF_SHAP, X_ITEMS_SHAP, X_EOFF_INTER, X_ITEMS_INTER,
 X_C_SHAP, X_C_INTER) = range(8)  # fmt: skip
_E = 8


def _path_lengths(packed: PackedModel) -> np.ndarray:
    offsets = np.asarray(packed.path_offsets, np.int64)
    return np.diff(offsets) - 1 if offsets.size > 1 else np.zeros(0, np.int64)


def _gather_lists(packed: PackedModel, interactions: bool):
    """Each path's slot offsets and, per output entry, its slots in path order (CSR)."""
    k = _path_lengths(packed)
    P = k.size
    G = packed.num_groups
    n_cols = packed.num_features + 1
    W = n_cols * n_cols if interactions else n_cols
    per_path = k * (k + 1) // 2 if interactions else k
    coff = np.zeros(P + 1, np.int64)
    np.cumsum(per_path, out=coff[1:])
    offsets = np.asarray(packed.path_offsets, np.int64)
    feature = np.asarray(packed.feature, np.int64)
    group = np.asarray(packed.path_group, np.int64)
    entries, items = [], []
    for p in range(P):
        kp = int(k[p])
        f = feature[offsets[p] + 1 : offsets[p] + 1 + kp]
        base = int(group[p]) * W
        at = int(coff[p])
        if not interactions:
            entries.append(base + f)
            items.append(at + np.arange(kp))
            continue
        # diagonal slots first, then the pairs i < c in lexicographic order
        pair = np.full((kp, kp), -1, np.int64)
        rank = at + kp
        for i in range(kp):
            for c in range(i + 1, kp):
                pair[i, c] = pair[c, i] = rank
                rank += 1
        for x in range(kp):  # the (path, element) order: row x of the path, partners y
            for y in range(kp):
                entries.append(np.array([base + f[x] * n_cols + f[y]]))
                items.append(np.array([at + x if x == y else pair[x, y]]))
    if entries:
        e = np.concatenate(entries).astype(np.int64)
        it = np.concatenate(items).astype(np.int64)
    else:
        e = it = np.zeros(0, np.int64)
    order = np.argsort(e, kind="stable")  # entry by entry, each in (path, element) order
    eoff = np.zeros(G * W + 1, np.int64)
    np.cumsum(np.bincount(e, minlength=G * W), out=eoff[1:])
    return coff, eoff, it[order], int(coff[-1])


def gather_arrays(packed: PackedModel) -> tuple[np.ndarray, np.ndarray]:
    """The gather kernels' constants: :func:`.small_model.merged_arrays` with, appended to the int64
    array, each path's first slot (SHAP values, interaction values), the gather lists of the
    SHAP and (where ``F + 1`` fits ``small_max_interaction_columns``) interaction
    entries, and a header of their starts and the slot counts as its last entries."""
    I, D = merged_arrays(packed)  # noqa: E741
    coff_s, eoff_s, items_s, c_s = _gather_lists(packed, False)
    if packed.num_features + 1 <= get_config().small_max_interaction_columns:
        coff_i, eoff_i, items_i, c_i = _gather_lists(packed, True)
    else:
        coff_i = eoff_i = np.zeros(1, np.int64)
        items_i, c_i = np.zeros(0, np.int64), 0
    parts = [I]
    header = np.zeros(_E, np.int64)
    pos = I.size
    sections = ((X_COFF_SHAP, coff_s), (X_COFF_INTER, coff_i), (X_EOFF_SHAP, eoff_s),
                (X_ITEMS_SHAP, items_s), (X_EOFF_INTER, eoff_i),
                (X_ITEMS_INTER, items_i))  # fmt: skip
    for at, a in sections:
        header[at] = pos
        parts.append(a)
        pos += a.size
    header[X_C_SHAP], header[X_C_INTER] = c_s, c_i
    return np.concatenate([*parts, header]), D


@dataclass(eq=False)
class GatherModel:
    """The gather kernels' constants on one device (:func:`gather_arrays`), the model's
    longest path ``K``, its sizes, and a row's shared float64 slots ``row_slots`` (SHAP
    values, interaction values; :func:`fits_shared`)."""

    I: object  # noqa: E741
    D: object
    K: int
    num_features: int
    num_groups: int
    num_trees: int
    row_slots: tuple  # (SHAP values, interaction values)


_LOCK = threading.Lock()


def _row_slots(packed: PackedModel, interactions: bool) -> int:
    k = _path_lengths(packed)
    n_cols = packed.num_features + 1
    C = int((k * (k + 1) // 2).sum() if interactions else k.sum())
    T = 0 if packed.margin is None else int(np.asarray(packed.margin["roots"]).size)
    return C + T + packed.num_groups * (n_cols * n_cols if interactions else n_cols)


def fits_shared(gm: GatherModel, interactions: bool) -> bool:
    """Whether one row of the model fits a block's shared memory (else :mod:`.small` runs
    the unrolled kernels): a function of the model."""
    return 8 * gm.row_slots[1 if interactions else 0] <= SHARED_BYTES


def gather_model(packed: PackedModel) -> GatherModel:
    """The :class:`GatherModel` of ``packed`` on the current device (a form of its
    :class:`~.model.DeviceModel`, built on first use)."""
    return device_model(packed).form("small gather", lambda: _build_gather_model(packed))


def _build_gather_model(packed: PackedModel) -> GatherModel:
    I, D = gather_arrays(packed)  # noqa: E741
    to_device = (lambda a: a) if SIM else cuda.to_device
    return GatherModel(
        I=to_device(I), D=to_device(D), K=max(1, longest_path(packed)),
        num_features=packed.num_features, num_groups=packed.num_groups,
        num_trees=0 if packed.margin is None else int(np.asarray(packed.margin["roots"]).size),
        row_slots=(_row_slots(packed, False), _row_slots(packed, True)),
    )  # fmt: skip


def rows_per_block(n_rows: int, row_slots: int) -> int:
    """Rows a block: ``ceil(n / TARGET_BLOCKS)`` within :data:`SHARED_BYTES` (at least 1)."""
    most = max(1, SHARED_BYTES // (8 * max(1, row_slots)))
    return int(min(most, max(1, -(-int(n_rows) // TARGET_BLOCKS))))


# ------------------------------------------------------------------------------------------
# device code
# ------------------------------------------------------------------------------------------


def _make_path_values(K: int, interactions: bool):
    """Path ``p``'s values for row ``r`` into ``buf[at:]`` (module docstring, step 1)."""
    NN = (K + 1) // 2
    nodes, weights = gauss_legendre(NN)  # float64 constants, exact for degree <= 2 NN - 1

    @cuda.jit(device=True)
    def path_values(p, X, r, I, D, words, buf, at):  # noqa: E741
        s0 = I[I[H_PATH_OFFSETS] + p]
        k = I[I[H_PATH_OFFSETS] + p + 1] - s0 - 1
        v = D[I[H_VALUE] + p]
        z = cuda.local.array(K, np.float64)
        d = cuda.local.array(K, np.float64)
        for i in range(K):
            z[i] = 1.0  # padding: the factor 1 + t 0 = 1, exact
            d[i] = 0.0
            if i < k:
                li = s0 + 1 + i
                zi = D[I[H_ZERO] + li]
                oi = 0.0
                if follows(X[r, I[I[H_FEATURE] + li]], np.float32(D[I[H_LOWER] + li]),
                           np.float32(D[I[H_UPPER] + li]), I[I[H_MISSING] + li] != 0,
                           I[I[H_CAT_OTHER] + li] != 0, I[I[H_CAT_OFFSETS] + li],
                           I[I[H_NBITS] + li], words):  # fmt: skip
                    oi = 1.0
                z[i] = zi
                d[i] = oi - zi
        f = cuda.local.array((NN, K), np.float64)
        for m in range(NN):
            for j in range(K):
                f[m, j] = z[j] + nodes[m] * d[j]
        phi = cuda.local.array(K, np.float64)
        for i in range(K):
            total = 0.0
            for m in range(NN):
                prod = weights[m]
                for j in range(K):
                    if j != i:
                        prod *= f[m, j]
                total += prod
            phi[i] = v * d[i] * total
        if interactions:
            rank = at + k  # the pairs after the path's k diagonal slots
            for i in range(K):
                for c in range(i + 1, K):
                    total = 0.0
                    for m in range(NN):
                        prod = weights[m]
                        for j in range(K):
                            if j != i and j != c:
                                prod *= f[m, j]
                        total += prod
                    pv = 0.5 * v * d[i] * d[c] * total  # 0 for a padded element (d = 0)
                    phi[i] -= pv  # each diagonal loses its pairs in increasing partner order
                    phi[c] -= pv
                    if c < k:
                        buf[rank] = pv
                        rank += 1
        for i in range(K):
            if i < k:
                buf[at + i] = phi[i]

    return path_values


def _make_emit(kind: str):
    """Entry ``e`` of a row: its gather (the row's slots from ``row_at``), rounded to the fixed
    point; a matrix entry written as float32 (its value also kept at ``vals_at + e`` for the
    check), a pair slot as its int64 fixed-point integer."""
    if kind == "slots":

        @cuda.jit(device=True)
        def emit(out, buf, row_at, vals_at, r, e, I, D, eoff, items, n_cols, W, scale,  # noqa: E741
                 inv_scale, slot_i, slot_j, group_slots):  # fmt: skip
            g = 0
            while group_slots[g + 1] <= e:
                g += 1
            entry = g * W + slot_i[e] * n_cols + slot_j[e]
            total = 0.0
            for q in range(I[eoff + entry], I[eoff + entry + 1]):
                total += buf[row_at + I[items + q]]
            out[r, e] = fixed(total, scale)

        return emit
    store = _store_interaction if kind == "interactions" else _store_shap

    @cuda.jit(device=True)
    def emit(out, buf, row_at, vals_at, r, e, I, D, eoff, items, n_cols, W, scale,  # noqa: E741
             inv_scale, slot_i, slot_j, group_slots):  # fmt: skip
        total = 0.0
        for q in range(I[eoff + e], I[eoff + e + 1]):
            total += buf[row_at + I[items + q]]
        g = e // W
        c = e - g * W
        value = np.float64(fixed(total, scale)) * inv_scale  # the finish kernel's conversion
        if c == W - 1:
            value += D[I[H_EXPECTED] + g]  # the bias entry: no path adds to it
        value32 = np.float32(value)
        store(out, r, g, c, n_cols, value32)
        buf[vals_at + e] = np.float64(value32)

    return emit


_KERNELS: dict = {}


def gather_kernel(kind: str, K: int, raw: bool):
    """The gather kernel of ``kind`` (``"shap"``, ``"interactions"`` or ``"slots"``) for paths
    of at most ``K`` features; ``raw``: the check walks a second array of raw values (else the
    rows themselves). Made once per arguments, compiled at first launch."""
    key = (kind, int(K), bool(raw))
    hit = _KERNELS.get(key)
    if hit is None:
        hit = _KERNELS[key] = _make_gather_kernel(*key)
    return hit


def _make_gather_kernel(kind: str, K: int, raw: bool):
    if kind not in ("shap", "interactions", "slots"):
        raise ValueError(f"kind must be 'shap', 'interactions' or 'slots', got {kind!r}")
    if K < 1:
        raise ValueError(f"K must be at least 1, got {K}")
    interactions = kind != "shap"
    slots = kind == "slots"
    path_values = _make_path_values(K, interactions)
    emit = _make_emit(kind)
    coff_at = X_COFF_INTER if interactions else X_COFF_SHAP
    eoff_at = X_EOFF_INTER if interactions else X_EOFF_SHAP
    items_at = X_ITEMS_INTER if interactions else X_ITEMS_SHAP
    count_at = X_C_INTER if interactions else X_C_SHAP
    scale_at = 1 if interactions else 0

    @cuda.jit(device=True)
    def body(X, Xraw, out, flag, I, D, check, R, slot_i, slot_j, group_slots):  # noqa: E741
        buf = cuda.shared.array(0, types.float64)
        tid = cuda.threadIdx.x
        nt = cuda.blockDim.x
        n = X.shape[0]
        n_cols = X.shape[1] + 1
        W = n_cols * n_cols if interactions else n_cols
        xh = I.shape[0] - _E
        coff = I[xh + coff_at]
        eoff = I[xh + eoff_at]
        items = I[xh + items_at]
        C = I[xh + count_at]
        P = I[H_PATH_OFFSETS + 1] - I[H_PATH_OFFSETS] - 1
        T = I[H_ROOTS + 1] - I[H_ROOTS]
        G = I[H_EXPECTED + 1] - I[H_EXPECTED]
        S = C + T + G * W  # a row's slots: path values, tree leaves, float32 values
        walk = check and not slots
        M = P + T if walk else P  # work items a row
        E = slot_i.shape[0] if slots else G * W  # entries a row
        words = I[I[H_WORDS] :]
        scale = D[I[H_SCALES] + scale_at]
        inv_scale = 1.0 / scale
        missing = np.float32(D[I[H_MISSING_VALUE]])
        n_blocks = (n + R - 1) // R
        for rb in range(cuda.blockIdx.x, n_blocks, cuda.gridDim.x):
            r0 = rb * R
            rows = n - r0 if n - r0 < R else R
            for it in range(tid, rows * M, nt):  # 1. paths and trees
                rl = it // M
                j = it - rl * M
                if j < P:
                    path_values(j, X, r0 + rl, I, D, words, buf, rl * S + I[coff + j])
                else:
                    t = j - P
                    node = _leaf_merged(Xraw, r0 + rl, I[I[H_ROOTS] + t], I, D, missing)
                    buf[rl * S + C + t] = D[I[H_LEAF_VALUE] + node]
            cuda.syncthreads()
            for it in range(tid, rows * E, nt):  # 2. entries: fixed gathers
                rl = it // E
                emit(out, buf, rl * S, rl * S + C + T, r0 + rl, it - rl * E, I, D, eoff, items,
                     n_cols, W, scale, inv_scale, slot_i, slot_j, group_slots)  # fmt: skip
            cuda.syncthreads()
            if walk:
                for it in range(tid, rows * G, nt):  # 3. the check, a (row, group) a thread
                    rl = it // G
                    g = it - rl * G
                    at = rl * S + C + T + g * W
                    total = 0.0
                    size = 0.0
                    for c in range(W):
                        value = buf[at + c]
                        total += value
                        size += abs(value)
                    m = D[I[H_BASE_SCORE] + g]
                    for t in range(T):
                        if I[I[H_TREE_GROUP] + t] == g:
                            m += buf[rl * S + C + t]
                    bound = size + abs(m)
                    if not bound >= 1.0:  # the check's max(scale, 1); a NaN stays NaN
                        bound = 1.0 if bound == bound else bound
                    if not abs(total - m) <= _HALF_RTOL * bound:
                        flag[0] = 1  # a NaN fails too
                cuda.syncthreads()  # the next row block reuses the slots

    jit = cuda.jit(cache=True)
    if slots:

        @jit
        def kernel(X, acc, I, D, R, slot_i, slot_j, group_slots):  # noqa: E741
            """A block's rows: interaction values into their pair slots (int64)."""
            body(X, X, acc, slot_i, I, D, False, R, slot_i, slot_j, group_slots)

    elif raw:

        @jit
        def kernel(X, Xraw, out, flag, I, D, check, R):  # noqa: E741
            """A block's rows: values (float32, bias included), checked on ``Xraw``."""
            body(X, Xraw, out, flag, I, D, check, R, I, I, I)

    else:

        @jit
        def kernel(X, out, flag, I, D, check, R):  # noqa: E741
            """A block's rows: values (float32, bias included), checked on the rows."""
            body(X, X, out, flag, I, D, check, R, I, I, I)

    return kernel


# ------------------------------------------------------------------------------------------
# launching
# ------------------------------------------------------------------------------------------


def _grid(n_rows: int, R: int) -> int:
    return max(1, min(-(-int(n_rows) // R), _MAX_BLOCKS))


def launch_gather(gm: GatherModel, X, Xraw, out, interactions: bool, check: bool):
    """:func:`.small_kernels.launch_merged` with the gather kernels: the values of the device rows
    ``X`` into ``out``; with ``check``, each row's traversal of ``Xraw`` (``None`` or ``X``:
    the rows themselves) too. Returns the flag and the stream for :func:`.small_model.read_flag`."""
    kind = "interactions" if interactions else "shap"
    raw = Xraw is not None and Xraw is not X
    kernel = gather_kernel(kind, gm.K, raw)
    n = int(X.shape[0])
    slots_a_row = gm.row_slots[1 if interactions else 0]
    R = rows_per_block(n, slots_a_row)
    shared = 8 * R * slots_a_row
    flag = check_flag()
    args = (X, Xraw, out) if raw else (X, out)
    args = (*args, flag, gm.I, gm.D, bool(check), R)
    grid = _grid(n, R)
    if not SIM:
        s = rawlaunch.current_stream()
        key = ("gather", kind, gm.K, Xraw.dtype.char if raw else "")
        if rawlaunch.launch(kernel, key, grid, THREADS, shared, args, s):
            return flag, s
    s = small_stream()
    _configured(kernel, grid, shared, s)(*args)
    return flag, s


def launch_gather_slots(gm: GatherModel, X, acc, dev, s) -> None:
    """Interaction values of the rows ``X`` into their pair slots ``acc`` (int64 ``(n, S)``),
    as :func:`.small.launch_slots` does (the integers of :func:`launch_gather`'s matrices)."""
    kernel = gather_kernel("slots", gm.K, False)
    n = int(X.shape[0])
    slots_a_row = gm.row_slots[1]
    R = rows_per_block(n, slots_a_row)
    _configured(kernel, _grid(n, R), 8 * R * slots_a_row, s)(
        X, acc, gm.I, gm.D, R, dev.slot_i, dev.slot_j, dev.group_slots)  # fmt: skip


_CONFIGS: OrderedDict = OrderedDict()


def _configured(kernel, grid: int, shared: int, s):
    key = (id(kernel), grid, shared, getattr(s, "handle", s) if not SIM else 0)
    hit = _CONFIGS.get(key)
    if hit is None:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*under-utilization.*")
            hit = kernel[grid, THREADS, s, shared]
        with _LOCK:  # the kernel kept: its id stays its own
            _CONFIGS[key] = (kernel, hit)
            while len(_CONFIGS) > 64:
                _CONFIGS.popitem(last=False)
        return hit
    return hit[1]
