"""Elementwise expression DAGs with free-axis reductions: what a fused kernel computes per tile.

Every kernel that applies elementwise math builds one: a kLoop/kInput fusion (or a lone elementwise op
or reduce) is an expression over HBM views, a dot kernel's epilogue an expression over the PSUM
accumulator (`acc`) and views. All nodes of one expression live in the kernel's iteration space (its
logical dims); a node that does not vary along some axes (a reduction result, a broadcast leaf) is
simply constant along them. `evaluate.TileEvaluator` maps the nodes of one tile onto instructions.

Node ops are ISA names where one exists: ALU ops (`add`, `is_gt`, `logical_and`...), ACT functions
(`exp`, `rsqrt`...), plus `convert`/`copy`, `negate`, `select`, `reduce_add`/`reduce_max`/`reduce_min`
(over the tile's free axes), `total_order_key` (a float's bits as a signed integer ordered as compare's
type=TOTALORDER orders the floats) and the operands `leaf` (a view), `iota` (an index ramp, as a view of a
virtual buffer), `acc` and `scalar`. Composite HLO ops (abs, sign, clamp, expm1, log1p, not) are
built from these when the node is created.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from backend.layout import Buffer, View
from hlo.errors import CompilationError
from hlo.ir import Instruction as HloInstruction
from isa.dtypes import dtype as isa_dtype

# HLO opcode -> node op (unary ops whose node op is an ACT function keep the ISA name).
HLO_UNARY: dict[str, str] = {
    "tanh": "tanh", "logistic": "sigmoid", "exponential": "exp", "log": "log", "sqrt": "sqrt",
    "rsqrt": "rsqrt", "negate": "negate", "copy": "copy", "convert": "convert", "abs": "abs",
    "sign": "sign", "not": "not", "exponential-minus-one": "expm1", "log-plus-one": "log1p",
    "sine": "sin", "cosine": "cos", "tan": "tan", "erf": "erf", "cbrt": "cbrt", "floor": "floor", "ceil": "ceil",
    "round-nearest-even": "round_even", "round-nearest-afz": "round_afz", "is-finite": "is_finite",
    "popcnt": "popcnt", "count-leading-zeros": "clz",
}
CUSTOM_CALL_UNARY: dict[str, str] = {"gelu": "gelu", "gelu_tanh": "gelu_tanh"}
# elementwise ops with a rule of their own in the builder (fused.py), beside the tables
STRUCTURED_ELEMENTWISE = frozenset({"compare", "select", "clamp"})
HLO_BINARY: dict[str, str] = {
    "add": "add", "subtract": "subtract", "multiply": "multiply", "divide": "divide",
    "maximum": "max", "minimum": "min", "power": "pow", "and": "and", "or": "or", "xor": "xor",
    "remainder": "remainder", "shift-left": "shift_left", "shift-right-logical": "shift_right_logical",
    "shift-right-arithmetic": "shift_right_arith", "atan2": "atan2",
}
COMPARE_DIRECTIONS: dict[str, str] = {
    "EQ": "is_equal", "NE": "not_equal", "GT": "is_gt", "GE": "is_ge", "LT": "is_lt", "LE": "is_le",
}
# reducer computation root opcode -> reduction (pred and/or reduce like min/max of 0/1)
REDUCERS: dict[str, str] = {"add": "add", "maximum": "max", "minimum": "min", "and": "min", "or": "max",
                            "multiply": "multiply"}
REDUCE_IDENTITY: dict[str, float] = {"add": 0.0, "max": -math.inf, "min": math.inf, "multiply": 1.0}
ACT_FUNCS = frozenset({"tanh", "sigmoid", "exp", "log", "sqrt", "rsqrt", "gelu", "gelu_tanh", "relu",
                       "reciprocal", "square", "silu", "sin", "cos", "tan", "arctan", "erf", "cbrt", "floor",
                       "ceil", "round_even", "round_afz"})
ALU_BINARY = frozenset({"add", "subtract", "multiply", "divide", "max", "min", "pow", "is_equal", "not_equal",
                        "is_gt", "is_ge", "is_lt", "is_le", "logical_and", "logical_or", "bitwise_and",
                        "bitwise_or", "bitwise_xor", "remainder", "shift_left", "shift_right_logical",
                        "shift_right_arith"})
# a op b == b op' a
SWAPPED: dict[str, str] = {
    "add": "add", "multiply": "multiply", "max": "max", "min": "min", "is_equal": "is_equal",
    "not_equal": "not_equal", "is_gt": "is_lt", "is_lt": "is_gt", "is_ge": "is_le", "is_le": "is_ge",
    "logical_and": "logical_and", "logical_or": "logical_or", "bitwise_and": "bitwise_and",
    "bitwise_or": "bitwise_or", "bitwise_xor": "bitwise_xor",
}
REDUCE_OPS = ("reduce_add", "reduce_max", "reduce_min", "reduce_multiply")
PRED = "pred"  # HLO pred: the machine's pred type (one byte, 0 or 1)
INT_DTYPES = frozenset({"pred", "i8", "u8", "i16", "u16", "i32", "u32", "i64", "u64"})
UNSIGNED_DTYPES = frozenset({"pred", "u8", "u16", "u32", "u64"})
# float ISA dtype -> the signed integer type of the same width (its bits, for TOTALORDER keys)
KEY_DTYPES: dict[str, str] = {"f32": "i32", "bf16": "i16", "f16": "i16", "fp8e4": "i8", "fp8e5": "i8"}

# node op -> numpy function: folding immediates at compile time (evaluate.TileEvaluator._fold)
FOLD = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide, "max": np.maximum,
    "min": np.minimum, "pow": np.power, "is_equal": np.equal, "not_equal": np.not_equal, "is_gt": np.greater,
    "is_ge": np.greater_equal, "is_lt": np.less, "is_le": np.less_equal, "logical_and": np.logical_and,
    "logical_or": np.logical_or, "negate": np.negative, "exp": np.exp, "log": np.log, "sqrt": np.sqrt,
    "tanh": np.tanh, "rsqrt": lambda x: 1 / np.sqrt(x), "reciprocal": lambda x: 1 / x,
    "square": np.square, "relu": lambda x: np.maximum(x, 0), "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "select": lambda p, a, b: np.where(p != 0, a, b), "copy": lambda x: x, "convert": lambda x: x,
    "gelu": lambda x: 0.5 * x * (1 + math.erf(float(x) / math.sqrt(2))),
    "gelu_tanh": lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))),
    "silu": lambda x: x / (1 + np.exp(-x)),
}

# The virtual buffer behind iota views: element e has the value e.
IOTA = Buffer("f32", 1 << 62, name="<iota>")


@dataclass(eq=False)
class Node:
    """One value of an expression.

    op: "leaf" (`view` with the kernel's logical dims), "iota" (`view` of IOTA), "acc" (the matmul
    accumulator), "scalar" (`value`), or an operation on `inputs`.
    """

    op: str
    dtype: str
    inputs: tuple[Node, ...] = ()
    view: View | None = None
    value: float = 0.0
    inst: HloInstruction | None = None

    @property
    def is_reduce(self) -> bool:
        return self.op in REDUCE_OPS


def where_of(node: Node) -> str:
    return node.inst.where() if node.inst is not None else f"elementwise {node.op}"


def leaf(view: View, inst: HloInstruction | None = None) -> Node:
    """A node reading `view`; constants whose elements are all equal become immediates and a pending
    cast becomes an explicit convert."""
    scalar = view.scalar_value()
    if scalar is not None:
        return Node("scalar", view.dtype, value=scalar, inst=inst)
    if view.cast is not None:
        base = Node("leaf", view.stored_dtype, view=view.with_cast(view.stored_dtype), inst=inst)
        return Node("convert", view.dtype, (base,), inst=inst)
    return Node("leaf", view.dtype, view=view, inst=inst)


def iota(dims: tuple[int, ...], axis: int, dtype: str, inst: HloInstruction | None = None) -> Node:
    """The index along `axis` of an array of `dims`."""
    strides = tuple(1 if a == axis else 0 for a in range(len(dims)))
    return Node("iota", dtype, view=View(IOTA, tuple(dims), strides), inst=inst)


def scalar(value: float, dtype: str, inst: HloInstruction | None = None) -> Node:
    """An immediate; integer values of integer types stay Python ints (exact beyond 2^53)."""
    exact = dtype in INT_DTYPES and math.isfinite(value) and float(value) == int(value)
    return Node("scalar", dtype, value=int(value) if exact else float(value), inst=inst)


def unary(op: str, x: Node, dtype: str, inst: HloInstruction | None = None) -> Node:
    """A unary node; composite ops become several nodes."""
    if op in ("convert", "copy"):
        if x.dtype == dtype:
            return x
        if dtype == PRED:  # x != 0 (NaN: true)
            return Node("not_equal", dtype, (x, scalar(0.0, x.dtype, inst)), inst=inst)
        if x.op == "scalar" and (x.dtype not in INT_DTYPES or dtype not in INT_DTYPES):
            return Node(op, dtype, (x,), inst=inst) if dtype in INT_DTYPES else scalar(x.value, dtype, inst)
        return Node(op, dtype, (x,), inst=inst)
    if op == "abs" and dtype in UNSIGNED_DTYPES:  # XLA: abs of an unsigned integer is the value itself
        return x
    if op == "abs":  # max(x, -x)
        return Node("max", dtype, (x, Node("negate", dtype, (x,), inst=inst)), inst=inst)
    if op == "sign":  # (x > 0) - (x < 0); NaN stays NaN
        zero = scalar(0.0, dtype, inst)
        sign = Node("subtract", dtype, (Node("is_gt", dtype, (x, zero), inst=inst),
                                        Node("is_lt", dtype, (x, zero), inst=inst)), inst=inst)
        if dtype in INT_DTYPES:
            return sign
        return Node("select", dtype, (Node("not_equal", PRED, (x, x), inst=inst), x, sign), inst=inst)
    if op == "is_finite":  # x - x is 0 unless x is inf or NaN
        return Node("is_equal", PRED, (Node("subtract", x.dtype, (x, x), inst=inst), scalar(0.0, x.dtype, inst)),
                    inst=inst)
    if op == "popcnt":
        return _popcnt(x, dtype, inst)
    if op == "clz":  # smear the highest set bit rightwards, then bits - popcount
        bits = isa_dtype(dtype).itemsize * 8
        shift = 1
        while shift < bits:
            x = Node("bitwise_or", dtype, (x, Node("shift_right_logical", dtype, (x, scalar(shift, dtype, inst)),
                                                   inst=inst)), inst=inst)
            shift *= 2
        return Node("subtract", dtype, (scalar(bits, dtype, inst), _popcnt(x, dtype, inst)), inst=inst)
    if op == "expm1":
        return Node("subtract", dtype, (Node("exp", dtype, (x,), inst=inst), scalar(1.0, dtype, inst)), inst=inst)
    if op == "log1p":
        return Node("log", dtype, (Node("add", dtype, (x, scalar(1.0, dtype, inst)), inst=inst),), inst=inst)
    if op == "not":
        if dtype == PRED:
            return Node("is_equal", dtype, (x, scalar(0.0, dtype, inst)), inst=inst)
        return Node("bitwise_xor", dtype, (x, scalar(-1.0, dtype, inst)), inst=inst)
    if op not in ACT_FUNCS and op != "negate":
        raise CompilationError(f"{where_of(Node(op, dtype, inst=inst))}: unary op {op!r} has no instruction mapping")
    return Node(op, dtype, (x,), inst=inst)


def binary(op: str, a: Node, b: Node, dtype: str, inst: HloInstruction | None = None) -> Node:
    """A binary node: HLO names (and/or/xor) become the logical (pred) or bitwise (int) ALU op."""
    if inst is not None and inst.opcode == "compare" and inst.attrs.get("type") == "TOTALORDER" and \
            a.dtype not in INT_DTYPES:  # -0 < +0 and NaN ordering: compare the floats' order-preserving keys
        if a.dtype not in KEY_DTYPES or b.dtype != a.dtype:
            raise CompilationError(f"{where_of(Node(op, dtype, inst=inst))}: a compare with type=TOTALORDER of "
                                   f"{a.dtype} and {b.dtype} is not supported by the backend")
        a, b = (Node("total_order_key", KEY_DTYPES[x.dtype], (x,), inst=inst) for x in (a, b))
    if op in ("and", "or", "xor"):
        if a.dtype == PRED:
            op = {"and": "logical_and", "or": "logical_or", "xor": "not_equal"}[op]
        else:
            op = f"bitwise_{op}"
    if op == "max" and b.op == "scalar" and b.value == 0.0 and a.dtype not in INT_DTYPES:
        return Node("relu", dtype, (a,), inst=inst)
    if op == "max" and a.op == "scalar" and a.value == 0.0 and b.dtype not in INT_DTYPES:
        return Node("relu", dtype, (b,), inst=inst)
    if op == "atan2":
        return _atan2(a, b, dtype, inst)
    if op == "pow" and dtype in INT_DTYPES and dtype != PRED:
        return _int_power(a, b, dtype, inst)
    if op not in ALU_BINARY:
        raise CompilationError(f"{where_of(Node(op, dtype, inst=inst))}: binary op {op!r} has no instruction mapping")
    return Node(op, dtype, (a, b), inst=inst)


def select(pred: Node, on_true: Node, on_false: Node, dtype: str, inst: HloInstruction | None = None) -> Node:
    return Node("select", dtype, (pred, on_true, on_false), inst=inst)


def clamp(lo: Node, x: Node, hi: Node, dtype: str, inst: HloInstruction | None = None) -> Node:
    return Node("min", dtype, (Node("max", dtype, (x, lo), inst=inst), hi), inst=inst)


def reduce(kind: str, x: Node, init: Node, dtype: str, inst: HloInstruction | None = None) -> Node:
    """Reduction of `x` over the kernel's free axes with `kind` in add/max/min, combined with `init`
    unless it is the identity."""
    node = Node(f"reduce_{kind}", dtype, (x,), inst=inst)
    if init.op == "scalar" and init.value == REDUCE_IDENTITY[kind]:
        return node
    return binary(kind, node, init, dtype, inst)


def walk(root: Node | list[Node]) -> list[Node]:
    """Nodes reachable from root(s), inputs before users (depth first, first input first)."""
    order: list[Node] = []
    seen: set[int] = set()
    roots = root if isinstance(root, list) else [root]
    stack: list[tuple[Node, bool]] = [(r, False) for r in reversed(roots)]
    while stack:
        node, done = stack.pop()
        if done:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        stack.extend((i, False) for i in reversed(node.inputs))
    return order


def view_nodes(root: Node | list[Node]) -> list[Node]:
    """The nodes that read a view (leaves and iotas), in walk order."""
    return [n for n in walk(root) if n.view is not None]


def substitute_views(root: Node, views: dict[int, View]) -> Node:
    """A copy of the expression whose view nodes (by id) read the given replacement views."""
    memo: dict[int, Node] = {}
    for node in walk(root):
        if node.view is not None:
            memo[id(node)] = Node(node.op, node.dtype, view=views[id(node)], inst=node.inst)
        elif node.inputs:
            memo[id(node)] = Node(node.op, node.dtype, tuple(memo[id(i)] for i in node.inputs),
                                  None, node.value, node.inst)
        else:
            memo[id(node)] = node
    return memo[id(root)]


substitute_leaves = substitute_views


def temps_needed(root: Node) -> int:
    """Temporaries one evaluation of `root` may take (TileEvaluator with a rotating pool): an output and
    up to two scratch operands per operation."""
    nodes = walk(root)
    return 3 * sum(1 for n in nodes if n.inputs or n.op == "iota") + 1


def has_reduce(root: Node) -> bool:
    return any(n.is_reduce for n in walk(root))


def varies(root: Node, axes: tuple[int, ...]) -> dict[int, bool]:
    """For every node (by id): does its value vary along any of `axes`? (acc always does.)"""
    result: dict[int, bool] = {}
    for node in walk(root):
        if node.view is not None:
            v = node.view
            result[id(node)] = any(v.strides[a] != 0 and v.dims[a] > 1 for a in axes)
        elif node.op == "acc":
            result[id(node)] = True
        elif node.is_reduce or node.op == "scalar":
            result[id(node)] = False
        else:
            result[id(node)] = any(result[id(i)] for i in node.inputs)
    return result


def _atan2(y: Node, x: Node, dtype: str, inst: HloInstruction | None) -> Node:
    """atan2(y, x) = arctan(y / x), + pi (y >= 0) or - pi (y < 0) when x < 0; +-pi/2 when x == 0 (signed by
    y; 0 when y == 0 too)."""
    def n(op: str, *inputs: Node, t: str = dtype) -> Node:
        return Node(op, t, inputs, inst=inst)

    zero, pi = scalar(0.0, dtype, inst), scalar(math.pi, dtype, inst)
    base = n("arctan", n("divide", y, x))
    shift = n("select", n("is_ge", y, zero, t=PRED), pi, scalar(-math.pi, dtype, inst))
    left = n("add", base, shift)
    half = n("multiply", n("subtract", n("is_gt", y, zero), n("is_lt", y, zero)), scalar(math.pi / 2, dtype, inst))
    return n("select", n("is_lt", x, zero, t=PRED), left, n("select", n("is_equal", x, zero, t=PRED), half, base))


def _popcnt(x: Node, dtype: str, inst: HloInstruction | None) -> Node:
    """Bit count by the SWAR steps (shifts, masks, adds, one multiply), exact in GpSimd's integer mode, where
    every step wraps to the type and right shifts are logical on its bits."""
    def n(op: str, a: Node, b: Node | float) -> Node:
        return Node(op, dtype, (a, b if isinstance(b, Node) else scalar(b, dtype, inst)), inst=inst)

    bits = isa_dtype(dtype).itemsize * 8
    x1 = n("subtract", x, n("bitwise_and", n("shift_right_logical", x, 1), _mask(0x55, bits)))
    m2 = _mask(0x33, bits)
    x2 = n("add", n("bitwise_and", x1, m2), n("bitwise_and", n("shift_right_logical", x1, 2), m2))
    x3 = n("bitwise_and", n("add", x2, n("shift_right_logical", x2, 4)), _mask(0x0F, bits))
    if bits == 8:
        return x3
    if bits == 16:
        return n("bitwise_and", n("add", x3, n("shift_right_logical", x3, 8)), 0x1F)
    return n("shift_right_logical", n("multiply", x3, _mask(0x01, bits)), bits - 8)


def _mask(byte: int, bits: int) -> int:
    """A byte repeated over `bits`, as a value of the signed type of that width (positive here)."""
    return int.from_bytes(bytes([byte]) * (bits // 8), "little")


def _int_power(x: Node, y: Node, dtype: str, inst: HloInstruction | None) -> Node:
    """Integer x ** y exactly (ints): square-and-multiply over every bit of y in GpSimd's integer mode, where each
    multiply wraps to the type. A negative y gives XLA's result: 1 for x == 1, +-1 for x == -1 (by y's parity),
    0 otherwise."""
    def n(op: str, *inputs: Node, t: str = dtype) -> Node:
        return Node(op, t, inputs, inst=inst)

    def imm(v: int) -> Node:
        return scalar(v, dtype, inst)

    bits = isa_dtype(dtype).itemsize * 8
    result, base = imm(1), x
    for k in range(bits):
        bit = n("bitwise_and", n("shift_right_logical", y, imm(k)) if k else y, imm(1))
        result = n("select", n("not_equal", bit, imm(0), t=PRED), n("multiply", result, base), result)
        if k + 1 < bits:
            base = n("multiply", base, base)
    if dtype in UNSIGNED_DTYPES:
        return result
    odd = n("not_equal", n("bitwise_and", y, imm(1)), imm(0), t=PRED)
    negative = n("select", n("is_equal", x, imm(1), t=PRED), imm(1),
                 n("select", n("is_equal", x, imm(-1), t=PRED), n("select", odd, imm(-1), imm(1)), imm(0)))
    return n("select", n("is_lt", y, imm(0), t=PRED), negative, result)


def iota_form(view: View, free: list[tuple[int, int]]) -> str:
    """How a tile of [P x free axes (axis, count), outermost first] computes an iota view:
    "vector" (constant along the free axes: one [P, 1] iota), "ramp" (the value is the flat free index:
    one iota), "scaled" (only one free axis has more than one element: an iota times its stride),
    "table" (none of those: the values must come from a constant)."""
    counted = [(a, c) for a, c in free if c > 1]
    if not any(view.strides[a] for a, _ in counted):
        return "vector"
    radix, expected = [], 1
    for a, c in reversed(free):
        radix.append((a, c, expected))
        expected *= c
    if all(view.strides[a] == r for a, c, r in radix if c > 1):
        return "ramp"
    return "scaled" if len(counted) == 1 else "table"
