"""Integer dots on the fp32 tensor engine, where that is exact.

PE multiplies and accumulates in fp32, exact for integers up to 2^24 in magnitude. A dot of 8-bit integers
whose contraction is short enough that no partial sum can exceed that (K * max|a| * max|b| <= 2^24) becomes
``convert(dot(convert_f32(a), convert_f32(b)))`` to the result's integer type: every product and partial sum
is an integer below 2^24, so the fp32 result is exact, and the final convert (truncation of an integral
value) is too. Wider integer dots are left for the backend, which refuses them.
"""

from __future__ import annotations

import math

from compiler.passes.interface import HloPass
from compiler.passes.utils import insert_before, new_instruction, reachable_computations
from hlo.ir import Instruction, Module, Shape
from hlo.opcodes import is_float

EXACT = 1 << 24
MAGNITUDE = {"s8": 128, "u8": 255, "pred": 1}


def exact_on_pe(dot: Instruction) -> bool:
    lhs, rhs = dot.operands
    if lhs.shape.dtype not in MAGNITUDE or rhs.shape.dtype not in MAGNITUDE:
        return False
    k = math.prod(lhs.shape.dims[d] for d in dot.attrs.get("lhs_contracting_dims", ()))
    return k * MAGNITUDE[lhs.shape.dtype] * MAGNITUDE[rhs.shape.dtype] <= EXACT


class IntegerDotExpander(HloPass):
    name = "integer_dot_expander"

    def run(self, module: Module) -> bool:
        changed = False
        for comp in reachable_computations(module):
            for dot in [i for i in comp.instructions if i.opcode == "dot" and not is_float(i.shape)]:
                if not exact_on_pe(dot):
                    continue
                floats = []
                for operand in dot.operands:
                    conv = new_instruction(module, "convert", Shape("f32", operand.shape.dims), [operand],
                                           metadata=dot.metadata, name=f"{dot.name}.f32")
                    insert_before(comp, dot, conv)
                    floats.append(conv)
                fdot = new_instruction(module, "dot", Shape("f32", dot.shape.dims), floats, dot.attrs, dot.metadata,
                                       name=f"{dot.name}.f32")
                insert_before(comp, dot, fdot)
                dot.opcode, dot.operands, dot.attrs = "convert", [fdot], {}
                changed = True
        return changed
