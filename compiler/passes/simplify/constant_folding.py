"""Constant folding: replace an instruction whose operands are all constants by a constant of its value.

Any opcode the interpreter knows is folded when all its operands are constants -- the elementwise ops,
``convert``, ``transpose``, ``reshape``, ``slice``, ``concatenate``, ``pad``, ``reduce``, ``dot``,
``convolution``, ``gather``... -- provided the result is no larger than its largest operand (or has at most
16 elements): folding never turns a small computation into a large constant. Values are computed by the
reference interpreter (``hlo.interpreter.evaluate``) on a one-instruction module, so folding has
exactly the semantics execution would have (e.g. the rounding of f32 -> bf16 converts).

Never folded: ``iota`` and ``broadcast`` into more than 16 elements (XLA leaves them too: they are cheap to
compute and would expand into large constants; a broadcast vector such as a bias is better left visible to
fusion), tuple-shaped results, fusions and calls (their computations are simplified in place), and
custom-calls the interpreter has no table entry for. Folded constants are placed with the other constants at the
top of the computation (the canonical order, see canonicalize.py). A folded constant
with more than 16 elements (the printer writes those to the constants side file) gets a fresh ``data`` key
derived from its operand's, e.g. ``fc1.weight.convert``, unique in the module.

Shape-only chains. A value computed from constants, iotas and broadcasts alone (no parameter anywhere in its
operands, transitively) -- position ids, token-type ids, masks built by ``arange``/``ones``/``expand`` then
``cumsum``, ``gather``, ``compare``/``select``... -- is also folded, whole, by the interpreter when:

* the chain contains a non-trivial op: anything but iota, broadcast, data movement (reshape, transpose,
  slice, concatenate, pad, reverse, copy, bitcast), convert and cheap elementwise arithmetic (``_TRIVIAL``).
  A chain of those only (``arange(1, n+1)`` = iota + broadcast) stays: it is cheap for the backend and
  readable as what it is;
* only the chain's *root* is folded (a chain value used by some instruction outside the chain, or the
  computation's result); its interior becomes dead and is left to DCE;
* the folded result has at most ``CHAIN_FOLD_MAX`` (65536) elements;
* a broadcast is never folded by this rule, and a chain value read by a broadcast is a root: the chain is cut
  below the broadcast, so a large broadcast stays a broadcast of a (folded) small constant that its consumers
  can still read as a broadcast.
"""

from __future__ import annotations

import numpy as np

from compiler.passes.interface import HloPass
from compiler.passes.utils import insert_constant, reachable_computations, replace_instruction
from hlo.interpreter import OPS, EvaluationError, evaluate
from hlo.ir import Computation, Instruction, Module, Quoted, numpy_dtype
from hlo.printer import INLINE_LITERAL_MAX, constant_key
from hlo.provenance import merge_provenance

_NEVER = frozenset({"parameter", "constant", "iota", "fusion", "call", "tuple", "get-tuple-element"})

CHAIN_FOLD_MAX = 65536  # elements of a folded shape-only chain's result
# ops that alone do not make a shape-only chain worth folding (see the module docstring)
_TRIVIAL = frozenset({"constant", "iota", "broadcast", "reshape", "bitcast", "copy", "transpose", "slice",
                      "concatenate", "pad", "reverse", "convert", "add", "subtract", "multiply", "divide",
                      "negate", "abs", "maximum", "minimum"})


class ConstantFolding(HloPass):
    name = "constant_folding"

    def run(self, module: Module) -> bool:
        keys = {constant_key(i) for i in module.all_instructions() if i.opcode == "constant"}
        changed = False
        for comp in reachable_computations(module):
            for inst in list(comp.instructions):
                if self._foldable(inst):
                    changed |= self._fold(module, comp, inst, keys)
            changed |= self._fold_chains(module, comp, keys)
        return changed

    @staticmethod
    def _fold_chains(module: Module, comp: Computation, keys: set[str]) -> bool:
        """Fold the roots of shape-only chains (constants, iotas, broadcasts; no parameter) that contain a
        non-trivial op and give at most ``CHAIN_FOLD_MAX`` elements."""
        nontrivial: dict[int, bool] = {}  # uid of each shape-only value -> its chain holds a non-trivial op
        for inst in comp.instructions:  # operands come first
            if inst.opcode == "constant":
                if inst.literal is not None:
                    nontrivial[inst.uid] = False
            elif inst.opcode == "iota":
                nontrivial[inst.uid] = False
            elif (inst.opcode not in _NEVER and inst.opcode in OPS and inst.opcode != "custom-call"
                  and not inst.shape.is_tuple and inst.operands
                  and all(op.uid in nontrivial for op in inst.operands)):
                nontrivial[inst.uid] = inst.opcode not in _TRIVIAL or any(nontrivial[op.uid] for op in inst.operands)

        def candidate(inst: Instruction) -> bool:
            return (nontrivial.get(inst.uid, False) and inst.opcode != "broadcast"
                    and inst.shape.size <= CHAIN_FOLD_MAX)

        users = comp.users()
        roots = [i for i in comp.instructions if candidate(i)
                 and (i is comp.root or any(not candidate(u) for u in users.get(i, [])))]
        changed = False
        for root in roots:
            changed |= ConstantFolding._fold(module, comp, root, keys, chain=True)
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
    def _fold(module: Module, comp: Computation, inst: Instruction, keys: set[str], chain: bool = False) -> bool:
        """Replace ``inst`` by a constant; False (and no change) if the interpreter cannot evaluate it. With
        ``chain``, ``inst``'s whole operand graph (constants, iotas and what they feed) is evaluated."""
        if chain:
            needed: set[int] = set()
            stack = [inst]
            while stack:
                cur = stack.pop()
                if cur.uid not in needed:
                    needed.add(cur.uid)
                    stack.extend(cur.operands)
            clones: dict[int, Instruction] = {}
            for i in comp.instructions:
                if i.uid in needed:
                    clones[i.uid] = Instruction(i.name, i.opcode, i.shape, [clones[op.uid] for op in i.operands],
                                                dict(i.attrs), literal=i.literal)
            body = list(clones.values())
            clone = clones[inst.uid]
        else:
            copies = {op.uid: Instruction(op.name, "constant", op.shape, literal=op.literal)
                      for op in inst.operands}
            clone = Instruction(inst.name, inst.opcode, inst.shape, [copies[op.uid] for op in inst.operands],
                                dict(inst.attrs))
            body = [*copies.values(), clone]
        scratch = Module("constant_folding", [Computation("fold", body, clone)])
        try:
            (value,) = evaluate(scratch, [])
        except EvaluationError:
            return False  # e.g. a custom-call without a table entry: it stays for the backend to reject
        literal = np.asarray(value).astype(numpy_dtype(inst.shape.dtype), copy=False).reshape(inst.shape.dims)
        attrs = {}
        if literal.size > INLINE_LITERAL_MAX:
            big = [op for op in inst.operands
                   if op.opcode == "constant" and op.literal is not None and op.literal.size > INLINE_LITERAL_MAX]
            base = f"{constant_key(big[0])}.{inst.opcode}" if big else inst.name
            key, n = base, 0
            while key in keys:
                n += 1
                key = f"{base}.{n}"
            keys.add(key)
            attrs["data"] = Quoted(key)
        folded = Instruction(module.unique_name("constant"), "constant", inst.shape, [], attrs, literal=literal,
                             metadata=dict(inst.metadata))
        if chain:  # the folded constant stands for the whole chain: keep every torch origin in it
            for i in comp.instructions:
                if i.uid in needed and i.opcode not in ("constant", "parameter"):
                    merge_provenance(folded, i)
        insert_constant(comp, folded)
        replace_instruction(comp, inst, folded)
        return True
