"""scatter as a sequence of masked updates (XLA's ScatterExpander, unrolled over the update positions).

For each scatter position b of the updates (in order), the operand becomes
``select(at_b, combiner(operand, window_b), operand)``: ``at_b`` is true where the operand index equals the
start index read from ``indices`` at b (an ``iota == index`` compare per indexed dimension; an index out of
range matches nothing, so the window is dropped, as XLA does), ``window_b`` the update window at b broadcast
over the operand. Combiners: any of add, multiply, maximum, minimum, and, or of (operand, update), or "return
the update" (replace). Indexed operand dimensions must have window size 1 and the others full windows; at most
``MAX_POSITIONS`` positions; no batching dimensions. Other scatters are left for the backend, which refuses
them with a typed error.

What the backend lowers directly by indirect DMA (``backend.kernels.indirect.lowers_directly``: rows
moved by runtime offsets, whatever the number of candidates) is left to it unless ``defer_to_backend=False``.
"""

from __future__ import annotations

import itertools

from backend.kernels.indirect import lowers_directly
from compiler.passes.expand.op_expander import Expansion, OpExpanderPass
from hlo.ir import Computation, Instruction, Module, Shape, SliceSpec
from hlo.shape_indexing import scatter_dims

MAX_POSITIONS = 64
_COMBINERS = ("add", "multiply", "maximum", "minimum", "and", "or")


def combiner_op(comp: Computation) -> str | None:
    """The elementwise op of a scatter combiner ``(operand, update) -> ...``, "replace", or None."""
    params, root = comp.parameters, comp.root
    if len(params) != 2 or root is None:
        return None
    if root is params[1]:
        return "replace"
    if root.opcode in _COMBINERS and root.operands == [params[0], params[1]]:
        return root.opcode
    if root.opcode in _COMBINERS and root.operands == [params[1], params[0]]:  # all of them commute
        return root.opcode
    return None


class ScatterExpander(OpExpanderPass):
    name = "scatter_expander"

    def __init__(self, max_positions: int = MAX_POSITIONS, defer_to_backend: bool = True):
        self.max_positions = max_positions
        # leave what the backend lowers directly by indirect DMA (backend.kernels.indirect.lowers_directly)
        self.defer_to_backend = defer_to_backend

    def matches(self, inst: Instruction) -> bool:
        return inst.opcode == "scatter" and len(inst.operands) == 3\
            and not (self.defer_to_backend and lowers_directly(inst))

    def _expand(self, module: Module, comp: Computation, inst: Instruction) -> bool:
        x, indices, updates = inst.operands
        to_apply = inst.attrs.get("to_apply")
        op = combiner_op(to_apply) if isinstance(to_apply, Computation) else None
        if op is None or x.shape.is_tuple:
            return False
        s = scatter_dims(inst.attrs)
        if s.input_batching_dims or s.scatter_indices_batching_dims:
            return False
        rank = x.shape.rank
        window_operand_dims = [d for d in range(rank) if d not in s.inserted_window_dims]
        window_sizes = {d: updates.shape.dims[u] for d, u in zip(window_operand_dims, s.update_window_dims,
                                                                 strict=True)}
        for d in range(rank):
            size = 1 if d in s.inserted_window_dims else window_sizes[d]
            if size != (1 if d in s.scatter_dims_to_operand_dims else x.shape.dims[d]):
                return False
        scatter_update_dims = [d for d in range(updates.shape.rank) if d not in s.update_window_dims]
        positions = list(itertools.product(*(range(updates.shape.dims[d]) for d in scatter_update_dims)))
        if len(positions) > self.max_positions:
            return False
        expansion = Expansion(module, inst)
        add = expansion.add

        dims = x.shape.dims
        iotas = {d: add("iota", Shape("s32", dims), [], {"iota_dimension": d}) for d in s.scatter_dims_to_operand_dims}
        index_rank = indices.shape.rank
        current = x
        for b in positions:
            mask = None
            for k, d in enumerate(s.scatter_dims_to_operand_dims):
                coords = list(b)
                if s.index_vector_dim < index_rank:
                    coords.insert(s.index_vector_dim, k)
                spec = SliceSpec(tuple((c, c + 1, 1) for c in coords))
                one = add("slice", Shape(indices.shape.dtype, (1,) * index_rank), [indices], {"slice": spec})
                idx = add("reshape", Shape(indices.shape.dtype, ()), [one])
                if indices.shape.dtype != "s32":
                    idx = add("convert", Shape("s32", ()), [idx])
                bidx = add("broadcast", Shape("s32", dims), [idx], {"dimensions": ()})
                eq = add("compare", Shape("pred", dims), [iotas[d], bidx], {"direction": "EQ"})
                mask = eq if mask is None else add("and", Shape("pred", dims), [mask, eq])
            ranges, j = [], 0
            for d in range(updates.shape.rank):
                if d in s.update_window_dims:
                    ranges.append((0, updates.shape.dims[d], 1))
                else:
                    ranges.append((b[j], b[j] + 1, 1))
                    j += 1
            window = add("slice", Shape(updates.shape.dtype, tuple(hi - lo for lo, hi, _ in ranges)), [updates],
                         {"slice": SliceSpec(tuple(ranges))})
            window_dims = tuple(updates.shape.dims[u] for u in s.update_window_dims)
            window = add("reshape", Shape(updates.shape.dtype, window_dims), [window])
            value = add("broadcast", Shape(x.shape.dtype, dims), [window], {"dimensions": tuple(window_operand_dims)})
            combined = value if op == "replace" else add(op, Shape(x.shape.dtype, dims), [current, value])
            if mask is None:
                current = combined
            else:
                current = add("select", Shape(x.shape.dtype, dims), [mask, combined, current])
        at = comp.instructions.index(inst)
        comp.instructions[at:at + 1] = expansion.made
        comp.replace_all_uses(inst, current)
        return True

