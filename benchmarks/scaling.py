"""Multi-GPU (or multi-worker CPU) scaling of distshap, with chunks placed evenly and unevenly.

For each worker count (1, 2, 4, ... GPUs, or CPU workers when no GPU is visible) a local
cluster is started and the same rows (one seed per chunk, the same chunks for every count) are
generated *on the workers* (CuPy chunks on GPUs; NumPy with ``--host-chunks``) and persisted
in two placements: balanced (``--chunks`` spread evenly) and each ``--uneven`` spec whose length
is the worker count (``5/3``: 5 chunks on the first worker, 3 on the second). Every
placement is explained with ``explain_dask(..., balance=False)`` (each chunk runs where the
scheduler puts it) and ``balance=True`` (equal row shares per worker, the default). Efficiency
is rows/s over (workers x the single-worker rows/s). The per-chunk digests of every result are
compared: the bits must not depend on the placement, the balancing or the worker count.

The peer is XGBoost ``pred_contribs`` on one device (inside the single worker, on its GPU),
and with ``--xgboost-dask`` also ``xgboost.dask.predict`` at every count. Everything is warmed
up first (JIT, model upload, one small pass); each timing is wall clock around building the
graph (with balancing: the moves it starts) + ``persist`` + ``wait`` of the whole result.

Output (``--out``, default ``benchmarks/results/``): ``scaling-<shape>-<device>.json`` with
every number, and ``scaling-<shape>-<device>.png``: rows/s against workers, balanced and uneven,
balancing on and off, with the ideal line. A table is printed at the end.

Examples::

    python benchmarks/scaling.py --workers 1,2                      # 12M rows, 8 chunks, 5/3
    python benchmarks/scaling.py --workers 1,2,4 --uneven 5/3,3/3/1/1
    python benchmarks/scaling.py --device cpu --workers 1,2 --rows 16000 --repeats 1  # smoke
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

__all__ = ["main", "predict_rows_per_s", "run_scaling"]

#: Rows explained at every count when --rows is not given: 12M on GPUs (8 chunks of 1.5M),
#: far fewer on CPU workers.
DEFAULT_ROWS = {"gpu": 12_000_000, "cpu": 16_000}
#: Rows of the single-device XGBoost peer when --xgb-rows is not given.
DEFAULT_XGB_ROWS = {"gpu": 1_000_000, "cpu": 2_000}


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


def _generate_rows(shape_name: str, n_rows: int, seed: int, use_cupy: bool):
    """One chunk of synthetic rows, made by the worker it is pinned to (CuPy when asked)."""
    X, _ = shapes.make_data(shape_name, n_rows, seed=seed)
    if use_cupy:
        import cupy

        return cupy.asarray(X)
    return X


def _chunk_sizes(rows: int, n_chunks: int) -> tuple[int, ...]:
    chunk = math.ceil(rows / n_chunks)
    return tuple(min(chunk, rows - i * chunk) for i in range(n_chunks) if i * chunk < rows)


def _pinned_rows(client, shape_name: str, n_cols: int, sizes, counts, seed: int, gpu: bool):
    """Rows persisted with ``counts[k]`` consecutive chunks on the k-th worker (sorted).

    Chunk ``i`` is always made from seed ``seed + i``, so every placement and worker count
    explains the same rows in the same chunks. Returns the array and how many chunks each
    worker holds (read back from the scheduler).
    """
    import dask.array as da
    from distributed import wait

    workers = sorted(client.ncores())
    owners = [w for w, c in zip(workers, counts, strict=True) for _ in range(c)]
    futures = [
        client.submit(_generate_rows, shape_name, n, seed + i, gpu, workers=[w],
                      allow_other_workers=False, pure=False)
        for i, (n, w) in enumerate(zip(sizes, owners, strict=True))
    ]  # fmt: skip
    wait(futures)
    if gpu:
        import cupy

        meta = cupy.empty((0, n_cols), dtype=np.float32)
    else:
        meta = np.empty((0, n_cols), dtype=np.float32)
    parts = [
        da.from_delayed(f, shape=(n, n_cols), dtype=np.float32, meta=meta)
        for f, n in zip(futures, sizes, strict=True)
    ]
    X = client.persist(da.concatenate(parts))  # aliases: each runs where its chunk is
    wait(X)
    del futures, parts
    who_has = client.who_has(X)
    held = [sum(1 for i in range(X.numblocks[0]) if w in who_has[(X.name, i, 0)])
            for w in workers]  # fmt: skip
    return X, held


def _digest_block(block) -> np.ndarray:
    """A 64-bit digest of one output chunk's bytes (on the worker; one number comes back)."""
    import hashlib

    host = block.get() if hasattr(block, "get") else np.asarray(block)
    digest = hashlib.blake2b(np.ascontiguousarray(host).tobytes(), digest_size=8).digest()
    return np.frombuffer(digest, dtype=np.uint64).copy()


def _digests(client, persisted) -> list[int]:
    import dask.array as da

    flat = persisted.reshape(persisted.shape[0], -1) if persisted.ndim > 2 else persisted
    sums = da.map_blocks(
        _digest_block, flat, chunks=((1,) * flat.numblocks[0],), drop_axis=1, dtype=np.uint64,
        meta=np.empty((0,), np.uint64),
    )  # fmt: skip
    return [int(v) for v in client.compute(sums, sync=True)]


def _timed_persist(client, make, repeats: int, digests: bool = False):
    """Wall seconds of ``make()`` + ``persist`` + ``wait``, ``repeats`` times.

    With ``digests``, also the per-chunk digests of the last result. ``make()`` is inside the
    timing: with balancing on, the rows it moves are part of the job.
    """
    from distributed import wait

    seconds, digest = [], None
    for repeat in range(repeats):
        start = time.perf_counter()
        result = make()
        persisted = client.persist(result)
        wait(persisted)
        seconds.append(time.perf_counter() - start)
        if digests and repeat == repeats - 1:
            digest = _digests(client, persisted)
        del persisted, result
    return (seconds, digest) if digests else seconds


def _xgboost_single(raw: bytes, shape_name: str, rows: int, seed: int, gpu: bool, threads: int,
                    packed) -> dict:  # fmt: skip
    """XGBoost ``pred_contribs`` on one device, run inside a worker (its GPU is device 0).

    The same worker then explains the first 10,000 rows with distshap in memory, for the
    largest difference between the two.
    """
    import xgboost

    from distshap.dispatch import explain_rows

    booster = xgboost.Booster(model_file=bytearray(raw))
    booster.set_param({"device": "cuda"} if gpu else {"device": "cpu", "nthread": threads})
    X = _generate_rows(shape_name, rows, seed, gpu)
    booster.predict(xgboost.DMatrix(X[:1000]), pred_contribs=True)  # warm-up
    dmatrix = xgboost.DMatrix(X)  # built outside the timing, as benchmarks.throughput does
    start = time.perf_counter()
    theirs = booster.predict(dmatrix, pred_contribs=True)
    seconds = time.perf_counter() - start  # predict returns host NumPy: the work is done
    few = min(rows, 10_000)
    ours = explain_rows(packed, X[:few], False, "cuda" if gpu else "cpu")
    ours = ours.get() if hasattr(ours, "get") else np.asarray(ours)
    theirs = np.asarray(theirs[:few]).reshape(ours.shape)
    diff = float(np.max(np.abs(ours.astype(np.float64) - theirs)))
    return {"rows": rows, "seconds": seconds, "rows_per_s": rows / seconds, "max_abs_diff": diff}


def _placements(n_workers: int, n_chunks: int, uneven: list[list[int]]) -> list[tuple]:
    """(name, chunks per worker) to run at ``n_workers``: balanced, then the uneven specs."""
    base, extra = divmod(n_chunks, n_workers)
    balanced = [base + (k < extra) for k in range(n_workers)]
    out = [("/".join(map(str, balanced)), balanced)]
    for spec in uneven:
        if len(spec) == n_workers and spec != balanced:
            out.append(("/".join(map(str, spec)), spec))
    return out


def _one_count(n_workers: int, gpu: bool, packed, booster, args: argparse.Namespace,
               sizes: tuple[int, ...], uneven: list[list[int]]) -> list[dict]:  # fmt: skip
    """Every placement at ``n_workers``, each explained with balancing off and on."""
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
    records = []
    rows = sum(sizes)
    with client:
        warm = warm_up(client, packed, backend=backend)
        for name, counts in _placements(n_workers, len(sizes), uneven):
            started = time.perf_counter()
            X, held = _pinned_rows(client, shape_name, packed.num_features, sizes, counts,
                                   args.seed, gpu and not args.host_chunks)  # fmt: skip
            generate_s = time.perf_counter() - started
            # one small pass first (the scheduler learns the task durations)
            few = X[: sizes[0] * min(n_workers, X.numblocks[0])]
            explain_dask(packed, few, backend=backend, client=client).compute()
            for balance in (False, True) if n_workers > 1 else (True,):

                def make(balance=balance, X=X):
                    return explain_dask(packed, X, backend=backend, client=client,
                                        balance=balance)  # fmt: skip

                seconds, digest = _timed_persist(client, make, args.repeats, digests=True)
                record = {
                    "workers": n_workers,
                    "placement": name,
                    "chunks_held": held,
                    "balance": balance,
                    "rows": rows,
                    "chunks": len(sizes),
                    "generate_seconds": generate_s,
                    "warm_up_seconds": warm,
                    "distshap_seconds": seconds,
                    "distshap_rows_per_s": rows / min(seconds),
                    "digests": digest,
                }
                if (
                    args.xgboost_dask
                    and balance
                    and name == _placements(n_workers, len(sizes), [])[0][0]
                ):
                    import xgboost.dask as xgb_dask

                    model = client.scatter(booster, hash=False)
                    theirs = _timed_persist(
                        client,
                        lambda m=model, X=X: xgb_dask.predict(client, m, X, pred_contribs=True),
                        args.xgb_repeats,
                    )
                    record["xgboost_dask_rows_per_s"] = rows / min(theirs)
                records.append(record)
                print(
                    f"  {n_workers} worker(s), chunks {name} (held {'/'.join(map(str, held))}), "
                    f"balance {'on ' if balance else 'off'}: "
                    f"distshap {record['distshap_rows_per_s']:,.0f} rows/s"
                    + (
                        f", xgboost.dask {record['xgboost_dask_rows_per_s']:,.0f}"
                        if "xgboost_dask_rows_per_s" in record
                        else ""
                    ),
                    flush=True,
                )
            del X
        if n_workers == 1 and args.xgb_rows:
            model = client.scatter(packed, hash=False)
            peer = client.submit(
                _xgboost_single, bytes(booster.save_raw()), shape_name, args.xgb_rows,
                args.seed, gpu, args.cpu_threads, model, pure=False,
            ).result()  # fmt: skip
            records[0]["xgboost_single"] = peer
            print(
                f"  XGBoost on one {'GPU' if gpu else 'CPU worker'}: "
                f"{peer['rows_per_s']:,.0f} rows/s ({peer['rows']:,} rows; "
                f"max |diff| to distshap {peer['max_abs_diff']:.2e})",
                flush=True,
            )
    return records


def _efficiencies(records: list[dict]) -> None:
    """Efficiency of every record against the best single-worker rate."""
    ones = [r for r in records if r["workers"] == 1]
    if not ones:
        return
    per_worker = max(r["distshap_rows_per_s"] for r in ones)
    for rec in records:
        rec["distshap_efficiency"] = rec["distshap_rows_per_s"] / (per_worker * rec["workers"])


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
    counts = sorted({r["workers"] for r in records})
    fig, ax = plt.subplots(figsize=(5.5, 4.0))
    series = [
        ("balanced chunks", lambda r: r["uneven"] is False and r["balance"], "C0", "o"),
        ("uneven, balance on", lambda r: r["uneven"] and r["balance"], "C2", "^"),
        ("uneven, balance off", lambda r: r["uneven"] and not r["balance"], "C3", "v"),
    ]
    for label, pick, colour, marker in series:
        points = [(r["workers"], r["distshap_rows_per_s"]) for r in records if pick(r)]
        if points:
            ax.plot(*zip(*points, strict=True), marker=marker, color=colour, label=label,
                    linestyle="none" if label.startswith("uneven") else "-")  # fmt: skip
    ones = [r["distshap_rows_per_s"] for r in records if r["workers"] == 1]
    if ones:
        ideal = [max(ones) * w for w in counts]
        ax.plot(counts, ideal, linestyle="--", color="grey", alpha=0.6, label="ideal")
    unit = "GPUs" if report["gpu"] else "CPU workers"
    ax.set_xscale("log", base=2)
    ax.set_xticks(counts, [str(w) for w in counts])
    ax.set_xlabel(unit)
    ax.set_ylabel("rows / s")
    ax.set_title(f"SHAP values, {report['shape']}, {report['device']}", fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=150)
    plt.close(fig)


def _parse_uneven(text: str, n_chunks: int) -> list[list[int]]:
    specs = []
    for item in filter(None, (t.strip() for t in text.split(","))):
        spec = [int(c) for c in item.split("/")]
        if sum(spec) != n_chunks or min(spec) < 0:
            raise ValueError(
                f"--uneven {item!r}: the chunk counts must be >= 0 and add up to --chunks "
                f"({n_chunks}), e.g. 5/3 for 8 chunks on 2 workers"
            )
        specs.append(spec)
    return specs


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
    uneven = _parse_uneven(args.uneven, args.chunks)
    name, size = args.shape.split("-")
    booster = shapes.train_model(name, size, verbose=True)
    start = time.perf_counter()
    # the packed model users get (encoding, and the margin arrays of the per-chunk check)
    packed = TreeExplainer(booster).packed
    preprocess_s = time.perf_counter() - start

    kind = "gpu" if gpu else "cpu"
    rows = args.rows or DEFAULT_ROWS[kind]
    if args.xgb_rows is None:
        args.xgb_rows = min(rows, DEFAULT_XGB_ROWS[kind])
    sizes = _chunk_sizes(rows, args.chunks)  # the same chunks for every count and placement
    print(
        f"{args.shape}: {packed.num_paths} paths in {packed.num_bins} bins "
        f"(preprocessing {preprocess_s:.2f} s); {rows:,} rows in {len(sizes)} chunks; "
        f"{'GPUs' if gpu else 'CPU workers'} {counts}; uneven placements {args.uneven}",
        flush=True,
    )
    records = []
    for n in counts:
        records.extend(_one_count(n, gpu, packed, booster, args, sizes, uneven))
    _efficiencies(records)
    for rec in records:
        rec["uneven"] = rec["placement"] != _placements(rec["workers"], len(sizes), [])[0][0]
    digests = {tuple(r["digests"]) for r in records if r["digests"] is not None}
    peer = next((r["xgboost_single"] for r in records if "xgboost_single" in r), None)
    return {
        "benchmark": "scaling",
        "shape": args.shape,
        "gpu": gpu,
        "device": _device_name(gpu),
        "backend": "cuda" if gpu else "cpu",
        "chunks_in": "device" if gpu and not args.host_chunks else "host",
        "cpu_threads_per_worker": None if gpu else args.cpu_threads,
        "num_paths": packed.num_paths,
        "num_bins": packed.num_bins,
        "preprocess_seconds": preprocess_s,
        "packing": {k: v for k, v in packed.stats.items() if isinstance(v, (int, float, str))},
        "repeats": args.repeats,
        "xgb_repeats": args.xgb_repeats,
        "timing": "best of repeats; wall clock around explain_dask + persist + wait",
        "bits_identical": len(digests) == 1,
        "xgboost_single": peer,
        "results": records,
    }


def _table(report: dict) -> str:
    unit = "GPUs" if report["gpu"] else "workers"
    peer = report.get("xgboost_single")
    lines = [
        f"{unit:>7}  {'chunks':>9}  {'balance':>7}  {'distshap rows/s':>16}  {'eff':>5}"
        + (f"  {'vs XGBoost 1 dev':>16}" if peer else "")
    ]
    for r in report["results"]:
        line = (
            f"{r['workers']:>7}  {r['placement']:>9}  {'on' if r['balance'] else 'off':>7}  "
            f"{r['distshap_rows_per_s']:>16,.0f}  {r.get('distshap_efficiency', math.nan):>5.0%}"
        )
        if peer:
            line += f"  {r['distshap_rows_per_s'] / peer['rows_per_s']:>15.2f}x"
        if "xgboost_dask_rows_per_s" in r:
            line += f"  (xgboost.dask {r['xgboost_dask_rows_per_s']:,.0f})"
        lines.append(line)
    if peer:
        lines.append(
            f"XGBoost pred_contribs on one {'GPU' if report['gpu'] else 'CPU worker'}: "
            f"{peer['rows_per_s']:,.0f} rows/s ({peer['rows']:,} rows), max |diff| "
            f"{peer['max_abs_diff']:.2e}"
        )
    lines.append(
        "bits identical across worker counts, placements and balancing: "
        + ("yes" if report["bits_identical"] else "NO")
    )
    balanced = [r for r in report["results"] if not r["uneven"] and r["balance"]]
    counts = [r["workers"] for r in balanced]
    if len(counts) >= 2:
        target = 2 * max(counts)
        predicted = predict_rows_per_s({"results": balanced}, target)
        per_one = balanced[0]["distshap_rows_per_s"] / counts[0]
        lines.append(
            f"{target} {unit}: {predicted:,.0f} rows/s, {predicted / (per_one * target):.0%} "
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
        help="rows explained at every count (default: 12M on GPUs, 16k on CPU workers)",
    )
    parser.add_argument("--chunks", type=int, default=8, help="row chunks (default 8)")
    parser.add_argument(
        "--uneven",
        default="5/3,3/3/1/1",
        help="uneven placements, chunks per worker; each runs at the count of its length "
        "(default 5/3,3/3/1/1; '' for none)",
    )
    parser.add_argument("--device", choices=["auto", "gpu", "cpu"], default="auto")
    parser.add_argument("--shape", default="cal_housing-med", help="benchmarks.shapes shape")
    parser.add_argument("--repeats", type=int, default=3, help="distshap timings per case")
    parser.add_argument(
        "--xgb-rows",
        type=int,
        default=None,
        help="rows of the single-device XGBoost peer (default 1M on a GPU, 2k on CPU; 0: skip)",
    )
    parser.add_argument(
        "--xgboost-dask", action="store_true", help="also time xgboost.dask at every count"
    )
    parser.add_argument("--xgb-repeats", type=int, default=1, help="xgboost.dask timings")
    parser.add_argument("--cpu-threads", type=int, default=1, help="Numba threads per CPU worker")
    parser.add_argument(
        "--host-chunks", action="store_true", help="on GPUs: NumPy chunks (default CuPy)"
    )
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
    stem += "-host" if report["gpu"] and args.host_chunks else ""
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
