"""Automatic mixed precision (neuronx-cc's ``--auto-cast``): compute in bf16 or fp8 instead of fp32.

* ``matmult``: both fp32 operands of every ``dot`` and ``convolution`` get a ``convert`` to the cast type; the
  instruction keeps its fp32 result (bf16 x bf16 -> f32 is legal: the tensor engine accumulates in fp32 PSUM).
* ``all``: as ``matmult``, and every elementwise op with an fp32 result computes in the cast type: its fp32
  operands are converted, its result type becomes the cast type, and a ``convert`` back to fp32 feeds its
  users. The simplifier removes the ``convert`` pairs this leaves between consecutive ops (bf16 -> f32 -> bf16
  is exact), and constant folding folds converts of constants (weights are cast once, at compile time).
* ``none``: nothing.

Only fp32 values are cast (integers, predicates and already-narrow floats are left alone); one ``convert`` is
made per value and reused by all its users. Only the entry computation is cast: reducers and other called
computations keep their types so their signatures stay consistent.
"""

from __future__ import annotations

from compiler.options import AUTO_CASTS, PassOptionError
from compiler.passes.interface import HloPass
from compiler.passes.utils import insert_before, new_instruction
from hlo.ir import Computation, Instruction, Module
from hlo.opcodes import is_elementwise

CAST_TYPES = {"bf16": "bf16", "fp8_e4m3": "f8e4m3fn"}  # option value -> HLO element type
_MATMULS = ("dot", "convolution")


class AutoCastPass(HloPass):
    name = "auto_cast"

    def __init__(self, mode: str = "none", cast_type: str = "bf16"):
        if mode not in AUTO_CASTS:
            raise PassOptionError(f"auto_cast={mode!r} is not one of {', '.join(AUTO_CASTS)}")
        if cast_type not in CAST_TYPES:
            raise PassOptionError(f"auto_cast_type={cast_type!r} is not one of {', '.join(CAST_TYPES)}")
        self.mode = mode
        self.dtype = CAST_TYPES[cast_type]

    def run(self, module: Module) -> bool:
        comp = module.entry
        if self.mode == "none" or comp is None:
            return False
        casts: dict[int, Instruction] = {}  # uid of an fp32 value -> its convert to the cast type
        changed = False
        for inst in list(comp.instructions):
            if inst.opcode in _MATMULS:
                changed |= self._cast_operands(module, comp, inst, casts)
            elif self.mode == "all" and self._computes_in_f32(inst):
                self._cast_operands(module, comp, inst, casts)
                self._narrow_result(module, comp, inst)
                changed = True
        return changed

    @staticmethod
    def _computes_in_f32(inst: Instruction) -> bool:
        return (is_elementwise(inst) and inst.opcode != "convert" and not inst.shape.is_tuple
                and inst.shape.dtype == "f32")

    def _cast_operands(self, module: Module, comp: Computation, inst: Instruction,
                       casts: dict[int, Instruction]) -> bool:
        changed = False
        for i, op in enumerate(inst.operands):
            if op.shape.is_tuple or op.shape.dtype != "f32":
                continue
            if op.uid not in casts:
                convert = new_instruction(module, "convert", op.shape.with_dtype(self.dtype), [op],
                                          metadata=inst.metadata)
                casts[op.uid] = insert_before(comp, inst, convert)
            inst.operands[i] = casts[op.uid]
            changed = True
        return changed

    def _narrow_result(self, module: Module, comp: Computation, inst: Instruction) -> None:
        wide = inst.shape
        inst.shape = wide.with_dtype(self.dtype)
        back = new_instruction(module, "convert", wide, [inst], metadata=inst.metadata)
        comp.replace_all_uses(inst, back)  # before placing ``back``, so its own operand stays ``inst``
        comp.instructions.insert(comp.instructions.index(inst) + 1, back)
