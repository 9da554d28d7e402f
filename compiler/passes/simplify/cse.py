"""Common-subexpression elimination (XLA's HloCSE): identical instructions computed twice become one.

Two instructions are the same expression when they have the same opcode, shape (layout included), operands
(after earlier eliminations), attributes and called computations (by identity); metadata is ignored, and the
first one in program order is kept, with the torch origins of the others merged into its metadata. Operands
of commutative ops (add, multiply, maximum, minimum, and, or, xor) are compared as a set, so ``add(a, b)``
and ``add(b, a)`` merge. Constants merge when their element type, dims and data are bit-identical (two
weights with equal data but different ``data`` keys merge too); only constants that share their type and
dims with another one have their data compared, so large weights are not read on every run.

Never merged: parameters (distinct inputs even when alike), constants whose data is not loaded, and
custom-calls whose target is not a known pure function (they may have effects the compiler cannot see).
One walk per computation in program order (defs before uses), so chains collapse in one run:
``exp(add(x, y))`` twice becomes one ``exp`` of one ``add``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable
from typing import Any

import numpy as np

from compiler.passes.interface import HloPass
from compiler.passes.utils import reachable_computations
from hlo.ir import Computation, Instruction, Module
from hlo.opcodes import COMMUTATIVE, ELEMENTWISE_CUSTOM_CALLS, custom_call_target
from hlo.provenance import merge_provenance


def _hashable(value: Any) -> Hashable:
    """An attribute value as a hashable key (lists become tuples; Computations compare by identity)."""
    if isinstance(value, list | tuple):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    return value


class _LiteralKey:
    """A constant's dtype, dims and data as a dict key: hashed on a sample of at most ~4 KiB of its
    bytes, compared in full only when two samples agree (equal keys are still bit-identical data)."""

    __slots__ = ("dtype", "shape", "raw", "_hash")

    def __init__(self, literal: np.ndarray) -> None:
        self.dtype, self.shape = str(literal.dtype), literal.shape
        self.raw = np.ascontiguousarray(literal).reshape(-1).view(np.uint8)
        step = max(1, self.raw.size // 4096)
        self._hash = hash((self.dtype, self.shape, self.raw[::step].tobytes(), self.raw[-64:].tobytes()))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, _LiteralKey) and self._hash == other._hash and self.dtype == other.dtype
                and self.shape == other.shape and np.array_equal(self.raw, other.raw))


def _literal_key(literal: np.ndarray) -> Hashable:
    return _LiteralKey(literal)


class CommonSubexpressionElimination(HloPass):
    name = "cse"

    def run(self, module: Module) -> bool:
        changed = False
        for comp in reachable_computations(module):
            changed |= self._run_on(comp)
        return changed

    @staticmethod
    def _key(inst: Instruction, comparable: set[tuple]) -> Hashable | None:
        """What makes ``inst`` the same expression as another; None for instructions never merged.
        ``comparable``: (dtype, dims) of the constants that have a twin candidate (only their bytes are read)."""
        if inst.opcode == "parameter":
            return None
        if inst.opcode == "custom-call" and custom_call_target(inst) not in ELEMENTWISE_CUSTOM_CALLS:
            return None
        literal = None
        if inst.opcode == "constant":
            if inst.literal is None or (inst.shape.dtype, inst.shape.dims) not in comparable:
                return None
            literal = _literal_key(inst.literal)
        operands: Hashable = tuple(o.uid for o in inst.operands)
        if inst.opcode in COMMUTATIVE:
            operands = tuple(sorted(operands))
        attrs = () if inst.opcode == "constant" else _hashable(inst.attrs)  # a constant's data key is a name
        return inst.opcode, inst.shape, operands, attrs, literal

    def _run_on(self, comp: Computation) -> bool:
        kinds = Counter((i.shape.dtype, i.shape.dims) for i in comp.instructions if i.opcode == "constant")
        comparable = {kind for kind, count in kinds.items() if count > 1}
        seen: dict[Hashable, Instruction] = {}
        replaced: dict[int, Instruction] = {}
        kept: list[Instruction] = []
        for inst in comp.instructions:
            if any(o.uid in replaced for o in inst.operands):
                inst.operands = [replaced.get(o.uid, o) for o in inst.operands]
            key = self._key(inst, comparable)
            if key is None:
                kept.append(inst)
                continue
            try:
                first = seen.setdefault(key, inst)
            except TypeError:  # an attribute value that cannot be hashed: leave the instruction alone
                kept.append(inst)
                continue
            if first is inst:
                kept.append(inst)
            else:
                replaced[inst.uid] = first
                merge_provenance(first, inst)  # the kept one stands for both torch origins
        if not replaced:
            return False
        comp.instructions = kept
        if comp.root is not None and comp.root.uid in replaced:
            comp.root = replaced[comp.root.uid]
        return True
