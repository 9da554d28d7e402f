"""Algebraic simplification: local rewrites that remove work without changing results (XLA's
AlgebraicSimplifier, the subset that matters here).

The rules are tables of one function per opcode: data movement (dot/transpose folding, reshape, broadcast,
slice, concatenate, pad and dynamic-slice identities and chains) in simplify_shape.py, arithmetic and type
rules (neutral operands, ``x * 0`` for ints, involutions, idempotence, select, trivial reduce, convert
chains) in simplify_arith.py, a constant small integer exponent of ``power`` as multiplications in
simplify_power.py, a reduce-window spanning whole dimensions as a reduce in simplify_reduce_window.py;
each module's docstring lists its rewrites. A rule either replaces an
instruction by another one (which is then removed, as XLA's ``ReplaceInstruction`` does) or updates it in
place, keeping its name and metadata. Operands a rewrite leaves dead are left to ``dce``; chains collapse over
the iterations of the ``simplification`` fixed point.
"""

from __future__ import annotations

from compiler.passes.interface import HloPass
from compiler.passes.simplify.rewrite import Rewrite, RewriteContext
from compiler.passes.simplify.simplify_arith import ARITH_RULES
from compiler.passes.simplify.simplify_power import POWER_RULES
from compiler.passes.simplify.simplify_reduce_window import REDUCE_WINDOW_RULES
from compiler.passes.simplify.simplify_shape import SHAPE_RULES
from compiler.passes.utils import reachable_computations, replace_instruction
from hlo.ir import Computation, Instruction, Module

RULES: dict[str, Rewrite] = {**SHAPE_RULES, **ARITH_RULES, **POWER_RULES, **REDUCE_WINDOW_RULES}


class AlgebraicSimplifier(HloPass):
    name = "algebraic_simplifier"

    def run(self, module: Module) -> bool:
        changed = False
        for comp in reachable_computations(module):
            ctx = RewriteContext(module, comp)
            # A rule removes only the instruction it visits, so the snapshot stays valid.
            for inst in list(comp.instructions):
                changed |= self._simplify(ctx, comp, inst)
        return changed

    @staticmethod
    def _simplify(ctx: RewriteContext, comp: Computation, inst: Instruction) -> bool:
        rule = RULES.get(inst.opcode)
        if rule is None:
            return False
        replacement = rule(ctx, inst)
        if replacement is None:
            return False
        if replacement is not inst:
            replace_instruction(comp, inst, replacement)
        return True
