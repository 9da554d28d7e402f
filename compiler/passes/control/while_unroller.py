"""Full unrolling of ``while`` loops with a small static trip count (XLA's WhileLoopUnroller, full unroll only).

The trip count is known when the loop is a counted one, as jax writes ``fori_loop``: the initial state is a
``tuple`` whose element k is an integer constant c0, the condition is ``compare(get-tuple-element(state, k),
constant N), direction=LT`` (or ``N > i``), and the body's ROOT ``tuple`` sets element k to
``add(get-tuple-element(state, k), constant s)`` with s > 0. Then the body runs ceil((N - c0) / s) times
(none if N <= c0), whatever else the state holds. Such a loop of at most ``max_trips`` iterations becomes that
many ``call``s of the body, chained, which CallInliner then inlines (this pass runs it). Longer loops, and
loops whose trip count depends on the data, are left for the backend, which runs them with the ISA's loop and
branch instructions (backend/control.py).
"""

from __future__ import annotations

from compiler.passes.control.call_inliner import CallInliner
from compiler.passes.interface import HloPass
from compiler.passes.utils import new_instruction, reachable_computations
from hlo.ir import Module
from hlo.while_loop import trip_count

__all__ = ["MAX_TRIPS", "WhileUnroller", "trip_count"]

MAX_TRIPS = 16


class WhileUnroller(HloPass):
    name = "while_unroller"

    def __init__(self, max_trips: int = MAX_TRIPS):
        self.max_trips = max_trips

    def run(self, module: Module) -> bool:
        changed = False
        for comp in reachable_computations(module):
            for loop in [i for i in comp.instructions if i.opcode == "while"]:
                trips = trip_count(loop)
                if trips is None or trips > self.max_trips:
                    continue
                state = loop.operands[0]
                at = comp.instructions.index(loop)
                calls = []
                for _ in range(trips):
                    state = new_instruction(module, "call", loop.shape, [state], {"to_apply": loop.attrs["body"]},
                                            loop.metadata, name=f"{loop.name}.iter")
                    calls.append(state)
                comp.instructions[at:at + 1] = calls
                comp.replace_all_uses(loop, state)
                changed = True
        if changed:
            CallInliner().run(module)
        return changed
