"""Counted work of the GPU kernels of a SHAP / interaction call (no GPU needed).

The counting half of :mod:`benchmarks.kernel_limits`. :func:`loop_counts` finds the loops of
a kernel's PTX or SASS (:mod:`benchmarks.kernel_isa`; SASS where ``ptxas`` and ``nvdisasm``
are found) and counts one iteration of each along its longest path (an if-else counts its
longer arm, a skipped block counts as run, inner loops by their own trips, categorical-only
blocks left out as in ``kernel_isa``) by class: ``issue`` (all), ``fp32`` (FADD/FMUL/FFMA),
``xu`` (MUFU, float<->int64 conversions), ``atoms`` / ``atomg`` (shared / global atomics).
:func:`kernel_counts` names the loops by role and undoes unrolling (the reciprocals or int64
conversions of one source iteration give the factor; remainder copies leave the enclosing
loop). :func:`plan_work` multiplies them by a plan's trip counts on ``nb`` rows (a warp of the
interaction kernel runs its longest path) and adds a lower bound of the HBM bytes (rows,
lanes and tables read once, the accumulator read and written once where it exceeds 50 MB of
L2). The table kernels count in PTX (ptxas moves their loops across each other). A GPU
machine without the tools loads SASS counts made elsewhere (:func:`save_counts`,
:func:`load_counts`; ``benchmarks/kernel_counts_sm90.json``: this commit's, CPU machine).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter

import numpy as np

from benchmarks import kernel_isa

__all__ = [
    "CLASSES", "VARIANTS", "KernelWork", "host_plan", "kernel_counts", "load_counts",
    "loop_counts", "plan_work", "save_counts",
]  # fmt: skip

#: Instruction classes counted besides ``issue`` (every instruction).
CLASSES = ("fp32", "xu", "atoms", "atomg")
_L2_BYTES = 50 * 2**20
_LANE_BYTES = 16 + 4 * 8 + 8  # lane_f, lane_i (LI_COLUMNS int32), lane_cat
_INT_SIG = (
    "void(float32[:, ::1], int32[:, ::1], int64[::1], uint32[::1], int64[::1], int32[::1], "
    "int64[::1], int32[::1], float32[:, ::1], int64[:, ::1], float64, int64, int64)"
)
_TAB_SIG = (
    "void(float32[:, ::1], int32[:, ::1], int64[::1], int64[::1], uint32[::1], float32[::1], int64"
    "[::1], int32[::1], int32[::1], float32[:, ::1], int64[:, ::1], float64, int64, int64, int64)"
)


def _classes(op: str, sass: bool) -> tuple[str, ...]:
    """The classes of :data:`CLASSES` an instruction (opcode ``op``) belongs to."""
    if sass:
        base = op.split(".")[0]
        if base in ("FADD", "FMUL", "FFMA", "FADD32I", "FMUL32I", "FFMA32I"):
            return ("fp32",)
        if op.startswith("MUFU.RCP"):
            return ("xu", "rcp")
        if base == "F2I" and "64" in op:
            return ("xu", "cvt64")
        if base in ("MUFU", "F2I", "I2F", "F2F"):
            return ("xu",)
        if base == "ATOMS":
            return ("atoms",)
        return ("atomg",) if base in ("ATOMG", "ATOM", "RED", "REDG") else ()
    parts = op.split(".")
    if parts[0] in ("atom", "red"):
        return ("atoms",) if "shared" in parts else ("atomg",)
    if parts[0] == "rcp":
        return ("xu", "rcp")
    if parts[0] in ("sqrt", "ex2", "lg2", "sin", "cos", "rsqrt"):
        return ("xu",)
    if parts[0] == "cvt" and parts[-1] == "f32" and parts[-2] in ("s64", "u64"):
        return ("xu", "cvt64")
    wide = any(p in ("s64", "u64", "f64") for p in parts[1:])
    if parts[0] == "cvt" and wide and any(p in ("f32", "f64") for p in parts):
        return ("xu",)
    if parts[0] in ("add", "sub", "mul", "fma") and "f32" in parts:
        return ("fp32",)
    return ()


def _cold_flags(lines: list[str], start: int, stop: int, sass: bool, source: dict,
                cold_lines: set) -> dict[int, bool]:  # fmt: skip
    """Line -> cold, for the lines of one innermost loop (the rule of
    :func:`benchmarks.kernel_isa.count_loops`: blocks with float64 work, the category-set
    lookup falling through from one, lines marked ``# categorical``)."""
    flags, block, prev_cold = {}, [], False
    for at in range(start, stop + 2):
        line = lines[at] if at <= stop else None
        end = line is None or kernel_isa._label(line, sass) is not None
        if line is not None and not end:
            block.append(at)
            end = kernel_isa._target(line, sass) is not None
        if not end or not block:
            continue
        ops = [kernel_isa._op(lines[i], sass) for i in block]
        cold = any(o.startswith(("F2F.F64", "I2F.F64", "DSETP")) or ".f64" in o for o in ops)
        last = lines[block[-1]]
        unconditional = kernel_isa._target(last, sass) is None or not last.startswith("@")
        cold = cold or (prev_cold and unconditional)
        prev_cold = cold and not unconditional
        for i in block:
            flags[i] = cold or source.get(i) in cold_lines
        block = []
    return flags


def _longest(lines: list[str], sass: bool, lo: int, hi: int, spans: list[tuple[int, int]],
             cold: dict[int, bool]) -> Counter:  # fmt: skip
    """Instructions of the longest path (most instructions) through ``lines[lo:hi + 1]`` from
    ``lo``: an if-else counts its longer arm, a skipped block counts as run, a branch back or
    out ends the path; each loop of ``spans`` inside counts 0 (its own trips count it)."""
    label_at = {kernel_isa._label(x, sass): i for i, x in enumerate(lines)}
    span_of = {s: e for s, e in spans}
    starts, i = [], lo
    while i <= hi:  # blocks: [first, last] line ranges
        if i in span_of:
            starts.append((i, span_of[i], True))
            i = span_of[i] + 1
            continue
        j = i
        while j < hi and j + 1 not in span_of and not kernel_isa._label(lines[j + 1], sass) \
                and kernel_isa._target(lines[j], sass) is None \
                and not re.match(r"^(EXIT|RET|ret|exit)\b", lines[j]):  # fmt: skip
            j += 1
        starts.append((i, j, False))
        i = j + 1
    index = {b[0]: n for n, b in enumerate(starts)}
    best: list[Counter] = [Counter()] * len(starts)
    for n in range(len(starts) - 1, -1, -1):
        first, last, is_loop = starts[n]
        weight = Counter()
        if not is_loop:
            for at in range(first, last + 1):
                if kernel_isa._label(lines[at], sass) or cold.get(at):
                    continue
                weight["issue"] += 1
                weight.update(_classes(kernel_isa._op(lines[at], sass), sass))
        succ = []
        tail = lines[last]
        t = None if is_loop else kernel_isa._target(tail, sass)
        ends = not is_loop and re.match(r"^(EXIT|RET|ret|exit)\b", tail) is not None
        if t is not None and label_at.get(t, -1) > last and label_at[t] in index:
            succ.append(index[label_at[t]])
        if n + 1 < len(starts) and not ends and (t is None or tail.startswith("@")):
            succ.append(n + 1)
        tail_best = max((best[m] for m in succ), key=lambda c: c["issue"], default=Counter())
        best[n] = weight + tail_best
    return best[0] if best else Counter()


def loop_counts(lines: list[str], sass: bool, source: dict | None = None,
                cold_lines: set | None = None) -> list[dict]:  # fmt: skip
    """The loops of ``lines`` (PTX or SASS with labels), outermost first, each a dict:
    ``start``, ``end``, ``parent`` (index, -1: none), ``inner`` (no loop inside), ``own``
    (Counter of ``issue`` and :data:`CLASSES`: the longest path through one iteration,
    :func:`_longest`, inner loops counting 0, cold lines of innermost loops left out),
    ``float`` (float-kind instructions of its own lines); the last dict (``start`` -1) is the
    code outside every loop. Loops that overlap without nesting (ptxas moved code across
    them) are merged into one."""
    source, cold_lines = source or {}, cold_lines or set()
    where = {kernel_isa._label(x, sass): i for i, x in enumerate(lines)}
    spans: dict[int, int] = {}
    for i, line in enumerate(lines):
        t = kernel_isa._target(line, sass)
        if t is not None and where.get(t, i + 1) <= i:
            spans[where[t]] = max(spans.get(where[t], 0), i)
    loops = sorted((s, e) for s, e in spans.items() if e - s > 2)  # not a trap's self-branch
    merged = True
    while merged:
        merged = False
        for a in loops:
            b = next((b for b in loops if a[0] < b[0] <= a[1] < b[1]), None)
            if b is not None:
                loops = sorted(set(loops) - {a, b} | {(a[0], b[1])})
                merged = True
                break
    out = []
    for s, e in loops:
        parents = [
            j for j, (ps, pe) in enumerate(loops) if ps <= s and e <= pe and (ps, pe) != (s, e)
        ]
        out.append({"start": s, "end": e, "parent": max(parents) if parents else -1})
    for j, lp in enumerate(out):
        lp["inner"] = not any(o["parent"] == j for o in out)
    out.append({"start": 0, "end": len(lines) - 1, "parent": -2, "inner": False})
    for j, lp in enumerate(out):
        me = j if j < len(out) - 1 else -1
        kids = [(o["start"], o["end"]) for o in out[:-1] if o["parent"] == me]
        cold = {i: source.get(i) in cold_lines for i in range(lp["start"], lp["end"] + 1)}
        if lp["inner"]:
            cold = _cold_flags(lines, lp["start"], lp["end"], sass, source, cold_lines)
        lp["own"] = _longest(lines, sass, lp["start"], lp["end"], kids, cold)
        inside = [i for i in range(lp["start"], lp["end"] + 1)
                  if not any(s <= i <= e for s, e in kids) and not cold.get(i)]  # fmt: skip
        lp["float"] = sum(kernel_isa._kind(kernel_isa._op(lines[i], sass), sass) == "float"
                          for i in inside if not kernel_isa._label(lines[i], sass))  # fmt: skip
    out[-1]["start"] = -1
    return out


def _total(loops: list[dict], j: int) -> Counter:
    """Own instructions of loop ``j`` and of every loop inside it."""
    out = Counter(loops[j]["own"])
    for lp in loops[:-1]:
        p = lp["parent"]
        while p >= 0 and p != j:
            p = loops[p]["parent"]
        if p == j:
            out.update(lp["own"])
    return out


def _around(loops: list[dict], middle: int) -> tuple[Counter, Counter]:
    """The smallest sibling loop (with what it holds) before and after loop ``middle``: the
    tile zeroing and flush loops around a kernel's main loop (an unrolled loop's remainder
    copy is the smaller: one iteration)."""
    mid = loops[middle]
    sib = [j for j, lp in enumerate(loops[:-1]) if lp["parent"] == mid["parent"] and j != middle]
    pre = [_total(loops, j) for j in sib if loops[j]["end"] < mid["start"]]
    post = [_total(loops, j) for j in sib if loops[j]["start"] > mid["end"]]
    smallest = lambda cs: min(cs, key=lambda c: c["issue"]) if cs else Counter()  # noqa: E731
    return smallest(pre), smallest(post)


def _per_iteration(own: Counter, marker: str, per: float) -> Counter:
    """``own`` over its loop's unroll factor: ``own[marker]`` / the ``per`` markers one source
    iteration runs (reciprocals: one a node and row; float to int64 conversions: one a value)."""
    unroll = max(1, round(own.get(marker, 0) / per)) if per > 0 else 1
    return Counter({k: v / unroll for k, v in own.items()})


def _without(own: Counter, per_iteration: Counter, marker: str, per: float,
             legit: float = 0) -> Counter:  # fmt: skip
    """A loop's ``own`` without the remainder copies of an unrolled inner loop (``per_iteration``,
    ``per`` ``marker`` instructions an iteration) in it: its markers beyond its ``legit`` ones
    (the inner loop's trips count every iteration)."""
    copies = max(0.0, (own.get(marker, 0) - legit) / per) if per > 0 else 0.0
    return Counter({k: max(0.0, v - copies * per_iteration.get(k, 0)) for k, v in own.items()})


def _roles(loops: list[dict], kind: str, n_nodes: int = 0) -> dict[str, Counter] | None:
    """A kernel's loops by role (per iteration), or ``None`` where its loops are not as
    expected. ``kind``: ``shap`` and ``shap_pairs`` (the two-row kernel's build without the
    general unit fold; element: the products and quotients loops of an element,
    path, pre / post: tile zeroing / flush per column), ``interaction`` (forward: an element,
    step: two elements' diagonals, pair: a later element against two, path, pre / post),
    ``table_shap`` (rows: four rows, tile, pre / post), ``table_int`` (cond: a conditioned
    element, row, tile, pre / post); ``top``: once a warp; SHAP ``unit``: a sibling unit's entry,
    both rows (loops without reciprocals; a head's moments and scaling count in ``path``)."""
    body = loops[:-1]
    least = 4 if kind in ("shap", "shap_pairs", "interaction") else 1  # float ops of a hot loop
    fp = [j for j, lp in enumerate(body) if lp["inner"] and lp["float"] >= least]
    parent = lambda j: body[j]["parent"] if j >= 0 else -1  # noqa: E731
    roles = {"top": loops[-1]["own"]}
    try:
        if kind in ("shap", "shap_pairs"):
            p = fp[0]
            units = [j for j in fp[1:] if not body[j]["own"].get("rcp")]
            q = next(j for j in fp[1:] if body[j]["own"].get("rcp"))
            main = parent(p)
            if main < 0 or any(parent(j) != main for j in (q, *units)):
                return None
            products = body[p]["own"]
            unroll = max(1, round(products.get("fp32", 0) / (4 * n_nodes)))  # 2 a node and row
            products = Counter({k: v / unroll for k, v in products.items()})
            quotients = _per_iteration(body[q]["own"], "rcp", 2 * n_nodes)
            path = _without(body[main]["own"], quotients, "rcp", 2 * n_nodes)
            unit = _per_iteration(sum((body[j]["own"] for j in units), Counter()), "cvt64", 6)
            roles.update(element=products + quotients, path=path, unit=unit)
        elif kind == "interaction":
            fwd, pair = fp[:2]
            step = parent(pair)
            main = parent(step)
            if main < 0 or parent(fwd) != main:
                return None
            forward = _per_iteration(body[fwd]["own"], "rcp", n_nodes)
            per_pair = _per_iteration(body[pair]["own"], "rcp", n_nodes)
            roles.update(forward=forward, pair=per_pair,
                         step=_without(body[step]["own"], per_pair, "rcp", n_nodes, 3 * n_nodes),
                         path=_without(body[main]["own"], forward, "rcp", n_nodes))  # fmt: skip
        else:
            inner = fp[0]
            main = parent(inner) if kind == "table_shap" else parent(parent(inner))
            if main < 0:
                return None
            if kind == "table_shap":
                rows = _per_iteration(body[inner]["own"], "cvt64", 4)
                roles.update(rows=rows, tile=_without(body[main]["own"], rows, "cvt64", 4))
            else:
                row = parent(inner)
                cond = _per_iteration(body[inner]["own"], "cvt64", 1)
                roles.update(cond=cond, row=_without(body[row]["own"], cond, "cvt64", 1),
                             tile=body[main]["own"])  # fmt: skip
            inner_main = inner if kind == "table_shap" else parent(inner)
            pre, post = _around(loops, inner_main)
            roles.update(pre=pre, post=post)
            return roles
    except (IndexError, ValueError, StopIteration):
        return None
    pre, post = _around(loops, main)
    roles.update(pre=pre, post=post)
    return roles


def _kernel(kind: str, n_nodes: int, mode: str):
    """``(kernel, signature)`` of one kernel variant (built, not compiled; no GPU needed)."""
    if kind in ("shap", "shap_pairs"):  # shap_pairs: the build without the general unit fold
        return kernel_isa.two_row_kernel(n_nodes, mode, kind == "shap"), kernel_isa._LOCAL_SIG
    if kind == "interaction":
        from distshap.kernels.cuda.interaction_quadrature import interaction_kernel

        return interaction_kernel(n_nodes, mode == "shared"), _INT_SIG
    from distshap.kernels.cuda.tables import table_kernel

    shap = kind == "table_shap"
    return table_kernel(mode == "shared", shap=shap, rows4=shap), _TAB_SIG


_COUNTS: dict = {}
#: Counts loaded by :func:`load_counts` (``"kind/n_nodes/mode"`` -> a :func:`kernel_counts` dict).
_SAVED: dict = {}
#: Every kernel variant a plan may launch (:func:`save_counts`).
VARIANTS: tuple = (
    *((k, n, m) for k, modes in (("shap", ("local", "shared", "global")),
                                 ("shap_pairs", ("local", "shared", "global")),
                                 ("interaction", ("shared", "global")))
      for n in (2, 4, 6, 8, 12, 16) for m in modes),
    *((k, 0, m) for k in ("table_shap", "table_int") for m in ("shared", "global")),
)  # fmt: skip


def save_counts(path: str, nvdisasm: str | None = None) -> None:
    """Writes the SASS counts (PTX where SASS is not to be had) of every :data:`VARIANTS`
    kernel to the JSON file ``path`` (for a GPU machine without ``ptxas`` / ``nvdisasm``)."""
    out = {}
    for kind, n, mode in VARIANTS:
        c = kernel_counts(kind, n, mode, True, nvdisasm)
        roles = {r: dict(v) for r, v in (c["roles"] or {}).items()}
        out[f"{kind}/{n}/{mode}"] = dict(level=c["level"], registers=c["registers"], roles=roles)
    with open(path, "w") as fh:
        json.dump(out, fh, indent=0, sort_keys=True)


def load_counts(path: str) -> int:
    """Loads :func:`save_counts`' file: :func:`kernel_counts` returns its SASS counts (level
    ``sass*``) where it cannot make its own. Returns the number of kernels loaded."""
    with open(path) as fh:
        data = json.load(fh)
    for key, c in data.items():
        roles = {r: Counter(v) for r, v in c["roles"].items()} or None
        _SAVED[key] = {"level": c["level"] + "*", "registers": c["registers"], "roles": roles}
    return len(data)


def kernel_counts(kind: str, n_nodes: int = 0, mode: str = "shared", sass: bool = True,
                  nvdisasm: str | None = None, arch: str = "sm_90") -> dict:  # fmt: skip
    """Instructions per loop iteration of one kernel by role (:func:`_roles`), from SASS where
    ``sass`` and ``nvdisasm`` is found and its loops nest, else from PTX: ``{"level": "sass"
    or "ptx", "roles": {role: Counter}, "registers": int or None}`` (``roles`` None: loops not
    as expected). ``mode``: ``local`` / ``shared`` / ``global`` (SHAP), ``shared`` /
    ``global`` otherwise (table kinds: ``table_shap``, ``table_int``)."""
    key = (kind, n_nodes, mode, sass, nvdisasm, arch)
    if key in _COUNTS:
        return _COUNTS[key]
    saved = _SAVED.get(f"{kind}/{n_nodes}/{mode}")
    nvdisasm = nvdisasm or kernel_isa._default_nvdisasm()
    tools = nvdisasm and os.path.exists(nvdisasm) and shutil.which("ptxas")
    if sass and not tools and saved is not None and saved["level"].startswith("sass"):
        return saved  # no SASS here: the counts made elsewhere
    kernel, sig = _kernel(kind, n_nodes, mode)
    ptx = kernel_isa.kernel_ptx(kernel, sig, cc=(int(arch[3]), int(arch[4:])))
    cold = kernel_isa.cold_lines(kernel)
    result = {"level": "ptx", "roles": None, "registers": None}
    if sass and tools and not kind.startswith("table"):  # table loops: PTX (docstring)
        try:
            lines, source, rep = kernel_isa.sass_of(ptx, arch=arch, nvdisasm=nvdisasm)
            regs = re.search(r"Used (\d+) registers", rep)
            result["registers"] = int(regs.group(1)) if regs else None
            loops = loop_counts(lines, True, source, cold)
            result["roles"] = _roles(loops, kind, n_nodes) if loops else None
            result["level"] = "sass"
        except (OSError, RuntimeError, ValueError, subprocess.SubprocessError) as exc:
            print(f"  (SASS unavailable: {exc}; saved or PTX counts)", file=sys.stderr)
    if result["roles"] is None:
        lines, source = kernel_isa._ptx_lines(ptx)
        result["roles"] = _roles(loop_counts(lines, False, source, cold), kind, n_nodes)
        result["level"] = "ptx"
    _COUNTS[key] = result
    return result


# ---- Work of a plan: trip counts x instructions per iteration ----------------------------


@dataclasses.dataclass
class KernelWork:
    """Counted work of one kernel launch (all its row batches): ``counts`` (warp instructions:
    ``issue`` and :data:`CLASSES`), ``hbm_bytes`` (lower bound), ``elements`` (path elements x
    rows), ``level`` (``sass``, ``ptx``; ``""``: not counted) and ptxas' ``registers``."""

    label: str
    counts: Counter
    hbm_bytes: float
    elements: int = 0
    level: str = ""
    registers: int | None = None


def _acc_bytes(rows: int, width: int) -> float:
    """Accumulator traffic: each value read and written once where the accumulator exceeds L2."""
    return 16.0 * rows * width if 8 * rows * width > _L2_BYTES else 0.0


def _scaled(roles: dict, trips: dict) -> Counter:
    """Per-iteration counts x trips, and each role's issue as ``"issue:<role>"``."""
    out = Counter()
    for role, n in trips.items():
        for k, v in roles.get(role, {}).items():
            if k in CLASSES or k == "issue":
                out[k] += v * n
        out[f"issue:{role}"] = roles.get(role, {}).get("issue", 0) * n
    return out


def _npairs(k: np.ndarray) -> np.ndarray:
    """Pair-loop iterations of the interaction kernel for ``k`` elements (``a = 0, 2, ...``
    against each ``c >= a + 2``)."""
    k = np.asarray(k, np.int64)
    a = np.arange(0, max(int(k.max(initial=0)), 1), 2)
    return np.maximum(k[:, None] - a[None, :] - 2, 0).sum(axis=1)


def _shap_launch(q: dict, k: np.ndarray, F: int, G: int, nb: int, local: bool, opts: dict,
                 entries: np.ndarray | None = None) -> KernelWork:  # fmt: skip
    """The two-row SHAP quadrature launch ``q`` on ``nb`` rows (``entries``: each path's units)."""
    from distshap.plan.geometry import quadrature_warps

    rows = 2
    if local:
        if quadrature_warps(q["local_columns"], 2) == 0:
            rows = 1
        mode, chunks = "local", int(q["n_local"])
        widths = int(np.diff(q["local_feature_offsets"]).sum())
    else:
        if quadrature_warps(F, 2) == 0 < quadrature_warps(F):
            rows = 1
        mode = "shared" if quadrature_warps(F, rows) > 0 else "global"
        chunks, widths = int(q["n_chunks"]), int(q["n_chunks"]) * F
    paths = np.asarray(q["paths"], np.int64)
    kk = k[paths]
    label = f"quadrature {q['n_nodes']} nodes ({mode})"
    groups = len(np.unique(q["group"])) if len(q["group"]) else 0
    hbm = nb * F * 4.0 + (kk + 1).sum() * _LANE_BYTES + _acc_bytes(nb, groups * (F + 1))
    elements = int(kk.sum()) * nb
    kind = "shap" if q.get("general_units", True) else "shap_pairs"  # the build it launches
    c = kernel_counts(kind, q["n_nodes"], mode, **opts) if rows == 2 else {"roles": None}
    if c["roles"] is None:  # (the one-row kernels are not counted here)
        return KernelWork(label + ("" if rows == 2 else ", one row a thread"), Counter(), hbm,
                          elements)  # fmt: skip
    warps = -(-nb // 64)  # 32 threads x 2 rows a warp, per chunk
    trips = {"element": kk.sum(), "path": kk.size, "top": chunks, "pre": widths, "post": widths,
             "unit": 0 if entries is None else int(entries[paths].sum())}  # fmt: skip
    counts = _scaled(c["roles"], {r: warps * n for r, n in trips.items()})
    return KernelWork(label, counts, hbm, elements, c["level"], c["registers"])


def _interaction_launch(q: dict, k: np.ndarray, F: int, nb: int, opts: dict) -> KernelWork:
    """The interaction quadrature launch ``q`` (one thread a path, a block a chunk and row)."""
    from distshap.plan.geometry import interaction_tile_fits

    F1 = F + 1
    mode = "shared" if interaction_tile_fits(F1) else "global"
    paths = np.asarray(q["paths"], np.int64)
    offsets = np.asarray(q["offsets"], np.int64)
    kk = k[paths]
    groups = len(np.unique(q["group"])) if len(q["group"]) else 0
    label = f"interaction quadrature {q['n_nodes']} nodes ({mode})"
    hbm = nb * F * 4.0 + (kk + 1).sum() * _LANE_BYTES + _acc_bytes(nb, groups * F1 * F1)
    elements = int(kk.sum()) * nb
    c = kernel_counts("interaction", q["n_nodes"], mode, **opts)
    if c["roles"] is None or not kk.size:
        return KernelWork(label, Counter(), hbm, elements)
    # a warp runs 32 consecutive paths of its chunk at a time: its longest one's loops
    pos = np.arange(kk.size) - np.repeat(offsets[:-1], np.diff(offsets))
    first = np.flatnonzero((pos % 32) == 0)
    kmax = np.maximum.reduceat(kk, first)
    n_chunks = int(q["n_chunks"])
    zero = -(-(F1 * F1) // 128) if mode == "shared" else 0  # a warp's share of the tile loops
    trips = {"path": kmax.size, "forward": kmax.sum(), "step": (-(-kmax // 2)).sum(),
             "pair": _npairs(kmax).sum(), "top": 4 * n_chunks, "pre": 4 * n_chunks * zero,
             "post": 4 * n_chunks * zero}  # fmt: skip
    counts = _scaled(c["roles"], {r: nb * n for r, n in trips.items()})
    return KernelWork(label, counts, hbm, elements, c["level"], c["registers"])


def _table_launch(plan: dict, k: np.ndarray, F: int, width: int, nb: int, shap: bool,
                  opts: dict) -> KernelWork:  # fmt: skip
    """The table kernel over the plan's table bins (a warp a bin, as :func:`launch_tables`)."""
    from distshap.kernels.cuda.tables import _rows_per_warp
    from distshap.plan.config import get_config
    from distshap.plan.geometry import shared_tile_rows

    n_bins = int(plan["n_table_bins"])
    maxk = np.asarray(plan["table_maxk"], np.int64)
    maxk = maxk[maxk > 0]
    tile_rows = shared_tile_rows(width)
    mode = "shared" if tile_rows > 0 else "global"
    warps = int(get_config().table_warps_per_block)
    rpb = _rows_per_warp(nb, n_bins)
    label = f"{'SHAP' if shap else 'interaction'} tables ({mode}, {n_bins} bins)"
    lanes = int(plan.get("table_lanes", 0))
    hbm = nb * F * 4.0 + plan["table_bytes"] + lanes * _LANE_BYTES + _acc_bytes(nb, width)
    elements = int(plan.get("table_elements", 0)) * nb
    c = kernel_counts("table_shap" if shap else "table_int", 0, mode, **opts)
    if c["roles"] is None:
        return KernelWork(label, Counter(), hbm, elements)
    starts = np.arange(0, nb, rpb)
    block_rows = np.minimum(rpb, nb - starts)
    tl = tile_rows or rpb
    tiles = [np.minimum(tl, r - np.arange(0, r, tl)) for r in block_rows]
    t_all = np.concatenate(tiles)
    n_tiles = t_all.size  # over the row blocks, a warp each
    zf = (-(-(t_all * width) // (32 * warps))).sum() if mode == "shared" else 0
    bins_padded = -(-n_bins // warps) * warps
    trips = {"top": bins_padded * len(starts), "tile": bins_padded * n_tiles,
             "pre": bins_padded * zf, "post": bins_padded * zf}  # fmt: skip
    if shap:
        trips["rows"] = bins_padded * (-(-t_all // 4)).sum()
    else:
        trips["row"] = bins_padded * nb
        trips["cond"] = int(maxk.sum()) * nb
    counts = _scaled(c["roles"], trips)
    return KernelWork(label, counts, hbm, elements, c["level"], c["registers"])


def plan_work(packed, plan: dict, nb: int, interactions: bool, sass: bool = True,
              nvdisasm: str | None = None) -> list[KernelWork]:  # fmt: skip
    """Counted work of every kernel launch of one call on ``nb`` rows, in launch order: tables,
    each quadrature launch, the rows' transposed copy (SHAP), the finish pass. ``plan``: host
    arrays (:func:`host_plan`)."""
    from distshap.plan.tables import path_features

    opts = {"sass": sass, "nvdisasm": nvdisasm}
    k = path_features(packed.path_offsets).astype(np.int64)
    F, G = int(packed.num_features), int(packed.num_groups)
    width = G * (F + 1) ** (2 if interactions else 1)
    out = []
    if plan["n_table_bins"]:
        out.append(_table_launch(plan, k, F, width, nb, not interactions, opts))
    local = plan["lane_column"] is not None
    entries = None if plan.get("unit_offsets") is None else np.diff(plan["unit_offsets"])
    for q in plan["quadrature"]:
        if interactions:
            out.append(_interaction_launch(q, k, F, nb, opts))
        else:
            out.append(_shap_launch(q, k, F, G, nb, local, opts, entries))
    if plan["quadrature"] and not interactions:
        out.append(KernelWork("rows transposed (CuPy)", Counter(), 8.0 * nb * F))
    if plan.get("n_oversize"):
        out.append(KernelWork("fallback (not counted)", Counter(), 0.0))
    out.append(KernelWork("finish", Counter(), 20.0 * nb * width))
    return out


def host_plan(packed, interactions: bool, device_plan=None) -> dict:
    """The plan of one output kind as host arrays: from the device's ``device_plan`` (a
    :class:`~distshap.kernels.cuda.runtime.model.Plan`), else made on the host as the H200
    would (its shipped cost constants choose the SHAP tables)."""
    from distshap.plan import gpu
    from distshap.plan.tables import path_features, table_values

    k = path_features(packed.path_offsets)
    if device_plan is None:
        from distshap.plan.costs import costs_for

        offsets = (gpu.interaction_table_offsets(packed) if interactions
                   else gpu.shap_table_offsets(packed, costs_for("NVIDIA H200")))  # fmt: skip
        plan = gpu.plan_arrays(packed, offsets, local=not interactions, units=not interactions)
        plan["table_bytes"] = 4 * table_values(k, offsets, "k*k" if interactions else "k")
    else:
        host = lambda a: a.copy_to_host() if hasattr(a, "copy_to_host") else np.asarray(a)  # noqa: E731
        plan = {name: getattr(device_plan, name) for name in ("n_table_bins", "table_bytes")}
        plan["table_maxk"] = host(device_plan.table_maxk)
        plan["lane_column"] = device_plan.lane_column
        plan["unit_offsets"] = None if (u := device_plan.unit_offsets) is None else host(u)
        plan["quadrature"] = [{f.name: (host(v) if hasattr(v, "copy_to_host") else v)
                               for f in dataclasses.fields(q) for v in [getattr(q, f.name)]}
                              for q in device_plan.quadrature]  # fmt: skip
        offsets = host(device_plan.lane_table)
    if plan["n_table_bins"]:
        lane_table = np.asarray(plan.get("lane_table", offsets))
        on = np.flatnonzero(np.asarray(lane_table)[: packed.lane_path.shape[0]] >= 0)
        plan["table_lanes"] = int(on.size)
        plan["table_elements"] = int(np.count_nonzero(packed.feature[on] >= 0)) if on.size else 0
    plan["n_oversize"] = int((~gpu.path_info(packed)[2]).sum())  # the fallback kernel's
    return plan
