"""The house: one layer per package, imports only downward, no cycle, no module over 600 lines.

Every import counts, including those inside functions (a function-level import does not make a cycle go away,
it only hides it). Floors, from the ground up: isa; hlo (which may use isa's dtypes and nothing else of isa);
frontend and backend side by side (neither imports the other); compiler; then benchmarks and examples.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FLOORS = {"isa": 0, "hlo": 1, "frontend": 2, "backend": 2, "compiler": 3, "benchmarks": 4, "examples": 4}
HLO_MAY_USE_OF_ISA = {"isa.dtypes"}
MAX_LINES = 600


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    found = {}
    for top in FLOORS:
        for path in (ROOT / top).rglob("*.py"):
            found[_module_name(path)] = path
    return found


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The project module an imported name lives in (the longest known prefix), or None if not ours."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in MODULES:
            return candidate
        parts.pop()
    return None


def _imports(module: str, path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:  # `from a import b`: b may be a submodule
                names.add(f"{base}.{alias.name}" if _resolve(f"{base}.{alias.name}") != _resolve(base) else base)
    resolved = {_resolve(n) for n in names}
    return {r for r in resolved if r is not None and r != module}


GRAPH = {m: _imports(m, p) for m, p in MODULES.items()}


def _floor(module: str) -> tuple[str, int]:
    top = module.split(".")[0]
    return top, FLOORS[top]


def test_imports_point_downward():
    wrong = []
    for module, targets in GRAPH.items():
        top, floor = _floor(module)
        for target in targets:
            ttop, tfloor = _floor(target)
            if ttop == top:
                continue
            if tfloor > floor or (tfloor == floor and ttop != top):
                wrong.append(f"{module} -> {target}")
            elif top == "hlo" and ttop == "isa" and target not in HLO_MAY_USE_OF_ISA:
                wrong.append(f"{module} -> {target} (hlo may use isa.dtypes only)")
    assert not wrong, "imports that run up or sideways:\n" + "\n".join(sorted(wrong))


def _cycles() -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in GRAPH:
        if start in index:
            continue
        work = [(start, iter(sorted(GRAPH[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            advanced = False
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = counter
                    counter += 1
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(GRAPH[succ]))))
                    advanced = True
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycles():
    cycles = _cycles()
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_the_cycle_finder_finds_a_cycle(monkeypatch):
    monkeypatch.setitem(GRAPH, "hlo.ir", GRAPH["hlo.ir"] | {"hlo.printer"})
    assert any("hlo.ir" in c and "hlo.printer" in c for c in _cycles())


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_over_the_line_budget(module):
    lines = MODULES[module].read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_LINES, f"{MODULES[module].relative_to(ROOT)}: {lines} lines (budget {MAX_LINES})"
