"""Float compares with type=TOTALORDER outside a sort (order-preserving integer keys on GpSimd) and
reduce-windows whose init value is known only at run time (a per-partition vector), against the interpreter."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import compiler
from hlo.interpreter import evaluate
from hlo.parser import parse_module

SPECIAL = np.array([0.0, -0.0, np.nan, -np.nan, np.inf, -np.inf, 1.0, -1.0, 3.5], np.float32)

TOTAL_ORDER = """HloModule m
ENTRY %e (a: f32[6,5], b: f32[6,5], c: bf16[9]) -> (pred[6,5], pred[6,5], pred[9], pred[6,5]) {
  %a = f32[6,5] parameter(0)
  %b = f32[6,5] parameter(1)
  %c = bf16[9] parameter(2)
  %lt = pred[6,5] compare(%a, %b), direction=LT, type=TOTALORDER
  %eq = pred[6,5] compare(%a, %b), direction=EQ, type=TOTALORDER
  %z = bf16[] constant(-0)
  %zb = bf16[9] broadcast(%z), dimensions={}
  %gt = pred[9] compare(%c, %zb), direction=GT, type=TOTALORDER
  %e = f32[6,5] negate(%a)
  %ge = pred[6,5] compare(%e, %b), direction=GE, type=TOTALORDER
  ROOT %t = (pred[6,5], pred[6,5], pred[9], pred[6,5]) tuple(%lt, %eq, %gt, %ge)
}
"""


def _check(text: str, inputs: list[np.ndarray], level: int, exact: bool = True) -> None:
    expected = evaluate(parse_module(text), inputs)
    got = compiler.compile(text, opt_level=level).run(*inputs)
    for g, r in zip(got, expected, strict=True):
        g, r = np.asarray(g), np.asarray(r)
        if exact:
            np.testing.assert_array_equal(g, r)
        else:
            np.testing.assert_allclose(g.astype(np.float32), r.astype(np.float32), rtol=2e-2, atol=1e-2)


@pytest.mark.parametrize("level", [0, 2])
def test_total_order_compare_orders_signed_zeros_and_nans(level):
    rng = np.random.default_rng(0)
    a, b = (rng.choice(SPECIAL, (6, 5)).astype(np.float32) for _ in range(2))
    c = SPECIAL.astype(ml_dtypes.bfloat16)
    _check(TOTAL_ORDER, [a, b, c], level)


def _window(dt: str, op: str, dims: str, window: str, out: str) -> str:
    return f"""HloModule m
%r (a: {dt}[], b: {dt}[]) -> {dt}[] {{
  %a = {dt}[] parameter(0)
  %b = {dt}[] parameter(1)
  ROOT %c = {dt}[] {op}(%a, %b)
}}
ENTRY %e (x: {dt}[{dims}], i: {dt}[]) -> ({dt}[{out}]) {{
  %x = {dt}[{dims}] parameter(0)
  %i = {dt}[] parameter(1)
  %w = {dt}[{out}] reduce-window(%x, %i), window={{{window}}}, to_apply=%r
  ROOT %t = ({dt}[{out}]) tuple(%w)
}}
"""


@pytest.mark.parametrize("dt,op,dims,window,out", [
    ("f32", "add", "200,7", "size=3x2 stride=1x1 pad=1_1x0_1", "200,7"),   # > 128 partitions, padding
    ("s32", "maximum", "5,9", "size=2x3 stride=2x1 pad=0_1x1_1", "3,9"),   # exact integers near the range's end
    ("bf16", "minimum", "300", "size=4 stride=3 pad=2_0", "100"),          # init converted to the fp32 accumulator
    ("s32", "multiply", "4,6", "size=1x6 stride=1x1 pad=0_0x5_0", "4,6"),  # a cumulative window
    ("f32", "maximum", "3,5,6,4", "size=2x3x2x2 stride=1x2x1x2 pad=1_0x1_1x0_1x0_0", "3,3,6,2"),  # 4 windowed dims
    ("s32", "add", "4,3,5", "size=2x2x3 stride=1x1x1 pad=0_0x0_1x1_1", "3,3,5"),  # 3 windowed dims, exact
])
@pytest.mark.parametrize("level", [0, 2])
def test_reduce_window_with_runtime_init(dt, op, dims, window, out, level):
    rng = np.random.default_rng(1)
    shape = tuple(int(d) for d in dims.split(","))
    if dt == "s32":
        lo, hi = (-5, 5) if op == "multiply" else (-2**31, 2**31)
        x = rng.integers(lo, hi, shape).astype(np.int32)
        init = np.array(2**31 - 5 if op == "maximum" else 3, np.int32)
    else:
        np_dtype = np.float32 if dt == "f32" else ml_dtypes.bfloat16
        x, init = rng.standard_normal(shape).astype(np_dtype), np.array(0.75, np_dtype)
    _check(_window(dt, op, dims, window, out), [x, init], level, exact=dt == "s32")
