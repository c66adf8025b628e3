"""Multi-GPU (or multi-worker CPU) scaling of distshap vs ``xgboost.dask`` (paper Figure 5).

For each worker count (1, 2, 4, ... GPUs, or CPU workers when no GPU is visible) a local
cluster is started, the same rows are generated *on the workers* (CuPy chunks on GPUs; one
seed per chunk, the same chunks for every worker count), and both libraries explain them:
``distshap.cluster.explain_dask`` and ``xgboost.dask.predict(..., pred_contribs=True)``, each
with its model scattered once beforehand. Everything is warmed up first (JIT, model upload);
each timing is wall clock around ``persist`` + ``wait`` of the whole result.

Output (``--out``, default ``benchmarks/results/``): ``scaling-<shape>-<device>.json`` with
every number, and ``scaling-<shape>-<device>.png``: rows/s against workers for both libraries
with their ideal (linear) lines. A table is printed at the end.

Examples::

    python benchmarks/scaling.py                                   # every GPU, cal_housing-med
    python benchmarks/scaling.py --workers 1,2,4 --rows 24000000
    python benchmarks/scaling.py --device cpu --workers 1,2 --rows 2000 --repeats 1  # smoke
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python benchmarks/scaling.py`; workers inherit sys.path
    sys.path.insert(0, str(ROOT))

from benchmarks import shapes  # noqa: E402

__all__ = ["main", "run_scaling"]

#: Rows per worker at the largest worker count when --rows is not given: at ~1M rows/s per
#: GPU, about 5 s of kernel time per GPU; CPU kernels run ~1e3 rows/s per thread.
DEFAULT_ROWS_PER_WORKER = {"gpu": 5_000_000, "cpu": 2_000}


def _generate_block(shape_name: str, seed: int, use_cupy: bool, block_info=None):
    """One chunk of synthetic rows, made on the worker that owns it (CuPy when asked)."""
    info = block_info[None]
    start, stop = info["array-location"][0]
    X, _ = shapes.make_data(shape_name, stop - start, seed=seed + info["chunk-location"][0])
    if use_cupy:
        import cupy

        return cupy.asarray(X)
    return X


def _make_rows(shape_name: str, n_cols: int, rows: int, n_chunks: int, seed: int, gpu: bool):
    import dask.array as da

    chunk = math.ceil(rows / n_chunks)
    chunks = tuple(min(chunk, rows - i * chunk) for i in range(n_chunks) if i * chunk < rows)
    if gpu:
        import cupy

        meta = cupy.empty((0, n_cols), dtype=np.float32)
    else:
        meta = np.empty((0, n_cols), dtype=np.float32)
    return da.map_blocks(
        _generate_block,
        shape_name,
        seed,
        gpu,
        chunks=(chunks, (n_cols,)),
        dtype=np.float32,
        meta=meta,
        name=f"scaling-rows-{shape_name}-{rows}-{n_chunks}-{seed}-{int(gpu)}",
    )


def _device_name(gpu: bool) -> str:
    if gpu:
        try:
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
            names = [line.strip() for line in out.stdout.splitlines() if line.strip()]
            if names:
                return f"{len(names)} x {names[0]}"
        except OSError:
            pass
        return "NVIDIA GPU"
    return f"{platform.processor() or platform.machine()} ({os.cpu_count()} cores)"


def _to_host(x):
    return x.get() if hasattr(x, "get") else np.asarray(x)


def _timed_persist(client, make, repeats: int) -> list[float]:
    """Wall seconds of ``persist`` + ``wait`` of ``make()``, ``repeats`` times."""
    from distributed import wait

    seconds = []
    for _ in range(repeats):
        result = make()
        start = time.perf_counter()
        persisted = client.persist(result)
        wait(persisted)
        seconds.append(time.perf_counter() - start)
        del persisted, result
    return seconds


def _one_count(
    n_workers: int,
    gpu: bool,
    packed,
    booster,
    args: argparse.Namespace,
    rows: int,
    n_chunks: int,
) -> dict:
    import xgboost
    import xgboost.dask as xgb_dask
    from distributed import wait

    from distshap.cluster import explain_dask, start_cluster, warm_up

    shape_name = args.shape.split("-")[0]
    backend = "cuda" if gpu else "cpu"
    if gpu:
        client = start_cluster(n_workers=n_workers, gpus=True, dashboard_address=":0")
    else:
        threads = str(args.cpu_threads)
        client = start_cluster(
            n_workers=n_workers,
            gpus=False,
            dashboard_address=":0",
            env={"NUMBA_NUM_THREADS": threads, "OMP_NUM_THREADS": threads},
        )
    with client:
        started = time.perf_counter()
        X = client.persist(
            _make_rows(shape_name, packed.num_features, rows, n_chunks, args.seed, gpu)
        )
        wait(X)
        generate_s = time.perf_counter() - started

        model = xgboost.Booster(model_file=bytearray(booster.save_raw()))
        if gpu:
            model.set_param({"device": "cuda"})
        else:
            model.set_param({"device": "cpu", "nthread": args.cpu_threads})
        model_future = client.scatter(model, hash=False)

        # warm-up: JIT and model upload on every worker, then one small pass of each library
        warm = warm_up(client, packed, backend=backend)
        few = X[: X.chunks[0][0] * min(n_workers, X.numblocks[0])]
        ours_small = explain_dask(packed, few, backend=backend, client=client).compute()
        theirs_small = xgb_dask.predict(client, model_future, few, pred_contribs=True).compute()
        ours_small = _to_host(ours_small)  # (n, G, F+1); XGBoost squeezes G == 1
        theirs_small = _to_host(theirs_small).reshape(ours_small.shape)
        max_abs_diff = float(np.max(np.abs(ours_small.astype(np.float64) - theirs_small)))

        ours = _timed_persist(
            client,
            lambda: explain_dask(packed, X, backend=backend, client=client),
            args.repeats,
        )
        theirs = []
        if not args.no_xgboost:
            theirs = _timed_persist(
                client,
                lambda: xgb_dask.predict(client, model_future, X, pred_contribs=True),
                args.xgb_repeats,
            )
    record = {
        "workers": n_workers,
        "rows": rows,
        "chunks": n_chunks,
        "generate_seconds": generate_s,
        "warm_up_seconds": warm,
        "distshap_seconds": ours,
        "distshap_rows_per_s": rows / min(ours),
        "xgboost_seconds": theirs,
        "xgboost_rows_per_s": rows / min(theirs) if theirs else None,
        "max_abs_diff_vs_xgboost": max_abs_diff,
    }
    print(
        f"  {n_workers} worker(s): distshap {record['distshap_rows_per_s']:,.0f} rows/s"
        + (
            f", xgboost.dask {record['xgboost_rows_per_s']:,.0f} rows/s"
            if theirs
            else ", xgboost skipped"
        )
        + f"  (max |diff| {max_abs_diff:.2e})",
        flush=True,
    )
    return record


def _efficiencies(records: list[dict], key: str) -> None:
    base = records[0]
    if base[key] is None:
        return
    per_worker = base[key] / base["workers"]
    for rec in records:
        if rec[key] is not None:
            rec[key.replace("rows_per_s", "efficiency")] = rec[key] / (per_worker * rec["workers"])


def predict_rows_per_s(report: dict, workers: int) -> float:
    """Throughput predicted for ``workers`` from the measured counts (a per-GPU cost model).

    Each measured count ``n`` explained the same ``R`` rows in ``t(n)`` seconds; the model is
    ``t(n) = a / n + b``: ``a`` the single-worker kernel time, ``b`` the part that does not
    shrink with more workers (scheduling, the last chunk's tail, gathering), fitted by least
    squares. Used to predict counts that could not be run (8 GPUs when no 8-GPU machine is
    lent); at least two measured counts are needed.
    """
    recs = [r for r in report["results"] if r["distshap_rows_per_s"]]
    if len(recs) < 2:
        raise ValueError("the cost model needs measurements at two or more worker counts")
    n = np.array([r["workers"] for r in recs], dtype=float)
    t = np.array([r["rows"] / r["distshap_rows_per_s"] for r in recs])
    (a, b), *_ = np.linalg.lstsq(np.column_stack([1 / n, np.ones_like(n)]), t, rcond=None)
    return recs[0]["rows"] / (a / workers + max(b, 0.0))


def _plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = report["results"]
    workers = [r["workers"] for r in records]
    fig, ax = plt.subplots(figsize=(5.5, 4.0))
    series = [("distshap", "distshap_rows_per_s", "C0", "o")]
    if records[0]["xgboost_rows_per_s"] is not None:
        series.append(("xgboost.dask", "xgboost_rows_per_s", "C1", "s"))
    for label, key, colour, marker in series:
        rates = [r[key] for r in records]
        ax.plot(workers, rates, marker=marker, color=colour, label=label)
        ideal = [rates[0] / workers[0] * w for w in workers]
        ax.plot(workers, ideal, linestyle="--", color=colour, alpha=0.5, label=f"{label} ideal")
    unit = "GPUs" if report["gpu"] else "CPU workers"
    ax.set_xscale("log", base=2)
    ax.set_xticks(workers, [str(w) for w in workers])
    ax.set_xlabel(unit)
    ax.set_ylabel("rows / s")
    ax.set_title(f"SHAP values, {report['shape']}, {report['device']}", fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=150)
    plt.close(fig)


def run_scaling(args: argparse.Namespace) -> dict:
    """Run the benchmark described by parsed command-line ``args``; return the report."""
    from distshap import TreeExplainer
    from distshap.cluster import count_gpus

    counts = sorted({int(w) for w in args.workers.split(",")})
    if not counts or counts[0] < 1:
        raise ValueError(f"--workers {args.workers!r}: give positive counts, e.g. 1,2,4")
    visible = count_gpus()
    gpu = {"auto": visible > 0, "gpu": True, "cpu": False}[args.device]
    if gpu:
        if visible == 0:
            raise ValueError("--device gpu but no GPU is visible: use --device cpu")
        too_many = [c for c in counts if c > visible]
        if too_many:
            print(f"skipping worker counts {too_many}: only {visible} GPU(s) visible")
            counts = [c for c in counts if c <= visible]
    name, size = args.shape.split("-")
    booster = shapes.train_model(name, size, verbose=True)
    start = time.perf_counter()
    # the packed model users get (encoding, and the margin arrays of the per-chunk check)
    packed = TreeExplainer(booster).packed
    preprocess_s = time.perf_counter() - start

    max_workers = max(counts)
    kind = "gpu" if gpu else "cpu"
    rows = args.rows or DEFAULT_ROWS_PER_WORKER[kind] * max_workers
    n_chunks = args.chunks_per_worker * max_workers  # the same chunks for every count
    print(
        f"{args.shape}: {packed.num_paths} paths in {packed.num_bins} bins "
        f"(preprocessing {preprocess_s:.2f} s); {rows:,} rows in {n_chunks} chunks; "
        f"{'GPUs' if gpu else 'CPU workers'} {counts}",
        flush=True,
    )
    records = [_one_count(n, gpu, packed, booster, args, rows, n_chunks) for n in counts]
    _efficiencies(records, "distshap_rows_per_s")
    _efficiencies(records, "xgboost_rows_per_s")
    return {
        "benchmark": "scaling",
        "shape": args.shape,
        "gpu": gpu,
        "device": _device_name(gpu),
        "backend": "cuda" if gpu else "cpu",
        "cpu_threads_per_worker": None if gpu else args.cpu_threads,
        "num_paths": packed.num_paths,
        "num_bins": packed.num_bins,
        "preprocess_seconds": preprocess_s,
        "packing": {k: v for k, v in packed.stats.items() if isinstance(v, (int, float, str))},
        "repeats": args.repeats,
        "xgb_repeats": args.xgb_repeats,
        "timing": "best of repeats; wall clock around persist + wait of the whole result",
        "results": records,
    }


def _table(report: dict) -> str:
    unit = "GPUs" if report["gpu"] else "workers"
    lines = [
        f"{unit:>7}  {'distshap rows/s':>16}  {'eff':>5}  {'xgboost rows/s':>15}  {'eff':>5}  "
        f"{'speed-up':>8}"
    ]
    for r in report["results"]:
        theirs = r["xgboost_rows_per_s"]
        lines.append(
            f"{r['workers']:>7}  {r['distshap_rows_per_s']:>16,.0f}  "
            f"{r.get('distshap_efficiency', float('nan')):>5.0%}  "
            + (
                f"{theirs:>15,.0f}  {r.get('xgboost_efficiency', float('nan')):>5.0%}  "
                f"{r['distshap_rows_per_s'] / theirs:>7.2f}x"
                if theirs
                else f"{'-':>15}  {'-':>5}  {'-':>8}"
            )
        )
    counts = [r["workers"] for r in report["results"]]
    if len(counts) >= 2:
        target = 2 * max(counts)
        predicted = predict_rows_per_s(report, target)
        per_one = report["results"][0]["distshap_rows_per_s"] / counts[0]
        lines.append(
            f"{target:>7}  {predicted:>16,.0f}  {predicted / (per_one * target):>5.0%}  "
            "(predicted by the t(n) = a/n + b cost model, not measured)"
        )
    return "\n".join(lines)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", default="1,2,4,8", help="worker counts (default 1,2,4,8)")
    parser.add_argument(
        "--rows",
        type=int,
        default=None,
        help="rows explained at every count (default: 5M per GPU / 2k per CPU worker at the "
        "largest count)",
    )
    parser.add_argument("--chunks-per-worker", type=int, default=6)
    parser.add_argument("--device", choices=["auto", "gpu", "cpu"], default="auto")
    parser.add_argument("--shape", default="cal_housing-med", help="benchmarks.shapes shape")
    parser.add_argument("--repeats", type=int, default=3, help="distshap timings per count")
    parser.add_argument("--xgb-repeats", type=int, default=1, help="xgboost timings per count")
    parser.add_argument("--no-xgboost", action="store_true", help="time distshap only")
    parser.add_argument("--cpu-threads", type=int, default=1, help="Numba threads per CPU worker")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args(argv)
    if args.shape.count("-") != 1:
        parser.error(f"--shape {args.shape!r}: use <data set>-<size>, e.g. cal_housing-med")
    return args


def main(argv: list[str] | None = None) -> dict:
    """Command-line entry point; returns the report it wrote."""
    args = _parse(argv)
    report = run_scaling(args)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = f"scaling-{args.shape}-{'gpu' if report['gpu'] else 'cpu'}"
    json_path = args.out / f"{stem}.json"
    json_path.write_text(json.dumps(report, indent=2))
    png_path = args.out / f"{stem}.png"
    _plot(report, png_path)
    print()
    print(_table(report))
    print(f"\nwrote {json_path} and {png_path}")
    return report


if __name__ == "__main__":
    main()
