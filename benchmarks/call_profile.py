"""Where one public GPU call's time goes: wall time, host time, and the host's profile.

For each ``--cases`` entry ``shape:kind:rows`` (kind ``shap`` or ``interactions``), on CuPy
rows (NumPy rows with ``--host-rows``) through :class:`distshap.TreeExplainer` (the additivity
check on, as the throughput benchmark runs it), after a warm-up:

* ``wall``: median microseconds a call, the GPU synchronized before the clock stops;
* ``host``: median microseconds until the call returns, the GPU synchronized before it starts
  (what the host spends; the rest of ``wall`` is the GPU's tail);
* ``kernels alone`` (the kernel route without the check: ``distshap.kernels.cuda`` on the
  prepared rows): ``host``, median microseconds until the call returns, the GPU synchronized
  before it starts and not waited for (what the launches cost the host), and ``GPU``, the
  GPU's microseconds a call with ``--calls`` calls queued behind a sleeping kernel (CUDA
  events; the launches' host time hidden), so ``host`` above ``GPU`` says the call is bound
  by its launches, below it by its kernels;
* the ``--top`` functions by own host time over ``--calls`` calls (cProfile), microseconds a
  call, and how often each ran a call (kernel launches show as Numba dispatcher calls).

``--launch-micro``: host microseconds of one launch of a trivial kernel with four array
arguments: CuPy arrays, Numba device arrays made once, read-only hints of them made once
(``cuda.In``), views made at each launch (``cuda.as_cuda_array``), and each with the
configuration built at each launch / kept.

Before / after: the starting tree on ``PYTHONPATH`` runs this script the same way
(``cd /tmp/b && PYTHONPATH=/tmp/b python3 /path/to/benchmarks/call_profile.py ...``); the
script uses only what both trees have.

Needs a GPU::

    DISTSHAP_BENCH_DEVICE=cuda python3 -m benchmarks.call_profile \
        --cases cal_housing-med:interactions:200,cal_housing-small:shap:10000
    DISTSHAP_BENCH_DEVICE=cuda python3 -m benchmarks.call_profile --launch-micro
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import time

import numpy as np

from benchmarks.shapes import make_data, train_model

__all__ = ["kernel_split", "launch_micro", "profile_case", "sleep_kernel"]


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


def profile_case(
    shape: str, kind: str, rows: int, calls: int, top: int, host_rows: bool = False
) -> None:
    """Prints the wall and host time of one case and the host's profile (module docstring);
    ``host_rows``: the rows given as a NumPy array (the values come back to host memory), as
    a server's batch or most users' calls give them."""
    import cupy

    from distshap import TreeExplainer

    name, size = shape.rsplit("-", 1)
    booster = train_model(name, size)
    X, _ = make_data(name, rows, seed=1)
    Xd = cupy.asarray(np.ascontiguousarray(X, np.float32))
    explainer = TreeExplainer(booster, layout="xgboost", backend="cuda")
    call = explainer.shap_interaction_values if kind == "interactions" else explainer.shap_values

    def sync():
        cupy.cuda.Device().synchronize()

    rows_in = np.ascontiguousarray(X, np.float32) if host_rows else Xd

    def fn():
        call(rows_in)

    for _ in range(3):
        fn()
    sync()
    wall = _median_us(fn, calls, sync, sync_first=False)
    host = _median_us(fn, calls, sync, sync_first=True)
    where = "NumPy" if host_rows else "CuPy"
    print(f"\n== {shape} {kind} {rows} rows ({where}): wall {wall:.0f} us a call, "
          f"host {host:.0f} us, {rows / wall * 1e6:,.0f} rows/s")  # fmt: skip
    issue, gpu, hidden = kernel_split(explainer.packed, Xd, kind, calls)
    print(
        f"   kernels alone (no check): host {issue:.0f} us a call, GPU {gpu:.0f} us a call"
        + ("" if hidden else " (the queue ran dry: GPU time includes host gaps)")
    )
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


def sleep_kernel():
    from numba import cuda

    @cuda.jit(cache=False)
    def sleep(ns):  # one thread holds its stream for about ns nanoseconds
        t = 0
        while t < ns:
            cuda.nanosleep(1000)
            t += 1000

    return sleep


def kernel_split(packed, Xd, kind: str, calls: int) -> tuple[float, float, bool]:
    """``(host, gpu, hidden)`` microseconds a call of the kernel route alone (module
    docstring); ``hidden``: the queued calls were all issued before the sleeping kernel ended
    (else ``gpu`` includes the host's gaps)."""
    import cupy
    from numba import cuda

    from distshap.inputs import prepare_rows
    from distshap.kernels import cuda as kc

    fn = kc.interaction_values if kind == "interactions" else kc.shap_values
    rows = prepare_rows(Xd, packed)

    def sync():
        cupy.cuda.Device().synchronize()

    for _ in range(3):
        fn(packed, rows)
    host = _median_us(lambda: fn(packed, rows), calls, sync, sync_first=True)
    sleep = sleep_kernel()
    ptr = cupy.cuda.get_current_stream().ptr
    s = cuda.external_stream(ptr) if ptr else cuda.default_stream()
    sleep[1, 1, s](1000)  # compiled before the measurement
    sync()
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    sleep[1, 1, s](int(max(50_000, 4 * calls * host) * 1000))  # ~4x the calls' host time
    start.record()
    for _ in range(calls):
        fn(packed, rows)
    end.record()
    hidden = not start.done  # the sleep still running: every call was queued behind it
    end.synchronize()
    gpu = 1000.0 * cupy.cuda.get_elapsed_time(start, end) / calls
    return host, gpu, hidden


def launch_micro(repeats: int = 2000) -> None:
    """Host microseconds of one launch of a trivial kernel (module docstring)."""
    import cupy
    from numba import cuda

    from distshap.kernels.cuda.runtime import args

    @cuda.jit(cache=False)
    def kernel(a, b, c, d, x):
        i = cuda.grid(1)
        if i < a.shape[0]:
            a[i] += b[i] + c[i] + d[i] + x

    arrays = [cupy.zeros(256, np.float64) for _ in range(4)]
    made_once = [cuda.as_cuda_array(a, sync=False) for a in arrays]
    hints = [cuda.In(a) for a in made_once]
    s = args.current_stream()
    variants = {
        "CuPy arrays": lambda: arrays,
        "device arrays made once": lambda: made_once,
        "read-only hints made once": lambda: hints,
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
    from distshap.kernels.cuda.runtime.device import stream

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
    parser.add_argument("--launch-micro", action="store_true", help="one launch's host cost")
    parser.add_argument(
        "--host-rows", action="store_true", help="rows as a NumPy array, values back in host memory"
    )
    args = parser.parse_args(argv)
    if args.launch_micro:
        launch_micro()
    for case in args.cases.split(","):
        shape, kind, rows = case.split(":")
        profile_case(shape, kind, int(rows), args.calls, args.top, args.host_rows)


if __name__ == "__main__":
    main()
