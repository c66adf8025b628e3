"""The lines :mod:`benchmarks.cold_start` prints: a run's summary, its end-to-end line, the GPU
preparation's part of a first call, the peer's line, the compile profile and the disk cache's
state (the records are :func:`benchmarks.cold_start._child`'s)."""

from __future__ import annotations

import os

__all__ = [
    "cache_index_files",
    "end_to_end",
    "peer_summary",
    "preparation",
    "profile_table",
    "summary",
]


def cache_index_files(cache_dir: str) -> str:
    """The Numba cache directory's state: index files (one per cached function, CPU or CUDA;
    those of ``distshap/kernels/cuda`` counted apart) and data files (one per signature)."""
    index = cuda_dir = data = 0
    for root, _dirs, files in os.walk(cache_dir):
        for name in files:
            index += name.endswith(".nbi")
            data += name.endswith(".nbc")
            cuda_dir += name.endswith(".nbi") and "kernels_cuda" in root.replace(os.sep, "_")
    return (
        f"{index} index files ({cuda_dir} of distshap/kernels/cuda), {data} data files in "
        f"{cache_dir}"
    )


def summary(label: str, rec: dict, wall: float) -> str:
    st = rec["build_stages_s"]
    stages = ", ".join(f"{k} {v:.2f}" for k, v in st.items())
    cuda = rec.get("cuda_import_s", 0.0)
    cuda_part = f"; import distshap.kernels.cuda {cuda:.2f} s" if cuda else ""
    lines = [
        f"[{label}] process wall {wall:.2f} s; import distshap {rec['import_s']:.2f} s "
        f"(numpy {rec['numpy_import_s']:.2f}){cuda_part}; build {rec['build_s']:.2f} s "
        f"({stages}; CPU {rec['cpu_s']['build']:.2f} s, of it system "
        f"{rec['cpu_s'].get('build_system', 0.0):.2f} s; peak memory "
        f"{rec.get('max_rss_mb', 0.0):.0f} MB); {rec['paths']} paths, {rec['lanes']} lanes"
    ]
    for kind, k in rec["kinds"].items():
        build = rec["build_s"] if kind != "interventional" else rec["background_build_s"]
        to_first = rec["import_s"] + cuda + build + k["first_s"]
        split = k.get("first_stages_s") or {}
        if kind == "shap":
            lines.append(end_to_end(rec, k, split))
        lines.append(
            f"  {kind:14s} {k['rows']:6d} rows: first call {k['first_s']:.2f} s (compile "
            f"{k['compile_s']:.2f} s, {k['compiled_in_first_call']} specialisations; CPU "
            f"{k['first_cpu_s']:.2f} s), warm {k['warm_s']:.3f} s; build {build:.2f} s; "
            f"import + build + first = {to_first:.2f} s; values {k['values_sha256']}"
        )
        if split:
            lines.append(
                f"  {'':12s} first call: device model {split.get('device_model', 0.0):.2f} s, "
                f"cuda compile {split.get('cuda_compile', 0.0):.2f} s "
                f"({split.get('cuda_compiled', 0)} kernels compiled, "
                f"{split.get('cuda_cached', 0)} from the disk cache), "
                f"margin {split.get('margin', 0.0):.2f} s (compilation included)"
                + preparation(split)
            )
    return "\n".join(lines)


def preparation(split: dict) -> str:
    """The GPU preparation's part of a first call's line (none where none ran)."""
    if "prepare_stages" not in split:
        return "; no GPU preparation"
    stages = ", ".join(f"{k} {v:.2f}" for k, v in split["prepare_stages"].items())
    error = split.get("prepare_error", "None")
    return (f"; waited {split.get('prepare_waited', 0.0):.2f} s for the GPU preparation "
            f"(its threads: {stages}{'' if error == 'None' else '; ' + error})")  # fmt: skip


def end_to_end(rec: dict, k: dict, split: dict) -> str:
    """The four parts of a SHAP cold start apart: ``load`` (the file), ``build`` (the rest of
    the explainer), ``compile`` (seconds inside Numba's CPU and CUDA ``compile``, cache loads
    included, in the build and the first call) and ``first call`` (the first call's other
    seconds); compilation in a background thread can overlap the load, so the parts are each
    measured, and their sum may exceed the end-to-end time."""
    load = rec["build_stages_s"].get("load", 0.0)
    build_compile = rec.get("build_compile_s", 0.0)
    first_compile = k["compile_s"] + split.get("cuda_compile", 0.0)
    total = rec["import_s"] + rec.get("cuda_import_s", 0.0) + rec["build_s"] + k["first_s"]
    waits = rec.get("ahead_wait_s") or {}
    wait = "".join(f", waited {v:.2f} s for {n} compiled ahead" for n, v in waits.items())
    return (
        f"  end to end {total:.2f} s: import {rec['import_s'] + rec.get('cuda_import_s', 0):.2f}"
        f", load {load:.2f}, build {rec['build_s'] - load:.2f} (of these, compile "
        f"{build_compile:.2f}), first call {k['first_s']:.2f} (of it, compile "
        f"{first_compile:.2f}){wait}"
    )


def peer_summary(label: str, rec: dict, wall: float) -> str:
    return (
        f"[{label}, XGBoost {rec['xgboost']} {rec['device']}] process wall {wall:.2f} s; end "
        f"to end {rec['end_to_end_s']:.2f} s: import {rec['import_s']:.2f}, load "
        f"{rec['load_s']:.2f}, first call {rec['first_s']:.2f}; warm {rec['warm_s']:.3f} s"
    )


def profile_table(records: list[dict], top: int) -> str:
    by_fn: dict[str, list] = {}
    for r in records:
        by_fn.setdefault(r["function"], []).append(r)
    rows = sorted(by_fn.items(), key=lambda kv: -sum(r["seconds"] for r in kv[1]))
    out = [f"  {'wall s':>8s} {'CPU s':>8s} {'specs':>5s}  function (how)"]
    for fn, recs in rows[:top]:
        how = ",".join(sorted({r["how"] for r in recs}))
        wall, cpu = (sum(r[key] for r in recs) for key in ("seconds", "cpu_seconds"))
        out.append(f"  {wall:8.3f} {cpu:8.3f} {len(recs):5d}  {fn} ({how})")
    wall, cpu = (sum(r[key] for r in records) for key in ("seconds", "cpu_seconds"))
    out.append(f"  {wall:8.3f} {cpu:8.3f} {len(records):5d}  total")
    return "\n".join(out)
