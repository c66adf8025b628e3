"""The SHAP quadrature kernels: SHAP values of every path of a regular bin.

A path's SHAP value of element ``i`` is ``v (o_i - z_i) integral_0^1 prod_{j != i} (z_j + t (o_j
- z_j)) dt`` (the Shapley weights ``s! (k-1-s)! / k!`` are Beta integrals), a polynomial of
degree ``k - 1`` in ``t``: ``ceil(k / 2)`` Gauss-Legendre nodes give it exactly. At each node a
thread forms the full product while it tests the one-fractions, then divides each element's
factor out again. All terms are positive, so float32 keeps its relative precision at any path
length (unlike the DP's UNWOUND_SUM, which cancels).

* SHAP values: two rows a thread (:func:`_make_two_row_shap_kernel`); a block runs one chunk
  of paths of one output group on its rows, so every path is warp-uniform (no shuffles, no
  ballots) and each thread's row sums stay in shared memory (:func:`quadrature_warps`) until
  the chunk is done, or go to global memory with atomics where they do not fit. Models of more
  than ``quadrature_tile_features`` features get chunk-local feature tiles (the plan's
  ``lane_column``): each chunk touches at most that many distinct features, so a thread's sums
  take that many int64 columns instead of one per feature of the model. Column ``c`` is
  flushed to the chunk's ``c``-th feature. A model whose two rows' sums do not fit shared
  memory where one row's do runs the one-row kernels (:mod:`.one_row_shap`). Every
  contribution is truncated to int64 on its own and integer addition is associative: the same
  bits in every kernel.
* Sibling units (:mod:`distshap.plan.units`, the plan's ``unit_offsets``, ``unit_value``,
  ``unit_lanes``): a unit's head runs with its own tail elements skipped and its leaf value
  left out; :mod:`.unit_fold` then adds every member's tail contributions and multiplies the
  common product by ``h(t)``, and the common elements' quotients give the whole unit's values.
  A launch whose units are all sibling pairs runs a build without that general fold: a pair
  head reads its partner's split lane from ``unit_pair``, folds it by
  :func:`.unit_fold.fold_pair` and adds its value at its own split element.

Interaction values (the same integrals with each element's ratio):
:mod:`.interaction_quadrature` (full matrices) and :mod:`.slot_quadrature` (pair slots).

A kernel is compiled per node count (``quadrature_nodes``) on first use; contributions
are truncated to int64 fixed point and added with integer atomics.
"""

from __future__ import annotations

import numpy as np
from numba import cuda, types

from distshap.kernels.cuda.one_row_shap import make_local_shap_kernel, make_shap_kernel
from distshap.kernels.cuda.path_threads import launch_path_threads
from distshap.kernels.cuda.runtime.args import launch as launch_kernel
from distshap.kernels.cuda.runtime.args import view
from distshap.kernels.cuda.runtime.device import (
    CAT_OTHER_FLAG,
    LF_LOWER,
    LF_UPPER,
    LF_VALUE,
    LF_ZERO,
    LI_FEATURE,
    LI_FLAGS,
    LI_NBITS,
    LI_POSITION,
    MISSING_FLAG,
    add_quotient,
    follows,
    xp,
)  # fmt: skip
from distshap.kernels.cuda.unit_fold import (
    fold_pair,
    unit_bases,
    unit_factors,
    unit_is_pair,
    unit_moments,
    unit_scale,
    unit_terms,
)
from distshap.plan.config import get_config
from distshap.plan.geometry import (
    gauss_legendre,
    local_tiles,
    quadrature_warps,
)

__all__ = ["launch_quadrature", "quadrature_kernel"]


def _make_two_row_shap_kernel(n_nodes: int, mode: str, general: bool = True):
    """The SHAP kernel with two rows a thread (the default route): thread
    ``t`` of a block runs rows ``t`` and ``t + blockDim`` of its row tile, each path's lane
    data loaded once for both, two independent products in flight. ``mode``: ``"local"``
    (chunk-local tiles, as :func:`.one_row_shap.make_local_shap_kernel`), ``"shared"`` (a
    column per feature, as :func:`.one_row_shap.make_shap_kernel` with ``shared``) or
    ``"global"`` (global atomics).
    Each row's contributions are the same float32 operations in the same order as the
    one-row kernels', so the same int64 values; a row sums in its own columns of shared
    memory (``[column * 2 blockDim + t]`` and ``[... + blockDim + t]``).

    How it keeps the integer, index and branch instructions per (path element, row) down (the
    SHAP kernels are issue-bound; ``benchmarks/kernel_isa.py`` counts them):

    * unsigned lane indices (``np.uint64``) and 32-bit element counters: no negative-index
      wraparound, no 64-bit compares; the lane arrays' row lengths checked once (4 and
      :data:`~.runtime.device.LI_COLUMNS`; else the thread returns, which cannot
      happen with a device model), so a lane's address is a shift, not a 64-bit multiply;
    * each row's column of ``XT`` sliced once (``xa[f]``, ``xb[f]``: one product for both);
    * ``follows`` of a numeric element without its categorical branch (``cat < 0`` tested once
      for both rows; the element is the same for the whole warp);
    * the one-fractions' bits set and tested with a shifted 32-bit mask (no variable shifts
      of 64-bit values), the tile index in 32 bits;
    * a sibling unit entry's tail lanes read once for both rows (:func:`.unit_fold.unit_factors`);
    * without ``general`` only sibling pairs' fold is compiled in (a launch whose units are all
      pairs, :func:`~distshap.plan.gpu.general_heads`): a pair is read from ``unit_pair[p]``
      (its split lane's position from the partner lane), and its value is added in the
      quotient loop at that element; the general fold's registers and loads weigh on no path.
    """
    from distshap.kernels.cuda.runtime.device import LI_COLUMNS

    nodes, weights = (a.astype(np.float32) for a in gauss_legendre(n_nodes))
    basis2, basis3 = unit_bases(n_nodes)
    local = mode == "local"
    shared = mode != "global"
    lf_columns = LF_VALUE + 1

    @cuda.jit(cache=True)
    def kernel(lane_f, lane_i, lane_cat, cat_words, path_offsets, chunk_paths, unit_offsets,
               unit_value, unit_lanes, unit_pair, chunk_offsets, chunk_group, lane_column,
               features, feature_offsets, XT, acc, scale, n_cols, row0):  # fmt: skip
        tid = cuda.threadIdx.x
        stride = cuda.blockDim.x
        n_rows = XT.shape[1]
        ra = row0 + cuda.blockIdx.y * (2 * stride) + tid
        if ra >= n_rows or lane_f.shape[1] != lf_columns or lane_i.shape[1] != LI_COLUMNS:
            return  # nothing below synchronises threads
        rb = ra + stride
        has_b = rb < n_rows
        if not has_b:
            rb = ra  # computed again, never added
        ch = cuda.blockIdx.x  # chunks vary fastest: blocks running together share rows (L2)
        base = chunk_group[ch] * n_cols
        if local:
            f0 = feature_offsets[ch]
            width = feature_offsets[ch + 1] - f0
        else:
            f0 = 0
            width = n_cols - 1
        rs = 2 * stride
        scale32 = np.float32(scale)
        one = np.float32(1.0)
        zero = np.float32(0.0)
        if shared:
            tile = cuda.shared.array(0, types.int64)  # [column * rs + (row b) * stride + tid]
            for c in range(width):
                tile[c * rs + tid] = 0
                tile[c * rs + stride + tid] = 0
        pa = cuda.local.array(n_nodes, np.float32)
        pb = cuda.local.array(n_nodes, np.float32)
        xa = XT[:, ra]  # the rows' values: feature f at xa[f], xb[f]
        xb = XT[:, rb]
        ta = np.uint32(tid)
        tb = np.uint32(stride + tid)
        urs = np.uint32(rs)
        u1 = np.uint64(1)
        m1 = np.uint32(1)
        for j in range(chunk_offsets[ch], chunk_offsets[ch + 1]):
            p = chunk_paths[j]
            s0 = np.uint64(path_offsets[p] + 1)  # first feature element (after the bias lane)
            k = np.uint32(path_offsets[p + 1] - path_offsets[p] - 1)
            value = lane_f[s0 - u1, LF_VALUE]
            skip = np.uint32(0)  # the head's own tail elements, a bit each (unit_fold.unit_skip)
            e0 = e1 = np.int32(0)
            q = np.int32(-1)
            if general:
                e0 = unit_offsets[p]  # a sibling unit's entries (plan.units): p is its head
                e1 = unit_offsets[p + 1]
                if e1 > e0:
                    value = one  # the leaf values come in with the fold (unit_fold)
                    for i in range(3):  # unit_fold.unit_skip, written out: a call takes registers
                        lt = unit_lanes[e0, i]
                        if lt >= 0:
                            pos = np.uint32(lane_i[lt, LI_POSITION] - 1)
                            skip = np.uint32(skip | (m1 << pos))
            else:  # every unit a sibling pair: the other path's split lane, or -1
                q = unit_pair[p]
                if q >= 0:
                    value = one  # the leaf values come in with fold_pair
                    skip = np.uint32(m1 << np.uint32(lane_i[q, LI_POSITION] - 1))
            for m in range(n_nodes):
                pa[m] = value * weights[m]
                pb[m] = value * weights[m]
            bits_a = np.uint32(0)
            bits_b = np.uint32(0)
            mask = m1  # bit e: element e (0-based) of the path
            e = np.uint32(0)
            while e < k:
                li = s0 + np.uint64(e)
                z = lane_f[li, LF_ZERO]
                lower = lane_f[li, LF_LOWER]
                upper = lane_f[li, LF_UPPER]
                f = np.uint64(np.uint32(lane_i[li, LI_FEATURE]))
                flags = lane_i[li, LI_FLAGS]
                nbits = lane_i[li, LI_NBITS]
                cat = lane_cat[li]
                missing = (flags & MISSING_FLAG) != 0
                other = (flags & CAT_OTHER_FLAG) != 0
                da = -z
                db = -z
                x_a = xa[f]
                x_b = xb[f]
                if cat < 0:  # numeric: the compiler drops follows' categorical branch here
                    fa = follows(x_a, lower, upper, missing, other, cat, nbits, cat_words)
                    fb = follows(x_b, lower, upper, missing, other, cat, nbits, cat_words)
                else:  # (kernel_isa counts the lines marked "categorical" as cold)
                    fa = follows(x_a, lower, upper, missing, other, cat,  # categorical
                                 nbits, cat_words)  # fmt: skip
                    fb = follows(x_b, lower, upper, missing, other, cat,  # categorical
                                 nbits, cat_words)  # fmt: skip
                if fa:
                    da = one - z
                    bits_a = np.uint32(bits_a | mask)
                if fb:
                    db = one - z
                    bits_b = np.uint32(bits_b | mask)
                if (skip & mask) == 0:
                    for m in range(n_nodes):
                        pa[m] *= z + nodes[m] * da
                        pb[m] *= z + nodes[m] * db
                mask = np.uint32(mask << m1)
                e = np.uint32(e + m1)
            pair_a = np.int64(0)  # without ``general``: a pair's split element's contributions,
            pair_b = np.int64(0)  # added in the quotient loop below
            if not general and q >= 0:  # a sibling pair, both rows
                lp = s0 + np.uint64(np.uint32(lane_i[q, LI_POSITION] - 1))  # the head's split lane
                uq = np.uint64(np.uint32(q))
                fq = np.uint64(np.uint32(lane_i[uq, LI_FEATURE]))
                pair_a = fold_pair(pa, nodes, lane_f, lane_i, lane_cat, cat_words, lp, uq,
                                   (bits_a & skip) != 0, xa[fq], scale32)  # fmt: skip
                pair_b = fold_pair(pb, nodes, lane_f, lane_i, lane_cat, cat_words, lp, uq,
                                   (bits_b & skip) != 0, xb[fq], scale32)  # fmt: skip
            elif general and e1 > e0 and unit_is_pair(unit_lanes, e0, e1):  # added at once
                lp = np.uint64(np.uint32(unit_lanes[e0, 0]))
                q = np.uint64(np.uint32(unit_lanes[e0 + 1, 0]))
                fq = np.uint64(np.uint32(lane_i[q, LI_FEATURE]))
                iva = fold_pair(pa, nodes, lane_f, lane_i, lane_cat, cat_words, lp, q,
                                (bits_a & skip) != 0, xa[fq], scale32)  # fmt: skip
                ivb = fold_pair(pb, nodes, lane_f, lane_i, lane_cat, cat_words, lp, q,
                                (bits_b & skip) != 0, xb[fq], scale32)  # fmt: skip
                col = np.uint32(lane_column[lp] if local else lane_i[lp, LI_FEATURE])
                if iva != 0:
                    if shared:
                        tile[np.uint32(col * urs + ta)] += iva
                    else:
                        cuda.atomic.add(acc, (ra, base + col), iva)
                if ivb != 0:
                    if shared:
                        tile[np.uint32(col * urs + tb)] += ivb
                    elif has_b:
                        cuda.atomic.add(acc, (rb, base + col), ivb)
            elif general and e1 > e0:  # the unit's fold (unit_fold), both rows
                qa0, qa1, qa2 = unit_moments(pa, basis2)
                qb0, qb1, qb2 = unit_moments(pb, basis2)
                ha = (zero, zero, zero, zero)
                hb = (zero, zero, zero, zero)
                for u in range(e0, e1):
                    ue = np.uint64(u)
                    l0 = unit_lanes[ue, 0]
                    l1 = unit_lanes[ue, 1]
                    l2 = unit_lanes[ue, 2]
                    a0, ba0, bb0 = unit_factors(lane_f, lane_i, lane_cat, cat_words, l0, xa, xb)
                    a1, ba1, bb1 = unit_factors(lane_f, lane_i, lane_cat, cat_words, l1, xa, xb)
                    a2, ba2, bb2 = unit_factors(lane_f, lane_i, lane_cat, cat_words, l2, xa, xb)
                    v = unit_value[ue]
                    one_slot = l1 < 0 and l2 < 0
                    ca, t = unit_terms(v, a0, ba0, a1, ba1, a2, ba2, qa0, qa1, qa2, scale32,
                                       one_slot)  # fmt: skip
                    ha = (ha[0] + t[0], ha[1] + t[1], ha[2] + t[2], ha[3] + t[3])
                    cb, t = unit_terms(v, a0, bb0, a1, bb1, a2, bb2, qb0, qb1, qb2, scale32,
                                       one_slot)  # fmt: skip
                    hb = (hb[0] + t[0], hb[1] + t[1], hb[2] + t[2], hb[3] + t[3])
                    for i in range(3):
                        if ca[i] != 0 or cb[i] != 0:  # a real tail slot
                            lt = np.uint64(np.uint32(unit_lanes[ue, i]))
                            col = np.uint32(lane_column[lt] if local else lane_i[lt, LI_FEATURE])
                            if ca[i] != 0:
                                if shared:
                                    tile[np.uint32(col * urs + ta)] += ca[i]
                                else:
                                    cuda.atomic.add(acc, (ra, base + col), ca[i])
                            if cb[i] != 0:
                                if shared:
                                    tile[np.uint32(col * urs + tb)] += cb[i]
                                elif has_b:
                                    cuda.atomic.add(acc, (rb, base + col), cb[i])
                unit_scale(pa, ha[0], ha[1], ha[2], ha[3], basis3)
                unit_scale(pb, hb[0], hb[1], hb[2], hb[3], basis3)
            mask = m1
            e = np.uint32(0)
            while e < k:
                li = s0 + np.uint64(e)
                z = lane_f[li, LF_ZERO]
                if local:
                    col = np.uint32(lane_column[li])
                else:
                    col = np.uint32(lane_i[li, LI_FEATURE])
                da = -z
                if bits_a & mask:
                    da = one - z
                db = -z
                if bits_b & mask:
                    db = one - z
                iva = pair_a  # a pair's split element; another tail element: its entries add
                ivb = pair_b
                if (skip & mask) == 0:
                    iva = np.int64(0)
                    ivb = np.int64(0)
                    if da != 0:  # else the element's factor may be 0 and its value is 0
                        total = np.float32(0.0)
                        for m in range(n_nodes):
                            total = add_quotient(total, pa[m], z + nodes[m] * da)
                        iva = np.int64(total * da * scale32)
                    if db != 0:
                        total = np.float32(0.0)
                        for m in range(n_nodes):
                            total = add_quotient(total, pb[m], z + nodes[m] * db)
                        ivb = np.int64(total * db * scale32)
                if iva != 0:
                    if shared:
                        tile[np.uint32(col * urs + ta)] += iva
                    else:
                        cuda.atomic.add(acc, (ra, base + col), iva)
                if ivb != 0:
                    if shared:
                        tile[np.uint32(col * urs + tb)] += ivb
                    elif has_b:
                        cuda.atomic.add(acc, (rb, base + col), ivb)
                mask = np.uint32(mask << m1)
                e = np.uint32(e + m1)
        if shared:
            for c in range(width):
                if local:
                    f = features[f0 + c]
                else:
                    f = c
                iv = tile[c * rs + tid]
                if iv != 0:
                    cuda.atomic.add(acc, (ra, base + f), iv)
                iv = tile[c * rs + stride + tid]
                if iv != 0 and has_b:
                    cuda.atomic.add(acc, (rb, base + f), iv)

    return kernel


_KERNELS: dict = {}


def quadrature_kernel(n_nodes: int, shared: bool, local: bool = False, rows: int = 1,
                      general: bool = True):  # fmt: skip
    """The SHAP quadrature kernel for ``n_nodes`` nodes (built on first use, compiled at
    launch); ``local``: with chunk-local feature tiles (``shared`` ignored); ``rows`` 2: two
    rows a thread (:func:`_make_two_row_shap_kernel`), and without ``general`` for launches
    whose sibling units are all pairs. Interaction values: :mod:`.interaction_quadrature`."""
    general = general or rows != 2  # the one-row kernels fold every unit
    key = (n_nodes, shared, local, rows, general)
    kernel = _KERNELS.get(key)
    if kernel is None:
        if rows == 2:
            mode = "local" if local else ("shared" if shared else "global")
            kernel = _make_two_row_shap_kernel(n_nodes, mode, general)
        elif local:
            kernel = make_local_shap_kernel(n_nodes)
        else:
            kernel = make_shap_kernel(n_nodes, shared)
        _KERNELS[key] = kernel
    return kernel


def launch_quadrature(model, plan, Xb, acc, scale, F1, stream, XT=None, streams=None) -> None:
    """Run the SHAP quadrature launches of ``plan`` on the row batch ``Xb`` (adding to
    ``acc``): chunk-local feature tiles where :func:`local_tiles` (per launch, where its
    widest tile fits ``quadrature_shared_bytes``), else a column per feature. Interaction
    values: :func:`~distshap.kernels.cuda.interaction_quadrature.launch_interaction_quadrature`,
    pair slots: :func:`~distshap.kernels.cuda.slot_quadrature.launch_slot_quadrature`.

    Launches go through the driver where they can (:func:`~.runtime.args.launch`), and the
    transposed rows are one Numba view (:func:`~.runtime.args.view`) where three or more
    launches read them (for fewer the view costs more than the CuPy arguments it saves); the
    model's and plan's arrays are passed as read-only hints kept with the model
    (:func:`_kept_arrays`). Calls of at most ``path_thread_rows`` rows run a thread a path
    instead (:mod:`.path_threads`). ``XT``: the rows transposed already (C-contiguous).
    ``streams``: Numba streams to deal the launches over in turn (the caller orders them after
    the rows and joins them after); the sums are integer atomics, so the bits do not depend on
    how the launches overlap. Without them every launch goes on ``stream``."""
    nb = int(Xb.shape[0])
    if XT is None:  # (features, rows): a warp reads 32 rows of a feature
        XT = xp().ascontiguousarray(Xb.T)
    if nb <= min(int(get_config().path_thread_rows), 65535):
        kept = lambda launch, local: _kept_arrays(model, plan, launch, 2, local)  # noqa: E731
        launch_path_threads(model, plan, XT, acc, scale, F1, stream, kept)
        return
    n_features = F1 - 1
    rows = 2
    if quadrature_warps(n_features, 2) == 0 < quadrature_warps(n_features):
        rows = 1  # two rows' sums would not fit shared memory where one row's do
    warps = quadrature_warps(n_features, rows)
    shared = warps > 0
    tpb = 32 * (warps or min(4, int(get_config().shap_quadrature_warps)))
    shared_bytes = tpb * n_features * 8 * rows if shared else 0
    rows_per_launch = 65535 * tpb * rows  # grid.y (row tiles) is at most 65535
    if len(plan.quadrature) * -(-nb // rows_per_launch) >= 3:
        XT = view(XT)
    local = local_tiles(plan)
    streams = list(streams or (stream,))
    for i, launch in enumerate(plan.quadrature):
        stream = streams[i % len(streams)]
        if local:
            local_rows = 2
            local_warps = quadrature_warps(launch.local_columns, local_rows)
            if local_warps == 0:
                local_rows, local_warps = 1, quadrature_warps(launch.local_columns)
            if local_warps > 0:
                _launch_local(model, plan, launch, XT, acc, scale, F1, stream, local_warps,
                              local_rows)  # fmt: skip
                continue
        kernel = quadrature_kernel(launch.n_nodes, shared, rows=rows, general=launch.general_units)
        kept = _kept_arrays(model, plan, launch, rows, False)
        for row0 in range(0, nb, rows_per_launch):
            grid = (launch.n_chunks, -(-min(nb - row0, rows_per_launch) // (tpb * rows)))
            launch_kernel(
                kernel, grid, tpb, stream, shared_bytes, (*kept, XT, acc, scale, F1, row0)
            )


def _kept_arrays(model, plan, launch, rows: int, local: bool) -> tuple:
    """The model's and ``launch``'s arrays of a quadrature launch, before the rows, as kept
    read-only hints (:meth:`~.runtime.model.DeviceModel.read_only`): with chunk-local tiles
    (``local``), else a column per feature (the two-row kernel takes the local-tile arrays,
    unused)."""

    def arrays() -> tuple:
        model_arrays = (model.lane_f, model.lane_i, model.lane_cat, model.cat_words,
                        model.path_offsets, launch.paths, plan.unit_offsets, plan.unit_value,
                        plan.unit_lanes, plan.unit_pair)  # fmt: skip
        if local:
            return model_arrays + (launch.local_offsets, launch.local_group, plan.lane_column,
                                   launch.local_features, launch.local_feature_offsets)  # fmt: skip
        extra = (launch.offsets,) * 3 if rows == 2 else ()
        return model_arrays + (launch.offsets, launch.group, *extra)

    return model.read_only(("shap_quadrature", id(launch), rows, local), arrays)


def _launch_local(model, plan, launch, XT, acc, scale, F1, stream, warps: int,
                  rows: int = 1) -> None:  # fmt: skip
    """One SHAP quadrature launch with chunk-local feature tiles (``warps`` warps a block,
    ``rows`` rows a thread)."""
    nb = int(XT.shape[1])
    tpb = 32 * warps
    shared_bytes = tpb * launch.local_columns * 8 * rows
    rows_per_launch = 65535 * tpb * rows  # grid.y (row tiles) is at most 65535
    kernel = quadrature_kernel(launch.n_nodes, True, local=True, rows=rows,
                               general=launch.general_units)  # fmt: skip
    kept = _kept_arrays(model, plan, launch, rows, True)
    for row0 in range(0, nb, rows_per_launch):
        grid = (launch.n_local, -(-min(nb - row0, rows_per_launch) // (tpb * rows)))
        launch_kernel(kernel, grid, tpb, stream, shared_bytes, (*kept, XT, acc, scale, F1, row0))
