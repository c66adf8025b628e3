"""Small models on the GPU: where a call's time goes, one-launch route against the regular one.

For each shape (default ``cal_housing-small,adult-small``), SHAP values of ``--rows`` rows and
interaction values of ``--interaction-rows`` rows, the median microseconds of a call (after a
warm-up, GPU synchronized before the clock stops) of:

* ``public``: ``TreeExplainer.shap_values`` / ``shap_interaction_values`` on CuPy rows, the
  additivity check included (what :mod:`benchmarks.throughput` times);
* ``checked``: :func:`distshap.kernels.cuda.launch.checked_values` (the kernel with the fused
  check, no explainer);
* ``kernel``: :func:`distshap.kernels.cuda.shap_values` / ``interaction_values`` (no check);
* ``host``: the host's time in ``kernel`` (the GPU synchronized outside the clock: what the
  call costs before the kernel runs, the rest of ``kernel`` being the GPU's);
* ``r64``, ``r80`` (``--registers``): ``kernel`` with the ``v1`` small kernel compiled within
  that many registers a thread (more warps resident), its bits compared with the default's;
* ``--variants``: ``public``, ``checked``, ``kernel`` and ``host`` again for each variant of
  the small kernels (:data:`distshap.kernels.cuda.small.VARIANT`: ``v1`` the twelve-argument
  kernels, ``merged`` two constant arrays and the rows once, ``unrolled`` that with the DP
  unrolled for the model's longest path, ``gather`` the block kernels of
  :mod:`distshap.kernels.cuda.small_gather`; ``NAME@R``: compiled within ``R`` registers a
  thread; ``NAME/raw``: launched through the driver, :mod:`distshap.kernels.cuda.rawlaunch`,
  ``NAME/numba``: through Numba), in one process, with whether their values (public, kernel
  and checked) have the bits of the first variant's, the fraction of equal bits and the
  largest difference (relative to max(1, |values|)) of the kernel's values against it, and
  whether public, kernel and checked values agree bit for bit; the columns above are the
  library's default variant;
* ``regular``: the public call with the one-launch route off (``small_max_paths=0``);
* ``xgboost``: XGBoost's GPU ``predict(pred_contribs / pred_interactions)`` on a CuPy DMatrix;

and rows/s of the public call against XGBoost's. Needs a GPU::

    DISTSHAP_BENCH_DEVICE=cuda python3 -m benchmarks.small_models
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from benchmarks.shapes import make_data, train_model


def _median_us(fn, repeats: int) -> float:
    import cupy

    fn()  # warm-up: compilation, device constants
    cupy.cuda.Device().synchronize()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        cupy.cuda.Device().synchronize()
        times.append(time.perf_counter() - t0)
    return 1e6 * statistics.median(times)


_VARIANTS: dict = {}  # (kernel name, registers) -> the small kernel compiled within them


def _host_us(fn, repeats: int) -> float:
    """Median host microseconds of ``fn`` alone (the GPU synchronized outside the clock)."""
    import cupy

    fn()
    times = []
    for _ in range(repeats):
        cupy.cuda.Device().synchronize()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    cupy.cuda.Device().synchronize()
    return 1e6 * statistics.median(times)


def _variants(variants, packed, Xd, public, kernel, interactions, repeats) -> dict:
    """Per variant of the small kernels (module docstring): microseconds and bits."""
    from distshap.kernels.cuda import launch, rawlaunch, small

    saved = small.VARIANT, small.MAX_REGISTERS, rawlaunch.ENABLED
    out, ref = {}, None
    try:
        for spec in variants:
            body, _, route = spec.partition("/")
            name, _, regs = body.partition("@")
            if route not in ("", "raw", "numba"):
                raise ValueError(f"variant {spec!r}: the launch route is 'raw' or 'numba'")
            small.VARIANT, small.MAX_REGISTERS = name, int(regs or 0)
            rawlaunch.ENABLED = route == "raw"
            rec = {
                "public": _median_us(lambda: public(Xd), repeats),
                "checked": _median_us(
                    lambda: launch.checked_values(packed, Xd, Xd, interactions), repeats),
                "kernel": _median_us(lambda: kernel(packed, Xd), repeats),
                "host": _host_us(lambda: kernel(packed, Xd), repeats),
            }  # fmt: skip
            bits = (public(Xd).get(), kernel(packed, Xd).get(),
                    launch.checked_values(packed, Xd, Xd, interactions).get())  # fmt: skip
            if ref is None:
                ref = bits
            rec["same"] = all(np.array_equal(a.view(np.uint32), b.view(np.uint32))
                              for a, b in zip(bits, ref, strict=True))  # fmt: skip
            a, b = bits[1], ref[1]
            rec["equal_fraction"] = float((a.view(np.uint32) == b.view(np.uint32)).mean())
            scale = max(1.0, float(np.abs(b).max()))
            rec["max_diff"] = float(np.abs(a.astype(np.float64) - b).max()) / scale
            # the public call drops the group axis of a one-output model: compare the values
            flat = [x.reshape(-1) for x in bits]
            rec["consistent"] = bool(np.array_equal(flat[0], flat[1])
                                     and np.array_equal(flat[1], flat[2]))  # fmt: skip
            out[spec] = rec
    finally:
        small.VARIANT, small.MAX_REGISTERS, rawlaunch.ENABLED = saved
    return out


def measure(name: str, size: str, rows: int, interactions: bool, repeats: int,
            registers: tuple = (), variants: tuple = ()) -> dict:  # fmt: skip
    """Microseconds a call of each variant (module docstring) on one shape."""
    import cupy
    import xgboost as xgb

    from distshap import TreeExplainer
    from distshap.kernels import cuda as kc
    from distshap.kernels.cuda import launch, small
    from distshap.plan.config import config_context
    from distshap.plan.routes import small_fits

    booster = train_model(name, size)
    X, _ = make_data(name, rows, seed=1)
    X = np.ascontiguousarray(X, np.float32)
    explainer = TreeExplainer(booster, backend="cuda")
    packed = explainer.packed
    Xd = cupy.asarray(X)
    public = explainer.shap_interaction_values if interactions else explainer.shap_values
    kernel = kc.interaction_values if interactions else kc.shap_values
    rec = {
        "shape": f"{name}-{size}", "kind": "interactions" if interactions else "shap",
        "rows": rows, "paths": packed.num_paths, "small": small_fits(packed, interactions),
        "public": _median_us(lambda: public(Xd), repeats),
        "checked": _median_us(lambda: launch.checked_values(packed, Xd, Xd, interactions),
                              repeats),
        "kernel": _median_us(lambda: kernel(packed, Xd), repeats),
    }  # fmt: skip
    rec["host"] = _host_us(lambda: kernel(packed, Xd), repeats)
    rec["variants"] = _variants(variants, packed, Xd, public, kernel, interactions, repeats)
    default_bits = kernel(packed, Xd).get()
    name_k = "interaction_kernel" if interactions else "shap_kernel"
    default_kernel = getattr(small, name_k)
    for regs in registers:  # the same kernel within fewer registers a thread
        variant = _VARIANTS.get((name_k, regs))
        if variant is None:  # compiled once for all shapes
            kind = "interactions" if interactions else "shap"
            variant = _VARIANTS[(name_k, regs)] = small._make_kernel(kind, regs)
        setattr(small, name_k, variant)
        saved_variant, small.VARIANT = small.VARIANT, "v1"  # the capped kernel is v1's
        try:
            rec[f"r{regs}"] = _median_us(lambda: kernel(packed, Xd), repeats)
            rec[f"r{regs}_same"] = bool(np.array_equal(kernel(packed, Xd).get(), default_bits))
        finally:
            small.VARIANT = saved_variant
            setattr(small, name_k, default_kernel)
            small.clear_cache()  # no launcher of the variant is kept
    with config_context(small_max_paths=0):
        rec["regular"] = _median_us(lambda: public(Xd), repeats)
        regular = public(Xd).get()
    ours = public(Xd).get()
    booster.set_param({"device": "cuda"})
    dm = xgb.DMatrix(Xd)
    kw = {"pred_interactions": True} if interactions else {"pred_contribs": True}
    rec["xgboost"] = _median_us(lambda: booster.predict(dm, **kw), repeats)
    ref = cupy.asnumpy(booster.predict(dm, **kw)).reshape(ours.shape)
    scale = max(1.0, float(np.abs(ref).max()))
    rec["max_diff_xgboost"] = float(np.abs(ours - ref).max()) / scale
    rec["max_diff_regular"] = float(np.abs(ours - regular).max()) / scale
    rec["ratio"] = rec["xgboost"] / rec["public"]
    booster.set_param({"device": "cpu"})
    return rec


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="small models: per-call microseconds")
    parser.add_argument("--shapes", default="cal_housing-small,adult-small")
    parser.add_argument("--rows", type=int, default=10_000, help="rows of SHAP values")
    parser.add_argument("--interaction-rows", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--registers", default="",
                        help="also time the kernel compiled within these registers a thread "
                        "(comma-separated; '' for none)")  # fmt: skip
    parser.add_argument(
        "--variants",
        default="v1,unrolled,unrolled/raw,gather,gather/raw",
        help="small-kernel variants timed side by side, the first the bits' "
        "reference (small.VARIANT names, @R: within R registers, /raw: launched through "
        "the driver (distshap.kernels.cuda.rawlaunch), /numba: through Numba; '' for none)",
    )
    args = parser.parse_args(argv)
    variants = tuple(v.strip() for v in args.variants.split(",") if v.strip())
    registers = tuple(int(r) for r in args.registers.split(",") if r.strip())
    cols = ("public", "checked", "kernel", "host", "regular", "xgboost",
            *(f"r{r}" for r in registers))  # fmt: skip
    print(f"{'shape':20} {'kind':12} {'rows':>6} {'paths':>5} {'small':>5} "
          + " ".join(f"{c + ' us':>13}" for c in cols)
          + f" {'x XGBoost':>9} {'diff xgb':>9} {'diff reg':>9} same", flush=True)  # fmt: skip
    for shape in args.shapes.split(","):
        name, size = shape.rsplit("-", 1)
        for interactions, rows in ((False, args.rows), (True, args.interaction_rows)):
            r = measure(name, size, rows, interactions, args.repeats, registers, variants)
            print(f"{r['shape']:20} {r['kind']:12} {rows:>6} {r['paths']:>5} {r['small']!s:>5} "
                  + " ".join(f"{r[c]:>13.1f}" for c in cols)
                  + f" {r['ratio']:>8.2f}x {r['max_diff_xgboost']:>9.1e}"
                  f" {r['max_diff_regular']:>9.1e}"
                  + "".join(f" r{g}:{r[f'r{g}_same']}" for g in registers),
                  flush=True)  # fmt: skip
            for spec, v in r["variants"].items():
                print(f"  {spec:18} public {v['public']:8.1f} us  checked {v['checked']:8.1f}"
                      f"  kernel {v['kernel']:8.1f}  host {v['host']:8.1f}"
                      f"  x XGBoost {r['xgboost'] / v['public']:5.2f}x  same bits as "
                      f"{variants[0]}: {v['same']} (equal {v['equal_fraction']:.4f}, max diff "
                      f"{v['max_diff']:.1e}; public = kernel = checked: {v['consistent']})",
                      flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
