"""Opcode classes: the one place that says what is elementwise, commutative, floating-point, which custom calls
exist. Passes and the backend ask here instead of keeping lists of their own."""

from __future__ import annotations

from hlo.ir import FLOAT_DTYPES, Instruction, Quoted, Shape
from hlo.shape_inference import BINARY_OPS, UNARY_OPS

# From the shape-inference tables, so that a new elementwise opcode is known to every pass at once.
UNARY_ELEMENTWISE = (frozenset(UNARY_OPS) - {"copy"}) | {"convert", "is-finite"}
BINARY_ELEMENTWISE = frozenset(BINARY_OPS) | {"compare"}
TERNARY_ELEMENTWISE = frozenset({"select", "clamp"})
COMMUTATIVE = frozenset({"add", "multiply", "maximum", "minimum", "and", "or", "xor"})
# custom_call_target -> elementwise unary function (the frontend emits these; the interpreter implements them)
ELEMENTWISE_CUSTOM_CALLS = frozenset({"gelu", "gelu_tanh"})


def custom_call_target(inst: Instruction) -> str | None:
    """The custom_call_target of a custom-call (None for other ops or a malformed attribute)."""
    target = inst.attrs.get("custom_call_target")
    return target.text if isinstance(target, Quoted) else None


def is_elementwise(inst: Instruction) -> bool:
    """True for ops computing each output element from the same-index elements of their operands."""
    op = inst.opcode
    if op in UNARY_ELEMENTWISE or op in BINARY_ELEMENTWISE or op in TERNARY_ELEMENTWISE:
        return True
    return op == "custom-call" and custom_call_target(inst) in ELEMENTWISE_CUSTOM_CALLS


def is_float(shape: Shape) -> bool:
    """A floating-point array shape (not a tuple)."""
    return not shape.is_tuple and shape.dtype in FLOAT_DTYPES
