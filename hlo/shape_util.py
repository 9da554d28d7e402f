"""Helpers the shape-inference rules share: the error type, operand checks, element-type classes."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from hlo.errors import VerificationError
from hlo.ir import FLOAT_DTYPES, Computation, Shape


class ShapeInferenceError(VerificationError):
    """An instruction's operands or attributes do not fit its opcode."""


INT_DTYPES = ("s8", "s16", "s32", "s64", "u8", "u16", "u32", "u64")
NUMERIC = FLOAT_DTYPES + INT_DTYPES
LOGICAL = ("pred",) + INT_DTYPES
ANY = ("pred",) + NUMERIC

# (operand shapes, attributes, declared shape or None) -> result shape
Rule = Callable[[list[Shape], dict[str, Any], Shape | None], Shape]


def fmt(shape: Shape) -> str:
    """A shape in HLO syntax without layout, for messages."""
    if shape.is_tuple:
        return "(" + ", ".join(fmt(s) for s in shape.tuple_shapes) + ")"
    return f"{shape.dtype}[{','.join(map(str, shape.dims))}]"


def same_shape(a: Shape, b: Shape) -> bool:
    """Equal element type, dims and tuple structure (layouts are not compared)."""
    if a.is_tuple or b.is_tuple:
        return (a.is_tuple and b.is_tuple and len(a.tuple_shapes) == len(b.tuple_shapes)
                and all(same_shape(x, y) for x, y in zip(a.tuple_shapes, b.tuple_shapes, strict=True)))
    return (a.dtype, a.dims) == (b.dtype, b.dims)


def fail(message: str) -> ShapeInferenceError:
    return ShapeInferenceError(message)


def arity(ops: list[Shape], low: int, high: int | None = None) -> None:
    """``low..high`` array (not tuple) operands."""
    high = low if high is None else high
    if not low <= len(ops) <= high:
        want = str(low) if low == high else f"{low}..{high}" if high < 1 << 30 else f"at least {low}"
        raise fail(f"takes {want} operand(s), got {len(ops)}")
    for i, s in enumerate(ops):
        if s.is_tuple:
            raise fail(f"operand {i} is the tuple {fmt(s)}, an array is needed")


def types(op: Shape, allowed: tuple[str, ...], what: str = "operand") -> None:
    if op.dtype not in allowed:
        raise fail(f"{what} type {op.dtype} is not allowed (allowed: {', '.join(allowed)})")


def need_declared(declared: Shape | None, opcode: str) -> Shape:
    if declared is None:
        raise fail(f"the result shape of {opcode} cannot be inferred; the declared shape is needed")
    return declared


def dims_attr(attrs: dict[str, Any], key: str, default: tuple[int, ...] | None = None) -> tuple[int, ...]:
    """An integer-list attribute (``key={1,0}``); ``default`` when absent (None: it is required)."""
    value = attrs.get(key, default)
    if value is None:
        raise fail(f"missing attribute {key}={{...}}")
    if not isinstance(value, tuple | list) or not all(isinstance(v, int) and not isinstance(v, bool)
                                                      for v in value):
        raise fail(f"attribute {key} must be a list of integers such as {{1,0}}, got {value!r}")
    return tuple(value)


def int_attr(attrs: dict[str, Any], key: str, default: int | None = None) -> int:
    """An integer attribute (``key=3``); ``default`` when absent (None: it is required)."""
    value = attrs.get(key, default)
    if value is None:
        raise fail(f"missing attribute {key}=N")
    if not isinstance(value, int) or isinstance(value, bool):
        raise fail(f"attribute {key} must be an integer, got {value!r}")
    return value


def computation_attr(attrs: dict[str, Any], key: str = "to_apply") -> Computation:
    comp = attrs.get(key)
    if not isinstance(comp, Computation) or comp.root is None:
        raise fail(f"missing {key}=%computation (with a ROOT)")
    return comp


def check_axes(axes: Sequence[int], rank: int, what: str) -> None:
    """``axes`` are distinct dimensions of a rank-``rank`` array."""
    if len(set(axes)) != len(axes) or any(not 0 <= a < rank for a in axes):
        raise fail(f"{what}={{{','.join(map(str, axes))}}} must be distinct dimensions in 0..{rank - 1}")


def check_sorted_axes(axes: Sequence[int], rank: int, what: str) -> None:
    """``axes`` are distinct dimensions of a rank-``rank`` array, in increasing order."""
    check_axes(axes, rank, what)
    if list(axes) != sorted(axes):
        raise fail(f"{what}={{{','.join(map(str, axes))}}} must be sorted")


def array(dtype: str, dims: Sequence[int]) -> Shape:
    return Shape(dtype, tuple(int(d) for d in dims))


def same_arrays(ops: list[Shape], first: int = 0) -> None:
    """Operands ``first+1..`` have operand ``first``'s element type and dims."""
    for i in range(first + 1, len(ops)):
        if (ops[i].dtype, ops[i].dims) != (ops[first].dtype, ops[first].dims):
            raise fail(f"operand {i} is {fmt(ops[i])} but operand {first} is {fmt(ops[first])}; "
                       "they must be equal")


def scalar_of(shape: Shape, dtype: str, what: str) -> None:
    if shape.is_tuple or shape.rank != 0 or shape.dtype != dtype:
        raise fail(f"{what} {fmt(shape)} must be a {dtype} scalar")


def reduction_operands(ops: list[Shape]) -> tuple[list[Shape], list[Shape]]:
    """(inputs, init values) of a variadic reduce or reduce-window: n same-dims inputs, then n scalar inits."""
    if len(ops) < 2 or len(ops) % 2:
        raise fail(f"takes inputs and as many init values, got {len(ops)} operands")
    n = len(ops) // 2
    inputs, inits = ops[:n], ops[n:]
    for i, s in enumerate(inputs[1:], 1):
        if s.dims != inputs[0].dims:
            raise fail(f"input {i} {fmt(s)} and input 0 {fmt(inputs[0])} have different dims")
    for i, (s, init) in enumerate(zip(inputs, inits, strict=True)):
        scalar_of(init, s.dtype, f"init value {i}")
    return inputs, inits
