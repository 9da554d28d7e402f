"""XLA's OpExpanderPass: a pass that rewrites, one by one, the instructions it matches, and the Expansion
that builds each replacement."""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

import numpy as np

from compiler.passes.interface import HloPass
from compiler.passes.utils import new_instruction, reachable_computations
from hlo.ir import Computation, Instruction, Module, Shape, numpy_dtype


class OpExpanderPass(HloPass):
    """Calls ``_expand`` on every instruction ``matches`` accepts, in every reachable computation."""

    @abstractmethod
    def matches(self, inst: Instruction) -> bool:
        """Whether ``inst`` is one this pass rewrites."""

    @abstractmethod
    def _expand(self, module: Module, comp: Computation, inst: Instruction) -> bool:
        """Rewrite ``inst`` in ``comp``; False when it is left as it is."""

    def run(self, module: Module) -> bool:
        changed = False
        for comp in reachable_computations(module):
            for inst in [i for i in comp.instructions if self.matches(i)]:
                changed |= self._expand(module, comp, inst)
        return changed


class Expansion:
    """The instructions that replace one: made in order, named after it and carrying its metadata."""

    def __init__(self, module: Module, inst: Instruction):
        self.module, self.inst = module, inst
        self.made: list[Instruction] = []

    def add(self, opcode: str, shape: Shape, operands: list[Instruction], attrs: dict | None = None,
            literal: np.ndarray | None = None) -> Instruction:
        made = new_instruction(self.module, opcode, shape, operands, attrs, self.inst.metadata, literal=literal,
                               name=f"{self.inst.name}.{opcode}")
        self.made.append(made)
        return made

    def const(self, value: Any, dtype: str = "s32") -> Instruction:
        """A scalar constant of ``dtype``."""
        return self.add("constant", Shape(dtype, ()), [], literal=np.array(value).astype(numpy_dtype(dtype)))
