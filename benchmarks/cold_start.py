"""Cold start: import, explainer build, first call and warm call, in a fresh process.

Each measurement runs in a new Python process whose ``NUMBA_CACHE_DIR`` is an empty temporary
directory (a fresh environment: nothing compiled yet), then once more in a new process on the
cache the first one filled (what every later run pays); each kind (``--kinds``) in its own
pair of processes and cache, as a new user's first call, unless ``--together``. The child
process times

* ``import``: ``import distshap``;
* ``build``: :class:`distshap.TreeExplainer` on the saved model file, split into its stages
  (``load`` the file, ``encode``, ``margin`` arrays and ``packed``: paths and packed model, by
  :func:`distshap.packed.pack_ensemble`), ``packed`` split further into ``paths`` (the NumPy
  path extraction of models of usual size) or ``walk`` and ``lanes`` (the compiled walk's
  counting pass, and its second pass writing the packed lanes, for large models), ``packing``
  (the packing algorithm alone, from ``packed.stats``) and ``digest``; ``file key`` and
  ``saved build`` (a large model file's saved build, :mod:`distshap.build_cache`: hashing the
  file, and mapping back and checking the saved ensemble and packed model; a fresh cache
  directory has none, a filled one both); Numba compilation falls into the stage that
  triggers it; its CPU seconds, of them the kernel's (``system``: mapping
  fresh memory pages, among others), and the process's peak memory;
* ``first``: the first ``shap_values`` call (compilation, tables, additivity check included),
  split into ``compile`` (seconds inside Numba's ``Dispatcher.compile``: compiling, or loading
  from the disk cache) and the rest; ``warm``: the median of ``--repeats`` later calls; then
  the same for ``shap_interaction_values`` and for interventional SHAP values (``--kinds``;
  ``interventional`` builds a second explainer over ``--background-rows`` rows, its build
  timed apart as ``background build``, and explains the rows of ``--rows``).

``--profile`` adds, per compiled function and signature, the seconds Numba spent compiling it
or loading it from the cache (time inside ``Dispatcher.compile``, nested compilations
subtracted), the way to see where a first call's time goes. The child's stderr (the one-line
compile notices of :mod:`distshap.compile_cache`) is printed under its summary.

With ``--backend cuda`` the first call is split too: ``cuda import`` (importing the CUDA
backend, timed before the build), ``device model`` (the packed model's device arrays: host
lane columns and copies; with a GPU preparation, mostly the wait for it), ``cuda compile``
(seconds inside the CUDA dispatchers' ``compile``, with how many kernels were compiled and how
many loaded from Numba's disk cache: the CUDA kernels are ``cuda.jit(cache=True)``, so the
filled-cache run should load every one) and ``margin`` (the additivity check's traversal), each
in the main thread; and the GPU preparation the explainer ran in background threads while it was
built (:mod:`distshap.kernels.prepare`): each stage's seconds in its thread, and the seconds the
first call ``waited`` for it. ``packing`` is the packing's
own seconds when the model was packed here, left out when its saved build was mapped back. After
each run the parent counts the index files in the Numba cache directory (CPU and CUDA
functions), the disk cache's state.

Each SHAP run also prints one ``end to end`` line: import, ``load``, the rest of the build,
the first call, and the compile seconds inside the build and inside the first call apart (with
the seconds waited for helper processes compiling ahead, :func:`distshap.warmup.start_ahead`;
``--ahead-processes 6,0`` runs every measurement with six helpers and with none; ``--prepare
on,off`` with the explainer's GPU preparation and without it). Then, unless
``--no-peer``, XGBoost's own cold start on the same file and rows in a fresh process: ``import
xgboost``, ``Booster.load_model`` and the first ``predict(pred_contribs=True)`` (on the GPU
with ``--backend cuda``). ``--model-file`` measures a saved model other than the shape's.

Usage::

    python -m benchmarks.cold_start                                  # cal_housing-med, CPU
    python -m benchmarks.cold_start --kinds interventional --background-rows 100
    python -m benchmarks.cold_start --profile --kinds shap
    python -m benchmarks.cold_start --backend cuda --kinds shap      # GPU: cal_housing-large
    python -m benchmarks.cold_start --backend cuda --kinds shap --rows 10000 --ahead-processes 6,0
    python -m benchmarks.cold_start --backend cuda --kinds shap --rows 10000 --prepare on,off
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from benchmarks.cold_start_report import (
    cache_index_files,
    peer_summary,
    profile_table,
    summary,
)

_STAGES = (
    ("load", "load_model"),
    ("encode", "encode_ensemble"),
    ("margin", "margin_model"),
    ("packed", "pack_ensemble"),
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
    """Wrap ``module.name`` so that its calls in the main thread add their seconds to
    ``sink[key]`` (not the GPU preparation's threads: their stages are timed apart)."""
    original = getattr(module, name)

    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            if threading.current_thread() is threading.main_thread():
                sink[key] = sink.get(key, 0.0) + time.perf_counter() - t0

    setattr(module, name, wrapper)


def _timed_everywhere(module, name: str, sink: dict, key: str) -> None:
    """Like :func:`_timed`, also where other distshap modules imported ``module.name``."""
    original = getattr(module, name)
    _timed(module, name, sink, key)
    wrapper = getattr(module, name)
    for mod in list(sys.modules.values()):
        if (
            getattr(mod, "__name__", "").startswith("distshap")
            and getattr(mod, name, None) is original
        ):
            setattr(mod, name, wrapper)


def _cuda_compile_profile(sink: dict) -> None:
    """Seconds inside the CUDA dispatchers' ``compile`` in the main thread
    (``sink["cuda_compile"]``), and how many kernels it compiled (``cuda_compiled``) or loaded
    from the disk cache (``cuda_cached``)."""
    from numba.cuda.dispatcher import CUDADispatcher

    original = CUDADispatcher.compile

    def compile(disp, sig):  # noqa: ANN001 - Numba's own signature
        hits = sum(disp._cache_hits.values())
        before = len(disp.overloads)
        t0 = time.perf_counter()
        try:
            return original(disp, sig)
        finally:  # the main thread's (the GPU preparation's are in its stages' seconds)
            if threading.current_thread() is threading.main_thread():
                sink["cuda_compile"] = sink.get("cuda_compile", 0.0) + time.perf_counter() - t0
                if len(disp.overloads) > before:
                    cached = sum(disp._cache_hits.values()) > hits
                    how = "cuda_cached" if cached else "cuda_compiled"
                    sink[how] = sink.get(how, 0) + 1

    CUDADispatcher.compile = compile


def _captured(module, name: str) -> list:
    """Wrap ``module.name`` so that the values it returns are kept (the returned list)."""
    kept, original = [], getattr(module, name)

    def wrapper(*args, **kwargs):
        kept.append(original(*args, **kwargs))
        return kept[-1]

    setattr(module, name, wrapper)
    return kept


def _usage() -> tuple[float, float]:
    """CPU seconds this process spent in the kernel (mapping fresh pages among them) and its
    peak resident memory so far, MB (zeros where unknown)."""
    try:
        import resource
    except ImportError:  # not POSIX
        return 0.0, 0.0
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_stime, use.ru_maxrss / ((1 << 20) if sys.platform == "darwin" else 1024)


def _child(args: argparse.Namespace) -> dict:
    t0 = time.perf_counter()
    import numpy as np  # timed apart: every Python program using distshap has it

    t_numpy = time.perf_counter() - t0
    profile = _CompileProfile()
    t0, c0 = time.perf_counter(), time.process_time()
    import distshap

    t_import, c_import = time.perf_counter() - t0, time.process_time() - c0
    if args.ahead_processes is not None:
        distshap.set_config(compile_ahead_processes=int(args.ahead_processes))
    from benchmarks.shapes import make_data
    from distshap import explainer as explainer_module

    name, size = args.shape.rsplit("-", 1)
    X, _ = make_data(name, args.rows, seed=1)
    first_stages: dict[str, float] = {}
    t_cuda_import = 0.0
    if args.backend == "cuda":
        import cupy

        X = cupy.asarray(X)
        cupy.cuda.Device().synchronize()
        t0 = time.perf_counter()
        import distshap.kernels.cuda.runtime.model as cuda_model
        from distshap.kernels import margin

        t_cuda_import = time.perf_counter() - t0
        _timed_everywhere(cuda_model, "device_model", first_stages, "device_model")
        _timed_everywhere(margin, "predict_margin", first_stages, "margin")
        _cuda_compile_profile(first_stages)
    from distshap import build_cache, warmup
    from distshap import packed as packed_module
    from distshap import paths as paths_module
    from distshap.path_walk import PathWalk

    stages: dict[str, float] = {}
    for key, fn in _STAGES:
        for module in (explainer_module, warmup):  # the explainer loads through warmup
            if hasattr(module, fn):
                _timed(module, fn, stages, key)
    parts: dict[str, float] = {}  # inside "packed"
    _timed(paths_module, "extract_paths", parts, "paths")
    _timed(paths_module, "walk_paths", parts, "walk")
    _timed(PathWalk, "fill", parts, "lanes")
    _timed(packed_module, "_digest", parts, "digest")
    _timed(build_cache, "file_key", parts, "file key")
    _timed(build_cache, "load", parts, "saved build")
    if args.prepare == "off":  # the explainer as without the GPU preparation
        distshap.kernels.prepare.start = lambda *a, **k: distshap.kernels.prepare.Preparation()
    preparations = _captured(distshap.kernels.prepare, "start")
    packings = _captured(packed_module, "_pack")  # packed here, not mapped back
    n_before_build = len(profile.records)
    t0, c0, sys0 = time.perf_counter(), time.process_time(), _usage()[0]
    explainer = distshap.TreeExplainer(args.model, layout="xgboost", backend=args.backend)
    t_build, c_build = time.perf_counter() - t0, time.process_time() - c0
    sys_build, peak_mb = _usage()[0] - sys0, _usage()[1]
    stats = explainer.packed.stats
    record = {
        "numpy_import_s": t_numpy,
        "import_s": t_import,
        "build_s": t_build,
        "build_compile_s": sum(r["seconds"] for r in profile.records[n_before_build:]),
        "ahead_helpers": _ahead_state(),
        "cpu_s": {"import": c_import, "build": c_build, "build_system": sys_build},
        "max_rss_mb": peak_mb,
        "cuda_import_s": t_cuda_import,
        "build_stages_s": {
            **stages,
            **parts,
            **({"packing": stats.get("packing_seconds", 0.0)} if packings else {}),
        },
        "paths": stats.get("paths"),
        "lanes": stats.get("lanes"),
        "kinds": {},
    }

    def sync() -> None:
        if args.backend == "cuda":
            import cupy

            cupy.cuda.Device().synchronize()

    for kind in args.kinds.split(","):
        fn, rows = _call(args, explainer, kind, X, record)
        n_compiled = len(profile.records)
        first_stages.clear()
        t0, c0 = time.perf_counter(), time.process_time()
        values = fn(rows)
        sync()
        first, first_cpu = time.perf_counter() - t0, time.process_time() - c0
        first_split = dict(first_stages)
        if preparations and preparations[0].active:
            first_split["prepare_waited"] = distshap.kernels.prepare.waited()
            first_split["prepare_stages"] = dict(preparations[0].seconds)
            first_split["prepare_error"] = repr(preparations[0].error)
        host = values.get() if hasattr(values, "get") else np.asarray(values)
        values_sha = hashlib.sha256(np.ascontiguousarray(host).tobytes()).hexdigest()[:16]
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
            "compile_s": sum(r["seconds"] for r in profile.records[n_compiled:]),
            "warm_s": statistics.median(times),
            "compiled_in_first_call": len(profile.records) - n_compiled,
            "first_stages_s": first_split,
            "values_sha256": values_sha,
        }
    from distshap.compile_cache import ahead_waits

    record["ahead_wait_s"] = ahead_waits()
    if args.profile:
        record["compile_profile"] = profile.records
    return record


def _ahead_state() -> dict:
    """Names given to helper processes to compile ahead (:mod:`distshap.compile_cache`) and
    not yet waited for, at the end of the build."""
    from distshap import compile_cache

    return {name: module for name, (module, _) in compile_cache._PENDING.items()}


def _peer_child(args: argparse.Namespace) -> dict:
    """XGBoost's own cold start on the same file and rows: ``import xgboost``, the model
    loaded (``Booster.load_model``) and the first ``predict(..., pred_contribs=True)`` (SHAP
    values; on the GPU with ``--backend cuda``), then the median of ``--repeats`` later calls."""
    import numpy as np

    from benchmarks.shapes import make_data

    name, _ = args.shape.rsplit("-", 1)
    X, _ = make_data(name, args.rows, seed=1)
    device = "cuda" if args.backend == "cuda" else "cpu"
    if device == "cuda":
        import cupy

        X = cupy.asarray(X)
        cupy.cuda.Device().synchronize()
    t0 = time.perf_counter()
    import xgboost as xgb

    t_import = time.perf_counter() - t0
    t0 = time.perf_counter()
    booster = xgb.Booster()
    booster.load_model(args.model)
    booster.set_param({"device": device, "nthread": args.threads})
    t_load = time.perf_counter() - t0

    def call():
        out = booster.predict(xgb.DMatrix(X), pred_contribs=True)
        if device == "cuda":
            import cupy

            cupy.cuda.Device().synchronize()
        return out

    t0 = time.perf_counter()
    values = call()
    t_first = time.perf_counter() - t0
    times = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return {
        "xgboost": xgb.__version__,
        "device": device,
        "import_s": t_import,
        "load_s": t_load,
        "first_s": t_first,
        "warm_s": statistics.median(times) if times else float("nan"),
        "end_to_end_s": t_import + t_load + t_first,
        "shape": list(np.shape(values)),
    }


def _call(args: argparse.Namespace, explainer, kind: str, X, record: dict) -> tuple:
    """The method a kind calls, and its rows (``interventional``: a second explainer, over the
    first ``--background-rows`` rows, its build time in ``record["background_build_s"]``)."""
    if kind == "shap":
        return explainer.shap_values, X
    if kind == "interactions":
        return explainer.shap_interaction_values, X[: args.interaction_rows or args.rows]
    if kind != "interventional":
        raise ValueError(f"unknown kind {kind!r}: use shap, interactions, interventional")
    import distshap
    from benchmarks.shapes import make_data

    name, _ = args.shape.rsplit("-", 1)
    background, _ = make_data(name, args.background_rows, seed=2)
    t0 = time.perf_counter()
    interventional = distshap.TreeExplainer(
        args.model, background, layout="xgboost", backend=args.backend
    )
    record["background_build_s"] = time.perf_counter() - t0
    return interventional.shap_values, X


# --------------------------------------------------------------------------------------------
# Parent: fresh processes, fresh caches
# --------------------------------------------------------------------------------------------


def _run_child(
    args: argparse.Namespace, model: str, cache_dir: str, role: str = "--child"
) -> tuple[dict, float]:
    env = dict(os.environ)
    env["NUMBA_CACHE_DIR"] = cache_dir
    env["NUMBA_NUM_THREADS"] = str(args.threads)
    env["OMP_NUM_THREADS"] = str(args.threads)
    cmd = [
        sys.executable, "-m", "benchmarks.cold_start", role, "--model", model,
        "--shape", args.shape, "--rows", str(args.rows), "--backend", args.backend,
        "--kinds", args.kinds, "--repeats", str(args.repeats),
        "--interaction-rows", str(args.interaction_rows or args.rows),
        "--threads", str(args.threads),
        "--background-rows", str(args.background_rows),
    ] + (["--profile"] if args.profile else [])  # fmt: skip
    if getattr(args, "ahead", None) is not None:
        cmd += ["--ahead-processes", str(args.ahead)]
    cmd += ["--prepare", getattr(args, "prep", args.prepare)]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=root, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"child failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    record = json.loads(proc.stdout.strip().splitlines()[-1])
    record["stderr"] = proc.stderr.strip()
    return record, wall


def _measure(args: argparse.Namespace, model: str, cache_dir: str, kinds: str, label: str) -> dict:
    """One child process on ``cache_dir`` for ``kinds``, its summary printed."""
    rec, wall = _run_child(argparse.Namespace(**{**vars(args), "kinds": kinds}), model, cache_dir)
    rec["disk_cache_index_files"] = cache_index_files(cache_dir)
    print(summary(label, rec, wall), flush=True)
    for line in rec["stderr"].splitlines():
        print(f"  stderr: {line}", flush=True)
    print(f"  Numba disk cache after the run: {rec['disk_cache_index_files']}", flush=True)
    if args.profile:
        print(profile_table(rec["compile_profile"], args.top), flush=True)
    return rec


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default=None, help="name-size from benchmarks.shapes")
    parser.add_argument("--rows", type=int, default=1000, help="rows explained (SHAP)")
    parser.add_argument("--interaction-rows", type=int, default=None,
                        help="rows of the interaction values (default: --rows)")  # fmt: skip
    parser.add_argument("--background-rows", type=int, default=100,
                        help="background rows of the interventional explainer")  # fmt: skip
    parser.add_argument("--backend", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--kinds", default="shap,interactions,interventional")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="NUMBA_NUM_THREADS of the child (default: 2 for cpu, every core for cuda)",
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--together", dest="apart", action="store_false",
                        help="every kind in one process (default: each kind in its own fresh "
                        "process and cache, as a new user's first call)")  # fmt: skip
    parser.add_argument("--profile", action="store_true", help="per-function compile seconds")
    parser.add_argument("--top", type=int, default=25, help="functions listed by --profile")
    parser.add_argument("--json", help="write the records to this file")
    parser.add_argument(
        "--no-peer", dest="peer", action="store_false",
        help="skip XGBoost's cold start (pred_contribs, in a fresh process)",
    )  # fmt: skip
    parser.add_argument("--model-file", help="this saved model instead of --shape's own "
                        "(the rows still --shape's data)")  # fmt: skip
    parser.add_argument("--ahead-processes", default=None,
                        help="compile_ahead_processes of the child, a comma list runs each "
                        "(e.g. 6,0: helpers and none; default: the configuration's)")  # fmt: skip
    parser.add_argument("--prepare", default="on",
                        help="the explainer's GPU preparation (distshap.kernels.prepare): on, "
                        "off, or on,off to run each")  # fmt: skip
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--peer-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.shape is None:
        args.shape = "cal_housing-large" if args.backend == "cuda" else "cal_housing-med"
    if args.threads is None:
        args.threads = (os.cpu_count() or 1) if args.backend == "cuda" else 2
    if args.child:
        print(json.dumps(_child(args)), flush=True)
        return
    if args.peer_child:
        print(json.dumps(_peer_child(args)), flush=True)
        return

    from benchmarks.shapes import model_path, train_model

    name, size = args.shape.rsplit("-", 1)
    if args.model_file:
        model = args.model_file
    else:
        train_model(name, size, verbose=True)  # trained and saved once, outside the timings
        model = str(model_path(name, size))
    results = {}
    groups = args.kinds.split(",") if args.apart else [args.kinds]
    aheads = [None] if args.ahead_processes is None else args.ahead_processes.split(",")
    runs = [(a, p) for a in aheads for p in args.prepare.split(",")]
    for args.ahead, args.prep in runs:
        for kinds in groups:
            with tempfile.TemporaryDirectory(prefix="distshap-numba-") as cache_dir:
                for label in ("fresh cache", "filled cache"):
                    key = label if len(groups) == 1 else f"{kinds}, {label}"
                    key += "" if args.ahead is None else f", {args.ahead} helpers"
                    key += ", GPU preparation off" if args.prep == "off" else ""
                    results[key] = _measure(args, model, cache_dir, kinds, key)
    if args.peer:  # the peer's own fresh process, same file and rows
        with tempfile.TemporaryDirectory(prefix="distshap-numba-") as cache_dir:
            rec, wall = _run_child(args, model, cache_dir, role="--peer-child")
        rec.pop("stderr", None)
        print(peer_summary("peer", rec, wall), flush=True)
        results["xgboost"] = rec
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"shape": args.shape, "backend": args.backend, **results}, fh, indent=1)


if __name__ == "__main__":
    main()
