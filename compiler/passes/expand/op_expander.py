"""XLA's OpExpanderPass: a pass that rewrites, one by one, the instructions it matches."""

from __future__ import annotations

from abc import abstractmethod

from compiler.passes.interface import HloPass
from compiler.passes.utils import reachable_computations
from hlo.ir import Computation, Instruction, Module


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
