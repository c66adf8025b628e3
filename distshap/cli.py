"""The ``distshap`` command line: explain files, inspect models, run benchmarks, plot.

Subcommands::

    distshap explain MODEL DATA -o OUT [--interactions] [--scheduler ADDR | --gpus N]
                     [--local | --cluster] [--backend B] [--chunk-rows N] [--drop COL]
    distshap info MODEL [--json]
    distshap bench {table5,throughput,scaling} [ARGS...]
    distshap plot summary MODEL DATA -o out.png [--max-display 20] [--kind bar|beeswarm]

``explain`` runs in this process when the input is small (under
:data:`LOCAL_MAX_BYTES` on disk) and no cluster option is given; otherwise on a Dask cluster:
the one at ``--scheduler``, or a local one started with :func:`distshap.start_cluster`.
Input and output formats are described in :mod:`distshap.io`.

Errors are one line on stderr and exit code 2 (bad arguments, files, columns) or 1 (anything
else); ``--verbose`` prints the traceback too.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import sys
import time
import traceback
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["LOCAL_MAX_BYTES", "main", "model_info"]

#: ``explain`` without cluster options runs in-process below this input size (bytes on disk).
LOCAL_MAX_BYTES = 64 << 20

_BENCHMARKS = ("table5", "throughput", "scaling")


class _UsageError(ValueError):
    """A command-line usage error (exit code 2)."""


# ------------------------------------------------------------------------------------------
# explain
# ------------------------------------------------------------------------------------------


def _progress_enabled(args: argparse.Namespace) -> bool:
    if args.progress is not None:
        return args.progress
    return sys.stderr.isatty()


def _run_local(args: argparse.Namespace, explainer: Any, ds: Any, fmt: str, names) -> int:
    from distshap import io

    X = io.to_float32_dask(ds, explainer.packed.feature_categories).compute(scheduler="threads")
    fn = explainer.shap_interaction_values if args.interactions else explainer.shap_values
    values = fn(X, progress=_progress_enabled(args))
    io.write_array(
        values,
        args.output,
        fmt,
        names,
        explainer.packed.num_groups,
        expected_value=explainer.expected_value,
        interactions=args.interactions,
    )
    return int(values.shape[0])


def _run_dask(args: argparse.Namespace, explainer: Any, ds: Any, fmt: str, names, client) -> int:
    from distributed import progress, wait

    from distshap import io

    X = io.to_float32_dask(ds, explainer.packed.feature_categories)
    fn = explainer.shap_interaction_values if args.interactions else explainer.shap_values
    persisted = client.persist(fn(X))
    if _progress_enabled(args):
        with contextlib.redirect_stdout(sys.stderr):
            progress(persisted)
    wait(persisted)
    return io.write_dask(
        persisted,
        args.output,
        fmt,
        names,
        explainer.packed.num_groups,
        client,
        expected_value=explainer.expected_value,
        interactions=args.interactions,
    )


def _use_cluster(args: argparse.Namespace, nbytes: int) -> bool:
    if args.local:
        if args.scheduler or args.gpus is not None or args.workers is not None:
            raise _UsageError("--local runs in this process: drop --scheduler/--gpus/--workers")
        return False
    if args.cluster or args.scheduler or args.gpus is not None or args.workers is not None:
        return True
    return nbytes >= LOCAL_MAX_BYTES


def _start_client(args: argparse.Namespace) -> Any:
    from distshap.cluster import start_cluster

    if args.scheduler:
        if args.gpus is not None or args.workers is not None:
            raise _UsageError(
                "--gpus/--workers configure a local cluster; with --scheduler start the "
                f"workers yourself (`dask cuda worker {args.scheduler}`)"
            )
        return start_cluster(address=args.scheduler)
    gpus: Any = None
    if args.gpus is not None:
        gpus = False if args.gpus == 0 else args.gpus
    return start_cluster(gpus=gpus, n_workers=args.workers, dashboard_address=None)


def _cmd_explain(args: argparse.Namespace) -> int:
    from distshap import io
    from distshap.explainer import TreeExplainer

    fmt = io.output_format(args.output, interactions=args.interactions)
    ds = io.read_data(args.data, chunk_rows=args.chunk_rows)
    explainer = TreeExplainer(args.model, backend=args.backend)
    ds = io.select_features(ds, explainer.num_features, explainer.feature_names, args.drop)
    names = explainer.output_feature_names(_Columns(ds.columns))
    if not _use_cluster(args, ds.nbytes):
        # compile (JIT) and upload the model on one row first, so the timing is the real work
        warm = explainer.shap_interaction_values if args.interactions else explainer.shap_values
        warm(np.zeros((1, explainer.num_features), dtype=np.float32))
        start = time.perf_counter()
        rows = _run_local(args, explainer, ds, fmt, names)
        where = "in-process"
    else:
        client = _start_client(args)
        try:
            explainer.client = client
            from distshap.cluster import warm_up

            # compile the kernels and ship the model first, so the timing is the real work
            warm_up(client, explainer.packed, backend=args.backend, interactions=args.interactions)
            start = time.perf_counter()
            rows = _run_dask(args, explainer, ds, fmt, names, client)
            workers = len(client.scheduler_info(n_workers=-1).get("workers", {}))
        finally:
            client.close()
        where = f"on {workers} Dask worker(s)"
    seconds = time.perf_counter() - start
    what = "SHAP interaction values" if args.interactions else "SHAP values"
    print(
        f"{rows} rows, {seconds:.3f} s, {rows / max(seconds, 1e-9):,.0f} rows/s "
        f"({what} {where}) -> {args.output}"
    )
    return 0


class _Columns:
    """Carries column names to :meth:`TreeExplainer.output_feature_names`."""

    def __init__(self, columns: Sequence[str] | None) -> None:
        self.columns = columns


# ------------------------------------------------------------------------------------------
# info
# ------------------------------------------------------------------------------------------


def _max_depth(ens: Any) -> int:
    """Deepest leaf (edges from the root) over all trees, by a level-by-level walk."""
    depth = 0
    frontier = ens.tree_offsets[:-1].astype(np.int64)
    while True:
        internal = frontier[ens.left[frontier] >= 0]
        if internal.size == 0:
            return depth
        frontier = np.concatenate([ens.left[internal], ens.right[internal]]).astype(np.int64)
        depth += 1


def model_info(model: Any, algorithm: str = "bfd") -> dict:
    """Structure, path and packing statistics of ``model`` (what ``distshap info`` prints).

    Parameters
    ----------
    model
        Anything :class:`distshap.TreeExplainer` accepts (a model file path, a Booster, ...).
    algorithm : str
        Packing heuristic of the :class:`~distshap.packed.PackedModel` whose table statistics
        are reported.

    Returns
    -------
    dict
        JSON-serialisable: ``model`` (kind, trees, nodes, leaves, max_depth, output groups,
        features, feature names, base score, expected value), ``paths`` (unique merged paths,
        paths without features, histogram of merged path lengths), ``packing`` (bins,
        utilisation, oversize bins and seconds per heuristic NF / FFD / BFD), ``tables``
        (pattern-table vs DP path counts, table bytes).
    """
    from distshap.models import load_model
    from distshap.packed import build_packed_model
    from distshap.packing import pack
    from distshap.paths import extract_paths

    ens = load_model(model)
    t0 = time.perf_counter()
    paths = extract_paths(ens)
    path_seconds = time.perf_counter() - t0
    lengths = paths.lengths
    packed = build_packed_model(paths, algorithm=algorithm, feature_names=ens.feature_names)
    items = (lengths[lengths > 0] + 1).astype(np.int32)
    packing = {}
    for alg in ("nf", "ffd", "bfd"):
        p = pack(items, capacity=packed.capacity, algorithm=alg)
        packing[alg] = {
            "bins": int(p.num_bins),
            "utilisation": float(p.utilisation),
            "oversize_bins": int(p.num_oversize),
            "seconds": float(p.seconds),
        }
    hist = np.bincount(lengths) if lengths.size else np.zeros(1, dtype=np.int64)
    stats = packed.stats
    return {
        "model": {
            "kind": ens.model_kind,
            "trees": ens.num_trees,
            "nodes": ens.num_nodes,
            "leaves": int(ens.is_leaf().sum()),
            "max_depth": _max_depth(ens),
            "output_groups": ens.num_groups,
            "features": ens.num_features,
            "feature_names": list(ens.feature_names) if ens.feature_names else None,
            "base_score": [float(v) for v in ens.base_score],
            "expected_value": [float(v) for v in packed.expected_value],
        },
        "paths": {
            "unique_paths": paths.num_paths,
            "featureless_paths": int((lengths == 0).sum()),
            "max_length": int(lengths.max()) if lengths.size else 0,
            "mean_length": float(lengths.mean()) if lengths.size else 0.0,
            "length_histogram": {str(k): int(c) for k, c in enumerate(hist) if c},
            "seconds": path_seconds,
        },
        "packing": packing,
        "tables": {
            "algorithm": stats.get("algorithm", algorithm),
            "table_paths": int(stats.get("table_paths", 0)),
            "dp_paths": int(stats.get("dp_paths", 0)),
            "table_bytes": int(stats.get("table_bytes", 0)),
            "lanes": int(stats.get("lanes", 0)),
            "build_seconds": float(stats.get("build_seconds", 0.0)),
        },
        "cuda": _cuda_strategy(packed),
    }


def _cuda_strategy(packed) -> dict | None:
    """How the CUDA kernels would run ``packed`` (no GPU needed: host-side arithmetic only).

    ``None`` where Numba's CUDA target cannot be imported.
    """
    try:
        from distshap.kernels.cuda import strategy_stats
    except ImportError:
        return None

    st = strategy_stats(packed)
    keys = ("quadrature_paths", "oversize_paths", "interaction_table_paths",
            "interaction_table_bytes")  # fmt: skip
    out = {key: int(st[key]) for key in keys}
    out["quadrature_nodes"] = {str(n): c for n, c in st["quadrature_nodes"].items()}
    out["quadrature_shared"] = {"shap": bool(st["quadrature_shared"][0]),
                                "interactions": bool(st["quadrature_shared"][1])}  # fmt: skip
    return out


def _human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def _format_info(info: dict, path: str) -> str:
    m, p, t = info["model"], info["paths"], info["tables"]
    names = m["feature_names"]
    lines = [
        f"model           {path} ({m['kind']})",
        f"trees           {m['trees']:,}  (nodes {m['nodes']:,}, leaves {m['leaves']:,}, "
        f"max depth {m['max_depth']})",
        f"output groups   {m['output_groups']}",
        f"features        {m['features']}"
        + (f"  [{', '.join(names[:8])}{', ...' if len(names) > 8 else ''}]" if names else ""),
        f"expected value  {', '.join(f'{v:.6g}' for v in m['expected_value'])}",
        f"unique paths    {p['unique_paths']:,}  (featureless {p['featureless_paths']:,}, "
        f"mean length {p['mean_length']:.2f}, max {p['max_length']})",
        "path lengths    (merged features per path: count)",
    ]
    hist = p["length_histogram"]
    peak = max(hist.values()) if hist else 1
    for k, count in hist.items():
        bar = "#" * max(1, round(40 * count / peak))
        lines.append(f"  {int(k):>3}  {count:>10,}  {bar}")
    lines.append("packing         heuristic      bins  utilisation  oversize        ms")
    for alg, row in info["packing"].items():
        lines.append(
            f"                {alg.upper():<9} {row['bins']:>9,}  {row['utilisation']:>11.4f}"
            f"  {row['oversize_bins']:>8}  {1e3 * row['seconds']:>8.3f}"
        )
    lines.append(
        f"pattern tables  {t['table_paths']:,} paths use tables, {t['dp_paths']:,} the DP; "
        f"tables {_human_bytes(t['table_bytes'])} ({t['algorithm'].upper()} packing, built in "
        f"{t['build_seconds']:.3f} s)"
    )
    c = info["cuda"]
    if c is None:
        return "\n".join(lines)
    shared = c["quadrature_shared"]
    sums = {True: "shared memory", False: "global memory"}
    nodes = ", ".join(f"{n} nodes: {count:,}" for n, count in c["quadrature_nodes"].items())
    lines.append(
        f"CUDA kernels    SHAP: {c['quadrature_paths']:,} paths by quadrature "
        f"({nodes or 'none'}), {c['oversize_paths']:,} oversize (fallback kernel)\n"
        f"                interactions: {c['interaction_table_paths']:,} paths on tables of "
        f"{_human_bytes(c['interaction_table_bytes'])} (filled on the GPU at first use), "
        "the others by quadrature\n"
        f"                quadrature sums in {sums[shared['shap']]} (SHAP), "
        f"{sums[shared['interactions']]} (interactions)"
    )
    return "\n".join(lines)


def _cmd_info(args: argparse.Namespace) -> int:
    info = model_info(args.model, algorithm=args.algorithm)
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        print(_format_info(info, args.model))
    return 0


# ------------------------------------------------------------------------------------------
# bench
# ------------------------------------------------------------------------------------------


def _source_root() -> str | None:
    """The repository root when distshap runs from a source checkout (or editable install)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return root if os.path.isdir(os.path.join(root, "benchmarks")) else None


def _import_benchmark(name: str) -> Any:
    module_name = f"benchmarks.{name}"
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name not in ("benchmarks", module_name):
            raise
    root = _source_root()
    if root is not None and os.path.isfile(os.path.join(root, "benchmarks", f"{name}.py")):
        sys.path.insert(0, root)
        return importlib.import_module(module_name)
    raise _UsageError(
        f"the benchmarks are not installed with distshap: run `distshap bench {name}` (or "
        f"`python -m benchmarks.{name}`) from a source checkout of the distshap repository"
    )


def _cmd_bench(name: str, argv: list[str]) -> int:
    module = _import_benchmark(name)
    entry = getattr(module, "main", None)
    if entry is None:
        raise _UsageError(f"benchmarks.{name} has no main(argv) function to run")
    saved, sys.argv[0] = sys.argv[0], f"distshap bench {name}"  # the benchmark's usage line
    try:
        result = entry(argv)
    finally:
        sys.argv[0] = saved
    return result if isinstance(result, int) else 0


# ------------------------------------------------------------------------------------------
# plot
# ------------------------------------------------------------------------------------------


def _cmd_plot_summary(args: argparse.Namespace) -> int:
    from distshap import io
    from distshap.explainer import TreeExplainer
    from distshap.plots import summary_plot

    if not args.output.lower().endswith((".png", ".svg", ".pdf", ".jpg", ".jpeg")):
        raise _UsageError(f"cannot tell the image format of {args.output!r}: use .png/.svg/.pdf")
    ds = io.read_data(args.data)
    explainer = TreeExplainer(args.model, backend=args.backend)
    ds = io.select_features(ds, explainer.num_features, explainer.feature_names, args.drop)
    names = explainer.output_feature_names(_Columns(ds.columns))
    if args.max_rows is not None and args.max_rows < 1:
        raise _UsageError(f"--max-rows {args.max_rows} must be >= 1")
    X = _first_rows(io.to_float32_dask(ds, explainer.packed.feature_categories), args.max_rows)
    phi = explainer.shap_values(X, progress=_progress_enabled(args))
    fig = summary_plot(
        phi, X, names, kind=args.kind, max_display=args.max_display, group=args.group
    )
    fig.savefig(args.output, dpi=args.dpi, bbox_inches="tight")
    print(f"{X.shape[0]} rows -> {args.output}")
    return 0


def _first_rows(X: Any, max_rows: int | None) -> np.ndarray:
    """The first ``max_rows`` rows of a dask array, reading only the chunks that hold them."""
    if max_rows is None:
        return X.compute(scheduler="threads")
    parts, count = [], 0
    for block in X.to_delayed().ravel():
        part = block.compute(scheduler="threads")
        parts.append(part)
        count += len(part)
        if count >= max_rows:
            break
    return np.concatenate(parts)[:max_rows]


# ------------------------------------------------------------------------------------------
# argument parsing and error handling
# ------------------------------------------------------------------------------------------


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=argparse.SUPPRESS,
        help="print the full traceback on errors",
    )


def _progress_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--progress", dest="progress", action="store_true", default=None,
        help="show a progress bar (default: when stderr is a terminal)",
    )  # fmt: skip
    group.add_argument("--no-progress", dest="progress", action="store_false")


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="distshap",
        description="Exact SHAP values of tree ensembles on CPUs, GPUs and Dask clusters.",
    )
    parser.add_argument("--version", action="version", version=_version())
    parser.add_argument("-v", "--verbose", action="store_true", help="tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    ex = sub.add_parser(
        "explain",
        help="SHAP values of the rows in DATA, written to OUT",
        description="Compute SHAP (interaction) values of DATA (Parquet, CSV or .npy: a file, "
        "directory or glob) and write them to OUT (.npy, .parquet or .zarr). Small inputs run "
        f"in this process (under {LOCAL_MAX_BYTES >> 20} MiB, unless a cluster option is "
        "given); larger ones on a local Dask cluster (GPU workers when GPUs are visible).",
    )
    ex.add_argument("model", help="model file (XGBoost .json/.ubj, LightGBM .txt)")
    ex.add_argument("data", help="Parquet / CSV / .npy file, directory or glob")
    ex.add_argument("-o", "--output", required=True, help="OUT: .npy, .parquet or .zarr")
    ex.add_argument("--interactions", action="store_true", help="SHAP interaction values")
    ex.add_argument("--scheduler", metavar="ADDR", help="address of a running Dask scheduler")
    ex.add_argument("--gpus", type=int, help="local cluster with N GPU workers (0: CPU cluster)")
    ex.add_argument("--workers", type=int, help="local workers (GPUs: first N; CPU: default 1)")
    where = ex.add_mutually_exclusive_group()
    where.add_argument("--local", action="store_true", help="run in this process, no cluster")
    where.add_argument("--cluster", action="store_true", help="use a Dask cluster even if small")
    ex.add_argument("--backend", choices=("auto", "cpu", "cuda"), default="auto")
    ex.add_argument("--chunk-rows", type=int, help="rows per chunk (.npy; approximate for CSV)")
    ex.add_argument(
        "--drop", action="append", default=[], metavar="COLUMN",
        help="leave out a column of DATA (e.g. the label); repeatable",
    )  # fmt: skip
    _progress_flags(ex)
    _common(ex)
    ex.set_defaults(func=_cmd_explain)

    info = sub.add_parser(
        "info",
        help="trees, paths, packing and table statistics of a model",
        description="Print the structure of MODEL and the statistics of its preprocessing: "
        "merged paths, bin packing per heuristic (NF/FFD/BFD), pattern tables.",
    )
    info.add_argument("model", help="model file (XGBoost .json/.ubj, LightGBM .txt)")
    info.add_argument("--json", action="store_true", help="machine-readable JSON output")
    info.add_argument("--algorithm", choices=("bfd", "ffd", "nf"), default="bfd")
    _common(info)
    info.set_defaults(func=_cmd_info)

    bench = sub.add_parser(
        "bench",
        help="run a benchmark (source checkout only)",
        description="Forward the remaining arguments to benchmarks.NAME.main(argv); "
        "`distshap bench NAME --help` shows the benchmark's own options.",
        add_help=True,
    )
    bench.add_argument("name", choices=_BENCHMARKS)
    bench.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the benchmark")

    plot = sub.add_parser("plot", help="plots without the shap package")
    plots = plot.add_subparsers(dest="plot", metavar="PLOT")
    plots.required = True
    summary = plots.add_parser(
        "summary",
        help="mean |SHAP| bar chart or beeswarm of DATA",
        description="Compute SHAP values of DATA in this process and draw a summary plot.",
    )
    summary.add_argument("model")
    summary.add_argument("data")
    summary.add_argument("-o", "--output", required=True, help="image file (.png, .svg, .pdf)")
    summary.add_argument("--max-display", type=int, default=20, help="features shown")
    summary.add_argument("--kind", choices=("auto", "bar", "beeswarm"), default="auto")
    summary.add_argument("--group", type=int, default=None, help="class to show (multiclass)")
    summary.add_argument("--max-rows", type=int, default=100_000, help="rows used (first N)")
    summary.add_argument("--dpi", type=int, default=150)
    summary.add_argument("--backend", choices=("auto", "cpu", "cuda"), default="auto")
    summary.add_argument("--drop", action="append", default=[], metavar="COLUMN")
    _progress_flags(summary)
    _common(summary)
    summary.set_defaults(func=_cmd_plot_summary)
    return parser


def _version() -> str:
    from distshap import __version__

    return f"distshap {__version__}"


def _one_line(err: BaseException) -> str:
    text = " ".join(line.strip() for line in str(err).strip().splitlines() if line.strip())
    if not text:
        text = type(err).__name__
    return text if len(text) <= 600 else text[:597] + "..."


def _is_input_error(err: BaseException) -> bool:
    return isinstance(err, (ValueError, TypeError, OSError, ImportError, KeyError))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``distshap`` command line; returns the exit code.

    Parameters
    ----------
    argv : sequence of str, optional
        Arguments without the program name (default ``sys.argv[1:]``).

    Returns
    -------
    int
        0 on success, 2 for usage and input errors (bad arguments, unreadable files, missing
        columns, mismatched feature counts), 1 for other errors, 130 on Ctrl-C.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _build_parser()
    args = parser.parse_args(argv)
    verbose = bool(getattr(args, "verbose", False))
    command = args.command if args.command != "plot" else f"plot {args.plot}"
    try:
        if args.command == "bench":
            return _cmd_bench(args.name, list(args.args))
        return int(args.func(args))
    except KeyboardInterrupt:
        print("distshap: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # one readable line, the traceback only on request
        if verbose:
            traceback.print_exc()
        code = 2 if _is_input_error(err) else 1
        kind = "" if code == 2 else f"{type(err).__name__}: "
        hint = "" if verbose or code == 2 else " (--verbose shows the traceback)"
        print(f"distshap {command}: error: {kind}{_one_line(err)}{hint}", file=sys.stderr)
        return code


if __name__ == "__main__":
    sys.exit(main())
