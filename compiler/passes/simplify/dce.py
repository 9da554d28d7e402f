"""Dead code elimination: drop instructions ROOT does not depend on, and computations nothing calls.

Parameters are kept even when unused (they are the computation's signature). Every computation reachable from
the entry is cleaned; unreachable non-entry computations (e.g. a fused computation whose fusion was removed)
are deleted from the module. Our HLO has no side-effecting instructions, so reachability is the only criterion.
"""

from __future__ import annotations

from compiler.passes.interface import HloPass
from compiler.passes.utils import reachable_computations
from hlo.ir import Computation, Module


class DeadCodeElimination(HloPass):
    name = "dce"

    def run(self, module: Module) -> bool:
        changed = False
        live_computations = reachable_computations(module)
        for comp in live_computations:
            changed |= self._clean(comp)
        # Cleaning may have dropped the last caller of a computation.
        live_ids = {id(c) for c in reachable_computations(module)}
        kept = [c for c in module.computations if id(c) in live_ids]
        if len(kept) != len(module.computations):
            module.computations = kept
            changed = True
        return changed

    @staticmethod
    def _clean(comp: Computation) -> bool:
        live = {inst.uid for inst in comp.post_order()}
        kept = [inst for inst in comp.instructions if inst.uid in live]
        if len(kept) == len(comp.instructions):
            return False
        comp.instructions = kept
        return True
