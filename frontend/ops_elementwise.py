"""Elementwise arithmetic, math functions, comparisons, select and dtype conversion."""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
import torch

from hlo.ir import Instruction, numpy_dtype

from .builder import HLO_TO_TORCH, HloBuilder, hlo_dtype
from .ops_common import Value, float_dtype, is_float, operand, require, result_dtype

# bool arithmetic as torch computes it: add is or, multiply is and (subtract of bools is an error in torch)
_PRED_ARITH = {"add": "or", "multiply": "and", "maximum": "or", "minimum": "and"}


def _arith(opcode: str, x: Value, y: Value, b: HloBuilder) -> Instruction:
    dtype = result_dtype(x, y)
    if dtype == "pred":
        opcode = _PRED_ARITH.get(opcode, opcode)
    return b.binary(opcode, operand(b, x, dtype), operand(b, y, dtype))


def _scaled(b: HloBuilder, y: Value, alpha: Any, dtype: str) -> Value:
    """``alpha * y`` (alpha of add/sub); a no-op for alpha == 1."""
    if alpha == 1:
        return y
    if not isinstance(y, Instruction):
        return y * alpha
    return b.binary("multiply", operand(b, y, dtype), b.scalar(alpha, dtype))


def add(b: HloBuilder, x: Value, y: Value, alpha: Any = 1) -> Instruction:
    return _arith("add", x, _scaled(b, y, alpha, result_dtype(x, y)), b)


def sub(b: HloBuilder, x: Value, y: Value, alpha: Any = 1) -> Instruction:
    return _arith("subtract", x, _scaled(b, y, alpha, result_dtype(x, y)), b)


def rsub(b: HloBuilder, x: Value, y: Value, alpha: Any = 1) -> Instruction:
    return _arith("subtract", y, _scaled(b, x, alpha, result_dtype(x, y)), b)


def mul(b: HloBuilder, x: Value, y: Value) -> Instruction:
    return _arith("multiply", x, y, b)


def div(b: HloBuilder, x: Value, y: Value, rounding_mode: str | None = None) -> Instruction:
    dtype = result_dtype(x, y)
    if rounding_mode is None and not is_float(dtype):
        dtype = "f32"  # true division of integers
    q = b.binary("divide", operand(b, x, dtype), operand(b, y, dtype))
    if rounding_mode is None:
        return q
    require(rounding_mode in ("trunc", "floor"), f"rounding_mode={rounding_mode!r} is not supported")
    require(dtype != "pred", f"rounding_mode={rounding_mode!r} on bool is not supported")
    if not is_float(dtype):  # HLO's integer divide truncates; floor steps down where the remainder's sign differs
        if rounding_mode == "trunc":
            return q
        xv, yv = operand(b, x, dtype), operand(b, y, dtype)
        r = b.binary("remainder", xv, yv)
        zero = b.full(0, dtype, r.shape.dims)
        differ = b.compare(b.compare(r, zero, "LT"), b.compare(b.broadcast_to(yv, r.shape.dims), zero, "LT"), "NE")
        step = b.binary("and", b.compare(r, zero, "NE"), differ)
        return b.select(step, b.binary("subtract", q, b.full(1, dtype, r.shape.dims)), q)
    if rounding_mode == "floor":
        return b.unary("floor", q)
    return b.select(b.compare(q, b.scalar(0, dtype), "LT"), b.unary("ceil", q), b.unary("floor", q))


def pow_(b: HloBuilder, x: Value, y: Value) -> Instruction:
    dtype = result_dtype(x, y)
    if y == 2 and isinstance(x, Instruction):
        xd = operand(b, x, dtype)
        return b.binary("multiply", xd, xd)
    if y == 0.5 and isinstance(x, Instruction):
        return b.unary("sqrt", operand(b, x, dtype))
    return b.binary("power", operand(b, x, dtype), operand(b, y, dtype))


def pow_scalar(b: HloBuilder, base: Value, exponent: Instruction) -> Instruction:
    """``base ** tensor`` with a Python base."""
    dtype = result_dtype(base, exponent)
    return b.binary("power", operand(b, base, dtype), operand(b, exponent, dtype))


def square(b: HloBuilder, x: Instruction) -> Instruction:
    dtype = "s64" if x.shape.dtype == "pred" else x.shape.dtype
    x = b.convert(x, dtype)
    return b.binary("multiply", x, x)


def fmod(b: HloBuilder, x: Value, y: Value) -> Instruction:
    """C-style remainder (sign of the dividend): HLO ``remainder``."""
    return _arith("remainder", x, y, b)


def remainder(b: HloBuilder, x: Value, y: Value) -> Instruction:
    """Python-style remainder (sign of the divisor): fmod, plus y where the signs differ."""
    dtype = result_dtype(x, y)
    xv, yv = operand(b, x, dtype), operand(b, y, dtype)
    r = b.binary("remainder", xv, yv)
    yv = b.broadcast_to(yv, r.shape.dims)
    zero = b.full(0, dtype, r.shape.dims)
    differ = b.compare(b.compare(r, zero, "LT"), b.compare(yv, zero, "LT"), "NE")
    fix = b.binary("and", b.compare(r, zero, "NE"), differ)
    return b.select(fix, b.binary("add", r, yv), r)


def maximum(b: HloBuilder, x: Instruction, y: Instruction) -> Instruction:
    return _arith("maximum", x, y, b)


def minimum(b: HloBuilder, x: Instruction, y: Instruction) -> Instruction:
    return _arith("minimum", x, y, b)


def clamp(b: HloBuilder, x: Instruction, lo: Value | None = None, hi: Value | None = None) -> Instruction:
    require(lo is not None or hi is not None, "clamp needs min or max")
    dtypes = [HLO_TO_TORCH[result_dtype(x, v)] for v in (lo, hi) if v is not None]
    dtype = hlo_dtype(functools.reduce(torch.promote_types, dtypes))
    out = operand(b, x, dtype)
    if lo is not None:
        out = b.binary("maximum", out, operand(b, lo, dtype))
    if hi is not None:
        out = b.binary("minimum", out, operand(b, hi, dtype))
    return out


def clamp_min(b: HloBuilder, x: Instruction, lo: Value) -> Instruction:
    return clamp(b, x, lo, None)


def clamp_max(b: HloBuilder, x: Instruction, hi: Value) -> Instruction:
    return clamp(b, x, None, hi)


# opcodes that are the identity on integers (and bool) in torch: floor(int) is the int
_INTEGER_IDENTITY = frozenset({"floor", "ceil"})


def _unary(opcode: str, floating: bool = True):
    """A rule applying one HLO opcode (computing in a float dtype for float-only math)."""
    def rule(b: HloBuilder, x: Instruction) -> Instruction:
        if not floating and not is_float(x.shape.dtype) and (opcode in _INTEGER_IDENTITY or
                                                             (opcode == "sign" and x.shape.dtype == "pred")):
            return x
        return b.unary(opcode, b.convert(x, float_dtype(x)) if floating else x)

    rule.__name__ = opcode
    rule.__doc__ = f"Elementwise ``{opcode}``."
    return rule


def _log_base(base: float):
    """log2 / log10: ``log(x) / log(base)``."""
    def rule(b: HloBuilder, x: Instruction) -> Instruction:
        x = b.convert(x, float_dtype(x))
        return b.binary("divide", b.unary("log", x), b.scalar(math.log(base), x.shape.dtype))

    rule.__name__ = f"log{int(base)}"
    return rule


def exp2(b: HloBuilder, x: Instruction) -> Instruction:
    x = b.convert(x, float_dtype(x))
    return b.binary("power", b.full(2, x.shape.dtype, x.shape.dims), x)


def round_(b: HloBuilder, x: Instruction, decimals: int = 0) -> Instruction:
    """Round half to even (torch.round), optionally at ``decimals`` digits."""
    if not is_float(x.shape.dtype):
        return x
    if decimals == 0:
        return b.unary("round-nearest-even", x)
    scale = b.scalar(10.0 ** decimals, x.shape.dtype)
    return b.binary("divide", b.unary("round-nearest-even", b.binary("multiply", x, scale)), scale)


def trunc(b: HloBuilder, x: Instruction) -> Instruction:
    """Toward zero: ceil below zero, floor above."""
    if not is_float(x.shape.dtype):
        return x
    negative = b.compare(x, b.scalar(0, x.shape.dtype), "LT")
    return b.select(negative, b.unary("ceil", x), b.unary("floor", x))


def log1p(b: HloBuilder, x: Instruction) -> Instruction:
    """``log(1 + x)``."""
    x = b.convert(x, float_dtype(x))
    return b.unary("log", b.binary("add", x, b.scalar(1, x.shape.dtype)))


def expm1(b: HloBuilder, x: Instruction) -> Instruction:
    """``exp(x) - 1``."""
    x = b.convert(x, float_dtype(x))
    return b.binary("subtract", b.unary("exponential", x), b.scalar(1, x.shape.dtype))


def reciprocal(b: HloBuilder, x: Instruction) -> Instruction:
    dtype = float_dtype(x)
    return b.binary("divide", b.scalar(1, dtype), b.convert(x, dtype))


def _compare(direction: str):
    """A rule for a comparison: operands promoted to a common dtype, result pred."""
    def rule(b: HloBuilder, x: Value, y: Value) -> Instruction:
        dtype = result_dtype(x, y)
        return b.compare(operand(b, x, dtype), operand(b, y, dtype), direction)

    rule.__name__ = f"compare_{direction.lower()}"
    rule.__doc__ = f"``compare(direction={direction})``."
    return rule


def isnan(b: HloBuilder, x: Instruction) -> Instruction:
    """``x != x`` (only NaN differs from itself); integers are never NaN."""
    return b.compare(x, x, "NE")


def isinf(b: HloBuilder, x: Instruction) -> Instruction:
    if not is_float(x.shape.dtype):
        return b.full(False, "pred", x.shape.dims)
    return b.compare(b.unary("abs", x), b.full(np.inf, x.shape.dtype, x.shape.dims), "EQ")


def isfinite(b: HloBuilder, x: Instruction) -> Instruction:
    if not is_float(x.shape.dtype):
        return b.full(True, "pred", x.shape.dims)
    return b.emit("is-finite", x.shape.with_dtype("pred"), [x])


def nan_to_num(b: HloBuilder, x: Instruction, nan: float | None = None, posinf: float | None = None,
               neginf: float | None = None) -> Instruction:
    """NaN -> ``nan`` (0), +inf -> ``posinf`` (the dtype's max), -inf -> ``neginf`` (its lowest)."""
    if not is_float(x.shape.dtype):
        return x
    info = np.finfo(numpy_dtype(x.shape.dtype))
    dims, dtype = x.shape.dims, x.shape.dtype
    out = b.select(isnan(b, x), b.full(0.0 if nan is None else nan, dtype, dims), x)
    out = b.select(b.compare(x, b.full(np.inf, dtype, dims), "EQ"),
                   b.full(float(info.max) if posinf is None else posinf, dtype, dims), out)
    return b.select(b.compare(x, b.full(-np.inf, dtype, dims), "EQ"),
                    b.full(float(info.min) if neginf is None else neginf, dtype, dims), out)


def where(b: HloBuilder, cond: Instruction, x: Value, y: Value) -> Instruction:
    dtype = result_dtype(x, y)
    return b.select(b.convert(cond, "pred"), operand(b, x, dtype), operand(b, y, dtype))


def logical_not(b: HloBuilder, x: Instruction) -> Instruction:
    return b.unary("not", b.convert(x, "pred"))


def bitwise_not(b: HloBuilder, x: Instruction) -> Instruction:
    """HLO ``not`` is logical on pred and bitwise on integers, like torch's ``~``."""
    require(not is_float(x.shape.dtype), "bitwise_not of a floating-point tensor")
    return b.unary("not", x)


def masked_fill(b: HloBuilder, x: Instruction, mask: Instruction, value: Value) -> Instruction:
    """``select(mask, value, x)`` in x's dtype."""
    return b.select(b.convert(mask, "pred"), operand(b, value, x.shape.dtype), x)


def _logical(opcode: str):
    """logical_and / logical_or: operands converted to pred (nonzero is true), then ``and``/``or``."""
    def rule(b: HloBuilder, x: Instruction, y: Instruction) -> Instruction:
        return b.binary(opcode, b.convert(x, "pred"), b.convert(y, "pred"))

    rule.__name__ = f"logical_{opcode}"
    return rule


def _bitwise(opcode: str):
    """``and``/``or``/``xor`` of bools or integers (HLO's are logical on pred, bitwise on integers)."""
    def rule(b: HloBuilder, x: Value, y: Value) -> Instruction:
        dtype = result_dtype(x, y)
        require(not is_float(dtype), f"bitwise {opcode} of floating-point values")
        return b.binary(opcode, operand(b, x, dtype), operand(b, y, dtype))

    rule.__name__ = f"bitwise_{opcode}"
    return rule


def to_dtype(b: HloBuilder, x: Instruction, dtype: Any, non_blocking: bool = False, copy: bool = False,
             memory_format: Any = None) -> Instruction:
    return b.convert(x, hlo_dtype(dtype))


def to_dtype_layout(b: HloBuilder, x: Instruction, dtype: Any = None, layout: Any = None, device: Any = None,
                    pin_memory: Any = None, non_blocking: bool = False, copy: bool = False,
                    memory_format: Any = None) -> Instruction:
    return x if dtype is None else b.convert(x, hlo_dtype(dtype))


def type_as(b: HloBuilder, x: Instruction, other: Instruction) -> Instruction:
    return b.convert(x, other.shape.dtype)


def to_copy(b: HloBuilder, x: Instruction, dtype: Any = None, layout: Any = None, device: Any = None,
            pin_memory: Any = None, non_blocking: bool = False, memory_format: Any = None) -> Instruction:
    """``_to_copy``: a ``convert`` when the dtype changes; layout/device/memory format do not matter."""
    return x if dtype is None else b.convert(x, hlo_dtype(dtype))


def assert_tensor_metadata(b: HloBuilder, x: Instruction, size: Any = None, stride: Any = None,
                           dtype: Any = None, device: Any = None, layout: Any = None) -> None:
    """A check torch.export inserts around dtype conversions; nothing to emit."""
    require(dtype is None or hlo_dtype(dtype) == x.shape.dtype, f"tensor is {x.shape.dtype}, expected {dtype}")
    require(size is None or tuple(size) == x.shape.dims, f"tensor is {list(x.shape.dims)}, expected {size}")


RULES = {
    "aten.add.Tensor": add,
    "aten.add.Scalar": add,
    "aten.sub.Tensor": sub,
    "aten.sub.Scalar": sub,
    "aten.rsub.Tensor": rsub,
    "aten.rsub.Scalar": rsub,
    "aten.mul.Tensor": mul,
    "aten.mul.Scalar": mul,
    "aten.div.Tensor": div,
    "aten.div.Scalar": div,
    "aten.div.Tensor_mode": div,
    "aten.div.Scalar_mode": div,
    "aten.pow.Tensor_Scalar": pow_,
    "aten.pow.Tensor_Tensor": pow_,
    "aten.pow.Scalar": pow_scalar,
    "aten.square.default": square,
    "aten.fmod.Scalar": fmod,
    "aten.fmod.Tensor": fmod,
    "aten.remainder.Scalar": remainder,
    "aten.remainder.Tensor": remainder,
    "aten.maximum.default": maximum,
    "aten.minimum.default": minimum,
    "aten.clamp.default": clamp,
    "aten.clamp.Tensor": clamp,
    "aten.clamp_min.default": clamp_min,
    "aten.clamp_max.default": clamp_max,
    "aten.neg.default": _unary("negate", floating=False),
    "aten.abs.default": _unary("abs", floating=False),
    "aten.exp.default": _unary("exponential"),
    "aten.log.default": _unary("log"),
    "aten.sqrt.default": _unary("sqrt"),
    "aten.rsqrt.default": _unary("rsqrt"),
    "aten.sin.default": _unary("sine"),
    "aten.cos.default": _unary("cosine"),
    "aten.floor.default": _unary("floor", floating=False),
    "aten.ceil.default": _unary("ceil", floating=False),
    "aten.reciprocal.default": reciprocal,
    "aten.log1p.default": log1p,
    "aten.log2.default": _log_base(2),
    "aten.log10.default": _log_base(10),
    "aten.exp2.default": exp2,
    "aten.round.default": round_,
    "aten.round.decimals": round_,
    "aten.trunc.default": trunc,
    "aten.expm1.default": expm1,
    "aten.sign.default": _unary("sign", floating=False),
    "aten.erf.default": _unary("erf"),
    "aten.eq.Tensor": _compare("EQ"),
    "aten.eq.Scalar": _compare("EQ"),
    "aten.ne.Tensor": _compare("NE"),
    "aten.ne.Scalar": _compare("NE"),
    "aten.lt.Tensor": _compare("LT"),
    "aten.lt.Scalar": _compare("LT"),
    "aten.le.Tensor": _compare("LE"),
    "aten.le.Scalar": _compare("LE"),
    "aten.gt.Tensor": _compare("GT"),
    "aten.gt.Scalar": _compare("GT"),
    "aten.ge.Tensor": _compare("GE"),
    "aten.ge.Scalar": _compare("GE"),
    "aten.where.self": where,
    "aten.isnan.default": isnan,
    "aten.isinf.default": isinf,
    "aten.isfinite.default": isfinite,
    "aten.nan_to_num.default": nan_to_num,
    "aten.logical_not.default": logical_not,
    "aten.bitwise_not.default": bitwise_not,
    "aten.masked_fill.Scalar": masked_fill,
    "aten.masked_fill.Tensor": masked_fill,
    "aten.logical_and.default": _logical("and"),
    "aten.logical_or.default": _logical("or"),
    "aten.logical_xor.default": _logical("xor"),
    "aten.bitwise_and.Tensor": _bitwise("and"),
    "aten.bitwise_and.Scalar": _bitwise("and"),
    "aten.bitwise_or.Tensor": _bitwise("or"),
    "aten.bitwise_or.Scalar": _bitwise("or"),
    "aten.bitwise_xor.Tensor": _bitwise("xor"),
    "aten.bitwise_xor.Scalar": _bitwise("xor"),
    # (speed) the operator aliases torch.export keeps (`mask & other`): lowered as their bitwise_* op, so that
    # a graph using them needs no decomposition re-trace (about a third of GPT-2's capture)
    "aten.__and__.Tensor": _bitwise("and"),
    "aten.__or__.Tensor": _bitwise("or"),
    "aten.__xor__.Tensor": _bitwise("xor"),
    "aten._to_copy.default": to_copy,
    "aten.to.dtype": to_dtype,
    "aten.to.dtype_layout": to_dtype_layout,
    "aten.type_as.default": type_as,
    "aten._assert_tensor_metadata.default": assert_tensor_metadata,
}
