"""Time each preprocessing stage of distshap on the benchmark model shapes.

load (our own UBJ parser) -> paths (extract + merge) -> packing (BFD) -> packed model, and the
CPU backend's pattern tables (filled on its first SHAP call, not by the packed model; the CUDA
backend never builds them). Each stage is timed after a warm-up run on a small model, so Numba
compilation is excluded.

Usage: ``python -m benchmarks.preprocess --shapes covtype-med,cal_housing-med``
(``DISTSHAP_BENCH_ROWS=full`` for models trained on the paper's full row counts).
"""

from __future__ import annotations

import argparse
import time

from benchmarks.shapes import model_path, train_model
from distshap.kernels import cpu
from distshap.models import load_model
from distshap.packed import build_packed_model
from distshap.packing import pack
from distshap.paths import extract_paths


def stage_times(name: str, size: str) -> dict:
    """Seconds of each preprocessing stage of shape ``name-size``."""
    train_model(name, size)  # trains and caches the model file if needed
    path = model_path(name, size)
    t0 = time.perf_counter()
    ensemble = load_model(str(path))
    t1 = time.perf_counter()
    paths = extract_paths(ensemble)
    t2 = time.perf_counter()
    sizes = paths.lengths[paths.lengths > 0] + 1
    packing = pack(sizes, algorithm="bfd")
    t3 = time.perf_counter()
    packed = build_packed_model(paths)  # packs again
    t4 = time.perf_counter()
    cpu.shap_tables(packed)
    t5 = time.perf_counter()
    return {
        "shape": f"{name}-{size}",
        "trees": ensemble.num_trees,
        "nodes": ensemble.num_nodes,
        "paths": packed.num_paths,
        "load_s": t1 - t0,
        "paths_s": t2 - t1,
        "bfd_s": packing.seconds,
        "packed_s": t4 - t3,
        "total_s": (t2 - t0) + (t4 - t3),
        "cpu_tables_s": t5 - t4,
        "table_mb": packed.stats["table_bytes"] / 2**20,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="distshap preprocessing stage times")
    parser.add_argument("--shapes", default="cal_housing-med,covtype-med")
    args = parser.parse_args(argv)
    stage_times("cal_housing", "small")  # warm-up: compile every Numba stage
    print(f"{'shape':20} {'trees':>6} {'nodes':>10} {'paths':>9} {'load':>6} {'paths':>6} "
          f"{'BFD':>6} {'packed':>6} {'total':>6} {'CPU tables':>10} {'tables MB':>9}")  # fmt: skip
    for item in args.shapes.split(","):
        name, size = item.rsplit("-", 1)
        r = stage_times(name, size)
        print(f"{r['shape']:20} {r['trees']:>6} {r['nodes']:>10,} {r['paths']:>9,} "
              f"{r['load_s']:>6.2f} {r['paths_s']:>6.2f} {r['bfd_s']:>6.3f} "
              f"{r['packed_s']:>6.2f} {r['total_s']:>6.2f} {r['cpu_tables_s']:>10.2f} "
              f"{r['table_mb']:>9.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
