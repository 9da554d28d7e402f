"""Call inlining (XLA's CallInliner): every ``call`` is replaced by a copy of the computation it calls.

XLA writes a ``call`` for every jitted helper function (jnp.where, jnp.clip, argmax...), and the backend
lowers computations without calls. The called computation's instructions are copied into the caller (fresh
module-unique names, the call's metadata where they have none), its parameters bound to the call's operands,
and every use of the call redirected to the copied ROOT; a ``get-tuple-element`` of a copied ROOT ``tuple``
is resolved to the element at once, so no tuple survives between two instructions of the caller. Nested calls
are inlined too (the copies are visited again); computations no longer called by anything are dropped.
"""

from __future__ import annotations

from compiler.passes.interface import HloPass
from compiler.passes.utils import new_instruction, reachable_computations
from hlo.ir import Computation, Instruction, Module


class CallInliner(HloPass):
    name = "call_inliner"

    def run(self, module: Module) -> bool:
        changed = False
        for comp in reachable_computations(module):
            while True:
                calls = [i for i in comp.instructions if i.opcode == "call"]
                if not calls:
                    break
                for call in calls:
                    self._inline(module, comp, call)
                changed = True
        if changed:
            live = {id(c) for c in reachable_computations(module)}
            module.computations = [c for c in module.computations if id(c) in live]
        return changed

    @staticmethod
    def _inline(module: Module, comp: Computation, call: Instruction) -> None:
        callee = call.attrs["to_apply"]
        assert isinstance(callee, Computation)
        copies: dict[int, Instruction] = {}
        placed: list[Instruction] = []
        for inst in callee.post_order():
            if inst.opcode == "parameter":
                copies[inst.uid] = call.operands[inst.parameter_number or 0]
                continue
            copy = new_instruction(module, inst.opcode, inst.shape, [copies[o.uid] for o in inst.operands],
                                   inst.attrs, inst.metadata or call.metadata, literal=inst.literal,
                                   name=inst.name)
            copies[inst.uid] = copy
            placed.append(copy)
        assert callee.root is not None
        root = copies[callee.root.uid]
        at = comp.instructions.index(call)
        comp.instructions[at:at + 1] = placed
        comp.replace_all_uses(call, root)
        if root.opcode == "tuple":  # get-tuple-element of the copied tuple: the element itself
            for user in [i for i in comp.instructions if i.opcode == "get-tuple-element" and i.operands == [root]]:
                comp.replace_all_uses(user, root.operands[user.attrs["index"]])
                comp.remove(user)
            if comp.root is not root and not any(root in i.operands for i in comp.instructions):
                comp.remove(root)
