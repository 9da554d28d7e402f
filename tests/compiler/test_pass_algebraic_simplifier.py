"""algebraic_simplifier: transpose folding into dots, identity removal, collapsing chains, x+0, x*1, small integer
powers."""

from __future__ import annotations

import math

import numpy as np
import torch

import compiler
from compiler.passes.simplify.algebraic_simplifier import AlgebraicSimplifier
from compiler.passes.simplify.dce import DeadCodeElimination
from hlo.parser import parse_module
from tests.compiler.golden.harness import GOLDEN_DIR, evaluate, parse_with_constants, random_args, run_golden


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


def test_golden_power():
    # XLA's HandlePower: exponent 0 -> ones, 1 -> x, 2 -> x*x, 3 -> x*(x*x), -1 -> 1/x (floats only); kept: 4, 0.5,
    # a non-uniform exponent, integer x ** -1 (XLA gives 0 for 0 ** -1, the integer 1 / 0 is -1), x ** k
    after = run_golden("algebraic_simplifier_power", [AlgebraicSimplifier(), DeadCodeElimination()],
                       check_numerics=False)
    before = parse_with_constants((GOLDEN_DIR / "algebraic_simplifier_power.in.hlo").read_text())
    args = random_args(before)
    args[1] = np.array([[0, 1, -1, 2, -2, 3, 1000, -1000]] * 4, dtype=np.int32)  # 1000 ** 3 wraps around
    tolerance = {"f32": 1e-6, "bf16": 1e-2, "s32": 0.0}
    for want, got, shape in zip(evaluate(before, args), evaluate(after, args), before.entry.root.shape.tuple_shapes,
                                strict=True):
        np.testing.assert_allclose(got, want, rtol=tolerance[shape.dtype], atol=0.0)
    assert sum(i.opcode == "power" for i in after.entry.instructions) == 5


class WrittenOutGelu(torch.nn.Module):
    """GELU's tanh form as HF GPT-2 writes it (``torch.pow(x, 3.0)``), and RMSNorm's ``x.pow(2)``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        g = 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))
        return g * torch.rsqrt(g.pow(2).mean(-1, keepdim=True) + 1e-5)


def test_power_of_small_integer_is_multiplied_and_matches_eager():
    torch.manual_seed(0)
    model = WrittenOutGelu().eval()
    x = torch.randn(2, 64, 256) * 3
    exe = compiler.compile(model, (x,))
    assert " power(" not in exe.hlo
    (out,) = exe.run(x)
    np.testing.assert_allclose(out, model(x).numpy(), rtol=1e-4, atol=1e-4)


def test_golden_reduce_window_over_whole_dimensions():
    # XLA's HandleReduceWindow: a window spanning whole dimensions (any stride) and trivial elsewhere is
    # reshape(reduce): global average pooling's sum, an integer max, a non-identity init; kept: a partial
    # window, a padded one, a dilated one
    after = run_golden("algebraic_simplifier_reduce_window", [AlgebraicSimplifier(), DeadCodeElimination()],
                       rtol=1e-5, atol=1e-5)
    assert sum(i.opcode == "reduce-window" for i in after.entry.instructions) == 3
    assert sum(i.opcode == "reduce" for i in after.entry.instructions) == 3
