"""The handlers of dynamic-slice, dynamic-update-slice and scatter: offsets on chip, rows by indirect DMA
(backend/kernels/indirect.py has the machinery and the rules of the forms taken)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from backend.fused import Value, view_of
from backend.kernels.elementwise import copy_kernel
from backend.kernels.indirect import (
    Offsets,
    Term,
    direct_ap,
    general_gather_form,
    indirect_ap,
    lowers_directly,
    move_rows,
    scatter_combiner,
)
from backend.layout import View
from hlo.errors import CompilationError
from hlo.ir import Instruction
from hlo.shape_indexing import gather_dims, scatter_dims

PARTITIONS = 128


def _refuse(inst: Instruction) -> None:
    if not lowers_directly(inst):
        raise CompilationError(f"{inst.where()}: this {inst.opcode} is not supported by the backend (the indirect "
                               "DMA takes dynamic slices of rank <= 5 and row scatters with a replace or add "
                               "combiner; the select expanders take small ones of other forms)")


def _stored(lw: Any, view: View, inst: Instruction) -> View:
    """`view` as data the DMA can move: a pending cast applied (copied), a constant placed."""
    if view.cast is not None:
        return lw.materialize(view, inst)
    return lw.b.place(view) if view.is_const else view


def _mergeable(lw: Any, view: View, count: int, inst: Instruction) -> View:
    """`view` with its first `count` axes merged into one (0: a size-1 axis inserted); copied dense first
    when its strides do not allow it."""
    for attempt in (view, None):
        v = attempt if attempt is not None else lw.materialize(view, inst)
        if count == 0:
            return v.insert_axis(0)
        for _ in range(count - 1):
            merged = v.merge_axes(0)
            if merged is None:
                break
            v = merged
        else:
            return v
    raise CompilationError(f"{inst.where()}: internal: a dense copy did not merge")


def _rows(view: View) -> tuple[int | None, int, list[int]]:
    """(the row axis or None, the row count, the free axes) of a slice moved row by row: rank 1 is one row."""
    if view.rank == 1:
        return None, 1, [0]
    return 0, view.dims[0], list(range(1, view.rank))


def _slice_terms(x: View, sizes: tuple[int, ...], starts: list[View]) -> tuple[list[Term], int]:
    """XLA's clamped starts of a dynamic slice as offset terms, constant starts folded into the base."""
    terms, base = [], 0
    for d, (n, s, start) in enumerate(zip(x.dims, sizes, starts, strict=True)):
        if start.is_const:
            base += min(max(int(start.const_array().reshape(())), 0), n - s) * x.strides[d]
        else:
            terms.append(Term(start, 0, n - s, x.strides[d]))
    return terms, base


def dynamic_slice(lw: Any, inst: Instruction, ops: list[Value]) -> View:
    _refuse(inst)
    b, name, where = lw.b, lw.name(inst), inst.where()
    out = lw.destination(inst)
    if out.size == 0:
        return out
    x = _stored(lw, view_of(ops[0], inst.operands[0]), inst)
    starts = [view_of(v, o) for v, o in zip(ops[1:], inst.operands[1:], strict=True)]
    sizes = tuple(inst.shape.dims)
    terms, base = _slice_terms(x, sizes, starts)
    _move_window(b, name, where, x, sizes, terms, base, out, "src")
    return out


def dynamic_update_slice(lw: Any, inst: Instruction, ops: list[Value]) -> View:
    _refuse(inst)
    b, name, where = lw.b, lw.name(inst), inst.where()
    out = lw.destination(inst)
    x = view_of(ops[0], inst.operands[0])
    if not (x.buffer is out.buffer and x.offset == out.offset and x.strides == out.strides and x.cast is None):
        copy_kernel(b, x, out, f"{name}.operand", where)  # (a loop state updated in place is already there)
    update = _stored(lw, view_of(ops[1], inst.operands[1]), inst)
    if update.size == 0:
        return out
    starts = [view_of(v, o) for v, o in zip(ops[2:], inst.operands[2:], strict=True)]
    terms, base = _slice_terms(out, update.dims, starts)
    _move_window(b, name, where, out, update.dims, terms, base, update, "dst")
    return out


def _move_window(b: Any, name: str, where: str, stored: View, sizes: tuple[int, ...], terms: list[Term], base: int,
                 direct: View, side: str) -> None:
    """Move the window of `sizes` at the runtime start (`terms`, `base`) of `stored` to `direct` (side "src": a
    dynamic slice) or from it (side "dst": a dynamic update), up to 128 rows per indirect DMA, the row offsets
    built and clamped on chip."""
    window = stored.slice(tuple((0, s, 1) for s in sizes))
    axis, rows, free = _rows(window)
    pools = b.alloc.begin_kernel(name, Offsets.specs(), where)
    offsets = Offsets(b, pools, name)
    for r0 in range(0, rows, PARTITIONS):
        rn = min(PARTITIONS, rows - r0)
        idx = offsets.build(terms, r0, rn, clamp=True, base=base,
                            row_stride=stored.strides[0] if axis is not None else 0)
        indirect, plain = indirect_ap(window, free, rn, 1), direct_ap(direct, axis, r0, rn, free)
        dst, src = (plain, indirect) if side == "src" else (indirect, plain)
        move_rows(b, dst, src, idx, side, f"{name} rows {r0}")
    b.alloc.end_kernel()


def scatter(lw: Any, inst: Instruction, ops: list[Value]) -> View:
    """Row scatter: one row per update position, at sum_k index_k * stride_k; a position with an index out
    of range is dropped (XLA), replace overwrites, add accumulates in order (the DMA's read-modify-write)."""
    _refuse(inst)
    b, name, where = lw.b, lw.name(inst), inst.where()
    s = scatter_dims(inst.attrs)
    out = lw.destination(inst)
    x = view_of(ops[0], inst.operands[0])
    copy_kernel(b, x, out, f"{name}.operand", where)
    indices = view_of(ops[1], inst.operands[1])
    updates = _stored(lw, view_of(ops[2], inst.operands[2]), inst)
    if updates.size == 0:
        return out
    batch = [d for d in range(updates.rank) if d not in s.update_window_dims]
    rows_view = _mergeable(lw, updates.transpose(tuple(batch + list(s.update_window_dims))), len(batch), inst)
    n_rows = rows_view.dims[0]
    terms = _index_columns(lw, indices, s.index_vector_dim, tuple(s.scatter_dims_to_operand_dims), out, inst)
    picked = set(s.scatter_dims_to_operand_dims)
    window = out.slice(tuple((0, 1, 1) if d in picked else (0, n, 1) for d, n in enumerate(out.dims)))
    free = [d for d in range(out.rank) if d not in picked] or [0]
    rmw = "add" if scatter_combiner(inst) == "add" else "none"
    pools = b.alloc.begin_kernel(name, Offsets.specs(), where)
    offsets = Offsets(b, pools, name)
    for r0 in range(0, n_rows, PARTITIONS):
        rn = min(PARTITIONS, n_rows - r0)
        idx = offsets.build(terms, r0, rn, clamp=False)
        src = direct_ap(rows_view, 0, r0, rn, list(range(1, rows_view.rank)))
        move_rows(b, indirect_ap(window, free, rn, 1), src, idx, "dst", f"{name} rows {r0}", oob="skip", rmw=rmw)
    b.alloc.end_kernel()
    return out


def _index_columns(lw: Any, indices: View, vector_dim: int, dims: tuple[int, ...], operand: View,
                   inst: Instruction) -> list[Term]:
    """One term per indexed operand dim: its index column (the index batch merged into one axis)."""
    terms = []
    for k, d in enumerate(dims):
        column = indices.index(vector_dim, k) if vector_dim < indices.rank else indices
        column = _mergeable(lw, column, column.rank, inst)
        terms.append(Term(column, 0, operand.dims[d] - 1, operand.strides[d]))
    return terms


def general_gather(lw: Any, inst: Instruction, ops: list[Value]) -> View:
    """A gather of several indexed dims: one row per index position (the kept dims whole) at the sum of the
    clamped indices times the operand's strides (XLA clamps gather starts)."""
    b, name, where = lw.b, lw.name(inst), inst.where()
    g = gather_dims(inst.attrs)
    out = lw.destination(inst)
    x = _stored(lw, view_of(ops[0], inst.operands[0]), inst)
    indices = view_of(ops[1], inst.operands[1])
    batch = [o for o in range(out.rank) if o not in g.offset_dims]
    rows_out = out.transpose(tuple(batch + list(g.offset_dims)))
    staged = None
    merged: View | None = rows_out
    for _ in range(len(batch) - 1):
        merged = merged.merge_axes(0) if merged is not None else None
    if merged is None:  # the batch dims of the output do not merge: gather into a dense scratch, then copy
        staged = b.scratch(out.dtype, rows_out.dims, label=f"{inst.name} rows")
        merged = _mergeable(lw, staged, len(batch), inst)
    elif not batch:
        merged = merged.insert_axis(0)
    terms = _index_columns(lw, indices, g.index_vector_dim, tuple(g.start_index_map), x, inst)
    indexed = set(g.start_index_map)
    window = x.slice(tuple((0, 1, 1) if d in indexed else (0, n, 1) for d, n in enumerate(x.dims)))
    kept = [d for d in range(x.rank) if d not in indexed] or [0]
    n_rows = merged.dims[0]
    pools = b.alloc.begin_kernel(name, Offsets.specs(), where)
    offsets = Offsets(b, pools, name)
    for r0 in range(0, n_rows, PARTITIONS):
        rn = min(PARTITIONS, n_rows - r0)
        idx = offsets.build(terms, r0, rn, clamp=True)
        move_rows(b, direct_ap(merged, 0, r0, rn, list(range(1, merged.rank))), indirect_ap(window, kept, rn, 1),
                  idx, "src", f"{name} rows {r0}")
    b.alloc.end_kernel()
    if staged is not None:
        inverse = tuple(sorted(range(out.rank), key=lambda a: (batch + list(g.offset_dims))[a]))
        copy_kernel(b, staged.transpose(inverse), out, f"{name}.place", where)
    return out


Handler = Callable[[Any, Instruction, list[Value]], View]


def rows_or(handler: Handler) -> Handler:
    """The gather handler: the general row gather for several indexed dims, `handler` (the gather kernel,
    embeddings and index_select) otherwise."""
    def gather(lw: Any, inst: Instruction, ops: list[Value]) -> View:
        return general_gather(lw, inst, ops) if general_gather_form(inst) else handler(lw, inst, ops)
    return gather


HANDLERS = {"dynamic-slice": dynamic_slice, "dynamic-update-slice": dynamic_update_slice, "scatter": scatter}
