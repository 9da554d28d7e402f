"""GpSimd's exact integer mode (math=int), XLA's float -> int convert (round=zero) and pred stores, against
references written from XLA's rules (two's-complement wrap, x / 0 = -1, x % 0 = x, INT_MIN / -1 = INT_MIN,
out-of-range shifts)."""

from __future__ import annotations

import numpy as np
import pytest

from isa.dtypes import DTYPES
from isa.emulator import run_program
from isa.errors import ProgramError
from tests.isa.emulator_helpers import ins, tile_program

P, F = 8, 16
INTS = ("i8", "u8", "i16", "u16", "i32", "u32")
rng = np.random.default_rng(3)


def run(inputs, outputs, body):
    prog, arrays = tile_program(inputs, outputs, body, "trn1")
    return run_program(prog, arrays, check=True).outputs


def ints(dt: str, shape=(P, F)) -> np.ndarray:
    info = np.iinfo(DTYPES[dt].numpy)
    x = rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=np.int64)
    x.flat[:6] = [info.min, info.max, 0, 1, -1 if info.min < 0 else 2, info.min + 1]
    return x.astype(DTYPES[dt].numpy)


def _wrap(x: np.ndarray, dt: str) -> np.ndarray:
    return np.asarray(x, np.int64).astype(DTYPES[dt].numpy)


def _div(a, b):
    q = np.abs(a) // np.where(b == 0, 1, np.abs(b))
    return np.where(b == 0, -1, np.where((a < 0) != (b < 0), -q, q))


def _rem(a, b):
    r = np.abs(a) % np.where(b == 0, 1, np.abs(b))
    return np.where(b == 0, a, np.where(a < 0, -r, r))


REF = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": _div, "remainder": _rem,
       "max": np.maximum, "min": np.minimum, "is_gt": np.greater, "is_equal": np.equal,
       "bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor}


@pytest.mark.parametrize("dt", INTS)
@pytest.mark.parametrize("op", sorted(REF))
def test_tensor_tensor_int_mode_is_exact_and_wraps(op, dt):
    a, b = ints(dt), ints(dt)
    b[0, :3] = [0, -1 if dt[0] == "i" else 0, 0]
    out = run({"a": (dt, a), "b": (dt, b)}, {"y": (dt, (P, F))},
              lambda t: [ins("pool", "tensor_tensor", dst=t["y"], a=t["a"], b=t["b"], op=op, math="int")])["y"]
    want = _wrap(REF[op](a.astype(np.int64), b.astype(np.int64)), dt)
    np.testing.assert_array_equal(out, want)


def test_s32_add_multiply_above_2_24_are_exact():
    a = np.array([[2**24 + 1, 2**30 + 7, -(2**31), 2**31 - 1]], np.int32)
    b = np.array([[1, 3, -1, 2]], np.int32)
    out = run({"a": ("i32", a), "b": ("i32", b)}, {"s": ("i32", (1, 4)), "m": ("i32", (1, 4)), "d": ("i32", (1, 4))},
              lambda t: [ins("pool", "tensor_tensor", dst=t["s"], a=t["a"], b=t["b"], op="add", math="int"),
                         ins("pool", "tensor_tensor", dst=t["m"], a=t["a"], b=t["b"], op="multiply", math="int"),
                         ins("pool", "tensor_tensor", dst=t["d"], a=t["a"], b=t["b"], op="divide", math="int")])
    np.testing.assert_array_equal(out["s"], [[2**24 + 2, 2**30 + 10, 2**31 - 1, -(2**31) + 1]])
    np.testing.assert_array_equal(out["m"], _wrap(a.astype(np.int64) * b, "i32"))
    np.testing.assert_array_equal(out["d"], [[2**24 + 1, (2**30 + 7) // 3, -(2**31), 2**30 - 1]])


@pytest.mark.parametrize("dt", ("i32", "u8", "i8", "u32"))
def test_shifts_follow_xla_for_out_of_range_amounts(dt):
    bits = DTYPES[dt].itemsize * 8
    a = ints(dt, (1, 8))
    s = np.array([[-1, 0, 1, bits - 1, bits, bits + 1, 3, 100]], np.int64)
    s_dt = _wrap(s, dt)
    out = run({"a": (dt, a), "s": (dt, s_dt)},
              {name: (dt, (1, 8)) for name in ("l", "r", "q")},
              lambda t: [ins("pool", "tensor_tensor", dst=t[n], a=t["a"], b=t["s"], op=op, math="int")
                         for n, op in (("l", "shift_left"), ("r", "shift_right_logical"), ("q", "shift_right_arith"))])
    amount = s_dt.astype(np.int64)
    ok = (amount >= 0) & (amount < bits)
    u = a.astype(np.int64) & ((1 << bits) - 1)
    signed = np.where(u >= 1 << (bits - 1), u - (1 << bits), u)
    sh = np.where(ok, amount, 0)
    np.testing.assert_array_equal(out["l"], _wrap(np.where(ok, u << sh, 0), dt))
    np.testing.assert_array_equal(out["r"], _wrap(np.where(ok, u >> sh, 0), dt))
    np.testing.assert_array_equal(out["q"], _wrap(np.where(ok, signed >> sh, np.where(signed < 0, -1, 0)), dt))


def test_tensor_scalar_int_mode_and_chained_op():
    a = ints("i32")
    out = run({"a": ("i32", a)}, {"y": ("i32", (P, F))},
              lambda t: [ins("pool", "tensor_scalar", dst=t["y"], src=t["a"], op="multiply", scalar=3.0,
                             op1="add", scalar1=-7.0, math="int")])["y"]
    np.testing.assert_array_equal(out, _wrap(a.astype(np.int64) * 3 - 7, "i32"))


def test_int_mode_refuses_fractional_immediates_floats_and_other_engines():
    a = ints("i32")
    with pytest.raises(ProgramError, match="not an integer"):
        run({"a": ("i32", a)}, {"y": ("i32", (P, F))},
            lambda t: [ins("pool", "tensor_scalar", dst=t["y"], src=t["a"], op="add", scalar=0.5, math="int")])
    with pytest.raises(ProgramError, match="pool"):
        run({"a": ("i32", a)}, {"y": ("i32", (P, F))},
            lambda t: [ins("dve", "tensor_scalar", dst=t["y"], src=t["a"], op="add", scalar=1.0, math="int")])
    with pytest.raises(ProgramError, match="integer operands"):
        run({"a": ("i32", a)}, {"y": ("f32", (P, F))},
            lambda t: [ins("pool", "tensor_scalar", dst=t["y"], src=t["a"], op="add", scalar=1.0, math="int")])


@pytest.mark.parametrize("dt", INTS)
def test_copy_round_zero_truncates_saturates_and_zeroes_nan(dt):
    x = np.array([[0.5, -0.5, 1.9, -1.9, 2.5, -2.5, 1e10, -1e10, np.nan, np.inf, -np.inf, 127.9, -128.9, 255.5,
                   65535.9, 3e9]], np.float32)
    out = run({"x": ("f32", x)}, {"y": (dt, x.shape)},
              lambda t: [ins("dve", "tensor_copy", dst=t["y"], src=t["x"], round="zero")])["y"]
    info = np.iinfo(DTYPES[dt].numpy)
    want = np.clip(np.trunc(np.nan_to_num(x.astype(np.float64), nan=0.0, posinf=info.max, neginf=info.min)),
                   info.min, info.max).astype(DTYPES[dt].numpy)
    np.testing.assert_array_equal(out, want)


def test_int_mode_copy_wraps_and_pred_stores_nonzero():
    a = np.array([[300, -129, 255, 65536 + 5, -1, 0, 1, 2]], np.int32)
    out = run({"a": ("i32", a)}, {"b": ("i8", a.shape), "u": ("u8", a.shape), "p": ("pred", a.shape)},
              lambda t: [ins("pool", "tensor_copy", dst=t["b"], src=t["a"], math="int"),
                         ins("pool", "tensor_copy", dst=t["u"], src=t["a"], math="int"),
                         ins("dve", "tensor_copy", dst=t["p"], src=t["a"])])
    np.testing.assert_array_equal(out["b"], a.astype(np.int8))
    np.testing.assert_array_equal(out["u"], a.astype(np.uint8))
    assert out["p"].dtype == np.bool_
    np.testing.assert_array_equal(out["p"], a != 0)
