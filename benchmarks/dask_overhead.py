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
* ``same bits``: the ``dask`` call's values equal the ``in-process`` call's, bit for bit;
* ``tasks``: tasks the worker ran a ``dask`` call (each a hand-over by the scheduler, which
  batches its messages to a worker for the stream's interval), a count that a busy machine
  does not blur;
* ``over array`` (``--paired``): the median of ``dask`` minus ``dask array`` over ``--calls``
  pairs of the two calls made one right after the other, so that both see the same load: what
  distshap adds to Dask's floor for an array, which a shared machine blurs less than the two
  medians apart.

for each ``--rows`` count, after a line with the batching interval of each message stream of
the cluster (``--batch-interval``: :func:`distshap.start_cluster`'s argument, ``none`` for
distributed's own: 10 ms client to scheduler, 5 ms scheduler to worker, 2 ms worker to
scheduler and scheduler to client). The explainer is the public one, additivity check on,
in ``--layout`` (XGBoost's by default). ``dask - in-process`` is the fixed cost per call
(``min``: the same of the fastest calls, which a loaded machine blurs less than medians).
``--interleave R`` adds, per case, round trips and ``dask`` calls timed in ``R`` rounds that
switch the streams between distributed's intervals and the cluster's own every 5 calls, so that
both settings see the same load (medians and first quartiles). With
``--profile ROWS`` the client side of ``--calls`` Dask calls of ``ROWS`` rows is profiled
(cProfile, the ``--top`` functions by cumulative time).

Run from the repository root; a ``PYTHONPATH`` naming another checkout measures that one's
``distshap`` (the before of a before/after)::

    python3 benchmarks/dask_overhead.py                             # CPU worker
    python3 benchmarks/dask_overhead.py --device gpu --chunk-kinds numpy,cupy
    python3 benchmarks/dask_overhead.py --batch-interval none       # distributed's batching
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

__all__ = [
    "interleaved",
    "main",
    "median_ms",
    "stream_intervals",
    "tasks_per_call",
    "timings_ms",
]


def timings_ms(fn, calls: int, warm: int = 3, sync=None) -> list[float]:
    """Milliseconds of each of ``calls`` calls of ``fn`` after ``warm`` unmeasured ones."""
    for _ in range(warm):
        fn()
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        fn()
        if sync is not None:
            sync()
        times.append(1e3 * (time.perf_counter() - started))
    return times


def median_ms(fn, calls: int, warm: int = 3, sync=None) -> float:
    """Median milliseconds of ``calls`` calls of ``fn`` after ``warm`` unmeasured ones."""
    return statistics.median(timings_ms(fn, calls, warm, sync))


def _host(values) -> np.ndarray:
    return values.get() if hasattr(values, "get") else np.asarray(values)


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


def _client(gpu: bool, batch_interval: str | None):
    from distshap.cluster import start_cluster

    # only when asked: a checkout whose start_cluster has no such argument runs as it is
    extra = {} if batch_interval is None else {"batch_interval": _seconds(batch_interval)}
    if gpu:
        return start_cluster(n_workers=1, gpus=True, dashboard_address=":0", **extra)
    return start_cluster(
        n_workers=1,
        gpus=False,
        threads_per_worker=1,
        dashboard_address=":0",
        env={"NUMBA_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"},
        **extra,
    )


def _seconds(value: str) -> float | None:
    return None if value == "none" else float(value)


def stream_intervals(client) -> dict:
    """Milliseconds each message stream batches for: client, scheduler and worker side."""

    def scheduler_side(dask_scheduler):
        to_workers = [s.interval for s in dask_scheduler.stream_comms.values()]
        to_clients = [s.interval for s in dask_scheduler.client_comms.values()]
        return sorted(set(to_workers)), sorted(set(to_clients))

    to_workers, to_clients = client.run_on_scheduler(scheduler_side)
    workers = client.run(lambda dask_worker: dask_worker.batched_stream.interval)
    return {
        "client_to_scheduler": 1e3 * client.scheduler_comm.interval,
        "scheduler_to_workers": [1e3 * v for v in to_workers],
        "scheduler_to_clients": [1e3 * v for v in to_clients],
        "workers_to_scheduler": sorted({1e3 * v for v in workers.values()}),
    }


def _set_intervals(client, seconds: tuple) -> None:
    """Set the streams' intervals (client, scheduler to workers, to clients, workers) now."""
    to_client, to_workers, to_clients, from_workers = seconds
    client.scheduler_comm.interval = to_client

    def scheduler_side(dask_scheduler):
        for stream in dask_scheduler.stream_comms.values():
            stream.interval = to_workers
        for stream in dask_scheduler.client_comms.values():
            stream.interval = to_clients

    client.run_on_scheduler(scheduler_side)
    client.run(lambda dask_worker: setattr(dask_worker.batched_stream, "interval", from_workers))


def interleaved(client, calls: dict, rounds: int, block: int = 5) -> dict:
    """``calls`` (name -> function) timed under distributed's intervals and under the cluster's
    own (``start_cluster``'s), switched every ``block`` calls: both see the same load.

    Returns ``{setting: {name: [ms, ...]}}``, settings ``"distributed"`` and ``"cluster"``.
    """
    own = stream_intervals(client)
    settings = {
        "distributed": (0.010, 0.005, 0.002, 0.002),
        "cluster": (
            own["client_to_scheduler"] / 1e3,
            own["scheduler_to_workers"][0] / 1e3,
            own["scheduler_to_clients"][0] / 1e3,
            own["workers_to_scheduler"][0] / 1e3,
        ),
    }
    times: dict = {setting: {name: [] for name in calls} for setting in settings}
    try:
        for _ in range(rounds):
            for setting, seconds in settings.items():
                _set_intervals(client, seconds)
                for name, call in calls.items():
                    times[setting][name] += timings_ms(call, block, warm=1)
    finally:
        _set_intervals(client, settings["cluster"])
    return times


def _interleaved_lines(label: str, times: dict) -> list[str]:
    lines = []
    for setting, by_call in times.items():
        parts = []
        for name, values in by_call.items():
            ordered = sorted(values)
            parts.append(
                f"{name} {statistics.median(ordered):.2f} (p25 {ordered[len(ordered) // 4]:.2f})"
            )
        lines.append(f"{label}, {setting:>11} intervals: " + ", ".join(parts) + " ms")
    return lines


def _paired_ms(call, floor, calls: int, warm: int = 3) -> float:
    """Median milliseconds of ``call`` minus ``floor`` over ``calls`` pairs made back to back,
    every other pair in the other order (whatever going first or second costs cancels)."""
    for _ in range(warm):
        call()
        floor()
    differences = []
    for i in range(calls):
        first, second = (call, floor) if i % 2 == 0 else (floor, call)
        started = time.perf_counter()
        first()
        middle = time.perf_counter()
        second()
        ms = 1e3 * ((middle - started) - (time.perf_counter() - middle))
        differences.append(ms if i % 2 == 0 else -ms)
    return statistics.median(differences)


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
    with _client(gpu, args.batch_interval) as client:
        report["intervals_ms"] = stream_intervals(client)
        print(f"stream batching intervals (ms): {report['intervals_ms']}", flush=True)
        explainer = TreeExplainer(booster, backend=backend, client=client, layout=args.layout)
        trips = timings_ms(lambda: client.submit(_one, pure=False).result(), args.calls)
        report["round_trip_ms"], report["round_trip_min_ms"] = statistics.median(trips), min(trips)
        print(
            f"round trip {report['round_trip_ms']:.2f} ms (min {report['round_trip_min_ms']:.2f})",
            flush=True,
        )
        for n in rows:
            for kind in kinds:
                part = X[:n] if kind == "numpy" else cupy.asarray(X[:n])
                dX = da.from_array(part, chunks=(n, -1), asarray=False)
                case = {"rows": n, "chunks": kind}
                local = timings_ms(lambda p=part: explainer.shap_values(p), args.calls, sync=sync)
                case["in_process_ms"], case["in_process_min_ms"] = (
                    statistics.median(local),
                    min(local),
                )
                case["dask_array_ms"] = median_ms(lambda d=dX: (d + 1).compute(), args.calls)
                case["build_ms"] = median_ms(lambda d=dX: explainer.shap_values(d), args.calls)
                remote = timings_ms(lambda d=dX: explainer.shap_values(d).compute(), args.calls)
                case["dask_ms"], case["dask_min_ms"] = statistics.median(remote), min(remote)
                case["fixed_ms"] = case["dask_ms"] - case["in_process_ms"]
                case["fixed_min_ms"] = case["dask_min_ms"] - case["in_process_min_ms"]
                case["same_bits"] = bool(
                    np.array_equal(
                        _host(explainer.shap_values(dX).compute()),
                        _host(explainer.shap_values(part)),
                    )
                )
                case["tasks"] = tasks_per_call(
                    client, lambda d=dX: explainer.shap_values(d).compute()
                )
                if args.paired:
                    case["over_array_ms"] = _paired_ms(
                        lambda d=dX: explainer.shap_values(d).compute(),
                        lambda d=dX: (d + 1).compute(),
                        args.calls,
                    )
                report["cases"].append(case)
                print(
                    f"{n:>6} rows {kind:>5}: in-process {case['in_process_ms']:7.2f} ms, "
                    f"dask {case['dask_ms']:7.2f} ms (build {case['build_ms']:.2f}), "
                    f"fixed {case['fixed_ms']:7.2f} ms (min {case['fixed_min_ms']:.2f}), "
                    f"{case['tasks']:.0f} tasks; "
                    f"dask array {case['dask_array_ms']:.2f}; same bits {case['same_bits']}",
                    flush=True,
                )
                if args.paired:
                    print(f"{n:>6} rows {kind:>5}: over array {case['over_array_ms']:.2f} ms "
                          f"(median of {args.calls} pairs)", flush=True)  # fmt: skip
                if args.interleave:
                    times = interleaved(
                        client,
                        {
                            "round trip": lambda: client.submit(_one, pure=False).result(),
                            "dask": lambda d=dX: explainer.shap_values(d).compute(),
                        },
                        args.interleave,
                    )
                    case["interleaved_ms"] = times
                    print("\n".join(_interleaved_lines(f"{n:>6} rows {kind:>5}", times)))
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
    parser.add_argument(
        "--batch-interval",
        help="start_cluster(batch_interval=...): seconds, or none for distributed's own "
        "(default: start_cluster's default; left out of the call, so older checkouts run)",
    )
    parser.add_argument(
        "--interleave",
        type=int,
        default=0,
        help="also time round trips and dask calls in this many rounds of 5 calls each under "
        "distributed's intervals and under the cluster's own, alternately (same load)",
    )
    parser.add_argument("--layout", choices=["xgboost", "shap"], default="xgboost",
                        help="the explainer's layout (default xgboost)")  # fmt: skip
    parser.add_argument("--paired", action="store_true",
                        help="also time dask and dask array calls back to back")  # fmt: skip
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
