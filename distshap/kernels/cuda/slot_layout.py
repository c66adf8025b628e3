"""Pair-slot quadrature launches gathered element-major on the device (:class:`SlotLayout`).

The slot quadrature kernels (:mod:`.slot_quadrature`) run one thread per path of a chunk; with
the launch's lanes and slot numbers gathered once per device model into element-major arrays
(:func:`slot_layout`), the threads of a warp read element ``e`` of their paths from
consecutive addresses (one cache line a warp instead of one a thread). Only the layout moves:
the kernels compute the same values from it as from the lanes.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from distshap.kernels.cuda.runtime.device import (
    LF_LOWER,
    LF_UPPER,
    LF_VALUE,
    LF_ZERO,
    LI_FEATURE,
    LI_FLAGS,
    LI_NBITS,
    SIM,
)  # fmt: skip

__all__ = ["SlotLayout", "gather_kernel", "slot_layout"]


class SlotLayout:
    """A quadrature launch's paths gathered element-major for the slot kernels.

    Position ``j`` is the launch's ``j``-th path (``launch.paths[j]``) with ``pk[j]`` features
    and leaf value ``pv[j]``. Element ``e`` (0-based, sorted by feature as in the lanes) is
    ``ef[3 e + 0/1/2, j]`` (lower, upper, zero fraction), ``ei[3 e + 0/1/2, j]`` (feature,
    flags, category bits) and ``ecat[e, j]`` (category set offset). A block runs the positions
    ``offsets[b]:offsets[b + 1]`` (one chunk of the launch; ``n_blocks`` blocks) and sums them
    in a tile of the slots ``tile_slots[tile_offsets[b]:tile_offsets[b + 1]]`` (``most``: the
    largest tile). Upper-triangle entry ``(a, c)``, ``a <= c``, is number
    ``u = a k - a (a - 1) / 2 + c - a``: ``tmap[u, j]`` (int16) its block-local tile slot
    (:func:`~.runtime.model.chunk_tiles` of the blocks; -1 beyond int16, where the
    block has too many slots for a tile and adds to the row's slots through ``path_map``).
    """

    __slots__ = ("ef", "ei", "ecat", "pk", "pv", "tmap", "kmax", "offsets", "tile_offsets",
                 "tile_slots", "n_blocks", "most", "__weakref__")  # fmt: skip

    def __init__(self, ef, ei, ecat, pk, pv, tmap, kmax: int, offsets=None, tile_offsets=None,
                 tile_slots=None, n_blocks: int = 0, most: int = 0):  # fmt: skip
        self.ef, self.ei, self.ecat, self.pk, self.pv = ef, ei, ecat, pk, pv
        self.tmap, self.kmax, self.offsets = tmap, kmax, offsets
        self.tile_offsets, self.tile_slots = tile_offsets, tile_slots
        self.n_blocks, self.most = n_blocks, most


@cuda.jit(cache=True)
def gather_kernel(lane_f, lane_i, lane_cat, path_offsets, paths, map_offsets, local_map, ef, ei,
                   ecat, pk, pv, tmap):  # fmt: skip
    """One thread per position of a launch: its path's lanes and slot numbers, element-major."""
    j = cuda.grid(1)
    if j >= paths.shape[0]:
        return
    p = paths[j]
    s0 = path_offsets[p] + 1
    k = path_offsets[p + 1] - s0
    pk[j] = k
    pv[j] = lane_f[s0 - 1, LF_VALUE]
    for e in range(k):
        li = s0 + e
        ef[3 * e, j] = lane_f[li, LF_LOWER]
        ef[3 * e + 1, j] = lane_f[li, LF_UPPER]
        ef[3 * e + 2, j] = lane_f[li, LF_ZERO]
        ei[3 * e, j] = lane_i[li, LI_FEATURE]
        ei[3 * e + 1, j] = lane_i[li, LI_FLAGS]
        ei[3 * e + 2, j] = lane_i[li, LI_NBITS]
        ecat[e, j] = lane_cat[li]
    m = map_offsets[p]
    u = 0
    for a in range(k):
        for c in range(a, k):
            t = local_map[m + a * k + c]
            tmap[u, j] = t if t < 32768 else -1
            u += 1


def _host(a) -> np.ndarray:
    return a.copy_to_host() if hasattr(a, "copy_to_host") else np.asarray(a)


def _gathered(model, launch, offsets, slots, tile_offsets, tile_slots, stream) -> SlotLayout:
    """The :class:`SlotLayout` of one quadrature launch (gathered on ``stream``)."""
    paths = _host(launch.paths).astype(np.int64)
    P = max(int(paths.size), 1)
    k = offsets[paths + 1] - offsets[paths] - 1
    kmax = max(int(k.max(initial=0)), 1)
    npairs = kmax * (kmax + 1) // 2
    lay = SlotLayout(
        ef=cuda.to_device(np.zeros((3 * kmax, P), np.float32), stream=stream),
        ei=cuda.to_device(np.zeros((3 * kmax, P), np.int32), stream=stream),
        ecat=cuda.to_device(np.full((kmax, P), -1, np.int64), stream=stream),
        pk=cuda.to_device(np.zeros(P, np.int32), stream=stream),
        pv=cuda.to_device(np.zeros(P, np.float32), stream=stream),
        tmap=cuda.to_device(np.full((npairs, P), -1, np.int16), stream=stream),
        kmax=kmax, offsets=launch.offsets, tile_offsets=tile_offsets, tile_slots=tile_slots,
        n_blocks=int(launch.n_chunks), most=int(slots.max_tile_slots),
    )  # fmt: skip
    if paths.size:
        gather_kernel[-(-P // 128), 128, stream](
            model.lane_f, model.lane_i, model.lane_cat, model.path_offsets, launch.paths,
            slots.map_offsets, slots.local_map, lay.ef, lay.ei, lay.ecat, lay.pk, lay.pv,
            lay.tmap,
        )  # fmt: skip
    return lay


def slot_layout(model, plan, slots, stream) -> tuple:
    """The :class:`SlotLayout` of each quadrature launch of ``plan`` (the device model's
    interaction plan; ``slots`` its :class:`~distshap.kernels.cuda.runtime.model.SlotArrays`), one
    block a chunk with the chunk tiles of ``slots``: gathered on the device on first use and
    kept as a form of the device model ``model``."""

    def build() -> tuple:
        offsets = _host(model.path_offsets)
        out = tuple(
            _gathered(model, launch, offsets, slots, tile_offsets, tile_slots, stream)
            for launch, (tile_offsets, tile_slots) in zip(plan.quadrature, slots.tiles,
                                                          strict=True)
        )  # fmt: skip
        if not SIM:
            stream.synchronize()  # the layouts serve later calls on any stream
        return out

    return model.form("slot_layouts", build)
