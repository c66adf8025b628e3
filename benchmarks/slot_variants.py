"""The split slot kernel's variants side by side, in one process (issue #16).

``"old"`` is the kernel before the lean variant, ``"lean"`` the one that runs
(:func:`distshap.kernels.cuda.slot_quadrature.split_slot_kernel`'s ``variant``, through
:func:`~distshap.kernels.cuda.slot_quadrature.launch_slot_quadrature`'s ``kernel``). On the
pair slots of the same rows, in the batches the library uses, each variant in turn (old, lean,
old, lean: drifts of the clock show as a gap between a variant's two rounds): the seconds of
the quadrature launches only (synchronized before and after each batch's launches). Bits: each
batch's slots are compared with the first round's, exactly for the first batch and through
random-weighted 64-bit checksums for all of them (wrapping sums of the int64 words, each times
a random odd number of its row and one of its column).

Usage (GPU)::

    DISTSHAP_BENCH_DEVICE=cuda python3 -m benchmarks.slot_variants --shape fashion_mnist-med \\
        --rows 20000
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from benchmarks.shapes import make_data, train_model

__all__ = ["main", "measure"]


def measure(booster, X: np.ndarray, order=("old", "lean", "old", "lean"),
            table_budget_bytes: int | None = None) -> dict:  # fmt: skip
    """Seconds of the split slot kernel's launches on ``X`` for each variant of ``order``, and
    whether its slots have the first round's bits (``table_budget_bytes``: the explainer's;
    ``None``: the library's default)."""
    import cupy

    from distshap import TreeExplainer
    from distshap.kernels.cuda import config, launch
    from distshap.kernels.cuda.device import stream
    from distshap.kernels.cuda.model import device_model, interaction_plan, slot_arrays
    from distshap.kernels.cuda.slot_quadrature import launch_slot_quadrature
    from distshap.pair_slots import pair_slots

    saved = config.SLOT_QUADRATURE_VARIANT
    config.SLOT_QUADRATURE_VARIANT = "split"
    try:
        kw = {} if table_budget_bytes is None else {"table_budget_bytes": table_budget_bytes}
        packed = TreeExplainer(booster, backend="cuda", **kw).packed
        model = device_model(packed)
        plan = interaction_plan(packed, model)
        slots = pair_slots(packed)
        dev = slot_arrays(packed, model, slots, plan)
        Xd = launch.device_rows(cupy.asarray(X, dtype=cupy.float32), packed.num_features)
        n, width = int(Xd.shape[0]), max(1, dev.num_slots)
        batch = min(n, 65535, launch.default_batch_rows(width))
        scale = 2.0**model.interaction_shift
        F1 = packed.num_features + 1
        s = stream()
        acc = cupy.zeros((batch, width), np.int64)
        rng = np.random.default_rng(7)
        odd = [cupy.asarray(rng.integers(0, 2**63, m, dtype=np.uint64) * 2 + 1)
               for m in (batch, width)]  # fmt: skip
        t0 = time.perf_counter()
        for name in dict.fromkeys(order):  # compile, gather the layouts
            launch_slot_quadrature(model, plan, Xd[:2], acc[:2], scale, F1, s, dev, kernel=name)
        cupy.cuda.Device().synchronize()
        quadrature_paths = sum(int(q.paths.shape[0]) for q in plan.quadrature)
        record = {"rows": n, "paths": int(packed.num_paths), "slots": width, "batch": batch,
                  "quadrature_paths": quadrature_paths, "warmup_s": time.perf_counter() - t0,
                  "rounds": []}  # fmt: skip
        ref_sums, ref_first = None, None
        for name in order:
            seconds, sums, first = 0.0, [], None
            for r0 in range(0, n, batch):
                Xb = Xd[r0 : min(n, r0 + batch)]
                a = acc[: int(Xb.shape[0])]
                a.fill(0)
                cupy.cuda.Device().synchronize()
                t0 = time.perf_counter()
                launch_slot_quadrature(model, plan, Xb, a, scale, F1, s, dev, kernel=name)
                cupy.cuda.Device().synchronize()
                seconds += time.perf_counter() - t0
                per_row = cupy.sum(a.view(cupy.uint64) * odd[1], axis=1, dtype=cupy.uint64)
                sums.append(int(cupy.sum(per_row * odd[0][: a.shape[0]], dtype=cupy.uint64)))
                if first is None:
                    first = a.copy()
            if ref_sums is None:
                ref_sums, ref_first = sums, first
            same = sums == ref_sums and bool(cupy.array_equal(first, ref_first))
            nonzero = int(cupy.count_nonzero(first))
            record["rounds"].append({"variant": name, "seconds": seconds, "bits_equal": same,
                                     "nonzero_first_batch": nonzero})  # fmt: skip
        return record
    finally:
        config.SLOT_QUADRATURE_VARIANT = saved


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="split slot kernel: old vs lean")
    parser.add_argument("--shape", default="fashion_mnist-med")
    parser.add_argument("--rows", type=int, default=20_000)
    args = parser.parse_args(argv)
    name, size = args.shape.rsplit("-", 1)
    X, _ = make_data(name, args.rows, seed=1)
    r = measure(train_model(name, size), X)
    print(f"{args.shape}: {r['rows']:,} rows, {r['paths']:,} paths ({r['quadrature_paths']:,} "
          f"in the slot kernel), {r['slots']:,} slots a row, batches of {r['batch']:,} rows; "
          f"warm-up {r['warmup_s']:.1f}s")  # fmt: skip
    best: dict = {}
    for x in r["rounds"]:
        best.setdefault(x["variant"], []).append(x["seconds"])
        print(f"  {x['variant']:5s} {x['seconds']:.4f} s  {r['rows'] / x['seconds']:>10,.0f} rows/s"
              f"  bits equal to round 1: {x['bits_equal']}  (nonzero slots, first batch: "
              f"{x['nonzero_first_batch']:,})")  # fmt: skip
    old, lean = min(best["old"]), min(best["lean"])
    print(f"  old / lean (best rounds): {old / lean:.3f}x", flush=True)


if __name__ == "__main__":
    main()
