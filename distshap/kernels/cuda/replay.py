"""GPU SHAP calls of few rows replayed as CUDA graphs.

A call of a few rows spends most of its time on the host: copies, a dozen launches, the
additivity check's launch, the copy back, each with Python around it. Here the whole call for
``n`` rows of a model (the rows' copy to the device, their transpose, the table, quadrature,
fallback and finish kernels, the check's traversal and the values' copy back) is captured
once into a CUDA graph whose buffers are kept with the device model; a later call of ``n``
rows copies them into the graph's pinned input, launches the graph, waits and reads the pinned
output and the check's flag.

The graph runs the kernels :func:`.launch.shap_values` runs, on the same arrays, so its values
are the same bits. It is built on the first call of ``n`` rows: that call runs the sequence
eagerly (its values are the call's answer), captures it, replays it on the same rows and keeps
the graph only if the replay's bits and flag equal the eager run's; otherwise, or where the
capture fails, calls of ``n`` rows take the launches as before. One call at a time uses a
graph; a call that finds it busy takes the launches.
"""

from __future__ import annotations

import threading
import warnings

import numpy as np
from numba import cuda

from distshap.additivity_rule import KERNEL_RTOL
from distshap.kernels.cuda import launch, traversal
from distshap.kernels.cuda.fallback import launch_fallback
from distshap.kernels.cuda.runtime import args
from distshap.kernels.cuda.runtime.device import SIM
from distshap.kernels.cuda.runtime.model import device_model, few_rows_shap_plan
from distshap.kernels.cuda.shap_quadrature import launch_quadrature
from distshap.kernels.cuda.tables import launch_tables
from distshap.packed import PackedModel
from distshap.plan.config import get_config

__all__ = ["checked_values", "replayed_values"]


class _Slot:
    """A model's graph for one row count: built on first use, or known not to work."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.graph: _Graph | None = None
        self.failed = False


class _Graph:
    """The buffers, stream and CUDA graph of one call of ``n`` rows of a device model."""

    def __init__(self, packed: PackedModel, model, n: int) -> None:
        import cupy
        import cupyx

        F, F1 = packed.num_features, packed.num_features + 1
        plan = few_rows_shap_plan(packed, model) if n <= get_config().few_rows else model.shap
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self.host_in = cupyx.empty_pinned((n, F), np.float32)
        self.X = cupy.zeros((n, F), np.float32)
        self.XT = cupy.zeros((F, n), np.float32)
        out, out2, group_size, bias_offset = launch.new_output(packed, n, False)
        self.out = out
        self.host_out = cupyx.empty_pinned(out.shape, np.float32)
        self.acc = cupy.zeros(out2.shape, np.int64)  # the finish kernel leaves it zeroed
        self.flag = cuda.mapped_array(1, np.int32)
        self.flag[0] = 0
        self.graph = None
        scale = 2.0**model.shap_shift
        expected = model.read_only("expected_value", lambda: (model.expected_value,))[0]
        # Numba views made once: a launch then synchronises no stream (not allowed in a capture)
        X, XT, acc, out_rows, values = (
            args.view(a) for a in (self.X, self.XT, self.acc, out2, out)
        )  # fmt: skip
        runtime = cupy.cuda.runtime

        def sequence() -> None:
            s = args.current_stream()
            ptr = self.stream.ptr
            runtime.memcpyAsync(self.X.data.ptr, self.host_in.ctypes.data, self.X.nbytes,
                                runtime.memcpyHostToDevice, ptr)  # fmt: skip
            if plan.n_table_bins:
                launch_tables(model, plan, X, acc, scale, F1, s)
            if plan.quadrature:
                cupy.copyto(self.XT, self.X.T)
                launch_quadrature(model, plan, X, acc, scale, F1, s, XT=XT)
            if model.n_oversize:
                launch_fallback(model, X, acc, scale, F1, s, False)
            launch.launch_finish(launch.finish_kernel, acc, out_rows, 1.0 / scale, expected,
                                 group_size, bias_offset, s)  # fmt: skip
            traversal.check_rows(packed, X, values, KERNEL_RTOL, flag=self.flag)
            runtime.memcpyAsync(self.host_out.ctypes.data, self.out.data.ptr, self.out.nbytes,
                                runtime.memcpyDeviceToHost, ptr)  # fmt: skip

        self._sequence = sequence

    def eager(self, rows: np.ndarray) -> tuple[np.ndarray, bool]:
        """Run the call's launches one by one on ``rows``: ``(values, flagged)``."""
        self.stream.synchronize()  # nothing of an interrupted call still reads the input
        np.copyto(self.host_in, rows)
        with self.stream, warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*under-utilization.*")
            self._sequence()
        return self._read()

    def capture(self) -> None:
        """Capture the call's launches into a CUDA graph (on its own stream)."""
        with self.stream:
            self.stream.begin_capture()
            try:
                self._sequence()
            finally:
                graph = self.stream.end_capture()
        graph.upload(self.stream)
        self.graph = graph

    def replay(self, rows: np.ndarray) -> tuple[np.ndarray, bool]:
        """The call on ``rows`` through the graph: ``(values, flagged)``."""
        self.stream.synchronize()  # nothing of an interrupted call still reads the input
        np.copyto(self.host_in, rows)
        self.graph.launch(self.stream)
        return self._read()

    def _read(self) -> tuple[np.ndarray, bool]:
        self.stream.synchronize()
        flagged = bool(self.flag[0] != 0)
        self.flag[0] = 0
        return self.host_out.copy(), flagged


def checked_values(packed: PackedModel, rows, raw, interactions: bool):
    """:func:`.launch.checked_values` (the one-launch route of small models), else for SHAP
    values :func:`replayed_values`: ``(values, flagged)``, or ``None`` where neither serves
    the call (the caller then runs the kernels and the check itself)."""
    fused = launch.checked_values(packed, rows, raw, interactions)
    if fused is None and not interactions and packed.margin is not None:
        return replayed_values(packed, rows, raw)
    return fused


def replayed_values(packed: PackedModel, rows, raw) -> tuple[np.ndarray, bool] | None:
    """SHAP values of the NumPy rows ``rows`` with the additivity check, through the model's
    CUDA graph for their row count (module docstring): ``(values, flagged)`` as
    :func:`.launch.checked_values` returns them (NumPy values ``(n, G, F + 1)``), or ``None``
    where no graph serves the call: more than ``replay_rows`` rows, rows that are not a
    C-contiguous float32 NumPy array or not the same array as ``raw``, a model without a
    digest or margin, a graph busy with another call or known not to work."""
    n = int(rows.shape[0]) if isinstance(rows, np.ndarray) and rows.ndim == 2 else 0
    if not 1 <= n <= int(get_config().replay_rows) or SIM or raw is not rows:
        return None
    if rows.dtype != np.float32 or not rows.flags.c_contiguous or not packed.digest:
        return None
    if packed.margin is None or rows.shape[1] != packed.num_features:
        return None
    if int(packed.margin["base_score"].shape[0]) > traversal._THREADS:
        return None  # the check's block traversal does not take so many groups
    model = device_model(packed)
    slot = model.form(("replay", n), _Slot)
    if not slot.lock.acquire(blocking=False):
        return None
    try:
        if slot.graph is not None:
            return slot.graph.replay(rows)
        if slot.failed:
            return None
        graph = _Graph(packed, model, n)
        values, flagged = graph.eager(rows)
        slot.failed = True  # unless the replay below gives the eager run's bits
        try:
            graph.capture()
            again, flagged_again = graph.replay(rows)
        except Exception:  # noqa: BLE001 - a launch the capture does not take: no graph
            return values, flagged
        if flagged_again == flagged and np.array_equal(again.view(np.uint32),
                                                       values.view(np.uint32)):  # fmt: skip
            slot.graph, slot.failed = graph, False
        return values, flagged
    finally:
        slot.lock.release()
