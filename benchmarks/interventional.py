"""Interventional SHAP throughput: distshap (CPU, CUDA, Dask) beside shap, in one run.

For a model shape of :mod:`benchmarks.shapes` (default ``cal_housing-med``: 100 trees of depth
8 on 8 features) and each background size (default 100 and 1,000 rows), in the same process on
the same rows:

* ``shap``: ``shap.TreeExplainer(model, masker, feature_perturbation="interventional")
  .shap_values(X)`` on the first ``--shap-rows`` rows (its C++ loop over rows, background rows
  and trees runs on one thread whatever the machine; it is slow, so it gets fewer rows). The
  masker is ``shap.maskers.Independent(background, max_samples=B)``: given the rows
  themselves, shap keeps a random 100 of them (``max_samples=100``), so above 100 rows it
  would explain (and be timed on) another background than distshap;
* ``WOODELF`` (``pip install woodelf-explainer``; model output ``raw`` only):
  ``WoodelfExplainer(model, background).shap_values(X)`` on the first ``--woodelf-rows`` rows
  (pandas DataFrames, float32 values), its BLAS / OpenMP pools limited to ``--threads``;
* ``distshap CPU``: ``distshap.TreeExplainer(model, background,
  feature_perturbation="interventional", backend="cpu")`` on ``--cpu-rows`` rows (every core,
  or ``--threads``: ``DISTSHAP_NUM_THREADS``), and beside it the same model's path-dependent
  SHAP values (``TreeExplainer(model, backend="cpu")``) on the same rows;
* ``distshap CUDA``: the same with ``backend="cuda"`` on ``--rows`` CuPy rows, with its
  rows/s and whether its values are the CPU's bits;
* ``Dask``: :func:`distshap.cluster.explain_dask` with the background on a local cluster of 1,
  2, ... GPUs (``--dask-workers``; CuPy chunks made on the workers), with the efficiency
  ``rows/s / (workers x rows/s of 1 worker)``. CPU workers where ``--backend cpu``.

Every distshap timing is the median of ``--repeats`` runs after a warm-up call (compilation,
model and background upload, pattern tables), with the additivity check on (as users run
it); GPU work is synchronized before the clock stops. The values of each backend are compared
with shap's on shap's rows (``max|diff| / max|shap|``).

Usage::

    python -m benchmarks.interventional                                  # GPU if any
    python -m benchmarks.interventional --backend cpu --rows 2000 --shap-rows 50   # smoke
    python -m benchmarks.interventional --backend cpu --threads 2 --cpu-rows 5000 \
        --shap-rows 200 --woodelf-rows 1000                         # CPU against its peers
    python -m benchmarks.interventional --backgrounds 100 --dask-workers 1,2,4
    python -m benchmarks.interventional --shape adult-med --model-output probability \
        --backgrounds 100 --dask-workers=
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import time

import numpy as np

from benchmarks import shapes

__all__ = ["main", "measure"]


def _sync(gpu: bool) -> None:
    if gpu:
        import cupy

        cupy.cuda.Device().synchronize()


def _median(fn, repeats: int, gpu: bool) -> tuple[float, object, float]:
    """Median seconds of ``repeats`` calls after a warm-up call; the last output; warm-up s."""
    t0 = time.perf_counter()
    out = fn()
    _sync(gpu)
    first = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        _sync(gpu)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out, first


def _host(a) -> np.ndarray:
    return a.get() if hasattr(a, "get") else np.asarray(a)


def _rel_diff(ours, theirs) -> float:
    """``max|ours - shap| / max|shap|`` over the feature columns (bias aside)."""
    ours = _host(ours).astype(np.float64)
    ours = (ours[:, None, :] if ours.ndim == 2 else ours)[..., :-1]  # (n, G, F)
    theirs = np.asarray(theirs, dtype=np.float64)  # shap: (n, F), or (n, F, G)
    theirs = theirs.transpose(0, 2, 1) if theirs.ndim == 3 else theirs[:, None, :]
    return float(np.abs(ours - theirs).max() / max(np.abs(theirs).max(), 1e-30))


def _dask_rate(shape_name: str, booster, background, n_workers: int, gpu: bool, rows: int,
               repeats: int, chunks_per_worker: int, threads: int,
               model_output: str = "raw") -> float:  # fmt: skip
    """rows/s of explain_dask on a fresh local cluster of ``n_workers`` (GPUs or CPUs)."""
    from distributed import wait

    from benchmarks.scaling import _make_rows
    from distshap import TreeExplainer
    from distshap.cluster import explain_dask, start_cluster

    explainer = TreeExplainer(booster, background, model_output, "interventional",
                              backend="cpu")  # fmt: skip  # the packed model and background
    packed, bg = explainer.packed, explainer.background
    backend = "cuda" if gpu else "cpu"
    if gpu:
        client = start_cluster(n_workers=n_workers, gpus=True, dashboard_address=":0")
    else:
        env = {"NUMBA_NUM_THREADS": str(threads), "OMP_NUM_THREADS": str(threads)}
        client = start_cluster(n_workers=n_workers, gpus=False, dashboard_address=":0", env=env)
    with client:
        n_chunks = max(1, n_workers * chunks_per_worker)
        X = client.persist(_make_rows(shape_name, packed.num_features, rows, n_chunks, 7, gpu))
        wait(X)
        few = X[: X.chunks[0][0] * min(n_workers, X.numblocks[0])]
        explain_dask(
            packed, few, backend=backend, background=bg, model_output=model_output
        ).compute()  # warm-up
        seconds = []
        for _ in range(repeats):
            result = explain_dask(
                packed, X, backend=backend, background=bg, model_output=model_output
            )
            t0 = time.perf_counter()
            wait(client.persist(result))
            seconds.append(time.perf_counter() - t0)
            del result
    return rows / min(seconds)


def _woodelf(rec: dict, booster, background, X, rows: int, repeats: int,
             threads: int | None) -> np.ndarray | None:  # fmt: skip
    """WOODELF's rows/s on the first ``rows`` rows into ``rec``; its values, or None."""
    try:
        import pandas as pd
        from threadpoolctl import threadpool_limits
        from woodelf import WoodelfExplainer
    except ImportError:
        rec["woodelf_rows_s"] = None
        return None
    cols = [f"f{i}" for i in range(X.shape[1])]
    booster.feature_names = cols
    data = pd.DataFrame(np.asarray(background, np.float32), columns=cols)
    frame = pd.DataFrame(np.asarray(X[:rows], np.float32), columns=cols)
    with threadpool_limits(threads):
        t0 = time.perf_counter()
        explainer = WoodelfExplainer(booster, data)
        rec["woodelf_setup_s"] = time.perf_counter() - t0
        s, out, first = _median(lambda: explainer.shap_values(frame, verbose=False), repeats,
                                False)  # fmt: skip
    booster.feature_names = None
    rec.update(woodelf_rows=len(frame), woodelf_s=s, woodelf_first_s=first,
               woodelf_rows_s=len(frame) / s)  # fmt: skip
    return np.asarray(out)


def _path_dependent(rec: dict, booster, X, repeats: int) -> None:
    """distshap's path-dependent SHAP values of the same rows on the CPU, into ``rec``."""
    from distshap import TreeExplainer

    explainer = TreeExplainer(booster, backend="cpu")
    s, _, _ = _median(lambda: explainer.shap_values(X), repeats, False)
    rec.update(path_dependent_s=s, path_dependent_rows_s=len(X) / s)


def measure(shape: str, n_background: int, rows: int, cpu_rows: int, shap_rows: int,
            backend: str, repeats: int, dask_workers: list[int], chunks_per_worker: int,
            dask_rows: int | None, model_output: str = "raw", woodelf_rows: int = 0,
            threads: int | None = None) -> dict:  # fmt: skip
    """One background size: every measurement of the module docstring, as a record."""
    from distshap import TreeExplainer

    name, size = shape.rsplit("-", 1)
    booster = shapes.train_model(name, size)
    background, _ = shapes.make_data(name, n_background, seed=2)
    X, labels = shapes.make_data(name, max(rows, cpu_rows, shap_rows), seed=1)
    y = np.asarray(labels, np.float64) if model_output == "log_loss" else None
    gpu = backend == "cuda"
    rec: dict = {
        "shape": shape,
        "background": n_background,
        "repeats": repeats,
        "model_output": model_output,
    }

    # shap (one thread: its interventional loop is serial C++)
    n_shap = min(shap_rows, X.shape[0])
    rec["shap_rows"] = n_shap
    theirs = None
    try:
        import shap

        t0 = time.perf_counter()
        # shap's default masker silently keeps 100 random rows of a larger background:
        # give it every row, as distshap uses them all
        masker = shap.maskers.Independent(background, max_samples=n_background)
        explainer = shap.TreeExplainer(
            booster, masker, model_output=model_output, feature_perturbation="interventional"
        )
        rec["shap_setup_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        kw = {} if y is None else {"y": y[:n_shap]}
        theirs = explainer.shap_values(X[:n_shap], check_additivity=False, **kw)
        rec["shap_s"] = time.perf_counter() - t0
        rec["shap_rows_s"] = n_shap / rec["shap_s"]
    except ImportError:
        rec["shap_rows_s"] = None

    wood = None
    if woodelf_rows and model_output == "raw":
        wood = _woodelf(rec, booster, background, X, min(woodelf_rows, X.shape[0]), repeats,
                        threads)  # fmt: skip

    # distshap CPU
    t0 = time.perf_counter()
    cpu = TreeExplainer(booster, background, model_output, "interventional", layout="xgboost",
                        backend="cpu")  # fmt: skip
    rec["prepare_s"] = time.perf_counter() - t0
    rec["cpu_rows"] = cpu_rows
    y_cpu = None if y is None else y[:cpu_rows]
    s, cpu_out, first = _median(lambda: cpu.shap_values(X[:cpu_rows], y_cpu), repeats, False)
    rec.update(cpu_s=s, cpu_first_s=first, cpu_rows_s=cpu_rows / s)
    if theirs is not None:
        rec["cpu_diff_vs_shap"] = _rel_diff(cpu_out[:n_shap], theirs)
    if wood is not None:
        n_wood = min(rec["woodelf_rows"], cpu_rows)
        rec["cpu_diff_vs_woodelf"] = _rel_diff(cpu_out[:n_wood], wood[:n_wood])
    if not gpu:
        _path_dependent(rec, booster, X[:cpu_rows], repeats)

    # distshap CUDA
    if gpu:
        import cupy

        cuda = TreeExplainer(booster, background, model_output, "interventional",
                             layout="xgboost", backend="cuda")  # fmt: skip
        Xd = cupy.asarray(X[:rows])
        yd = None if y is None else cupy.asarray(y[:rows])
        n = min(cpu_rows, rows)
        s, out, first = _median(lambda: cuda.shap_values(Xd, yd), repeats, True)
        host = _host(out)
        rec.update(cuda_rows=rows, cuda_s=s, cuda_first_s=first, cuda_rows_s=rows / s)
        if theirs is not None:
            rec["cuda_diff_vs_shap"] = _rel_diff(host[:n_shap], theirs)
        ref = np.asarray(cpu_out[:n])
        got = host[:n]
        rec["cuda_diff_vs_cpu"] = float(
            np.abs(got.astype(np.float64) - ref).max() / max(np.abs(ref).max(), 1e-30)
        )
        rec["cuda_bits_equal_cpu"] = bool(got.dtype == ref.dtype and np.array_equal(got, ref))
        print(f"CUDA {model_output}: {rows / s:,.0f} rows/s, bits equal the CPU's ({n} rows): "
              f"{rec['cuda_bits_equal_cpu']}", flush=True)  # fmt: skip

    # Dask
    per_worker = dask_rows or (max(rows, 2_000_000) if gpu else cpu_rows)
    base = None
    for w in dask_workers:
        total = per_worker * w
        threads = max(1, (os.cpu_count() or 1) // max(dask_workers))
        rate = _dask_rate(name, booster, background, w, gpu, total, repeats, chunks_per_worker,
                          threads, model_output)  # fmt: skip
        if base is None:
            base = rate / w  # per worker, at the smallest count
        rec[f"dask_{w}_rows"] = total
        rec[f"dask_{w}_rows_s"] = rate
        if base:
            rec[f"dask_{w}_efficiency"] = rate / (w * base)
    return rec


def _fmt(x, digits: int = 0) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:,.{digits}f}"


def table(records: list[dict], backend: str, dask_workers: list[int]) -> str:
    """The markdown table of :func:`measure` records."""
    head = ["background", "shap rows/s (rows)", "CPU rows/s", "CPU / shap"]
    wood = any("woodelf_rows_s" in r for r in records)
    pd_rate = any("path_dependent_rows_s" in r for r in records)
    if wood:
        head += ["WOODELF rows/s (rows)", "CPU / WOODELF"]
    if pd_rate:
        head += ["path-dependent rows/s", "CPU / path-dependent"]
    if backend == "cuda":
        head += ["CUDA rows/s", "CUDA / shap"]
    head += [f"Dask {w} {'GPU' if backend == 'cuda' else 'CPU worker'}{'s' if w > 1 else ''}"
             for w in dask_workers]  # fmt: skip
    head += ["max rel diff vs shap (CPU, CUDA), vs WOODELF"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in records:
        shap_rate = r.get("shap_rows_s")
        row = [
            str(r["background"]),
            f"{_fmt(shap_rate, 1)} ({r['shap_rows']})",
            _fmt(r["cpu_rows_s"]),
            _fmt(shap_rate and r["cpu_rows_s"] / shap_rate) + "x",
        ]
        if wood:
            w_rate = r.get("woodelf_rows_s")
            row += [f"{_fmt(w_rate, 1)} ({r.get('woodelf_rows', '-')})",
                    _fmt(w_rate and r["cpu_rows_s"] / w_rate, 1) + "x"]  # fmt: skip
        if pd_rate:
            p_rate = r.get("path_dependent_rows_s")
            row += [_fmt(p_rate), f"{100 * r['cpu_rows_s'] / p_rate:.0f}%" if p_rate else "-"]
        if backend == "cuda":
            row += [_fmt(r["cuda_rows_s"]), _fmt(shap_rate and r["cuda_rows_s"] / shap_rate) + "x"]
        for w in dask_workers:
            eff = r.get(f"dask_{w}_efficiency")
            row.append(_fmt(r.get(f"dask_{w}_rows_s"))
                       + (f" ({100 * eff:.0f}%)" if eff and w > 1 else ""))  # fmt: skip
        diffs = [r.get(k) for k in ("cpu_diff_vs_shap", "cuda_diff_vs_shap", "cpu_diff_vs_woodelf")]
        row.append(", ".join(f"{d:.1e}" for d in diffs if d is not None) or "-")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="interventional SHAP: distshap vs shap")
    parser.add_argument("--shape", default="cal_housing-med")
    parser.add_argument(
        "--model-output",
        default="raw",
        choices=["raw", "probability", "log_loss"],
        help="probability, log_loss: a binary shape (adult-*; log_loss with its 0/1 labels)",
    )
    parser.add_argument("--backgrounds", default="100,1000", help="background sizes")
    parser.add_argument("--rows", type=int, default=100_000, help="rows of the CUDA run")
    parser.add_argument(
        "--cpu-rows", type=int, help="rows of the distshap CPU run (default: --rows, 2,000 on GPU)"
    )
    parser.add_argument("--shap-rows", type=int, default=200, help="rows of the shap run")
    parser.add_argument("--backend", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--dask-workers", help="worker counts (default 1,2 GPUs; none on CPU)")
    parser.add_argument(
        "--dask-rows", type=int, help="rows per worker of the Dask runs (GPU default 2M)"
    )
    parser.add_argument("--woodelf-rows", type=int, default=0,
                        help="rows of the WOODELF run (raw output; 0: none)")  # fmt: skip
    parser.add_argument(
        "--threads", type=int, help="threads of distshap (DISTSHAP_NUM_THREADS) and WOODELF's pools"
    )
    parser.add_argument("--chunks-per-worker", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", help="append JSON lines of the records to this file")
    args = parser.parse_args(argv)
    if args.threads:
        os.environ["DISTSHAP_NUM_THREADS"] = str(args.threads)
    if args.backend == "auto":
        from distshap.kernels import cuda_available

        args.backend = "cuda" if cuda_available() else "cpu"
    gpu = args.backend == "cuda"
    if args.dask_workers is None:
        workers = [1, 2] if gpu else []
        if gpu:
            from numba import cuda

            workers = [w for w in workers if w <= len(cuda.gpus)]
    else:
        workers = [int(w) for w in args.dask_workers.split(",") if w]
    if args.model_output == "log_loss" and workers:
        parser.error("--model-output log_loss runs without Dask: pass --dask-workers=")
    cpu_rows = args.cpu_rows or (min(args.rows, 2_000) if gpu else args.rows)
    records = []
    for b in (int(v) for v in args.backgrounds.split(",") if v):
        rec = measure(args.shape, b, args.rows, cpu_rows, args.shap_rows, args.backend,
                      args.repeats, workers, args.chunks_per_worker, args.dask_rows,
                      args.model_output, args.woodelf_rows, args.threads)  # fmt: skip
        records.append(rec)
        print(json.dumps(rec), flush=True)
        if args.json:
            with open(args.json, "a") as fh:
                fh.write(json.dumps(rec) + "\n")
    device = "GPU" if gpu else f"{args.threads or os.cpu_count()} CPU threads"
    print(
        f"\n{args.shape}, interventional SHAP values ({args.model_output}), {device}; "
        "shap runs on one thread"
    )
    print(table(records, args.backend, workers))


if __name__ == "__main__":
    main()
