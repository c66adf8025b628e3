"""A multi-host deployment started as separate processes, measured beside a local cluster.

A multi-host Dask cluster is started one process per role: ``dask scheduler`` on one host and
``dask cuda worker SCHEDULER`` on each GPU host (``dask worker SCHEDULER --nworkers N
--nthreads 1`` on CPU hosts), each of which registers with the scheduler; distshap then
connects with ``start_cluster(address)`` (the CLI: ``distshap explain ... --scheduler
ADDR``). This benchmark starts exactly those commands on this machine, every "host" being one
worker command with its own share of the GPUs (``CUDA_VISIBLE_DEVICES``) or of the CPU
workers, all listening on 127.0.0.1 only, and measures the same calls through that cluster and
through :func:`distshap.start_cluster`'s local one (``LocalCUDACluster`` / ``LocalCluster``)
with the same workers:

* ``rows/s``: one large call on rows made on the workers and pinned there evenly
  (:mod:`benchmarks.scaling`'s placement and per-chunk digests), best of ``--repeats``;
* ``fixed``: the median wall time of calls of 1 and of 10,000 in-memory rows
  (``explainer.shap_values(da.from_array(X)).compute()``), against the same call in-process;
* ``per chunk``: the extra time of 32 one-row chunks over one chunk of 32 rows, per chunk;
* ``CLI``: ``distshap explain MODEL DATA.npy --scheduler ADDR`` end to end on a saved model
  file (a fresh process: imports, model loading, warm-up, reading, writing), beside
  ``--local`` in a fresh process; the two output files must hold the same bits.

Every result through the separate processes must equal the local cluster's bit for bit, and
the first chunk's also the in-process one (digests). At the end, throughput for 8 and 32 GPUs
(or workers) is projected from the smallest count's per-worker kernel rate, per-call fixed cost
and per-chunk cost, with the assumptions printed beside it. Processes started here are ended
on every exit path (SIGTERM to each process group, then SIGKILL after a bounded wait).

Commands (from the repository root)::

    python3 -m benchmarks.multihost                         # GPUs if visible, else CPU workers
    python3 -m benchmarks.multihost --device gpu --workers 1 --rows 4000000
    python3 -m benchmarks.multihost --device gpu --workers 1,2 --hosts 2   # 2 GPUs, 2 "hosts"
    python3 -m benchmarks.multihost --device cpu --workers 1,2 --hosts 2 --rows 8000
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python benchmarks/multihost.py`
    sys.path.insert(0, str(ROOT))

from benchmarks import shapes  # noqa: E402
from benchmarks.dask_overhead import median_ms  # noqa: E402
from benchmarks.scaling import (  # noqa: E402
    _chunk_sizes,
    _device_name,
    _digest_block,
    _pinned_rows,
    _placements,
    _timed_persist,
    _to_host,
)

__all__ = ["host_commands", "main", "project", "run_multihost", "separate_cluster"]

#: Rows of the large call when --rows is not given.
DEFAULT_ROWS = {"gpu": 4_000_000, "cpu": 8_000}
#: Rows of the CLI's input file when --cli-rows is not given.
DEFAULT_CLI_ROWS = {"gpu": 1_000_000, "cpu": 4_000}
#: Worker counts the projection is printed for.
PROJECTED = (8, 32)
#: Chunks of one row in the per-chunk measurement.
SMALL_CHUNKS = 32
#: Options of every process started here: serve on 127.0.0.1 only, no dashboard.
LISTEN = ["--host", "127.0.0.1", "--no-dashboard", "--dashboard-address", "127.0.0.1:0"]


def _split(items: Sequence, parts: int) -> list[list]:
    """``items`` in ``parts`` consecutive groups whose sizes differ by at most one."""
    base, extra = divmod(len(items), parts)
    out, start = [], 0
    for k in range(parts):
        size = base + (k < extra)
        out.append(list(items[start : start + size]))
        start += size
    return out


def host_commands(
    address: str, n_workers: int, hosts: int, gpu: bool, threads: int = 1, workdir: str = "."
) -> list[tuple[list[str], dict[str, str]]]:
    """The worker command (argv, extra environment) of each "host" of ``n_workers`` workers.

    GPU hosts run ``dask cuda worker`` on their share of the first ``n_workers`` GPUs this
    process may use (the entries of its ``CUDA_VISIBLE_DEVICES``, else ``0, 1, ...``; one worker
    per GPU); CPU hosts run ``dask worker --nworkers K --nthreads 1`` with Numba's
    thread count in ``DISTSHAP_NUM_THREADS`` (read by distshap at each call). All listen on
    127.0.0.1 with no dashboard.
    """
    hosts = max(1, min(hosts, n_workers))
    out = []
    visible = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")]
    devices = [d for d in visible if d] or [str(i) for i in range(n_workers)]
    if gpu and len(devices) < n_workers:
        raise ValueError(f"{n_workers} GPU workers but CUDA_VISIBLE_DEVICES holds {devices}")
    for k, share in enumerate(_split(devices[:n_workers] if gpu else [0] * n_workers, hosts)):
        common = [*LISTEN, "--nthreads", "1", "--local-directory", str(Path(workdir) / f"host{k}")]
        if gpu:
            argv = [sys.executable, "-m", "dask", "cuda", "worker", address, *common]
            env = {"CUDA_VISIBLE_DEVICES": ",".join(share)}
        else:
            argv = [sys.executable, "-m", "dask", "worker", address, *common]
            argv += ["--nworkers", str(len(share)), "--name", f"host{k}"]
            env = {
                name: str(threads)
                for name in ("DISTSHAP_NUM_THREADS", "NUMBA_NUM_THREADS", "OMP_NUM_THREADS")
            }
        out.append((argv, env))
    return out


def _spawn(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    """One process in its own process group (so that its worker children end with it)."""
    full = dict(os.environ)
    full["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), full.get("PYTHONPATH")]))
    full.update(env)
    with open(log, "wb") as out:
        return subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env=full, start_new_session=True
        )


def _stop(processes: list[subprocess.Popen], grace: float = 15.0) -> None:
    """SIGTERM each process group, wait up to ``grace`` s in all, then SIGKILL what is left."""
    for proc in processes:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for proc in processes:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
    for proc in processes:  # the group too: a nanny's worker child may outlive its parent
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)


def _tail(log: Path, lines: int = 5) -> str:
    try:
        return " | ".join(log.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _check_alive(started: list[tuple[subprocess.Popen, Path]]) -> None:
    for proc, log in started:
        if proc.poll() is not None:
            raise RuntimeError(f"{log.stem} exited with code {proc.returncode}: {_tail(log)}")


def _scheduler_address(path: Path, started: list, deadline: float) -> str:
    """The address ``dask scheduler --scheduler-file`` wrote, once it is there."""
    while time.monotonic() < deadline:
        _check_alive(started)
        with contextlib.suppress(OSError, ValueError, KeyError):
            return json.loads(path.read_text())["address"]
        time.sleep(0.2)
    raise TimeoutError(f"the scheduler wrote no address within the time: {_tail(started[0][1])}")


@contextlib.contextmanager
def separate_cluster(
    n_workers: int, hosts: int, gpu: bool, threads: int = 1, start_timeout: float = 120.0
) -> Iterator[str]:
    """Start ``dask scheduler`` and each host's worker command; yield the scheduler address.

    Returns once all ``n_workers`` workers are registered (else raises, with the failing
    process's last log lines, within ``start_timeout`` seconds). Every process is ended on
    leaving the block, however it is left.
    """
    from distributed import Client

    started: list[tuple[subprocess.Popen, Path]] = []
    with tempfile.TemporaryDirectory(prefix="distshap-multihost-") as tmp:
        work = Path(tmp)
        deadline = time.monotonic() + start_timeout
        try:
            log = work / "scheduler.log"
            argv = [sys.executable, "-m", "dask", "scheduler", *LISTEN, "--port", "0"]
            argv += ["--scheduler-file", str(work / "scheduler.json")]
            started.append((_spawn(argv, {}, log), log))
            address = _scheduler_address(work / "scheduler.json", started, deadline)
            for k, (argv, env) in enumerate(
                host_commands(address, n_workers, hosts, gpu, threads, tmp)
            ):
                log = work / f"host{k}.log"
                started.append((_spawn(argv, env, log), log))
            with Client(address, timeout=max(deadline - time.monotonic(), 1.0)) as client:
                while len(client.scheduler_info(n_workers=-1)["workers"]) < n_workers:
                    _check_alive(started)
                    if time.monotonic() > deadline:
                        raise TimeoutError(
                            f"{n_workers} worker(s) did not register within start_timeout="
                            f"{start_timeout:g} s: {_tail(started[-1][1])}"
                        )
                    time.sleep(0.2)
            yield address
        finally:
            _stop([proc for proc, _ in reversed(started)])


def _fixed_costs(explainer, X: np.ndarray, rows: Sequence[int], calls: int) -> dict:
    """Median ms of calls of ``n`` in-memory rows through the explainer's client, in one chunk."""
    import dask.array as da

    out = {}
    for n in rows:
        dX = da.from_array(X[:n], chunks=(n, -1))
        out[f"call_{n}_ms"] = median_ms(lambda d=dX: explainer.shap_values(d).compute(), calls)
    one = da.from_array(X[:SMALL_CHUNKS], chunks=(SMALL_CHUNKS, -1))
    many = da.from_array(X[:SMALL_CHUNKS], chunks=(1, -1))
    t_one = median_ms(lambda: explainer.shap_values(one).compute(), calls)
    t_many = median_ms(lambda: explainer.shap_values(many).compute(), calls)
    out["per_chunk_ms"] = (t_many - t_one) / (SMALL_CHUNKS - 1)
    values = [
        _to_host(explainer.shap_values(da.from_array(X[:n], chunks=(n, -1))).compute())
        for n in rows
    ]
    out["_values"] = values
    return out


def _measure(client, booster, packed, X, args, gpu: bool, sizes, n_workers: int) -> dict:
    """The large call, the fixed costs and the per-chunk cost through ``client``."""
    from distshap import TreeExplainer
    from distshap.cluster import explain_dask, warm_up

    backend = "cuda" if gpu else "cpu"
    warm = warm_up(client, packed, backend=backend)
    counts = _placements(n_workers, len(sizes), [])[0][1]
    shape_name = args.shape.split("-")[0]
    rows_x, held = _pinned_rows(
        client, shape_name, packed.num_features, sizes, counts, args.seed, gpu
    )
    explain_dask(packed, rows_x[: sizes[0]], backend=backend, client=client).compute()

    def make(rows=rows_x):
        return explain_dask(packed, rows, backend=backend, client=client)

    seconds, digests = _timed_persist(client, make, args.repeats, digests=True)
    del rows_x
    explainer = TreeExplainer(booster, backend=backend, client=client, layout="xgboost")
    fixed = _fixed_costs(explainer, X, args.call_rows, args.calls)
    rows = sum(sizes)
    return {
        "workers": n_workers,
        "chunks_held": held,
        "rows": rows,
        "seconds": seconds,
        "rows_per_s": rows / min(seconds),
        "rows_per_s_per_worker": rows / min(seconds) / n_workers,
        "warm_up_seconds": max(warm.values()),
        "digests": digests,
        **fixed,
    }


def _one_count(n: int, gpu: bool, booster, packed, X, args, sizes) -> list[dict]:
    """The local cluster and the separate processes at ``n`` workers, one after the other."""
    from distshap.cluster import start_cluster

    records = []
    for kind in ("local", "separate"):
        with contextlib.ExitStack() as stack:  # the client closes first, then its cluster
            started, address = time.perf_counter(), None
            if kind == "separate":
                address = stack.enter_context(
                    separate_cluster(n, args.hosts, gpu, args.cpu_threads, args.start_timeout)
                )
                client = start_cluster(address=address)
            elif gpu:
                client = start_cluster(n_workers=n, gpus=True, dashboard_address="127.0.0.1:0")
            else:
                threads = str(args.cpu_threads)
                env = {"NUMBA_NUM_THREADS": threads, "OMP_NUM_THREADS": threads}
                client = start_cluster(
                    n_workers=n, gpus=False, env=env, dashboard_address="127.0.0.1:0"
                )
            stack.enter_context(client)
            start_s = time.perf_counter() - started
            rec = _measure(client, booster, packed, X, args, gpu, sizes, n)
            if address is not None and n == max(args.counts) and args.cli_rows:
                rec["cli"] = _cli_end_to_end(address, booster, args, gpu, n)
        rec.update(
            cluster=kind,
            start_seconds=start_s,
            hosts=1 if kind == "local" else max(1, min(args.hosts, n)),
        )
        records.append(rec)
        print(
            f"  {n} worker(s), {kind:>8}: {rec['rows_per_s']:,.0f} rows/s "
            f"({rec['rows_per_s_per_worker']:,.0f} a worker); calls "
            + ", ".join(f"{r} rows {rec[f'call_{r}_ms']:.1f} ms" for r in args.call_rows)
            + f"; {rec['per_chunk_ms']:.2f} ms a chunk; started in {start_s:.1f} s",
            flush=True,
        )
    return records


def _cli_line(proc: subprocess.CompletedProcess) -> str:
    lines = [line for line in proc.stdout.splitlines() if "rows/s" in line]
    if proc.returncode != 0 or not lines:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        raise RuntimeError(f"distshap explain exited with code {proc.returncode}: {tail}")
    return lines[-1]


def _cli_end_to_end(address: str, booster, args, gpu: bool, n_workers: int) -> dict:
    """``distshap explain`` on a saved model: ``--scheduler ADDR`` and ``--local``, each timed."""
    name = args.shape.split("-")[0]
    X, _ = shapes.make_data(name, args.cli_rows, seed=args.seed + 7)
    out: dict = {"rows": args.cli_rows}
    with tempfile.TemporaryDirectory(prefix="distshap-multihost-cli-") as tmp:
        model, data = Path(tmp) / "model.json", Path(tmp) / "rows.npy"
        booster.save_model(str(model))
        np.save(data, np.ascontiguousarray(X, dtype=np.float32))
        chunk = str(math.ceil(args.cli_rows / n_workers))
        backend = "cuda" if gpu else "cpu"
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        values = {}
        for where, extra in (
            ("scheduler", ["--scheduler", address, "--chunk-rows", chunk]),
            ("local", ["--local"]),
        ):
            target = Path(tmp) / f"{where}.npy"
            argv = [sys.executable, "-m", "distshap.cli", "explain", str(model), str(data)]
            argv += ["-o", str(target), "--no-progress", "--backend", backend, *extra]
            started = time.perf_counter()
            proc = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                cwd=ROOT,
                env=env,
                timeout=args.start_timeout + 300,
            )
            out[f"{where}_wall_seconds"] = time.perf_counter() - started
            out[f"{where}_says"] = _cli_line(proc)
            values[where] = np.load(target)
        out["bits_identical"] = bool(
            values["scheduler"].dtype == values["local"].dtype
            and values["scheduler"].tobytes() == values["local"].tobytes()
        )
    print(
        f"  CLI --scheduler: {out['scheduler_wall_seconds']:.1f} s end to end "
        f"({out['scheduler_says']}); --local: {out['local_wall_seconds']:.1f} s; bits "
        f"{'identical' if out['bits_identical'] else 'DIFFER'}",
        flush=True,
    )
    return out


def project(base: dict, counts: Sequence[int]) -> list[dict]:
    """Projected rows/s and efficiency of one call at each worker count in ``counts``.

    ``base`` holds the per-worker kernel rate ``rate`` (rows/s), the per-call ``fixed_seconds``
    (graph, scheduling, the result's hand-back), the ``per_chunk_seconds`` and the measured
    call's ``rows`` and ``chunks`` at ``workers`` workers. A call whose workers each explain
    ``share`` rows in ``k`` chunks takes ``fixed + chunk costs + share / rate``; the chunk costs
    are ``k * per_chunk`` when the workers pay them side by side (``best``) and ``N * k *
    per_chunk`` when the scheduler pays them one after the other (``worst``). ``weak``: each of
    ``N`` workers gets the measured call's share a worker (rows and chunks); ``strong``: the
    measured call's rows are shared by all ``N`` (at least one chunk each, as balancing
    splits chunks). Efficiency is the throughput over ``N * rate``.
    """
    rate, n0 = base["rate"], base["workers"]
    out = []
    for n in counts:
        row = {"workers": n}
        laws = {
            "weak": (base["rows"] / n0, max(1, math.ceil(base["chunks"] / n0))),
            "strong": (base["rows"] / n, max(1, math.ceil(base["chunks"] / n))),
        }
        for law, (share, k) in laws.items():
            for case, chunks in (("best", k), ("worst", n * k)):
                seconds = base["fixed_seconds"] + chunks * base["per_chunk_seconds"] + share / rate
                row[f"{law}_{case}_rows_per_s"] = n * share / seconds
                row[f"{law}_{case}_efficiency"] = share / seconds / rate
        out.append(row)
    return out


def _projection(report: dict) -> dict:
    """The model's inputs from the smallest count's separate-process run, and its outputs."""
    recs = [r for r in report["results"] if r["cluster"] == "separate"]
    first = min(recs, key=lambda r: r["workers"])
    n, rows = first["workers"], first["rows"]
    chunk_s = max(first["per_chunk_ms"], 0.0) / 1e3
    fixed_s = max(first[f"call_{min(report['call_rows'])}_ms"] / 1e3 - chunk_s, 0.0)
    k = max(1, math.ceil(report["chunks"] / n))
    kernel_s = min(first["seconds"]) - fixed_s - k * chunk_s
    base = {"rate": rows / n / max(kernel_s, 1e-9), "fixed_seconds": fixed_s,
            "per_chunk_seconds": chunk_s, "rows": rows, "chunks": report["chunks"],
            "workers": n}  # fmt: skip
    measured = {r["workers"]: r["rows_per_s"] for r in recs}
    table = project(base, sorted(set(measured) | set(PROJECTED)))
    for row in table:
        row["measured_rows_per_s"] = measured.get(row["workers"])
    base["output_bytes_per_row"] = 4 * (report["num_features"] + 1) * report["num_groups"]
    return {**base, "table": table}


def run_multihost(args: argparse.Namespace) -> dict:
    """Run the benchmark of the module docstring for parsed ``args``; return its report."""
    from distshap import TreeExplainer
    from distshap.cluster import count_gpus
    from distshap.dispatch import explain_rows

    visible = count_gpus()
    gpu = {"auto": visible > 0, "gpu": True, "cpu": False}[args.device]
    counts = sorted({int(c) for c in args.workers.split(",")})
    if gpu and max(counts) > visible:
        raise ValueError(f"--workers {args.workers}: only {visible} GPU(s) visible here")
    args.counts = counts
    kind = "gpu" if gpu else "cpu"
    args.rows = args.rows or DEFAULT_ROWS[kind]
    args.cli_rows = DEFAULT_CLI_ROWS[kind] if args.cli_rows is None else args.cli_rows
    name, size = args.shape.split("-")
    booster = shapes.train_model(name, size)
    packed = TreeExplainer(booster).packed
    sizes = _chunk_sizes(args.rows, args.chunks)
    X = np.ascontiguousarray(shapes.make_data(name, max(args.call_rows), seed=1)[0], np.float32)
    print(
        f"{args.shape}: {packed.num_paths} paths; {args.rows:,} rows in {len(sizes)} chunks; "
        f"{'GPUs' if gpu else 'CPU workers'} {counts}; up to {args.hosts} host(s)",
        flush=True,
    )
    records = []
    for n in counts:
        records.extend(_one_count(n, gpu, booster, packed, X, args, sizes))
    # in-process references: the first chunk of the large call and the in-memory calls
    first, _ = shapes.make_data(name, sizes[0], seed=args.seed)
    backend = "cuda" if gpu else "cpu"
    ref = explain_rows(packed, first, False, backend)
    ref = ref.get() if hasattr(ref, "get") else np.asarray(ref)
    ref_digest = int(_digest_block(ref.reshape(len(ref), -1))[0])
    local = TreeExplainer(booster, backend=backend, layout="xgboost")
    in_ms = {n: median_ms(lambda n=n: local.shap_values(X[:n]), args.calls) for n in args.call_rows}
    in_vals = [_to_host(local.shap_values(X[:n])) for n in args.call_rows]
    for rec in records:
        values = rec.pop("_values")
        rec["bits_as_in_process"] = bool(
            rec["digests"][0] == ref_digest
            and all(v.tobytes() == w.tobytes() for v, w in zip(values, in_vals, strict=True))
        )
    report = {
        "benchmark": "multihost",
        "shape": args.shape,
        "gpu": gpu,
        "device": _device_name(gpu),
        "rows": args.rows,
        "chunks": len(sizes),
        "call_rows": args.call_rows,
        "calls": args.calls,
        "repeats": args.repeats,
        "cpu_threads_per_worker": None if gpu else args.cpu_threads,
        "num_features": packed.num_features,
        "num_groups": packed.num_groups,
        "in_process_ms": {str(n): v for n, v in in_ms.items()},
        "results": records,
        "bits_identical": len({tuple(r["digests"]) for r in records}) == 1
        and all(r["bits_as_in_process"] for r in records)
        and all(r.get("cli", {}).get("bits_identical", True) for r in records),
    }
    report["projection"] = _projection(report)
    return report


def _table(report: dict) -> str:
    unit = "GPUs" if report["gpu"] else "workers"
    lines = [
        f"{unit:>7}  {'cluster':>8}  {'hosts':>5}  {'rows/s':>12}  {'a worker':>11}  "
        + "  ".join(f"{f'{n} rows ms':>11}" for n in report["call_rows"])
        + f"  {'ms/chunk':>8}  {'start s':>7}"
    ]
    for r in report["results"]:
        lines.append(
            f"{r['workers']:>7}  {r['cluster']:>8}  {r['hosts']:>5}  {r['rows_per_s']:>12,.0f}  "
            f"{r['rows_per_s_per_worker']:>11,.0f}  "
            + "  ".join(f"{r[f'call_{n}_ms']:>11.2f}" for n in report["call_rows"])
            + f"  {r['per_chunk_ms']:>8.2f}  {r['start_seconds']:>7.1f}"
        )
    lines.append(
        "in-process: "
        + ", ".join(f"{n} rows {v:.2f} ms" for n, v in report["in_process_ms"].items())
    )
    lines.append(
        "bits identical (separate processes, local cluster, in-process, CLI): "
        + ("yes" if report["bits_identical"] else "NO")
    )
    p = report["projection"]
    lines += [
        "",
        f"Projection (not measured) from the separate processes on {p['workers']} {unit}: "
        f"kernel rate {p['rate']:,.0f} rows/s a worker, fixed {1e3 * p['fixed_seconds']:.1f} ms "
        f"a call, {1e3 * p['per_chunk_seconds']:.2f} ms a chunk; {p['rows']:,} rows in "
        f"{p['chunks']} chunks measured ('measured': the same call on the clusters above)",
        f"{unit:>7}  {'weak best':>13}  {'weak worst':>13}  {'strong best':>13}  "
        f"{'strong worst':>13}  {'measured':>12}",
    ]
    for row in p["table"]:
        cells = [
            f"{row[f'{law}_rows_per_s']:>8,.0f} {row[f'{law}_efficiency']:>4.0%}"
            for law in ("weak_best", "weak_worst", "strong_best", "strong_worst")
        ]
        seen = row["measured_rows_per_s"]
        lines.append(
            f"{row['workers']:>7}  "
            + "  ".join(f"{c:>13}" for c in cells)
            + f"  {'' if seen is None else f'{seen:,.0f}':>12}"
        )
    rate = p["rate"] * PROJECTED[-1]
    lines += [
        "assumptions: rows already on the workers, evenly; results stay there (persisted);",
        "  the network between hosts is not measured (loopback here); the scheduler and the",
        "  fixed cost do not grow with the worker count; weak = the measured rows and chunks a",
        "  worker, strong = the measured call's rows shared by all; best = chunk costs paid in",
        "  parallel, worst = one after the other at the scheduler. Collecting the results moves",
        f"  {p['output_bytes_per_row']} B a row: {rate * p['output_bytes_per_row'] / 1e6:,.1f} "
        f"MB/s at {PROJECTED[-1]} {unit}' kernel rate.",
    ]
    return "\n".join(lines)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", choices=["auto", "gpu", "cpu"], default="auto")
    parser.add_argument("--workers", default="1", help="worker counts, e.g. 1,2 (default 1)")
    parser.add_argument("--hosts", type=int, default=2, help="worker commands (default 2)")
    parser.add_argument("--rows", type=int, help="rows of the large call (4M GPU, 8k CPU)")
    parser.add_argument("--chunks", type=int, default=8, help="chunks of the large call")
    parser.add_argument("--call-rows", default="1,10000", help="rows of the timed small calls")
    parser.add_argument("--calls", type=int, default=20, help="timed small calls (median)")
    parser.add_argument("--repeats", type=int, default=3, help="large-call timings (best)")
    parser.add_argument("--cli-rows", type=int, help="rows of the CLI's file (0: skip the CLI)")
    parser.add_argument("--cpu-threads", type=int, default=1, help="Numba threads a CPU worker")
    parser.add_argument("--start-timeout", type=float, default=120.0, help="seconds to start")
    parser.add_argument("--shape", default="cal_housing-med", help="benchmarks.shapes shape")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="write the report as JSON here")
    args = parser.parse_args(argv)
    args.call_rows = [int(r) for r in args.call_rows.split(",")]
    if args.hosts < 1 or min(args.call_rows) < 1 or args.chunks < 1:
        parser.error("--hosts, --chunks and --call-rows must be positive")
    return args


def main(argv: list[str] | None = None) -> dict:
    """Command-line entry point; returns the report (also written to ``--out``)."""
    args = _parse(argv)
    # a SIGTERM (a timeout's) unwinds like an error, so the processes started here are ended
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    report = run_multihost(args)
    print()
    print(_table(report))
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=1))
        print(f"\nwrote {args.out}")
    if not report["bits_identical"]:
        raise SystemExit("the separate processes, the local cluster and in-process differ")
    return report


if __name__ == "__main__":
    main()
