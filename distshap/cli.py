"""The ``distshap`` command line: explain files, inspect models, plot.

Subcommands::

    distshap explain MODEL DATA -o OUT [--overwrite] [--interactions]
                     [--background FILE [--model-output raw|probability|log_loss]
                      [--labels COLUMN]]
                     [--scheduler ADDR | --gpus N] [--local | --cluster] [--backend B]
                     [--chunk-rows N] [--drop COL]
    distshap info MODEL [--json] [--device-kind KIND] [--rows N]
    distshap calibrate [--scale S] [--repeats N] [--dry-run] [--json]
    distshap plot summary MODEL DATA -o out.png [--max-display 20] [--kind bar|beeswarm]
    distshap plot interactions MODEL DATA -o out.png [--max-display 20] [--group G] [--signed]

``explain`` runs in this process when the input is small (under
:data:`LOCAL_MAX_BYTES` on disk) and no cluster option is given; otherwise on a Dask cluster:
the one at ``--scheduler``, or a local one started with :func:`distshap.start_cluster`.
With ``--background`` the values are interventional (shap's ``feature_perturbation=
"interventional"``) over the rows of that file, of the margin or, for a binary logistic model,
the probability or the log loss (``--model-output``; the log loss takes each row's label from
the ``--labels`` column of DATA, which is then no feature).
Rows go to :class:`distshap.TreeExplainer` as the Python API takes them; files are read and
written by :mod:`distshap.io` (an output never replaces an input, an existing output only with
``--overwrite``, and every output is renamed into place once complete). Benchmarks are run
from a source checkout as ``python -m benchmarks.NAME``.

Errors are one line on stderr and exit code 2 (bad arguments, files, columns) or 1 (anything
else); ``--verbose`` prints the traceback too. SIGTERM stops a run as Ctrl-C does: the output
being written is discarded and the previous one kept.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import threading
import time
import traceback
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

__all__ = ["LOCAL_MAX_BYTES", "main"]

#: ``explain`` without cluster options runs in-process below this input size (bytes on disk).
LOCAL_MAX_BYTES = 64 << 20


class _UsageError(ValueError):
    """A command-line usage error (exit code 2)."""


# ------------------------------------------------------------------------------------------
# explain
# ------------------------------------------------------------------------------------------


def _progress_enabled(args: argparse.Namespace) -> bool:
    if args.progress is not None:
        return args.progress
    return sys.stderr.isatty()


def _fault_types() -> tuple[type, ...]:
    """ValueErrors that are distshap's fault, not the input's (exit code 1)."""
    try:
        from distshap.additivity import AdditivityError
    except ImportError:
        return ()
    return (AdditivityError,)


@contextlib.contextmanager
def _about(ds: Any) -> Iterator[None]:
    """Name the input file in a data error raised while its rows are explained."""
    from distshap.io import InputError

    try:
        yield
    except InputError:
        raise
    except (ValueError, TypeError) as err:
        if isinstance(err, _fault_types()) or ds.where in str(err):
            raise
        raise InputError(f"{ds.where!r}: {_one_line(err)}") from err


def _explain_fn(explainer: Any, interactions: bool) -> Any:
    return explainer.shap_interaction_values if interactions else explainer.shap_values


def _written_expected_value(explainer: Any) -> Any:
    """The bias stored with the values (none for the log loss: it depends on each label)."""
    return None if explainer.model_output == "log_loss" else explainer.expected_value


def _space(explainer: Any) -> str:
    """What the values add up to, for the output's metadata."""
    if explainer.model_output == "probability":
        return "probability (interventional)"
    if explainer.model_output == "log_loss":
        return "log loss (interventional)"
    if explainer.feature_perturbation == "interventional":
        return "margin (raw score, interventional)"
    return "margin (raw score)"


def _run_local(
    args: argparse.Namespace, explainer: Any, ds: Any, fmt: str, names, labels: Any = None
) -> int:
    from distshap import io

    with _about(ds):
        rows = io.model_rows(ds, explainer.packed).compute(scheduler="threads")
        y = None if labels is None else labels.compute(scheduler="threads").to_numpy()
        values = _explain_fn(explainer, args.interactions)(
            rows, y, progress=_progress_enabled(args)
        )
    io.write_array(
        values,
        args.output,
        fmt,
        names,
        explainer.packed.num_groups,
        expected_value=_written_expected_value(explainer),
        interactions=args.interactions,
        overwrite=args.overwrite,
        space=_space(explainer),
    )
    return int(values.shape[0])


def _run_dask(
    args: argparse.Namespace, explainer: Any, ds: Any, fmt: str, names, client, labels: Any = None
) -> int:
    from distributed import progress, wait

    from distshap import io

    with _about(ds):
        rows = io.model_rows(ds, explainer.packed)
        persisted = client.persist(_explain_fn(explainer, args.interactions)(rows, labels))
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
            expected_value=_written_expected_value(explainer),
            interactions=args.interactions,
            overwrite=args.overwrite,
            space=_space(explainer),
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
        try:
            return start_cluster(address=args.scheduler)
        except OSError as err:  # distributed raises OSError / TimeoutError when none answers
            raise _UsageError(
                f"cannot reach the Dask scheduler at --scheduler {args.scheduler!r} "
                f"({_one_line(err)}): start one (`dask scheduler`) and its workers, or check "
                "the address"
            ) from err
    gpus: Any = None
    if args.gpus is not None:
        gpus = False if args.gpus == 0 else args.gpus
    return start_cluster(gpus=gpus, n_workers=args.workers, dashboard_address=None)


def _check_output_options(args: argparse.Namespace) -> None:
    """--background / --model-output / --labels / --interactions that cannot go together."""
    output = args.model_output
    if output != "raw" and args.background is None:
        raise _UsageError(
            f"--model-output {output} explains interventional values: give --background FILE "
            "(rows to integrate over, e.g. 100 to 1,000 training rows)"
        )
    if output == "log_loss" and args.labels is None:
        raise _UsageError(
            "--model-output log_loss explains each row's loss: name the label column of DATA "
            "with --labels COLUMN"
        )
    if args.labels is not None and output != "log_loss":
        raise _UsageError("--labels COLUMN is read for --model-output log_loss only")
    if args.interactions and output != "raw":
        raise _UsageError(
            f"--interactions explain the margin: drop --model-output {output} (shap has no "
            "interaction values of a probability or loss either)"
        )


def _label_column(args: argparse.Namespace, ds: Any) -> Any:
    """The ``--labels`` column of DATA (a lazy Series), checked to exist; ``None`` without."""
    if args.labels is None:
        return None
    from distshap.io import InputError

    if ds.columns is None:
        raise InputError(
            f"--labels {args.labels!r} needs named columns, but {ds.label!r} is a .npy array: "
            "use a Parquet or CSV file holding the labels as a column"
        )
    if args.labels not in ds.columns:
        raise InputError(
            f"--labels {args.labels!r}: {ds.label!r} has no such column "
            f"(columns: {', '.join(map(str, list(ds.columns)[:8]))})"
        )
    return ds.data[args.labels]


def _with_background(args: argparse.Namespace, explainer: Any, bg: Any, drop: list[str]) -> Any:
    """The explainer made interventional over the rows of ``--background`` (dataset ``bg``)."""
    if bg is None:
        return explainer
    from distshap import io

    present = [c for c in drop if bg.columns is not None and c in bg.columns]
    bg = io.select_features(bg, explainer.packed, present)
    with _about(bg):
        rows = io.model_rows(bg, explainer.packed).compute(scheduler="threads")
        if len(rows) == 0:
            raise ValueError("the background has no rows: give at least one")
    return explainer._with_background(rows, args.model_output)


def _cmd_explain(args: argparse.Namespace) -> int:
    from distshap import io
    from distshap.explainer import TreeExplainer

    _check_output_options(args)
    fmt = io.output_format(args.output, interactions=args.interactions)
    ds = io.read_data(args.data, chunk_rows=args.chunk_rows)
    bg = None if args.background is None else io.read_data(args.background)
    inputs = [args.data, *ds.files, args.model]
    if bg is not None:
        inputs += [args.background, *bg.files]
    io.check_output(args.output, fmt, inputs, args.overwrite)
    labels = _label_column(args, ds)
    drop = list(args.drop) + ([args.labels] if args.labels is not None else [])
    explainer = TreeExplainer(args.model, backend=args.backend)
    ds = io.select_features(ds, explainer.packed, drop)
    explainer = _with_background(args, explainer, bg, drop)
    names = explainer.output_feature_names(_Columns(ds.columns))
    if not _use_cluster(args, ds.nbytes):
        # compile (JIT) and upload the model on one row first, so the timing is the real work
        _explain_fn(explainer, args.interactions)(
            np.zeros((1, explainer.num_features), dtype=np.float32),
            None if labels is None else np.zeros(1),
        )
        start = time.perf_counter()
        rows = _run_local(args, explainer, ds, fmt, names, labels)
        where = "in-process"
    else:
        client = _start_client(args)
        try:
            explainer.client = client
            from distshap.cluster import warm_up

            # compile the kernels and ship the model first, so the timing is the real work
            warm_up(client, explainer.packed, backend=args.backend, interactions=args.interactions)
            start = time.perf_counter()
            rows = _run_dask(args, explainer, ds, fmt, names, client, labels)
            workers = len(client.scheduler_info(n_workers=-1).get("workers", {}))
        finally:
            client.close()
        where = f"on {workers} Dask worker(s)"
    seconds = time.perf_counter() - start
    what = "SHAP interaction values" if args.interactions else "SHAP values"
    if explainer.feature_perturbation == "interventional":
        what = f"interventional {what} ({explainer.model_output})"
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


def _cmd_info(args: argparse.Namespace) -> int:
    from distshap.info import format_info, model_info

    info = model_info(args.model, algorithm=args.algorithm, device_kind=args.device_kind,
                      n_rows=args.rows)  # fmt: skip
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        print(format_info(info, args.model))
    return 0


# ------------------------------------------------------------------------------------------
# calibrate
# ------------------------------------------------------------------------------------------


def _cmd_calibrate(args: argparse.Namespace) -> int:
    from distshap import cost_model
    from distshap.kernels.cuda.calibrate import calibrate

    name = cost_model.current_device_name()
    if not name:
        raise RuntimeError("no CUDA GPU is available: calibration times the CUDA kernels")
    say = None if args.json else (lambda line: print(line, flush=True))
    if say:
        print(f"calibrating the CUDA kernel costs on {name} ...", flush=True)
    result = calibrate(scale=args.scale, repeats=args.repeats, write=not args.dry_run,
                       progress=say)  # fmt: skip
    if args.json:
        print(json.dumps(result.to_dict(), indent=1))
        return 0
    c = result.costs
    print(f"fitted constants ({c.source}; per row in ps, per launch and call in us):")
    for name_ in cost_model.COST_FIELDS:
        print(f"  {name_:<18} {1e12 * getattr(c, name_):>10.4g}")
    print(f"  {'launch':<18} {1e6 * c.launch:>10.4g}\n  {'call':<18} {1e6 * c.call:>10.4g}")
    worst = max(abs(m["fit_error"]) for m in result.measurements)
    print(f"largest relative error of the fit over {len(result.measurements)} models: {worst:.1%}")
    print(f"as shipped constants: {cost_model.shipped_literal(c)}")
    for note in result.notes:
        print(f"note: {note}")
    where = f"written to {result.path}" if result.path else "not written (--dry-run)"
    print(f"took {result.seconds:.1f} s; {where}")
    return 0


# ------------------------------------------------------------------------------------------
# plot
# ------------------------------------------------------------------------------------------


def _cmd_plot_summary(args: argparse.Namespace) -> int:
    from distshap import io
    from distshap.explainer import TreeExplainer
    from distshap.inputs import model_matrix
    from distshap.plots import summary_plot

    fmt = io.image_format(args.output)
    if args.max_rows is not None and args.max_rows < 1:
        raise _UsageError(f"--max-rows {args.max_rows} must be >= 1")
    ds = io.read_data(args.data)
    io.check_output(args.output, fmt, [args.data, *ds.files, args.model], args.overwrite)
    explainer = TreeExplainer(args.model, backend=args.backend)
    ds = io.select_features(ds, explainer.packed, args.drop)
    names = explainer.output_feature_names(_Columns(ds.columns))
    with _about(ds):
        rows = io.first_rows(io.model_rows(ds, explainer.packed), args.max_rows)
        phi = explainer.shap_values(rows, progress=_progress_enabled(args))
        values = model_matrix(rows, explainer.packed)  # the feature values the dots are coloured by
    fig = summary_plot(
        phi, values, names, kind=args.kind, max_display=args.max_display, group=args.group
    )
    io.save_figure(fig, args.output, fmt, args.overwrite, dpi=args.dpi, bbox_inches="tight")
    print(f"{len(rows)} rows -> {args.output}")
    return 0


def _cmd_plot_interactions(args: argparse.Namespace) -> int:
    from distshap import io
    from distshap.explainer import TreeExplainer
    from distshap.pair_interactions import interaction_summary, top_pairs
    from distshap.plots import interaction_heatmap

    fmt = io.image_format(args.output)
    if args.max_rows is not None and args.max_rows < 1:
        raise _UsageError(f"--max-rows {args.max_rows} must be >= 1")
    if args.top < 0:
        raise _UsageError(f"--top {args.top} must be >= 0")
    ds = io.read_data(args.data)
    io.check_output(args.output, fmt, [args.data, *ds.files, args.model], args.overwrite)
    explainer = TreeExplainer(args.model, backend=args.backend)
    ds = io.select_features(ds, explainer.packed, args.drop)
    names = explainer.output_feature_names(_Columns(ds.columns))
    with _about(ds):
        rows = io.first_rows(io.model_rows(ds, explainer.packed), args.max_rows)
        summary = interaction_summary(explainer.packed, rows, args.signed, args.backend)
    fig = interaction_heatmap(summary, names, max_display=args.max_display, group=args.group)
    io.save_figure(fig, args.output, fmt, args.overwrite, dpi=args.dpi, bbox_inches="tight")
    if args.top:
        table = top_pairs(summary, args.top, names, group=args.group)
        print(table.to_string(index=False))
    print(f"{len(rows)} rows -> {args.output}")
    return 0


# ------------------------------------------------------------------------------------------
# argument parsing and error handling
# ------------------------------------------------------------------------------------------


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


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


def _overwrite_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--overwrite", action="store_true",
        help="replace an existing OUT (only one distshap could have written; it is replaced "
        "once the new output is complete)",
    )  # fmt: skip


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
    _overwrite_flag(ex)
    ex.add_argument("--interactions", action="store_true", help="SHAP interaction values")
    ex.add_argument(
        "--background", metavar="FILE",
        help="interventional SHAP over the rows of FILE (Parquet / CSV / .npy, the model's "
        "columns; 100 to 1,000 rows are typical); default: tree-path-dependent",
    )  # fmt: skip
    ex.add_argument(
        "--model-output", choices=("raw", "probability", "log_loss"), default="raw",
        help="what is explained (with --background): the margin (raw), or a binary logistic "
        "model's probability or log loss (needs --labels)",
    )  # fmt: skip
    ex.add_argument(
        "--labels", metavar="COLUMN",
        help="column of DATA holding each row's label (0/1) for --model-output log_loss; it "
        "is not a feature (left out of DATA and of the background)",
    )  # fmt: skip
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
    info.add_argument(
        "--device-kind", metavar="KIND",
        help="predict the CUDA strategy for this device kind (H100, H200, generic: shipped "
        "constants) or device name (its calibrated constants where `distshap calibrate` "
        "cached them; default: the current GPU's; works without a GPU)",
    )  # fmt: skip
    info.add_argument(
        "--rows",
        type=_positive_int,
        default=1_000_000,
        metavar="N",
        help="rows of the call whose speed is predicted (default 1,000,000)",
    )
    _common(info)
    info.set_defaults(func=_cmd_info)

    cal = sub.add_parser(
        "calibrate",
        help="measure the CUDA kernels' cost constants on this GPU (cached per device)",
        description="Time the CUDA SHAP kernels on synthetic models (under a minute), fit the "
        "cost model's constants and write them to the cost cache "
        "($DISTSHAP_KERNEL_COSTS, default ~/.cache/distshap/kernel_costs.json) under the "
        "device's name. The kernel strategy of later calls on this kind of device follows "
        "them; nothing is calibrated implicitly.",
    )  # fmt: skip
    cal.add_argument("--scale", type=float, default=1.0,
                     help="scale of the synthetic models and rows (default 1.0)")  # fmt: skip
    cal.add_argument("--repeats", type=_positive_int, default=3, help="timed calls per size")
    cal.add_argument("--dry-run", action="store_true", help="measure and print, write nothing")
    cal.add_argument("--json", action="store_true", help="machine-readable JSON output")
    _common(cal)
    cal.set_defaults(func=_cmd_calibrate)

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
    _overwrite_flag(summary)
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
    pairs = plots.add_parser(
        "interactions",
        help="heat map of the strongest interacting feature pairs of DATA",
        description="Compute the mean |SHAP interaction value| of every feature pair over the "
        "rows of DATA in this process, in one pass without the full interaction matrices, "
        "draw the strongest pairs as a heat map and print them.",
    )
    pairs.add_argument("model")
    pairs.add_argument("data")
    pairs.add_argument("-o", "--output", required=True, help="image file (.png, .svg, .pdf)")
    _overwrite_flag(pairs)
    pairs.add_argument("--max-display", type=int, default=20, help="features shown")
    pairs.add_argument("--group", type=int, default=None, help="class (default: summed)")
    pairs.add_argument("--signed", action="store_true", help="mean value, not mean |value|")
    pairs.add_argument("--top", type=int, default=10, help="strongest pairs printed (0: none)")
    pairs.add_argument("--max-rows", type=int, default=100_000, help="rows used (first N)")
    pairs.add_argument("--dpi", type=int, default=150)
    pairs.add_argument("--backend", choices=("auto", "cpu", "cuda"), default="auto")
    pairs.add_argument("--drop", action="append", default=[], metavar="COLUMN")
    _common(pairs)
    pairs.set_defaults(func=_cmd_plot_interactions)
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
    if isinstance(err, _fault_types()):
        return False
    return isinstance(err, (ValueError, TypeError, OSError, ImportError, KeyError))


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the program runs, so that an output being written is discarded."""


def _on_sigterm(signum: int, frame: Any) -> None:
    raise _Terminated()


@contextlib.contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """While the command runs, SIGTERM unwinds it like Ctrl-C (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


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
        columns, mismatched feature counts, an output that would replace an input or an
        existing file), 1 for other errors, 130 on Ctrl-C and 143 on SIGTERM.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _build_parser()
    args = parser.parse_args(argv)
    verbose = bool(getattr(args, "verbose", False))
    command = args.command if args.command != "plot" else f"plot {args.plot}"
    try:
        with _sigterm_interrupts():
            return int(args.func(args))
    except _Terminated:
        print("distshap: terminated (SIGTERM); nothing was written", file=sys.stderr)
        return 143
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
