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
    from benchmarks.paper import PAPER_TABLE5
    from benchmarks.shapes import SHAPES, default_rows, train_model
except ImportError:  # run as a script: benchmarks/ itself is on sys.path
    from paper import PAPER_TABLE5  # type: ignore[no-redef]
    from shapes import SHAPES, default_rows, train_model  # type: ignore[no-redef]

from distshap.models import load_model
from distshap.packing import ALGORITHMS, pack
from distshap.paths import extract_paths

__all__ = ["measure", "run", "to_markdown"]

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
        paper = PAPER_TABLE5.get((r["shape"], r["algorithm"]))
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
