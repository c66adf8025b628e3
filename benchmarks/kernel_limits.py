"""Each GPU kernel of a SHAP / interaction call against the H200's limits: counted work / time.

For each shape and kind (``shap``, ``interactions``), in one process on the GPU: the library's
public call on N rows (CuPy rows, warm, median of repeats), then every kernel launch of that
call timed alone (CuPy events after a short spin kernel, so a launch's host cost is not timed;
the library's own launchers, a quadrature launch through a one-launch copy of the plan, the
rows in the library's batches; the parts' output is checked bit for bit against the call's),
and XGBoost GPU ``pred_contribs`` / ``pred_interactions`` on the same rows (the ratio of the
12x target). Each kernel's counted work (:mod:`benchmarks.kernel_work`: warp instructions from
its SASS or PTX loops x trip counts from the plan, HBM bytes a lower bound) over its time, as
a share of the peak:

* issue: ``4 S f`` warp instructions/s (``S`` SMs at clock ``f``; four schedulers an SM, one
  instruction a clock each: NVIDIA's Hopper tuning guide);
* FP32: ``4 S f`` warp instructions/s (128 FP32 lanes an SM; the H200 SXM data sheet's
  67 TFLOP/s is ``132 x 128 x 2 x 1.98 GHz``);
* XU: ``S f / 2`` warp instructions/s (16 lanes an SM: reciprocals, float<->int64
  conversions);
* shared atomics: ``S f`` warp instructions/s (one conflict-free shared-memory wavefront a
  clock an SM; an upper bound: lanes hitting one word add wavefronts);
* HBM: 4.8e12 B/s (H200 SXM data sheet; other devices: from their memory clock and bus).

``S`` and ``f`` come from CuPy (the SM count and the maximum SM clock); ``nvidia-smi``'s SM
clock after the run is printed beside them. The binding resource is the largest share.

With ``--ncu`` each shape and kind runs again in a child process under ``ncu --clock-control
none`` (every kernel launched once, on fewer rows) with a fixed metric list, printed beside
the counted figures (warp instructions counted / executed); without a working ``ncu`` it says
so and goes on.

Usage::

    python -m benchmarks.kernel_limits                     # the four shapes, both kinds
    python -m benchmarks.kernel_limits --shapes covtype-med --kinds shap --rows 50000 --ncu
    python -m benchmarks.kernel_limits --count-only --shapes cal_housing-med   # no GPU
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

from benchmarks.kernel_ncu import ncu_line, run_ncu
from benchmarks.kernel_work import KernelWork, host_plan, load_counts, plan_work, save_counts
from benchmarks.shapes import make_data, train_model

__all__ = ["DEFAULT_ROWS", "Peaks", "device_peaks", "main", "measure", "shares"]

#: Shapes measured by default and their rows (SHAP, interactions).
DEFAULT_ROWS: dict[str, tuple[int, int]] = {
    "cal_housing-med": (200_000, 200),
    "covtype-med": (50_000, 200),
    "fashion_mnist-med": (20_000, 10),
    "cal_housing-large": (2_000, 50),
}
_SAVED_COUNTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernel_counts_sm90.json")


@dataclasses.dataclass(frozen=True)
class Peaks:
    """Peak rates (per second) of one device (module docstring)."""

    sms: int
    clock_hz: float
    hbm: float
    source: str

    @property
    def rates(self) -> dict[str, float]:
        warp_clocks = self.sms * self.clock_hz
        return {"issue": 4 * warp_clocks, "fp32": 4 * warp_clocks, "xu": warp_clocks / 2,
                "atoms": warp_clocks, "hbm": self.hbm}  # fmt: skip


def device_peaks() -> Peaks:
    """:class:`Peaks` of the current CUDA device (CuPy's attributes; H200: the data sheet's
    HBM rate); the H200 SXM data sheet's figures where CuPy is missing."""
    try:
        import cupy

        dev = cupy.cuda.Device().id
        attr = cupy.cuda.runtime.deviceGetAttribute
        sms, clock = attr(16, dev), attr(13, dev) * 1e3  # multiProcessorCount, clockRate kHz
        name = cupy.cuda.runtime.getDeviceProperties(dev)["name"].decode()
        hbm = 4.8e12 if "H200" in name else 2 * attr(36, dev) * 1e3 * attr(37, dev) / 8
        return Peaks(sms, clock, hbm, f"{name}: {sms} SMs, max SM clock {clock / 1e9:.3f} GHz")
    except Exception:  # noqa: BLE001 - no GPU: the data sheet
        return Peaks(132, 1.98e9, 4.8e12, "H200 SXM data sheet (no GPU here)")


def shares(work: KernelWork, seconds: float, peaks: Peaks) -> dict[str, float]:
    """Achieved rate of each counted resource as a share (%) of its peak."""
    out = {}
    rates = peaks.rates
    for name in ("issue", "fp32", "xu", "atoms"):
        if work.counts and seconds > 0:
            out[name] = 100.0 * work.counts.get(name, 0) / seconds / rates[name]
    if seconds > 0:
        out["hbm"] = 100.0 * work.hbm_bytes / seconds / rates["hbm"]
    return out


def _sync() -> None:
    import cupy

    cupy.cuda.get_current_stream().synchronize()


def _median(fn, repeats: int) -> float:
    fn()
    _sync()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        _sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


_SPIN = None


def _spin(seconds: float = 2e-4) -> None:
    """A one-thread kernel busy for ``seconds``: the next launch's host work overlaps it."""
    global _SPIN
    import cupy

    if _SPIN is None:
        _SPIN = cupy.RawKernel(
            'extern "C" __global__ void spin(long long n) {'
            " long long t = clock64(); while (clock64() - t < n) {} }", "spin",
        )  # fmt: skip
    _SPIN((1,), (1,), (np.int64(seconds * 2e9),))


def _parts(packed, interactions: bool) -> tuple:
    """The device model, plan, fixed-point scale and the call's launches as functions
    ``fn(Xb, acc)`` in the order of :func:`~benchmarks.kernel_work.plan_work` (tables, each
    quadrature launch, the rows' transposition, fallback; the finish pass is the caller's)."""
    import cupy

    from distshap.kernels.cuda.fallback import launch_fallback
    from distshap.kernels.cuda.interaction_quadrature import launch_interaction_quadrature
    from distshap.kernels.cuda.runtime import args
    from distshap.kernels.cuda.runtime.model import device_model, interaction_plan
    from distshap.kernels.cuda.shap_quadrature import launch_quadrature
    from distshap.kernels.cuda.tables import launch_tables

    model = device_model(packed)
    plan = interaction_plan(packed, model) if interactions else model.shap
    F1 = packed.num_features + 1
    scale = 2.0 ** (model.interaction_shift if interactions else model.shap_shift)
    s = args.current_stream()
    run_q = launch_interaction_quadrature if interactions else launch_quadrature
    parts = []
    if plan.n_table_bins:
        parts.append(lambda Xb, acc: launch_tables(model, plan, Xb, acc, scale, F1, s))
    for q in plan.quadrature:
        one = dataclasses.replace(plan, quadrature=(q,))
        parts.append(lambda Xb, acc, one=one: run_q(model, one, Xb, acc, scale, F1, s))
    if plan.quadrature and not interactions:
        parts.append(lambda Xb, acc: cupy.ascontiguousarray(Xb.T))
    if model.n_oversize:
        parts.append(lambda Xb, acc: launch_fallback(model, Xb, acc, scale, F1, s, interactions))
    return model, plan, scale, parts


def time_parts(packed, X, interactions: bool, repeats: int, once: bool = False,
               check: bool = True):  # fmt: skip
    """Seconds of each launch of one call on the CuPy rows ``X`` (median over ``repeats``
    after a warm run; the finish pass last) and whether the parts' output has the bits of
    :func:`distshap.kernels.cuda.launch.shap_values` / ``interaction_values`` (``check``;
    else None), and the device plan. ``once``: one run (a spin kernel before each part: the
    markers ``--ncu`` splits its profile by)."""
    import cupy

    from distshap.kernels.cuda import launch
    from distshap.kernels.cuda.runtime import args

    model, plan, scale, parts = _parts(packed, interactions)
    n = int(X.shape[0])
    out, out2, group_size, bias_offset = launch.new_output(packed, n, interactions)
    width = out2.shape[1]
    batch = n if 8 * width * n <= 1 << 24 else min(n, launch.default_batch_rows(width))
    acc_all = cupy.zeros((batch, width), np.int64)
    s = args.current_stream()

    def finish(Xb, acc, r0=0):
        launch.launch_finish(launch.finish_kernel, acc, out2[r0 : r0 + Xb.shape[0]], 1.0 / scale,
                             model.expected_value, group_size, bias_offset, s)  # fmt: skip

    def timed(fn) -> float:
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        _spin()
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        return cupy.cuda.get_elapsed_time(start, stop) / 1e3

    runs = []
    for _ in range(1 if once else repeats + 1):
        total = [0.0] * (len(parts) + 1)
        for r0 in range(0, n, batch):
            Xb = X[r0 : min(n, r0 + batch)]
            acc = args.view(acc_all[: Xb.shape[0]])
            for i, fn in enumerate([*parts, lambda Xb, acc, r0=r0: finish(Xb, acc, r0)]):
                total[i] += timed(lambda fn=fn, Xb=Xb, acc=acc: fn(Xb, acc))
        runs.append(total)
    same = None
    if check:
        ref = (launch.interaction_values if interactions else launch.shap_values)(packed, X)
        same = bool(cupy.array_equal(ref.view(np.uint32), out.view(np.uint32)))
    runs = runs[1:] or runs
    return [statistics.median(r[i] for r in runs) for i in range(len(parts) + 1)], same, plan


def _xgb_seconds(booster, X, interactions: bool, repeats: int) -> float:
    import cupy
    import xgboost as xgb

    booster.set_param({"device": "cuda"})
    dm = xgb.DMatrix(cupy.asarray(X))
    kw = {"pred_interactions": True} if interactions else {"pred_contribs": True}
    try:
        return _median(lambda: booster.predict(dm, **kw), repeats)
    finally:
        booster.set_param({"device": "cpu"})


@functools.lru_cache(maxsize=1)
def _model(shape: str):
    """The booster and CUDA explainer of ``shape`` (kept for the next kind of the same shape:
    a large model's build takes a while)."""
    from distshap import TreeExplainer

    name, size = shape.rsplit("-", 1)
    booster = train_model(name, size)
    return booster, TreeExplainer(booster, layout="xgboost", backend="cuda")


def _explainer(shape: str, rows: int):
    booster, explainer = _model(shape)
    return booster, explainer, make_data(shape.rsplit("-", 1)[0], rows, seed=1)[0]


def measure(shape: str, kind: str, rows: int, repeats: int, peaks: Peaks, sass: bool = True,
            nvdisasm: str | None = None, xgboost: bool = True, ncu_rows: int | None = None,
            variants: tuple[str, ...] = ()) -> dict:  # fmt: skip
    """One shape and kind on the GPU (module docstring): a record with the call's and the
    peer's seconds, and per launch its label, seconds, counted work and shares of the peaks
    (and its counted warp instructions at ``ncu_rows`` rows, for ``--ncu``). ``variants``:
    configuration changes (``"name=value,name=value"``, :mod:`distshap.plan.config`), each
    call timed under its change in the same process, its output's bits compared with the
    default's."""
    import cupy

    from distshap.plan.routes import small_fits

    interactions = kind == "interactions"
    booster, explainer, X = _explainer(shape, rows)
    packed = explainer.packed
    Xd = cupy.asarray(X)
    call = explainer.shap_interaction_values if interactions else explainer.shap_values
    record = {"shape": shape, "kind": kind, "rows": rows, "paths": int(packed.num_paths),
              "call_s": _median(lambda: call(Xd), repeats)}  # fmt: skip
    record["xgboost_s"] = _xgb_seconds(booster, X, interactions, repeats) if xgboost else None
    record["variants"] = _variants(call, Xd, variants, repeats)
    if small_fits(packed, interactions):
        record["launches"], record["note"] = [], "one-launch small-model route: not counted"
        return record
    seconds, same, plan = time_parts(packed, Xd, interactions, repeats)
    record["bits_equal"] = same
    work = plan_work(packed, host_plan(packed, interactions, plan), rows, interactions, sass,
                     nvdisasm)  # fmt: skip
    if len(work) != len(seconds):  # cannot happen: both follow the plan's launches
        raise RuntimeError(f"{len(work)} counted launches against {len(seconds)} timed")
    # a SHAP quadrature launch alone transposes the rows too (the call does it once): its
    # kernel's time is the part's less the transposition's
    moved = [t for w, t in zip(work, seconds, strict=True) if w.label.startswith("rows transp")]
    if moved:
        seconds = [max(0.0, t - moved[0]) if w.label.startswith("quadrature") else t
                   for w, t in zip(work, seconds, strict=True)]  # fmt: skip
    record["launches"] = [
        {"label": w.label, "seconds": t, "level": w.level, "registers": w.registers,
         "counts": dict(w.counts), "hbm_bytes": w.hbm_bytes, "elements": w.elements,
         "shares": shares(w, t, peaks)}
        for w, t in zip(work, seconds, strict=True)
    ]  # fmt: skip
    if ncu_rows:
        at = plan_work(packed, host_plan(packed, interactions, plan), ncu_rows, interactions,
                       sass, nvdisasm)  # fmt: skip
        for x, w in zip(record["launches"], at, strict=True):
            x["ncu_counted_issue"] = w.counts.get("issue")
    return record


def _changes(text: str) -> dict[str, int]:
    """``"name=value,name=value"`` as configuration changes (integer values)."""
    changes = {}
    for item in text.split(","):
        name, _, value = item.partition("=")
        try:
            changes[name.strip()] = int(value)
        except ValueError:
            raise SystemExit(f"--variant {text!r}: {item!r} is not name=integer; "
                             "pass e.g. quadrature_tile_features=12") from None  # fmt: skip
    return changes


def _check_args(shapes: list[str], variants: list[str]) -> None:
    """One line naming a bad ``--shapes`` entry or ``--variant``, before any long work."""
    from benchmarks.shapes import DATASETS, REAL_DATASETS, SIZES
    from distshap.plan.config import get_config

    for shape in shapes:
        name, _, size = shape.rpartition("-")
        if (name not in DATASETS and name not in REAL_DATASETS) or size not in SIZES:
            raise SystemExit(f"--shapes: unknown shape {shape!r}: use name-size, e.g. covtype-med")
    for text in variants:
        try:
            get_config().replace(**_changes(text))
        except (TypeError, ValueError) as exc:
            raise SystemExit(f"--variant {text!r}: {exc}") from None


def _variants(call, Xd, variants: tuple[str, ...], repeats: int) -> list[dict]:
    """Each configuration change's call seconds and whether its output has the default's bits."""
    import cupy

    from distshap.plan.config import config_context

    if not variants:
        return []
    base = cupy.asarray(call(Xd)).view(np.uint32)
    out = []
    for text in variants:
        with config_context(**_changes(text)):
            seconds = _median(lambda: call(Xd), repeats)
            same = bool(cupy.array_equal(cupy.asarray(call(Xd)).view(np.uint32), base))
        out.append({"variant": text, "call_s": seconds, "bits_equal": same})
    return out


def _role_split(counts: dict) -> str:
    """The counted issue by loop role (:mod:`benchmarks.kernel_work`), as shares."""
    total = counts.get("issue", 0)
    parts = {k[6:]: v for k, v in counts.items() if k.startswith("issue:") and v}
    return ", ".join(f"{k} {100 * v / total:.0f}%" for k, v in parts.items()) if total else ""


def _print(record: dict, ncu: list | None = None) -> None:
    rows, call = record["rows"], record["call_s"]
    head = f"== {record['shape']} {record['kind']}, {rows:,} rows, {record['paths']:,} paths: "
    head += f"call {call:.4f} s ({rows / call:,.0f} rows/s)"
    if record.get("xgboost_s"):
        head += f", XGBoost GPU {rows / record['xgboost_s']:,.0f} rows/s: "
        head += f"{record['xgboost_s'] / call:.2f}x"
    print(head)
    for v in record.get("variants", []):
        print(
            f"   variant {v['variant']}: call {v['call_s']:.4f} s ({rows / v['call_s']:,.0f} "
            f"rows/s, {call / v['call_s']:.3f}x the default), bits equal: {v['bits_equal']}"
        )
    if record.get("note"):
        print(f"   {record['note']}")
        return
    parts = sum(x["seconds"] for x in record["launches"])
    print(f"   launches alone: {parts:.4f} s ({100 * parts / call:.0f}% of the call), "
          f"bits equal to the call's: {record['bits_equal']}")  # fmt: skip
    print(f"   {'launch':44} {'ms':>8} {'share':>6} {'regs':>4} {'level':>5} | {'issue':>6} "
          f"{'fp32':>6} {'xu':>6} {'atoms':>6} {'hbm':>6} | bound")  # fmt: skip
    for i, x in enumerate(record["launches"]):
        sh = x["shares"]
        cells = " ".join(f"{sh[k]:5.1f}%" if k in sh else f"{'':6}"
                         for k in ("issue", "fp32", "xu", "atoms", "hbm"))  # fmt: skip
        bound = max(sh, key=sh.get) if sh else ""
        regs = x["registers"] or ""
        print(
            f"   {x['label'][:44]:44} {1e3 * x['seconds']:8.3f} "
            f"{100 * x['seconds'] / parts:5.1f}% {regs:>4} {x['level']:>5} | {cells} | {bound}"
        )
        if _role_split(x["counts"]):
            print(f"      counted issue by loop: {_role_split(x['counts'])}")
        if ncu and i < len(ncu) and ncu[i]:
            print("      ncu: " + ncu_line(ncu[i], x))


def _ncu_child(shape: str, kind: str, rows: int) -> None:
    """The ``--ncu`` child: one warm run, then one profiled run of the call's launches."""
    import cupy

    interactions = kind == "interactions"
    _, explainer, X = _explainer(shape, rows)
    Xd = cupy.asarray(X)
    time_parts(explainer.packed, Xd, interactions, 0, once=True, check=False)
    _sync()
    runtime = cupy.cuda.runtime
    start = getattr(runtime, "profilerStart", None) or cupy.cuda.profiler.start
    stop = getattr(runtime, "profilerStop", None) or cupy.cuda.profiler.stop
    start()
    time_parts(explainer.packed, Xd, interactions, 0, once=True, check=False)
    _sync()
    stop()


def _count_only(shape: str, kind: str, rows: int, peaks: Peaks, sass: bool, nvdisasm) -> None:
    """Counted work of one shape and kind (host plan as the H200 would make it) and each
    launch's floor: its time at 100% of each peak."""
    from distshap import TreeExplainer

    name, size = shape.rsplit("-", 1)
    packed = TreeExplainer(train_model(name, size), layout="xgboost", backend="cpu").packed
    interactions = kind == "interactions"
    work = plan_work(packed, host_plan(packed, interactions), rows, interactions, sass, nvdisasm)
    print(f"== {shape} {kind}, {rows:,} rows, {packed.num_paths:,} paths (counted, no GPU)")
    rates = peaks.rates
    for w in work:
        floors = {k: w.counts.get(k, 0) / rates[k] for k in ("issue", "fp32", "xu", "atoms")}
        floors["hbm"] = w.hbm_bytes / rates["hbm"]
        cells = " ".join(f"{k} {1e3 * v:.3f}" for k, v in floors.items() if v)
        print(f"   {w.label[:44]:44} {w.level:>4} {w.registers or '':>3} | ms at peak: {cells}")
        if _role_split(w.counts):
            print(f"      counted issue by loop: {_role_split(w.counts)}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default=",".join(DEFAULT_ROWS), help="comma list")
    parser.add_argument("--kinds", default="shap,interactions", help="shap,interactions")
    parser.add_argument("--rows", type=int, help="SHAP rows (default per shape)")
    parser.add_argument("--interaction-rows", type=int, help="interaction rows")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--ncu", action="store_true", help="profile each launch once under ncu")
    parser.add_argument("--ncu-rows", type=int, help="rows of the ncu child (default rows / 10)")
    parser.add_argument("--nvdisasm", help="path of nvdisasm (SASS counts)")
    parser.add_argument("--ptx", action="store_true", help="count PTX, not SASS")
    parser.add_argument("--no-xgboost", action="store_true")
    parser.add_argument("--count-only", action="store_true", help="no GPU: counted work only")
    parser.add_argument("--json", help="append one JSON line per shape and kind")
    parser.add_argument("--variant", action="append", default=[],
                        help="configuration change timed beside the default, e.g. "
                        "quadrature_tile_features=8 (repeatable; bits compared)")  # fmt: skip
    parser.add_argument(
        "--counts",
        default=_SAVED_COUNTS,
        help="SASS counts made elsewhere, used where ptxas / nvdisasm are missing",
    )
    parser.add_argument("--save-counts", help="write every kernel's counts to this file, exit")
    parser.add_argument("--ncu-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    kinds = [k for k in args.kinds.split(",") if k]
    for k in kinds:
        if k not in ("shap", "interactions"):
            raise SystemExit(f"--kinds: unknown kind {k!r}: use shap and/or interactions")
    if args.save_counts:
        save_counts(args.save_counts, args.nvdisasm)
        return
    if args.counts and os.path.exists(args.counts) and not args.ptx:
        load_counts(args.counts)
    shapes = [s for s in args.shapes.split(",") if s]
    _check_args(shapes, args.variant)
    rows_of = {s: DEFAULT_ROWS.get(s, (20_000, 100)) for s in shapes}
    if args.ncu_child:
        kind = kinds[0]
        _ncu_child(shapes[0], kind, args.rows if kind == "shap" else args.interaction_rows)
        return
    peaks = device_peaks()
    print(f"peaks from {peaks.source}: " + ", ".join(
        f"{k} {v:.4g}/s" for k, v in peaks.rates.items()))  # fmt: skip
    t_start = time.perf_counter()
    for shape in shapes:
        for kind in kinds:
            rows = rows_of[shape][0 if kind == "shap" else 1]
            rows = (args.rows if kind == "shap" else args.interaction_rows) or rows
            if args.count_only:
                _count_only(shape, kind, rows, peaks, not args.ptx, args.nvdisasm)
                continue
            ncu_rows = (args.ncu_rows or max(1, rows // 10)) if args.ncu else None
            rec = measure(shape, kind, rows, args.repeats, peaks, not args.ptx, args.nvdisasm,
                          not args.no_xgboost, ncu_rows, tuple(args.variant))  # fmt: skip
            ncu = None
            if args.ncu and rec.get("launches"):
                ncu = run_ncu(shape, kind, ncu_rows, len(rec["launches"]))
                if isinstance(ncu, str):
                    print(f"   (--ncu: {ncu})")
                    ncu = None
                else:
                    rec["ncu"] = ncu
            _print(rec, ncu)
            sys.stdout.flush()
            if args.json:
                with open(args.json, "a") as fh:
                    fh.write(json.dumps(rec, default=str) + "\n")
    if not args.count_only:
        print(f"SM clock now (nvidia-smi): {_smi_clock()}; {time.perf_counter() - t_start:.0f} s")


def _smi_clock() -> str:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,clocks.max.sm",
                              "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=20).stdout.strip()  # fmt: skip
        return out or "?"
    except (OSError, subprocess.SubprocessError):
        return "nvidia-smi not available"


if __name__ == "__main__":
    main()
