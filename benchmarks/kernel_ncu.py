"""``--ncu`` of :mod:`benchmarks.kernel_limits`: one call's launches profiled under Nsight Compute.

:func:`run_ncu` runs ``python -m benchmarks.kernel_limits --ncu-child`` under ``ncu
--clock-control none --profile-from-start off`` with :data:`NCU_METRICS` (the first
``_NCU_CORE`` alone, in ncu's own units, where ncu refuses the full list); the child runs
every launch of the call once inside a profiler range, a spin kernel before each, and the
records are split at the spin kernels. :func:`ncu_line` prints one launch's figures beside
the counted ones.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

__all__ = ["NCU_METRICS", "ncu_line", "run_ncu"]

_STALLS = ("long_scoreboard", "short_scoreboard", "mio_throttle", "lg_throttle", "wait",
           "math_pipe_throttle", "not_selected", "barrier", "branch_resolving", "dispatch_stall",
           "no_instruction", "drain", "membar", "imc_miss", "tex_throttle", "misc")  # fmt: skip
#: ncu metrics of ``--ncu`` (the first ones alone where the full list is refused).
NCU_METRICS: tuple[str, ...] = (
    "gpu__time_duration.sum", "sm__inst_executed.sum",
    "smsp__issue_active.avg.pct_of_peak_sustained_active",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed", "dram__bytes.sum",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "smsp__cycles_elapsed.avg.per_second",
    "smsp__sass_inst_executed_op_shared_atom.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_atom.sum",
    "sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active",
    "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active",
    "sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active",
    "launch__registers_per_thread", "launch__occupancy_limit_registers",
    "launch__occupancy_limit_shared_mem",
    *(f"smsp__average_warps_issue_stalled_{r}_per_issue_active.ratio" for r in _STALLS),
)  # fmt: skip
_NCU_CORE = 7


def ncu_line(kernels: list[dict], x: dict) -> str:
    """One launch's ncu figures (its longest kernel; instructions summed over its kernels)."""
    num = lambda r, k: r.get(k, float("nan"))  # noqa: E731
    main = max(kernels, key=lambda r: num(r, "gpu__time_duration.sum"))
    inst = sum(num(r, "sm__inst_executed.sum") for r in kernels)
    counted = x.get("ncu_counted_issue")
    name = str(main.get("Kernel Name", "?"))[:28]
    text = f"{name} {num(main, 'gpu__time_duration.sum') / 1e3:.1f} us"
    text += f", inst {inst:.3g}"
    if counted:
        text += f" (counted/ncu {counted / inst:.2f})"
    for key, name in (("smsp__issue_active", "issue"), ("sm__throughput", "SM"),
                      ("dram__throughput", "DRAM"), ("sm__warps_active", "warps"),
                      ("sm__inst_executed_pipe_fma", "fma"), ("sm__inst_executed_pipe_xu", "xu"),
                      ("sm__inst_executed_pipe_alu", "alu")):  # fmt: skip
        hit = [v for k, v in main.items() if k.startswith(key + ".") and isinstance(v, float)]
        if hit:
            text += f", {name} {hit[0]:.0f}%"
    clock = main.get("smsp__cycles_elapsed.avg.per_second")
    if isinstance(clock, float):
        text += f", {clock / 1e9:.2f} GHz"
    atoms = main.get("smsp__sass_inst_executed_op_shared_atom.sum")
    if isinstance(atoms, float) and atoms:
        waves = main.get("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_atom.sum", float("nan"))
        text += f", ATOMS {atoms:.3g} ({waves / atoms:.1f} wavefronts each)"
    for key, name in (("launch__registers_per_thread", "regs"),
                      ("launch__occupancy_limit_registers", "blocks/SM by regs"),
                      ("launch__occupancy_limit_shared_mem", "by smem")):  # fmt: skip
        if isinstance(main.get(key), float):
            text += f", {name} {main[key]:.0f}"
    stalls = {k.split("stalled_")[1].split("_per")[0]: v for k, v in main.items()
              if "issue_stalled_" in k and isinstance(v, float)}  # fmt: skip
    top = sorted(stalls.items(), key=lambda kv: -kv[1])[:3]
    if top:
        text += ", stalls " + " ".join(f"{k} {v:.2f}" for k, v in top)
    return text


def _parse_ncu(text: str) -> list[dict]:
    """Kernel records of ncu's ``--csv --page raw`` output (values as floats where numbers)."""
    import csv

    lines = text.splitlines()
    at = next((i for i, x in enumerate(lines) if x.startswith('"ID"')), None)
    if at is None:
        return []
    rows = list(csv.reader(lines[at:]))
    header, out = rows[0], []
    for row in rows[1:]:
        if len(row) != len(header) or not row[0].strip().isdigit():
            continue  # the units row, or lines of the application
        rec = {}
        for k, v in zip(header, row, strict=True):
            try:
                rec[k] = float(v.replace(",", ""))
            except ValueError:
                rec[k] = v
        out.append(rec)
    return out


def run_ncu(shape: str, kind: str, rows: int, n_parts: int) -> list | str:
    """Every launch of one call (``n_parts``, the finish pass last) profiled once under
    ``ncu`` in a child process: per launch, its kernels' records; or why not."""
    exe = shutil.which("ncu")
    if exe is None:
        return "ncu not found on PATH"
    child = [sys.executable, "-m", "benchmarks.kernel_limits", "--ncu-child", "--shapes", shape,
             "--kinds", kind, "--rows", str(rows), "--interaction-rows", str(rows)]  # fmt: skip
    why = ""
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "ncu.csv")
        for metrics, units in ((NCU_METRICS, True), (NCU_METRICS[:_NCU_CORE], False)):
            cmd = [exe, "--clock-control", "none", "--profile-from-start", "off", "--csv",
                   "--page", "raw", *(("--print-units", "base") if units else ()),
                   "--log-file", log, "--metrics", ",".join(metrics), *child]  # fmt: skip
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
            except subprocess.TimeoutExpired:
                return "ncu ran over 120 s"
            text = open(log).read() if os.path.exists(log) else ""
            kernels = _parse_ncu(text) or _parse_ncu(proc.stdout)
            if kernels:
                break
            why = (text + proc.stdout + proc.stderr).strip()[-300:]
        else:
            return f"ncu gave no kernel records: {why}"
    groups: list[list[dict]] = []
    for rec in kernels:
        if "spin" in str(rec.get("Kernel Name", "")):
            groups.append([])
        elif groups:
            groups[-1].append(rec)
    return groups[:n_parts]
