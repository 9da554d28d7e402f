"""The algebraic simplifier's ``power`` rule: a constant small integer exponent becomes multiplications, as
XLA's ``AlgebraicSimplifierVisitor::HandlePower`` writes it (see algebraic_simplifier.py for the pass).

* ``pow(x, 0)`` -> ones (every type: ``x ** 0`` is 1 for any x, NaN included).
* ``pow(x, 1)`` -> ``x``.
* ``pow(x, 2)`` -> ``x * x``.
* ``pow(x, 3)`` -> ``x * (x * x)`` (GELU's cube).
* ``pow(x, -1)`` -> ``1 / x``, floating types only: on integers XLA's ``power`` gives 0 for ``0 ** -1`` where
  the integer ``1 / 0`` is -1 (our interpreter follows XLA's integer semantics exactly, so the rule would change
  a result there).

The exponent is a constant, or a broadcast of one, whose elements all hold that value. The multiplications
round differently from a correctly rounded ``pow`` (one or two roundings), as XLA's rewrite does; on integers
they are exact with the same wrap-around. XLA's other power rules are not taken: ``pow(exp(a), b)`` ->
``exp(a * b)`` and ``pow(x, 0.5)`` -> ``sqrt(x)`` for an ``x`` known to be non-negative (no sign analysis here).
"""

from __future__ import annotations

from compiler.passes.simplify.rewrite import RewriteContext, in_place, interchangeable
from compiler.passes.utils import constant_value
from hlo.ir import Instruction, numpy_dtype


def power(ctx: RewriteContext, inst: Instruction) -> Instruction | None:
    x, exponent = inst.operands
    value = constant_value(exponent)
    if value is None or x.shape.dtype != inst.shape.dtype or x.shape.dims != inst.shape.dims:
        return None
    if value == 0.0:
        return ctx.filled(inst, 1, inst.shape)
    if value == 1.0:
        return x if interchangeable(inst, x) else None
    if value == 2.0:
        return in_place(inst, "multiply", [x, x], {})
    if value == 3.0:
        square = ctx.add_before(inst, "multiply", inst.shape, [x, x])
        return in_place(inst, "multiply", [x, square], {})
    if value == -1.0 and numpy_dtype(inst.shape.dtype).kind in "fcV":
        return in_place(inst, "divide", [ctx.filled(inst, 1, inst.shape), x], {})
    return None


POWER_RULES = {"power": power}
