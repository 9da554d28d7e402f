"""Exact integer arithmetic for the tile evaluator (docs/integer-semantics.md).

ACT, DVE and POOL compute in fp32, exact for integers of 24 bits at most. An expression node whose value and
inputs are all integers (or pred) is therefore computed on GpSimd in its integer mode (``math=int``: exact
64-bit math, two's-complement wrap to the destination type, XLA's division/remainder/shift rules); a
float -> integer convert is a ``tensor_copy round=zero`` (truncate, saturate, NaN -> 0); immediates are folded
at compile time with the same rules. What the machine cannot compute exactly is refused here, naming the
instruction.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from backend.kernels.expr import KEY_DTYPES, Node, where_of
from backend.layout import itemsize
from hlo.errors import CompilationError
from hlo.interpreter.elementwise import total_order_key
from isa.dtypes import dtype as isa_dtype
from isa.dtypes import immediate
from isa.emulator.numerics import INT_ALU, int_width, wrap64
from isa.program import AccessPattern

# node op -> ALU op of the integer mode (binary nodes)
INT_BINARY = frozenset({"add", "subtract", "multiply", "divide", "remainder", "max", "min", "is_equal", "not_equal",
                        "is_gt", "is_ge", "is_lt", "is_le", "bitwise_and", "bitwise_or", "bitwise_xor",
                        "logical_and", "logical_or", "shift_left", "shift_right_logical", "shift_right_arith"})
# a op b == b op' a, for operand swaps of the integer ops
INT_SWAPPED = {"add": "add", "multiply": "multiply", "max": "max", "min": "min", "is_equal": "is_equal",
               "not_equal": "not_equal", "is_gt": "is_lt", "is_lt": "is_gt", "is_ge": "is_le", "is_le": "is_ge",
               "bitwise_and": "bitwise_and", "bitwise_or": "bitwise_or", "bitwise_xor": "bitwise_xor",
               "logical_and": "logical_and", "logical_or": "logical_or"}
# reductions the fp32 DVE reduce computes exactly on integers: max/min of values of at most 24 bits
EXACT_INT_REDUCE_DTYPES = frozenset({"pred", "i8", "u8", "i16", "u16"})


def is_integer(dtype: str) -> bool:
    return isa_dtype(dtype).is_integer


def is_int_node(node: Node) -> bool:
    """An operation computed in GpSimd's integer mode: an integer result from integer inputs."""
    return bool(node.inputs) and is_integer(node.dtype) and all(is_integer(i.dtype) for i in node.inputs)


def needs_exact_reduce(node: Node) -> bool:
    """A reduction of integers the fp32 engines (DVE tensor_reduce, POOL partition_reduce, PE) would not
    compute exactly: anything but max/min of types of at most 16 bits and pred."""
    src = node.inputs[0]
    if not is_integer(node.dtype) and not is_integer(src.dtype):
        return False
    kind = node.op[len("reduce_"):]
    return not (kind in ("max", "min") and src.dtype in EXACT_INT_REDUCE_DTYPES)


def wrap(value: int, dtype: str) -> int:
    """``value`` (a Python int, any size) wrapped to the integer type ``dtype`` (pred: value != 0)."""
    np_dtype = isa_dtype(dtype).numpy
    if np_dtype.kind == "b":
        return int(value != 0)
    bits = np_dtype.itemsize * 8
    value = int(value) & ((1 << bits) - 1)
    return value - (1 << bits) if np_dtype.kind == "i" and value >= 1 << (bits - 1) else value


def fold(node: Node, values: list[float | int]) -> int:
    """The value of an integer node of immediates (exact; wrapped to the node's type)."""
    if node.op == "total_order_key":
        return total_order_key_value(values[0], node.inputs[0].dtype)
    ints = [int(v) for v in values]
    if any(float(i) != v for i, v in zip(ints, values, strict=True)):
        raise CompilationError(f"{where_of(node)}: integer immediates {values} are not integers")
    op = node.op
    first = node.inputs[0].dtype
    bits, signed = int_width(first)
    if op in ("convert", "copy"):
        return wrap(ints[0], node.dtype)
    if op == "negate":
        return wrap(-ints[0], node.dtype)
    if op == "select":
        return wrap(ints[1] if ints[0] else ints[2], node.dtype)
    fn = INT_ALU.get(op)
    if fn is None or len(ints) != 2:
        raise CompilationError(f"{where_of(node)}: cannot fold the integer {op} of immediates")
    result = fn(np.array(wrap64(ints[0])), np.array(wrap64(ints[1])), bits, signed)
    return wrap(int(result), node.dtype)


def immediate_attrs(value: float | int, name: str = "scalar") -> dict[str, int | float]:
    """The attributes of an integer-mode immediate: exact for every 64-bit value (isa.dtypes.immediate)."""
    return immediate(int(value), name)


def check_int_op(node: Node) -> None:
    if node.op not in INT_BINARY and node.op not in ("convert", "copy", "negate", "select"):
        raise CompilationError(f"{where_of(node)}: the integer op {node.op!r} has no exact instruction "
                               "(docs/integer-semantics.md)")


def total_order_keys(b, dst: AccessPattern, value: AccessPattern, label: str) -> None:
    """dst (signed integers of the float's width) = the float bits of `value`, negative ones with their
    magnitude bits flipped: integers ordered as compare's type=TOTALORDER orders the floats."""
    bits = AccessPattern(value.memory, dst.dtype, value.offset, value.pattern, value.start_partition,
                         value.partitions)
    width = itemsize(dst.dtype) * 8
    b.emit("pool", "tensor_scalar", f"{label} sign mask",
           {"op": "shift_right_arith", "scalar": float(width - 1), "op1": "bitwise_and",
            "scalar1": float((1 << (width - 1)) - 1), "math": "int"}, dst=dst, src=bits)
    b.emit("pool", "tensor_tensor", f"{label} flip", {"op": "bitwise_xor", "math": "int"}, dst=dst, a=bits, b=dst)


def negate_bits(b, dst: AccessPattern, src: AccessPattern, label: str) -> None:
    """dst = -src for floats as IEEE's negate: the sign bit flipped (NaNs too), an integer xor on GpSimd."""
    key = KEY_DTYPES[src.dtype]
    sign = -(1 << (itemsize(key) * 8 - 1))
    b.emit("pool", "tensor_scalar", label, {"op": "bitwise_xor", **immediate_attrs(sign), "math": "int"},
           dst=replace(dst, dtype=key), src=replace(src, dtype=key))


# expression ops computed on a float's bits (evaluate.TileEvaluator._bits_op)
BITS_OPS = {"negate": negate_bits, "total_order_key": total_order_keys}


def total_order_key_value(value: float, dtype: str) -> int:
    """The TOTALORDER key (total_order_keys) of the immediate `value` of the float type `dtype`."""
    if dtype not in KEY_DTYPES:
        raise CompilationError(f"no TOTALORDER key for {dtype} immediates")
    return int(total_order_key(np.array(value, isa_dtype(dtype).numpy)))
