"""algebraic_simplifier: transpose folding into dots, identity removal, collapsing chains, x+0, x*1."""

from __future__ import annotations

from compiler.passes.simplify.algebraic_simplifier import AlgebraicSimplifier
from compiler.passes.simplify.dce import DeadCodeElimination
from hlo.parser import parse_module
from tests.compiler.golden.harness import run_golden


def test_golden():
    # followed by dce so that the expected output shows only what the rewrites left in use
    run_golden("algebraic_simplifier", [AlgebraicSimplifier(), DeadCodeElimination()])


def test_lossy_round_trip_and_non_neutral_constants_are_kept():
    module = parse_module("""HloModule m
ENTRY %main (x: f32[2]) -> f32[2] {
  %x = f32[2]{0} parameter(0)
  %h = bf16[2]{0} convert(f32[2]{0} %x)
  %back = f32[2]{0} convert(bf16[2]{0} %h)
  %c = f32[2]{0} constant({0, 1})
  %sum = f32[2]{0} add(f32[2]{0} %back, f32[2]{0} %c)
  ROOT %prod = f32[2]{0} multiply(f32[2]{0} %sum, f32[2]{0} %c)
}
""")
    assert not AlgebraicSimplifier().run(module)


def test_add_of_zero_that_would_broadcast_is_kept():
    # x is a broadcast operand of a different shape than the add: removing the add would change the shape
    module = parse_module("""HloModule m
ENTRY %main (x: f32[4,8]) -> f32[4,8] {
  %x = f32[4,8]{1,0} parameter(0)
  %zero = f32[] constant(0)
  %z = f32[4,8]{1,0} broadcast(f32[] %zero), dimensions={}
  ROOT %r = f32[4,8]{1,0} add(f32[4,8]{1,0} %z, f32[4,8]{1,0} %z)
}
""")
    simplifier = AlgebraicSimplifier()
    assert simplifier.run(module)
    assert module.entry.root.name == "z"


def test_golden_data_movement():
    # transposes/broadcasts that are bitcasts become reshapes, chains collapse, no-op slices/pads/concats go
    run_golden("algebraic_simplifier_shapes", [AlgebraicSimplifier(), AlgebraicSimplifier(), DeadCodeElimination()])


def test_golden_arithmetic():
    # neutral operands, int x*0, involutions, idempotence, select, trivial reduces, convert chains; kept:
    # float x*0, a reduce whose init is not the identity
    run_golden("algebraic_simplifier_arith", [AlgebraicSimplifier(), AlgebraicSimplifier(), DeadCodeElimination()])
