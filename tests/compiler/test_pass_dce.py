"""dce: instructions ROOT does not need and computations nothing calls disappear; parameters stay."""

from __future__ import annotations

from compiler.passes.simplify.dce import DeadCodeElimination
from tests.compiler.golden.harness import GOLDEN_DIR, parse_with_constants, run_golden


def test_golden():
    run_golden("dce", [DeadCodeElimination()])


def test_second_run_changes_nothing():
    module = parse_with_constants((GOLDEN_DIR / "dce.in.hlo").read_text())
    assert DeadCodeElimination().run(module)
    assert not DeadCodeElimination().run(module)
