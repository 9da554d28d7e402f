"""Shape rules of control flow, sorting and the integer bit ops, as XLA writes them::

  while                while(init), condition=%cond, body=%body      cond: state -> pred[]; body: state -> state
  conditional          conditional(pred, t_arg, f_arg), true_computation=%t, false_computation=%f
                       conditional(index, arg0, ..., argN-1), branch_computations={%b0, ..., %bN-1}
                       (an s32 index outside 0..N-1 runs the last branch); result = the branches' result
  sort                 sort(x0, ..., xn-1), dimensions={d}, is_stable=true, to_apply=%cmp
                       cmp takes 2n scalars (lhs_i, rhs_i per operand) and returns pred[] ("lhs < rhs")
  topk                 topk(x), k=K, largest=true -> (x's type[..., K], s32[..., K]) along the last dimension
  reverse              reverse(x), dimensions={0,2}

(popcnt, count-leading-zeros and the shifts are elementwise: shape_inference.py's UNARY_OPS and BINARY_OPS.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hlo.ir import Computation, Shape
from hlo.shape_util import (
    Rule,
    arity,
    array,
    check_axes,
    computation_attr,
    dims_attr,
    fail,
    fmt,
    int_attr,
)


def _same(a: Shape, b: Shape) -> bool:
    if a.is_tuple or b.is_tuple:
        return a.is_tuple and b.is_tuple and len(a.tuple_shapes) == len(b.tuple_shapes) and all(
            _same(x, y) for x, y in zip(a.tuple_shapes, b.tuple_shapes, strict=True))
    return (a.dtype, a.dims) == (b.dtype, b.dims)


def _takes(comp: Computation, shapes: Sequence[Shape], what: str) -> None:
    params = comp.parameters
    if len(params) != len(shapes) or not all(_same(p.shape, s) for p, s in zip(params, shapes, strict=True)):
        raise fail(f"{what} %{comp.name} must take ({', '.join(fmt(s) for s in shapes)}), it takes "
                   f"({', '.join(fmt(p.shape) for p in params)})")


def _while(ops, attrs, declared):
    if len(ops) != 1:
        raise fail(f"takes 1 operand (the loop state), got {len(ops)}")
    cond, body = computation_attr(attrs, "condition"), computation_attr(attrs, "body")
    _takes(cond, ops, "condition")
    _takes(body, ops, "body")
    if cond.root.shape.is_tuple or (cond.root.shape.dtype, cond.root.shape.dims) != ("pred", ()):
        raise fail(f"condition %{cond.name} must return pred[], it returns {fmt(cond.root.shape)}")
    if not _same(body.root.shape, ops[0]):
        raise fail(f"body %{body.name} must return {fmt(ops[0])}, it returns {fmt(body.root.shape)}")
    return ops[0]


def branches(attrs: dict[str, Any]) -> list[Computation]:
    """A conditional's branches in index order (a pred conditional: true, then false)."""
    listed = attrs.get("branch_computations")
    if listed is not None:
        if not isinstance(listed, (list, tuple)) or not listed or not all(
                isinstance(c, Computation) and c.root is not None for c in listed):
            raise fail("branch_computations= must list computations")
        return list(listed)
    return [computation_attr(attrs, "true_computation"), computation_attr(attrs, "false_computation")]


def _conditional(ops, attrs, declared):
    if not ops:
        raise fail("takes a predicate or branch index, then one operand per branch")
    comps = branches(attrs)
    selector = ops[0]
    if selector.is_tuple or selector.rank != 0 or selector.dtype not in ("pred", "s32"):
        raise fail(f"the branch selector {fmt(selector)} must be a pred or s32 scalar")
    if selector.dtype == "pred" and len(comps) != 2:
        raise fail(f"a pred selector needs 2 branches, there are {len(comps)}")
    if len(ops) != len(comps) + 1:
        raise fail(f"{len(comps)} branches take {len(comps)} operands after the selector, got {len(ops) - 1}")
    result = comps[0].root.shape
    for comp, arg in zip(comps, ops[1:], strict=True):
        _takes(comp, [arg], "branch")
        if not _same(comp.root.shape, result):
            raise fail(f"branch %{comp.name} returns {fmt(comp.root.shape)}, branch %{comps[0].name} "
                       f"{fmt(result)}")
    return result


def _sort(ops, attrs, declared):
    if not ops:
        raise fail("takes at least one operand")
    for i, s in enumerate(ops[1:], 1):
        if s.is_tuple or s.dims != ops[0].dims:
            raise fail(f"operand {i} {fmt(s)} does not have the dims of operand 0 {fmt(ops[0])}")
    (dim,) = dims_attr(attrs, "dimensions") or (None,)
    if dim is None:
        raise fail("dimensions= must name one dimension")
    check_axes((dim,), ops[0].rank, "dimensions")
    cmp = computation_attr(attrs, "to_apply")
    _takes(cmp, [Shape(s.dtype, ()) for s in ops for _ in range(2)], "comparator")
    if cmp.root.shape.is_tuple or (cmp.root.shape.dtype, cmp.root.shape.dims) != ("pred", ()):
        raise fail(f"comparator %{cmp.name} must return pred[]")
    return ops[0] if len(ops) == 1 else Shape.tuple_of([array(s.dtype, s.dims) for s in ops])


def _topk(ops, attrs, declared):
    arity(ops, 1)
    x = ops[0]
    k = int_attr(attrs, "k")
    if x.is_tuple or x.rank == 0 or not 0 <= k <= x.dims[-1]:
        raise fail(f"k={k} must be within the last dimension of {fmt(x)}")
    dims = x.dims[:-1] + (k,)
    return Shape.tuple_of([array(x.dtype, dims), array("s32", dims)])


def _reverse(ops, attrs, declared):
    arity(ops, 1)
    check_axes(dims_attr(attrs, "dimensions"), ops[0].rank, "dimensions")
    return array(ops[0].dtype, ops[0].dims)


CONTROL_RULES: dict[str, Rule] = {
    "while": _while, "conditional": _conditional, "sort": _sort, "topk": _topk, "reverse": _reverse,
}
__all__ = ["CONTROL_RULES", "branches"]
