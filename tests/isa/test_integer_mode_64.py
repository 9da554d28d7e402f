"""64-bit integers (i64, u64) on GpSimd's integer mode, against Python-integer references of XLA's rules: exact
over the whole range, two's-complement wrap, x / 0 = -1, INT64_MIN / -1 = INT64_MIN, unsigned compares and
divides for u64, out-of-range shifts; exact immediates beyond 2^53 (iscalar, ivalue); float -> i64 saturation;
no fp32 engine may touch them."""

from __future__ import annotations

import numpy as np
import pytest

from isa.dtypes import DTYPES, immediate
from isa.emulator import run_program
from isa.errors import RuleViolation
from tests.isa.emulator_helpers import ins, tile_program

rng = np.random.default_rng(5)


def run(inputs, outputs, body):
    prog, arrays = tile_program(inputs, outputs, body, "trn1")
    return run_program(prog, arrays, check=True).outputs


def ints(dt: str, n: int = 24) -> np.ndarray:
    info = np.iinfo(DTYPES[dt].numpy)
    x = rng.integers(info.min, info.max, size=(1, n), endpoint=True, dtype=DTYPES[dt].numpy)
    x.flat[:6] = [info.min, info.max, 0, 1, info.max - 1, info.min + 1]
    return x


def _py(a: np.ndarray) -> list[int]:
    return [int(v) for v in a.reshape(-1)]


def _trunc_div(a: int, b: int) -> int:
    if b == 0:
        return -1
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def _trunc_rem(a: int, b: int) -> int:
    if b == 0:
        return a
    r = abs(a) % abs(b)
    return r if a >= 0 else -r


REF = {"add": lambda a, b: a + b, "subtract": lambda a, b: a - b, "multiply": lambda a, b: a * b,
       "divide": _trunc_div, "remainder": _trunc_rem, "max": max, "min": min, "is_gt": lambda a, b: int(a > b),
       "is_le": lambda a, b: int(a <= b), "bitwise_xor": lambda a, b: a ^ b}


def _wrap(values: list[int], dt: str) -> np.ndarray:
    bits = 64
    out = [v & ((1 << bits) - 1) for v in values]
    if dt == "i64":
        out = [v - (1 << 64) if v >= 1 << 63 else v for v in out]
    return np.array(out, dtype=DTYPES[dt].numpy).reshape(1, -1)


@pytest.mark.parametrize("dt", ("i64", "u64"))
@pytest.mark.parametrize("op", sorted(REF))
def test_64_bit_tensor_tensor_is_exact_and_wraps(op, dt):
    a, b = ints(dt), ints(dt)
    b[0, :4] = [0, 1, a[0, 2], 0]
    if dt == "i64":
        a[0, 6], b[0, 6] = -(2**63), -1  # INT64_MIN / -1 = INT64_MIN, % = 0
    out = run({"a": (dt, a), "b": (dt, b)}, {"y": (dt, a.shape)},
              lambda t: [ins("pool", "tensor_tensor", dst=t["y"], a=t["a"], b=t["b"], op=op, math="int")])["y"]
    want = _wrap([REF[op](x, y) for x, y in zip(_py(a), _py(b), strict=True)], dt)
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("dt", ("i64", "u64"))
def test_64_bit_shifts_follow_xla(dt):
    a = ints(dt, 8)
    s = np.array([[-1, 0, 1, 63, 64, 65, 33, 7]], np.int64).astype(DTYPES[dt].numpy)
    out = run({"a": (dt, a), "s": (dt, s)}, {n: (dt, a.shape) for n in ("l", "r", "q")},
              lambda t: [ins("pool", "tensor_tensor", dst=t[n], a=t["a"], b=t["s"], op=op, math="int")
                         for n, op in (("l", "shift_left"), ("r", "shift_right_logical"), ("q", "shift_right_arith"))])
    bits = [(int(v) & (2**64 - 1)) for v in a.reshape(-1)]
    signed = [v - 2**64 if v >= 2**63 else v for v in bits]
    amounts = [int(v) for v in s.astype(np.int64).reshape(-1)]
    ok = [0 <= k < 64 for k in amounts]
    np.testing.assert_array_equal(out["l"], _wrap([u << k if o else 0 for u, k, o in zip(bits, amounts, ok)], dt))
    np.testing.assert_array_equal(out["r"], _wrap([u >> k if o else 0 for u, k, o in zip(bits, amounts, ok)], dt))
    np.testing.assert_array_equal(out["q"], _wrap([v >> k if o else (-1 if v < 0 else 0)
                                                   for v, k, o in zip(signed, amounts, ok)], dt))


def test_immediates_beyond_2_53_are_exact():
    a = ints("i64", 8)
    big, fill = 2**62 + 12345, -(2**63) + 7
    out = run({"a": ("i64", a)}, {"y": ("i64", a.shape), "f": ("i64", a.shape)},
              lambda t: [ins("pool", "tensor_scalar", dst=t["y"], src=t["a"], op="add", math="int",
                             **immediate(big, "scalar")),
                         ins("pool", "memset", dst=t["f"], **immediate(fill, "value"))])
    np.testing.assert_array_equal(out["y"], _wrap([v + big for v in _py(a)], "i64"))
    np.testing.assert_array_equal(out["f"], np.full(a.shape, fill, np.int64))


def test_float_to_i64_truncates_and_saturates_and_converts_back_rounding_once():
    x = np.array([[2.5, -2.5, 1e19, -1e19, np.nan, np.inf, -np.inf, 2.0**62, -(2.0**63)]], np.float32)
    out = run({"x": ("f32", x)}, {"y": ("i64", x.shape)},
              lambda t: [ins("pool", "tensor_copy", dst=t["y"], src=t["x"], round="zero")])["y"]
    imax, imin = 2**63 - 1, -(2**63)
    np.testing.assert_array_equal(out, [[2, -2, imax, imin, 0, imax, imin, 2**62, imin]])
    a = np.array([[2**63 - 1, -(2**53) - 1, 2**24 + 1, 0]], np.int64)
    back = run({"a": ("i64", a)}, {"f": ("f32", a.shape)},
               lambda t: [ins("pool", "tensor_copy", dst=t["f"], src=t["a"])])["f"]
    np.testing.assert_array_equal(back, a.astype(np.float32))


def test_fp32_engines_never_touch_64_bit_integers():
    a = ints("i64", 8)
    with pytest.raises(RuleViolation, match="i64 is computed by GpSimd"):
        run({"a": ("i64", a)}, {"y": ("i64", a.shape)},
            lambda t: [ins("dve", "tensor_copy", dst=t["y"], src=t["a"])])
    with pytest.raises(RuleViolation, match="needs math=int"):
        run({"a": ("i64", a)}, {"y": ("i64", a.shape)},
            lambda t: [ins("pool", "tensor_scalar", dst=t["y"], src=t["a"], op="add", scalar=1.0)])
