"""dynamic-slice and dynamic-update-slice with runtime offsets as selects over the possible offsets.

A start index is clamped into ``0..n - size`` (XLA's rule), so there are at most ``n - size + 1`` possible
starts per dimension; a constant start has one. When the possible start combinations are few (at most
``MAX_CANDIDATES``), the op becomes a chain of ``select(start == k, value_k, rest)`` over them, where
``value_k`` is the static slice at ``k`` (dynamic-slice) or the operand with the update padded into place at
``k`` (dynamic-update-slice). Selects move values exactly (NaN and infinities too), so the result is XLA's
bit for bit; the work grows with the number of candidates, which is why larger cases are left to the backend
(which refuses them with a typed error).

What the backend lowers directly by indirect DMA (``backend.kernels.indirect.lowers_directly``: rows
moved by runtime offsets, whatever the number of candidates) is left to it unless ``defer_to_backend=False``.
"""

from __future__ import annotations

import itertools

import numpy as np

from backend.kernels.indirect import lowers_directly
from compiler.passes.expand.op_expander import Expansion, OpExpanderPass
from hlo.ir import Computation, Instruction, Module, Shape, SliceSpec
from hlo.shape_inference import format_padding

MAX_CANDIDATES = 64


def _constant_int(inst: Instruction) -> int | None:
    if inst.opcode != "constant" or inst.literal is None or inst.literal.size != 1:
        return None
    return int(np.asarray(inst.literal).reshape(()))


class DynamicSliceExpander(OpExpanderPass):
    name = "dynamic_slice_expander"

    def __init__(self, max_candidates: int = MAX_CANDIDATES, defer_to_backend: bool = True):
        self.max_candidates = max_candidates
        # leave what the backend lowers directly by indirect DMA (backend.kernels.indirect.lowers_directly)
        self.defer_to_backend = defer_to_backend

    def matches(self, inst: Instruction) -> bool:
        return inst.opcode in ("dynamic-slice", "dynamic-update-slice")\
            and not (self.defer_to_backend and lowers_directly(inst))

    def _expand(self, module: Module, comp: Computation, inst: Instruction) -> bool:
        update = inst.opcode == "dynamic-update-slice"
        x = inst.operands[0]
        starts = inst.operands[2:] if update else inst.operands[1:]
        sizes = inst.operands[1].shape.dims if update else tuple(inst.attrs.get("dynamic_slice_sizes", ()))
        if len(sizes) != x.shape.rank or len(starts) != x.shape.rank:
            return False
        per_dim: list[list[int]] = []
        for n, s, start in zip(x.shape.dims, sizes, starts, strict=True):
            c = _constant_int(start)
            per_dim.append([min(max(c, 0), n - s)] if c is not None else list(range(n - s + 1)))
        combos = list(itertools.product(*per_dim))
        if len(combos) > self.max_candidates:
            return False
        expansion = Expansion(module, inst)
        add, const = expansion.add, expansion.const

        clamped: dict[int, Instruction] = {}
        for d, (n, s, start) in enumerate(zip(x.shape.dims, sizes, starts, strict=True)):
            if len(per_dim[d]) > 1:
                idx = start if start.shape.dtype == "s32" else add("convert", Shape("s32", ()), [start])
                clamped[d] = add("clamp", Shape("s32", ()), [const(0, "s32"), idx, const(n - s, "s32")])
        out_shape = Shape(inst.shape.dtype, inst.shape.dims)
        values = []
        for combo in combos:
            if update:
                config = [(k, n - s - k, 0) for k, n, s in zip(combo, x.shape.dims, sizes, strict=True)]
                padding = {"padding": format_padding(config)}
                placed = add("pad", out_shape, [inst.operands[1], const(0, x.shape.dtype)], padding)
                ones = add("broadcast", Shape("pred", sizes), [const(True, "pred")], {"dimensions": ()})
                mask = add("pad", Shape("pred", x.shape.dims), [ones, const(False, "pred")], padding)
                values.append(add("select", out_shape, [mask, placed, x]))
            else:
                spec = SliceSpec(tuple((k, k + s, 1) for k, s in zip(combo, sizes, strict=True)))
                values.append(add("slice", out_shape, [x], {"slice": spec}))
        result = values[-1]
        for combo, value in reversed(list(zip(combos[:-1], values[:-1], strict=True))):
            cond = None
            for d, c in clamped.items():
                eq = add("compare", Shape("pred", ()), [c, const(combo[d], "s32")], {"direction": "EQ"})
                cond = eq if cond is None else add("and", Shape("pred", ()), [cond, eq])
            assert cond is not None
            mask = add("broadcast", Shape("pred", out_shape.dims), [cond], {"dimensions": ()}) \
                if out_shape.rank else cond
            result = add("select", out_shape, [mask, value, result])
        at = comp.instructions.index(inst)
        comp.instructions[at:at + 1] = expansion.made
        comp.replace_all_uses(inst, result)
        return True

