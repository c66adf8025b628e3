"""The host build of an XGBoost UBJSON model file, stage by stage: wall, CPU and system seconds.

:class:`distshap.TreeExplainer` on a large model file reads it, decodes the UBJSON into views,
reads the node arrays (threaded), validates the ensemble, encodes it, makes the margin arrays,
then packs it (:func:`distshap.packed.pack_ensemble`): the walk's first pass (each path's
element count), the packing, the second pass writing the lanes, and the statistics and digest.
This script runs those steps one after another in one process and prints, for each, the wall
seconds, the process's CPU seconds (all threads) and, of them, the kernel's (``system``:
mapping fresh memory pages, among others); ``--check`` compares the packed model's digest
with :func:`~distshap.packed.pack_ensemble`'s. Numba compilation falls into the stage that
first calls a compiled function (a fresh ``NUMBA_CACHE_DIR`` to see it, a filled one to see
the loads).

Usage::

    NUMBA_CACHE_DIR=$(mktemp -d) python3 -m benchmarks.build_stages MODEL.ubj   # compiles
    python3 -m benchmarks.build_stages MODEL.ubj --threads 1                      # one thread
"""

from __future__ import annotations

import argparse
import os
import resource
import time


def _system() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_stime


class _Stages:
    """Wall, CPU and system seconds of named stages, in order."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, float, float, float]] = []

    def __call__(self, name: str, fn, *args, **kwargs):
        sys0, c0, t0 = _system(), time.process_time(), time.perf_counter()
        out = fn(*args, **kwargs)
        wall, cpu, system = time.perf_counter() - t0, time.process_time() - c0, _system() - sys0
        self.rows.append((name, wall, cpu, system))
        return out

    def table(self) -> str:
        lines = [f"  {'stage':28s} {'wall s':>8s} {'CPU s':>8s} {'system s':>9s}"]
        for name, wall, cpu, system in self.rows:
            lines.append(f"  {name:28s} {wall:8.3f} {cpu:8.3f} {system:9.3f}")
        totals = [sum(r[i] for r in self.rows[1:]) for i in (1, 2, 3)]  # the import apart
        lines.append(f"  {'build (all but the import)':28s} {totals[0]:8.3f} {totals[1]:8.3f} "
                     f"{totals[2]:9.3f}")  # fmt: skip
        return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="an XGBoost model saved as UBJSON (.ubj)")
    parser.add_argument("--threads", type=int, default=None, help="NUMBA_NUM_THREADS")
    parser.add_argument(
        "--check",
        action="store_true",
        help="also run pack_ensemble and compare the digests (twice the memory)",
    )
    args = parser.parse_args(argv)
    if args.threads:
        os.environ["NUMBA_NUM_THREADS"] = str(args.threads)
    stage = _Stages()

    def imports():
        import numpy as np

        from distshap import packed, paths
        from distshap.encoding import encode_ensemble
        from distshap.kernels.margin import margin_model
        from distshap.models import _files, _threaded, _ubjson, xgboost

        return np, packed, paths, encode_ensemble, margin_model, _files, _threaded, _ubjson, xgboost

    np, pk, pm, encode_ensemble, margin_model, files, threaded, ubjson, xgb = stage(
        "import", imports
    )
    threaded.start_warm_up(args.model)  # as the loader does: Numba starts while the file is read
    data = stage("read the file", files.read_model_bytes, args.model)
    views = stage("decode UBJSON (views)", ubjson.decode_ubjson_views, data)
    ens = stage("node arrays (threaded)", xgb.ensemble_from_ubjson, views)
    ens = stage("validate", ens.validate)
    encoded, encoding = stage("encode", encode_ensemble, ens)
    margin = stage("margin arrays", margin_model, ens)
    walk = stage("walk: first pass (counts)", pm.walk_paths, encoded)
    packing, order, bin_offsets, path_offsets = stage(
        "packing (BFD, order)", pk._packed_order, walk.lengths, 32, "bfd"
    )

    starts, rank = stage(
        "starts and ranks", pk._starts_and_ranks, walk.num_paths, order, path_offsets
    )
    filled = stage("walk: second pass (lanes)", walk.fill, starts, int(path_offsets[-1]), rank)
    fields = dict(
        bin_offsets=bin_offsets, **{n: filled[n] for n in pk._LANE_FIELDS},
        path_offsets=path_offsets, path_value=filled["path_value"],
        path_group=filled["path_group"], cat_words=filled["cat_words"],
        expected_value=walk.expected_value(filled["node_group"], filled["mean_value"]),
    )  # fmt: skip
    model = stage(
        "statistics and digest", pk._packed_model, fields, packing, time.perf_counter(),
        ens.num_features, ens.num_groups, 32, pk.DEFAULT_TABLE_BUDGET_BYTES,
        pk.DEFAULT_MAX_TABLE_FEATURES, ens.feature_names, ens.extra.get("category_values"),
        encoding, margin, ens.model_kind,
    )  # fmt: skip
    if args.check:
        whole = pk.pack_ensemble(
            encoded, feature_names=ens.feature_names, encoding=encoding, margin=margin,
            feature_categories=ens.extra.get("category_values"), model_kind=ens.model_kind,
        )  # fmt: skip
        assert whole.digest == model.digest, "the stages did not give pack_ensemble's model"
    import numba

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{args.model}: {ens.num_nodes} nodes, {model.num_paths} paths, "
          f"{model.stats['lanes']} lanes; {numba.get_num_threads()} threads; NUMBA_CACHE_DIR "
          f"{os.environ.get('NUMBA_CACHE_DIR')}; peak memory {peak:.0f} MB; digest "
          f"{model.digest[:16]}")  # fmt: skip
    print(stage.table())


if __name__ == "__main__":
    main()
