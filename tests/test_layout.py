"""The package's shape, checked from its source: module and function sizes, imports that point
down (no circle, counting imports inside functions), and code that speaks of the code."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "distshap"
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 100
#: Modules below the kernels: they never import kernels, the cluster layer or a front end.
HOST_SIDE = ("distshap.models", "distshap.paths", "distshap.packing", "distshap.encoding",
             "distshap.inputs", "distshap.packed", "distshap.plan",
             "distshap.parallel")  # fmt: skip
ABOVE_HOST = ("distshap.kernels", "distshap.cluster", "distshap.explainer", "distshap.cli",
              "distshap.info", "distshap.plots", "distshap.io", "distshap.serve")  # fmt: skip
_JIT = re.compile(r"\b(jit|njit|vectorize|guvectorize|generated_jit)\b")


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = path
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Package modules ``name`` imports anywhere in its source (functions included)."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            targets = [f"{base}.{alias.name}" for alias in node.names]
            if any(t not in modules for t in targets):  # names defined in the module `base`
                targets.append(base)
        else:
            continue
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _is_under(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def test_modules_are_at_most_600_lines():
    long = {
        name: n
        for name, path in _modules().items()
        if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"


def _is_jit(node: ast.AST) -> bool:
    return any(_JIT.search(ast.unparse(d)) for d in getattr(node, "decorator_list", ()))


def _own_lines(node: ast.AST) -> int:
    """A function's lines less those of jit functions defined inside it (kernel bodies)."""
    lines = node.end_lineno - node.lineno + 1
    for child in ast.walk(node):
        if child is not node and isinstance(child, ast.FunctionDef) and _is_jit(child):
            lines -= child.end_lineno - child.lineno + 1
    return lines


def test_functions_are_at_most_100_lines_except_kernel_bodies():
    long = []
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not _is_jit(node):
                if _own_lines(node) > MAX_FUNCTION_LINES:
                    long.append(f"{name}.{node.name} ({_own_lines(node)} lines)")
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"


def test_no_import_circle():
    cycles = _cycles(_graph())
    assert not cycles, f"import circles (imports inside functions counted): {cycles}"


def test_host_side_modules_import_no_kernels_cluster_or_front_end():
    bad = {
        name: sorted(t for t in targets if _is_under(t, ABOVE_HOST))
        for name, targets in _graph().items()
        if _is_under(name, HOST_SIDE)
    }
    bad = {name: targets for name, targets in bad.items() if targets}
    assert not bad, f"host-side modules importing upward: {bad}"


def test_no_package_module_imports_benchmarks():
    bad = [
        name
        for name, path in _modules().items()
        if re.search(r"^\s*(from|import)\s+benchmarks\b", path.read_text(), re.MULTILINE)
    ]
    assert not bad, f"package modules importing benchmarks: {bad}"


_HISTORY = re.compile(
    "issue" + r"\s+#\d+|\b(first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|"
    r"eleventh|twelfth|thirteenth|fourteenth|last|this|previous|earlier|next)\s+" + "session",
    re.IGNORECASE,
)


@pytest.mark.parametrize("folder", ["distshap", "tests", "benchmarks", "README.md"])
def test_code_speaks_of_the_code_not_its_history(folder):
    target = ROOT / folder
    files = (
        [target]
        if target.is_file()
        else sorted(p for p in target.rglob("*") if p.suffix in (".py", ".md", ".sh"))
    )
    hits = [
        f"{p.relative_to(ROOT)}:{i}: {line.strip()[:80]}"
        for p in files
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if _HISTORY.search(line)
    ]
    assert not hits, "history in the code (dates and commits belong in RESULTS.md):\n" + "\n".join(
        hits[:20]
    )
