"""The subcommands of the ``distshap`` command line (:mod:`distshap.cli` parses the arguments).

Each ``run_*`` function takes the parsed arguments and returns the exit code; ``explain`` runs in
this process below :data:`LOCAL_MAX_BYTES` of input unless a cluster option is given, else on a
Dask cluster. Usage errors raise :class:`UsageError` (exit code 2).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

__all__ = [
    "LOCAL_MAX_BYTES",
    "UsageError",
    "fault_types",
    "one_line",
    "run_calibrate",
    "run_explain",
    "run_info",
    "run_plot_interactions",
    "run_plot_summary",
]

#: ``explain`` without cluster options runs in-process below this input size (bytes on disk).
LOCAL_MAX_BYTES = 64 << 20


class UsageError(ValueError):
    """A command-line usage error (exit code 2)."""


# ------------------------------------------------------------------------------------------
# explain
# ------------------------------------------------------------------------------------------


def _progress_enabled(args: argparse.Namespace) -> bool:
    if args.progress is not None:
        return args.progress
    return sys.stderr.isatty()


def fault_types() -> tuple[type, ...]:
    """ValueErrors that are distshap's fault, not the input's (exit code 1)."""
    try:
        from distshap.additivity_rule import AdditivityError
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
        if isinstance(err, fault_types()) or ds.where in str(err):
            raise
        raise InputError(f"{ds.where!r}: {one_line(err)}") from err


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


def _explain_in_batches(explainer: Any, interactions: bool, rows: Any, y: Any,
                        progress: bool) -> Any:  # fmt: skip
    """The explainer's values of ``rows`` a batch of rows at a time, so that Ctrl-C and SIGTERM
    are acted on between batches (a kernel call is not interrupted), with a progress bar where
    asked; each row's values do not depend on the others, so the bits are those of one call.
    An output too large for this machine is refused first, as one call would."""
    from distshap.explainer import PROGRESS_BATCH_ROWS
    from distshap.layouts import check_output_fits

    explain, n = _explain_fn(explainer, interactions), len(rows)
    if progress or n <= PROGRESS_BATCH_ROWS:
        return explain(rows, y, progress=progress)
    check_output_fits(n, explainer.packed, interactions, None)
    take = rows.iloc if hasattr(rows, "iloc") else rows
    parts = [
        explain(take[start : start + PROGRESS_BATCH_ROWS],
                None if y is None else y[start : start + PROGRESS_BATCH_ROWS])
        for start in range(0, n, PROGRESS_BATCH_ROWS)
    ]  # fmt: skip
    return np.concatenate(parts)


def _run_local(
    args: argparse.Namespace, explainer: Any, ds: Any, fmt: str, names, labels: Any = None
) -> int:
    from distshap import io

    with _about(ds):
        rows = io.model_rows(ds, explainer.packed).compute(scheduler="threads")
        y = None if labels is None else labels.compute(scheduler="threads").to_numpy()
        values = _explain_in_batches(explainer, args.interactions, rows, y, _progress_enabled(args))
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
    from distributed import progress

    from distshap import io
    from distshap.cluster.watch import wait_for

    with _about(ds):
        rows = io.model_rows(ds, explainer.packed)
        persisted = client.persist(_explain_fn(explainer, args.interactions)(rows, labels))
        if _progress_enabled(args):
            with contextlib.redirect_stdout(sys.stderr):
                progress(persisted)
        wait_for(persisted, client)
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
            raise UsageError("--local runs in this process: drop --scheduler/--gpus/--workers")
        return False
    if args.cluster or args.scheduler or args.gpus is not None or args.workers is not None:
        return True
    return nbytes >= LOCAL_MAX_BYTES


def _start_client(args: argparse.Namespace) -> Any:
    from distshap.cluster import start_cluster

    if args.scheduler:
        if args.gpus is not None or args.workers is not None:
            raise UsageError(
                "--gpus/--workers configure a local cluster; with --scheduler start the "
                f"workers yourself (`dask cuda worker {args.scheduler}`)"
            )
        try:
            return start_cluster(address=args.scheduler)
        except OSError as err:  # distributed raises OSError / TimeoutError when none answers
            raise UsageError(
                f"cannot reach the Dask scheduler at --scheduler {args.scheduler!r} "
                f"({one_line(err)}): start one (`dask scheduler`) and its workers, or check "
                "the address"
            ) from err
    gpus: Any = None
    if args.gpus is not None:
        gpus = False if args.gpus == 0 else args.gpus
    # the workers' own log lines (a failed task's traceback) only with --verbose: the command
    # reports the error itself, in one line
    quiet = logging.WARNING if getattr(args, "verbose", False) else logging.CRITICAL
    # the scheduler's HTTP server on a free port: no warning beside another cluster on 8787
    return start_cluster(gpus=gpus, n_workers=args.workers, dashboard_address=":0",
                         silence_logs=quiet)  # fmt: skip


def _check_output_options(args: argparse.Namespace) -> None:
    """--background / --model-output / --labels / --interactions that cannot go together."""
    output = args.model_output
    if output != "raw" and args.background is None:
        raise UsageError(
            f"--model-output {output} explains interventional values: give --background FILE "
            "(rows to integrate over, e.g. 100 to 1,000 training rows)"
        )
    if output == "log_loss" and args.labels is None:
        raise UsageError(
            "--model-output log_loss explains each row's loss: name the label column of DATA "
            "with --labels COLUMN"
        )
    if args.labels is not None and output != "log_loss":
        raise UsageError("--labels COLUMN is read for --model-output log_loss only")
    if args.interactions and output != "raw":
        raise UsageError(
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


def run_explain(args: argparse.Namespace) -> int:
    """``distshap explain``: SHAP (interaction) values of DATA written to OUT."""
    from distshap import io
    from distshap.explainer import TreeExplainer
    from distshap.plan.config import config_context

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
    use_cluster = _use_cluster(args, ds.nbytes)
    # on a cluster the workers run the kernels: no CUDA context in this process
    with config_context(gpu_preparation=0) if use_cluster else contextlib.nullcontext():
        explainer = TreeExplainer(args.model, layout="xgboost", backend=args.backend)
        ds = io.select_features(ds, explainer.packed, drop)
        explainer = _with_background(args, explainer, bg, drop)
    names = explainer.output_feature_names(_Columns(ds.columns))
    if not use_cluster:
        # compile (JIT) and upload the model on one row first, so the timing is the real work:
        # zeros in the model's own values, which every model takes (category columns hold codes)
        zeros = np.zeros((1, explainer.num_features), explainer.packed.encoding.input_dtype)
        y = None if labels is None else np.zeros(1)
        explainer._compute(zeros, y, args.interactions, True, False, None, None, converted=True)
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


def run_info(args: argparse.Namespace) -> int:
    """``distshap info``: the structure and preprocessing statistics of MODEL."""
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


def run_calibrate(args: argparse.Namespace) -> int:
    """``distshap calibrate``: fit the CUDA cost model's constants on this GPU."""
    from distshap.kernels.cuda.calibrate import calibrate
    from distshap.plan import costs

    name = costs.current_device_name()
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
    for name_ in costs.COST_FIELDS:
        print(f"  {name_:<18} {1e12 * getattr(c, name_):>10.4g}")
    print(f"  {'launch':<18} {1e6 * c.launch:>10.4g}\n  {'call':<18} {1e6 * c.call:>10.4g}")
    worst = max(abs(m["fit_error"]) for m in result.measurements)
    print(f"largest relative error of the fit over {len(result.measurements)} models: {worst:.1%}")
    print(f"as shipped constants: {costs.shipped_literal(c)}")
    for note in result.notes:
        print(f"note: {note}")
    where = f"written to {result.path}" if result.path else "not written (--dry-run)"
    print(f"took {result.seconds:.1f} s; {where}")
    return 0


def run_compile(args: argparse.Namespace) -> int:
    """``distshap compile``: every kernel of the backend into Numba's disk cache."""
    from distshap.compile_cache import cache_dir
    from distshap.kernels import resolve_backend
    from distshap.warmup import warm_up

    kinds = tuple(k.strip() for k in args.kinds.split(",") if k.strip())
    backend = resolve_backend(args.backend)
    t0 = time.perf_counter()
    warm_up(backend, kinds)
    where = cache_dir() or "__pycache__ beside distshap's modules"
    print(f"{backend} kernels ({', '.join(kinds)}) compiled or loaded in "
          f"{time.perf_counter() - t0:.1f} s; cache: {where}")  # fmt: skip
    return 0


# ------------------------------------------------------------------------------------------
# plot
# ------------------------------------------------------------------------------------------


def _check_plot(args: argparse.Namespace, explainer: Any, size_of: Any, fewest: int) -> None:
    """``--max-display``, ``--group`` and ``--dpi`` of a plot, checked before any value is
    computed (``size_of``: the plot's figure size for ``F`` features and ``--max-display``)."""
    from distshap.plots import check_image_size

    if args.max_display < fewest:
        raise UsageError(f"--max-display {args.max_display} must be >= {fewest}")
    groups = explainer.packed.num_groups
    if args.group is not None and not 0 <= args.group < groups:
        fix = "drop --group" if groups == 1 else f"use --group 0 to {groups - 1}"
        raise UsageError(
            f"--group {args.group}: the model has {groups} output group(s) (classes): {fix}"
        )
    check_image_size(size_of(explainer.num_features, args.max_display), args.dpi, "--dpi")


def _plot_inputs(args: argparse.Namespace, size_of: Any, fewest: int) -> tuple:
    """``(image format, data set, explainer, output feature names)`` of a plot command, its
    options checked (``--max-rows``, ``--top`` where the command has it, then
    :func:`_check_plot`) before the model is read and the data set's features selected."""
    from distshap import io
    from distshap.explainer import TreeExplainer

    fmt = io.image_format(args.output)
    if args.max_rows is not None and args.max_rows < 1:
        raise UsageError(f"--max-rows {args.max_rows} must be >= 1")
    if getattr(args, "top", 0) < 0:
        raise UsageError(f"--top {args.top} must be >= 0")
    ds = io.read_data(args.data)
    io.check_output(args.output, fmt, [args.data, *ds.files, args.model], args.overwrite)
    explainer = TreeExplainer(args.model, layout="xgboost", backend=args.backend)
    _check_plot(args, explainer, size_of, fewest)
    ds = io.select_features(ds, explainer.packed, args.drop)
    return fmt, ds, explainer, explainer.output_feature_names(_Columns(ds.columns))


def run_plot_summary(args: argparse.Namespace) -> int:
    """``distshap plot summary``: a bar chart or beeswarm of the SHAP values of DATA."""
    from distshap import io
    from distshap.inputs import model_matrix
    from distshap.plots import summary_plot, summary_size

    fmt, ds, explainer, names = _plot_inputs(args, summary_size, 1)
    with _about(ds):
        rows = io.first_rows(io.model_rows(ds, explainer.packed), args.max_rows)
        phi = explainer.shap_values(rows, progress=_progress_enabled(args))
        values = model_matrix(rows, explainer.packed)  # the feature values the dots are coloured by
    fig = summary_plot(
        phi,
        values,
        names,
        kind=args.kind,
        max_display=args.max_display,
        group=args.group,
        layout=explainer.layout,
    )
    io.save_figure(fig, args.output, fmt, args.overwrite, dpi=args.dpi, bbox_inches="tight")
    print(f"{len(rows)} rows -> {args.output}")
    return 0


def run_plot_interactions(args: argparse.Namespace) -> int:
    """``distshap plot interactions``: a heat map of the strongest pairs of DATA."""
    from distshap import io
    from distshap.pair_interactions import interaction_summary, top_pairs
    from distshap.plots import heatmap_size, interaction_heatmap

    fmt, ds, explainer, names = _plot_inputs(args, heatmap_size, 2)
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


def one_line(err: BaseException) -> str:
    """The message of ``err`` on one line of at most 600 characters."""
    text = " ".join(line.strip() for line in str(err).strip().splitlines() if line.strip())
    if not text:
        text = type(err).__name__
    return text if len(text) <= 600 else text[:597] + "..."
