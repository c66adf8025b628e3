"""The ``distshap`` command line: explain files, inspect models, plot.

Subcommands::

    distshap explain MODEL DATA -o OUT [--overwrite] [--interactions]
                     [--background FILE [--model-output raw|probability|log_loss]
                      [--labels COLUMN]]
                     [--scheduler ADDR | --gpus N] [--local | --cluster] [--backend B]
                     [--chunk-rows N] [--drop COL]
    distshap info MODEL [--json] [--device-kind KIND] [--rows N]
    distshap calibrate [--scale S] [--repeats N] [--dry-run] [--json]
    distshap compile [--backend auto|cpu|cuda] [--kinds shap,interactions,interventional,banzhaf]
    distshap plot summary MODEL DATA -o out.png [--max-display 20] [--kind bar|beeswarm]
    distshap plot interactions MODEL DATA -o out.png [--max-display 20] [--group G] [--signed]
    distshap serve --model NAME=PATH[,background=FILE][,output=O] [--host H] [--port P]
                   [--token T | --insecure] [--local | --scheduler ADDR] (see distshap.serve)

``explain`` runs in this process when the input is small (under
:data:`distshap.cli_commands.LOCAL_MAX_BYTES` on disk) and no cluster option is given;
otherwise on a Dask cluster: the one at ``--scheduler``, or a local one started with
:func:`distshap.start_cluster`. With ``--background`` the values are interventional (shap's
``feature_perturbation="interventional"``) over the rows of that file, of the margin or, for a
binary logistic model, the probability or the log loss (``--model-output``; the log loss takes
each row's label from the ``--labels`` column of DATA, which is then no feature).
Rows go to :class:`distshap.TreeExplainer` as the Python API takes them; files are read and
written by :mod:`distshap.io` (an output never replaces an input, an existing output only with
``--overwrite``, and every output is renamed into place once complete). Benchmarks are run
from a source checkout as ``python -m benchmarks.NAME``.

Errors and warnings are one line on stderr naming the command; errors exit with code 2 (bad
arguments, files, columns) or 1 (anything else); ``--verbose`` prints the traceback too.
SIGTERM stops a run as Ctrl-C does: the output being written is discarded and the previous one
kept (exit code 143, 130 for Ctrl-C); one that arrives once the new output is in place stops
only the printing (exit code 0: the exit code says whether OUT is new). A reader that closes
stdout early (``distshap info MODEL | head -1``) ends the command quietly with exit code 141,
as SIGPIPE ends other programs.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
import traceback
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

from distshap import cli_commands as commands
from distshap.cli_commands import LOCAL_MAX_BYTES, fault_types, one_line
from distshap.serve.command import add_parser as add_serve_parser

__all__ = ["main"]


_MODEL_HELP = "model file (XGBoost .json/.ubj, LightGBM .txt, CatBoost .json, scikit-learn .skops)"


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
    _add_explain(sub)
    _add_info(sub)
    _add_calibrate(sub)
    _add_compile(sub)
    _add_plots(sub)
    add_serve_parser(sub)
    return parser


def _add_explain(sub: Any) -> None:
    ex = sub.add_parser(
        "explain",
        help="SHAP values of the rows in DATA, written to OUT",
        description="Compute SHAP (interaction) values of DATA (Parquet, CSV or .npy: a file, "
        "directory or glob) and write them to OUT (.npy, .parquet or .zarr). Small inputs run "
        f"in this process (under {LOCAL_MAX_BYTES >> 20} MiB, unless a cluster option is "
        "given); larger ones on a local Dask cluster (GPU workers when GPUs are visible).",
    )
    ex.add_argument("model", help=_MODEL_HELP)
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
    ex.set_defaults(func=commands.run_explain)


def _add_info(sub: Any) -> None:
    info = sub.add_parser(
        "info",
        help="trees, paths, packing and table statistics of a model",
        description="Print the structure of MODEL and the statistics of its preprocessing: "
        "merged paths, bin packing per heuristic (NF/FFD/BFD), pattern tables.",
    )
    info.add_argument("model", help=_MODEL_HELP)
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
    info.set_defaults(func=commands.run_info)


def _add_calibrate(sub: Any) -> None:
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
    cal.set_defaults(func=commands.run_calibrate)


def _add_compile(sub: Any) -> None:
    comp = sub.add_parser(
        "compile",
        help="compile the kernels ahead into Numba's disk cache (for images and CI)",
        description="Compile every kernel of a backend on tiny built-in models, so that later "
        "processes load them from Numba's disk cache instead of compiling on their first call "
        "(distshap.warmup.warm_up). The cache is NUMBA_CACHE_DIR, by default "
        "~/.cache/distshap/numba.",
    )  # fmt: skip
    comp.add_argument("--backend", choices=["auto", "cpu", "cuda"], default="auto",
                      help="default auto: CUDA if a GPU is visible")  # fmt: skip
    comp.add_argument("--kinds", default="shap,interactions,interventional,banzhaf",
                      help="comma-separated: shap, interactions, interventional (CPU), banzhaf "
                      "(default all)")  # fmt: skip
    _common(comp)
    comp.set_defaults(func=commands.run_compile)


def _plot_head(parser: argparse.ArgumentParser) -> None:
    """The arguments every ``distshap plot`` command starts with."""
    parser.add_argument("model")
    parser.add_argument("data")
    parser.add_argument("-o", "--output", required=True, help="image file (.png, .svg, .pdf)")
    _overwrite_flag(parser)
    parser.add_argument("--max-display", type=int, default=20, help="features shown")


def _plot_tail(parser: argparse.ArgumentParser) -> None:
    """The options every ``distshap plot`` command ends with (before ``-v``)."""
    parser.add_argument("--max-rows", type=int, default=100_000, help="rows used (first N)")
    parser.add_argument("--dpi", type=int, default=150)
    parser.add_argument("--backend", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--drop", action="append", default=[], metavar="COLUMN")


def _add_plots(sub: Any) -> None:
    plot = sub.add_parser("plot", help="plots without the shap package")
    plots = plot.add_subparsers(dest="plot", metavar="PLOT")
    plots.required = True
    summary = plots.add_parser(
        "summary",
        help="mean |SHAP| bar chart or beeswarm of DATA",
        description="Compute SHAP values of DATA in this process and draw a summary plot.",
    )
    _plot_head(summary)
    summary.add_argument("--kind", choices=("auto", "bar", "beeswarm"), default="auto")
    summary.add_argument("--group", type=int, default=None, help="class to show (multiclass)")
    _plot_tail(summary)
    _progress_flags(summary)
    _common(summary)
    summary.set_defaults(func=commands.run_plot_summary)
    pairs = plots.add_parser(
        "interactions",
        help="heat map of the strongest interacting feature pairs of DATA",
        description="Compute the mean |SHAP interaction value| of every feature pair over the "
        "rows of DATA in this process, in one pass without the full interaction matrices, "
        "draw the strongest pairs as a heat map and print them.",
    )
    _plot_head(pairs)
    pairs.add_argument("--group", type=int, default=None, help="class (default: summed)")
    pairs.add_argument("--signed", action="store_true", help="mean value, not mean |value|")
    pairs.add_argument("--top", type=int, default=10, help="strongest pairs printed (0: none)")
    _plot_tail(pairs)
    _common(pairs)
    pairs.set_defaults(func=commands.run_plot_interactions)


def _version() -> str:
    from distshap import __version__

    return f"distshap {__version__}"


def _is_input_error(err: BaseException) -> bool:
    if isinstance(err, fault_types()):
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


@contextlib.contextmanager
def _one_line_warnings(command: str) -> Iterator[None]:
    """While the command runs, a warning is one line on stderr naming the command (not the
    module and line it was raised in)."""

    def show(message: Any, category: type, filename: str, lineno: int, *rest: Any) -> None:
        print(f"distshap {command}: warning: {one_line(message)}", file=sys.stderr)

    with warnings.catch_warnings():
        warnings.showwarning = show
        yield


def _output_state(args: argparse.Namespace) -> tuple[int, int] | None:
    """The identity of OUT on disk (inode, modification time), ``None`` when there is none.

    An output appears only by a rename of a complete one, so a changed identity means the
    new output is in place."""
    path = getattr(args, "output", None)
    if not path:
        return None
    try:
        st = os.lstat(path.rstrip("/\\") or path)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns


def _stopped(args: argparse.Namespace, before: Any, signal_name: str, code: int) -> int:
    """Exit code and line for a run stopped by ``signal_name``, saying what is on disk."""
    if getattr(args, "output", None) and _output_state(args) not in (None, before):
        print(
            f"distshap: {signal_name} after OUT {args.output!r} was written: it is complete",
            file=sys.stderr,
        )
        return 0
    kept = "; nothing was written (a previous OUT is kept)" if getattr(args, "output", None) else ""
    print(f"distshap: {signal_name}{kept}", file=sys.stderr)
    return code


class _StdoutClosed(BaseException):
    """The reader of stdout went away (``distshap info MODEL | head -1``): stop quietly.

    A ``BaseException``, so that no handler meant for the command's own errors takes it, and
    output files being written are discarded as on Ctrl-C."""


class _GuardedStdout:
    """``sys.stdout`` whose writes raise :class:`_StdoutClosed` where the pipe is closed, so
    that a broken pipe elsewhere (a socket to a scheduler) stays an error."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            raise _StdoutClosed() from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            raise _StdoutClosed() from None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextlib.contextmanager
def _guarded_stdout() -> Iterator[None]:
    """While the command runs, a closed stdout raises :class:`_StdoutClosed`; afterwards
    nothing more is written to it (the interpreter's last flush goes to ``os.devnull``)."""
    original = sys.stdout
    sys.stdout = guarded = _GuardedStdout(original)
    try:
        try:
            yield
        finally:  # also after --help's SystemExit
            guarded.flush()
    except _StdoutClosed:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, original.fileno())
        os.close(devnull)
        raise
    finally:
        sys.stdout = original


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
        existing file), 1 for other errors, 130 on Ctrl-C and 143 on SIGTERM before the output
        is in place (0 after), 141 (as for SIGPIPE) when the reader of stdout closed it.
    """
    try:
        with _guarded_stdout():
            return _main(list(sys.argv[1:] if argv is None else argv))
    except _StdoutClosed:
        return 141


def _main(argv: list[str]) -> int:
    """:func:`main` with stdout guarded."""
    parser = _build_parser()
    args = parser.parse_args(argv)
    verbose = bool(getattr(args, "verbose", False))
    command = args.command if args.command != "plot" else f"plot {args.plot}"
    before = _output_state(args)
    try:
        with _sigterm_interrupts(), _one_line_warnings(command):
            return int(args.func(args))
    except _Terminated:
        return _stopped(args, before, "terminated (SIGTERM)", 143)
    except KeyboardInterrupt:
        return _stopped(args, before, "interrupted", 130)
    except Exception as err:  # one readable line, the traceback only on request
        if verbose:
            traceback.print_exc()
        code = 2 if _is_input_error(err) else 1
        kind = "" if code == 2 else f"{type(err).__name__}: "
        hint = "" if verbose or code == 2 else " (--verbose shows the traceback)"
        print(f"distshap {command}: error: {kind}{one_line(err)}{hint}", file=sys.stderr)
        return code


if __name__ == "__main__":
    sys.exit(main())
