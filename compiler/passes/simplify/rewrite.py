"""The context a local rewrite works in (the algebraic simplifier's rules): where to put new instructions.

A rewrite is a function ``(ctx, inst) -> Instruction | None``: None when it does not apply, ``inst`` itself
when it changed ``inst`` in place (keeping its name and uses), or another instruction that replaces ``inst``
(an existing one, or one built with ``ctx``, placed before ``inst``). New instructions inherit the metadata of
the instruction they stand for, so errors and dumps still point at the PyTorch source.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from compiler.passes.utils import insert_before, insert_constant, new_instruction
from hlo.ir import Computation, Instruction, Module, Shape, numpy_dtype


@dataclass
class RewriteContext:
    module: Module
    comp: Computation

    def add_before(self, anchor: Instruction, opcode: str, shape: Shape, operands: list[Instruction],
                   attrs: dict[str, Any] | None = None) -> Instruction:
        """A new instruction placed right before ``anchor``, with ``anchor``'s metadata."""
        new = new_instruction(self.module, opcode, shape, operands, attrs, anchor.metadata)
        return insert_before(self.comp, anchor, new)

    def filled(self, anchor: Instruction, value: Any, shape: Shape) -> Instruction:
        """``value`` in every element of ``shape``: a scalar constant, broadcast when ``shape`` is not scalar."""
        literal = np.array(value).astype(numpy_dtype(shape.dtype))
        scalar = new_instruction(self.module, "constant", Shape(shape.dtype), [], literal=literal,
                                 metadata=anchor.metadata)
        insert_constant(self.comp, scalar)
        if shape.rank == 0:
            return scalar
        return self.add_before(anchor, "broadcast", Shape(shape.dtype, shape.dims, shape.layout), [scalar],
                               {"dimensions": ()})


Rewrite = Callable[[RewriteContext, Instruction], Instruction | None]


def in_place(inst: Instruction, opcode: str, operands: list[Instruction], attrs: dict[str, Any]) -> Instruction:
    """Turn ``inst`` into another operation computing the same value (name, shape, metadata kept)."""
    inst.opcode, inst.operands, inst.attrs = opcode, list(operands), dict(attrs)
    return inst


def is_default_layout(shape: Shape) -> bool:
    return shape.layout is None or shape.layout == tuple(reversed(range(shape.rank)))


def interchangeable(a: Instruction, b: Instruction) -> bool:
    """Whether ``b`` may stand for ``a``: same element type, dims and layout."""
    return (a.shape.dtype, a.shape.dims) == (b.shape.dtype, b.shape.dims) and \
        (a.shape.layout == b.shape.layout or (is_default_layout(a.shape) and is_default_layout(b.shape)))


def constant_scalar(inst: Instruction) -> Any | None:
    """The value of a scalar (or single-value) constant, as a Python number; None otherwise."""
    if inst.opcode != "constant" or inst.literal is None or inst.literal.size != 1:
        return None
    return inst.literal.reshape(()).item()
