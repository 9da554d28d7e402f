"""Shape rules of the indexing ops: ``gather``, ``scatter``, ``dynamic-slice``, ``dynamic-update-slice``.

``gather_dims`` / ``scatter_dims`` read XLA's dimension-number attributes into :class:`GatherDims` /
:class:`ScatterDims` (the interpreter uses the same readers). Semantics follow XLA's operation semantics,
including the batching dims (``operand_batching_dims`` / ``start_indices_batching_dims`` and
``input_batching_dims`` / ``scatter_indices_batching_dims``), which default to none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hlo.ir import Shape
from hlo.shape_util import (
    INT_DTYPES,
    Rule,
    arity,
    array,
    check_axes,
    check_sorted_axes,
    computation_attr,
    dims_attr,
    fail,
    fmt,
    int_attr,
    types,
)


@dataclass(frozen=True)
class GatherDims:
    offset_dims: tuple[int, ...]
    collapsed_slice_dims: tuple[int, ...]
    start_index_map: tuple[int, ...]
    index_vector_dim: int
    slice_sizes: tuple[int, ...]
    operand_batching_dims: tuple[int, ...] = ()
    start_indices_batching_dims: tuple[int, ...] = ()


@dataclass(frozen=True)
class ScatterDims:
    update_window_dims: tuple[int, ...]
    inserted_window_dims: tuple[int, ...]
    scatter_dims_to_operand_dims: tuple[int, ...]
    index_vector_dim: int
    input_batching_dims: tuple[int, ...] = ()
    scatter_indices_batching_dims: tuple[int, ...] = ()


def gather_dims(attrs: dict[str, Any]) -> GatherDims:
    return GatherDims(dims_attr(attrs, "offset_dims"), dims_attr(attrs, "collapsed_slice_dims", ()),
                      dims_attr(attrs, "start_index_map"), int_attr(attrs, "index_vector_dim"),
                      dims_attr(attrs, "slice_sizes"), dims_attr(attrs, "operand_batching_dims", ()),
                      dims_attr(attrs, "start_indices_batching_dims", ()))


def scatter_dims(attrs: dict[str, Any]) -> ScatterDims:
    return ScatterDims(dims_attr(attrs, "update_window_dims"), dims_attr(attrs, "inserted_window_dims", ()),
                       dims_attr(attrs, "scatter_dims_to_operand_dims"), int_attr(attrs, "index_vector_dim"),
                       dims_attr(attrs, "input_batching_dims", ()),
                       dims_attr(attrs, "scatter_indices_batching_dims", ()))


def index_batch_dims(indices: Shape, index_vector_dim: int, n_index: int, what: str) -> list[int]:
    """The sizes of the batch dims of ``indices`` (all but ``index_vector_dim``, which may be ``rank`` for
    an implicit trailing 1), after checking the index vector has ``n_index`` elements."""
    types(indices, INT_DTYPES, "indices")
    if not 0 <= index_vector_dim <= indices.rank:
        raise fail(f"index_vector_dim={index_vector_dim} is outside 0..{indices.rank}")
    dims = list(indices.dims) + ([1] if index_vector_dim == indices.rank else [])
    if dims[index_vector_dim] != n_index:
        raise fail(f"the index vector (dimension {index_vector_dim} of {fmt(indices)}) has "
                   f"{dims[index_vector_dim]} elements but {what} names {n_index} dimensions")
    return [d for i, d in enumerate(dims) if i != index_vector_dim]


def _check_batching(operand: Shape, indices: Shape, operand_dims: tuple[int, ...], index_dims: tuple[int, ...],
                    index_vector_dim: int, names: tuple[str, str]) -> None:
    check_sorted_axes(operand_dims, operand.rank, names[0])
    check_axes(index_dims, indices.rank, names[1])
    if len(operand_dims) != len(index_dims) or index_vector_dim in index_dims:
        raise fail(f"{names[0]} and {names[1]} must pair up, and exclude index_vector_dim")
    for a, b in zip(operand_dims, index_dims, strict=True):
        if operand.dims[a] != indices.dims[b]:
            raise fail(f"batching dimension {a} of the operand (size {operand.dims[a]}) and {b} of the indices "
                       f"(size {indices.dims[b]}) differ")


def _disjoint(a: tuple[int, ...], b: tuple[int, ...], names: str) -> None:
    if set(a) & set(b):
        raise fail(f"{names} share dimensions {sorted(set(a) & set(b))}")


def _gather(ops, attrs, declared):
    arity(ops, 2)
    operand, indices = ops
    g = gather_dims(attrs)
    batch = index_batch_dims(indices, g.index_vector_dim, len(g.start_index_map), "start_index_map")
    rank = operand.rank
    check_sorted_axes(g.collapsed_slice_dims, rank, "collapsed_slice_dims")
    check_axes(g.start_index_map, rank, "start_index_map")
    _check_batching(operand, indices, g.operand_batching_dims, g.start_indices_batching_dims,
                    g.index_vector_dim, ("operand_batching_dims", "start_indices_batching_dims"))
    _disjoint(g.collapsed_slice_dims, g.operand_batching_dims, "collapsed_slice_dims and operand_batching_dims")
    _disjoint(g.start_index_map, g.operand_batching_dims, "start_index_map and operand_batching_dims")
    if len(g.slice_sizes) != rank:
        raise fail(f"slice_sizes has {len(g.slice_sizes)} entries, the operand {fmt(operand)} has rank {rank}")
    for i, (size, bound) in enumerate(zip(g.slice_sizes, operand.dims, strict=True)):
        if not 0 <= size <= bound:
            raise fail(f"slice size {size} of dimension {i} is outside 0..{bound}")
        if i in g.collapsed_slice_dims + g.operand_batching_dims and size > 1:
            raise fail(f"dimension {i} is collapsed (or batching) but its slice size is {size}, not 1")
    window = [i for i in range(rank) if i not in g.collapsed_slice_dims + g.operand_batching_dims]
    if len(g.offset_dims) != len(window):
        raise fail(f"offset_dims has {len(g.offset_dims)} entries but the slice keeps {len(window)} operand "
                   "dimensions")
    out_rank = len(g.offset_dims) + len(batch)
    check_sorted_axes(g.offset_dims, out_rank, "offset_dims")
    sizes, batches = iter(g.slice_sizes[i] for i in window), iter(batch)
    return array(operand.dtype, [next(sizes) if o in g.offset_dims else next(batches) for o in range(out_rank)])


def _scatter(ops, attrs, declared):
    if len(ops) < 3 or len(ops) % 2 == 0:
        raise fail(f"takes N operands, the indices and N updates, got {len(ops)} operands")
    arity(ops, len(ops))
    n = len(ops) // 2
    operands, indices, updates = ops[:n], ops[n], ops[n + 1:]
    operand, update = operands[0], updates[0]
    for i in range(n):
        if operands[i].dims != operand.dims or updates[i].dims != update.dims:
            raise fail(f"operand {i} {fmt(operands[i])} / update {i} {fmt(updates[i])} differ in dims from "
                       "operand 0 / update 0")
        if operands[i].dtype != updates[i].dtype:
            raise fail(f"update {i} {fmt(updates[i])} has another element type than operand {fmt(operands[i])}")
    s = scatter_dims(attrs)
    batch = index_batch_dims(indices, s.index_vector_dim, len(s.scatter_dims_to_operand_dims),
                             "scatter_dims_to_operand_dims")
    rank = operand.rank
    check_sorted_axes(s.update_window_dims, update.rank, "update_window_dims")
    check_sorted_axes(s.inserted_window_dims, rank, "inserted_window_dims")
    check_axes(s.scatter_dims_to_operand_dims, rank, "scatter_dims_to_operand_dims")
    _check_batching(operand, indices, s.input_batching_dims, s.scatter_indices_batching_dims,
                    s.index_vector_dim, ("input_batching_dims", "scatter_indices_batching_dims"))
    _disjoint(s.inserted_window_dims, s.input_batching_dims, "inserted_window_dims and input_batching_dims")
    _disjoint(s.scatter_dims_to_operand_dims, s.input_batching_dims,
              "scatter_dims_to_operand_dims and input_batching_dims")
    window = [i for i in range(rank) if i not in s.inserted_window_dims + s.input_batching_dims]
    if len(window) != len(s.update_window_dims):
        raise fail(f"update_window_dims has {len(s.update_window_dims)} entries but the operand keeps "
                   f"{len(window)} window dimensions (rank {rank} minus inserted and batching dims)")
    scatter = [d for i, d in enumerate(update.dims) if i not in s.update_window_dims]
    if scatter != batch:
        raise fail(f"the scatter dims of the updates {fmt(update)} are {scatter} but the indices' batch dims "
                   f"are {batch}")
    for k, od in enumerate(window):
        if update.dims[s.update_window_dims[k]] > operand.dims[od]:
            raise fail(f"update window dimension {s.update_window_dims[k]} (size "
                       f"{update.dims[s.update_window_dims[k]]}) exceeds operand dimension {od} "
                       f"(size {operand.dims[od]})")
    computation_attr(attrs)
    results = [array(o.dtype, o.dims) for o in operands]
    return results[0] if n == 1 else Shape.tuple_of(results)


def _start_indices(ops: list[Shape], first: int, rank: int) -> None:
    starts = ops[first:]
    if len(starts) != rank:
        raise fail(f"takes {rank} scalar start indices (one per dimension), got {len(starts)}")
    for i, s in enumerate(starts):
        if s.rank != 0 or s.dtype not in INT_DTYPES or s.dtype != starts[0].dtype:
            raise fail(f"start index {i} {fmt(s)} must be an integer scalar of the type of the first one")


def _dynamic_slice(ops, attrs, declared):
    arity(ops, 1, 1 << 30)
    operand = ops[0]
    _start_indices(ops, 1, operand.rank)
    sizes = dims_attr(attrs, "dynamic_slice_sizes")
    if len(sizes) != operand.rank or any(not 0 <= s <= d for s, d in zip(sizes, operand.dims, strict=True)):
        raise fail(f"dynamic_slice_sizes={{{','.join(map(str, sizes))}}} must give a size within the operand "
                   f"{fmt(operand)} for each dimension")
    return array(operand.dtype, sizes)


def _dynamic_update_slice(ops, attrs, declared):
    arity(ops, 2, 1 << 30)
    operand, update = ops[:2]
    if update.dtype != operand.dtype or update.rank != operand.rank or any(
            u > d for u, d in zip(update.dims, operand.dims, strict=True)):
        raise fail(f"update {fmt(update)} must have the operand's type and rank and fit in {fmt(operand)}")
    _start_indices(ops, 2, operand.rank)
    return array(operand.dtype, operand.dims)


INDEXING_RULES: dict[str, Rule] = {
    "gather": _gather, "scatter": _scatter, "dynamic-slice": _dynamic_slice,
    "dynamic-update-slice": _dynamic_update_slice,
}
