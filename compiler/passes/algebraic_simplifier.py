"""Algebraic simplification: local rewrites that remove work without changing results.

Each rewrite either replaces an instruction by an existing one (which is then removed, as XLA's
``ReplaceInstruction`` does) or updates it in place, keeping its name and metadata. Operands a rewrite leaves
dead are left to ``dce``. The rewrites:

* ``dot(transpose(a), b)`` / ``dot(a, transpose(b))`` -> the dot reads the transpose's operand directly, with
  contracting and batch dims mapped through the permutation. Done when the operand's free (non-contracting,
  non-batch) dims keep their relative order under the permutation, so the dot's result layout is unchanged --
  always the case for 2-D operands (``x @ w.T``).
* ``transpose`` with the identity permutation, ``reshape`` to the same dims, ``convert`` to the same type
  -> the operand.
* ``transpose(transpose(x))`` -> one transpose (or ``x``); ``reshape(reshape(x))`` -> one reshape;
  ``broadcast(broadcast(x))`` -> one broadcast.
* ``convert(broadcast(x))`` -> ``broadcast(convert(x))``: convert the small operand (constant folding then
  folds a cast bias vector at compile time).
* ``convert(convert(x))`` back to x's type through a type that holds every value of it (bf16 -> f32 -> bf16)
  -> ``x`` (auto-cast leaves such pairs between elementwise ops).
* ``add(x, 0)`` and ``multiply(x, 1)`` (the constant possibly broadcast, on either side) -> ``x`` when ``x``
  already has the result's shape and type.
"""

from __future__ import annotations

from compiler.hlo.ir import Computation, Instruction, Module
from compiler.pass_manager import HloPass
from compiler.passes.utils import (
    constant_value,
    dot_dims,
    insert_before,
    new_instruction,
    reachable_computations,
    replace_instruction,
)

# from-type -> types that represent every value of it exactly
_LOSSLESS_WIDENING: dict[str, frozenset[str]] = {
    "f8e4m3fn": frozenset({"f16", "bf16", "f32", "f64"}),
    "f8e5m2": frozenset({"f16", "bf16", "f32", "f64"}),
    "bf16": frozenset({"f32", "f64"}),
    "f16": frozenset({"f32", "f64"}),
    "f32": frozenset({"f64"}),
}


class AlgebraicSimplifier(HloPass):
    name = "algebraic_simplifier"

    def __init__(self) -> None:
        self._module: Module | None = None
        self._comp: Computation | None = None

    def run(self, module: Module) -> bool:
        changed = False
        self._module = module
        for comp in reachable_computations(module):
            self._comp = comp
            # A rewrite removes only the instruction it visits, so the snapshot stays valid.
            for inst in list(comp.instructions):
                changed |= self._simplify(comp, inst)
        self._module = self._comp = None
        return changed

    def _simplify(self, comp: Computation, inst: Instruction) -> bool:
        """Apply the rewrite for ``inst``'s opcode: a handler returns None (no change), ``inst`` (changed in
        place) or the existing instruction that replaces it."""
        handler = {
            "dot": self._dot,
            "transpose": self._transpose,
            "reshape": self._reshape,
            "broadcast": self._broadcast,
            "convert": self._convert,
            "add": self._add,
            "multiply": self._multiply,
        }.get(inst.opcode)
        if handler is None:
            return False
        replacement = handler(inst)
        if replacement is None:
            return False
        if replacement is not inst:
            replace_instruction(comp, inst, replacement)
        return True

    # -- dot --------------------------------------------------------------------------------------------
    @staticmethod
    def _dot(dot: Instruction) -> Instruction | None:
        lhs_c, rhs_c, lhs_b, rhs_b = dot_dims(dot)
        operands = list(dot.operands)
        dims = {0: (lhs_c, lhs_b), 1: (rhs_c, rhs_b)}
        folded = False
        for side in (0, 1):
            t = operands[side]
            if t.opcode != "transpose":
                continue
            perm = tuple(t.attrs["dimensions"])
            contracting, batch = dims[side]
            free = [d for d in range(len(perm)) if d not in contracting and d not in batch]
            mapped_free = [perm[d] for d in free]
            if mapped_free != sorted(mapped_free):
                continue  # folding would permute the dot's result dims
            operands[side] = t.operands[0]
            dims[side] = (tuple(perm[d] for d in contracting), tuple(perm[d] for d in batch))
            folded = True
        if not folded:
            return None
        dot.operands = operands
        for key, value in (("lhs_contracting_dims", dims[0][0]), ("rhs_contracting_dims", dims[1][0]),
                           ("lhs_batch_dims", dims[0][1]), ("rhs_batch_dims", dims[1][1])):
            if value or key in dot.attrs:
                dot.attrs[key] = value
        return dot

    # -- data movement ------------------------------------------------------------------------------------
    @staticmethod
    def _transpose(t: Instruction) -> Instruction | None:
        perm = tuple(t.attrs["dimensions"])
        if perm == tuple(range(len(perm))):
            return t.operands[0]
        inner = t.operands[0]
        if inner.opcode != "transpose":
            return None
        inner_perm = tuple(inner.attrs["dimensions"])
        composed = tuple(inner_perm[p] for p in perm)
        if composed == tuple(range(len(composed))):
            return inner.operands[0]
        t.operands = [inner.operands[0]]
        t.attrs["dimensions"] = composed
        return t

    @staticmethod
    def _reshape(r: Instruction) -> Instruction | None:
        source = r.operands[0]
        if source.opcode == "reshape":
            source = source.operands[0]
        if source.shape.dims == r.shape.dims:
            return source
        if source is r.operands[0]:
            return None
        r.operands = [source]
        return r

    @staticmethod
    def _broadcast(b: Instruction) -> Instruction | None:
        inner = b.operands[0]
        dims = tuple(b.attrs.get("dimensions", ()))
        if inner.shape.dims == b.shape.dims and dims == tuple(range(len(dims))):
            return inner
        if inner.opcode != "broadcast":
            return None
        inner_dims = tuple(inner.attrs.get("dimensions", ()))
        composed = tuple(dims[d] for d in inner_dims)
        b.operands = [inner.operands[0]]
        b.attrs["dimensions"] = composed
        return b

    def _convert(self, c: Instruction) -> Instruction | None:
        source = c.operands[0]
        if source.shape.dtype == c.shape.dtype:
            return source
        if source.opcode == "broadcast":  # convert the small operand, then broadcast it
            narrow = new_instruction(self._module, "convert", source.operands[0].shape.with_dtype(c.shape.dtype),
                                     [source.operands[0]], metadata=c.metadata)
            wide = new_instruction(self._module, "broadcast", c.shape, [narrow], dict(source.attrs), c.metadata)
            insert_before(self._comp, c, narrow)
            return insert_before(self._comp, c, wide)
        if source.opcode == "convert":
            original = source.operands[0]
            through = source.shape.dtype
            if original.shape.dtype == c.shape.dtype and through in _LOSSLESS_WIDENING.get(
                    original.shape.dtype, ()):
                return original
        return None

    # -- arithmetic identities ----------------------------------------------------------------------------
    @staticmethod
    def _identity_operand(inst: Instruction, neutral: float) -> Instruction | None:
        for keep, other in ((0, 1), (1, 0)):
            x, c = inst.operands[keep], inst.operands[other]
            if constant_value(c) == neutral and x.shape.dims == inst.shape.dims \
                    and x.shape.dtype == inst.shape.dtype:
                return x
        return None

    def _add(self, inst: Instruction) -> Instruction | None:
        return self._identity_operand(inst, 0.0)

    def _multiply(self, inst: Instruction) -> Instruction | None:
        return self._identity_operand(inst, 1.0)
