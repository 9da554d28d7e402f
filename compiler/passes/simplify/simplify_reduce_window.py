"""The algebraic simplifier's ``reduce-window`` rule: a window that spans whole dimensions is a reduce, as
XLA's ``AlgebraicSimplifierVisitor::HandleReduceWindow`` rewrites it (see algebraic_simplifier.py for the pass).

When every dimension of the window either covers its whole input dimension (any stride: one window fits) or is
trivial (size 1, stride 1), with no padding and no dilation, the result is ``reshape(reduce(x, init))`` over the
covered dimensions: the same elements and init value, combined by the same reducer. Global average pooling
(ResNet's ``adaptive_avg_pool2d`` to 1x1) is the case that matters: as a reduce, its divide and convert fuse
with it into one row-reduction kernel instead of a pooling kernel and an elementwise one with HBM between them.
Float sums are reassociated (the kernels' order differs from a sequential one anyway).
"""

from __future__ import annotations

from compiler.passes.simplify.rewrite import RewriteContext, in_place
from hlo.ir import Computation, Instruction, Shape, Window


def reduce_window(ctx: RewriteContext, inst: Instruction) -> Instruction | None:
    window, reducer = inst.attrs.get("window"), inst.attrs.get("to_apply")
    if len(inst.operands) != 2 or not isinstance(window, Window) or not isinstance(reducer, Computation):
        return None
    x, init = inst.operands
    covered = []
    for axis, (n, w) in enumerate(zip(x.shape.dims, window.dims, strict=True)):
        if w.pad_low or w.pad_high or w.lhs_dilate != 1 or w.rhs_dilate != 1 or w.reversal:
            return None
        if w.size == n and n > 1:
            covered.append(axis)
        elif w.size != 1 or w.stride != 1:
            return None
    if not covered:
        return None
    kept = tuple(n for axis, n in enumerate(x.shape.dims) if axis not in covered)
    reduced = ctx.add_before(inst, "reduce", Shape(inst.shape.dtype, kept), [x, init],
                             {"dimensions": tuple(covered), "to_apply": reducer})
    return in_place(inst, "reshape", [reduced], {})


REDUCE_WINDOW_RULES = {"reduce-window": reduce_window}
