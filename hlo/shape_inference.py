"""Shape inference: the result shape of an instruction from its opcode, operand shapes and attributes.

One rule per opcode in ``RULES`` (the windowed ops are in shape_window.py, the indexing ops in
shape_indexing.py). Where the result cannot be derived from the operands (the dims of ``broadcast``/
``reshape``/``iota``, the type of ``convert``, a ``dot``/``convolution`` that widens bf16 to f32, the shape of
``parameter``/``constant``/``custom-call``) the rule takes it from ``declared``, the instruction's own shape,
after checking what can be checked. Inferred shapes carry no layout.

Attribute forms (``Instruction.attrs``; text as XLA prints it, Python value as the parser builds it)::

  iota                 iota_dimension=1                          int
  broadcast            dimensions={1}                            tuple[int, ...]  operand dim i -> result dim
  transpose            dimensions={1,0}                          tuple[int, ...]  result dim i = operand dim
  reshape              (none)
  bitcast              (none)  the operand's bytes in its layout, read in the result's layout
  slice                slice={[0:2], [0:6:2]}                    SliceSpec
  concatenate          dimensions={1}                            tuple[int, ...]  (exactly one)
  pad                  padding=1_1x0_2_1                         str  low_high[_interior] per dim, x-separated;
                                                                 negative low/high crop (parse_padding)
  compare              direction=GT                              str  EQ NE LT LE GT GE
  select               select(pred, on_true, on_false)           pred has the values' dims
  clamp                clamp(min, x, max)                        min/max: scalars or x's shape
  reduce               dimensions={1}, to_apply=%sum             operands: inputs..., init scalars...
  dot                  lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0},
                       rhs_contracting_dims={1}                  tuple[int, ...] each, absent = {}
  convolution          window={size=3x3 stride=2x2 pad=1_1x1_1 lhs_dilate=1x1 rhs_dilate=1x1},
                       dim_labels=b01f_01io->b01f, feature_group_count=1, batch_group_count=1
                       window: ir.Window (Window.make(size, stride, pad, lhs_dilate, rhs_dilate)); absent =
                       no spatial dims. dim_labels: str; lhs b(atch) f(eature), rhs i(nput) o(utput)
                       features, result b f; digit k = spatial dim k (window dim k). Group counts: int,
                       absent = 1. Result type: the operands' (or a wider declared one, as for dot).
  reduce-window        window={size=1x2x2x1 stride=1x2x2x1 pad=0_0x0_1x0_1x0_0}, to_apply=%max
                       operands: inputs..., init scalars...; one window dim per operand dim; padding and
                       base-dilation holes are skipped by the reduction (as XLA's evaluator does)
  gather               offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1,
                       slice_sizes={1,64} (+ optional operand_batching_dims={}, start_indices_batching_dims={},
                       indices_are_sorted=true); operands (operand, start_indices); index_vector_dim may equal
                       the indices' rank (implicit trailing index vector of size 1). Start indices are
                       clamped so that the slice fits, as XLA does.
                       Embedding lookup of ids s32[B] in table f32[V,D]: result f32[B,D] with
                       offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1,
                       slice_sizes={1,D}.
  scatter              update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0},
                       index_vector_dim=1, to_apply=%add (+ optional input_batching_dims={},
                       scatter_indices_batching_dims={}, indices_are_sorted=, unique_indices=)
                       operands (operand..., indices, update...); an update window that does not fit the
                       operand at its start index is dropped. to_apply returning its 2nd parameter = replace.
  dynamic-slice        dynamic-slice(operand, i0, i1, ...), dynamic_slice_sizes={1,64}; one integer scalar
                       start per dimension, clamped into 0..dim-size
  dynamic-update-slice dynamic-update-slice(operand, update, i0, i1, ...); starts clamped likewise
  get-tuple-element    index=0
  fusion               kind=kLoop, calls=%fused_computation
  call                 to_apply=%computation
  custom-call          custom_call_target="gelu"                 Quoted; result shape as declared
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod
from typing import Any

from hlo.ir import FLOAT_DTYPES, Shape, SliceSpec
from hlo.shape_control import CONTROL_RULES
from hlo.shape_indexing import INDEXING_RULES
from hlo.shape_util import (
    ANY,
    INT_DTYPES,
    LOGICAL,
    NUMERIC,
    Rule,
    ShapeInferenceError,
    arity,
    array,
    check_axes,
    computation_attr,
    dims_attr,
    fail,
    fmt,
    need_declared,
    reduction_operands,
    same_arrays,
    same_shape,
    scalar_of,
    types,
)
from hlo.shape_window import WINDOW_RULES, result_type

__all__ = ["RULES", "ShapeInferenceError", "fmt", "format_padding", "infer_shape", "parse_padding", "same_shape",
           "INT_DTYPES", "NUMERIC", "LOGICAL", "ANY", "UNARY_OPS", "BINARY_OPS", "COMPARE_DIRECTIONS"]

_TRANSCENDENTAL = ("exponential", "exponential-minus-one", "log", "log-plus-one", "tanh", "logistic", "sqrt",
                   "rsqrt", "cbrt", "erf", "sine", "cosine", "tan", "floor", "ceil", "round-nearest-even",
                   "round-nearest-afz")
UNARY_OPS: dict[str, tuple[str, ...]] = {  # opcode -> element types it accepts; result = operand shape
    "abs": NUMERIC, "negate": NUMERIC, "sign": NUMERIC, "not": LOGICAL, "copy": ANY,
    **{op: FLOAT_DTYPES for op in _TRANSCENDENTAL},
    "popcnt": INT_DTYPES, "count-leading-zeros": INT_DTYPES,
}
BINARY_OPS: dict[str, tuple[str, ...]] = {
    **{op: NUMERIC for op in ("add", "subtract", "multiply", "divide", "power", "remainder")},
    "maximum": ANY, "minimum": ANY,
    **{op: INT_DTYPES for op in ("shift-left", "shift-right-logical", "shift-right-arithmetic")},
    **{op: LOGICAL for op in ("and", "or", "xor")},
    "atan2": FLOAT_DTYPES,
}
COMPARE_DIRECTIONS = ("EQ", "NE", "LT", "LE", "GT", "GE")


# ---- rules ------------------------------------------------------------------------------------------------


def _given(opcode: str) -> Rule:
    def rule(ops, attrs, declared):
        if opcode in ("parameter", "constant"):
            arity(ops, 0)
        return need_declared(declared, opcode)

    return rule


def _iota(ops, attrs, declared):
    arity(ops, 0)
    shape = need_declared(declared, "iota")
    dim = attrs.get("iota_dimension")
    if not isinstance(dim, int) or not 0 <= dim < shape.rank:
        raise fail(f"iota_dimension={dim} is not a dimension of {fmt(shape)}")
    types(shape, NUMERIC, "result")
    return array(shape.dtype, shape.dims)


def _unary(allowed: tuple[str, ...]) -> Rule:
    def rule(ops, attrs, declared):
        arity(ops, 1)
        types(ops[0], allowed)
        return array(ops[0].dtype, ops[0].dims)

    return rule


def _is_finite(ops, attrs, declared):
    arity(ops, 1)
    types(ops[0], FLOAT_DTYPES)
    return array("pred", ops[0].dims)


def _binary(allowed: tuple[str, ...]) -> Rule:
    def rule(ops, attrs, declared):
        arity(ops, 2)
        same_arrays(ops)
        types(ops[0], allowed)
        return array(ops[0].dtype, ops[0].dims)

    return rule


def _compare(ops, attrs, declared):
    arity(ops, 2)
    same_arrays(ops)
    if attrs.get("direction") not in COMPARE_DIRECTIONS:
        raise fail(f"direction={attrs.get('direction')} is not one of {', '.join(COMPARE_DIRECTIONS)}")
    return array("pred", ops[0].dims)


def _convert(ops, attrs, declared):
    arity(ops, 1)
    return array(need_declared(declared, "convert").dtype, ops[0].dims)


def _select(ops, attrs, declared):
    arity(ops, 3)
    types(ops[0], ("pred",), "predicate")
    same_arrays(ops, 1)
    if ops[0].dims not in (ops[1].dims, ()):
        raise fail(f"predicate {fmt(ops[0])} must be a scalar or have the dims of the values {fmt(ops[1])}")
    return array(ops[1].dtype, ops[1].dims)


def _clamp(ops, attrs, declared):
    arity(ops, 3)
    lo, x, hi = ops
    types(x, NUMERIC)
    for name, bound in (("min", lo), ("max", hi)):
        if bound.dtype != x.dtype or bound.dims not in ((), x.dims):
            raise fail(f"{name} bound {fmt(bound)} must be a {x.dtype} scalar or {fmt(x)}")
    return array(x.dtype, x.dims)


def _broadcast(ops, attrs, declared):
    arity(ops, 1)
    out = need_declared(declared, "broadcast")
    mapping = dims_attr(attrs, "dimensions", ())
    (x,) = ops
    if len(mapping) != x.rank:
        raise fail(f"dimensions={{{','.join(map(str, mapping))}}} must map each of the {x.rank} operand "
                   f"dimensions of {fmt(x)}")
    check_axes(mapping, out.rank, "dimensions")
    for i, m in enumerate(mapping):
        if x.dims[i] != out.dims[m]:
            raise fail(f"operand dimension {i} (size {x.dims[i]}) maps to result dimension {m} "
                       f"(size {out.dims[m]})")
    return array(x.dtype, out.dims)


def _reshape(ops, attrs, declared):
    arity(ops, 1)
    out = need_declared(declared, "reshape")
    if prod(out.dims) != ops[0].size:
        raise fail(f"cannot reshape {fmt(ops[0])} ({ops[0].size} elements) to {list(out.dims)} "
                   f"({prod(out.dims)} elements)")
    return array(ops[0].dtype, out.dims)


def _bitcast(ops, attrs, declared):
    arity(ops, 1)
    out = need_declared(declared, "bitcast")
    if out.dtype != ops[0].dtype or prod(out.dims) != ops[0].size:
        raise fail(f"bitcast of {fmt(ops[0])} to {fmt(out)} must keep the element type and count")
    return array(out.dtype, out.dims)


def _transpose(ops, attrs, declared):
    arity(ops, 1)
    perm = dims_attr(attrs, "dimensions")
    if sorted(perm) != list(range(ops[0].rank)):
        raise fail(f"dimensions={{{','.join(map(str, perm))}}} is not a permutation of the dimensions "
                   f"of {fmt(ops[0])}")
    return array(ops[0].dtype, [ops[0].dims[p] for p in perm])


def _slice(ops, attrs, declared):
    arity(ops, 1)
    spec = attrs.get("slice")
    (x,) = ops
    if not isinstance(spec, SliceSpec) or len(spec.ranges) != x.rank:
        raise fail(f"slice= must give one [start:limit:stride] per dimension of {fmt(x)}")
    dims = []
    for i, ((start, limit, stride), size) in enumerate(zip(spec.ranges, x.dims, strict=True)):
        if not (0 <= start <= limit <= size and stride >= 1):
            raise fail(f"slice [{start}:{limit}:{stride}] of dimension {i} is outside 0..{size} "
                       "(or its stride is not positive)")
        dims.append(-(-(limit - start) // stride))
    return array(x.dtype, dims)


def _concatenate(ops, attrs, declared):
    arity(ops, 1, 1 << 30)
    dims = dims_attr(attrs, "dimensions")
    if len(dims) != 1:
        raise fail("dimensions= must name exactly one dimension")
    axis = dims[0]
    first = ops[0]
    check_axes(dims, first.rank, "dimensions")
    for i, s in enumerate(ops[1:], 1):
        other = [d for j, d in enumerate(s.dims) if j != axis]
        if s.dtype != first.dtype or s.rank != first.rank or other != [
                d for j, d in enumerate(first.dims) if j != axis]:
            raise fail(f"operand {i} {fmt(s)} does not fit operand 0 {fmt(first)} outside dimension {axis}")
    out = list(first.dims)
    out[axis] = sum(s.dims[axis] for s in ops)
    return array(first.dtype, out)


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
        raise fail(f"padding={text} is not of the form low_high[_interior]x...") from None
    if len(config) != rank:
        raise fail(f"padding={text} gives {len(config)} dimensions, the operand has {rank}")
    return config


def format_padding(config: Sequence[tuple[int, int, int]]) -> str:
    """(low, high, interior) per dimension -> XLA's ``lo_hi[_interior]x...`` (interior omitted when 0)."""
    return "x".join(f"{lo}_{hi}" + (f"_{it}" if it else "") for lo, hi, it in config)


def _pad(ops, attrs, declared):
    arity(ops, 2)
    x, value = ops
    scalar_of(value, x.dtype, "padding value")
    dims = []
    for i, ((lo, hi, interior), n) in enumerate(zip(parse_padding(attrs.get("padding"), x.rank), x.dims,
                                                    strict=True)):
        size = lo + hi + n + max(n - 1, 0) * interior
        if interior < 0 or size < 0:
            raise fail(f"padding {lo}_{hi}_{interior} of dimension {i} (size {n}) is invalid")
        dims.append(size)
    return array(x.dtype, dims)


def _reduce(ops, attrs, declared):
    inputs, inits = reduction_operands(ops)
    axes = dims_attr(attrs, "dimensions")
    check_axes(axes, inputs[0].rank, "dimensions")
    computation_attr(attrs)
    kept = [d for i, d in enumerate(inputs[0].dims) if i not in axes]
    results = [array(s.dtype, kept) for s in inputs]
    return results[0] if len(inputs) == 1 else Shape.tuple_of(results)


def _dot(ops, attrs, declared):
    arity(ops, 2)
    lhs, rhs = ops
    lc, rc = dims_attr(attrs, "lhs_contracting_dims", ()), dims_attr(attrs, "rhs_contracting_dims", ())
    lb, rb = dims_attr(attrs, "lhs_batch_dims", ()), dims_attr(attrs, "rhs_batch_dims", ())
    check_axes(lc + lb, lhs.rank, "lhs batch+contracting dims")
    check_axes(rc + rb, rhs.rank, "rhs batch+contracting dims")
    for what, a, b in (("contracting", lc, rc), ("batch", lb, rb)):
        sizes_l, sizes_r = [lhs.dims[i] for i in a], [rhs.dims[i] for i in b]
        if sizes_l != sizes_r:
            raise fail(f"{what} dimension sizes differ: lhs {sizes_l} (dims {list(a)}) vs rhs {sizes_r} "
                       f"(dims {list(b)})")
    types(lhs, NUMERIC, "lhs")
    types(rhs, NUMERIC, "rhs")
    dims = ([lhs.dims[i] for i in lb] + [d for i, d in enumerate(lhs.dims) if i not in lc + lb]
            + [d for i, d in enumerate(rhs.dims) if i not in rc + rb])
    return array(result_type(lhs.dtype, rhs.dtype, declared, "dot"), dims)


def _tuple(ops, attrs, declared):
    return Shape.tuple_of(ops)


def _get_tuple_element(ops, attrs, declared):
    if len(ops) != 1 or not ops[0].is_tuple:
        raise fail("takes one tuple operand")
    index = attrs.get("index")
    if not isinstance(index, int) or not 0 <= index < len(ops[0].tuple_shapes):
        raise fail(f"index={index} is outside the {len(ops[0].tuple_shapes)} elements of {fmt(ops[0])}")
    return ops[0].tuple_shapes[index]


def _called(key: str) -> Rule:
    """fusion (calls=) and call (to_apply=): the called computation's result."""
    def rule(ops, attrs, declared):
        comp = computation_attr(attrs, key)
        return comp.root.shape

    return rule


RULES: dict[str, Rule] = {
    "parameter": _given("parameter"), "constant": _given("constant"), "custom-call": _given("custom-call"),
    "iota": _iota, "convert": _convert, "compare": _compare, "select": _select, "clamp": _clamp,
    "broadcast": _broadcast, "reshape": _reshape, "bitcast": _bitcast, "transpose": _transpose, "slice": _slice,
    "concatenate": _concatenate, "pad": _pad, "reduce": _reduce, "dot": _dot, "tuple": _tuple,
    "get-tuple-element": _get_tuple_element, "fusion": _called("calls"), "call": _called("to_apply"),
    "is-finite": _is_finite,
    **{op: _unary(types) for op, types in UNARY_OPS.items()},
    **{op: _binary(types) for op, types in BINARY_OPS.items()},
    **WINDOW_RULES,
    **INDEXING_RULES,
    **CONTROL_RULES,
}


def infer_shape(opcode: str, operand_shapes: Sequence[Shape], attrs: dict[str, Any],
                declared: Shape | None = None) -> Shape:
    """The result shape of ``opcode`` applied to operands of ``operand_shapes`` (no layout).

    ``declared`` (the instruction's own shape) supplies what the operands do not determine; without it such
    opcodes raise. Raises ShapeInferenceError naming what does not fit."""
    rule = RULES.get(opcode)
    if rule is None:
        raise fail(f"unknown opcode '{opcode}'")
    return rule(list(operand_shapes), attrs, declared)
