"""The additivity check's margin traversal on the GPU: a block a row against a thread a row.

For each ``--shapes`` entry and each ``--rows`` count, on CuPy rows of the shape's model (the
throughput benchmark's rows), after a warm-up, the median milliseconds of ``--repeats`` runs of:

* ``thread a row``: :func:`distshap.kernels.margin.predict_margin` with ``margin_block_rows=0``
  (each thread walks every tree of its row, one after another);
* ``block a row``: the same with every call walked a block a row (the block's threads over the
  trees);
* ``same bits``: the two margins are equal bit for bit;
* the public ``shap_values`` call (additivity check on) under each setting, and without the
  check, so the check's share of the call shows.

The default ``margin_block_rows`` should sit below the row count where the two traversals
cross. Needs a GPU::

    DISTSHAP_BENCH_DEVICE=cuda python3 -m benchmarks.margin_traversal \\
        --shapes cal_housing-med,fashion_mnist-large --rows 1000,5000,20000,50000
"""

from __future__ import annotations

import argparse

import numpy as np

__all__ = ["main", "measure"]

_ALL_ROWS = 1 << 30  # margin_block_rows: every call a block a row


def measure(shape: str, rows: list[int], repeats: int) -> list[dict]:
    """One record a row count of ``shape`` (module docstring)."""
    import cupy

    from benchmarks.kernel_limits import _explainer

    _, explainer, X = _explainer(shape, max(rows))
    trees = int(explainer.packed.margin["roots"].size)
    return [
        {"shape": shape, "rows": n, "trees": trees,
         **_row_count(explainer, cupy.asarray(X[:n]), repeats)}
        for n in rows
    ]  # fmt: skip


def _row_count(explainer, Xd, repeats: int) -> dict:
    """The timings of one row count (module docstring) on the CuPy rows ``Xd``."""
    import cupy

    from benchmarks.kernel_limits import _median
    from distshap.kernels.margin import predict_margin
    from distshap.plan.config import config_context

    packed = explainer.packed
    record, margins = {}, {}
    for name, setting in (("thread", 0), ("block", _ALL_ROWS)):
        with config_context(margin_block_rows=setting):
            record[f"{name}_ms"] = 1e3 * _median(lambda: predict_margin(packed, Xd), repeats)
            margins[name] = cupy.asnumpy(predict_margin(packed, Xd))
            record[f"call_{name}_ms"] = 1e3 * _median(lambda: explainer.shap_values(Xd), repeats)
    record["same_bits"] = bool(np.array_equal(margins["thread"].view(np.uint64),
                                              margins["block"].view(np.uint64)))  # fmt: skip
    record["call_unchecked_ms"] = 1e3 * _median(
        lambda: explainer.shap_values(Xd, check_additivity=False), repeats
    )
    return record


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shapes", default="cal_housing-med", help="comma list")
    parser.add_argument("--rows", default="1000,5000,20000,50000", help="comma list")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    try:
        rows = [int(r) for r in args.rows.split(",")]
    except ValueError:
        raise SystemExit(f"--rows {args.rows!r}: pass a comma list of integers") from None
    if not rows or min(rows) < 1:
        raise SystemExit(f"--rows {args.rows!r}: pass row counts of at least 1")
    for shape in args.shapes.split(","):
        for r in measure(shape, rows, args.repeats):
            print(f"{r['shape']} ({r['trees']:,} trees), {r['rows']:>8,} rows: margin thread a "
                  f"row {r['thread_ms']:8.2f} ms, block a row {r['block_ms']:8.2f} ms, same "
                  f"bits {r['same_bits']}; call with the check {r['call_thread_ms']:8.2f} / "
                  f"{r['call_block_ms']:8.2f} ms, without {r['call_unchecked_ms']:8.2f} ms",
                  flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
