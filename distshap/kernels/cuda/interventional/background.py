"""A background data set on one device against one model: its masks and pattern counts.

Built once per (device model, background) by :func:`device_background` and kept on the
:class:`~.runtime.model.DeviceModel` (the last :data:`MAX_BACKGROUNDS` of each):

* **masks**: ``int32 (bins, B)``, bit ``lane`` set where the background row follows that
  lane's element (one warp per bin, one ``ballot`` per background row: :func:`mask_kernel`);
* **pattern counts**: for the paths with a background table
  (:func:`distshap.plan.interventional.table_plan`), how many background rows follow each
  pattern of the path's elements (the bias lane adds 1 at its row's pattern). The tables
  themselves are filled from them on first use (:mod:`.tables`).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import numpy as np
from numba import cuda

from distshap.kernels.cuda.interventional.common import bin_lane, row_range, shapley_weights
from distshap.kernels.cuda.runtime.device import FULL_MASK, SIM, ballot, lane_follows, stream
from distshap.kernels.cuda.runtime.model import DeviceModel, device_model
from distshap.kernels.interventional_math import Background, check_background
from distshap.packed import PackedModel
from distshap.plan.config import get_config
from distshap.plan.interventional import TablePlan, bins_maxk, oversize_elements, table_plan

__all__ = ["MAX_BACKGROUNDS", "DeviceBackground", "device_background", "mask_kernel"]

#: Backgrounds kept per device model (least recently used dropped).
MAX_BACKGROUNDS = 4


@cache
def mask_kernel(warps: int):
    """The mask kernel of blocks of ``warps`` warps (one bin each)."""

    @cuda.jit(cache=True)
    def kernel(lane_f, lane_i, lane_cat, cat_words, bin_offsets, bins, rows, masks, count_off,
               counts, rows_per_block):  # fmt: skip
        """One warp per (bin, background rows): ``masks[bin, r]`` and the pattern counts of the
        paths with a count offset (their bias lane adds 1 at its pattern)."""
        tid = cuda.threadIdx.x
        lane = tid & 31
        bi = cuda.blockIdx.x * warps + (tid >> 5)
        live = bi < bins.shape[0]
        b = bins[bi] if live else bins[0]
        li, valid, feat, pos, start, k = bin_lane(lane_i, bin_offsets, b, lane)
        valid = valid and live
        active = valid and pos >= 1
        coff = count_off[li]
        counting = valid and pos == 0 and coff >= 0
        mask_k = (np.int64(1) << k) - 1
        r0, r1 = row_range(cuda.blockIdx.y, rows_per_block, rows.shape[0])
        for r in range(r0, r1):
            o = False
            if active:
                o = lane_follows(rows[r, feat], lane_f, lane_i, lane_cat, cat_words, li)
            bal = np.int64(ballot(FULL_MASK, o))
            if live and lane == 0:
                masks[b, r] = np.int32(bal - ((bal >> 31) << 32))  # the 32 bits, as int32
            if counting:
                cuda.atomic.add(counts, coff + ((bal >> (start + 1)) & mask_k), 1)

    return kernel


@dataclass(eq=False)
class DeviceBackground:
    """A background data set on one device, against one model: rows, margins, masks, pattern
    counts; the device tables of each output kind are built on first use (``shap``,
    ``interactions``: :func:`.tables.device_tables`, under ``lock``)."""

    n_rows: int
    rows: Any
    m_bg: Any  # float64 (B,): margin (group 0; the transforms need one group)
    masks: Any
    counts: Any
    regular_bins: Any
    regular_maxk: Any
    n_regular_bins: int
    lane_all: Any
    elem_path: Any
    elem_pos: Any
    n_elems: int
    weights: Any
    plan: TablePlan
    shap: Any = None
    interactions: Any = None
    lock: Any = field(default_factory=threading.Lock, repr=False)


class _Kept:
    """The last :data:`MAX_BACKGROUNDS` device backgrounds of one device model, by digest."""

    def __init__(self) -> None:
        self.entries: OrderedDict = OrderedDict()
        self.lock = threading.Lock()

    def get(self, digest: str, build: Callable[[], DeviceBackground]) -> DeviceBackground:
        with self.lock:
            hit = self.entries.get(digest)
            if hit is not None:
                self.entries.move_to_end(digest)
                return hit
            out = self.entries[digest] = build()
            while len(self.entries) > MAX_BACKGROUNDS:
                self.entries.popitem(last=False)
            return out


def device_background(packed: PackedModel, background: Background,
                      model: DeviceModel | None = None) -> DeviceBackground:  # fmt: skip
    """``background`` on the current device against ``packed``: masks and pattern counts
    computed once, kept on the device model by the background's digest."""
    check_background(background, packed)
    if model is None:
        model = device_model(packed)
    if not (packed.digest and background.digest):
        return _build(packed, background, model)
    kept = model.form("interventional backgrounds", _Kept)
    return kept.get(str(background.digest), lambda: _build(packed, background, model))


def _check_mask_bytes(n_bins: int, B: int) -> None:
    mask_bytes = 4 * n_bins * B
    budget = get_config().interventional_mask_budget_bytes
    if mask_bytes > budget:
        raise ValueError(
            f"a background of {B} rows needs {mask_bytes / 2**20:.0f} MiB of masks for this "
            f"model ({n_bins} bins), over the configuration's interventional_mask_budget_bytes "
            f"= {budget / 2**20:.0f} MiB: use fewer background rows (a sample or k-means "
            "summary of a few hundred is typical)"
        )


def _nonempty(a, dtype) -> np.ndarray:
    a = np.ascontiguousarray(a, dtype=dtype)
    return a if a.size else np.zeros(1, dtype)


def _build(packed: PackedModel, background: Background, model: DeviceModel) -> DeviceBackground:
    """Copy the background, compute its masks and pattern counts (:func:`mask_kernel`)."""
    rows = np.ascontiguousarray(background.rows, dtype=np.float32)
    margin = np.ascontiguousarray(background.margin, dtype=np.float64)
    B = int(rows.shape[0])
    n_bins = max(packed.num_bins, 1)
    _check_mask_bytes(n_bins, B)
    plan = table_plan(packed)
    reg_bins, reg_maxk, n_reg = bins_maxk(packed, plan.k, plan.regular)
    elem_path, elem_pos = oversize_elements(plan.k, plan.regular)
    lane_path = packed.lane_path.astype(np.int64)
    count_off = plan.count[lane_path] if packed.num_paths else np.full(1, -1)
    host = dict(
        rows=rows,
        m_bg=np.ascontiguousarray(margin[:, 0]),
        masks=np.zeros((n_bins, B), np.int32),
        counts=np.zeros(max(plan.n_counts, 1), np.int32),
        regular_bins=reg_bins,
        regular_maxk=reg_maxk,
        lane_all=np.ones(max(lane_path.size, 1), np.int8),
        elem_path=_nonempty(elem_path, np.int32),
        elem_pos=_nonempty(elem_pos, np.int32),
        weights=shapley_weights(),
    )
    dev = {name: cuda.to_device(a) for name, a in host.items()}
    count_off_d = cuda.to_device(_nonempty(count_off, np.int64))
    s = stream()
    if n_reg:
        warps = get_config().interventional_warps_per_block
        rpb = max(1, -(-B // 65535), min(64, -(-B * n_reg // 16384)))
        grid = (-(-n_reg // warps), -(-B // rpb))
        mask_kernel(warps)[grid, 32 * warps, s](
            model.lane_f, model.lane_i, model.lane_cat, model.cat_words, model.bin_offsets,
            dev["regular_bins"], dev["rows"], dev["masks"], count_off_d, dev["counts"], rpb,
        )  # fmt: skip
        if not SIM:
            s.synchronize()  # the masks serve later calls on any stream or thread
    return DeviceBackground(n_rows=B, n_regular_bins=n_reg, n_elems=int(elem_path.size),
                            plan=plan, **dev)  # fmt: skip
