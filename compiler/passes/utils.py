"""Helpers the passes share: instruction creation and replacement, constant matching (opcode classes are in
hlo.opcodes)."""

from __future__ import annotations

from typing import Any

import numpy as np

from hlo.ir import Computation, Instruction, Module, Shape


def new_instruction(module: Module, opcode: str, shape: Shape, operands: list[Instruction],
                    attrs: dict[str, Any] | None = None, metadata: dict[str, Any] | None = None,
                    literal: np.ndarray | None = None, name: str | None = None) -> Instruction:
    """A fresh instruction with a module-unique name (``opcode``, ``opcode.1``, ...); not yet placed."""
    return Instruction(module.unique_name(name or opcode), opcode, shape, list(operands), dict(attrs or {}),
                       literal=literal, metadata=dict(metadata or {}))


def insert_before(comp: Computation, anchor: Instruction, new: Instruction) -> Instruction:
    """Place ``new`` right before ``anchor`` (keeps the defs-before-uses order when ``new`` feeds ``anchor``)."""
    comp.instructions.insert(comp.instructions.index(anchor), new)
    return new


def insert_constant(comp: Computation, constant: Instruction) -> Instruction:
    """Place a new constant after the leading parameters and constants (the canonical position)."""
    n = 0
    while n < len(comp.instructions) and comp.instructions[n].opcode in ("parameter", "constant"):
        n += 1
    comp.instructions.insert(n, constant)
    return constant


def replace_instruction(comp: Computation, old: Instruction, new: Instruction) -> None:
    """Redirect every use of ``old`` (and ROOT) to ``new``, then remove ``old`` (XLA's ReplaceInstruction)."""
    comp.replace_all_uses(old, new)
    comp.remove(old)


def constant_value(inst: Instruction) -> float | None:
    """The single value of a constant whose elements are all equal, or of a broadcast of one; else None."""
    while inst.opcode == "broadcast" and len(inst.operands) == 1:
        inst = inst.operands[0]
    if inst.opcode != "constant" or inst.literal is None or inst.literal.size == 0:
        return None
    flat = np.asarray(inst.literal).reshape(-1)
    first = flat[0]
    if not np.all(flat == first):
        return None
    return float(first)


def is_constant_like(inst: Instruction) -> bool:
    """A constant or a broadcast of one (no data dependence on the inputs)."""
    while inst.opcode == "broadcast" and len(inst.operands) == 1:
        inst = inst.operands[0]
    return inst.opcode == "constant"


def reachable_computations(module: Module) -> list[Computation]:
    """The entry computation and every computation it calls, transitively (in module order)."""
    if module.entry is None:
        return []
    seen = {id(module.entry)}
    stack = [module.entry]
    while stack:
        comp = stack.pop()
        for inst in comp.instructions:
            for callee in inst.called_computations():
                if id(callee) not in seen:
                    seen.add(id(callee))
                    stack.append(callee)
    return [c for c in module.computations if id(c) in seen]


def dot_dims(inst: Instruction) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(lhs_contracting, rhs_contracting, lhs_batch, rhs_batch) of a dot, missing attributes as ()."""
    def get(key: str) -> tuple[int, ...]:
        return tuple(inst.attrs.get(key, ()))

    return (get("lhs_contracting_dims"), get("rhs_contracting_dims"),
            get("lhs_batch_dims"), get("rhs_batch_dims"))
