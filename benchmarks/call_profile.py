"""Where one public GPU call's time goes: wall time, host time, and the host's profile.

For each ``--cases`` entry ``shape:kind:rows`` (kind ``shap`` or ``interactions``), on CuPy
rows through :class:`distshap.TreeExplainer` (the additivity check on, as the throughput
benchmark runs it), after a warm-up:

* ``wall``: median microseconds a call, the GPU synchronized before the clock stops;
* ``host``: median microseconds until the call returns, the GPU synchronized before it starts
  (what the host spends; the rest of ``wall`` is the GPU's tail);
* the ``--top`` functions by own host time over ``--calls`` calls (cProfile), microseconds a
  call, and how often each ran a call (kernel launches show as Numba dispatcher calls).

With ``--compare`` (no profile), before and after the host-cost work of
:mod:`distshap.kernels.cuda.args` and :mod:`distshap.kernels.cuda.traversal`, in one process,
calls alternating: ``before`` turns the kept launch configurations and streams, the argument
views, the one-kernel additivity check and the block traversal off (the margin then takes one
thread per row, the check CuPy reductions, as before); ``after`` is the default. For each case:

* ``wall`` and ``host`` of a public call, before / after, and whether both give the same bits;
* ``parts`` (CuPy events, median us): the values alone (``check_additivity=False``), the margin
  traversal one thread per row / a block per row (and whether both give the CPU's bits), the
  fused traversal + check (:func:`distshap.additivity.check_margin`), and the check against
  given margins before (CuPy reductions) / after (one kernel);
* ``parts`` also time each kernel of a batched call alone on kept arguments (tables,
  quadrature, fallback, finish, and the CuPy zeros of the accumulator that calls made before
  :data:`distshap.kernels.cuda.launch.KEEP`): the GPU's floor for the call; and ``host, values
  alone``: the host's own time of a call with the check off (the GPU synchronized before the
  call, not after), so wall minus host is the GPU's tail;
* ``--switches keep``: before / after of :data:`distshap.kernels.cuda.launch.KEEP` alone;
* ``--switches tables``: before / after of :data:`distshap.kernels.cuda.config.TABLE_TILE_WORDS`
  alone (``"int64"`` / ``"split"``: the table kernels' shared tile; the others stay on);
* ``--launch-micro``: host microseconds of one launch of a trivial kernel with four array
  arguments: CuPy arrays, Numba device arrays made once, views made at each launch
  (``cuda.as_cuda_array``), and each with the configuration built at each launch / kept.

Needs a GPU::

    DISTSHAP_BENCH_DEVICE=cuda python3 -m benchmarks.call_profile \
        --cases cal_housing-med:interactions:200,cal_housing-small:shap:10000
    DISTSHAP_BENCH_DEVICE=cuda python3 -m benchmarks.call_profile --compare --launch-micro
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import time

import numpy as np

from benchmarks.shapes import make_data, train_model

__all__ = ["compare_case", "launch_micro", "profile_case", "switches"]


def _median_us(fn, repeats: int, sync, sync_first: bool) -> float:
    times = []
    for _ in range(repeats):
        if sync_first:
            sync()
        t0 = time.perf_counter()
        fn()
        if not sync_first:
            sync()
        times.append(time.perf_counter() - t0)
    sync()
    return 1e6 * statistics.median(times)


def profile_case(shape: str, kind: str, rows: int, calls: int, top: int) -> None:
    """Prints the wall and host time of one case and the host's profile (module docstring)."""
    import cupy

    from distshap import TreeExplainer

    name, size = shape.rsplit("-", 1)
    booster = train_model(name, size)
    X, _ = make_data(name, rows, seed=1)
    Xd = cupy.asarray(np.ascontiguousarray(X, np.float32))
    explainer = TreeExplainer(booster, backend="cuda")
    call = explainer.shap_interaction_values if kind == "interactions" else explainer.shap_values

    def sync():
        cupy.cuda.Device().synchronize()

    def fn():
        call(Xd)

    for _ in range(3):
        fn()
    sync()
    wall = _median_us(fn, calls, sync, sync_first=False)
    host = _median_us(fn, calls, sync, sync_first=True)
    print(f"\n== {shape} {kind} {rows} rows: wall {wall:.0f} us a call, host {host:.0f} us, "
          f"{rows / wall * 1e6:,.0f} rows/s")  # fmt: skip
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        fn()
        sync()
    profiler.disable()
    stats = pstats.Stats(profiler)
    entries = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[:top]
    print(f"{'own us/call':>12} {'cum us/call':>12} {'calls/call':>10}  function")
    for (path, line, func), (_, ncalls, tottime, cumtime, _) in entries:
        where = "/".join(path.split("/")[-2:])
        print(f"{1e6 * tottime / calls:12.1f} {1e6 * cumtime / calls:12.1f} "
              f"{ncalls / calls:10.1f}  {func} ({where}:{line})")  # fmt: skip


def switches(after: bool, which: str = "all") -> None:
    """The host-cost switches on (``after``) or off (``before``; module docstring): ``which``
    ``"all"`` of them, or ``"keep"`` only :data:`distshap.kernels.cuda.launch.KEEP` (kept
    accumulators, no empty launchers, shared row views; the others stay on), or ``"tables"``
    only :data:`distshap.kernels.cuda.config.TABLE_TILE_WORDS` (``"split"`` after)."""
    from distshap import additivity
    from distshap.kernels.cuda import args, launch, traversal

    if which == "tables":
        from distshap.kernels.cuda import config

        config.TABLE_TILE_WORDS = "split" if after else "int64"
        return
    launch.KEEP = after
    if not after:
        launch.clear_kept()
    if which == "keep":
        return
    args.CACHE = args.VIEWS = additivity.GPU_KERNEL = after
    traversal.MODE = "auto" if after else "rows"
    if not after:
        args.clear()


def _events_us(fn, repeats: int) -> float:
    """Median GPU-stream microseconds of ``fn`` (CuPy events around it, synchronized)."""
    import cupy

    times = []
    for _ in range(repeats):
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(1e3 * cupy.cuda.get_elapsed_time(start, stop))
    return statistics.median(times)


def compare_case(shape: str, kind: str, rows: int, calls: int, which: str = "all") -> None:
    """Prints before / after of one case (module docstring, ``--compare``; ``which``: the
    switches compared, :func:`switches`)."""
    import cupy

    from distshap import TreeExplainer, additivity
    from distshap.dispatch import explain_rows
    from distshap.inputs import model_matrix
    from distshap.kernels.cuda import traversal
    from distshap.kernels.margin import predict_margin

    name, size = shape.rsplit("-", 1)
    booster = train_model(name, size)
    X, _ = make_data(name, rows, seed=1)
    Xd = cupy.asarray(np.ascontiguousarray(X, np.float32))
    explainer = TreeExplainer(booster, backend="cuda")
    inter = kind == "interactions"
    call = explainer.shap_interaction_values if inter else explainer.shap_values
    packed = explainer.packed

    def sync():
        cupy.cuda.Device().synchronize()

    results, outs = {}, {}
    for _ in range(3):  # warm both (compiles, caches)
        for after in (False, True):
            switches(after, which)
            outs[after] = call(Xd)
    sync()
    walls = {False: [], True: []}
    hosts = {False: [], True: []}
    for _ in range(3):  # alternate, so drift hits both alike
        for after in (False, True):
            switches(after, which)
            walls[after].append(_median_us(lambda: call(Xd), calls, sync, sync_first=False))
            hosts[after].append(_median_us(lambda: call(Xd), calls, sync, sync_first=True))
    for after in (False, True):
        results[after] = (statistics.median(walls[after]), statistics.median(hosts[after]))
    same = bool(cupy.array_equal(cupy.asarray(outs[False]).view(cupy.uint32),
                                 cupy.asarray(outs[True]).view(cupy.uint32)))  # fmt: skip
    (wb, hb), (wa, ha) = results[False], results[True]
    print(f"\n== {shape} {kind} {rows} rows ({packed.num_paths:,} paths, "
          f"{packed.margin['roots'].shape[0]:,} trees, {packed.num_groups} groups; "
          f"switches: {which})")  # fmt: skip
    print(f"  wall us/call  before {wb:9.0f}  after {wa:9.0f}  ({wb / wa:.2f}x)")
    print(f"  host us/call  before {hb:9.0f}  after {ha:9.0f}  ({hb / ha:.2f}x)")
    print(f"  same bits before/after: {same}")
    # parts
    switches(True)
    nocheck = TreeExplainer(booster, backend="cuda")
    values_only = nocheck.shap_interaction_values if inter else nocheck.shap_values
    values_only(Xd, check_additivity=False)
    raw = cupy.asarray(model_matrix(Xd, packed))
    # the kernels' layout (n, G, F+1[, F+1]), not the explainer's (shap's) squeezed one
    values = explain_rows(packed, Xd, inter, backend="cuda", check=False)
    model = packed.margin
    part = {"values alone (check off)": lambda: values_only(Xd, check_additivity=False)}
    part.update(_kernel_parts(packed, Xd, inter))
    margins = {}
    for mode in ("rows", "block"):
        traversal.MODE = mode
        margins[mode] = predict_margin(model, raw)
        part[f"margin, {mode}"] = lambda: predict_margin(model, raw)
    traversal.MODE = "auto"
    cpu_margin = predict_margin(model, cupy.asnumpy(raw))
    margin = margins["block"]
    part["margin + check, one kernel"] = lambda: additivity.check_margin(values, model, raw)

    def check_before():
        additivity.GPU_KERNEL = False
        additivity.check_additivity(values, margin)
        additivity.GPU_KERNEL = True

    part["check, CuPy reductions (before)"] = check_before
    part["check, one kernel (after)"] = lambda: additivity.check_additivity(values, margin)
    for label, fn in part.items():
        mode = label.split(", ")[-1] if label.startswith("margin, ") else "auto"
        traversal.MODE = mode if mode in ("rows", "block") else "auto"
        fn()
        print(f"  part {label:34s} {_events_us(fn, calls):9.1f} us (GPU stream)")
    traversal.MODE = "auto"
    # the host's own time: the call returns before its kernels end (check off, CuPy rows)
    host_only = _median_us(lambda: values_only(Xd, check_additivity=False), calls, sync, True)
    print(f"  host, values alone (check off, GPU synchronized before, not after) {host_only:9.1f}"
          " us")  # fmt: skip
    cpu_bits = cpu_margin.view(np.uint64)
    bits = [bool(np.array_equal(cupy.asnumpy(margins[m]).view(np.uint64), cpu_bits))
            for m in ("rows", "block")]  # fmt: skip
    print(f"  margin bits == CPU margin: rows {bits[0]}, block {bits[1]}")


def _kernel_parts(packed, Xd, inter: bool) -> dict:
    """Each kernel of a batched (not one-launch) call alone, on kept arguments (GPU stream
    time: what the GPU spends, whatever the host does)."""
    import cupy

    from distshap.kernels.cuda import args, launch
    from distshap.kernels.cuda.fallback import launch_fallback
    from distshap.kernels.cuda.interaction_quadrature import launch_interaction_quadrature
    from distshap.kernels.cuda.model import device_model, interaction_plan
    from distshap.kernels.cuda.quadrature import launch_quadrature
    from distshap.kernels.cuda.tables import launch_tables
    from distshap.plan.routes import small_fits

    if small_fits(packed, inter):
        return {}
    model = device_model(packed)
    plan = interaction_plan(packed, model) if inter else model.shap
    X = launch.device_rows(Xd, packed.num_features)
    n = int(X.shape[0])
    F1 = packed.num_features + 1
    out, out2, group_size, bias_offset = launch.new_output(packed, n, inter)
    acc = args.view(cupy.zeros(out2.shape, np.int64))
    scale = 2.0 ** (model.interaction_shift if inter else model.shap_shift)
    s = args.current_stream()
    parts = {
        "acc zeros (CuPy, as before)": lambda: cupy.zeros(out2.shape, np.int64),
        f"kernel tables ({plan.n_table_bins:,} bins)": lambda: launch_tables(
            model, plan, X, acc, scale, F1, s
        ),
        f"kernel quadrature ({len(plan.quadrature)} launches)": lambda: (
            launch_interaction_quadrature if inter else launch_quadrature
        )(model, plan, X, acc, scale, F1, s),
        f"kernel fallback ({model.n_oversize} paths)": lambda: launch_fallback(
            model, X, acc, scale, F1, s, inter
        ),
        "kernel finish": lambda: finish(),
    }

    def finish():
        launch.launch_finish(launch.finish_kernel, acc, out2, 1.0 / scale, model.expected_value,
                             group_size, bias_offset, s)  # fmt: skip

    return parts


def launch_micro(repeats: int = 2000) -> None:
    """Host microseconds of one launch of a trivial kernel (module docstring)."""
    import cupy
    from numba import cuda

    from distshap.kernels.cuda import args

    @cuda.jit(cache=False)
    def kernel(a, b, c, d, x):
        i = cuda.grid(1)
        if i < a.shape[0]:
            a[i] += b[i] + c[i] + d[i] + x

    arrays = [cupy.zeros(256, np.float64) for _ in range(4)]
    made_once = [cuda.as_cuda_array(a, sync=False) for a in arrays]
    s = args.current_stream()
    variants = {
        "CuPy arrays": lambda: arrays,
        "device arrays made once": lambda: made_once,
        "views made each launch": lambda: [cuda.as_cuda_array(a, sync=False) for a in arrays],
    }
    print("\n== one launch, 4 arrays + 1 scalar: host us a launch")
    import warnings

    warnings.filterwarnings("ignore", message=".*under-utilization.*")
    for label, get in variants.items():
        for kept in (False, True):
            config = kernel[1, 256, s]

            def one(config=config, kept=kept, get=get):
                (config if kept else kernel[1, 256, s])(*get(), 1.0)

            for _ in range(20):
                one()
            cupy.cuda.Device().synchronize()
            t0 = time.perf_counter()
            for _ in range(repeats):
                one()
            host = 1e6 * (time.perf_counter() - t0) / repeats
            cupy.cuda.Device().synchronize()
            which = "configuration kept" if kept else "configured each launch"
            print(f"  {label:26s} {which:24s} {host:7.1f} us")
    t0 = time.perf_counter()
    for _ in range(repeats):
        args.stream_key(args.current_stream())
    kept = 1e6 * (time.perf_counter() - t0) / repeats
    from distshap.kernels.cuda.device import stream

    t0 = time.perf_counter()
    for _ in range(repeats):
        stream()
    fresh = 1e6 * (time.perf_counter() - t0) / repeats
    print(f"  Numba stream: made each call {fresh:.1f} us, kept {kept:.1f} us")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="cal_housing-med:interactions:200")
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--compare", action="store_true", help="before / after, no profile")
    parser.add_argument("--launch-micro", action="store_true", help="one launch's host cost")
    parser.add_argument("--switches", default="all", choices=("all", "keep", "tables"),
                        help="--compare: all host-cost switches, or launch.KEEP alone")  # fmt: skip
    args = parser.parse_args(argv)
    if args.launch_micro:
        launch_micro()
    for case in args.cases.split(","):
        shape, kind, rows = case.split(":")
        if args.compare:
            compare_case(shape, kind, int(rows), args.calls, args.switches)
        else:
            profile_case(shape, kind, int(rows), args.calls, args.top)


if __name__ == "__main__":
    main()
