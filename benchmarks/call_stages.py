"""A checked GPU SHAP call's steps on the GPU, one after the other on one stream.

For each ``--shapes`` entry and each ``--rows`` count, on NumPy float32 rows through the
model's graph for that row count's bucket (:mod:`distshap.kernels.cuda.replay`): the median
GPU microseconds of each step of the call (rows to the device, tables, transpose, quadrature,
oversize paths, finish, the check's traversal, values to the host), queued one by one behind a
sleeping kernel with a CUDA event after each, so that no host gap falls between them; their
sum; the graph's replay (median wall microseconds, the host's part included); and the public
call (``TreeExplainer.shap_values``, median wall microseconds). The steps beside the quadrature
are what a call of that many rows pays beyond its kernels, one after the other. The graph
itself runs the check's traversal and the quadrature launches on branches beside each other
(``_Graph._sequence``), so its replay can take less than the steps' sum.

Needs a GPU::

    DISTSHAP_BENCH_DEVICE=cuda python3 -m benchmarks.call_stages \\
        --shapes cal_housing-med,adult-med --rows 1000,4000,8000 --calls 30
"""

from __future__ import annotations

import argparse
import itertools
import statistics

import numpy as np

from benchmarks.call_profile import sleep_kernel
from benchmarks.few_rows import median_us
from benchmarks.shapes import make_data, train_model

__all__ = ["call_stages", "main"]


def call_stages(explainer, rows: np.ndarray, calls: int) -> tuple[dict[str, float], float]:
    """``({step: median GPU us}, graph replay's median wall us)`` of ``rows`` (NumPy
    float32, C-contiguous) through ``explainer``'s model's graph (module docstring)."""
    import cupy
    from numba import cuda

    from distshap.kernels.cuda import device_model
    from distshap.kernels.cuda.replay import replay_bucket, replayed_values
    from distshap.plan.costs import forced_costs

    packed = explainer.packed
    if replayed_values(packed, rows, rows) is None:  # builds the bucket's graph
        raise SystemExit(f"{len(rows)} rows take no graph here: see replay_rows, "
                         "replay_graph_bytes and the check's block traversal")  # fmt: skip
    model = device_model(packed)
    graph = model._forms[("replay", replay_bucket(len(rows)), forced_costs())].graphs[0]
    replay = median_us(lambda: graph.replay(rows), calls)
    sleep = sleep_kernel()
    steps: dict[str, list[float]] = {}
    marks: list[tuple[str, object]] = []

    def mark(step: str) -> None:
        event = cupy.cuda.Event()
        event.record(graph.stream)
        marks.append((step, event))

    for _ in range(calls):
        graph.stream.synchronize()
        graph._fill(rows)  # the graph's own steps, run one by one with an event after each
        marks.clear()
        with graph.stream:
            sleep[1, 1, cuda.external_stream(graph.stream.ptr)](5_000_000)  # 5 ms: all queued
            mark("start")
            graph._sequence(model, mark)
        if marks[0][1].done:
            raise SystemExit("the GPU reached the steps before the host queued them all")
        graph._read(len(rows))
        for (_, before), (step, after) in itertools.pairwise(marks):
            steps.setdefault(step, []).append(1000 * cupy.cuda.get_elapsed_time(before, after))
    return {step: statistics.median(us) for step, us in steps.items()}, replay


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default="cal_housing-med")
    parser.add_argument("--rows", default="1000,4000,8000")
    parser.add_argument("--calls", type=int, default=30)
    args = parser.parse_args(argv)
    from distshap import TreeExplainer

    counts = [int(r) for r in args.rows.split(",")]
    for shape in args.shapes.split(","):
        name, size = shape.rsplit("-", 1)
        explainer = TreeExplainer(train_model(name, size), layout="xgboost", backend="cuda")
        X, _ = make_data(name, max(counts), seed=1)
        print(f"\n== {shape}: GPU us a step (median of {args.calls}), the graph's and the "
              "public call's wall us")  # fmt: skip
        for n in counts:
            rows = np.ascontiguousarray(X[:n], np.float32)
            steps, replay = call_stages(explainer, rows, args.calls)
            call = explainer.shap_values
            public = median_us(lambda call=call, rows=rows: call(rows), args.calls)
            parts = ", ".join(f"{step} {us:.0f}" for step, us in steps.items())
            print(f"{n:>7} rows: {parts}; sum {sum(steps.values()):.0f}; "
                  f"graph {replay:.0f}; call {public:.0f}")  # fmt: skip


if __name__ == "__main__":
    main()
