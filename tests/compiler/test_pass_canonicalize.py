"""canonicalize: parameters then constants first; constant-like operands of commutative ops on the right."""

from __future__ import annotations

from compiler.passes.simplify.canonicalize import Canonicalize
from tests.compiler.golden.harness import GOLDEN_DIR, parse_with_constants, run_golden


def test_golden():
    run_golden("canonicalize", [Canonicalize()])


def test_idempotent():
    module = parse_with_constants((GOLDEN_DIR / "canonicalize.in.hlo").read_text())
    assert Canonicalize().run(module)
    assert not Canonicalize().run(module)
