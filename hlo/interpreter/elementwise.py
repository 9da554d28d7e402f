"""The interpreter's elementwise ops: unary and binary math, compare, select, clamp, convert, custom calls.

Transcendentals of the custom calls (gelu) are computed in float64.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from hlo.interpreter.core import FLOATS, EvaluationError, Op, to_dtype, wide
from hlo.ir import Instruction, numpy_dtype
from hlo.opcodes import custom_call_target


def erf(x: np.ndarray) -> np.ndarray:
    """erf in float64 (to ~1e-15): 2/sqrt(pi) e^(-x^2) sum_n 2^n x^(2n+1) / (2n+1)!!, all terms positive."""
    x = np.asarray(x, np.float64)
    a = np.minimum(np.abs(np.nan_to_num(x)), 6.0)  # erf(6) rounds to 1 in float64
    a2 = a * a
    term, total = a.copy(), a.copy()
    n = 0
    while np.any(term > 1e-17 * total):
        n += 1
        term = term * (2.0 * a2 / (2 * n + 1))
        total += term
    result = np.sign(x) * np.minimum(2.0 / math.sqrt(math.pi) * np.exp(-a2) * total, 1.0)
    return np.where(np.isnan(x), np.nan, result)


def gelu(x: np.ndarray) -> np.ndarray:
    """GELU, exact: x/2 (1 + erf(x/sqrt 2))."""
    x = np.asarray(x, np.float64)
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """GELU, tanh approximation (PyTorch's approximate="tanh")."""
    x = np.asarray(x, np.float64)
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


CUSTOM_CALLS: dict[str, Callable[[np.ndarray], np.ndarray]] = {"gelu": gelu, "gelu_tanh": gelu_tanh}


def _logistic(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _round_afz(x: np.ndarray) -> np.ndarray:
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def _not(x: np.ndarray) -> np.ndarray:
    return np.logical_not(x) if x.dtype == np.bool_ else np.invert(x)


UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "abs": np.abs, "negate": np.negative, "sign": np.sign, "not": _not, "copy": np.copy,
    "exponential": np.exp, "exponential-minus-one": np.expm1, "log": np.log, "log-plus-one": np.log1p,
    "cbrt": np.cbrt, "tan": np.tan, "is-finite": np.isfinite, "tanh": np.tanh, "logistic": _logistic, "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x), "erf": lambda x: erf(x).astype(x.dtype), "sine": np.sin,
    "cosine": np.cos, "floor": np.floor, "ceil": np.ceil, "round-nearest-even": np.rint,
    "round-nearest-afz": _round_afz,
}


def _divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind not in "iu":
        return np.divide(a, b)
    q = np.floor_divide(a, np.where(b == 0, 1, b))
    q = q + ((q * b != a) & ((a < 0) != (b < 0)) & (b != 0))  # truncate toward zero, as C and XLA do
    return np.where(b == 0, -1, q).astype(a.dtype)


def _remainder(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """C's fmod; on integers x % 0 = x and INT_MIN % -1 = 0 (XLA)."""
    if a.dtype.kind not in "iu":
        return np.fmod(a, b)
    return np.where(b == 0, a, np.fmod(a, np.where(b == 0, 1, b))).astype(a.dtype)


def _power(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """x ** y; on integers exact with wrap-around, and a negative y gives XLA's result: 1 for x == 1, +-1 for
    x == -1 (by y's parity), 0 otherwise (numpy refuses negative integer powers)."""
    if a.dtype.kind not in "iu" or b.dtype.kind not in "iu":
        return np.power(a, b)
    negative = b < 0
    with np.errstate(over="ignore"):
        result = np.power(a, np.where(negative, 0, b))
    odd = (b & 1) != 0
    special = np.where(a == 1, 1, np.where(a == -1, np.where(odd, -1, 1), 0))
    return np.where(negative, special, result).astype(result.dtype)


BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": _divide,
    "maximum": np.maximum, "minimum": np.minimum, "power": _power, "remainder": _remainder,
    "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor, "atan2": np.arctan2,
}
COMPARE = {"EQ": np.equal, "NE": np.not_equal, "LT": np.less, "LE": np.less_equal, "GT": np.greater,
           "GE": np.greater_equal}


def _unary_op(fn: Callable) -> Op:
    return lambda inst, ops: fn(wide(ops[0]))


def _binary_op(fn: Callable) -> Op:
    return lambda inst, ops: fn(wide(ops[0]), wide(ops[1]))


def _compare(inst: Instruction, ops: list) -> np.ndarray:
    if inst.attrs.get("type") == "TOTALORDER":  # sort comparators: -NaN < -inf < -0 < +0 < inf < NaN
        return COMPARE[inst.attrs["direction"]](total_order_key(ops[0]), total_order_key(ops[1]))
    return COMPARE[inst.attrs["direction"]](wide(ops[0]), wide(ops[1]))


def total_order_key(x: np.ndarray) -> np.ndarray:
    """Integer keys ordering floats as compare's type=TOTALORDER does (integers: their values)."""
    x = np.asarray(x)
    if x.dtype.kind in "iub":
        return x.astype(np.int64)
    width = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}[x.dtype.itemsize]
    bits = x.view(width).astype(np.int64)
    magnitude = (1 << (8 * x.dtype.itemsize - 1)) - 1
    return np.where(bits < 0, -(bits & magnitude) - 1, bits)


def _select(inst: Instruction, ops: list) -> np.ndarray:
    return np.where(ops[0], ops[1], ops[2])


def _clamp(inst: Instruction, ops: list) -> np.ndarray:
    lo, x, hi = (wide(o) for o in ops)
    return np.minimum(np.maximum(x, lo), hi)


def _convert(inst: Instruction, ops: list) -> np.ndarray:
    x, target = ops[0], numpy_dtype(inst.shape.dtype)
    if target == np.bool_:
        return x != 0
    if target.kind in "iu" and x.dtype in FLOATS:  # truncate, saturate, NaN -> 0 (XLA's semantics)
        info = np.iinfo(target)
        truncated = np.trunc(np.nan_to_num(x.astype(np.float64), nan=0.0))
        return np.clip(truncated, info.min, info.max).astype(target)
    return to_dtype(x, target)


def _custom_call(inst: Instruction, ops: list) -> np.ndarray:
    name = custom_call_target(inst)
    if name not in CUSTOM_CALLS:
        raise EvaluationError(f"{inst.where()}: no implementation of custom_call_target=\"{name}\" "
                              f"(known: {', '.join(CUSTOM_CALLS)})")
    return CUSTOM_CALLS[name](ops[0])


OPS: dict[str, Op] = {
    "convert": _convert, "compare": _compare, "select": _select, "clamp": _clamp, "custom-call": _custom_call,
    **{op: _unary_op(fn) for op, fn in UNARY.items()},
    **{op: _binary_op(fn) for op, fn in BINARY.items()},
}
