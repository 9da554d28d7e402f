"""The backend's integer rules (docs/integer-semantics.md): exact or refused, never approximated."""

from __future__ import annotations

import numpy as np
import pytest

import compiler


def _run(text: str, *args):
    return compiler.compile(text, opt_level=2).run(*args)


def test_s32_arithmetic_above_2_24_is_exact_and_wraps():
    text = """HloModule m
ENTRY %e (a: s32[3,5], b: s32[3,5]) -> (s32[3,5], s32[3,5], s32[3,5]) {
  %a = s32[3,5] parameter(0)
  %b = s32[3,5] parameter(1)
  %s = s32[3,5] add(%a, %b)
  %m = s32[3,5] multiply(%a, %b)
  %d = s32[3,5] divide(%a, %b)
  ROOT %t = (s32[3,5], s32[3,5], s32[3,5]) tuple(%s, %m, %d)
}
"""
    rng = np.random.default_rng(0)
    a = rng.integers(-2**31, 2**31, (3, 5), dtype=np.int64).astype(np.int32)
    b = rng.integers(-2**31, 2**31, (3, 5), dtype=np.int64).astype(np.int32)
    b[0, :2] = [0, -1]
    a[0, 1] = -2**31
    s, m, d = _run(text, a, b)
    np.testing.assert_array_equal(s, (a.astype(np.int64) + b).astype(np.int32))
    np.testing.assert_array_equal(m, (a.astype(np.int64) * b).astype(np.int32))
    q = np.abs(a.astype(np.int64)) // np.maximum(np.abs(b.astype(np.int64)), 1)
    want = np.where(b == 0, -1, np.where((a < 0) != (b < 0), -q, q)).astype(np.int32)
    np.testing.assert_array_equal(d, want)


def test_float_to_int_truncates_and_pred_is_bool():
    text = """HloModule m
ENTRY %e (x: f32[8]) -> (s32[8], u8[8], pred[8]) {
  %x = f32[8] parameter(0)
  %i = s32[8] convert(%x)
  %u = u8[8] convert(%x)
  %p = pred[8] convert(%x)
  ROOT %t = (s32[8], u8[8], pred[8]) tuple(%i, %u, %p)
}
"""
    x = np.array([2.7, -2.7, np.nan, 1e10, -1e10, 300.5, 0.0, 0.25], np.float32)
    i, u, p = _run(text, x)
    np.testing.assert_array_equal(i, [2, -2, 0, 2**31 - 1, -2**31, 300, 0, 0])
    np.testing.assert_array_equal(u, [2, 0, 0, 255, 0, 255, 0, 0])
    assert p.dtype == np.bool_
    np.testing.assert_array_equal(p, x != 0)


def _max_reduce(axis: int) -> str:
    n = 4 if axis == 0 else 300
    return f"""HloModule m
%max (a: s32[], b: s32[]) -> s32[] {{
  %a = s32[] parameter(0)
  %b = s32[] parameter(1)
  ROOT %mx = s32[] maximum(%a, %b)
}}
ENTRY %e (x: s32[300,4]) -> s32[{n}] {{
  %x = s32[300,4] parameter(0)
  %init = s32[] constant(-2147483648)
  ROOT %r = s32[{n}] reduce(%x, %init), dimensions={{{axis}}}, to_apply=%max
}}
"""


def test_integer_reductions_along_rows_are_exact():
    x = np.random.default_rng(1).integers(-2**31, 2**31, (300, 4), dtype=np.int64).astype(np.int32)
    (got,) = compiler.compile(_max_reduce(1), opt_level=0).run(x)
    np.testing.assert_array_equal(got, x.max(axis=1))


@pytest.mark.parametrize("level", [0, 2])
def test_integer_reductions_of_a_major_axis_are_exact(level):
    """s32 max over the major axis: not across partitions (fp32 partition_reduce) but along the free dim."""
    x = np.random.default_rng(2).integers(-2**31, 2**31, (300, 4), dtype=np.int64).astype(np.int32)
    x[7, 1], x[8, 1] = 2**31 - 1, 2**31 - 2  # fp32 would round both to 2^31
    result = compiler.compile(_max_reduce(0), opt_level=level)
    assert not any(i.opcode == "partition_reduce" for i in result.program.instructions)
    (got,) = result.run(x)
    np.testing.assert_array_equal(got, x.max(axis=0))


def test_abs_of_unsigned_is_the_value_and_negate_wraps():
    text = """HloModule m
ENTRY %e (x: u8[6]) -> (u8[6], u8[6]) {
  %x = u8[6] parameter(0)
  %a = u8[6] abs(%x)
  %n = u8[6] negate(%x)
  ROOT %t = (u8[6], u8[6]) tuple(%a, %n)
}
"""
    x = np.array([0, 1, 127, 128, 200, 255], np.uint8)
    a, n = _run(text, x)
    np.testing.assert_array_equal(a, x)
    np.testing.assert_array_equal(n, (-x.astype(np.int64)).astype(np.uint8))
