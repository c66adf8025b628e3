"""The fixed cost of one explanation through a Dask client, against the same call in-process.

On a local cluster with one worker (a CPU ``LocalCluster``: one process, one thread; with
``--device gpu`` one GPU worker from :func:`distshap.start_cluster`), after a warm-up, the
median milliseconds of ``--calls`` calls of:

* ``round trip``: ``client.submit(f).result()`` of a function returning 1 (Dask's own floor);
* ``dask array``: ``(X + 1).compute()`` of a one-chunk Dask array of the same rows (Dask's floor
  for computing an array: the graph, its optimisation on the scheduler, the final task);
* ``in-process``: ``explainer.shap_values(X)`` on in-memory rows in this process (NumPy rows
  on the CPU; CuPy rows on the GPU, synchronised);
* ``dask``: ``explainer.shap_values(da.from_array(X, chunks=-1)).compute()`` (one chunk;
  ``--chunk-kinds`` ``numpy`` and, on a GPU worker, ``cupy``: the chunk as a CuPy array);
* ``build``: ``explainer.shap_values(dask_X)`` alone (the client's graph construction);
* ``tasks``: tasks the worker ran a ``dask`` call (each a hand-over by the scheduler, which
  batches its messages to a worker at most every 5 ms), a count that a busy machine does not
  blur.

for each ``--rows`` count. The explainer is the public one, additivity check on, XGBoost's
layout. ``dask - in-process`` is the fixed cost per call that the issue is about. With
``--profile ROWS`` the client side of ``--calls`` Dask calls of ``ROWS`` rows is profiled
(cProfile, the ``--top`` functions by cumulative time).

Run from the repository root; a ``PYTHONPATH`` naming another checkout measures that one's
``distshap`` (the before of a before/after)::

    python3 benchmarks/dask_overhead.py                             # CPU worker
    python3 benchmarks/dask_overhead.py --device gpu --chunk-kinds numpy,cupy
    PYTHONPATH=/path/to/other/checkout python3 benchmarks/dask_overhead.py
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # after PYTHONPATH: another checkout's distshap wins
    sys.path.append(str(ROOT))

from benchmarks import shapes  # noqa: E402

__all__ = ["main", "median_ms", "tasks_per_call"]


def median_ms(fn, calls: int, warm: int = 3, sync=None) -> float:
    """Median milliseconds of ``calls`` calls of ``fn`` after ``warm`` unmeasured ones."""
    for _ in range(warm):
        fn()
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        fn()
        if sync is not None:
            sync()
        times.append(time.perf_counter() - started)
    return 1e3 * statistics.median(times)


def _one() -> int:
    return 1


def tasks_per_call(client, call, calls: int = 5) -> float:
    """Tasks the workers ran a call (each one a scheduler-to-worker hand-over), on average."""
    from distributed import get_task_stream

    call()
    with get_task_stream(client) as stream:
        for _ in range(calls):
            call()
    return len(stream.data) / calls


def _client(gpu: bool):
    from distshap.cluster import start_cluster

    if gpu:
        return start_cluster(n_workers=1, gpus=True, dashboard_address=":0")
    return start_cluster(
        n_workers=1,
        gpus=False,
        threads_per_worker=1,
        dashboard_address=":0",
        env={"NUMBA_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"},
    )


def _profile(call, calls: int, top: int) -> str:
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        call()
    profiler.disable()
    stats = pstats.Stats(profiler)
    entries = sorted(stats.stats.items(), key=lambda kv: -kv[1][3])[:top]
    lines = [f"{'cum ms/call':>12} {'own ms/call':>12} {'calls/call':>10}  function"]
    for (path, line, func), (_, ncalls, tottime, cumtime, _) in entries:
        where = "/".join(path.split("/")[-2:])
        lines.append(
            f"{1e3 * cumtime / calls:12.3f} {1e3 * tottime / calls:12.3f} "
            f"{ncalls / calls:10.1f}  {func} ({where}:{line})"
        )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> dict:
    """Every timing of the module docstring; returns them as a dict (printed as a table)."""
    import dask.array as da

    import distshap
    from distshap import TreeExplainer, kernels

    gpu = args.device == "gpu" or (args.device == "auto" and kernels.cuda_available())
    name, size = args.shape.rsplit("-", 1)
    booster = shapes.train_model(name, size)
    rows = [int(r) for r in args.rows.split(",")]
    X, _ = shapes.make_data(name, max(rows), seed=1)
    X = np.ascontiguousarray(X, dtype=np.float32)
    backend = "cuda" if gpu else "cpu"
    kinds = [k for k in args.chunk_kinds.split(",") if gpu or k == "numpy"]
    sync = None
    if gpu:
        import cupy

        def sync():
            cupy.cuda.Device().synchronize()

    report = {"shape": args.shape, "device": "gpu" if gpu else "cpu", "calls": args.calls,
              "distshap": str(Path(distshap.__file__).parent), "cases": []}  # fmt: skip
    with _client(gpu) as client:
        explainer = TreeExplainer(booster, backend=backend, client=client, layout="xgboost")
        report["round_trip_ms"] = median_ms(
            lambda: client.submit(_one, pure=False).result(), args.calls
        )
        print(f"round trip {report['round_trip_ms']:.2f} ms", flush=True)
        for n in rows:
            for kind in kinds:
                part = X[:n] if kind == "numpy" else cupy.asarray(X[:n])
                dX = da.from_array(part, chunks=(n, -1), asarray=False)
                case = {"rows": n, "chunks": kind}
                case["in_process_ms"] = median_ms(
                    lambda p=part: explainer.shap_values(p), args.calls, sync=sync
                )
                case["dask_array_ms"] = median_ms(lambda d=dX: (d + 1).compute(), args.calls)
                case["build_ms"] = median_ms(lambda d=dX: explainer.shap_values(d), args.calls)
                case["dask_ms"] = median_ms(
                    lambda d=dX: explainer.shap_values(d).compute(), args.calls
                )
                case["fixed_ms"] = case["dask_ms"] - case["in_process_ms"]
                case["tasks"] = tasks_per_call(
                    client, lambda d=dX: explainer.shap_values(d).compute()
                )
                report["cases"].append(case)
                print(
                    f"{n:>6} rows {kind:>5}: in-process {case['in_process_ms']:7.2f} ms, "
                    f"dask {case['dask_ms']:7.2f} ms (build {case['build_ms']:.2f}), "
                    f"fixed {case['fixed_ms']:7.2f} ms, {case['tasks']:.0f} tasks; "
                    f"dask array {case['dask_array_ms']:.2f}",
                    flush=True,
                )
        if args.profile:
            dX = da.from_array(X[: args.profile], chunks=(args.profile, -1))
            report["profile"] = _profile(
                lambda: explainer.shap_values(dX).compute(), args.calls, args.top
            )
            print(f"\nclient side, {args.profile} rows:\n{report['profile']}")
    return report


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", choices=["auto", "gpu", "cpu"], default="auto")
    parser.add_argument("--shape", default="cal_housing-small", help="benchmarks.shapes shape")
    parser.add_argument("--rows", default="1,100,10000", help="row counts (default 1,100,10000)")
    parser.add_argument("--chunk-kinds", default="numpy,cupy", help="numpy and/or cupy (GPU)")
    parser.add_argument("--calls", type=int, default=30, help="timed calls a case (default 30)")
    parser.add_argument("--profile", type=int, default=0, help="profile calls of this many rows")
    parser.add_argument("--top", type=int, default=25, help="functions shown by --profile")
    parser.add_argument("--out", type=Path, help="write the numbers as JSON here")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = _parse(argv)
    report = run(args)
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
