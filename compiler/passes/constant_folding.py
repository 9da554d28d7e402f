"""Constant folding: replace an instruction whose operands are all constants by a constant of its value.

Folded opcodes: ``convert``, ``transpose``, ``reshape``, ``broadcast`` and the elementwise ops. Values are
computed by the reference interpreter (``compiler.hlo.interpreter.evaluate``) on a one-instruction module, so
folding has exactly the semantics execution would have (e.g. the rounding of f32 -> bf16 converts).

A ``broadcast`` is folded only when it broadcasts a scalar into at most 16 elements: expanding into a large
array would trade one tiny constant and a cheap broadcast for megabytes of constant data, and a broadcast
vector (a bias) is better left visible to fusion. Folded constants are placed with the other constants at the
top of the computation (the canonical order, see canonicalize.py). A folded constant
with more than 16 elements (the printer writes those to the constants side file) gets a fresh ``data`` key
derived from its operand's, e.g. ``fc1.weight.convert``, unique in the module.
"""

from __future__ import annotations

import numpy as np

from compiler.hlo.interpreter import OPS, EvaluationError, evaluate
from compiler.hlo.ir import Computation, Instruction, Module, Quoted, numpy_dtype
from compiler.hlo.printer import INLINE_LITERAL_MAX, constant_key
from compiler.pass_manager import HloPass
from compiler.passes.utils import insert_constant, is_elementwise, reachable_computations, replace_instruction

_STRUCTURAL = ("convert", "transpose", "reshape", "broadcast")


class ConstantFolding(HloPass):
    name = "constant_folding"

    def run(self, module: Module) -> bool:
        keys = {constant_key(i) for i in module.all_instructions() if i.opcode == "constant"}
        changed = False
        for comp in reachable_computations(module):
            for inst in list(comp.instructions):
                if self._foldable(inst):
                    changed |= self._fold(module, comp, inst, keys)
        return changed

    @staticmethod
    def _foldable(inst: Instruction) -> bool:
        if not inst.operands or any(op.opcode != "constant" or op.literal is None for op in inst.operands):
            return False
        if inst.shape.is_tuple or inst.called_computations():
            return False
        if inst.opcode == "broadcast":
            return inst.operands[0].shape.rank == 0 and inst.shape.size <= INLINE_LITERAL_MAX
        return (inst.opcode in _STRUCTURAL or is_elementwise(inst)) and inst.opcode in OPS

    @staticmethod
    def _fold(module: Module, comp: Computation, inst: Instruction, keys: set[str]) -> bool:
        """Replace ``inst`` by a constant; False (and no change) if the interpreter cannot evaluate it."""
        copies = {op.uid: Instruction(op.name, "constant", op.shape, literal=op.literal) for op in inst.operands}
        clone = Instruction(inst.name, inst.opcode, inst.shape, [copies[op.uid] for op in inst.operands],
                            dict(inst.attrs))
        scratch = Module("constant_folding", [Computation("fold", [*copies.values(), clone], clone)])
        try:
            (value,) = evaluate(scratch, [])
        except EvaluationError:
            return False  # e.g. a custom-call without a table entry: it stays for the backend to reject
        literal = np.asarray(value).astype(numpy_dtype(inst.shape.dtype), copy=False).reshape(inst.shape.dims)
        attrs = {}
        if literal.size > INLINE_LITERAL_MAX:
            big = [op for op in inst.operands if op.literal.size > INLINE_LITERAL_MAX]
            base = f"{constant_key(big[0])}.{inst.opcode}" if big else inst.name
            key, n = base, 0
            while key in keys:
                n += 1
                key = f"{base}.{n}"
            keys.add(key)
            attrs["data"] = Quoted(key)
        folded = Instruction(module.unique_name("constant"), "constant", inst.shape, [], attrs, literal=literal,
                             metadata=dict(inst.metadata))
        insert_constant(comp, folded)
        replace_instruction(comp, inst, folded)
        return True
