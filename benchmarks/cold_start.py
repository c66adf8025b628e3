"""Cold start: import, explainer build, first call and warm call, in a fresh process.

Each measurement runs in a new Python process whose ``NUMBA_CACHE_DIR`` is an empty temporary
directory (a fresh environment: nothing compiled yet), then once more in a new process on the
cache the first one filled (what a second session pays). The child process times

* ``import``: ``import distshap``;
* ``build``: :class:`distshap.TreeExplainer` on the saved model file, split into its stages
  (``load`` the file, ``encode``, ``paths`` extraction, ``margin`` arrays and ``packed``: bin
  packing and the packed model, with ``packing`` the packing algorithm alone from
  ``packed.stats``; Numba compilation falls into the stage that triggers it);
* ``first``: the first ``shap_values`` call (compilation, tables, additivity check included),
  ``warm``: the median of ``--repeats`` later calls; then the same for
  ``shap_interaction_values`` (``--kinds``).

``--profile`` adds, per compiled function and signature, the seconds Numba spent compiling it
or loading it from the cache (time inside ``Dispatcher.compile``, nested compilations
subtracted), the way to see where a first call's time goes.

Usage::

    python -m benchmarks.cold_start                                  # cal_housing-med, CPU
    python -m benchmarks.cold_start --profile --kinds shap
    python -m benchmarks.cold_start --backend cuda --shape cal_housing-large   # GPU machine
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

_STAGES = (
    ("load", "load_model"),
    ("encode", "encode_ensemble"),
    ("paths", "extract_paths"),
    ("margin", "margin_model"),
    ("packed", "build_packed_model"),
)


# --------------------------------------------------------------------------------------------
# Child process: the measurement itself
# --------------------------------------------------------------------------------------------


class _CompileProfile:
    """Seconds inside ``Dispatcher.compile`` per (function, signature), nested time excluded."""

    def __init__(self) -> None:
        from numba.core import dispatcher

        self.records: list[dict] = []
        self._stack: list[tuple[float, float]] = []
        original = dispatcher.Dispatcher.compile
        profile = self

        lock = threading.RLock()  # a thread waiting for another's compilation records nothing

        def compile(disp, sig):  # noqa: ANN001 - Numba's own signature
            with lock:
                return timed(disp, sig)

        def timed(disp, sig):  # noqa: ANN001
            before = len(disp.overloads)
            hits = sum(disp._cache_hits.values())
            profile._stack.append((0.0, 0.0))
            t0, c0 = time.perf_counter(), time.process_time()
            try:
                return original(disp, sig)
            finally:
                total, total_cpu = time.perf_counter() - t0, time.process_time() - c0
                nested, nested_cpu = profile._stack.pop()
                if profile._stack:
                    w, c = profile._stack[-1]
                    profile._stack[-1] = (w + total, c + total_cpu)
                if len(disp.overloads) > before:  # a new specialisation: compiled or loaded
                    loaded = sum(disp._cache_hits.values()) > hits
                    profile.records.append({
                        "function": f"{disp.py_func.__module__}.{disp.py_func.__qualname__}",
                        "signature": str(sig)[:120],
                        "how": "cache" if loaded else "compiled",
                        "seconds": round(total - nested, 4),
                        "cpu_seconds": round(total_cpu - nested_cpu, 4),
                    })  # fmt: skip

        dispatcher.Dispatcher.compile = compile


def _timed(module, name: str, sink: dict, key: str) -> None:
    """Wrap ``module.name`` so that its calls add their seconds to ``sink[key]``."""
    original = getattr(module, name)

    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            sink[key] = sink.get(key, 0.0) + time.perf_counter() - t0

    setattr(module, name, wrapper)


def _child(args: argparse.Namespace) -> dict:
    t0 = time.perf_counter()
    import numpy as np  # noqa: F401 - timed apart: every Python program using distshap has it

    t_numpy = time.perf_counter() - t0
    profile = _CompileProfile() if args.profile else None
    t0, c0 = time.perf_counter(), time.process_time()
    import distshap

    t_import, c_import = time.perf_counter() - t0, time.process_time() - c0
    from benchmarks.shapes import make_data
    from distshap import explainer as explainer_module

    name, size = args.shape.rsplit("-", 1)
    X, _ = make_data(name, args.rows, seed=1)
    if args.backend == "cuda":
        import cupy

        X = cupy.asarray(X)
    stages: dict[str, float] = {}
    for key, fn in _STAGES:
        if hasattr(explainer_module, fn):
            _timed(explainer_module, fn, stages, key)
    t0, c0 = time.perf_counter(), time.process_time()
    explainer = distshap.TreeExplainer(args.model, backend=args.backend)
    t_build, c_build = time.perf_counter() - t0, time.process_time() - c0
    stats = explainer.packed.stats
    record = {
        "numpy_import_s": t_numpy,
        "import_s": t_import,
        "build_s": t_build,
        "cpu_s": {"import": c_import, "build": c_build},
        "build_stages_s": {**stages, "packing": stats.get("packing_seconds", float("nan"))},
        "paths": stats.get("paths"),
        "lanes": stats.get("lanes"),
        "kinds": {},
    }

    def sync() -> None:
        if args.backend == "cuda":
            import cupy

            cupy.cuda.Device().synchronize()

    for kind in args.kinds.split(","):
        fn = explainer.shap_values if kind == "shap" else explainer.shap_interaction_values
        rows = X if kind == "shap" else X[: args.interaction_rows]
        n_compiled = len(profile.records) if profile else 0
        t0, c0 = time.perf_counter(), time.process_time()
        fn(rows)
        sync()
        first, first_cpu = time.perf_counter() - t0, time.process_time() - c0
        times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            fn(rows)
            sync()
            times.append(time.perf_counter() - t0)
        record["kinds"][kind] = {
            "rows": int(rows.shape[0]),
            "first_s": first,
            "first_cpu_s": first_cpu,
            "warm_s": statistics.median(times),
            "compiled_in_first_call": len(profile.records) - n_compiled if profile else None,
        }
    if profile:
        record["compile_profile"] = profile.records
    return record


# --------------------------------------------------------------------------------------------
# Parent: fresh processes, fresh caches
# --------------------------------------------------------------------------------------------


def _run_child(args: argparse.Namespace, model: str, cache_dir: str) -> tuple[dict, float]:
    env = dict(os.environ)
    env["NUMBA_CACHE_DIR"] = cache_dir
    env["NUMBA_NUM_THREADS"] = str(args.threads)
    env["OMP_NUM_THREADS"] = str(args.threads)
    cmd = [
        sys.executable, "-m", "benchmarks.cold_start", "--child", "--model", model,
        "--shape", args.shape, "--rows", str(args.rows), "--backend", args.backend,
        "--kinds", args.kinds, "--repeats", str(args.repeats),
        "--interaction-rows", str(args.interaction_rows),
    ] + (["--profile"] if args.profile else [])  # fmt: skip
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=root, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"child failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1]), wall


def _summary(label: str, rec: dict, wall: float) -> str:
    st = rec["build_stages_s"]
    stages = ", ".join(f"{k} {v:.2f}" for k, v in st.items())
    lines = [
        f"[{label}] process wall {wall:.2f} s; import distshap {rec['import_s']:.2f} s "
        f"(numpy {rec['numpy_import_s']:.2f}); build {rec['build_s']:.2f} s ({stages}; "
        f"CPU {rec['cpu_s']['build']:.2f} s); {rec['paths']} paths, {rec['lanes']} lanes"
    ]
    for kind, k in rec["kinds"].items():
        to_first = rec["import_s"] + rec["build_s"] + k["first_s"]
        compiled = k["compiled_in_first_call"]
        extra = f", {compiled} specialisations in the first call" if compiled is not None else ""
        lines.append(
            f"  {kind:12s} {k['rows']:6d} rows: first call {k['first_s']:.2f} s (CPU "
            f"{k['first_cpu_s']:.2f} s), warm "
            f"{k['warm_s']:.3f} s; import + build + first = {to_first:.2f} s{extra}"
        )
    return "\n".join(lines)


def _profile_table(records: list[dict], top: int) -> str:
    by_fn: dict[str, list] = {}
    for r in records:
        by_fn.setdefault(r["function"], []).append(r)
    rows = sorted(by_fn.items(), key=lambda kv: -sum(r["seconds"] for r in kv[1]))
    out = [f"  {'wall s':>8s} {'CPU s':>8s} {'specs':>5s}  function (how)"]
    for fn, recs in rows[:top]:
        how = ",".join(sorted({r["how"] for r in recs}))
        wall, cpu = (sum(r[key] for r in recs) for key in ("seconds", "cpu_seconds"))
        out.append(f"  {wall:8.3f} {cpu:8.3f} {len(recs):5d}  {fn} ({how})")
    wall, cpu = (sum(r[key] for r in records) for key in ("seconds", "cpu_seconds"))
    out.append(f"  {wall:8.3f} {cpu:8.3f} {len(records):5d}  total")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default=None, help="name-size from benchmarks.shapes")
    parser.add_argument("--rows", type=int, default=1000, help="rows explained (SHAP)")
    parser.add_argument("--interaction-rows", type=int, default=200)
    parser.add_argument("--backend", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--kinds", default="shap,interactions")
    parser.add_argument("--threads", type=int, default=2, help="NUMBA_NUM_THREADS of the child")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="per-function compile seconds")
    parser.add_argument("--top", type=int, default=25, help="functions listed by --profile")
    parser.add_argument("--json", help="write the records to this file")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.shape is None:
        args.shape = "cal_housing-large" if args.backend == "cuda" else "cal_housing-med"
    if args.child:
        print(json.dumps(_child(args)), flush=True)
        return

    from benchmarks.shapes import model_path, train_model

    name, size = args.shape.rsplit("-", 1)
    train_model(name, size, verbose=True)  # trained and saved once, outside the timings
    model = str(model_path(name, size))
    results = {}
    with tempfile.TemporaryDirectory(prefix="distshap-numba-") as cache_dir:
        for label in ("fresh cache", "filled cache"):
            rec, wall = _run_child(args, model, cache_dir)
            results[label] = rec
            print(_summary(label, rec, wall), flush=True)
            if args.profile:
                print(_profile_table(rec["compile_profile"], args.top), flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"shape": args.shape, "backend": args.backend, **results}, fh, indent=1)


if __name__ == "__main__":
    main()
