"""gather as selects over the possible indices (XLA's GatherExpander, one-hot style, without arithmetic).

For a gather whose indexed operand dimensions (start_index_map) have slice size 1, whose batching dimensions
pair with index batch dimensions, and whose other dimensions are gathered whole (the forms jnp.take,
x[i, j], take_along_axis and vmapped indexing write), every output element reads the operand at the clamped
index (XLA clamps starts so the slice fits). With few possible index combinations (the product of the indexed
dimensions' sizes, at most ``MAX_CANDIDATES``) the gather becomes ``select(index == v, operand at v, rest)``
over the combinations v: the operand slice at v, broadcast to the output, and a mask from the index arrays.
Selects move values exactly (NaN and infinities too). Gathers of one indexed dimension without batching
dimensions are the backend's gather kernel's; other gathers are left for the backend, which refuses them.

What the backend lowers directly by indirect DMA (``backend.kernels.indirect.lowers_directly``: rows
moved by runtime offsets, whatever the number of candidates) is left to it unless ``defer_to_backend=False``.
"""

from __future__ import annotations

import itertools

from backend.kernels.indirect import lowers_directly
from compiler.passes.expand.op_expander import Expansion, OpExpanderPass
from hlo.ir import Computation, Instruction, Module, Shape, SliceSpec
from hlo.shape_indexing import gather_dims

MAX_CANDIDATES = 64


class GatherExpander(OpExpanderPass):
    name = "gather_expander"

    def __init__(self, max_candidates: int = MAX_CANDIDATES, defer_to_backend: bool = True):
        self.max_candidates = max_candidates
        # leave what the backend lowers directly by indirect DMA (backend.kernels.indirect.lowers_directly)
        self.defer_to_backend = defer_to_backend

    def matches(self, inst: Instruction) -> bool:
        return inst.opcode == "gather"\
            and not (self.defer_to_backend and lowers_directly(inst))

    def _expand(self, module: Module, comp: Computation, inst: Instruction) -> bool:
        x, indices = inst.operands
        g = gather_dims(inst.attrs)
        rank, dims = x.shape.rank, x.shape.dims
        indexed = tuple(g.start_index_map)
        for d in range(rank):
            want = 1 if d in indexed or d in g.operand_batching_dims else dims[d]
            if g.slice_sizes[d] != want:
                return False
        if set(g.collapsed_slice_dims) != set(indexed) or set(indexed) & set(g.operand_batching_dims):
            return False
        if len(indexed) == 1 and not g.operand_batching_dims:
            return False  # one indexed dimension, no batching: the backend's gather kernel (embedding lookups)
        candidates = list(itertools.product(*(range(dims[d]) for d in indexed)))
        if not candidates or len(candidates) > self.max_candidates:
            return False
        out = inst.shape
        out_batch = [p for p in range(out.rank) if p not in g.offset_dims]  # output dims of the index batch dims
        index_batch = [d for d in range(indices.shape.rank) if d != g.index_vector_dim]
        kept = [d for d in range(rank) if d not in g.collapsed_slice_dims and d not in g.operand_batching_dims]
        if len(kept) != len(g.offset_dims) or len(index_batch) != len(out_batch):
            return False
        expansion = Expansion(module, inst)
        add, const = expansion.add, expansion.const

        batch_shape = tuple(indices.shape.dims[d] for d in index_batch)
        to_out = tuple(out_batch)  # index batch dim i -> output dim out_batch[i]
        clamped = []
        for k, d in enumerate(indexed):
            if g.index_vector_dim < indices.shape.rank:
                spec = tuple((k, k + 1, 1) if a == g.index_vector_dim else (0, n, 1)
                             for a, n in enumerate(indices.shape.dims))
                part = add("slice", Shape(indices.shape.dtype, tuple(1 if a == g.index_vector_dim else n for a, n in
                                                                     enumerate(indices.shape.dims))),
                           [indices], {"slice": SliceSpec(spec)})
                part = add("reshape", Shape(indices.shape.dtype, batch_shape), [part])
            else:
                part = indices
            if part.shape.dtype != "s32":
                part = add("convert", Shape("s32", batch_shape), [part])
            lo = add("broadcast", Shape("s32", batch_shape), [const(0)], {"dimensions": ()})
            hi = add("broadcast", Shape("s32", batch_shape), [const(dims[d] - 1)], {"dimensions": ()})
            clamped.append(add("clamp", Shape("s32", batch_shape), [lo, part, hi]))
        # where the operand's batching dims and kept dims go in the output
        batching_to_out = {od: to_out[index_batch.index(idim)]
                           for od, idim in zip(g.operand_batching_dims, g.start_indices_batching_dims, strict=True)}
        kept_to_out = dict(zip(kept, g.offset_dims, strict=True))
        values = []
        for v in candidates:
            spec = tuple((v[indexed.index(d)], v[indexed.index(d)] + 1, 1) if d in indexed else (0, dims[d], 1)
                         for d in range(rank))
            piece = add("slice", Shape(x.shape.dtype, tuple(1 if d in indexed else dims[d] for d in range(rank))),
                        [x], {"slice": SliceSpec(spec)})
            rest = [d for d in range(rank) if d not in indexed]
            piece = add("reshape", Shape(x.shape.dtype, tuple(dims[d] for d in rest)), [piece])
            mapping = tuple(batching_to_out[d] if d in batching_to_out else kept_to_out[d] for d in rest)
            if list(mapping) != sorted(mapping):  # broadcast keeps the operand's dim order: transpose first
                order = sorted(range(len(rest)), key=lambda i: mapping[i])
                piece = add("transpose", Shape(x.shape.dtype, tuple(piece.shape.dims[i] for i in order)), [piece],
                            {"dimensions": tuple(order)})
                mapping = tuple(mapping[i] for i in order)
            values.append(add("broadcast", Shape(out.dtype, out.dims), [piece], {"dimensions": mapping}))
        result = values[-1]
        for v, value in reversed(list(zip(candidates[:-1], values[:-1], strict=True))):
            mask = None
            for k, c in enumerate(clamped):
                target = add("broadcast", Shape("s32", batch_shape), [const(v[k])], {"dimensions": ()})
                eq = add("compare", Shape("pred", batch_shape), [c, target], {"direction": "EQ"})
                mask = eq if mask is None else add("and", Shape("pred", batch_shape), [mask, eq])
            assert mask is not None
            wide = add("broadcast", Shape("pred", out.dims), [mask], {"dimensions": to_out})
            result = add("select", Shape(out.dtype, out.dims), [wide, value, result])
        at = comp.instructions.index(inst)
        comp.instructions[at:at + 1] = expansion.made
        comp.replace_all_uses(inst, result)
        return True
