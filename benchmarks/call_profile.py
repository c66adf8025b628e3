"""Where one public GPU call's time goes: wall time, host time, and the host's profile.

For each ``--cases`` entry ``shape:kind:rows`` (kind ``shap`` or ``interactions``), on CuPy
rows through :class:`distshap.TreeExplainer` (the additivity check on, as the throughput
benchmark runs it), after a warm-up:

* ``wall``: median microseconds a call, the GPU synchronized before the clock stops;
* ``host``: median microseconds until the call returns, the GPU synchronized before it starts
  (what the host spends; the rest of ``wall`` is the GPU's tail);
* the ``--top`` functions by own host time over ``--calls`` calls (cProfile), microseconds a
  call, and how often each ran a call (kernel launches show as Numba dispatcher calls).

Needs a GPU::

    DISTSHAP_BENCH_DEVICE=cuda python3 -m benchmarks.call_profile \
        --cases cal_housing-med:interactions:200,cal_housing-small:shap:10000
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import time

import numpy as np

from benchmarks.shapes import make_data, train_model

__all__ = ["profile_case"]


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


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="cal_housing-med:interactions:200")
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args(argv)
    for case in args.cases.split(","):
        shape, kind, rows = case.split(":")
        profile_case(shape, kind, int(rows), args.calls, args.top)


if __name__ == "__main__":
    main()
