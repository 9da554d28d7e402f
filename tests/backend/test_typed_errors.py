"""Errors a user can act on: nothing untyped escapes the backend.

Every ``raise`` in backend/ raises a NeuroncError type (or the residency planner's control-flow signal, which
backend.api catches), and a broken invariant inside the backend (an assert, an IndexError...) reaches the user as
a CompilationError naming the HLO instruction and its torch source line.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest
import torch

import backend.api
import backend.lower
import compiler
from hlo.errors import CompilationError, NeuroncError

ROOT = Path(__file__).resolve().parents[2]
CAUGHT_SIGNALS = {"ResidencyMismatch"}  # raised by alloc/emit, caught by backend.api.compile_module


def _raises() -> list[tuple[str, int, str, object]]:
    found = []
    for path in sorted((ROOT / "backend").rglob("*.py")):
        module = importlib.import_module(".".join(path.relative_to(ROOT).with_suffix("").parts))
        tree = ast.parse(path.read_text())
        protocol = {id(n) for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and f.name == "__getattr__"
                    for n in ast.walk(f)}  # a module's __getattr__ says "no such name" with AttributeError
        for node in ast.walk(tree):
            if not isinstance(node, ast.Raise) or node.exc is None or id(node) in protocol:
                continue
            exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            name = exc.id if isinstance(exc, ast.Name) else exc.attr if isinstance(exc, ast.Attribute) else "?"
            found.append((str(path.relative_to(ROOT)), node.lineno, name, getattr(module, name, None)))
    return found


def test_every_backend_raise_is_a_typed_error():
    raises = _raises()
    assert len(raises) > 20  # the walk sees the backend's raises
    untyped = [f"{p}:{line}: raise {name}" for p, line, name, cls in raises
               if name not in CAUGHT_SIGNALS and not (isinstance(cls, type) and issubclass(cls, NeuroncError))]
    assert not untyped, "untyped raises in the backend:\n" + "\n".join(untyped)


def test_every_backend_assert_runs_under_the_guard():
    """Asserts (internal invariants) are only in code that runs inside backend.api.compile_module, whose guard
    turns them into CompilationError: no backend module is a public entry point of its own."""
    asserting = sorted({str(p.relative_to(ROOT)) for p in (ROOT / "backend").rglob("*.py")
                        for node in ast.walk(ast.parse(p.read_text())) if isinstance(node, ast.Assert)})
    assert asserting  # there are some; each is covered by the two guards tested below
    assert backend.compile_module is backend.api.compile_module


class _Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        return torch.relu(self.fc(x))


def test_an_internal_error_in_a_kernel_names_the_op_and_source(monkeypatch):
    def broken(lw, inst, ops):
        raise AssertionError("tile count mismatch")

    kernels = dict(backend.lower.KERNELS)
    kernels.update({k: broken for k in kernels if k in ("dot", "fusion")})
    monkeypatch.setattr(backend.lower, "KERNELS", kernels)
    with pytest.raises(CompilationError) as info:
        compiler.compile(_Tiny().eval(), (torch.randn(2, 8),))
    message = str(info.value)
    assert "internal compiler error" in message and "AssertionError: tile count mismatch" in message
    assert "test_typed_errors.py" in message  # the torch source line of the op


def test_an_internal_error_outside_any_op_names_the_module(monkeypatch):
    def broken(*args, **kwargs):
        raise IndexError("list index out of range")

    monkeypatch.setattr(backend.api, "schedule", broken)
    with pytest.raises(CompilationError, match="internal compiler error in the backend .IndexError"):
        compiler.compile(_Tiny().eval(), (torch.randn(2, 8),))
