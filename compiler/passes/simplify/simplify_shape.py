"""The algebraic simplifier's data-movement rules (one function per opcode; see algebraic_simplifier.py).

* ``dot(transpose(a), b)`` / ``dot(a, transpose(b))``: the dot reads the transpose's operand, contracting and
  batch dims mapped through the permutation, when the operand's free dims keep their relative order (so the
  dot's result is unchanged) -- always the case for 2-D operands (``x @ w.T``).
* ``transpose``: identity -> operand; of a transpose -> one transpose; one that only moves size-1 dims (a
  bitcast) -> ``reshape``; of a ``broadcast`` -> one broadcast, when the mapping stays increasing.
* ``reshape``: to the same dims -> operand; of a reshape -> one reshape; of a broadcast scalar -> broadcast.
* ``broadcast``: identity -> operand; of a broadcast -> one broadcast; one that only adds size-1 dims (a
  bitcast) -> ``reshape``.
* ``slice``: of the full range -> operand; of a slice -> one slice.
* ``concatenate``: of one operand -> operand; empty operands are dropped.
* ``pad``: with no padding -> operand; with only negative (cropping) edges -> ``slice``.
* ``dynamic-slice`` with constant starts -> ``slice``; ``dynamic-update-slice`` with a full-size update ->
  the update.
"""

from __future__ import annotations

from compiler.passes.simplify.rewrite import (
    RewriteContext,
    constant_scalar,
    in_place,
    interchangeable,
    is_default_layout,
)
from compiler.passes.utils import dot_dims
from hlo.ir import Instruction, SliceSpec
from hlo.shape_inference import parse_padding


def dot(ctx: RewriteContext, inst: Instruction) -> Instruction | None:
    lhs_c, rhs_c, lhs_b, rhs_b = dot_dims(inst)
    operands = list(inst.operands)
    dims = {0: (lhs_c, lhs_b), 1: (rhs_c, rhs_b)}
    folded = False
    for side in (0, 1):
        t = operands[side]
        if t.opcode != "transpose":
            continue
        perm = tuple(t.attrs["dimensions"])
        contracting, batch = dims[side]
        free = [d for d in range(len(perm)) if d not in contracting and d not in batch]
        mapped_free = [perm[d] for d in free]
        if mapped_free != sorted(mapped_free):
            continue  # folding would permute the dot's result dims
        operands[side] = t.operands[0]
        dims[side] = (tuple(perm[d] for d in contracting), tuple(perm[d] for d in batch))
        folded = True
    if not folded:
        return None
    inst.operands = operands
    for key, value in (("lhs_contracting_dims", dims[0][0]), ("rhs_contracting_dims", dims[1][0]),
                       ("lhs_batch_dims", dims[0][1]), ("rhs_batch_dims", dims[1][1])):
        if value or key in inst.attrs:
            inst.attrs[key] = value
    return inst


def _bitcast_compatible(inst: Instruction) -> bool:
    """Both ends in the default layout, so that a same-order reshape moves no data."""
    return is_default_layout(inst.shape) and is_default_layout(inst.operands[0].shape)


def transpose(ctx: RewriteContext, inst: Instruction) -> Instruction | None:
    x = inst.operands[0]
    perm = tuple(inst.attrs["dimensions"])
    if perm == tuple(range(len(perm))) and interchangeable(inst, x):
        return x
    if x.opcode == "transpose":
        composed = tuple(x.attrs["dimensions"][p] for p in perm)
        if composed == tuple(range(len(composed))) and interchangeable(inst, x.operands[0]):
            return x.operands[0]
        return in_place(inst, "transpose", [x.operands[0]], {"dimensions": composed})
    if x.opcode == "broadcast":
        inverse = {p: j for j, p in enumerate(perm)}
        mapping = tuple(inverse[m] for m in x.attrs.get("dimensions", ()))
        if list(mapping) == sorted(mapping):
            return in_place(inst, "broadcast", [x.operands[0]], {"dimensions": mapping})
    moved = [p for p in perm if x.shape.dims[p] != 1]
    if moved == sorted(moved) and _bitcast_compatible(inst):
        return in_place(inst, "reshape", [x], {})
    return None


def reshape(ctx: RewriteContext, inst: Instruction) -> Instruction | None:
    x = inst.operands[0]
    source = x.operands[0] if x.opcode == "reshape" else x
    if source.shape.dims == inst.shape.dims and interchangeable(inst, source):
        return source
    if x.opcode == "broadcast" and x.operands[0].shape.rank == 0:
        return in_place(inst, "broadcast", [x.operands[0]], {"dimensions": ()})
    if source is not x:
        return in_place(inst, "reshape", [source], {})
    return None


def broadcast(ctx: RewriteContext, inst: Instruction) -> Instruction | None:
    x = inst.operands[0]
    mapping = tuple(inst.attrs.get("dimensions", ()))
    if x.shape.dims == inst.shape.dims and mapping == tuple(range(len(mapping))) and interchangeable(inst, x):
        return x
    if x.opcode == "broadcast":
        composed = tuple(mapping[d] for d in x.attrs.get("dimensions", ()))
        return in_place(inst, "broadcast", [x.operands[0]], {"dimensions": composed})
    if x.shape.size == inst.shape.size and list(mapping) == sorted(mapping) and x.shape.rank > 0 \
            and _bitcast_compatible(inst):
        return in_place(inst, "reshape", [x], {})
    return None


def slice_(ctx: RewriteContext, inst: Instruction) -> Instruction | None:
    x = inst.operands[0]
    ranges = inst.attrs["slice"].ranges
    if all(r == (0, n, 1) for r, n in zip(ranges, x.shape.dims, strict=True)) and interchangeable(inst, x):
        return x
    if x.opcode == "slice":
        composed = []
        for (start, _, stride), (inner_start, _, inner_stride), size in zip(
                ranges, x.attrs["slice"].ranges, inst.shape.dims, strict=True):
            first = inner_start + start * inner_stride
            step = stride * inner_stride
            composed.append((first, first + (size - 1) * step + 1 if size else first, step))
        return in_place(inst, "slice", [x.operands[0]], {"slice": SliceSpec(tuple(composed))})
    return None


def concatenate(ctx: RewriteContext, inst: Instruction) -> Instruction | None:
    axis = inst.attrs["dimensions"][0]
    if len(inst.operands) == 1 and interchangeable(inst, inst.operands[0]):
        return inst.operands[0]
    kept = [o for o in inst.operands if o.shape.dims[axis] != 0]
    if kept and len(kept) < len(inst.operands):
        if len(kept) == 1 and interchangeable(inst, kept[0]):
            return kept[0]
        inst.operands = kept
        return inst
    return None


def pad(ctx: RewriteContext, inst: Instruction) -> Instruction | None:
    x = inst.operands[0]
    config = parse_padding(inst.attrs.get("padding"), x.shape.rank)
    if all(c == (0, 0, 0) for c in config) and interchangeable(inst, x):
        return x
    if all(lo <= 0 and hi <= 0 and interior == 0 for lo, hi, interior in config):
        spec = SliceSpec(tuple((-lo, n + hi, 1) for (lo, hi, _), n in zip(config, x.shape.dims, strict=True)))
        return in_place(inst, "slice", [x], {"slice": spec})
    return None


def dynamic_slice(ctx: RewriteContext, inst: Instruction) -> Instruction | None:
    x = inst.operands[0]
    starts = [constant_scalar(s) for s in inst.operands[1:]]
    if any(s is None for s in starts):
        return None
    sizes = inst.shape.dims
    clamped = [min(max(int(s), 0), n - k) for s, n, k in zip(starts, x.shape.dims, sizes, strict=True)]
    spec = SliceSpec(tuple((s, s + k, 1) for s, k in zip(clamped, sizes, strict=True)))
    return in_place(inst, "slice", [x], {"slice": spec})


def dynamic_update_slice(ctx: RewriteContext, inst: Instruction) -> Instruction | None:
    update = inst.operands[1]
    if update.shape.dims == inst.shape.dims and interchangeable(inst, update):
        return update  # every start clamps to 0: the update replaces the whole operand
    return None


SHAPE_RULES = {
    "dot": dot, "transpose": transpose, "reshape": reshape, "broadcast": broadcast, "slice": slice_,
    "concatenate": concatenate, "pad": pad, "dynamic-slice": dynamic_slice,
    "dynamic-update-slice": dynamic_update_slice,
}
