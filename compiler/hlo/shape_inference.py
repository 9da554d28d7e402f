"""Shape inference: the result shape of an instruction from its opcode, operand shapes and attributes.

One rule per opcode in ``RULES``. Where the result cannot be derived from the operands (the dims of
``broadcast``/``reshape``/``iota``, the type of ``convert``, a ``dot`` that widens bf16 to f32, the shape of
``parameter``/``constant``/``custom-call``) the rule takes it from ``declared``, the instruction's own shape,
after checking what can be checked. Inferred shapes carry no layout.

``pad`` reads XLA's padding syntax from its ``padding`` attribute (a bare string): per dimension
``low_high`` or ``low_high_interior``, dimensions separated by ``x`` (``0_1x2_3_1``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from math import prod
from typing import Any

from compiler.errors import VerificationError
from compiler.hlo.ir import FLOAT_DTYPES, Computation, Shape, SliceSpec, numpy_dtype


class ShapeInferenceError(VerificationError):
    """An instruction's operands or attributes do not fit its opcode."""


INT_DTYPES = ("s8", "s16", "s32", "s64", "u8", "u32")
NUMERIC = FLOAT_DTYPES + INT_DTYPES
LOGICAL = ("pred",) + INT_DTYPES
ANY = ("pred",) + NUMERIC

UNARY_OPS: dict[str, tuple[str, ...]] = {  # opcode -> element types it accepts; result = operand shape
    "abs": NUMERIC, "negate": NUMERIC, "sign": NUMERIC, "not": LOGICAL, "copy": ANY,
    **{op: FLOAT_DTYPES for op in ("exponential", "log", "tanh", "logistic", "sqrt", "rsqrt", "erf", "sine",
                                   "cosine", "floor", "ceil", "round-nearest-even", "round-nearest-afz")},
}
BINARY_OPS: dict[str, tuple[str, ...]] = {
    **{op: NUMERIC for op in ("add", "subtract", "multiply", "divide", "maximum", "minimum", "power",
                              "remainder")},
    **{op: LOGICAL for op in ("and", "or", "xor")},
}
COMPARE_DIRECTIONS = ("EQ", "NE", "LT", "LE", "GT", "GE")

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


def _fail(message: str) -> ShapeInferenceError:
    return ShapeInferenceError(message)


def _arity(ops: list[Shape], low: int, high: int | None = None) -> None:
    high = low if high is None else high
    if not low <= len(ops) <= high:
        want = str(low) if low == high else f"{low}..{high}" if high < 1 << 30 else f"at least {low}"
        raise _fail(f"takes {want} operand(s), got {len(ops)}")
    for i, s in enumerate(ops):
        if s.is_tuple:
            raise _fail(f"operand {i} is the tuple {fmt(s)}, an array is needed")


def _types(op: Shape, allowed: tuple[str, ...], what: str = "operand") -> None:
    if op.dtype not in allowed:
        raise _fail(f"{what} type {op.dtype} is not allowed (allowed: {', '.join(allowed)})")


def _need_declared(declared: Shape | None, opcode: str) -> Shape:
    if declared is None:
        raise _fail(f"the result shape of {opcode} cannot be inferred; the declared shape is needed")
    return declared


def _dims_attr(attrs: dict[str, Any], key: str, default: tuple[int, ...] | None = None) -> tuple[int, ...]:
    value = attrs.get(key, default)
    if value is None:
        raise _fail(f"missing attribute {key}={{...}}")
    if not isinstance(value, tuple | list) or not all(isinstance(v, int) for v in value):
        raise _fail(f"attribute {key} must be a list of integers such as {{1,0}}, got {value!r}")
    return tuple(value)


def _check_axes(axes: Sequence[int], rank: int, what: str) -> None:
    if len(set(axes)) != len(axes) or any(not 0 <= a < rank for a in axes):
        raise _fail(f"{what}={{{','.join(map(str, axes))}}} must be distinct dimensions in 0..{rank - 1}")


def _array(dtype: str, dims: Sequence[int]) -> Shape:
    return Shape(dtype, tuple(int(d) for d in dims))


# ---- rules ------------------------------------------------------------------------------------------------


def _given(opcode: str) -> Rule:
    def rule(ops, attrs, declared):
        if opcode == "parameter":
            _arity(ops, 0)
        return _need_declared(declared, opcode)

    return rule


def _iota(ops, attrs, declared):
    _arity(ops, 0)
    shape = _need_declared(declared, "iota")
    dim = attrs.get("iota_dimension")
    if not isinstance(dim, int) or not 0 <= dim < shape.rank:
        raise _fail(f"iota_dimension={dim} is not a dimension of {fmt(shape)}")
    _types(shape, NUMERIC, "result")
    return _array(shape.dtype, shape.dims)


def _unary(allowed: tuple[str, ...]) -> Rule:
    def rule(ops, attrs, declared):
        _arity(ops, 1)
        _types(ops[0], allowed)
        return _array(ops[0].dtype, ops[0].dims)

    return rule


def _same(ops: list[Shape], first: int = 0) -> None:
    for i in range(first + 1, len(ops)):
        if (ops[i].dtype, ops[i].dims) != (ops[first].dtype, ops[first].dims):
            raise _fail(f"operand {i} is {fmt(ops[i])} but operand {first} is {fmt(ops[first])}; "
                        "they must be equal")


def _binary(allowed: tuple[str, ...]) -> Rule:
    def rule(ops, attrs, declared):
        _arity(ops, 2)
        _same(ops)
        _types(ops[0], allowed)
        return _array(ops[0].dtype, ops[0].dims)

    return rule


def _compare(ops, attrs, declared):
    _arity(ops, 2)
    _same(ops)
    if attrs.get("direction") not in COMPARE_DIRECTIONS:
        raise _fail(f"direction={attrs.get('direction')} is not one of {', '.join(COMPARE_DIRECTIONS)}")
    return _array("pred", ops[0].dims)


def _convert(ops, attrs, declared):
    _arity(ops, 1)
    return _array(_need_declared(declared, "convert").dtype, ops[0].dims)


def _select(ops, attrs, declared):
    _arity(ops, 3)
    _types(ops[0], ("pred",), "predicate")
    _same(ops, 1)
    if ops[0].dims != ops[1].dims:
        raise _fail(f"predicate {fmt(ops[0])} and values {fmt(ops[1])} have different dims")
    return _array(ops[1].dtype, ops[1].dims)


def _clamp(ops, attrs, declared):
    _arity(ops, 3)
    lo, x, hi = ops
    for name, bound in (("min", lo), ("max", hi)):
        if bound.dtype != x.dtype or bound.dims not in ((), x.dims):
            raise _fail(f"{name} bound {fmt(bound)} must be a {x.dtype} scalar or {fmt(x)}")
    return _array(x.dtype, x.dims)


def _broadcast(ops, attrs, declared):
    _arity(ops, 1)
    out = _need_declared(declared, "broadcast")
    mapping = _dims_attr(attrs, "dimensions", ())
    (x,) = ops
    if len(mapping) != x.rank:
        raise _fail(f"dimensions={{{','.join(map(str, mapping))}}} must map each of the {x.rank} operand "
                    f"dimensions of {fmt(x)}")
    _check_axes(mapping, out.rank, "dimensions")
    for i, m in enumerate(mapping):
        if x.dims[i] != out.dims[m]:
            raise _fail(f"operand dimension {i} (size {x.dims[i]}) maps to result dimension {m} "
                        f"(size {out.dims[m]})")
    return _array(x.dtype, out.dims)


def _reshape(ops, attrs, declared):
    _arity(ops, 1)
    out = _need_declared(declared, "reshape")
    if prod(out.dims) != ops[0].size:
        raise _fail(f"cannot reshape {fmt(ops[0])} ({ops[0].size} elements) to {list(out.dims)} "
                    f"({prod(out.dims)} elements)")
    return _array(ops[0].dtype, out.dims)


def _transpose(ops, attrs, declared):
    _arity(ops, 1)
    perm = _dims_attr(attrs, "dimensions")
    if sorted(perm) != list(range(ops[0].rank)):
        raise _fail(f"dimensions={{{','.join(map(str, perm))}}} is not a permutation of the dimensions "
                    f"of {fmt(ops[0])}")
    return _array(ops[0].dtype, [ops[0].dims[p] for p in perm])


def _slice(ops, attrs, declared):
    _arity(ops, 1)
    spec = attrs.get("slice")
    (x,) = ops
    if not isinstance(spec, SliceSpec) or len(spec.ranges) != x.rank:
        raise _fail(f"slice= must give one [start:limit:stride] per dimension of {fmt(x)}")
    dims = []
    for i, ((start, limit, stride), size) in enumerate(zip(spec.ranges, x.dims, strict=True)):
        if not (0 <= start <= limit <= size and stride >= 1):
            raise _fail(f"slice [{start}:{limit}:{stride}] of dimension {i} is outside 0..{size} "
                        "(or its stride is not positive)")
        dims.append(-(-(limit - start) // stride))
    return _array(x.dtype, dims)


def _concatenate(ops, attrs, declared):
    _arity(ops, 1, 1 << 30)
    dims = _dims_attr(attrs, "dimensions")
    if len(dims) != 1:
        raise _fail("dimensions= must name exactly one dimension")
    axis = dims[0]
    first = ops[0]
    _check_axes(dims, first.rank, "dimensions")
    for i, s in enumerate(ops[1:], 1):
        other = [d for j, d in enumerate(s.dims) if j != axis]
        if s.dtype != first.dtype or s.rank != first.rank or other != [
                d for j, d in enumerate(first.dims) if j != axis]:
            raise _fail(f"operand {i} {fmt(s)} does not fit operand 0 {fmt(first)} outside dimension {axis}")
    out = list(first.dims)
    out[axis] = sum(s.dims[axis] for s in ops)
    return _array(first.dtype, out)


def parse_padding(text: Any, rank: int) -> list[tuple[int, int, int]]:
    """XLA padding ``lo_hi[_interior]x...`` -> (low, high, interior) per dimension."""
    if rank == 0 and text in (None, ""):
        return []
    try:
        config = []
        for part in str(text).split("x"):
            nums = [int(n) for n in part.replace("_-", " -").replace("_", " ").split()]
            if len(nums) not in (2, 3):
                raise ValueError
            config.append((nums[0], nums[1], nums[2] if len(nums) == 3 else 0))
    except ValueError:
        raise _fail(f"padding={text} is not of the form low_high[_interior]x...") from None
    if len(config) != rank:
        raise _fail(f"padding={text} gives {len(config)} dimensions, the operand has {rank}")
    return config


def format_padding(config: Sequence[tuple[int, int, int]]) -> str:
    """(low, high, interior) per dimension -> XLA's ``lo_hi[_interior]x...`` (interior omitted when 0)."""
    return "x".join(f"{lo}_{hi}" + (f"_{it}" if it else "") for lo, hi, it in config)


def _pad(ops, attrs, declared):
    _arity(ops, 2)
    x, value = ops
    if value.rank != 0 or value.dtype != x.dtype:
        raise _fail(f"padding value {fmt(value)} must be a {x.dtype} scalar")
    dims = []
    for i, ((lo, hi, interior), n) in enumerate(zip(parse_padding(attrs.get("padding"), x.rank), x.dims,
                                                    strict=True)):
        size = lo + hi + n + max(n - 1, 0) * interior
        if interior < 0 or size < 0:
            raise _fail(f"padding {lo}_{hi}_{interior} of dimension {i} (size {n}) is invalid")
        dims.append(size)
    return _array(x.dtype, dims)


def _reduce(ops, attrs, declared):
    if len(ops) < 2 or len(ops) % 2:
        raise _fail(f"takes inputs and as many init values, got {len(ops)} operands")
    _arity(ops, len(ops))
    n = len(ops) // 2
    inputs, inits = ops[:n], ops[n:]
    for i, s in enumerate(inputs[1:], 1):
        if s.dims != inputs[0].dims:
            raise _fail(f"input {i} {fmt(s)} and input 0 {fmt(inputs[0])} have different dims")
    for i, (s, init) in enumerate(zip(inputs, inits, strict=True)):
        if init.rank != 0 or init.dtype != s.dtype:
            raise _fail(f"init value {i} {fmt(init)} must be a {s.dtype} scalar")
    axes = _dims_attr(attrs, "dimensions")
    _check_axes(axes, inputs[0].rank, "dimensions")
    if not isinstance(attrs.get("to_apply"), Computation):
        raise _fail("missing to_apply=%computation")
    kept = [d for i, d in enumerate(inputs[0].dims) if i not in axes]
    results = [_array(s.dtype, kept) for s in inputs]
    return results[0] if n == 1 else Shape.tuple_of(results)


def _float_rank(dtype: str) -> tuple[int, int]:
    """Orders types by width for dot's result check (ints and floats never mix)."""
    return (dtype in FLOAT_DTYPES, numpy_dtype(dtype).itemsize)


def _dot(ops, attrs, declared):
    _arity(ops, 2)
    lhs, rhs = ops
    lc, rc = _dims_attr(attrs, "lhs_contracting_dims", ()), _dims_attr(attrs, "rhs_contracting_dims", ())
    lb, rb = _dims_attr(attrs, "lhs_batch_dims", ()), _dims_attr(attrs, "rhs_batch_dims", ())
    _check_axes(lc + lb, lhs.rank, "lhs batch+contracting dims")
    _check_axes(rc + rb, rhs.rank, "rhs batch+contracting dims")
    for what, a, b in (("contracting", lc, rc), ("batch", lb, rb)):
        sizes_l, sizes_r = [lhs.dims[i] for i in a], [rhs.dims[i] for i in b]
        if sizes_l != sizes_r:
            raise _fail(f"{what} dimension sizes differ: lhs {sizes_l} (dims {list(a)}) vs rhs {sizes_r} "
                        f"(dims {list(b)})")
    _types(lhs, NUMERIC, "lhs")
    _types(rhs, NUMERIC, "rhs")
    if (lhs.dtype in FLOAT_DTYPES) != (rhs.dtype in FLOAT_DTYPES):
        raise _fail(f"dot mixes {lhs.dtype} and {rhs.dtype}")
    widest = max(lhs.dtype, rhs.dtype, key=_float_rank)
    dtype = widest if declared is None else declared.dtype
    if _float_rank(dtype)[0] != _float_rank(widest)[0] or _float_rank(dtype) < _float_rank(widest):
        raise _fail(f"dot result type {dtype} is narrower than (or of another kind than) its operands "
                    f"{lhs.dtype} x {rhs.dtype}")
    dims = ([lhs.dims[i] for i in lb] + [d for i, d in enumerate(lhs.dims) if i not in lc + lb]
            + [d for i, d in enumerate(rhs.dims) if i not in rc + rb])
    return _array(dtype, dims)


def _tuple(ops, attrs, declared):
    return Shape.tuple_of(ops)


def _get_tuple_element(ops, attrs, declared):
    if len(ops) != 1 or not ops[0].is_tuple:
        raise _fail("takes one tuple operand")
    index = attrs.get("index")
    if not isinstance(index, int) or not 0 <= index < len(ops[0].tuple_shapes):
        raise _fail(f"index={index} is outside the {len(ops[0].tuple_shapes)} elements of {fmt(ops[0])}")
    return ops[0].tuple_shapes[index]


def _fusion(ops, attrs, declared):
    comp = attrs.get("calls")
    if not isinstance(comp, Computation) or comp.root is None:
        raise _fail("missing calls=%computation (with a ROOT)")
    return comp.root.shape


RULES: dict[str, Rule] = {
    "parameter": _given("parameter"), "constant": _given("constant"), "custom-call": _given("custom-call"),
    "iota": _iota, "convert": _convert, "compare": _compare, "select": _select, "clamp": _clamp,
    "broadcast": _broadcast, "reshape": _reshape, "transpose": _transpose, "slice": _slice,
    "concatenate": _concatenate, "pad": _pad, "reduce": _reduce, "dot": _dot, "tuple": _tuple,
    "get-tuple-element": _get_tuple_element, "fusion": _fusion,
    **{op: _unary(types) for op, types in UNARY_OPS.items()},
    **{op: _binary(types) for op, types in BINARY_OPS.items()},
}


def infer_shape(opcode: str, operand_shapes: Sequence[Shape], attrs: dict[str, Any],
                declared: Shape | None = None) -> Shape:
    """The result shape of ``opcode`` applied to operands of ``operand_shapes`` (no layout).

    ``declared`` (the instruction's own shape) supplies what the operands do not determine; without it such
    opcodes raise. Raises ShapeInferenceError naming what does not fit."""
    rule = RULES.get(opcode)
    if rule is None:
        raise _fail(f"unknown opcode '{opcode}'")
    return rule(list(operand_shapes), attrs, declared)
