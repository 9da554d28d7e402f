"""The algebraic simplifier's arithmetic and type rules (one function per opcode; see algebraic_simplifier.py).

* Neutral operands: ``x + 0``, ``0 + x``, ``x - 0``, ``x * 1``, ``1 * x``, ``x / 1``, ``x | 0``, ``x ^ 0``,
  ``x & ~0`` (the constant possibly broadcast) -> ``x`` when ``x`` already has the result's shape and type.
* ``x * 0`` -> zeros, for integer types only (for floats ``inf * 0`` and ``nan * 0`` are NaN).
* Idempotent ops: ``max(x, x)``, ``min(x, x)``, ``and(x, x)``, ``or(x, x)`` -> ``x``.
* Involutions: ``negate(negate(x))``, ``not(not(x))`` -> ``x``.
* ``select(p, x, x)`` -> ``x``; ``select`` on a constant predicate -> the chosen operand.
* ``reduce`` over size-1 dimensions only, with the reducer's identity as init -> ``reshape``.
* ``convert`` to the same type -> operand; ``convert(broadcast(x))`` -> ``broadcast(convert(x))`` (convert the
  small operand; constant folding then folds a cast bias at compile time); ``convert(convert(x))`` whose first
  step is exact (a lossless widening) -> one convert, or ``x`` when it converts back to x's type.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from compiler.passes.simplify.rewrite import RewriteContext, in_place, interchangeable
from compiler.passes.utils import constant_value, is_constant_like
from hlo.interpreter import reducer_ufunc
from hlo.ir import Instruction, Shape, numpy_dtype

# from-type -> types that represent every value of it exactly
LOSSLESS_WIDENING: dict[str, frozenset[str]] = {
    "f8e4m3fn": frozenset({"f16", "bf16", "f32", "f64"}),
    "f8e5m2": frozenset({"f16", "bf16", "f32", "f64"}),
    "bf16": frozenset({"f32", "f64"}),
    "f16": frozenset({"f32", "f64"}),
    "f32": frozenset({"f64"}),
    "s8": frozenset({"s16", "s32", "s64", "f16", "bf16", "f32", "f64"}),
    "s16": frozenset({"s32", "s64", "f32", "f64"}),
    "s32": frozenset({"s64", "f64"}),
    "u8": frozenset({"s16", "s32", "s64", "u16", "u32", "u64", "f16", "bf16", "f32", "f64"}),
    "u16": frozenset({"s32", "s64", "u32", "u64", "f32", "f64"}),
    "u32": frozenset({"s64", "u64", "f64"}),
    "pred": frozenset({"s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64", "f16", "bf16", "f32", "f64"}),
}


def _all_ones(dtype: str) -> float:
    """The value whose bits are all 1 (``and``'s identity): true, -1, or the unsigned maximum."""
    np_dtype = numpy_dtype(dtype)
    if np_dtype == np.bool_:
        return 1.0
    return -1.0 if np_dtype.kind == "i" else float(np.iinfo(np_dtype).max)


# opcode -> (neutral value for a result type, the operand positions the neutral constant may take)
_NEUTRAL: dict[str, tuple[Any, tuple[int, ...]]] = {
    "add": (lambda t: 0.0, (0, 1)),
    "subtract": (lambda t: 0.0, (1,)),
    "multiply": (lambda t: 1.0, (0, 1)),
    "divide": (lambda t: 1.0, (1,)),
    "or": (lambda t: 0.0, (0, 1)),
    "xor": (lambda t: 0.0, (0, 1)),
    "and": (_all_ones, (0, 1)),
}
_IDEMPOTENT = frozenset({"maximum", "minimum", "and", "or"})


def _neutral_operand(inst: Instruction) -> Instruction | None:
    neutral, positions = _NEUTRAL[inst.opcode]
    for pos in positions:
        x = inst.operands[1 - pos]
        if constant_value(inst.operands[pos]) == neutral(inst.shape.dtype) and interchangeable(inst, x):
            return x
    return None


def binary(ctx: RewriteContext, inst: Instruction) -> Instruction | None:
    """Neutral operands, idempotence, and integer ``x * 0``."""
    a, b = inst.operands
    if inst.opcode in _IDEMPOTENT and a is b and interchangeable(inst, a):
        return a
    if inst.opcode in _NEUTRAL:
        x = _neutral_operand(inst)
        if x is not None:
            return x
    if inst.opcode == "multiply" and numpy_dtype(inst.shape.dtype).kind in "iu":
        for zero in (a, b):
            if constant_value(zero) == 0.0:
                return zero if interchangeable(inst, zero) else ctx.filled(inst, 0, inst.shape)
    return None


def involution(ctx: RewriteContext, inst: Instruction) -> Instruction | None:
    x = inst.operands[0]
    if x.opcode == inst.opcode and interchangeable(inst, x.operands[0]):
        return x.operands[0]
    return None


def select(ctx: RewriteContext, inst: Instruction) -> Instruction | None:
    pred, on_true, on_false = inst.operands
    if on_true is on_false and interchangeable(inst, on_true):
        return on_true
    if is_constant_like(pred):
        value = constant_value(pred)
        chosen = None if value is None else on_true if value else on_false
        if chosen is not None and interchangeable(inst, chosen):
            return chosen
    return None


_IDENTITY = {np.add: lambda d: 0, np.multiply: lambda d: 1, np.bitwise_or: lambda d: 0,
             np.bitwise_and: _all_ones,
             np.maximum: lambda d: -math.inf if numpy_dtype(d).kind in "fV" else float(np.iinfo(numpy_dtype(d)).min),
             np.minimum: lambda d: math.inf if numpy_dtype(d).kind in "fV" else float(np.iinfo(numpy_dtype(d)).max)}


def reduce(ctx: RewriteContext, inst: Instruction) -> Instruction | None:
    if len(inst.operands) != 2:
        return None
    x, init = inst.operands
    axes = inst.attrs["dimensions"]
    ufunc = reducer_ufunc(inst.attrs["to_apply"])
    if ufunc is None or any(x.shape.dims[a] != 1 for a in axes):
        return None
    identity = _IDENTITY.get(ufunc)
    if identity is None or constant_value(init) != identity(x.shape.dtype) or inst.shape.dtype != x.shape.dtype:
        return None
    return in_place(inst, "reshape", [x], {})


def convert(ctx: RewriteContext, inst: Instruction) -> Instruction | None:
    source = inst.operands[0]
    if source.shape.dtype == inst.shape.dtype and interchangeable(inst, source):
        return source
    if source.opcode == "broadcast":  # convert the small operand, then broadcast it
        small = source.operands[0]
        narrow = ctx.add_before(inst, "convert", Shape(inst.shape.dtype, small.shape.dims, small.shape.layout),
                                [small])
        return in_place(inst, "broadcast", [narrow], dict(source.attrs))
    if source.opcode == "convert":
        original = source.operands[0]
        if source.shape.dtype in LOSSLESS_WIDENING.get(original.shape.dtype, ()):
            if original.shape.dtype == inst.shape.dtype and interchangeable(inst, original):
                return original
            return in_place(inst, "convert", [original], {})
    return None


ARITH_RULES = {
    **{op: binary for op in ("add", "subtract", "multiply", "divide", "maximum", "minimum", "and", "or", "xor")},
    "negate": involution, "not": involution, "select": select, "reduce": reduce, "convert": convert,
}
