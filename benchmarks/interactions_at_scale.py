"""Interactions at scale: pair rankings and per-row top pairs against full matrices.

One run, one model shape (default ``fashion_mnist-med`` from :mod:`benchmarks.shapes`), side by
side:

* **ranking** - :func:`distshap.pair_interactions.interaction_summary` over ``--rows`` rows (one
  streaming pass; seconds, peak memory at a quarter of the rows and at all of them);
* **top-k** - :func:`distshap.pair_interactions.top_interactions` (``--k`` pairs a row and
  group) on ``--topk-rows`` rows: rows/s and peak memory;
* **distshap full + sort** - :meth:`TreeExplainer.shap_interaction_values` in batches of
  ``--full-batch`` rows, then each row's ``k`` largest ``|phi_ij|`` of the upper triangle
  (``argpartition``, then a sort of the ``k``), on ``--full-rows`` rows;
* **XGBoost + sort** - ``Booster.predict(pred_interactions=True)`` (``device="cuda"`` with
  ``--backend cuda``) and the same selection on the host, on ``--xgb-rows`` rows;
* **ratios** of top-k rows/s to both;
* **exactness** on the first ``--check-rows`` rows: top-k equal to a stable sort of the full
  matrix (pairs and value bits), the summary against the mean of the full matrices;
* **complexity**: slots per row ``S`` (pairs sharing a path, and diagonals) against the
  ``G (F+1)**2`` entries of the full matrices, bytes a row of each output.
* **breakdown** (``--breakdown``, CUDA): seconds of each slot kernel (tables, quadrature,
  fallback, top-k selection) over the top-k rows, each launch synchronized.

Every timing is the median of ``--repeats`` runs after a warm-up call (compilation, model
upload, tables, slots); GPU work is synchronized before the clock stops. Peak memory: device
bytes of CuPy's memory pool above what it held before the call (accumulators, outputs; the
model's arrays are Numba's and are reported apart) with ``--backend cuda``, host bytes traced by
``tracemalloc`` (NumPy outputs and batches) on CPU.

Usage::

    python -m benchmarks.interactions_at_scale --backend cuda            # 100k rows, H200
    python -m benchmarks.interactions_at_scale --backend cuda --breakdown  # + kernel seconds
    python -m benchmarks.interactions_at_scale --backend cpu --rows 64 --topk-rows 64 \\
        --full-rows 8 --xgb-rows 2 --check-rows 4 --repeats 1           # a quick CPU run
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import tracemalloc

import numpy as np

from benchmarks.shapes import make_data, train_model
from distshap import TreeExplainer
from distshap import pair_interactions as pi
from distshap.pair_slots import pair_slots

#: Defaults by backend: ranking rows, top-k rows, full-matrix rows, XGBoost rows, check rows.
DEFAULT_ROWS = {
    "cuda": dict(rows=100_000, topk_rows=100_000, full_rows=1_000, xgb_rows=100, check_rows=20),
    "cpu": dict(rows=256, topk_rows=256, full_rows=16, xgb_rows=4, check_rows=8),
}


def _xp(backend: str):
    if backend == "cuda":
        import cupy

        return cupy
    return np


def _sync(backend: str) -> None:
    if backend == "cuda":
        import cupy

        cupy.cuda.Device().synchronize()


def _host(a) -> np.ndarray:
    return a.get() if hasattr(a, "get") else np.asarray(a)


def _timed(fn, repeats: int, backend: str) -> tuple[float, object]:
    """Median seconds of ``repeats`` calls of ``fn`` (after no warm-up: callers warm up)."""
    times, out = [], None
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        out = fn()
        _sync(backend)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def _peak_bytes(fn, backend: str) -> int:
    """Peak bytes ``fn`` allocates (module docstring: CuPy pool on GPU, tracemalloc on CPU)."""
    if backend == "cuda":
        import cupy

        pool = cupy.get_default_memory_pool()
        _sync(backend)
        pool.free_all_blocks()
        before = pool.total_bytes()
        fn()
        _sync(backend)
        return int(pool.total_bytes() - before)
    tracemalloc.start()
    try:
        fn()
        return int(tracemalloc.get_traced_memory()[1])
    finally:
        tracemalloc.stop()


def select_top(xp, full, k: int) -> tuple:
    """``k`` largest ``|phi_ij|`` (``i < j < F``) of each row and group of full matrices ``(n,
    G, F+1, F+1)``: argpartition, then the ``k`` sorted by ``|value|`` descending, ties by
    ``(i, j)`` (a tie across the partition boundary may pick another pair: timing only)."""
    n, G, F1, _ = full.shape
    iu, ju = np.triu_indices(F1 - 1, 1)
    flat = xp.asarray(iu * F1 + ju)
    upper = full.reshape(n, G, F1 * F1)[:, :, flat]
    key = -xp.abs(upper)
    part = xp.argpartition(key, k - 1, axis=-1)[..., :k]
    # index order (the stable sort below then breaks ties by (i, j)); CuPy sorts contiguous
    # arrays only
    part = xp.sort(xp.ascontiguousarray(part), axis=-1)
    order = xp.argsort(xp.take_along_axis(key, part, axis=-1), axis=-1, kind="stable")
    idx = xp.take_along_axis(part, order, axis=-1)
    values = xp.take_along_axis(upper, idx, axis=-1)
    pairs = xp.stack([xp.asarray(iu)[idx], xp.asarray(ju)[idx]], axis=-1)
    return pairs, values


def stable_top(full: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The exact reference: a stable sort of each row's whole upper triangle."""
    n, G, F1, _ = full.shape
    iu, ju = np.triu_indices(F1 - 1, 1)
    upper = full.reshape(n, G, F1 * F1)[:, :, iu * F1 + ju]
    idx = np.argsort(-np.abs(upper.astype(np.float64)), axis=-1, kind="stable")[..., :k]
    return np.stack([iu[idx], ju[idx]], axis=-1), np.take_along_axis(upper, idx, axis=-1)


def kernel_breakdown(packed, X, k: int) -> dict:
    """Seconds of each slot kernel over the rows of ``X`` (CUDA; module docstring), in the
    batches :func:`distshap.kernels.cuda.launch.run_slot_batches` uses: ``tables``,
    ``quadrature``, ``fallback``, ``topk``."""
    from distshap.kernels.cuda import launch
    from distshap.kernels.cuda import pairs as kp
    from distshap.kernels.cuda.fallback import launch_fallback
    from distshap.kernels.cuda.runtime.device import SIM, stream, xp
    from distshap.kernels.cuda.runtime.model import device_model, interaction_plan, slot_arrays
    from distshap.kernels.cuda.slot_quadrature import launch_slot_quadrature
    from distshap.kernels.cuda.tables import launch_tables

    model = device_model(packed)
    plan = interaction_plan(packed, model)
    slots = pair_slots(packed)
    dev = slot_arrays(packed, model, slots, plan)
    X = launch.device_rows(X, packed.num_features)
    n, width = int(X.shape[0]), max(1, dev.num_slots)
    batch = min(n, 65535, launch.default_batch_rows(width))
    scale = 2.0**model.interaction_shift
    F1 = packed.num_features + 1
    G = packed.num_groups
    s = stream()
    acc = xp().zeros((batch, width), np.int64)
    pairs = xp().zeros((batch, G, k, 2), np.int32)
    values = xp().zeros((batch, G, k), np.float32)
    sync = (lambda: None) if SIM else (lambda: _sync("cuda"))
    threads = kp.topk_threads(k)
    out = {"tables": 0.0, "quadrature": 0.0, "fallback": 0.0, "topk": 0.0, "batch_rows": batch}

    def timed(key, fn, *fn_args, **kwargs):
        sync()
        t0 = time.perf_counter()
        fn(*fn_args, **kwargs)
        sync()
        out[key] += time.perf_counter() - t0

    # warm-up: compile, gather the layouts
    launch_tables(model, plan, X[:2], acc[:2], scale, F1, s, slots=dev)
    launch_slot_quadrature(model, plan, X[:2], acc[:2], scale, s, dev)
    acc.fill(0)
    for r0 in range(0, n, batch):
        Xb = X[r0 : min(n, r0 + batch)]
        nb = int(Xb.shape[0])
        a = acc[:nb]
        timed("tables", launch_tables, model, plan, Xb, a, scale, F1, s, slots=dev)
        timed("quadrature", launch_slot_quadrature, model, plan, Xb, a, scale, s, dev)
        timed("fallback", launch_fallback, model, Xb, a, scale, F1, s, True, slots=dev)
        if threads:
            timed("topk", kp.topk_kernel[(nb, G), threads, s, 16 * threads * k], a,
                  dev.group_slots, dev.num_pairs, dev.slot_i, dev.slot_j, 1.0 / scale, scale,
                  k, packed.num_features, pairs, values, 0)  # fmt: skip
        else:
            a.fill(0)
    out["rows"] = n
    return out


def run(args: argparse.Namespace) -> dict:
    """All measurements of one shape; returns the record printed and saved."""
    import xgboost as xgb

    backend = args.backend
    xp = _xp(backend)
    name, size = args.shape.rsplit("-", 1)
    booster = train_model(name, size)
    need = max(args.rows, args.topk_rows, args.full_rows, args.xgb_rows, args.check_rows)
    X_host, _ = make_data(name, need, seed=1)
    X = xp.asarray(X_host)
    t0 = time.perf_counter()
    explainer = TreeExplainer(booster, layout="xgboost", backend=backend)
    packed = explainer.packed
    t_prep = time.perf_counter() - t0
    t0 = time.perf_counter()
    slots = pair_slots(packed)
    t_slots = time.perf_counter() - t0
    G, F = packed.num_groups, packed.num_features
    k = args.k
    rec: dict = {
        "shape": args.shape, "backend": backend, "k": k, "paths": packed.num_paths,
        "features": F, "groups": G, "preprocess_s": t_prep, "slots_build_s": t_slots,
    }  # fmt: skip

    # warm-up: compilation, model upload, tables, slots
    t0 = time.perf_counter()
    pi.interaction_summary(packed, X[:8], backend=backend)
    pi.top_interactions(packed, X[:8], k, backend)
    explainer.shap_interaction_values(X[:2])
    _sync(backend)
    rec["warmup_s"] = time.perf_counter() - t0

    # exactness on the first rows
    m = args.check_rows
    full = _host(explainer.shap_interaction_values(X[:m])).reshape(m, G, F + 1, F + 1)
    pairs, values = (_host(a) for a in pi.top_interactions(packed, X[:m], k, backend))
    want_pairs, want_values = stable_top(full, k)
    rec["topk_exact"] = bool(
        np.array_equal(pairs, want_pairs)
        and np.array_equal(values.view(np.uint32), want_values.view(np.uint32))
    )
    summary = pi.interaction_summary(packed, X[:m], backend=backend)
    ref = np.abs(full.astype(np.float64)).mean(axis=0)
    nz = ref != 0
    rec["summary_max_rel_err"] = float((np.abs(summary - ref)[nz] / ref[nz]).max())
    del full

    # ranking: one streaming pass over args.rows rows
    n = args.rows
    rec["ranking_rows"] = n
    rec["ranking_s"], summary = _timed(
        lambda: pi.interaction_summary(packed, X[:n], backend=backend), args.repeats, backend
    )
    rec["ranking_rows_s"] = n / rec["ranking_s"]
    rec["ranking_peak_bytes_quarter"] = _peak_bytes(
        lambda: pi.interaction_summary(packed, X[: max(1, n // 4)], backend=backend), backend
    )
    rec["ranking_peak_bytes"] = _peak_bytes(
        lambda: pi.interaction_summary(packed, X[:n], backend=backend), backend
    )
    top = pi.top_pairs(summary, 5, explainer.output_feature_names())
    top = top.iloc[np.lexsort((top.index, -np.abs(top["value"].to_numpy())))[:5]]  # overall
    rec["top_pairs"] = top.to_dict(orient="records")

    # per-row top-k
    n = args.topk_rows
    rec["topk_rows"] = n
    seconds, _ = _timed(lambda: pi.top_interactions(packed, X[:n], k, backend), args.repeats,
                        backend)  # fmt: skip
    rec["topk_rows_s"] = n / seconds
    rec["topk_peak_bytes"] = _peak_bytes(
        lambda: pi.top_interactions(packed, X[:n], k, backend), backend
    )

    # distshap full matrices + sort, in batches
    n, batch = args.full_rows, args.full_batch

    def full_and_sort():
        for r0 in range(0, n, batch):
            rows = X[r0 : min(n, r0 + batch)]
            out = explainer.shap_interaction_values(rows).reshape(len(rows), G, F + 1, F + 1)
            select_top(xp, out, k)
            del out

    seconds, _ = _timed(full_and_sort, args.repeats, backend)
    rec["full_rows"] = n
    rec["full_sort_rows_s"] = n / seconds
    rec["full_peak_bytes"] = _peak_bytes(full_and_sort, backend)

    if args.breakdown and backend == "cuda":
        rec["breakdown"] = kernel_breakdown(packed, X[: args.topk_rows], k)

    # XGBoost pred_interactions + sort (on the host: predict returns NumPy)
    n = args.xgb_rows
    if n > 0:
        if backend == "cuda":
            booster.set_param({"device": "cuda"})
            dm = xgb.DMatrix(X[:n])
        else:
            booster.set_param({"device": "cpu", "nthread": os.cpu_count()})
            dm = xgb.DMatrix(X_host[:n])
        booster.predict(dm, pred_interactions=True)  # warm-up

        def xgb_and_sort():
            out = booster.predict(dm, pred_interactions=True).reshape(n, G, F + 1, F + 1)
            select_top(np, out, k)

        seconds, _ = _timed(xgb_and_sort, args.repeats, backend)
        booster.set_param({"device": "cpu"})
        rec["xgb_rows"] = n
        rec["xgb_sort_rows_s"] = n / seconds
        rec["topk_vs_xgb"] = rec["topk_rows_s"] / rec["xgb_sort_rows_s"]
    rec["topk_vs_full"] = rec["topk_rows_s"] / rec["full_sort_rows_s"]

    # complexity
    k_path = np.diff(packed.path_offsets) - 1
    rec.update(
        slots=slots.num_slots, pair_slots=slots.total_pairs,
        diagonal_slots=slots.num_slots - slots.total_pairs, matrix_entries=slots.matrix_entries,
        slots_vs_matrix=slots.matrix_entries / max(1, slots.num_slots),
        slot_map_bytes=int(slots.path_map.nbytes), path_pairs=int((k_path * k_path).sum()),
        full_bytes_per_row=4 * slots.matrix_entries, topk_bytes_per_row=12 * G * k,
        summary_bytes=8 * slots.matrix_entries,
    )  # fmt: skip
    return rec


def _mb(b: float) -> str:
    return f"{b / 2**20:,.1f} MiB"


def report(rec: dict) -> str:
    """The human-readable lines of a record."""
    lines = [
        f"{rec['shape']} ({rec['backend']}): {rec['paths']:,} paths, {rec['features']} "
        f"features, {rec['groups']} group(s); k = {rec['k']}",
        f"complexity: {rec['slots']:,} slots a row ({rec['pair_slots']:,} pairs sharing a path "
        f"+ {rec['diagonal_slots']:,} diagonals) vs G (F+1)^2 = {rec['matrix_entries']:,} "
        f"matrix entries ({rec['slots_vs_matrix']:,.0f}x fewer); path work sum k^2 = "
        f"{rec['path_pairs']:,} element pairs a row, the same for both; slot map "
        f"{_mb(rec['slot_map_bytes'])}",
        f"bytes a row: full matrices {_mb(rec['full_bytes_per_row'])}, top-k "
        f"{rec['topk_bytes_per_row']:,} B; summary {_mb(rec['summary_bytes'])} once",
        f"ranking ({rec['ranking_rows']:,} rows): {rec['ranking_s']:.2f} s "
        f"({rec['ranking_rows_s']:,.0f} rows/s); peak {_mb(rec['ranking_peak_bytes'])} "
        f"({_mb(rec['ranking_peak_bytes_quarter'])} at a quarter of the rows)",
        f"top-{rec['k']} ({rec['topk_rows']:,} rows): {rec['topk_rows_s']:,.0f} rows/s; peak "
        f"{_mb(rec['topk_peak_bytes'])}",
        f"distshap full + sort ({rec['full_rows']:,} rows): {rec['full_sort_rows_s']:,.1f} "
        f"rows/s; peak {_mb(rec['full_peak_bytes'])} -> top-k is {rec['topk_vs_full']:,.1f}x",
    ]
    if "xgb_rows" in rec:
        lines.append(
            f"XGBoost pred_interactions + sort ({rec['xgb_rows']:,} rows): "
            f"{rec['xgb_sort_rows_s']:,.2f} rows/s -> top-k is {rec['topk_vs_xgb']:,.0f}x"
        )
    if "breakdown" in rec:
        b = rec["breakdown"]
        lines.append(
            f"breakdown ({b['rows']:,} rows, batches of {b['batch_rows']:,}): "
            + ", ".join(
                f"{key} {v:.3f} s" for key, v in b.items() if key not in ("rows", "batch_rows")
            )  # fmt: skip
        )
    lines.append(
        f"exact: top-k equals the full matrices' stable sort: {rec['topk_exact']}; summary max "
        f"relative error {rec['summary_max_rel_err']:.1e}"
    )
    lines.append("strongest pairs: " + ", ".join(
        f"({p['feature_i']}, {p['feature_j']}{', class ' + str(p['group']) if 'group' in p else ''}"
        f") {p['value']:.3g}" for p in rec["top_pairs"]))  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="fashion_mnist-med")
    parser.add_argument("--backend", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--rows", type=int, help="ranking rows (cuda 100k, cpu 256)")
    parser.add_argument("--topk-rows", type=int, help="top-k rows (cuda 100k, cpu 256)")
    parser.add_argument("--full-rows", type=int, help="full matrix + sort rows (1000 / 16)")
    parser.add_argument("--full-batch", type=int, default=100, help="rows per full-matrix batch")
    parser.add_argument("--xgb-rows", type=int, help="XGBoost rows (100 / 4; 0: skip)")
    parser.add_argument("--check-rows", type=int, help="rows of the exactness check (20 / 8)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="CUDA: seconds of each slot kernel over the top-k rows",
    )
    parser.add_argument(
        "--table-budget-mib",
        type=int,
        help="CUDA: interaction table budget in MiB (interaction_table_budget_bytes; "
        "it sets the plan, hence the bits, of top-k and full matrices alike; models of more "
        "than 77 features get no interaction tables whatever the budget)",
    )
    parser.add_argument("--json", help="append the record as a JSON line to this file")
    args = parser.parse_args(argv)
    if args.table_budget_mib is not None:
        from distshap.plan.config import set_config

        set_config(interaction_table_budget_bytes=int(args.table_budget_mib) << 20)
    if args.backend == "auto":
        from distshap.kernels import cuda_available

        args.backend = "cuda" if cuda_available() else "cpu"
    for key, value in DEFAULT_ROWS[args.backend].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    rec = run(args)
    print(report(rec), flush=True)
    if args.json:
        with open(args.json, "a") as fh:
            fh.write(json.dumps(rec, default=str) + "\n")
    return rec


if __name__ == "__main__":
    main()
