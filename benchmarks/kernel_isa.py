"""Instruction counts of the SHAP quadrature kernels' per-element loops (no GPU needed).

Compiles a kernel with ``numba.cuda.compile_ptx`` for a compute capability (9.0 by default),
finds its loops (a branch back to an earlier label) and counts the instructions of each
innermost loop by kind. With ``--sass`` the PTX is assembled by ``ptxas`` (registers,
spills) and disassembled by ``nvdisasm`` (``pip install nvidia-cuda-nvdisasm``: its
``nvidia/cu13/bin/nvdisasm``, or ``--nvdisasm PATH``): what the SM issues.

Kinds: ``float`` (f32/f64 arithmetic, MUFU), ``int`` (integer arithmetic, logic, shifts,
address forms), ``cmpsel`` (compares, selects, predicate logic), ``load`` / ``store`` (memory,
constants), ``cvt`` (conversions), ``move``, ``branch`` (branches, convergence barriers),
``other``; SASS also counts the uniform-datapath instructions (``U*``, a part of the others).

``cold`` instructions lie in basic blocks of a loop that run only for categorical elements
(blocks with float64 conversions or compares: ``follows`` tests ``x >= cat_nbits`` in
float64, and the category-set lookup that falls through from one and jumps to the join),
or that come from kernel source lines ending with ``# categorical`` (with ``lineinfo``, an
inlined device function's instructions carry the line of its call); ``hot`` = ``static -
cold``: about the instructions a numeric element runs (a branch over a ``d != 0`` or
``iv != 0`` test counts as taken).

The two-row SHAP kernel has six innermost loops (in order): the tile zeroing, pass 1 (the
products, the follows tests: ``products``), a sibling unit's entries for row a and for row b
(``units#0``, ``units#1``: run once a unit's head), pass 2 (the quotients, the tile adds:
``quotients``) and the flush; the tool names the loops with floating-point work.

Usage::

    python -m benchmarks.kernel_isa                      # two-row local kernel, 8 nodes, PTX
    python -m benchmarks.kernel_isa --sass --nodes 8
    python -m benchmarks.kernel_isa --sass --kernel slot      # split slot kernel
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import tempfile
from collections import Counter

__all__ = [
    "cold_lines", "count_loops", "float_ops", "kernel_ptx", "main", "report", "sass_of",
    "slot_kernel", "two_row_kernel",
]  # fmt: skip

_LOCAL_SIG = (  # the SHAP kernels with chunk-local feature tiles (and the two-row kernel)
    "void(float32[:, ::1], int32[:, ::1], int64[::1], uint32[::1], int64[::1], int32[::1], "
    "int32[::1], float32[::1], int32[:, ::1], int32[::1], int64[::1], int32[::1], int16[::1], "
    "int32[::1], int64[::1], float32[:, ::1], int64[:, ::1], float64, int64, int64)"
)
#: :func:`slot_kernel`'s signature: the gathered arrays as flat views
#: (:func:`distshap.kernels.cuda.slot_quadrature.slot_kernel_arrays`).
_SLOT_SIG = (
    "void(float32[::1], int32[::1], int64[::1], int32[::1], float32[::1], "
    "uint32[::1], int32[::1], int64[::1], int16[::1], int64[::1], int32[::1], "
    "float32[:, ::1], int64[:, ::1], float64, int64, int64[::1], int64[::1], int64)"
)
_KINDS = ("float", "int", "cmpsel", "load", "store", "cvt", "move", "branch", "other")


def two_row_kernel(n_nodes: int = 8, mode: str = "local", general: bool = True):
    """The two-row SHAP kernel for ``n_nodes`` nodes in ``mode`` (``"local"``, ``"shared"``,
    ``"global"``), the kernel object the launches take; without ``general``: the one of
    launches whose sibling units are all pairs."""
    from distshap.kernels.cuda import shap_quadrature as quadrature

    return quadrature.quadrature_kernel(n_nodes, mode != "global", local=mode == "local", rows=2,
                                        general=general)  # fmt: skip


def slot_kernel(n_nodes: int = 4, rows: int = 2, cache_x: bool = True):
    """The split slot kernel (:func:`distshap.kernels.cuda.slot_quadrature.split_slot_kernel`)
    and its signature: ``(kernel, sig)``. Its first loop with floating-point work
    (``products``) is the per-(element, row) loop, its second (``quotients``) the per-(pair,
    row) loop (a pair of elements ``a < c``; NVVM makes two copies, tile and direct adds); the
    diagonals run in the loop around it. In SASS the integer divisions of the set-up loops use
    float instructions too: ``report(..., min_float=8)`` names the right loops there."""
    from distshap.kernels.cuda import slot_quadrature

    kernel = slot_quadrature.split_slot_kernel(n_nodes, rows, cache_x)
    return kernel, _SLOT_SIG


def kernel_ptx(kernel, sig: str = _LOCAL_SIG, cc: tuple[int, int] = (9, 0),
               lineinfo: bool = True) -> str:  # fmt: skip
    """PTX of ``kernel`` (a Numba CUDA kernel) for ``sig`` and ``cc`` (no GPU needed);
    ``lineinfo`` (``.loc`` lines) does not change the instructions."""
    from numba import cuda

    from distshap.kernels.cuda.runtime.ptx import _device_free_compilation

    with _device_free_compilation(cc):
        ptx, _ = cuda.compile_ptx(kernel.py_func, sig, cc=cc, lineinfo=lineinfo)
    return ptx


def cold_lines(kernel, marker: str = "# categorical") -> set:
    """(file, line) of the kernel's source lines that end with ``marker``: the calls that run
    only for categorical elements (their instructions count as cold; put the marker on the
    first line of a statement: the line ``lineinfo`` gives it)."""
    import inspect

    lines, first = inspect.getsourcelines(kernel.py_func)
    path = inspect.getsourcefile(kernel.py_func)
    return {(path, first + i) for i, text in enumerate(lines) if text.rstrip().endswith(marker)}


def _default_nvdisasm() -> str | None:
    try:
        import nvidia

        for root in nvidia.__path__:
            for sub in ("cu13", "cuda_nvdisasm", "cu12"):
                path = os.path.join(root, sub, "bin", "nvdisasm")
                if os.path.exists(path):
                    return path
    except ImportError:
        pass
    return None


def sass_of(ptx: str, arch: str = "sm_90", ptxas: str = "ptxas",
            nvdisasm: str | None = None) -> tuple[list[str], str]:  # fmt: skip
    """``(SASS instruction lines with labels, ptxas -v report)`` of ``ptx``."""
    nvdisasm = nvdisasm or _default_nvdisasm()
    if nvdisasm is None:
        raise RuntimeError("nvdisasm not found: pip install nvidia-cuda-nvdisasm, or --nvdisasm")
    with tempfile.TemporaryDirectory() as tmp:
        src, cubin = os.path.join(tmp, "k.ptx"), os.path.join(tmp, "k.cubin")
        with open(src, "w") as fh:
            fh.write(ptx)
        report = subprocess.run([ptxas, f"-arch={arch}", "-v", "-lineinfo", "-o", cubin, src],
                                capture_output=True, text=True, check=True).stderr  # fmt: skip
        text = subprocess.run([nvdisasm, "-c", "-g", cubin], capture_output=True, text=True,
                              check=True).stdout  # fmt: skip
    lines, source = [], {}
    for raw in text.splitlines():
        found = re.search(r'//## File "([^"]*)", line (\d+)', raw)
        if found:
            source_line = (found.group(1), int(found.group(2)))
            continue
        line = re.sub(r"/\*[0-9a-f]+\*/", "", raw).strip()
        if re.match(r"^\.L_x_\d+:", line):
            lines.append(line)
        elif line.endswith(";") and not line.startswith("."):
            source[len(lines)] = source_line
            lines.append(line.rstrip(" ;"))
    return lines, source, report


def _ptx_lines(ptx: str) -> tuple[list[str], dict]:
    """PTX instructions and labels of the kernel body, and their source lines (with
    ``lineinfo``; an inlined device function's instructions carry the line of its call)."""
    files = dict(re.findall(r'^\s*\.file\s+(\d+)\s+"([^"]*)"', ptx, re.M))
    body = ptx[ptx.index("{", ptx.index(".entry")) + 1 :]
    out, source, where = [], {}, None
    for raw in body.splitlines():
        loc = re.match(r"^\s*\.loc\s+(\d+)\s+(\d+)", raw)
        if loc:
            fid, ln = loc.groups()
            where = (files.get(fid, fid), int(ln))
            continue
        line = raw.split("//")[0].strip()
        if not line or line.startswith((".reg", ".local", ".shared", "{", "}", ".file")):
            continue
        if not line.endswith(":"):
            source[len(out)] = where
        out.append(line.rstrip(";").strip())
    return out, source


def _label(line: str, sass: bool) -> str | None:
    m = re.match(r"^(\.L_x_\d+):$" if sass else r"^(\$L__BB\d+_\d+):$", line)
    return m.group(1) if m else None


def _target(line: str, sass: bool) -> str | None:
    if sass:
        m = re.search(r"\bBRA\b.*\(\s*(\.L_x_\d+)\)", line)
    else:
        m = re.search(r"\bbra(?:\.uni)?\s+(\$L__BB\d+_\d+)", line)
    return m.group(1) if m else None


def _op(line: str, sass: bool) -> str:
    body = re.sub(r"^@!?U?P\w+\s+", "", line) if sass else re.sub(r"^@!?%p\w*\s+", "", line)
    return body.split()[0]


def _kind(op: str, sass: bool) -> str:
    if sass:
        base = op.split(".")[0]
        u = base[1:] if base.startswith("U") and base not in ("UIADD",) else base
        if base in ("BRA", "BSSY", "BSYNC", "EXIT", "RET", "CALL", "WARPSYNC", "BAR"):
            return "branch"
        if base.startswith(("LD", "ULD")) or base in ("S2R", "S2UR", "CS2R", "R2UR", "LDC"):
            return "load" if base not in ("R2UR",) else "move"
        if base.startswith(("ST", "ATOM", "RED")):
            return "store"
        if base in ("F2I", "I2F", "F2F", "I2FP", "F2FP", "I2I"):
            return "cvt"
        if u in ("ISETP", "FSETP", "DSETP", "SEL", "FSEL", "PLOP3", "P2R", "R2P", "VOTE",
                 "VOTEU", "FMNMX", "IMNMX", "FCHK"):  # fmt: skip
            return "cmpsel"
        if u in ("MOV", "SHFL") or op.startswith(("IMAD.MOV", "IMAD.U32", "UMOV")):
            return "move"
        if base in ("FADD", "FMUL", "FFMA", "MUFU", "DADD", "DMUL", "DFMA", "FMUL32I",
                    "FADD32I", "FFMA32I", "HFMA2"):  # fmt: skip
            return "float"
        if u in ("IADD3", "IMAD", "LOP3", "SHF", "LEA", "PRMT", "IABS", "POPC", "FLO", "BREV",
                 "IADD", "VIADD", "SGXT", "BMSK", "LOP", "ISCADD", "IMUL"):  # fmt: skip
            return "int"
        return "other"
    parts = op.split(".")
    base = parts[0]
    if base in ("bra", "ret", "exit", "bar", "call"):
        return "branch"
    if base in ("ld", "ldu", "cvta"):
        return "load"
    if base in ("st", "atom", "red"):
        return "store"
    if base == "cvt":
        return "cvt"
    if base in ("setp", "selp", "set", "slct", "not") and ("pred" in parts or base != "not"):
        return "cmpsel"
    if base == "mov":
        return "move"
    ftype = any(p in ("f32", "f64", "ftz", "approx", "full") for p in parts)
    if base in ("add", "sub", "mul", "fma", "div", "rcp", "neg", "abs", "min", "max", "sqrt",
                "ex2", "lg2") and ftype:  # fmt: skip
        return "float"
    if base in ("add", "sub", "mul", "mad", "shl", "shr", "and", "or", "xor", "not", "neg",
                "min", "max", "abs", "div", "rem", "popc", "clz", "brev", "bfe", "bfi",
                "prmt", "mul24", "mad24", "shf", "cnot"):  # fmt: skip
        return "int"
    return "other"


def count_loops(lines: list[str], sass: bool, source: dict | None = None,
                cold_lines: set | None = None) -> list[dict]:  # fmt: skip
    """Innermost loops of ``lines`` (labels and instructions): for each, its first and last line
    and the instruction counts by kind (``static``, ``cold``, ``hot``). ``source``: line number
    -> (file, source line); instructions of ``cold_lines`` count as cold."""
    source = source or {}
    cold_lines = cold_lines or set()
    where = {}
    for i, line in enumerate(lines):
        name = _label(line, sass)
        if name:
            where[name] = i
    loops = []
    for i, line in enumerate(lines):
        t = _target(line, sass)
        if t is not None and where.get(t, i + 1) <= i:
            loops.append((where[t], i))
    inner = [lp for lp in loops
             if not any(o != lp and lp[0] <= o[0] and o[1] <= lp[1] for o in loops)]  # fmt: skip
    out = []
    for start, stop in sorted(inner):
        blocks, cur = [], []
        for at in range(start, stop + 1):
            line = lines[at]
            if _label(line, sass):
                if cur:
                    blocks.append(cur)
                cur = []
                continue
            cur.append((line, source.get(at) in cold_lines))
            if _target(line, sass) is not None:
                blocks.append(cur)
                cur = []
        if cur:
            blocks.append(cur)
        static, cold = Counter(), Counter()
        uniform = 0
        prev_cold = False
        for block in blocks:
            marked = [c for _, c in block]
            block = [x for x, _ in block]
            ops = [_op(x, sass) for x in block]
            is_cold = any(o.startswith(("F2F.F64", "I2F.F64", "DSETP")) or ".f64" in o
                          for o in ops)  # fmt: skip
            # the category-set lookup: falls through from a float64 test, jumps to the join
            last = block[-1]
            unconditional = _target(last, sass) is None or not last.startswith("@")
            is_cold = is_cold or (prev_cold and unconditional)
            prev_cold = is_cold and not unconditional
            for o, mark in zip(ops, marked, strict=True):
                k = _kind(o, sass)
                static[k] += 1
                if is_cold or mark:
                    cold[k] += 1
                elif sass and o.startswith("U") and k != "move":
                    uniform += 1
        hot = static - cold
        rcp = sum(1 for at in range(start, stop + 1)
                  if _op(lines[at], sass).startswith("MUFU.RCP" if sass else "rcp."))  # fmt: skip
        out.append({"first": start, "last": stop, "static": dict(static), "cold": dict(cold),
                    "hot": {k: hot.get(k, 0) for k in _KINDS}, "hot_total": sum(hot.values()),
                    "static_total": sum(static.values()), "uniform_hot": uniform,
                    "rcp": rcp})  # fmt: skip
    return out


def _named(loops: list[dict], min_float: int = 1) -> dict[str, dict]:
    """The loops by name: ``products`` (the first with floating-point work), ``units#i`` (a
    sibling unit's entries, a row each: floating-point work without reciprocals after the
    products), ``quotients`` (the next), ``loop<i>`` the others."""
    fp = [lp for lp in loops if lp["hot"]["float"] >= min_float]
    names = {}
    if len(fp) >= 2:
        units = [lp for lp in fp[1:] if lp["rcp"] == 0]
        rest = [lp for lp in fp[1:] if lp["rcp"] > 0]
        names["products"] = fp[0]
        names.update((f"units#{i}", lp) for i, lp in enumerate(units))
        if rest:
            names["quotients"] = rest[0]
    for i, lp in enumerate(loops):
        if lp not in names.values():
            names[f"loop{i}"] = lp
    return names


def report(kernel, sig: str = _LOCAL_SIG, sass: bool = True, nvdisasm: str | None = None,
           arch: str = "sm_90", min_float: int = 1) -> dict:  # fmt: skip
    """Instruction counts of ``kernel``'s innermost loops (PTX; SASS with ``sass``), named
    ``products`` and ``quotients`` (the first two with floating-point work: ``min_float``
    float instructions or more; SASS integer divisions use a few)."""
    ptx = kernel_ptx(kernel, sig, cc=(int(arch[3]), int(arch[4:])))
    cold = cold_lines(kernel)
    lines, source = _ptx_lines(ptx)
    result = {"ptx": _named(count_loops(lines, False, source, cold), min_float)}
    if sass:
        lines, source, rep = sass_of(ptx, arch=arch, nvdisasm=nvdisasm)
        result["sass"] = _named(count_loops(lines, True, source, cold), min_float)
        regs = re.search(r"Used (\d+) registers", rep)
        spills = re.search(r"(\d+) bytes spill stores", rep)
        result["registers"] = int(regs.group(1)) if regs else None
        result["spill_bytes"] = int(spills.group(1)) if spills else None
    return result


def float_ops(kernel, sig: str = _LOCAL_SIG, every: bool = False) -> dict[str, list[tuple]]:
    """The PTX floating-point instructions of ``kernel``'s ``products`` and ``quotients``
    loops, in order, each as ``(opcode, immediates)`` (``abs``, a compare's operand, left
    out); with the float-to-int conversions and float selects. NVVM contracts ``a * b + c``
    into ``fma`` in the PTX: equal lists mean the same float32 operations per element.
    ``every``: each innermost loop with 8 floating-point instructions or more, in order
    (``fp0``, ``fp1``...)."""
    lines, _ = _ptx_lines(kernel_ptx(kernel, sig, lineinfo=False))
    out = {}
    loops = count_loops(lines, False)
    if every:
        fp = (x for x in loops if x["hot"]["float"] >= 8)
        named = {f"fp{i}": lp for i, lp in enumerate(fp)}
    else:
        named = _named(loops)
    for name, lp in named.items():
        if name not in ("products", "quotients") and not every:
            continue
        ops = []
        for line in lines[lp["first"] : lp["last"] + 1]:
            op = _op(line, False)
            if op.startswith("abs."):
                continue
            if _kind(op, False) == "float" or op.startswith(("cvt.rzi.s64.f32", "selp.f32")):
                ops.append((op, tuple(re.findall(r"0f[0-9A-F]{8}", line))))
        out[name] = ops
    return out


def _print(name: str, result: dict) -> None:
    head = f"== {name}"
    if "registers" in result:
        head += f"  registers {result['registers']}, spill stores {result['spill_bytes']} B"
    print(head)
    for level in ("ptx", "sass"):
        if level not in result:
            continue
        per = 0
        for loop_name, lp in result[level].items():
            if not loop_name.startswith(("products", "quotients", "units")):
                continue
            if not loop_name.startswith("units"):
                per += lp["hot_total"]
            kinds = " ".join(f"{k} {lp['hot'][k]}" for k in _KINDS if lp["hot"][k])
            extra = f" (uniform {lp['uniform_hot']})" if level == "sass" else ""
            print(f"  {level:4s} {loop_name:9s} hot {lp['hot_total']:4d}{extra}  static "
                  f"{lp['static_total']:4d}  |  {kinds}")  # fmt: skip
        print(f"  {level:4s} per element (2 rows): {per}, per (element, row): {per / 2:.1f}"
              "; units#i: a unit entry, one row each")  # fmt: skip


def _print_slot(kernel, sig: str, sass: bool, nvdisasm: str | None, arch: str) -> None:
    """Every loop of the split slot kernel with 8 float instructions or more: the first is the
    per-(element, row) loop, the others the per-(pair, row) loop (SASS: two copies, each
    unrolled twice; the second, with two shared atomics, is the tile's)."""
    ptx = kernel_ptx(kernel, sig, cc=(int(arch[3]), int(arch[4:])))
    cold = cold_lines(kernel)
    lines, source = _ptx_lines(ptx)
    levels = [("ptx", count_loops(lines, False, source, cold))]
    head = "== split slot kernel"
    if sass:
        lines, source, rep = sass_of(ptx, arch=arch, nvdisasm=nvdisasm)
        levels.append(("sass", count_loops(lines, True, source, cold)))
        regs = re.search(r"Used (\d+) registers", rep)
        head += f"  registers {regs.group(1) if regs else '?'}"
    print(head)
    for level, loops in levels:
        for i, lp in enumerate(lp for lp in loops if lp["hot"]["float"] >= 8):
            kinds = " ".join(f"{k} {lp['hot'][k]}" for k in _KINDS if lp["hot"][k])
            name = "elements" if i == 0 else f"pairs#{i}"
            print(f"  {level:4s} {name:9s} hot {lp['hot_total']:4d}  static "
                  f"{lp['static_total']:4d}  |  {kinds}")  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, help="8 (two-row kernel), 4 (slot kernel)")
    parser.add_argument("--mode", default="local", choices=("local", "shared", "global"))
    parser.add_argument("--sass", action="store_true", help="ptxas + nvdisasm counts too")
    parser.add_argument("--nvdisasm", help="path of nvdisasm")
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--kernel", default="two_row", choices=("two_row", "slot"),
                        help="slot: the split slot kernel (4 nodes by default)")  # fmt: skip
    parser.add_argument("--pairs", action="store_true",
                        help="the two-row kernel without the general unit fold")  # fmt: skip
    args = parser.parse_args(argv)
    if args.kernel == "slot":
        kernel, sig = slot_kernel(args.nodes or 4, 2, True)
        _print_slot(kernel, sig, args.sass, args.nvdisasm, args.arch)
        return
    nodes = args.nodes or 8
    kernel = two_row_kernel(nodes, args.mode, not args.pairs)
    result = report(kernel, sass=args.sass, nvdisasm=args.nvdisasm, arch=args.arch)
    pairs = ", pairs only" if args.pairs else ""
    _print(f"two-row SHAP kernel, {nodes} nodes, {args.mode}{pairs}", result)


if __name__ == "__main__":
    main()
