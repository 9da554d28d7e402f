"""cse: identical expressions merge (commutative operands in any order, equal constants, nested
computations), different ones (attributes, layouts, called computations, -0 vs 0, parameters) stay."""

from __future__ import annotations

from compiler.passes.simplify.cse import CommonSubexpressionElimination
from hlo.parser import parse_module
from tests.compiler.golden.harness import GOLDEN_DIR, parse_with_constants, run_golden


def test_golden():
    run_golden("cse", [CommonSubexpressionElimination()])


def test_second_run_changes_nothing():
    module = parse_with_constants((GOLDEN_DIR / "cse.in.hlo").read_text())
    assert CommonSubexpressionElimination().run(module)
    assert not CommonSubexpressionElimination().run(module)


def test_opaque_custom_calls_unloaded_constants_and_root_replacement():
    module = parse_module("""HloModule m
ENTRY %main (x: f32[2]) -> (f32[2], f32[2], f32[40], f32[40]) {
  %x = f32[2]{0} parameter(0)
  %k = f32[2]{0} custom-call(f32[2]{0} %x), custom_call_target="my_kernel"
  %k.1 = f32[2]{0} custom-call(f32[2]{0} %x), custom_call_target="my_kernel"
  %big = f32[40]{0} constant({...}), data="a"
  %big.1 = f32[40]{0} constant({...}), data="a"
  ROOT %t = (f32[2]{0}, f32[2]{0}, f32[40]{0}, f32[40]{0}) tuple(%k, %k.1, %big, %big.1)
}
""")
    assert not CommonSubexpressionElimination().run(module)
    module = parse_module("""HloModule m
ENTRY %main (x: f32[2]) -> f32[2] {
  %x = f32[2]{0} parameter(0)
  %n = f32[2]{0} negate(f32[2]{0} %x)
  ROOT %n.1 = f32[2]{0} negate(f32[2]{0} %x)
}
""")
    assert CommonSubexpressionElimination().run(module)
    assert module.entry.root.name == "n" and len(module.entry.instructions) == 2
