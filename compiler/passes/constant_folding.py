"""Constant folding: replace an instruction whose operands are all constants by a constant of its value.

Any opcode the interpreter knows is folded when all its operands are constants -- the elementwise ops,
``convert``, ``transpose``, ``reshape``, ``slice``, ``concatenate``, ``pad``, ``reduce``, ``dot``,
``convolution``, ``gather``... -- provided the result is no larger than its largest operand (or has at most
16 elements): folding never turns a small computation into a large constant. Values are computed by the
reference interpreter (``compiler.hlo.interpreter.evaluate``) on a one-instruction module, so folding has
exactly the semantics execution would have (e.g. the rounding of f32 -> bf16 converts).

Never folded: ``iota`` and ``broadcast`` into more than 16 elements (XLA leaves them too: they are cheap to
compute and would expand into large constants; a broadcast vector such as a bias is better left visible to
fusion), tuple-shaped results, fusions and calls (their computations are simplified in place), and
custom-calls the interpreter has no table entry for. Folded constants are placed with the other constants at the
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
from compiler.passes.utils import insert_constant, reachable_computations, replace_instruction

_NEVER = frozenset({"parameter", "constant", "iota", "fusion", "call", "tuple", "get-tuple-element"})


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
        if inst.opcode in _NEVER or inst.opcode not in OPS or inst.shape.is_tuple:
            return False
        if not inst.operands or any(op.opcode != "constant" or op.literal is None for op in inst.operands):
            return False
        if inst.opcode == "broadcast":
            return inst.shape.size <= INLINE_LITERAL_MAX
        return inst.shape.size <= max(INLINE_LITERAL_MAX, *(op.shape.size for op in inst.operands))

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
