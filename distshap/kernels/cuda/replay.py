"""GPU SHAP calls of up to thousands of rows replayed as CUDA graphs.

A call of a few rows spends most of its time on the host: copies, a dozen launches, the
additivity check's launch, the copy back, each with Python around it; a call of thousands
spends about as much host time beside its kernels (in a server, host time the next call
waits for). Here the whole call for ``b`` rows of a model (the rows' copy to the device, their
transpose, the table, quadrature, fallback and finish kernels, the check's traversal and the
values' copy back; the traversal and the quadrature launches on branches beside each other)
is captured once into a CUDA graph whose buffers are kept with the device model; a later call
of ``n`` rows whose bucket (:func:`replay_bucket`) is ``b`` copies them into the graph's
pinned input, zeroes the input's ``b - n`` rows beyond them, launches the graph, waits and
reads its first ``n`` pinned output rows and the check's flag. A row's values
do not depend on the rows beside it or on the plan of the call's row count, so the zero rows
change no bit of the others; they are checked too (a flag sends the call to the full check,
which looks at its own rows only).

The graph runs the kernels :func:`.launch.shap_values` runs, on the same arrays, so its values
are the same bits. A graph serves one call at a time: a bucket keeps up to ``replay_graphs`` of
them (each its own buffers and stream), so calls from several threads run side by side on the
GPU. A graph is built by a call of its bucket ``b`` that finds no graph free (the first call of
the bucket, then one that finds the others busy; one build at a time in a process): that call
runs the sequence eagerly (its values are the call's answer), captures it, and keeps the graph
only if its replays give the eager runs' bits and flags on other rows and on the call's own, the
output poisoned before each (:meth:`_Graph.verified`); otherwise, or where the capture fails,
no more graphs are built for that bucket (where it was the first, its calls take the launches),
and one warning says so. A call that finds no graph free and none to build takes the launches.
A bucket beyond the rows the check's block traversal takes, or beyond the rows whose buffers
fit ``replay_graph_bytes``, is cut to that many rows where the call's own rows fit.

A call waits for its graph through :func:`distshap.waiting.wait_for_stream`: a call run by a
:class:`distshap.waiting.Handoff` hands its thread's turn back while the GPU runs.
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
from distshap.kernels.cuda.runtime.model import device_model, shap_plan_of_rows
from distshap.kernels.cuda.shap_quadrature import launch_quadrature
from distshap.kernels.cuda.tables import launch_tables
from distshap.packed import PackedModel
from distshap.plan.config import get_config
from distshap.plan.costs import forced_costs
from distshap.waiting import wait_for_stream

__all__ = ["checked_values", "replay_bucket", "replayed_values"]


#: Calls of at most this many rows replay their graph whatever its buffers' bytes.
_ANY_BYTES_ROWS = 16


def replay_bucket(n: int) -> int:
    """The rows of the graph a call of ``n`` rows replays: ``n`` up to 15, else ``n`` rounded
    up to a multiple of ``2 ** (bits of n - 4)``: at most an eighth more rows (zeros), eight
    graphs an octave of row counts."""
    step = 1 << max(0, int(n).bit_length() - 4)
    return -(-int(n) // step) * step


def graph_bytes(packed: PackedModel, rows: int) -> int:
    """Device and pinned host bytes of the buffers of a graph of ``rows`` rows: the rows (pinned,
    on the device, transposed) and the values (the int64 sums, float32 on the device and
    pinned, the check's margins)."""
    columns = packed.num_groups * (packed.num_features + 1)
    return int(rows) * (12 * packed.num_features + 16 * columns + 8 * packed.num_groups)


#: One graph is built at a time in a process: a build's capture must meet no other build's
#: device-wide synchronisation (which ends the making of a graph's buffers).
_BUILDING = threading.Lock()

#: Streams beside a graph's own while it is built: the check's traversal, then the quadrature
#: launches dealt over the graph's stream and the others (``_Graph._sequence``).
_BRANCHES = 3
_SIDES: dict[int, tuple[list, list, list]] = {}  # device -> (streams, joins, forks)


def _branches() -> tuple[list, list, list]:
    """The streams of the branches, an event to join each back and the two events that fork
    them (after the rows' copy, after the transpose), one set a device: only builds use them
    (eager runs and captures, one at a time in a process: ``_BUILDING``); a captured graph
    keeps its branches as its own nodes."""
    import cupy

    device = int(cupy.cuda.runtime.getDevice())
    kept = _SIDES.get(device)
    if kept is None:
        sides = [cupy.cuda.Stream(non_blocking=True) for _ in range(_BRANCHES)]
        events = [cupy.cuda.Event(disable_timing=True) for _ in range(_BRANCHES + 2)]
        kept = _SIDES[device] = (sides, events[:_BRANCHES], events[_BRANCHES:])
    return kept


class _Slot:
    """A model's graphs for one row bucket (up to ``replay_graphs``, each serving one call at a
    time), each built by a call that finds the others busy; where a build fails, no more are
    tried (none at all where the first one failed)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.graphs: list[_Graph] = []  # built, verified
        self.free: list[_Graph] = []  # of those, the ones no call holds
        self.building = False
        self.most: int | None = None  # the graphs built when a build failed

    @property
    def failed(self) -> bool:
        """Whether no graph serves this bucket: its first build failed."""
        return self.most == 0

    def take(self, most: int) -> tuple[_Graph | None, bool]:
        """``(a free graph, False)``; else ``(None, True)`` where the caller is to build one
        more (fewer than ``most`` built, no build running in the process); else
        ``(None, False)``: none serves."""
        with self.lock:
            if self.free:
                return self.free.pop(), False
            most = most if self.most is None else min(most, self.most)
            if len(self.graphs) < most and not self.building and _BUILDING.acquire(False):
                self.building = True
                return None, True
            return None, False

    def give(self, graph: _Graph | None, built: bool) -> None:
        """``graph`` back (free); ``built``: the caller's build ended (``graph`` new, or None
        where it failed: no more graphs are built for this bucket)."""
        with self.lock:
            if built:
                self.building = False
                _BUILDING.release()
                if graph is None:
                    self.most = len(self.graphs)
                else:
                    self.graphs.append(graph)
            if graph is not None:
                self.free.append(graph)


class _Graph:
    """The buffers, stream and CUDA graph of one call of ``n`` rows of a device model (a
    bucket: calls of fewer rows fill the rest with zeros). It keeps no reference to the model
    (whose forms keep it): the launches are handed the model. Its branches' streams are the
    process's (:func:`_branches`), used only while it is built."""

    def __init__(self, packed: PackedModel, model, n: int) -> None:
        import cupy
        import cupyx

        self.packed = packed
        self.plan = shap_plan_of_rows(packed, model, n)  # the plan launch._run takes
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self.host_in = cupyx.empty_pinned((n, packed.num_features), np.float32)
        self.flag = cuda.mapped_array(1, np.int32)
        self.flag[0] = 0
        with self.stream:  # made on the stream that uses them: no other stream's pool blocks
            self.X = cupy.empty((n, packed.num_features), np.float32)
            self.XT = cupy.empty((packed.num_features, n), np.float32)
            out, out2, self.group_size, self.bias_offset = launch.new_output(packed, n, False)
            self.acc = cupy.zeros(out2.shape, np.int64)  # the finish kernel leaves it zeroed
            groups = int(packed.margin["base_score"].shape[0])
            self.row_margins = cupy.empty((n, groups), np.float64)  # the check's branch
        self.out = out
        self.host_out = cupyx.empty_pinned(out.shape, np.float32)
        self.scale = 2.0**model.shap_shift
        self.expected = model.read_only("expected_value", lambda: (model.expected_value,))[0]
        self.margin_arrays = traversal._kept_arrays(packed, model)
        # Numba views made once: a launch then synchronises no stream (not allowed in a capture)
        self.views = tuple(args.view(a) for a in (self.X, self.XT, self.acc, out2, out,
                                                  self.row_margins))  # fmt: skip
        self.graph = None
        cupy.cuda.Device().synchronize()  # the model's copies and these buffers are done

    def _sequence(self, model, mark=None) -> None:
        """Queue the call's steps on the graph's stream. Without ``mark``, the check's traversal
        (the rows' margins; a branch forked after the rows' copy) and the quadrature launches
        (dealt over the stream and branches forked after the transpose) run beside each
        other, joined before the finish kernel; their sums are integer atomics, so the bits are
        one stream's. ``mark(step)`` after each step, where given (``benchmarks.call_stages``
        records an event there): then every step runs on the one stream, in order, and the
        check traverses the trees in its own kernel."""
        import cupy

        runtime = cupy.cuda.runtime
        X, XT, acc, out_rows, values, margins = self.views
        plan, scale, F1 = self.plan, self.scale, self.packed.num_features + 1
        s = args.current_stream()
        done = mark or (lambda step: None)
        runtime.memcpyAsync(self.X.data.ptr, self.host_in.ctypes.data, self.X.nbytes,
                            runtime.memcpyHostToDevice, self.stream.ptr)  # fmt: skip
        done("rows to the device")
        sides, joins, forks = ([], [], []) if mark else _branches()
        forked: list = []
        try:  # every branch forked is joined, whatever fails (a capture ends joined)
            if sides:  # the margins need the rows only
                forked += self._fork(sides[:1], forks[0])
                with sides[0]:
                    traversal.gpu_margin(self.packed, X, margins, arrays=self.margin_arrays)
            if plan.n_table_bins:
                launch_tables(model, plan, X, acc, scale, F1, s)
                done("tables")
            if plan.quadrature:
                cupy.copyto(self.XT, self.X.T)
                done("transpose")
                spread = sides[1 : len(plan.quadrature)]  # the launches read the transpose
                forked += self._fork(spread, forks[1])
                streams = [s]
                for side in spread:
                    with side:
                        streams.append(args.current_stream())
                launch_quadrature(model, plan, X, acc, scale, F1, s, XT=XT, streams=streams)
                done("quadrature")
            if model.n_oversize:
                launch_fallback(model, X, acc, scale, F1, s, False)
                done("oversize paths")
        finally:
            for side, join in zip(forked, joins, strict=False):
                join.record(side)
                self.stream.wait_event(join)
        launch.launch_finish(launch.finish_kernel, acc, out_rows, 1.0 / scale, self.expected,
                             self.group_size, self.bias_offset, s)  # fmt: skip
        done("finish")
        if forked:
            traversal.check_values(values, margins, KERNEL_RTOL, flag=self.flag)
        elif traversal.check_rows(self.packed, X, values, KERNEL_RTOL, flag=self.flag,
                                  arrays=self.margin_arrays) is None:  # fmt: skip
            raise RuntimeError("the additivity check's block traversal does not take these rows")
        done("check")
        runtime.memcpyAsync(self.host_out.ctypes.data, self.out.data.ptr, self.out.nbytes,
                            runtime.memcpyDeviceToHost, self.stream.ptr)  # fmt: skip
        done("values to the host")

    def _fork(self, sides: list, fork) -> list:
        """``sides``, made to wait for what is queued on the graph's stream so far (``fork``:
        an event, recorded where there are sides); each is to be joined back before the stream
        goes on past the branches."""
        if sides:
            fork.record(self.stream)
        for side in sides:
            side.wait_event(fork)
        return sides

    def eager(self, rows: np.ndarray, model) -> tuple[np.ndarray, bool]:
        """Run the call's launches one by one on ``rows``: ``(values, flagged)``."""
        self.stream.synchronize()  # nothing of an interrupted call still reads the input
        self._fill(rows)
        with self.stream, warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*under-utilization.*")
            self._sequence(model)
        return self._read(len(rows))

    def capture(self, model) -> None:
        """Capture the call's launches into a CUDA graph (on its own stream)."""
        with self.stream:
            self.stream.begin_capture()
            try:
                self._sequence(model)
            finally:
                graph = self.stream.end_capture()
        graph.upload(self.stream)
        self.graph = graph

    def verified(self, rows: np.ndarray, values: np.ndarray, flagged: bool, model) -> bool:
        """Whether the graph gives the launches' bits and flag: on other rows (the input
        reversed), then on ``rows`` (the eager run's ``values``), the output poisoned with NaN
        before each replay, so a graph that copies or computes nothing fails."""
        other = np.ascontiguousarray(rows[::-1, ::-1])
        for x, want, want_flag in ((other, *self.eager(other, model)), (rows, values, flagged)):
            self.host_out.fill(np.nan)
            got, got_flag = self.replay(x)
            if got_flag != want_flag or not np.array_equal(got.view(np.uint32),
                                                           want.view(np.uint32)):  # fmt: skip
                return False
        return True

    def replay(self, rows: np.ndarray) -> tuple[np.ndarray, bool]:
        """The call on ``rows`` through the graph: ``(values, flagged)``."""
        self.stream.synchronize()  # nothing of an interrupted call still reads the input
        self._fill(rows)
        self.graph.launch(self.stream)
        return self._read(len(rows))

    def _fill(self, rows: np.ndarray) -> None:
        """``rows`` into the pinned input, zeros in its rows beyond them."""
        n = len(rows)
        np.copyto(self.host_in[:n], rows)
        self.host_in[n:] = 0

    def _read(self, n: int) -> tuple[np.ndarray, bool]:
        wait_for_stream(self.stream)
        flagged = bool(self.flag[0] != 0)
        self.flag[0] = 0
        return self.host_out[:n].copy(), flagged


def _notice(what: str) -> None:
    """One warning a process where a graph could not serve (the launches do, more slowly)."""
    global _NOTICED
    if not _NOTICED:
        _NOTICED = True
        message = (f"distshap: {what}; that row bucket builds no more graphs, and its calls that "
                   "find none free take the launches one by one (the same values, more host "
                   "time a call)")  # fmt: skip
        warnings.warn(message, RuntimeWarning, stacklevel=3)


_NOTICED = False


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
    CUDA graph for their row count's bucket (module docstring): ``(values, flagged)`` as
    :func:`.launch.checked_values` returns them (NumPy values ``(n, G, F + 1)``), or ``None``
    where no graph serves the call: more rows than ``replay_rows``, than the check's block
    traversal takes or than fit buffers of ``replay_graph_bytes`` (beyond 16 rows), rows that
    are not a C-contiguous float32 NumPy array or not the same array as ``raw``, a model
    without a digest or margin, graphs all busy with other calls or known not to work."""
    n = int(rows.shape[0]) if isinstance(rows, np.ndarray) and rows.ndim == 2 else 0
    config = get_config()
    fit = max(_ANY_BYTES_ROWS, int(config.replay_graph_bytes) // max(1, graph_bytes(packed, 1)))
    most = min(int(config.replay_rows), traversal.block_rows_max(packed), fit)
    if not 1 <= n <= most or SIM or raw is not rows:
        return None
    bucket = min(replay_bucket(n), most)
    if rows.dtype != np.float32 or not rows.flags.c_contiguous or not packed.digest:
        return None
    if packed.margin is None or rows.shape[1] != packed.num_features:
        return None
    if int(packed.margin["base_score"].shape[0]) > traversal._THREADS:
        return None  # the check's block traversal does not take so many groups
    model = device_model(packed)
    slot = model.form(("replay", bucket, forced_costs()), _Slot)  # plans are keyed by costs too
    graph, build = slot.take(max(1, int(config.replay_graphs)))
    if graph is not None:
        try:
            return graph.replay(rows)
        finally:
            slot.give(graph, False)
    if not build:
        return None
    graph, answer = None, None
    try:
        graph, answer = _first_call(packed, model, rows, bucket)
    finally:
        slot.give(graph, True)
    return answer


def _first_call(packed: PackedModel, model, rows: np.ndarray, bucket: int):
    """A call that builds a graph of its row count's ``bucket``: the launches one by one (the
    answer), then the graph, kept where :meth:`_Graph.verified`: ``(graph or None, answer)``;
    the answer is ``None`` where the buffers or the eager run fail (the caller's launches then
    run the call)."""
    try:
        graph = _Graph(packed, model, bucket)
        values, flagged = graph.eager(rows, model)
    except Exception as e:  # noqa: BLE001 - the launches serve the call, as without graphs
        _notice(f"a call's launches failed on the graph's stream ({type(e).__name__}: {e})")
        return None, None
    try:
        graph.capture(model)
        if graph.verified(rows, values, flagged, model):
            return graph, (values, flagged)
        _notice("a captured CUDA graph gave other values than its launches")
    except Exception as e:  # noqa: BLE001 - a launch the capture does not take: no graph
        _notice(f"a call could not be captured into a CUDA graph ({type(e).__name__}: {e})")
    return None, (values, flagged)
