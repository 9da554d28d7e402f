"""Canonicalization: one spelling for equivalent HLO, so later passes match fewer patterns.

The canonical form:

1. **Order.** In every computation, parameters come first (by number), then constants, then the other
   instructions in their existing (defs-before-uses) order. Parameters and constants have no operands, so
   hoisting them never breaks the order; dumps of equivalent modules then diff cleanly.
2. **Constants on the right.** A commutative binary op (add, multiply, maximum, minimum, and, or, xor) whose
   left operand is constant-like (a constant or a broadcast of one) and right operand is not gets its operands
   swapped: ``add(broadcast(c), x)`` -> ``add(x, broadcast(c))``. A ``compare`` is swapped the same way with its
   direction mirrored (``LT`` <-> ``GT``, ``LE`` <-> ``GE``).

Dot operand order is deliberately left alone: swapping the operands of a dot permutes its result, which would
need a transpose after it, and the algebraic simplifier already folds transposes into the contracting dims.
"""

from __future__ import annotations

from compiler.passes.interface import HloPass
from compiler.passes.utils import is_constant_like, reachable_computations
from hlo.ir import Computation, Instruction, Module
from hlo.opcodes import COMMUTATIVE

_MIRRORED = {"LT": "GT", "GT": "LT", "LE": "GE", "GE": "LE", "EQ": "EQ", "NE": "NE"}


class Canonicalize(HloPass):
    name = "canonicalize"

    def run(self, module: Module) -> bool:
        changed = False
        for comp in reachable_computations(module):
            changed |= self._hoist(comp)
            for inst in comp.instructions:
                changed |= self._constants_right(inst)
        return changed

    @staticmethod
    def _hoist(comp: Computation) -> bool:
        params = comp.parameters
        constants = [i for i in comp.instructions if i.opcode == "constant"]
        rest = [i for i in comp.instructions if i.opcode not in ("parameter", "constant")]
        order = params + constants + rest
        if all(a is b for a, b in zip(order, comp.instructions, strict=True)):
            return False
        comp.instructions = order
        return True

    @staticmethod
    def _constants_right(inst: Instruction) -> bool:
        if len(inst.operands) != 2:
            return False
        lhs, rhs = inst.operands
        if not is_constant_like(lhs) or is_constant_like(rhs):
            return False
        if inst.opcode in COMMUTATIVE:
            inst.operands = [rhs, lhs]
            return True
        direction = inst.attrs.get("direction")
        if inst.opcode == "compare" and isinstance(direction, str) and direction in _MIRRORED:
            inst.operands = [rhs, lhs]
            inst.attrs["direction"] = _MIRRORED[direction]
            return True
        return False
