"""Reproduce the paper's Table 5: bin packing of merged paths into 32-lane warps.

For each model shape (see :mod:`benchmarks.shapes`), extract the merged paths, make one item of
``k + 1`` lanes per path with ``k >= 1`` features (the bias lane counts; featureless paths only
add to the expected value and are not packed, as in :class:`distshap.packed.PackedModel`), and
time the packing heuristics ``none`` / ``nf`` / ``ffd`` / ``bfd`` (the median of ``--repeat``
runs, compilation excluded). Prints a markdown table with the paper's numbers beside ours and
writes it to ``--out``.

Usage (from the repository root)::

    python -m benchmarks.table5                         # all 12 shapes, CPU row caps
    python -m benchmarks.table5 --only adult-med covtype-large --out table5.md
    DISTSHAP_BENCH_ROWS=full DISTSHAP_BENCH_DEVICE=cuda python -m benchmarks.table5

Models trained on capped rows (the CPU default for large shapes) have fewer leaves than the
paper's, so their bin counts are not comparable one to one; utilisation is.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np

try:
    from benchmarks.shapes import SHAPES, default_rows, train_model
except ImportError:  # run as a script: benchmarks/ itself is on sys.path
    from shapes import SHAPES, default_rows, train_model  # type: ignore[no-redef]

from distshap.models import load_model
from distshap.packing import ALGORITHMS, pack
from distshap.paths import extract_paths

__all__ = ["PAPER", "measure", "run", "to_markdown"]

#: The paper's Table 5 (V100 host CPU, single thread): (shape, alg) -> (seconds, util, bins).
PAPER: dict[tuple[str, str], tuple[float, float, int]] = {
    ("covtype-small", "none"): (0.0018, 0.105246, 560),
    ("covtype-small", "nf"): (0.0041, 0.982292, 60),
    ("covtype-small", "ffd"): (0.0064, 0.998941, 59),
    ("covtype-small", "bfd"): (0.0086, 0.998941, 59),
    ("covtype-med", "none"): (0.0450, 0.211187, 113_533),
    ("covtype-med", "nf"): (0.0007, 0.913539, 26_246),
    ("covtype-med", "ffd"): (0.0104, 0.940338, 25_498),
    ("covtype-med", "bfd"): (0.0212, 0.940338, 25_498),
    ("covtype-large", "none"): (0.0346, 0.299913, 6_702_132),
    ("covtype-large", "nf"): (0.0413, 0.851639, 2_360_223),
    ("covtype-large", "ffd"): (0.8105, 0.952711, 2_109_830),
    ("covtype-large", "bfd"): (1.6702, 0.952711, 2_109_830),
    ("cal_housing-small", "none"): (0.0015, 0.085938, 80),
    ("cal_housing-small", "nf"): (0.0025, 0.982143, 7),
    ("cal_housing-small", "ffd"): (0.0103, 0.982143, 7),
    ("cal_housing-small", "bfd"): (0.0001, 0.982143, 7),
    ("cal_housing-med", "none"): (0.0246, 0.181457, 21_641),
    ("cal_housing-med", "nf"): (0.0126, 0.931429, 4_216),
    ("cal_housing-med", "ffd"): (0.0016, 0.941704, 4_170),
    ("cal_housing-med", "bfd"): (0.0031, 0.941704, 4_170),
    ("cal_housing-large", "none"): (0.0089, 0.237979, 3_370_373),
    ("cal_housing-large", "nf"): (0.0225, 0.901060, 890_148),
    ("cal_housing-large", "ffd"): (0.3534, 0.933114, 859_570),
    ("cal_housing-large", "bfd"): (0.8760, 0.933114, 859_570),
    ("fashion_mnist-small", "none"): (0.0022, 0.123906, 800),
    ("fashion_mnist-small", "nf"): (0.0082, 0.991250, 100),
    ("fashion_mnist-small", "ffd"): (0.0116, 0.991250, 100),
    ("fashion_mnist-small", "bfd"): (0.0139, 0.991250, 100),
    ("fashion_mnist-med", "none"): (0.0439, 0.264387, 144_211),
    ("fashion_mnist-med", "nf"): (0.0008, 0.867580, 43_947),
    ("fashion_mnist-med", "ffd"): (0.0130, 0.880279, 43_313),
    ("fashion_mnist-med", "bfd"): (0.0219, 0.880279, 43_313),
    ("fashion_mnist-large", "none"): (0.0140, 0.385001, 2_929_303),
    ("fashion_mnist-large", "nf"): (0.0132, 0.791948, 1_424_063),
    ("fashion_mnist-large", "ffd"): (0.3633, 0.958855, 1_176_178),
    ("fashion_mnist-large", "bfd"): (0.8518, 0.958855, 1_176_178),
    ("adult-small", "none"): (0.0016, 0.125000, 80),
    ("adult-small", "nf"): (0.0023, 1.000000, 10),
    ("adult-small", "ffd"): (0.0061, 1.000000, 10),
    ("adult-small", "bfd"): (0.0060, 1.000000, 10),
    ("adult-med", "none"): (0.0050, 0.229014, 13_067),
    ("adult-med", "nf"): (0.0066, 0.913192, 3_277),
    ("adult-med", "ffd"): (0.0575, 0.950010, 3_150),
    ("adult-med", "bfd"): (0.1169, 0.950010, 3_150),
    ("adult-large", "none"): (0.0033, 0.297131, 642_883),
    ("adult-large", "nf"): (0.0035, 0.858728, 222_446),
    ("adult-large", "ffd"): (0.0684, 0.954377, 200_152),
    ("adult-large", "bfd"): (0.0954, 0.954377, 200_152),
}

HEADER = (
    "| Model | Rows | Trees | Paths | Alg | Time (s) | Utilisation | Bins "
    "| Paper time (s) | Paper util. | Paper bins |\n"
    "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|\n"
)


def measure(name: str, size: str, n_rows: int | None = None, repeat: int = 3) -> list[dict]:
    """Pack the paths of shape ``(name, size)`` with every algorithm; one dict per algorithm."""
    rows = default_rows(name, size) if n_rows is None else int(n_rows)
    start = time.perf_counter()
    booster = train_model(name, size, rows, verbose=True)
    train_s = time.perf_counter() - start
    start = time.perf_counter()
    ensemble = load_model(booster)
    load_s = time.perf_counter() - start
    start = time.perf_counter()
    paths = extract_paths(ensemble)
    paths_s = time.perf_counter() - start
    k = np.asarray(paths.lengths)
    sizes = (k[k >= 1] + 1).astype(np.int64)
    shape = f"{name}-{size}"
    print(
        f"{shape}: {rows} rows, {ensemble.num_trees} trees, {paths.num_paths} paths "
        f"({int((k == 0).sum())} featureless), max k {int(k.max(initial=0))}; "
        f"train/load {train_s:.1f} s, load_model {load_s:.2f} s, extract_paths {paths_s:.2f} s",
        flush=True,
    )
    results = []
    for algorithm in ALGORITHMS:
        runs = [pack(sizes, 32, algorithm) for _ in range(max(1, repeat))]
        p = runs[0]
        results.append(
            {
                "shape": shape,
                "rows": rows,
                "trees": ensemble.num_trees,
                "paths": int(sizes.shape[0]),
                "algorithm": algorithm,
                "seconds": statistics.median(r.seconds for r in runs),
                "utilisation": p.utilisation,
                "bins": p.num_bins,
                "oversize": p.num_oversize,
                "load_model_s": load_s,
                "extract_paths_s": paths_s,
            }
        )
    return results


def to_markdown(results: list[dict]) -> str:
    """Markdown table of :func:`measure` results beside the paper's numbers."""
    lines = [HEADER]
    for r in results:
        paper = PAPER.get((r["shape"], r["algorithm"]))
        pt, pu, pb = (f"{paper[0]:.4f}", f"{paper[1]:.6f}", f"{paper[2]:,}") if paper else ("",) * 3
        lines.append(
            f"| {r['shape']} | {r['rows']:,} | {r['trees']:,} | {r['paths']:,} "
            f"| {r['algorithm'].upper()} | {r['seconds']:.6f} | {r['utilisation']:.6f} "
            f"| {r['bins']:,} | {pt} | {pu} | {pb} |\n"
        )
    return "".join(lines)


def run(shapes=SHAPES, n_rows: int | None = None, repeat: int = 3, out: Path | None = None):
    """Measure ``shapes`` and print (and optionally write) the markdown table."""
    results: list[dict] = []
    for name, size in shapes:
        results.extend(measure(name, size, n_rows, repeat))
        if out is not None:  # write as we go: large shapes take a while
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(to_markdown(results))
    table = to_markdown(results)
    print(table)
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", help="shapes as name-size, e.g. adult-med")
    parser.add_argument("--rows", type=int, help="training rows for every shape")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per algorithm")
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(__file__).resolve().parent / "results" / "table5.md",
        help="markdown output file",
    )
    args = parser.parse_args(argv)
    shapes = SHAPES
    if args.only:
        shapes = tuple(tuple(s.rsplit("-", 1)) for s in args.only)  # type: ignore[misc]
    run(shapes, args.rows, args.repeat, args.out)


if __name__ == "__main__":
    main()
