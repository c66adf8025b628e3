"""Structure and preprocessing statistics of a model: what ``distshap info`` prints.

:func:`model_info` loads a model and reports its trees, merged paths, bin packing per heuristic,
pattern tables and (when Numba's CUDA target imports) how the CUDA kernels would run it, as a
JSON-serialisable dict; :func:`format_info` renders that dict as the command's text. A library
function of its own, so that notebooks and scripts get the same numbers as the command line.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

__all__ = ["cost_model_info", "format_info", "model_info"]


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


def model_info(
    model: Any, algorithm: str = "bfd", device_kind: str | None = None, n_rows: int = 1_000_000
) -> dict:
    """Structure, path and packing statistics of ``model`` (what ``distshap info`` prints).

    Parameters
    ----------
    model
        Anything :class:`distshap.TreeExplainer` accepts (a model file path, a Booster, ...).
    algorithm : str
        Packing heuristic of the :class:`~distshap.packed.PackedModel` whose table statistics
        are reported.
    device_kind : str, optional
        Device kind ("H100", "H200", "generic") or full device name whose cost constants
        predict the CUDA strategy (:mod:`distshap.plan.predict`); default: the current GPU's
        (where there is none, no speed is predicted: ``cost_model`` is ``None``). No GPU is
        needed for a named kind.
    n_rows : int
        Rows of the call whose speed is predicted.

    Returns
    -------
    dict
        JSON-serialisable: ``model`` (kind, trees, nodes, leaves, max_depth, output groups,
        features, feature names, base score, expected value), ``paths`` (unique merged paths,
        paths without features, histogram of merged path lengths), ``packing`` (bins,
        utilisation, oversize bins and seconds per heuristic NF / FFD / BFD), ``tables``
        (pattern-table vs DP path counts, table bytes), ``cuda`` (how the CUDA kernels would
        run it; None without Numba's CUDA target), ``cost_model`` (the cost model's choice of
        SHAP kernels for the device kind and its predicted rows/s, beside all-quadrature and
        all-tables; :func:`cost_model_info`; ``None`` without a GPU unless ``device_kind`` is
        given).
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
    device = _device_name(device_kind)
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
        "cuda": _cuda_strategy(packed, _costs(device)),
        "cost_model": cost_model_info(packed, device, n_rows) if device else None,
    }


def _device_name(device_kind: str | None) -> str:
    """The device name whose constants apply: ``device_kind`` as given, else the current
    GPU's ("" without one)."""
    if device_kind is not None:
        return str(device_kind)
    from distshap.plan.costs import current_device_name

    try:
        return current_device_name()
    except Exception:  # no usable CUDA driver: the generic defaults
        return ""


def _costs(device_kind: str | None):
    from distshap.plan.costs import costs_for

    return costs_for(_device_name(device_kind))


def cost_model_info(packed: Any, device_kind: str | None = None, n_rows: int = 1_000_000) -> dict:
    """The cost model's SHAP strategy for ``packed`` on a device kind, with predicted speeds.

    ``device_kind`` (a kind or a device name) selects the constants (:func:`distshap.plan.costs.
    costs_for`: the user's calibration cache, else the shipped ones of the kind, else the
    generic defaults); ``None``: the current GPU's, or the generic defaults without one.
    Returns a JSON-serialisable dict: ``device`` (the name looked up; "" for none), ``kind``,
    ``source`` of the constants, ``n_rows``, ``choice`` (:class:`~distshap.plan.predict.Prediction`
    of the chosen mix: paths per kernel, table bins and bytes, predicted rows/s and seconds
    per kernel) and ``quadrature`` / ``tables`` (the same for every path in the quadrature
    kernels, and every eligible path on a table).
    """
    from distshap.plan.costs import costs_for
    from distshap.plan.predict import model_shape, predict

    name = _device_name(device_kind)
    costs = costs_for(name)
    shape = model_shape(packed)
    out = {"device": name, "kind": costs.kind, "source": costs.source, "n_rows": int(n_rows)}
    for key, choice in (("choice", "auto"), ("quadrature", "quadrature"), ("tables", "tables")):
        out[key] = predict(shape, choice, costs, n_rows).to_dict()
    return out


def _cuda_strategy(packed, costs=None) -> dict | None:
    """How the CUDA kernels would run ``packed`` (no GPU needed: host-side arithmetic only),
    with the SHAP tables the cost model chooses under ``costs``.

    ``None`` where Numba's CUDA target cannot be imported.
    """
    import inspect

    try:
        from distshap.plan.gpu import strategy_stats
    except ImportError:
        return None

    if costs is not None and "costs" in inspect.signature(strategy_stats).parameters:
        st = strategy_stats(packed, costs=costs)
    else:
        st = strategy_stats(packed)
    keys = ("quadrature_paths", "oversize_paths", "interaction_table_paths",
            "interaction_table_bytes")  # fmt: skip
    out = {key: int(st[key]) for key in keys}
    out["interaction_tables_too_wide"] = bool(st.get("interaction_tables_too_wide", False))
    for key in ("shap_table_paths", "shap_table_bytes"):  # the SHAP tables' kernel, if built
        out[key] = int(st.get(key, 0))
    out["quadrature_nodes"] = {str(n): c for n, c in st["quadrature_nodes"].items()}
    out["quadrature_shared"] = {"shap": bool(st["quadrature_shared"][0]),
                                "interactions": bool(st["quadrature_shared"][1])}  # fmt: skip
    if "quadrature_tiles" in st:  # the SHAP quadrature kernel's per-row sums as launched
        out["quadrature_tiles"] = {
            "tiles": str(st["quadrature_tiles"]),
            "chunks": int(st["quadrature_chunks"]),
            "columns": int(st["quadrature_tile_columns"]),
            "warps": int(st["quadrature_warps"]),
        }
    return out


def _human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def _format_cost_model(cm: dict) -> list[str]:
    ch = cm["choice"]
    device = cm["device"] or "no GPU"
    named = f"{device}: {cm['kind']}" if cm["device"] != cm["kind"] else cm["kind"]
    if cm["kind"] == "generic":
        named = (
            f"{device} (unknown kind: generic defaults)"
            if cm["device"]
            else device + (" (generic defaults)")
        )
    parts = ", ".join(f"{k} {v / ch['seconds']:.0%}" for k, v in ch["breakdown"].items()
                      if ch["seconds"] > 0 and v / ch["seconds"] >= 0.005)  # fmt: skip
    if ch.get("route") == "small":
        plan = "                every path in the one-launch small-model kernel (a warp a row)"
    else:
        plan = (
            f"                {ch['table_paths']:,} paths on pattern tables ({ch['table_bins']:,} "
            f"bins, {_human_bytes(ch['table_bytes'])}), {ch['quadrature_paths']:,} by "
            f"quadrature, {ch['oversize_paths']:,} oversize (fallback)"
        )
    return [
        f"SHAP strategy   {named}; constants {cm['source']}",
        plan,
        f"                predicted {ch['rows_per_second']:,.0f} rows/s at {cm['n_rows']:,} rows "
        f"({parts}); all quadrature {cm['quadrature']['rows_per_second']:,.0f}, all tables "
        f"{cm['tables']['rows_per_second']:,.0f}",
    ]


def format_info(info: dict, path: str) -> str:
    """The text ``distshap info`` prints for a :func:`model_info` dict of the model at ``path``."""
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
        f"pattern tables  {t['table_paths']:,} paths use tables, {t['dp_paths']:,} the DP (CPU "
        f"kernel); tables {_human_bytes(t['table_bytes'])}, filled at its first call "
        f"({t['algorithm'].upper()} packing in {t['build_seconds']:.3f} s)"
    )
    cm = info.get("cost_model")
    if cm is not None:
        lines.extend(_format_cost_model(cm))
    else:
        lines.append(
            "SHAP strategy   no GPU visible: no speed predicted (--device-kind H100, H200 or "
            "generic predicts one for that kind)"
        )
    c = info["cuda"]
    if c is None:
        return "\n".join(lines)
    shared = c["quadrature_shared"]
    sums = {True: "shared memory", False: "global memory"}
    nodes = ", ".join(f"{n} nodes: {count:,}" for n, count in c["quadrature_nodes"].items())
    too_wide = " (a row's matrix is too wide for tables to pay)"
    too_wide = too_wide if c.get("interaction_tables_too_wide") else ""
    lines.append(
        f"CUDA kernels    SHAP: {c.get('shap_table_paths', 0):,} paths on tables of "
        f"{_human_bytes(c.get('shap_table_bytes', 0))} (filled on the GPU at first use), "
        f"{c['quadrature_paths']:,} by quadrature ({nodes or 'none'}), "
        f"{c['oversize_paths']:,} oversize (fallback kernel)\n"
        f"                interactions: {c['interaction_table_paths']:,} paths on tables of "
        f"{_human_bytes(c['interaction_table_bytes'])} (filled on the GPU at first use), "
        f"the others by quadrature{too_wide}\n"
        f"                quadrature sums in {sums[shared['shap']]} (SHAP), "
        f"{sums[shared['interactions']]} (interactions)"
    )
    tiles = c.get("quadrature_tiles")
    if tiles is not None and tiles["tiles"] != "none":
        lines.append("                " + _format_tiles(tiles))
    return "\n".join(lines)


def _format_tiles(tiles: dict) -> str:
    """The SHAP quadrature kernel's tiles (:func:`_cuda_strategy` ``quadrature_tiles``)."""
    kind = {
        "local": "chunk-local feature tiles",
        "all": "a column per feature",
        "mixed": "chunk-local feature tiles where they fit, else a column per feature",
    }.get(tiles["tiles"], tiles["tiles"])
    if tiles["warps"] == 0:  # some launch adds every contribution to global memory
        where = "global memory atomics" + (
            f" (tiles of up to {tiles['columns']} columns elsewhere)" if tiles["columns"] else ""
        )
    else:
        where = (
            f"up to {tiles['columns']} int64 columns a row in shared memory, "
            f"{tiles['warps']} warps a block"
        )
    return f"SHAP quadrature: {kind}; {tiles['chunks']:,} chunks, {where}"
