"""The interpreter's indexing ops: ``gather``, ``scatter``, ``dynamic-slice``, ``dynamic-update-slice``.

Gather and scatter compute, for every result (update) element at once, the operand index it reads (writes)
with open index grids, following XLA's operation semantics: gather clamps each start index so that the slice
fits; scatter drops an update window that does not fit at its start index.
"""

from __future__ import annotations

import numpy as np

from hlo.interpreter.core import Op, Value, accumulator, call, reducer_ufunc, returns_second
from hlo.ir import Instruction
from hlo.shape_indexing import gather_dims, scatter_dims


def _index_vectors(indices: np.ndarray, index_vector_dim: int) -> np.ndarray:
    """Indices with the index vector as the last dimension (int64)."""
    idx = indices.astype(np.int64)
    if index_vector_dim == idx.ndim:
        return idx[..., None]
    return np.moveaxis(idx, index_vector_dim, -1)


def _batch_position(dim: int, index_vector_dim: int) -> int:
    """Where dimension ``dim`` of the indices is among its batch dimensions."""
    return dim if dim < index_vector_dim else dim - 1


def _starts(idx: np.ndarray, batch_index: tuple, rank: int, index_map: tuple[int, ...],
            operand_batching: tuple[int, ...], index_batching: tuple[int, ...],
            index_vector_dim: int) -> list:
    """Per operand dimension, the start index of each position (broadcastable arrays, or 0)."""
    start = idx[batch_index] if batch_index else idx
    starts: list = [0] * rank
    for k, od in enumerate(index_map):
        starts[od] = start[..., k]
    for od, j in zip(operand_batching, index_batching, strict=True):
        starts[od] = batch_index[_batch_position(j, index_vector_dim)]
    return starts


def _gather(inst: Instruction, ops: list) -> np.ndarray:
    operand, indices = ops
    g = gather_dims(inst.attrs)
    out_dims = inst.shape.dims
    grid = np.indices(out_dims, sparse=True) if out_dims else ()
    batch_index = tuple(grid[d] for d in range(len(out_dims)) if d not in g.offset_dims)
    idx = _index_vectors(indices, g.index_vector_dim)
    starts = _starts(idx, batch_index, operand.ndim, g.start_index_map, g.operand_batching_dims,
                     g.start_indices_batching_dims, g.index_vector_dim)
    window = [od for od in range(operand.ndim) if od not in g.collapsed_slice_dims + g.operand_batching_dims]
    index = []
    for od in range(operand.ndim):
        s = np.clip(starts[od], 0, operand.shape[od] - g.slice_sizes[od])
        if od in window:
            s = s + grid[g.offset_dims[window.index(od)]]
        index.append(np.asarray(s))
    return np.broadcast_to(operand[tuple(index)], out_dims)


def _scatter(inst: Instruction, ops: list) -> Value:
    n = (len(ops) - 1) // 2
    operands, indices, updates = ops[:n], ops[n], ops[n + 1:]
    s = scatter_dims(inst.attrs)
    shape = updates[0].shape
    grid = np.indices(shape, sparse=True) if shape else ()
    batch_index = tuple(grid[d] for d in range(len(shape)) if d not in s.update_window_dims)
    idx = _index_vectors(indices, s.index_vector_dim)
    rank = operands[0].ndim
    starts = _starts(idx, batch_index, rank, s.scatter_dims_to_operand_dims, s.input_batching_dims,
                     s.scatter_indices_batching_dims, s.index_vector_dim)
    window = [od for od in range(rank) if od not in s.inserted_window_dims + s.input_batching_dims]
    valid = np.ones(shape, np.bool_)
    for od in range(rank):  # every dim checked before any index is masked with the result
        size = shape[s.update_window_dims[window.index(od)]] if od in window else 1
        valid &= (starts[od] >= 0) & (starts[od] <= operands[0].shape[od] - size)
    index = []
    for od in range(rank):
        full = starts[od] + (grid[s.update_window_dims[window.index(od)]] if od in window else 0)
        index.append(np.broadcast_to(full, shape)[valid])
    target = tuple(index)
    values = [u[valid] for u in updates]
    comp = inst.attrs["to_apply"]
    ufunc = reducer_ufunc(comp) if n == 1 else None
    if ufunc is not None:
        result = operands[0].astype(accumulator(operands[0]))
        ufunc.at(result, target, values[0].astype(result.dtype))
        return result
    results = [o.copy() for o in operands]
    if returns_second(comp):
        results[0][target] = values[0]
    else:  # any combiner: one update at a time, in order
        for k in range(values[0].shape[0]):
            at = tuple(i[k] for i in target)
            out = call(comp, [r[at] for r in results] + [v[k] for v in values])
            for r, v in zip(results, out if isinstance(out, tuple) else (out,), strict=True):
                r[at] = v
    return results[0] if n == 1 else tuple(results)


def _clamped_starts(starts: list, dims: tuple[int, ...], sizes: tuple[int, ...]) -> list[int]:
    return [min(max(int(np.asarray(st)), 0), d - s) for st, d, s in zip(starts, dims, sizes, strict=True)]


def _dynamic_slice(inst: Instruction, ops: list) -> np.ndarray:
    x, sizes = ops[0], tuple(inst.attrs["dynamic_slice_sizes"])
    starts = _clamped_starts(ops[1:], x.shape, sizes)
    return x[tuple(slice(st, st + s) for st, s in zip(starts, sizes, strict=True))]


def _dynamic_update_slice(inst: Instruction, ops: list) -> np.ndarray:
    x, update = ops[:2]
    starts = _clamped_starts(ops[2:], x.shape, update.shape)
    result = x.copy()
    result[tuple(slice(st, st + s) for st, s in zip(starts, update.shape, strict=True))] = update
    return result


OPS: dict[str, Op] = {
    "gather": _gather, "scatter": _scatter, "dynamic-slice": _dynamic_slice,
    "dynamic-update-slice": _dynamic_update_slice,
}
