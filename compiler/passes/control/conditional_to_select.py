"""``conditional`` as ``select`` (XLA's ConditionalToSelect): every branch is computed, the selector picks.

HLO computations have no side effects, so evaluating all branches and selecting the result is exact. Each
branch becomes a ``call`` (inlined by CallInliner, which this pass runs); the result is a chain of selects,
last branch first: ``select(index == i, branch_i, rest)`` (so an index outside 0..N-1 takes the last branch, as
XLA says), or ``select(pred, true_branch, false_branch)``. Array results only, or tuples of arrays (selected
element by element).

The pass picks: a conditional is rewritten only when computing every branch is cheap, i.e. its branches hold no
expensive op (``EXPENSIVE``: dots, convolutions, loops, nested conditionals, sorts, gathers/scatters, custom
calls) and compute at most ``max_elements`` result elements in all. Other conditionals are left for the backend,
which runs only the selected branch with the ISA's branch instructions (backend/control.py).
"""

from __future__ import annotations

import numpy as np

from compiler.passes.control.call_inliner import CallInliner
from compiler.passes.expand.op_expander import Expansion
from compiler.passes.interface import HloPass
from compiler.passes.utils import reachable_computations
from hlo.ir import Computation, Instruction, Module, Shape
from hlo.shape_control import branches

EXPENSIVE = frozenset({"dot", "convolution", "while", "conditional", "sort", "gather", "scatter", "custom-call",
                       "reduce-window", "select-and-scatter", "fft", "triangular-solve", "cholesky", "rng"})
MAX_SELECT_ELEMENTS = 1 << 16  # result elements all branches compute together, for a select to be cheap


def _work(comp: Computation, seen: set[int]) -> int | None:
    """Result elements the computation (and those it calls) computes; None when it holds an expensive op."""
    total = 0
    for inst in comp.instructions:
        if inst.opcode in EXPENSIVE:
            return None
        if inst.opcode not in ("parameter", "constant", "tuple", "get-tuple-element"):
            parts = inst.shape.tuple_shapes if inst.shape.is_tuple else (inst.shape,)
            total += sum(int(np.prod(p.dims, dtype=np.int64)) for p in parts if not p.is_tuple)
        for value in inst.attrs.values():
            for called in value if isinstance(value, list | tuple) else (value,):
                if isinstance(called, Computation) and id(called) not in seen:
                    seen.add(id(called))
                    sub = _work(called, seen)
                    if sub is None:
                        return None
                    total += sub
    return total


def cheap(cond: Instruction, max_elements: int = MAX_SELECT_ELEMENTS) -> bool:
    """Whether computing every branch of ``cond`` and selecting is cheap (module doc)."""
    total = 0
    for comp in branches(cond.attrs):
        work = _work(comp, {id(comp)})
        if work is None:
            return False
        total += work
    return total <= max_elements


class ConditionalToSelect(HloPass):
    name = "conditional_to_select"

    def __init__(self, max_elements: int = MAX_SELECT_ELEMENTS):
        self.max_elements = max_elements

    def run(self, module: Module) -> bool:
        changed = False
        for comp in reachable_computations(module):
            for cond in [i for i in comp.instructions if i.opcode == "conditional"]:
                shape = cond.shape
                parts = shape.tuple_shapes if shape.is_tuple else (shape,)
                if any(p.is_tuple for p in parts) or not cheap(cond, self.max_elements):
                    continue
                self._rewrite(module, comp, cond)
                changed = True
        if changed:
            CallInliner().run(module)
        return changed

    @staticmethod
    def _rewrite(module: Module, comp: Computation, cond: Instruction) -> None:
        expansion = Expansion(module, cond)
        add = expansion.add

        comps = branches(cond.attrs)
        selector = cond.operands[0]
        results = [add("call", cond.shape, [arg], {"to_apply": c}) for c, arg in zip(comps, cond.operands[1:],
                                                                                      strict=True)]
        if selector.shape.dtype == "pred":
            preds = [selector]
        else:
            preds = [add("compare", Shape("pred", ()),
                         [selector, add("constant", Shape("s32", ()), [], literal=np.array(i, np.int32))],
                         {"direction": "EQ"}) for i in range(len(comps) - 1)]

        def pick(shape: Shape, values: list[Instruction]) -> Instruction:
            result = values[-1]
            for i in reversed(range(len(values) - 1)):
                p = preds[i]
                if shape.rank:
                    p = add("broadcast", Shape("pred", shape.dims), [p], {"dimensions": ()})
                result = add("select", Shape(shape.dtype, shape.dims), [p, values[i], result])
            return result

        if cond.shape.is_tuple:
            elements = []
            for k, part in enumerate(cond.shape.tuple_shapes):
                values = [add("get-tuple-element", part, [r], {"index": k}) for r in results]
                elements.append(pick(part, values))
            out = add("tuple", cond.shape, elements)
        else:
            out = pick(cond.shape, results)
        at = comp.instructions.index(cond)
        comp.instructions[at:at + 1] = expansion.made
        comp.replace_all_uses(cond, out)
